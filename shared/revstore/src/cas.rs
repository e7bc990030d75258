//! The compare-and-swap decision, as a pure function every backend calls inside its transaction.
//!
//! Keeping the rule in one place is what makes the backends agree on which refusal a caller gets:
//! the conformance suite then only has to check that each backend feeds it the right facts.

use crate::{
    error::PutError,
    types::{Digest, Precondition, Revision},
};

/// The facts about one accepted revision that the decision needs.
#[derive(Clone, Debug)]
pub(crate) struct Accepted {
    pub(crate) revision: Revision,
    pub(crate) base: Option<Revision>,
    pub(crate) digest: Digest,
}

/// What the store knows about the user when it decides.
#[derive(Clone, Debug, Default)]
pub(crate) struct Facts {
    /// The current revision, if the user has one.
    pub(crate) current: Option<Accepted>,
    /// Whether the must-match revision is one of this user's earlier revisions.
    pub(crate) base_known: bool,
    /// The revision an earlier put with the same idempotency key produced.
    pub(crate) keyed: Option<Accepted>,
    /// Bytes the user's unfinished puts hold (read when a put begins; 0 elsewhere).
    pub(crate) staged: u64,
}

/// The outcome of the decision once the image digest is known.
#[derive(Debug)]
pub(crate) enum Decision {
    /// Swap the pointer to a new revision.
    Accept,
    /// The write was already accepted as this revision: answer with it and write nothing.
    Replay(Revision),
    /// Refuse.
    Refuse(PutError),
}

/// Decides before any byte is read whether the put can possibly succeed, so that a doomed write is
/// refused without consuming its body.
pub(crate) fn early(precondition: &Precondition, facts: &Facts) -> Option<PutError> {
    if facts.keyed.is_some() || holds(precondition, facts) {
        return None;
    }
    // The current revision was built on the same base: this may be a retry of the write that
    // produced it, which only the digest can tell.
    if let Some(current) = &facts.current
        && current.base.as_ref() == precondition.base()
    {
        return None;
    }
    Some(refusal(precondition, facts))
}

/// Admits a put that stages `reserve` bytes when the user's unfinished puts hold `staged`:
/// within `limit`, or when nothing is staged (a limit below one image must not lock a user out).
pub(crate) fn admit(staged: u64, reserve: u64, limit: u64) -> Option<PutError> {
    (staged > 0 && staged.saturating_add(reserve) > limit)
        .then_some(PutError::PutsInFlight { staged, limit })
}

/// Decides with the digest of the streamed image in hand.
pub(crate) fn decide(precondition: &Precondition, facts: &Facts, digest: &Digest) -> Decision {
    if let Some(keyed) = &facts.keyed {
        return if keyed.digest == *digest && keyed.base.as_ref() == precondition.base() {
            Decision::Replay(keyed.revision.clone())
        } else {
            Decision::Refuse(PutError::IdempotencyKeyReused {
                revision: keyed.revision.clone(),
            })
        };
    }
    if holds(precondition, facts) {
        return Decision::Accept;
    }
    if let Some(current) = &facts.current {
        // Same base, same bytes: the earlier attempt of this very write landed and its answer was
        // lost. Accepting again would fork history; refusing would make a retry look like a
        // conflict with itself.
        if current.base.as_ref() == precondition.base() && current.digest == *digest {
            return Decision::Replay(current.revision.clone());
        }
    }
    Decision::Refuse(refusal(precondition, facts))
}

fn holds(precondition: &Precondition, facts: &Facts) -> bool {
    match (precondition, &facts.current) {
        (Precondition::MustNotExist, None) => true,
        (Precondition::MustMatch(expected), Some(current)) => current.revision == *expected,
        _ => false,
    }
}

fn refusal(precondition: &Precondition, facts: &Facts) -> PutError {
    let current = facts.current.as_ref().map(|c| c.revision.clone());
    match (precondition, current) {
        (Precondition::MustMatch(base), Some(current)) if facts.base_known => PutError::Stale {
            base: base.clone(),
            current,
        },
        (_, current) => PutError::Conflict { current },
    }
}

#[cfg(test)]
mod tests;
