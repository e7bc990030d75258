//! A child process doing puts in a loop is SIGKILLed at random points, again and again; after each
//! kill the store must reopen with no torn image, the pointer at an acknowledged revision (or at
//! the one whose put was in flight), and every crashed put's leftovers reclaimable after grace.
//! It runs against every durable backend: the embedded store, PostgreSQL, and PostgreSQL with its
//! bytes in a (real, single-node Garage) object store.
//!
//! The child is this test binary re-invoked with `SNUG_REVSTORE_CRASH_CHILD` naming the store
//! (a [`Target`], tab-separated); it prints `ACK <revision>` after each put returns, before
//! starting the next.

mod support;

use std::{
    collections::HashSet,
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use snug_revstore::{
    AnyStore, Clock, ManualClock, Precondition, ReadError, RevStore, SqliteStore, StoreConfig,
    SystemClock,
};
use support::*;

const CHILD_ENV: &str = "SNUG_REVSTORE_CRASH_CHILD";
const ITERATIONS: u64 = 8;

/// Which store a run crashes, as the parent tells the child.
#[derive(Clone, Debug)]
enum Target {
    Sqlite(std::path::PathBuf),
    /// PostgreSQL (URL, schema), with its bytes in rows or, with an object store URL and its
    /// options, in that bucket.
    #[cfg(feature = "postgres")]
    Postgres {
        url: String,
        schema: String,
        objects: Option<(String, Vec<(String, String)>)>,
    },
}

impl Target {
    fn encode(&self) -> String {
        match self {
            Target::Sqlite(dir) => format!("sqlite\t{}", dir.display()),
            #[cfg(feature = "postgres")]
            Target::Postgres {
                url,
                schema,
                objects,
            } => {
                let mut out = format!("postgres\t{url}\t{schema}");
                if let Some((bucket, options)) = objects {
                    out.push_str(&format!("\t{bucket}"));
                    for (k, v) in options {
                        out.push_str(&format!("\t{k}={v}"));
                    }
                }
                out
            }
        }
    }

    fn decode(spec: &str) -> Self {
        let mut fields = spec.split('\t');
        match fields.next() {
            Some("sqlite") => Target::Sqlite(fields.next().expect("dir").into()),
            #[cfg(feature = "postgres")]
            Some("postgres") => {
                let url = fields.next().expect("url").to_owned();
                let schema = fields.next().expect("schema").to_owned();
                let objects = fields.next().map(|bucket| {
                    let options = fields
                        .map(|kv| {
                            let (k, v) = kv.split_once('=').expect("k=v");
                            (k.to_owned(), v.to_owned())
                        })
                        .collect();
                    (bucket.to_owned(), options)
                });
                Target::Postgres {
                    url,
                    schema,
                    objects,
                }
            }
            other => panic!("unknown crash target {other:?}"),
        }
    }

    async fn open(&self, config: StoreConfig) -> AnyStore {
        match self {
            Target::Sqlite(dir) => {
                // The parent's store, dropped just before, lets go of the directory's lock once
                // its background work (a reclamation pass, a journal fold) has ended: moments.
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                loop {
                    match SqliteStore::open(dir, config.clone()) {
                        Ok(store) => break AnyStore::Sqlite(store),
                        Err(snug_revstore::OpenError::Locked)
                            if std::time::Instant::now() < deadline =>
                        {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Err(err) => panic!("open the embedded store: {err:?}"),
                    }
                }
            }
            #[cfg(feature = "postgres")]
            Target::Postgres {
                url,
                schema,
                objects,
            } => {
                let pg = snug_revstore::PgConfig {
                    url: url.clone(),
                    schema: Some(schema.clone()),
                    pool_size: 4,
                };
                let store = match objects {
                    None => snug_revstore::PgStore::connect(pg, config).await,
                    Some((bucket, options)) => {
                        let mut objects = snug_s3::ObjectsConfig::new(bucket.clone());
                        for (k, v) in options {
                            objects = objects.with_option(k, v.clone());
                        }
                        let bucket = objects.open().expect("the bucket");
                        snug_revstore::PgStore::connect_with_objects(pg, bucket, config).await
                    }
                };
                AnyStore::Postgres(store.expect("connect to postgres"))
            }
        }
    }
}

fn child(target: &Target) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let store = target.open(StoreConfig::default()).await;
        let u = user("crash");
        store.provision_user(&u).await.expect("provision");
        let mut stdout = std::io::stdout();
        writeln!(stdout, "READY")
            .and_then(|_| stdout.flush())
            .expect("stdout");
        let seed = std::process::id() as u64;
        let mut bytes = image(seed, 2 << 20);
        for i in 0u64.. {
            let precondition = match store.head(&u).await {
                Ok(info) => Precondition::MustMatch(info.revision),
                Err(ReadError::NotFound) => Precondition::MustNotExist,
                Err(e) => panic!("head: {e:?}"),
            };
            // Rewrite a few "pages" so that every put has new chunks to publish.
            for k in 0..8u64 {
                let at = ((i * 131 + k * 977) as usize * 4096) % bytes.len();
                bytes[at] = bytes[at].wrapping_add(1);
            }
            let outcome = put_ok(&store, &u, precondition, &bytes).await;
            writeln!(stdout, "ACK {}", outcome.info.revision)
                .and_then(|_| stdout.flush())
                .expect("stdout");
        }
    });
}

