//! `snug.schema`: the reasons of `snug.schema.v1` (schema.proto's table), most of them the
//! `reason()` strings of `snug-schema`'s error enums.

use crate::{CliExit, Domain, Exit, GrpcCode, Reason, http};

pub use crate::container::{
    ITERATIONS_OUT_OF_POLICY, LOCKED, NOT_A_USER_DATABASE, UNSUPPORTED_FORMAT_VERSION,
};
pub use crate::rpc::{
    BODY_ABORTED, DEADLINE_EXCEEDED, INTERNAL, INVALID_ARGUMENT, OVERLOADED, SERVICE_TOKEN_REFUSED,
    TOO_LARGE, UPLOAD_TOO_SLOW,
};

/// The bytes are not a SQLite database (nor, where one is accepted, a SNUGENC1 container).
pub const NOT_SQLITE: Reason = Reason {
    name: "NOT_SQLITE",
    grpc: Some(GrpcCode::InvalidArgument),
    http: http(400, "NOT_SQLITE", false),
    exit: CliExit::Always(Exit::Corrupt),
    summary: "the bytes are not a SQLite database (nor, where accepted, SNUGENC1)",
};

/// A damaged SQLite file; metadata `detail` names the damage.
pub const MALFORMED: Reason = Reason {
    name: "MALFORMED",
    grpc: Some(GrpcCode::InvalidArgument),
    http: http(400, "MALFORMED", false),
    exit: CliExit::Always(Exit::Corrupt),
    summary: "a damaged SQLite file; metadata `detail` names the damage",
};

/// A schema no conforming hub writes; metadata `detail` and `object`.
pub const HOSTILE_SCHEMA: Reason = Reason {
    name: "HOSTILE_SCHEMA",
    grpc: Some(GrpcCode::InvalidArgument),
    http: http(400, "HOSTILE_SCHEMA", false),
    exit: CliExit::Always(Exit::Corrupt),
    summary: "triggers, views, virtual tables, foreign indexes or tables, wrong shapes",
};

/// Stamped newer than this build understands; metadata `foundVersion`, `supportedVersion`.
pub const SCHEMA_TOO_NEW: Reason = Reason {
    name: "SCHEMA_TOO_NEW",
    grpc: Some(GrpcCode::FailedPrecondition),
    http: http(400, "SCHEMA_TOO_NEW", false),
    exit: CliExit::Always(Exit::Unsupported),
    summary: "a user database stamped newer than this build understands",
};

/// A SNUGENC1 file where a plain one is needed.
pub const PROTECTED: Reason = Reason {
    name: "PROTECTED",
    grpc: Some(GrpcCode::FailedPrecondition),
    // A hub origin stores plaintext only: the same answer as a container pushed on purpose.
    http: http(400, "CONTAINER_NOT_ACCEPTED", false),
    exit: CliExit::Always(Exit::Locked),
    summary: "a SNUGENC1 file where a plain one is needed: unlock it first",
};

/// A damaged container met by CheckImport or ImportUserDatabase; metadata `detail`.
pub const CORRUPT_CONTAINER: Reason = Reason {
    name: "CORRUPT_CONTAINER",
    grpc: Some(GrpcCode::InvalidArgument),
    http: None,
    // The CLI reports a damaged container as every container command does: `CORRUPT`.
    exit: CliExit::Never,
    summary: "CheckImport, ImportUserDatabase: a damaged container",
};

/// A hub sync origin was given a SNUGENC1 container to store or validate: it stores plaintext only.
pub const CONTAINER_NOT_ACCEPTED: Reason = Reason {
    name: "CONTAINER_NOT_ACCEPTED",
    grpc: Some(GrpcCode::InvalidArgument),
    http: http(400, "CONTAINER_NOT_ACCEPTED", false),
    exit: CliExit::Never,
    summary: "a pushed or validated image is a container: a hub origin stores plaintext only (§11.3)",
};

/// A hub sync origin was given an image with rows in `snug_secrets`; metadata `secretRows`.
pub const SECRETS_PRESENT: Reason = Reason {
    name: "SECRETS_PRESENT",
    grpc: Some(GrpcCode::InvalidArgument),
    http: http(400, "SECRETS_PRESENT", false),
    exit: CliExit::Never,
    summary: "a pushed or validated image carries credentials: `snug_secrets` has rows",
};

/// No app with the id (no `snug_apps` row for the namespace); metadata `appId`.
pub const APP_NOT_FOUND: Reason = Reason {
    name: "APP_NOT_FOUND",
    grpc: Some(GrpcCode::NotFound),
    http: http(404, "APP_NOT_FOUND", false),
    exit: CliExit::Always(Exit::Usage),
    summary: "no app with that id; metadata `appId`",
};

