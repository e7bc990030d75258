//! The `snug sync` failures checked against `snug-reasons`: each code is a registered reason, and its exit code is one the registry allows.

use std::path::PathBuf;

use snug_restore::{OriginError, RestoreError};

use super::{Exit, restore_failure};
use crate::failure::tests::assert_registered;

/// The exit of each kind of pipeline failure: the pipeline's own words exit as the registry says,
/// a wrapped cause decides for the failures that wrap one; every exit is one the registry allows
/// for the code given (snug-restore's tests check every word is registered).
#[test]
fn sync_failures_follow_the_registry() {
    let path = || PathBuf::from("user.snug");
    let revision = || "r2-aa".to_owned();
    let cases = [
        (
            RestoreError::Diverged {
                path: path(),
                revision: revision(),
                last_synced: None,
            },
            Exit::Diverged,
        ),
        (RestoreError::Protected { path: path() }, Exit::Locked),
        (
            RestoreError::NotSnugFile {
                path: path(),
                found: "not SQLite",
            },
            Exit::Corrupt,
        ),
        (
            RestoreError::InvalidRevision {
                revision: revision(),
            },
            Exit::Usage,
        ),
        (
            RestoreError::TooLarge {
                revision: revision(),
                size: 2,
                max: 1,
            },
            Exit::Other,
        ),
        (
            RestoreError::LocalContainer {
                path: path(),
                source: snug_container::OpenError::Locked,
            },
            Exit::Locked,
        ),
        (
            RestoreError::Unreadable {
                path: path(),
                source: snug_schema::OpenError::SchemaTooNew {
                    found: 7,
                    supported: 6,
                },
            },
            Exit::Unsupported,
        ),
        (
            RestoreError::Origin(OriginError::NoOrigin { path: path() }),
            Exit::Other,
        ),
        (
            RestoreError::Origin(OriginError::EntropyUnavailable),
            Exit::Other,
        ),
    ];
    for (err, expected) in cases {
        let shown = format!("{err:?}");
        let failure = restore_failure("origin", err);
        assert_eq!(failure.exit, expected, "{shown}");
        assert_registered(&failure);
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
            _ => Exit::Other,
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
    assert_eq!(hostile.exit, Exit::Corrupt);
}
