//! Live revision events across replicas (issue 40 point 3): two sync services on one PostgreSQL
//! store, each behind a gateway of its own. A push answered 204 by replica A reaches a
//! subscriber of replica B (the commit's `pg_notify`), and when B's listening connection is cut
//! a push made meanwhile is still told to B's subscriber (the listener resyncs once it listens
//! again): no event a client can tell about is lost. A poll of B answered from B's kept head
//! follows A's pushes as they are heard, and never trusts what it kept across a lost listener.
//!
//! Needs `SNUG_TEST_POSTGRES_URL` (skipped without it).

use std::time::{Duration, Instant};

use snug_e2e::{Answer, Events, Http, OCTET, Payload, Sse, spawn_services};
use snug_gateway::config::{AuthMode, GatewayConfig};
use snug_sync_service::{Backend, SyncConfig, SyncServer};
use tokio::{net::TcpListener, sync::oneshot};

const SOON: Duration = Duration::from_secs(15);

/// Replica `name` (a sync service and its gateway) on the store in `schema`.
async fn replica(url: &str, schema: &str, dir: &std::path::Path) -> (Http, oneshot::Sender<()>) {
    let config = SyncConfig {
        store: Backend::Postgres,
        postgres_url: Some(snug_sync_service::PostgresUrl::new(url.to_owned())),
        postgres_schema: Some(schema.to_owned()),
        postgres_pool_size: 4,
        reclaim_interval: Duration::ZERO,
        ..SyncConfig::default()
    };
    let runtime = snug_rpc::runtime::Runtime::default();
    let store = snug_sync_service::open_store(&config, &runtime)
        .await
        .expect("sync store on PostgreSQL");
    let sync = SyncServer::new(store, &config, &runtime);
    let grpc_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let grpc = grpc_listener.local_addr().expect("addr");
    let (services, _task) = spawn_services(grpc_listener, sync, None);
    let gateway = GatewayConfig {
        auth: Some(AuthMode::Off),
        ..GatewayConfig::for_tests()
    };
    let state = snug_gateway::build(
        &gateway,
        dir.to_owned(),
        snug_gateway::Addresses::all(&format!("http://{grpc}")),
        snug_gateway::Runtime::new(snug_files::sealed::Sealer::disabled()),
    )
    .await
    .expect("gateway");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let http = Http::new(listener.local_addr().expect("addr"));
    tokio::spawn(snug_gateway::serve(state, listener, std::future::pending()));
    (http, services)
}

/// The next block that is not a heartbeat or a hint.
async fn next(events: &mut Events) -> Option<Sse> {
    loop {
        let sse = events.next(SOON).await?;
        if sse.event != ":" && sse.event != "retry" {
            return Some(sse);
        }
    }
}

/// `PUT /userdb` with `condition` (authentication is off: the local user).
async fn put(http: &Http, condition: (&str, &str), body: Vec<u8>) -> Answer {
    http.send("PUT", "/userdb", &[OCTET, condition], Payload::Whole(body))
        .await
}

fn image(seed: u64) -> Vec<u8> {
    snug_e2e::stored_form(&snug_test_support::userdb::filled(64 * 1024, seed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_on_one_replica_reaches_a_subscriber_of_the_other_even_across_a_lost_listener() {
    let Some(url) = snug_test_support::postgres_url() else {
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = format!("events_replicas_{}", std::process::id());
    let dirs = tempfile::tempdir().expect("dirs");
    let (a, _a) = replica(&url, &schema, &dirs.path().join("a")).await;
    let (b, _b) = replica(&url, &schema, &dirs.path().join("b")).await;

    let mut on_b = b.events(&[]).await;
    assert_eq!(on_b.status, 200);
    assert_eq!(next(&mut on_b).await.expect("state").event, "no-image");
    let sent = Instant::now();
    let r1 = put(&a, ("if-none-match", "*"), image(1)).await;
    assert_eq!(r1.status, 204);
    let heard = next(&mut on_b).await.expect("r1 on b");
    eprintln!(
        "a push on A reached B's subscriber {:?} after it was sent",
        sent.elapsed()
    );
    assert_eq!(heard.id.as_deref(), Some(r1.header("etag")));

    // Every listening session of this store is cut (both replicas'), then A takes a push.
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let cut = client
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&snug_revstore::revisions_channel(Some(&schema))],
        )
        .await
        .expect("terminate");
    assert_eq!(cut, 2, "the two replicas' listeners");
    let r2 = put(&a, ("if-match", r1.header("etag")), image(2)).await;
    assert_eq!(r2.status, 204);
    let heard = next(&mut on_b).await.expect("r2 on b");
    assert_eq!(heard.id.as_deref(), Some(r2.header("etag")), "{heard:?}");
    let head = b.send("HEAD", "/userdb", &[], Payload::Empty).await;
    assert_eq!(head.header("etag"), r2.header("etag"));
}

/// `GET /userdb` with `If-None-Match: etag` on `http`, until the answer names another revision
/// (or [`SOON`] has passed): the answer, and how long it took.
async fn changed_from(http: &Http, etag: &str) -> (Answer, Duration) {
    let started = Instant::now();
    loop {
        let answer = http
            .send("GET", "/userdb", &[("if-none-match", etag)], Payload::Empty)
            .await;
        if answer.status != 304 || started.elapsed() > SOON {
            return (answer, started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicas_kept_head_follows_the_others_pushes_and_is_not_trusted_across_a_lost_listener()
{
    let Some(url) = snug_test_support::postgres_url() else {
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = format!("heads_replicas_{}", std::process::id());
    let dirs = tempfile::tempdir().expect("dirs");
    let (a, _a) = replica(&url, &schema, &dirs.path().join("a")).await;
    let (b, _b) = replica(&url, &schema, &dirs.path().join("b")).await;

    let r1 = put(&a, ("if-none-match", "*"), image(1)).await;
    assert_eq!(r1.status, 204);
    // B keeps r1 as the head once a poll read it; the polls after answer from it.
    for _ in 0..4 {
        let again = b
            .send(
                "GET",
                "/userdb",
                &[("if-none-match", r1.header("etag"))],
                Payload::Empty,
            )
            .await;
        assert_eq!(again.status, 304);
        assert_eq!(again.header("etag"), r1.header("etag"));
    }
    for n in 2..5 {
        let before = b.send("HEAD", "/userdb", &[], Payload::Empty).await;
        let pushed = put(&a, ("if-match", before.header("etag")), image(n)).await;
        assert_eq!(pushed.status, 204);
        let (seen, took) = changed_from(&b, before.header("etag")).await;
        eprintln!("B's poll answered A's push after {took:?}");
        assert_eq!(seen.status, 200, "{:?}", seen.body);
        assert_eq!(seen.header("etag"), pushed.header("etag"));
        assert!(took < Duration::from_secs(2), "heard in {took:?}");
    }

    // The listeners are cut and A takes a push at once: the notification is lost, yet B's poll
    // shows it soon (B stops trusting what it kept when its store loses its listener, and
    // forgets it all when the store listens again).
    let head = b.send("HEAD", "/userdb", &[], Payload::Empty).await;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&snug_revstore::revisions_channel(Some(&schema))],
        )
        .await
        .expect("terminate");
    let pushed = put(&a, ("if-match", head.header("etag")), image(9)).await;
    assert_eq!(pushed.status, 204);
    let (seen, took) = changed_from(&b, head.header("etag")).await;
    eprintln!("across a lost listener, B's poll answered A's push after {took:?}");
    assert_eq!(seen.status, 200);
    assert_eq!(seen.header("etag"), pushed.header("etag"));
}
