//! The PostgreSQL store's transactions of a write ([`crate::protocol`]: begin, commit, abandon),
//! run over this store's typed statements ([`PgTx`]).
//!
//! The commit's transaction is written with full durability whatever the server's default
//! (`synchronous_commit = on`), holds the store's advisory lock shared (a reclamation pass holds
//! it exclusive, so none runs between the facts and the pointer's move), and locks the user's
//! pointer row (`FOR UPDATE`), so two commits of one user decide one after the other.

use std::collections::HashSet;

use tokio_postgres::Transaction;

use super::*;
use super::{INFO_COLUMNS, PgStore, accepted_row, info_row, lock_shared};
use crate::{
    cas::Accepted,
    chunk,
    error::{ProvisionError, PutError, StorageError},
    protocol::{self, Image, Intent, Proposal, UserRow, WriteTx},
    types::{
        Digest, IdempotencyKey, Principal, PutOutcome, Revision, RevisionInfo, Timestamp, UserId,
    },
};

/// One transaction of the PostgreSQL store, as the protocol writes through it.
pub(crate) struct PgTx<'a> {
    tx: &'a Transaction<'a>,
    store: &'a PgStore,
    /// Whether reading the user's pointer row locks it until the transaction ends (the commit).
    lock_pointer: bool,
}

impl<'a> PgTx<'a> {
    fn new(tx: &'a Transaction<'a>, store: &'a PgStore) -> Self {
        Self {
            tx,
            store,
            lock_pointer: false,
        }
    }
}

impl PgStore {
    /// Step 1: refuses early (ledgered) or writes the publication record.
    pub(super) async fn begin_write(&self, intent: &Intent) -> Result<i64, PutError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let begun = protocol::begin_in(&mut PgTx::new(&tx, self), intent, now).await?;
        tx.commit().await?;
        match begun {
            protocol::Begun::Published(id) => Ok(id),
            protocol::Begun::Refused(err) => Err(err),
        }
    }

    /// Step 5, the commit (see the module docs for its locks).
    pub(super) async fn commit_write(
        &self,
        publication: i64,
        proposal: &Proposal<Staged>,
    ) -> Result<PutOutcome, PutError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.batch_execute("SET LOCAL synchronous_commit = on")
            .await?;
        lock_shared(&*tx, self.inner.lock_key).await?;
        let mut statements = PgTx::new(&tx, self);
        statements.lock_pointer = true;
        // An error drops the transaction: rolled back.
        let outcome = protocol::commit_in(&mut statements, &publication, proposal, now).await?;
        tx.commit().await?;
        Ok(outcome)
    }

    /// Step 6: marks the publication record abandoned and ledgers the refusal; a failure to is
    /// logged, and the record goes as an orphan after the orphan period.
    pub(super) async fn abandon_write(&self, publication: i64, intent: &Intent, err: &PutError) {
        let now = self.now();
        let abandoned = async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            protocol::abandon_in(&mut PgTx::new(&tx, self), &publication, intent, err, now).await?;
            tx.commit().await?;
            Ok::<_, StorageError>(())
        }
        .await;
        if let Err(e) = abandoned {
            tracing::warn!(error = %e, "could not mark the publication record of a failed put abandoned");
        }
    }

    /// First contact: the user's pointer row, or the refusal of an erased id.
    pub(super) async fn provision(&self, user: &UserId) -> Result<bool, ProvisionError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(StorageError::from)?;
        let created = protocol::provision_in(&mut PgTx::new(&tx, self), user, now).await?;
        tx.commit().await.map_err(StorageError::from)?;
        Ok(created)
    }

    /// Ledgers a refusal that happened before any publication record existed.
    pub(super) async fn ledger_refusal_now(
        &self,
        intent: &Intent,
        err: &PutError,
    ) -> Result<(), StorageError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        protocol::ledger_refusal_in(&mut PgTx::new(&tx, self), intent, err, now).await?;
        tx.commit().await?;
        Ok(())
    }
}

