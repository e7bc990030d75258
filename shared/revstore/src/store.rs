//! The one trait every backend implements, and the streamed download it returns.

use std::{
    collections::HashMap,
    future::Future,
    io,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::{
    error::{ProvisionError, PutError, ReadError, ReclaimError, StorageError},
    types::{
        Digest, ErasureReport, IntegrityReport, JournalEntry, Principal, PutLedgerEntry,
        PutOutcome, PutRequest, ReclaimReport, RestoreRequest, Revision, RevisionInfo, ServedEntry,
        StorageStats, StoreId, UsageReport, UserId,
    },
};

/// A revisioned compare-and-swap store of users' database images.
///
/// Every method is async and returns a `Send` future, so a service can hold a store in an `Arc` and
/// call it from any task. The trait is used generically (or through [`crate::AnyStore`], which picks
/// a backend at run time); it is not object-safe, by design, so that no future is boxed.
pub trait RevStore: Send + Sync + 'static {
    /// The backend's name for health reports: `memory`, `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;

    /// The store's identity ([`StoreId`]), fixed when the store was created.
    fn store_id(&self) -> &StoreId;

    /// Checks that the backend answers.
    fn health(&self) -> impl Future<Output = Result<(), StorageError>> + Send;

    /// This process's subscriptions to the users' commits (issue 40): every commit through any
    /// replica of the store wakes its user's subscribers ([`crate::revisions`]).
    fn revisions(&self) -> &Arc<crate::Revisions>;

    /// Records the user on first contact. Creates no image; returns whether the user was new.
    /// An id this store erased is refused ([`ProvisionError::Erased`]): it is never used again.
    fn provision_user(
        &self,
        user: &UserId,
    ) -> impl Future<Output = Result<bool, ProvisionError>> + Send;

    /// Streams a new image in and, if the precondition holds, makes it the user's current revision.
    ///
    /// The body is read to its end unless the put is refused early (a precondition that cannot
    /// hold, or a byte past the quota). Durability: the returned revision survives a crash.
    fn put<B>(
        &self,
        request: PutRequest,
        body: B,
    ) -> impl Future<Output = Result<PutOutcome, PutError>> + Send
    where
        B: Stream<Item = io::Result<Bytes>> + Send;

    /// Copies a retained revision's bytes forward as a new revision, under its own precondition.
    fn restore(
        &self,
        request: RestoreRequest,
    ) -> impl Future<Output = Result<PutOutcome, PutError>> + Send;

    /// The user's current revision, without bytes.
    fn head(&self, user: &UserId) -> impl Future<Output = Result<RevisionInfo, ReadError>> + Send;

    /// One retained revision of the user's image, without bytes: what [`RevStore::get_revision`]
    /// would serve, and `NotFound` in exactly the cases it would be (unknown, reclaimed, another
    /// user's). Records nothing in the served ledger, since nothing is served.
    fn head_revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> impl Future<Output = Result<RevisionInfo, ReadError>> + Send;

    /// Streams the user's current image to `principal`, recording it in the served ledger.
    fn get(
        &self,
        user: &UserId,
        principal: &Principal,
    ) -> impl Future<Output = Result<ImageDownload, ReadError>> + Send;

    /// Streams one retained revision of the user's image to `principal`.
    fn get_revision(
        &self,
        user: &UserId,
        revision: &Revision,
        principal: &Principal,
    ) -> impl Future<Output = Result<ImageDownload, ReadError>> + Send;

    /// Streams one retained revision of the user's image for the origin's own use, the base a
    /// delta is assembled on or matched against (issue 21): `NotFound` in exactly the cases
    /// [`RevStore::get_revision`] would be (unknown, reclaimed, another user's), so a delta
    /// route denies as uniformly as the others, and nothing is recorded in the served ledger,
    /// since no byte of it is served as such. The download holds a lease like any other.
    fn read_revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> impl Future<Output = Result<ImageDownload, ReadError>> + Send;

    /// [`RevStore::read_revision`] read whole into a [`BaseImage`], with the addresses its
    /// chunks were checked against, for a put derived from it ([`RevStore::put_held`]).
    fn read_base(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> impl Future<Output = Result<BaseImage, ReadError>> + Send;

    /// [`RevStore::put`] of `image`, held whole in memory, answering also the image as the base
    /// of the next derived put ([`Held`]), so a caller that keeps it need not read it back.
    ///
    /// With `derived`, the image was built from that base (a delta push's image, assembled
    /// from the base it names): the same checks, decision and stored revision, byte for byte,
    /// as a put of the same bytes, but each chunk that is the base's chunk at the same place is
    /// neither hashed nor read back, its stored copy having been checked when the base was read
    /// or written, and the digest is taken as the image's SHA-256: the caller has verified it
    /// (a delta's assembly checks the image against the digest the delta declares), so the
    /// image is hashed once. A base read from another store is ignored: every chunk is hashed.
    fn put_held(
        &self,
        request: PutRequest,
        image: Bytes,
        derived: Option<(&BaseImage, Digest)>,
    ) -> impl Future<Output = Result<Held, PutError>> + Send;

    /// The user's revisions, newest first, at most `limit`; empty for an unknown user.
    fn list_revisions(
        &self,
        user: &UserId,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<RevisionInfo>, StorageError>> + Send;

    /// What was served from this user's images, newest first.
    fn served_ledger(
        &self,
        user: &UserId,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<ServedEntry>, StorageError>> + Send;

    /// Which writes to this user's image were accepted or refused, newest first.
    fn put_ledger(
        &self,
        user: &UserId,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<PutLedgerEntry>, StorageError>> + Send;

    /// Runs one reclamation pass under the configured retention.
    fn reclaim(&self) -> impl Future<Output = Result<ReclaimReport, ReclaimError>> + Send;

    /// What the user's images take: the current image's size, the bytes only the user's earlier
    /// retained revisions hold, and the history's length ([`UsageReport`] defines each). Zeros
    /// for an unknown user.
    fn usage(
        &self,
        user: &UserId,
    ) -> impl Future<Output = Result<UsageReport, StorageError>> + Send;

    /// Erases the user: their current image, every revision, their unfinished puts, and the
    /// chunks, images and pack objects no other user's revision names; scrubs the principals of
    /// their ledger rows; journals every deletion first. The user record stays, with no image,
    /// so a later first put lands as a fresh image; a put racing the erasure either landed before
    /// it (and is erased) or is refused. Idempotent: erasing again reports zeros. The order and
    /// the choices are `erase.rs`'s module docs.
    fn erase(
        &self,
        user: &UserId,
    ) -> impl Future<Output = Result<ErasureReport, ReclaimError>> + Send;

    /// The reclamation journal, newest first.
    fn journal(
        &self,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<JournalEntry>, StorageError>> + Send;

    /// Counts what the store holds.
    fn stats(&self) -> impl Future<Output = Result<StorageStats, StorageError>> + Send;

    /// Reassembles every retained image and checks every chunk against its address and every
    /// image against its digest.
    fn check_integrity(
        &self,
    ) -> impl Future<Output = Result<IntegrityReport, StorageError>> + Send {
        async move {
            let (progress, _) = tokio::sync::watch::channel(IntegrityReport::default());
            self.check_integrity_watched(&progress).await
        }
    }

    /// [`RevStore::check_integrity`], keeping the report in `progress` up to date as each image
    /// is checked (a check of a large store reads all of it), so a caller can show how far it
    /// got and the problems found so far. `progress` starts from an empty report.
    fn check_integrity_watched(
        &self,
        progress: &tokio::sync::watch::Sender<IntegrityReport>,
    ) -> impl Future<Output = Result<IntegrityReport, StorageError>> + Send;
}

/// A download: the revision's metadata, then its bytes.
pub struct ImageDownload {
    /// The revision being served.
    pub info: RevisionInfo,
    /// The bytes, in order. Holds a lease on the image until dropped or read to the end.
    pub body: ImageBody,
}

impl std::fmt::Debug for ImageDownload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageDownload")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// A retained revision's image whole, with the addresses its chunks are stored under: read and
/// checked chunk by chunk against them ([`RevStore::read_base`]), or the bytes a put just
/// stored under them ([`Held`]); the base a put is derived from. Only a store builds one, so a
/// put that names it can trust that its bytes are what the store holds under those addresses.
pub struct BaseImage {
    /// The revision read.
    pub info: RevisionInfo,
    pub(crate) bytes: Bytes,
    /// The image's chunk addresses, in order, of `chunk_size` bytes each (the last one shorter).
    pub(crate) chunks: Vec<Digest>,
    pub(crate) chunk_size: usize,
    /// The store that read it: addresses mean nothing to another one.
    pub(crate) store: StoreId,
}

impl BaseImage {
    /// The image's bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The base as `store` (of `chunk_size`-byte chunks) may derive a put from, if it read it.
    pub(crate) fn usable_by(&self, store: &StoreId, chunk_size: usize) -> Option<&Self> {
        (self.store == *store && self.chunk_size == chunk_size).then_some(self)
    }
}

/// What [`RevStore::put_held`] answers: the outcome, and the image as the base of the next derived
/// put (`None` for a replay, whose bytes the store did not take, and when the addresses it
/// committed could not be read back: the put has landed all the same).
#[derive(Debug)]
pub struct Held {
    /// The put's outcome.
    pub outcome: PutOutcome,
    /// The image as stored, for a [`BaseCache`](crate::BaseCache).
    pub image: Option<BaseImage>,
}

impl std::fmt::Debug for BaseImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BaseImage")
            .field("info", &self.info)
            .field("chunks", &self.chunks.len())
            .finish_non_exhaustive()
    }
}

/// The bytes of an image as a stream of pieces. An error ends it: no piece follows one, so a
/// reader can never splice the bytes after a damaged range onto those before it. Once ended it
/// stays ended (it may be polled again, as a peeked stream is).
pub struct ImageBody {
    inner: Pin<Box<dyn Stream<Item = Result<Bytes, StorageError>> + Send>>,
    ended: bool,
}

impl ImageBody {
    pub(crate) fn new(
        inner: impl Stream<Item = Result<Bytes, StorageError>> + Send + 'static,
    ) -> Self {
        Self {
            inner: Box::pin(inner),
            ended: false,
        }
    }

    /// Reads the whole image into memory.
    pub async fn read_to_vec(mut self) -> Result<Vec<u8>, StorageError> {
        let mut out = Vec::new();
        while let Some(piece) = self.inner.next().await {
            out.extend_from_slice(&piece?);
        }
        Ok(out)
    }
}

impl Stream for ImageBody {
    type Item = Result<Bytes, StorageError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        // Reads run ahead (PostgreSQL+objects reads several ranges at once), so the backend's
        // stream can have later pieces ready after a failed one.
        let next = self.inner.as_mut().poll_next(cx);
        if let Poll::Ready(Some(Err(_)) | None) = &next {
            self.ended = true;
        }
        next
    }
}

/// Process-local download leases, for the backends that live in one process.
///
/// Reclamation skips any image with a live lease, so a download never loses its bytes halfway.
#[derive(Clone, Debug, Default)]
pub(crate) struct Leases(Arc<Mutex<HashMap<Digest, usize>>>);

impl Leases {
    pub(crate) fn take(&self, digest: Digest) -> LeaseGuard {
        *self.lock().entry(digest).or_insert(0) += 1;
        LeaseGuard {
            leases: self.clone(),
            digest,
        }
    }

    pub(crate) fn is_leased(&self, digest: &Digest) -> bool {
        self.lock().contains_key(digest)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Digest, usize>> {
        // A poisoned map is still a correct map: every mutation is a single insert or remove.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Releases its lease when dropped.
#[derive(Debug)]
pub(crate) struct LeaseGuard {
    leases: Leases,
    digest: Digest,
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let mut map = self.leases.lock();
        if let Some(n) = map.get_mut(&self.digest) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.digest);
            }
        }
    }
}

/// A stream that keeps a guard (a download lease) alive until it is read to the end or dropped.
pub(crate) struct Guarded<S, G> {
    inner: S,
    guard: Option<G>,
}

impl<S, G> Guarded<S, G> {
    pub(crate) fn new(inner: S, guard: G) -> Self {
        Self {
            inner,
            guard: Some(guard),
        }
    }
}

impl<S: Stream + Unpin, G: Unpin> Stream for Guarded<S, G> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        if let Poll::Ready(None) = polled {
            // Read to the end: the image no longer needs protecting.
            self.guard = None;
        }
        polled
    }
}
