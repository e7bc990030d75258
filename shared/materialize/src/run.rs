//! Preparing caller-supplied and stored SQL on a runtime, one statement per entry, with the
//! sandbox's refusal turned into a typed problem.

use rusqlite::fallible_iterator::FallibleIterator;
use rusqlite::{Batch, Connection, Statement};

use crate::error::StatementProblem;
use crate::sandbox::{Forbidden, Sandbox};

/// Why a statement could not be prepared.
#[derive(Debug)]
pub(crate) enum PrepareProblem {
    /// Empty, comment-only, or more than one statement.
    NotOneStatement,
    /// The sandbox refused it.
    Forbidden(Forbidden),
    /// SQLite rejected it.
    Failed(rusqlite::Error),
}

impl From<PrepareProblem> for StatementProblem {
    fn from(problem: PrepareProblem) -> Self {
        match problem {
            PrepareProblem::NotOneStatement => StatementProblem::NotOneStatement,
            PrepareProblem::Forbidden(forbidden) => StatementProblem::Forbidden(forbidden),
            PrepareProblem::Failed(err) => StatementProblem::Failed(err),
        }
    }
}

/// Prepares `sql` as exactly one statement under the sandbox's current mode.
///
/// The first statement is prepared on its own; any further text that is not just whitespace,
/// comments or semicolons makes the entry "not one statement", whether or not that text would
/// prepare (rusqlite's own check reports the tail's error instead, e.g. "no such table").
pub(crate) fn prepare_one<'c>(
    conn: &'c Connection,
    sandbox: &Sandbox,
    sql: &str,
) -> Result<Statement<'c>, PrepareProblem> {
    sandbox.clear();
    let mut batch = Batch::new(conn, sql);
    let first = match batch.next() {
        Ok(Some(stmt)) => stmt,
        Ok(None) => return Err(PrepareProblem::NotOneStatement),
        Err(err) => return Err(classify(err, sandbox)),
    };
    match batch.next() {
        Ok(None) => Ok(first),
        // Preparing the tail only inspected it; what the authorizer thought of it is moot.
        Ok(Some(_)) | Err(_) => {
            sandbox.clear();
            Err(PrepareProblem::NotOneStatement)
        }
    }
}

/// Classifies an error from preparing or stepping a statement. A refusal recorded by the
/// authorizer wins: SQLite reports it only as "not authorized".
pub(crate) fn classify(err: rusqlite::Error, sandbox: &Sandbox) -> PrepareProblem {
    if let Some(forbidden) = sandbox.take_refusal() {
        return PrepareProblem::Forbidden(forbidden);
    }
    match err {
        rusqlite::Error::MultipleStatement | rusqlite::Error::Empty => {
            PrepareProblem::NotOneStatement
        }
        other => PrepareProblem::Failed(other),
    }
}
