//! The users' heads as this gateway knows them (issue 40 point 6), kept correct by the commits the
//! sync service announces, and one watch per user fanned out to every event stream and long poll
//! of theirs.
//!
//! One call per gateway follows every user's commits (WatchCommits, [`follow`]). It makes two
//! things cheap that were a call each:
//!
//! - **A poll.** A conditional `GET /userdb` needs its user's head. The first asks the sync
//!   service (HeadImage) and the answer is kept; a commit of that user forgets it. A fill races a
//!   commit safely: a fill is kept only if no commit of its user was heard since it began (the
//!   slot it left, [`Slot::Filling`], is gone otherwise), and a read that begins after a commit
//!   was heard sees that commit. What is kept is used only while the feed is `live`: not while it
//!   is disconnected, nor while the store says commits may go unheard (its notification connection
//!   lost); each reset forgets everything. A write through this gateway forgets its user's head
//!   when it returns, so a client reads its own writes here at once; a commit through another
//!   replica is heard within the delivery time of an event (milliseconds), so until then that
//!   replica's poll may still answer 304 for the revision before it, as a poll a moment earlier
//!   would have.
//! - **A stream.** Every event stream and long poll of one user shares one reader ([`read`]),
//!   which reads the user's history (one page) when a commit of theirs is heard or a subscriber
//!   joins, and publishes it ([`Snapshot`]); each subscriber works out what to send from it with
//!   `WatchImage`'s own rule (`snug_rpc::watch`). A subscriber joining asks for a read that begins
//!   after it joined, so its first answer never predates what it may have seen elsewhere. An idle
//!   subscriber holds a channel receiver and what it sent last; heartbeats come from one ticker.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use snug_proto::sync::v1::{self as sync_pb, sync_service_client::SyncServiceClient};
use tokio::sync::{Notify, watch};

use super::{Caller, Channel, head_image, list_revisions};
use crate::error::ApiError;

/// Seconds between the heartbeats of every event stream.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// Seconds between the heartbeats the sync service sends on the commits feed; silence for
/// [`FEED_SILENCE`] and the feed counts as lost (a network that drops packets without a reset).
const FEED_HEARTBEAT_SECONDS: u32 = 5;
const FEED_SILENCE: Duration = Duration::from_secs(3 * FEED_HEARTBEAT_SECONDS as u64);
/// The first wait before following again, doubled up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The most users whose heads are kept (about 300 bytes each); beyond, an eighth are forgotten.
const CAPACITY: usize = 65_536;

/// The heads and watches of one gateway.
#[derive(Debug)]
pub(crate) struct Heads {
    shared: Arc<Shared>,
    sync: SyncServiceClient<Channel>,
    deadline: Duration,
    started: std::sync::Once,
    /// Dropped with the gateway, ending [`follow`].
    stop: watch::Sender<()>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Ticks every [`HEARTBEAT`]: every stream beats on it.
    beat: watch::Sender<()>,
}

#[derive(Debug, Default)]
struct State {
    /// Whether every commit is heard now: the feed is connected and the store hears every
    /// replica.
    live: bool,
    heads: HashMap<String, Slot>,
    /// Numbers the fills, so a fill knows its own slot.
    fills: u64,
    watched: HashMap<String, Watched>,
}

#[derive(Debug, Clone, PartialEq)]
enum Slot {
    /// A fill began; kept only if the slot is still this one when it ends.
    Filling(u64),
    /// The head, or `None`: the user has no image.
    Known(Option<Arc<sync_pb::RevisionInfo>>),
}

/// A user with subscribers: their reader's channel and what makes it read.
#[derive(Debug)]
struct Watched {
    history: watch::Sender<Snapshot>,
    wake: Arc<Notify>,
    /// The number of the latest read asked for.
    requested: u64,
}

/// One read of a user's history, as the subscribers see it.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    /// The number of the request the read began after (0: no read yet).
    pub read: u64,
    /// The history, newest first, one page; or why it could not be read.
    pub history: Result<Arc<Vec<sync_pb::RevisionInfo>>, ApiError>,
}

/// One subscriber of a user's history.
#[derive(Debug)]
pub(crate) struct Watching {
    history: watch::Receiver<Snapshot>,
    /// The first read this subscriber may be answered from.
    want: u64,
    beat: watch::Receiver<()>,
}

/// What a subscriber hears next.
#[derive(Debug)]
pub(crate) enum Heard {
    /// A read of the history no older than the subscription.
    History(Result<Arc<Vec<sync_pb::RevisionInfo>>, ApiError>),
    /// Nothing happened for a heartbeat's time.
    Heartbeat,
}

