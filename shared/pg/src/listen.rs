//! One connection that LISTENs on a channel: the notifications of every session's
//! `pg_notify` on it, delivered in commit order, and a way to tell that the connection is still
//! there.
//!
//! A listening connection is not pooled: it must stay the same session for as long as it
//! listens. It connects with the pool's rules (the same URL, TLS and schema). Its driver runs as
//! a task of its own; the notifications reach the [`Listening`] through a channel, which ends
//! when the connection does.
//!
//! [`follow`] keeps a channel listened to for good: it finds out a lost connection (an error, or
//! a ping unanswered, which is how a silent network shows), says so, listens again backing off,
//! and says when it listens again, so its caller can make good the notifications that were lost.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client};

use crate::{PgConfig, PgError};

/// How often a followed connection is asked whether it is still there.
const PING_EVERY: Duration = Duration::from_secs(15);
/// How long an answer may take before the connection counts as lost.
const PING_WITHIN: Duration = Duration::from_secs(5);
/// The first wait before listening again, doubled up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What following a channel hears ([`follow`]).
#[derive(Debug)]
pub enum Heard<'a> {
    /// A notification's payload.
    Notification(&'a str),
    /// The connection is lost: notifications are lost until [`Heard::Listening`].
    Lost(&'a ListenError),
    /// Listening again: notifications sent while lost are gone.
    Listening,
}

/// Serves `listening` (on `channel`, connected as `pg` says), then listens again whenever it is
/// lost, for as long as the future runs, telling `hear` what happens.
pub async fn follow(
    pg: PgConfig,
    channel: String,
    mut listening: Listening,
    mut hear: impl FnMut(Heard<'_>) + Send,
) {
    loop {
        let err = serve(&mut listening, &mut hear).await;
        hear(Heard::Lost(&err));
        let mut backoff = MIN_BACKOFF;
        listening = loop {
            tokio::time::sleep(backoff).await;
            match listen(&pg, &channel).await {
                Ok(listening) => break listening,
                Err(err) => {
                    tracing::warn!(error = %err, channel, retry_in = ?backoff, "cannot listen on a PostgreSQL channel");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        };
        hear(Heard::Listening);
    }
}

/// Hears each notification until the connection is lost.
async fn serve(listening: &mut Listening, hear: &mut impl FnMut(Heard<'_>)) -> ListenError {
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    loop {
        tokio::select! {
            next = listening.next() => match next {
                Ok(payload) => hear(Heard::Notification(&payload)),
                Err(err) => return err,
            },
            _ = ping.tick() => {
                if let Err(err) = listening.ping(PING_WITHIN).await {
                    return err;
                }
            }
        }
    }
}

/// A connection listening on one channel.
pub struct Listening {
    client: Client,
    notifications: mpsc::UnboundedReceiver<Result<String, tokio_postgres::Error>>,
}

impl std::fmt::Debug for Listening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listening").finish_non_exhaustive()
    }
}

/// Why listening stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// The connection could not be set up as configured.
    #[error(transparent)]
    Config(#[from] PgError),
    /// The server refused or the connection failed.
    #[error("the PostgreSQL listening connection failed")]
    Connection(#[from] tokio_postgres::Error),
    /// The connection ended, or did not answer a ping in time.
    #[error("the PostgreSQL listening connection was lost")]
    Lost,
}

/// Connects as `pg` says and LISTENs on `channel` (a plain identifier: lowercase letters,
/// digits and `_`, at most 63 bytes).
pub async fn listen(pg: &PgConfig, channel: &str) -> Result<Listening, ListenError> {
    if !crate::valid_schema(channel) {
        return Err(PgError::Schema(channel.to_owned()).into());
    }
    let (mut config, tls) = crate::connector(pg)?;
    // Named for its channel, so an operator (or a test) can tell the session in
    // `pg_stat_activity`.
    config.application_name(channel);
    let (client, mut connection) = config.connect(tls).await?;
    let (send, notifications) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if send.send(Ok(n.payload().to_owned())).is_err() {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(err)) => {
                    let _ = send.send(Err(err));
                    return;
                }
                // Closed: the receiver sees the channel end.
                None => return,
            }
        }
    });
    client.batch_execute(&format!("LISTEN {channel}")).await?;
    Ok(Listening {
        client,
        notifications,
    })
}

impl Listening {
    /// The next notification's payload; an error once the connection is gone (the caller then
    /// listens again, having possibly missed notifications in between).
    pub async fn next(&mut self) -> Result<String, ListenError> {
        match self.notifications.recv().await {
            Some(Ok(payload)) => Ok(payload),
            Some(Err(err)) => Err(err.into()),
            None => Err(ListenError::Lost),
        }
    }

    /// Asks the server for an answer within `within`: a connection a network failure left
    /// silent is found out by asking, since no notification says so.
    pub async fn ping(&self, within: Duration) -> Result<(), ListenError> {
        match tokio::time::timeout(within, self.client.batch_execute("SELECT 1")).await {
            Ok(answered) => Ok(answered?),
            Err(_) => Err(ListenError::Lost),
        }
    }
}
