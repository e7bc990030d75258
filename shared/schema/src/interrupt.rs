//! [`Interrupt`]: a caller's request that an operation stop early, for hosts that run this
//! crate's work on behalf of someone who may stop waiting (a service whose client cancelled or
//! whose deadline passed).
//!
//! It is a plain shared flag, nothing more: whoever holds the other end sets it (the gRPC
//! services' blocking pool does, when the request it runs a job for is dropped), and the work
//! checks it — SQLite through a progress handler every [`PROGRESS_STEPS`] virtual-machine
//! instructions, long loops between their steps. An interrupted operation fails as SQLite fails
//! an interrupted statement (`SQLITE_INTERRUPT`, [`is_interrupted`]), inside whichever error its
//! step returns; transactions roll back, so it writes nothing. The caller that set the flag knows
//! why it failed, so no error family carries a variant of its own for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::Connection;

/// How many virtual-machine instructions SQLite runs between two looks at the flag: about a
/// tenth of a millisecond of one core, so a statement stops promptly and the look costs nothing.
pub const PROGRESS_STEPS: i32 = 10_000;

/// A flag an operation checks to stop early; see the module docs. The default never fires.
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Option<Arc<AtomicBool>>);

impl Interrupt {
    /// An interrupt that never fires (what the plain constructors use).
    pub fn never() -> Interrupt {
        Interrupt(None)
    }

    /// An interrupt that fires once `flag` is set.
    pub fn new(flag: Arc<AtomicBool>) -> Interrupt {
        Interrupt(Some(flag))
    }

    /// Returns whether the operation should stop.
    pub fn is_set(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
    }

    /// Fails with SQLite's interrupt error once the flag is set; loops call it between steps.
    pub fn check(&self) -> rusqlite::Result<()> {
        if self.is_set() {
            Err(interrupted())
        } else {
            Ok(())
        }
    }

    /// Makes every statement on `conn` stop with `SQLITE_INTERRUPT` once the flag is set. A
    /// connection has one progress handler: code that installs its own (a step budget) checks
    /// [`Interrupt::is_set`] in it too.
    pub fn install(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        match &self.0 {
            None => conn.progress_handler(0, None::<fn() -> bool>),
            Some(flag) => {
                let flag = Arc::clone(flag);
                conn.progress_handler(PROGRESS_STEPS, Some(move || flag.load(Ordering::Relaxed)))
            }
        }
    }
}

/// The error an interrupted operation fails with: SQLite's own for an interrupted statement.
pub fn interrupted() -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_INTERRUPT),
        Some("interrupted: the caller stopped waiting".to_owned()),
    )
}

/// Returns whether `err` is SQLite's interrupt error (from an [`Interrupt`] or a step budget).
pub fn is_interrupted(err: &rusqlite::Error) -> bool {
    err.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// A statement that would never end stops once the flag is set from another thread, and the
    /// connection is usable afterwards.
    #[test]
    fn a_running_statement_stops_when_the_flag_is_set() {
        let flag = Arc::new(AtomicBool::new(false));
        let interrupt = Interrupt::new(Arc::clone(&flag));
        let mut conn = Connection::open_in_memory().unwrap();
        interrupt.install(&mut conn).unwrap();
        let setter = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            flag.store(true, Ordering::Relaxed);
        });
        let err = conn
            .query_row(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) \
                 SELECT count(*) FROM c",
                [],
                |row| row.get::<_, i64>(0),
            )
            .unwrap_err();
        setter.join().unwrap();
        assert!(is_interrupted(&err), "{err}");
        assert!(is_interrupted(&interrupt.check().unwrap_err()));
        Interrupt::never().install(&mut conn).unwrap();
        assert_eq!(
            conn.query_row("SELECT 2", [], |row| row.get::<_, i64>(0))
                .unwrap(),
            2
        );
        assert!(Interrupt::never().check().is_ok());
    }
}
