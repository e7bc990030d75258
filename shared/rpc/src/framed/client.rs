//! The client side of framed responses: a result-then-chunks call whose chunk payloads are handed
//! out as slices of the frames they arrived in.
//!
//! tonic's `Streaming` gathers every message into a buffer of its own before decoding it, one more
//! copy of each chunk. A chunk message is its protobuf field header and the payload, so the parser
//! here reads the few header bytes and passes the payload through as the transport delivered it:
//! in-process, the server's own slices; over HTTP/2, the DATA frames' bytes. Any other message (the
//! result, or a chunk message that carries anything more) is gathered and decoded by prost.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use futures::{Stream, StreamExt as _};
use prost::Message;
use tonic::{Status, body::Body, client::GrpcService};

use super::{GRPC_HEADER, chunk_tag};
use crate::chunks::{Chunked, MAX_MESSAGE_SIZE, Part};

/// What the parser found in the bytes fed to it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A whole message other than a lone chunk, to decode.
    Message(Bytes),
    /// A piece of a chunk message's payload.
    Payload(Bytes),
}

#[derive(Debug)]
enum State {
    /// Gathering a gRPC message header into `pending`.
    Header,
    /// Gathering a message's first bytes into `pending`, to tell a chunk from anything else.
    Prefix { len: usize },
    /// Passing through the rest of a chunk's payload.
    Payload { left: usize },
    /// Gathering a whole message into `pending`.
    Whole { len: usize },
}

/// The gRPC message parser: bytes in, in any pieces; messages and payload slices out.
#[derive(Debug)]
pub(crate) struct Parser {
    key: Option<Bytes>,
    state: State,
    pending: BytesMut,
}

impl Parser {
    /// A parser for responses whose chunk messages have the field header `key`.
    pub(crate) fn new(key: Option<Bytes>) -> Self {
        Self {
            key,
            state: State::Header,
            pending: BytesMut::new(),
        }
    }

    /// Consumes `data`, appending what it completes to `out`.
    pub(crate) fn feed(
        &mut self,
        mut data: Bytes,
        out: &mut std::collections::VecDeque<Event>,
    ) -> Result<(), Status> {
        loop {
            match self.state {
                State::Header => {
                    if data.is_empty() {
                        return Ok(());
                    }
                    let take = (GRPC_HEADER - self.pending.len()).min(data.len());
                    self.pending.put_slice(&data.split_to(take));
                    if self.pending.len() < GRPC_HEADER {
                        return Ok(());
                    }
                    let mut header = self.pending.split().freeze();
                    if header.get_u8() != 0 {
                        return Err(Status::internal(
                            "a compressed message, though none was negotiated",
                        ));
                    }
                    let len = header.get_u32() as usize;
                    if len > MAX_MESSAGE_SIZE {
                        return Err(Status::resource_exhausted(format!(
                            "a message of {len} bytes, over the limit of {MAX_MESSAGE_SIZE}"
                        )));
                    }
                    self.state = match (&self.key, len) {
                        (_, 0) => {
                            out.push_back(Event::Message(Bytes::new()));
                            State::Header
                        }
                        (Some(_), len) => State::Prefix { len },
                        (None, len) => State::Whole { len },
                    };
                }
                State::Prefix { len } => {
                    if data.is_empty() {
                        return Ok(());
                    }
                    // One byte at a time: the prefix is a few bytes, and must not overrun.
                    self.pending.put_u8(data.get_u8());
                    self.state = self.classify(len);
                    if let State::Payload { left: 0 } = self.state {
                        self.state = State::Header;
                    }
                }
                State::Payload { left } => {
                    if data.is_empty() {
                        return Ok(());
                    }
                    let take = left.min(data.len());
                    out.push_back(Event::Payload(data.split_to(take)));
                    self.state = if take == left {
                        State::Header
                    } else {
                        State::Payload { left: left - take }
                    };
                }
                State::Whole { len } => {
                    let take = (len - self.pending.len()).min(data.len());
                    self.pending.put_slice(&data.split_to(take));
                    if self.pending.len() < len {
                        return Ok(());
                    }
                    out.push_back(Event::Message(self.pending.split().freeze()));
                    self.state = State::Header;
                }
            }
        }
    }

