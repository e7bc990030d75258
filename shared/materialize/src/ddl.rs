//! DDL application with an audit trail (the reference's `applyAppDdl`).
//!
//! The statements run on a freshly materialized runtime inside one transaction; the resulting
//! schema is judged (names, virtual tables) before that transaction commits, so an invalid
//! name is rejected before anything persists. The write-back and the audit rows
//! (`snug_app_migrations`, `seq = max + 1 …`, one shared `applied_at`) are then one user-database
//! transaction. All or nothing at every step.

use serde::Serialize;
use snug_schema::UserDb;

use crate::error::DdlError;
use crate::materialize::materialize;
use crate::persist::{Audit, PersistReport, persist_with};
use crate::sandbox::Mode;
use crate::scan::{ScanError, scan};
use crate::userside::end_transaction;

/// What [`apply_ddl`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DdlReport {
    /// Statements applied (and audit rows appended).
    pub applied: usize,
    /// The audit timestamp shared by every row of this call (`None` when nothing was applied).
    pub applied_at: Option<String>,
    /// The write-back, including `migrations_appended`.
    pub persist: PersistReport,
}

/// Applies `statements` (exactly one statement per entry, typically DDL, but seed `INSERT`s
/// are allowed) to app `namespace`, persists the result and appends one audit row per
/// statement, all atomically. An empty list is a no-op.
///
/// Statements run under the app sandbox: no transaction control, no ATTACH, no virtual tables,
/// new names checked against the §8.2 rule as they are created.
pub fn apply_ddl<S: AsRef<str>>(
    user_db: &mut UserDb,
    namespace: &str,
    statements: &[S],
) -> Result<DdlReport, DdlError> {
    if statements.is_empty() {
        return Ok(DdlReport {
            applied: 0,
            applied_at: None,
            persist: PersistReport::default(),
        });
    }
    let mut runtime = materialize(user_db, namespace).map_err(DdlError::Materialize)?;
    {
        let _internal = runtime.enter(Mode::Internal);
        runtime.conn().execute_batch("BEGIN")?;
    }
    let applied = runtime
        .run_in_open_transaction(statements)
        .map_err(|(index, problem)| DdlError::Statement { index, problem })
        .and_then(|()| {
            let _internal = runtime.enter(Mode::Internal);
            scan(runtime.conn()).map(|_| ()).map_err(|err| match err {
                ScanError::Refused(refusal) => DdlError::Refused(refusal),
                ScanError::Sqlite(err) => DdlError::Sqlite(err),
            })
        });
    {
        let _internal = runtime.enter(Mode::Internal);
        let ended = end_transaction(runtime.conn(), applied.is_ok());
        applied?;
        ended?;
    }
    let statements: Vec<String> = statements.iter().map(|s| s.as_ref().to_owned()).collect();
    let applied_at = user_db.clock().timestamp();
    let audit = Audit {
        statements: &statements,
        applied_at: applied_at.clone(),
    };
    let persist = persist_with(user_db, &mut runtime, Some(&audit)).map_err(DdlError::Persist)?;
    Ok(DdlReport {
        applied: statements.len(),
        applied_at: Some(applied_at),
        persist,
    })
}

#[cfg(test)]
mod tests;
