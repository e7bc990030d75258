//! The embedded store's side of a put: the chunk writer's pack (`absorb.rs`) published
//! create-once and read back, and the transactions of the protocol ([`crate::protocol`]: begin, commit, abandon) run
//! over this store's typed statements ([`SqliteTx`]) under the writer lock.
//!
//! Every statement of a transaction is a plain SQLite call on the blocking thread that holds the
//! writer, so the protocol's transaction functions are driven to completion right there
//! (`futures::executor::block_on` of a future that never waits on anything else).

use std::{
    collections::HashMap,
    fs::{self, File},
    io,
    sync::{Arc, atomic::Ordering},
};

use rusqlite::{OptionalExtension, Transaction, params};
use tokio::sync::mpsc;

use super::{
    INFO_COLUMNS, INSERT_ROWS, Inner, SqliteStore,
    absorb::{Absorbed, ChannelSink, NEW, check_reused},
    accepted_row, durable, info_row,
    packs::{self, ChunkLoc},
};
use crate::{
    cas::Accepted,
    chunk::{Batch, ChunkSink, Ingested},
    error::{PutError, StorageError},
    manifest,
    protocol::{
        self, Image, Intent, Primitives, Proposal, RECORD_GONE, ReadBack, UserRow, WriteTx,
    },
    types::{
        Digest, IdempotencyKey, Principal, PutOutcome, Revision, RevisionInfo, Timestamp, UserId,
    },
};

/// The identity of a put in flight between its steps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Begun {
    publication: i64,
    epoch: u64,
}

/// A put's objects once durable: where its chunks are, and the pack it wrote, if any.
pub(crate) struct Staged {
    absorbed: Absorbed,
    pack_name: Option<String>,
}

impl Inner {
    pub(super) fn reused_by(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Vec<Digest>>> {
        self.reused
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Step 1: refuses early (ledgered) or writes the durable publication record.
    fn begin(&self, intent: &Intent) -> Result<Begun, PutError> {
        let now = self.now();
        let mut conn = self.writer();
        let epoch = self.sweep_epoch.load(Ordering::SeqCst);
        let begun = durable(&mut conn, |tx| {
            futures::executor::block_on(protocol::begin_in(
                &mut SqliteTx::new(tx, self),
                intent,
                now,
            ))
        })?;
        match begun {
            protocol::Begun::Published(publication) => Ok(Begun { publication, epoch }),
            protocol::Begun::Refused(err) => Err(err),
        }
    }

    /// Step 6: marks the publication record of a put that stopped before its commit abandoned,
    /// ledgering the refusal when it was one; `reclaim::discard` then takes what it staged.
    fn abandon(&self, begun: Begun, intent: &Intent, err: &PutError) {
        let now = self.now();
        let mut conn = self.writer();
        self.reused_by().remove(&begun.publication);
        let abandoned = durable(&mut conn, |tx| {
            futures::executor::block_on(protocol::abandon_in(
                &mut SqliteTx::new(tx, self),
                &begun.publication,
                intent,
                err,
                now,
            ))
        });
        if let Err(e) = abandoned {
            // The record stays unmarked; reclamation takes it as an orphan after the orphan period.
            tracing::warn!(error = %e, "could not mark the publication record of a failed put abandoned");
        }
    }

    /// Makes the new pack durable and visible create-once, then verifies the image's chunks.
    fn publish(
        &self,
        begun: Begun,
        ingested: &Ingested,
        absorbed: &mut Absorbed,
    ) -> Result<Option<String>, PutError> {
        let pack_name = absorbed.pack.as_ref().map(|p| packs::pack_name(&p.chunks));
        {
            // The record names the pack before the pack exists under that name, so reclamation
            // always knows an in-flight pack from an orphan.
            let mut conn = self.writer();
            let recorded = durable(&mut conn, |tx| {
                tx.execute(
                    "UPDATE publications SET digest = ?1, size = ?2, pack = ?3 WHERE id = ?4",
                    params![
                        ingested.digest.as_bytes().as_slice(),
                        ingested.size as i64,
                        pack_name,
                        begun.publication
                    ],
                )
            })?;
            if recorded == 0 {
                // Taken while the bytes streamed in (an erasure of the user, or the orphan
                // period): nothing may be published under a record that is gone.
                return Err(StorageError::unavailable(RECORD_GONE).into());
            }
            // From here reclamation keeps the stored chunks this put reuses; one that a pass took
            // while the bytes streamed in fails the put now, before anything else is written.
            if self.sweep_epoch.load(Ordering::SeqCst) != begun.epoch {
                check_reused(&conn, absorbed)?;
            }
            let reused: Vec<Digest> = absorbed
                .locs
                .iter()
                .zip(&absorbed.manifest)
                .filter(|(l, _)| l.pack != NEW)
                .map(|(_, d)| *d)
                .collect();
            self.reused_by().insert(begun.publication, reused);
        }
        if let (Some(pack), Some(name)) = (&absorbed.pack, &pack_name) {
            let dest = self.pack_path(name);
            match fs::hard_link(pack.temp.path(), &dest) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    // Create-once: the occupant must hold exactly our bytes.
                    let occupant = File::open(&dest)?;
                    let same_len = occupant.metadata()?.len() == pack.temp.len;
                    let files = HashMap::from([(NEW, Arc::new(occupant))]);
                    let (locs, digests) = pack.in_pack();
                    if !same_len || packs::verify_chunks(&files, &locs, &digests).is_err() {
                        return Err(PutError::ImageConflict {
                            identity: format!("pack {name}"),
                        });
                    }
                }
                Err(e) => return Err(e.into()),
            }
            snug_files::sync_parent_dir(&dest)?;
        }
        if let Some(p) = absorbed.pack.as_mut() {
            // Linked into place; the temporary name is no longer needed.
            let _ = fs::remove_file(p.temp.path());
        }
        Ok(pack_name)
    }

