//! The push decision as one pure function: what a push of a file does, given what the file is
//! now, what it last synced as at this origin, and the origin's head as the origin confirmed it
//! in this run (issue 35).
//!
//! Every program that pushes a file as `snug sync push` does calls [`push`], so the answers agree:
//! "unchanged" only where the origin's head is the revision the file last synced as there (never
//! from the sidecar alone); a file the origin has never seen from this device is never
//! "unchanged"; a file that holds an older revision than the origin's head, unchanged since, is
//! behind (a divergence) unless the user asks to restore it, which makes its content the new head
//! as a copy-forward (§8.1: a revert is a new version); and `force` names the head it overwrites.

use crate::{SnapshotInfo, push_state::OriginState};

/// What the decision is made from.
#[derive(Debug, Clone, Copy)]
pub struct PushFacts<'a> {
    /// The push gate's hash of the file's content now (hex).
    pub content_hash: &'a str,
    /// The SHA-256 of the image the push would send (hex).
    pub image_sha256: &'a str,
    /// The file's record at this origin; `None`: it never synced there.
    pub synced: Option<&'a OriginState>,
    /// The origin's current revision as it answered in this run; `None`: it holds no copy.
    pub head: Option<&'a SnapshotInfo>,
    /// Overwrite whatever the origin holds (last writer wins).
    pub force: bool,
    /// Make the file's content the origin's new head although the origin moved on since the
    /// file synced (the file holds an older revision).
    pub restore: bool,
}

/// What a push does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushPlan {
    /// The origin's head is the revision the file last synced as, and the file has not changed
    /// since: nothing to send.
    Unchanged {
        /// That revision.
        revision: String,
    },
    /// The origin's head already holds exactly the file's content (pushed from elsewhere, or a
    /// push whose answer was lost): nothing to send; the file is now in sync as that revision.
    AlreadyAtOrigin {
        /// The head.
        revision: String,
    },
    /// Send the file as the origin's new head, on `base` (`None`: the first copy).
    Push {
        /// The revision the write names as current (compare-and-swap).
        base: Option<String>,
        /// Why this push goes ahead.
        kind: PushKind,
    },
    /// Send nothing: the user must choose.
    Refuse(Refusal),
}

/// Why a push goes ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushKind {
    /// The origin is where the file left it, and the file changed: it moves forward.
    Forward,
    /// The origin holds no copy. `lost`: the revision the file last synced as there, which the
    /// origin no longer holds (it was erased or reset).
    First {
        /// The revision the origin held when the file last synced with it.
        lost: Option<String>,
    },
    /// `force`: the file replaces a head it did not sync from; the head stays in the history of
    /// an origin that keeps one.
    Overwrite {
        /// The head overwritten.
        overwritten: String,
    },
    /// `restore`: the file, unchanged since it synced as `from`, becomes the new head, a copy of
    /// `from` made current again.
    Restore {
        /// The revision the file holds.
        from: String,
        /// The head it supersedes (it stays in the origin's history).
        superseded: String,
    },
}

/// Why a push sends nothing and fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The origin moved to `head` and the file changed too since it last synced there (or never
    /// synced there, `synced: None`, and differs from the head).
    Diverged {
        /// The origin's head.
        head: String,
        /// The revision the file last synced as at this origin.
        synced: Option<String>,
    },
    /// The file is unchanged since it synced as `synced`, and the origin moved on to `head`:
    /// pulling brings the file up to date; `restore` makes `synced`'s content the head again.
    Behind {
        /// The revision the file holds.
        synced: String,
        /// The origin's head.
        head: String,
    },
}

/// Decides a push (see the module docs).
pub fn push(facts: &PushFacts<'_>) -> PushPlan {
    let PushFacts {
        content_hash,
        image_sha256,
        synced,
        head,
        force,
        restore,
    } = *facts;
    let Some(head) = head else {
        return PushPlan::Push {
            base: None,
            kind: PushKind::First {
                lost: synced.map(|s| s.revision.clone()),
            },
        };
    };
    let at_head = synced.is_some_and(|s| s.revision == head.revision);
    let unchanged = synced.is_some_and(|s| s.content_hash == content_hash);
    if at_head && unchanged {
        return PushPlan::Unchanged {
            revision: head.revision.clone(),
        };
    }
    // The origin holds the very bytes this push would send (a push whose answer was lost), or
    // the export of this content (pushed by an earlier release, which sent the export).
    if head.sha256_hex() == image_sha256 || head.sha256_hex() == content_hash {
        return PushPlan::AlreadyAtOrigin {
            revision: head.revision.clone(),
        };
    }
    let on_head = |kind| PushPlan::Push {
        base: Some(head.revision.clone()),
        kind,
    };
    match synced {
        Some(_) if at_head => on_head(PushKind::Forward),
        Some(synced) if unchanged && restore => on_head(PushKind::Restore {
            from: synced.revision.clone(),
            superseded: head.revision.clone(),
        }),
        _ if force => on_head(PushKind::Overwrite {
            overwritten: head.revision.clone(),
        }),
        Some(synced) if unchanged => PushPlan::Refuse(Refusal::Behind {
            synced: synced.revision.clone(),
            head: head.revision.clone(),
        }),
        synced => PushPlan::Refuse(Refusal::Diverged {
            head: head.revision.clone(),
            synced: synced.map(|s| s.revision.clone()),
        }),
    }
}

#[cfg(test)]
mod tests;
