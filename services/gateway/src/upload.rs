//! A request body on its way to a service: read once, in order, and streamed on, never held
//! whole (issue 37: the image crosses each process boundary once, and the service that stores
//! it is the one that holds it).
//!
//! [`Upload`] is the extractor of every route that takes a body: it checks the media type,
//! reads the declared length, and hands the body on as [`Upload::chunks`], a stream of pieces
//! of at most one gRPC chunk. The body's health travels beside the stream in a [`BodyWatch`]:
//! a body that breaks off or goes idle for the upload idle timeout does not end the stream (a
//! service would take a short upload for a whole one, when it declared no length); the stream
//! stays pending and the watch reports the failure, which the caller answers while it drops the
//! call, so the service sees the call cancelled and keeps nothing. Once the body has ended the
//! watch says so, and the call's deadline starts: the time a client takes to send is bounded by
//! the idle timeout of each piece, not by the deadline of the call that follows, and by the
//! process's pace (`snug_rpc::pace`): a body that falls behind the minimum rate after its grace
//! is refused the same way, so a client dripping a large declared body holds nothing for long.
//! A body in a content coding the route takes (`encoding.rs`: zstd on the delta routes) is
//! decoded as it is read; the idle timeout and the pace hold for the bytes as sent.

use std::time::Duration;

use axum::{
    body::Body,
    extract::{FromRequest, Request},
    http::{HeaderMap, header},
};
use bytes::{Bytes, BytesMut};
use futures::Stream;
use http_body_util::BodyExt as _;
use snug_rpc::{chunks::CHUNK_SIZE, pace::Paced};
use tokio::sync::watch;

use crate::{
    AppState,
    encoding::{Coding, FRAME_HEADER_MAX, Inflate, TakesZstd, declared_size, request_coding},
    error::ApiError,
};

/// Small frames are gathered into pieces of at least this much before they go on (a message per
/// 16 KiB frame would cost the service a decode and an allocation each).
const GATHER: usize = 256 * 1024;

/// How long gathered bytes wait for more before they go on anyway.
const FLUSH_AFTER: Duration = Duration::from_millis(100);

/// The body of a request, not yet read.
pub struct Upload {
    source: Source,
    /// Bytes read ahead ([`Upload::leading`]), first in [`Upload::chunks`].
    read: BytesMut,
    /// `Content-Length`, when the client declared one and the body is not coded.
    content_length: Option<u64>,
}

/// Where a body's bytes come from: the request, within the idle timeout and the pace (both of
/// the bytes as sent), decoded when coded.
struct Source {
    body: Body,
    idle: Duration,
    /// The body's progress against the pace, from when its headers arrived.
    paced: Paced,
    inflate: Option<Inflate>,
}

impl Source {
    /// The next bytes of the body; `None` at its end.
    async fn next(&mut self) -> Result<Option<Bytes>, ApiError> {
        let Some(inflate) = &mut self.inflate else {
            return next_frame(&mut self.body, self.idle, &mut self.paced).await;
        };
        loop {
            let decoded = inflate.take(CHUNK_SIZE)?;
            if !decoded.is_empty() {
                return Ok(Some(decoded));
            }
            match next_frame(&mut self.body, self.idle, &mut self.paced).await? {
                Some(sent) => inflate.give(sent),
                None => return inflate.finish().map(|()| None),
            }
        }
    }
}

impl<S> FromRequest<S> for Upload
where
    S: AsRef<AppState> + Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let (parts, body) = request.into_parts();
        octet_stream(&parts.headers)?;
        let takes_zstd = parts.extensions.get::<TakesZstd>().is_some();
        let (content_length, inflate) = match request_coding(&parts.headers, takes_zstd)? {
            Coding::Identity => (declared_length(&parts.headers), None),
            Coding::Zstd => (None, Some(Inflate::new()?)),
        };
        Ok(Self {
            source: Source {
                body,
                idle: state.as_ref().settings.upload_idle_timeout,
                paced: Paced::start(state.as_ref().upload_pace),
                inflate,
            },
            read: BytesMut::new(),
            content_length,
        })
    }
}

/// How a body's reading went, as the stream's consumer cannot see it.
#[derive(Debug, Clone)]
enum State {
    Streaming,
    Ended,
    Failed(ApiError),
}

/// The health of a body being streamed: ended, failed, or still arriving.
#[derive(Debug, Clone)]
pub struct BodyWatch(watch::Receiver<State>);

impl BodyWatch {
    /// Completes with the body's failure; pending for as long as the body is sound.
    pub async fn failed(&mut self) -> ApiError {
        loop {
            if let State::Failed(err) = &*self.0.borrow_and_update() {
                return err.clone();
            }
            if self.0.changed().await.is_err() {
                // The reader is gone without failing: it ended, or was dropped with the call.
                return std::future::pending().await;
            }
        }
    }

