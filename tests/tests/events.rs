//! `GET /userdb/events` (issue 40 point 1) from outside, as a browser's `EventSource` meets it:
//! the current state first, each push of the caller's own image as it lands (with the ETag its
//! PUT answered and what HEAD shows), nothing of another user's, a resume by `Last-Event-ID`
//! that misses nothing, refusals as JSON like every other route's, and a stream that ends (a
//! retryable `event: error`) at the end of its lifetime, after which the client reconnects; a
//! stream whose credential is revoked, or whose user is disabled or removed, ends at once with the
//! 401's refusal, and the user's other streams go on.

use std::time::Duration;

use snug_e2e::{
    Events, Http, Hub, Options, Payload, Sse, assert_error, bearer, etag_revision, put_userdb,
};

const SOON: Duration = Duration::from_secs(10);
const QUIET: Duration = Duration::from_millis(300);

/// The next block that is not a heartbeat.
async fn next(events: &mut Events, within: Duration) -> Option<Sse> {
    loop {
        let sse = events.next(within).await?;
        if sse.event != ":" {
            return Some(sse);
        }
    }
}

async fn open(http: &Http, token: &str, last_event_id: Option<&str>) -> Events {
    let auth = bearer(token);
    let mut headers = vec![("authorization", auth.as_str())];
    if let Some(id) = last_event_id {
        headers.push(("last-event-id", id));
    }
    let mut events = http.events(&headers).await;
    assert_eq!(events.status, 200);
    assert_eq!(events.headers["content-type"], "text/event-stream");
    assert_eq!(events.headers["cache-control"], "no-store");
    assert!(events.headers.contains_key("snug-origin"));
    let retry = events.next(SOON).await.expect("a retry hint");
    assert_eq!(
        (retry.event.as_str(), retry.data.as_str()),
        ("retry", "2000")
    );
    events
}

fn push(n: u64) -> Vec<u8> {
    snug_e2e::stored_form(&snug_test_support::userdb::filled(64 * 1024, n))
}

/// Asserts `sse` is the revision `etag` (quoted) announced with what HEAD shows.
fn assert_revision(sse: Option<Sse>, etag: &str, head: &snug_e2e::Answer) {
    let sse = sse.expect("an event");
    assert_eq!(sse.event, "revision", "{sse:?}");
    assert_eq!(sse.id.as_deref(), Some(etag));
    let data: serde_json::Value = serde_json::from_str(&sse.data).expect("JSON data");
    assert_eq!(data["revision"], etag.trim_matches('"'));
    assert_eq!(
        data["size"].as_u64().map(|n| n.to_string()).as_deref(),
        Some(head.header("content-length"))
    );
    assert_eq!(
        data["storageVersion"]
            .as_u64()
            .map(|n| n.to_string())
            .as_deref(),
        Some(head.header("snug-storage-version"))
    );
    assert_eq!(data["sha256"].as_str().map(str::len), Some(64));
}

