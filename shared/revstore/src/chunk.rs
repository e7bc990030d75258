//! Streaming ingest: quota, whole-image SHA-256, and cutting the stream into fixed-size chunks.
//!
//! Chunks are fixed-size and aligned to the start of the image. SQLite pages never move within a
//! file, so with a chunk size equal to the page size a revision that rewrote 1% of the pages
//! shares 99% of its chunks with its base; content-defined chunking would buy nothing here and
//! cost a rolling hash over every byte.
//!
//! The same alignment lets a put derived from a base it read ([`BaseImage`], a delta push's,
//! issue 38) take most addresses without hashing: the image's chunk `k` that is byte for byte
//! the base's chunk `k` (compared, never assumed: a comparison costs a tenth of a hash) has the
//! base's address, and its stored copy was read and checked against that address when the base
//! was read. Such a chunk reaches the sink [`Batch::checked`], so no backend hashes it or reads
//! its stored copy back again. Everything else is hashed as in any put.

use std::{future::Future, io, pin::pin};

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use sha2::{Digest as _, Sha256};

use crate::{
    error::{PutError, StorageError},
    store::BaseImage,
    types::{self, Digest, SQLITE_HEADER_LEN},
};

/// How many bytes of chunks are handed to a backend at once: large enough that per-batch work
/// (a channel send, a dedupe query) is amortised, small enough to keep memory per put bounded.
pub(crate) const BATCH_BYTES: usize = 1 << 20;

/// Where a backend receives the chunks of a put, in image order.
pub(crate) trait ChunkSink {
    /// Takes the next chunks; every chunk but the image's last is exactly the chunk size.
    fn accept(&mut self, batch: Batch) -> impl Future<Output = Result<(), PutError>> + Send;
}

/// Consecutive chunks of a put, each with its address when the put already holds it checked.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) chunks: Vec<Bytes>,
    /// Per chunk, `Some(address)` when it is byte for byte a chunk of the put's base whose stored
    /// copy was read and checked against `address` by this put ([`BaseImage`]): a sink takes the
    /// address as is and reuses the stored copy without reading it back. `None`: hash it.
    pub(crate) checked: Vec<Option<Digest>>,
}

impl Batch {
    fn push(&mut self, chunk: Bytes, checked: Option<Digest>) {
        self.chunks.push(chunk);
        self.checked.push(checked);
    }

    /// Every chunk's address: the checked one where there is one, else its SHA-256.
    pub(crate) fn addresses(&self) -> Vec<Digest> {
        self.chunks
            .iter()
            .zip(&self.checked)
            .map(|(chunk, checked)| checked.unwrap_or_else(|| Digest::of(chunk)))
            .collect()
    }
}

/// The address of the image's chunk `index` (holding `chunk`) when it is byte for byte the
/// base's chunk `index`, which the base's read checked against that address.
pub(crate) fn checked_address(
    base: Option<&BaseImage>,
    chunk_size: usize,
    index: usize,
    chunk: &[u8],
) -> Option<Digest> {
    let base = base?;
    let address = base.chunks.get(index)?;
    let start = index.checked_mul(chunk_size)?;
    // The base's chunk `index` is the whole rest of the base when it is its last, so an equal
    // slice of the same length is that chunk exactly, never a prefix of it.
    let stored = base
        .bytes
        .get(start..start.checked_add(chunk_size)?.min(base.bytes.len()))?;
    (stored == chunk).then_some(*address)
}

/// What ingest learned about the image.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ingested {
    pub(crate) digest: Digest,
    pub(crate) size: u64,
    /// The image's SQLite `user_version`, read from its first bytes as they streamed past.
    pub(crate) storage_version: Option<u32>,
}

