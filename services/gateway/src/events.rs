//! `GET /userdb/events` (issue 40 point 1): the caller's revisions as Server-Sent Events, from
//! the user's reader in this gateway (`backend/heads.rs`, which follows the sync service's
//! commits), so a device learns of another's push within milliseconds instead of polling.
//!
//! What a stream says, in order ([`frame`]): a `retry:` hint; then `event: revision` for the
//! current revision and for each one committed after it (oldest first), its `id:` the
//! revision's ETag and its `data:` what the caller's own `HEAD /userdb` shows (revision, size,
//! SHA-256, storage version); `event: no-image` when the user has no image (HEAD's 404);
//! `event: gap` when revisions may have been committed that the stream does not list (the
//! client reads the head; a `revision` event follows); a comment line as a heartbeat, so
//! proxies keep an idle stream open; and `event: error` (`{code, message, retryable}`, the
//! JSON of every refusal) when the hub ends a stream itself (a storage failure, a shutdown).
//! A client that reconnects sends `Last-Event-ID` (the id it last received) and hears every
//! revision committed after it.
//!
//! A stream holds a place among its user's subscribers (one reader per user and gateway,
//! `backend/heads.rs`) and what it sent last, and lasts at most
//! `SNUG_EVENTS_STREAM_LIFETIME`: then the hub ends it with a retryable `event: error` and the
//! client reconnects, authenticating again. A credential that stops admitting its caller (a
//! token revoked, a user disabled, removed or erased, a session ended) ends its streams sooner:
//! each stream checks its credential again whenever the users directory hears such a change
//! (`Auth::revoked`), and ends with the 401's `event: error` (`UNAUTHENTICATED`, not retryable). The gateway's shutdown ends every stream the same way ([`Streams::close`]), so the
//! process need not wait on streams that never end.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use axum::http::{HeaderMap, HeaderValue, header};
use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use serde_json::json;
use snug_proto::sync::v1 as sync_pb;
use tokio::sync::watch;

use snug_rpc::watch::{Sent, catch_up};

use crate::{backend::Heard, config::Caps, error::ApiError, etag};

/// How long a client waits before reconnecting, as the stream tells it (`retry:`).
const RETRY_MILLIS: u32 = 2000;

/// The streams of one gateway: counted against their caps while open, ended together at
/// shutdown.
#[derive(Debug)]
pub struct Streams {
    caps: Caps,
    open: Arc<Mutex<Open>>,
    closing: watch::Sender<bool>,
}

/// The streams open now.
#[derive(Debug, Default)]
struct Open {
    all: usize,
    users: HashMap<String, usize>,
    addresses: HashMap<IpAddr, usize>,
}

fn lock(open: &Mutex<Open>) -> MutexGuard<'_, Open> {
    // Every change below completes under the lock: a poisoned count is still whole.
    open.lock().unwrap_or_else(|e| e.into_inner())
}

/// One admitted stream's place among the open ones, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Admitted {
    open: Arc<Mutex<Open>>,
    user: String,
    address: Option<IpAddr>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        open.all -= 1;
        release(&mut open.users, &self.user);
        if let Some(address) = &self.address {
            release(&mut open.addresses, address);
        }
        set_gauge(open.all);
    }
}

/// One fewer under `key`, the entry gone at none.
fn release<K: std::hash::Hash + Eq + Clone>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(key);
        }
    }
}

fn set_gauge(open: usize) {
    let open = i64::try_from(open).unwrap_or(i64::MAX);
    snug_rpc::metrics::global().events_streams.set(open);
}

impl Streams {
    /// No stream open yet, at most `caps`.
    pub fn new(caps: Caps) -> Self {
        Self {
            caps,
            open: Arc::default(),
            closing: watch::Sender::new(false),
        }
    }

