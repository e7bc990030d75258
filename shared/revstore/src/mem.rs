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
    chunk::{self, ChunkSink, Ingested},
    config::StoreConfig,
    erase,
    error::{ProvisionError, PutError, ReadError, ReclaimError, StorageError},
    integrity,
    protocol::{self, Intent, Primitives, Proposal, ReadBack},
    reclaim::{self, Chunks, InFlight, Listed, Record, Retained, Unreferenced},
    retention::{Candidate, Cutoffs},
    store::{Guarded, ImageBody, ImageDownload, Leases, RevStore},
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

/// A change a memory transaction makes, applied only when the transaction succeeds: the
/// in-memory counterpart of a rollback is not applying them.
enum Change {
    InsertUser(UserId),
    InsertPublication(u64, Publication),
    DeletePublication(u64),
    AbandonPublication(u64),
    InsertImage(Digest, ImageRec),
    AppendRevision(UserId, RevRow),
    SetCurrent(UserId, usize),
    Verdict(UserId, PutLedgerEntry),
}

/// One transaction of the memory store, under its lock: reads see the state as it was, writes
/// wait in `changes` until [`MemTx::apply`].
struct MemTx<'a> {
    state: &'a mut State,
    changes: Vec<Change>,
}

impl<'a> MemTx<'a> {
    fn new(state: &'a mut State) -> Self {
        Self {
            state,
            changes: Vec::new(),
        }
    }

    fn apply(self) {
        let state = self.state;
        for change in self.changes {
            match change {
                Change::InsertUser(user) => {
                    state.users.entry(user).or_default();
                }
                Change::InsertPublication(id, publication) => {
                    state.publications.insert(id, publication);
                }
                Change::DeletePublication(id) => {
                    state.publications.remove(&id);
                }
                Change::AbandonPublication(id) => {
                    if let Some(p) = state.publications.get_mut(&id) {
                        p.abandoned = true;
                    }
                }
                Change::InsertImage(digest, image) => {
                    state.images.insert(digest, image);
                }
                Change::AppendRevision(user, row) => {
                    state.users.entry(user).or_default().revisions.push(row);
                }
                Change::SetCurrent(user, index) => {
                    state.users.entry(user).or_default().current = Some(index);
                }
                Change::Verdict(user, entry) => state.puts.push((user, entry)),
            }
        }
    }

    /// The id's record, or its tombstone under the pseudonym (an erasure renames it).
    fn rec(&self, user: &UserId) -> Option<&UserRec> {
        self.state.users.get(user).or_else(|| {
            let pseudonym = UserId::new(crate::erase::pseudonym(user.as_str())).ok()?;
            self.state.users.get(&pseudonym)
        })
    }
}

fn accepted(row: &RevRow) -> Accepted {
    Accepted {
        revision: row.info.revision.clone(),
        base: row.info.base.clone(),
        digest: row.info.digest,
    }
}

