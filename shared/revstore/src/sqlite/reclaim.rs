//! The embedded store's side of a reclamation pass ([`crate::reclaim`]): the pack directory as
//! the listing, and one `BEGIN IMMEDIATE` transaction on the writer connection as the pass.
//!
//! The pass holds the writer lock from [`Reclaimer::begin`] until its pack files are deleted:
//! pack names are content addresses, so a put that wrote a pack of the same chunks between the
//! commit and the deletion would otherwise lose its file.

use std::{
    collections::{BTreeMap, HashSet},
    fs::{self, File},
    io,
    sync::{MutexGuard, atomic::Ordering},
    time::UNIX_EPOCH,
};

use rusqlite::{Connection, OptionalExtension, params};

use super::{Inner, journal, packs};
use crate::{
    erase::ERASED,
    error::{ReclaimError, StorageError},
    manifest,
    reclaim::{
        ChunkRow, Erasing, InFlight, Listed, Pass, Place, Publication, Reclaimer, Record, Retained,
        Scope, Taking, Unreferenced,
    },
    retention::Candidate,
    types::{Digest, ReclaimReport, ReclaimedKind, Timestamp},
};

impl Inner {
    /// Runs one reclamation pass under the configured retention.
    pub(super) fn reclaim(&self) -> Result<ReclaimReport, ReclaimError> {
        // A pass runs periodically: it keeps the `served` table at most one pass behind the
        // journal even when no one reads the ledger.
        if let Err(err) = self.fold_served() {
            tracing::warn!(error = %err, "folding the served-ledger spool failed; the next pass retries");
        }
        // The pass waits on nothing but the disk, so it runs to completion on this blocking
        // thread.
        futures::executor::block_on(crate::reclaim::run(
            self,
            &self.config.retention,
            self.now(),
        ))
    }
}

impl Reclaimer for Inner {
    type Pass<'a> = SqlitePass<'a>;

    fn faults(&self) -> &crate::config::Faults {
        &self.config.faults
    }

    async fn list(&self) -> Result<Vec<Listed>, ReclaimError> {
        if self.config.faults.incomplete_listing() {
            return Err(ReclaimError::IncompleteListing);
        }
        let mut listed = Vec::new();
        for entry in fs::read_dir(&self.packs_dir).map_err(|_| ReclaimError::IncompleteListing)? {
            let entry = entry.map_err(|_| ReclaimError::IncompleteListing)?;
            let name =
                entry
                    .file_name()
                    .into_string()
                    .map_err(|n| ReclaimError::UnreadableCandidate {
                        name: n.to_string_lossy().into_owned(),
                    })?;
            if !packs::is_pack_name(&name) {
                return Err(ReclaimError::UnreadableCandidate { name });
            }
            let modified = entry
                .metadata()
                .and_then(|m| m.modified())
                .map_err(|_| ReclaimError::IncompleteListing)?;
            let millis = modified
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            listed.push(Listed {
                name,
                written: Timestamp::from_unix_millis(millis),
            });
        }
        Ok(listed)
    }

    async fn begin(&self, taking: Taking<'_>) -> Result<SqlitePass<'_>, StorageError> {
        let conn = self.writer();
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let pass = SqlitePass {
            inner: self,
            conn,
            open: true,
        };
        // Under the writer lock, before any lease is checked (see `Heads::clear`). Taking a
        // failed put's pack deletes no image, so the cached plans (and the images they keep)
        // stay.
        if let Taking::Orphans(_) | Taking::User(_) = taking {
            self.heads.clear();
        }
        Ok(pass)
    }
}

/// A pass: the writer connection, locked, inside its transaction until [`Pass::commit`].
pub(crate) struct SqlitePass<'a> {
    inner: &'a Inner,
    conn: MutexGuard<'a, Connection>,
    /// Whether the transaction is still open (a drop rolls it back).
    open: bool,
}

