//! The integrity check, written once: what [`crate::RevStore::check_integrity`] reads and how it
//! judges it, as one driver ([`check`]) over the few reads each backend implements ([`Inspect`]).
//!
//! Every backend reports the same defect with the same word, which is what lets an operator (or
//! the conformance suite) compare stores: a pointer to no retained revision is
//! [`IntegrityProblem::DanglingPointer`], a retained revision without its image record
//! [`IntegrityProblem::MissingImage`], a chunk the image needs that is not stored (no index row,
//! no pack, a short read) [`IntegrityProblem::MissingChunk`], stored bytes that do not hash to
//! their address [`IntegrityProblem::ChunkMismatch`] (once per chunk, however many images share
//! it), and an image whose chunks are all sound but reassemble to another digest or size, or whose
//! layout cannot be read, [`IntegrityProblem::ImageMismatch`]. An erasure whose wipe of erased
//! bytes is still to be retried is [`IntegrityProblem::UnfinishedWipe`]: the store is not yet as
//! the erasure said it would be.
//!
//! The backends read their stored bytes raw here (a download checks them and stops at the first
//! bad one; a check goes on to report every one), a run of [`RUN`] chunks at a time, so a check of
//! a 64 MiB image holds about 1 MiB of it at once.

use std::{collections::HashSet, future::Future, ops::Range};

use bytes::Bytes;
use sha2::{Digest as _, Sha256};
use tokio::sync::watch;

use crate::{
    error::StorageError,
    types::{Digest, IntegrityProblem, IntegrityReport, UserId},
};

/// How many chunks one [`Inspect::read`] covers.
pub(crate) const RUN: usize = 256;

/// The most problems a report lists; beyond them it only counts
/// ([`IntegrityReport::problems_omitted`]). A lost pack of a large store is tens of thousands of
/// missing chunks: the first ten thousand say what happened, and the report stays small.
pub(crate) const MAX_PROBLEMS: usize = 10_000;

/// One chunk as the store holds it, unverified.
#[derive(Debug)]
pub(crate) enum Stored {
    Bytes(Bytes),
    /// Not where the metadata says it is (no index row, no pack, a short read).
    Missing,
}

/// An image record as a check reads it.
#[derive(Debug)]
pub(crate) enum Record<L> {
    /// No record for a retained revision's digest.
    Missing,
    /// A record whose manifest or layout cannot be decoded, or do not agree.
    Malformed,
    Image(Image<L>),
}

/// An image's size, manifest, and wherever its backend keeps its chunks.
#[derive(Debug)]
pub(crate) struct Image<L> {
    pub(crate) size: u64,
    pub(crate) manifest: Vec<Digest>,
    pub(crate) layout: L,
}

/// The reads of one backend's integrity check.
pub(crate) trait Inspect: Sync {
    /// Where the chunks of an image are (pack files and offsets, pack objects, rows).
    type Layout: Send + Sync;

    /// Users whose pointer names a revision that is missing or not retained.
    fn dangling_pointers(&self) -> impl Future<Output = Result<Vec<UserId>, StorageError>> + Send;

    /// The distinct images of every retained revision.
    fn retained_images(&self) -> impl Future<Output = Result<Vec<Digest>, StorageError>> + Send;

    /// The objects an erasure left ranges to wipe in, with how many ranges each (issue 36).
    fn unfinished_wipes(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, u64)>, StorageError>> + Send;

    /// One image's record.
    fn image(
        &self,
        digest: &Digest,
    ) -> impl Future<Output = Result<Record<Self::Layout>, StorageError>> + Send;

    /// The stored bytes of the image's chunks `run` (at most [`RUN`]), one entry per chunk, in
    /// order. An error is the store failing to answer, not damage.
    fn read(
        &self,
        image: &Image<Self::Layout>,
        run: Range<usize>,
    ) -> impl Future<Output = Result<Vec<Stored>, StorageError>> + Send;
}

/// Reassembles every retained image, checks every chunk against its address and every image
/// against its digest and size, and reports every defect found. The report is kept in `progress`
/// as it grows (one update per image), and returned whole at the end.
pub(crate) async fn check<I: Inspect>(
    store: &I,
    progress: &watch::Sender<IntegrityReport>,
) -> Result<IntegrityReport, StorageError> {
    progress.send_replace(IntegrityReport::default());
    let found = |problems: Vec<IntegrityProblem>, images: u64, bytes: u64| {
        progress.send_modify(|report| {
            report.images_checked += images;
            report.bytes_checked += bytes;
            for problem in problems {
                if report.problems.len() < MAX_PROBLEMS {
                    report.problems.push(problem);
                } else {
                    report.problems_omitted += 1;
                }
            }
        });
    };
    let unfinished = store.unfinished_wipes().await?;
    found(
        unfinished
            .into_iter()
            .map(|(object, ranges)| IntegrityProblem::UnfinishedWipe { object, ranges })
            .collect(),
        0,
        0,
    );
    let dangling = store.dangling_pointers().await?;
    found(
        dangling
            .into_iter()
            .map(|user| IntegrityProblem::DanglingPointer { user })
            .collect(),
        0,
        0,
    );
    let mut mismatched = HashSet::new();
    for digest in store.retained_images().await? {
        let image = match store.image(&digest).await? {
            Record::Missing => {
                found(vec![IntegrityProblem::MissingImage { image: digest }], 0, 0);
                continue;
            }
            Record::Malformed => {
                found(
                    vec![IntegrityProblem::ImageMismatch { image: digest }],
                    1,
                    0,
                );
                continue;
            }
            Record::Image(image) => image,
        };
        let mut problems = Vec::new();
        let mut hasher = Sha256::new();
        let n = image.manifest.len();
        let mut total = 0u64;
        for start in (0..n).step_by(RUN) {
            let run = start..(start + RUN).min(n);
            let mut stored = store.read(&image, run.clone()).await?.into_iter();
            for address in &image.manifest[run] {
                match judge(&digest, address, stored.next()) {
                    Ok(bytes) => {
                        total += bytes.len() as u64;
                        hasher.update(&bytes);
                    }
                    // A chunk shared by many images is one defect, reported once.
                    Err(IntegrityProblem::ChunkMismatch { chunk }) if !mismatched.insert(chunk) => {
                    }
                    Err(problem) => problems.push(problem),
                }
            }
        }
        // Damaged or missing chunks already explain a wrong whole; so does a repeated mismatch,
        // which `problems` no longer shows.
        let sound = problems.is_empty() && !image.manifest.iter().any(|c| mismatched.contains(c));
        if sound && (Digest::from_bytes(hasher.finalize().into()) != digest || total != image.size)
        {
            problems.push(IntegrityProblem::ImageMismatch { image: digest });
        }
        found(problems, 1, total);
    }
    Ok(progress.borrow().clone())
}

/// The bytes of one chunk of `image` at `address`, or what is wrong with them.
fn judge(
    image: &Digest,
    address: &Digest,
    stored: Option<Stored>,
) -> Result<Bytes, IntegrityProblem> {
    match stored {
        Some(Stored::Bytes(bytes)) if Digest::of(&bytes) == *address => Ok(bytes),
        Some(Stored::Bytes(_)) => Err(IntegrityProblem::ChunkMismatch { chunk: *address }),
        Some(Stored::Missing) | None => Err(IntegrityProblem::MissingChunk {
            image: *image,
            chunk: *address,
        }),
    }
}

#[cfg(test)]
mod tests;
