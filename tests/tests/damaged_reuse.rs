//! A put heals the damage it would have reused (issue 36 point 8), over HTTP on the embedded
//! store: one byte of a stored pack is flipped on disk, so alice's `GET /userdb` fails; bob then
//! pushes an image that shares her pages, which is acknowledged only because the damaged chunk
//! was written afresh from his bytes, and both images read back whole.

use std::os::unix::fs::FileExt as _;

use snug_e2e::{Http, Hub, Options, get_userdb, put_userdb, userdb_with_seeded_filler};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_sharing_a_damaged_chunk_lands_and_heals_the_revisions_that_hold_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("sync");
    let hub = Hub::start(Options {
        sync_dir: Some(store.clone()),
        ..Options::default()
    })
    .await;
    let (alice, bob) = (hub.add_user("alice"), hub.add_user("bob"));
    let http = Http::new(hub.http);
    let (image, _) = userdb_with_seeded_filler(1 << 20, 7);
    let stored = put_userdb(&http, &alice, ("if-none-match", "*"), image.clone()).await;
    assert_eq!(stored.status, 204);

    // Flip one byte in the middle of the one pack her put wrote.
    let packs: Vec<_> = std::fs::read_dir(store.join("packs"))
        .expect("packs")
        .map(|entry| entry.expect("entry").path())
        .collect();
    assert_eq!(packs.len(), 1, "{packs:?}");
    let pack = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&packs[0])
        .expect("open the pack");
    let middle = pack.metadata().expect("metadata").len() / 2;
    let mut byte = [0u8];
    pack.read_exact_at(&mut byte, middle).expect("read");
    pack.write_all_at(&[byte[0] ^ 0x01], middle).expect("write");
    drop(pack);
    let damaged = get_userdb(&http, &alice).await;
    assert!(
        damaged.status != 200 || damaged.body.as_ref() != image.as_slice(),
        "the damage is real"
    );

    // Bob's image is hers: every chunk is shared, the damaged one among them.
    let healed = put_userdb(&http, &bob, ("if-none-match", "*"), image.clone()).await;
    assert_eq!(healed.status, 204, "{:?}", healed.json());
    for (who, token) in [("bob", &bob), ("alice", &alice)] {
        let read = get_userdb(&http, token).await;
        assert_eq!(read.status, 200, "{who}");
        assert!(
            read.body.as_ref() == image.as_slice(),
            "{who}'s image reads whole"
        );
    }
}
