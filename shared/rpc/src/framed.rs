//! Result-then-chunks responses framed without copying their payload.
//!
//! tonic encodes every response message into its own buffer, so each chunk of a download is
//! copied once more before it reaches the transport: for a 64 MiB unlock that is 64 MiB of copies
//! into freshly allocated buffers on the server's critical path. A chunk message, though, is just
//! its gRPC frame header, its protobuf field header and the chunk's bytes, so the methods that
//! stream large payloads answer through [`Override`] with a body of exactly those bytes: a few
//! header bytes of their own, then the payload's slices as they are. What goes on the wire is what
//! tonic would have sent, message for message; the tests check it byte for byte and through a
//! generated client.

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use bytes::{BufMut as _, Bytes, BytesMut};
use futures::{Stream, StreamExt as _};
use http_body::Frame;
use prost::Message;
use tonic::{Status, body::Body, codec::Codec as _, server::NamedService};

use crate::chunks::{self, Chunked, MAX_MESSAGE_SIZE};

/// The gRPC message header: a compression flag and a big-endian length.
const GRPC_HEADER: usize = 5;

/// How a response type's chunk messages are framed: the protobuf field header of its chunk field,
/// or `None` when the message built by [`Chunked::chunk`] is not that field alone (then chunks are
/// encoded like any message).
fn chunk_tag<M: Chunked + Message>() -> Option<Bytes> {
    chunk_tag_of(&M::chunk)
}

/// [`chunk_tag`] for the messages `chunk` builds.
fn chunk_tag_of<M: Message>(chunk: &impl Fn(Bytes) -> M) -> Option<Bytes> {
    // A one-byte chunk encodes as the field's key, the length 1 and the byte.
    let probe = chunk(Bytes::from_static(&[0xA5])).encode_to_vec();
    let key = probe.strip_suffix(&[0x01, 0xA5])?;
    // A key is one varint of at most five bytes, with the length-delimited wire type.
    let well_formed = !key.is_empty()
        && key.len() <= 5
        && key[..key.len() - 1].iter().all(|b| b & 0x80 != 0)
        && key[key.len() - 1] & 0x80 == 0
        && key[0] & 0x07 == 2;
    well_formed.then(|| Bytes::copy_from_slice(key))
}

/// One encoded message with its gRPC header (a small copy, for the result message).
fn encode_message(message: &impl Message) -> Bytes {
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(GRPC_HEADER + len);
    buf.put_u8(0);
    buf.put_u32(len as u32);
    message
        .encode(&mut buf)
        .expect("the buffer was sized to the message");
    buf.freeze()
}

/// The frames of one chunk message: its headers, then the chunk itself.
fn chunk_frames(key: &Bytes, chunk: Bytes) -> [Bytes; 2] {
    let mut len_prefix = BytesMut::with_capacity(10);
    prost::encoding::encode_varint(chunk.len() as u64, &mut len_prefix);
    let message_len = key.len() + len_prefix.len() + chunk.len();
    let mut head = BytesMut::with_capacity(GRPC_HEADER + key.len() + len_prefix.len());
    head.put_u8(0);
    head.put_u32(message_len as u32);
    head.put_slice(key);
    head.put_slice(&len_prefix);
    [head.freeze(), chunk]
}

/// A response of `result`, then `payload` as chunk messages of at most [`chunks::CHUNK_SIZE`]
/// bytes. A piece that fails ends the response with its status (the client sees
/// the call fail, never a short payload as a success).
pub fn respond<M, P>(result: M, payload: P) -> http::Response<Body>
where
    M: Chunked + Message + Send + 'static,
    P: Stream<Item = Result<Bytes, Status>> + Send + 'static,
{
    respond_with(result, payload, M::chunk)
}

