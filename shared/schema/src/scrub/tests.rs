//! Unit tests of the scrubber's decoders; whole-file behaviour is in `tests/scrub.rs`.

use super::*;

#[test]
fn varints_decode_as_sqlite_writes_them() {
    assert_eq!(varint(&[0x05], 0, 1), Some((5, 1)));
    assert_eq!(varint(&[0x81, 0x00], 0, 2), Some((128, 2)));
    // The ninth byte contributes all eight bits.
    assert_eq!(varint(&[0xff; 9], 0, 9), Some((u64::MAX, 9)));
    // A varint that runs past the limit is not read from the bytes beyond it.
    assert_eq!(varint(&[0x81, 0x00], 0, 1), None);
}

#[test]
fn the_schema_root_is_the_fourth_column() {
    // Record: header (5 bytes: len, 3 x text of 1 byte, int8), "t", "n", "n", 7.
    let record = [5u8, 15, 15, 15, 1, b't', b'n', b'n', 7];
    assert_eq!(schema_root(&record), Some(7));
    // A NULL rootpage (a view or trigger row) is 0.
    let record = [5u8, 15, 15, 15, 0, b'v', b'n', b'n'];
    assert_eq!(schema_root(&record), Some(0));
    // A negative rootpage is no page.
    let record = [5u8, 15, 15, 15, 1, b't', b'n', b'n', 0xff];
    assert_eq!(schema_root(&record), None);
}

#[test]
fn a_cell_spills_exactly_where_sqlite_spills_it() {
    let usable = 4096;
    // A table-leaf cell of max_local (U - 35) payload bytes stays on the page.
    let max_local = usable - 35;
    let mut page = vec![0u8; usable];
    page[0] = 0x9f; // payload varint 4061 = 0x1f | (0x1f << 7)
    page[1] = 0x5d;
    page[2] = 1; // rowid
    assert_eq!(varint(&page, 0, usable), Some((max_local as u64, 2)));
    let cell = parse_cell(&page, 0, usable, 0x0d).expect("a cell");
    assert_eq!((cell.local, cell.overflow), (max_local, None));
    // One byte more spills, keeping the minimum local part plus a 4-byte page number.
    page[1] = 0x5e;
    let cell = parse_cell(&page, 0, usable, 0x0d).expect("a cell");
    let min_local = (usable - 12) * 32 / 255 - 23;
    let surplus = min_local + (max_local + 1 - min_local) % (usable - 4);
    let expected = if surplus <= max_local {
        surplus
    } else {
        min_local
    };
    assert_eq!(cell.local, expected);
    assert_eq!(cell.size, 3 + expected + 4);
    assert!(cell.overflow.is_some());
}
