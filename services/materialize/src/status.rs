//! The one place `snug.materialize.v1` chooses a reason, and with it the gRPC code: domain
//! errors to statuses.
//!
//! There is one exhaustive match per error enum of `snug-materialize` (and one for
//! `snug-schema`'s `OpenError`, the only schema family this service meets), so a new variant does
//! not compile until someone picks its code, reason and metadata here. The reason is always the
//! domain crate's own `reason()` string; a test checks that the two agree.
//!
//! Failures of the host rather than of the input (SQLite I/O, the CSPRNG) are INTERNAL: logged
//! with their cause, reported with a generic message.

use snug_materialize::{
    DdlError, ExecuteError, Forbidden, ListError, LoadError, MaterializeError, PersistError,
    Refusal, ReplayProblem, StatementProblem,
};
use snug_reasons::{Reason, materialize as reasons};
use snug_schema::{Hostility, Malformation, OpenError};

use crate::error_info::DOMAIN;

/// This service's ErrorInfo domain.
#[derive(Debug)]
pub enum MaterializeDomain {}

impl snug_rpc::status::Domain for MaterializeDomain {
    const DOMAIN: &'static str = DOMAIN;
}

/// A domain error with its code, reason and metadata chosen; becomes a `Status` via `From`.
pub type Mapped = snug_rpc::status::Mapped<MaterializeDomain>;

