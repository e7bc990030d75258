//! Behaviour specific to the embedded store's files: create-once pack names, unreadable
//! candidates, corruption found by read-back, the default 64 MiB quota, and the store id kept.

mod support;

use std::{fs, io::Write};

use sha2::{Digest as _, Sha256};
use snug_revstore::{
    DEFAULT_QUOTA_BYTES, Digest, IntegrityProblem, Precondition, PutError, ReclaimError, RevStore,
    SqliteStore, StoreConfig,
};
use support::*;

fn pack_name_for(bytes: &[u8], chunk: usize) -> String {
    let mut h = Sha256::new();
    for c in bytes.chunks(chunk) {
        h.update(Digest::of(c).as_bytes());
    }
    format!("{}.pack", hex::encode(h.finalize()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_bytes_at_an_occupied_pack_name_are_refused() {
    let fx = sqlite(Tune::default()).await.expect("store");
    let dir = fx
        .guard
        .downcast_ref::<tempfile::TempDir>()
        .expect("dir")
        .path()
        .to_owned();
    let u = user("alice");
    fx.store.provision_user(&u).await.expect("provision");
    let bytes = image(1, 20 * CHUNK as usize);
    // Someone (bit rot, a bug, an attacker with disk access) put other bytes under the name this
    // put's pack will have.
    let name = pack_name_for(&bytes, CHUNK as usize);
    fs::File::create(dir.join("packs").join(&name))
        .and_then(|mut f| f.write_all(&image(2, bytes.len())))
        .expect("squat");
    let err = put(&fx.store, &u, Precondition::MustNotExist, &bytes)
        .await
        .expect_err("refused");
    assert_eq!(err.reason(), "IMAGE_CONFLICT");
    assert!(matches!(err, PutError::ImageConflict { .. }));
    assert!(
        fx.store
            .list_revisions(&u, 10)
            .await
            .expect("list")
            .is_empty()
    );
    // The same bytes under that name are accepted: the pack is reused, not rewritten.
    fs::File::create(dir.join("packs").join(&name))
        .and_then(|mut f| f.write_all(&bytes))
        .expect("rewrite");
    put_ok(&fx.store, &u, Precondition::MustNotExist, &bytes).await;
    assert_eq!(fetch(&fx.store, &u).await, bytes);
    assert_clean(&fx.store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_file_among_the_packs_refuses_reclamation() {
    let tune = Tune {
        retention: snug_revstore::Retention {
            keep_newest: 0,
            grace: std::time::Duration::ZERO,
            orphan_after: std::time::Duration::ZERO,
        },
        ..Tune::default()
    };
    let fx = sqlite(tune).await.expect("store");
    let dir = fx
        .guard
        .downcast_ref::<tempfile::TempDir>()
        .expect("dir")
        .path()
        .to_owned();
    let u = user("alice");
    fx.store.provision_user(&u).await.expect("provision");
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &image(1, 5000))
        .await
        .info
        .revision;
    put_ok(&fx.store, &u, Precondition::MustMatch(r1), &image(2, 5000)).await;
    fs::write(dir.join("packs").join("notes.txt"), b"?").expect("foreign file");
    let before = fx.store.stats().await.expect("stats");
    match fx.store.reclaim().await {
        Err(ReclaimError::UnreadableCandidate { name }) => assert_eq!(name, "notes.txt"),
        other => panic!("expected UnreadableCandidate, got {other:?}"),
    }
    assert_eq!(fx.store.stats().await.expect("stats"), before);
    assert!(fx.store.journal(10).await.expect("journal").is_empty());
    fs::remove_file(dir.join("packs").join("notes.txt")).expect("remove");
    assert_eq!(fx.store.reclaim().await.expect("reclaim").revisions, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruption_is_found_by_the_integrity_check_and_healed_by_a_put_that_shares_it() {
    let fx = sqlite(Tune::default()).await.expect("store");
    let dir = fx
        .guard
        .downcast_ref::<tempfile::TempDir>()
        .expect("dir")
        .path()
        .to_owned();
    let u = user("alice");
    fx.store.provision_user(&u).await.expect("provision");
    let bytes = image(1, 8 * CHUNK as usize);
    put_ok(&fx.store, &u, Precondition::MustNotExist, &bytes).await;
    let pack = fs::read_dir(dir.join("packs"))
        .expect("packs")
        .next()
        .expect("one pack")
        .expect("entry")
        .path();
    let mut damaged = fs::read(&pack).expect("read pack");
    damaged[3 * CHUNK as usize + 7] ^= 1;
    fs::write(&pack, &damaged).expect("damage");
    let report = fx.store.check_integrity().await.expect("check");
    assert!(
        matches!(
            report.problems.as_slice(),
            [IntegrityProblem::ChunkMismatch { .. }]
        ),
        "{:?}",
        report.problems
    );
    // A second user uploading the same bytes would deduplicate against the damaged chunk: the
    // put checks it first and writes it afresh, which heals alice's image too (issue 36 point 8).
    let bob = user("bob");
    fx.store.provision_user(&bob).await.expect("provision");
    put_ok(&fx.store, &bob, Precondition::MustNotExist, &bytes).await;
    for holder in [&bob, &u] {
        assert_eq!(fetch(&fx.store, holder).await, bytes);
    }
    assert_clean(&fx.store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_quota_is_64_mib_exactly() {
    assert_eq!(DEFAULT_QUOTA_BYTES, 67_108_864);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path(), StoreConfig::default()).expect("open");
    let u = user("alice");
    store.provision_user(&u).await.expect("provision");
    let exact = vec![7u8; DEFAULT_QUOTA_BYTES as usize];
    let r1 = put_ok(&store, &u, Precondition::MustNotExist, &exact).await;
    assert_eq!(r1.info.size, DEFAULT_QUOTA_BYTES);
    let mut over = exact;
    over.push(8);
    let err = put(
        &store,
        &u,
        Precondition::MustMatch(r1.info.revision.clone()),
        &over,
    )
    .await
    .expect_err("over quota");
    assert!(matches!(
        err,
        PutError::QuotaExceeded {
            quota: DEFAULT_QUOTA_BYTES
        }
    ));
    assert_eq!(
        store.head(&u).await.expect("head").revision,
        r1.info.revision
    );
}

/// The store's identity is made once and kept: reopening the same directory gives it back, and
/// another directory is another store (issue 35: a client keys its sync state by it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_id_is_made_once_and_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = SqliteStore::open(dir.path(), StoreConfig::default())
        .expect("open")
        .store_id()
        .clone();
    assert_eq!(first.as_str().len(), 32);
    assert!(
        first
            .as_str()
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    let again = SqliteStore::open(dir.path(), StoreConfig::default()).expect("reopen");
    assert_eq!(again.store_id(), &first);
    let other = tempfile::tempdir().expect("tempdir");
    let elsewhere = SqliteStore::open(other.path(), StoreConfig::default()).expect("open");
    assert_ne!(elsewhere.store_id(), &first);
}