    /// Counts a new stream of `user` from the client `address` (the caller's, as the
    /// authentication prologue found it), or refuses it: over the user's or the address's cap
    /// with 429 `RATE_LIMITED`, over the gateway's with 503 `OVERLOADED`. Without an address (a
    /// trusted proxy's own request, a router driven in-process) only the user's cap and the
    /// gateway's count.
    pub(crate) fn admit(&self, user: &str, address: Option<IpAddr>) -> Result<Admitted, ApiError> {
        let mut open = lock(&self.open);
        if open.users.get(user).copied().unwrap_or(0) >= self.caps.per_user {
            return Err(ApiError::from_reason(
                &snug_reasons::gateway::RATE_LIMITED,
                format!(
                    "this user has {} event streams open, the most one user may; close one",
                    self.caps.per_user
                ),
            ));
        }
        if address
            .is_some_and(|a| open.addresses.get(&a).copied().unwrap_or(0) >= self.caps.per_address)
        {
            return Err(ApiError::from_reason(
                &snug_reasons::gateway::RATE_LIMITED,
                format!(
                    "this address has {} event streams open, the most one address may; close one",
                    self.caps.per_address
                ),
            ));
        }
        if open.all >= self.caps.max {
            return Err(ApiError::from_reason(
                &snug_reasons::gateway::GATEWAY_OVERLOADED,
                "this gateway holds as many event streams as it may; retry shortly",
            ));
        }
        open.all += 1;
        *open.users.entry(user.to_owned()).or_default() += 1;
        if let Some(address) = address {
            *open.addresses.entry(address).or_default() += 1;
        }
        set_gauge(open.all);
        Ok(Admitted {
            open: Arc::clone(&self.open),
            user: user.to_owned(),
            address,
        })
    }

    /// Ends every stream, now and from now on, with a retryable `event: error`.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// The body of an event stream for a subscriber who was sent `sent` (from `Last-Event-ID`)
    /// and hears `heard` (its user's reader, `backend::Watching`): each history read framed as
    /// the events that bring the client up to it, heartbeats as comments; ended with an
    /// `event: error` when a read fails, at the stream's lifetime, or when the gateway closes.
    pub(crate) fn body(
        &self,
        heard: impl Stream<Item = Heard> + Send + 'static,
        sent: Sent,
        lifetime: Duration,
        revoked: impl Future<Output = ApiError> + Send + 'static,
        admitted: Admitted,
    ) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static {
        let mut closing = self.closing.subscribe();
        let ended = Arc::new(Mutex::new(None::<ApiError>));
        let why = ended.clone();
        let closed = async move {
            // A dropped sender is a gateway gone: closed as well.
            let closed = closing.wait_for(|closing| *closing);
            tokio::select! {
                _ = tokio::time::timeout(lifetime, closed) => {}
                refused = revoked => *why.lock().unwrap_or_else(|e| e.into_inner()) = Some(refused),
            }
        };
        let opening =
            futures::stream::once(async { Ok(Bytes::from(format!("retry: {RETRY_MILLIS}\n\n"))) });
        // The first read brings the client to the current revision; revisions after it were
        // committed while the stream was open, and their delivery lag is measured from their
        // acceptance.
        let mut sent = sent;
        let mut live = false;
        let framed = heard
            .flat_map(move |heard| {
                let frames: Vec<Result<Bytes, ApiError>> = match heard {
                    Heard::Heartbeat => {
                        let beat = heartbeat();
                        observe(&beat, live);
                        vec![Ok(frame(&beat))]
                    }
                    Heard::History(Ok(history)) => {
                        let (events, now) = catch_up(&sent, &history);
                        sent = now;
                        let frames = events
                            .into_iter()
                            .map(|event| {
                                let message = event.message();
                                observe(&message, live);
                                Ok(frame(&message))
                            })
                            .collect();
                        live = true;
                        frames
                    }
                    Heard::History(Err(err)) => vec![Err(err)],
                };
                futures::stream::iter(frames)
            })
            .take_until(closed)
            .chain(futures::stream::once(async move {
                let revoked = ended.lock().unwrap_or_else(|e| e.into_inner()).take();
                Err(revoked.unwrap_or_else(|| {
                    ApiError::from_reason(
                        &snug_reasons::gateway::SERVICE_UNAVAILABLE,
                        "the hub ended the stream; reconnect",
                    )
                }))
            }));
        // Once an error is sent the stream ends: nothing follows it.
        let mut ended = false;
        let framed = framed.filter_map(move |item| {
            let out = match (ended, item) {
                (true, _) => None,
                (false, Ok(bytes)) => Some(bytes),
                (false, Err(err)) => {
                    ended = true;
                    Some(error_frame(&err))
                }
            };
            std::future::ready(out)
        });
        // The stream holds its place among the open ones until the client or the hub ends it.
        opening.chain(framed.map(move |bytes| {
            let _held = &admitted;
            Ok(bytes)
        }))
    }
}