/// Joins an error and its sources, so a message says why (`SQLite failed the statement: no such
/// table: t`), not only what. Only for errors about the request's own input: SQLite's text names
/// the caller's objects, never the host's paths.
fn with_causes(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// A refusal of the input; every one of these reasons is INVALID_ARGUMENT.
fn invalid(reason: &'static Reason, message: String) -> Mapped {
    Mapped::new(reason, message, [])
}

/// Maps a failed open of the user database (metadata `part`: `user_db`).
pub fn open_error(err: OpenError) -> Mapped {
    let message = with_causes(&err);
    let mapped = match &err {
        OpenError::NotSqlite => invalid(&reasons::NOT_SQLITE, message),
        OpenError::Protected => Mapped::new(
            &reasons::PROTECTED,
            "this Snug file is protected (SNUGENC1); unlock it with snug.container.v1 first — \
             the file is healthy",
            [],
        ),
        OpenError::Malformed { problem } => {
            let detail = match problem {
                Malformation::TruncatedHeader { .. } => "truncated_header",
                Malformation::BadPageSize { .. } => "bad_page_size",
                Malformation::PartialPage { .. } => "partial_page",
                Malformation::UnsupportedFileFormat { .. } => "unsupported_file_format",
                Malformation::NegativeVersion { .. } => "negative_version",
                Malformation::QuickCheck { .. } => "quick_check_failed",
            };
            invalid(&reasons::MALFORMED, message).with("detail", detail.to_owned())
        }
        OpenError::Unreadable(_) => {
            invalid(&reasons::MALFORMED, message).with("detail", "unreadable".to_owned())
        }
        OpenError::NotAUserDatabase => invalid(&reasons::NOT_A_USER_DATABASE, message),
        OpenError::SchemaTooNew { found, supported } => Mapped::new(
            &reasons::SCHEMA_TOO_NEW,
            message,
            [
                ("foundVersion", found.to_string()),
                ("supportedVersion", supported.to_string()),
            ],
        ),
        OpenError::AppTokenCollision { collision } => Mapped::new(
            &reasons::APP_TOKEN_COLLISION,
            message,
            [
                ("appId", collision.app_id.clone()),
                ("otherAppId", collision.other_app_id.clone()),
                ("token", collision.token.clone()),
            ],
        ),
        OpenError::HostileSchema { problem } => {
            let (detail, object) = match problem {
                Hostility::Trigger { name, .. } => ("trigger", name.clone()),
                Hostility::View { name } => ("view", name.clone()),
                Hostility::VirtualTable { name } => ("virtual_table", name.clone()),
                Hostility::ForeignIndex { name, .. } => ("foreign_index", name.clone()),
                Hostility::ForeignTable { name } => ("foreign_table", name.clone()),
                Hostility::ShapeMismatch { table, .. } => ("shape_mismatch", (*table).to_owned()),
            };
            Mapped::new(
                &reasons::HOSTILE_SCHEMA,
                message,
                [("detail", detail.to_owned()), ("object", object)],
            )
        }
        OpenError::Io { .. } | OpenError::Entropy(_) | OpenError::Sqlite(_) => {
            return Mapped::internal(&err);
        }
    };
    mapped.with("part", "user_db".to_owned())
}

/// Maps a runtime image that could not be loaded (metadata `part`: `runtime`).
pub fn load_error(err: LoadError) -> Mapped {
    let message = format!("the runtime database: {}", with_causes(&err));
    let mapped = match &err {
        LoadError::NotSqlite => invalid(&reasons::NOT_SQLITE, message),
        LoadError::TooLarge { max, .. } => Mapped::too_large(message, *max),
        LoadError::Malformed { .. } => {
            invalid(&reasons::MALFORMED, message).with("detail", "unreadable".to_owned())
        }
        LoadError::Sqlite(_) => return Mapped::internal(&err),
    };
    mapped.with("part", "runtime".to_owned())
}

/// Maps a sandbox refusal; `detail` names its kind in snake_case.
fn forbidden(problem: &Forbidden, message: String) -> Mapped {
    let (reason, detail, object) = match problem {
        Forbidden::InvalidName { name } => (&reasons::INVALID_NAME, "invalid_name", Some(name)),
        Forbidden::VirtualTable { name, .. } => {
            (&reasons::VIRTUAL_TABLE, "virtual_table", Some(name))
        }
        Forbidden::Attach => (&reasons::FORBIDDEN_STATEMENT, "attach", None),
        Forbidden::Detach => (&reasons::FORBIDDEN_STATEMENT, "detach", None),
        Forbidden::Pragma { name } => (&reasons::FORBIDDEN_STATEMENT, "pragma", Some(name)),
        Forbidden::Function { name } => (&reasons::FORBIDDEN_STATEMENT, "function", Some(name)),
        Forbidden::Transaction => (&reasons::FORBIDDEN_STATEMENT, "transaction", None),
        Forbidden::OtherDatabase { database } => (
            &reasons::FORBIDDEN_STATEMENT,
            "other_database",
            Some(database),
        ),
        Forbidden::Statement { .. } => (&reasons::FORBIDDEN_STATEMENT, "statement", None),
    };
    let mapped = invalid(reason, message).with("detail", detail.to_owned());
    match object {
        Some(object) => mapped.with("object", object.clone()),
        None => mapped,
    }
}

/// Maps a refused runtime schema (nothing was written).
fn refusal(refused: &Refusal, message: String) -> Mapped {
    match refused {
        Refusal::InvalidName { kind, name } => invalid(&reasons::INVALID_NAME, message)
            .with("object", name.clone())
            .with("kind", kind.as_str().to_owned()),
        Refusal::UnknownObject { kind, name } => invalid(&reasons::INVALID_NAME, message)
            .with("object", name.clone())
            .with("kind", kind.clone()),
        Refusal::VirtualTable { name } => {
            invalid(&reasons::VIRTUAL_TABLE, message).with("object", name.clone())
        }
        Refusal::KvTable => invalid(&reasons::INVALID_KV_TABLE, message),
    }
}

/// Maps why statement `index` of a request was not run. `ddl` picks `DDL_FAILED` over
/// `STATEMENT_FAILED` for SQLite's own rejection, as the domain crate's `DdlError` does.
fn statement(index: usize, problem: &StatementProblem, ddl: bool, message: String) -> Mapped {
    let mapped = match problem {
        StatementProblem::NotOneStatement => invalid(&reasons::NOT_ONE_STATEMENT, message),
        StatementProblem::Forbidden(refused) => forbidden(refused, message),
        StatementProblem::Failed(_) if ddl => invalid(&reasons::DDL_FAILED, message),
        StatementProblem::Failed(_) => invalid(&reasons::STATEMENT_FAILED, message),
        StatementProblem::BudgetExceeded { max_steps } => Mapped::new(
            &reasons::BUDGET_EXCEEDED,
            message,
            [("limit", max_steps.to_string())],
        ),
        StatementProblem::TooLarge { max } => Mapped::too_large(message, *max),
        StatementProblem::ResultTooLarge { .. } => {
            Mapped::new(&reasons::RESULT_TOO_LARGE, message, [])
        }
    };
    mapped.with("statement", index.to_string())
}

/// A namespace whose token another registered app id also has; nothing was read or written.
fn token_collision(namespace: &str, other_app_id: &str, token: &str, message: String) -> Mapped {
    Mapped::new(
        &reasons::APP_TOKEN_COLLISION,
        message,
        [
            ("appId", namespace.to_owned()),
            ("otherAppId", other_app_id.to_owned()),
            ("token", token.to_owned()),
        ],
    )
}

/// Maps a failed materialization or export.
pub fn materialize_error(err: MaterializeError) -> Mapped {
    let message = with_causes(&err);
    match &err {
        MaterializeError::AppNotFound { namespace } => Mapped::new(
            &reasons::APP_NOT_FOUND,
            message,
            [("appId", namespace.clone())],
        ),
        MaterializeError::AppTokenCollision {
            namespace,
            other_app_id,
            token,
        } => token_collision(namespace, other_app_id, token, message),
        MaterializeError::CorruptSchema { namespace, .. } => {
            invalid(&reasons::CORRUPT_SCHEMA, message).with("appId", namespace.clone())
        }
        MaterializeError::StoredObjectRefused {
            refusal: refused, ..
        } => refusal(refused, message),
        MaterializeError::Replay { name, problem, .. } => {
            let mapped = match problem {
                ReplayProblem::NotOneStatement => invalid(&reasons::NOT_ONE_STATEMENT, message),
                ReplayProblem::Forbidden(refused) => forbidden(refused, message),
                ReplayProblem::Failed(_) => invalid(&reasons::DDL_FAILED, message),
            };
            mapped.with("object", name.clone())
        }
        MaterializeError::SchemaMismatch { .. } => invalid(&reasons::SCHEMA_MISMATCH, message),
        MaterializeError::RestTableMismatch { rest_table } => {
            invalid(&reasons::SHAPE_MISMATCH, message).with("object", rest_table.clone())
        }
        MaterializeError::Sqlite(_) => Mapped::internal(&err),
    }
}

/// Maps a failed write-back. On every one of these the user database is as it was.
pub fn persist_error(err: PersistError) -> Mapped {
    let message = with_causes(&err);
    match err {
        PersistError::AppNotFound { namespace } => {
            Mapped::new(&reasons::APP_NOT_FOUND, message, [("appId", namespace)])
        }
        PersistError::AppTokenCollision {
            namespace,
            other_app_id,
            token,
        } => token_collision(&namespace, &other_app_id, &token, message),
        PersistError::Refused(refused) => refusal(&refused, message),
        PersistError::NameCollision { name } => {
            Mapped::new(&reasons::NAME_COLLISION, message, [("object", name)])
        }
        PersistError::CreateFailed { name, .. } => {
            invalid(&reasons::DDL_FAILED, message).with("object", name)
        }
        PersistError::TooLarge { max, .. } => Mapped::too_large(message, max),
        // The service opens user databases from bytes, never a legacy file on disk.
        PersistError::Adopt(open) => open_error(open),
        PersistError::Sqlite(_) => Mapped::internal(&err),
    }
}

/// Maps a failed ApplyDdl.
pub fn ddl_error(err: DdlError) -> Mapped {
    match err {
        DdlError::TooManyStatements { max, .. } | DdlError::TooMuchText { max, .. } => Mapped::new(
            &reasons::DDL_TOO_LARGE,
            err.to_string(),
            [
                ("field", "header.statements".to_owned()),
                ("limit", max.to_string()),
            ],
        ),
        DdlError::Materialize(inner) => materialize_error(inner),
        DdlError::Statement { index, ref problem } => {
            statement(index, problem, true, with_causes(&err))
        }
        DdlError::Refused(ref refused) => refusal(refused, with_causes(&err)),
        DdlError::Persist(inner) => persist_error(inner),
        DdlError::Sqlite(_) => Mapped::internal(&err),
    }
}

/// Maps a failed ExecuteSql.
pub fn execute_error(err: ExecuteError) -> Mapped {
    match err {
        ExecuteError::Materialize(inner) => materialize_error(inner),
        ExecuteError::Statement { index, ref problem } => {
            statement(index, problem, false, with_causes(&err))
        }
        ExecuteError::Persist(inner) => persist_error(inner),
        ExecuteError::Sqlite(_) => Mapped::internal(&err),
    }
}

/// Maps a failed listing: only SQLite itself can fail it.
pub fn list_error(err: ListError) -> Mapped {
    match err {
        ListError::Sqlite(_) => Mapped::internal(&err),
    }
}
