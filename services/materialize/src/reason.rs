//! The `ErrorInfo` reasons of `snug.materialize.v1` (domain `snug.materialize`).
//!
//! Clients switch on these strings; they are part of the API and never change meaning. They are
//! the `reason()` strings of `snug-materialize`'s error enums (and, for the user database itself,
//! of `snug-schema`'s `OpenError`), so the CLI's JSON error codes and the service's reasons are
//! one vocabulary.

pub use snug_rpc::status::reason::{INTERNAL, INVALID_ARGUMENT, OVERLOADED, TOO_LARGE};

/// The error domain of this service.
pub const DOMAIN: &str = "snug.materialize";

/// No `snug_apps` row for the namespace; metadata `appId`.
pub const APP_NOT_FOUND: &str = "APP_NOT_FOUND";
/// Another registered app id has the namespace's `appDataToken` (§8.2), so its tables are
/// refused to both; metadata `appId`, `otherAppId`, `token`.
pub const APP_TOKEN_COLLISION: &str = "APP_TOKEN_COLLISION";
/// An object name breaks the §8.2 rule; metadata `object`, `kind`.
pub const INVALID_NAME: &str = "INVALID_NAME";
/// A virtual table in a runtime or a statement; metadata `object`.
pub const VIRTUAL_TABLE: &str = "VIRTUAL_TABLE";
/// `snug_kv` is not the driver's key/value table.
pub const INVALID_KV_TABLE: &str = "INVALID_KV_TABLE";
/// The sandbox refused a statement; metadata `statement`, `detail`.
pub const FORBIDDEN_STATEMENT: &str = "FORBIDDEN_STATEMENT";
/// A statement entry or stored DDL text is not exactly one statement.
pub const NOT_ONE_STATEMENT: &str = "NOT_ONE_STATEMENT";
/// SQLite rejected or failed a statement; metadata `statement`.
pub const STATEMENT_FAILED: &str = "STATEMENT_FAILED";
/// SQLite rejected DDL (given, stored, or a runtime table at rest).
pub const DDL_FAILED: &str = "DDL_FAILED";
/// A statement ran out of its step budget; metadata `statement`, `limit`.
pub const BUDGET_EXCEEDED: &str = "BUDGET_EXCEEDED";
/// A result exceeded its bounds with `OVERFLOW_FAIL`; metadata `statement`.
pub const RESULT_TOO_LARGE: &str = "RESULT_TOO_LARGE";
/// ExecuteSql with `read_only` whose statements would change the app.
pub const READ_ONLY: &str = "READ_ONLY";
/// A runtime table's natural name is taken in the user database; metadata `object`.
pub const NAME_COLLISION: &str = "NAME_COLLISION";
/// The app's registered schema is unreadable; metadata `appId`.
pub const CORRUPT_SCHEMA: &str = "CORRUPT_SCHEMA";
/// Replaying the registered schema created other objects than it lists.
pub const SCHEMA_MISMATCH: &str = "SCHEMA_MISMATCH";
/// An at-rest table's columns differ from its registered DDL; metadata `object`.
pub const SHAPE_MISMATCH: &str = "SHAPE_MISMATCH";
/// Not a SQLite database; metadata `part`.
pub const NOT_SQLITE: &str = "NOT_SQLITE";
/// A damaged SQLite file; metadata `part`, `detail`.
pub const MALFORMED: &str = "MALFORMED";
/// A SQLite database that is not a Snug user database.
pub const NOT_A_USER_DATABASE: &str = "NOT_A_USER_DATABASE";
/// The user database's hub schema is hostile; metadata `detail`, `object`.
pub const HOSTILE_SCHEMA: &str = "HOSTILE_SCHEMA";
/// The user database is stamped newer than this build understands.
pub const SCHEMA_TOO_NEW: &str = "SCHEMA_TOO_NEW";
/// A SNUGENC1 file where a plain one is needed.
pub const PROTECTED: &str = "PROTECTED";

/// Every reason this service can return, for the reason-table tests.
pub const ALL: &[&str] = &[
    APP_NOT_FOUND,
    APP_TOKEN_COLLISION,
    INVALID_NAME,
    VIRTUAL_TABLE,
    INVALID_KV_TABLE,
    FORBIDDEN_STATEMENT,
    NOT_ONE_STATEMENT,
    STATEMENT_FAILED,
    DDL_FAILED,
    BUDGET_EXCEEDED,
    RESULT_TOO_LARGE,
    READ_ONLY,
    NAME_COLLISION,
    CORRUPT_SCHEMA,
    SCHEMA_MISMATCH,
    SHAPE_MISMATCH,
    NOT_SQLITE,
    MALFORMED,
    NOT_A_USER_DATABASE,
    HOSTILE_SCHEMA,
    SCHEMA_TOO_NEW,
    PROTECTED,
    TOO_LARGE,
    INVALID_ARGUMENT,
    OVERLOADED,
    INTERNAL,
];
