//! The CLI's errors: a message for people, a stable code for scripts, and a distinct exit code.

use snug_container::{Corruption, OpenError, RewrapError, SealError};
use snug_reasons::Reasoned as _;
use snug_schema::{ExportError, OpenError as DbOpenError};

/// Exit codes, shared by every `snug` command; each reason's is in `snug-reasons`.
pub(crate) use snug_reasons::Exit;
use snug_reasons::{Reason, cli, container, rpc};

/// A failed command.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) exit: Exit,
    /// Its reason: the JSON `code` is its name, the services' `ErrorInfo` vocabulary.
    pub(crate) reason: &'static Reason,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(exit: Exit, reason: &'static Reason, message: impl Into<String>) -> Self {
        Self {
            exit,
            reason,
            message: message.into(),
        }
    }

    /// A failure of a reason whose exit code the cause does not decide: the registry's.
    pub(crate) fn of(reason: &'static Reason, message: impl Into<String>) -> Self {
        let exit = match reason.exit {
            snug_reasons::CliExit::Always(exit) => exit,
            // A reason whose exit the cause decides, or one the CLI does not report, is given
            // with `new`; reaching this is a bug in the caller (a test covers every `of`).
            snug_reasons::CliExit::ByCause(_) | snug_reasons::CliExit::Never => Exit::Other,
        };
        Self::new(exit, reason, message)
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::of(&cli::USAGE, message)
    }

    pub(crate) fn io(action: &str, path: &std::path::Path, err: std::io::Error) -> Self {
        Self::of(
            &cli::IO,
            format!("cannot {action} {}: {err}", path.display()),
        )
    }
}

impl From<OpenError> for Failure {
    fn from(err: OpenError) -> Self {
        match err {
            OpenError::Locked => Failure::of(
                &container::LOCKED,
                "this Snug file is protected and no supplied secret opened it; the file is \
                 healthy and unchanged — try the passphrase or the recovery key",
            ),
            OpenError::Corrupt(corruption) => corruption.into(),
            OpenError::TooLarge { plaintext_len, max } => Failure::of(
                &rpc::TOO_LARGE,
                format!(
                    "the protected contents are {plaintext_len} bytes, over the limit of {max}"
                ),
            ),
        }
    }
}

impl From<Corruption> for Failure {
    fn from(corruption: Corruption) -> Self {
        let reason = corruption.reason();
        // A KDF setting, not damage (§11.1): the same exit as a newer format, and how to open it.
        if let Corruption::IterationsOutOfRange {
            iterations, min, ..
        } = corruption
        {
            let flag = if iterations < min {
                format!("--min-iterations {iterations}")
            } else {
                format!("--max-iterations {iterations}")
            };
            return Failure::of(
                reason,
                format!(
                    "{corruption}; the file is healthy and unchanged: open it with {flag}, \
                     and `snug passwd FILE --upgrade-kdf {flag}` rewrites it at the default \
                     count (that needs both the passphrase and the recovery key)"
                ),
            );
        }
        let hint = match reason.exit {
            snug_reasons::CliExit::Always(Exit::Unsupported) => {
                "; a newer Snug build may open it — do not overwrite the file"
            }
            _ => "",
        };
        Failure::of(reason, format!("{corruption}{hint}"))
    }
}

impl From<SealError> for Failure {
    fn from(err: SealError) -> Self {
        match err {
            SealError::EmptyPassphrase => Failure::usage("the passphrase is empty"),
            SealError::IterationsOutOfRange { .. } => Failure::usage(err.to_string()),
            SealError::TooLarge { .. } => Failure::of(&rpc::TOO_LARGE, err.to_string()),
            SealError::ImplausibleRecoveryKey | SealError::FileKeyMismatch => {
                Failure::of(&rpc::INTERNAL, err.to_string())
            }
            SealError::Corrupt(corruption) => corruption.into(),
            SealError::WeakRecoveryKey { .. } => {
                Failure::of(&container::WEAK_RECOVERY_KEY, err.to_string())
            }
        }
    }
}

