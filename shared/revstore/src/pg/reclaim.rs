//! The PostgreSQL store's side of a reclamation pass ([`crate::reclaim`]): the bucket's pack
//! objects as the listing, and one transaction under the store's advisory lock as the pass.
//!
//! The pass takes the advisory lock exclusive at session level, so it outlives the transaction:
//! commits and new leases (which take it shared) wait from the first fact read until the pack
//! objects are deleted, and so does a put naming a new pack in its publication record
//! (`PackSink::seal`), because a pack's name is its content address and a put that named one
//! about to be deleted would reuse it. A pass that fails or is dropped before it ends takes its
//! connection out of the pool, so the server rolls the transaction back and frees the lock.

use std::collections::{BTreeMap, HashSet};

use deadpool_postgres::Object;

use super::{PgStore, digest_of, journal};
use crate::{
    chunk,
    erase::ERASED,
    error::{ReclaimError, StorageError},
    manifest,
    reclaim::{
        ChunkRow, Erasing, InFlight, Listed, Pass, Place, Publication, Reclaimer, Record, Retained,
        Scope, Taking, Unreferenced,
    },
    retention::Candidate,
    types::{Digest, ReclaimedKind, Timestamp},
};

/// Chunk rows deleted per statement.
const DELETE_BATCH: usize = 1024;

impl Reclaimer for PgStore {
    type Pass<'a> = PgPass<'a>;

    fn faults(&self) -> &crate::config::Faults {
        &self.inner.config.faults
    }

    async fn list(&self) -> Result<Vec<Listed>, ReclaimError> {
        if self.inner.config.faults.incomplete_listing() {
            return Err(ReclaimError::IncompleteListing);
        }
        Ok(self
            .list_packs()
            .await?
            .into_iter()
            .map(|(name, written)| Listed { name, written })
            .collect())
    }

    async fn begin(&self, _taking: Taking<'_>) -> Result<PgPass<'_>, StorageError> {
        let mut pass = PgPass {
            store: self,
            client: Some(self.client().await?),
            now: self.now(),
        };
        let client = pass.client();
        client
            .execute("SELECT pg_advisory_lock($1)", &[&self.inner.lock_key])
            .await?;
        client.batch_execute("BEGIN").await?;
        Ok(pass)
    }
}

/// A pass: a connection holding the advisory lock, inside its transaction until
/// [`Pass::commit`].
pub(crate) struct PgPass<'a> {
    store: &'a PgStore,
    /// `None` once the pass has ended and given the connection back.
    client: Option<Object>,
    /// Leases that expired before this go with the pass.
    now: Timestamp,
}

impl PgPass<'_> {
    fn client(&mut self) -> &Object {
        self.client
            .as_ref()
            .expect("a pass holds its connection until it ends")
    }
}

impl Drop for PgPass<'_> {
    fn drop(&mut self) {
        // Ended early: the connection still holds the lock and maybe an open transaction.
        // Closing it is the one cleanup that needs no await.
        if let Some(client) = self.client.take() {
            drop(Object::take(client));
        }
    }
}

