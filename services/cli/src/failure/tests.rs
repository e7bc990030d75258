//! The CLI's failures checked against `snug-reasons`: each code is a registered reason, and its
//! exit code is one the registry allows for that reason.

use snug_container::{Corruption, OpenError, RewrapError};
use snug_schema::OpenError as DbOpenError;

use super::{Exit, Failure};

#[track_caller]
fn check(failure: Failure, code: &str, exit: Exit) {
    assert_eq!((failure.reason.name, failure.exit), (code, exit));
    assert_registered(&failure);
}

/// Asserts `failure`'s code is a registered reason whose exit the registry allows.
#[track_caller]
pub(crate) fn assert_registered(failure: &Failure) {
    let reason = snug_reasons::find(failure.reason.name)
        .unwrap_or_else(|| panic!("{} is not in snug-reasons", failure.reason));
    assert!(
        reason.exit.allows(failure.exit),
        "{} exits {:?}, the registry says {:?}",
        reason.name,
        failure.exit,
        reason.exit
    );
}

#[test]
fn container_failures_follow_the_registry() {
    check(OpenError::Locked.into(), "LOCKED", Exit::Locked);
    let too_large = OpenError::TooLarge {
        plaintext_len: 2,
        max: 1,
    };
    check(too_large.into(), "TOO_LARGE", Exit::Other);
    check(
        Corruption::NotAContainer.into(),
        "NOT_A_CONTAINER",
        Exit::Corrupt,
    );
    check(Corruption::TruncatedHeader.into(), "CORRUPT", Exit::Corrupt);
    check(Corruption::ZeroIterations.into(), "CORRUPT", Exit::Corrupt);
    check(
        Corruption::UnsupportedVersion(9).into(),
        "UNSUPPORTED_FORMAT_VERSION",
        Exit::Unsupported,
    );
    let policy = Corruption::IterationsOutOfRange {
        iterations: 1,
        min: 10,
        max: 20,
    };
    check(policy.into(), "ITERATIONS_OUT_OF_POLICY", Exit::Unsupported);
    check(
        RewrapError::NoPassphraseSlot.into(),
        "NO_PASSPHRASE_SLOT",
        Exit::Other,
    );
    check(
        RewrapError::NoRecoverySlot.into(),
        "NO_RECOVERY_SLOT",
        Exit::Other,
    );
}

#[test]
fn user_database_failures_follow_the_registry() {
    check(DbOpenError::NotSqlite.into(), "NOT_SQLITE", Exit::Corrupt);
    check(
        DbOpenError::NotAUserDatabase.into(),
        "NOT_A_USER_DATABASE",
        Exit::Corrupt,
    );
    check(DbOpenError::Protected.into(), "PROTECTED", Exit::Locked);
    let too_new = DbOpenError::SchemaTooNew {
        found: 7,
        supported: 6,
    };
    check(too_new.into(), "SCHEMA_TOO_NEW", Exit::Unsupported);
    check(
        snug_materialize::LoadError::NotSqlite.into(),
        "NOT_SQLITE",
        Exit::Corrupt,
    );
}

#[test]
fn the_clis_own_codes_follow_the_registry() {
    check(Failure::usage("no"), "USAGE", Exit::Usage);
    let err = std::io::Error::other("disk");
    check(
        Failure::io("read", std::path::Path::new("f"), err),
        "IO",
        Exit::Other,
    );
}
