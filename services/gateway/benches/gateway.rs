//! The gateway against nginx, measured in the same run (issue 6): GET of a 64 MiB image, the same
//! image by revision (read from the pack files with every chunk verified, and the cost of that
//! verification measured beside it: issue 23, point 3; its 4× target is a sanity bound, not the
//! issue's), PUT of a 64 MiB image (validated and made durable by the sync service,
//! against nginx DAV's PUT, which neither validates nor fsyncs), and GET of a ~100 KiB image with
//! 32 concurrent
//! connections (requests per second and p99 latency, the medians of alternating rounds). Each
//! small-GET round also prints the CPU time each side spent per request (the hub's threads, and
//! nginx's processes), which a busy neighbour on a shared machine disturbs less than a rate.
//!
//! The hub runs in this process (schema, sync and materialize services over gRPC on loopback,
//! the gateway in front, auth off); nginx (Debian's package; `apt-get install nginx`) runs as a
//! child on a loopback port with a generated configuration in a temporary directory. One load
//! generator, on its own thread, drives both. Every loop is bounded in count and time.
//!
//! Run: `cargo bench -p snug-gateway --bench gateway`.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use snug_e2e::{
    Hub, Options,
    nginx::{Nginx, schedstat, which},
};

const BIG: usize = 64 * 1024 * 1024;
const CONNECTIONS: usize = 32;
const LOAD_SECONDS: u64 = 3;
/// Rounds of the small-GET load, alternating between the hub and nginx, so a slow patch of this
/// shared machine falls on both; medians are compared and every round is printed. nginx's own
/// figure moves a lot from one load to the next here (how its two workers happen to share the 32
/// connections), which one round each would turn into a lottery. Its p99 is bimodal here (about
/// 1 ms or about 4.4 ms from one round to the next), so five rounds rather than three: with three,
/// two rounds in the rarer mode decided the row.
const LOAD_ROUNDS: usize = 5;
/// Rounds of the 64 MiB GET, alternating likewise; `SNUG_BENCH_BIG_GET_ROUNDS` sets another count
/// when studying this row.
const BIG_GET_ROUNDS: usize = 5;
/// GETs in each such round, of which the fastest counts.
const BIG_GET_TRIES: usize = 3;