impl From<RewrapError> for Failure {
    fn from(err: RewrapError) -> Self {
        match err {
            RewrapError::Open(open) => open.into(),
            RewrapError::EmptyPassphrase => Failure::usage("the new passphrase is empty"),
            RewrapError::NoPassphraseSlot => {
                Failure::of(&container::NO_PASSPHRASE_SLOT, err.to_string())
            }
            RewrapError::NoRecoverySlot => {
                Failure::of(&container::NO_RECOVERY_SLOT, err.to_string())
            }
            // Only a key the user chose can be either (a generated one is full strength).
            RewrapError::ImplausibleRecoveryKey => Failure::usage(
                "the new recovery key is not 27 symbols of the recovery-key alphabet",
            ),
            RewrapError::IterationsOutOfRange { .. } => Failure::usage(err.to_string()),
            RewrapError::WeakRecoveryKey { .. } => {
                Failure::of(&container::WEAK_RECOVERY_KEY, err.to_string())
            }
            // A secret that does not open its slot: locked, as a wrong secret is everywhere.
            RewrapError::SlotNotOpened { .. } => Failure::of(
                &container::LOCKED,
                format!("{err}; the file is healthy and unchanged"),
            ),
        }
    }
}

/// Joins an error and its sources, so a message says why (`damaged SQLite file: database disk
/// image is malformed`), not only what.
pub(crate) fn with_causes(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// The exit code of a user database that does not open, and a hint for the message.
pub(crate) fn open_exit(err: &DbOpenError) -> (Exit, &'static str) {
    match err {
        DbOpenError::NotSqlite
        | DbOpenError::Malformed { .. }
        | DbOpenError::Unreadable(_)
        | DbOpenError::NotAUserDatabase
        | DbOpenError::HostileSchema { .. } => (Exit::Corrupt, ""),
        // No conforming hub writes two app ids of one token: the file is refused like a hostile one.
        DbOpenError::AppTokenCollision { .. } => (Exit::Corrupt, ""),
        // A protected file is healthy: like a locked one, it needs its secret first.
        DbOpenError::Protected => (
            Exit::Locked,
            " (snug unlock FILE --out PLAIN, then work on PLAIN)",
        ),
        DbOpenError::SchemaTooNew { .. } => (Exit::Unsupported, ""),
        DbOpenError::Io { .. } | DbOpenError::Entropy(_) | DbOpenError::Sqlite(_) => {
            (Exit::Other, "")
        }
    }
}

/// A file stamped newer than this build: offline, the program that is too old is this one, not
/// a hub, so the remedy is upgrading snug.
pub(crate) fn schema_too_new(found: i64, supported: i64) -> Failure {
    Failure::of(
        &snug_reasons::schema::SCHEMA_TOO_NEW,
        format!(
            "the file is at storage version {found}; this snug supports up to {supported}: \
             upgrade snug to open it; the file is unchanged, do not overwrite it"
        ),
    )
}

impl From<DbOpenError> for Failure {
    fn from(err: DbOpenError) -> Self {
        // The code is the library's stable reason, the same string the schema service sends.
        if let DbOpenError::SchemaTooNew { found, supported } = err {
            return schema_too_new(found, supported);
        }
        let (exit, hint) = open_exit(&err);
        Failure::new(exit, err.reason(), format!("{}{hint}", with_causes(&err)))
    }
}

impl From<ExportError> for Failure {
    fn from(err: ExportError) -> Self {
        match err {
            ExportError::Source(open) => open.into(),
            ExportError::TooLarge { .. }
            | ExportError::OutputExists { .. }
            | ExportError::Io { .. }
            | ExportError::Sqlite(_)
            | ExportError::Scrub(_) => Failure::new(Exit::Other, err.reason(), with_causes(&err)),
        }
    }
}

// --- `snug app`: per-app tables (snug-materialize) --------------------------------------------
//
// One library reason can mean a bad command line or a bad file, so the exit code follows the
// cause, not the word (the JSON code is always the library's `reason()`):
// - SQL the user typed (`snug app sql`) that the sandbox or SQLite refuses, and an `--app` that
//   names no app, are usage errors (2): the file is fine, the command line is not.
// - A stored schema that cannot be replayed, and a runtime file (`snug app persist --from`) whose
//   schema a conforming app never writes, are damaged or hostile inputs (4), like a malformed
//   user database.
// - Caps and host failures are 1.

/// The exit code of a failed materialization: a wrong `--app` is usage, a stored schema that
/// cannot be replayed is a damaged file.
fn materialize_exit(err: &snug_materialize::MaterializeError) -> Exit {
    use snug_materialize::MaterializeError as E;
    match err {
        E::AppNotFound { .. } => Exit::Usage,
        E::AppTokenCollision { .. }
        | E::CorruptSchema { .. }
        | E::StoredObjectRefused { .. }
        | E::Replay { .. }
        | E::SchemaMismatch { .. }
        | E::RestTableMismatch { .. } => Exit::Corrupt,
        E::Sqlite(_) => Exit::Other,
    }
}

impl From<snug_materialize::MaterializeError> for Failure {
    fn from(err: snug_materialize::MaterializeError) -> Self {
        Failure::new(materialize_exit(&err), err.reason(), with_causes(&err))
    }
}

impl From<snug_materialize::ExecuteError> for Failure {
    fn from(err: snug_materialize::ExecuteError) -> Self {
        use snug_materialize::{ExecuteError as E, PersistError as P, StatementProblem as S};
        let exit = match &err {
            E::Materialize(inner) => materialize_exit(inner),
            E::Statement { problem, .. } => match problem {
                S::NotOneStatement
                | S::Forbidden(_)
                | S::Failed(_)
                | S::BudgetExceeded { .. }
                | S::ResultTooLarge { .. } => Exit::Usage,
                S::TooLarge { .. } => Exit::Other,
            },
            // The runtime being written back is the product of the user's own statements, so a
            // refusal of its schema is the statements' fault, not the file's.
            E::Persist(persist) => match persist {
                P::AppNotFound { .. } | P::Refused(_) | P::CreateFailed { .. } => Exit::Usage,
                P::AppTokenCollision { .. } => Exit::Corrupt,
                // The CLI opens user databases from bytes, so no legacy file is ever adopted.
                P::NameCollision { .. } | P::TooLarge { .. } | P::Adopt(_) | P::Sqlite(_) => {
                    Exit::Other
                }
            },
            E::Sqlite(_) => Exit::Other,
        };
        Failure::new(exit, err.reason(), with_causes(&err))
    }
}

impl From<snug_materialize::PersistError> for Failure {
    /// For `snug app persist`, where the runtime is an input file.
    fn from(err: snug_materialize::PersistError) -> Self {
        use snug_materialize::PersistError as P;
        let exit = match &err {
            P::AppNotFound { .. } => Exit::Usage,
            P::AppTokenCollision { .. } | P::Refused(_) | P::CreateFailed { .. } => Exit::Corrupt,
            // The CLI opens user databases from bytes, so no legacy file is ever adopted.
            P::NameCollision { .. } | P::TooLarge { .. } | P::Adopt(_) | P::Sqlite(_) => {
                Exit::Other
            }
        };
        Failure::new(exit, err.reason(), with_causes(&err))
    }
}
impl From<snug_materialize::LoadError> for Failure {
    fn from(err: snug_materialize::LoadError) -> Self {
        use snug_materialize::LoadError as L;
        let exit = match &err {
            L::NotSqlite | L::Malformed { .. } => Exit::Corrupt,
            L::TooLarge { .. } | L::Sqlite(_) => Exit::Other,
        };
        Failure::new(
            exit,
            err.reason(),
            format!("the runtime database: {}", with_causes(&err)),
        )
    }
}

impl From<snug_materialize::ListError> for Failure {
    fn from(err: snug_materialize::ListError) -> Self {
        match err {
            snug_materialize::ListError::Sqlite(_) => {
                Failure::new(Exit::Other, err.reason(), with_causes(&err))
            }
        }
    }
}

// --- `snug import`: the import pipeline (snug-schema) --------------------------------------------

impl From<snug_schema::ImportError> for Failure {
    /// The file's age, protection or damage decides the exit code; a container's problems are
    /// reported as every container command reports them.
    fn from(err: snug_schema::ImportError) -> Self {
        use snug_schema::ImportError as E;
        let exit = match &err {
            E::Locked => return OpenError::Locked.into(),
            E::CorruptContainer(corruption) => return corruption.clone().into(),
            E::SchemaTooNew { found, supported } => return schema_too_new(*found, *supported),
            E::NotSqlite
            | E::Malformed { .. }
            | E::Unreadable(_)
            | E::NotAUserDatabase
            | E::HostileSchema { .. }
            | E::AppTokenCollision { .. } => Exit::Corrupt,
            E::TooLarge { .. } | E::Entropy(_) | E::Sqlite(_) => Exit::Other,
        };
        Failure::new(exit, err.reason(), with_causes(&err))
    }
}

#[cfg(test)]
pub(crate) mod tests;