impl Watching {
    /// Everything heard, as a stream that ends after a failed read.
    pub(crate) fn into_stream(self) -> impl futures::Stream<Item = Heard> + Send + 'static {
        futures::stream::unfold(Some(self), |watching| async move {
            let mut watching = watching?;
            let heard = watching.next().await;
            let failed = matches!(heard, Heard::History(Err(_)));
            Some((heard, (!failed).then_some(watching)))
        })
    }

    /// The next thing heard.
    pub(crate) async fn next(&mut self) -> Heard {
        loop {
            tokio::select! {
                changed = self.history.changed() => {
                    if changed.is_err() {
                        // The reader goes only with its last subscriber: this one holds it.
                        std::future::pending::<()>().await;
                    }
                    let snapshot = self.history.borrow_and_update();
                    if snapshot.read >= self.want {
                        return Heard::History(snapshot.history.clone());
                    }
                }
                changed = self.beat.changed() => {
                    if changed.is_err() {
                        std::future::pending::<()>().await;
                    }
                    return Heard::Heartbeat;
                }
            }
        }
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // Every change below completes under the lock: a poisoned state is still whole.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Heads {
    pub(crate) fn new(sync: SyncServiceClient<Channel>, deadline: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::default(),
                beat: watch::Sender::new(()),
            }),
            sync,
            deadline,
            started: std::sync::Once::new(),
            stop: watch::Sender::new(()),
        }
    }

    /// Starts following the commits, once, from within the runtime.
    fn start(&self) {
        self.started.call_once(|| {
            tokio::spawn(follow(
                self.shared.clone(),
                self.sync.clone(),
                self.stop.subscribe(),
            ));
        });
    }

    /// The user's current revision (`None`: no image), from what is kept when it can be trusted,
    /// else asked of the sync service (HeadImage) and kept.
    pub(crate) async fn head(
        &self,
        caller: &Caller,
    ) -> Result<Option<Arc<sync_pb::RevisionInfo>>, ApiError> {
        self.start();
        let fill = match self.shared.kept(&caller.user_id) {
            Kept::Head(head) => return Ok(head),
            Kept::Fill(fill) => fill,
        };
        let head = head_image(&self.sync, self.deadline, caller, None)
            .await?
            .map(Arc::new);
        if let Some(fill) = fill {
            self.shared.filled(&caller.user_id, fill, head.clone());
        }
        Ok(head)
    }

    /// Forgets the user's head: a write of theirs through this gateway returned.
    pub(crate) fn forget(&self, user: &str) {
        self.shared.forget(user);
    }

    /// Subscribes to `caller`'s history: the first thing heard is a read that began after now.
    pub(crate) fn watch(&self, caller: &Caller) -> Watching {
        self.start();
        let mut state = lock(&self.shared.state);
        let watched = match state.watched.entry(caller.user_id.clone()) {
            std::collections::hash_map::Entry::Occupied(entry) => {
                let watched = entry.into_mut();
                watched.requested += 1;
                watched.wake.notify_one();
                watched
            }
            std::collections::hash_map::Entry::Vacant(entry) => {
                let history = watch::Sender::new(Snapshot {
                    read: 0,
                    history: Ok(Arc::default()),
                });
                let wake = Arc::new(Notify::new());
                tokio::spawn(read(
                    self.shared.clone(),
                    self.sync.clone(),
                    self.deadline,
                    caller.clone(),
                    history.clone(),
                    wake.clone(),
                ));
                entry.insert(Watched {
                    history,
                    wake,
                    requested: 1,
                })
            }
        };
        Watching {
            history: watched.history.subscribe(),
            want: watched.requested,
            beat: self.shared.beat.subscribe(),
        }
    }
}

/// Forgets an eighth of `heads` (whichever come first): the kept heads stay within
/// [`CAPACITY`] without an order to maintain on every poll.
fn forget_some(heads: &mut HashMap<String, Slot>) {
    let mut n = 0;
    heads.retain(|_, _| {
        n += 1;
        n > CAPACITY / 8
    });
}

/// What is kept of a user's head.
#[derive(Debug, PartialEq)]
enum Kept {
    /// Their head (`None`: no image), to be trusted.
    Head(Option<Arc<sync_pb::RevisionInfo>>),
    /// Nothing to be trusted: ask the store, then keep the answer as this fill, if any.
    Fill(Option<u64>),
}

impl Shared {
    /// What is kept of `user`'s head; when nothing, a fill begins (while live).
    fn kept(&self, user: &str) -> Kept {
        let mut state = lock(&self.state);
        if !state.live {
            return Kept::Fill(None);
        }
        if let Some(Slot::Known(head)) = state.heads.get(user) {
            return Kept::Head(head.clone());
        }
        state.fills += 1;
        let fill = state.fills;
        if state.heads.len() >= CAPACITY {
            forget_some(&mut state.heads);
        }
        state.heads.insert(user.to_owned(), Slot::Filling(fill));
        Kept::Fill(Some(fill))
    }

