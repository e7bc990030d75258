//! `snug.container`: the reasons of `snug.container.v1` (container.proto's table).

use crate::{CliExit, Domain, Exit, GrpcCode, Reason, http};

pub use crate::rpc::{
    BODY_ABORTED, DEADLINE_EXCEEDED, INTERNAL, INVALID_ARGUMENT, OVERLOADED, SERVICE_TOKEN_REFUSED,
    TOO_LARGE, UPLOAD_TOO_SLOW,
};

/// A healthy container that no supplied secret opened.
pub const LOCKED: Reason = Reason {
    name: "LOCKED",
    grpc: Some(GrpcCode::FailedPrecondition),
    http: None,
    exit: CliExit::Always(Exit::Locked),
    summary: "a healthy container that no supplied secret opened",
};

/// A damaged container; metadata `detail` names the damage.
pub const CORRUPT: Reason = Reason {
    name: "CORRUPT",
    grpc: Some(GrpcCode::InvalidArgument),
    http: None,
    exit: CliExit::Always(Exit::Corrupt),
    summary: "a damaged container; metadata `detail` names the damage",
};

/// A container version or KDF newer than this build understands.
pub const UNSUPPORTED_FORMAT_VERSION: Reason = Reason {
    name: "UNSUPPORTED_FORMAT_VERSION",
    grpc: Some(GrpcCode::InvalidArgument),
    http: None,
    exit: CliExit::Always(Exit::Unsupported),
    summary: "a container version or KDF newer than this build",
};

/// A healthy container whose PBKDF2 iteration count is outside the accepted range (a setting,
/// not damage); metadata `iterations`, `minIterations`, `maxIterations`.
pub const ITERATIONS_OUT_OF_POLICY: Reason = Reason {
    name: "ITERATIONS_OUT_OF_POLICY",
    grpc: Some(GrpcCode::InvalidArgument),
    http: None,
    exit: CliExit::Always(Exit::Unsupported),
    summary: "a healthy container whose PBKDF2 count is outside the accepted range",
};

/// The bytes are not a SNUGENC1 container.
pub const NOT_A_CONTAINER: Reason = Reason {
    name: "NOT_A_CONTAINER",
    grpc: Some(GrpcCode::InvalidArgument),
    http: None,
    exit: CliExit::Always(Exit::Corrupt),
    summary: "the bytes are not a SNUGENC1 container",
};

/// Protect (or Reseal, as its new plaintext) was given a container rather than a plain database.
pub const ALREADY_PROTECTED: Reason = Reason {
    name: "ALREADY_PROTECTED",
    grpc: Some(GrpcCode::InvalidArgument),
    http: None,
    // `snug protect` of a protected file refuses to overwrite, like an existing OUT.
    exit: CliExit::Always(Exit::Other),
    summary: "Protect or Reseal was given a container as the plaintext",
};

/// The bytes are not a Snug user database: not SQLite (Protect, Reseal), or SQLite without the
/// hub's schema (the schema and materialize services).
pub const NOT_A_USER_DATABASE: Reason = Reason {
    name: "NOT_A_USER_DATABASE",
    grpc: Some(GrpcCode::InvalidArgument),
    http: http(400, "NOT_A_USER_DATABASE", false),
    exit: CliExit::Always(Exit::Corrupt),
    summary: "the bytes are not a Snug user database",
};

/// ChangePassphrase on a container without a passphrase slot.
pub const NO_PASSPHRASE_SLOT: Reason = Reason {
    name: "NO_PASSPHRASE_SLOT",
    grpc: Some(GrpcCode::FailedPrecondition),
    http: None,
    exit: CliExit::Always(Exit::Other),
    summary: "ChangePassphrase on a container without a passphrase slot",
};

/// RotateRecoveryKey on a container without a recovery slot.
pub const NO_RECOVERY_SLOT: Reason = Reason {
    name: "NO_RECOVERY_SLOT",
    grpc: Some(GrpcCode::FailedPrecondition),
    http: None,
    exit: CliExit::Always(Exit::Other),
    summary: "RotateRecoveryKey on a container without a recovery slot",
};

/// Protect without the custody acknowledgement of §11.3.
pub const CUSTODY_NOT_ACKNOWLEDGED: Reason = Reason {
    name: "CUSTODY_NOT_ACKNOWLEDGED",
    grpc: Some(GrpcCode::FailedPrecondition),
    http: None,
    // The CLI shows the custody statement itself.
    exit: CliExit::Never,
    summary: "Protect without confirming the §11.3 custody statement was shown",
};

/// RotateRecoveryKey given a new recovery key below full strength (§11.2 rule 3).
pub const WEAK_RECOVERY_KEY: Reason = Reason {
    name: "WEAK_RECOVERY_KEY",
    grpc: Some(GrpcCode::InvalidArgument),
    http: None,
    exit: CliExit::Always(Exit::Usage),
    summary: "a supplied new recovery key below full strength (27 symbols)",
};

/// The domain `snug.container` and its reasons, in container.proto's order.
pub const DOMAIN: Domain = Domain {
    name: "snug.container",
    reasons: &[
        &LOCKED,
        &CORRUPT,
        &UNSUPPORTED_FORMAT_VERSION,
        &ITERATIONS_OUT_OF_POLICY,
        &NOT_A_CONTAINER,
        &ALREADY_PROTECTED,
        &NOT_A_USER_DATABASE,
        &NO_PASSPHRASE_SLOT,
        &NO_RECOVERY_SLOT,
        &CUSTODY_NOT_ACKNOWLEDGED,
        &WEAK_RECOVERY_KEY,
        &TOO_LARGE,
        &INVALID_ARGUMENT,
        &BODY_ABORTED,
        &UPLOAD_TOO_SLOW,
        &SERVICE_TOKEN_REFUSED,
        &OVERLOADED,
        &DEADLINE_EXCEEDED,
        &INTERNAL,
    ],
};
