//! The `ErrorInfo` reasons of `snug.schema.v1` (domain `snug.schema`).
//!
//! Clients switch on these strings; they are part of the API and never change meaning. Most are
//! the `reason()` strings of `snug-schema`'s error enums, so the CLI's JSON error codes and the
//! service's reasons are one vocabulary.

pub use snug_rpc::status::reason::{INTERNAL, INVALID_ARGUMENT, OVERLOADED, TOO_LARGE};

/// The registry's domain of this service: every reason it sends, with its gRPC code.
pub const REASONS: snug_reasons::Domain = snug_reasons::schema::DOMAIN;

/// The error domain of this service.
pub const DOMAIN: &str = REASONS.name;

/// The bytes are not a SQLite database (nor, where one is accepted, a SNUGENC1 container).
pub const NOT_SQLITE: &str = snug_reasons::schema::NOT_SQLITE.name;
/// A damaged SQLite file; metadata `detail` names the damage.
pub const MALFORMED: &str = snug_reasons::schema::MALFORMED.name;
/// A SQLite database that is not a Snug user database.
pub const NOT_A_USER_DATABASE: &str = snug_reasons::schema::NOT_A_USER_DATABASE.name;
/// A schema no conforming hub writes; metadata `detail` and `object`.
pub const HOSTILE_SCHEMA: &str = snug_reasons::schema::HOSTILE_SCHEMA.name;
/// Stamped newer than this build understands; metadata `foundVersion`, `supportedVersion`.
pub const SCHEMA_TOO_NEW: &str = snug_reasons::schema::SCHEMA_TOO_NEW.name;
/// A SNUGENC1 file where a plain one is needed.
pub const PROTECTED: &str = snug_reasons::schema::PROTECTED.name;
/// A healthy container that no supplied secret opened (CheckImport).
pub const LOCKED: &str = snug_reasons::schema::LOCKED.name;
/// A damaged container (CheckImport); metadata `detail`.
pub const CORRUPT_CONTAINER: &str = snug_reasons::schema::CORRUPT_CONTAINER.name;
/// A container version or KDF newer than this build (CheckImport).
pub const UNSUPPORTED_FORMAT_VERSION: &str = snug_reasons::schema::UNSUPPORTED_FORMAT_VERSION.name;
/// A healthy container whose PBKDF2 iteration count is outside the accepted range (CheckImport);
/// metadata `iterations`, `minIterations`, `maxIterations`.
pub const ITERATIONS_OUT_OF_POLICY: &str = snug_reasons::schema::ITERATIONS_OUT_OF_POLICY.name;
/// ValidateSyncImage was given a SNUGENC1 container: a hub origin stores plaintext only.
pub const CONTAINER_NOT_ACCEPTED: &str = snug_reasons::schema::CONTAINER_NOT_ACCEPTED.name;
/// ValidateSyncImage was given an image with rows in `snug_secrets`; metadata `secretRows`.
pub const SECRETS_PRESENT: &str = snug_reasons::schema::SECRETS_PRESENT.name;
/// No app with the id; metadata `appId`.
pub const APP_NOT_FOUND: &str = snug_reasons::schema::APP_NOT_FOUND.name;
/// The app has no such version; metadata `appId`, `version`.
pub const VERSION_NOT_FOUND: &str = snug_reasons::schema::VERSION_NOT_FOUND.name;
/// The app has no doc with the slug; metadata `appId`, `slug`.
pub const DOC_NOT_FOUND: &str = snug_reasons::schema::DOC_NOT_FOUND.name;
/// No chat thread with the id; metadata `threadId`.
pub const THREAD_NOT_FOUND: &str = snug_reasons::schema::THREAD_NOT_FOUND.name;
/// No chat message with the id; metadata `messageId`.
pub const MESSAGE_NOT_FOUND: &str = snug_reasons::schema::MESSAGE_NOT_FOUND.name;
/// InstallApp with an explicit app id that is taken.
pub const APP_EXISTS: &str = snug_reasons::schema::APP_EXISTS.name;
/// Two registered apps share an `appDataToken` (§8.2): a file holding both (import, migrate,
/// validate), or InstallApp of an id whose token is taken; metadata `appId`, `otherAppId`, `token`.
pub const APP_TOKEN_COLLISION: &str = snug_reasons::schema::APP_TOKEN_COLLISION.name;
/// DeleteAppVersion of a pinned version.
pub const VERSION_PINNED: &str = snug_reasons::schema::VERSION_PINNED.name;
/// DeleteAppVersion of the current version.
pub const VERSION_CURRENT: &str = snug_reasons::schema::VERSION_CURRENT.name;
/// ResetToFactory of an app without a pinned version.
pub const NO_FACTORY_VERSION: &str = snug_reasons::schema::NO_FACTORY_VERSION.name;
/// A runtime contract that is not a JSON object.
pub const INVALID_CONTRACT: &str = snug_reasons::schema::INVALID_CONTRACT.name;
/// The file holds a row no conforming hub writes.
pub const CORRUPT_ROW: &str = snug_reasons::schema::CORRUPT_ROW.name;

/// Every reason this service can return, for the reason-table tests: the names of
/// [`REASONS`], in its order.
pub const ALL: &[&str] = &snug_reasons::names::<{ REASONS.reasons.len() }>(REASONS.reasons);