    /// After one more prefix byte of a message of `len` bytes: still gathering, a chunk whose
    /// payload follows, or a message to gather whole.
    fn classify(&mut self, len: usize) -> State {
        let key = self.key.as_ref().expect("a prefix is read only with a key");
        let seen = &self.pending[..];
        let shared = seen.len().min(key.len());
        if seen[..shared] != key[..shared] {
            return self.whole(len);
        }
        if seen.len() <= key.len() {
            return if seen.len() == len {
                self.whole(len)
            } else {
                State::Prefix { len }
            };
        }
        let varint = &seen[key.len()..];
        if varint.last().is_some_and(|b| b & 0x80 != 0) {
            // The length goes on, unless the message or a varint's ten bytes end here.
            return if seen.len() == len || varint.len() >= 10 {
                self.whole(len)
            } else {
                State::Prefix { len }
            };
        }
        let payload = prost::encoding::decode_varint(&mut &varint[..]).ok();
        match payload {
            Some(payload) if seen.len() as u64 + payload == len as u64 => {
                self.pending.clear();
                State::Payload {
                    left: payload as usize,
                }
            }
            // Anything else in the message: decode it whole.
            _ => self.whole(len),
        }
    }

    /// Gathers the message whole, keeping the bytes seen so far (a message no longer than its
    /// prefix is complete already, and `feed` emits it on its next turn).
    fn whole(&mut self, len: usize) -> State {
        State::Whole { len }
    }

    /// Whether the bytes fed so far end on a message boundary.
    pub(crate) fn at_boundary(&self) -> bool {
        matches!(self.state, State::Header) && self.pending.is_empty()
    }
}

/// Calls the result-then-chunks method at `path` over `channel` with the request messages of
/// `request` (one, for a unary request) and returns its result with its payload: the pieces as they arrive (slices of the transport's frames), then
/// the end of the stream, or the call's failure as an error. A response that does not start with
/// its result, or repeats it, is an error.
pub async fn call<M, C, S>(
    mut channel: C,
    path: &'static str,
    request: tonic::Request<S>,
) -> Result<(M::Header, Payload<C::ResponseBody, M>), Status>
where
    C: GrpcService<Body>,
    C::Error: Into<tonic::codegen::StdError>,
    C::ResponseBody: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    <C::ResponseBody as http_body::Body>::Error: Into<tonic::codegen::StdError>,
    S: Stream + Send + 'static,
    S::Item: Message,
    M: Chunked + Message + Default + 'static,
{
    let (metadata, extensions, messages) = request.into_parts();
    let frames =
        messages.map(|m| Ok::<_, Status>(http_body::Frame::data(super::encode_message(&m))));
    let mut http = http::Request::new(Body::new(http_body_util::StreamBody::new(frames)));
    *http.method_mut() = http::Method::POST;
    *http.uri_mut() = http::Uri::from_static(path);
    *http.headers_mut() = metadata.into_headers();
    *http.extensions_mut() = extensions;
    http.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    http.headers_mut()
        .insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    std::future::poll_fn(|cx| channel.poll_ready(cx))
        .await
        .map_err(|e| Status::from_error(e.into()))?;
    let response = channel
        .call(http)
        .await
        .map_err(|e| Status::from_error(e.into()))?;
    // A Trailers-Only response carries its status in the headers.
    if let Some(status) = Status::from_header_map(response.headers())
        && status.code() != tonic::Code::Ok
    {
        return Err(status);
    }
    if response.status() != http::StatusCode::OK {
        return Err(Status::unknown(format!(
            "the server answered HTTP {}",
            response.status()
        )));
    }
    let mut payload = Payload {
        body: response.into_body(),
        parser: Parser::new(chunk_tag::<M>()),
        events: std::collections::VecDeque::new(),
        done: false,
        _message: std::marker::PhantomData,
    };
    let first = std::future::poll_fn(|cx| payload.poll_event(cx)).await;
    match first {
        Some(Ok(Event::Message(bytes))) => {
            let message = M::decode(bytes).map_err(|e| Status::internal(e.to_string()))?;
            match message.into_part() {
                Some(Part::Header(result)) => Ok((result, payload)),
                _ => Err(Status::internal(
                    "the response stream did not start with its result",
                )),
            }
        }
        Some(Err(status)) => Err(status),
        _ => Err(Status::internal(
            "the response stream did not start with its result",
        )),
    }
}

