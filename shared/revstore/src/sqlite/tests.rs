//! Tests specific to the embedded store: table classes, the directory lock, pack files on disk.

use std::{
    collections::BTreeSet,
    sync::atomic::{AtomicBool, Ordering},
};

use futures::StreamExt;

use super::{packs::ChunkLoc, *};
use crate::{migrate::RUNNER_TABLE, types::Precondition};

fn open(dir: &Path) -> SqliteStore {
    SqliteStore::open(dir, StoreConfig::default()).expect("open store")
}

/// Opens `dir` again once the dropped store that had it is gone: a download's reader thread may
/// hold the store (and so its directory lock) for a moment after the download ends.
fn reopen(dir: &Path) -> SqliteStore {
    for _ in 0..200 {
        match SqliteStore::open(dir, StoreConfig::default()) {
            Err(OpenError::Locked) => std::thread::sleep(std::time::Duration::from_millis(10)),
            opened => return opened.expect("reopen store"),
        }
    }
    panic!("the store stayed locked after it was dropped");
}

#[test]
fn every_table_has_exactly_one_declared_class() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let conn = store.inner.writer();
    let actual: BTreeSet<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    let tables = migrate::declared_tables(migrate::SQLITE).expect("migrations");
    for (table, class) in &tables {
        assert!(class.is_some(), "table {table} has no class");
    }
    let mut declared: BTreeSet<String> = tables.into_keys().collect();
    declared.insert(RUNNER_TABLE.0.to_owned());
    assert_eq!(actual, declared);
}

#[test]
fn connection_is_wal_with_foreign_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let conn = store.inner.writer();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("mode");
    let fk: i64 = conn
        .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
        .expect("fk");
    let sync: i64 = conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .expect("sync");
    assert_eq!(
        (mode.as_str(), fk, sync),
        ("wal", 1, 1),
        "WAL, foreign keys on, NORMAL between durable commits"
    );
}

#[test]
fn second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _store = open(dir.path());
    match SqliteStore::open(dir.path(), StoreConfig::default()) {
        Err(OpenError::Locked) => {}
        other => panic!("expected Locked, got {other:?}"),
    }
}

#[test]
fn reopen_migrates_nothing_and_keeps_the_chunk_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(
        SqliteStore::open(
            dir.path(),
            StoreConfig {
                chunk_size: 8192,
                ..StoreConfig::default()
            },
        )
        .expect("open"),
    );
    let store = SqliteStore::open(dir.path(), StoreConfig::default()).expect("reopen");
    assert_eq!(store.chunk_size(), 8192);
}

#[test]
fn extents_round_trip_and_coalesce() {
    let locs = [
        ChunkLoc {
            pack: 1,
            offset: 0,
            len: 4,
        },
        ChunkLoc {
            pack: 1,
            offset: 4,
            len: 4,
        },
        ChunkLoc {
            pack: 2,
            offset: 8,
            len: 4,
        },
        ChunkLoc {
            pack: 1,
            offset: 8,
            len: 2,
        },
    ];
    let extents = packs::coalesce(&locs);
    assert_eq!(extents.len(), 3);
    assert_eq!(
        packs::decode_extents(&packs::encode_extents(&extents)),
        Some(extents.clone())
    );
    assert_eq!(packs::expand(&extents, 4), locs.to_vec());
}

