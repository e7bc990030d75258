//! The `ErrorInfo` reasons of `snug.container.v1` (domain `snug.container`).
//!
//! Clients switch on these strings; they are part of the API and never change meaning.

pub use snug_rpc::status::reason::{INTERNAL, INVALID_ARGUMENT, OVERLOADED, TOO_LARGE};

/// The registry's domain of this service: every reason it sends, with its gRPC code.
pub const REASONS: snug_reasons::Domain = snug_reasons::container::DOMAIN;

/// The error domain of this service.
pub const DOMAIN: &str = REASONS.name;

/// A healthy container that no supplied secret opened.
pub const LOCKED: &str = snug_reasons::container::LOCKED.name;
/// A damaged container; metadata `detail` names the damage.
pub const CORRUPT: &str = snug_reasons::container::CORRUPT.name;
/// A container version or KDF newer than this build understands.
pub const UNSUPPORTED_FORMAT_VERSION: &str =
    snug_reasons::container::UNSUPPORTED_FORMAT_VERSION.name;
/// A healthy container whose PBKDF2 iteration count is outside the accepted range (a setting, not
/// damage); metadata `iterations`, `minIterations`, `maxIterations`.
pub const ITERATIONS_OUT_OF_POLICY: &str = snug_reasons::container::ITERATIONS_OUT_OF_POLICY.name;
/// The bytes are not a SNUGENC1 container.
pub const NOT_A_CONTAINER: &str = snug_reasons::container::NOT_A_CONTAINER.name;
/// Protect was given a container rather than a plain database.
pub const ALREADY_PROTECTED: &str = snug_reasons::container::ALREADY_PROTECTED.name;
/// Protect was given bytes that are not a SQLite database.
pub const NOT_A_USER_DATABASE: &str = snug_reasons::container::NOT_A_USER_DATABASE.name;
/// ChangePassphrase on a container without a passphrase slot.
pub const NO_PASSPHRASE_SLOT: &str = snug_reasons::container::NO_PASSPHRASE_SLOT.name;
/// RotateRecoveryKey on a container without a recovery slot.
pub const NO_RECOVERY_SLOT: &str = snug_reasons::container::NO_RECOVERY_SLOT.name;
/// Protect without the custody acknowledgement of §11.3.
pub const CUSTODY_NOT_ACKNOWLEDGED: &str = snug_reasons::container::CUSTODY_NOT_ACKNOWLEDGED.name;
/// RotateRecoveryKey given a new recovery key below full strength (§11.2 rule 3).
pub const WEAK_RECOVERY_KEY: &str = snug_reasons::container::WEAK_RECOVERY_KEY.name;

/// Every reason this service can return, for the reason-table tests: the names of
/// [`REASONS`], in its order.
pub const ALL: &[&str] = &snug_reasons::names::<{ REASONS.reasons.len() }>(REASONS.reasons);
