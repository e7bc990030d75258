//! Time and identifiers: the [`Clock`] the caller passes in, ISO-8601 timestamps and UUID v4 strings.
//!
//! The clock is a parameter rather than a call to `SystemTime::now` so that tests (and vector
//! generation) are deterministic, as in the reference's harness-fixed clocks.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time.
pub trait Clock: Send + Sync {
    /// Returns the current time.
    fn now(&self) -> SystemTime;

    /// Returns the current time as the reference writes it: `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
    fn timestamp(&self) -> String {
        iso_timestamp(self.now())
    }
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that starts at a fixed instant and advances by a fixed step on every reading.
///
/// A step of zero gives a frozen clock; a step of one second mirrors the reference vectors.
#[derive(Debug)]
pub struct SteppingClock {
    start: SystemTime,
    step: Duration,
    readings: AtomicU64,
}

impl SteppingClock {
    /// Returns a clock whose first reading is `start` and each later reading `step` further on.
    pub fn new(start: SystemTime, step: Duration) -> Self {
        SteppingClock {
            start,
            step,
            readings: AtomicU64::new(0),
        }
    }

    /// Returns a frozen clock at `unix_ms` milliseconds after the epoch.
    pub fn frozen_at_unix_ms(unix_ms: u64) -> Self {
        SteppingClock::new(UNIX_EPOCH + Duration::from_millis(unix_ms), Duration::ZERO)
    }
}

impl Clock for SteppingClock {
    fn now(&self) -> SystemTime {
        let n = self.readings.fetch_add(1, Ordering::Relaxed);
        let offset = self
            .step
            .saturating_mul(u32::try_from(n).unwrap_or(u32::MAX));
        self.start + offset
    }
}

/// A clock a test sets by hand.
#[derive(Debug)]
pub struct ManualClock(Mutex<SystemTime>);

impl ManualClock {
    /// Returns a clock reading `at` until [`ManualClock::set`] is called.
    pub fn new(at: SystemTime) -> Self {
        ManualClock(Mutex::new(at))
    }

    /// Sets the time every later reading returns.
    pub fn set(&self, at: SystemTime) {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = at;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Formats `at` as `new Date().toISOString()` does: UTC, millisecond precision, trailing `Z`.
///
/// Instants before 1970 are clamped to the epoch; user data never carries them.
pub fn iso_timestamp(at: SystemTime) -> String {
    let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since_epoch.as_secs();
    let millis = since_epoch.subsec_millis();
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Converts days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm,
/// restricted to non-negative day counts).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Returns a random UUID v4 in the lowercase 8-4-4-4-12 form `crypto.randomUUID()` produces.
pub fn uuid_v4() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(format_uuid_v4(bytes))
}

/// Formats 16 random bytes as a UUID v4 (sets the version and variant bits).
pub fn format_uuid_v4(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests;