/// Piece buffers are recycled, so a piece the caller still holds must keep its bytes while other
/// downloads (here of other images, one spanning several extents and packs) reuse the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_pieces_keep_their_bytes_while_the_pool_is_reused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let image = |seed: u8, len: usize| -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
            .collect()
    };
    // Larger than one piece, not a multiple of it, so the last piece is a partial one.
    let len = packs::DOWNLOAD_PIECE * 2 + 12_345;
    let put = |user: UserId, precondition: Precondition, bytes: Vec<u8>| {
        let store = store.clone();
        async move {
            let request = PutRequest {
                user,
                precondition,
                principal: Principal::new("test").expect("principal"),
                idempotency_key: None,
                expected_length: None,
                quota_bytes: None,
            };
            let body = futures::stream::iter([Ok::<_, io::Error>(Bytes::from(bytes))]);
            store.put(request, body).await.expect("put").info.revision
        }
    };
    let (a, b) = (
        UserId::new("a").expect("user"),
        UserId::new("b").expect("user"),
    );
    for u in [&a, &b] {
        store.provision_user(u).await.expect("provision");
    }
    let first = image(1, len);
    put(a.clone(), Precondition::MustNotExist, first.clone()).await;
    let base = put(b.clone(), Precondition::MustNotExist, image(2, len)).await;
    // Change a few pages of b's image: its next revision reads from two packs in many extents.
    let mut second = image(2, len);
    for page in [1, 200, 513] {
        second[page * 4096..page * 4096 + 100].fill(0xAB);
    }
    put(b.clone(), Precondition::MustMatch(base), second.clone()).await;

    let principal = Principal::new("reader").expect("principal");
    let mut held = Vec::new();
    let mut body = store.get(&a, &principal).await.expect("get a").body;
    while let Some(piece) = body.next().await {
        held.push(piece.expect("piece"));
    }
    for _ in 0..3 {
        let got = store.get(&b, &principal).await.expect("get b").body;
        assert_eq!(got.read_to_vec().await.expect("body b"), second);
    }
    assert_eq!(held.concat(), first);
    // Dropping a download halfway returns its buffers and leaves the next download intact.
    let mut partial = store.get(&b, &principal).await.expect("get b").body;
    partial.next().await.expect("a piece").expect("piece");
    drop(partial);
    let got = store.get(&a, &principal).await.expect("get a").body;
    assert_eq!(got.read_to_vec().await.expect("body a"), first);
}

/// A SQLite header stamped with storage version `version`, then filler up to `len` bytes.
fn stamped(version: u32, len: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(version as u8))
        .collect();
    bytes[..16].copy_from_slice(b"SQLite format 3\0");
    bytes[60..64].copy_from_slice(&version.to_be_bytes());
    bytes
}

/// The name a table of schema 1 has now (migration 5 renamed the put ledger's).
fn renamed(table: &str) -> &str {
    match table {
        "put_verdicts" => "put_ledger",
        other => other,
    }
}

