//! Silent connections cannot take the gateway down (issue 36, point 1): a connection that never
//! sends a byte, HTTP/1 or HTTP/2, is closed at the header timeout from accept; one that served
//! a request and went quiet, at the idle timeout; one address holds at most its share; and at
//! the global cap the silent connections are shed so a health probe and an authenticated
//! request are still answered.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    time::{Duration, Instant},
};

use snug_e2e::{Http, Hub, Options, Payload, bearer, closed_at};
use snug_gateway::config::AuthMode;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpSocket, TcpStream},
};

/// The HTTP/2 connection preface and an empty SETTINGS frame: all a client must send first.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// A connection from `from` (a loopback address of the 127/8 network) to `to`.
async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0))?;
    socket.connect(to).await
}

async fn healthz(http: &Http) -> u16 {
    http.send("GET", "/healthz", &[], Payload::Empty)
        .await
        .status
}

/// 1,000 plain connections that never send a byte and 200 HTTP/2 connections silent after their
/// preface are all closed within the header timeout of their accept, while fresh connections
/// are served the whole time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_at_the_header_timeout_from_accept() {
    const PLAIN: usize = 1_000;
    const H2: usize = 200;
    let timeout = Duration::from_secs(2);
    let hub = Hub::start(Options {
        auth: AuthMode::Off,
        header_timeout: timeout,
        max_connections: (4096, 4096),
        ..Options::default()
    })
    .await;
    let started = Instant::now();
    let mut watched = Vec::with_capacity(PLAIN + H2);
    for i in 0..PLAIN + H2 {
        let mut stream = TcpStream::connect(hub.http).await.expect("connect");
        if i >= PLAIN {
            stream.write_all(H2_PREFACE).await.expect("preface");
        }
        watched.push(closed_at(stream, Duration::from_secs(30)));
    }
    let opened = started.elapsed();
    let http = Http::new(hub.http);
    let mut served = 0;
    while started.elapsed() < opened + timeout {
        assert_eq!(healthz(&http).await, 200);
        served += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served > 5, "{served} requests served");
    let mut latest = started;
    for (i, watch) in watched.into_iter().enumerate() {
        let closed = watch
            .await
            .expect("task")
            .unwrap_or_else(|| panic!("silent connection {i} was still open after 30 s"));
        latest = latest.max(closed);
    }
    let bound = opened + timeout + Duration::from_secs(3);
    assert!(
        latest.duration_since(started) <= bound,
        "the last silent connection closed after {:?} (bound {bound:?})",
        latest.duration_since(started)
    );
    eprintln!(
        "{PLAIN} silent HTTP/1 and {H2} silent HTTP/2 connections, all closed {:?} after the first opened (header timeout {timeout:?}); {served} probes served meanwhile",
        latest.duration_since(started)
    );
    assert_eq!(healthz(&Http::new(hub.http)).await, 200);
}

/// An HTTP/2 connection that made a request and went quiet is closed at the idle timeout after
/// its request ended (its request's answer arrived first, whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_closed_at_the_idle_timeout() {
    let idle = Duration::from_secs(2);
    let hub = Hub::start(Options {
        auth: AuthMode::Off,
        idle_timeout: idle,
        ..Options::default()
    })
    .await;
    let stream = TcpStream::connect(hub.http).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("handshake");
    let driven = tokio::spawn(async move {
        let _ = connection.await;
        Instant::now()
    });
    let request = http::Request::get(format!("http://{}/healthz", hub.http))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let response = sender.send_request(request).await.expect("answered");
    assert_eq!(response.status(), 200);
    let answered = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(30), driven)
        .await
        .expect("the idle connection is closed")
        .expect("task");
    let after = closed.duration_since(answered);
    assert!(
        after >= idle - Duration::from_millis(200) && after <= idle + Duration::from_secs(3),
        "closed {after:?} after its request (idle timeout {idle:?})"
    );
}

