//! Tests of runtime images: loading, serializing, and the change baseline.

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::{Expect, expect};
use snug_schema::MAX_USERDB_BYTES;

use crate::test_support::{TRADER, dump, open_image, sample_db};
use crate::{AppDatabase, ExecuteLimits, materialize};

#[track_caller]
fn check_load(bytes: &[u8], expect: Expect) {
    let outcome = match AppDatabase::from_bytes("x", bytes) {
        Ok(runtime) => format!(
            "ok: {} objects",
            runtime
                .connection()
                .query_row("SELECT count(*) FROM sqlite_master", [], |row| row
                    .get::<_, i64>(0))
                .unwrap()
        ),
        Err(err) => format!("{}: {err}", err.reason()),
    };
    expect.assert_eq(&outcome);
}

fn image(sql: &str) -> Vec<u8> {
    let mut conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch(sql).unwrap();
    conn.serialize(rusqlite::MAIN_DB).unwrap().to_vec()
}

#[test]
fn images_are_checked_before_use() {
    check_load(&image("CREATE TABLE t (x)"), expect!["ok: 1 objects"]);
    check_load(b"", expect!["NOT_SQLITE: not a SQLite database"]);
    check_load(
        b"SNUGENC1\n\x01",
        expect!["NOT_SQLITE: not a SQLite database"],
    );
    check_load(
        b"SQLite format 3\0short",
        expect!["MALFORMED: damaged SQLite image: 21 bytes is shorter than a SQLite header"],
    );
    let mut damaged = image("CREATE TABLE t (x); INSERT INTO t VALUES (1)");
    let len = damaged.len();
    damaged[len - 4096..].fill(0xa5);
    check_load(
        &damaged,
        expect![[r#"
        MALFORMED: damaged SQLite image: *** in database main ***
        Tree 2 page 2: btreeInitPage() returns error code 11"#]],
    );
    // A WAL-mode header is accepted (an in-memory copy has no WAL).
    let mut wal = image("CREATE TABLE t (x)");
    wal[18] = 2;
    wal[19] = 2;
    check_load(&wal, expect!["ok: 1 objects"]);
    // Another page size is kept.
    check_load(
        &image("PRAGMA page_size = 1024; CREATE TABLE t (x)"),
        expect!["ok: 1 objects"],
    );
}

#[test]
fn images_over_the_cap_are_refused_unread() {
    let mut big = vec![0u8; usize::try_from(MAX_USERDB_BYTES).unwrap() + 1];
    big[..16].copy_from_slice(b"SQLite format 3\0");
    let err = AppDatabase::from_bytes("x", &big).unwrap_err();
    assert_eq!(err.reason(), "TOO_LARGE");
}

#[test]
fn a_loaded_image_is_the_same_database() {
    let db = sample_db();
    let mut runtime = materialize(&db, TRADER).unwrap();
    let bytes = runtime.to_bytes().unwrap();
    let mut loaded = AppDatabase::from_bytes(TRADER, &bytes).unwrap();
    assert_eq!(dump(loaded.connection()), dump(runtime.connection()));
    assert_eq!(
        dump(&open_image(&loaded.to_bytes().unwrap())),
        dump(runtime.connection())
    );
    assert_eq!(loaded.namespace(), TRADER);
    assert_eq!(loaded.token(), "a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c");
}

#[test]
fn the_change_baseline_follows_writes_not_reads() {
    let db = sample_db();
    let mut runtime = materialize(&db, TRADER).unwrap();
    assert!(!runtime.is_dirty());
    runtime
        .execute(&["SELECT * FROM trades"], &ExecuteLimits::default())
        .unwrap();
    assert!(!runtime.is_dirty());
    runtime
        .execute(
            &["CREATE INDEX idx_q ON trades (qty)"],
            &ExecuteLimits::default(),
        )
        .unwrap();
    assert!(runtime.is_dirty(), "DDL changes the schema version");
    let mut runtime = materialize(&db, TRADER).unwrap();
    runtime
        .execute(&["DELETE FROM equities WHERE 0"], &ExecuteLimits::default())
        .unwrap();
    assert!(!runtime.is_dirty(), "a write that touched no row");
    runtime
        .execute(
            &["UPDATE sqlite_sequence SET seq = 50"],
            &ExecuteLimits::default(),
        )
        .unwrap();
    assert!(runtime.is_dirty(), "counters are data");
    // A failed call leaves the runtime as it was, but the baseline is conservative.
    let mut runtime = materialize(&db, TRADER).unwrap();
    let _ = runtime.execute(
        &["DELETE FROM trades", "SELECT * FROM nope"],
        &ExecuteLimits::default(),
    );
    let rows: i64 = runtime
        .connection()
        .query_row("SELECT count(*) FROM trades", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 2);
    assert!(
        AppDatabase::from_bytes(TRADER, &runtime.to_bytes().unwrap())
            .unwrap()
            .is_dirty()
    );
}

#[test]
fn runtimes_are_private_to_their_handle() {
    // Two runtimes of the same app are distinct databases.
    let db = sample_db();
    let mut a = materialize(&db, TRADER).unwrap();
    let b = materialize(&db, TRADER).unwrap();
    a.execute(&["DELETE FROM trades"], &ExecuteLimits::default())
        .unwrap();
    let rows: i64 = b
        .connection()
        .query_row("SELECT count(*) FROM trades", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 2);
}

#[test]
fn a_runtime_cannot_outgrow_the_cap() {
    let mut runtime = AppDatabase::empty("big").unwrap();
    let err = runtime
        .execute(
            &[
                "CREATE TABLE b (x)",
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 70) \
                 INSERT INTO b SELECT zeroblob(1000000) FROM n",
            ],
            &ExecuteLimits {
                max_steps: None,
                ..ExecuteLimits::default()
            },
        )
        .unwrap_err();
    expect!["TOO_LARGE: Statement { index: 1, problem: TooLarge { max: 67108864 } }"]
        .assert_eq(&format!("{}: {:?}", err.reason(), err));
}
