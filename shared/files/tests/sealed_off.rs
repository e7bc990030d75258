//! Sealing is off unless a process enables it (a process of its own: the switch is global).

use bytes::Bytes;

#[test]
fn without_enable_bytes_are_returned_unsealed() {
    let bytes = Bytes::from(vec![7u8; 4096]);
    let returned = snug_files::sealed::seal(bytes.clone());
    assert_eq!(
        returned.as_ptr(),
        bytes.as_ptr(),
        "the same buffer, not a copy"
    );
    assert!(snug_files::sealed::file_range(&returned).is_none());
    assert!(!snug_files::sealed::any_live());
}

#[test]
fn without_enable_nothing_is_reserved() {
    snug_files::sealed::set_large_budget(1 << 30);
    assert!(snug_files::sealed::reserve(4096).is_err());
}
