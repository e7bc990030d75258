//! The memory store's side of a put: its transaction (changes applied only on success) and
//! the protocol's primitives.

use super::*;
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
pub(super) struct MemTx<'a> {
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
        // The memory store keeps every manifest whole.
        _against: Option<&Digest>,
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
                    reason: err.reason().name.to_owned(),
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
pub(super) fn transaction<T, E>(
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
    async fn accept(&mut self, batch: Batch) -> Result<(), PutError> {
        let addresses = batch.addresses();
        self.0.extend(addresses.into_iter().zip(batch.chunks));
        Ok(())
    }
}

/// A put's chunks once stored: its manifest.
#[derive(Debug)]
pub(crate) struct Staged {
    manifest: Vec<Digest>,
}

impl Primitives for MemStore {
    fn committed(&self, user: &UserId) {
        self.inner.revisions.announce(user);
    }

    type Publication = u64;
    type Sink = MemSink;
    type Staged = Staged;

    fn chunk_size(&self) -> usize {
        self.inner.config.chunk_size as usize
    }

    async fn manifest(&self, image: &Digest) -> Result<Option<Vec<Digest>>, StorageError> {
        Ok(self.lock().images.get(image).map(|i| i.manifest.clone()))
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
            tracing::warn!(reason = err.reason().name, error = %err, "could not reclaim what a failed put staged; the next reclamation pass takes it");
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