impl WriteTx for PgTx<'_> {
    type Publication = i64;
    type Staged = Staged;

    fn manifest(staged: &Staged) -> &[Digest] {
        match staged {
            Staged::Rows(manifest) => manifest,
            Staged::Packs(packs) => &packs.manifest,
        }
    }

    async fn user(&mut self, user: &UserId) -> Result<UserRow, StorageError> {
        // The id's own record, or its tombstone under the pseudonym (an erasure renames it).
        let sql = if self.lock_pointer {
            "SELECT current_seq, erased_at FROM users WHERE user_id IN ($1, $2) ORDER BY erased_at IS NULL LIMIT 1 FOR UPDATE"
        } else {
            "SELECT current_seq, erased_at FROM users WHERE user_id IN ($1, $2) ORDER BY erased_at IS NULL LIMIT 1"
        };
        let pseudonym = crate::erase::pseudonym(user.as_str());
        let row = self
            .tx
            .query_opt(sql, &[&user.as_str(), &pseudonym])
            .await?;
        Ok(match row {
            None => UserRow::Unknown,
            Some(row) => match (row.get::<_, Option<i64>>(0), row.get::<_, Option<i64>>(1)) {
                (_, Some(_)) => UserRow::Erased,
                (current, None) => UserRow::Known {
                    current: current.map(|seq| seq as u64),
                },
            },
        })
    }

    async fn insert_user(&mut self, user: &UserId, at: Timestamp) -> Result<bool, StorageError> {
        Ok(self
            .tx
            .execute(
                "INSERT INTO users (user_id, created_at) VALUES ($1, $2) ON CONFLICT (user_id) DO NOTHING",
                &[&user.as_str(), &at.unix_millis()],
            )
            .await?
            == 1)
    }

    async fn revision_at(
        &mut self,
        user: &UserId,
        seq: u64,
    ) -> Result<Option<Accepted>, StorageError> {
        self.tx
            .query_opt(
                "SELECT revision, base, digest FROM revisions WHERE user_id = $1 AND seq = $2",
                &[&user.as_str(), &(seq as i64)],
            )
            .await?
            .map(|r| accepted_row(&r))
            .transpose()
    }

    async fn has_revision(
        &mut self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<bool, StorageError> {
        Ok(self
            .tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM revisions WHERE user_id = $1 AND revision = $2)",
                &[&user.as_str(), &revision.as_str()],
            )
            .await?
            .get(0))
    }

    async fn keyed(
        &mut self,
        user: &UserId,
        key: &IdempotencyKey,
    ) -> Result<Option<Accepted>, StorageError> {
        self.tx
            .query_opt(
                "SELECT revision, base, digest FROM revisions WHERE user_id = $1 AND idempotency_key = $2 ORDER BY seq DESC LIMIT 1",
                &[&user.as_str(), &key.as_str()],
            )
            .await?
            .map(|r| accepted_row(&r))
            .transpose()
    }

    async fn revision_info(
        &mut self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<Option<RevisionInfo>, StorageError> {
        self.tx
            .query_opt(
                &format!(
                    "SELECT {INFO_COLUMNS} FROM revisions WHERE user_id = $1 AND revision = $2"
                ),
                &[&user.as_str(), &revision.as_str()],
            )
            .await?
            .map(|r| info_row(&r))
            .transpose()
    }

    async fn staged_bytes(&mut self, user: &UserId) -> Result<u64, StorageError> {
        let staged: i64 = self
            .tx
            .query_one(
                "SELECT COALESCE(SUM(reserved), 0)::BIGINT FROM publications WHERE user_id = $1",
                &[&user.as_str()],
            )
            .await?
            .get(0);
        Ok(staged as u64)
    }

    async fn insert_publication(
        &mut self,
        intent: &Intent,
        at: Timestamp,
    ) -> Result<i64, StorageError> {
        let digest = intent.image.as_ref().map(|d| d.as_bytes().as_slice());
        Ok(self
            .tx
            .query_one(
                "INSERT INTO publications (user_id, base, idempotency_key, started_at, digest, reserved) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                &[
                    &intent.user.as_str(),
                    &intent.base().map(Revision::as_str),
                    &intent.key.as_ref().map(IdempotencyKey::as_str),
                    &at.unix_millis(),
                    &digest,
                    &(intent.reserve.min(i64::MAX as u64) as i64),
                ],
            )
            .await?
            .get(0))
    }

    async fn delete_publication(&mut self, publication: &i64) -> Result<bool, StorageError> {
        Ok(self
            .tx
            .execute("DELETE FROM publications WHERE id = $1", &[publication])
            .await?
            > 0)
    }

    async fn abandon_publication(
        &mut self,
        publication: &i64,
        at: Timestamp,
    ) -> Result<(), StorageError> {
        self.tx
            .execute(
                "UPDATE publications SET abandoned_at = $2 WHERE id = $1",
                &[publication, &at.unix_millis()],
            )
            .await?;
        Ok(())
    }

    async fn stored_image(
        &mut self,
        digest: &Digest,
    ) -> Result<Option<(u64, Vec<Digest>)>, StorageError> {
        super::stored_image(self.tx, digest).await
    }

    async fn insert_image(
        &mut self,
        image: &Image,
        staged: &Staged,
        against: Option<&Digest>,
        at: Timestamp,
    ) -> Result<(), PutError> {
        match staged {
            Staged::Packs(staged) => {
                self.store
                    .register_image(self.tx, image, staged, against, at)
                    .await
            }
            Staged::Rows(manifest) => {
                // Every chunk must still be there: the advisory lock keeps passes out from here,
                // but one may have run while the bytes streamed in.
                let distinct: HashSet<&Digest> = manifest.iter().collect();
                let keys: Vec<&[u8]> = distinct.iter().map(|d| d.as_bytes().as_slice()).collect();
                let present: i64 = self
                    .tx
                    .query_one("SELECT count(*) FROM chunks WHERE hash = ANY($1)", &[&keys])
                    .await?
                    .get(0);
                if present as usize != keys.len() {
                    return Err(StorageError::unavailable(
                        "a chunk was reclaimed during the put; retry",
                    )
                    .into());
                }
                let row = super::manifest_to_store(self.tx, manifest, against).await?;
                self.tx
                    .execute(
                        "INSERT INTO images (digest, size, manifest, base, created_at) VALUES ($1, $2, $3, $4, $5)",
                        &[
                            &image.digest.as_bytes().as_slice(),
                            &(image.size as i64),
                            &row.body,
                            &row.base.as_ref().map(|b| b.as_bytes().as_slice()),
                            &at.unix_millis(),
                        ],
                    )
                    .await?;
                Ok(())
            }
        }
    }

    async fn heal_stored(&mut self, staged: &Staged, at: Timestamp) -> Result<(), PutError> {
        match staged {
            Staged::Packs(staged) if !staged.rewritten.is_empty() => self
                .store
                .register_packs(self.tx, staged, at)
                .await
                .map(drop),
            // Rows heal as they stream in (`PgSink`); no damage found, nothing to register.
            Staged::Packs(_) | Staged::Rows(_) => Ok(()),
        }
    }

    async fn last_seq(&mut self, user: &UserId) -> Result<u64, StorageError> {
        let seq: i64 = self
            .tx
            .query_one(
                "SELECT last_seq FROM users WHERE user_id = $1",
                &[&user.as_str()],
            )
            .await?
            .get(0);
        Ok(seq as u64)
    }

    async fn append_revision(
        &mut self,
        user: &UserId,
        seq: u64,
        info: &RevisionInfo,
        key: Option<&IdempotencyKey>,
    ) -> Result<(), StorageError> {
        self.tx
            .execute(
                "INSERT INTO revisions (user_id, seq, revision, digest, size, accepted_at, principal, base, restored_from, idempotency_key, storage_version)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                &[
                    &user.as_str(),
                    &(seq as i64),
                    &info.revision.as_str(),
                    &info.digest.as_bytes().as_slice(),
                    &(info.size as i64),
                    &info.accepted_at.unix_millis(),
                    &info.principal.as_str(),
                    &info.base.as_ref().map(Revision::as_str),
                    &info.restored_from.as_ref().map(Revision::as_str),
                    &key.map(IdempotencyKey::as_str),
                    &info.storage_version.map(i64::from),
                ],
            )
            .await?;
        Ok(())
    }

    async fn announce(&mut self, user: &UserId, revision: &Revision) -> Result<(), StorageError> {
        self.tx
            .execute(
                "SELECT pg_notify($1, $2)",
                &[
                    &self.store.inner.channel,
                    &super::listen::payload(user, revision),
                ],
            )
            .await?;
        Ok(())
    }

    async fn set_current(&mut self, user: &UserId, seq: u64) -> Result<(), StorageError> {
        self.tx
            .execute(
                "UPDATE users SET last_seq = $2, current_seq = $2 WHERE user_id = $1",
                &[&user.as_str(), &(seq as i64)],
            )
            .await?;
        Ok(())
    }

    async fn record_verdict(
        &mut self,
        user: &UserId,
        principal: &Principal,
        at: Timestamp,
        verdict: Result<&Revision, &PutError>,
    ) -> Result<(), StorageError> {
        let (v, reason, revision) = match verdict {
            Ok(r) => ("accepted", None, Some(r.as_str())),
            Err(e) => ("refused", Some(e.reason().name), None),
        };
        self.tx
            .execute(
                "INSERT INTO put_ledger (user_id, verdict, reason, revision, at, principal) VALUES ($1, $2, $3, $4, $5, $6)",
                &[&user.as_str(), &v, &reason, &revision, &at.unix_millis(), &principal.as_str()],
            )
            .await?;
        Ok(())
    }
}