impl Pass for PgPass<'_> {
    async fn publications(&mut self, scope: Scope<'_>) -> Result<Vec<Publication>, StorageError> {
        const COLUMNS: &str =
            "SELECT id, user_id, started_at, packs, abandoned_at IS NOT NULL FROM publications";
        let rows = match scope {
            Scope::Every => self.client().query(COLUMNS, &[]).await?,
            Scope::Record(id) => {
                self.client()
                    .query(
                        &format!("{COLUMNS} WHERE id = $1"),
                        &[&id.parse::<i64>().unwrap_or(-1)],
                    )
                    .await?
            }
            Scope::User(user) => {
                self.client()
                    .query(&format!("{COLUMNS} WHERE user_id = $1"), &[&user])
                    .await?
            }
        };
        Ok(rows
            .iter()
            .map(|r| Publication {
                record: Record {
                    id: r.get::<_, i64>(0).to_string(),
                    user: r.get(1),
                },
                started_at: Timestamp::from_unix_millis(r.get(2)),
                objects: r.get::<_, Option<Vec<String>>>(3).unwrap_or_default(),
                abandoned: r.get(4),
            })
            .collect())
    }

    async fn created_chunks(&mut self, record: &Record) -> Result<Vec<Digest>, StorageError> {
        // The chunk rows its write created as the bytes streamed in (none with an object store,
        // where commits write chunk rows).
        let Ok(id) = record.id.parse::<i64>() else {
            return Ok(Vec::new());
        };
        self.client()
            .query(
                "SELECT hash FROM streamed_chunks WHERE publication_id = $1 AND created",
                &[&id],
            )
            .await?
            .iter()
            .map(|c| digest_of(c.get(0)))
            .collect()
    }

    async fn delete_records(&mut self, records: &[Record]) -> Result<(), StorageError> {
        let ids: Vec<i64> = records.iter().filter_map(|r| r.id.parse().ok()).collect();
        if !ids.is_empty() {
            self.client()
                .execute("DELETE FROM publications WHERE id = ANY($1)", &[&ids])
                .await?;
        }
        Ok(())
    }

    async fn in_flight(&mut self) -> Result<InFlight, StorageError> {
        let mut in_flight = InFlight::default();
        for r in self
            .client()
            .query(
                "SELECT user_id, base, digest, packs, chunks FROM publications",
                &[],
            )
            .await?
        {
            let user: String = r.get(0);
            if let Some(base) = r.get::<_, Option<String>>(1) {
                in_flight.bases.insert((user, base));
            }
            if let Some(d) = r.get::<_, Option<&[u8]>>(2) {
                in_flight.images.insert(digest_of(d)?);
            }
            in_flight
                .objects
                .extend(r.get::<_, Option<Vec<String>>>(3).unwrap_or_default());
            if let Some(chunks) = r.get::<_, Option<&[u8]>>(4) {
                in_flight
                    .chunks
                    .extend(chunk::decode_manifest(chunks).ok_or_else(|| {
                        StorageError::Corrupt {
                            object: "publication chunks".into(),
                        }
                    })?);
            }
        }
        // Every chunk row the puts still streaming rely on.
        for r in self
            .client()
            .query("SELECT DISTINCT hash FROM streamed_chunks", &[])
            .await?
        {
            in_flight.chunks.insert(digest_of(r.get(0))?);
        }
        Ok(in_flight)
    }

    async fn named_by_images(
        &mut self,
        chunks: &[Digest],
        since: Timestamp,
    ) -> Result<HashSet<Digest>, StorageError> {
        // A row an orphan's write created can only be named by an image committed since it
        // started, by a write that found the row stored.
        // An image that inherits such a row from its base (`manifest.rs`) stands on a base
        // committed since then that names it itself.
        let wanted: HashSet<&Digest> = chunks.iter().collect();
        let mut named = HashSet::new();
        for r in self
            .client()
            .query(
                "SELECT base, manifest FROM images WHERE created_at >= $1",
                &[&since.unix_millis()],
            )
            .await?
        {
            named.extend(row_entries(&r)?.into_iter().filter(|c| wanted.contains(c)));
        }
        Ok(named)
    }

    async fn retained(
        &mut self,
        keep_newest: u64,
        now: Timestamp,
    ) -> Result<Vec<Retained>, StorageError> {
        let rows = self
            .client()
            .query(
                "SELECT r.user_id, r.seq, r.revision, u.last_seq - r.seq, r.seq IS NOT DISTINCT FROM u.current_seq,
                        (SELECT n.accepted_at FROM revisions n WHERE n.user_id = r.user_id AND n.seq = r.seq + 1),
                        EXISTS (SELECT 1 FROM leases l WHERE l.digest = r.digest AND l.expires_at > $2)
                 FROM revisions r JOIN users u ON u.user_id = r.user_id
                 WHERE r.retained AND u.last_seq - r.seq >= $1",
                &[&(keep_newest as i64), &now.unix_millis()],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| Retained {
                user: r.get(0),
                seq: r.get(1),
                revision: r.get(2),
                candidate: Candidate {
                    newer: r.get::<_, i64>(3) as u64,
                    current: r.get(4),
                    superseded_at: r.get::<_, Option<i64>>(5).map(Timestamp::from_unix_millis),
                    leased: r.get(6),
                    base_in_flight: false,
                },
            })
            .collect())
    }

    async fn release(
        &mut self,
        revisions: &[Retained],
        now: Timestamp,
    ) -> Result<(), StorageError> {
        if revisions.is_empty() {
            return Ok(());
        }
        let users: Vec<&str> = revisions.iter().map(|r| r.user.as_str()).collect();
        let seqs: Vec<i64> = revisions.iter().map(|r| r.seq).collect();
        self.client()
            .execute(
                "UPDATE revisions r SET retained = FALSE, reclaimed_at = $3
                 FROM unnest($1::text[], $2::bigint[]) AS v(user_id, seq)
                 WHERE r.user_id = v.user_id AND r.seq = v.seq",
                &[&users, &seqs, &now.unix_millis()],
            )
            .await?;
        Ok(())
    }

    async fn unreferenced_images(
        &mut self,
        now: Timestamp,
    ) -> Result<Vec<Unreferenced>, StorageError> {
        self.client()
            .query(
                "SELECT i.digest, EXISTS (SELECT 1 FROM leases l WHERE l.digest = i.digest AND l.expires_at > $1)
                 FROM images i
                 WHERE NOT EXISTS (SELECT 1 FROM revisions r WHERE r.digest = i.digest AND r.retained)",
                &[&now.unix_millis()],
            )
            .await?
            .iter()
            .map(|r| {
                Ok(Unreferenced {
                    digest: digest_of(r.get(0))?,
                    leased: r.get(1),
                })
            })
            .collect()
    }

    async fn manifest_row(
        &mut self,
        image: &Digest,
    ) -> Result<Option<manifest::Row>, StorageError> {
        self.client()
            .query_opt(
                "SELECT base, manifest FROM images WHERE digest = $1",
                &[&image.as_bytes().as_slice()],
            )
            .await?
            .map(|r| super::manifest_row(r.get(0), r.get(1)))
            .transpose()
    }

    async fn kept_against(
        &mut self,
        image: &Digest,
    ) -> Result<Vec<(Digest, manifest::Row)>, StorageError> {
        self.client()
            .query(
                "SELECT digest, manifest FROM images WHERE base = $1",
                &[&image.as_bytes().as_slice()],
            )
            .await?
            .iter()
            .map(|r| {
                let row = manifest::Row {
                    base: Some(*image),
                    body: r.get::<_, &[u8]>(1).to_vec(),
                };
                Ok((digest_of(r.get(0))?, row))
            })
            .collect()
    }

    async fn set_manifest_row(
        &mut self,
        image: &Digest,
        row: &manifest::Row,
    ) -> Result<(), StorageError> {
        self.client()
            .execute(
                "UPDATE images SET base = $1, manifest = $2 WHERE digest = $3",
                &[
                    &row.base.as_ref().map(|b| b.as_bytes().as_slice()),
                    &row.body,
                    &image.as_bytes().as_slice(),
                ],
            )
            .await?;
        Ok(())
    }

    async fn delete_image(&mut self, image: &Digest) -> Result<(), StorageError> {
        self.client()
            .execute(
                "DELETE FROM images WHERE digest = $1",
                &[&image.as_bytes().as_slice()],
            )
            .await?;
        Ok(())
    }

    async fn chunk_rows(&mut self) -> Result<Vec<ChunkRow>, StorageError> {
        // A row holding its bytes was written by a put as they streamed in (a store keeping its
        // bytes in rows), so a put still streaming may rely on it; a row in a pack object was
        // written by a commit, which waits for the pass. A store keeps its bytes in one place
        // (`chunks_in`), so its rows are all of one kind.
        self.client()
            .query("SELECT hash, created_at, pack_id IS NULL FROM chunks", &[])
            .await?
            .iter()
            .map(|r| {
                Ok(ChunkRow {
                    digest: digest_of(r.get(0))?,
                    streamed_at: r
                        .get::<_, bool>(2)
                        .then(|| Timestamp::from_unix_millis(r.get(1))),
                })
            })
            .collect()
    }

    async fn live_chunks(&mut self) -> Result<HashSet<Digest>, StorageError> {
        let mut live = HashSet::new();
        for r in self
            .client()
            .query("SELECT base, manifest FROM images", &[])
            .await?
        {
            // Every chunk of every image is named by its row or by its bases' (`manifest.rs`).
            live.extend(row_entries(&r)?);
        }
        Ok(live)
    }

    async fn delete_chunks(&mut self, chunks: &[Digest]) -> Result<(), StorageError> {
        for batch in chunks.chunks(DELETE_BATCH) {
            let hashes: Vec<&[u8]> = batch.iter().map(|d| &d.as_bytes()[..]).collect();
            self.client()
                .execute("DELETE FROM chunks WHERE hash = ANY($1)", &[&hashes])
                .await?;
        }
        Ok(())
    }

    async fn empty_objects(&mut self) -> Result<Vec<String>, StorageError> {
        Ok(self
            .client()
            .query(
                "SELECT name FROM packs p WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.pack_id = p.id)",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    async fn unregister_objects(&mut self, names: &[String]) -> Result<(), StorageError> {
        if !names.is_empty() {
            self.client()
                .execute("DELETE FROM packs WHERE name = ANY($1)", &[&names])
                .await?;
        }
        Ok(())
    }

    async fn registered_objects(&mut self) -> Result<HashSet<String>, StorageError> {
        Ok(self
            .client()
            .query("SELECT name FROM packs", &[])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    async fn pending_wipes(&mut self) -> Result<BTreeMap<String, Vec<(u64, u32)>>, StorageError> {
        let mut pending: BTreeMap<String, Vec<(u64, u32)>> = BTreeMap::new();
        for row in self
            .client()
            .query(
                "SELECT object, \"offset\", len FROM pending_wipes ORDER BY object, \"offset\"",
                &[],
            )
            .await?
        {
            pending
                .entry(row.get::<_, String>(0))
                .or_default()
                .push((row.get::<_, i64>(1) as u64, row.get::<_, i64>(2) as u32));
        }
        Ok(pending)
    }

    async fn mark_erased(
        &mut self,
        user: &str,
        pseudonym: &str,
        at: Timestamp,
    ) -> Result<(), StorageError> {
        let client = self.client();
        client
            .execute(
                "UPDATE users SET user_id = $2, erased_at = COALESCE(erased_at, $3) WHERE user_id = $1",
                &[&user, &pseudonym, &at.unix_millis()],
            )
            .await?;
        for table in crate::erase::KEPT_UNDER_PSEUDONYM {
            client
                .execute(
                    &format!("UPDATE {table} SET user_id = $2 WHERE user_id = $1"),
                    &[&user, &pseudonym],
                )
                .await?;
        }
        Ok(())
    }

    async fn tombstones_in_clear(&mut self) -> Result<Vec<String>, StorageError> {
        let (like, len) = crate::erase::PSEUDONYM_LIKE;
        let rows = self
            .client()
            .query(
                "SELECT user_id FROM users WHERE erased_at IS NOT NULL
                 AND NOT (user_id LIKE $1 AND length(user_id) = $2)",
                &[&like, &(len as i32)],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn wipe(&mut self, object: &str, ranges: &[(u64, u32)]) -> Result<(), StorageError> {
        self.store.objects()?.wipe(object, ranges).await
    }

    async fn wiped(&mut self, object: &str) -> Result<(), StorageError> {
        // After the pass's commit, still holding its lock: a statement of its own.
        self.client()
            .execute("DELETE FROM pending_wipes WHERE object = $1", &[&object])
            .await?;
        Ok(())
    }

    async fn journal(
        &mut self,
        at: Timestamp,
        kind: ReclaimedKind,
        subjects: &[String],
        user: Option<&str>,
    ) -> Result<(), StorageError> {
        journal(&***self.client(), at, kind, subjects, user).await
    }

    async fn commit(&mut self, _chunks_deleted: bool) -> Result<(), StorageError> {
        let now = self.now;
        let client = self.client();
        client
            .execute(
                "DELETE FROM leases WHERE expires_at <= $1",
                &[&now.unix_millis()],
            )
            .await?;
        client.batch_execute("COMMIT").await?;
        Ok(())
    }

    async fn delete_objects(mut self, names: &[String]) -> Result<(), ReclaimError> {
        self.store.delete_packs(names).await;
        let key = self.store.inner.lock_key;
        self.client()
            .execute("SELECT pg_advisory_unlock($1)", &[&key])
            .await
            .map_err(StorageError::from)?;
        // Unlocked and committed: the connection goes back to the pool as it came.
        self.client = None;
        Ok(())
    }
}

impl Erasing for PgPass<'_> {
    async fn history(&mut self, user: &str) -> Result<Vec<(String, Digest)>, StorageError> {
        self.client()
            .query(
                "SELECT revision, digest FROM revisions WHERE user_id = $1 ORDER BY seq",
                &[&user],
            )
            .await?
            .iter()
            .map(|r| Ok((r.get(0), digest_of(r.get(1))?)))
            .collect()
    }

    async fn delete_history(&mut self, user: &str) -> Result<(), StorageError> {
        let client = self.client();
        client
            .execute(
                "UPDATE users SET current_seq = NULL WHERE user_id = $1",
                &[&user],
            )
            .await?;
        client
            .execute("DELETE FROM revisions WHERE user_id = $1", &[&user])
            .await?;
        Ok(())
    }

    async fn named_chunks(&mut self, images: &[Digest]) -> Result<HashSet<Digest>, StorageError> {
        let mut named = HashSet::new();
        for image in images {
            if let Some(resolved) = super::resolved(&***self.client(), image).await? {
                named.extend(resolved.chunks);
            }
        }
        Ok(named)
    }

    async fn places(&mut self, chunks: &[Digest]) -> Result<Vec<Place>, StorageError> {
        let mut places = Vec::with_capacity(chunks.len());
        for batch in chunks.chunks(DELETE_BATCH) {
            let hashes: Vec<&[u8]> = batch.iter().map(|d| &d.as_bytes()[..]).collect();
            for r in self
                .client()
                .query(
                    "SELECT c.hash, COALESCE(c.len, length(c.data)), p.name, c.pack_offset
                     FROM chunks c LEFT JOIN packs p ON p.id = c.pack_id
                     WHERE c.hash = ANY($1)",
                    &[&hashes],
                )
                .await?
            {
                let object = match (r.get::<_, Option<String>>(2), r.get::<_, Option<i64>>(3)) {
                    (Some(name), Some(offset)) => Some((name, offset as u64)),
                    _ => None,
                };
                places.push(Place {
                    len: r.get::<_, Option<i32>>(1).unwrap_or(0) as u32,
                    object,
                });
            }
        }
        Ok(places)
    }

    async fn scrub_ledgers(&mut self, user: &str) -> Result<u64, StorageError> {
        let mut scrubbed = 0;
        for table in ["put_ledger", "served"] {
            scrubbed += self
                .client()
                .execute(
                    &format!(
                        "UPDATE {table} SET principal = $2 WHERE user_id = $1 AND principal <> $2"
                    ),
                    &[&user, &ERASED],
                )
                .await?;
        }
        Ok(scrubbed)
    }

    async fn record_wipes(
        &mut self,
        ranges: &BTreeMap<String, Vec<(u64, u32)>>,
        at: Timestamp,
    ) -> Result<(), StorageError> {
        let mut objects: Vec<&str> = Vec::new();
        let mut offsets: Vec<i64> = Vec::new();
        let mut lens: Vec<i64> = Vec::new();
        for (object, ranges) in ranges {
            for (offset, len) in ranges {
                objects.push(object);
                offsets.push(*offset as i64);
                lens.push(i64::from(*len));
            }
        }
        if objects.is_empty() {
            return Ok(());
        }
        self.client()
            .execute(
                "INSERT INTO pending_wipes (object, \"offset\", len, recorded_at)
                 SELECT o, f, l, $4 FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS t(o, f, l)
                 ON CONFLICT (object, \"offset\") DO UPDATE SET len = EXCLUDED.len",
                &[&objects, &offsets, &lens, &at.unix_millis()],
            )
            .await?;
        Ok(())
    }
}

/// Every chunk address an `images` row (`base`, `manifest`) names itself.
fn row_entries(r: &tokio_postgres::Row) -> Result<Vec<Digest>, StorageError> {
    manifest::entries(&super::manifest_row(r.get(0), r.get(1))?).ok_or_else(|| {
        StorageError::Corrupt {
            object: "manifest".into(),
        }
    })
}