async fn head(http: &Http, token: &str) -> snug_e2e::Answer {
    let auth = bearer(token);
    http.send(
        "HEAD",
        "/userdb",
        &[("authorization", &auth)],
        Payload::Empty,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_hears_each_push_of_its_own_image_and_resumes_where_it_left_off() {
    let hub = Hub::start(Options::default()).await;
    let (alice, bob) = (hub.add_user("alice"), hub.add_user("bob"));
    let http = Http::new(hub.http);
    let mut alices = open(&http, &alice, None).await;
    let mut bobs = open(&http, &bob, None).await;
    let first = next(&mut alices, SOON).await.expect("the current state");
    assert_eq!(first.event, "no-image", "HEAD's 404: {first:?}");
    assert_eq!(
        next(&mut bobs, SOON).await.expect("bob's").event,
        "no-image"
    );

    let r1 = put_userdb(&http, &alice, ("if-none-match", "*"), push(1)).await;
    assert_eq!(r1.status, 204);
    let e1 = r1.header("etag").to_owned();
    assert_revision(
        next(&mut alices, SOON).await,
        &e1,
        &head(&http, &alice).await,
    );
    assert_eq!(next(&mut bobs, QUIET).await, None, "not bob's to hear");

    let r2 = put_userdb(&http, &alice, ("if-match", &e1), push(2)).await;
    let e2 = r2.header("etag").to_owned();
    let r3 = put_userdb(&http, &alice, ("if-match", &e2), push(3)).await;
    let e3 = r3.header("etag").to_owned();
    let heard: Vec<Option<String>> = vec![
        next(&mut alices, SOON).await.expect("r2").id,
        next(&mut alices, SOON).await.expect("r3").id,
    ];
    assert_eq!(heard, [Some(e2.clone()), Some(e3.clone())]);
    drop(alices);

    // A device that heard r1 and lost its connection reconnects with the id it last received.
    let mut resumed = open(&http, &alice, Some(&e1)).await;
    assert_eq!(next(&mut resumed, SOON).await.expect("r2").id, Some(e2));
    assert_eq!(
        next(&mut resumed, SOON).await.expect("r3").id,
        Some(e3.clone())
    );
    assert_eq!(next(&mut resumed, QUIET).await, None);
    // One it cannot be shown: a gap, then the current revision.
    let mut gapped = open(&http, &alice, Some("\"r99-00000000000000ff\"")).await;
    assert_eq!(next(&mut gapped, SOON).await.expect("a gap").event, "gap");
    assert_revision(
        next(&mut gapped, SOON).await,
        &e3,
        &head(&http, &alice).await,
    );
    assert_eq!(etag_revision(&r3), e3.trim_matches('"'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_refused_as_every_route_refuses_and_ends_at_its_lifetime() {
    let hub = Hub::start(Options {
        events_stream_lifetime: Duration::from_secs(1),
        ..Options::default()
    })
    .await;
    let alice = hub.add_user("alice");
    let http = Http::new(hub.http);
    let unauthenticated = http
        .send("GET", "/userdb/events", &[], Payload::Empty)
        .await;
    assert_error(&unauthenticated, 401, "UNAUTHENTICATED");
    let auth = bearer(&alice);
    let bad_id = http
        .send(
            "GET",
            "/userdb/events",
            &[("authorization", &auth), ("last-event-id", "not an id")],
            Payload::Empty,
        )
        .await;
    assert_error(&bad_id, 400, "BAD_REQUEST");

    // At its lifetime the hub ends the stream with a retryable refusal; the client reconnects.
    let mut events = open(&http, &alice, None).await;
    assert_eq!(
        next(&mut events, SOON).await.expect("state").event,
        "no-image"
    );
    let ended = next(&mut events, SOON).await.expect("the end");
    assert_eq!(ended.event, "error", "{ended:?}");
    let data: serde_json::Value = serde_json::from_str(&ended.data).expect("JSON");
    assert_eq!(
        (data["code"].as_str(), data["retryable"].as_bool()),
        (Some("SERVICE_UNAVAILABLE"), Some(true))
    );
    assert!(events.ended(SOON).await, "nothing after the refusal");
    // A removed user's reconnection is refused: no stream outlives its credential's lifetime.
    hub.remove_user("alice");
    let refused = http
        .send(
            "GET",
            "/userdb/events",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_error(&refused, 401, "UNAUTHENTICATED");
}

/// The refusal that ended `events`: its code and whether it is retryable.
async fn ended_with(events: &mut Events) -> (String, bool) {
    let ended = next(events, SOON).await.expect("the end");
    assert_eq!(ended.event, "error", "{ended:?}");
    let data: serde_json::Value = serde_json::from_str(&ended.data).expect("JSON");
    assert!(events.ended(SOON).await, "nothing after the refusal");
    (
        data["code"].as_str().unwrap_or_default().to_owned(),
        data["retryable"].as_bool().unwrap_or(true),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_or_a_disabled_or_removed_user_loses_its_streams_at_once() {
    let hub = Hub::start(Options::default()).await;
    let http = Http::new(hub.http);
    let alice = hub.add_user("alice");
    let (spare, spare_id) = hub.issue_token("alice");
    let bob = hub.add_user("bob");
    let mut by_spare = open(&http, &spare, None).await;
    let mut by_alice = open(&http, &alice, None).await;
    let mut by_bob = open(&http, &bob, None).await;
    for events in [&mut by_spare, &mut by_alice, &mut by_bob] {
        assert_eq!(next(events, SOON).await.expect("state").event, "no-image");
    }
    // The token is revoked: its stream ends with the 401's refusal; the user's other token's
    // stream, and another user's, go on.
    let started = std::time::Instant::now();
    hub.revoke_token(&spare_id);
    assert_eq!(
        ended_with(&mut by_spare).await,
        ("UNAUTHENTICATED".to_owned(), false)
    );
    eprintln!(
        "a revoked token's stream ended {:?} after the revocation began",
        started.elapsed()
    );
    assert!(
        next(&mut by_alice, QUIET).await.is_none(),
        "alice's other stream goes on"
    );
    // Disabled: every stream of the user ends.
    hub.disable_user("alice");
    assert_eq!(
        ended_with(&mut by_alice).await,
        ("UNAUTHENTICATED".to_owned(), false)
    );
    assert!(next(&mut by_bob, QUIET).await.is_none(), "bob's goes on");
    // Removed (as an erasure removes them): so does bob's.
    hub.remove_user("bob");
    assert_eq!(
        ended_with(&mut by_bob).await,
        ("UNAUTHENTICATED".to_owned(), false)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_streams_are_capped_per_user_and_in_all_and_a_closed_one_frees_its_place() {
    let hub = Hub::start(Options {
        events_caps: snug_gateway::config::Caps {
            max: 3,
            per_user: 2,
            per_address: 100,
        },
        ..Options::default()
    })
    .await;
    let (alice, bob) = (hub.add_user("alice"), hub.add_user("bob"));
    let http = Http::new(hub.http);
    let refused = async |token: &str| {
        let auth = bearer(token);
        http.send(
            "GET",
            "/userdb/events",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await
    };
    let first = open(&http, &alice, None).await;
    let _second = open(&http, &alice, None).await;
    assert_error(&refused(&alice).await, 429, "RATE_LIMITED");
    let _bobs = open(&http, &bob, None).await;
    let full = refused(&bob).await;
    assert_error(&full, 503, "OVERLOADED");
    assert!(full.headers.contains_key("retry-after"));
    // A client that goes away frees its place at once.
    drop(first);
    let mut reopened = None;
    for _ in 0..50 {
        let auth = bearer(&alice);
        let events = http.events(&[("authorization", &auth)]).await;
        if events.status == 200 {
            reopened = Some(events);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        reopened.is_some(),
        "the closed stream's place was given back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_shutting_down_ends_its_event_streams_with_a_retry_and_stops() {
    let dir = tempfile::tempdir().expect("dir");
    let runtime = snug_rpc::runtime::Runtime {
        dir: dir.path().join("sync"),
        ..snug_rpc::runtime::Runtime::default()
    };
    let config = snug_sync_service::SyncConfig::default();
    let store = snug_sync_service::open_store(&config, &runtime)
        .await
        .expect("store");
    let sync = snug_sync_service::SyncServer::new(store, &config, &runtime);
    let grpc_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let grpc = grpc_listener.local_addr().expect("addr");
    let (_services, _task) = snug_e2e::spawn_services(grpc_listener, sync, None);
    let gateway = snug_gateway::config::GatewayConfig {
        auth: Some(snug_gateway::config::AuthMode::Off),
        ..snug_gateway::config::GatewayConfig::for_tests()
    };
    let state = snug_gateway::build(
        &gateway,
        dir.path().join("gateway"),
        snug_gateway::Addresses::all(&format!("http://{grpc}")),
        snug_gateway::Runtime::new(snug_files::sealed::Sealer::disabled()),
    )
    .await
    .expect("gateway");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let http = Http::new(listener.local_addr().expect("addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(snug_gateway::serve(state, listener, async {
        let _ = stopped.await;
    }));
    let mut events = http.events(&[]).await;
    assert_eq!(events.status, 200);
    assert_eq!(next(&mut events, SOON).await.expect("hint").event, "retry");
    assert_eq!(
        next(&mut events, SOON).await.expect("state").event,
        "no-image"
    );
    let _ = stop.send(());
    let ended = next(&mut events, SOON).await.expect("the end");
    assert_eq!(ended.event, "error", "{ended:?}");
    assert!(ended.data.contains("\"retryable\":true"), "{ended:?}");
    assert!(events.ended(SOON).await);
    tokio::time::timeout(SOON, serving)
        .await
        .expect("the gateway stopped, not held open by the stream")
        .expect("joined")
        .expect("served");
}

/// `GET` (or `HEAD`) `/userdb` as a long poll: If-None-Match `etag`, `Prefer: wait=N`.
async fn long_poll(
    http: &Http,
    token: &str,
    method: &str,
    etag: &str,
    wait: u64,
) -> snug_e2e::Answer {
    let auth = bearer(token);
    let prefer = format!("wait={wait}");
    http.send(
        method,
        "/userdb",
        &[
            ("authorization", &auth),
            ("if-none-match", etag),
            ("prefer", &prefer),
        ],
        Payload::Empty,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_answers_as_soon_as_the_revision_changes_or_304_when_its_wait_ends() {
    let hub = Hub::start(Options {
        // Long polls hold no place among the requests in flight: two, with a third request.
        http_concurrency_limit: 1,
        ..Options::default()
    })
    .await;
    let alice = hub.add_user("alice");
    let http = Http::new(hub.http);
    let r1 = put_userdb(&http, &alice, ("if-none-match", "*"), push(1)).await;
    let e1 = r1.header("etag").to_owned();

    // Nothing changes: 304 once the wait is over, saying the wait it applied.
    let started = std::time::Instant::now();
    let unchanged = long_poll(&http, &alice, "GET", &e1, 1).await;
    assert_eq!(unchanged.status, 304);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(unchanged.header("preference-applied"), "wait=1");

    // Two devices wait; a third pushes: both answer at once with the new revision.
    let waiting: Vec<_> = ["GET", "HEAD"]
        .into_iter()
        .map(|method| {
            let (http, alice, e1) = (http.clone(), alice.clone(), e1.clone());
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                (
                    long_poll(&http, &alice, method, &e1, 30).await,
                    started.elapsed(),
                )
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r2 = put_userdb(&http, &alice, ("if-match", &e1), push(2)).await;
    assert_eq!(r2.status, 204, "served while two long polls wait");
    for answer in waiting {
        let (answer, took) = answer.await.expect("joined");
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("etag"), r2.header("etag"));
        assert!(
            took < Duration::from_secs(15),
            "answered at the change: {took:?}"
        );
    }
    // The limit still holds for everything else: an upload in flight (its body stalled) holds
    // the one place, and a plain GET is shed at once with 503, while a long poll still waits.
    let mut stalled = tokio::net::TcpStream::connect(hub.http)
        .await
        .expect("connect");
    let body = push(3);
    let head = format!(
        "PUT /userdb HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {alice}\r\n\
         content-type: application/octet-stream\r\nif-match: {}\r\ncontent-length: {}\r\n\r\n",
        hub.http,
        r2.header("etag"),
        body.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut stalled, head.as_bytes())
        .await
        .expect("head");
    tokio::io::AsyncWriteExt::write_all(&mut stalled, &body[..1024])
        .await
        .expect("start");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let auth = bearer(&alice);
    let shed = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_error(&shed, 503, "OVERLOADED");
    assert!(shed.headers.contains_key("retry-after"));
    let e2 = r2.header("etag").to_owned();
    let polled = long_poll(&http, &alice, "HEAD", &e2, 1).await;
    assert_eq!(polled.status, 304, "a long poll holds no place");
    drop(stalled);

    // A condition that is not the current revision is answered at once, without waiting.
    let started = std::time::Instant::now();
    let stale = long_poll(&http, &alice, "HEAD", &e1, 30).await;
    assert_eq!(stale.status, 200);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!stale.headers.contains_key("preference-applied"));
}
