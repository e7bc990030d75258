//! A full disk under the embedded store (issue 19 point 3): its data directory on an 8 MiB tmpfs,
//! puts until the kernel says `ENOSPC`. The put that meets it fails as `STORAGE_FULL` (not
//! `STORAGE_UNAVAILABLE`: retrying cannot help until someone makes room), leaves no temporary
//! pack behind, and the store keeps serving the current revision byte-identical, also after a
//! reopen; three failed writes in a row make its health fail (readiness off) until a write lands
//! or, for a trial, 30 s pass; once room is made a put succeeds.
//!
//! Needs root to mount the tmpfs and skips visibly without it (`snug_test_support::tmpfs`).

mod support;

use snug_revstore::{Precondition, PutError, RevStore, SqliteStore, StorageError, StoreConfig};
use snug_test_support::tmpfs::Tmpfs;
use support::*;

const KIB: usize = 1 << 10;

fn store_config() -> (StoreConfig, std::sync::Arc<snug_revstore::ManualClock>) {
    let (config, clock, _) = support::config(&Tune {
        quota: 64 << 20,
        ..Tune::default()
    });
    (
        StoreConfig {
            chunk_size: 16 << 10,
            ..config
        },
        clock,
    )
}

fn is_full(err: &PutError) -> bool {
    matches!(err, PutError::Storage(StorageError::Full(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_storage_full_and_the_current_revision_stays_served() {
    // Declared first, so it is dropped (unmounted) last, after the store, also on a panic.
    let Some(disk) = Tmpfs::mount_if_possible(8 << 20) else {
        return;
    };
    let dir = disk.path().join("store");
    std::fs::create_dir(&dir).expect("store dir");
    // The operator's reserve: what they delete to make room.
    let reserve = disk.path().join("reserve");
    std::fs::write(&reserve, vec![0_u8; 1 << 20]).expect("reserve");

    let store = SqliteStore::open(&dir, store_config().0).expect("open");
    let u = user("full");
    store.provision_user(&u).await.expect("provision");

    // Distinct 512 KiB images (nothing deduplicates), no reclamation: the disk fills.
    let mut current: Option<(snug_revstore::Revision, Vec<u8>)> = None;
    let mut accepted = 0;
    let (err, refused) = loop {
        let bytes = image(100 + accepted, 512 * KIB);
        let precondition = match &current {
            Some((revision, _)) => Precondition::MustMatch(revision.clone()),
            None => Precondition::MustNotExist,
        };
        match put(&store, &u, precondition, &bytes).await {
            Ok(outcome) => {
                current = Some((outcome.info.revision, bytes));
                accepted += 1;
                assert!(accepted < 32, "32 puts of 512 KiB fit on an 8 MiB disk");
            }
            Err(err) => break (err, bytes),
        }
    };
    eprintln!("the disk filled after {accepted} puts: {err:?}");
    assert!(is_full(&err), "the put that met ENOSPC failed with {err:?}");
    assert_eq!(err.reason(), &snug_reasons::sync::STORAGE_FULL);
    let (revision, bytes) = current.expect("at least one put fits");

    // The failed put left nothing behind to keep the disk full.
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("tmp"))
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "temporary packs left: {leftovers:?}");

    // Full, the store still serves the current revision, byte-identical, and nothing is torn.
    assert_eq!(store.head(&u).await.expect("head").revision, revision);
    assert!(
        fetch(&store, &u).await == bytes,
        "the current image while full"
    );
    assert_clean(&store).await;
    // Another try while nothing changed is refused the same way.
    let again = put(
        &store,
        &u,
        Precondition::MustMatch(revision.clone()),
        &refused,
    )
    .await;
    assert!(again.as_ref().is_err_and(is_full), "{again:?}");

    // Two failed writes do not make a store unhealthy; the third in a row does, so readiness goes
    // off while every write would fail. The connection itself still answers.
    assert!(store.health().await.is_ok(), "two failures are not a trend");
    let third = put(
        &store,
        &u,
        Precondition::MustMatch(revision.clone()),
        &refused,
    )
    .await;
    assert!(third.as_ref().is_err_and(is_full), "{third:?}");
    match store.health().await {
        Err(err @ StorageError::Full(_)) => {
            assert_eq!(err.reason(), &snug_reasons::sync::STORAGE_FULL)
        }
        other => panic!("health after three full-disk failures: {other:?}"),
    }

    // Reopened on the full disk: the same revision, the same bytes.
    drop(store);
    let (config, clock) = store_config();
    let store = SqliteStore::open(&dir, config).expect("reopen on a full disk");
    assert_eq!(store.head(&u).await.expect("head").revision, revision);
    assert!(
        fetch(&store, &u).await == bytes,
        "the current image after a reopen"
    );

    // The reopened store learns it again from its own writes.
    for _ in 0..3 {
        let again = put(
            &store,
            &u,
            Precondition::MustMatch(revision.clone()),
            &refused,
        )
        .await;
        assert!(again.as_ref().is_err_and(is_full), "{again:?}");
    }
    assert!(
        store.health().await.is_err(),
        "full, and failing every write"
    );

    // Room made: health comes back for a trial after a while, and the refused put succeeds and
    // is served.
    std::fs::remove_file(&reserve).expect("free the reserve");
    assert!(store.health().await.is_err(), "still within the hold");
    clock.advance(std::time::Duration::from_secs(30));
    assert!(store.health().await.is_ok(), "a trial after the hold");
    let landed = put_ok(&store, &u, Precondition::MustMatch(revision), &refused).await;
    assert!(store.health().await.is_ok(), "a landed write resets it");
    assert_eq!(
        store.head(&u).await.expect("head").revision,
        landed.info.revision
    );
    assert!(fetch(&store, &u).await == refused);
    assert_clean(&store).await;
    drop(store);
    drop(disk);
}
