//! Benchmark: the free-space scrub of a 64 MiB user database with deleted rows in its free
//! space, against SHA-256 of the same bytes in the same run (the hub hashes every pushed image
//! anyway, so the ratio says what the scrub adds). Run with
//! `cargo bench -p snug-schema --bench scrub`.

#![allow(clippy::unwrap_used, reason = "a benchmark aborts on any failure")]
#![allow(clippy::print_stdout, reason = "a benchmark prints its table")]

use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use sha2::{Digest, Sha256};
use snug_schema::{MAX_USERDB_BYTES, dirty_free_space, scrub_free_space};

/// Deterministic filler, not trivially compressible.
fn words(state: &mut u64, n_bytes: usize) -> String {
    const WORDS: [&str; 8] = [
        "<div>", "function", "render", "snug", "table", "=>", "await", "</div>",
    ];
    let mut out = String::with_capacity(n_bytes + 16);
    while out.len() < n_bytes {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        out.push_str(WORDS[(*state % 8) as usize]);
        out.push_str(&format!("{} ", *state % 1000));
    }
    out
}

/// A ~64 MiB image in the user database's shape: many small rows (chat, settings, app data),
/// large overflowing ones (app versions), an index, and a third of the rows deleted without
/// VACUUM so that freeblocks, unallocated areas and free-list pages all hold old bytes.
fn image() -> Vec<u8> {
    let mut conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "PRAGMA secure_delete = OFF;
         CREATE TABLE messages (id INTEGER PRIMARY KEY, thread TEXT, content TEXT);
         CREATE INDEX messages_thread ON messages (thread);
         CREATE TABLE versions (app TEXT, version INTEGER, html TEXT, PRIMARY KEY (app, version));",
    )
    .unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15;
    let tx = conn.unchecked_transaction().unwrap();
    for n in 0..36_000i64 {
        tx.execute(
            "INSERT INTO messages (id, thread, content) VALUES (?1, ?2, ?3)",
            params![
                n,
                format!("thread-{}", n % 97),
                words(&mut state, 300 + (n % 900) as usize)
            ],
        )
        .unwrap();
    }
    for n in 0..190i64 {
        tx.execute(
            "INSERT INTO versions VALUES (?1, ?2, ?3)",
            params![format!("app-{}", n % 40), n, words(&mut state, 160 * 1024)],
        )
        .unwrap();
    }
    tx.execute("DELETE FROM messages WHERE id % 3 = 0", [])
        .unwrap();
    tx.execute("DELETE FROM versions WHERE version % 4 = 0", [])
        .unwrap();
    tx.commit().unwrap();
    conn.serialize(rusqlite::MAIN_DB).unwrap().to_vec()
}

fn median(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut samples: Vec<Duration> = (0..runs).map(|_| f()).collect();
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let image = image();
    let size = image.len() as u64;
    assert!(size <= MAX_USERDB_BYTES, "{size} over the cap");
    let dirty = dirty_free_space(&image).unwrap();
    let dirty_bytes: u64 = dirty.iter().map(|r| r.end - r.start).sum();
    println!(
        "image: {:.1} MiB, {} dirty free-space ranges, {:.1} MiB to zero",
        size as f64 / 1048576.0,
        dirty.len(),
        dirty_bytes as f64 / 1048576.0
    );
    let runs = 11;
    let sha = median(runs, || {
        let start = Instant::now();
        std::hint::black_box(Sha256::digest(std::hint::black_box(&image)));
        start.elapsed()
    });
    let walk = median(runs, || {
        let start = Instant::now();
        std::hint::black_box(dirty_free_space(std::hint::black_box(&image)).unwrap());
        start.elapsed()
    });
    let scrub = median(runs, || {
        let start = Instant::now();
        std::hint::black_box(scrub_free_space(std::hint::black_box(&image)).unwrap());
        start.elapsed()
    });
    let scrubbed = scrub_free_space(&image).unwrap();
    let clean = median(runs, || {
        let start = Instant::now();
        std::hint::black_box(dirty_free_space(std::hint::black_box(&scrubbed)).unwrap());
        start.elapsed()
    });
    println!(
        "sha256 of the image:                      median {:.1} ms",
        ms(sha)
    );
    println!(
        "dirty_free_space (walk, what the hub asks): median {:.1} ms = {:.2}x sha256",
        ms(walk),
        walk.as_secs_f64() / sha.as_secs_f64()
    );
    println!(
        "scrub_free_space (walk + copy + zero):      median {:.1} ms = {:.2}x sha256",
        ms(scrub),
        scrub.as_secs_f64() / sha.as_secs_f64()
    );
    println!(
        "dirty_free_space of an already scrubbed image: median {:.1} ms = {:.2}x sha256",
        ms(clean),
        clean.as_secs_f64() / sha.as_secs_f64()
    );
}