/// Rewrites `dir`'s metadata as the previous binary (migration 1 only) would have left it: a
/// database made by the shipped migration 1 text alone, holding the same rows in its columns.
fn downgrade_to_schema_1(dir: &Path) {
    let current = dir.join("meta.sqlite");
    let previous = dir.join("meta.previous.sqlite");
    {
        // A release before migration 7 kept every manifest whole.
        let conn = Connection::open(&current).expect("open");
        let patched: Vec<Vec<u8>> = conn
            .prepare("SELECT digest FROM images WHERE base IS NOT NULL")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        for digest in patched {
            let image = crate::types::Digest::from_slice(&digest).expect("digest");
            let resolved = super::inspect::resolved(&conn, &image)
                .expect("manifest")
                .expect("stored");
            conn.execute(
                "UPDATE images SET base = NULL, manifest = ?2 WHERE digest = ?1",
                rusqlite::params![digest, crate::chunk::encode_manifest(&resolved.chunks)],
            )
            .expect("whole manifest");
        }
    }
    {
        let mut conn = Connection::open(&previous).expect("create");
        migrate_sqlite(&mut conn, &migrate::SQLITE[..1], &dir.join("packs")).expect("schema 1");
        // Rows are copied table by table, so a pointer may briefly precede its revision.
        conn.pragma_update(None, "foreign_keys", "OFF")
            .expect("foreign keys off");
        conn.execute(
            "ATTACH DATABASE ?1 AS current",
            [current.to_str().expect("utf-8")],
        )
        .expect("attach");
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM main.sqlite_master WHERE type = 'table' AND name <> 'revstore_migrations'")
            .expect("tables")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        for table in tables {
            let columns: Vec<String> = conn
                .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .expect("columns")
                .query_map([], |r| r.get(0))
                .expect("query")
                .collect::<Result<_, _>>()
                .expect("rows");
            let columns = columns.join(", ");
            conn.execute(
                &format!(
                    "INSERT INTO main.{table} ({columns}) SELECT {columns} FROM current.{}",
                    renamed(&table)
                ),
                [],
            )
            .expect("copy rows");
        }
        conn.execute("DETACH DATABASE current", []).expect("detach");
        let has_column: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM pragma_table_info('revisions') WHERE name = 'storage_version')",
                [],
                |r| r.get(0),
            )
            .expect("columns");
        assert!(!has_column, "schema 1 has no storage_version");
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = fs::remove_file(dir.join(format!("meta.sqlite{suffix}")));
    }
    fs::rename(&previous, &current).expect("replace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrating_from_schema_1_backfills_storage_versions_from_the_packs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(crate::ManualClock::new(Timestamp::from_unix_millis(
        1_767_225_600_000,
    )));
    let config = StoreConfig {
        chunk_size: 1024,
        retention: crate::Retention {
            keep_newest: 4,
            grace: std::time::Duration::ZERO,
            orphan_after: std::time::Duration::from_secs(3600),
        },
        clock: clock.clone(),
        ..StoreConfig::default()
    };
    let user = UserId::new("alice").expect("user");
    let images = [
        stamped(5, 3000),
        stamped(7, 3000),
        b"not a database at all, but long enough to hold a header: ".repeat(4),
        stamped(4, 3000),
        stamped(6, 5000),
    ];
    let mut revisions = Vec::new();
    {
        let store = SqliteStore::open(dir.path(), config.clone()).expect("open");
        store.provision_user(&user).await.expect("provision");
        let mut precondition = Precondition::MustNotExist;
        for bytes in &images {
            let request = PutRequest {
                user: user.clone(),
                precondition: precondition.clone(),
                principal: Principal::new("device").expect("principal"),
                idempotency_key: None,
                expected_length: None,
                quota_bytes: None,
            };
            let body = futures::stream::iter([Ok::<_, io::Error>(Bytes::from(bytes.clone()))]);
            let info = store.put(request, body).await.expect("put").info;
            precondition = Precondition::MustMatch(info.revision.clone());
            revisions.push(info);
            clock.advance(std::time::Duration::from_secs(1));
        }
        // Retention takes the first revision's bytes: its version can no longer be read.
        assert_eq!(store.reclaim().await.expect("reclaim").revisions, 1);
        store.checkpoint().expect("checkpoint");
    }
    // Damage the header of the fourth image in its pack: a byte of its user_version.
    {
        let conn = Connection::open(dir.path().join("meta.sqlite")).expect("open meta");
        let (pack, offset): (String, i64) = conn
            .query_row(
                "SELECT p.name, c.offset FROM images i
                 JOIN chunks c ON c.hash = substr(i.manifest, 1, 32)
                 JOIN packs p ON p.id = c.pack_id WHERE i.digest = ?1",
                [revisions[3].digest.as_bytes().as_slice()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("first chunk of image 4");
        let path = dir.path().join("packs").join(pack);
        let file = OpenOptions::new().write(true).open(&path).expect("pack");
        std::os::unix::fs::FileExt::write_all_at(&file, &[0xEE], offset as u64 + 63)
            .expect("damage");
    }
    downgrade_to_schema_1(dir.path());

    let store = SqliteStore::open(dir.path(), config).expect("open migrates");
    let listed: Vec<(Revision, Option<u32>, bool)> = store
        .list_revisions(&user, 10)
        .await
        .expect("list")
        .into_iter()
        .rev()
        .map(|r| (r.revision, r.storage_version, r.retained))
        .collect();
    let expected: Vec<(Revision, Option<u32>, bool)> = revisions
        .iter()
        .zip([None, Some(7), None, None, Some(6)])
        .zip([false, true, true, true, true])
        .map(|((r, version), retained)| (r.revision.clone(), version, retained))
        .collect();
    // Reclaimed bytes and a header that fails its address check stay unknown; the rest are read.
    assert_eq!(listed, expected);
    let applied: Vec<i64> = store
        .inner
        .writer()
        .prepare("SELECT version FROM revstore_migrations ORDER BY version")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    // Every migration applied, in order.
    let known: Vec<i64> = migrate::SQLITE.iter().map(|m| m.version).collect();
    assert_eq!(applied, known);
    assert_eq!(
        store.head(&user).await.expect("head").storage_version,
        Some(6)
    );
    // The damage is the integrity check's to report; the migration only declined to trust it.
    let report = store.check_integrity().await.expect("integrity");
    assert_eq!(
        report.problems.len(),
        1,
        "only the damaged chunk: {:?}",
        report.problems
    );
    drop(store);
    // Reopening applies nothing twice.
    SqliteStore::open(dir.path(), StoreConfig::default()).expect("reopen");
}

/// Concurrent downloads append to one spool, yet each one's entry is on disk by the time its
/// download is handed out: none is lost, none is counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_downloads_are_each_in_the_served_ledger_when_they_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let user = UserId::new("u").expect("user");
    store.provision_user(&user).await.expect("provision");
    let request = PutRequest {
        user: user.clone(),
        precondition: Precondition::MustNotExist,
        principal: Principal::new("writer").expect("principal"),
        idempotency_key: None,
        expected_length: None,
        quota_bytes: None,
    };
    let body = futures::stream::iter([Ok::<_, io::Error>(Bytes::from(vec![7u8; 10_000]))]);
    store.put(request, body).await.expect("put");
    let downloads = (0..48).map(|i| {
        let (store, user) = (store.clone(), user.clone());
        tokio::spawn(async move {
            let principal = Principal::new(format!("reader-{i}")).expect("principal");
            let download = store.get(&user, &principal).await.expect("get");
            // Read straight from the files, not through the store: the entry is on disk now.
            let recorded = recorded_on_disk(&store, principal.as_str());
            assert_eq!(
                recorded, 1,
                "{principal} is served before its entry is recorded"
            );
            download
                .body
                .map(|piece| piece.expect("piece").len())
                .fold(0, |a, n| async move { a + n })
                .await
        })
    });
    for download in downloads.collect::<Vec<_>>() {
        assert_eq!(download.await.expect("join"), 10_000);
    }
    let ledger = store.served_ledger(&user, 1_000).await.expect("ledger");
    assert_eq!(ledger.len(), 48);
}

