//! The hub under load (issue 20, point 7): rate limits per client address and per user (429
//! `RATE_LIMITED` with `Retry-After`, `X-Forwarded-For` believed only from trusted proxies), the
//! gateway's upload budget (an upload beyond it waits, then 503 with nothing stored), and slow
//! clients (connections whose headers dribble in are closed on time while others are served).

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use snug_e2e::{
    Http, Hub, Options, Payload, assert_error, bearer, etag_revision, get_userdb, put_userdb,
};
use snug_gateway::config::AuthMode;
use snug_rpc::budget::UploadBudget;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

/// `GET /auth/me` as `token`, from behind a proxy that says it forwards for `forwarded`.
async fn me(http: &Http, token: &str, forwarded: Option<&str>) -> snug_e2e::Answer {
    let auth = bearer(token);
    let mut headers = vec![("authorization", auth.as_str())];
    if let Some(address) = forwarded {
        headers.push(("x-forwarded-for", address));
    }
    http.send("GET", "/auth/me", &headers, Payload::Empty).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_the_default_rate_limit_is_429_with_retry_after() {
    let hub = Hub::start(Options {
        rate_limits: true,
        ..Options::default()
    })
    .await;
    let alice = hub.add_user("alice");
    let bob = hub.add_user("bob");
    let http = Http::new(hub.http);
    // The reference's default: a burst of 60 from one address. No trusted proxy is configured,
    // so a client cannot escape by naming other addresses in X-Forwarded-For.
    for i in 0..60 {
        let forged = format!("198.51.100.{i}");
        let answer = me(&http, &alice, Some(&forged)).await;
        assert_eq!(answer.status, 200, "request {i}");
    }
    let limited = me(&http, &alice, Some("198.51.100.200")).await;
    assert_error(&limited, 429, "RATE_LIMITED");
    assert_eq!(limited.json()["retryable"], true);
    assert_eq!(limited.header("retry-after"), "1");
    // The address is spent, whoever asks, and before anyone is authenticated (reference: 429
    // before 401).
    assert_error(&me(&http, &bob, None).await, 429, "RATE_LIMITED");
    assert_error(&me(&http, "not-a-token", None).await, 429, "RATE_LIMITED");
    // An orchestrator's probes are never limited.
    for probe in ["/healthz", "/readyz"] {
        assert_eq!(
            http.send("GET", probe, &[], Payload::Empty).await.status,
            200
        );
    }
    // One token a second comes back.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(me(&http, &alice, None).await.status, 200);
    assert_error(&me(&http, &alice, None).await, 429, "RATE_LIMITED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_is_limited_across_addresses_that_trusted_proxies_name() {
    let hub = Hub::start(Options {
        rate_limits: true,
        trusted_proxies: vec!["127.0.0.0/8".to_owned()],
        ..Options::default()
    })
    .await;
    let alice = hub.add_user("alice");
    let http = Http::new(hub.http);
    // Through the trusted proxy every request comes from an address of its own, so only the
    // user's own bucket holds them back.
    for i in 0..60 {
        let client = format!("198.51.100.{i}");
        assert_eq!(me(&http, &alice, Some(&client)).await.status, 200, "{i}");
    }
    let limited = me(&http, &alice, Some("198.51.100.77")).await;
    assert_error(&limited, 429, "RATE_LIMITED");
    assert_eq!(limited.header("retry-after"), "1");
    // Anonymous requests from those addresses are each their client's first: 401, not 429.
    for i in 0..5 {
        let client = format!("203.0.113.{i}");
        let answer = http
            .send(
                "GET",
                "/auth/me",
                &[("x-forwarded-for", client.as_str())],
                Payload::Empty,
            )
            .await;
        assert_error(&answer, 401, "UNAUTHENTICATED");
    }
    // The proxy's own address has its own bucket too: a burst through it with one forwarded
    // client is that client's.
    let bob = hub.add_user("bob");
    for _ in 0..60 {
        assert_eq!(me(&http, &bob, Some("192.0.2.1")).await.status, 200);
    }
    assert_error(
        &me(&http, &bob, Some("192.0.2.1")).await,
        429,
        "RATE_LIMITED",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_with_auth_off_has_no_rate_limit() {
    let hub = Hub::start(Options {
        auth: AuthMode::Off,
        rate_limits: true,
        ..Options::default()
    })
    .await;
    let http = Http::new(hub.http);
    for i in 0..150 {
        let answer = http.send("GET", "/auth/me", &[], Payload::Empty).await;
        assert_eq!(answer.status, 200, "request {i}");
    }
}

/// Writes an HTTP/1.1 `PUT /userdb` head for `len` body bytes.
/// The head of a first PUT of `len` bytes for `token`, forwarded for the client address `from`
/// (which a hub that trusts loopback as its proxy takes as the client's).
fn put_head(addr: SocketAddr, token: &str, len: usize, from: &str) -> String {
    format!(
        "PUT /userdb HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {token}\r\n\
         x-forwarded-for: {from}\r\ncontent-type: application/octet-stream\r\n\
         if-none-match: *\r\ncontent-length: {len}\r\n\r\n"
    )
}

/// Reads an HTTP/1.1 answer's status line from `stream`.
async fn status_of(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.expect("read");
        assert!(n > 0, "the connection closed before an answer");
        answer.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_beyond_the_budget_waits_then_is_refused_and_nothing_is_stored() {
    const MIB: usize = 1 << 20;
    let hub = Hub::start(Options {
        upload_budget: Some(UploadBudget::new(
            3 * MIB as u64,
            Duration::from_millis(300),
        )),
        // Alice's stalled upload comes from an address of its own: one address holds at most
        // half the budget, which her upload passes.
        trusted_proxies: vec!["127.0.0.1".to_owned()],
        ..Options::default()
    })
    .await;
    let alice = hub.add_user("alice");
    let bob = hub.add_user("bob");
    let http = Http::new(hub.http);
    let (big, _) = snug_e2e::userdb_with_filler(2 * MIB);
    let big = snug_e2e::stored_form(&big);
    // Alice's upload declares 2 MiB and stalls after its first bytes, holding its share.
    let mut stalled = TcpStream::connect(hub.http).await.expect("connect");
    stalled
        .write_all(put_head(hub.http, &alice, big.len(), "198.51.100.7").as_bytes())
        .await
        .expect("head");
    stalled.write_all(&big[..64 * 1024]).await.expect("start");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Bob's 2 MiB does not fit beside it: after the wait, 503 with Retry-After, nothing stored.
    let started = Instant::now();
    let refused = put_userdb(&http, &bob, ("if-none-match", "*"), big.clone()).await;
    assert_error(&refused, 503, "OVERLOADED");
    assert_eq!(refused.json()["retryable"], true);
    assert_eq!(refused.header("retry-after"), "1");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "it waited first"
    );
    assert_eq!(get_userdb(&http, &bob).await.status, 404, "nothing stored");
    // A small upload still fits beside the stalled one.
    let small = snug_e2e::stored_form(&snug_e2e::userdb_vector("fresh-v6.export.snug"));
    let answer = put_userdb(&http, &bob, ("if-none-match", "*"), small).await;
    assert_eq!(answer.status, 204);
    let bobs = etag_revision(&answer);
    // Alice's upload finishes and lands; then Bob's large one is admitted.
    stalled.write_all(&big[64 * 1024..]).await.expect("rest");
    assert_eq!(status_of(&mut stalled).await, "HTTP/1.1 204 No Content");
    let answer = put_userdb(
        &http,
        &bob,
        ("if-match", &format!("\"{bobs}\"")),
        big.clone(),
    )
    .await;
    assert_eq!(answer.status, 204, "{:?}", answer.json());
    assert_eq!(get_userdb(&http, &bob).await.body.as_ref(), big.as_slice());
    assert_eq!(
        get_userdb(&http, &alice).await.body.as_ref(),
        big.as_slice()
    );
}

/// Starts a PUT of `image` for `token` from `from` that declares its whole length, sends its first 64 KiB at
/// once and then one byte every 300 ms (as a client dripping a large upload holds its share of
/// the budget); resolves to the answer's status line, or to "closed" when the hub hangs up.
fn drip(
    addr: SocketAddr,
    token: String,
    image: Vec<u8>,
    from: &'static str,
) -> tokio::task::JoinHandle<String> {
    tokio::spawn(async move {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(put_head(addr, &token, image.len(), from).as_bytes())
            .await
            .expect("head");
        stream.write_all(&image[..64 * 1024]).await.expect("start");
        let mut sent = 64 * 1024;
        let mut buf = [0u8; 1];
        loop {
            tokio::select! {
                read = stream.peek(&mut buf) => {
                    return match read {
                        Ok(n) if n > 0 => status_of(&mut stream).await,
                        _ => "closed".to_owned(),
                    };
                }
                () = tokio::time::sleep(Duration::from_millis(300)) => {
                    if sent < image.len() - 1 {
                        if stream.write_all(&image[sent..=sent]).await.is_err() {
                            return "closed".to_owned();
                        }
                        sent += 1;
                    }
                }
            }
        }
    })
}

/// Two clients that each declare half the upload budget and then drip a byte at a time are cut
/// off at the pace (issue 36 point 2), so a third user's PUT, waiting for room, gets in instead
/// of being refused for as long as they drip; and neither one user nor one client address can
/// hold more than half the budget with a second upload: it waits aside until the first ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dripping_uploads_are_cut_off_and_do_not_starve_other_users() {
    const MIB: usize = 1 << 20;
    let (big, _) = snug_e2e::userdb_with_filler(4 * MIB);
    assert!(big.len() > 3 * MIB, "{}", big.len());
    // Exactly the two drips' declared lengths (the budget counts in units of 64 KiB).
    let budget = 2 * (big.len() as u64).div_ceil(64 * 1024) * 64 * 1024;
    let hub = Hub::start(Options {
        upload_budget: Some(UploadBudget::new(budget, Duration::from_secs(8))),
        upload_pace: snug_rpc::pace::Pace {
            grace: Duration::from_secs(1),
            min_rate: 256 * 1024,
        },
        // Each client comes from an address of its own, forwarded by the (loopback) proxy.
        trusted_proxies: vec!["127.0.0.1".to_owned()],
        ..Options::default()
    })
    .await;
    let (mallory, eve, alice, trudy) = (
        hub.add_user("mallory"),
        hub.add_user("eve"),
        hub.add_user("alice"),
        hub.add_user("trudy"),
    );
    let started = Instant::now();
    let drips = [
        drip(hub.http, mallory.clone(), big.clone(), "198.51.100.1"),
        drip(hub.http, eve, big.clone(), "198.51.100.2"),
    ];
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A second upload of mallory's (from another address), and one of another user's from
    // mallory's address, while her first holds half the budget: each waits aside for the drip
    // to end, holding up nobody, and then lands.
    let seconds: Vec<_> = [(&mallory, "198.51.100.3"), (&trudy, "198.51.100.1")]
        .into_iter()
        .map(|(token, from)| {
            let (addr, token, image) = (hub.http, token.clone(), big.clone());
            tokio::spawn(async move {
                let mut second = TcpStream::connect(addr).await.expect("connect");
                let head = put_head(addr, &token, image.len(), from);
                second.write_all(head.as_bytes()).await.expect("head");
                second.write_all(&image).await.expect("body");
                (status_of(&mut second).await, Instant::now())
            })
        })
        .collect();
    let http = Http::new(hub.http);
    // Alice's upload waits for room, and gets it when the drips fall behind the pace.
    let alices = snug_e2e::stored_form(&snug_e2e::userdb_vector("fresh-v6.export.snug"));
    let asked = Instant::now();
    let answer = put_userdb(&http, &alice, ("if-none-match", "*"), alices.clone()).await;
    let waited = asked.elapsed();
    assert_eq!(answer.status, 204, "{:?}", answer.json());
    for drip in drips {
        let status = drip.await.expect("task");
        assert!(
            status == "closed" || status.starts_with("HTTP/1.1 400"),
            "a dripping upload is cut off: {status}"
        );
    }
    let cut = started.elapsed();
    // Cut off within the grace and the first 64 KiB's time at the rate, plus scheduling slack.
    assert!(
        cut < Duration::from_secs(4),
        "the drips held on for {cut:?}"
    );
    assert!(
        waited > Duration::from_millis(300) && waited < Duration::from_secs(4),
        "alice waited {waited:?}: for the drips to be cut off, and no longer"
    );
    eprintln!(
        "two dripping 4 MiB uploads were cut off {cut:?} after they began; alice's PUT waited {waited:?} and landed"
    );
    assert_eq!(
        get_userdb(&http, &alice).await.body.as_ref(),
        alices.as_slice()
    );
    for (second, token) in seconds.into_iter().zip([&mallory, &trudy]) {
        let (status, answered) = second.await.expect("task");
        assert_eq!(status, "HTTP/1.1 204 No Content");
        assert!(
            answered.duration_since(started) > Duration::from_secs(1),
            "over its share, it waited for the drip (grace 1 s) to be cut off"
        );
        assert_eq!(get_userdb(&http, token).await.body.as_ref(), big.as_slice());
        eprintln!(
            "an upload over its share waited aside and landed {:?} after the drips began",
            answered.duration_since(started)
        );
    }
}

/// 3,000 connections that send their request headers one line at a time, slower than the
/// header timeout allows, are all closed on time, and requests on other connections are served
/// the whole while.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_header_connections_are_closed_on_time_while_others_are_served() {
    const SLOW: usize = 3_000;
    let timeout = Duration::from_secs(2);
    let hub = Hub::start(Options {
        auth: AuthMode::Off,
        header_timeout: timeout,
        // All from one address: the per-address cap is `connections.rs`'s subject.
        max_connections: (4096, 4096),
        ..Options::default()
    })
    .await;
    let addr = hub.http;
    let started = Instant::now();
    let mut slow = Vec::with_capacity(SLOW);
    for _ in 0..SLOW {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n")
            .await
            .expect("first line");
        slow.push(stream);
    }
    let opened = started.elapsed();
    // Each connection sends one more header line every half second, never the blank line.
    let dribbles: Vec<_> = slow
        .into_iter()
        .map(|mut stream| {
            tokio::spawn(async move {
                let mut buf = [0u8; 256];
                loop {
                    tokio::select! {
                        read = stream.read(&mut buf) => match read {
                            // Closed by the server (EOF or reset): when, from the start.
                            Ok(0) | Err(_) => return Instant::now(),
                            Ok(_) => panic!("a slow client got an answer"),
                        },
                        () = tokio::time::sleep(Duration::from_millis(500)) => {
                            if stream.write_all(b"x-slow: 1\r\n").await.is_err() {
                                return Instant::now();
                            }
                        }
                    }
                }
            })
        })
        .collect();
    // Meanwhile, normal requests on fresh connections are answered.
    let http = Http::new(addr);
    let mut served = 0;
    while started.elapsed() < opened + timeout {
        let answer = http.send("GET", "/healthz", &[], Payload::Empty).await;
        assert_eq!(answer.status, 200);
        served += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served > 5, "{served} requests served");
    let mut latest = started;
    for dribble in dribbles {
        let closed = tokio::time::timeout(Duration::from_secs(30), dribble)
            .await
            .expect("every slow connection is closed")
            .expect("task");
        latest = latest.max(closed);
    }
    // Every connection was closed within the timeout of its first line, plus scheduling slack.
    let bound = opened + timeout + Duration::from_secs(3);
    assert!(
        latest.duration_since(started) <= bound,
        "the last slow connection closed after {:?} (bound {bound:?})",
        latest.duration_since(started)
    );
    // The gateway still serves.
    let answer = Http::new(addr)
        .send("GET", "/healthz", &[], Payload::Empty)
        .await;
    assert_eq!(answer.status, 200);
}
