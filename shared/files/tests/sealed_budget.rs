//! The large-buffer budget of `snug_files::sealed` (a process of its own: the budget is global).

#![cfg(target_os = "linux")]

use std::os::unix::fs::FileExt as _;

use snug_files::sealed;

const MIB: usize = 1 << 20;

fn content(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

#[test]
fn large_buffers_are_sealed_within_the_budget_and_give_it_back() {
    sealed::enable();
    assert!(sealed::reserve(MIB).is_err(), "no budget, no reservation");

    sealed::set_large_budget(3 * MIB);
    let first = sealed::reserve(2 * MIB).expect("room for 2 MiB");
    assert!(sealed::reserve(2 * MIB).is_err(), "only 1 MiB left");
    assert!(sealed::reserve(usize::MAX).is_err(), "no overflow");
    let second = sealed::reserve(MIB).expect("the last MiB");
    assert_eq!(sealed::reserved_bytes(), 3 * MIB);

    // Dropped unused: its claim is free again.
    drop(second);
    assert_eq!(sealed::reserved_bytes(), 2 * MIB);

    // Sealed: every slice is found in a file holding the same bytes, and the claim lasts as long
    // as any clone of the buffer.
    let bytes = content(2 * MIB - 7);
    let kept = first.seal(bytes.clone()).expect("sealed");
    assert_eq!(kept[..], bytes[..]);
    let tail = kept.slice(MIB..);
    let (file, offset) = sealed::file_range(&tail).expect("registered");
    assert_eq!(offset, MIB as u64);
    let mut read = vec![0; tail.len()];
    file.read_exact_at(&mut read, offset).expect("read");
    assert_eq!(read[..], bytes[MIB..]);
    assert!(file.write_at(b"x", 0).is_err(), "the file is sealed");
    drop(kept);
    assert_eq!(sealed::reserved_bytes(), 2 * MIB, "a slice keeps the claim");
    drop(tail);
    assert_eq!(sealed::reserved_bytes(), 0);

    // More than was reserved, or nothing: not sealed, and the claim is given back.
    let small = sealed::reserve(MIB).expect("room");
    assert!(small.seal(content(MIB + 1)).is_none());
    assert!(
        sealed::reserve(MIB)
            .expect("room")
            .seal(Vec::new())
            .is_none()
    );
    assert_eq!(sealed::reserved_bytes(), 0);

    // A smaller budget applies to new reservations only.
    let held = sealed::reserve(2 * MIB).expect("room");
    sealed::set_large_budget(MIB);
    assert!(sealed::reserve(1).is_err(), "over the new budget");
    drop(held);
    assert!(sealed::reserve(MIB).is_ok());
}
