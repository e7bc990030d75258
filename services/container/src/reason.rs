//! The `ErrorInfo` reasons of `snug.container.v1` (domain `snug.container`).
//!
//! Clients switch on these strings; they are part of the API and never change meaning.

pub use snug_rpc::status::reason::{INTERNAL, INVALID_ARGUMENT, OVERLOADED, TOO_LARGE};

/// The error domain of this service.
pub const DOMAIN: &str = "snug.container";

/// A healthy container that no supplied secret opened.
pub const LOCKED: &str = "LOCKED";
/// A damaged container; metadata `detail` names the damage.
pub const CORRUPT: &str = "CORRUPT";
/// A container version or KDF newer than this build understands.
pub const UNSUPPORTED_FORMAT_VERSION: &str = "UNSUPPORTED_FORMAT_VERSION";
/// A healthy container whose PBKDF2 iteration count is outside the accepted range (a setting, not
/// damage); metadata `iterations`, `minIterations`, `maxIterations`.
pub const ITERATIONS_OUT_OF_POLICY: &str = "ITERATIONS_OUT_OF_POLICY";
/// The bytes are not a SNUGENC1 container.
pub const NOT_A_CONTAINER: &str = "NOT_A_CONTAINER";
/// Protect was given a container rather than a plain database.
pub const ALREADY_PROTECTED: &str = "ALREADY_PROTECTED";
/// Protect was given bytes that are not a SQLite database.
pub const NOT_A_USER_DATABASE: &str = "NOT_A_USER_DATABASE";
/// ChangePassphrase on a container without a passphrase slot.
pub const NO_PASSPHRASE_SLOT: &str = "NO_PASSPHRASE_SLOT";
/// RotateRecoveryKey on a container without a recovery slot.
pub const NO_RECOVERY_SLOT: &str = "NO_RECOVERY_SLOT";
/// Protect without the custody acknowledgement of §11.3.
pub const CUSTODY_NOT_ACKNOWLEDGED: &str = "CUSTODY_NOT_ACKNOWLEDGED";
/// RotateRecoveryKey given a new recovery key below full strength (§11.2 rule 3).
pub const WEAK_RECOVERY_KEY: &str = "WEAK_RECOVERY_KEY";

/// Every reason this service can return, for the reason-table test.
pub const ALL: &[&str] = &[
    LOCKED,
    CORRUPT,
    UNSUPPORTED_FORMAT_VERSION,
    ITERATIONS_OUT_OF_POLICY,
    NOT_A_CONTAINER,
    ALREADY_PROTECTED,
    NOT_A_USER_DATABASE,
    NO_PASSPHRASE_SLOT,
    NO_RECOVERY_SLOT,
    CUSTODY_NOT_ACKNOWLEDGED,
    WEAK_RECOVERY_KEY,
    TOO_LARGE,
    INVALID_ARGUMENT,
    OVERLOADED,
    INTERNAL,
];
