//! Whether the store's writes keep failing: the part of a store's health that a probe of its
//! connection cannot see.
//!
//! A store can answer `SELECT 1` while every write fails (a full disk, a read-only volume, a bucket
//! that refuses writes): readiness must then go off, or a load balancer keeps sending writes that
//! all fail. So the put and restore driver ([`crate::protocol`]) reports each write's outcome here,
//! and after [`TRIP_AFTER`] storage failures in a row `RevStore::health` fails with the last of
//! them for [`HOLD`] after it. Then health passes again for a trial: the next write that fails
//! trips it at once (the count is not reset by time), the next that lands resets it. Refusals
//! (a conflict, a quota, a bad image) say nothing about the storage and change nothing; neither
//! does damage (`STORAGE_CORRUPT`), which is one image's, not every write's.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use crate::{
    clock::Clock,
    error::{PutError, StorageError},
    types::Timestamp,
};

/// Storage failures in a row after which health fails.
pub(crate) const TRIP_AFTER: u32 = 3;

/// How long after the last failure health keeps failing.
pub(crate) const HOLD: Duration = Duration::from_secs(30);

/// The outcomes of a store's recent writes.
#[derive(Debug)]
pub(crate) struct WriteHealth {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    in_a_row: u32,
    last: Option<Failure>,
}

#[derive(Debug)]
struct Failure {
    at: Timestamp,
    full: bool,
    cause: String,
}

impl WriteHealth {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            state: Mutex::new(State::default()),
        }
    }

    /// Takes the outcome of one put or restore.
    pub(crate) fn record<T>(&self, outcome: &Result<T, PutError>) {
        let mut state = self.state();
        match outcome {
            Ok(_) => *state = State::default(),
            Err(PutError::Storage(
                err @ (StorageError::Unavailable(_) | StorageError::Full(_)),
            )) => {
                state.in_a_row = state.in_a_row.saturating_add(1);
                state.last = Some(Failure {
                    at: self.clock.now(),
                    full: matches!(err, StorageError::Full(_)),
                    cause: error_chain(err),
                });
            }
            Err(_) => {}
        }
    }

    /// Fails while the writes are failing (see the module docs).
    pub(crate) fn verdict(&self) -> Result<(), StorageError> {
        let state = self.state();
        let Some(last) = &state.last else {
            return Ok(());
        };
        if state.in_a_row < TRIP_AFTER || self.clock.now() >= last.at.plus(HOLD) {
            return Ok(());
        }
        let why = format!(
            "the last {} writes failed; the last one: {}",
            state.in_a_row, last.cause
        );
        Err(if last.full {
            StorageError::Full(why.into())
        } else {
            StorageError::Unavailable(why.into())
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// `err` and its sources, as one line.
fn error_chain(err: &StorageError) -> String {
    let mut out = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const T0: Timestamp = Timestamp::from_unix_millis(1_767_225_600_000);

    enum Write {
        Landed,
        Unavailable,
        Full,
        Refused,
        Corrupt,
        Wait(u64),
    }

    fn outcome(write: &Write) -> Option<Result<(), PutError>> {
        let io = || Box::new(std::io::Error::other("disk I/O error"));
        Some(Err(match write {
            Write::Landed => return Some(Ok(())),
            Write::Unavailable => PutError::Storage(StorageError::Unavailable(io())),
            Write::Full => PutError::Storage(StorageError::Full(io())),
            Write::Refused => PutError::NotFound,
            Write::Corrupt => PutError::Storage(StorageError::Corrupt {
                object: "chunk 00".into(),
            }),
            Write::Wait(_) => return None,
        }))
    }

    #[test]
    fn health_fails_after_three_storage_failures_in_a_row_and_for_a_while_after() {
        use Write::*;
        // (writes, then: healthy?, and if not, whether it reads as full)
        let cases: Vec<(&str, Vec<Write>, Option<bool>)> = vec![
            ("nothing yet", vec![], None),
            ("two failures", vec![Unavailable, Unavailable], None),
            (
                "three failures",
                vec![Unavailable, Unavailable, Unavailable],
                Some(false),
            ),
            (
                "the last one names the kind",
                vec![Unavailable, Unavailable, Full],
                Some(true),
            ),
            (
                "a landed write resets",
                vec![Full, Full, Landed, Full],
                None,
            ),
            (
                "refusals change nothing",
                vec![Full, Refused, Full, Refused, Full],
                Some(true),
            ),
            (
                "damage is not a storage failure",
                vec![Corrupt, Corrupt, Corrupt],
                None,
            ),
            (
                "it holds for a while",
                vec![Full, Full, Full, Wait(29)],
                Some(true),
            ),
            ("then a trial", vec![Full, Full, Full, Wait(30)], None),
            (
                "a failed trial trips at once",
                vec![Full, Full, Full, Wait(30), Full],
                Some(true),
            ),
            (
                "a landed trial resets",
                vec![Full, Full, Full, Wait(30), Landed, Full],
                None,
            ),
        ];
        for (name, writes, expected) in cases {
            let clock = Arc::new(ManualClock::new(T0));
            let health = WriteHealth::new(clock.clone());
            for write in &writes {
                match (write, outcome(write)) {
                    (Wait(secs), _) => clock.advance(Duration::from_secs(*secs)),
                    (_, Some(outcome)) => health.record(&outcome),
                    (_, None) => unreachable!(),
                }
            }
            match (health.verdict(), expected) {
                (Ok(()), None) => {}
                (Err(StorageError::Full(why)), Some(true)) => {
                    assert!(why.to_string().contains("disk I/O error"), "{name}: {why}");
                }
                (Err(StorageError::Unavailable(_)), Some(false)) => {}
                (got, expected) => panic!("{name}: {got:?}, expected {expected:?}"),
            }
        }
    }
}
