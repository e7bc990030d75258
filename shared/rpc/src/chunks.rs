//! Payloads as streams of chunks: one header message, then the bytes in pieces of at most 1 MiB.
//!
//! gRPC messages are capped (4 MiB by default) and a 64 MiB user file must never be one message,
//! so every capability that moves a file uses the same shape: a `oneof { Header header; bytes
//! chunk; }` request stream and a `oneof { Result result; bytes chunk; }` response stream. This
//! module holds both directions for servers and for clients, with the size cap enforced while the
//! bytes arrive — an oversize upload is refused as soon as it crosses the cap, not after it has
//! been buffered.
//!
//! Every helper is generic over [`Chunked`] (defined in `snug-proto`, beside the generated
//! messages, and re-exported here), so callers name the message type, never a closure that wraps
//! or unwraps its `oneof`.

use std::pin::Pin;

use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use tonic::{Status, Streaming};

pub use snug_proto::{Chunked, Part};

use crate::{
    budget::{Admission, Busy, UploadBudget},
    pace::Paced,
    status,
};

/// The largest chunk a sender may put in one message, and the size senders use.
pub const CHUNK_SIZE: usize = 1024 * 1024;

/// The gRPC message size servers and clients accept: one chunk plus room for framing.
pub const MAX_MESSAGE_SIZE: usize = CHUNK_SIZE + 64 * 1024;

/// A boxed response stream, as tonic's server-streaming handlers return it.
pub type ResponseStream<M> = Pin<Box<dyn Stream<Item = Result<M, Status>> + Send + 'static>>;

/// A received upload: the header and the payload, whole, with its share of the upload budget.
#[derive(Debug)]
pub struct Upload<H> {
    /// The first message.
    pub header: H,
    /// Every chunk after it, concatenated.
    pub bytes: Vec<u8>,
    /// The upload's share of the budget: a handler that moves `bytes` out keeps holding it until
    /// the rest of the `Upload` is dropped, at the end of the handler.
    pub admission: Admission,
}

/// Receives a header-then-chunks upload, enforcing `limit` on the payload as it arrives.
///
/// A message with no `oneof` set is refused; `declared_len` reads the header's optional
/// `expected_length`, which lets an oversize upload be refused before any chunk is sent and sizes
/// the buffer once. The upload is admitted against `budget` before its first chunk is read (see
/// [`Receiver::start`]).
pub async fn receive<M: Chunked>(
    stream: &mut Streaming<M>,
    domain: &'static str,
    limit: u64,
    budget: &UploadBudget,
    declared_len: impl Fn(&M::Header) -> Option<u64>,
) -> Result<Upload<M::Header>, Status> {
    receive_limited_by(stream, domain, |_| limit, budget, declared_len).await
}

/// [`receive`] with the limit taken from the header, for uploads whose bound depends on who
/// sends them (a per-user quota the header carries).
pub async fn receive_limited_by<M: Chunked>(
    stream: &mut Streaming<M>,
    domain: &'static str,
    limit: impl Fn(&M::Header) -> u64,
    budget: &UploadBudget,
    declared_len: impl Fn(&M::Header) -> Option<u64>,
) -> Result<Upload<M::Header>, Status> {
    let (header, receiver) =
        Receiver::start_limited_by(stream, domain, limit, budget, declared_len).await?;
    let (bytes, admission) = receiver.into_bytes().await?;
    Ok(Upload {
        header,
        bytes,
        admission,
    })
}

/// The answer to an upload the budget could not admit in time: UNAVAILABLE, reason OVERLOADED
/// (retryable), in the service's `domain`.
pub fn busy(domain: &'static str, busy: Busy) -> Status {
    status::from_reason(&snug_reasons::rpc::OVERLOADED, domain, busy.to_string(), [])
}

/// The refusal of an upload over its limit, given the service's domain and the limit.
pub type TooLarge = fn(&'static str, u64) -> Status;

/// An upload whose header has arrived, handing out its chunks one at a time as they arrive, for
/// services that work on the bytes while the rest is still in flight (see [`receive`] for the
/// checks, which are the same). It holds its share of the budget until it is dropped.
pub struct Receiver<'a, M> {
    inbound: Inbound<'a, M>,
    admission: Admission,
}

