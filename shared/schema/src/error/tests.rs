//! Tests of the machine reasons: shape, and one per variant.

#![allow(clippy::unwrap_used, reason = "tests")]

use snug_reasons::Reasoned as _;

use std::collections::BTreeSet;

use super::*;

fn sqlite() -> rusqlite::Error {
    rusqlite::Error::InvalidQuery
}

fn io() -> std::io::Error {
    std::io::Error::other("x")
}

/// Every variant of every enum, with its reason.
fn all_reasons() -> Vec<(&'static str, String)> {
    let hostile = Hostility::View {
        name: "v".to_owned(),
    };
    let malformed = Malformation::TruncatedHeader { len: 1 };
    let rng = getrandom::Error::UNSUPPORTED;
    let path = PathBuf::from("f");
    let mut reasons: Vec<(&'static str, String)> = Vec::new();
    let mut push = |reason: &'static str, error: &dyn std::fmt::Display| {
        reasons.push((reason, error.to_string()))
    };
    for e in [
        OpenError::NotSqlite,
        OpenError::Protected,
        OpenError::Malformed {
            problem: malformed.clone(),
        },
        OpenError::Unreadable(sqlite()),
        OpenError::NotAUserDatabase,
        OpenError::SchemaTooNew {
            found: 7,
            supported: 6,
        },
        OpenError::HostileSchema {
            problem: hostile.clone(),
        },
        OpenError::Io {
            path: path.clone(),
            source: io(),
        },
        OpenError::Entropy(rng),
        OpenError::Sqlite(sqlite()),
    ] {
        push(e.reason().name, &e);
    }
    for e in [
        ImportError::Locked,
        ImportError::CorruptContainer(snug_container::Corruption::TruncatedBody),
        ImportError::TooLarge { size: 2, max: 1 },
        ImportError::NotSqlite,
        ImportError::Malformed { problem: malformed },
        ImportError::Unreadable(sqlite()),
        ImportError::NotAUserDatabase,
        ImportError::SchemaTooNew {
            found: 7,
            supported: 6,
        },
        ImportError::HostileSchema { problem: hostile },
        ImportError::Entropy(rng),
        ImportError::Sqlite(sqlite()),
    ] {
        push(e.reason().name, &e);
    }
    for e in [
        ExportError::Source(OpenError::NotSqlite),
        ExportError::TooLarge { size: 2, max: 1 },
        ExportError::OutputExists { path: path.clone() },
        ExportError::Io {
            path: path.clone(),
            source: io(),
        },
        ExportError::Sqlite(sqlite()),
        ExportError::Scrub(crate::ScrubError::Header {
            problem: "x".into(),
        }),
    ] {
        push(e.reason().name, &e);
    }
    for e in [
        SaveError::Io { path, source: io() },
        SaveError::Sqlite(sqlite()),
    ] {
        push(e.reason().name, &e);
    }
    let app = || "a".to_owned();
    for e in [
        AppError::AppNotFound { app_id: app() },
        AppError::VersionNotFound {
            app_id: app(),
            version: 1,
        },
        AppError::VersionPinned {
            app_id: app(),
            version: 1,
        },
        AppError::VersionCurrent {
            app_id: app(),
            version: 1,
        },
        AppError::NoFactoryVersion { app_id: app() },
        AppError::AppExists { app_id: app() },
        AppError::InvalidContract,
        AppError::TooLarge { size: 2, max: 1 },
        AppError::Entropy(rng),
        AppError::Sqlite(sqlite()),
    ] {
        push(e.reason().name, &e);
    }
    for e in [
        ChatError::ThreadNotFound { thread_id: app() },
        ChatError::MessageNotFound { id: 1 },
        ChatError::UnknownRole { id: 1, role: app() },
        ChatError::TooLarge { size: 2, max: 1 },
        ChatError::Sqlite(sqlite()),
    ] {
        push(e.reason().name, &e);
    }
    for e in [
        DocError::DocNotFound {
            app_id: app(),
            slug: app(),
        },
        DocError::TooLarge { size: 2, max: 1 },
        DocError::Sqlite(sqlite()),
    ] {
        push(e.reason().name, &e);
    }
    for e in [
        KvError::NotJson {
            table: "t",
            key: app(),
        },
        KvError::UnexpectedType {
            table: "t",
            key: app(),
        },
        KvError::TooLarge { size: 2, max: 1 },
        KvError::Sqlite(sqlite()),
    ] {
        push(e.reason().name, &e);
    }
    reasons
}

#[test]
fn reasons_are_upper_snake_and_short() {
    for (reason, message) in all_reasons() {
        let shape = !reason.is_empty()
            && reason.len() <= 63
            && reason
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            && !reason.starts_with('_')
            && !reason.ends_with('_');
        assert!(shape, "{reason}");
        assert!(
            !message.is_empty() && !message.ends_with('.'),
            "{reason}: {message:?}"
        );
        assert_eq!(
            message.chars().next().map(char::is_lowercase),
            Some(true),
            "{reason}: lowercase message {message:?}"
        );
    }
}

#[test]
fn the_reason_vocabulary_is_locked() {
    let reasons: BTreeSet<&str> = all_reasons()
        .into_iter()
        .map(|(reason, _)| reason)
        .collect();
    expect_test::expect!["APP_EXISTS APP_NOT_FOUND CORRUPT_CONTAINER CORRUPT_ROW DOC_NOT_FOUND ENTROPY_UNAVAILABLE HOSTILE_SCHEMA INVALID_CONTRACT IO LOCKED MALFORMED MESSAGE_NOT_FOUND NOT_A_USER_DATABASE NOT_SQLITE NO_FACTORY_VERSION OUTPUT_EXISTS PROTECTED SCHEMA_TOO_NEW STORAGE THREAD_NOT_FOUND TOO_LARGE VERSION_CURRENT VERSION_NOT_FOUND VERSION_PINNED"].assert_eq(&reasons.into_iter().collect::<Vec<_>>().join(" "));
}
