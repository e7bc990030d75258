//! WatchImage (issue 40 point 2): a caller's revisions as they are committed.
//!
//! The stream subscribes to the user's commits (`snug_revstore::Revisions`) before it reads
//! anything, so a commit landing between a read and the next wait still wakes it. Each wake
//! reads the user's history (newest first, one page) and [`catch_up`] decides what to send from
//! the last thing sent: the revisions after it, oldest first; `no_image` when the user has none
//! (any more: an erasure wakes subscribers as a commit does); a `gap` and the current revision
//! when the page does not reach back to it. A heartbeat reads nothing: at ten thousand idle
//! streams a read per heartbeat was most of the hub's idle CPU. The stream runs as a task that
//! ends when the caller goes away, holding one subscription and the page it last read.

use std::time::Duration;

use snug_proto::sync::v1 as pb;
use snug_revstore::{RevStore as _, Revision, RevisionInfo};
use snug_rpc::chunks::ResponseStream;
use tokio::sync::mpsc;
use tonic::Status;

use crate::{SyncServer, convert, status};

/// How many revisions one read of the history returns: more new ones than this since the last
/// sent, and the stream says `gap` instead of listing them.
pub(crate) const PAGE: usize = 64;

/// The heartbeat when the request names none, and the bounds of one it names.
const HEARTBEAT: Duration = Duration::from_secs(15);
const HEARTBEAT_SECONDS: std::ops::RangeInclusive<u32> = 1..=300;

/// What the stream sent last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Nothing yet.
    Nothing,
    /// That the user has no image.
    NoImage,
    /// This revision.
    Revision(Revision),
}

/// One event of the stream.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Event {
    Revision(RevisionInfo),
    NoImage,
    Gap,
}

/// The events that bring a caller who was sent `sent` up to `history` (the user's revisions,
/// newest first, at most [`PAGE`]), and what has been sent after them.
pub(crate) fn catch_up(sent: &Sent, history: &[RevisionInfo]) -> (Vec<Event>, Sent) {
    let Some(current) = history.first() else {
        return match sent {
            Sent::NoImage => (Vec::new(), Sent::NoImage),
            Sent::Nothing | Sent::Revision(_) => (vec![Event::NoImage], Sent::NoImage),
        };
    };
    let now = Sent::Revision(current.revision.clone());
    let events = match sent {
        Sent::Nothing | Sent::NoImage => vec![Event::Revision(current.clone())],
        Sent::Revision(last) => match history.iter().position(|info| info.revision == *last) {
            Some(newer) => history[..newer]
                .iter()
                .rev()
                .cloned()
                .map(Event::Revision)
                .collect(),
            // Not in the page: further back than one read reaches, or not the user's at all.
            None => vec![Event::Gap, Event::Revision(current.clone())],
        },
    };
    (events, now)
}

impl Event {
    fn message(self) -> pb::WatchImageResponse {
        use pb::watch_image_response::Event as E;
        let event = match self {
            Self::Revision(info) => E::Revision(convert::revision_info(info)),
            Self::NoImage => E::NoImage(pb::watch_image_response::NoImage {}),
            Self::Gap => E::Gap(pb::watch_image_response::Gap {}),
        };
        pb::WatchImageResponse { event: Some(event) }
    }
}

fn heartbeat() -> pb::WatchImageResponse {
    pb::WatchImageResponse {
        event: Some(pb::watch_image_response::Event::Heartbeat(
            pb::watch_image_response::Heartbeat {},
        )),
    }
}

impl SyncServer {
    pub(crate) async fn watch_image(
        &self,
        request: pb::WatchImageRequest,
    ) -> Result<ResponseStream<pb::WatchImageResponse>, Status> {
        let caller = convert::caller(request.caller, "caller")?;
        let sent = match request.after_revision {
            Some(token) => Sent::Revision(convert::revision(token, "after_revision")?),
            None => Sent::Nothing,
        };
        let every = match request.heartbeat_seconds {
            0 => HEARTBEAT,
            s if HEARTBEAT_SECONDS.contains(&s) => Duration::from_secs(s.into()),
            _ => {
                return Err(snug_rpc::status::invalid_argument(
                    crate::error_info::DOMAIN,
                    "heartbeat_seconds",
                    "between 1 and 300",
                ));
            }
        };
        let store = self.store.clone();
        let mut subscription = store.revisions().subscribe(&caller.user);
        // The first read answers before the stream does: a storage failure is the call's status.
        let history = store
            .list_revisions(&caller.user, PAGE)
            .await
            .map_err(status::storage_error)?;
        let (first, mut sent) = catch_up(&sent, &history);
        let (tx, rx) = mpsc::channel::<Result<pb::WatchImageResponse, Status>>(PAGE + 2);
        for event in first {
            // The channel holds a page and a gap: the first answer always fits.
            let _ = tx.try_send(Ok(event.message()));
        }
        let user = caller.user;
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                let beat = tokio::select! {
                    () = tx.closed() => return,
                    () = subscription.changed() => false,
                    _ = ticks.tick() => true,
                };
                if beat {
                    if tx.send(Ok(heartbeat())).await.is_err() {
                        return;
                    }
                    continue;
                }
                let history = match store.list_revisions(&user, PAGE).await {
                    Ok(history) => history,
                    Err(err) => {
                        let _ = tx.send(Err(status::storage_error(err))).await;
                        return;
                    }
                };
                let (events, now) = catch_up(&sent, &history);
                sent = now;
                for event in events {
                    if tx.send(Ok(event.message())).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|message| (message, rx))
        })))
    }
}

#[cfg(test)]
mod tests;
