//! The CLI's errors: a message for people, a stable code for scripts, and a distinct exit code.

use snug_container::{Corruption, OpenError, RewrapError, SealError};

/// Exit codes, shared by every `snug` command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Anything not covered below (I/O failures, refusals to overwrite).
    Other = 1,
    /// The command line was wrong.
    Usage = 2,
    /// A protected file that no supplied secret opened. The file is healthy.
    Locked = 3,
    /// The input is damaged or not the kind of file the command works on.
    Corrupt = 4,
    /// The input is newer than this build understands.
    Unsupported = 5,
}

/// A failed command.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) exit: Exit,
    /// Stable UPPER_SNAKE code, the same vocabulary as the services' ErrorInfo reasons.
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(exit: Exit, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            exit,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, "USAGE", message)
    }

    pub(crate) fn io(action: &str, path: &std::path::Path, err: std::io::Error) -> Self {
        Self::new(
            Exit::Other,
            "IO",
            format!("cannot {action} {}: {err}", path.display()),
        )
    }
}

impl From<OpenError> for Failure {
    fn from(err: OpenError) -> Self {
        match err {
            OpenError::Locked => Failure::new(
                Exit::Locked,
                "LOCKED",
                "this Snug file is protected and no supplied secret opened it; the file is \
                 healthy and unchanged — try the passphrase or the recovery key",
            ),
            OpenError::Corrupt(corruption) => corruption.into(),
            OpenError::TooLarge { plaintext_len, max } => Failure::new(
                Exit::Other,
                "TOO_LARGE",
                format!("the protected contents are {plaintext_len} bytes, over the limit of {max}"),
            ),
        }
    }
}

impl From<Corruption> for Failure {
    fn from(corruption: Corruption) -> Self {
        let (exit, code) = match corruption {
            Corruption::UnsupportedVersion(_) | Corruption::UnsupportedKdf(_) => {
                (Exit::Unsupported, "UNSUPPORTED_FORMAT_VERSION")
            }
            Corruption::NotAContainer => (Exit::Corrupt, "NOT_A_CONTAINER"),
            Corruption::TruncatedHeader
            | Corruption::ImplausibleSlotCount(_)
            | Corruption::TruncatedBody
            | Corruption::HeaderChecksumMismatch { .. }
            | Corruption::IterationsOutOfRange { .. }
            | Corruption::PayloadAuthenticationFailed => (Exit::Corrupt, "CORRUPT"),
        };
        let hint = match exit {
            Exit::Unsupported => "; a newer Snug build may open it — do not overwrite the file",
            _ => "",
        };
        Failure::new(exit, code, format!("{corruption}{hint}"))
    }
}

impl From<SealError> for Failure {
    fn from(err: SealError) -> Self {
        match err {
            SealError::EmptyPassphrase => Failure::usage("the passphrase is empty"),
            SealError::IterationsOutOfRange { .. } => Failure::usage(err.to_string()),
            SealError::TooLarge { .. } => Failure::new(Exit::Other, "TOO_LARGE", err.to_string()),
            SealError::ImplausibleRecoveryKey | SealError::FileKeyMismatch => {
                Failure::new(Exit::Other, "INTERNAL", err.to_string())
            }
            SealError::Corrupt(corruption) => corruption.into(),
        }
    }
}

impl From<RewrapError> for Failure {
    fn from(err: RewrapError) -> Self {
        match err {
            RewrapError::Open(open) => open.into(),
            RewrapError::EmptyPassphrase => Failure::usage("the new passphrase is empty"),
            RewrapError::NoPassphraseSlot => {
                Failure::new(Exit::Other, "NO_PASSPHRASE_SLOT", err.to_string())
            }
            RewrapError::NoRecoverySlot => {
                Failure::new(Exit::Other, "NO_RECOVERY_SLOT", err.to_string())
            }
            RewrapError::ImplausibleRecoveryKey => {
                Failure::new(Exit::Other, "INTERNAL", err.to_string())
            }
        }
    }
}