/// An upload whose header has arrived and that is not admitted yet, for a service that must
/// learn what the request will hold beside the upload (a base it reads, an image it builds)
/// before admitting it all at once: admissions taken one after another by requests that hold
/// part and wait for the rest can wait on each other until every one is refused.
pub struct Opened<'a, M> {
    inbound: Inbound<'a, M>,
    budget: UploadBudget,
}

/// The checks and counts of an upload's chunks, admitted or not.
struct Inbound<'a, M> {
    stream: &'a mut Streaming<M>,
    domain: &'static str,
    limit: u64,
    too_large: TooLarge,
    length_field: &'static str,
    declared: Option<u64>,
    received: u64,
    paced: Paced,
    /// Bytes read before admission ([`Opened::peek`]), handed out first.
    peeked: Vec<u8>,
}

impl<'a, M: Chunked> Opened<'a, M> {
    /// Waits for the header, which must be the first message, and refuses a declared length over
    /// `limit` (with `too_large`, given the domain and the limit, as for bytes that pass it)
    /// before any chunk is read. Nothing is admitted yet: see [`Opened::admit`].
    pub async fn open(
        stream: &'a mut Streaming<M>,
        domain: &'static str,
        limit: impl Fn(&M::Header) -> u64,
        budget: &UploadBudget,
        declared_len: impl Fn(&M::Header) -> Option<u64>,
        too_large: TooLarge,
    ) -> Result<(M::Header, Self), Status> {
        let header = match next(stream, domain).await? {
            Some(Part::Header(header)) => header,
            Some(Part::Chunk(_)) => {
                return Err(status::invalid_argument(
                    domain,
                    "header",
                    "the first message of the stream must be the header",
                ));
            }
            None => {
                return Err(status::invalid_argument(
                    domain,
                    "header",
                    "the stream ended before its header",
                ));
            }
        };
        let limit = limit(&header);
        let declared = declared_len(&header);
        if let Some(len) = declared
            && len > limit
        {
            return Err(too_large(domain, limit));
        }
        let opened = Opened {
            inbound: Inbound {
                stream,
                domain,
                limit,
                too_large,
                length_field: "expected_length",
                declared,
                received: 0,
                paced: Paced::start(budget.pace()),
                peeked: Vec::new(),
            },
            budget: budget.clone(),
        };
        Ok((header, opened))
    }

    /// What the upload is admitted for: its declared length, or its limit when it declares none.
    pub fn bound(&self) -> u64 {
        self.inbound.declared.unwrap_or(self.inbound.limit)
    }

    /// The first `n` bytes of the payload (fewer when it is shorter), read before admission
    /// for a request whose admission depends on them (a delta's geometry); at most one chunk
    /// more than `n` is held unadmitted.
    pub async fn peek(&mut self, n: usize) -> Result<&[u8], Status> {
        while self.inbound.peeked.len() < n {
            match self.inbound.next_chunk().await? {
                Some(chunk) => self.inbound.peeked.extend_from_slice(&chunk),
                None => break,
            }
        }
        let len = n.min(self.inbound.peeked.len());
        Ok(&self.inbound.peeked[..len])
    }

    /// Admits the upload ([`Opened::bound`]) together with `beside` bytes the request will hold
    /// with it, as one admission for `owners` (its user and client address, each held to its
    /// share of the budget), waiting for room or refusing it as OVERLOADED.
    pub async fn admit(self, owners: &[String], beside: u64) -> Result<Receiver<'a, M>, Status> {
        let admission = self
            .budget
            .admit_for(owners, self.bound().saturating_add(beside))
            .await
            .map_err(|refused| busy(self.inbound.domain, refused))?;
        let mut inbound = self.inbound;
        // The pace counts from admission: time spent waiting for room is not the client's.
        inbound.paced = Paced::start(self.budget.pace());
        Ok(Receiver { inbound, admission })
    }
}

