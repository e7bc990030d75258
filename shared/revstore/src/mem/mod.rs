//! `MemStore`: the whole store in process memory, for tests and for services under test.
//!
//! It follows the same rules as the durable backends (the same [`crate::cas`] decision, content
//! addressing, create-once, retention) so the conformance suite holds it to the same contract;
//! it simply has nothing to make durable.

use std::{
    collections::{HashMap, HashSet},
    io,
    sync::{Arc, Mutex, MutexGuard},
};

use bytes::Bytes;
use futures::Stream;

use crate::{
    cas::Accepted,
    chunk::{self, Batch, ChunkSink, Ingested},
    config::StoreConfig,
    erase,
    error::{ProvisionError, PutError, ReadError, ReclaimError, StorageError},
    integrity,
    protocol::{self, Intent, Primitives, Proposal, ReadBack},
    reclaim::{self, InFlight, Listed, Record, Retained, Unreferenced},
    retention::Candidate,
    store::{BaseImage, Guarded, Held, ImageBody, ImageDownload, Leases, RevStore},
    types::{
        Digest, ErasureReport, IdempotencyKey, IntegrityReport, JournalEntry, Principal,
        PutLedgerEntry, PutOutcome, PutRequest, ReclaimReport, ReclaimedKind, RestoreRequest,
        Revision, RevisionInfo, ServedEntry, StorageStats, StoreId, Timestamp, UsageReport, UserId,
        Verdict,
    },
};

/// A store kept entirely in memory.
#[derive(Clone, Debug)]
pub struct MemStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: StoreConfig,
    /// A new identity per memory store: each is a store of its own.
    store_id: StoreId,
    state: Mutex<State>,
    leases: Leases,
    write_health: crate::write_health::WriteHealth,
    /// The subscriptions to the users' commits, woken by each commit here.
    revisions: Arc<crate::Revisions>,
}

#[derive(Debug, Default)]
struct State {
    users: HashMap<UserId, UserRec>,
    images: HashMap<Digest, ImageRec>,
    chunks: HashMap<Digest, Bytes>,
    publications: HashMap<u64, Publication>,
    next_publication: u64,
    served: Vec<(UserId, ServedEntry)>,
    puts: Vec<(UserId, PutLedgerEntry)>,
    journal: Vec<JournalEntry>,
}

#[derive(Debug, Default)]
struct UserRec {
    current: Option<usize>,
    revisions: Vec<RevRow>,
    /// Erased (issue 36): the id is refused for good.
    erased: bool,
}

#[derive(Debug)]
struct RevRow {
    info: RevisionInfo,
    key: Option<IdempotencyKey>,
}

#[derive(Debug)]
struct ImageRec {
    size: u64,
    manifest: Vec<Digest>,
}

#[derive(Debug)]
struct Publication {
    base: Option<Revision>,
    digest: Option<Digest>,
    started_at: Timestamp,
    user: UserId,
    /// The chunks the put has written, which reclamation leaves alone until it lands or goes.
    staged: Vec<Digest>,
    /// The chunks the put stored that were not stored before.
    created: Vec<Digest>,
    /// The bytes it holds against the user's limit on staged bytes.
    reserved: u64,
    /// Whether it failed (and what it staged may go at once).
    abandoned: bool,
}

impl MemStore {
    /// Creates an empty store.
    pub fn new(config: StoreConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                write_health: crate::write_health::WriteHealth::new(config.clock.clone()),
                config,
                // Without entropy the id is still this store's alone among memory stores.
                store_id: StoreId::generate().unwrap_or_else(|_| StoreId::process_local()),
                state: Mutex::default(),
                leases: Leases::default(),
                revisions: crate::Revisions::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every mutation below completes before the guard is dropped, so a poisoned state is
        // still consistent.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> Timestamp {
        self.inner.config.clock.now()
    }
}

impl UserRec {
    fn current_row(&self) -> Option<&RevRow> {
        self.current.map(|i| &self.revisions[i])
    }

    fn find(&self, revision: &Revision) -> Option<&RevRow> {
        self.revisions.iter().find(|r| r.info.revision == *revision)
    }
}

impl State {
    /// Reassembles an image from its chunks, verifying each against its address.
    fn read_back(&self, digest: &Digest) -> Result<Vec<Bytes>, StorageError> {
        let image = self
            .images
            .get(digest)
            .ok_or_else(|| StorageError::Corrupt {
                object: format!("image {digest}"),
            })?;
        self.read_chunks(&image.manifest)
    }

    /// The chunks of a manifest, each checked against its address.
    fn read_chunks(&self, manifest: &[Digest]) -> Result<Vec<Bytes>, StorageError> {
        manifest
            .iter()
            .map(|c| {
                let bytes = self.chunks.get(c).ok_or_else(|| StorageError::Corrupt {
                    object: format!("chunk {c}"),
                })?;
                chunk::check(c, bytes)?;
                Ok(bytes.clone())
            })
            .collect()
    }
}

mod pass;
mod put;

use put::transaction;