fn random_delay(iteration: u64) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(7);
    Duration::from_millis(30 + (u64::from(nanos) ^ iteration.wrapping_mul(0x9E37)) % 400)
}

/// Every test of this binary is a child when the parent says so.
fn as_child() -> bool {
    match std::env::var(CHILD_ENV) {
        Ok(spec) => {
            child(&Target::decode(&spec));
            true
        }
        Err(_) => false,
    }
}

#[test]
fn sigkill_during_puts_loses_nothing_and_tears_nothing() {
    if as_child() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target::Sqlite(dir.path().to_owned());
    let (rt, _) = crash_loop(
        "sigkill_during_puts_loses_nothing_and_tears_nothing",
        &target,
    );
    sqlite_orphans_are_reclaimed(&rt, dir.path());
}

#[cfg(feature = "postgres")]
#[test]
fn sigkill_during_puts_on_postgres() {
    if as_child() {
        return;
    }
    let Ok(url) = std::env::var("SNUG_TEST_POSTGRES_URL") else {
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL is not set");
        return;
    };
    let target = Target::Postgres {
        url,
        schema: format!("revstore_crash_{}", unique()),
        objects: None,
    };
    let (rt, store) = crash_loop("sigkill_during_puts_on_postgres", &target);
    postgres_orphans_are_reclaimed(&rt, &target, store);
}

#[cfg(feature = "postgres")]
#[test]
fn sigkill_during_puts_on_postgres_with_objects() {
    if as_child() {
        return;
    }
    let Ok(url) = std::env::var("SNUG_TEST_POSTGRES_URL") else {
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL is not set");
        return;
    };
    let Some(garage) = snug_test_support::garage::Garage::start_if_available() else {
        return;
    };
    let objects = objects_of(&garage, &format!("crash-{}", unique()));
    let target = Target::Postgres {
        url,
        schema: format!("revstore_crash_{}", unique()),
        objects: Some((
            objects.url.clone(),
            objects.options.clone().into_iter().collect(),
        )),
    };
    let (rt, store) = crash_loop("sigkill_during_puts_on_postgres_with_objects", &target);
    postgres_orphans_are_reclaimed(&rt, &target, store);
}