impl<'a, M: Chunked> Receiver<'a, M> {
    /// Waits for the header, which must be the first message, and refuses a declared length over
    /// `limit` before any chunk is read. Then admits the upload against `budget` for its declared
    /// length (its limit when it declares none), waiting for room or refusing it as OVERLOADED;
    /// the receiver holds that share until it is dropped.
    pub async fn start(
        stream: &'a mut Streaming<M>,
        domain: &'static str,
        limit: u64,
        budget: &UploadBudget,
        declared_len: impl Fn(&M::Header) -> Option<u64>,
    ) -> Result<(M::Header, Self), Status> {
        Self::start_limited_by(stream, domain, |_| limit, budget, declared_len).await
    }

    /// [`Receiver::start`] with the limit taken from the header.
    pub async fn start_limited_by(
        stream: &'a mut Streaming<M>,
        domain: &'static str,
        limit: impl Fn(&M::Header) -> u64,
        budget: &UploadBudget,
        declared_len: impl Fn(&M::Header) -> Option<u64>,
    ) -> Result<(M::Header, Self), Status> {
        Self::start_for(
            stream,
            domain,
            limit,
            budget,
            declared_len,
            status::too_large,
            |_| Vec::new(),
        )
        .await
    }

    /// [`Receiver::start_limited_by`] for an upload whose limit has a refusal of its own (an
    /// image over a quota is the quota's QUOTA_EXCEEDED, not TOO_LARGE: `too_large` gets the
    /// domain and the limit, for a declared length over it and for bytes that pass it alike) and
    /// whose header says whose it is (`owners`, its user and client address: admitted within
    /// each one's share of the budget).
    pub async fn start_for(
        stream: &'a mut Streaming<M>,
        domain: &'static str,
        limit: impl Fn(&M::Header) -> u64,
        budget: &UploadBudget,
        declared_len: impl Fn(&M::Header) -> Option<u64>,
        too_large: TooLarge,
        owners: impl Fn(&M::Header) -> Vec<String>,
    ) -> Result<(M::Header, Self), Status> {
        let (header, opened) =
            Opened::open(stream, domain, limit, budget, declared_len, too_large).await?;
        let receiver = opened.admit(&owners(&header), 0).await?;
        Ok((header, receiver))
    }

    /// Returns the payload length the header declared (at most the limit), if it declared one.
    pub fn declared_len(&self) -> Option<u64> {
        self.inbound.declared
    }

    /// Reads the rest of the upload, whole, for a service that judges the header before it takes
    /// the payload; the admission comes with it, to be held while the bytes are.
    pub async fn into_bytes(mut self) -> Result<(Vec<u8>, Admission), Status> {
        // The declared length is only a hint for the allocation; the bytes received are what count.
        let mut bytes = Vec::with_capacity(self.declared_len().unwrap_or(0) as usize);
        while let Some(chunk) = self.next_chunk().await? {
            bytes.extend_from_slice(&chunk);
        }
        Ok((bytes, self.admission))
    }

    /// Names the header's declared length `field` in the refusal of a stream that did not carry
    /// as many bytes (`expected_length` unless told), for a service whose field paths start at
    /// the request (`header.expected_length`).
    pub fn naming_length(mut self, field: &'static str) -> Self {
        self.inbound.length_field = field;
        self
    }

    /// Ends the receiver, keeping its share of the budget, for a service that read the chunks
    /// itself and still holds their bytes.
    pub fn into_admission(self) -> Admission {
        self.admission
    }

    /// Returns the next chunk (bytes [`Opened::peek`] read first), or `None` once the stream
    /// has ended with as many bytes as were declared.
    ///
    /// Cancel-safe (tonic's `Streaming::message` is, and nothing here awaits after it), so it can
    /// be one branch of a `select!`.
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>, Status> {
        if !self.inbound.peeked.is_empty() {
            return Ok(Some(Bytes::from(std::mem::take(&mut self.inbound.peeked))));
        }
        self.inbound.next_chunk().await
    }
}

