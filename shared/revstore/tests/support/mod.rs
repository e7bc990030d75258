//! Fixtures shared by the integration tests: one opener per backend, test images and bodies.

#![allow(dead_code, unreachable_pub)]

use std::{any::Any, io, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::Stream;
use snug_revstore::{
    Faults, ManualClock, MemStore, Precondition, Principal, PutError, PutOutcome, PutRequest,
    Retention, RevStore, SqliteStore, StoreConfig, Timestamp, UserId,
};

/// 2026-01-01T00:00:00Z, so that timestamps in failures are readable.
pub const T0: Timestamp = Timestamp::from_unix_millis(1_767_225_600_000);

/// Test chunk size: small, so that small images span many chunks.
pub const CHUNK: u32 = 1024;

/// What a case needs from its store's configuration.
#[derive(Clone, Debug)]
pub struct Tune {
    pub retention: Retention,
    pub quota: u64,
}

impl Default for Tune {
    fn default() -> Self {
        Self {
            retention: Retention {
                keep_newest: 2,
                grace: Duration::from_secs(60),
                orphan_after: Duration::from_secs(3600),
            },
            quota: 100_000,
        }
    }
}

/// An open store plus the handles a test steers it with.
pub struct Fixture<S> {
    pub store: S,
    pub clock: Arc<ManualClock>,
    pub faults: Faults,
    pub guard: Box<dyn Any + Send + Sync>,
}

pub fn config(tune: &Tune) -> (StoreConfig, Arc<ManualClock>, Faults) {
    let clock = Arc::new(ManualClock::new(T0));
    let faults = Faults::default();
    let config = StoreConfig {
        quota_bytes: tune.quota,
        chunk_size: CHUNK,
        retention: tune.retention.clone(),
        clock: clock.clone(),
        faults: faults.clone(),
        ..StoreConfig::default()
    };
    (config, clock, faults)
}

pub async fn mem(tune: Tune) -> Option<Fixture<MemStore>> {
    let (config, clock, faults) = config(&tune);
    Some(Fixture {
        store: MemStore::new(config),
        clock,
        faults,
        guard: Box::new(()),
    })
}

pub async fn sqlite(tune: Tune) -> Option<Fixture<SqliteStore>> {
    let (config, clock, faults) = config(&tune);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path(), config).expect("open sqlite store");
    Some(Fixture {
        store,
        clock,
        faults,
        guard: Box::new(dir),
    })
}

/// The PostgreSQL store in a fresh schema, or `None` when `SNUG_TEST_POSTGRES_URL` is not set.
#[cfg(feature = "postgres")]
pub async fn pg(tune: Tune) -> Option<Fixture<snug_revstore::PgStore>> {
    let Ok(url) = std::env::var("SNUG_TEST_POSTGRES_URL") else {
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL is not set");
        return None;
    };
    let (config, clock, faults) = config(&tune);
    let store = snug_revstore::PgStore::connect(pg_config(&url), config)
        .await
        .expect("connect to postgres");
    Some(Fixture {
        store,
        clock,
        faults,
        guard: Box::new(()),
    })
}

/// The PostgreSQL store with its bytes in a single-node Garage of its own (a real S3-compatible
/// store, started for this fixture and killed with it), or `None` when `SNUG_TEST_POSTGRES_URL`
/// is not set or there is no `garage` binary (see `snug_test_support::garage`).
#[cfg(feature = "postgres")]
pub async fn pg_objects(tune: Tune) -> Option<Fixture<snug_revstore::PgStore>> {
    let Ok(url) = std::env::var("SNUG_TEST_POSTGRES_URL") else {
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL is not set");
        return None;
    };
    let garage = snug_test_support::garage::Garage::start_if_available()?;
    let (config, clock, faults) = config(&tune);
    let store = snug_revstore::PgStore::connect_with_objects(
        pg_config(&url),
        objects_of(&garage, &format!("revstore-test-{}", unique()))
            .open()
            .expect("the bucket"),
        config,
    )
    .await
    .expect("connect to postgres with objects");
    Some(Fixture {
        store,
        clock,
        faults,
        guard: Box::new(garage),
    })
}

/// A fresh schema on the server at `url`.
#[cfg(feature = "postgres")]
pub fn pg_config(url: &str) -> snug_revstore::PgConfig {
    snug_revstore::PgConfig {
        url: url.to_owned(),
        schema: Some(format!("revstore_test_{}", unique())),
        pool_size: 16,
    }
}

/// The bucket of `garage`, under `prefix`.
#[cfg(feature = "postgres")]
pub fn objects_of(
    garage: &snug_test_support::garage::Garage,
    prefix: &str,
) -> snug_s3::ObjectsConfig {
    let env = garage
        .aws_env()
        .map(|(name, value)| (name.to_owned(), value));
    snug_s3::ObjectsConfig::new(format!("s3://{}/{prefix}", garage.bucket())).with_env(env)
}

pub fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}_{}_{}",
        std::process::id(),
        t % 1_000_000_000_000,
        N.fetch_add(1, Ordering::SeqCst)
    )
}

pub fn user(s: &str) -> UserId {
    UserId::new(s).expect("user id")
}

pub fn who(s: &str) -> Principal {
    Principal::new(s).expect("principal")
}

/// Deterministic pseudo-random bytes (xorshift64*), different per seed.
pub fn image(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The bytes as a stream of 1000-byte pieces: deliberately not a multiple of the chunk size.
pub fn body(bytes: &[u8]) -> impl Stream<Item = io::Result<Bytes>> + Send + use<> {
    let pieces: Vec<io::Result<Bytes>> = bytes
        .chunks(1000)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    futures::stream::iter(pieces)
}

pub async fn put<S: RevStore>(
    store: &S,
    u: &UserId,
    precondition: Precondition,
    bytes: &[u8],
) -> Result<PutOutcome, PutError> {
    let request = PutRequest {
        user: u.clone(),
        precondition,
        principal: who("device-a"),
        idempotency_key: None,
    };
    store.put(request, body(bytes)).await
}

pub async fn put_ok<S: RevStore>(
    store: &S,
    u: &UserId,
    precondition: Precondition,
    bytes: &[u8],
) -> PutOutcome {
    match put(store, u, precondition, bytes).await {
        Ok(o) => o,
        Err(e) => panic!("put failed: {e:?}"),
    }
}

pub async fn fetch<S: RevStore>(store: &S, u: &UserId) -> Vec<u8> {
    let download = store.get(u, &who("device-b")).await.expect("get");
    download.body.read_to_vec().await.expect("read body")
}

pub async fn assert_clean<S: RevStore>(store: &S) {
    let report = store.check_integrity().await.expect("integrity check");
    assert!(
        report.problems.is_empty(),
        "integrity problems: {:?}",
        report.problems
    );
}

/// A SQLite database header stamped with storage version (`user_version`) `version`, then
/// pseudo-random bytes up to `len`. The store reads only the header, so the rest need not be a
/// real database.
pub fn stamped(version: u32, len: usize) -> Vec<u8> {
    assert!(len >= 100, "a SQLite header is 100 bytes");
    let mut bytes = image(u64::from(version) + 1000, len);
    bytes[..16].copy_from_slice(b"SQLite format 3\0");
    bytes[60..64].copy_from_slice(&version.to_be_bytes());
    bytes
}

/// The bytes as a stream of pieces of `piece` bytes, so a header can arrive split.
pub fn body_in(bytes: &[u8], piece: usize) -> impl Stream<Item = io::Result<Bytes>> + Send + use<> {
    let pieces: Vec<io::Result<Bytes>> = bytes
        .chunks(piece.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    futures::stream::iter(pieces)
}
