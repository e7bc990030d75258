//! Sandboxed SQL for hubs written in other languages (the reference's data-lane `scratchRun`,
//! except that a successful write is kept): statements run against the app's materialized
//! database, results are typed and bounded, and writes persist as [`persist`] does.
//!
//! Bounds: at most [`ExecuteLimits::max_rows`] rows (default 200) and
//! [`ExecuteLimits::max_bytes`] bytes of result (default 32 KiB, measured as the length of the
//! rows' JSON encoding — see [`SqlValue`]) per statement. Over a bound the result is cut at the
//! last row that fits and marked `truncated` ([`Overflow::Truncate`], the default: a caller,
//! often an agent, gets the first page and knows there is more), or the call fails with
//! `RESULT_TOO_LARGE` as the reference does ([`Overflow::Fail`]). A truncated statement that
//! writes still runs to completion. Each statement also has a step budget
//! ([`ExecuteLimits::max_steps`]), so a runaway query is interrupted instead of holding a core.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rusqlite::types::ValueRef;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use snug_schema::{MAX_USERDB_BYTES, UserDb};

use crate::error::{ExecuteError, StatementProblem};
use crate::materialize::materialize;
use crate::persist::{PersistReport, persist};
use crate::run::{classify, prepare_one};
use crate::runtime::AppDatabase;
use crate::sandbox::Mode;
use crate::userside::end_transaction;

/// Default row bound per statement (the reference's).
pub const DEFAULT_MAX_ROWS: usize = 200;

/// Default byte bound per statement (the reference's 32 KiB of JSON).
pub const DEFAULT_MAX_BYTES: usize = 32 * 1024;

/// Default step budget per statement: SQLite virtual-machine instructions, about one second of
/// one core here (measured: 500 million took 5.4 s) — far more than an interactive query needs.
pub const DEFAULT_MAX_STEPS: u64 = 100_000_000;

/// How often (in VM instructions) the budget is checked.
const STEP_GRANULARITY: u64 = 10_000;

/// What to do when a result exceeds a bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// Keep the rows that fit and set [`StatementResult::truncated`].
    #[default]
    Truncate,
    /// Fail the call with `RESULT_TOO_LARGE`, as the reference does.
    Fail,
}

/// Bounds for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ExecuteLimits {
    /// Rows kept per statement.
    pub max_rows: usize,
    /// Bytes of JSON-encoded rows kept per statement.
    pub max_bytes: usize,
    /// What happens over a bound.
    pub overflow: Overflow,
    /// VM instructions per statement before it is interrupted; `None` for no budget.
    pub max_steps: Option<u64>,
}

impl Default for ExecuteLimits {
    fn default() -> Self {
        ExecuteLimits {
            max_rows: DEFAULT_MAX_ROWS,
            max_bytes: DEFAULT_MAX_BYTES,
            overflow: Overflow::default(),
            max_steps: Some(DEFAULT_MAX_STEPS),
        }
    }
}

/// A value in a result, typed by SQLite storage class.
///
/// JSON encoding (used for the byte bound and by callers that print JSON): `null`, a number, a
/// string, or `{"blob":"<lowercase hex>"}`. Non-finite reals encode as `null`, as
/// `JSON.stringify` does.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// NULL.
    Null,
    /// A 64-bit integer.
    Integer(i64),
    /// A double.
    Real(f64),
    /// UTF-8 text (invalid UTF-8 from the database is replaced, never an error).
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

impl SqlValue {
    fn from_ref(value: ValueRef<'_>) -> SqlValue {
        match value {
            ValueRef::Null => SqlValue::Null,
            ValueRef::Integer(i) => SqlValue::Integer(i),
            ValueRef::Real(r) => SqlValue::Real(r),
            ValueRef::Text(t) => SqlValue::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => SqlValue::Blob(b.to_vec()),
        }
    }
}

/// Serializes a borrowed value the way [`SqlValue`] serializes.
struct EncodedRef<'a>(ValueRef<'a>);

impl Serialize for EncodedRef<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ValueRef::Null => serializer.serialize_unit(),
            ValueRef::Integer(i) => serializer.serialize_i64(i),
            ValueRef::Real(r) if r.is_finite() => serializer.serialize_f64(r),
            ValueRef::Real(_) => serializer.serialize_unit(),
            ValueRef::Text(t) => serializer.serialize_str(&String::from_utf8_lossy(t)),
            ValueRef::Blob(b) => {
                let mut map = serializer.serialize_map(Some(1))?;
                let hex: String = b.iter().map(|byte| format!("{byte:02x}")).collect();
                map.serialize_entry("blob", &hex)?;
                map.end()
            }
        }
    }
}

