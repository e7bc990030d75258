//! One error enum per operation family, each with a stable machine [`reason`](PersistError::reason).
//!
//! Services map reasons to gRPC codes and the CLI to exit codes, matching the enums
//! exhaustively. Reasons are `UPPER_SNAKE`, at most 63 characters, and never change once
//! published; where a family wraps another (apply DDL wraps materialize and persist), the inner
//! reason is passed through so a cause has one reason wherever it surfaces.

use snug_schema::OpenError;

use crate::sandbox::Forbidden;
use crate::scan::Refusal;
use crate::schema_json::{ObjectKind, SchemaJsonProblem};

/// What is wrong with a stored schema object that materialization refused to replay.
#[derive(Debug, thiserror::Error)]
pub enum ReplayProblem {
    /// The stored text is empty, or more than one statement.
    #[error("the stored DDL is not exactly one statement")]
    NotOneStatement,
    /// The stored text does something replay does not allow (only CREATE of tables, indexes,
    /// triggers and views in main).
    #[error("the stored DDL is not allowed: {0}")]
    Forbidden(Forbidden),
    /// SQLite rejected the statement.
    #[error("SQLite rejected the stored DDL")]
    Failed(#[source] rusqlite::Error),
}

/// Why an app could not be materialized (or exported). Nothing is written on any of these.
#[derive(Debug, thiserror::Error)]
pub enum MaterializeError {
    /// No `snug_apps` row for the namespace.
    #[error("no app {namespace:?}")]
    AppNotFound {
        /// The namespace asked for.
        namespace: String,
    },
    /// Another registered app id has the namespace's `appDataToken` (`A7F3…` beside `a7f3…`),
    /// so the at-rest tables are that app's as well: neither id may reach them (§8.2).
    #[error(
        "app {namespace:?} shares the data token {token} with app {other_app_id:?}; its tables are refused to both"
    )]
    AppTokenCollision {
        /// The namespace asked for.
        namespace: String,
        /// The other registered app id with the same token.
        other_app_id: String,
        /// The shared token.
        token: String,
    },
    /// The app's `schema_json` cannot be read. Materialization fails closed rather than hand
    /// out a runtime whose write-back would drop the tables the registry no longer describes.
    #[error("the registered schema of app {namespace:?} is unreadable: {problem}")]
    CorruptSchema {
        /// The app.
        namespace: String,
        /// What is wrong.
        problem: SchemaJsonProblem,
    },
    /// The registry lists an object no conforming writer registers (invalid name, virtual table).
    #[error("the registered schema of app {namespace:?} is refused: {refusal}")]
    StoredObjectRefused {
        /// The app.
        namespace: String,
        /// Why.
        refusal: Refusal,
    },
    /// A registered object's DDL could not be replayed.
    #[error("the registered {kind} {name:?} cannot be replayed")]
    Replay {
        /// What the registry says the object is.
        kind: ObjectKind,
        /// Its name.
        name: String,
        /// What went wrong.
        #[source]
        problem: ReplayProblem,
    },
    /// Replaying the registry created a different set of objects than it lists (a DDL text
    /// that names another object than its entry does).
    #[error("replaying the registered schema created {found:?}, not {expected:?}")]
    SchemaMismatch {
        /// `(type, name)` the registry lists, sorted.
        expected: Vec<(ObjectKind, String)>,
        /// `(type, name)` the replay produced, sorted.
        found: Vec<(ObjectKind, String)>,
    },
    /// An at-rest table's columns differ from the registered table's, so its rows cannot be
    /// copied faithfully.
    #[error("at-rest table {rest_table:?} does not have the columns its registered DDL declares")]
    RestTableMismatch {
        /// The at-rest table.
        rest_table: String,
    },
    /// SQLite failed.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
}