/// One address holds at most its share: one more connection from it is closed at once, while
/// another address and a trusted proxy (which carries many clients) are admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_share_of_connections() {
    const SHARE: usize = 20;
    let hub = Hub::start(Options {
        auth: AuthMode::Off,
        max_connections: (4096, SHARE),
        trusted_proxies: vec!["127.0.0.3".to_owned()],
        ..Options::default()
    })
    .await;
    let greedy = Ipv4Addr::new(127, 0, 0, 2);
    let mut held = Vec::new();
    for _ in 0..SHARE {
        held.push(connect_from(greedy, hub.http).await.expect("connect"));
    }
    // The accept loop counts a connection when it accepts it; the one over the share is closed.
    let over = connect_from(greedy, hub.http).await.expect("connect");
    let refused_at = Instant::now();
    let closed = closed_at(over, Duration::from_secs(5))
        .await
        .expect("task")
        .expect("the connection over the share is closed");
    assert!(
        closed.duration_since(refused_at) < Duration::from_secs(1),
        "closed at once, not at a timeout: {:?}",
        closed.duration_since(refused_at)
    );
    // Another address is served meanwhile, over a connection of its own.
    let other = Http::new(hub.http);
    assert_eq!(healthz(&other).await, 200);
    // A trusted proxy's connections are not counted against it.
    let proxy = Ipv4Addr::new(127, 0, 0, 3);
    let mut through_proxy = Vec::new();
    for _ in 0..SHARE * 2 {
        let mut stream = connect_from(proxy, hub.http).await.expect("connect");
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .await
            .expect("request");
        through_proxy.push(stream);
    }
    for mut stream in through_proxy {
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.expect("an answer");
        assert_eq!(&head, b"HTTP/1.1 200");
    }
    // Once the greedy address lets go of one, it may open one again.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut again = connect_from(greedy, hub.http).await.expect("connect");
    again
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .expect("request");
    let mut head = [0u8; 12];
    again.read_exact(&mut head).await.expect("an answer");
    assert_eq!(&head, b"HTTP/1.1 200");
}

/// With the cap held by silent connections from many addresses, a health probe and an
/// authenticated request are answered at once: the silent ones are shed to make room (the
/// longest silent first), not the probe left waiting for a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_silent_connections_are_shed_for_probes_and_users() {
    const CAP: usize = 64;
    let hub = Hub::start(Options {
        // Long enough that a timeout cannot be what frees the room.
        header_timeout: Duration::from_secs(60),
        max_connections: (CAP, 8),
        ..Options::default()
    })
    .await;
    let alice = hub.add_user("alice");
    let mut silent = Vec::new();
    for i in 0..CAP {
        let from = Ipv4Addr::new(127, 0, 1, (i / 8) as u8 + 1);
        silent.push(connect_from(from, hub.http).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let oldest = silent.remove(0);
    let oldest = closed_at(oldest, Duration::from_secs(10));
    let started = Instant::now();
    let http = Http::new(hub.http);
    assert_eq!(healthz(&http).await, 200);
    let auth = bearer(&alice);
    let me = Http::new(hub.http)
        .send(
            "GET",
            "/auth/me",
            &[("authorization", auth.as_str())],
            Payload::Empty,
        )
        .await;
    assert_eq!(me.status, 200, "{:?}", me.json());
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "the probe and the request waited {waited:?}"
    );
    assert!(
        oldest.await.expect("task").is_some(),
        "the longest silent connection was the one shed"
    );
    eprintln!(
        "{CAP} silent connections held the cap; a probe and a request were answered in {waited:?}"
    );
}

/// A client that writes its whole request before it reads (as curl, Python's `requests` and
/// hyper's client do) reads the answer to a request refused before its body was read, instead
/// of a broken pipe or a reset: the gateway drains what is left of the body before it closes
/// (`linger.rs`). A credential refused, and a declared length over the quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_before_its_body_is_answered_readably() {
    const MIB: usize = 1 << 20;
    let hub = Hub::start(Options {
        quota_bytes: 8 * MIB as u64,
        ..Options::default()
    })
    .await;
    let alice = hub.add_user("alice");
    let body = vec![0x5a_u8; 24 * MIB];
    for (token, expected) in [
        ("not-a-token", "HTTP/1.1 401 Unauthorized"),
        (alice.as_str(), "HTTP/1.1 413 Payload Too Large"),
    ] {
        let mut stream = TcpStream::connect(hub.http).await.expect("connect");
        let head = format!(
            "PUT /userdb HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {token}\r\n\
             content-type: application/octet-stream\r\nif-none-match: *\r\n\
             content-length: {}\r\n\r\n",
            hub.http,
            body.len()
        );
        stream.write_all(head.as_bytes()).await.expect("head");
        stream
            .write_all(&body)
            .await
            .unwrap_or_else(|err| panic!("{expected}: writing the body failed: {err}"));
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .await
            .unwrap_or_else(|err| panic!("{expected}: reading the answer failed: {err}"));
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with(expected), "{answer}");
        assert!(answer.contains("\"retryable\""), "a typed answer: {answer}");
    }
}
