//! Which revisions and records a reclamation pass may take: the retention rule as pure functions
//! the pass's plan ([`crate::reclaim::plan`]) applies to the facts every backend loads.
//!
//! Like [`crate::cas`] for the compare-and-swap, keeping the rule here is what makes the backends
//! reclaim the same revisions: each one only gathers, per retained revision, the facts of
//! [`Candidate`] (from SQL or from memory) and releases what [`reclaimable`] says.

use crate::{config::Retention, types::Timestamp};

/// The moments a pass compares against, fixed once per pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cutoffs {
    /// A revision superseded at or before this may go (past its grace period).
    pub(crate) superseded_by: Timestamp,
    /// A publication record started at or before this is an orphan.
    pub(crate) orphaned_by: Timestamp,
}

impl Cutoffs {
    pub(crate) fn at(now: Timestamp, retention: &Retention) -> Self {
        Self {
            superseded_by: now.minus(retention.grace),
            orphaned_by: now.minus(retention.orphan_after),
        }
    }

    /// Whether a publication record that started at `started_at` is an orphan.
    pub(crate) fn orphaned(&self, started_at: Timestamp) -> bool {
        started_at <= self.orphaned_by
    }
}

/// What the rule needs to know about one retained revision.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Candidate {
    /// How many of the user's revisions are newer (0 for the newest).
    pub(crate) newer: u64,
    /// Whether it is the user's current revision (after a restore, not always the newest).
    pub(crate) current: bool,
    /// When the next revision was accepted; `None` for the newest.
    pub(crate) superseded_at: Option<Timestamp>,
    /// Whether a download holds a lease on its image.
    pub(crate) leased: bool,
    /// Whether a put in flight builds on it.
    pub(crate) base_in_flight: bool,
}

/// Whether a pass may release the revision's bytes: not among the newest
/// [`Retention::keep_newest`], not current, superseded longer ago than the grace period, and
/// neither leased nor the base of a put in flight.
pub(crate) fn reclaimable(c: &Candidate, retention: &Retention, cutoffs: &Cutoffs) -> bool {
    c.newer >= retention.keep_newest as u64
        && !c.current
        && c.superseded_at.is_some_and(|t| t <= cutoffs.superseded_by)
        && !c.leased
        && !c.base_in_flight
}

/// Whether a listed object that no row registers and no publication record names may go: once
/// it is older than the orphan period. A put names its objects before it writes them, so such an
/// object is already garbage (a put that crashed or was abandoned, a deletion that failed after
/// its journal entry); the age is a margin against a listing or a clock that lags.
pub(crate) fn unnamed_object_reclaimable(
    written: Timestamp,
    named: bool,
    cutoffs: &Cutoffs,
) -> bool {
    !named && cutoffs.orphaned(written)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const NOW: Timestamp = Timestamp::from_unix_millis(1_000_000_000);

    fn retention() -> Retention {
        Retention {
            keep_newest: 2,
            grace: Duration::from_secs(60),
            orphan_after: Duration::from_secs(3600),
        }
    }

    /// An old, superseded, unprotected revision: the one case that goes.
    fn old() -> Candidate {
        Candidate {
            newer: 5,
            superseded_at: Some(NOW.minus(Duration::from_secs(600))),
            ..Candidate::default()
        }
    }

    #[test]
    fn each_protection_alone_keeps_a_revision() {
        let cutoffs = Cutoffs::at(NOW, &retention());
        assert!(reclaimable(&old(), &retention(), &cutoffs));
        let kept = [
            ("among the newest", Candidate { newer: 1, ..old() }),
            (
                "current",
                Candidate {
                    current: true,
                    ..old()
                },
            ),
            (
                "newest (never superseded)",
                Candidate {
                    superseded_at: None,
                    ..old()
                },
            ),
            (
                "within grace",
                Candidate {
                    superseded_at: Some(NOW.minus(Duration::from_secs(59))),
                    ..old()
                },
            ),
            (
                "leased",
                Candidate {
                    leased: true,
                    ..old()
                },
            ),
            (
                "base of a put in flight",
                Candidate {
                    base_in_flight: true,
                    ..old()
                },
            ),
        ];
        for (why, c) in kept {
            assert!(!reclaimable(&c, &retention(), &cutoffs), "{why}");
        }
    }

    #[test]
    fn boundaries_are_inclusive_of_the_cutoff() {
        let cutoffs = Cutoffs::at(NOW, &retention());
        let at_cutoff = Candidate {
            newer: 2,
            superseded_at: Some(cutoffs.superseded_by),
            ..old()
        };
        assert!(reclaimable(&at_cutoff, &retention(), &cutoffs));
        assert!(cutoffs.orphaned(NOW.minus(Duration::from_secs(3600))));
        assert!(!cutoffs.orphaned(NOW.minus(Duration::from_secs(3599))));
    }

    #[test]
    fn an_unnamed_object_goes_only_past_the_orphan_period() {
        let cutoffs = Cutoffs::at(NOW, &retention());
        let old = NOW.minus(Duration::from_secs(3600));
        let young = NOW.minus(Duration::from_secs(3599));
        assert!(unnamed_object_reclaimable(old, false, &cutoffs));
        assert!(!unnamed_object_reclaimable(old, true, &cutoffs));
        assert!(!unnamed_object_reclaimable(young, false, &cutoffs));
    }
}
