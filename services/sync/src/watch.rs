//! WatchImage and WatchCommits (issue 40): revisions as they are committed, for one user or
//! for every user.
//!
//! A WatchImage stream subscribes to the user's commits (`snug_revstore::Revisions`) before it
//! reads anything, so a commit landing between a read and the next wait still wakes it. Each
//! wake reads the user's history (newest first, one page) and `snug_rpc::watch::catch_up`
//! decides what to send from the last thing sent. A heartbeat reads nothing: at ten thousand
//! idle streams a read per heartbeat was most of the hub's idle CPU. The stream runs as a task
//! that ends when the caller goes away, holding one subscription and the page it last read.
//!
//! A WatchCommits stream forwards what a subscriber of every user hears
//! ([`snug_revstore::Change`]) — user ids and resets — and reads nothing at all: it is what keeps
//! a gateway's cache of heads correct, one stream per gateway.

use std::time::Duration;

use snug_proto::sync::v1 as pb;
use snug_revstore::{Change, RevStore as _};
use snug_rpc::{
    chunks::ResponseStream,
    watch::{PAGE, Sent, catch_up},
};
use tokio::sync::mpsc;
use tonic::Status;

use crate::{SyncServer, convert, status};

/// The heartbeat when the request names none, and the bounds of one it names.
const HEARTBEAT: Duration = Duration::from_secs(15);
const HEARTBEAT_SECONDS: std::ops::RangeInclusive<u32> = 1..=300;

/// The heartbeat a request asks for.
fn heartbeat_every(seconds: u32) -> Result<Duration, Status> {
    match seconds {
        0 => Ok(HEARTBEAT),
        s if HEARTBEAT_SECONDS.contains(&s) => Ok(Duration::from_secs(s.into())),
        _ => Err(snug_rpc::status::invalid_argument(
            crate::error_info::DOMAIN,
            "heartbeat_seconds",
            "between 1 and 300",
        )),
    }
}

/// The first tick of a heartbeat one period from now.
fn ticks(every: Duration) -> tokio::time::Interval {
    tokio::time::interval_at(tokio::time::Instant::now() + every, every)
}

/// The stream a task feeds through `rx`.
fn stream_of<T: Send + 'static>(rx: mpsc::Receiver<Result<T, Status>>) -> ResponseStream<T> {
    Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|message| (message, rx))
    }))
}

fn image_heartbeat() -> pb::WatchImageResponse {
    pb::WatchImageResponse {
        event: Some(pb::watch_image_response::Event::Heartbeat(
            pb::watch_image_response::Heartbeat {},
        )),
    }
}

impl SyncServer {
    /// The user's history, newest first, one page, as the proto says it.
    async fn history(
        store: &crate::AnyStore,
        user: &snug_revstore::UserId,
    ) -> Result<Vec<pb::RevisionInfo>, Status> {
        let history = store
            .list_revisions(user, PAGE)
            .await
            .map_err(status::storage_error)?;
        Ok(history.into_iter().map(convert::revision_info).collect())
    }

    pub(crate) async fn watch_image(
        &self,
        request: pb::WatchImageRequest,
    ) -> Result<ResponseStream<pb::WatchImageResponse>, Status> {
        let caller = convert::caller(request.caller, "caller")?;
        let sent = match request.after_revision {
            Some(token) => Sent::Revision(convert::revision(token, "after_revision")?.to_string()),
            None => Sent::Nothing,
        };
        let every = heartbeat_every(request.heartbeat_seconds)?;
        let store = self.store.clone();
        let mut subscription = store.revisions().subscribe(&caller.user);
        // The first read answers before the stream does: a storage failure is the call's status.
        let history = Self::history(&store, &caller.user).await?;
        let (first, mut sent) = catch_up(&sent, &history);
        let (tx, rx) = mpsc::channel::<Result<pb::WatchImageResponse, Status>>(PAGE + 2);
        for event in first {
            // The channel holds a page and a gap: the first answer always fits.
            let _ = tx.try_send(Ok(event.message()));
        }
        let user = caller.user;
        tokio::spawn(async move {
            let mut ticks = ticks(every);
            loop {
                let beat = tokio::select! {
                    () = tx.closed() => return,
                    () = subscription.changed() => false,
                    _ = ticks.tick() => true,
                };
                if beat {
                    if tx.send(Ok(image_heartbeat())).await.is_err() {
                        return;
                    }
                    continue;
                }
                let history = match Self::history(&store, &user).await {
                    Ok(history) => history,
                    Err(err) => {
                        let _ = tx.send(Err(err)).await;
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
        Ok(stream_of(rx))
    }

    pub(crate) async fn watch_commits(
        &self,
        request: pb::WatchCommitsRequest,
    ) -> Result<ResponseStream<pb::WatchCommitsResponse>, Status> {
        use pb::watch_commits_response::{Event, Heartbeat, Reset};
        let every = heartbeat_every(request.heartbeat_seconds)?;
        let mut changes = self.store.revisions().watch_all();
        let (tx, rx) = mpsc::channel::<Result<pb::WatchCommitsResponse, Status>>(256);
        tokio::spawn(async move {
            let mut ticks = ticks(every);
            loop {
                let event = tokio::select! {
                    () = tx.closed() => return,
                    change = changes.next() => match change {
                        Change::User(user) => Event::Committed(user.as_str().to_owned()),
                        Change::Reset { live } => Event::Reset(Reset { live }),
                    },
                    _ = ticks.tick() => Event::Heartbeat(Heartbeat {}),
                };
                let message = pb::WatchCommitsResponse { event: Some(event) };
                if tx.send(Ok(message)).await.is_err() {
                    return;
                }
            }
        });
        Ok(stream_of(rx))
    }
}