fn put_request(user: &UserId, precondition: Precondition) -> PutRequest {
    PutRequest {
        user: user.clone(),
        precondition,
        principal: Principal::new("writer").expect("principal"),
        idempotency_key: None,
        expected_length: None,
        quota_bytes: None,
    }
}

async fn put_bytes(
    store: &SqliteStore,
    user: &UserId,
    base: Option<&Revision>,
    bytes: Vec<u8>,
) -> RevisionInfo {
    let precondition = match base {
        None => Precondition::MustNotExist,
        Some(rev) => Precondition::MustMatch(rev.clone()),
    };
    let body = futures::stream::iter([Ok::<_, io::Error>(Bytes::from(bytes))]);
    store
        .put(put_request(user, precondition), body)
        .await
        .expect("put")
        .info
}

async fn get_bytes(store: &SqliteStore, user: &UserId) -> (Revision, Vec<u8>) {
    let principal = Principal::new("reader").expect("principal");
    let download = store.get(user, &principal).await.expect("get");
    let bytes = download.body.read_to_vec().await.expect("read");
    (download.info.revision, bytes)
}

fn filled(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A store in `dir` with one user, `u`, whose first image is `filled(len, seed)`.
async fn store_with_image(dir: &Path, len: usize, seed: u8) -> (SqliteStore, UserId, RevisionInfo) {
    let store = open(dir);
    let user = UserId::new("u").expect("user");
    store.provision_user(&user).await.expect("provision");
    let first = put_bytes(&store, &user, None, filled(len, seed)).await;
    (store, user, first)
}

async fn ledger_len(store: &SqliteStore, user: &UserId) -> usize {
    store.served_ledger(user, 100).await.expect("ledger").len()
}

/// Downloads of the current image are served from a cached plan, and for small images from
/// memory; whatever the size, every download returns the bytes put, and the revision put last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_downloads_return_the_current_bytes_at_every_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let user = UserId::new("u").expect("user");
    store.provision_user(&user).await.expect("provision");
    let inline = serve::INLINE_IMAGE as usize;
    let mut base = None;
    for (n, len) in [
        1,
        4096,
        inline - 1,
        inline,
        inline + 1,
        3 * packs::DOWNLOAD_PIECE + 7,
    ]
    .into_iter()
    .enumerate()
    {
        let bytes = filled(len, n as u8);
        let info = put_bytes(&store, &user, base.as_ref(), bytes.clone()).await;
        // The first download reads the rows and the packs; the next ones use the plan.
        for round in 0..3 {
            let (revision, got) = get_bytes(&store, &user).await;
            assert_eq!(revision, info.revision, "size {len}, round {round}");
            assert!(got == bytes, "size {len}, round {round}: bytes differ");
        }
        base = Some(info.revision);
    }
    let ledger = store.served_ledger(&user, 1_000).await.expect("ledger");
    assert_eq!(ledger.len(), 6 * 3, "one entry per download");
}

