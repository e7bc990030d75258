//! The pace an upload must keep: after a grace period, at least a minimum rate on average.
//!
//! An upload is admitted against the upload budget for its whole declared length before its
//! first byte is read (`crate::budget`), so a client that declares a large body and then sends
//! a byte now and then would hold that share for as long as it likes: two such clients held a
//! 128 MiB budget, and every other user's upload was refused. An idle timeout between pieces
//! does not stop a drip. So every upload is held to one rule, checked by the gateway on an HTTP
//! body and by `crate::chunks` on a gRPC upload: `grace` after it started, it must have sent
//! `min_rate` bytes a second on average since the grace ended. Each byte sent buys
//! `1 / min_rate` seconds more; an upload behind the pace is refused and its share freed.
//!
//! The rule is on the average, not on every interval, so a client on a bursty link keeps going
//! as long as it catches up, and one that only trickles is cut off soon after its grace.

use std::time::Duration;

use tokio::time::Instant;

/// The default grace: time to start an upload (TLS, a slow first window) before the pace counts.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// The default minimum rate, in KiB a second: a 64 MiB image may take up to about 17 minutes.
pub const DEFAULT_MIN_RATE_KIB: u64 = 64;

/// The rule: a grace, then a minimum average rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// How long an upload may send nothing at all before the rate counts.
    pub grace: Duration,
    /// Bytes a second, on average, after the grace; 0 turns the rule off.
    pub min_rate: u64,
}

impl Default for Pace {
    fn default() -> Self {
        Self {
            grace: DEFAULT_GRACE,
            min_rate: DEFAULT_MIN_RATE_KIB * 1024,
        }
    }
}

impl Pace {
    /// No pace at all: an upload may take any time (for tests of other rules).
    pub const OFF: Pace = Pace {
        grace: Duration::ZERO,
        min_rate: 0,
    };

    /// When an upload that started at `started` and has sent `received` bytes falls behind the
    /// pace unless more arrives; `None` when the rule is off.
    pub fn deadline(&self, started: Instant, received: u64) -> Option<Instant> {
        if self.min_rate == 0 {
            return None;
        }
        let earned = Duration::from_secs_f64(received as f64 / self.min_rate as f64);
        Some(started + self.grace + earned)
    }

    /// What a refusal tells the client.
    pub fn describe(&self) -> String {
        format!(
            "the upload fell behind the minimum rate of {} KiB/s after its first {:?}; send it faster (nothing was kept)",
            self.min_rate / 1024,
            self.grace
        )
    }
}

/// One upload's progress against a [`Pace`].
#[derive(Debug, Clone)]
pub struct Paced {
    pace: Pace,
    started: Instant,
    received: u64,
}

impl Paced {
    /// An upload starting now.
    pub fn start(pace: Pace) -> Self {
        Self {
            pace,
            started: Instant::now(),
            received: 0,
        }
    }

    /// `n` more bytes arrived.
    pub fn received(&mut self, n: u64) {
        self.received += n;
    }

    /// When more must have arrived; `None` when the rule is off.
    pub fn deadline(&self) -> Option<Instant> {
        self.pace.deadline(self.started, self.received)
    }

    /// The rule this upload is held to.
    pub fn pace(&self) -> Pace {
        self.pace
    }

    /// Waits for `next` until the pace's deadline; `Err(())` when the upload fell behind first.
    pub async fn within<T>(&self, next: impl Future<Output = T>) -> Result<T, Behind> {
        match self.deadline() {
            Some(deadline) => tokio::time::timeout_at(deadline, next)
                .await
                .map_err(|_| Behind(self.pace)),
            None => Ok(next.await),
        }
    }
}

/// An upload fell behind its pace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behind(pub Pace);

impl std::fmt::Display for Behind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    #[test]
    fn each_byte_buys_time_after_the_grace() {
        let pace = Pace {
            grace: Duration::from_secs(10),
            min_rate: 64 * KIB,
        };
        let start = Instant::now();
        let cases = [
            (0, Duration::from_secs(10)),
            (64 * KIB, Duration::from_secs(11)),
            (640 * KIB, Duration::from_secs(20)),
            (32 * KIB, Duration::from_millis(10_500)),
        ];
        for (received, after) in cases {
            assert_eq!(
                pace.deadline(start, received),
                Some(start + after),
                "{received}"
            );
        }
        assert_eq!(Pace::OFF.deadline(start, 0), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_drip_falls_behind_and_a_steady_upload_does_not() {
        let pace = Pace {
            grace: Duration::from_secs(2),
            min_rate: KIB,
        };
        // A byte every second: behind soon after the grace.
        let mut drip = Paced::start(pace);
        let mut behind_at = None;
        for second in 1..10 {
            let arrival = tokio::time::sleep(Duration::from_secs(1));
            if drip.within(arrival).await.is_err() {
                behind_at = Some(second);
                break;
            }
            drip.received(1);
        }
        assert_eq!(
            behind_at,
            Some(3),
            "cut off in the first second after the grace"
        );
        // Two KiB a second: never behind.
        let mut steady = Paced::start(pace);
        for _ in 0..30 {
            steady
                .within(tokio::time::sleep(Duration::from_secs(1)))
                .await
                .expect("a steady upload keeps its pace");
            steady.received(2 * KIB);
        }
    }
}
