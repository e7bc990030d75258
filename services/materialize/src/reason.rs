//! The `ErrorInfo` reasons of `snug.materialize.v1` (domain `snug.materialize`).
//!
//! Clients switch on these strings; they are part of the API and never change meaning. They are
//! the `reason()` strings of `snug-materialize`'s error enums (and, for the user database itself,
//! of `snug-schema`'s `OpenError`), so the CLI's JSON error codes and the service's reasons are
//! one vocabulary.

pub use snug_rpc::status::reason::{INTERNAL, INVALID_ARGUMENT, OVERLOADED, TOO_LARGE};

/// The registry's domain of this service: every reason it sends, with its gRPC code.
pub const REASONS: snug_reasons::Domain = snug_reasons::materialize::DOMAIN;

/// The error domain of this service.
pub const DOMAIN: &str = REASONS.name;

/// No `snug_apps` row for the namespace; metadata `appId`.
pub const APP_NOT_FOUND: &str = snug_reasons::materialize::APP_NOT_FOUND.name;
/// Another registered app id has the namespace's `appDataToken` (§8.2), so its tables are
/// refused to both; metadata `appId`, `otherAppId`, `token`.
pub const APP_TOKEN_COLLISION: &str = snug_reasons::materialize::APP_TOKEN_COLLISION.name;
/// An object name breaks the §8.2 rule; metadata `object`, `kind`.
pub const INVALID_NAME: &str = snug_reasons::materialize::INVALID_NAME.name;
/// A virtual table in a runtime or a statement; metadata `object`.
pub const VIRTUAL_TABLE: &str = snug_reasons::materialize::VIRTUAL_TABLE.name;
/// `snug_kv` is not the driver's key/value table.
pub const INVALID_KV_TABLE: &str = snug_reasons::materialize::INVALID_KV_TABLE.name;
/// The sandbox refused a statement; metadata `statement`, `detail`.
pub const FORBIDDEN_STATEMENT: &str = snug_reasons::materialize::FORBIDDEN_STATEMENT.name;
/// A statement entry or stored DDL text is not exactly one statement.
pub const NOT_ONE_STATEMENT: &str = snug_reasons::materialize::NOT_ONE_STATEMENT.name;
/// SQLite rejected or failed a statement; metadata `statement`.
pub const STATEMENT_FAILED: &str = snug_reasons::materialize::STATEMENT_FAILED.name;
/// SQLite rejected DDL (given, stored, or a runtime table at rest).
pub const DDL_FAILED: &str = snug_reasons::materialize::DDL_FAILED.name;
/// An ApplyDdl request over the bounds of one call; metadata `field`, `limit`.
pub const DDL_TOO_LARGE: &str = snug_reasons::materialize::DDL_TOO_LARGE.name;
/// A statement ran out of its step budget; metadata `statement`, `limit`.
pub const BUDGET_EXCEEDED: &str = snug_reasons::materialize::BUDGET_EXCEEDED.name;
/// A result exceeded its bounds with `OVERFLOW_FAIL`; metadata `statement`.
pub const RESULT_TOO_LARGE: &str = snug_reasons::materialize::RESULT_TOO_LARGE.name;
/// ExecuteSql with `read_only` whose statements would change the app.
pub const READ_ONLY: &str = snug_reasons::materialize::READ_ONLY.name;
/// A runtime table's natural name is taken in the user database; metadata `object`.
pub const NAME_COLLISION: &str = snug_reasons::materialize::NAME_COLLISION.name;
/// The app's registered schema is unreadable; metadata `appId`.
pub const CORRUPT_SCHEMA: &str = snug_reasons::materialize::CORRUPT_SCHEMA.name;
/// Replaying the registered schema created other objects than it lists.
pub const SCHEMA_MISMATCH: &str = snug_reasons::materialize::SCHEMA_MISMATCH.name;
/// An at-rest table's columns differ from its registered DDL; metadata `object`.
pub const SHAPE_MISMATCH: &str = snug_reasons::materialize::SHAPE_MISMATCH.name;
/// Not a SQLite database; metadata `part`.
pub const NOT_SQLITE: &str = snug_reasons::materialize::NOT_SQLITE.name;
/// A damaged SQLite file; metadata `part`, `detail`.
pub const MALFORMED: &str = snug_reasons::materialize::MALFORMED.name;
/// A SQLite database that is not a Snug user database.
pub const NOT_A_USER_DATABASE: &str = snug_reasons::materialize::NOT_A_USER_DATABASE.name;
/// The user database's hub schema is hostile; metadata `detail`, `object`.
pub const HOSTILE_SCHEMA: &str = snug_reasons::materialize::HOSTILE_SCHEMA.name;
/// The user database is stamped newer than this build understands.
pub const SCHEMA_TOO_NEW: &str = snug_reasons::materialize::SCHEMA_TOO_NEW.name;
/// A SNUGENC1 file where a plain one is needed.
pub const PROTECTED: &str = snug_reasons::materialize::PROTECTED.name;

/// Every reason this service can return, for the reason-table tests: the names of
/// [`REASONS`], in its order.
pub const ALL: &[&str] = &snug_reasons::names::<{ REASONS.reasons.len() }>(REASONS.reasons);