/// A restore moves the pointer like a put: the next download serves the restored revision, not
/// the plan cached before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_replaces_the_cached_plan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, user, a) = store_with_image(dir.path(), 10_000, 1).await;
    let b = put_bytes(&store, &user, Some(&a.revision), filled(20_000, 2)).await;
    assert_eq!(get_bytes(&store, &user).await.0, b.revision);
    let restored = store
        .restore(RestoreRequest {
            user: user.clone(),
            from: a.revision.clone(),
            precondition: Precondition::MustMatch(b.revision.clone()),
            principal: Principal::new("writer").expect("principal"),
            idempotency_key: None,
        })
        .await
        .expect("restore")
        .info;
    let (revision, bytes) = get_bytes(&store, &user).await;
    assert_eq!(revision, restored.revision);
    assert_eq!(bytes, filled(10_000, 1));
}

/// A download that started from a cached plan keeps its bytes through a reclamation pass that
/// would otherwise take them: the plan's lease is taken before the pass checks leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_download_survives_reclamation_of_its_revision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = StoreConfig {
        retention: crate::config::Retention {
            keep_newest: 1,
            grace: std::time::Duration::ZERO,
            ..Default::default()
        },
        ..StoreConfig::default()
    };
    let store = SqliteStore::open(dir.path(), config).expect("open");
    let user = UserId::new("u").expect("user");
    store.provision_user(&user).await.expect("provision");
    let old = filled(3 * packs::DOWNLOAD_PIECE, 9);
    let a = put_bytes(&store, &user, None, old.clone()).await;
    // Warm the plan, then start a download from it and hold it unread.
    assert_eq!(get_bytes(&store, &user).await.1, old);
    let principal = Principal::new("reader").expect("principal");
    let held = store.get(&user, &principal).await.expect("get");
    assert_eq!(held.info.revision, a.revision);
    let b = put_bytes(&store, &user, Some(&a.revision), filled(5_000, 3)).await;
    let report = store.reclaim().await.expect("reclaim");
    assert_eq!(report.images, 0, "the held image was reclaimed: {report:?}");
    assert!(held.body.read_to_vec().await.expect("read") == old);
    // Released, the old revision goes on the next pass; the current one stays.
    let report = store.reclaim().await.expect("reclaim");
    assert_eq!((report.revisions, report.images), (1, 1), "{report:?}");
    assert_eq!(get_bytes(&store, &user).await.0, b.revision);
}

