//! Live revision events (issue 40): a commit (or an erasure) tells this process's subscribers
//! that a user's revisions changed.
//!
//! The commit announces it once, from the protocol's commit step (`protocol.rs`): the embedded
//! and memory stores in process, right after the commit; PostgreSQL with `pg_notify` inside the
//! commit's transaction, so the notification exists exactly when the commit does and reaches
//! every replica's listener (`pg/listen.rs`), this one's included. A subscriber learns only
//! *that* the user's revisions changed, then reads them from the store: a notification carries
//! nothing a subscriber could be wrong about, a burst of commits wakes a slow subscriber once,
//! and notifications that may have been lost (a listener that reconnected) are made good by
//! waking every subscriber to read again ([`Revisions::resync`]).
//!
//! What an idle subscriber holds: one [`Subscription`] (a user id and two channel receivers,
//! about 100 bytes) and, per user with subscribers, one channel in the map. The map entry goes
//! with the user's last subscription.
//!
//! A cache of many users' heads (a gateway's) subscribes to every user at once instead
//! ([`Revisions::watch_all`]): it hears each announced user's id, and a [`Change::Reset`] when
//! what it learned may be out of date — notifications lost (a listener that failed, a feed that
//! fell behind) — saying whether every commit is heard from then on (`live`). While not live a
//! cache must not answer from what it holds: a commit on another replica may go unheard.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use tokio::sync::{broadcast, watch};

use crate::UserId;

/// How many announcements a subscriber of every user may fall behind before it is told to
/// forget what it knows ([`Change::Reset`]) instead.
const ALL_BACKLOG: usize = 4096;

/// The subscriptions of one process, by user.
#[derive(Debug)]
pub struct Revisions {
    users: Mutex<HashMap<UserId, watch::Sender<u64>>>,
    /// Bumped when notifications may have been lost: every subscriber reads again.
    resync: watch::Sender<u64>,
    /// Every announced user, for subscribers of all ([`Revisions::watch_all`]).
    all: broadcast::Sender<Change>,
    /// Whether every commit is announced now (false while a listener is lost).
    live: watch::Sender<bool>,
}

impl Default for Revisions {
    fn default() -> Self {
        Self {
            users: Mutex::new(HashMap::new()),
            resync: watch::Sender::new(0),
            all: broadcast::Sender::new(ALL_BACKLOG),
            live: watch::Sender::new(true),
        }
    }
}

/// What a subscriber of every user hears ([`AllChanges::next`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The user's revisions changed: a commit, or an erasure.
    User(UserId),
    /// Forget what was learned before: changes may have gone unheard. `live`: every change is
    /// heard from now on; `false`: not until the next reset.
    Reset {
        /// Whether every change is announced from now on.
        live: bool,
    },
}

impl Revisions {
    /// A process's subscriptions, none yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn users(&self) -> MutexGuard<'_, HashMap<UserId, watch::Sender<u64>>> {
        // Every operation leaves the map whole: a panic elsewhere cannot tear it.
        self.users.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes to the user's commits from now on.
    pub fn subscribe(self: &Arc<Self>, user: &UserId) -> Subscription {
        let changes = self
            .users()
            .entry(user.clone())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe();
        Subscription {
            user: user.clone(),
            changes,
            resync: self.resync.subscribe(),
            revisions: self.clone(),
        }
    }

    /// Subscribes to every user's commits from now on; the first thing heard is a
    /// [`Change::Reset`] saying whether they are all heard.
    pub fn watch_all(&self) -> AllChanges {
        AllChanges {
            changes: self.all.subscribe(),
            live: self.live.subscribe(),
            reset: true,
        }
    }

    /// Wakes the user's subscribers: a commit moved their revisions (or erased them).
    pub(crate) fn announce(&self, user: &UserId) {
        if let Some(sender) = self.users().get(user) {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
        // No subscriber of all is no error.
        let _ = self.all.send(Change::User(user.clone()));
    }

    /// Notifications may have been lost, and are until [`Revisions::resync`]: subscribers of all
    /// stop trusting what they learn.
    pub(crate) fn lost(&self) {
        self.live.send_replace(false);
    }

    /// Every commit is announced again, but notifications may have been lost: every subscriber
    /// reads again.
    pub(crate) fn resync(&self) {
        self.resync.send_modify(|n| *n = n.wrapping_add(1));
        self.live.send_replace(true);
    }

    /// How many subscriptions are open.
    pub fn subscribers(&self) -> usize {
        self.users()
            .values()
            .map(watch::Sender::receiver_count)
            .sum()
    }
}

/// One subscriber's view of a user's commits.
#[derive(Debug)]
pub struct Subscription {
    user: UserId,
    changes: watch::Receiver<u64>,
    resync: watch::Receiver<u64>,
    revisions: Arc<Revisions>,
}

impl Subscription {
    /// The user subscribed to.
    pub fn user(&self) -> &UserId {
        &self.user
    }

    /// Waits until the user's revisions may have changed since the last call returned (or since
    /// the subscription began): a commit of theirs, or a resync. Commits in between are one
    /// wake-up; the caller reads what they did from the store.
    pub async fn changed(&mut self) {
        // Neither sender goes while this subscription holds the `Revisions` and its user's entry,
        // so neither wait ends in an error.
        tokio::select! {
            _ = self.changes.changed() => {}
            _ = self.resync.changed() => {}
        }
        self.changes.mark_unchanged();
        self.resync.mark_unchanged();
    }
}

/// A subscriber's view of every user's commits.
#[derive(Debug)]
pub struct AllChanges {
    changes: broadcast::Receiver<Change>,
    live: watch::Receiver<bool>,
    /// A reset is owed: at the start, after a change of liveness, after falling behind.
    reset: bool,
}

impl AllChanges {
    /// The next change, waiting for it.
    pub async fn next(&mut self) -> Change {
        loop {
            if std::mem::take(&mut self.reset) {
                self.live.mark_unchanged();
                // Announcements queued before now were made under what this reset forgets.
                self.changes = self.changes.resubscribe();
                return Change::Reset {
                    live: *self.live.borrow(),
                };
            }
            tokio::select! {
                biased;
                changed = self.live.changed() => {
                    // The sender lives as long as the `Revisions` this came from.
                    if changed.is_err() {
                        std::future::pending::<()>().await;
                    }
                    self.reset = true;
                }
                change = self.changes.recv() => match change {
                    Ok(change) => return change,
                    Err(broadcast::error::RecvError::Lagged(_)) => self.reset = true,
                    Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                },
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut users = self.revisions.users();
        // This subscription's receiver is the last: the user's channel goes with it.
        if users
            .get(&self.user)
            .is_some_and(|sender| sender.receiver_count() == 1)
        {
            users.remove(&self.user);
        }
    }
}

#[cfg(test)]
mod tests;