impl MaterializeError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            MaterializeError::AppNotFound { .. } => &snug_reasons::schema::APP_NOT_FOUND,
            MaterializeError::AppTokenCollision { .. } => {
                &snug_reasons::schema::APP_TOKEN_COLLISION
            }
            MaterializeError::CorruptSchema { .. } => &snug_reasons::materialize::CORRUPT_SCHEMA,
            MaterializeError::StoredObjectRefused { refusal, .. } => refusal.reason(),
            MaterializeError::Replay { problem, .. } => match problem {
                ReplayProblem::NotOneStatement => &snug_reasons::materialize::NOT_ONE_STATEMENT,
                ReplayProblem::Forbidden(forbidden) => forbidden.reason(),
                ReplayProblem::Failed(_) => &snug_reasons::materialize::DDL_FAILED,
            },
            MaterializeError::SchemaMismatch { .. } => &snug_reasons::materialize::SCHEMA_MISMATCH,
            MaterializeError::RestTableMismatch { .. } => {
                &snug_reasons::materialize::SHAPE_MISMATCH
            }
            MaterializeError::Sqlite(_) => &snug_reasons::cli::STORAGE,
        }
    }
}

impl From<rusqlite::Error> for MaterializeError {
    fn from(err: rusqlite::Error) -> Self {
        MaterializeError::Sqlite(err)
    }
}

impl Forbidden {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            Forbidden::InvalidName { .. } => &snug_reasons::materialize::INVALID_NAME,
            Forbidden::VirtualTable { .. } => &snug_reasons::materialize::VIRTUAL_TABLE,
            Forbidden::Attach
            | Forbidden::Detach
            | Forbidden::Pragma { .. }
            | Forbidden::Function { .. }
            | Forbidden::Transaction
            | Forbidden::OtherDatabase { .. }
            | Forbidden::Statement { .. } => &snug_reasons::materialize::FORBIDDEN_STATEMENT,
        }
    }
}

/// Why a runtime could not be written back. On every one of these the user database is left
/// exactly as it was: the transaction is rolled back, or was never begun.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// No `snug_apps` row for the namespace: rest tables would be orphans no delete reaches.
    #[error("no app {namespace:?}")]
    AppNotFound {
        /// The namespace.
        namespace: String,
    },
    /// Another registered app id has the namespace's `appDataToken`, so the write would land in
    /// that app's tables (§8.2).
    #[error(
        "app {namespace:?} shares the data token {token} with app {other_app_id:?}; its tables are refused to both"
    )]
    AppTokenCollision {
        /// The namespace.
        namespace: String,
        /// The other registered app id with the same token.
        other_app_id: String,
        /// The shared token.
        token: String,
    },
    /// The runtime's schema is refused (invalid name, virtual table, foreign `snug_kv`).
    #[error("write-back refused: {0}")]
    Refused(Refusal),
    /// A table's natural name is taken in the user database by an object that is not this
    /// app's (SQLite names are case-insensitive), so its DDL cannot run there for the rename.
    #[error("table {name:?} cannot be created in the user database: the name is taken")]
    NameCollision {
        /// The natural name.
        name: String,
    },
    /// The natural DDL failed in the user database, or SQLite refused the rename to the
    /// at-rest name (e.g. a CHECK that qualifies a column with the table's own name).
    #[error("table {name:?} could not be created at rest")]
    CreateFailed {
        /// The natural name.
        name: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The user database would exceed the cap; everything was rolled back.
    #[error("the user database would be {size} bytes; the limit is {max}")]
    TooLarge {
        /// `page_count * page_size` the write would have produced.
        size: u64,
        /// The cap (`MAX_USERDB_BYTES`).
        max: u64,
    },
    /// A legacy `user.sqlite` could not be adopted as `user.snug` before the write.
    #[error("the legacy user file could not be adopted")]
    Adopt(#[source] OpenError),
    /// SQLite failed.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
}

impl PersistError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            PersistError::AppNotFound { .. } => &snug_reasons::schema::APP_NOT_FOUND,
            PersistError::AppTokenCollision { .. } => &snug_reasons::schema::APP_TOKEN_COLLISION,
            PersistError::Refused(refusal) => refusal.reason(),
            PersistError::NameCollision { .. } => &snug_reasons::materialize::NAME_COLLISION,
            PersistError::CreateFailed { .. } => &snug_reasons::materialize::DDL_FAILED,
            PersistError::TooLarge { .. } => &snug_reasons::rpc::TOO_LARGE,
            PersistError::Adopt(err) => snug_reasons::Reasoned::reason(err),
            PersistError::Sqlite(_) => &snug_reasons::cli::STORAGE,
        }
    }
}