/// Kills a child doing puts on `target` [`ITERATIONS`] times, checking the store after each
/// kill; returns the runtime and the store as last reopened.
fn crash_loop(test: &str, target: &Target) -> (tokio::runtime::Runtime, AnyStore) {
    let exe = std::env::current_exe().expect("test binary");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut all_acked: Vec<String> = Vec::new();
    for iteration in 0..ITERATIONS {
        let mut child = Command::new(&exe)
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, target.encode())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let acked = Arc::new(Mutex::new(Vec::<String>::new()));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let reader = {
            let acked = acked.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    // libtest prints its own "test … " prefix on the first line.
                    if line.ends_with("READY") {
                        let _ = ready_tx.send(());
                    } else if let Some(at) = line.find("ACK ") {
                        acked
                            .lock()
                            .expect("acked")
                            .push(line[at + 4..].trim().to_owned());
                    }
                }
            })
        };
        ready_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("child ready");
        std::thread::sleep(random_delay(iteration));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        reader.join().expect("reader");
        let acked = acked.lock().expect("acked").clone();
        all_acked.extend(acked);

        // Reopen as the next process would, and check.
        let store = rt.block_on(target.open(StoreConfig::default()));
        rt.block_on(async {
            assert_clean(&store).await;
            let u = user("crash");
            let history = store.list_revisions(&u, 1_000_000).await.expect("history");
            let in_history: HashSet<String> = history.iter().map(|r| r.revision.to_string()).collect();
            for rev in &all_acked {
                assert!(in_history.contains(rev), "acknowledged revision {rev} was lost");
            }
            if let Some(last) = all_acked.last() {
                let head = store.head(&u).await.expect("head");
                let at_last = head.revision.to_string() == *last;
                let in_flight = head.base.as_ref().map(|b| b.to_string()).as_ref() == Some(last)
                    && !all_acked.contains(&head.revision.to_string());
                assert!(at_last || in_flight, "pointer {} is neither the last acknowledged revision {last} nor its in-flight successor", head.revision);
                if in_flight {
                    // The write landed but its answer was lost with the process; count it as
                    // acknowledged from here on, as a retrying client would learn.
                    all_acked.push(head.revision.to_string());
                }
            }
        });
        eprintln!(
            "iteration {iteration}: {} acknowledged so far",
            all_acked.len()
        );
    }
    assert!(
        all_acked.len() >= 2,
        "the child made progress ({} puts)",
        all_acked.len()
    );
    let store = rt.block_on(target.open(StoreConfig::default()));
    (rt, store)
}

/// A store as it is three days after the crashes: past every grace period.
fn three_days_later() -> StoreConfig {
    StoreConfig {
        clock: Arc::new(ManualClock::new(
            SystemClock.now().plus(Duration::from_secs(3 * 24 * 3600)),
        )),
        ..StoreConfig::default()
    }
}

/// The crashed puts' publication records and pack objects go once their grace period is over,
/// and nothing else does.
#[cfg(feature = "postgres")]
fn postgres_orphans_are_reclaimed(rt: &tokio::runtime::Runtime, target: &Target, store: AnyStore) {
    drop(store);
    let store = rt.block_on(target.open(three_days_later()));
    let AnyStore::Postgres(pg) = &store else {
        unreachable!("a postgres target opens a postgres store")
    };
    let before = rt.block_on(pg.publications_in_flight()).expect("count");
    let report = rt.block_on(store.reclaim()).expect("reclaim");
    assert_eq!(report.publications, before);
    assert_eq!(rt.block_on(pg.publications_in_flight()).expect("count"), 0);
    assert_eq!(
        rt.block_on(pg.unindexed_objects()).expect("listing"),
        Vec::<String>::new(),
        "every pack object a crashed put left was reclaimed"
    );
    rt.block_on(assert_clean(&store));
    eprintln!(
        "orphan publication records reclaimed: {before}; packs reclaimed: {}",
        report.packs
    );
}

fn sqlite_orphans_are_reclaimed(rt: &tokio::runtime::Runtime, dir: &Path) {
    // Orphans of the crashed puts: kept within the grace period, reclaimed after it.
    let meta = dir.join("meta.sqlite");
    let count = |sql: &str| -> i64 {
        let conn = rusqlite::Connection::open_with_flags(
            &meta,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .expect("inspect");
        conn.query_row(sql, [], |r| r.get(0)).expect("count")
    };
    let store = SqliteStore::open(dir, three_days_later()).expect("reopen for reclamation");
    let orphans_before = count("SELECT count(*) FROM publications");
    let report = rt.block_on(store.reclaim()).expect("reclaim");
    assert_eq!(report.publications as i64, orphans_before);
    assert_eq!(
        count("SELECT count(*) FROM publications"),
        0,
        "no publication record outlives the grace period"
    );
    let registered: HashSet<String> = {
        let conn = rusqlite::Connection::open_with_flags(
            &meta,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .expect("inspect");
        let mut stmt = conn.prepare("SELECT name FROM packs").expect("prepare");
        stmt.query_map([], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    let on_disk: HashSet<String> = std::fs::read_dir(dir.join("packs"))
        .expect("packs")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    assert_eq!(
        on_disk, registered,
        "every pack file left by a crashed put was reclaimed"
    );
    assert_eq!(std::fs::read_dir(dir.join("tmp")).expect("tmp").count(), 0);
    rt.block_on(assert_clean(&store));
    eprintln!(
        "orphan publication records reclaimed: {orphans_before}; packs reclaimed: {}",
        report.packs
    );
}