/// [`respond`] with chunk messages built by `chunk`, which the tests use to check a builder that
/// is not a lone chunk field.
fn respond_with<M, P>(
    result: M,
    payload: P,
    chunk: impl Fn(Bytes) -> M + Send + 'static,
) -> http::Response<Body>
where
    M: Message + Send + 'static,
    P: Stream<Item = Result<Bytes, Status>> + Send + 'static,
{
    let key = chunk_tag_of(&chunk);
    let first = futures::stream::once(async move { Ok(encode_message(&result)) });
    let data = chunks::rechunk(payload).flat_map(move |chunk_or_failure| {
        futures::stream::iter(match chunk_or_failure {
            Ok(c) => match &key {
                Some(key) => chunk_frames(key, c).map(Ok).to_vec(),
                None => vec![Ok(encode_message(&chunk(c)))],
            },
            Err(status) => vec![Err(status)],
        })
    });
    let body = GrpcBody {
        frames: Box::pin(first.chain(data)),
        done: false,
    };
    let mut response = http::Response::new(Body::new(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

/// [`respond`] with a payload already in memory.
pub fn respond_whole<M>(result: M, payload: Bytes) -> http::Response<Body>
where
    M: Chunked + Message + Send + 'static,
{
    respond(result, futures::stream::iter([Ok(payload)]))
}

/// The body: data frames until the payload ends, then the call's status as trailers.
struct GrpcBody {
    frames: Pin<Box<dyn Stream<Item = Result<Bytes, Status>> + Send>>,
    done: bool,
}

impl http_body::Body for GrpcBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let status = match self.frames.as_mut().poll_next(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(Ok(data))) => return Poll::Ready(Some(Ok(Frame::data(data)))),
            Poll::Ready(Some(Err(status))) => status,
            Poll::Ready(None) => Status::ok(""),
        };
        self.done = true;
        let mut trailers = http::HeaderMap::new();
        if status.add_header(&mut trailers).is_err() {
            trailers.insert(
                "grpc-status",
                http::HeaderValue::from(tonic::Code::Internal as i32),
            );
        }
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

/// The request of a call answered by an [`Override`], as the generated server would decode it.
pub fn streaming_request<R>(request: http::Request<Body>) -> tonic::Request<tonic::Streaming<R>>
where
    R: Message + Default + Send + 'static,
{
    let (parts, body) = request.into_parts();
    let decoder = snug_proto::codec::Codec::<R, R>::default().decoder();
    let stream = tonic::Streaming::new_request(decoder, body, None, Some(MAX_MESSAGE_SIZE));
    tonic::Request::from_http(http::Request::from_parts(parts, stream))
}

/// The one message of a unary request answered by an [`Override`].
pub async fn unary_request<R>(request: http::Request<Body>) -> Result<tonic::Request<R>, Status>
where
    R: Message + Default + Send + 'static,
{
    let request = streaming_request::<R>(request);
    let (metadata, extensions, mut stream) = request.into_parts();
    let message = crate::chunks::message(&mut stream, crate::limit::DOMAIN)
        .await?
        .ok_or_else(|| snug_proto::codec::undecodable("the request holds no message"))?;
    Ok(tonic::Request::from_parts(metadata, extensions, message))
}

/// What answers an overridden method.
pub type Handler = std::sync::Arc<
    dyn Fn(http::Request<Body>) -> Pin<Box<dyn Future<Output = http::Response<Body>> + Send>>
        + Send
        + Sync,
>;

/// A generated server `S` with the method at `path` answered by a [`Handler`] instead, for the
/// methods that answer with [`respond`]. Every other method, and the service's name, are `S`'s.
#[derive(Clone)]
pub struct Override<S> {
    inner: S,
    path: &'static str,
    handler: Handler,
}

impl<S> Override<S> {
    /// Answers `path` (`/package.Service/Method`) with `handler`.
    pub fn new<F>(
        inner: S,
        path: &'static str,
        handler: impl Fn(http::Request<Body>) -> F + Send + Sync + 'static,
    ) -> Self
    where
        F: Future<Output = http::Response<Body>> + Send + 'static,
    {
        Self {
            inner,
            path,
            handler: std::sync::Arc::new(move |request| Box::pin(handler(request))),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for Override<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Override")
            .field("inner", &self.inner)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl<S> tower::Service<http::Request<Body>> for Override<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.uri().path() == self.path {
            let answer = (self.handler)(request);
            Box::pin(async move { Ok(answer.await) })
        } else {
            Box::pin(self.inner.call(request))
        }
    }
}

impl<S: NamedService> NamedService for Override<S> {
    const NAME: &'static str = S::NAME;
}

pub mod client;

#[cfg(test)]
mod tests;
