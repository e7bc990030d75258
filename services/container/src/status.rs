//! The one place `snug.container.v1` chooses a reason, and with it the gRPC code: domain errors
//! to `tonic::Status`.
//!
//! Every match is exhaustive, so a new error variant in `snug-container` does not compile until
//! someone picks its code and reason here.

use snug_container::{Corruption, OpenError, ResealError, RewrapError, SealError};
use snug_reasons::container as reasons;
use snug_rpc::status::{from_reason, too_large};
use tonic::Status;

use crate::error_info::DOMAIN;

/// Maps a failed open (unlock, remove protection, and the open step of every rewrap).
pub fn open_error(err: OpenError) -> Status {
    match err {
        OpenError::Locked => from_reason(
            &reasons::LOCKED,
            DOMAIN,
            "this Snug file is protected and no supplied secret opened it; \
             the file is healthy — try the passphrase or the recovery key",
            [],
        ),
        OpenError::Corrupt(corruption) => corrupt(corruption),
        OpenError::TooLarge { plaintext_len, max } => from_reason(
            &reasons::TOO_LARGE,
            DOMAIN,
            format!("the protected contents are {plaintext_len} bytes, over the limit of {max}"),
            [("limit", max.to_string())],
        ),
    }
}

/// Maps a structural problem found without (or after) a secret.
pub fn corrupt(corruption: Corruption) -> Status {
    if let Corruption::IterationsOutOfRange {
        iterations,
        min,
        max,
    } = corruption
    {
        return from_reason(
            corruption.reason(),
            DOMAIN,
            format!(
                "{corruption}; the file is healthy: give iteration_policy to open it, and \
                     rewrite it at the default count to keep it openable everywhere"
            ),
            [
                ("iterations", iterations.to_string()),
                ("minIterations", min.to_string()),
                ("maxIterations", max.to_string()),
            ],
        );
    }
    from_reason(
        corruption.reason(),
        DOMAIN,
        corruption.to_string(),
        [("detail", corruption.code().to_owned())],
    )
}

/// Maps a failed seal (protect).
pub fn seal_error(err: SealError) -> Status {
    match err {
        SealError::EmptyPassphrase => snug_rpc::status::invalid_argument(
            DOMAIN,
            "header.passphrase",
            "the passphrase is empty",
        ),
        SealError::IterationsOutOfRange {
            iterations,
            min,
            max,
        } => snug_rpc::status::invalid_argument(
            DOMAIN,
            "header.iterations",
            format!("iteration count {iterations} is outside the accepted range {min}..={max}"),
        ),
        SealError::TooLarge { max, .. } => too_large(DOMAIN, max),
        // A freshly generated recovery key is always plausible; reaching this is a bug.
        SealError::ImplausibleRecoveryKey => {
            snug_rpc::status::internal(DOMAIN, &SealError::ImplausibleRecoveryKey)
        }
        SealError::Corrupt(corruption) => corrupt(corruption),
        // The service generates every recovery key it seals under.
        err @ SealError::WeakRecoveryKey { .. } => snug_rpc::status::internal(DOMAIN, &err),
        SealError::FileKeyMismatch => {
            snug_rpc::status::internal(DOMAIN, &SealError::FileKeyMismatch)
        }
    }
}

/// Maps a failed passphrase change or recovery-key rotation.
pub fn rewrap_error(err: RewrapError) -> Status {
    match err {
        RewrapError::Open(open) => open_error(open),
        RewrapError::EmptyPassphrase => snug_rpc::status::invalid_argument(
            DOMAIN,
            "header.new_passphrase",
            "the new passphrase is empty",
        ),
        RewrapError::NoPassphraseSlot => from_reason(
            &reasons::NO_PASSPHRASE_SLOT,
            DOMAIN,
            "this container has no passphrase slot",
            [],
        ),
        RewrapError::NoRecoverySlot => from_reason(
            &reasons::NO_RECOVERY_SLOT,
            DOMAIN,
            "this container has no recovery-key slot",
            [],
        ),
        // Only a caller-supplied key can be either (a generated one is full strength).
        RewrapError::ImplausibleRecoveryKey => snug_rpc::status::invalid_argument(
            DOMAIN,
            "header.new_recovery_key",
            "the new recovery key is not 27 symbols of the recovery-key alphabet",
        ),
        err @ RewrapError::WeakRecoveryKey { .. } => {
            from_reason(&reasons::WEAK_RECOVERY_KEY, DOMAIN, err.to_string(), [])
        }
        // No RPC of this service changes the KDF setting, so neither can be reached.
        err @ (RewrapError::IterationsOutOfRange { .. } | RewrapError::SlotNotOpened { .. }) => {
            snug_rpc::status::internal(DOMAIN, &err)
        }
    }
}

/// Maps a failed reseal (an edit of a protected file).
pub fn reseal_error(err: ResealError) -> Status {
    match err {
        ResealError::Open(open) => open_error(open),
        ResealError::TooLarge { max, .. } => too_large(DOMAIN, max),
    }
}