impl<M: Chunked> Inbound<'_, M> {
    async fn next_chunk(&mut self) -> Result<Option<Bytes>, Status> {
        let domain = self.domain;
        let next = self
            .paced
            .within(next(self.stream, domain))
            .await
            .map_err(|behind| {
                status::from_reason(
                    &snug_reasons::rpc::UPLOAD_TOO_SLOW,
                    domain,
                    behind.to_string(),
                    [],
                )
            })?;
        match next? {
            Some(Part::Chunk(chunk)) => {
                if chunk.len() > CHUNK_SIZE {
                    return Err(status::invalid_argument(
                        domain,
                        "chunk",
                        format!("a chunk may hold at most {CHUNK_SIZE} bytes"),
                    ));
                }
                self.received += chunk.len() as u64;
                self.paced.received(chunk.len() as u64);
                if self.received > self.limit {
                    return Err((self.too_large)(domain, self.limit));
                }
                Ok(Some(chunk))
            }
            Some(Part::Header(_)) => Err(status::invalid_argument(
                domain,
                "header",
                "the header may only be sent once, first",
            )),
            None => match self.declared {
                Some(len) if len != self.received => Err(status::invalid_argument(
                    domain,
                    self.length_field,
                    format!(
                        "the header declared {len} bytes but {} arrived",
                        self.received
                    ),
                )),
                _ => Ok(None),
            },
        }
    }
}

impl<M> std::fmt::Debug for Receiver<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("declared", &self.inbound.declared)
            .field("received", &self.inbound.received)
            .finish_non_exhaustive()
    }
}

async fn next<M: Chunked>(
    stream: &mut Streaming<M>,
    domain: &'static str,
) -> Result<Option<Part<M::Header>>, Status> {
    match message(stream, domain).await? {
        None => Ok(None),
        Some(message) => message.into_part().map(Some).ok_or_else(|| {
            status::invalid_argument(domain, "message", "a stream message carried no field")
        }),
    }
}

/// Reads the next message of a request stream, with the refusals tonic makes itself typed
/// ([`crate::refusal::typed`]: a message over the decode limit is `TOO_LARGE`, a stream that
/// ends inside a message `INVALID_ARGUMENT`, a stream the client broke off `BODY_ABORTED`).
/// Every service reads its request streams through this, directly or through [`receive`].
pub async fn message<M>(
    stream: &mut Streaming<M>,
    domain: &'static str,
) -> Result<Option<M>, Status> {
    stream
        .message()
        .await
        .map_err(|err| crate::refusal::typed(err, domain))
}

/// Splits `bytes` into chunks of at most [`CHUNK_SIZE`] without copying.
pub fn split_into_chunks(bytes: Bytes) -> impl Iterator<Item = Bytes> + Send + 'static {
    let len = bytes.len();
    (0..len)
        .step_by(CHUNK_SIZE)
        .map(move |start| bytes.slice(start..(start + CHUNK_SIZE).min(len)))
}

/// Re-cuts a payload that arrives in pieces of any size into chunks of at most [`CHUNK_SIZE`],
/// as zero-copy slices, so memory stays at one piece; a failed piece passes through as the end.
pub fn rechunk(
    pieces: impl Stream<Item = Result<Bytes, Status>> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, Status>> + Send + 'static {
    pieces.flat_map(|piece| {
        futures::stream::iter(match piece {
            Ok(bytes) => split_into_chunks(bytes).map(Ok).collect::<Vec<_>>(),
            Err(status) => vec![Err(status)],
        })
    })
}

/// Appends `chunk` to a download's `buffer`, refusing to pass the client's `limit`.
fn append_within(buffer: &mut Vec<u8>, chunk: &[u8], limit: u64) -> Result<(), Status> {
    if (buffer.len() + chunk.len()) as u64 > limit {
        return Err(Status::resource_exhausted(format!(
            "the response exceeds the client's limit of {limit} bytes"
        )));
    }
    buffer.extend_from_slice(chunk);
    Ok(())
}

/// Clears a reused download buffer and sizes it once for the `declared` length (at most
/// `limit`): exact, since the announced length is what arrives, and doubling would reserve twice
/// the payload.
fn prepare(buffer: &mut Vec<u8>, declared: u64, limit: u64) {
    buffer.clear();
    buffer.reserve_exact(declared.min(limit) as usize);
}