/// A call's payload as it arrives.
pub struct Payload<B, M> {
    body: B,
    parser: Parser,
    events: std::collections::VecDeque<Event>,
    done: bool,
    _message: std::marker::PhantomData<fn() -> M>,
}

impl<B, M> Payload<B, M>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<tonic::codegen::StdError>,
{
    /// The next event, reading frames as needed; `None` once the call ended well.
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Event, Status>>> {
        loop {
            if let Some(event) = self.events.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if self.done {
                return Poll::Ready(None);
            }
            let frame = match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(frame) => frame,
            };
            let failure = match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => match self.parser.feed(data, &mut self.events) {
                        Ok(()) => continue,
                        Err(status) => status,
                    },
                    Err(frame) => match frame.into_trailers() {
                        Ok(trailers) => match Status::from_header_map(&trailers) {
                            Some(status) if status.code() != tonic::Code::Ok => status,
                            Some(_) if self.parser.at_boundary() => {
                                self.done = true;
                                continue;
                            }
                            Some(_) => Status::internal("the response ended inside a message"),
                            None => Status::internal("the response trailers carried no status"),
                        },
                        // Neither data nor trailers: nothing to read.
                        Err(_) => continue,
                    },
                },
                Some(Err(e)) => Status::from_error(e.into()),
                None => Status::internal("the response ended without its status"),
            };
            self.done = true;
            return Poll::Ready(Some(Err(failure)));
        }
    }
}

impl<B, M> Stream for Payload<B, M>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<tonic::codegen::StdError>,
    M: Chunked + Message + Default,
{
    type Item = Result<Bytes, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            return Poll::Ready(match self.poll_event(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => None,
                Poll::Ready(Some(Ok(Event::Payload(bytes)))) => Some(Ok(bytes)),
                Poll::Ready(Some(Ok(Event::Message(bytes)))) => {
                    let part = M::decode(bytes)
                        .map_err(|e| Status::internal(e.to_string()))
                        .map(M::into_part);
                    match part {
                        Ok(Some(Part::Chunk(chunk))) if chunk.is_empty() => continue,
                        Ok(Some(Part::Chunk(chunk))) => Some(Ok(chunk)),
                        Ok(_) => {
                            self.done = true;
                            Some(Err(Status::internal(
                                "the response stream repeated its result",
                            )))
                        }
                        Err(status) => {
                            self.done = true;
                            Some(Err(status))
                        }
                    }
                }
                Poll::Ready(Some(Err(status))) => Some(Err(status)),
            });
        }
    }
}

impl<B, M> Payload<B, M>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<tonic::codegen::StdError>,
    M: Chunked + Message + Default,
{
    /// Reads the whole payload into `buffer` (cleared first), which a caller may reuse across
    /// calls; `declared` is the length the result announced, so the buffer is sized once.
    pub async fn read_into(
        self,
        limit: u64,
        declared: u64,
        buffer: &mut Vec<u8>,
    ) -> Result<(), Status> {
        crate::chunks::read_into(self, limit, declared, buffer).await
    }
}