impl MemStore {
    /// Flips one bit of the stored chunk `chunk`; false when there is none. For the conformance
    /// suite, which damages every backend's stored bytes the way a failing disk would: a
    /// memory store has no disk to damage.
    #[doc(hidden)]
    pub fn damage_chunk(&self, chunk: &Digest) -> bool {
        let mut state = self.lock();
        let Some(bytes) = state.chunks.get_mut(chunk) else {
            return false;
        };
        let mut damaged = bytes.to_vec();
        let middle = damaged.len() / 2;
        damaged[middle] ^= 0x01;
        *bytes = Bytes::from(damaged);
        true
    }

    /// Every byte string the store holds (chunks, principals, journal subjects and users), for
    /// the conformance suite's erasure scan: a memory store has no files to search.
    #[doc(hidden)]
    pub fn dump(&self) -> Vec<Vec<u8>> {
        let state = self.lock();
        let mut held: Vec<Vec<u8>> = state.chunks.values().map(|c| c.to_vec()).collect();
        for (user, rec) in &state.users {
            held.push(user.as_str().as_bytes().to_vec());
            for r in &rec.revisions {
                held.push(r.info.principal.as_str().as_bytes().to_vec());
            }
        }
        held.extend(
            state
                .served
                .iter()
                .map(|(_, e)| e.principal.as_str().as_bytes().to_vec()),
        );
        held.extend(
            state
                .puts
                .iter()
                .map(|(_, e)| e.principal.as_str().as_bytes().to_vec()),
        );
        held.extend(state.journal.iter().map(|e| e.subject.as_bytes().to_vec()));
        held
    }

    fn download(
        &self,
        user: &UserId,
        revision: Option<&Revision>,
        // None: read for the origin's own use, not served, so not in the served ledger.
        principal: Option<&Principal>,
    ) -> Result<ImageDownload, ReadError> {
        let now = self.now();
        let mut state = self.lock();
        let info = {
            let rec = state.users.get(user).ok_or(ReadError::NotFound)?;
            let row = match revision {
                None => rec.current_row(),
                Some(r) => rec.find(r),
            };
            match row {
                Some(row) if row.info.retained => row.info.clone(),
                _ => return Err(ReadError::NotFound),
            }
        };
        let pieces = state.read_back(&info.digest)?;
        let lease = self.inner.leases.take(info.digest);
        if let Some(principal) = principal {
            state.served.push((
                user.clone(),
                ServedEntry {
                    revision: info.revision.clone(),
                    at: now,
                    principal: principal.clone(),
                },
            ));
        }
        let body = Guarded::new(futures::stream::iter(pieces.into_iter().map(Ok)), lease);
        Ok(ImageDownload {
            info,
            body: ImageBody::new(body),
        })
    }
}

