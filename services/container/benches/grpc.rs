//! Benchmark: unlocking a 64 MiB container through `snug.container.v1` over loopback, against the same unlock in-process, measured in the same run (target: gRPC ≤ 1.3× in-process).
//!
//! Run with `cargo bench -p snug-container-service --bench grpc`. `SNUG_BENCH_RUNS` sets the
//! number of rounds (default 9); `RUST_LOG=snug_container_service=debug` adds the server's
//! timeline of each unlock on stderr. Each round measures every figure once, so load from other
//! processes on this shared machine falls on all figures alike; medians and the min–max spread
//! are reported, with the load average before and after.
//!
//! Figures:
//! - in-process: `open_owned` on a copy of the container made before the clock starts (the
//!   target's reference), and the same through an `Opening` fed the whole container at once,
//!   which decrypts like the service does (fused passes, two threads) where `open_owned` uses
//!   `aes-gcm`'s one-call decryption;
//! - gRPC unlock: from the first request message to the last plaintext byte at the client (the
//!   reference Rust client, `snug_rpc::framed::client`, which hands out the chunks as slices of
//!   the HTTP/2 frames), which receives into a buffer it reuses across calls (as the in-process figure's buffer is
//!   made before its clock starts); the same with a fresh client buffer is shown too;
//! - of which server part: from the first request message to the response's first message,
//!   which the server sends once the payload has authenticated and its first chunk is decrypted
//!   (upload, key derivation and GHASH, overlapped);
//! - of which download only: from the response's first message to its last byte, i.e. the
//!   plaintext streaming back while the server decrypts it chunk by chunk;
//! - upload only: `InspectContainer` with the same bytes (the server keeps the first bytes,
//!   counts the rest and parses the header), i.e. the transport alone;
//! - CPU time of one gRPC unlock: client and server together, since this bench runs both in one
//!   process on the same cores (a real client's CPU is elsewhere).
#![allow(clippy::unwrap_used, reason = "a benchmark aborts on any failure")]
#![allow(clippy::print_stdout, reason = "a benchmark prints its table")]

use std::time::{Duration, Instant};

use bytes::Bytes;
use snug_container::{Limits, Opening, Passphrase, RecoveryKey, Secrets};
use snug_container_service::{ContainerConfig, serve};
use snug_proto::container::v1::{self as pb, container_service_client::ContainerServiceClient};
use snug_rpc::{
    chunks::{self, Chunked as _, MAX_MESSAGE_SIZE},
    framed,
    server::ServerConfig,
};
use tonic::transport::Channel;

const PASSPHRASE: &str = "bench passphrase";
const TARGET: f64 = 1.3;