impl Serialize for SqlValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let value = match self {
            SqlValue::Null => ValueRef::Null,
            SqlValue::Integer(i) => ValueRef::Integer(*i),
            SqlValue::Real(r) => ValueRef::Real(*r),
            SqlValue::Text(t) => ValueRef::Text(t.as_bytes()),
            SqlValue::Blob(b) => ValueRef::Blob(b),
        };
        EncodedRef(value).serialize(serializer)
    }
}

/// Counts bytes without keeping them.
struct Counter(usize);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn encoded_len(value: ValueRef<'_>) -> usize {
    let mut counter = Counter(0);
    // Writing to a counter cannot fail, and every value has an encoding.
    let _ = serde_json::to_writer(&mut counter, &EncodedRef(value));
    counter.0
}

/// The result of one statement.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StatementResult {
    /// Result column names (empty for statements that return no rows).
    pub columns: Vec<String>,
    /// The rows kept.
    pub rows: Vec<Vec<SqlValue>>,
    /// Whether rows were left out because of a bound.
    pub truncated: bool,
    /// Rows inserted, updated or deleted, for INSERT, UPDATE and DELETE only.
    pub changes: Option<u64>,
}

/// The outcome of [`execute`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecuteReport {
    /// One result per statement, in order.
    pub results: Vec<StatementResult>,
    /// The write-back (`wrote == false` when the statements changed nothing).
    pub persist: PersistReport,
    /// Natural names of the app's at-rest tables that its schema record does not list and that
    /// are still unlisted after the call: a call that writes registers them, one that does not
    /// leaves them (and every other byte) as they were. Empty for a conforming file.
    pub unregistered_tables: Vec<String>,
}

/// Runs `statements` (exactly one statement per entry) against app `namespace`'s materialized
/// database, all or nothing, and writes the outcome back as [`persist`] does: a read-only call,
/// or one whose writes changed nothing, writes no byte — even when the app has at-rest tables
/// its schema record does not list, which are then reported
/// ([`ExecuteReport::unregistered_tables`]) and registered only by a call that writes.
pub fn execute<S: AsRef<str>>(
    user_db: &mut UserDb,
    namespace: &str,
    statements: &[S],
    limits: &ExecuteLimits,
) -> Result<ExecuteReport, ExecuteError> {
    let mut runtime = materialize(user_db, namespace).map_err(ExecuteError::Materialize)?;
    let results = runtime.execute(statements, limits)?;
    let persist = persist(user_db, &mut runtime).map_err(ExecuteError::Persist)?;
    Ok(ExecuteReport {
        results,
        persist,
        unregistered_tables: runtime.unregistered_tables().to_vec(),
    })
}

/// The per-statement step budget, checked by SQLite's progress handler.
struct Budget {
    steps: Arc<AtomicU64>,
    exhausted: Arc<AtomicBool>,
}

impl AppDatabase {
    /// Runs `statements` on this runtime under the sandbox, all or nothing (one transaction),
    /// without writing anything back; call [`persist`] for that.
    pub fn execute<S: AsRef<str>>(
        &mut self,
        statements: &[S],
        limits: &ExecuteLimits,
    ) -> Result<Vec<StatementResult>, ExecuteError> {
        if statements.is_empty() {
            return Ok(Vec::new());
        }
        let budget = self.install_budget(limits.max_steps)?;
        let outcome = self.run_all(statements, limits, &budget);
        let interrupt = self.interrupt().clone();
        let restored = interrupt.install(self.conn_mut());
        let results = outcome?;
        restored?;
        Ok(results)
    }

    fn run_all<S: AsRef<str>>(
        &self,
        statements: &[S],
        limits: &ExecuteLimits,
        budget: &Budget,
    ) -> Result<Vec<StatementResult>, ExecuteError> {
        {
            let _internal = self.enter(Mode::Internal);
            self.conn().execute_batch("BEGIN")?;
        }
        let mut results = Vec::with_capacity(statements.len());
        let mut outcome = Ok(());
        for (index, sql) in statements.iter().enumerate() {
            // Short statements never reach SQLite's progress handler: a long list of them is
            // stopped here.
            if let Err(err) = self.interrupt().check() {
                outcome = Err(ExecuteError::Sqlite(err));
                break;
            }
            budget.steps.store(0, Ordering::SeqCst);
            budget.exhausted.store(false, Ordering::SeqCst);
            match self.run_one(sql.as_ref(), limits, budget) {
                Ok(result) => results.push(result),
                Err(problem) => {
                    outcome = Err(ExecuteError::Statement { index, problem });
                    break;
                }
            }
        }
        let ended = {
            let _internal = self.enter(Mode::Internal);
            match end_transaction(self.conn(), outcome.is_ok()) {
                // A failing COMMIT (a deferred foreign key) must not leave the transaction open.
                Err(err) => {
                    let _ = end_transaction(self.conn(), false);
                    Err(ExecuteError::Statement {
                        index: statements.len() - 1,
                        problem: StatementProblem::Failed(err),
                    })
                }
                Ok(()) => Ok(()),
            }
        };
        outcome.and(ended).map(|()| results)
    }

