//! Benchmark: unlocking a 64 MiB container through `snug.container.v1` over loopback, against the
//! same unlock in-process, measured in the same run. Target: gRPC ≤ 1.3× in-process.
//!
//! Run with `cargo bench -p snug-container-service --bench grpc`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use snug_container::{Limits, Passphrase, RecoveryKey, Secrets};
use snug_container_service::{ContainerConfig, serve};
use snug_proto::container::v1::{self as pb, container_service_client::ContainerServiceClient};
use snug_rpc::{
    chunks::{self, MAX_MESSAGE_SIZE, Part},
    server::ServerConfig,
};

const PASSPHRASE: &str = "bench passphrase";
const RUNS: usize = 7;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let limits = Limits::default();
    let mut plaintext = snug_container::SQLITE_MAGIC.to_vec();
    plaintext.resize(64 * 1024 * 1024 - 300, 0);
    for (i, byte) in plaintext.iter_mut().enumerate().skip(16) {
        *byte = (i.wrapping_mul(2654435761) >> 13) as u8;
    }
    let container = snug_container::seal(
        &plaintext,
        &Passphrase::new(PASSPHRASE),
        &RecoveryKey::generate(),
        snug_container::DEFAULT_ITERATIONS,
        &limits,
    )
    .expect("seal");
    let container = Bytes::from(container);
    println!(
        "container: {} bytes, {} PBKDF2 iterations",
        container.len(),
        snug_container::DEFAULT_ITERATIONS
    );

    let secrets = Secrets::passphrase(Passphrase::new(PASSPHRASE));
    let in_process = median(
        (0..RUNS)
            .map(|_| {
                // The in-process baseline also starts from its own copy of the bytes.
                let owned = container.to_vec();
                let start = Instant::now();
                let unlocked = snug_container::open_owned(owned, &secrets, &limits).expect("open");
                let elapsed = start.elapsed();
                assert_eq!(unlocked.plaintext.len(), plaintext.len());
                elapsed
            })
            .collect(),
    );

    let over_grpc = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let config = ContainerConfig::default();
        let server_config = ServerConfig::for_tests();
        tokio::spawn(async move {
            serve(&server_config, &config, listener, std::future::pending()).await
        });
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .expect("url")
            .initial_stream_window_size(Some(32 * 1024 * 1024))
            .initial_connection_window_size(Some(64 * 1024 * 1024))
            .max_frame_size(Some(1024 * 1024))
            .connect()
            .await
            .expect("connect");
        let client = ContainerServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE);
        let mut samples = Vec::new();
        for _ in 0..RUNS {
            let mut client = client.clone();
            let header = pb::UnlockRequest {
                message: Some(pb::unlock_request::Message::Header(pb::UnlockHeader {
                    secrets: Some(pb::Secrets {
                        passphrase: Some(PASSPHRASE.to_owned()),
                        recovery_key: None,
                    }),
                    expected_length: Some(container.len() as u64),
                })),
            };
            let start = Instant::now();
            let request = chunks::upload(header, container.clone(), |c| pb::UnlockRequest {
                message: Some(pb::unlock_request::Message::Chunk(c)),
            });
            let mut stream = client.unlock(request).await.expect("unlock").into_inner();
            let (_, bytes) = chunks::download(&mut stream, u64::MAX, |m: pb::UnlockResponse| {
                m.message.map(|m| match m {
                    pb::unlock_response::Message::Result(r) => Part::Header(r),
                    pb::unlock_response::Message::Chunk(c) => Part::Chunk(c),
                })
            }, |r| r.plaintext_length)
            .await
            .expect("download");
            samples.push(start.elapsed());
            assert_eq!(bytes.len(), plaintext.len());
        }
        let mut uploads = Vec::new();
        for _ in 0..3 {
            let mut client = client.clone();
            let start = Instant::now();
            let request = futures::stream::iter(
                chunks::split_into_chunks(container.clone())
                    .map(|chunk| pb::InspectContainerRequest { chunk })
                    .collect::<Vec<_>>(),
            );
            client.inspect_container(request).await.expect("inspect");
            uploads.push(start.elapsed());
        }
        println!("upload only (InspectContainer): {:?}", median(uploads));
        median(samples)
    });

    let ratio = over_grpc.as_secs_f64() / in_process.as_secs_f64();
    println!();
    println!("| measurement (median of {RUNS})           | time      |");
    println!("|------------------------------------------|-----------|");
    println!("| unlock 64 MiB in-process (open_owned)    | {:>6.1} ms |", in_process.as_secs_f64() * 1e3);
    println!("| unlock 64 MiB via gRPC (upload+download) | {:>6.1} ms |", over_grpc.as_secs_f64() * 1e3);
    println!();
    println!(
        "gRPC / in-process = {ratio:.2}× (target ≤ 1.30×): {}",
        if ratio <= 1.3 { "met" } else { "MISSED" }
    );
}
