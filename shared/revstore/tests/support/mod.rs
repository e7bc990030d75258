//! Fixtures shared by the integration tests: one opener per backend, test images and bodies.

#![allow(dead_code, unreachable_pub)]

use std::{any::Any, io, path::Path, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::{Stream, future::BoxFuture};
#[cfg(feature = "postgres")]
use object_store::ObjectStoreExt as _;
use snug_revstore::{
    Digest, Faults, ManualClock, MemStore, Precondition, Principal, PutError, PutOutcome,
    PutRequest, Retention, RevStore, SqliteStore, StoreConfig, Timestamp, UserId,
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
    /// `StoreConfig::staged_limit_bytes`.
    pub staged_limit: Option<u64>,
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
            staged_limit: None,
        }
    }
}

/// An open store plus the handles a test steers it with.
pub struct Fixture<S> {
    pub store: S,
    pub clock: Arc<ManualClock>,
    pub faults: Faults,
    pub guard: Box<dyn Any + Send + Sync>,
    /// Flips one byte of the stored bytes of a chunk, where the backend keeps them.
    pub damage: Damage,
    /// Counts the image bytes the backend holds at rest, wherever it keeps them.
    pub at_rest: AtRest,
    /// Searches everything the backend keeps for byte strings.
    pub scan: Scan,
}

/// Searches the store's actual storage for each needle: the memory store's state, the embedded
/// store's every file (after a WAL checkpoint), every row of every PostgreSQL table of the
/// store's schema, every object under the store's prefix. Returns where each needle was found,
/// one line per find (empty: none of them anywhere).
pub type Scan = Arc<dyn Fn(Vec<Vec<u8>>) -> BoxFuture<'static, Vec<String>> + Send + Sync>;

/// Where `haystack` (named `place`) holds any of the needles.
pub fn finds(place: &str, haystack: &[u8], needles: &[Vec<u8>]) -> Vec<String> {
    needles
        .iter()
        .enumerate()
        .filter(|(_, n)| !n.is_empty() && haystack.windows(n.len()).any(|w| w == &n[..]))
        .map(|(i, _)| format!("needle {i} in {place}"))
        .collect()
}

