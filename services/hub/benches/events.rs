//! Live revision events against the polling they replace, and the poll that remains against
//! nginx, measured in the same run (issue 40).
//!
//! The hub is the real `snug-hub serve` binary, as separate processes, auth on (bearer tokens of
//! users added with `snug-hub users add`), rate limits on at rates the load never reaches (so
//! their cost is counted); peers and clients run beside it on loopback. Rows:
//!
//! 1. **The 304 poll.** `wrk` (32 connections) sends the conditional `GET /userdb` of a plain
//!    client (bearer token, the current ETag) to the hub, and the same conditional GET of a static
//!    file to nginx; alternating rounds, medians of requests/s and p99. Targets: ≥ 0.4× nginx's
//!    rate, p99 ≤ 2× nginx's.
//! 2. **Idle subscribers.** 10,000 `GET /userdb/events` streams (100 users × 100) held open on
//!    one hub: its resident memory (the whole process) and its CPU over two idle heartbeat
//!    periods (30 s). Targets: ≤ 256 MiB, ≤ 2 % of a core.
//! 3. **Delivery.** With 1,000 subscribers (100 users × 10), 100 PUTs, each a user's: from the
//!    204 to each of that user's subscribers reading the event. Embedded (one hub): p50 ≤ 10 ms.
//!    Two replicas on one PostgreSQL (`SNUG_TEST_POSTGRES_URL`; skipped without), PUT on A,
//!    subscribers on B: p50 ≤ 50 ms, p99 ≤ 250 ms.
//! 4. **Polling every 30 s instead.** The same 10,000 clients polling every 30 s are 333
//!    conditional GETs a second: run at that rate for 15 s, the hub's CPU is printed beside the
//!    idle streams' and the mean delay (half the interval) beside the events'.
//!
//! Run: `cargo bench -p snug-hub --bench events` (`apt-get install wrk nginx`).

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use snug_e2e::{
    Http, OCTET, Payload,
    nginx::{Nginx, which},
};
use tokio::{
    io::{AsyncBufReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
    sync::mpsc,
};

const HUB: &str = env!("CARGO_BIN_EXE_snug-hub");
const WRK_CONNECTIONS: usize = 32;
const WRK_SECONDS: u64 = 5;
const POLL_ROUNDS: usize = 3;
const IDLE_USERS: usize = 100;
const IDLE_PER_USER: usize = 100;
const DELIVERY_USERS: usize = 100;
const DELIVERY_PER_USER: usize = 10;
const POLL_INTERVAL_SECONDS: f64 = 30.0;
const POLL_LOAD_SECONDS: u64 = 15;

fn main() {
    for tool in ["wrk", "nginx"] {
        if which(tool).is_none() {
            eprintln!(
                "{tool} is not installed (apt-get install -y wrk nginx): the benchmark needs it"
            );
            std::process::exit(1);
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let dir = tempfile::tempdir().expect("tempdir");
    println!("# live revision events vs polling (issue 40)");

    // `SNUG_BENCH_EVENTS_ROWS=delivery` (or `poll`, `idle`): only those rows, when studying one.
    let rows = std::env::var("SNUG_BENCH_EVENTS_ROWS").unwrap_or_default();
    let wanted = |name: &str| rows.is_empty() || rows.split(',').any(|r| r == name);

    // 1. The 304 poll, hub against nginx.
    let hub = Hub::start(&dir.path().join("embedded"), &[]);
    let tokens = hub.add_users(IDLE_USERS);
    let http = Http::new(hub.addr);
    let mut heads = Vec::new();
    for (n, token) in tokens.iter().enumerate() {
        heads.push(put(&http, token, "*", n as u64).await);
    }
    let mut idle_core = None;
    if wanted("poll") {
        poll_row(&hub, &tokens, &heads, dir.path());
    }
    if wanted("idle") {
        idle_core = Some(idle_row(&hub, &tokens).await);
    }
    if wanted("idle") || wanted("polling") {
        polling_row(&hub, &tokens, &heads, idle_core).await;
    }
    if wanted("delivery") {
        // 3. Delivery, embedded.
        let delays = deliver(&hub, &hub, &tokens, &mut heads).await;
        report_delivery("embedded", &delays, 10.0, None);
    }
    drop(hub);
    if wanted("delivery") {
        replicas_row(dir.path()).await;
    }
}

/// Row 1: the conditional GET of a plain client, against nginx's of a static file.
fn poll_row(hub: &Hub, tokens: &[String], heads: &[String], dir: &Path) {
    let binary = which("nginx").expect("nginx");
    let nginx = Nginx::start(&binary, &dir.join("nginx"), &[("image", &image(0))]);
    let nginx_etag = nginx_etag(nginx.addr);
    let mut hub_rounds = Vec::new();
    let mut nginx_rounds = Vec::new();
    for round in 0..POLL_ROUNDS {
        let cpu = hub.cpu();
        let on_hub = wrk(
            &format!("http://{}/userdb", hub.addr),
            &[
                ("authorization", &format!("Bearer {}", tokens[0])),
                ("if-none-match", &heads[0]),
            ],
        );
        let cpu = hub.cpu() - cpu;
        let on_nginx = wrk(
            &format!("http://{}/image", nginx.addr),
            &[("if-none-match", &nginx_etag)],
        );
        println!(
            "304 poll round {round}: hub {:.0}/s p99 {:.2} ms ({:.1} µs CPU each) | nginx {:.0}/s p99 {:.2} ms",
            on_hub.rate,
            on_hub.p99_ms,
            cpu / on_hub.requests as f64 * 1e6,
            on_nginx.rate,
            on_nginx.p99_ms
        );
        hub_rounds.push(on_hub);
        nginx_rounds.push(on_nginx);
    }
    let hub_rate = median(hub_rounds.iter().map(|r| r.rate));
    let hub_p99 = median(hub_rounds.iter().map(|r| r.p99_ms));
    let nginx_rate = median(nginx_rounds.iter().map(|r| r.rate));
    let nginx_p99 = median(nginx_rounds.iter().map(|r| r.p99_ms));
    row(
        "304 poll, requests/s (hub / nginx)",
        hub_rate / nginx_rate,
        0.4,
        true,
        &format!("{hub_rate:.0} / {nginx_rate:.0}"),
    );
    row(
        "304 poll, p99 (hub / nginx)",
        hub_p99 / nginx_p99,
        2.0,
        false,
        &format!("{hub_p99:.2} ms / {nginx_p99:.2} ms"),
    );
    drop(nginx);
}

/// Row 2: idle streams' memory and CPU; the share of a core they use.
async fn idle_row(hub: &Hub, tokens: &[String]) -> f64 {
    // 2. Idle subscribers.
    let before = hub.rss();
    let (tx, _rx) = mpsc::unbounded_channel();
    let counts = Arc::new(Counts::default());
    let mut streams = Vec::new();
    for batch in 0..IDLE_PER_USER {
        for (user, token) in tokens.iter().enumerate() {
            streams.push(tokio::spawn(subscribe(
                hub.addr,
                token.clone(),
                user,
                tx.clone(),
                counts.clone(),
            )));
        }
        // Connections in bursts of a hundred: a listen backlog is not what is measured.
        if batch % 10 == 9 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let total = IDLE_USERS * IDLE_PER_USER;
    wait_for(&counts.ready, total, Duration::from_secs(120)).await;
    println!(
        "  {} stream requests were shed while they connected, and made again",
        counts.refused.load(Ordering::Relaxed)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss = hub.rss();
    // CPU over exactly two heartbeat periods: from just after a heartbeat reached every stream
    // to just after the second one after it did (a fixed window would hold two or three).
    let beat = Duration::from_secs(15);
    let heard = counts.beats.load(Ordering::Relaxed);
    wait_for(&counts.beats, heard + total, 2 * beat).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (cpu, started) = (hub.cpu(), Instant::now());
    let heard = counts.beats.load(Ordering::Relaxed);
    wait_for(&counts.beats, heard + 2 * total, 3 * beat).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_seconds = started.elapsed().as_secs_f64();
    let idle_cpu = hub.cpu() - cpu;
    let idle_core = idle_cpu / idle_seconds;
    // And between two heartbeats (the next is 14 s away): what costs CPU but the heartbeats.
    let (cpu, started) = (hub.cpu(), Instant::now());
    tokio::time::sleep(Duration::from_secs(12)).await;
    let quiet_core = (hub.cpu() - cpu) / started.elapsed().as_secs_f64();
    println!(
        "  between heartbeats {:.2} % of a core; each heartbeat of each stream {:.0} µs (on loopback the client's receive path counts as the hub's)",
        quiet_core * 100.0,
        (idle_cpu - quiet_core * idle_seconds) / (2 * total) as f64 * 1e6
    );
    let open = streams.iter().filter(|s| !s.is_finished()).count();
    println!(
        "idle subscribers: {open} of {total} open; hub resident {:.0} MiB ({:.0} MiB before them, {:.1} KiB each)",
        mib(rss),
        mib(before),
        (rss.saturating_sub(before)) as f64 / total as f64 / 1024.0
    );
    row(
        "10,000 idle subscribers, hub resident MiB",
        mib(rss),
        256.0,
        false,
        "whole process",
    );
    row(
        "10,000 idle subscribers, % of a core",
        idle_core * 100.0,
        2.0,
        false,
        &format!("over {idle_seconds:.0} s, two heartbeats each"),
    );
    assert_eq!(open, total, "every idle stream stayed open");
    for stream in streams {
        stream.abort();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    idle_core
}

/// Row 4: the same clients polling every 30 s instead.
async fn polling_row(hub: &Hub, tokens: &[String], heads: &[String], idle_core: Option<f64>) {
    // 4. The same clients polling every 30 s (333 conditional GETs a second), on the same hub.
    let rate = (IDLE_USERS * IDLE_PER_USER) as f64 / POLL_INTERVAL_SECONDS;
    let cpu = hub.cpu();
    let sent = poll_at(hub.addr, tokens, heads, rate, POLL_LOAD_SECONDS).await;
    let poll_core = (hub.cpu() - cpu) / POLL_LOAD_SECONDS as f64;
    println!(
        "polling every 30 s: {rate:.0} requests/s ({sent} sent), {:.1} % of a core; a change seen after {:.0} s on average",
        poll_core * 100.0,
        POLL_INTERVAL_SECONDS / 2.0
    );
    if let Some(idle_core) = idle_core {
        println!(
            "  the same clients holding event streams instead: {:.2} % of a core and no request",
            idle_core * 100.0
        );
    }
}

/// Row 3 across two replicas on one PostgreSQL.
async fn replicas_row(dir: &Path) {
    let Some(url) = std::env::var("SNUG_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        println!("replicas: skipped (SNUG_TEST_POSTGRES_URL is not set)");
        return;
    };
    let schema = format!("bench_events_{}", std::process::id());
    let env = [
        ("SNUG_SYNC_STORE", "postgres".to_owned()),
        ("SNUG_SYNC_POSTGRES_URL", url.clone()),
        ("SNUG_SYNC_POSTGRES_SCHEMA", format!("{schema}_sync")),
        ("SNUG_USERS_STORE", "postgres".to_owned()),
        ("SNUG_USERS_POSTGRES_URL", url.clone()),
        ("SNUG_USERS_POSTGRES_SCHEMA", format!("{schema}_users")),
        // Replicas sharing a users directory share the session key.
        (
            "SNUG_SESSION_SECRET",
            "one session secret both replicas share, 32+ chars".to_owned(),
        ),
    ];
    let a = Hub::start(&dir.join("a"), &env);
    let b = Hub::start(&dir.join("b"), &env);
    let tokens = a.add_users(DELIVERY_USERS);
    let on_a = Http::new(a.addr);
    let mut heads = Vec::new();
    for (n, token) in tokens.iter().enumerate() {
        heads.push(put(&on_a, token, "*", n as u64).await);
    }
    let delays = deliver(&a, &b, &tokens, &mut heads).await;
    report_delivery("A→B", &delays, 50.0, Some(250.0));
}

/// Subscribes `DELIVERY_PER_USER` streams of each user to `on`, then PUTs one revision per user
/// through `to`: each delay from the 204 to a subscriber reading the event, in milliseconds (0
/// when the event was read first).
async fn deliver(to: &Hub, on: &Hub, tokens: &[String], heads: &mut [String]) -> Vec<f64> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let counts = Arc::new(Counts::default());
    let mut streams = Vec::new();
    for _ in 0..DELIVERY_PER_USER {
        for (user, token) in tokens.iter().enumerate().take(DELIVERY_USERS) {
            streams.push(tokio::spawn(subscribe(
                on.addr,
                token.clone(),
                user,
                tx.clone(),
                counts.clone(),
            )));
        }
    }
    wait_for(
        &counts.ready,
        DELIVERY_USERS * DELIVERY_PER_USER,
        Duration::from_secs(60),
    )
    .await;
    println!(
        "  {} stream requests were shed while they connected, and made again",
        counts.refused.load(Ordering::Relaxed)
    );
    // What the streams said on connecting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    while rx.try_recv().is_ok() {}
    let http = Http::new(to.addr);
    // Each revision: when its PUT was sent, and when its 204 was read.
    let mut answered: HashMap<String, (Instant, Instant)> = HashMap::new();
    let mut heard: Vec<(String, Instant)> = Vec::new();
    for (user, token) in tokens.iter().enumerate().take(DELIVERY_USERS) {
        let sent = Instant::now();
        let revision = put(&http, token, &heads[user], 1000 + user as u64).await;
        answered.insert(
            revision.trim_matches('"').to_owned(),
            (sent, Instant::now()),
        );
        heads[user] = revision;
        tokio::time::sleep(Duration::from_millis(20)).await;
        while let Ok((_, revision, at)) = rx.try_recv() {
            heard.push((revision, at));
        }
    }
    let until = Instant::now() + Duration::from_secs(10);
    while heard.len() < DELIVERY_USERS * DELIVERY_PER_USER && Instant::now() < until {
        if let Ok(Some((_, revision, at))) =
            tokio::time::timeout(Duration::from_millis(100), rx.recv()).await
        {
            heard.push((revision, at));
        }
    }
    let ended = streams.iter().filter(|s| s.is_finished()).count();
    for stream in streams {
        stream.abort();
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (delays, from_sent): (Vec<f64>, Vec<f64>) = heard
        .iter()
        .filter_map(|(revision, at)| {
            let (sent, answered) = answered.get(revision.trim_matches('"'))?;
            Some((
                ms(at.saturating_duration_since(*answered)),
                ms(at.saturating_duration_since(*sent)),
            ))
        })
        .unzip();
    if delays.len() != DELIVERY_USERS * DELIVERY_PER_USER {
        let mut per_revision: HashMap<&str, usize> = HashMap::new();
        for (revision, _) in &heard {
            *per_revision.entry(revision.trim_matches('"')).or_default() += 1;
        }
        let short: Vec<(&String, usize)> = answered
            .keys()
            .map(|r| (r, per_revision.get(r.as_str()).copied().unwrap_or(0)))
            .filter(|(_, n)| *n != DELIVERY_PER_USER)
            .collect();
        panic!(
            "{} of {} subscribers heard their user's push ({ended} streams ended); revisions heard other than {DELIVERY_PER_USER} times: {short:?}; heard {} events",
            delays.len(),
            DELIVERY_USERS * DELIVERY_PER_USER,
            heard.len()
        );
    }
    println!(
        "  from the PUT's start instead (the PUT included): p50 {:.1} ms, p99 {:.1} ms",
        percentile(&from_sent, 50.0),
        percentile(&from_sent, 99.0)
    );
    delays
}

/// Prints the delivery rows of `delays` (ms): p50 and p99 against their targets (p99 when it has
/// one).
fn report_delivery(name: &str, delays: &[f64], p50_target: f64, p99_target: Option<f64>) {
    let (p50, p99) = (percentile(delays, 50.0), percentile(delays, 99.0));
    println!(
        "{name}: {} deliveries, p50 {p50:.1} ms, p99 {p99:.1} ms",
        delays.len()
    );
    let detail = format!("{} subscribers", delays.len());
    row(
        &format!("{name} delivery p50, ms"),
        p50,
        p50_target,
        false,
        &detail,
    );
    if let Some(target) = p99_target {
        row(
            &format!("{name} delivery p99, ms"),
            p99,
            target,
            false,
            &detail,
        );
    }
}

/// What the event streams of a row have heard.
#[derive(Default)]
struct Counts {
    /// Streams that heard their first event.
    ready: AtomicUsize,
    /// Heartbeats heard, over all streams.
    beats: AtomicUsize,
    /// Stream requests refused (and made again).
    refused: AtomicUsize,
}

/// One event stream of `token`'s user on `addr`: counts itself ready once the first event
/// came, counts each heartbeat, and sends each revision event heard (user, id, when) to `tx`.
async fn subscribe(
    addr: SocketAddr,
    token: String,
    user: usize,
    tx: mpsc::UnboundedSender<(usize, String, Instant)>,
    counts: Arc<Counts>,
) {
    // A refused stream (a burst shed with 503, as a browser's EventSource meets it) is opened
    // again after a pause, as EventSource does.
    for _ in 0..20 {
        match stream(addr, &token, user, &tx, &counts).await {
            Some(refusal) => {
                counts.refused.fetch_add(1, Ordering::Relaxed);
                if !refusal.contains(" 503 ") && !refusal.contains(" 429 ") {
                    panic!("the stream was refused: {refusal}");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            None => return,
        }
    }
}

/// One event stream until it ends; the status line when it was refused.
async fn stream(
    addr: SocketAddr,
    token: &str,
    user: usize,
    tx: &mpsc::UnboundedSender<(usize, String, Instant)>,
    counts: &Counts,
) -> Option<String> {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return None;
    };
    // HTTP/1.0: the body is the rest of the connection, not chunked.
    let request = format!(
        "GET /userdb/events HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).await.is_err() {
        return None;
    }
    let mut lines = tokio::io::BufReader::new(stream).lines();
    match lines.next_line().await {
        Ok(Some(status)) if status.contains(" 200 ") => {}
        Ok(Some(status)) => return Some(status),
        _ => return None,
    }
    let mut first = true;
    let (mut event, mut id) = (String::new(), String::new());
    while let Ok(Some(line)) = lines.next_line().await {
        if line.starts_with(": heartbeat") {
            counts.beats.fetch_add(1, Ordering::Relaxed);
        } else if let Some(value) = line.strip_prefix("event: ") {
            event = value.to_owned();
        } else if let Some(value) = line.strip_prefix("id: ") {
            id = value.to_owned();
        } else if line.is_empty() && !event.is_empty() {
            if first {
                first = false;
                counts.ready.fetch_add(1, Ordering::Relaxed);
            } else if event == "revision" {
                let _ = tx.send((user, std::mem::take(&mut id), Instant::now()));
            }
            event.clear();
        }
    }
    None
}

/// Waits until `count` reaches `n`.
async fn wait_for(count: &AtomicUsize, n: usize, within: Duration) {
    let until = Instant::now() + within;
    while count.load(Ordering::Relaxed) < n {
        assert!(
            Instant::now() < until,
            "only {} of {n} heard",
            count.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Conditional GETs of every user at `rate` a second for `seconds`, over 64 connections: how
/// many were answered.
async fn poll_at(
    addr: SocketAddr,
    tokens: &[String],
    heads: &[String],
    rate: f64,
    seconds: u64,
) -> usize {
    let http = Arc::new(Http::new(addr));
    let every = Duration::from_secs_f64(1.0 / rate);
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut ticks = tokio::time::interval(every);
    let mut tasks = Vec::new();
    let mut n = 0;
    while Instant::now() < until {
        ticks.tick().await;
        let user = n % tokens.len();
        let (http, token, head) = (http.clone(), tokens[user].clone(), heads[user].clone());
        tasks.push(tokio::spawn(async move {
            let auth = format!("Bearer {token}");
            let answer = http
                .send(
                    "GET",
                    "/userdb",
                    &[("authorization", &auth), ("if-none-match", &head)],
                    Payload::Empty,
                )
                .await;
            assert_eq!(answer.status, 304);
        }));
        n += 1;
    }
    for task in tasks {
        task.await.expect("poll");
    }
    n
}

/// PUTs a fresh image of `seed` for `token`'s user under `etag` (`*`: none yet): the new ETag.
async fn put(http: &Http, token: &str, etag: &str, seed: u64) -> String {
    let auth = format!("Bearer {token}");
    let condition = if etag == "*" {
        ("if-none-match", etag)
    } else {
        ("if-match", etag)
    };
    let answer = http
        .send(
            "PUT",
            "/userdb",
            &[("authorization", &auth), OCTET, condition],
            Payload::Whole(image(seed)),
        )
        .await;
    assert_eq!(
        answer.status,
        204,
        "{:?}",
        String::from_utf8_lossy(&answer.body)
    );
    answer.header("etag").to_owned()
}

fn image(seed: u64) -> Vec<u8> {
    snug_e2e::stored_form(&snug_test_support::userdb::filled(64 * 1024, seed))
}

/// A `snug-hub serve` process on loopback ports of its own.
struct Hub {
    child: Child,
    addr: SocketAddr,
    data: PathBuf,
    env: Vec<(&'static str, String)>,
}

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
}

impl Hub {
    fn start(data: &Path, extra: &[(&'static str, String)]) -> Self {
        std::fs::create_dir_all(data).expect("data dir");
        let addr = free_port();
        let mut env: Vec<(&'static str, String)> = vec![
            ("SNUG_DATA_DIR", data.display().to_string()),
            ("SNUG_AUTH", "on".to_owned()),
            ("SNUG_CORS_ORIGINS", "http://localhost".to_owned()),
            ("SNUG_HTTP_LISTEN", addr.to_string()),
            ("SNUG_LISTEN", free_port().to_string()),
            ("SNUG_ADMIN_LISTEN", free_port().to_string()),
            ("SNUG_RATE_LIMIT_BURST", "100000000".to_owned()),
            ("SNUG_RATE_LIMIT_PER_SECOND", "100000000".to_owned()),
            ("SNUG_HTTP_MAX_CONNECTIONS", "20000".to_owned()),
            ("SNUG_HTTP_MAX_CONNECTIONS_PER_ADDRESS", "20000".to_owned()),
            ("SNUG_EVENTS_MAX_STREAMS_PER_ADDRESS", "20000".to_owned()),
            (
                "SNUG_EVENTS_MAX_STREAMS_PER_USER",
                IDLE_PER_USER.to_string(),
            ),
            ("SNUG_LOG_FORMAT", "json".to_owned()),
        ];
        env.extend(extra.iter().cloned());
        let mut command = Command::new(HUB);
        command
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(data.join("hub.log")).expect("hub.log"));
        let child = command.spawn().expect("snug-hub serve");
        let hub = Self {
            child,
            addr,
            data: data.to_owned(),
            env,
        };
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(mut stream) = std::net::TcpStream::connect(addr) {
                use std::io::{Read as _, Write as _};
                let _ = stream.write_all(b"GET /readyz HTTP/1.0\r\n\r\n");
                let mut answer = String::new();
                let _ = stream.read_to_string(&mut answer);
                if answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200") {
                    return hub;
                }
            }
            assert!(
                Instant::now() < until,
                "the hub did not become ready: {}",
                std::fs::read_to_string(data.join("hub.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Adds `n` users with `snug-hub users add`: their tokens.
    fn add_users(&self, n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                let output = Command::new(HUB)
                    .args(["users", "add", &format!("user{i}")])
                    .env_clear()
                    .envs(self.env.iter().map(|(k, v)| (k, v)))
                    .output()
                    .expect("snug-hub users add");
                assert!(output.status.success(), "{output:?}");
                String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .last()
                    .expect("a token")
                    .trim()
                    .to_owned()
            })
            .collect()
    }

    /// CPU seconds the process has used.
    fn cpu(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).expect("stat");
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .expect("comm")
            .1
            .split_whitespace()
            .collect();
        let ticks: u64 =
            fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
        ticks as f64 / clock_ticks()
    }

    /// Resident bytes of the process.
    fn rss(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmRSS")
            * 1024
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = &self.data;
    }
}

fn clock_ticks() -> f64 {
    rustix::param::clock_ticks_per_second() as f64
}

/// The ETag nginx at `addr` gives `/image`.
fn nginx_etag(addr: SocketAddr) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .write_all(b"HEAD /image HTTP/1.0\r\n\r\n")
        .expect("request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    answer
        .lines()
        .find_map(|l| {
            l.strip_prefix("ETag: ")
                .or_else(|| l.strip_prefix("etag: "))
        })
        .expect("an ETag")
        .trim()
        .to_owned()
}

/// What one `wrk` run measured.
struct Wrk {
    rate: f64,
    p99_ms: f64,
    requests: u64,
}

fn wrk(url: &str, headers: &[(&str, &str)]) -> Wrk {
    let mut command = Command::new("wrk");
    command.args([
        "-t2",
        &format!("-c{WRK_CONNECTIONS}"),
        &format!("-d{WRK_SECONDS}s"),
        "--latency",
    ]);
    for (name, value) in headers {
        command.args(["-H", &format!("{name}: {value}")]);
    }
    let output = command.arg(url).output().expect("wrk");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        !text.contains("Non-2xx or 3xx responses"),
        "every answer a 304: {text}"
    );
    let rate = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("wrk's rate: {text}"));
    let p99_ms = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%"))
        .map(|v| duration_ms(v.trim()))
        .unwrap_or_else(|| panic!("wrk's p99: {text}"));
    let requests = text
        .lines()
        .find_map(|l| l.trim().split_once(" requests in "))
        .and_then(|(n, _)| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("wrk's count: {text}"));
    Wrk {
        rate,
        p99_ms,
        requests,
    }
}

/// `wrk`'s `1.23ms`, `456.00us`, `1.2s` in milliseconds.
fn duration_ms(text: &str) -> f64 {
    let (number, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000.0)
    } else {
        (text, 1.0)
    };
    number.parse::<f64>().expect("a duration") * scale
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn percentile(values: &[f64], p: f64) -> f64 {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * (values.len() - 1) as f64).round() as usize;
    values[rank]
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Prints a row: the figure, its target, and whether it is met.
fn row(name: &str, value: f64, target: f64, at_least: bool, detail: &str) {
    let met = if at_least {
        value >= target
    } else {
        value <= target
    };
    let sign = if at_least { "≥" } else { "≤" };
    println!(
        "{name:<44} {value:>9.3}  (target {sign} {target}) {}  {detail}",
        if met { "met" } else { "MISSED" }
    );
}