    /// Completes once the whole body has arrived; pending while it streams or after it failed.
    pub async fn ended(&mut self) {
        loop {
            if matches!(&*self.0.borrow_and_update(), State::Ended) {
                return;
            }
            if self.0.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}

impl Upload {
    /// The `Content-Length` of a body as it is (refused over the quota before it is read).
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// The length the body will have once decoded, when it is declared: its `Content-Length`, or
    /// for a coded body the size its first frame declares (read from its first bytes as sent,
    /// which are then decoded first, and held to it: `encoding.rs`).
    pub async fn declared(&mut self) -> Result<Option<u64>, ApiError> {
        let source = &mut self.source;
        let Some(inflate) = &mut source.inflate else {
            return Ok(self.content_length);
        };
        let mut head = BytesMut::new();
        while head.len() < FRAME_HEADER_MAX {
            match next_frame(&mut source.body, source.idle, &mut source.paced).await? {
                Some(sent) => head.extend_from_slice(&sent),
                None => break,
            }
        }
        let declared = declared_size(&head);
        if let Some(length) = declared {
            inflate.declare(length);
        }
        inflate.give(head.freeze());
        Ok(declared)
    }

    /// Reads until at least `n` bytes arrived (or the body ended) and returns them, for a check
    /// of the leading bytes before anything is sent on; they stay first in [`Upload::chunks`].
    pub async fn leading(&mut self, n: usize) -> Result<&[u8], ApiError> {
        while self.read.len() < n {
            match self.source.next().await? {
                Some(data) => self.read.extend_from_slice(&data),
                None => break,
            }
        }
        Ok(&self.read[..])
    }

    /// The body as pieces of at most [`CHUNK_SIZE`], with the watch of its health.
    pub fn chunks(self) -> (impl Stream<Item = Bytes> + Send + 'static, BodyWatch) {
        let (tx, rx) = watch::channel(State::Streaming);
        let stream = futures::stream::unfold(
            Some((self.source, self.read, tx)),
            move |state| async move {
                let (mut source, mut gathered, tx) = state?;
                loop {
                    if gathered.len() >= GATHER {
                        let piece = piece(&mut gathered);
                        return Some((piece, Some((source, gathered, tx))));
                    }
                    // Bytes gathered go on once the client pauses: the service holds the upload
                    // to the same pace, and must see what arrived when it arrived.
                    let next = if gathered.is_empty() {
                        source.next().await
                    } else {
                        match tokio::time::timeout(FLUSH_AFTER, source.next()).await {
                            Ok(next) => next,
                            Err(_) => {
                                let piece = piece(&mut gathered);
                                return Some((piece, Some((source, gathered, tx))));
                            }
                        }
                    };
                    match next {
                        Ok(Some(data)) => gathered.extend_from_slice(&data),
                        Ok(None) if gathered.is_empty() => {
                            let _ = tx.send(State::Ended);
                            return None;
                        }
                        Ok(None) => {
                            let piece = piece(&mut gathered);
                            if gathered.is_empty() {
                                let _ = tx.send(State::Ended);
                                // The last piece goes out; the next poll ends the stream.
                                return Some((piece, None));
                            }
                            return Some((piece, Some((source, gathered, tx))));
                        }
                        Err(err) => {
                            let _ = tx.send(State::Failed(err));
                            // Never a clean end: the caller answers the failure and drops the call.
                            return std::future::pending().await;
                        }
                    }
                }
            },
        );
        (stream, BodyWatch(rx))
    }
}

/// The next piece to send on: at most a chunk of what is gathered.
fn piece(gathered: &mut BytesMut) -> Bytes {
    gathered.split_to(gathered.len().min(CHUNK_SIZE)).freeze()
}

/// The next data frame of `body` within `idle` and the pace; `None` at its end.
async fn next_frame(
    body: &mut Body,
    idle: Duration,
    paced: &mut Paced,
) -> Result<Option<Bytes>, ApiError> {
    loop {
        let frame = paced
            .within(tokio::time::timeout(idle, body.frame()))
            .await
            .map_err(|behind| {
                ApiError::from_reason(&snug_reasons::gateway::BODY_INCOMPLETE, behind.to_string())
            })?
            .map_err(|_| {
                ApiError::from_reason(
                    &snug_reasons::gateway::BODY_INCOMPLETE,
                    "the upload stalled; send the body without pauses",
                )
            })?;
        match frame {
            None => return Ok(None),
            Some(Err(_)) => {
                return Err(ApiError::from_reason(
                    &snug_reasons::gateway::BODY_INCOMPLETE,
                    "the upload broke off before its end",
                ));
            }
            Some(Ok(frame)) => {
                // Trailers carry no bytes of the upload.
                if let Ok(data) = frame.into_data()
                    && !data.is_empty()
                {
                    paced.received(data.len() as u64);
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// Refuses a body that is not `application/octet-stream`: every body this API takes is bytes.
fn octet_stream(headers: &HeaderMap) -> Result<(), ApiError> {
    let octet_stream = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/octet-stream"));
    if octet_stream {
        Ok(())
    } else {
        Err(ApiError::from_reason(
            &snug_reasons::gateway::UNSUPPORTED_MEDIA_TYPE,
            "request bodies (user DBs, delta manifests and deltas) must be application/octet-stream",
        ))
    }
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}
