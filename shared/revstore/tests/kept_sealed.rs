//! Large images kept sealed for a gateway in the same process (`snug_files::sealed`): within the
//! budget of the store's sealer, after one whole download, later downloads are served from the
//! sealed copy; beyond it, or when the first download is abandoned, they are read from the packs
//! as before; an image kept but not downloaded for five minutes gives its place to one that does
//! not fit; a download of a named revision keeps nothing.
//! Each test builds its own sealer, so they share no registry or budget and may run in parallel.

#![cfg(target_os = "linux")]

mod support;

use std::time::Duration;

use futures::StreamExt as _;
use snug_files::sealed::Sealer;
use snug_revstore::{Precondition, RevStore, SqliteStore, UserId};
use support::*;

const LEN: usize = 5 * 1024 * 1024 + 123;

/// A store sealing with `sealer`, holding one large image for each of alice and bob.
async fn two_large_images(sealer: &Sealer) -> (Fixture<SqliteStore>, [(UserId, Vec<u8>); 2]) {
    let (mut config, clock, faults) = config(&Tune {
        quota: 16 << 20,
        ..Tune::default()
    });
    config.sealer = sealer.clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path(), config).expect("open sqlite store");
    let root = dir.path().to_owned();
    let (counted, scanned) = (root.clone(), root.clone());
    let fx = Fixture {
        scan: std::sync::Arc::new(move |needles| {
            let root = scanned.clone();
            Box::pin(async move { scan_dir(&root, &needles) })
        }),
        at_rest: std::sync::Arc::new(move || {
            let root = counted.clone();
            Box::pin(async move { sqlite_at_rest(&root) })
        }),
        store,
        clock,
        faults,
        guard: Box::new(dir),
        damage: std::sync::Arc::new(move |chunk| {
            let root = root.clone();
            Box::pin(async move { damage_sqlite_chunk(&root, &chunk) })
        }),
    };
    let images = [(user("alice"), image(1, LEN)), (user("bob"), image(2, LEN))];
    for (u, bytes) in &images {
        fx.store.provision_user(u).await.expect("provision");
        put_ok(&fx.store, u, Precondition::MustNotExist, bytes).await;
    }
    (fx, images)
}