impl Drop for SqlitePass<'_> {
    fn drop(&mut self) {
        if self.open {
            if let Err(err) = self.conn.execute_batch("ROLLBACK") {
                tracing::warn!(error = %err, "rolling back a failed reclamation pass failed");
            }
            let _ = self.conn.pragma_update(None, "synchronous", "NORMAL");
        }
    }
}

fn digest(bytes: &[u8]) -> Result<Digest, StorageError> {
    Digest::from_slice(bytes).ok_or_else(|| StorageError::Corrupt {
        object: "digest".into(),
    })
}

impl Pass for SqlitePass<'_> {
    async fn publications(&mut self, scope: Scope<'_>) -> Result<Vec<Publication>, StorageError> {
        use rusqlite::types::Value;
        const COLUMNS: &str =
            "SELECT id, user_id, started_at, pack, abandoned_at IS NOT NULL FROM publications";
        let (sql, params) = match scope {
            Scope::Every => (COLUMNS.to_owned(), Vec::new()),
            Scope::Record(id) => (
                format!("{COLUMNS} WHERE id = ?1"),
                vec![Value::Integer(id.parse::<i64>().unwrap_or(-1))],
            ),
            Scope::User(user) => (
                format!("{COLUMNS} WHERE user_id = ?1"),
                vec![Value::Text(user.to_owned())],
            ),
        };
        Ok(self
            .conn
            .prepare(&sql)?
            .query_map(rusqlite::params_from_iter(params), |r| {
                Ok(Publication {
                    record: Record {
                        id: r.get::<_, i64>(0)?.to_string(),
                        user: r.get(1)?,
                    },
                    started_at: Timestamp::from_unix_millis(r.get(2)?),
                    objects: r.get::<_, Option<String>>(3)?.into_iter().collect(),
                    abandoned: r.get(4)?,
                })
            })?
            .collect::<Result<_, _>>()?)
    }

    async fn created_chunks(&mut self, _record: &Record) -> Result<Vec<Digest>, StorageError> {
        // The embedded store writes chunk rows only when a put commits: a write that did not
        // land left a pack file at most.
        Ok(Vec::new())
    }

    async fn delete_records(&mut self, records: &[Record]) -> Result<(), StorageError> {
        for record in records {
            self.conn
                .execute("DELETE FROM publications WHERE id = ?1", [&record.id])?;
        }
        Ok(())
    }

    async fn in_flight(&mut self) -> Result<InFlight, StorageError> {
        let mut in_flight = InFlight::default();
        let mut stmt = self
            .conn
            .prepare("SELECT user_id, base, digest, pack FROM publications")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let user: String = r.get(0)?;
            if let Some(base) = r.get::<_, Option<String>>(1)? {
                in_flight.bases.insert((user, base));
            }
            if let Some(d) = r.get::<_, Option<Vec<u8>>>(2)? {
                in_flight.images.insert(digest(&d)?);
            }
            if let Some(p) = r.get::<_, Option<String>>(3)? {
                in_flight.objects.insert(p);
            }
        }
        in_flight
            .chunks
            .extend(self.inner.reused_by().values().flatten().copied());
        Ok(in_flight)
    }

    async fn named_by_images(
        &mut self,
        _chunks: &[Digest],
        _since: Timestamp,
    ) -> Result<HashSet<Digest>, StorageError> {
        // No orphan here has chunk rows (see `created_chunks`).
        Ok(HashSet::new())
    }

    async fn retained(
        &mut self,
        keep_newest: u64,
        _now: Timestamp,
    ) -> Result<Vec<Retained>, StorageError> {
        type Row = (String, i64, String, Vec<u8>, i64, bool, Option<i64>);
        let rows: Vec<Row> = self
            .conn
            .prepare(
                "SELECT r.user_id, r.seq, r.revision, r.digest, u.last_seq - r.seq, r.seq IS u.current_seq,
                        (SELECT n.accepted_at FROM revisions n WHERE n.user_id = r.user_id AND n.seq = r.seq + 1)
                 FROM revisions r JOIN users u ON u.user_id = r.user_id
                 WHERE r.retained = 1 AND u.last_seq - r.seq >= ?1",
            )?
            .query_map(params![keep_newest as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
            })?
            .collect::<Result<_, _>>()?;
        rows.into_iter()
            .map(|(user, seq, revision, d, newer, current, superseded_at)| {
                Ok(Retained {
                    user,
                    seq,
                    revision,
                    candidate: Candidate {
                        newer: newer as u64,
                        current,
                        superseded_at: superseded_at.map(Timestamp::from_unix_millis),
                        leased: self.inner.leases.is_leased(&digest(&d)?),
                        base_in_flight: false,
                    },
                })
            })
            .collect()
    }

    async fn release(
        &mut self,
        revisions: &[Retained],
        now: Timestamp,
    ) -> Result<(), StorageError> {
        for r in revisions {
            self.conn.execute(
                "UPDATE revisions SET retained = 0, reclaimed_at = ?3 WHERE user_id = ?1 AND seq = ?2",
                params![r.user, r.seq, now.unix_millis()],
            )?;
        }
        Ok(())
    }

    async fn unreferenced_images(
        &mut self,
        _now: Timestamp,
    ) -> Result<Vec<Unreferenced>, StorageError> {
        let rows: Vec<Vec<u8>> = self
            .conn
            .prepare("SELECT digest FROM images i WHERE NOT EXISTS (SELECT 1 FROM revisions r WHERE r.digest = i.digest AND r.retained = 1)")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        rows.iter()
            .map(|d| {
                let digest = digest(d)?;
                Ok(Unreferenced {
                    digest,
                    leased: self.inner.leases.is_leased(&digest),
                })
            })
            .collect()
    }

    async fn manifest_row(
        &mut self,
        image: &Digest,
    ) -> Result<Option<manifest::Row>, StorageError> {
        let row: Option<(Option<Vec<u8>>, Vec<u8>)> = self
            .conn
            .prepare_cached("SELECT base, manifest FROM images WHERE digest = ?1")?
            .query_row([image.as_bytes()], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        row.map(|(base, body)| {
            Ok(manifest::Row {
                base: base.as_deref().map(digest).transpose()?,
                body,
            })
        })
        .transpose()
    }

    async fn kept_against(
        &mut self,
        image: &Digest,
    ) -> Result<Vec<(Digest, manifest::Row)>, StorageError> {
        let rows: Vec<(Vec<u8>, Vec<u8>)> = self
            .conn
            .prepare_cached("SELECT digest, manifest FROM images WHERE base = ?1")?
            .query_map([image.as_bytes()], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        rows.into_iter()
            .map(|(child, body)| {
                let row = manifest::Row {
                    base: Some(*image),
                    body,
                };
                Ok((digest(&child)?, row))
            })
            .collect()
    }

    async fn set_manifest_row(
        &mut self,
        image: &Digest,
        row: &manifest::Row,
    ) -> Result<(), StorageError> {
        self.conn
            .prepare_cached("UPDATE images SET base = ?1, manifest = ?2 WHERE digest = ?3")?
            .execute(params![
                row.base.as_ref().map(|b| b.as_bytes().as_slice()),
                row.body,
                image.as_bytes().as_slice()
            ])?;
        Ok(())
    }

    async fn delete_image(&mut self, image: &Digest) -> Result<(), StorageError> {
        self.conn
            .execute("DELETE FROM images WHERE digest = ?1", [image.as_bytes()])?;
        Ok(())
    }

    async fn chunk_rows(&mut self) -> Result<Vec<ChunkRow>, StorageError> {
        // Puts write their chunk rows under the writer lock this pass holds, and one that
        // deduplicated against a row taken here re-checks it at commit (`sweep_epoch`): no row
        // is a put's still streaming.
        let mut stmt = self.conn.prepare("SELECT hash FROM chunks")?;
        let mut rows = stmt.query([])?;
        let mut chunks = Vec::new();
        while let Some(r) = rows.next()? {
            chunks.push(ChunkRow {
                digest: digest(&r.get::<_, Vec<u8>>(0)?)?,
                streamed_at: None,
            });
        }
        Ok(chunks)
    }

    async fn live_chunks(&mut self) -> Result<HashSet<Digest>, StorageError> {
        let mut live = HashSet::new();
        // Every chunk of every image is named by its row or by its bases' (`manifest.rs`).
        let mut stmt = self.conn.prepare("SELECT base, manifest FROM images")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let row = manifest::Row {
                base: r
                    .get::<_, Option<Vec<u8>>>(0)?
                    .as_deref()
                    .map(digest)
                    .transpose()?,
                body: r.get(1)?,
            };
            live.extend(
                manifest::entries(&row).ok_or_else(|| StorageError::Corrupt {
                    object: "manifest".into(),
                })?,
            );
        }
        Ok(live)
    }

    async fn delete_chunks(&mut self, chunks: &[Digest]) -> Result<(), StorageError> {
        for c in chunks {
            self.conn
                .execute("DELETE FROM chunks WHERE hash = ?1", [c.as_bytes()])?;
        }
        Ok(())
    }

    async fn empty_objects(&mut self) -> Result<Vec<String>, StorageError> {
        Ok(self
            .conn
            .prepare("SELECT name FROM packs p WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.pack_id = p.id)")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?)
    }

    async fn unregister_objects(&mut self, names: &[String]) -> Result<(), StorageError> {
        for name in names {
            self.conn
                .execute("DELETE FROM packs WHERE name = ?1", [name])?;
        }
        Ok(())
    }

    async fn registered_objects(&mut self) -> Result<HashSet<String>, StorageError> {
        Ok(self
            .conn
            .prepare("SELECT name FROM packs")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?)
    }

    async fn pending_wipes(&mut self) -> Result<BTreeMap<String, Vec<(u64, u32)>>, StorageError> {
        let mut pending: BTreeMap<String, Vec<(u64, u32)>> = BTreeMap::new();
        let mut stmt = self.conn.prepare_cached(
            "SELECT object, offset, len FROM pending_wipes ORDER BY object, offset",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        for row in rows {
            let (object, offset, len) = row?;
            pending
                .entry(object)
                .or_default()
                .push((offset as u64, len as u32));
        }
        Ok(pending)
    }

    async fn mark_erased(
        &mut self,
        user: &str,
        pseudonym: &str,
        at: Timestamp,
    ) -> Result<(), StorageError> {
        self.conn.execute(
            "UPDATE users SET user_id = ?2, erased_at = COALESCE(erased_at, ?3) WHERE user_id = ?1",
            params![user, pseudonym, at.unix_millis()],
        )?;
        for table in crate::erase::KEPT_UNDER_PSEUDONYM {
            self.conn.execute(
                &format!("UPDATE {table} SET user_id = ?2 WHERE user_id = ?1"),
                params![user, pseudonym],
            )?;
        }
        Ok(())
    }

    async fn tombstones_in_clear(&mut self) -> Result<Vec<String>, StorageError> {
        let (like, len) = crate::erase::PSEUDONYM_LIKE;
        let mut statement = self.conn.prepare_cached(
            "SELECT user_id FROM users WHERE erased_at IS NOT NULL
             AND NOT (user_id LIKE ?1 AND length(user_id) = ?2)",
        )?;
        let ids = statement
            .query_map(params![like, len as i64], |r| r.get(0))?
            .collect::<Result<Vec<String>, _>>()?;
        Ok(ids)
    }

    async fn wipe(&mut self, object: &str, ranges: &[(u64, u32)]) -> Result<(), StorageError> {
        use std::os::unix::fs::FileExt as _;
        let file = match fs::OpenOptions::new()
            .write(true)
            .open(self.inner.pack_path(object))
        {
            Ok(file) => file,
            // Deleted whole since: nothing of it is left to wipe.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        for (offset, len) in ranges {
            file.write_all_at(&vec![0u8; *len as usize], *offset)?;
        }
        file.sync_all()?;
        Ok(())
    }

    async fn wiped(&mut self, object: &str) -> Result<(), StorageError> {
        // After the pass's commit, on the writer it still holds: a statement of its own.
        self.conn
            .execute("DELETE FROM pending_wipes WHERE object = ?1", [object])?;
        Ok(())
    }

    async fn journal(
        &mut self,
        at: Timestamp,
        kind: ReclaimedKind,
        subjects: &[String],
        user: Option<&str>,
    ) -> Result<(), StorageError> {
        for subject in subjects {
            journal(&self.conn, at, kind, subject, user)?;
        }
        Ok(())
    }

    async fn commit(&mut self, chunks_deleted: bool) -> Result<(), StorageError> {
        self.conn.execute_batch("COMMIT")?;
        self.open = false;
        self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        self.inner.checkpoints.note_large_commit();
        if chunks_deleted {
            // Still under the writer lock: no commit that deduplicated can miss it.
            self.inner.sweep_epoch.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    async fn delete_objects(self, names: &[String]) -> Result<(), ReclaimError> {
        for name in names {
            match fs::remove_file(self.inner.pack_path(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::from(e).into()),
            }
        }
        if !names.is_empty() {
            File::open(&self.inner.packs_dir)
                .and_then(|d| d.sync_all())
                .map_err(StorageError::from)?;
        }
        Ok(())
    }
}

impl Erasing for SqlitePass<'_> {
    async fn history(&mut self, user: &str) -> Result<Vec<(String, Digest)>, StorageError> {
        let rows: Vec<(String, Vec<u8>)> = self
            .conn
            .prepare("SELECT revision, digest FROM revisions WHERE user_id = ?1 ORDER BY seq")?
            .query_map([user], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        rows.into_iter()
            .map(|(revision, d)| Ok((revision, digest(&d)?)))
            .collect()
    }

    async fn delete_history(&mut self, user: &str) -> Result<(), StorageError> {
        self.conn.execute(
            "UPDATE users SET current_seq = NULL WHERE user_id = ?1",
            [user],
        )?;
        self.conn
            .execute("DELETE FROM revisions WHERE user_id = ?1", [user])?;
        Ok(())
    }

    async fn named_chunks(&mut self, images: &[Digest]) -> Result<HashSet<Digest>, StorageError> {
        let mut named = HashSet::new();
        for image in images {
            if let Some(resolved) = super::inspect::resolved(&self.conn, image)? {
                named.extend(resolved.chunks);
            }
        }
        Ok(named)
    }

    async fn places(&mut self, chunks: &[Digest]) -> Result<Vec<Place>, StorageError> {
        let mut stmt = self.conn.prepare(
            "SELECT p.name, c.offset, c.len FROM chunks c JOIN packs p ON p.id = c.pack_id WHERE c.hash = ?1",
        )?;
        let mut places = Vec::with_capacity(chunks.len());
        for chunk in chunks {
            let mut rows = stmt.query([chunk.as_bytes()])?;
            while let Some(r) = rows.next()? {
                places.push(Place {
                    len: r.get(2)?,
                    object: Some((r.get(0)?, r.get::<_, i64>(1)? as u64)),
                });
            }
        }
        Ok(places)
    }

    async fn scrub_ledgers(&mut self, user: &str) -> Result<u64, StorageError> {
        let mut scrubbed = 0;
        for table in ["put_ledger", "served"] {
            scrubbed += self.conn.execute(
                &format!(
                    "UPDATE {table} SET principal = ?2 WHERE user_id = ?1 AND principal <> ?2"
                ),
                [user, ERASED],
            )? as u64;
        }
        Ok(scrubbed)
    }

    async fn record_wipes(
        &mut self,
        ranges: &BTreeMap<String, Vec<(u64, u32)>>,
        at: Timestamp,
    ) -> Result<(), StorageError> {
        let mut insert = self.conn.prepare_cached(
            "INSERT OR REPLACE INTO pending_wipes (object, offset, len, recorded_at) VALUES (?1, ?2, ?3, ?4)",
        )?;
        for (object, ranges) in ranges {
            for (offset, len) in ranges {
                insert.execute(params![object, *offset as i64, *len, at.unix_millis()])?;
            }
        }
        Ok(())
    }
}