/// The app has no such version; metadata `appId`, `version`.
pub const VERSION_NOT_FOUND: Reason = Reason {
    name: "VERSION_NOT_FOUND",
    grpc: Some(GrpcCode::NotFound),
    http: None,
    exit: CliExit::Always(Exit::Usage),
    summary: "the app has no such (or a pruned) version",
};

/// The app has no doc with the slug; metadata `appId`, `slug`.
pub const DOC_NOT_FOUND: Reason = Reason {
    name: "DOC_NOT_FOUND",
    grpc: Some(GrpcCode::NotFound),
    http: None,
    exit: CliExit::Always(Exit::Usage),
    summary: "the app has no doc with that slug",
};

/// No chat thread with the id; metadata `threadId`.
pub const THREAD_NOT_FOUND: Reason = Reason {
    name: "THREAD_NOT_FOUND",
    grpc: Some(GrpcCode::NotFound),
    http: None,
    exit: CliExit::Always(Exit::Usage),
    summary: "no chat thread with that id",
};

/// No chat message with the id; metadata `messageId`.
pub const MESSAGE_NOT_FOUND: Reason = Reason {
    name: "MESSAGE_NOT_FOUND",
    grpc: Some(GrpcCode::NotFound),
    http: None,
    exit: CliExit::Always(Exit::Usage),
    summary: "no chat message with that id",
};

/// InstallApp with an explicit app id that is taken.
pub const APP_EXISTS: Reason = Reason {
    name: "APP_EXISTS",
    grpc: Some(GrpcCode::AlreadyExists),
    http: None,
    exit: CliExit::Always(Exit::Usage),
    summary: "InstallApp with an explicit app id that is taken",
};

/// Two registered apps share an `appDataToken` (§8.2); metadata `appId`, `otherAppId`, `token`.
pub const APP_TOKEN_COLLISION: Reason = Reason {
    name: "APP_TOKEN_COLLISION",
    grpc: Some(GrpcCode::InvalidArgument),
    http: http(400, "APP_TOKEN_COLLISION", false),
    exit: CliExit::Always(Exit::Corrupt),
    summary: "two registered apps share an appDataToken (§8.2)",
};

/// DeleteAppVersion of a pinned version.
pub const VERSION_PINNED: Reason = Reason {
    name: "VERSION_PINNED",
    grpc: Some(GrpcCode::FailedPrecondition),
    http: None,
    exit: CliExit::Always(Exit::Usage),
    summary: "DeleteAppVersion of a pinned version",
};

/// DeleteAppVersion of the current version.
pub const VERSION_CURRENT: Reason = Reason {
    name: "VERSION_CURRENT",
    grpc: Some(GrpcCode::FailedPrecondition),
    http: None,
    exit: CliExit::Always(Exit::Usage),
    summary: "DeleteAppVersion of the version the app runs",
};

/// ResetToFactory of an app without a pinned version.
pub const NO_FACTORY_VERSION: Reason = Reason {
    name: "NO_FACTORY_VERSION",
    grpc: Some(GrpcCode::FailedPrecondition),
    http: None,
    exit: CliExit::Always(Exit::Usage),
    summary: "ResetToFactory of an app with no pinned version",
};

/// A runtime contract that is not a JSON object.
pub const INVALID_CONTRACT: Reason = Reason {
    name: "INVALID_CONTRACT",
    grpc: Some(GrpcCode::InvalidArgument),
    http: None,
    exit: CliExit::Always(Exit::Usage),
    summary: "a runtime contract that is not a JSON object",
};

/// The file holds a row no conforming hub writes; metadata `table`, `key`.
pub const CORRUPT_ROW: Reason = Reason {
    name: "CORRUPT_ROW",
    grpc: Some(GrpcCode::InvalidArgument),
    http: None,
    exit: CliExit::Always(Exit::Corrupt),
    summary: "the file holds a row no conforming hub writes",
};

/// The domain `snug.schema` and its reasons, in schema.proto's order.
pub const DOMAIN: Domain = Domain {
    name: "snug.schema",
    reasons: &[
        &NOT_SQLITE,
        &MALFORMED,
        &NOT_A_USER_DATABASE,
        &HOSTILE_SCHEMA,
        &SCHEMA_TOO_NEW,
        &PROTECTED,
        &LOCKED,
        &CORRUPT_CONTAINER,
        &UNSUPPORTED_FORMAT_VERSION,
        &ITERATIONS_OUT_OF_POLICY,
        &CONTAINER_NOT_ACCEPTED,
        &SECRETS_PRESENT,
        &APP_NOT_FOUND,
        &VERSION_NOT_FOUND,
        &DOC_NOT_FOUND,
        &THREAD_NOT_FOUND,
        &MESSAGE_NOT_FOUND,
        &APP_EXISTS,
        &APP_TOKEN_COLLISION,
        &VERSION_PINNED,
        &VERSION_CURRENT,
        &NO_FACTORY_VERSION,
        &INVALID_CONTRACT,
        &CORRUPT_ROW,
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
