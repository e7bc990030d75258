//! Tests that every reason is a registered, well-formed machine string.

use crate::error::{ListError, LoadError, MaterializeError, PersistError, StatementProblem};
use crate::sandbox::Forbidden;
use crate::scan::Refusal;
use crate::schema_json::{ObjectKind, SchemaJsonProblem};

fn sqlite() -> rusqlite::Error {
    rusqlite::Error::QueryReturnedNoRows
}

#[test]
fn reasons_are_upper_snake_and_short() {
    let forbidden = [
        Forbidden::Attach,
        Forbidden::Detach,
        Forbidden::VirtualTable {
            name: "v".into(),
            module: "fts5".into(),
        },
        Forbidden::Pragma { name: "p".into() },
        Forbidden::Function { name: "f".into() },
        Forbidden::Transaction,
        Forbidden::InvalidName { name: "n".into() },
        Forbidden::OtherDatabase {
            database: "d".into(),
        },
        Forbidden::Statement {
            action: "DROP TABLE",
        },
    ];
    let refusals = [
        Refusal::InvalidName {
            kind: ObjectKind::Table,
            name: "n".into(),
        },
        Refusal::VirtualTable { name: "v".into() },
        Refusal::KvTable,
        Refusal::UnknownObject {
            kind: "k".into(),
            name: "n".into(),
        },
    ];
    let mut reasons: Vec<&'static snug_reasons::Reason> = Vec::new();
    reasons.extend(forbidden.iter().map(Forbidden::reason));
    reasons.extend(refusals.iter().map(Refusal::reason));
    reasons.extend([
        MaterializeError::AppNotFound {
            namespace: "x".into(),
        }
        .reason(),
        MaterializeError::CorruptSchema {
            namespace: "x".into(),
            problem: SchemaJsonProblem::BadSequence { table: "t".into() },
        }
        .reason(),
        MaterializeError::SchemaMismatch {
            expected: vec![],
            found: vec![],
        }
        .reason(),
        MaterializeError::RestTableMismatch {
            rest_table: "t".into(),
        }
        .reason(),
        MaterializeError::Sqlite(sqlite()).reason(),
        PersistError::AppNotFound {
            namespace: "x".into(),
        }
        .reason(),
        PersistError::NameCollision { name: "n".into() }.reason(),
        PersistError::CreateFailed {
            name: "n".into(),
            source: sqlite(),
        }
        .reason(),
        PersistError::TooLarge { size: 2, max: 1 }.reason(),
        PersistError::Sqlite(sqlite()).reason(),
        StatementProblem::NotOneStatement.reason(),
        StatementProblem::Failed(sqlite()).reason(),
        StatementProblem::BudgetExceeded { max_steps: 1 }.reason(),
        StatementProblem::TooLarge { max: 1 }.reason(),
        StatementProblem::ResultTooLarge {
            max_rows: 1,
            max_bytes: 1,
        }
        .reason(),
        LoadError::NotSqlite.reason(),
        LoadError::TooLarge { size: 2, max: 1 }.reason(),
        LoadError::Malformed {
            problem: "p".into(),
        }
        .reason(),
        LoadError::Sqlite(sqlite()).reason(),
        ListError::Sqlite(sqlite()).reason(),
    ]);
    for reason in reasons.into_iter().map(|r| r.name) {
        assert!(
            !reason.is_empty()
                && reason.len() <= 63
                && reason.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
                && !reason.starts_with('_')
                && !reason.ends_with('_'),
            "{reason:?}"
        );
    }
}