/// Where a put's chunks go: `bytea` rows, or packs in the object store.
pub(crate) enum Sink {
    Rows(PgSink),
    Packs(Box<packs::PackSink>),
}

impl ChunkSink for Sink {
    async fn accept(&mut self, batch: Batch) -> Result<(), PutError> {
        match self {
            Sink::Rows(s) => s.accept(batch).await,
            Sink::Packs(s) => s.accept(batch).await,
        }
    }
}

/// A put's chunks once stored: the manifest (rows), or the manifest and the packs' layout.
pub(crate) enum Staged {
    Rows(Vec<Digest>),
    Packs(packs::Staged),
}

/// Inserts chunks create-once as they stream in, recording in `streamed_chunks` every chunk the
/// put relies on and whether it created the row.
pub(crate) struct PgSink {
    pool: Pool,
    publication: i64,
    lock_key: i64,
    manifest: Vec<Digest>,
    seen: HashSet<Digest>,
    now: i64,
}

impl ChunkSink for PgSink {
    async fn accept(&mut self, batch: Batch) -> Result<(), PutError> {
        let mut hashes: Vec<&[u8]> = Vec::new();
        let mut datas: Vec<&[u8]> = Vec::new();
        let digests = batch.addresses();
        let chunks = batch.chunks;
        for (digest, data) in digests.iter().zip(&chunks) {
            self.manifest.push(*digest);
            if self.seen.insert(*digest) {
                hashes.push(digest.as_bytes().as_slice());
                datas.push(data.as_ref());
            }
        }
        if hashes.is_empty() {
            return Ok(());
        }
        let mut client = self.pool.get().await.map_err(StorageError::from)?;
        let tx = client.transaction().await.map_err(StorageError::from)?;
        // Under the advisory lock, shared: a reclamation pass (exclusive) sees either none of
        // this batch or all of it recorded against the put, so it never takes a row the put
        // relies on, and a failed put's own rows are known to be its own.
        lock_shared(&*tx, self.lock_key).await?;
        // A row already at a chunk's address is reused, unless its bytes no longer hash to it:
        // then this put's bytes (hashed above) heal it for every image that shares it (issue
        // 36 point 8). Only a row the put inserted is its own (`xmax = 0`): a healed row stays
        // when the put fails.
        tx.execute(
            "WITH batch AS (SELECT h, d FROM unnest($1::bytea[], $2::bytea[]) AS t(h, d)),
                  made AS (INSERT INTO chunks (hash, data, created_at) SELECT h, d, $3 FROM batch
                           ON CONFLICT (hash) DO UPDATE SET data = excluded.data
                           WHERE chunks.pack_id IS NULL AND sha256(chunks.data) <> chunks.hash
                           RETURNING hash, (xmax = 0) AS inserted)
             INSERT INTO streamed_chunks (publication_id, hash, created)
             SELECT $4, b.h, EXISTS (SELECT 1 FROM made m WHERE m.hash = b.h AND m.inserted)
             FROM batch b
             ON CONFLICT (publication_id, hash) DO NOTHING",
            &[&hashes, &datas, &self.now, &self.publication],
        )
        .await
        .map_err(StorageError::from)?;
        tx.commit().await.map_err(StorageError::from)?;
        Ok(())
    }
}