    /// The packs holding the chunks a put reuses are still there. Every reused chunk was read
    /// and checked against its address as the put streamed in (`absorb`; a damaged one was
    /// written afresh instead); the chunks this put wrote were read back from its pack while the
    /// pack was synced (the file published under its name is that file), and a pack that was
    /// already in place was compared chunk by chunk by `publish`.
    fn read_back_staged(&self, staged: &Staged) -> Result<(), PutError> {
        let absorbed = &staged.absorbed;
        let existing: std::collections::HashSet<i64> = absorbed
            .locs
            .iter()
            .filter(|l| l.pack != NEW)
            .map(|l| l.pack)
            .collect();
        if existing.is_empty() {
            return Ok(());
        }
        let wanted = existing.len();
        let paths = self.with_reader(|conn| Inner::pack_paths(conn, existing, &self.packs_dir))?;
        if paths.len() != wanted || packs::open_packs(&paths).is_err() {
            return Err(
                StorageError::unavailable("a pack was reclaimed during the put; retry").into(),
            );
        }
        Ok(())
    }

    /// Step 5, the commit, under the writer lock until the image row (which then names the
    /// chunks) is committed or the transaction is rolled back: no pass can run in between.
    fn commit(
        &self,
        begun: Begun,
        proposal: &Proposal<Arc<Staged>>,
    ) -> Result<PutOutcome, PutError> {
        let now = self.now();
        let mut conn = self.writer();
        self.reused_by().remove(&begun.publication);
        let statements = |tx: &Transaction<'_>| {
            let mut tx = SqliteTx::new(tx, self);
            tx.epoch_moved = self.sweep_epoch.load(Ordering::SeqCst) != begun.epoch;
            futures::executor::block_on(protocol::commit_in(
                &mut tx,
                &begun.publication,
                proposal,
                now,
            ))
        };
        let outcome = durable(&mut conn, |tx| statements(tx));
        if outcome.as_ref().is_ok_and(|o| !o.replayed) {
            // Still under the writer lock: no download reads the old plan's rows from here on.
            self.heads.forget(proposal.intent.user.as_str());
        }
        self.checkpoints.note_large_commit();
        outcome
    }

    /// Registers the new pack and chunks and writes the image row of an image not stored before
    /// (the protocol checked that; an occupied address is its decision).
    fn insert_image(
        &self,
        tx: &Transaction<'_>,
        image: &Image,
        staged: &Staged,
        against: Option<&Digest>,
        epoch_moved: bool,
        now: Timestamp,
    ) -> Result<(), PutError> {
        let (digest, size) = (image.digest, image.size);
        let absorbed = &staged.absorbed;
        let against = match against {
            Some(d) => super::inspect::resolved(tx, d)?.map(|r| (*d, r)),
            None => None,
        };
        let row = manifest::store(&absorbed.manifest, against.as_ref().map(|(d, r)| (d, r)));
        if epoch_moved {
            // A reclamation ran since the put began: make sure every deduplicated chunk is still
            // where the read-back found it (from `publish` on, the pass kept them).
            check_reused(tx, absorbed)?;
        }
        let (pack_id, moved) = self.register_pack(tx, staged, now)?;
        let locs: Vec<ChunkLoc> = absorbed
            .locs
            .iter()
            .zip(&absorbed.manifest)
            .map(|(loc, hash)| match (loc.pack, moved.get(hash)) {
                (NEW, Some(m)) => *m,
                (NEW, None) => ChunkLoc {
                    pack: pack_id,
                    ..*loc
                },
                _ => *loc,
            })
            .collect();
        let extents = packs::encode_extents(&packs::coalesce(&locs));
        tx.prepare_cached("INSERT INTO images (digest, size, manifest, base, extents, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?
            .execute(params![
                digest.as_bytes().as_slice(),
                size as i64,
                row.body,
                row.base.as_ref().map(|b| b.as_bytes().as_slice()),
                extents,
                now.unix_millis()
            ])?;
        Ok(())
    }

    /// Registers the put's new pack and its chunks: the pack's id (`NEW` without one) and the
    /// chunks another put indexed first, where the index has them. A damaged chunk the put wrote
    /// afresh moves the index, and every image holding it, to the fresh copy.
    fn register_pack(
        &self,
        tx: &Transaction<'_>,
        staged: &Staged,
        now: Timestamp,
    ) -> Result<(i64, HashMap<Digest, ChunkLoc>), PutError> {
        let absorbed = &staged.absorbed;
        let mut moved: HashMap<Digest, ChunkLoc> = HashMap::new();
        let mut healed: HashMap<Digest, ChunkLoc> = HashMap::new();
        let mut pack_id = NEW;
        if let (Some(pack), Some(name)) = (&absorbed.pack, staged.pack_name.as_deref()) {
            tx.prepare_cached(
                "INSERT OR IGNORE INTO packs (name, size, created_at) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![name, pack.temp.len as i64, now.unix_millis()])?;
            pack_id = tx.query_row("SELECT id FROM packs WHERE name = ?1", [name], |r| r.get(0))?;
            // A damaged chunk this put wrote afresh: the index moves to the fresh copy first
            // (so the copy is not taken for a chunk another put indexed first).
            let mut repoint = tx.prepare_cached(
                "UPDATE chunks SET pack_id = ?2, offset = ?3, len = ?4
                 WHERE hash = ?1 AND pack_id = ?5 AND offset = ?6",
            )?;
            for (hash, offset, len) in &pack.chunks {
                if let Some(was) = absorbed.rewritten.get(hash) {
                    let moved = repoint.execute(params![
                        hash.as_bytes().as_slice(),
                        pack_id,
                        *offset as i64,
                        i64::from(*len),
                        was.pack,
                        was.offset as i64
                    ])?;
                    if moved == 1 {
                        healed.insert(
                            *hash,
                            ChunkLoc {
                                pack: pack_id,
                                offset: *offset,
                                len: *len,
                            },
                        );
                    }
                }
            }
            let mut locate =
                tx.prepare_cached("SELECT pack_id, offset, len FROM chunks WHERE hash = ?1")?;
            // Inserting in key order keeps the B-tree writes local, and many rows per statement
            // keep the per-statement overhead off a 16,384-chunk image.
            let mut sorted: Vec<&(Digest, u64, u32)> = pack.chunks.iter().collect();
            sorted.sort_unstable_by_key(|(hash, _, _)| *hash);
            for group in sorted.chunks(INSERT_ROWS) {
                let sql = format!(
                    "INSERT OR IGNORE INTO chunks (hash, pack_id, offset, len) VALUES {}",
                    vec!["(?, ?, ?, ?)"; group.len()].join(", ")
                );
                let mut values: Vec<rusqlite::types::Value> = Vec::with_capacity(group.len() * 4);
                for (hash, offset, len) in group {
                    values.push(rusqlite::types::Value::Blob(hash.as_bytes().to_vec()));
                    values.push(rusqlite::types::Value::Integer(pack_id));
                    values.push(rusqlite::types::Value::Integer(*offset as i64));
                    values.push(rusqlite::types::Value::Integer(i64::from(*len)));
                }
                let inserted = tx
                    .prepare_cached(&sql)?
                    .execute(rusqlite::params_from_iter(values))?;
                if inserted < group.len() {
                    // Another put indexed some of these chunks first; the image must point where
                    // the index points, or reclaiming our copy's pack would strand it.
                    for (hash, offset, _) in group {
                        let loc = locate.query_row([hash.as_bytes().as_slice()], |r| {
                            Ok(ChunkLoc {
                                pack: r.get(0)?,
                                offset: r.get::<_, i64>(1)? as u64,
                                len: r.get::<_, i64>(2)? as u32,
                            })
                        })?;
                        if loc.pack != pack_id || loc.offset != *offset {
                            moved.insert(*hash, loc);
                        }
                    }
                }
            }
        }
        self.heal_images(tx, &healed)?;
        Ok((pack_id, moved))
    }
}

/// An image row a healed chunk is in: its digest and extents.
type Holder = (Vec<u8>, Option<Vec<u8>>);

impl Inner {
    /// Points every stored image that holds a chunk in `healed` at its fresh copy (in `tx`, with
    /// the move of the index): the revisions that read the damaged bytes read whole again.
    fn heal_images(
        &self,
        tx: &Transaction<'_>,
        healed: &HashMap<Digest, ChunkLoc>,
    ) -> Result<(), PutError> {
        // An image holds the chunk when its own manifest row names it or when it is kept
        // against one that holds it (`manifest.rs`); `repoint_row` moves only what it holds.
        let mut holders = tx.prepare_cached(
            "WITH RECURSIVE holders (digest) AS (
                 SELECT digest FROM images WHERE instr(manifest, ?1) > 0
                 UNION SELECT i.digest FROM images i JOIN holders h ON i.base = h.digest
             )
             SELECT digest, extents FROM images WHERE digest IN holders",
        )?;
        let mut update = tx.prepare_cached("UPDATE images SET extents = ?1 WHERE digest = ?2")?;
        let mut seen = std::collections::HashSet::new();
        for digest in healed.keys() {
            let rows: Vec<Holder> = holders
                .query_map([digest.as_bytes().as_slice()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect::<Result<_, _>>()?;
            for (image, extents) in rows {
                if !seen.insert(image.clone()) {
                    continue;
                }
                let Some(holder) = Digest::from_slice(&image) else {
                    continue;
                };
                let Some(manifest) = super::inspect::resolved(tx, &holder)? else {
                    continue;
                };
                if let Some(extents) = packs::repoint_row(
                    &manifest.chunks,
                    extents.as_deref(),
                    self.chunk_size as u64,
                    healed,
                ) {
                    update.execute(params![extents, image])?;
                    self.heads.forget_all();
                }
            }
        }
        Ok(())
    }
}

/// One transaction of the embedded store, as the protocol writes through it.
pub(crate) struct SqliteTx<'a> {
    tx: &'a Transaction<'a>,
    inner: &'a Inner,
    /// Whether a reclamation ran since the put began (the commit then re-checks the stored
    /// chunks the put reuses).
    epoch_moved: bool,
}

impl<'a> SqliteTx<'a> {
    pub(super) fn new(tx: &'a Transaction<'a>, inner: &'a Inner) -> Self {
        Self {
            tx,
            inner,
            epoch_moved: false,
        }
    }
}

impl WriteTx for SqliteTx<'_> {
    type Publication = i64;
    type Staged = Arc<Staged>;

    fn manifest(staged: &Arc<Staged>) -> &[Digest] {
        &staged.absorbed.manifest
    }

    async fn user(&mut self, user: &UserId) -> Result<UserRow, StorageError> {
        // The id's own record, or its tombstone under the pseudonym (an erasure renames it).
        let row: Option<(Option<i64>, Option<i64>)> = self
            .tx
            .prepare_cached(
                "SELECT current_seq, erased_at FROM users WHERE user_id IN (?1, ?2)
                 ORDER BY erased_at IS NULL LIMIT 1",
            )?
            .query_row(
                params![user.as_str(), crate::erase::pseudonym(user.as_str())],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        Ok(match row {
            None => UserRow::Unknown,
            Some((_, Some(_))) => UserRow::Erased,
            Some((current, None)) => UserRow::Known {
                current: current.map(|seq| seq as u64),
            },
        })
    }

    async fn insert_user(&mut self, user: &UserId, at: Timestamp) -> Result<bool, StorageError> {
        Ok(self
            .tx
            .prepare_cached("INSERT OR IGNORE INTO users (user_id, created_at) VALUES (?1, ?2)")?
            .execute(params![user.as_str(), at.unix_millis()])?
            == 1)
    }

    async fn revision_at(
        &mut self,
        user: &UserId,
        seq: u64,
    ) -> Result<Option<Accepted>, StorageError> {
        Ok(self
            .tx
            .prepare_cached(
                "SELECT revision, base, digest FROM revisions WHERE user_id = ?1 AND seq = ?2",
            )?
            .query_row(params![user.as_str(), seq as i64], accepted_row)
            .optional()?)
    }

    async fn has_revision(
        &mut self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<bool, StorageError> {
        Ok(self
            .tx
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM revisions WHERE user_id = ?1 AND revision = ?2)",
            )?
            .query_row(params![user.as_str(), revision.as_str()], |r| r.get(0))?)
    }

    async fn keyed(
        &mut self,
        user: &UserId,
        key: &IdempotencyKey,
    ) -> Result<Option<Accepted>, StorageError> {
        Ok(self
            .tx
            .prepare_cached(
                "SELECT revision, base, digest FROM revisions WHERE user_id = ?1 AND idempotency_key = ?2 ORDER BY seq DESC LIMIT 1",
            )?
            .query_row(params![user.as_str(), key.as_str()], accepted_row)
            .optional()?)
    }

    async fn revision_info(
        &mut self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<Option<RevisionInfo>, StorageError> {
        Ok(self
            .tx
            .prepare_cached(&format!(
                "SELECT {INFO_COLUMNS} FROM revisions WHERE user_id = ?1 AND revision = ?2"
            ))?
            .query_row(params![user.as_str(), revision.as_str()], info_row)
            .optional()?)
    }

    async fn staged_bytes(&mut self, user: &UserId) -> Result<u64, StorageError> {
        let staged: i64 = self
            .tx
            .prepare_cached(
                "SELECT COALESCE(SUM(reserved), 0) FROM publications WHERE user_id = ?1",
            )?
            .query_row([user.as_str()], |r| r.get(0))?;
        Ok(staged as u64)
    }

    async fn insert_publication(
        &mut self,
        intent: &Intent,
        at: Timestamp,
    ) -> Result<i64, StorageError> {
        self.tx
            .prepare_cached(
                "INSERT INTO publications (user_id, base, idempotency_key, started_at, digest, reserved) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                intent.user.as_str(),
                intent.base().map(Revision::as_str),
                intent.key.as_ref().map(IdempotencyKey::as_str),
                at.unix_millis(),
                intent.image.as_ref().map(|d| d.as_bytes().as_slice()),
                intent.reserve.min(i64::MAX as u64) as i64,
            ])?;
        Ok(self.tx.last_insert_rowid())
    }

    async fn delete_publication(&mut self, publication: &i64) -> Result<bool, StorageError> {
        Ok(self
            .tx
            .prepare_cached("DELETE FROM publications WHERE id = ?1")?
            .execute([publication])?
            > 0)
    }

    async fn abandon_publication(
        &mut self,
        publication: &i64,
        at: Timestamp,
    ) -> Result<(), StorageError> {
        self.tx
            .prepare_cached("UPDATE publications SET abandoned_at = ?2 WHERE id = ?1")?
            .execute(params![publication, at.unix_millis()])?;
        Ok(())
    }

    async fn stored_image(
        &mut self,
        digest: &Digest,
    ) -> Result<Option<(u64, Vec<Digest>)>, StorageError> {
        let size: Option<i64> = self
            .tx
            .prepare_cached("SELECT size FROM images WHERE digest = ?1")?
            .query_row([digest.as_bytes().as_slice()], |r| r.get(0))
            .optional()?;
        let Some(size) = size else { return Ok(None) };
        let manifest =
            super::inspect::resolved(self.tx, digest)?.ok_or_else(|| StorageError::Corrupt {
                object: format!("image {digest}"),
            })?;
        Ok(Some((size as u64, manifest.chunks)))
    }

    async fn insert_image(
        &mut self,
        image: &Image,
        staged: &Arc<Staged>,
        against: Option<&Digest>,
        at: Timestamp,
    ) -> Result<(), PutError> {
        self.inner
            .insert_image(self.tx, image, staged, against, self.epoch_moved, at)
    }

    async fn heal_stored(&mut self, staged: &Arc<Staged>, at: Timestamp) -> Result<(), PutError> {
        if !staged.absorbed.rewritten.is_empty() {
            self.inner.register_pack(self.tx, staged, at)?;
        }
        Ok(())
    }

    async fn last_seq(&mut self, user: &UserId) -> Result<u64, StorageError> {
        let seq: i64 = self
            .tx
            .prepare_cached("SELECT last_seq FROM users WHERE user_id = ?1")?
            .query_row([user.as_str()], |r| r.get(0))?;
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
            .prepare_cached(
                "INSERT INTO revisions (user_id, seq, revision, digest, size, accepted_at, principal, base, restored_from, idempotency_key, storage_version)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                user.as_str(),
                seq as i64,
                info.revision.as_str(),
                info.digest.as_bytes().as_slice(),
                info.size as i64,
                info.accepted_at.unix_millis(),
                info.principal.as_str(),
                info.base.as_ref().map(Revision::as_str),
                info.restored_from.as_ref().map(Revision::as_str),
                key.map(IdempotencyKey::as_str),
                info.storage_version,
            ])?;
        Ok(())
    }

    async fn set_current(&mut self, user: &UserId, seq: u64) -> Result<(), StorageError> {
        self.tx
            .prepare_cached("UPDATE users SET last_seq = ?2, current_seq = ?2 WHERE user_id = ?1")?
            .execute(params![user.as_str(), seq as i64])?;
        Ok(())
    }

    async fn record_verdict(
        &mut self,
        user: &UserId,
        principal: &Principal,
        at: Timestamp,
        verdict: Result<&Revision, &PutError>,
    ) -> Result<(), StorageError> {
        super::record_verdict(self.tx, user, principal, at, verdict)?;
        Ok(())
    }
}

