//! Racing losers leave nothing on disk (issue 23, point 2): four clients race `PUT /userdb` on
//! one base for three rounds; each round one wins (204) and the others get 412 with the winner's
//! ETag, and once the race ends the embedded store's pack files hold exactly the distinct chunks
//! of the winners' images: a loser's bytes are reclaimed as soon as it loses, not a day later.

use std::collections::HashSet;

use sha2::{Digest as _, Sha256};
use snug_e2e::{
    Http, Hub, Options, etag_revision, put_userdb, stored_form, userdb_with_seeded_filler,
};

const CLIENTS: u64 = 4;
const ROUNDS: u64 = 3;
const IMAGE: usize = 12 << 20;
/// The embedded store's chunk size (one SQLite page).
const CHUNK: usize = 4096;

/// The bytes of the distinct chunks of `images`: what a content-addressed store of exactly these
/// images holds.
fn distinct_chunk_bytes(images: &[Vec<u8>]) -> u64 {
    let mut seen = HashSet::new();
    images
        .iter()
        .flat_map(|image| image.chunks(CHUNK))
        .filter(|chunk| seen.insert(Sha256::digest(chunk)))
        .map(|chunk| chunk.len() as u64)
        .sum()
}

/// Every byte of the store's pack files, linked in place or in flight.
fn at_rest(store: &std::path::Path) -> u64 {
    ["packs", "tmp"]
        .iter()
        .filter_map(|dir| std::fs::read_dir(store.join(dir)).ok())
        .flatten()
        .map(|entry| entry.expect("entry").metadata().expect("metadata").len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_losers_leave_only_the_winners_bytes_on_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("sync");
    let hub = Hub::start(Options {
        sync_dir: Some(store.clone()),
        ..Options::default()
    })
    .await;
    let token = hub.add_user("alice");
    let http = Http::new(hub.http);
    let (first, _) = userdb_with_seeded_filler(IMAGE, 1);
    let created = put_userdb(&http, &token, ("if-none-match", "*"), first.clone()).await;
    assert_eq!(created.status, 204);
    let mut current = etag_revision(&created);
    let mut winners = vec![stored_form(&first)];
    for round in 0..ROUNDS {
        let images: Vec<Vec<u8>> = (0..CLIENTS)
            .map(|client| userdb_with_seeded_filler(IMAGE, 100 + round * 10 + client).0)
            .collect();
        let base = format!("\"{current}\"");
        let answers = futures::future::join_all(
            images
                .iter()
                .map(|image| put_userdb(&http, &token, ("if-match", &base), image.clone())),
        )
        .await;
        let won: Vec<usize> = (0..answers.len())
            .filter(|&i| answers[i].status == 204)
            .collect();
        let [winner] = won.as_slice() else {
            panic!(
                "round {round}: one winner expected, statuses {:?}",
                answers.iter().map(|a| a.status).collect::<Vec<_>>()
            );
        };
        current = etag_revision(&answers[*winner]);
        for (i, answer) in answers.iter().enumerate() {
            if i != *winner {
                snug_e2e::assert_stale_revision(answer, &current);
            }
        }
        winners.push(stored_form(&images[*winner]));
    }
    assert_eq!(
        at_rest(&store),
        distinct_chunk_bytes(&winners),
        "the store holds the winners' chunks and nothing of the losers'"
    );
}
