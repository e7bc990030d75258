//! Tests specific to the embedded store: table classes, the directory lock, pack files on disk.

use std::collections::BTreeSet;

use super::*;
use crate::migrate::{RUNNER_TABLE, declared_classes};

fn open(dir: &Path) -> SqliteStore {
    SqliteStore::open(dir, StoreConfig::default()).expect("open store")
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
    let mut declared: BTreeSet<String> = BTreeSet::new();
    for m in migrate::SQLITE {
        for (table, class) in declared_classes(m.sql) {
            assert!(class.is_some(), "table {table} has no class");
            assert!(
                declared.insert(table.clone()),
                "table {table} declared twice"
            );
        }
    }
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
