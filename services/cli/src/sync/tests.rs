//! The `snug sync` failures checked against `snug-reasons`: each code is a registered reason, and its exit code is one the registry allows.

use std::path::PathBuf;

use snug_restore::{OriginError, RestoreError};

use super::restore_failure;

#[test]
fn sync_failures_follow_the_registry() {
    let path = || PathBuf::from("user.snug");
    let revision = || "r2-aa".to_owned();
    let detail = || "detail".to_owned();
    let cases = [
        RestoreError::InvalidRevision {
            revision: revision(),
        },
        RestoreError::SchemaTooNew {
            revision: revision(),
            found: 7,
            supported: 6,
        },
        RestoreError::TooLarge {
            revision: revision(),
            size: 2,
            max: 1,
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
            expected: detail(),
            actual: detail(),
        },
        RestoreError::Container {
            revision: revision(),
            source: snug_container::OpenError::Locked,
        },
        RestoreError::LocalContainer {
            path: path(),
            source: snug_container::OpenError::Locked,
        },
        RestoreError::DestinationChanged { path: path() },
        RestoreError::Io {
            action: "read",
            path: path(),
            source: std::io::Error::other("disk"),
        },
        RestoreError::Unbound {
            path: path(),
            source: std::io::Error::other("disk"),
        },
        RestoreError::Origin(OriginError::Empty),
        RestoreError::Origin(OriginError::UnknownRevision {
            revision: revision(),
        }),
        RestoreError::Origin(OriginError::Unauthorized { detail: detail() }),
        RestoreError::Origin(OriginError::Unreachable { detail: detail() }),
        RestoreError::Origin(OriginError::Moved {
            revision: revision(),
            current: revision(),
        }),
        RestoreError::Origin(OriginError::BadResponse { detail: detail() }),
        RestoreError::Origin(OriginError::Inconsistent { detail: detail() }),
        RestoreError::Origin(OriginError::Interrupted { detail: detail() }),
        RestoreError::Origin(OriginError::NoOrigin { path: path() }),
        RestoreError::Origin(OriginError::Io {
            action: "read",
            path: path(),
            source: std::io::Error::other("disk"),
        }),
        RestoreError::Origin(OriginError::EntropyUnavailable),
        RestoreError::Origin(OriginError::Other {
            code: "SCHEMA_TOO_NEW",
            detail: detail(),
        }),
    ];
    for err in cases {
        let shown = format!("{err:?}");
        let failure = restore_failure("origin", err);
        let reason = snug_reasons::find(failure.code)
            .unwrap_or_else(|| panic!("{shown}: {} is not in snug-reasons", failure.code));
        assert!(
            reason.exit.allows(failure.exit),
            "{shown}: {} exits {:?}, the registry says {:?}",
            reason.name,
            failure.exit,
            reason.exit
        );
    }
}

/// A hub's refusal exits as its word does wherever the CLI finds it (4 for a hostile file, 5 for a
/// newer one), and 1 for a word the CLI has no exit of its own for.
#[test]
fn a_hubs_refusal_exits_as_its_word() {
    for code in snug_restore::HUB_CODES {
        let failure = restore_failure(
            "origin",
            RestoreError::Origin(OriginError::Other {
                code,
                detail: "refused".to_owned(),
            }),
        );
        let reason = snug_reasons::find(code).unwrap_or_else(|| panic!("{code} is not registered"));
        let expected = match reason.exit {
            snug_reasons::CliExit::Always(exit) => exit,
            _ => super::Exit::Other,
        };
        assert_eq!((failure.code, failure.exit), (*code, expected), "{code}");
    }
    let hostile = restore_failure(
        "origin",
        RestoreError::Origin(OriginError::Other {
            code: "HOSTILE_SCHEMA",
            detail: "refused".to_owned(),
        }),
    );
    assert_eq!(hostile.exit, super::Exit::Corrupt);
}