impl RevStore for MemStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn store_id(&self) -> &StoreId {
        &self.inner.store_id
    }

    fn revisions(&self) -> &Arc<crate::Revisions> {
        &self.inner.revisions
    }

    async fn health(&self) -> Result<(), StorageError> {
        self.inner.write_health.verdict()
    }

    async fn provision_user(&self, user: &UserId) -> Result<bool, ProvisionError> {
        let now = self.now();
        transaction(&mut self.lock(), async |tx| {
            protocol::provision_in(tx, user, now).await
        })
    }

    async fn put<B>(&self, request: PutRequest, body: B) -> Result<PutOutcome, PutError>
    where
        B: Stream<Item = io::Result<Bytes>> + Send,
    {
        protocol::put(self, request, body).await
    }

    async fn read_base(&self, user: &UserId, revision: &Revision) -> Result<BaseImage, ReadError> {
        protocol::read_base(self, user, revision).await
    }

    async fn put_held(
        &self,
        request: PutRequest,
        image: Bytes,
        derived: Option<(&BaseImage, Digest)>,
    ) -> Result<Held, PutError> {
        protocol::put_held(self, request, image, derived).await
    }

    async fn restore(&self, request: RestoreRequest) -> Result<PutOutcome, PutError> {
        protocol::restore(self, request).await
    }

    async fn head(&self, user: &UserId) -> Result<RevisionInfo, ReadError> {
        let state = self.lock();
        state
            .users
            .get(user)
            .and_then(UserRec::current_row)
            .map(|r| r.info.clone())
            .ok_or(ReadError::NotFound)
    }

    async fn head_revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<RevisionInfo, ReadError> {
        let state = self.lock();
        state
            .users
            .get(user)
            .and_then(|rec| rec.find(revision))
            .filter(|row| row.info.retained)
            .map(|row| row.info.clone())
            .ok_or(ReadError::NotFound)
    }

    async fn get(&self, user: &UserId, principal: &Principal) -> Result<ImageDownload, ReadError> {
        self.download(user, None, Some(principal))
    }

    async fn get_revision(
        &self,
        user: &UserId,
        revision: &Revision,
        principal: &Principal,
    ) -> Result<ImageDownload, ReadError> {
        self.download(user, Some(revision), Some(principal))
    }

    async fn read_revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<ImageDownload, ReadError> {
        self.download(user, Some(revision), None)
    }

    async fn list_revisions(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<RevisionInfo>, StorageError> {
        let state = self.lock();
        Ok(state
            .users
            .get(user)
            .map(|rec| {
                rec.revisions
                    .iter()
                    .rev()
                    .take(limit)
                    .map(|r| r.info.clone())
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn served_ledger(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<ServedEntry>, StorageError> {
        Ok(newest_of(&self.lock().served, user, limit))
    }

    async fn put_ledger(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<PutLedgerEntry>, StorageError> {
        Ok(newest_of(&self.lock().puts, user, limit))
    }

    async fn reclaim(&self) -> Result<ReclaimReport, ReclaimError> {
        // The pass holds the state's lock throughout and never waits on anything else, so it
        // runs to completion here rather than across the caller's awaits.
        futures::executor::block_on(reclaim::run(self, &self.inner.config.retention, self.now()))
    }

    async fn usage(&self, user: &UserId) -> Result<UsageReport, StorageError> {
        let (history, current) = {
            let state = self.lock();
            match state.users.get(user) {
                Some(rec) => (
                    rec.revisions.iter().map(|r| r.info.clone()).collect(),
                    rec.current_row().map(|r| r.info.clone()),
                ),
                None => (Vec::new(), None),
            }
        };
        erase::usage(
            self,
            &history,
            current.as_ref(),
            self.inner.config.chunk_size as usize,
        )
        .await
    }

    async fn erase(&self, user: &UserId) -> Result<ErasureReport, ReclaimError> {
        // Like a pass, it holds the state's lock throughout and waits on nothing else.
        let erased = futures::executor::block_on(erase::erase(self, user, self.now()));
        if erased.is_ok() {
            // The user's subscribers learn they have no image now, as from a commit.
            self.inner.revisions.announce(user);
        }
        erased
    }

    async fn journal(&self, limit: usize) -> Result<Vec<JournalEntry>, StorageError> {
        let state = self.lock();
        Ok(state.journal.iter().rev().take(limit).cloned().collect())
    }

    async fn stats(&self) -> Result<StorageStats, StorageError> {
        let state = self.lock();
        Ok(StorageStats {
            images: state.images.len() as u64,
            chunks: state.chunks.len() as u64,
            chunk_bytes: state.chunks.values().map(|c| c.len() as u64).sum(),
        })
    }

    async fn check_integrity_watched(
        &self,
        progress: &tokio::sync::watch::Sender<IntegrityReport>,
    ) -> Result<IntegrityReport, StorageError> {
        integrity::check(self, progress).await
    }
}

impl integrity::Inspect for MemStore {
    type Layout = ();

    async fn dangling_pointers(&self) -> Result<Vec<UserId>, StorageError> {
        let state = self.lock();
        Ok(state
            .users
            .iter()
            .filter(|(_, rec)| {
                rec.current
                    .is_some_and(|idx| !rec.revisions.get(idx).is_some_and(|r| r.info.retained))
            })
            .map(|(user, _)| user.clone())
            .collect())
    }

    async fn retained_images(&self) -> Result<Vec<Digest>, StorageError> {
        let state = self.lock();
        let images: HashSet<Digest> = state
            .users
            .values()
            .flat_map(|rec| rec.revisions.iter())
            .filter(|r| r.info.retained)
            .map(|r| r.info.digest)
            .collect();
        Ok(images.into_iter().collect())
    }

    async fn unfinished_wipes(&self) -> Result<Vec<(String, u64)>, StorageError> {
        // No object keeps bytes to wipe.
        Ok(Vec::new())
    }

    async fn image(&self, digest: &Digest) -> Result<integrity::Record<()>, StorageError> {
        Ok(match self.lock().images.get(digest) {
            None => integrity::Record::Missing,
            Some(image) => integrity::Record::Image(integrity::Image {
                size: image.size,
                manifest: image.manifest.clone(),
                layout: (),
            }),
        })
    }

    async fn read(
        &self,
        image: &integrity::Image<()>,
        run: std::ops::Range<usize>,
    ) -> Result<Vec<integrity::Stored>, StorageError> {
        let state = self.lock();
        Ok(image.manifest[run]
            .iter()
            .map(|c| {
                state.chunks.get(c).map_or(integrity::Stored::Missing, |b| {
                    integrity::Stored::Bytes(b.clone())
                })
            })
            .collect())
    }
}

/// A ledger's newest `limit` entries of `user`, also those kept under the user's pseudonym
/// after an erasure (`erase::pseudonym`).
fn newest_of<E: Clone>(ledger: &[(UserId, E)], user: &UserId, limit: usize) -> Vec<E> {
    let pseudonym = crate::erase::pseudonym(user.as_str());
    ledger
        .iter()
        .rev()
        .filter(|(u, _)| u == user || u.as_str() == pseudonym)
        .take(limit)
        .map(|(_, e)| e.clone())
        .collect()
}