impl From<rusqlite::Error> for PersistError {
    fn from(err: rusqlite::Error) -> Self {
        PersistError::Sqlite(err)
    }
}

/// Why one statement given by a caller was not run.
#[derive(Debug, thiserror::Error)]
pub enum StatementProblem {
    /// The entry is empty (or only comments), or holds more than one statement.
    #[error("entry is not exactly one statement")]
    NotOneStatement,
    /// The sandbox refused it.
    #[error("{0}")]
    Forbidden(Forbidden),
    /// SQLite rejected or failed it.
    #[error("SQLite failed the statement")]
    Failed(#[source] rusqlite::Error),
    /// It ran out of its instruction budget and was interrupted.
    #[error("the statement exceeded its budget of {max_steps} virtual machine steps")]
    BudgetExceeded {
        /// The budget.
        max_steps: u64,
    },
    /// It would grow the runtime past the user-database cap (the runtime is bounded there,
    /// since a larger app could never be persisted).
    #[error("the app database would exceed {max} bytes")]
    TooLarge {
        /// The cap (`MAX_USERDB_BYTES`).
        max: u64,
    },
    /// Its result exceeded the row or byte bound and the limits say to fail.
    #[error("the result exceeds {max_rows} rows or {max_bytes} bytes")]
    ResultTooLarge {
        /// The row bound.
        max_rows: usize,
        /// The byte bound.
        max_bytes: usize,
    },
}

impl StatementProblem {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            StatementProblem::NotOneStatement => &snug_reasons::materialize::NOT_ONE_STATEMENT,
            StatementProblem::Forbidden(forbidden) => forbidden.reason(),
            StatementProblem::Failed(_) => &snug_reasons::materialize::STATEMENT_FAILED,
            StatementProblem::BudgetExceeded { .. } => &snug_reasons::materialize::BUDGET_EXCEEDED,
            StatementProblem::TooLarge { .. } => &snug_reasons::rpc::TOO_LARGE,
            StatementProblem::ResultTooLarge { .. } => &snug_reasons::materialize::RESULT_TOO_LARGE,
        }
    }
}

/// Why DDL could not be applied. All or nothing: on every one of these no statement took
/// effect and nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum DdlError {
    /// More statements than one call applies ([`MAX_DDL_STATEMENTS`](crate::MAX_DDL_STATEMENTS));
    /// refused before anything was read.
    #[error("{count} statements, over the {max} one call applies; split them")]
    TooManyStatements {
        /// The statements given.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// More statement text than one call applies ([`MAX_DDL_BYTES`](crate::MAX_DDL_BYTES));
    /// refused before anything was read.
    #[error("{bytes} bytes of statements, over the {max} one call applies; split them")]
    TooMuchText {
        /// The bytes given, summed over the statements.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// The app could not be materialized.
    #[error("cannot materialize the app")]
    Materialize(#[source] MaterializeError),
    /// Statement `index` (0-based) was not run.
    #[error("statement {index}")]
    Statement {
        /// Its position in the list.
        index: usize,
        /// Why.
        #[source]
        problem: StatementProblem,
    },
    /// The statements ran, but left a schema that cannot be written back (e.g. a table renamed
    /// to a reserved name); they were rolled back.
    #[error("the resulting schema is refused: {0}")]
    Refused(Refusal),
    /// Writing back (with the audit rows) failed.
    #[error("cannot persist the app")]
    Persist(#[source] PersistError),
    /// SQLite failed on the runtime.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
}

impl DdlError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            DdlError::TooManyStatements { .. } | DdlError::TooMuchText { .. } => {
                &snug_reasons::materialize::DDL_TOO_LARGE
            }
            DdlError::Materialize(err) => err.reason(),
            DdlError::Statement { problem, .. } => match problem {
                // SQLite's own rejection of a DDL statement has the DDL-specific reason.
                StatementProblem::Failed(_) => &snug_reasons::materialize::DDL_FAILED,
                other => other.reason(),
            },
            DdlError::Refused(refusal) => refusal.reason(),
            DdlError::Persist(err) => err.reason(),
            DdlError::Sqlite(_) => &snug_reasons::cli::STORAGE,
        }
    }
}

