//! Fuzz target: arbitrary bytes, and the same bytes behind a plausible SQLite header, through the free-space scrubber: it never panics, never changes what SQLite reads, and a scrubbed image has nothing left to scrub.
#![no_main]

use libfuzzer_sys::fuzz_target;
use snug_schema::{dirty_free_space, scrub_free_space, scrub_free_space_in_place};

fuzz_target!(|data: &[u8]| {
    check(data);
    // The first byte picks a page size; the rest is laid behind a valid header so the fuzzer
    // gets past it to the b-tree pages, the free list and the overflow chains.
    if let Some((&selector, rest)) = data.split_first() {
        let page_size = 512usize << (selector % 4);
        let mut image = rest.to_vec();
        image.resize(image.len().max(100).div_ceil(page_size) * page_size, 0);
        image[..16].copy_from_slice(b"SQLite format 3\0");
        image[16..18].copy_from_slice(&(page_size as u16).to_be_bytes());
        image[18] = 1;
        image[19] = 1;
        image[20] = selector >> 6;
        image[21..24].copy_from_slice(&[64, 32, 32]);
        check(&image);
    }
});

fn check(bytes: &[u8]) {
    let mut copy = bytes.to_vec();
    match scrub_free_space_in_place(&mut copy) {
        Err(_) => {
            assert_eq!(copy, bytes, "a refused image is left as it was");
            return;
        }
        Ok(report) => {
            assert_eq!(copy.len(), bytes.len());
            for (i, (a, b)) in bytes.iter().zip(&copy).enumerate() {
                if a != b {
                    assert_eq!(*b, 0, "the scrub only writes zeros");
                    assert!(
                        report
                            .ranges
                            .iter()
                            .any(|r| r.start <= i as u64 && (i as u64) < r.end),
                        "byte {i} changed outside the reported ranges"
                    );
                }
            }
        }
    }
    assert_eq!(dirty_free_space(&copy).ok(), Some(Vec::new()), "idempotent");
    assert_eq!(scrub_free_space(&copy).ok().as_deref(), Some(&copy[..]));
    // What SQLite reads is unchanged: the same answer to a full read of every table.
    if let (Some(before), Some(after)) = (content(bytes), content(&copy)) {
        assert_eq!(before, after);
    }
}

/// `integrity_check` and every row of every table, or `None` when SQLite cannot read it all.
fn content(bytes: &[u8]) -> Option<Vec<String>> {
    let mut conn = rusqlite::Connection::open_in_memory().ok()?;
    conn.deserialize_read_exact(rusqlite::MAIN_DB, bytes, bytes.len(), true)
        .ok()?;
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .ok()?;
    if check != "ok" {
        return None;
    }
    let mut out = vec![check];
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .ok()?
        .query_map([], |row| row.get(0))
        .ok()?
        .collect::<Result<_, _>>()
        .ok()?;
    for table in ["sqlite_master".to_owned()].into_iter().chain(tables) {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM \"{}\"", table.replace('"', "\"\"")))
            .ok()?;
        let n = stmt.column_count();
        let rows = stmt
            .query_map([], |row| {
                let values: Vec<rusqlite::types::Value> =
                    (0..n).map(|i| row.get(i)).collect::<Result<_, _>>()?;
                Ok(format!("{table}: {values:?}"))
            })
            .ok()?
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        out.extend(rows);
    }
    Some(out)
}
