//! A disabled sealer (the default, and every process's but `snug-hub serve`'s) seals nothing.

use bytes::Bytes;
use snug_files::sealed::{NoRoom, Sealer};

#[test]
fn a_disabled_sealer_returns_bytes_unsealed() {
    let sealer = Sealer::default();
    assert!(!sealer.is_enabled());
    let bytes = Bytes::from(vec![7u8; 4096]);
    let returned = sealer.seal(bytes.clone());
    assert_eq!(
        returned.as_ptr(),
        bytes.as_ptr(),
        "the same buffer, not a copy"
    );
    assert!(sealer.file_range(&returned).is_none());
    assert!(!sealer.any_live());
}

#[test]
fn a_disabled_sealer_reserves_nothing() {
    let sealer = Sealer::disabled();
    assert_eq!(sealer.reserve(4096).map(|_| ()), Err(NoRoom::Never));
    assert_eq!(sealer.reserved_bytes(), 0);
}