/// Copies a put error for the cleanup path; `PutError` holds non-clonable sources in some variants,
/// which are carried over as their kind and message.
fn refusal_clone(err: &PutError) -> PutError {
    match err {
        PutError::Conflict { current } => PutError::Conflict {
            current: current.clone(),
        },
        PutError::Stale { base, current } => PutError::Stale {
            base: base.clone(),
            current: current.clone(),
        },
        PutError::IdempotencyKeyReused { revision } => PutError::IdempotencyKeyReused {
            revision: revision.clone(),
        },
        PutError::QuotaExceeded { quota } => PutError::QuotaExceeded { quota: *quota },
        PutError::ImageConflict { identity } => PutError::ImageConflict {
            identity: identity.clone(),
        },
        PutError::PreconditionRequired => PutError::PreconditionRequired,
        PutError::NotFound => PutError::NotFound,
        PutError::BodyAborted(e) => PutError::BodyAborted(io::Error::new(e.kind(), e.to_string())),
        PutError::PutsInFlight { staged, limit } => PutError::PutsInFlight {
            staged: *staged,
            limit: *limit,
        },
        PutError::Storage(e) => PutError::Storage(StorageError::unavailable(e.to_string())),
    }
}

/// Hands the chunks of a put to the blocking chunk writer, whose outcome `publish` awaits.
pub(crate) struct SqliteSink {
    channel: ChannelSink,
    writer: tokio::task::JoinHandle<Result<Absorbed, PutError>>,
}

