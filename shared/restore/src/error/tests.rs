//! The reasons of both error families are stable UPPER_SNAKE words of the registry, distinct per failure.

use std::{collections::BTreeSet, path::PathBuf};

use super::*;

fn path() -> PathBuf {
    PathBuf::from("/data/user.snug")
}

#[test]
fn every_pipeline_reason_is_upper_snake_and_distinct() {
    let revision = || "r2-00ff".to_owned();
    let cases = [
        RestoreError::Origin(OriginError::Empty),
        RestoreError::InvalidRevision {
            revision: String::new(),
        },
        RestoreError::SchemaTooNew {
            revision: revision(),
            found: 7,
            supported: 6,
        },
        RestoreError::TooLarge {
            revision: revision(),
            size: 1,
            max: 0,
        },
        RestoreError::NoDirectory { path: path() },
        RestoreError::IsDirectory { path: path() },
        RestoreError::DestinationExists { path: path() },
        RestoreError::NotSnugFile {
            path: path(),
            found: "not SQLite",
        },
        RestoreError::Protected { path: path() },
        RestoreError::LegacyBackup { path: path() },
        RestoreError::Unreadable {
            path: path(),
            source: OpenError::NotAUserDatabase,
        },
        RestoreError::Diverged {
            path: path(),
            revision: revision(),
            last_synced: None,
        },
        RestoreError::SizeMismatch {
            revision: revision(),
            declared: 2,
            received: 1,
        },
        RestoreError::DigestMismatch {
            revision: revision(),
            expected: String::new(),
            actual: String::new(),
        },
        RestoreError::Refused {
            revision: revision(),
            source: ImportError::NotSqlite,
        },
        RestoreError::Container {
            revision: revision(),
            source: snug_container::OpenError::Locked,
        },
        RestoreError::Reseal(snug_container::SealError::FileKeyMismatch),
        RestoreError::DestinationChanged { path: path() },
        RestoreError::Io {
            action: "read",
            path: path(),
            source: std::io::Error::other("x"),
        },
        RestoreError::Storage(rusqlite::Error::InvalidQuery),
        RestoreError::Unbound {
            path: path(),
            source: std::io::Error::other("x"),
        },
    ];
    let mut seen = BTreeSet::new();
    for error in &cases {
        let reason = error.reason().name;
        assert!(
            !reason.is_empty()
                && reason.len() <= 63
                && reason.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'),
            "{reason}"
        );
        assert!(seen.insert(reason), "{reason} is used twice");
        assert!(
            snug_reasons::find(reason).is_some(),
            "{reason} is not a snug-reasons word"
        );
        assert!(!error.to_string().is_empty());
    }
}

#[test]
fn wrapped_errors_keep_the_inner_reason() {
    let unreadable = RestoreError::Unreadable {
        path: path(),
        source: OpenError::SchemaTooNew {
            found: 9,
            supported: 6,
        },
    };
    assert_eq!(unreadable.reason(), "SCHEMA_TOO_NEW");
    let refused = RestoreError::Refused {
        revision: "r1-00".into(),
        source: ImportError::Locked,
    };
    assert_eq!(refused.reason(), "LOCKED");
    let gate = RestoreError::Gate(GateError::Open(OpenError::NotSqlite));
    assert_eq!(gate.reason(), "NOT_SQLITE");
    let diverged = RestoreError::Diverged {
        path: path(),
        revision: "r3-01".into(),
        last_synced: Some("r2-00".into()),
    };
    assert!(
        diverged
            .to_string()
            .contains("its last sync was revision r2-00"),
        "{diverged}"
    );
}