/// Reads a download's pieces into `buffer` (cleared first and sized for `declared` bytes),
/// refusing to pass `limit`.
pub async fn read_into(
    pieces: impl Stream<Item = Result<Bytes, Status>>,
    limit: u64,
    declared: u64,
    buffer: &mut Vec<u8>,
) -> Result<(), Status> {
    prepare(buffer, declared, limit);
    let mut pieces = std::pin::pin!(pieces);
    while let Some(piece) = pieces.next().await {
        append_within(buffer, &piece?, limit)?;
    }
    Ok(())
}

/// Builds a result-then-chunks response stream: `result` (the first message, built with
/// [`Chunked::header`]), then `payload` in chunks.
pub fn respond<M: Chunked + Send + 'static>(result: M, payload: Bytes) -> ResponseStream<M> {
    respond_stream(
        result,
        futures::stream::iter(split_into_chunks(payload).map(Ok)),
    )
}

/// Builds a result-then-chunks response stream from a payload made as it is sent, in pieces of
/// at most [`CHUNK_SIZE`]; a failed piece ends the response with its status.
pub fn respond_stream<M: Chunked + Send + 'static>(
    result: M,
    payload: impl Stream<Item = Result<Bytes, Status>> + Send + 'static,
) -> ResponseStream<M> {
    Box::pin(
        futures::stream::once(async move { Ok(result) })
            .chain(payload.map(|piece| piece.map(M::chunk))),
    )
}

/// Builds a header-then-chunks request stream, for clients: `header` (the first message, built
/// with [`Chunked::header`]), then `payload` in chunks.
pub fn upload<M: Chunked + Send + 'static>(
    header: M,
    payload: Bytes,
) -> impl Stream<Item = M> + Send + 'static {
    futures::stream::once(async move { header }).chain(futures::stream::iter(
        split_into_chunks(payload).map(M::chunk),
    ))
}

/// Receives a result-then-chunks response, for clients. `limit` bounds what the client buffers;
/// `declared_len` reads the payload length the result announces, so the buffer is sized once.
pub async fn download<M: Chunked>(
    stream: &mut Streaming<M>,
    limit: u64,
    declared_len: impl Fn(&M::Header) -> u64,
) -> Result<(M::Header, Bytes), Status> {
    let mut bytes = Vec::new();
    let result = download_into(stream, limit, declared_len, &mut bytes).await?;
    Ok((result, Bytes::from(bytes)))
}

/// Receives a result-then-chunks response into `buffer` (cleared first), for clients that reuse
/// one allocation across calls: pages already mapped are not faulted in again, which for a
/// 64 MiB payload is tens of milliseconds of CPU.
pub async fn download_into<M: Chunked>(
    stream: &mut Streaming<M>,
    limit: u64,
    declared_len: impl Fn(&M::Header) -> u64,
    buffer: &mut Vec<u8>,
) -> Result<M::Header, Status> {
    let result = match stream.message().await?.and_then(M::into_part) {
        Some(Part::Header(result)) => result,
        _ => {
            return Err(Status::internal(
                "the response stream did not start with its result",
            ));
        }
    };
    prepare(buffer, declared_len(&result), limit);
    while let Some(message) = stream.message().await? {
        match message.into_part() {
            Some(Part::Chunk(chunk)) => append_within(buffer, &chunk, limit)?,
            _ => return Err(Status::internal("the response stream repeated its result")),
        }
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_payload_in_order_without_exceeding_the_size() {
        for len in [
            0,
            1,
            CHUNK_SIZE - 1,
            CHUNK_SIZE,
            CHUNK_SIZE + 1,
            3 * CHUNK_SIZE + 7,
        ] {
            let payload = Bytes::from((0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
            let chunks: Vec<Bytes> = split_into_chunks(payload.clone()).collect();
            assert!(
                chunks
                    .iter()
                    .all(|c| !c.is_empty() && c.len() <= CHUNK_SIZE)
            );
            assert_eq!(chunks.len(), len.div_ceil(CHUNK_SIZE));
            assert_eq!(chunks.concat(), payload.to_vec(), "len {len}");
        }
    }
}