/// When its served-ledger entry cannot be written, a download fails: nothing is served
/// unrecorded, its lease is released, and later downloads are recorded again (in a new spool
/// file: the one that failed may end in a torn record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_whose_ledger_entry_fails_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, user, a) = store_with_image(dir.path(), 1_000, 4).await;
    assert_eq!(get_bytes(&store, &user).await.0, a.revision);
    store.inner.served.break_appends().expect("break the spool");
    let principal = Principal::new("reader").expect("principal");
    let refused = store.get(&user, &principal).await;
    assert!(
        matches!(
            refused,
            Err(ReadError::Storage(StorageError::Unavailable(_)))
        ),
        "{:?}",
        refused.map(|d| d.info)
    );
    assert!(
        !store.inner.leases.is_leased(&a.digest),
        "the lease was kept"
    );
    assert_eq!(get_bytes(&store, &user).await.0, a.revision);
    let ledger = store.served_ledger(&user, 1_000).await.expect("ledger");
    assert_eq!(ledger.len(), 2, "the refused download was recorded");
}

/// How many entries of `principal` are on disk: folded into `served` or still in the spool.
fn recorded_on_disk(store: &SqliteStore, principal: &str) -> usize {
    let folded: i64 = store
        .inner
        .writer()
        .query_row(
            "SELECT count(*) FROM served WHERE principal = ?1",
            [principal],
            |r| r.get(0),
        )
        .expect("count");
    let spooled = store
        .inner
        .served
        .unfolded_on_disk()
        .expect("spool")
        .iter()
        .filter(|row| row.principal == principal)
        .count();
    folded as usize + spooled
}

fn spool_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir.join("served"))
        .expect("spool directory")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
}

/// Entries still in the spool when the process ends are folded by the next open, in order,
/// and the spool is emptied; also from a file an earlier version left under its old name
/// (`<generation>.journal`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfolded_entries_survive_a_restart() {
    for legacy in [false, true] {
        unfolded_entries_survive_a_restart_named(legacy).await;
    }
}

async fn unfolded_entries_survive_a_restart_named(legacy: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let user = UserId::new("u").expect("user");
    {
        let (store, _, _) = store_with_image(dir.path(), 1_000, 6).await;
        for i in 0..10 {
            let principal = Principal::new(format!("reader-{i}")).expect("principal");
            drop(store.get(&user, &principal).await.expect("get"));
        }
        let files = spool_files(dir.path());
        assert_eq!(files.len(), 1);
        if legacy {
            fs::rename(&files[0], files[0].with_extension("journal")).expect("rename");
        }
    }
    let store = reopen(dir.path());
    assert!(
        spool_files(dir.path()).is_empty(),
        "the spool was folded on open"
    );
    let principals: Vec<String> = store
        .served_ledger(&user, 100)
        .await
        .expect("ledger")
        .into_iter()
        .map(|e| e.principal.as_str().to_owned())
        .collect();
    let expected: Vec<String> = (0..10).rev().map(|i| format!("reader-{i}")).collect();
    assert_eq!(principals, expected, "newest first, as appended");
}

