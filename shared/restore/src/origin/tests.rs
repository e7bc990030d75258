//! Tests of the origin contract's helpers: the header's storage version and the stable reasons.

use super::*;

#[test]
fn the_header_version_is_the_big_endian_field_at_offset_60() {
    let mut header = vec![0u8; 100];
    header[..16].copy_from_slice(SQLITE_MAGIC);
    header[60..64].copy_from_slice(&7i32.to_be_bytes());
    assert_eq!(header_storage_version(&header), Some(7));
    header[60..64].copy_from_slice(&(-1i32).to_be_bytes());
    assert_eq!(header_storage_version(&header), Some(-1));
    assert_eq!(
        header_storage_version(&header[..63]),
        None,
        "too short to hold the field"
    );
    header[0] = b'X';
    assert_eq!(header_storage_version(&header), None, "not SQLite");
    assert_eq!(header_storage_version(b"SNUGENC1\n"), None);
}

#[test]
fn reasons_are_stable_words() {
    let cases = [
        (OriginError::Empty, "SYNC_ORIGIN_EMPTY"),
        (
            OriginError::UnknownRevision {
                revision: "r1-x".into(),
            },
            "REVISION_NOT_FOUND",
        ),
        (
            OriginError::Unauthorized {
                detail: String::new(),
                token_sent: true,
            },
            "SYNC_AUTH",
        ),
        (
            OriginError::Unreachable {
                detail: String::new(),
            },
            "SYNC_NETWORK",
        ),
        (
            OriginError::Moved {
                revision: "r1-x".into(),
                current: "r2-y".into(),
            },
            "ORIGIN_MOVED",
        ),
        (
            OriginError::Other {
                reason: &snug_reasons::rpc::OVERLOADED,
                status: 503,
                detail: String::new(),
            },
            "OVERLOADED",
        ),
        (
            OriginError::BadResponse {
                detail: String::new(),
            },
            "SYNC_BAD_RESPONSE",
        ),
        (
            OriginError::Inconsistent {
                detail: String::new(),
            },
            "ORIGIN_INCONSISTENT",
        ),
        (
            OriginError::Interrupted {
                detail: String::new(),
            },
            "DOWNLOAD_INTERRUPTED",
        ),
        (OriginError::Sink(std::io::Error::other("full")), "IO"),
        (
            OriginError::RateLimited {
                detail: String::new(),
            },
            "RATE_LIMITED",
        ),
    ];
    for (error, reason) in cases {
        assert_eq!(error.reason(), reason, "{error}");
    }
}
