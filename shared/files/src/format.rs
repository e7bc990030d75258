//! The leading bytes by which a Snug user file's format is known (§10: never by its name), defined once for every crate that looks at them.
//!
//! `snug-container` and `snug-schema` re-export them in their own vocabulary; the sync store reads
//! the SQLite header of stored images and the gateway refuses a container pushed to the hub, both
//! by these bytes.
//!
//! Also the two rules of SQLite's cell layout that more than one page reader needs (the free-space
//! scrub in `snug-schema`, the page shapes of `snug-delta`): how a varint is read and how much of
//! a cell's payload stays on its page.

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

/// Reads the SQLite varint at the start of `bytes` (file format §1.6: big-endian, seven bits a
/// byte, up to nine bytes, the ninth contributing all eight of its bits): its value and its
/// length, or `None` when `bytes` ends first.
pub fn sqlite_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().take(9).enumerate() {
        if i == 8 {
            return Some(((value << 8) | u64::from(*byte), 9));
        }
        value = (value << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// How many bytes of a cell's `payload` a b-tree page of type `kind` keeps on the page, for
/// pages of `usable` bytes (file format §1.6); the rest spills to overflow pages, and the four
/// bytes after the local part name the first. `None` for a usable size no SQLite file has.
pub fn local_payload(kind: u8, usable: u64, payload: u64) -> Option<u64> {
    let min_local = (usable.checked_sub(12)? * 32 / 255).checked_sub(23)?;
    let max_local = if kind == 0x0d {
        usable.checked_sub(35)?
    } else {
        (usable.checked_sub(12)? * 64 / 255).checked_sub(23)?
    };
    if payload <= max_local {
        return Some(payload);
    }
    let surplus = min_local + (payload - min_local) % usable.checked_sub(4)?;
    Some(if surplus <= max_local {
        surplus
    } else {
        min_local
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_sqlites() {
        for (bytes, expected) in [
            (&[0x05][..], Some((5, 1))),
            (&[0x81, 0x00], Some((128, 2))),
            (&[0xff; 9], Some((u64::MAX, 9))),
            (&[0x81], None),
            (&[], None),
        ] {
            assert_eq!(sqlite_varint(bytes), expected, "{bytes:?}");
        }
    }

    #[test]
    fn a_payload_stays_on_its_page_up_to_max_local_then_spills_as_section_1_6_says() {
        // 4096-byte pages, no reserved bytes: table leaves keep up to U - 35 = 4061 bytes,
        // other pages up to (U - 12) * 64 / 255 - 23 = 1002; min_local is 489.
        for (kind, payload, local) in [
            (0x0d, 4061, 4061),
            // Surplus min_local + (P - min_local) % (U - 4) over max_local: min_local stays.
            (0x0d, 4062, 489),
            (0x0a, 1002, 1002),
            (0x0a, 1003, 489),
            (0x0a, 489 + 4092 + 1000, 489),
            // Surplus within max_local: it stays.
            (0x0d, 40_000, 3172),
            (0x0a, 489 + 4092 + 100, 589),
        ] {
            assert_eq!(
                local_payload(kind, 4096, payload),
                Some(local),
                "{kind:#x} {payload}"
            );
        }
        assert_eq!(local_payload(0x0d, 30, 100), None);
    }

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
