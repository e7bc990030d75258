//! Faults of the PostgreSQL+objects store's backing services, each against the real thing
//! (issue 19 point 3):
//!
//! - the object store killed (SIGKILL) while a put streams: the put fails as
//!   `STORAGE_UNAVAILABLE` within seconds, the current revision is unchanged and its bytes intact
//!   once the object store is back, and the same put then succeeds;
//! - a pack object missing, or overwritten with one byte changed: a download ends in
//!   `STORAGE_CORRUPT` after handing on only a correct prefix of the image, never a wrong byte,
//!   and the integrity check names the image;
//! - PostgreSQL restarted between two puts (a private throwaway cluster): the pool reconnects,
//!   and a retry of a put that met the restart succeeds over an intact history.
//!
//! Skips visibly without `SNUG_TEST_POSTGRES_URL` or a `garage` binary (the restart case: without
//! PostgreSQL's server binaries, `SNUG_TEST_PG_BIN` or Debian's `/usr/lib/postgresql/*/bin`),
//! unless `SNUG_REQUIRE_GARAGE=1` (`.ci/run`), where a missing piece fails the test.

#![cfg(feature = "postgres")]

mod support;

use std::{
    path::PathBuf,
    process::Command,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures::StreamExt as _;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use snug_revstore::{
    PACK_BYTES, PgConfig, PgStore, Precondition, PutError, PutRequest, RevStore, StorageError,
    StoreConfig,
};
use snug_s3::ObjectsConfig;
use snug_test_support::garage::Garage;
use support::*;

const MIB: usize = 1 << 20;

/// The configuration these tests open stores with: room for large images, and a realistic chunk
/// size so a 48 MiB image is thousands of chunks, not tens of thousands.
fn big_config() -> StoreConfig {
    let (config, _, _) = support::config(&Tune {
        quota: 256 << 20,
        ..Tune::default()
    });
    StoreConfig {
        chunk_size: 64 << 10,
        ..config
    }
}

fn required() -> bool {
    std::env::var("SNUG_REQUIRE_GARAGE").is_ok_and(|v| v == "1")
}

/// The PostgreSQL URL, or `None` (after saying so) when it is not set.
fn postgres_url() -> Option<String> {
    let url = std::env::var("SNUG_TEST_POSTGRES_URL").ok();
    if url.is_none() {
        eprintln!("SKIPPED: SNUG_TEST_POSTGRES_URL is not set");
    }
    url
}

async fn open(url: &str, objects: &ObjectsConfig) -> PgStore {
    let bucket = objects.open().expect("the bucket");
    PgStore::connect_with_objects(pg_config(url), bucket, big_config())
        .await
        .expect("connect to postgres with objects")
}

fn request(u: &snug_revstore::UserId, precondition: Precondition) -> PutRequest {
    PutRequest {
        user: u.clone(),
        precondition,
        principal: who("device-a"),
        idempotency_key: None,
        expected_length: None,
        quota_bytes: None,
    }
}

/// The pack objects under `prefix`, with their sizes.
async fn packs(bucket: &dyn ObjectStore, prefix: &str) -> Vec<(object_store::path::Path, u64)> {
    let listed: Vec<_> = bucket
        .list(Some(&object_store::path::Path::from(format!(
            "{prefix}/packs"
        ))))
        .collect()
        .await;
    listed
        .into_iter()
        .map(|meta| {
            let meta = meta.expect("list packs");
            (meta.location, meta.size)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_object_store_killed_mid_put_fails_it_cleanly_and_a_retry_succeeds() {
    let Some(url) = postgres_url() else { return };
    let Some(garage) = Garage::start_if_available() else {
        return;
    };
    let objects = objects_of(&garage, &format!("faults-{}", unique()));
    let garage = Arc::new(Mutex::new(garage));
    let store = open(&url, &objects).await;
    let u = user("killed-mid-put");
    store.provision_user(&u).await.expect("provision");

    let first = image(1, 3 * MIB);
    let acknowledged = put_ok(&store, &u, Precondition::MustNotExist, &first).await;

    // 48 MiB: three full packs. The stream kills the object store once 20 MiB went by, so the
    // first pack is uploaded (or uploading) and the rest can only fail.
    let big = image(2, 48 * MIB);
    assert!(big.len() >= 3 * PACK_BYTES);
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let sent = Arc::new(AtomicUsize::new(0));
    let pieces: Vec<Bytes> = big.chunks(MIB).map(Bytes::copy_from_slice).collect();
    let body = {
        let (garage, killed_at, sent) = (garage.clone(), killed_at.clone(), sent.clone());
        futures::stream::iter(pieces).map(move |piece| {
            if sent.fetch_add(piece.len(), Ordering::SeqCst) >= 20 * MIB {
                let mut killed = killed_at.lock().expect("lock");
                if killed.is_none() {
                    garage.lock().expect("lock").stop();
                    *killed = Some(Instant::now());
                }
            }
            Ok::<_, std::io::Error>(piece)
        })
    };
    let precondition = Precondition::MustMatch(acknowledged.info.revision.clone());
    let err = store
        .put(request(&u, precondition.clone()), body)
        .await
        .expect_err("a put whose object store died under it");
    let killed = killed_at
        .lock()
        .expect("lock")
        .expect("the stream killed the object store");
    let took = killed.elapsed();
    assert!(
        matches!(err, PutError::Storage(StorageError::Unavailable(_))),
        "{err:?}"
    );
    assert_eq!(err.reason(), &snug_reasons::sync::STORAGE_UNAVAILABLE);
    assert!(
        took < Duration::from_secs(30),
        "the put took {took:?} to fail after the object store died"
    );
    eprintln!("the put failed {took:?} after the object store was killed: {err}");

    // Nothing acknowledged lost, nothing torn: the pointer (in PostgreSQL) did not move, and once
    // the object store is back the acknowledged revision downloads byte-identical.
    let head = store.head(&u).await.expect("head");
    assert_eq!(head.revision, acknowledged.info.revision);
    garage.lock().expect("lock").start();
    assert_eq!(fetch(&store, &u).await, first, "the acknowledged image");
    assert_clean(&store).await;

    // The same put succeeds now.
    let retried = put_ok(&store, &u, precondition, &big).await;
    assert_eq!(
        store.head(&u).await.expect("head").revision,
        retried.info.revision
    );
    assert!(
        fetch(&store, &u).await == big,
        "the retried image downloads byte-identical"
    );
    let history = store.list_revisions(&u, 10).await.expect("history");
    let revisions: Vec<_> = history.iter().map(|r| r.revision.clone()).collect();
    assert_eq!(
        revisions,
        [retried.info.revision, acknowledged.info.revision]
    );
    assert_clean(&store).await;
}

/// A 20 MiB image in a store of its own: two packs, 16 MiB and 4 MiB. Returns the store, the
/// user, the image, the node and the bucket prefix.
async fn two_pack_image(
    url: &str,
    garage: &Garage,
    seed: u64,
) -> (PgStore, snug_revstore::UserId, Vec<u8>, String) {
    let prefix = format!("faults-{}", unique());
    let store = open(url, &objects_of(garage, &prefix)).await;
    let u = user("damaged");
    store.provision_user(&u).await.expect("provision");
    let bytes = image(seed, 20 * MIB);
    put_ok(&store, &u, Precondition::MustNotExist, &bytes).await;
    (store, u, bytes, prefix)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_pack_object_is_corrupt_never_a_short_image() {
    let Some(url) = postgres_url() else { return };
    let Some(garage) = Garage::start_if_available() else {
        return;
    };
    let (store, u, bytes, prefix) = two_pack_image(&url, &garage, 3).await;
    let bucket = raw_bucket(&garage);
    let mut listed = packs(bucket.as_ref(), &prefix).await;
    listed.sort_by_key(|(_, size)| *size);
    assert_eq!(listed.len(), 2, "{listed:?}");
    // The smaller pack holds the image's tail: a download must fail there, not end short.
    let (tail, _) = listed[0].clone();
    let kept = bucket
        .get(&tail)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("read");
    bucket.delete(&tail).await.expect("delete the tail pack");

    let handed_on = assert_refuses_damage(&store, &u, None, &bytes).await;
    eprintln!(
        "missing tail pack: {handed_on} of {} bytes handed on, then STORAGE_CORRUPT",
        bytes.len()
    );
    let report = store.check_integrity().await.expect("integrity check");
    assert!(
        !report.problems.is_empty(),
        "the missing pack goes unreported"
    );
    eprintln!("integrity: {:?}", report.problems);

    // The object back: the same image downloads whole, and the check is clean.
    bucket
        .put(&tail, PutPayload::from(kept))
        .await
        .expect("put the pack back");
    assert!(fetch(&store, &u).await == bytes);
    assert_clean(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_object_with_one_byte_changed_is_corrupt_never_wrong_bytes() {
    let Some(url) = postgres_url() else { return };
    let Some(garage) = Garage::start_if_available() else {
        return;
    };
    let (store, u, bytes, prefix) = two_pack_image(&url, &garage, 4).await;
    let bucket = raw_bucket(&garage);
    let mut listed = packs(bucket.as_ref(), &prefix).await;
    listed.sort_by_key(|(_, size)| *size);
    assert_eq!(listed.len(), 2, "{listed:?}");
    // The larger pack holds the image's first 16 MiB; one byte in its middle changes, so the
    // bytes before it are good and a download may hand them on, but not the byte itself.
    let (head_pack, size) = listed[1].clone();
    let original = bucket
        .get(&head_pack)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("read");
    assert_eq!(original.len() as u64, size);
    let mut damaged = original.to_vec();
    let at = damaged.len() / 2 + 12_345;
    damaged[at] ^= 0x01;
    bucket
        .put(&head_pack, PutPayload::from(damaged))
        .await
        .expect("overwrite the pack");

    let handed_on = assert_refuses_damage(&store, &u, None, &bytes).await;
    assert!(
        handed_on <= at,
        "{handed_on} bytes handed on, past the changed byte at {at}"
    );
    eprintln!("one byte changed at {at}: {handed_on} bytes handed on, then STORAGE_CORRUPT");
    let report = store.check_integrity().await.expect("integrity check");
    assert!(
        !report.problems.is_empty(),
        "the damaged pack goes unreported"
    );
    eprintln!("integrity: {:?}", report.problems);

    bucket
        .put(&head_pack, PutPayload::from(original))
        .await
        .expect("restore the pack");
    assert!(fetch(&store, &u).await == bytes);
    assert_clean(&store).await;
}

/// A PostgreSQL cluster of this test's own on a free loopback port, stopped (immediately) and
/// removed on drop.
struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

impl Cluster {
    /// The server binaries: `SNUG_TEST_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`.
    fn bin() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("SNUG_TEST_PG_BIN") {
            return Some(PathBuf::from(dir));
        }
        let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let major = entry.file_name().to_str()?.parse().ok()?;
                let bin = entry.path().join("bin");
                bin.join("initdb").is_file().then_some((major, bin))
            })
            .collect();
        found.sort();
        found.pop().map(|(_, bin)| bin)
    }

    fn start(bin: PathBuf) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("snug-faults-pg-")
            .tempdir()
            .expect("cluster dir");
        let root = is_root();
        if root {
            run(Command::new("chown").arg("postgres").arg(dir.path()));
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let cluster = Self { bin, dir, port };
        cluster.pg(
            "initdb",
            &[
                "--pgdata",
                &cluster.data(),
                "--username=postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-instructions",
            ],
        );
        cluster.ctl("start");
        cluster
    }

    fn data(&self) -> String {
        self.dir.path().join("data").to_string_lossy().into_owned()
    }

    fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl start` or `pg_ctl restart -m fast` (waiting until it serves).
    fn ctl(&self, action: &str) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("server.log");
        let mut args = vec![
            "--pgdata".to_owned(),
            self.data(),
            "--log".to_owned(),
            log.to_string_lossy().into_owned(),
            "--wait".to_owned(),
            "--timeout=60".to_owned(),
            "--options".to_owned(),
            options,
            action.to_owned(),
        ];
        if action == "restart" {
            args.extend(["-m".to_owned(), "fast".to_owned()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.pg("pg_ctl", &args);
    }

    /// Runs a server binary as the cluster's owner (`postgres` when this process is root).
    fn pg(&self, program: &str, args: &[&str]) {
        let program = self.bin.join(program);
        let output = if is_root() {
            run(Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&program)
                .args(args))
        } else {
            run(Command::new(&program).args(args))
        };
        assert!(
            output.status.success(),
            "{} {args:?}: {output:?}\nserver log:\n{}",
            program.display(),
            std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let mut command = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(pg_ctl);
            c
        } else {
            Command::new(pg_ctl)
        };
        let _ = command
            .args(["--pgdata", &self.data(), "stop", "-m", "immediate"])
            .output();
    }
}

fn run(command: &mut Command) -> std::process::Output {
    command
        .output()
        .unwrap_or_else(|err| panic!("run {command:?}: {err}"))
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// Puts until a put is accepted; every failure on the way must be the storage being
/// unavailable (a connection the restart closed), and the retries are few.
async fn put_retrying(
    store: &PgStore,
    u: &snug_revstore::UserId,
    precondition: Precondition,
    bytes: &[u8],
) -> (snug_revstore::PutOutcome, usize) {
    for attempt in 0..5 {
        match put(store, u, precondition.clone(), bytes).await {
            Ok(outcome) => return (outcome, attempt),
            Err(err @ PutError::Storage(StorageError::Unavailable(_))) => {
                eprintln!("attempt {attempt} after the restart: {err}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(err) => panic!("a put after the restart failed with {err:?}"),
        }
    }
    panic!("no put succeeded within 5 attempts after PostgreSQL restarted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_between_two_puts_loses_nothing_and_a_retry_succeeds() {
    let Some(bin) = Cluster::bin() else {
        assert!(
            !required(),
            "SNUG_REQUIRE_GARAGE=1 (CI) but no PostgreSQL server binaries: set SNUG_TEST_PG_BIN \
             or install Debian's postgresql (.ci/run does)"
        );
        eprintln!(
            "SKIPPED: no PostgreSQL server binaries (SNUG_TEST_PG_BIN, /usr/lib/postgresql/*/bin)"
        );
        return;
    };
    let Some(garage) = Garage::start_if_available() else {
        return;
    };
    let cluster = Cluster::start(bin);
    let config = PgConfig {
        url: cluster.url(),
        schema: Some("faults".to_owned()),
        pool_size: 4,
    };
    let objects = objects_of(&garage, &format!("faults-{}", unique()));
    let store =
        PgStore::connect_with_objects(config, objects.open().expect("the bucket"), big_config())
            .await
            .expect("connect");
    let u = user("restarted");
    store.provision_user(&u).await.expect("provision");
    let first = image(5, 2 * MIB);
    let one = put_ok(&store, &u, Precondition::MustNotExist, &first).await;

    let restart = Instant::now();
    cluster.ctl("restart");
    eprintln!("PostgreSQL restarted in {:?}", restart.elapsed());

    // The same store (its pool's connections all closed by the restart).
    let second = image(6, 2 * MIB);
    let (two, failed) = put_retrying(
        &store,
        &u,
        Precondition::MustMatch(one.info.revision.clone()),
        &second,
    )
    .await;
    eprintln!("the put after the restart succeeded after {failed} failed attempt(s)");
    assert!(!two.replayed);
    let history = store.list_revisions(&u, 10).await.expect("history");
    let revisions: Vec<_> = history.iter().map(|r| r.revision.clone()).collect();
    assert_eq!(revisions, [two.info.revision.clone(), one.info.revision]);
    assert_eq!(fetch(&store, &u).await, second);
    assert_clean(&store).await;
}