/// Every piece of the user's current image, and whether `sealer` sealed each.
async fn download(store: &SqliteStore, sealer: &Sealer, u: &UserId) -> (Vec<u8>, Vec<bool>) {
    let mut body = store.get(u, &who("device-b")).await.expect("get").body;
    let (mut bytes, mut sealed) = (Vec::new(), Vec::new());
    while let Some(piece) = body.next().await {
        let piece = piece.expect("piece");
        sealed.push(sealer.file_range(&piece).is_some());
        bytes.extend_from_slice(&piece);
    }
    (bytes, sealed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_budget_large_images_are_read_from_the_packs() {
    let sealer = Sealer::new(0);
    let (fx, [(a, image_a), _]) = two_large_images(&sealer).await;
    for _ in 0..2 {
        let (bytes, sealed) = download(&fx.store, &sealer, &a).await;
        assert_eq!(bytes, image_a);
        assert!(sealed.iter().all(|s| !s), "{sealed:?}");
    }
    assert_eq!(sealer.reserved_bytes(), 0);
    assert_clean(&fx.store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_images_are_kept_sealed_within_the_budget() {
    let sealer = Sealer::new(LEN + 1000);
    let (fx, [(a, image_a), (b, image_b)]) = two_large_images(&sealer).await;

    // Room for one: the first whole download keeps alice's image, and the next is served whole
    // from the sealed copy.
    // A download of a named revision uses a plan no later download finds: nothing is kept.
    let revision = fx.store.head(&a).await.expect("head").revision;
    // (A gathering would hold its claim from before the first piece to the end.)
    let mut named = fx
        .store
        .get_revision(&a, &revision, &who("device-b"))
        .await
        .expect("get revision")
        .body;
    let mut bytes = named.next().await.expect("a piece").expect("read").to_vec();
    assert_eq!(sealer.reserved_bytes(), 0);
    while let Some(piece) = named.next().await {
        bytes.extend_from_slice(&piece.expect("read"));
    }
    assert_eq!(bytes, image_a);
    let (bytes, sealed) = download(&fx.store, &sealer, &a).await;
    assert_eq!(bytes, image_a);
    assert!(
        sealed.iter().all(|s| !s),
        "the first is read from the packs"
    );
    wait_for_reserved(&sealer, LEN).await;
    let (bytes, sealed) = download(&fx.store, &sealer, &a).await;
    assert_eq!(bytes, image_a);
    assert_eq!(sealed, [true], "one sealed piece, the whole image");

    // Bob's does not fit beside it while alice's is in use, and is read from the packs.
    for _ in 0..2 {
        let (bytes, sealed) = download(&fx.store, &sealer, &b).await;
        assert_eq!(bytes, image_b);
        assert!(sealed.iter().all(|s| !s), "{sealed:?}");
    }

    // Once alice's has not been downloaded for over five minutes, bob's download takes its place;
    // alice's next downloads are read from the packs again and do not take it back while bob's
    // is in use.
    fx.clock.advance(Duration::from_secs(5 * 60 + 1));
    let (bytes, _) = download(&fx.store, &sealer, &b).await;
    assert_eq!(bytes, image_b);
    let (bytes, sealed) = retry_until_sealed(&fx.store, &sealer, &b).await;
    assert_eq!(bytes, image_b);
    assert_eq!(sealed, [true]);
    for _ in 0..2 {
        let (bytes, sealed) = download(&fx.store, &sealer, &a).await;
        assert_eq!(bytes, image_a);
        assert!(sealed.iter().all(|s| !s), "{sealed:?}");
    }
    assert_eq!(sealer.reserved_bytes(), LEN);

    // A new revision of bob's replaces his plan: the sealed copy of the old one goes, and with
    // it its claim on the budget, once no download holds it.
    let mut next = image_b.clone();
    next[LEN / 2] ^= 0xff;
    let current = fx
        .store
        .get(&b, &who("device-b"))
        .await
        .expect("get")
        .info
        .revision;
    put_ok(&fx.store, &b, Precondition::MustMatch(current), &next).await;
    wait_for_reserved(&sealer, 0).await;

    // A download abandoned after its first piece keeps nothing; the next whole one does.
    let mut body = fx.store.get(&a, &who("device-b")).await.expect("get").body;
    body.next().await.expect("a piece").expect("read");
    drop(body);
    wait_for_reserved(&sealer, 0).await;
    let (bytes, _) = download(&fx.store, &sealer, &a).await;
    assert_eq!(bytes, image_a);
    wait_for_reserved(&sealer, LEN).await;
    let (bytes, sealed) = download(&fx.store, &sealer, &a).await;
    assert_eq!(bytes, image_a);
    assert_eq!(sealed, [true]);
    assert_clean(&fx.store).await;
}

/// Downloads until one is served from the sealed copy: the gathering that keeps the image
/// finishes just after the download that gathered it.
async fn retry_until_sealed(
    store: &SqliteStore,
    sealer: &Sealer,
    u: &UserId,
) -> (Vec<u8>, Vec<bool>) {
    eventually(sealer, "a download served from a sealed copy", async || {
        let (bytes, sealed) = download(store, sealer, u).await;
        (sealed == [true]).then_some((bytes, sealed))
    })
    .await
}

/// Waits for the budget's claims to come to `len`: the gathering thread finishes after the
/// download's last piece, and a forgotten plan's bytes go with the last download holding them.
async fn wait_for_reserved(sealer: &Sealer, len: usize) {
    eventually(sealer, &format!("{len} bytes reserved"), async || {
        (sealer.reserved_bytes() == len).then_some(())
    })
    .await
}

/// Polls `check` every 10 ms until it yields a value, for at most five seconds.
async fn eventually<T>(
    sealer: &Sealer,
    what: &str,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    for _ in 0..500 {
        if let Some(value) = check().await {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never: {what} (reserved now: {})", sealer.reserved_bytes());
}