fn main() {
    // `RUST_LOG=snug_container_service=debug` shows where each unlock's time went on the server
    // (upload end, key ready, payload verified).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let runs: usize = std::env::var("SNUG_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(9)
        .max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let limits = Limits::default();
    let mut plaintext = snug_container::SQLITE_MAGIC.to_vec();
    plaintext.resize(64 * 1024 * 1024 - 300, 0);
    for (i, byte) in plaintext.iter_mut().enumerate().skip(16) {
        *byte = (i.wrapping_mul(2_654_435_761) >> 13) as u8;
    }
    let container = snug_container::seal(
        &plaintext,
        &Passphrase::new(PASSPHRASE),
        &RecoveryKey::generate(),
        snug_container::DEFAULT_ITERATIONS,
        &limits,
    )
    .unwrap();
    let container = Bytes::from(container);
    let plaintext_len = plaintext.len();
    drop(plaintext);
    println!(
        "container: {} bytes, {} PBKDF2 iterations; {} rounds; available parallelism {}",
        container.len(),
        snug_container::DEFAULT_ITERATIONS,
        runs,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!("load average before: {}", load_average());

    let client = runtime.block_on(start_server());
    let secrets = Secrets::passphrase(Passphrase::new(PASSPHRASE));
    let mut in_process = Vec::new();
    let mut in_process_opening = Vec::new();
    // Pre-faulted like `owned` below: the in-process figures pay for no fresh pages either.
    let mut opening_buffer = container.to_vec();
    let mut over_grpc = Vec::new();
    let mut over_grpc_fresh = Vec::new();
    let mut server_part = Vec::new();
    let mut download = Vec::new();
    let mut upload = Vec::new();
    let mut cpu = Vec::new();
    // The client's receive buffer is reused across rounds, as the in-process baseline's buffer
    // is made before its clock starts: neither figure pays for faulting in fresh pages.
    let mut received = Vec::new();
    // One warm-up unlock, so connection setup and first-use allocations are not measured.
    runtime.block_on(unlock(client.clone(), container.clone(), &mut received));
    for _ in 0..runs {
        // The in-process baseline also starts from its own copy of the bytes.
        let owned = container.to_vec();
        let start = Instant::now();
        let unlocked = snug_container::open_owned(owned, &secrets, &limits).unwrap();
        in_process.push(start.elapsed());
        assert_eq!(unlocked.plaintext.len(), plaintext_len);
        drop(unlocked);
        settle();

        // The same unlock in-process with the service's decryptor (two threads, fused passes).
        let start = Instant::now();
        let buffer = std::mem::take(&mut opening_buffer);
        let mut opening = Opening::with_buffer(secrets.clone(), &limits, None, buffer);
        opening.push(&container);
        let unlocker = opening.take_unlocker().unwrap();
        opening.set_decryptor(unlocker.unlock());
        let unlocked = opening.finish().unwrap();
        in_process_opening.push(start.elapsed());
        assert_eq!(unlocked.plaintext.len(), plaintext_len);
        opening_buffer = unlocked.plaintext;
        settle();

        let cpu_before = cpu_time();
        let timing = runtime.block_on(unlock(client.clone(), container.clone(), &mut received));
        assert_eq!(received.len(), plaintext_len);
        over_grpc.push(timing.total);
        server_part.push(timing.first_response);
        download.push(timing.total - timing.first_response);
        settle();
        // After the pause, so the wiping of the server's pooled buffer is counted too.
        cpu.push(
            cpu_time()
                .zip(cpu_before)
                .map(|(after, before)| after.saturating_sub(before)),
        );

        let mut fresh = Vec::new();
        let timing = runtime.block_on(unlock(client.clone(), container.clone(), &mut fresh));
        over_grpc_fresh.push(timing.total);
        assert_eq!(fresh.len(), plaintext_len);
        drop(fresh);
        settle();

        upload.push(runtime.block_on(inspect(client.clone(), container.clone())));
        settle();
    }
    let load_after = load_average();

    let ratio = median(&over_grpc).as_secs_f64() / median(&in_process).as_secs_f64();
    let ratio_fresh = median(&over_grpc_fresh).as_secs_f64() / median(&in_process).as_secs_f64();
    println!();
    println!(
        "| {:<71} | median   | min–max         |",
        format!("64 MiB, {runs} rounds")
    );
    println!("|{}|----------|-----------------|", "-".repeat(73));
    row("unlock in-process (open_owned)", &in_process);
    row(
        "unlock in-process with the service's decryptor (Opening, one push)",
        &in_process_opening,
    );
    row(
        "unlock via gRPC: upload, unlock, download into a reused buffer",
        &over_grpc,
    );
    row(
        "  of which first request → first response (upload, KDF, GHASH)",
        &server_part,
    );
    row(
        "  of which download only (first → last response byte)",
        &download,
    );
    row(
        "unlock via gRPC, client receiving into a fresh buffer",
        &over_grpc_fresh,
    );
    row("upload only (InspectContainer)", &upload);
    if cpu.iter().all(|c| c.is_some()) {
        let cpu: Vec<Duration> = cpu.into_iter().flatten().collect();
        row("CPU time of one gRPC unlock (client + server)", &cpu);
    }
    println!();
    println!(
        "gRPC / in-process = {ratio:.2}× (target ≤ {TARGET:.2}×): {}; with a fresh client buffer {ratio_fresh:.2}×",
        if ratio <= TARGET { "met" } else { "MISSED" }
    );
    println!(
        "load average after: {load_after} (a shared machine: other processes' load skews every figure)"
    );
}

/// Lets work a measurement left behind (a buffer going back to its pool) finish before the next one.
fn settle() {
    std::thread::sleep(Duration::from_millis(100));
}

/// Returns the CPU time this process has used so far (Linux), at 10 ms resolution.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name: utime and stime are the 12th and 13th, in clock ticks.
    let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

async fn start_server() -> Channel {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ContainerConfig::default();
    let server_config = ServerConfig::for_tests();
    tokio::spawn(async move {
        let runtime = snug_rpc::runtime::Runtime::default();
        serve(
            &server_config,
            &config,
            &runtime,
            listener,
            std::future::pending(),
        )
        .await
    });
    // The client gets the same windows and frame size as the server (snug_rpc::server), so
    // neither direction waits on flow control; tonic sets TCP_NODELAY on client sockets.
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .initial_stream_window_size(Some(32 * 1024 * 1024))
        .initial_connection_window_size(Some(64 * 1024 * 1024))
        .max_frame_size(Some(1024 * 1024))
        .connect()
        .await
        .unwrap()
}

struct UnlockTiming {
    first_response: Duration,
    total: Duration,
}

async fn unlock(channel: Channel, container: Bytes, received: &mut Vec<u8>) -> UnlockTiming {
    let header = pb::UnlockRequest::header(pb::UnlockHeader {
        secrets: Some(pb::Secrets {
            passphrase: Some(PASSPHRASE.to_owned()),
            recovery_key: None,
        }),
        expected_length: Some(container.len() as u64),
        iteration_policy: None,
    });
    let start = Instant::now();
    let request = chunks::upload(header, container);
    // The reference Rust client: chunk payloads are read as slices of the HTTP/2 frames
    // (`snug_rpc::framed::client`), then copied once into the caller's buffer.
    let (result, payload) = framed::client::call::<pb::UnlockResponse, _, _>(
        channel,
        pb::UNLOCK_PATH,
        tonic::Request::new(request),
    )
    .await
    .unwrap();
    let first_response = start.elapsed();
    payload
        .read_into(u64::MAX, result.plaintext_length, received)
        .await
        .unwrap();
    UnlockTiming {
        first_response,
        total: start.elapsed(),
    }
}

async fn inspect(channel: Channel, container: Bytes) -> Duration {
    let mut client = ContainerServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE);
    let start = Instant::now();
    let request = futures::stream::iter(chunks::split_into_chunks(container).map(|chunk| {
        pb::InspectContainerRequest {
            chunk,
            iteration_policy: None,
        }
    }));
    client.inspect_container(request).await.unwrap();
    start.elapsed()
}

fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn row(label: &str, samples: &[Duration]) {
    let min = samples.iter().min().copied().unwrap_or_default();
    let max = samples.iter().max().copied().unwrap_or_default();
    println!(
        "| {label:<71} | {:>5.1} ms | {:>5.1}–{:>5.1} ms |",
        ms(median(samples)),
        ms(min),
        ms(max)
    );
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}
