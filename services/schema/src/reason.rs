//! The `ErrorInfo` reasons of `snug.schema.v1` (domain `snug.schema`).
//!
//! Clients switch on these strings; they are part of the API and never change meaning. Most are
//! the `reason()` strings of `snug-schema`'s error enums, so the CLI's JSON error codes and the
//! service's reasons are one vocabulary.

pub use snug_rpc::status::reason::{INTERNAL, INVALID_ARGUMENT, OVERLOADED, TOO_LARGE};

/// The error domain of this service.
pub const DOMAIN: &str = "snug.schema";

/// The bytes are not a SQLite database (nor, where one is accepted, a SNUGENC1 container).
pub const NOT_SQLITE: &str = "NOT_SQLITE";
/// A damaged SQLite file; metadata `detail` names the damage.
pub const MALFORMED: &str = "MALFORMED";
/// A SQLite database that is not a Snug user database.
pub const NOT_A_USER_DATABASE: &str = "NOT_A_USER_DATABASE";
/// A schema no conforming hub writes; metadata `detail` and `object`.
pub const HOSTILE_SCHEMA: &str = "HOSTILE_SCHEMA";
/// Stamped newer than this build understands; metadata `foundVersion`, `supportedVersion`.
pub const SCHEMA_TOO_NEW: &str = "SCHEMA_TOO_NEW";
/// A SNUGENC1 file where a plain one is needed.
pub const PROTECTED: &str = "PROTECTED";
/// A healthy container that no supplied secret opened (CheckImport).
pub const LOCKED: &str = "LOCKED";
/// A damaged container (CheckImport); metadata `detail`.
pub const CORRUPT_CONTAINER: &str = "CORRUPT_CONTAINER";
/// A container version or KDF newer than this build (CheckImport).
pub const UNSUPPORTED_FORMAT_VERSION: &str = "UNSUPPORTED_FORMAT_VERSION";
/// A healthy container whose PBKDF2 iteration count is outside the accepted range (CheckImport);
/// metadata `iterations`, `minIterations`, `maxIterations`.
pub const ITERATIONS_OUT_OF_POLICY: &str = "ITERATIONS_OUT_OF_POLICY";
/// ValidateSyncImage was given a SNUGENC1 container: a hub origin stores plaintext only.
pub const CONTAINER_NOT_ACCEPTED: &str = "CONTAINER_NOT_ACCEPTED";
/// ValidateSyncImage was given an image with rows in `snug_secrets`; metadata `secretRows`.
pub const SECRETS_PRESENT: &str = "SECRETS_PRESENT";
/// No app with the id; metadata `appId`.
pub const APP_NOT_FOUND: &str = "APP_NOT_FOUND";
/// The app has no such version; metadata `appId`, `version`.
pub const VERSION_NOT_FOUND: &str = "VERSION_NOT_FOUND";
/// The app has no doc with the slug; metadata `appId`, `slug`.
pub const DOC_NOT_FOUND: &str = "DOC_NOT_FOUND";
/// No chat thread with the id; metadata `threadId`.
pub const THREAD_NOT_FOUND: &str = "THREAD_NOT_FOUND";
/// No chat message with the id; metadata `messageId`.
pub const MESSAGE_NOT_FOUND: &str = "MESSAGE_NOT_FOUND";
/// InstallApp with an explicit app id that is taken.
pub const APP_EXISTS: &str = "APP_EXISTS";
/// Two registered apps share an `appDataToken` (§8.2): a file holding both (import, migrate,
/// validate), or InstallApp of an id whose token is taken; metadata `appId`, `otherAppId`, `token`.
pub const APP_TOKEN_COLLISION: &str = "APP_TOKEN_COLLISION";
/// DeleteAppVersion of a pinned version.
pub const VERSION_PINNED: &str = "VERSION_PINNED";
/// DeleteAppVersion of the current version.
pub const VERSION_CURRENT: &str = "VERSION_CURRENT";
/// ResetToFactory of an app without a pinned version.
pub const NO_FACTORY_VERSION: &str = "NO_FACTORY_VERSION";
/// A runtime contract that is not a JSON object.
pub const INVALID_CONTRACT: &str = "INVALID_CONTRACT";
/// The file holds a row no conforming hub writes.
pub const CORRUPT_ROW: &str = "CORRUPT_ROW";

/// Every reason this service can return, for the reason-table tests.
pub const ALL: &[&str] = &[
    NOT_SQLITE,
    MALFORMED,
    NOT_A_USER_DATABASE,
    HOSTILE_SCHEMA,
    SCHEMA_TOO_NEW,
    PROTECTED,
    LOCKED,
    CORRUPT_CONTAINER,
    UNSUPPORTED_FORMAT_VERSION,
    ITERATIONS_OUT_OF_POLICY,
    CONTAINER_NOT_ACCEPTED,
    SECRETS_PRESENT,
    APP_NOT_FOUND,
    VERSION_NOT_FOUND,
    DOC_NOT_FOUND,
    THREAD_NOT_FOUND,
    MESSAGE_NOT_FOUND,
    APP_EXISTS,
    APP_TOKEN_COLLISION,
    VERSION_PINNED,
    VERSION_CURRENT,
    NO_FACTORY_VERSION,
    INVALID_CONTRACT,
    CORRUPT_ROW,
    TOO_LARGE,
    INVALID_ARGUMENT,
    OVERLOADED,
    INTERNAL,
];