impl Primitives for PgStore {
    type Publication = i64;
    type Sink = Sink;
    type Staged = Staged;

    fn chunk_size(&self) -> usize {
        self.inner.chunk_size
    }

    async fn manifest(&self, image: &Digest) -> Result<Option<Vec<Digest>>, StorageError> {
        Ok(self.manifest_of(image).await?.map(|(_, manifest)| manifest))
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

    async fn begin(&self, intent: &Intent) -> Result<i64, PutError> {
        self.begin_write(intent).await
    }

    async fn discard(&self, publication: &i64) {
        let id = publication.to_string();
        if let Err(err) = crate::reclaim::discard(self, &id, self.now()).await {
            tracing::warn!(reason = err.reason().name, error = %err, "could not reclaim what a failed put staged; the next reclamation pass takes it");
        }
    }

    fn sink(&self, publication: &i64) -> Sink {
        match &self.inner.objects {
            Some(objects) => Sink::Packs(Box::new(packs::PackSink::new(
                self.inner.pool.clone(),
                objects.clone(),
                *publication,
                self.inner.lock_key,
            ))),
            None => Sink::Rows(PgSink {
                pool: self.inner.pool.clone(),
                publication: *publication,
                lock_key: self.inner.lock_key,
                manifest: Vec::new(),
                seen: HashSet::new(),
                now: self.now().unix_millis(),
            }),
        }
    }

    async fn publish(
        &self,
        publication: &i64,
        sink: Sink,
        ingested: Result<Ingested, PutError>,
    ) -> Result<(Ingested, Staged), PutError> {
        let ingested = ingested?;
        let staged = match sink {
            Sink::Rows(s) => Staged::Rows(s.manifest),
            Sink::Packs(s) => Staged::Packs(s.finish().await?),
        };
        // Record the digest and the stored chunks the image reuses: from here the image is what
        // the put publishes, and a reclamation pass keeps those chunks. Under the advisory lock
        // (shared), with the reused chunks checked in the same transaction, so no pass can take
        // one between the check and the record.
        let reused: Vec<Digest> = match &staged {
            Staged::Rows(manifest) => {
                let distinct: HashSet<&Digest> = manifest.iter().collect();
                distinct.into_iter().copied().collect()
            }
            Staged::Packs(p) => p.reused().into_keys().copied().collect(),
        };
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        lock_shared(&*tx, self.inner.lock_key).await?;
        if let Staged::Packs(p) = &staged {
            packs::check_reused_chunks(&*tx, p).await?;
        }
        let recorded = tx
            .execute(
                "UPDATE publications SET digest = $1, chunks = $2 WHERE id = $3",
                &[
                    &ingested.digest.as_bytes().as_slice(),
                    &chunk::encode_manifest(&reused),
                    publication,
                ],
            )
            .await?;
        if recorded == 0 {
            // Taken while the bytes streamed in (an erasure of the user, or the orphan period).
            return Err(StorageError::unavailable(protocol::RECORD_GONE).into());
        }
        tx.commit().await?;
        Ok((ingested, staged))
    }

    async fn read_back(&self, what: ReadBack<'_, Staged>) -> Result<(), PutError> {
        match what {
            ReadBack::Staged(Staged::Rows(manifest)) => self.verify(manifest).await,
            ReadBack::Staged(Staged::Packs(staged)) => self.check_reused_packs(staged).await,
            ReadBack::Image(digest) if self.inner.objects.is_some() => {
                self.verify_packed_image(digest)
                    .await
                    .map(|_| ())
                    .map_err(|e| match e {
                        // A restore of a reclaimed image is a missing source, not damage.
                        StorageError::Corrupt { object } if object == format!("image {digest}") => {
                            PutError::NotFound
                        }
                        e => e.into(),
                    })
            }
            ReadBack::Image(digest) => {
                let (_, manifest) = self.manifest_of(digest).await?.ok_or(PutError::NotFound)?;
                self.verify(&manifest).await
            }
        }
    }

    async fn commit(
        &self,
        publication: &i64,
        proposal: Proposal<Staged>,
    ) -> Result<PutOutcome, PutError> {
        self.commit_write(*publication, &proposal).await
    }

    async fn abandon(&self, publication: &i64, intent: &Intent, err: &PutError) {
        self.abandon_write(*publication, intent, err).await;
    }

    async fn revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<Option<RevisionInfo>, StorageError> {
        let client = self.client().await?;
        client
            .query_opt(
                &format!(
                    "SELECT {INFO_COLUMNS} FROM revisions WHERE user_id = $1 AND revision = $2"
                ),
                &[&user.as_str(), &revision.as_str()],
            )
            .await?
            .map(|r| info_row(&r))
            .transpose()
    }

    async fn ledger_refusal(&self, intent: &Intent, err: &PutError) -> Result<(), StorageError> {
        self.ledger_refusal_now(intent, err).await
    }
}