impl ChunkSink for SqliteSink {
    async fn accept(&mut self, batch: Batch) -> Result<(), PutError> {
        self.channel.accept(batch).await
    }
}

impl Primitives for SqliteStore {
    fn committed(&self, user: &UserId) {
        self.inner.revisions.announce(user);
    }

    type Publication = Begun;
    type Sink = SqliteSink;
    type Staged = Arc<Staged>;

    fn chunk_size(&self) -> usize {
        self.inner.chunk_size
    }

    async fn manifest(&self, image: &Digest) -> Result<Option<Vec<Digest>>, StorageError> {
        let image = *image;
        self.blocking(move |inner| inner.stored_manifest(&image))
            .await
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

    async fn begin(&self, intent: &Intent) -> Result<Begun, PutError> {
        let intent = intent.clone();
        self.blocking(move |inner| inner.begin(&intent)).await
    }

    async fn discard(&self, begun: &Begun) {
        let id = begun.publication.to_string();
        let discarded = self
            .blocking(move |inner| {
                // Like a pass, it waits on nothing but the disk: it runs on this blocking thread.
                futures::executor::block_on(crate::reclaim::discard(inner, &id, inner.now()))
            })
            .await;
        if let Err(err) = discarded {
            tracing::warn!(reason = err.reason().name, error = %err, "could not reclaim what a failed put staged; the next reclamation pass takes it");
        }
    }

    fn sink(&self, _: &Begun) -> SqliteSink {
        let (tx, rx) = mpsc::channel::<Batch>(4);
        let inner = self.inner.clone();
        SqliteSink {
            channel: ChannelSink(tx),
            writer: tokio::task::spawn_blocking(move || inner.absorb(rx)),
        }
    }

    async fn publish(
        &self,
        begun: &Begun,
        sink: SqliteSink,
        ingested: Result<Ingested, PutError>,
    ) -> Result<(Ingested, Arc<Staged>), PutError> {
        let SqliteSink { channel, writer } = sink;
        drop(channel);
        let absorbed = writer.await.map_err(StorageError::from)?;
        // The writer's own failure explains a closed channel better than the channel does.
        let (ingested, mut absorbed) = match (ingested, absorbed) {
            (Ok(i), Ok(a)) => (i, a),
            (Err(e), Ok(_)) => return Err(e),
            (_, Err(e)) => return Err(e),
        };
        let begun = *begun;
        self.blocking(move |inner| {
            let pack_name = inner.publish(begun, &ingested, &mut absorbed)?;
            Ok((
                ingested,
                Arc::new(Staged {
                    absorbed,
                    pack_name,
                }),
            ))
        })
        .await
    }

    async fn read_back(&self, what: ReadBack<'_, Arc<Staged>>) -> Result<(), PutError> {
        match what {
            ReadBack::Staged(staged) => {
                let staged = staged.clone();
                self.blocking(move |inner| inner.read_back_staged(&staged))
                    .await
            }
            ReadBack::Image(digest) => {
                let digest = *digest;
                self.blocking(move |inner| inner.verify_image(&digest))
                    .await
            }
        }
    }

    async fn commit(
        &self,
        begun: &Begun,
        proposal: Proposal<Arc<Staged>>,
    ) -> Result<PutOutcome, PutError> {
        let begun = *begun;
        self.blocking(move |inner| inner.commit(begun, &proposal))
            .await
    }

    async fn abandon(&self, begun: &Begun, intent: &Intent, err: &PutError) {
        let (begun, intent, err) = (*begun, intent.clone(), refusal_clone(err));
        let _ = self
            .blocking(move |inner| {
                inner.abandon(begun, &intent, &err);
                Ok::<_, StorageError>(())
            })
            .await;
    }

    async fn revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<Option<RevisionInfo>, StorageError> {
        let (user, revision) = (user.clone(), revision.clone());
        self.blocking(move |inner| {
            inner.with_reader(|conn| {
                conn.prepare_cached(&format!(
                    "SELECT {INFO_COLUMNS} FROM revisions WHERE user_id = ?1 AND revision = ?2"
                ))?
                .query_row(params![user.as_str(), revision.as_str()], info_row)
                .optional()
                .map_err(StorageError::from)
            })
        })
        .await
    }

    async fn ledger_refusal(&self, intent: &Intent, err: &PutError) -> Result<(), StorageError> {
        let (intent, err) = (intent.clone(), refusal_clone(err));
        self.blocking(move |inner| {
            let now = inner.now();
            let mut conn = inner.writer();
            durable(&mut conn, |tx| {
                futures::executor::block_on(protocol::ledger_refusal_in(
                    &mut SqliteTx::new(tx, inner),
                    &intent,
                    &err,
                    now,
                ))
            })
        })
        .await
    }
}