/// A spool file whose deletion was lost after its fold committed is deleted unread on the next
/// open, not folded twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spool_file_already_folded_is_not_folded_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let user = UserId::new("u").expect("user");
    let copy = dir.path().join("spool.copy");
    let name = {
        let (store, _, _) = store_with_image(dir.path(), 1_000, 7).await;
        for _ in 0..5 {
            get_bytes(&store, &user).await;
        }
        let file = spool_files(dir.path()).pop().expect("spool file");
        fs::copy(&file, &copy).expect("copy");
        assert_eq!(ledger_len(&store, &user).await, 5);
        assert!(spool_files(dir.path()).is_empty());
        file
    };
    fs::rename(&copy, &name).expect("the deletion is undone");
    let store = reopen(dir.path());
    assert_eq!(ledger_len(&store, &user).await, 5);
    assert!(spool_files(dir.path()).is_empty());
}

/// A spool ending in half a record (a crash mid-append, or power loss) keeps the entries before
/// it; downloads after the restart are recorded as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_spool_keeps_its_whole_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let user = UserId::new("u").expect("user");
    {
        let (store, _, _) = store_with_image(dir.path(), 1_000, 8).await;
        for _ in 0..3 {
            get_bytes(&store, &user).await;
        }
    }
    let file = spool_files(dir.path()).pop().expect("spool file");
    let whole = fs::read(&file).expect("read");
    let mut torn = whole.clone();
    // Three records of equal length; the tear is all of a fourth but its last byte.
    torn.extend_from_slice(&whole[..whole.len() / 3 - 1]);
    fs::write(&file, torn).expect("tear");
    let store = reopen(dir.path());
    assert_eq!(ledger_len(&store, &user).await, 3);
    get_bytes(&store, &user).await;
    assert_eq!(ledger_len(&store, &user).await, 4);
}

/// Without any read of the ledger, the spool is folded into `served` in the background every
/// few thousand downloads, so it does not grow without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spool_is_folded_in_the_background() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, user, _) = store_with_image(dir.path(), 1_000, 9).await;
    for _ in 0..spool::FOLD_ENTRIES {
        get_bytes(&store, &user).await;
    }
    let folded = || -> i64 {
        store
            .inner
            .writer()
            .query_row("SELECT count(*) FROM served", [], |r| r.get(0))
            .expect("count")
    };
    let unfolded = || store.inner.served.unfolded_on_disk().expect("spool");
    // The fold commits its rows, then deletes the file: wait for both.
    for _ in 0..200 {
        if folded() == spool::FOLD_ENTRIES as i64 && unfolded().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(folded(), spool::FOLD_ENTRIES as i64);
    assert!(unfolded().is_empty(), "the folded file is gone");
}

/// Downloads write nothing to SQLite (their entries go to the spool), and the fold that moves
/// thousands of entries into `served` is checkpointed off the writer (whose automatic checkpoint
/// is off): the WAL stays a few MiB at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_leave_the_wal_alone_and_folds_are_checkpointed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, user, first) = store_with_image(dir.path(), 1_000, 5).await;
    let autocheckpoint: i64 = store
        .inner
        .writer()
        .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
        .expect("pragma");
    assert_eq!(autocheckpoint, 0);
    let wal = || {
        fs::metadata(dir.path().join("meta.sqlite-wal"))
            .expect("wal")
            .len()
    };
    get_bytes(&store, &user).await;
    let before = wal();
    for _ in 0..3_000 {
        get_bytes(&store, &user).await;
    }
    assert_eq!(wal(), before, "a download wrote to the WAL");
    let ledger = store.served_ledger(&user, 10_000).await.expect("ledger");
    assert_eq!(ledger.len(), 3_001);
    // Let the checkpoint the fold asked for run, and the next commit restart the WAL.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    put_bytes(&store, &user, Some(&first.revision), filled(1_000, 6)).await;
    assert!(wal() < 8 << 20, "WAL is {} bytes", wal());
}

