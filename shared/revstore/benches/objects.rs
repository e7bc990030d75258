//! Benchmark of the PostgreSQL store with its bytes in an object store, against its physical
//! peer, the same object store spoken to directly, measured in the same run.
//!
//! - put of a 64 MiB image through `PgStore` with objects vs `curl` PUTting the same bytes as one
//!   object to the same Garage (SigV4 by `curl --aws-sigv4`)
//! - get of that image vs `curl` GETting that object
//! - a revision that changes 1% of the pages: the bytes it uploads to the object store, counted
//!   in the bucket (the sizes of the objects it added), against the image's size
//!
//! Needs `SNUG_TEST_POSTGRES_URL`, a `garage` binary (as the tests find it) and `curl`. Run with
//! `cargo bench -p snug-revstore --features postgres --bench objects`. Figures are medians of a
//! few rounds; the ratios matter more than the absolute times.

use std::{
    io::Write as _,
    process::Command,
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures::StreamExt as _;
use object_store::{ObjectStore as _, aws::AmazonS3Builder, path::Path as ObjectPath};
use snug_revstore::{
    PgConfig, PgStore, Precondition, Principal, PutRequest, RevStore, StoreConfig, UserId,
};
use snug_s3::ObjectsConfig;
use snug_test_support::garage::Garage;

mod common;

use common::{median, ms, random_bytes, stream_of};

const MIB: usize = 1 << 20;
const IMAGE: usize = 64 * MIB;
const PAGE: usize = 4096;
const ROUNDS: usize = 5;

fn curl(garage: &Garage, args: &[&str]) -> Duration {
    let started = Instant::now();
    let out = Command::new("curl")
        // Garage wants the payload hash header; S3 allows an unsigned payload over any transport,
        // and curl then signs without hashing the 64 MiB first (the fair peer).
        .args(["--silent", "--show-error", "--fail"])
        .args([
            "-H",
            "x-amz-content-sha256: UNSIGNED-PAYLOAD",
            "--aws-sigv4",
        ])
        .arg(format!("aws:amz:{}:s3", garage.region()))
        .arg("--user")
        .arg(format!(
            "{}:{}",
            garage.access_key_id(),
            garage.secret_access_key()
        ))
        .args(args)
        .output()
        .expect("run curl");
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// Bytes of the objects under `prefix` in the bucket, and how many there are.
async fn bucket_bytes(garage: &Garage, prefix: &str) -> (u64, usize) {
    let store = AmazonS3Builder::new()
        .with_bucket_name(garage.bucket())
        .with_region(garage.region())
        .with_endpoint(garage.endpoint())
        .with_allow_http(true)
        .with_access_key_id(garage.access_key_id())
        .with_secret_access_key(garage.secret_access_key())
        .build()
        .expect("s3 client");
    let metas: Vec<_> = store
        .list(Some(&ObjectPath::from(prefix)))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .expect("list");
    (metas.iter().map(|m| m.size).sum(), metas.len())
}

fn main() {
    let Ok(url) = std::env::var("SNUG_TEST_POSTGRES_URL") else {
        eprintln!("objects benchmark skipped: SNUG_TEST_POSTGRES_URL is not set");
        return;
    };
    let Some(garage) = Garage::start_if_available() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let unique = std::process::id();
    let prefix = format!("bench-{unique}");
    let objects = ObjectsConfig::new(format!("s3://{}/{prefix}", garage.bucket())).with_env(
        garage
            .aws_env()
            .map(|(name, value)| (name.to_owned(), value)),
    );
    let pg = PgConfig {
        url,
        schema: Some(format!("revstore_bench_{unique}")),
        pool_size: 8,
    };
    let store = rt
        .block_on(PgStore::connect_with_objects(
            pg,
            objects.open().expect("the bucket"),
            StoreConfig {
                quota_bytes: 2 * IMAGE as u64,
                ..StoreConfig::default()
            },
        ))
        .expect("connect");
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let principal = Principal::new("bench").expect("principal");

    // Put: every round a new image (new bytes, so nothing deduplicates), for a new user.
    let mut store_put = Vec::new();
    let mut curl_put = Vec::new();
    let mut store_get = Vec::new();
    let mut curl_get = Vec::new();
    for round in 0..ROUNDS {
        let bytes = Bytes::from(random_bytes(round as u64 + 1, IMAGE));
        file.as_file().set_len(0).expect("truncate");
        (&file).write_all(&bytes).expect("write");
        let user = UserId::new(format!("bench-{round}")).expect("user");
        rt.block_on(store.provision_user(&user)).expect("provision");
        let started = Instant::now();
        rt.block_on(store.put(
            PutRequest {
                user: user.clone(),
                precondition: Precondition::MustNotExist,
                principal: principal.clone(),
                idempotency_key: None,
                expected_length: None,
                quota_bytes: None,
            },
            stream_of(&bytes),
        ))
        .expect("put");
        store_put.push(started.elapsed());
        let key = format!("{}/{}/direct/{round}", garage.endpoint(), garage.bucket());
        curl_put.push(curl(
            &garage,
            &["-T", &file.path().display().to_string(), &key],
        ));

        let started = Instant::now();
        let got = rt.block_on(async {
            let mut download = store.get(&user, &principal).await.expect("get");
            let mut n = 0usize;
            while let Some(piece) = download.body.next().await {
                n += piece.expect("piece").len();
            }
            n
        });
        store_get.push(started.elapsed());
        assert_eq!(got, IMAGE);
        curl_get.push(curl(&garage, &["-o", "/dev/null", &key]));
    }
    let (sp, cp, sg, cg) = (
        median(store_put),
        median(curl_put),
        median(store_get),
        median(curl_get),
    );
    println!(
        "put 64 MiB: PgStore+objects {:.0} ms, curl PUT {:.0} ms, ratio {:.2}x",
        ms(sp),
        ms(cp),
        sp.as_secs_f64() / cp.as_secs_f64()
    );
    println!(
        "get 64 MiB: PgStore+objects {:.0} ms, curl GET {:.0} ms, ratio {:.2}x",
        ms(sg),
        ms(cg),
        sg.as_secs_f64() / cg.as_secs_f64()
    );

    // 1% of the pages changed: what the next revision uploads to the bucket.
    let user = UserId::new("bench-delta").expect("user");
    rt.block_on(store.provision_user(&user)).expect("provision");
    let mut bytes = random_bytes(99, IMAGE);
    let base = rt
        .block_on(store.put(
            PutRequest {
                user: user.clone(),
                precondition: Precondition::MustNotExist,
                principal: principal.clone(),
                idempotency_key: None,
                expected_length: None,
                quota_bytes: None,
            },
            stream_of(&Bytes::from(bytes.clone())),
        ))
        .expect("base");
    let pages = IMAGE / PAGE;
    let changed = pages / 100;
    for k in 0..changed {
        let page = (k * 7919) % pages;
        bytes[page * PAGE] ^= 0xff;
    }
    let packs = format!("{prefix}/packs");
    let (before, objects_before) = rt.block_on(bucket_bytes(&garage, &packs));
    rt.block_on(store.put(
        PutRequest {
            user,
            precondition: Precondition::MustMatch(base.info.revision),
            principal,
            idempotency_key: None,
            expected_length: None,
            quota_bytes: None,
        },
        stream_of(&Bytes::from(bytes)),
    ))
    .expect("1% revision");
    let (after, objects_after) = rt.block_on(bucket_bytes(&garage, &packs));
    let uploaded = after - before;
    println!(
        "1% of the pages changed ({changed} of {pages}): uploaded {uploaded} bytes in {} object(s) = {:.2}% of the 64 MiB image",
        objects_after - objects_before,
        uploaded as f64 * 100.0 / IMAGE as f64
    );
}
