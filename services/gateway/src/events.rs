//! `GET /userdb/events` (issue 40 point 1): the caller's revisions as Server-Sent Events, over
//! the sync service's WatchImage, so a device learns of another's push within milliseconds
//! instead of polling.
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
//! A stream holds one call to the sync service and nothing else, and lasts at most
//! `SNUG_EVENTS_STREAM_LIFETIME`: then the hub ends it with a retryable `event: error` and the
//! client reconnects, authenticating again, so a revoked credential keeps no stream past that
//! bound. The gateway's shutdown ends every stream the same way ([`Streams::close`]), so the
//! process need not wait on streams that never end.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use serde_json::json;
use snug_proto::sync::v1 as sync_pb;
use tokio::sync::watch;

use crate::{error::ApiError, etag};

/// Seconds between heartbeats the gateway asks of the sync service.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// How long a client waits before reconnecting, as the stream tells it (`retry:`).
const RETRY_MILLIS: u32 = 2000;

/// The streams of one gateway: ended together at shutdown.
#[derive(Debug)]
pub struct Streams {
    closing: watch::Sender<bool>,
}

impl Default for Streams {
    fn default() -> Self {
        Self {
            closing: watch::Sender::new(false),
        }
    }
}

impl Streams {
    /// Ends every stream, now and from now on, with a retryable `event: error`.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// `events` as the body of an event stream: framed, ended with an `event: error` when the
    /// service fails or the gateway closes.
    pub(crate) fn body(
        &self,
        events: impl Stream<Item = Result<sync_pb::WatchImageResponse, tonic::Status>> + Send + 'static,
        lifetime: Duration,
    ) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static {
        let mut closing = self.closing.subscribe();
        let closed = async move {
            // A dropped sender is a gateway gone: closed as well.
            let closed = closing.wait_for(|closing| *closing);
            let _ = tokio::time::timeout(lifetime, closed).await;
        };
        let opening =
            futures::stream::once(async { Ok(Bytes::from(format!("retry: {RETRY_MILLIS}\n\n"))) });
        let framed = events
            .map(|event| match event {
                Ok(event) => Ok(frame(&event)),
                Err(status) => Err(ApiError::from_status(&status)),
            })
            .take_until(closed)
            .chain(futures::stream::once(async {
                Err(ApiError::from_reason(
                    &snug_reasons::gateway::SERVICE_UNAVAILABLE,
                    "the hub ended the stream; reconnect",
                ))
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
        opening.chain(framed.map(Ok))
    }
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
