//! Helpers shared by the unit tests: an in-memory database on a stepping clock.

use std::sync::Arc;
use std::time::Duration;

use crate::{SteppingClock, UserDb};

/// 2026-01-01T00:00:00.000Z, the reference vectors' epoch.
pub(crate) const EPOCH_MS: u64 = 1_767_225_600_000;

/// A clock starting at [`EPOCH_MS`] and advancing one second per reading.
pub(crate) fn clock() -> Arc<SteppingClock> {
    Arc::new(SteppingClock::new(
        std::time::UNIX_EPOCH + Duration::from_millis(EPOCH_MS),
        Duration::from_secs(1),
    ))
}

/// A new in-memory user database.
pub(crate) fn new_db() -> UserDb {
    UserDb::create_in_memory(clock())
        .expect("in-memory database")
        .0
}