    /// Runs statements for apply-DDL: like [`AppDatabase::execute`] with no results kept, and
    /// the transaction left open so the caller can judge the schema before committing.
    pub(crate) fn run_in_open_transaction<S: AsRef<str>>(
        &mut self,
        statements: &[S],
    ) -> Result<(), (usize, StatementProblem)> {
        let limits = ExecuteLimits {
            max_rows: 0,
            max_bytes: 0,
            overflow: Overflow::Truncate,
            max_steps: None,
        };
        let budget = Budget {
            steps: Arc::default(),
            exhausted: Arc::default(),
        };
        for (index, sql) in statements.iter().enumerate() {
            self.interrupt()
                .check()
                .map_err(|err| (index, StatementProblem::Failed(err)))?;
            self.run_one(sql.as_ref(), &limits, &budget)
                .map_err(|problem| (index, problem))?;
        }
        Ok(())
    }

    fn install_budget(&mut self, max_steps: Option<u64>) -> rusqlite::Result<Budget> {
        let budget = Budget {
            steps: Arc::default(),
            exhausted: Arc::default(),
        };
        if let Some(max_steps) = max_steps {
            let steps = Arc::clone(&budget.steps);
            let exhausted = Arc::clone(&budget.exhausted);
            let granularity = i32::try_from(STEP_GRANULARITY).unwrap_or(i32::MAX);
            // The connection's one progress handler: the budget's, and the interrupt's too.
            let interrupt = self.interrupt().clone();
            self.conn_mut().progress_handler(
                granularity,
                Some(move || {
                    if interrupt.is_set() {
                        return true;
                    }
                    let done =
                        steps.fetch_add(STEP_GRANULARITY, Ordering::SeqCst) + STEP_GRANULARITY;
                    let over = done > max_steps;
                    if over {
                        exhausted.store(true, Ordering::SeqCst);
                    }
                    over
                }),
            )?;
        }
        Ok(budget)
    }

    fn run_one(
        &self,
        sql: &str,
        limits: &ExecuteLimits,
        budget: &Budget,
    ) -> Result<StatementResult, StatementProblem> {
        let _app = self.enter(Mode::App);
        // SQLite reports an interrupted statement and a full database as plain errors; the
        // budget flag and the error code say which bound was hit.
        let over_budget = |problem: StatementProblem| match problem {
            _ if budget.exhausted.load(Ordering::SeqCst) => StatementProblem::BudgetExceeded {
                max_steps: limits.max_steps.unwrap_or(0),
            },
            StatementProblem::Failed(err)
                if err.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) =>
            {
                StatementProblem::TooLarge {
                    max: MAX_USERDB_BYTES,
                }
            }
            other => other,
        };
        let mut stmt =
            prepare_one(self.conn(), self.sandbox(), sql).map_err(StatementProblem::from)?;
        let writes_rows = self.sandbox().take_row_write();
        let read_only = stmt.readonly();
        let columns: Vec<String> = stmt.column_names().map(str::to_owned).collect();
        let n_columns = columns.len();
        let mut result = StatementResult {
            columns,
            ..StatementResult::default()
        };
        let mut bytes = 2; // "[]"
        let mut rows = stmt
            .query([])
            .map_err(|err| over_budget(classify(err, self.sandbox()).into()))?;
        loop {
            let row = match rows.next() {
                Ok(Some(row)) => row,
                Ok(None) => break,
                Err(err) => return Err(over_budget(classify(err, self.sandbox()).into())),
            };
            if result.truncated {
                // Only a writing statement is stepped on (its writes must complete).
                continue;
            }
            let mut row_bytes = 1 + usize::from(!result.rows.is_empty()); // brackets and comma
            for idx in 0..n_columns {
                let value = row.get_ref(idx).map_err(StatementProblem::Failed)?;
                row_bytes += encoded_len(value) + usize::from(idx > 0);
            }
            row_bytes += 1;
            if result.rows.len() >= limits.max_rows || bytes + row_bytes > limits.max_bytes {
                if limits.overflow == Overflow::Fail {
                    return Err(StatementProblem::ResultTooLarge {
                        max_rows: limits.max_rows,
                        max_bytes: limits.max_bytes,
                    });
                }
                result.truncated = true;
                if read_only {
                    break;
                }
                continue;
            }
            bytes += row_bytes;
            let values = (0..n_columns)
                .map(|idx| row.get_ref(idx).map(SqlValue::from_ref))
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(StatementProblem::Failed)?;
            result.rows.push(values);
        }
        drop(rows);
        if writes_rows {
            result.changes = Some(self.conn().changes());
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests;
