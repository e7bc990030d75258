//! Tests specific to the embedded store: table classes, the directory lock, pack files on disk.

use std::collections::BTreeSet;

use futures::StreamExt;

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
