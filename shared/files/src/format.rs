//! The leading bytes by which a Snug user file's format is known (§10: never by its name), defined once for every crate that looks at them.
//!
//! `snug-container` and `snug-schema` re-export them in their own vocabulary; the sync store reads
//! the SQLite header of stored images and the gateway refuses a container pushed to the hub, both
//! by these bytes.

/// The leading bytes of every SQLite database file: a plain user database (§10).
pub const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The leading bytes of a protected user file, a SNUGENC1 container (§11.1).
pub const CONTAINER_MAGIC: &[u8; 9] = b"SNUGENC1\n";

/// The length of the SQLite database header.
pub const SQLITE_HEADER_LEN: usize = 100;

/// Checks that `bytes` are a whole SQLite database file by its header alone: the magic, a valid
/// page size, a length that is a whole number of pages, and, where the header's own database size
/// is valid (every SQLite since 3.7.0 keeps it so), exactly that many pages. A truncated or padded
/// file fails; the pages themselves are not read (that is `PRAGMA quick_check`'s work). On
/// failure, says what is wrong.
pub fn check_sqlite_file(bytes: &[u8]) -> Result<(), &'static str> {
    if !bytes.starts_with(SQLITE_MAGIC) {
        return Err("it does not start with the SQLite magic");
    }
    if bytes.len() < SQLITE_HEADER_LEN {
        return Err("it is shorter than a SQLite header");
    }
    let be32 =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let page_size = match u16::from_be_bytes([bytes[16], bytes[17]]) {
        1 => 65_536,
        n if n >= 512 && n.is_power_of_two() => u64::from(n),
        _ => return Err("its header names an invalid page size"),
    };
    let len = bytes.len() as u64;
    if len < page_size || !len.is_multiple_of(page_size) {
        return Err("its length is not a whole number of pages");
    }
    let (change_counter, pages, valid_for) = (be32(24), be32(28), be32(92));
    if pages != 0 && valid_for == change_counter && u64::from(pages) * page_size != len {
        return Err(
            "its length differs from the database size its header records (truncated or padded)",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header for `pages` pages of `page_size` (as stored: 1 for 65536), change counter 7, and
    /// the in-header size valid unless `valid_for` differs.
    fn file(page_size: u16, pages: u32, len: usize, valid_for: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        bytes[..16].copy_from_slice(SQLITE_MAGIC);
        bytes[16..18].copy_from_slice(&page_size.to_be_bytes());
        bytes[24..28].copy_from_slice(&7u32.to_be_bytes());
        bytes[28..32].copy_from_slice(&pages.to_be_bytes());
        bytes[92..96].copy_from_slice(&valid_for.to_be_bytes());
        bytes
    }

    #[test]
    fn whole_files_pass_and_cut_or_padded_ones_fail() {
        let cases: Vec<(&str, Vec<u8>, bool)> = vec![
            ("one page", file(4096, 1, 4096, 7), true),
            ("eight pages", file(512, 8, 4096, 7), true),
            ("64 KiB pages", file(1, 2, 131_072, 7), true),
            (
                "stale in-header size is ignored",
                file(4096, 9, 8192, 6),
                true,
            ),
            ("no in-header size", file(4096, 0, 8192, 7), true),
            ("half of it", file(4096, 4, 8192, 7), false),
            ("a page too many", file(4096, 2, 12_288, 7), false),
            ("not whole pages", file(4096, 1, 4100, 7), false),
            ("less than a page", file(4096, 1, 100, 7), false),
            (
                "page size not a power of two",
                file(1000, 4, 4000, 7),
                false,
            ),
            ("page size too small", file(256, 16, 4096, 7), false),
            ("shorter than a header", SQLITE_MAGIC.to_vec(), false),
            ("no magic", vec![0; 4096], false),
            ("a container", CONTAINER_MAGIC.to_vec(), false),
        ];
        for (name, bytes, whole) in cases {
            assert_eq!(check_sqlite_file(&bytes).is_ok(), whole, "{name}");
        }
    }
}
