//! DDL application with an audit trail (the reference's `applyAppDdl`).
//!
//! The statements run on a freshly materialized runtime inside one transaction; the resulting
//! schema is judged (names, virtual tables) before that transaction commits, so an invalid
//! name is rejected before anything persists. The write-back and the audit rows
//! (`snug_app_migrations`, `seq = max + 1 …`, one shared `applied_at`) are then one user-database
//! transaction. All or nothing at every step.
//!
//! One call applies at most [`MAX_DDL_STATEMENTS`] statements of at most [`MAX_DDL_BYTES`] of
//! text in all ([`check_ddl_bounds`]). The work of a call is linear in its statements, except
//! that SQLite reads its whole catalogue after each `CREATE` (a scan of a few instructions per
//! object), so the bounds are what keep a call to a few seconds of one core; they sit ten times
//! above real apps: the largest SQLite schemas in wide use (browsers' history and places,
//! Android's contacts, messengers) have tens to a few hundred objects and well under 100 KB of
//! DDL, and seeds of more than a few thousand rows belong in multi-row `INSERT`s or in
//! ExecuteSql rather than in audit rows kept forever in `snug_app_migrations`.

use serde::Serialize;
use snug_schema::UserDb;

use crate::error::DdlError;
use crate::materialize::materialize;
use crate::persist::{Audit, PersistReport, persist_with};
use crate::sandbox::Mode;
use crate::scan::{ScanError, scan};
use crate::userside::end_transaction;

/// The most statements one [`apply_ddl`] call applies.
pub const MAX_DDL_STATEMENTS: usize = 5_000;

/// The most bytes of statement text, summed over the statements, one [`apply_ddl`] call applies.
pub const MAX_DDL_BYTES: usize = 1024 * 1024;

/// Refuses a statement list over the bounds of one call ([`MAX_DDL_STATEMENTS`],
/// [`MAX_DDL_BYTES`]); a service checks it as soon as the list arrives, before the user
/// database is read, and [`apply_ddl`] checks it first.
pub fn check_ddl_bounds<S: AsRef<str>>(statements: &[S]) -> Result<(), DdlError> {
    if statements.len() > MAX_DDL_STATEMENTS {
        return Err(DdlError::TooManyStatements {
            count: statements.len(),
            max: MAX_DDL_STATEMENTS,
        });
    }
    let bytes = statements.iter().map(|s| s.as_ref().len()).sum::<usize>();
    if bytes > MAX_DDL_BYTES {
        return Err(DdlError::TooMuchText {
            bytes,
            max: MAX_DDL_BYTES,
        });
    }
    Ok(())
}

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
/// new names checked against the §8.2 rule as they are created. A list over the bounds of one
/// call is refused before anything is read ([`check_ddl_bounds`]).
pub fn apply_ddl<S: AsRef<str>>(
    user_db: &mut UserDb,
    namespace: &str,
    statements: &[S],
) -> Result<DdlReport, DdlError> {
    check_ddl_bounds(statements)?;
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
