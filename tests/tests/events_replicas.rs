//! Live revision events across replicas (issue 40 point 3): two sync services on one PostgreSQL
//! store, each behind a gateway of its own. A push answered 204 by replica A reaches a
//! subscriber of replica B (the commit's `pg_notify`), and when B's listening connection is cut
//! a push made meanwhile is still told to B's subscriber (the listener resyncs once it listens
//! again): no event a client can tell about is lost.
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