fn heartbeat() -> sync_pb::WatchImageResponse {
    sync_pb::WatchImageResponse {
        event: Some(sync_pb::watch_image_response::Event::Heartbeat(
            sync_pb::watch_image_response::Heartbeat {},
        )),
    }
}

/// Counts an event sent and, for a revision committed while the stream was open, how long
/// after its acceptance it went out.
fn observe(event: &sync_pb::WatchImageResponse, live: bool) {
    use sync_pb::watch_image_response::Event;
    let metrics = snug_rpc::metrics::global();
    let name = match &event.event {
        Some(Event::Revision(info)) => {
            if live && let Some(accepted) = &info.accepted_at {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                let accepted = Duration::new(
                    u64::try_from(accepted.seconds).unwrap_or(0),
                    u32::try_from(accepted.nanos).unwrap_or(0),
                );
                metrics
                    .events_delivery_lag
                    .observe(now.saturating_sub(accepted).as_secs_f64());
            }
            "revision"
        }
        Some(Event::NoImage(_)) => "no-image",
        Some(Event::Gap(_)) => "gap",
        Some(Event::Heartbeat(_)) | None => "heartbeat",
    };
    metrics
        .events_sent
        .get_or_create(&snug_rpc::metrics::EventLabels { event: name })
        .inc();
}

/// The frame of one event.
pub(crate) fn frame(event: &sync_pb::WatchImageResponse) -> Bytes {
    use sync_pb::watch_image_response::Event;
    let text = match &event.event {
        Some(Event::Revision(info)) => {
            let data = json!({
                "revision": info.revision,
                "size": info.size,
                "sha256": info.sha256,
                "storageVersion": info.storage_version,
            });
            // A revision token is `[A-Za-z0-9._~-]`: nothing in it can break a line.
            match etag::is_revision(&info.revision) {
                true => format!(
                    "event: revision\nid: \"{}\"\ndata: {data}\n\n",
                    info.revision
                ),
                false => format!("event: revision\ndata: {data}\n\n"),
            }
        }
        Some(Event::NoImage(_)) => "event: no-image\ndata: {}\n\n".to_owned(),
        Some(Event::Gap(_)) => "event: gap\ndata: {}\n\n".to_owned(),
        Some(Event::Heartbeat(_)) | None => ": heartbeat\n\n".to_owned(),
    };
    Bytes::from(text)
}

/// The frame of the refusal that ends a stream.
fn error_frame(err: &ApiError) -> Bytes {
    let data = json!({
        "code": err.code,
        "message": err.message,
        "retryable": err.retryable,
    });
    Bytes::from(format!("event: error\ndata: {data}\n\n"))
}

/// The revision a reconnecting client names in `Last-Event-ID` (an id this stream sent: the
/// revision's ETag), `None` without one; a value that is no revision is refused.
pub(crate) fn last_event_id(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    if text.is_empty() {
        return Ok(None);
    }
    let revision = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    if etag::is_revision(revision) {
        Ok(Some(revision.to_owned()))
    } else {
        Err(ApiError::from_reason(
            &snug_reasons::gateway::BAD_REQUEST,
            "Last-Event-ID is not an id this stream sends (a revision's ETag)",
        ))
    }
}

/// The longest wait a long poll is granted (`Prefer: wait=N`, RFC 7240), in seconds.
pub const MAX_WAIT_SECONDS: u64 = 60;

/// The wait a request prefers (`Prefer: wait=N`), at most [`MAX_WAIT_SECONDS`]; `None`
/// without one (or with one that is no number of seconds).
pub fn preferred_wait(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split([',', ';']))
        .find_map(|preference| {
            let (name, value) = preference.split_once('=')?;
            if !name.trim().eq_ignore_ascii_case("wait") {
                return None;
            }
            let seconds: u64 = value.trim().trim_matches('"').parse().ok()?;
            Some(Duration::from_secs(seconds.min(MAX_WAIT_SECONDS)))
        })
}

/// The headers of an event stream.
pub(crate) fn stream_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // nginx buffers responses unless told not to; an event must not wait in a buffer.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
}

#[cfg(test)]
mod tests;