    /// Keeps what `fill` read of `user`'s head, unless a commit of theirs (or a reset) was heard
    /// since it began.
    fn filled(&self, user: &str, fill: u64, head: Option<Arc<sync_pb::RevisionInfo>>) {
        let mut state = lock(&self.state);
        if let Some(slot) = state.heads.get_mut(user)
            && *slot == Slot::Filling(fill)
        {
            *slot = Slot::Known(head);
        }
    }

    fn forget(&self, user: &str) {
        lock(&self.state).heads.remove(user);
    }

    /// A commit of `user` was heard.
    fn committed(&self, user: &str) {
        let mut state = lock(&self.state);
        state.heads.remove(user);
        if let Some(watched) = state.watched.get_mut(user) {
            watched.requested += 1;
            watched.wake.notify_one();
        }
    }

    /// Everything learned before may be out of date; `live`: every commit is heard from now on.
    fn reset(&self, live: bool) {
        let mut state = lock(&self.state);
        state.live = live;
        state.heads.clear();
        if live {
            for watched in state.watched.values_mut() {
                watched.requested += 1;
                watched.wake.notify_one();
            }
        }
    }
}

/// Follows every user's commits for as long as the gateway lives, following again (backing
/// off) whenever the feed fails or falls silent, and ticks the streams' heartbeat.
async fn follow(
    shared: Arc<Shared>,
    mut sync: SyncServiceClient<Channel>,
    mut stop: watch::Receiver<()>,
) {
    use sync_pb::watch_commits_response::Event;
    let mut beats = tokio::time::interval(HEARTBEAT);
    beats.tick().await;
    let mut backoff = MIN_BACKOFF;
    loop {
        let call = sync.watch_commits(sync_pb::WatchCommitsRequest {
            heartbeat_seconds: FEED_HEARTBEAT_SECONDS,
        });
        let mut feed = tokio::select! {
            _ = stop.changed() => return,
            feed = tokio::time::timeout(FEED_SILENCE, call) => match feed {
                Ok(Ok(feed)) => Some(feed.into_inner()),
                Ok(Err(status)) => {
                    tracing::warn!(status = %status, "cannot follow the sync store's commits; polls ask the store until it can");
                    None
                }
                Err(_) => None,
            },
        };
        while let Some(stream) = feed.as_mut() {
            tokio::select! {
                _ = stop.changed() => return,
                _ = beats.tick() => {
                    shared.beat.send_replace(());
                }
                message = tokio::time::timeout(FEED_SILENCE, stream.message()) => {
                    match message {
                        Ok(Ok(Some(message))) => {
                            backoff = MIN_BACKOFF;
                            match message.event {
                                Some(Event::Committed(user)) => shared.committed(&user),
                                Some(Event::Reset(reset)) => shared.reset(reset.live),
                                Some(Event::Heartbeat(_)) | None => {}
                            }
                        }
                        Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                            tracing::warn!("lost the sync store's commits feed; following again");
                            feed = None;
                        }
                    }
                }
            }
        }
        // Until the feed is back, nothing kept is trusted.
        shared.reset(false);
        let pause = tokio::time::sleep(backoff);
        tokio::pin!(pause);
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = beats.tick() => {
                    shared.beat.send_replace(());
                }
                () = &mut pause => break,
            }
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Reads `caller`'s history whenever asked, publishing each read, until the user has no
/// subscriber left. A read refused for a passing reason (a service shedding load, a deadline
/// missed) is tried again, backing off, and not published: the subscribers keep what they have
/// and hear the next read that succeeds. Any other failure is published, and ends them.
async fn read(
    shared: Arc<Shared>,
    sync: SyncServiceClient<Channel>,
    deadline: Duration,
    caller: Caller,
    history: watch::Sender<Snapshot>,
    wake: Arc<Notify>,
) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let read = match lock(&shared.state).watched.get(&caller.user_id) {
            Some(watched) => watched.requested,
            None => return,
        };
        let listed = list_revisions(&sync, deadline, &caller, snug_rpc::watch::PAGE as u32)
            .await
            .map(Arc::new);
        let retry = match &listed {
            Err(err) if err.retryable => Some(backoff),
            _ => None,
        };
        match retry {
            Some(_) => backoff = (backoff * 2).min(MAX_BACKOFF),
            None => {
                backoff = MIN_BACKOFF;
                history.send_replace(Snapshot {
                    read,
                    history: listed,
                });
            }
        }
        let pause = async {
            match retry {
                Some(pause) => tokio::time::sleep(pause).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = pause => {}
            () = wake.notified(), if retry.is_none() => {}
            () = history.closed() => {
                let mut state = lock(&shared.state);
                // A subscriber may have joined since: it is served, so this reader goes on.
                if history.receiver_count() == 0 {
                    state.watched.remove(&caller.user_id);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