impl From<rusqlite::Error> for DdlError {
    fn from(err: rusqlite::Error) -> Self {
        DdlError::Sqlite(err)
    }
}

/// Why sandboxed SQL did not run (or its writes were not kept). All or nothing, as for DDL.
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    /// The app could not be materialized.
    #[error("cannot materialize the app")]
    Materialize(#[source] MaterializeError),
    /// Statement `index` (0-based) failed; the whole call was rolled back.
    #[error("statement {index}")]
    Statement {
        /// Its position in the list.
        index: usize,
        /// Why.
        #[source]
        problem: StatementProblem,
    },
    /// Writing back failed (e.g. a table renamed to a reserved name, or the cap).
    #[error("cannot persist the app")]
    Persist(#[source] PersistError),
    /// SQLite failed on the runtime.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
}

impl ExecuteError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            ExecuteError::Materialize(err) => err.reason(),
            ExecuteError::Statement { problem, .. } => problem.reason(),
            ExecuteError::Persist(err) => err.reason(),
            ExecuteError::Sqlite(_) => &snug_reasons::cli::STORAGE,
        }
    }
}

impl From<rusqlite::Error> for ExecuteError {
    fn from(err: rusqlite::Error) -> Self {
        ExecuteError::Sqlite(err)
    }
}

/// Why a runtime image could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The bytes do not start with `SQLite format 3\0`.
    #[error("not a SQLite database")]
    NotSqlite,
    /// Larger than a user database may be, so it could never be persisted.
    #[error("the image is {size} bytes; the limit is {max}")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The cap.
        max: u64,
    },
    /// Damaged: a short header, or `quick_check` found a problem.
    #[error("damaged SQLite image: {problem}")]
    Malformed {
        /// SQLite's first complaint.
        problem: String,
    },
    /// SQLite failed for a reason unrelated to the image.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
}

impl LoadError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            LoadError::NotSqlite => &snug_reasons::schema::NOT_SQLITE,
            LoadError::TooLarge { .. } => &snug_reasons::rpc::TOO_LARGE,
            LoadError::Malformed { .. } => &snug_reasons::schema::MALFORMED,
            LoadError::Sqlite(_) => &snug_reasons::cli::STORAGE,
        }
    }

    /// Classifies an error SQLite raised while reading the image: damage is `Malformed`.
    pub(crate) fn from_sqlite(err: rusqlite::Error) -> Self {
        match err.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase) => {
                LoadError::Malformed {
                    problem: err.to_string(),
                }
            }
            _ => LoadError::Sqlite(err),
        }
    }
}

impl From<rusqlite::Error> for LoadError {
    fn from(err: rusqlite::Error) -> Self {
        LoadError::Sqlite(err)
    }
}

/// Why the apps' tables could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// SQLite failed.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
}

impl ListError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            ListError::Sqlite(_) => &snug_reasons::cli::STORAGE,
        }
    }
}

impl From<rusqlite::Error> for ListError {
    fn from(err: rusqlite::Error) -> Self {
        ListError::Sqlite(err)
    }
}

#[cfg(test)]
mod tests;
