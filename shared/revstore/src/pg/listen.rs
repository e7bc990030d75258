//! Every replica's commits reach this replica's subscribers (issue 40 point 3).
//!
//! A commit's transaction runs `pg_notify` on the store's channel (one per schema, so two hubs
//! sharing a database hear only their own), with the revision and the user id as its payload:
//! PostgreSQL delivers it to every listening session when, and only if, the transaction commits.
//! Each replica keeps one connection listening ([`run`]) and wakes the subscribers of the user
//! named. A connection that fails, or stops answering the ping that finds out a silent network,
//! is replaced, backing off; once listening again it wakes every subscriber to read the store
//! ([`Revisions::resync`]), since notifications sent meanwhile are lost. So a subscriber misses
//! no commit it could tell about, only learns of it later.

use std::sync::Arc;

use sha2::{Digest as _, Sha256};
use snug_pg::{Heard, Listening, PgConfig};

use crate::{Revision, Revisions, UserId};

/// The store's channel: one per schema. Its listening session is named for it
/// (`application_name` in `pg_stat_activity`).
pub fn channel(schema: Option<&str>) -> String {
    let digest = Sha256::digest(format!("snug-revisions:{}", schema.unwrap_or("")));
    let tag: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("snug_revisions_{tag}")
}

/// What a commit notifies: the revision, then the user id (which may hold spaces; a revision
/// never does).
pub(super) fn payload(user: &UserId, revision: &Revision) -> String {
    format!("{revision} {user}")
}

/// What an erasure notifies: a revision-shaped word no revision is (`-`), then the user id.
pub(super) fn payload_erased(user: &UserId) -> String {
    format!("- {user}")
}

/// The user a notification names, if it is one this store sends.
fn user_of(payload: &str) -> Option<UserId> {
    let (revision, user) = payload.split_once(' ')?;
    Revision::new(revision).ok()?;
    UserId::new(user).ok()
}

/// Serves `listening` (the store listened before it answered its first request, so no
/// subscriber precedes it), then listens again whenever it is lost, for as long as the task
/// runs, waking `revisions`' subscribers.
pub(super) async fn run(
    pg: PgConfig,
    channel: String,
    revisions: Arc<Revisions>,
    listening: Listening,
) {
    snug_pg::follow(pg, channel, listening, |heard| match heard {
        Heard::Notification(payload) => match user_of(payload) {
            Some(user) => revisions.announce(&user),
            None => tracing::warn!(payload, "ignored a notification this store does not send"),
        },
        Heard::Lost(err) => {
            // Until listening again, other replicas' commits go unheard: caches stop trusting.
            revisions.lost();
            tracing::warn!(error = %err, "lost the PostgreSQL connection that hears the replicas' commits; listening again");
        }
        // Commits made while no connection listened: every subscriber reads again.
        Heard::Listening => revisions.resync(),
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_names_its_user_whatever_the_id_holds() {
        let revision = Revision::new("r7-00000000000000ab").expect("revision");
        for id in ["alice", "bob smith", "ünïcode user", "a b c"] {
            let user = UserId::new(id).expect("user");
            assert_eq!(user_of(&payload(&user, &revision)), Some(user.clone()));
            assert_eq!(user_of(&payload_erased(&user)), Some(user));
        }
        for foreign in ["", "alice", "not\"a-token alice", " alice"] {
            assert_eq!(user_of(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn each_schema_has_its_own_channel_a_plain_identifier() {
        let (a, b, none) = (
            channel(Some("hub_a")),
            channel(Some("hub_b")),
            channel(None),
        );
        assert!(a != b && a != none && b != none);
        for c in [a, b, none] {
            assert!(snug_pg::valid_schema(&c), "{c}");
        }
    }
}
