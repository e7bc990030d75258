//! The large-buffer budget of a `snug_files::sealed::Sealer`, which each sealer has to itself.

#![cfg(target_os = "linux")]

use std::os::unix::fs::FileExt as _;

use snug_files::sealed::{NoRoom, Sealer};

const MIB: usize = 1 << 20;

fn content(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

#[test]
fn large_buffers_are_sealed_within_the_budget_and_give_it_back() {
    let unbudgeted = Sealer::new(0);
    assert_eq!(
        unbudgeted.reserve(MIB).map(|_| ()),
        Err(NoRoom::Never),
        "no budget, no reservation"
    );

    let sealer = Sealer::new(3 * MIB);
    let first = sealer.reserve(2 * MIB).expect("room for 2 MiB");
    assert_eq!(
        sealer.reserve(2 * MIB).map(|_| ()),
        Err(NoRoom::Taken),
        "only 1 MiB left"
    );
    assert!(sealer.reserve(usize::MAX).is_err(), "no overflow");
    let second = sealer.reserve(MIB).expect("the last MiB");
    assert_eq!(sealer.reserved_bytes(), 3 * MIB);

    // Dropped unused: its claim is free again.
    drop(second);
    assert_eq!(sealer.reserved_bytes(), 2 * MIB);

    // Sealed: every slice is found in a file holding the same bytes, and the claim lasts as long
    // as any clone of the buffer.
    let bytes = content(2 * MIB - 7);
    let kept = first.seal(bytes.clone()).expect("sealed");
    assert_eq!(kept[..], bytes[..]);
    let tail = kept.slice(MIB..);
    let (file, offset) = sealer.file_range(&tail).expect("registered");
    assert_eq!(offset, MIB as u64);
    let mut read = vec![0; tail.len()];
    file.read_exact_at(&mut read, offset).expect("read");
    assert_eq!(read[..], bytes[MIB..]);
    assert!(file.write_at(b"x", 0).is_err(), "the file is sealed");
    drop(kept);
    assert_eq!(sealer.reserved_bytes(), 2 * MIB, "a slice keeps the claim");
    drop(tail);
    assert_eq!(sealer.reserved_bytes(), 0);

    // More than was reserved, or nothing: not sealed, and the claim is given back.
    let small = sealer.reserve(MIB).expect("room");
    assert!(small.seal(content(MIB + 1)).is_none());
    assert!(
        sealer
            .reserve(MIB)
            .expect("room")
            .seal(Vec::new())
            .is_none()
    );
    assert_eq!(sealer.reserved_bytes(), 0);

    // Another sealer's claims are its own.
    let _held = sealer.reserve(3 * MIB).expect("room");
    assert!(Sealer::new(MIB).reserve(MIB).is_ok());
}
