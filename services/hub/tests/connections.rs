//! Silent connections against the built `snug-hub serve` (issue 36, point 1), as an operator
//! runs it: a thousand connections that never send a byte and a hundred HTTP/2 connections
//! silent after their preface are closed at `SNUG_HTTP_HEADER_TIMEOUT` from accept, `/healthz`
//! answering throughout; and at `SNUG_HTTP_MAX_CONNECTIONS` the silent are shed for a probe.
//! (The per-address share is tested in-process, `tests/tests/connections.rs`: it needs clients
//! on several addresses.)

mod support;

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use snug_e2e::{Http, Payload, closed_at};
use support::Process;
use tokio::{io::AsyncWriteExt as _, net::TcpStream};

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

async fn serve(data: &std::path::Path, extra: &[(&str, &str)]) -> (Process, SocketAddr) {
    let mut env: Vec<(&str, String)> = vec![
        ("SNUG_LOG_FORMAT", "json".to_owned()),
        ("RUST_LOG", "info".to_owned()),
        ("SNUG_LISTEN", "127.0.0.1:0".to_owned()),
        ("SNUG_ADMIN_LISTEN", "127.0.0.1:0".to_owned()),
        ("SNUG_HTTP_LISTEN", "127.0.0.1:0".to_owned()),
        ("SNUG_SHUTDOWN_GRACE", "2s".to_owned()),
        ("SNUG_DATA_DIR", data.display().to_string()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    let mut process = Process::spawn("hub", &["serve"], &env);
    let addr = process
        .logged("HTTP gateway listening", "addr")
        .await
        .parse()
        .expect("the HTTP address");
    (process, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_closes_silent_connections_on_time_and_keeps_answering_probes() {
    const PLAIN: usize = 1_000;
    const H2: usize = 100;
    let data = tempfile::tempdir().expect("tempdir");
    let (mut hub, addr) = serve(
        data.path(),
        &[
            ("SNUG_HTTP_HEADER_TIMEOUT", "2s"),
            ("SNUG_HTTP_MAX_CONNECTIONS_PER_ADDRESS", "4096"),
        ],
    )
    .await;
    let started = Instant::now();
    let mut watched = Vec::new();
    for i in 0..PLAIN + H2 {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        if i >= PLAIN {
            stream.write_all(H2_PREFACE).await.expect("preface");
        }
        watched.push(closed_at(stream, Duration::from_secs(30)));
    }
    let opened = started.elapsed();
    let http = Http::new(addr);
    while started.elapsed() < opened + Duration::from_secs(2) {
        let probe = http.send("GET", "/healthz", &[], Payload::Empty).await;
        assert_eq!(probe.status, 200);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut latest = started;
    for watch in watched {
        let closed = watch
            .await
            .expect("task")
            .expect("a silent connection is closed");
        latest = latest.max(closed);
    }
    let held = latest.duration_since(started);
    assert!(
        held <= opened + Duration::from_secs(5),
        "silent connections were held {held:?}"
    );
    eprintln!(
        "snug-hub serve: {} silent connections opened in {opened:?}, the last closed {held:?} after the first",
        PLAIN + H2
    );
    hub.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_binarys_cap_silent_connections_are_shed_for_probes() {
    let data = tempfile::tempdir().expect("tempdir");
    let (mut hub, addr) = serve(
        data.path(),
        &[
            ("SNUG_HTTP_HEADER_TIMEOUT", "60s"),
            ("SNUG_HTTP_MAX_CONNECTIONS", "32"),
        ],
    )
    .await;
    let mut silent = Vec::new();
    for _ in 0..32 {
        silent.push(TcpStream::connect(addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let oldest = closed_at(silent.remove(0), Duration::from_secs(10));
    let started = Instant::now();
    for _ in 0..3 {
        let probe = Http::new(addr)
            .send("GET", "/healthz", &[], Payload::Empty)
            .await;
        assert_eq!(probe.status, 200);
    }
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(5), "probes waited {waited:?}");
    assert!(
        oldest.await.expect("task").is_some(),
        "the longest silent connection was shed"
    );
    eprintln!("32 silent connections at the cap; three probes answered in {waited:?}");
    hub.terminate().await;
}