fn main() {
    let Some(nginx) = which("nginx") else {
        eprintln!(
            "nginx is not installed (apt-get install -y nginx); the benchmark needs it as its peer"
        );
        std::process::exit(1);
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (big, filler_at) = snug_e2e::userdb_with_filler(BIG);
    eprintln!("image: {} bytes", big.len());
    let big = Bytes::from(big);
    let big_len = big.len();
    let small = snug_e2e::userdb_vector("fresh-v6.export.snug");
    let small_body = Bytes::from(small.clone());

    let hub_runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // The subscriber `snug-hub serve` installs (log lines on stderr at `RUST_LOG`, default
    // `info`), so what every request costs in spans and filters is measured as it ships.
    let telemetry = hub_runtime.block_on(async {
        snug_rpc::telemetry::init(
            &snug_rpc::telemetry::TelemetryConfig::logs_only(snug_rpc::telemetry::LogFormat::Text),
            "snug-hub",
        )
        .expect("telemetry")
    });
    let hub = hub_runtime.block_on(Hub::start(Options {
        auth: snug_gateway::config::AuthMode::Off,
        origins: vec![],
        quota_bytes: BIG as u64,
        deadline: Duration::from_secs(60),
        // As `snug-hub serve` runs: the gateway calls its own services in-process.
        in_process: true,
        ..Options::default()
    }));
    let nginx = Nginx::start(
        &nginx,
        dir.path(),
        &[("big.snug", &big), ("small.snug", &small)],
    );

    // The load generator has its own runtime on its own thread, so the hub's runtime does not
    // schedule the client's work (nginx's workers are separate processes anyway).
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let gateway = hub.http;
    let peer = &nginx;
    let results = client.block_on(async move {
        let mut rows = Vec::new();

        // First write, then the 64 MiB GET.
        let first = request(
            gateway,
            "PUT",
            "/userdb",
            &[
                ("content-type", "application/octet-stream"),
                ("if-none-match", "*"),
            ],
            big.clone(),
        )
        .await;
        assert_eq!(first.0, 204, "first write");
        let mut etag = first.1.clone();
        // Alternating rounds, each the best of BIG_GET_TRIES GETs, compared by their medians: nginx's
        // own best moves by 2x between rounds here, and one round each would compare a quiet
        // moment with a busy one.
        let mut snug_gets = Vec::new();
        let mut nginx_gets = Vec::new();
        let rounds = std::env::var("SNUG_BENCH_BIG_GET_ROUNDS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(BIG_GET_ROUNDS)
            .max(1);
        for round in 1..=rounds {
            let snug_cpu = hub_cpu();
            let snug_get = best_of(BIG_GET_TRIES, || async {
                let (status, _, len) = request(gateway, "GET", "/userdb", &[], Bytes::new()).await;
                assert_eq!((status, len), (200, big_len));
            })
            .await;
            let snug_cpu = per_get(hub_cpu(), snug_cpu);
            let nginx_cpu = peer.cpu();
            let nginx_get = best_of(BIG_GET_TRIES, || async {
                let (status, _, len) =
                    request(peer.addr, "GET", "/big.snug", &[], Bytes::new()).await;
                assert_eq!((status, len), (200, big_len));
            })
            .await;
            let nginx_cpu = per_get(peer.cpu(), nginx_cpu);
            println!(
                "GET 64 MiB round {round}: snug {:.1} ms, nginx {:.1} ms; CPU per GET: snug {}, nginx {}",
                snug_get.as_secs_f64() * 1e3,
                nginx_get.as_secs_f64() * 1e3,
                micros(snug_cpu),
                micros(nginx_cpu),
            );
            snug_gets.push(snug_get);
            nginx_gets.push(nginx_get);
        }
        let (snug_get, nginx_get) = (median(&mut snug_gets), median(&mut nginx_gets));
        rows.push(Row::time("GET 64 MiB", snug_get, nginx_get, 2.0));

        // The same image by revision: a named revision is read from the pack files on every
        // download (only the current image is kept for the next one), and every 4 KiB chunk is
        // checked against its SHA-256 address before it is handed on (issue 23, point 3). The
        // check's own cost is measured beside it: SHA-256 of the image in 4 KiB pieces.
        let path = format!("/userdb/revisions/{}", etag.trim_matches('"'));
        let mut revision_gets = Vec::new();
        for _ in 0..rounds {
            revision_gets.push(
                best_of(BIG_GET_TRIES, || async {
                    let (status, _, len) = request(gateway, "GET", &path, &[], Bytes::new()).await;
                    assert_eq!((status, len), (200, big_len));
                })
                .await,
            );
        }
        let revision_get = median(&mut revision_gets);
        let hashing = {
            let mut times: Vec<Duration> = (0..5)
                .map(|_| {
                    let started = Instant::now();
                    for chunk in big.chunks(4096) {
                        std::hint::black_box(<sha2::Sha256 as sha2::Digest>::digest(chunk));
                    }
                    started.elapsed()
                })
                .collect();
            median(&mut times)
        };
        println!(
            "GET 64 MiB by revision (read from the packs, every chunk verified): {:.1} ms; the \
             verification alone (SHA-256 of every 4 KiB chunk, one core): {:.1} ms = {:.0}% of it",
            revision_get.as_secs_f64() * 1e3,
            hashing.as_secs_f64() * 1e3,
            100.0 * hashing.as_secs_f64() / revision_get.as_secs_f64()
        );
        rows.push(Row::time(
            "GET 64 MiB revision (verified)",
            revision_get,
            nginx_get,
            4.0,
        ));

        // PUT 64 MiB: each write changes one byte of a filler value (a user's edit touches a few
        // pages), under If-Match of the previous revision.
        let mut snug_puts = Vec::new();
        let mut nginx_puts = Vec::new();
        for round in 0..5u8 {
            let mut body = big.to_vec();
            body[filler_at] = b'a' + round;
            let body = Bytes::from(body);
            let started = Instant::now();
            let (status, new_etag, _) = request(
                gateway,
                "PUT",
                "/userdb",
                &[
                    ("content-type", "application/octet-stream"),
                    ("if-match", &etag),
                ],
                body.clone(),
            )
            .await;
            snug_puts.push(started.elapsed());
            assert_eq!(status, 204, "validated put");
            etag = new_etag;
            let started = Instant::now();
            let (status, _, _) = request(
                peer.addr,
                "PUT",
                "/dav/put.snug",
                &[("content-type", "application/octet-stream")],
                body,
            )
            .await;
            nginx_puts.push(started.elapsed());
            assert!(
                status == 201 || status == 204,
                "nginx DAV PUT answered {status}"
            );
        }
        rows.push(Row::time(
            "PUT 64 MiB (validated, durable)",
            median(&mut snug_puts),
            median(&mut nginx_puts),
            4.0,
        ));

        // GET ~100 KiB with 32 connections.
        let small_put = request(
            gateway,
            "PUT",
            "/userdb",
            &[
                ("content-type", "application/octet-stream"),
                ("if-match", &etag),
            ],
            small_body,
        )
        .await;
        assert_eq!(small_put.0, 204);
        let mut snug_loads = Vec::new();
        let mut nginx_loads = Vec::new();
        for round in 1..=LOAD_ROUNDS {
            let snug_load = load(gateway, "/userdb", hub_cpu).await;
            let nginx_load = load(peer.addr, "/small.snug", || peer.cpu()).await;
            println!(
                "GET 112 KiB x32 round {round}: snug {:.0}/s p99 {:.1} ms, nginx {:.0}/s p99 {:.1} ms; CPU per request: snug {}, nginx {}",
                snug_load.rate,
                snug_load.p99.as_secs_f64() * 1e3,
                nginx_load.rate,
                nginx_load.p99.as_secs_f64() * 1e3,
                micros(snug_load.cpu_per_request),
                micros(nginx_load.cpu_per_request),
            );
            snug_loads.push(snug_load);
            nginx_loads.push(nginx_load);
        }
        let (snug_rate, snug_p99) = Load::medians(&snug_loads);
        let (nginx_rate, nginx_p99) = Load::medians(&nginx_loads);
        rows.push(Row::rate(
            "GET 112 KiB x32 conns: req/s (median)",
            snug_rate,
            nginx_rate,
            0.5,
        ));
        rows.push(Row::time(
            "GET 112 KiB x32 conns: p99 (median)",
            snug_p99,
            nginx_p99,
            2.0,
        ));
        rows
    });
    drop(nginx);

    println!();
    println!(
        "{:<36} {:>14} {:>14} {:>8} {:>10} {:>6}",
        "case", "snug", "nginx", "ratio", "target", "ok"
    );
    for row in &results {
        println!(
            "{:<36} {:>14} {:>14} {:>8.2} {:>10} {:>6}",
            row.name,
            row.snug,
            row.nginx,
            row.ratio,
            row.target,
            if row.ok { "yes" } else { "NO" }
        );
    }
    drop(hub);
    hub_runtime.block_on(telemetry.shutdown());
    drop(hub_runtime);
}

struct Row {
    name: &'static str,
    snug: String,
    nginx: String,
    ratio: f64,
    target: String,
    ok: bool,
}

impl Row {
    fn time(name: &'static str, snug: Duration, nginx: Duration, limit: f64) -> Self {
        let ratio = snug.as_secs_f64() / nginx.as_secs_f64().max(1e-9);
        Self {
            name,
            snug: format!("{:.1} ms", snug.as_secs_f64() * 1e3),
            nginx: format!("{:.1} ms", nginx.as_secs_f64() * 1e3),
            ratio,
            target: format!("<= {limit}x"),
            ok: ratio <= limit,
        }
    }

    fn rate(name: &'static str, snug: f64, nginx: f64, floor: f64) -> Self {
        let ratio = snug / nginx.max(1e-9);
        Self {
            name,
            snug: format!("{snug:.0}/s"),
            nginx: format!("{nginx:.0}/s"),
            ratio,
            target: format!(">= {floor}x"),
            ok: ratio >= floor,
        }
    }
}

/// One request on a fresh connection: (status, ETag, body length).
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> (u16, String, usize) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(connection);
    send(&mut sender, addr, method, path, headers, body).await
}

async fn send(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> (u16, String, usize) {
    let mut builder = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let response = sender
        .send_request(builder.body(Full::new(body)).expect("request"))
        .await
        .expect("response");
    let status = response.status().as_u16();
    let etag = response
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut body = response.into_body();
    let mut len = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("frame").into_data() {
            len += data.len();
        }
    }
    (status, etag, len)
}

async fn best_of<F, Fut>(n: usize, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut best = Duration::MAX;
    for _ in 0..n {
        let started = Instant::now();
        f().await;
        best = best.min(started.elapsed());
    }
    best
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

struct Load {
    rate: f64,
    p99: Duration,
    /// The server's CPU time per completed request, where the platform reports it.
    cpu_per_request: Option<Duration>,
}

impl Load {
    /// The median rate and the median p99 of `loads` (each on its own).
    fn medians(loads: &[Load]) -> (f64, Duration) {
        let mut rates: Vec<f64> = loads.iter().map(|l| l.rate).collect();
        rates.sort_by(f64::total_cmp);
        let mut p99s: Vec<Duration> = loads.iter().map(|l| l.p99).collect();
        (rates[rates.len() / 2], median(&mut p99s))
    }
}

fn micros(time: Option<Duration>) -> String {
    time.map_or_else(
        || "n/a".to_owned(),
        |t| format!("{:.1} us", t.as_secs_f64() * 1e6),
    )
}

/// CPU time of this process's threads but the load generator's (the main thread, which drives
/// the current-thread client runtime).
fn hub_cpu() -> Option<Duration> {
    let main = std::process::id().to_string();
    let mut total = Duration::ZERO;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let task = task.ok()?;
        if task.file_name() != main.as_str() {
            // A thread that ended meanwhile is gone from the sum on both sides of the load.
            total += schedstat(&task.path()).unwrap_or_default();
        }
    }
    Some(total)
}

/// The server CPU time of one of the GETs a big-GET round makes, from readings before and
/// after the round.
fn per_get(after: Option<Duration>, before: Option<Duration>) -> Option<Duration> {
    after
        .zip(before)
        .map(|(a, b)| a.saturating_sub(b) / BIG_GET_TRIES as u32)
}

/// 32 keep-alive connections issuing GETs back to back for LOAD_SECONDS (after a 1 s warm-up);
/// `cpu` reads the server's CPU time before and after the measured part.
async fn load(addr: SocketAddr, path: &'static str, cpu: impl Fn() -> Option<Duration>) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let stop = stop.clone();
        let measuring = measuring.clone();
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            stream.set_nodelay(true).expect("nodelay");
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .expect("handshake");
            tokio::spawn(connection);
            let mut latencies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let (status, _, _) = send(&mut sender, addr, "GET", path, &[], Bytes::new()).await;
                assert_eq!(status, 200);
                if measuring.load(Ordering::Relaxed) {
                    latencies.push(started.elapsed());
                }
            }
            latencies
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    measuring.store(true, Ordering::Relaxed);
    let cpu_before = cpu();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(LOAD_SECONDS)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let cpu_used = cpu()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("task"));
    }
    all.sort();
    let p99 = all[(all.len() * 99 / 100).min(all.len() - 1)];
    Load {
        rate: all.len() as f64 / elapsed.as_secs_f64(),
        p99,
        cpu_per_request: cpu_used.map(|cpu| cpu / all.len().max(1) as u32),
    }
}