impl protocol::WriteTx for MemTx<'_> {
    type Publication = u64;
    type Staged = Staged;

    fn manifest(staged: &Staged) -> &[Digest] {
        &staged.manifest
    }

    async fn user(&mut self, user: &UserId) -> Result<protocol::UserRow, StorageError> {
        Ok(match self.rec(user) {
            None => protocol::UserRow::Unknown,
            Some(rec) if rec.erased => protocol::UserRow::Erased,
            Some(rec) => protocol::UserRow::Known {
                current: rec.current.map(|i| i as u64 + 1),
            },
        })
    }

    async fn insert_user(&mut self, user: &UserId, _at: Timestamp) -> Result<bool, StorageError> {
        self.changes.push(Change::InsertUser(user.clone()));
        Ok(true)
    }

    async fn revision_at(
        &mut self,
        user: &UserId,
        seq: u64,
    ) -> Result<Option<Accepted>, StorageError> {
        Ok(self
            .rec(user)
            .and_then(|rec| {
                rec.revisions
                    .get(usize::try_from(seq).ok()?.checked_sub(1)?)
            })
            .map(accepted))
    }

    async fn has_revision(
        &mut self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<bool, StorageError> {
        Ok(self
            .rec(user)
            .is_some_and(|rec| rec.find(revision).is_some()))
    }

    async fn keyed(
        &mut self,
        user: &UserId,
        key: &IdempotencyKey,
    ) -> Result<Option<Accepted>, StorageError> {
        Ok(self.rec(user).and_then(|rec| {
            rec.revisions
                .iter()
                .rev()
                .find(|r| r.key.as_ref() == Some(key))
                .map(accepted)
        }))
    }

    async fn revision_info(
        &mut self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<Option<RevisionInfo>, StorageError> {
        Ok(self
            .rec(user)
            .and_then(|rec| rec.find(revision))
            .map(|row| row.info.clone()))
    }

    async fn staged_bytes(&mut self, user: &UserId) -> Result<u64, StorageError> {
        Ok(self
            .state
            .publications
            .values()
            .filter(|p| p.user == *user)
            .map(|p| p.reserved)
            .sum())
    }

    async fn insert_publication(
        &mut self,
        intent: &Intent,
        at: Timestamp,
    ) -> Result<u64, StorageError> {
        let id = self.state.next_publication;
        self.state.next_publication += 1;
        self.changes.push(Change::InsertPublication(
            id,
            Publication {
                base: intent.base().cloned(),
                digest: intent.image,
                started_at: at,
                user: intent.user.clone(),
                staged: Vec::new(),
                created: Vec::new(),
                reserved: intent.reserve,
                abandoned: false,
            },
        ));
        Ok(id)
    }

    async fn delete_publication(&mut self, publication: &u64) -> Result<bool, StorageError> {
        let present = self.state.publications.contains_key(publication);
        self.changes.push(Change::DeletePublication(*publication));
        Ok(present)
    }

    async fn abandon_publication(
        &mut self,
        publication: &u64,
        _at: Timestamp,
    ) -> Result<(), StorageError> {
        self.changes.push(Change::AbandonPublication(*publication));
        Ok(())
    }

    async fn stored_image(
        &mut self,
        digest: &Digest,
    ) -> Result<Option<(u64, Vec<Digest>)>, StorageError> {
        Ok(self
            .state
            .images
            .get(digest)
            .map(|image| (image.size, image.manifest.clone())))
    }

    async fn insert_image(
        &mut self,
        image: &protocol::Image,
        staged: &Staged,
        _at: Timestamp,
    ) -> Result<(), PutError> {
        self.changes.push(Change::InsertImage(
            image.digest,
            ImageRec {
                size: image.size,
                manifest: staged.manifest.clone(),
            },
        ));
        Ok(())
    }

    async fn heal_stored(&mut self, _: &Staged, _: Timestamp) -> Result<(), PutError> {
        // Healed as it was published: a damaged chunk's bytes were replaced there.
        Ok(())
    }

    async fn last_seq(&mut self, user: &UserId) -> Result<u64, StorageError> {
        Ok(self.rec(user).map_or(0, |rec| rec.revisions.len() as u64))
    }

    async fn append_revision(
        &mut self,
        user: &UserId,
        _seq: u64,
        info: &RevisionInfo,
        key: Option<&IdempotencyKey>,
    ) -> Result<(), StorageError> {
        self.changes.push(Change::AppendRevision(
            user.clone(),
            RevRow {
                info: info.clone(),
                key: key.cloned(),
            },
        ));
        Ok(())
    }

    async fn set_current(&mut self, user: &UserId, seq: u64) -> Result<(), StorageError> {
        self.changes.push(Change::SetCurrent(
            user.clone(),
            seq.saturating_sub(1) as usize,
        ));
        Ok(())
    }

    async fn record_verdict(
        &mut self,
        user: &UserId,
        principal: &Principal,
        at: Timestamp,
        verdict: Result<&Revision, &PutError>,
    ) -> Result<(), StorageError> {
        let (verdict, revision) = match verdict {
            Ok(revision) => (Verdict::Accepted, Some(revision.clone())),
            Err(err) => (
                Verdict::Refused {
                    reason: err.reason().to_owned(),
                },
                None,
            ),
        };
        self.changes.push(Change::Verdict(
            user.clone(),
            PutLedgerEntry {
                verdict,
                revision,
                at,
                principal: principal.clone(),
            },
        ));
        Ok(())
    }
}

/// Runs `f` in a memory transaction under the state's lock, applying its changes when it
/// returns `Ok` (a begin's refusal is an `Ok` too: its ledger row stays).
fn transaction<T, E>(
    state: &mut State,
    f: impl AsyncFnOnce(&mut MemTx<'_>) -> Result<T, E>,
) -> Result<T, E> {
    let mut tx = MemTx::new(state);
    // Every statement is a map operation under the lock: the future never waits.
    let value = futures::executor::block_on(f(&mut tx))?;
    tx.apply();
    Ok(value)
}

pub(crate) struct MemSink(Vec<(Digest, Bytes)>);

impl ChunkSink for MemSink {
    async fn accept(&mut self, chunks: Vec<Bytes>) -> Result<(), PutError> {
        self.0
            .extend(chunks.into_iter().map(|c| (Digest::of(&c), c)));
        Ok(())
    }
}

/// A put's chunks once stored: its manifest.
#[derive(Debug)]
pub(crate) struct Staged {
    manifest: Vec<Digest>,
}

impl Primitives for MemStore {
    type Publication = u64;
    type Sink = MemSink;
    type Staged = Staged;

    fn chunk_size(&self) -> usize {
        self.inner.config.chunk_size as usize
    }

    fn quota(&self) -> u64 {
        self.inner.config.quota_bytes
    }

    fn staged_limit(&self) -> u64 {
        self.inner.config.staged_limit()
    }

    fn faults(&self) -> &crate::config::Faults {
        &self.inner.config.faults
    }

    fn write_health(&self) -> &crate::write_health::WriteHealth {
        &self.inner.write_health
    }

    async fn begin(&self, intent: &Intent) -> Result<u64, PutError> {
        let now = self.now();
        let begun = transaction(&mut self.lock(), async |tx| {
            protocol::begin_in(tx, intent, now).await
        })?;
        match begun {
            protocol::Begun::Published(id) => Ok(id),
            protocol::Begun::Refused(err) => Err(err),
        }
    }

    fn sink(&self, _: &u64) -> MemSink {
        MemSink(Vec::new())
    }

    async fn publish(
        &self,
        publication: &u64,
        sink: MemSink,
        ingested: Result<Ingested, PutError>,
    ) -> Result<(Ingested, Staged), PutError> {
        let ingested = ingested?;
        let mut state = self.lock();
        match state.publications.get_mut(publication) {
            Some(p) => p.digest = Some(ingested.digest),
            // Taken while the bytes streamed in: nothing is published under a record that is gone.
            None => return Err(StorageError::unavailable(protocol::RECORD_GONE).into()),
        }
        // Create-once, except for damage: the sink hashed what it was given, so an occupied
        // address holding other bytes holds damaged ones, and this put's copy heals it for
        // every image that shares the chunk (issue 36 point 8).
        let mut created = Vec::new();
        for (digest, bytes) in &sink.0 {
            match state.chunks.get_mut(digest) {
                Some(existing) if existing != bytes => existing.clone_from(bytes),
                Some(_) => {}
                None => {
                    state.chunks.insert(*digest, bytes.clone());
                    created.push(*digest);
                }
            }
        }
        let manifest: Vec<Digest> = sink.0.into_iter().map(|(d, _)| d).collect();
        if let Some(p) = state.publications.get_mut(publication) {
            p.staged.clone_from(&manifest);
            p.created = created;
        }
        Ok((ingested, Staged { manifest }))
    }

    async fn read_back(&self, what: ReadBack<'_, Staged>) -> Result<(), PutError> {
        let state = self.lock();
        let manifest = match what {
            ReadBack::Staged(staged) => &staged.manifest,
            ReadBack::Image(digest) => {
                &state.images.get(digest).ok_or(PutError::NotFound)?.manifest
            }
        };
        state.read_chunks(manifest)?;
        Ok(())
    }

    async fn commit(
        &self,
        publication: &u64,
        proposal: Proposal<Staged>,
    ) -> Result<PutOutcome, PutError> {
        let now = self.now();
        transaction(&mut self.lock(), async |tx| {
            protocol::commit_in(tx, publication, &proposal, now).await
        })
    }

    async fn abandon(&self, publication: &u64, intent: &Intent, err: &PutError) {
        let now = self.now();
        // A map operation cannot fail; the result is there for the durable backends.
        let _ = transaction(&mut self.lock(), async |tx| {
            protocol::abandon_in(tx, publication, intent, err, now).await
        });
    }

    async fn discard(&self, publication: &u64) {
        let id = publication.to_string();
        // Like a pass, it holds the state's lock throughout and waits on nothing else.
        let discarded = futures::executor::block_on(reclaim::discard(self, &id, self.now()));
        if let Err(err) = discarded {
            tracing::warn!(reason = err.reason(), error = %err, "could not reclaim what a failed put staged; the next reclamation pass takes it");
        }
    }

    async fn revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<Option<RevisionInfo>, StorageError> {
        let state = self.lock();
        Ok(state
            .users
            .get(user)
            .and_then(|rec| rec.find(revision))
            .map(|row| row.info.clone()))
    }

    async fn ledger_refusal(&self, intent: &Intent, err: &PutError) -> Result<(), StorageError> {
        let now = self.now();
        transaction(&mut self.lock(), async |tx| {
            protocol::ledger_refusal_in(tx, intent, err, now).await
        })
    }
}

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
        let state = self.lock();
        let pseudonym = crate::erase::pseudonym(user.as_str());
        Ok(state
            .served
            .iter()
            .rev()
            .filter(|(u, _)| u == user || u.as_str() == pseudonym)
            .take(limit)
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn put_ledger(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<PutLedgerEntry>, StorageError> {
        let state = self.lock();
        let pseudonym = crate::erase::pseudonym(user.as_str());
        Ok(state
            .puts
            .iter()
            .rev()
            .filter(|(u, _)| u == user || u.as_str() == pseudonym)
            .take(limit)
            .map(|(_, e)| e.clone())
            .collect())
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
        futures::executor::block_on(erase::erase(
            self,
            user,
            &self.inner.config.retention,
            self.now(),
        ))
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

impl reclaim::Reclaimer for MemStore {
    type Pass<'a> = MemPass<'a>;

    fn faults(&self) -> &crate::config::Faults {
        &self.inner.config.faults
    }

    async fn list(&self) -> Result<Vec<Listed>, ReclaimError> {
        if self.inner.config.faults.incomplete_listing() {
            return Err(ReclaimError::IncompleteListing);
        }
        // Chunks live in the state itself: there are no objects at rest.
        Ok(Vec::new())
    }

    async fn begin(&self, _taking: reclaim::Taking<'_>) -> Result<MemPass<'_>, StorageError> {
        Ok(MemPass {
            state: self.lock(),
            leases: &self.inner.leases,
        })
    }
}

/// A pass over the memory store: its state, locked.
pub(crate) struct MemPass<'a> {
    state: MutexGuard<'a, State>,
    leases: &'a Leases,
}

impl reclaim::Pass for MemPass<'_> {
    async fn orphans(
        &mut self,
        taking: reclaim::Taking<'_>,
    ) -> Result<Vec<reclaim::Orphan>, StorageError> {
        Ok(self
            .state
            .publications
            .iter()
            .filter(|(id, p)| match taking {
                reclaim::Taking::Orphans(cutoff) => p.abandoned || p.started_at <= cutoff,
                reclaim::Taking::Abandoned(wanted) => p.abandoned && id.to_string() == wanted,
                reclaim::Taking::User(user) => p.user.as_str() == user,
            })
            .map(|(id, p)| reclaim::Orphan {
                record: Record {
                    id: id.to_string(),
                    user: p.user.as_str().to_owned(),
                },
                started_at: p.started_at,
                objects: Vec::new(),
                chunks: p.created.clone(),
            })
            .collect())
    }

    async fn delete_records(&mut self, records: &[Record]) -> Result<(), StorageError> {
        for record in records {
            if let Ok(id) = record.id.parse::<u64>() {
                self.state.publications.remove(&id);
            }
        }
        Ok(())
    }

    async fn in_flight(&mut self) -> Result<InFlight, StorageError> {
        let mut in_flight = InFlight::default();
        for p in self.state.publications.values() {
            if let Some(base) = &p.base {
                in_flight
                    .bases
                    .insert((p.user.as_str().to_owned(), base.to_string()));
            }
            in_flight.images.extend(p.digest);
            in_flight.chunks.extend(p.staged.iter().copied());
        }
        Ok(in_flight)
    }

    async fn named_by_images(
        &mut self,
        chunks: &[Digest],
        _since: Timestamp,
    ) -> Result<HashSet<Digest>, StorageError> {
        let wanted: HashSet<&Digest> = chunks.iter().collect();
        Ok(self
            .state
            .images
            .values()
            .flat_map(|i| i.manifest.iter())
            .filter(|c| wanted.contains(c))
            .copied()
            .collect())
    }

    async fn retained(
        &mut self,
        keep_newest: u64,
        _now: Timestamp,
    ) -> Result<Vec<Retained>, StorageError> {
        let mut out = Vec::new();
        for (user, rec) in &self.state.users {
            let n = rec.revisions.len();
            for (idx, row) in rec.revisions.iter().enumerate() {
                let newer = (n - 1 - idx) as u64;
                if !row.info.retained || newer < keep_newest {
                    continue;
                }
                out.push(Retained {
                    user: user.as_str().to_owned(),
                    seq: idx as i64,
                    revision: row.info.revision.to_string(),
                    candidate: Candidate {
                        newer,
                        current: rec.current == Some(idx),
                        superseded_at: rec.revisions.get(idx + 1).map(|r| r.info.accepted_at),
                        leased: self.leases.is_leased(&row.info.digest),
                        base_in_flight: false,
                    },
                });
            }
        }
        Ok(out)
    }

    async fn release(
        &mut self,
        revisions: &[Retained],
        _now: Timestamp,
    ) -> Result<(), StorageError> {
        for r in revisions {
            let row = self
                .state
                .users
                .iter_mut()
                .find(|(user, _)| user.as_str() == r.user)
                .and_then(|(_, rec)| rec.revisions.get_mut(r.seq as usize));
            if let Some(row) = row {
                row.info.retained = false;
            }
        }
        Ok(())
    }

    async fn unreferenced_images(
        &mut self,
        _now: Timestamp,
    ) -> Result<Vec<Unreferenced>, StorageError> {
        let referenced: HashSet<Digest> = self
            .state
            .users
            .values()
            .flat_map(|rec| rec.revisions.iter())
            .filter(|r| r.info.retained)
            .map(|r| r.info.digest)
            .collect();
        Ok(self
            .state
            .images
            .keys()
            .filter(|d| !referenced.contains(d))
            .map(|d| Unreferenced {
                digest: *d,
                leased: self.leases.is_leased(d),
            })
            .collect())
    }

    async fn delete_images(&mut self, images: &[Digest]) -> Result<(), StorageError> {
        for digest in images {
            self.state.images.remove(digest);
        }
        Ok(())
    }

    async fn chunks(&mut self, _cutoffs: &Cutoffs) -> Result<Chunks, StorageError> {
        // A put in flight writes its chunks before its image record: those it staged are not
        // candidates until it lands (an image names them) or goes (its record goes).
        let staged: HashSet<Digest> = self
            .state
            .publications
            .values()
            .flat_map(|p| p.staged.iter().copied())
            .collect();
        Ok(Chunks {
            candidates: self
                .state
                .chunks
                .keys()
                .filter(|c| !staged.contains(c))
                .copied()
                .collect(),
            live: self
                .state
                .images
                .values()
                .flat_map(|i| i.manifest.iter().copied())
                .collect(),
        })
    }

    async fn delete_chunks(&mut self, chunks: &[Digest]) -> Result<(), StorageError> {
        for chunk in chunks {
            self.state.chunks.remove(chunk);
        }
        Ok(())
    }

    async fn empty_objects(&mut self) -> Result<Vec<String>, StorageError> {
        Ok(Vec::new())
    }

    async fn unregister_objects(&mut self, _names: &[String]) -> Result<(), StorageError> {
        Ok(())
    }

    async fn registered_objects(&mut self) -> Result<HashSet<String>, StorageError> {
        Ok(HashSet::new())
    }

    async fn history(&mut self, user: &str) -> Result<Vec<(String, Digest)>, StorageError> {
        Ok(self
            .state
            .users
            .iter()
            .filter(|(u, _)| u.as_str() == user)
            .flat_map(|(_, rec)| rec.revisions.iter())
            .map(|r| (r.info.revision.to_string(), r.info.digest))
            .collect())
    }

    async fn delete_history(&mut self, user: &str) -> Result<(), StorageError> {
        if let Some((_, rec)) = self
            .state
            .users
            .iter_mut()
            .find(|(u, _)| u.as_str() == user)
        {
            *rec = UserRec::default();
        }
        Ok(())
    }

    async fn named_chunks(&mut self, images: &[Digest]) -> Result<HashSet<Digest>, StorageError> {
        Ok(images
            .iter()
            .filter_map(|d| self.state.images.get(d))
            .flat_map(|i| i.manifest.iter().copied())
            .collect())
    }

    async fn places(&mut self, chunks: &[Digest]) -> Result<Vec<reclaim::Place>, StorageError> {
        Ok(chunks
            .iter()
            .filter_map(|c| {
                self.state.chunks.get(c).map(|bytes| reclaim::Place {
                    len: bytes.len() as u32,
                    object: None,
                })
            })
            .collect())
    }

    async fn scrub_ledgers(&mut self, user: &str) -> Result<u64, StorageError> {
        let erased = Principal::new(crate::erase::ERASED).map_err(StorageError::unavailable)?;
        let mut scrubbed = 0;
        let State { served, puts, .. } = &mut *self.state;
        let principals = served
            .iter_mut()
            .filter(|(u, _)| u.as_str() == user)
            .map(|(_, e)| &mut e.principal)
            .chain(
                puts.iter_mut()
                    .filter(|(u, _)| u.as_str() == user)
                    .map(|(_, e)| &mut e.principal),
            );
        for principal in principals {
            if *principal != erased {
                *principal = erased.clone();
                scrubbed += 1;
            }
        }
        Ok(scrubbed)
    }

    async fn record_wipes(
        &mut self,
        _ranges: &std::collections::BTreeMap<String, Vec<(u64, u32)>>,
        _at: Timestamp,
    ) -> Result<(), StorageError> {
        // Chunks live in the state itself: deleting one forgets its bytes, and no object keeps
        // any to wipe.
        Ok(())
    }

    async fn pending_wipes(
        &mut self,
    ) -> Result<std::collections::BTreeMap<String, Vec<(u64, u32)>>, StorageError> {
        Ok(std::collections::BTreeMap::new())
    }

    async fn mark_erased(
        &mut self,
        user: &str,
        pseudonym: &str,
        _at: Timestamp,
    ) -> Result<(), StorageError> {
        let (user, pseudonym) = (
            UserId::new(user).map_err(StorageError::unavailable)?,
            UserId::new(pseudonym).map_err(StorageError::unavailable)?,
        );
        if let Some(mut rec) = self.state.users.remove(&user) {
            rec.erased = true;
            self.state.users.insert(pseudonym.clone(), rec);
        }
        let state = &mut *self.state;
        let ledgers = state.served.iter_mut().map(|(u, _)| u);
        for u in ledgers.chain(state.puts.iter_mut().map(|(u, _)| u)) {
            if *u == user {
                *u = pseudonym.clone();
            }
        }
        for entry in &mut state.journal {
            if entry.user.as_ref() == Some(&user) {
                entry.user = Some(pseudonym.clone());
            }
        }
        Ok(())
    }

    async fn tombstones_in_clear(&mut self) -> Result<Vec<String>, StorageError> {
        // Every erasure here renames its tombstone; none was written by an earlier release.
        Ok(Vec::new())
    }

    async fn wipe(&mut self, _object: &str, _ranges: &[(u64, u32)]) -> Result<(), StorageError> {
        Ok(())
    }

    async fn wiped(&mut self, _object: &str) -> Result<(), StorageError> {
        Ok(())
    }

    async fn journal(
        &mut self,
        at: Timestamp,
        kind: ReclaimedKind,
        subjects: &[String],
        user: Option<&str>,
    ) -> Result<(), StorageError> {
        let user = user.and_then(|u| UserId::new(u).ok());
        for subject in subjects {
            self.state.journal.push(JournalEntry {
                at,
                kind,
                subject: subject.clone(),
                user: user.clone(),
            });
        }
        Ok(())
    }

    async fn commit(&mut self, _chunks_deleted: bool) -> Result<(), StorageError> {
        // Every step changed the locked state in place.
        Ok(())
    }

    async fn delete_objects(self, _names: &[String]) -> Result<(), ReclaimError> {
        Ok(())
    }
}
