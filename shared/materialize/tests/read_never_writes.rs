//! A read never writes (spec §8.2 write-back): a read-only statement on an app whose at-rest
//! tables its schema record does not list leaves the user database byte-identical, reports those
//! tables, and only a statement that writes registers them.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use snug_materialize::ExecuteLimits;
use snug_schema::{SteppingClock, UserDb};
use snug_test_support::{sample_copy, sha256_hex};

const TRADER: &str = "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c";

fn clock() -> Arc<SteppingClock> {
    Arc::new(SteppingClock::frozen_at_unix_ms(1_767_225_600_000))
}

/// The reference sample with the trading app's schema record lost: its `trades` and `equities`
/// tables are still at rest, with their rows, but nothing lists them.
fn unregistered_sample(dir: &Path) -> PathBuf {
    let path = sample_copy(dir, "user.snug");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("DELETE FROM snug_app_schemas WHERE app_id = ?1", [TRADER])
        .unwrap();
    drop(conn);
    path
}

fn registered(db: &UserDb) -> bool {
    db.connection()
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM snug_app_schemas WHERE app_id = ?1)",
            [TRADER],
            |row| row.get(0),
        )
        .unwrap()
}

#[test]
fn a_select_on_unregistered_tables_leaves_the_file_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let path = unregistered_sample(dir.path());
    let before = sha256_hex(&path);
    let (mut db, open) = UserDb::open_path(&path, clock()).unwrap();
    assert!(!open.wrote);
    let image = db.to_bytes().unwrap();
    let report = snug_materialize::execute(
        &mut db,
        TRADER,
        &["SELECT count(*) FROM trades", "SELECT symbol FROM equities"],
        &ExecuteLimits::default(),
    )
    .unwrap();
    assert!(!report.persist.wrote, "{:?}", report.persist);
    assert_eq!(report.unregistered_tables, ["trades", "equities"]);
    assert_eq!(report.results[0].rows.len(), 1);
    assert!(!registered(&db), "a read registers nothing");
    assert_eq!(db.to_bytes().unwrap(), image);
    drop(db);
    assert_eq!(sha256_hex(&path), before, "the file was not written");
}

#[test]
fn the_first_write_registers_the_unregistered_tables() {
    let dir = tempfile::tempdir().unwrap();
    let path = unregistered_sample(dir.path());
    let (mut db, _) = UserDb::open_path(&path, clock()).unwrap();
    let report = snug_materialize::execute(
        &mut db,
        TRADER,
        &["INSERT INTO trades (symbol, qty) VALUES ('NEW', 1)"],
        &ExecuteLimits::default(),
    )
    .unwrap();
    assert!(report.persist.wrote);
    assert_eq!(report.unregistered_tables, Vec::<String>::new());
    assert!(registered(&db));
    // Both tables survived the write-back with their rows, and are listed now.
    let again = snug_materialize::execute(
        &mut db,
        TRADER,
        &[
            "SELECT count(*) FROM trades",
            "SELECT count(*) FROM equities",
        ],
        &ExecuteLimits::default(),
    )
    .unwrap();
    assert_eq!(again.unregistered_tables, Vec::<String>::new());
    assert!(!again.persist.wrote);
}
