//! `snug.materialize`: the reasons of `snug.materialize.v1` (materialize.proto's table), the
//! `reason()` strings of `snug-materialize`'s error enums and, for the user database itself, of
//! `snug-schema`'s `OpenError`.
//!
//! The gateway answers every materialize refusal of its own with 422: an app in the stored image
//! that cannot be exported is the image's problem, not the request's.

use crate::{CliExit, Domain, Exit, GrpcCode, Reason, http};

pub use crate::rpc::{
    BODY_ABORTED, DEADLINE_EXCEEDED, INTERNAL, INVALID_ARGUMENT, OVERLOADED, SERVICE_TOKEN_REFUSED,
    TOO_LARGE, UPLOAD_TOO_SLOW,
};
pub use crate::schema::{
    APP_NOT_FOUND, APP_TOKEN_COLLISION, HOSTILE_SCHEMA, MALFORMED, NOT_A_USER_DATABASE, NOT_SQLITE,
    PROTECTED, SCHEMA_TOO_NEW,
};

/// Typed SQL (2) or a stored schema, a runtime file (4).
const SQL_OR_FILE: CliExit = CliExit::ByCause(&[Exit::Usage, Exit::Corrupt]);

/// A refusal the gateway's per-app export passes on as 422.
const fn refused(
    name: &'static str,
    grpc: GrpcCode,
    exit: CliExit,
    summary: &'static str,
) -> Reason {
    Reason {
        name,
        grpc: Some(grpc),
        http: http(422, name, false),
        exit,
        summary,
    }
}

/// An object name breaks the §8.2 rule; metadata `object`, `kind`.
pub const INVALID_NAME: Reason = refused(
    "INVALID_NAME",
    GrpcCode::InvalidArgument,
    SQL_OR_FILE,
    "an object name breaks the §8.2 rule; nothing written",
);

/// A virtual table in a runtime or a statement; metadata `object`.
pub const VIRTUAL_TABLE: Reason = refused(
    "VIRTUAL_TABLE",
    GrpcCode::InvalidArgument,
    SQL_OR_FILE,
    "a virtual table in a runtime or a statement; nothing written",
);

/// `snug_kv` is not the driver's key/value table.
pub const INVALID_KV_TABLE: Reason = refused(
    "INVALID_KV_TABLE",
    GrpcCode::InvalidArgument,
    SQL_OR_FILE,
    "`snug_kv` is not `(key TEXT PRIMARY KEY, value TEXT)`; nothing written",
);

/// The sandbox refused a statement; metadata `statement`, `detail`.
pub const FORBIDDEN_STATEMENT: Reason = refused(
    "FORBIDDEN_STATEMENT",
    GrpcCode::InvalidArgument,
    SQL_OR_FILE,
    "the sandbox refused a statement (ATTACH, a pragma, `load_extension`, …)",
);

/// A statement entry or stored DDL text is not exactly one statement.
pub const NOT_ONE_STATEMENT: Reason = refused(
    "NOT_ONE_STATEMENT",
    GrpcCode::InvalidArgument,
    SQL_OR_FILE,
    "a statement entry (or a stored DDL text) is not exactly one statement",
);

/// SQLite rejected or failed a statement; metadata `statement`.
pub const STATEMENT_FAILED: Reason = refused(
    "STATEMENT_FAILED",
    GrpcCode::InvalidArgument,
    CliExit::Always(Exit::Usage),
    "SQLite rejected or failed a statement",
);

/// SQLite rejected DDL (given, stored, or a runtime table at rest).
pub const DDL_FAILED: Reason = refused(
    "DDL_FAILED",
    GrpcCode::InvalidArgument,
    SQL_OR_FILE,
    "SQLite rejected DDL: given, stored, or a runtime table at rest",
);

/// An ApplyDdl request over the bounds of one call: more statements, or more statement text, than
/// `snug_materialize::MAX_DDL_STATEMENTS` / `MAX_DDL_BYTES`; metadata `field`, `limit`.
pub const DDL_TOO_LARGE: Reason = refused(
    "DDL_TOO_LARGE",
    GrpcCode::ResourceExhausted,
    CliExit::Never,
    "an ApplyDdl request holds more statements or more statement text than one call applies; nothing was read or written",
);

/// A statement ran out of its step budget; metadata `statement`, `limit`.
pub const BUDGET_EXCEEDED: Reason = refused(
    "BUDGET_EXCEEDED",
    GrpcCode::ResourceExhausted,
    CliExit::Always(Exit::Usage),
    "a statement ran out of its virtual-machine step budget",
);

/// A result exceeded its bounds with `OVERFLOW_FAIL`; metadata `statement`.
pub const RESULT_TOO_LARGE: Reason = refused(
    "RESULT_TOO_LARGE",
    GrpcCode::ResourceExhausted,
    CliExit::Always(Exit::Usage),
    "a result exceeded its bounds with OVERFLOW_FAIL",
);

/// ExecuteSql with `read_only` whose statements would change the app.
pub const READ_ONLY: Reason = refused(
    "READ_ONLY",
    GrpcCode::InvalidArgument,
    CliExit::Always(Exit::Usage),
    "a read-only ExecuteSql whose statements would write",
);

/// A runtime table's natural name is taken in the user database; metadata `object`.
pub const NAME_COLLISION: Reason = refused(
    "NAME_COLLISION",
    GrpcCode::FailedPrecondition,
    CliExit::Always(Exit::Other),
    "a runtime table's natural name is taken in the user database",
);

/// The app's registered schema is unreadable; metadata `appId`.
pub const CORRUPT_SCHEMA: Reason = refused(
    "CORRUPT_SCHEMA",
    GrpcCode::InvalidArgument,
    CliExit::Always(Exit::Corrupt),
    "the app's registered schema (`schema_json`) is unreadable",
);

/// Replaying the registered schema created other objects than it lists.
pub const SCHEMA_MISMATCH: Reason = refused(
    "SCHEMA_MISMATCH",
    GrpcCode::InvalidArgument,
    CliExit::Always(Exit::Corrupt),
    "replaying the registered schema created other objects than it lists",
);

/// An at-rest table's columns differ from its registered DDL; metadata `object`.
pub const SHAPE_MISMATCH: Reason = refused(
    "SHAPE_MISMATCH",
    GrpcCode::InvalidArgument,
    CliExit::Always(Exit::Corrupt),
    "an at-rest table's columns differ from its registered DDL",
);

/// The domain `snug.materialize` and its reasons, in materialize.proto's order.
pub const DOMAIN: Domain = Domain {
    name: "snug.materialize",
    reasons: &[
        &APP_NOT_FOUND,
        &APP_TOKEN_COLLISION,
        &INVALID_NAME,
        &VIRTUAL_TABLE,
        &INVALID_KV_TABLE,
        &FORBIDDEN_STATEMENT,
        &NOT_ONE_STATEMENT,
        &STATEMENT_FAILED,
        &DDL_FAILED,
        &DDL_TOO_LARGE,
        &BUDGET_EXCEEDED,
        &RESULT_TOO_LARGE,
        &READ_ONLY,
        &NAME_COLLISION,
        &CORRUPT_SCHEMA,
        &SCHEMA_MISMATCH,
        &SHAPE_MISMATCH,
        &NOT_SQLITE,
        &MALFORMED,
        &NOT_A_USER_DATABASE,
        &HOSTILE_SCHEMA,
        &SCHEMA_TOO_NEW,
        &PROTECTED,
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
