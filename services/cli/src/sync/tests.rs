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
/// newer one), an origin that did not answer usably 10 whatever its word, refused credentials 11,
/// and 1 for a word the CLI has no exit of its own for.
#[test]
fn a_hubs_refusal_exits_as_its_word() {
    for reason in snug_reasons::ALL {
        let Some(http) = reason.http else { continue };
        let failure = restore_failure(
            "origin",
            RestoreError::Origin(OriginError::Other {
                reason,
                status: http.status,
                detail: "refused".to_owned(),
            }),
        );
        let expected = if http.status >= 500 || http.status == 429 {
            Exit::Unavailable
        } else {
            match reason.exit {
                snug_reasons::CliExit::Always(exit) => exit,
                _ => Exit::Other,
            }
        };
        assert_eq!(
            (failure.reason.name, failure.exit),
            (reason.name, expected),
            "{}",
            reason.name
        );
    }
    let hostile = restore_failure(
        "origin",
        RestoreError::Origin(OriginError::Other {
            reason: &snug_reasons::schema::HOSTILE_SCHEMA,
            status: 400,
            detail: "refused".to_owned(),
        }),
    );
    assert_eq!(hostile.exit, Exit::Corrupt);
    let cases = [
        (
            OriginError::Unreachable {
                detail: "refused".into(),
            },
            Exit::Unavailable,
            "SYNC_NETWORK",
        ),
        (
            OriginError::BadResponse { detail: "x".into() },
            Exit::Unavailable,
            "SYNC_BAD_RESPONSE",
        ),
        (
            OriginError::RateLimited {
                detail: "429".into(),
            },
            Exit::Unavailable,
            "RATE_LIMITED",
        ),
        (
            OriginError::Unauthorized {
                detail: "401".into(),
                token_sent: true,
            },
            Exit::Unauthorized,
            "SYNC_AUTH",
        ),
        (
            OriginError::Unauthorized {
                detail: "401".into(),
                token_sent: false,
            },
            Exit::Unauthorized,
            "SYNC_AUTH",
        ),
    ];
    for (err, exit, code) in cases {
        let failure = restore_failure("origin", RestoreError::Origin(err));
        assert_eq!((failure.exit, failure.reason.name), (exit, code));
        assert_registered(&failure);
    }
}

/// What `--origin` is taken for: a hub by its scheme, a directory by its path, and an address
/// without a scheme refused with what to type instead of being taken for a directory.
#[test]
fn an_origin_is_read_as_what_it_is_or_refused_with_what_to_type() {
    use super::{Address, address, looks_like_host};
    assert!(matches!(
        address("http://127.0.0.1:8080"),
        Ok(Address::Hub(_))
    ));
    assert!(matches!(
        address("https://hub.example/userdb"),
        Ok(Address::Hub(_))
    ));
    assert!(
        matches!(address("file:///media/stick"), Ok(Address::Directory(p)) if p == std::path::Path::new("/media/stick"))
    );
    assert!(matches!(address("./stick"), Ok(Address::Directory(_))));
    for host in [
        "127.0.0.1:8080",
        "localhost:8080",
        "hub.example:443/userdb",
        "[::1]:8080",
    ] {
        assert!(looks_like_host(host), "{host}");
        let failure = address(host).err().expect("refused");
        assert_eq!(
            (failure.exit, failure.reason.name),
            (Exit::Usage, "USAGE"),
            "{host}"
        );
        assert!(
            failure.message.contains(&format!("http://{host}")),
            "{}",
            failure.message
        );
    }
    for path in ["stick", "/media/stick", "a:b", "C:", "dir:8080x"] {
        assert!(!looks_like_host(path), "{path}");
    }
    let failure = address("ftp://hub").err().expect("refused");
    assert_eq!(failure.exit, Exit::Usage);
    let failure = address("file://relative").err().expect("refused");
    assert_eq!(failure.exit, Exit::Usage);
}
