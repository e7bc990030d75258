//! A PutImage request stream, after its header, as the store's body stream.
//!
//! The store reads `Stream<Item = io::Result<Bytes>>` and enforces the quota as the bytes arrive,
//! so this adapter hands over each chunk as it is decoded and never holds more than one: an
//! over-quota upload is refused while it streams, not after it was buffered. The chunk rules of
//! `snug_rpc::chunks` (≤ 1 MiB, header once and first, the declared length is exact) are checked
//! here too. The store only sees an I/O error for a violation, so the precise status is kept on
//! the side in a [`Violation`] and returned in place of the store's `BODY_ABORTED`.

use std::{
    io,
    sync::{Arc, Mutex},
};

use bytes::Bytes;
use futures::Stream;
use snug_proto::sync::v1 as pb;
use snug_rpc::{chunks::CHUNK_SIZE, status::invalid_argument};
use tonic::{Status, Streaming};

use crate::reason::DOMAIN;

/// Why the adapter ended the body early, if it did.
#[derive(Clone, Debug, Default)]
pub(crate) struct Violation(Arc<Mutex<Option<Status>>>);

impl Violation {
    /// Records `status` and returns the I/O error the store will see.
    fn record(&self, status: Status) -> io::Error {
        let error = io::Error::new(io::ErrorKind::InvalidData, status.message().to_owned());
        *self.lock() = Some(status);
        error
    }

    /// The recorded status, if the body was cut short by the client or by a rule.
    pub(crate) fn take(&self) -> Option<Status> {
        self.lock().take()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Status>> {
        // A poisoned slot still holds a whole value: it is only ever replaced.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The chunks that follow the header, as a body. `declared` is the header's `expected_length`.
pub(crate) fn body(
    stream: Streaming<pb::PutImageRequest>,
    declared: Option<u64>,
    violation: Violation,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    futures::stream::unfold(Some((stream, 0u64)), move |state| {
        let violation = violation.clone();
        async move {
            let (mut stream, received) = state?;
            let refused = match snug_rpc::chunks::message(&mut stream, DOMAIN).await {
                // The client's stream failed (it broke off, or a message the codec or tonic
                // refused): the typed status, as every upload gets it.
                Err(status) => status,
                Ok(None) => match declared {
                    Some(len) if len != received => invalid_argument(
                        DOMAIN,
                        "header.expected_length",
                        format!("the header declared {len} bytes but {received} arrived"),
                    ),
                    _ => return None,
                },
                Ok(Some(pb::PutImageRequest { message: None })) => {
                    invalid_argument(DOMAIN, "message", "a stream message carried no field")
                }
                Ok(Some(pb::PutImageRequest {
                    message: Some(pb::put_image_request::Message::Header(_)),
                })) => {
                    invalid_argument(DOMAIN, "header", "the header may only be sent once, first")
                }
                Ok(Some(pb::PutImageRequest {
                    message: Some(pb::put_image_request::Message::Chunk(chunk)),
                })) => {
                    let received = received + chunk.len() as u64;
                    if chunk.len() > CHUNK_SIZE {
                        invalid_argument(
                            DOMAIN,
                            "chunk",
                            format!("a chunk may hold at most {CHUNK_SIZE} bytes"),
                        )
                    } else if let Some(len) = declared
                        && received > len
                    {
                        invalid_argument(
                            DOMAIN,
                            "header.expected_length",
                            format!("more than the declared {len} bytes arrived"),
                        )
                    } else {
                        return Some((Ok(chunk), Some((stream, received))));
                    }
                }
            };
            // The body ends after its first error; the store stops reading there anyway.
            Some((Err(violation.record(refused)), None))
        }
    })
}
