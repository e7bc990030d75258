//! Valid user databases of a chosen size, for suites whose subject is a store or a transport but
//! whose images must pass the hub's validation (a secrets-free plain user database, §9.3).
//!
//! Each is the reference's fresh export (`fresh-v6.export.snug`) with a row naming its seed, so
//! two seeds never give the same bytes, and settings rows of filler JSON strings of 60,000
//! characters each (rows that overflow into chains of pages, as a real user database's
//! documents and chat histories do) up to the size asked. Nothing is deleted, so no page is
//! free; free space inside pages may still hold bytes: a suite comparing what a hub stores passes the result through the schema crate's
//! `scrub_free_space` (which this crate does not depend on, as the schema crate's own tests use
//! this one).
//!
//! [`exactly`] gives one of a length to the page (a transport's chunk boundaries), and
//! [`edited`] a copy of any image with SQL applied, for the images a suite needs that differ
//! from another by a known edit (a delta's target, a refused image, free space that holds a
//! deleted value).

use std::path::Path;

/// The smallest database [`filled`] makes: the fresh export with its seed row.
pub const MIN_LEN: usize = 28 * 4096;

/// A valid, secrets-free user database distinct per `seed`, of at most `len` bytes (and more
/// than `len` less 256 KiB) when `len` is at least [`MIN_LEN`] plus 256 KiB; otherwise the
/// smallest one, whatever `len` asked.
pub fn filled(len: usize, seed: u64) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("filled.snug");
    std::fs::copy(crate::vector("userdb/fresh-v6.export.snug"), &path).expect("copy");
    // The vectors are read-only; the copy must not be.
    let mut permissions = std::fs::metadata(&path).expect("stat").permissions();
    #[allow(
        clippy::permissions_set_readonly_false,
        reason = "a private temporary copy"
    )]
    permissions.set_readonly(false);
    std::fs::set_permissions(&path, permissions).expect("chmod");
    fill(&path, len, seed);
    std::fs::read(&path).expect("read")
}

/// A valid, secrets-free user database distinct per `seed` of exactly `len` bytes: `len` is a
/// whole number of 4096-byte pages, at least [`MIN_LEN`] plus four.
///
/// It is [`filled`] short of `len`, then grown a row at a time, without `VACUUM` (which could
/// shrink it again), until it has the pages asked for; its free space may hold bytes.
pub fn exactly(len: usize, seed: u64) -> Vec<u8> {
    assert!(
        len.is_multiple_of(4096) && len >= MIN_LEN + 4 * 4096,
        "{len} is not a whole number of pages above the smallest database"
    );
    let pages = (len / 4096) as i64;
    // A row of this size splits a leaf into at most one new page at a time, nearly always; a
    // split that also grows an interior page adds two, so a smaller row is tried from the start.
    for row_len in [1_000, 700, 300] {
        let bytes = filled(len - 4 * 4096, seed);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("exactly.snug");
        std::fs::write(&path, bytes).expect("write");
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;")
            .expect("pragmas");
        let page_count = || -> i64 {
            conn.query_row("PRAGMA page_count", [], |r| r.get(0))
                .expect("page_count")
        };
        let mut row = 0u64;
        while page_count() < pages {
            conn.execute(
                "INSERT INTO snug_settings (key, value) VALUES (?1, ?2)",
                (
                    format!("pad:{seed:016x}:{row:06}"),
                    format!("\"{}\"", "p".repeat(row_len)),
                ),
            )
            .expect("insert");
            row += 1;
        }
        if page_count() == pages {
            drop(conn);
            return std::fs::read(&path).expect("read");
        }
    }
    panic!("no row size grew the database to exactly {len} bytes");
}

/// A copy of `image` with `sql` (a batch of statements) applied, as SQLite then leaves the file:
/// what a deletion frees stays in the free space unless `sql` turns `secure_delete` on or
/// `VACUUM`s.
pub fn edited(image: &[u8], sql: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("edited.sqlite");
    std::fs::write(&path, image).expect("write");
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.execute_batch(sql).expect("the edit's SQL");
    drop(conn);
    std::fs::read(&path).expect("read")
}

fn fill(path: &Path, len: usize, seed: u64) {
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; BEGIN;")
        .expect("pragmas");
    conn.execute(
        "INSERT INTO snug_settings (key, value) VALUES ('test:seed', ?1)",
        [format!("\"{seed:016x}\"")],
    )
    .expect("seed row");
    let mut x = seed.max(1);
    let page_count = || -> usize {
        conn.query_row("PRAGMA page_count", [], |r| r.get::<_, i64>(0))
            .expect("page_count") as usize
    };
    let mut row = 0u64;
    while page_count() * 4096 + 256 * 1024 <= len {
        let mut text = String::with_capacity(60_016);
        while text.len() < 60_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push_str(&format!("{x:016x}"));
        }
        conn.execute(
            "INSERT INTO snug_settings (key, value) VALUES (?1, ?2)",
            (format!("filler:{row}"), format!("\"{text}\"")),
        )
        .expect("insert");
        row += 1;
    }
    conn.execute_batch("COMMIT;").expect("commit");
}