/// A TRUNCATE checkpoint beside a background PASSIVE one is refused as busy by SQLite; the
/// store's checkpoint (and an erasure, which ends with one) waits for the background one instead
/// of leaving pages of the last commit's predecessor in the database file. Background
/// checkpoints run back to back here while every put is followed by a checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_beside_a_background_one_still_empties_the_wal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, user, first) = store_with_image(dir.path(), 64 * 1024, 1).await;
    let stop = Arc::new(AtomicBool::new(false));
    let hammer = {
        let (checkpoints, stop) = (store.inner.checkpoints.clone(), stop.clone());
        // Outside a runtime, `note_large_commit` runs the checkpoint on this thread.
        std::thread::spawn(move || {
            let mut ran = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                checkpoints.note_large_commit();
                ran += 1;
            }
            ran
        })
    };
    let wal = dir.path().join("meta.sqlite-wal");
    let mut base = first.revision;
    for seed in 2..40 {
        base = put_bytes(&store, &user, Some(&base), filled(64 * 1024, seed))
            .await
            .revision;
        store.checkpoint().expect("checkpoint");
        assert_eq!(
            fs::metadata(&wal).expect("wal").len(),
            0,
            "after put {seed} the WAL still holds frames"
        );
    }
    stop.store(true, Ordering::Relaxed);
    assert!(hammer.join().expect("hammer") > 0);
}

/// Rows of `table` still under `user_id`.
fn rows_under(store: &SqliteStore, table: &str, user_id: &str) -> i64 {
    store
        .inner
        .writer()
        .query_row(
            &format!("SELECT count(*) FROM {table} WHERE user_id = ?1"),
            [user_id],
            |r| r.get(0),
        )
        .expect("count")
}

/// A tombstone an earlier release kept under the id in clear (issue 36) is still a tombstone,
/// and the next reclamation pass renames it and the user's ledger and journal rows to the
/// pseudonym, so that no row keeps the id.
#[tokio::test]
async fn a_tombstone_kept_in_clear_takes_its_pseudonym_at_the_next_pass() {
    let kept = crate::erase::KEPT_UNDER_PSEUDONYM;
    let tables = [&["users"][..], &kept].concat();
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, user, _) = store_with_image(dir.path(), 3 * 4096, 7).await;
    let _ = get_bytes(&store, &user).await;
    store.erase(&user).await.expect("erase");
    let pseudonym = crate::erase::pseudonym(user.as_str());
    assert!(
        tables
            .iter()
            .all(|t| rows_under(&store, t, user.as_str()) == 0)
    );
    assert_eq!(rows_under(&store, "users", &pseudonym), 1);

    // As an earlier release left it: everything under the id.
    for table in &tables {
        store
            .inner
            .writer()
            .execute(
                &format!("UPDATE {table} SET user_id = ?1 WHERE user_id = ?2"),
                [user.as_str(), &pseudonym],
            )
            .expect("rename back");
    }
    assert!(matches!(
        store.provision_user(&user).await,
        Err(ProvisionError::Erased)
    ));

    store.reclaim().await.expect("a pass");
    for table in &tables {
        assert_eq!(rows_under(&store, table, user.as_str()), 0, "{table}");
    }
    assert_eq!(rows_under(&store, "users", &pseudonym), 1);
    assert!(matches!(
        store.provision_user(&user).await,
        Err(ProvisionError::Erased)
    ));
    assert_eq!(store.put_ledger(&user, 10).await.expect("ledger").len(), 1);
    assert_eq!(ledger_len(&store, &user).await, 1);
}

/// Issue 38 point 4 on the embedded store (`manifest::tests::small_edits_store_small_manifests`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_edits_store_small_manifests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = crate::manifest::tests::config_for_small_edits();
    let store = SqliteStore::open(dir.path(), config).expect("open store");
    let chunk = store.chunk_size();
    let manifest_bytes = async || -> i64 {
        store
            .inner
            .writer()
            .query_row("SELECT sum(length(manifest)) FROM images", [], |r| r.get(0))
            .expect("sum")
    };
    crate::manifest::tests::small_edits_store_small_manifests(&store, chunk, manifest_bytes).await;
}