/// Reads `body` to its end, enforcing `quota` as the bytes arrive, hashing the whole image,
/// reading the storage version from its header, and passing chunk-aligned batches to `sink`.
///
/// An over-quota image is refused as soon as the byte that crosses the quota arrives; the rest of
/// the stream is never polled.
///
/// With a `base` (already matched to this store's chunk size), each chunk that is the base's
/// chunk at the same index goes to `sink` with its checked address (module docs); with a
/// `digest`, the image's SHA-256 as its caller verified it, the image is not hashed again.
pub(crate) async fn ingest<B, S>(
    body: B,
    quota: u64,
    chunk_size: usize,
    base: Option<&BaseImage>,
    digest: Option<Digest>,
    sink: &mut S,
) -> Result<Ingested, PutError>
where
    B: Stream<Item = io::Result<Bytes>> + Send,
    S: ChunkSink + Send,
{
    let mut body = pin!(body);
    let mut hasher = Sha256::new();
    let mut size: u64 = 0;
    let mut partial = BytesMut::new();
    let mut batch = Batch::default();
    let mut batch_bytes = 0usize;
    // The index of the next chunk cut, in the image.
    let mut index = 0usize;
    let mut cut = |batch: &mut Batch, chunk: Bytes| {
        let checked = checked_address(base, chunk_size, index, &chunk);
        index += 1;
        batch.push(chunk, checked);
    };
    // The header may arrive split over several pieces; only its first 100 bytes are kept.
    let mut header = Vec::with_capacity(SQLITE_HEADER_LEN);
    while let Some(piece) = body.next().await {
        let mut piece = piece.map_err(PutError::BodyAborted)?;
        size += piece.len() as u64;
        if size > quota {
            return Err(PutError::QuotaExceeded { quota });
        }
        if digest.is_none() {
            hasher.update(&piece);
        }
        if header.len() < SQLITE_HEADER_LEN {
            let take = (SQLITE_HEADER_LEN - header.len()).min(piece.len());
            header.extend_from_slice(&piece[..take]);
        }
        if !partial.is_empty() {
            let take = (chunk_size - partial.len()).min(piece.len());
            partial.extend_from_slice(&piece.split_to(take));
            if partial.len() == chunk_size {
                batch_bytes += chunk_size;
                cut(&mut batch, partial.split().freeze());
            }
        }
        // Whole chunks are sliced out of the caller's buffer without copying.
        while piece.len() >= chunk_size {
            batch_bytes += chunk_size;
            cut(&mut batch, piece.split_to(chunk_size));
        }
        if !piece.is_empty() {
            partial.extend_from_slice(&piece);
        }
        if batch_bytes >= BATCH_BYTES {
            batch_bytes = 0;
            sink.accept(std::mem::take(&mut batch)).await?;
        }
    }
    if !partial.is_empty() {
        cut(&mut batch, partial.freeze());
    }
    if !batch.chunks.is_empty() {
        sink.accept(batch).await?;
    }
    Ok(Ingested {
        digest: digest.unwrap_or_else(|| Digest(hasher.finalize().into())),
        size,
        storage_version: types::storage_version(&header),
    })
}

/// Checks one chunk read back from storage against its address: the one comparison every read
/// path makes before bytes count as stored.
pub(crate) fn check(address: &Digest, bytes: &[u8]) -> Result<(), StorageError> {
    if Digest::of(bytes) == *address {
        Ok(())
    } else {
        Err(StorageError::Corrupt {
            object: format!("chunk {address}"),
        })
    }
}

/// Checks consecutive chunks read back from storage, `bytes` holding them in order and `manifest`
/// naming them; every chunk but the last is `chunk_size` bytes. A download checks each piece this
/// way before handing it on, so a damaged byte ends the download instead of reaching a client.
pub(crate) fn check_run(
    manifest: &[Digest],
    chunk_size: usize,
    bytes: &[u8],
) -> Result<(), StorageError> {
    let chunks = bytes.chunks(chunk_size);
    if chunks.len() != manifest.len() {
        return Err(StorageError::Corrupt {
            object: format!(
                "{} bytes read where {} chunks were expected",
                bytes.len(),
                manifest.len()
            ),
        });
    }
    chunks
        .zip(manifest)
        .try_for_each(|(c, address)| check(address, c))
}

/// Encodes a manifest: the chunk digests in image order, 32 bytes each.
pub(crate) fn encode_manifest(chunks: &[Digest]) -> Vec<u8> {
    let mut out = Vec::with_capacity(chunks.len() * 32);
    for c in chunks {
        out.extend_from_slice(&c.0);
    }
    out
}

/// Decodes a manifest; `None` if its length is not a multiple of 32.
pub(crate) fn decode_manifest(bytes: &[u8]) -> Option<Vec<Digest>> {
    if !bytes.len().is_multiple_of(32) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(32)
            .filter_map(Digest::from_slice)
            .collect(),
    )
}

#[cfg(test)]
mod tests;