/// Every file under `root`, recursively.
pub fn files_under(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// Searches every file under `root` (the embedded store's directory, with the WAL included).
pub fn scan_dir(root: &Path, needles: &[Vec<u8>]) -> Vec<String> {
    files_under(root)
        .into_iter()
        .flat_map(|path| {
            let bytes = std::fs::read(&path).unwrap_or_default();
            finds(&path.display().to_string(), &bytes, needles)
        })
        .collect()
}

/// Searches every row of every table of `schema`, as text (a `bytea` shows as hex there, so
/// each needle is looked for both as hex and, when it is text, as itself).
#[cfg(feature = "postgres")]
pub async fn scan_pg(url: &str, schema: &str, needles: &[Vec<u8>]) -> Vec<String> {
    let client = pg_client(url, schema).await;
    let tables: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1",
            &[&schema],
        )
        .await
        .expect("tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!tables.is_empty(), "no tables in {schema}");
    let mut found = Vec::new();
    for table in tables {
        for row in client
            .query(&format!("SELECT t::text FROM {table} t"), &[])
            .await
            .expect("rows")
        {
            let text: String = row.get(0);
            let text = text.to_lowercase();
            for (i, needle) in needles.iter().enumerate() {
                let as_hex = hex::encode(needle);
                let as_text = std::str::from_utf8(needle).ok().map(str::to_lowercase);
                if text.contains(&as_hex) || as_text.is_some_and(|t| text.contains(&t)) {
                    found.push(format!("needle {i} in table {table}"));
                }
            }
        }
    }
    found
}

/// The image bytes a backend holds at rest: the sizes of its pack files (and of its files in
/// flight), its chunk rows or pack objects, its chunks in memory.
pub type AtRest = Arc<dyn Fn() -> BoxFuture<'static, u64> + Send + Sync>;

/// Flips one byte of the stored copy of the chunk with this address (a pack file, a row, a pack
/// object, the memory store's map), as a failing disk or a tampering operator would.
pub type Damage = Arc<dyn Fn(Digest) -> BoxFuture<'static, ()> + Send + Sync>;

pub fn config(tune: &Tune) -> (StoreConfig, Arc<ManualClock>, Faults) {
    let clock = Arc::new(ManualClock::new(T0));
    let faults = Faults::default();
    let config = StoreConfig {
        quota_bytes: tune.quota,
        staged_limit_bytes: tune.staged_limit,
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
    let store = MemStore::new(config);
    let (damaged, counted, scanned) = (store.clone(), store.clone(), store.clone());
    Some(Fixture {
        store,
        clock,
        faults,
        guard: Box::new(()),
        scan: Arc::new(move |needles| {
            let store = scanned.clone();
            Box::pin(async move {
                store
                    .dump()
                    .iter()
                    .enumerate()
                    .flat_map(|(i, held)| finds(&format!("held item {i}"), held, &needles))
                    .collect()
            })
        }),
        at_rest: Arc::new(move || {
            let store = counted.clone();
            Box::pin(async move { store.stats().await.expect("stats").chunk_bytes })
        }),
        damage: Arc::new(move |chunk| {
            let store = damaged.clone();
            Box::pin(async move {
                assert!(store.damage_chunk(&chunk), "no stored chunk {chunk}");
            })
        }),
    })
}

pub async fn sqlite(tune: Tune) -> Option<Fixture<SqliteStore>> {
    let (config, clock, faults) = config(&tune);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path(), config).expect("open sqlite store");
    let root = dir.path().to_owned();
    let (counted, scanned, checkpointed) = (root.clone(), root.clone(), store.clone());
    Some(Fixture {
        store,
        clock,
        faults,
        guard: Box::new(dir),
        scan: Arc::new(move |needles| {
            let (root, store) = (scanned.clone(), checkpointed.clone());
            Box::pin(async move {
                store.checkpoint().expect("checkpoint");
                scan_dir(&root, &needles)
            })
        }),
        damage: Arc::new(move |chunk| {
            let root = root.clone();
            Box::pin(async move { damage_sqlite_chunk(&root, &chunk) })
        }),
        at_rest: Arc::new(move || {
            let root = counted.clone();
            Box::pin(async move { sqlite_at_rest(&root) })
        }),
    })
}

/// The bytes of the embedded store's pack files, in place and in flight (`packs/`, `tmp/`).
pub fn sqlite_at_rest(root: &Path) -> u64 {
    ["packs", "tmp"]
        .iter()
        .filter_map(|dir| std::fs::read_dir(root.join(dir)).ok())
        .flatten()
        .map(|e| e.expect("entry").metadata().expect("metadata").len())
        .sum()
}

/// Flips a byte of `chunk` in the embedded store under `root`: its pack file and offset come from
/// the chunk index in `meta.sqlite`.
pub fn damage_sqlite_chunk(root: &Path, chunk: &Digest) {
    use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
    let meta = rusqlite::Connection::open_with_flags(
        root.join("meta.sqlite"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open meta.sqlite");
    let (pack, offset): (String, i64) = meta
        .query_row(
            "SELECT p.name, c.offset FROM chunks c JOIN packs p ON p.id = c.pack_id WHERE c.hash = ?1",
            [chunk.as_bytes().as_slice()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the chunk's location");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(root.join("packs").join(pack))
        .expect("open the pack");
    let at = offset as u64 + 7;
    let mut byte = [0u8];
    file.seek(SeekFrom::Start(at)).expect("seek");
    file.read_exact(&mut byte).expect("read");
    byte[0] ^= 0x01;
    file.seek(SeekFrom::Start(at)).expect("seek");
    file.write_all(&byte).expect("write");
    file.sync_all().expect("sync");
}

/// The PostgreSQL store in a fresh schema, or `None` when `SNUG_TEST_POSTGRES_URL` is not set.
#[cfg(feature = "postgres")]
pub async fn pg(tune: Tune) -> Option<Fixture<snug_revstore::PgStore>> {
    let Ok(url) = std::env::var("SNUG_TEST_POSTGRES_URL") else {
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL is not set");
        return None;
    };
    let (config, clock, faults) = config(&tune);
    let pg = pg_config(&url);
    let schema = pg.schema.clone().expect("a schema of its own");
    let store = snug_revstore::PgStore::connect(pg, config)
        .await
        .expect("connect to postgres");
    let (scan_url, scan_schema) = (url.clone(), schema.clone());
    Some(Fixture {
        store,
        clock,
        faults,
        guard: Box::new(()),
        scan: Arc::new(move |needles| {
            let (url, schema) = (scan_url.clone(), scan_schema.clone());
            Box::pin(async move { scan_pg(&url, &schema, &needles).await })
        }),
        damage: {
            let (url, schema) = (url.clone(), schema.clone());
            Arc::new(move |chunk| {
                let (url, schema) = (url.clone(), schema.clone());
                Box::pin(async move {
                    let sql = "UPDATE chunks SET data = set_byte(data, 7, get_byte(data, 7) # 1) WHERE hash = $1";
                    let changed = pg_execute(&url, &schema, sql, chunk).await;
                    assert_eq!(changed, 1, "no chunk row {chunk}");
                })
            })
        },
        at_rest: Arc::new(move || {
            let (url, schema) = (url.clone(), schema.clone());
            Box::pin(async move {
                let client = pg_client(&url, &schema).await;
                let row = client
                    .query_one(
                        "SELECT COALESCE(SUM(length(data)), 0)::BIGINT FROM chunks",
                        &[],
                    )
                    .await
                    .expect("sum");
                row.get::<_, i64>(0) as u64
            })
        }),
    })
}

/// A connection to the server at `url`, in `schema`.
#[cfg(feature = "postgres")]
pub async fn pg_client(url: &str, schema: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to postgres");
    tokio::spawn(connection);
    client
        .batch_execute(&format!("SET search_path TO {schema}"))
        .await
        .expect("search_path");
    client
}

/// Runs one statement with the chunk address as `$1` in `schema` of the server at `url`.
#[cfg(feature = "postgres")]
pub async fn pg_execute(url: &str, schema: &str, sql: &str, chunk: Digest) -> u64 {
    pg_client(url, schema)
        .await
        .execute(sql, &[&chunk.as_bytes().as_slice()])
        .await
        .expect("statement")
}

/// The pack object and offset holding `chunk` in `schema` of the server at `url`.
#[cfg(feature = "postgres")]
pub async fn pg_chunk_location(url: &str, schema: &str, chunk: Digest) -> (String, u64) {
    let client = pg_client(url, schema).await;
    let row = client
        .query_one(
            "SELECT p.name, c.pack_offset FROM chunks c JOIN packs p ON p.id = c.pack_id WHERE c.hash = $1",
            &[&chunk.as_bytes().as_slice()],
        )
        .await
        .expect("the chunk's pack");
    (row.get(0), row.get::<_, i64>(1) as u64)
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
    let pg = pg_config(&url);
    let schema = pg.schema.clone().expect("a schema of its own");
    let prefix = format!("revstore-test-{}", unique());
    let store = snug_revstore::PgStore::connect_with_objects(
        pg,
        objects_of(&garage, &prefix).open().expect("the bucket"),
        config,
    )
    .await
    .expect("connect to postgres with objects");
    let bucket = raw_bucket(&garage);
    let (counted, listed) = (bucket.clone(), prefix.clone());
    let (scan_url, scan_schema, scan_bucket, scan_prefix) =
        (url.clone(), schema.clone(), bucket.clone(), prefix.clone());
    Some(Fixture {
        store,
        clock,
        faults,
        scan: Arc::new(move |needles| {
            let (url, schema, bucket, prefix) = (
                scan_url.clone(),
                scan_schema.clone(),
                scan_bucket.clone(),
                scan_prefix.clone(),
            );
            Box::pin(async move {
                use futures::StreamExt as _;
                let mut found = scan_pg(&url, &schema, &needles).await;
                let listed: Vec<_> = bucket
                    .list(Some(&object_store::path::Path::from(prefix)))
                    .collect()
                    .await;
                for meta in listed {
                    let meta = meta.expect("list");
                    let bytes = bucket
                        .get(&meta.location)
                        .await
                        .expect("get")
                        .bytes()
                        .await
                        .expect("read");
                    found.extend(finds(meta.location.as_ref(), &bytes, &needles));
                }
                found
            })
        }),
        at_rest: Arc::new(move || {
            let (bucket, prefix) = (counted.clone(), listed.clone());
            Box::pin(async move {
                use futures::StreamExt as _;
                let listed: Vec<_> = bucket
                    .list(Some(&object_store::path::Path::from(prefix)))
                    .collect()
                    .await;
                listed.into_iter().map(|m| m.expect("list").size).sum()
            })
        }),
        damage: Arc::new(move |chunk| {
            let (url, schema, prefix, bucket) =
                (url.clone(), schema.clone(), prefix.clone(), bucket.clone());
            Box::pin(async move {
                let (pack, offset) = pg_chunk_location(&url, &schema, chunk).await;
                let key = object_store::path::Path::from(format!("{prefix}/packs/{pack}"));
                let mut bytes = bucket
                    .get(&key)
                    .await
                    .expect("get the pack")
                    .bytes()
                    .await
                    .expect("read the pack")
                    .to_vec();
                bytes[offset as usize + 7] ^= 0x01;
                bucket
                    .put(&key, object_store::PutPayload::from(bytes))
                    .await
                    .expect("overwrite the pack");
            })
        }),
        guard: Box::new(garage),
    })
}

/// A raw S3 client on the node's bucket, for what the store must not see coming: objects
/// deleted or rewritten behind its back.
#[cfg(feature = "postgres")]
pub fn raw_bucket(
    garage: &snug_test_support::garage::Garage,
) -> Arc<dyn object_store::ObjectStore> {
    let store = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(garage.bucket())
        .with_endpoint(garage.endpoint())
        .with_region(garage.region())
        .with_access_key_id(garage.access_key_id())
        .with_secret_access_key(garage.secret_access_key())
        .with_allow_http(true)
        .build()
        .expect("raw S3 client");
    Arc::new(store)
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
        expected_length: Some(bytes.len() as u64),
        quota_bytes: None,
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

/// Reads a download of the user's current image (or of `revision`) piece by piece. Returns the
/// bytes yielded before the stream ended and how it ended: `Ok` at its end, or the error it ended
/// with (also when the store refused the download at once). Asserts that nothing follows an error.
pub async fn drain<S: RevStore>(
    store: &S,
    u: &UserId,
    revision: Option<&snug_revstore::Revision>,
) -> (Vec<u8>, Result<(), snug_revstore::StorageError>) {
    use futures::StreamExt as _;
    let download = match revision {
        None => store.get(u, &who("device-b")).await,
        Some(r) => store.get_revision(u, r, &who("device-b")).await,
    };
    let mut body = match download {
        Ok(download) => download.body,
        Err(snug_revstore::ReadError::Storage(e)) => return (Vec::new(), Err(e)),
        Err(e) => panic!("get: {e:?}"),
    };
    let mut got = Vec::new();
    while let Some(piece) = body.next().await {
        match piece {
            Ok(bytes) => got.extend_from_slice(&bytes),
            Err(e) => {
                assert!(body.next().await.is_none(), "a piece after the error");
                return (got, Err(e));
            }
        }
    }
    (got, Ok(()))
}

/// A download of damaged bytes (the current image, or `revision`): ends in `STORAGE_CORRUPT`,
/// having handed on only a prefix of the true image. Returns how much it handed on.
pub async fn assert_refuses_damage<S: RevStore>(
    store: &S,
    u: &UserId,
    revision: Option<&snug_revstore::Revision>,
    truth: &[u8],
) -> usize {
    let (got, end) = drain(store, u, revision).await;
    assert!(
        got.len() < truth.len() && got[..] == truth[..got.len()],
        "the download handed on bytes that are not a prefix of the image ({} of {} bytes)",
        got.len(),
        truth.len()
    );
    match end {
        Err(e @ snug_revstore::StorageError::Corrupt { .. }) => {
            assert_eq!(e.reason(), &snug_reasons::sync::STORAGE_CORRUPT);
        }
        other => panic!(
            "a download of damaged bytes ended with {other:?} after {} of {} bytes",
            got.len(),
            truth.len()
        ),
    }
    got.len()
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
