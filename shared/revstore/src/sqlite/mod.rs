//! `SqliteStore`: the embedded default for a single node.
//!
//! Layout of the data directory:
//!
//! - `meta.sqlite` (WAL): users and their pointers, history, images (manifest and extents), the
//!   chunk index, packs, publication records, ledgers and the reclamation journal. One writer
//!   connection behind a mutex, a small pool of read-only connections, `foreign_keys=ON`,
//!   `synchronous=NORMAL` except for the commits a put depends on, which run with `FULL`.
//! - `packs/<sha256>.pack`: the new chunks of one put, written once and never modified, except
//!   that an erasure overwrites its erased chunks' ranges with zeros when the pack also holds chunks
//!   still named (`crate::erase`).
//! - `served/<generation>.spool`: served-ledger entries not yet folded into `meta.sqlite`
//!   (see [`spool`]); folded on open, on reads of the ledger, by reclamation passes and every
//!   few thousand downloads.
//! - `tmp/`: packs being written; emptied on open (the directory lock proves no one else writes).
//! - `LOCK`: held with an exclusive file lock for as long as the store is open.
//!
//! All blocking work (SQLite, file I/O, hashing) runs on Tokio's blocking pool.

mod absorb;
mod download;
mod inspect;
mod packs;
mod put;
mod reclaim;
mod serve;
mod spool;

use std::{
    collections::{HashMap, HashSet},
    fs::{self, File, OpenOptions},
    io,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, MutexGuard, atomic::AtomicU64},
};

use bytes::Bytes;
use futures::Stream;
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};

use self::{
    serve::{Checkpoints, Heads},
    spool::ServedSpool,
};
use crate::{
    cas::Accepted,
    chunk,
    config::StoreConfig,
    error::{OpenError, ProvisionError, PutError, ReadError, ReclaimError, StorageError},
    integrity, migrate, protocol,
    store::{BaseImage, Held, ImageDownload, Leases, RevStore},
    types::{
        Digest, ErasureReport, IntegrityReport, JournalEntry, Principal, PutLedgerEntry,
        PutOutcome, PutRequest, ReclaimReport, ReclaimedKind, RestoreRequest, Revision,
        RevisionInfo, SQLITE_HEADER_LEN, ServedEntry, StorageStats, StoreId, Timestamp,
        UsageReport, UserId, Verdict, storage_version,
    },
};

/// Rows per multi-row insert into the chunk index (4 bound values each, well under SQLite's limit).
const INSERT_ROWS: usize = 128;

/// Read-only connections kept for reuse; more are opened on demand and closed after use.
const MAX_IDLE_READERS: usize = 8;

/// The embedded store: SQLite metadata plus pack files under one data directory.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: StoreConfig,
    store_id: StoreId,
    chunk_size: usize,
    db_path: PathBuf,
    packs_dir: PathBuf,
    tmp_dir: PathBuf,
    writer: Arc<Mutex<Connection>>,
    readers: Mutex<Vec<Connection>>,
    leases: Leases,
    /// Buffers of download pieces, recycled when the caller drops a piece.
    pieces: packs::PiecePool,
    /// Each user's current download plan (see [`Heads`] for why it is consistent).
    heads: Heads,
    /// The subscriptions to the users' commits, woken by each commit here.
    revisions: Arc<crate::Revisions>,
    /// Bounds the downloads reading their rows under the writer lock at once: beyond what can
    /// run, more would only crowd the mutex (measured at 32 concurrent GETs: context switches and
    /// futex waits were a fifth of the CPU). Downloads served from [`Heads`] take no permit.
    opens: tokio::sync::Semaphore,
    /// Where downloads record their served-ledger entries before their first byte.
    served: ServedSpool,
    checkpoints: Arc<Checkpoints>,
    /// Bumped by every reclamation that deletes chunks, so a put that deduplicated against the
    /// chunk index re-checks its chunks at commit only when one might have gone.
    sweep_epoch: AtomicU64,
    /// The stored chunks each published put in flight reuses, by publication id: written by
    /// `publish` and cleared by `commit` or `abandon`, all under the writer lock a reclamation
    /// pass holds, which keeps them. In memory, since only this process writes the store; a
    /// crash takes the puts with it.
    reused: Mutex<HashMap<i64, Vec<Digest>>>,
    write_health: crate::write_health::WriteHealth,
    _dir_lock: File,
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `dir`, migrating its tables forward.
    ///
    /// Fails with [`OpenError::Locked`] if another process (or another handle in this one) has it
    /// open.
    pub fn open(dir: impl AsRef<Path>, config: StoreConfig) -> Result<Self, OpenError> {
        let dir = dir.as_ref();
        let packs_dir = dir.join("packs");
        let tmp_dir = dir.join("tmp");
        fs::create_dir_all(&packs_dir)?;
        fs::create_dir_all(&tmp_dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("LOCK"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(OpenError::Locked),
            Err(fs::TryLockError::Error(e)) => return Err(e.into()),
        }
        // Holding the lock, anything in tmp/ belongs to a process that died mid-put.
        for entry in fs::read_dir(&tmp_dir)? {
            fs::remove_file(entry?.path())?;
        }
        let db_path = dir.join("meta.sqlite");
        let mut conn = Connection::open(&db_path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(
                StorageError::unavailable(format!("journal_mode is {mode}, not wal")).into(),
            );
        }
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Deleted cells and freed pages are zeroed, so an erased user's ledger principals (and
        // any row that goes) do not linger in free space (`erase.rs`); always on, since a page
        // freed by an ordinary split keeps the bytes it held just as well.
        conn.pragma_update(None, "secure_delete", "ON")?;
        // Manifests make the WAL grow by a few hundred KiB per put; cap what a checkpoint leaves.
        conn.pragma_update(None, "journal_size_limit", 16 * 1024 * 1024)?;
        // Checkpoints run on a connection of their own, never inside the writer's commits
        // (see [`Checkpoints`]).
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        // The chunk index of a 64 MiB image is 16,384 rows; keep a few images' worth in memory.
        conn.pragma_update(None, "cache_size", -65_536)?;
        // Every statement the writer runs stays prepared: with rusqlite's default of 16, puts,
        // downloads and reclamation evict each other's statements and re-parse them under the lock.
        conn.set_prepared_statement_cache_capacity(64);
        migrate_sqlite(&mut conn, migrate::SQLITE, &packs_dir)?;
        let chunk_size = {
            conn.execute(
                "INSERT OR IGNORE INTO store_meta (key, value) VALUES ('chunk_size', ?1)",
                [config.chunk_size.to_string()],
            )?;
            let v: String = conn.query_row(
                "SELECT value FROM store_meta WHERE key = 'chunk_size'",
                [],
                |r| r.get(0),
            )?;
            v.parse::<usize>().map_err(StorageError::unavailable)?
        };
        let store_id = {
            conn.execute(
                "INSERT OR IGNORE INTO store_meta (key, value) VALUES ('store_id', ?1)",
                [StoreId::generate().map_err(StorageError::from)?.as_str()],
            )?;
            let v: String = conn.query_row(
                "SELECT value FROM store_meta WHERE key = 'store_id'",
                [],
                |r| r.get(0),
            )?;
            StoreId::new(v).map_err(StorageError::unavailable)?
        };
        let writer = Arc::new(Mutex::new(conn));
        let served = ServedSpool::open(dir.join("served"), &writer)?;
        Ok(Self {
            inner: Arc::new(Inner {
                write_health: crate::write_health::WriteHealth::new(config.clock.clone()),
                config,
                store_id,
                chunk_size,
                db_path: db_path.clone(),
                packs_dir,
                tmp_dir,
                writer: writer.clone(),
                readers: Mutex::new(Vec::new()),
                leases: Leases::default(),
                pieces: packs::PiecePool::default(),
                heads: Heads::default(),
                revisions: crate::Revisions::new(),
                opens: tokio::sync::Semaphore::new(
                    std::thread::available_parallelism()
                        .map_or(2, |n| n.get())
                        .max(2),
                ),
                served,
                checkpoints: Arc::new(Checkpoints::new(db_path.clone(), writer)),
                sweep_epoch: AtomicU64::new(0),
                reused: Mutex::new(HashMap::new()),
                _dir_lock: lock,
            }),
        })
    }

    /// The chunk size this store was created with.
    pub fn chunk_size(&self) -> usize {
        self.inner.chunk_size
    }

    /// Checkpoints and truncates the WAL, so the database file holds everything (used before
    /// measuring storage, and by operators before a file-level backup).
    pub fn checkpoint(&self) -> Result<(), StorageError> {
        self.inner.fold_served()?;
        self.inner.checkpoints.truncate()
    }

    async fn blocking<T, E>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StorageError> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| E::from(StorageError::from(e)))?
    }
}

/// Applies the migrations of `known` that `conn` lacks, in one transaction.
fn migrate_sqlite(
    conn: &mut Connection,
    known: &[migrate::Migration],
    packs_dir: &Path,
) -> Result<(), OpenError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS revstore_migrations (
            version INTEGER PRIMARY KEY,
            checksum TEXT NOT NULL,
            applied_at INTEGER NOT NULL
        )",
    )?;
    let applied: Vec<(i64, String)> = tx
        .prepare("SELECT version, checksum FROM revstore_migrations")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for m in migrate::plan(&applied, known)? {
        tx.execute_batch(m.sql)?;
        if m.version == migrate::STORAGE_VERSION {
            let filled = backfill_storage_versions(&tx, packs_dir)?;
            tracing::info!(
                revisions = filled,
                "recorded the storage version of stored revisions"
            );
        }
        tx.execute(
            "INSERT INTO revstore_migrations (version, checksum, applied_at) VALUES (?1, ?2, strftime('%s','now'))",
            params![m.version, migrate::checksum(m.sql)],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// Fills `revisions.storage_version` for the revisions accepted before the store recorded it,
/// from the header in the first chunk(s) of each stored image. The packs are local files, so this
/// costs one read and one hash of a chunk per image, checked against the chunk's address before
/// it is believed. Returns how many revisions got a version.
///
/// A revision whose bytes were reclaimed stays NULL (unknown), and so does one whose header
/// cannot be read back intact: the column is metadata, and damage is `check_integrity`'s to
/// report, not a reason to refuse to open the store.
fn backfill_storage_versions(tx: &Transaction<'_>, packs_dir: &Path) -> Result<u64, OpenError> {
    let chunk_size: Option<String> = tx
        .query_row(
            "SELECT value FROM store_meta WHERE key = 'chunk_size'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    // No chunk size recorded: the store is being created, so there is nothing to fill.
    let Some(chunk_size) = chunk_size else {
        return Ok(0);
    };
    let chunk_size = chunk_size
        .parse::<u64>()
        .map_err(StorageError::unavailable)?;
    let images: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> = tx
        .prepare("SELECT digest, manifest, extents FROM images")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    let mut filled = 0u64;
    for (digest, manifest, extents) in images {
        let header = chunk::decode_manifest(&manifest)
            .zip(packs::decode_extents(&extents))
            .and_then(|(manifest, extents)| {
                let locs = packs::expand(&extents, chunk_size);
                let header_locs = packs::prefix(&locs, SQLITE_HEADER_LEN as u64);
                let digests = manifest.get(..header_locs.len())?;
                let paths =
                    Inner::pack_paths(tx, header_locs.iter().map(|l| l.pack), packs_dir).ok()?;
                let files = packs::open_packs(&paths).ok()?;
                packs::read_verified(&files, header_locs, digests).ok()
            });
        let Some(header) = header else {
            tracing::warn!(
                image = hex::encode(&digest),
                "could not read an image's header back; its storage version stays unknown"
            );
            continue;
        };
        if let Some(version) = storage_version(&header) {
            filled += tx.execute(
                "UPDATE revisions SET storage_version = ?1 WHERE digest = ?2",
                params![version, digest],
            )? as u64;
        }
    }
    Ok(filled)
}

impl Inner {
    fn now(&self) -> Timestamp {
        self.config.clock.now()
    }

    /// Folds the served-ledger spool into `served` (see [`ServedSpool`]), then lets a
    /// checkpoint copy what the fold wrote.
    fn fold_served(&self) -> Result<usize, StorageError> {
        let folded = self.served.fold(&self.writer)?;
        if folded > 0 {
            self.checkpoints.note_large_commit();
        }
        Ok(folded)
    }

    /// Runs the served-ledger spool's writer on the blocking pool until its queue is empty,
    /// starting a fold beside it whenever one is due.
    fn start_served_writer(self: &Arc<Self>) {
        let inner = self.clone();
        tokio::task::spawn_blocking(move || {
            inner.served.write_queued(|| {
                let inner = inner.clone();
                tokio::task::spawn_blocking(move || {
                    if let Err(err) = inner.fold_served() {
                        tracing::warn!(error = %err, "folding the served-ledger spool failed; it is retried by the next fold");
                    }
                });
            });
        });
    }

    fn writer(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the writer leaves at worst an open transaction, which rusqlite
        // rolls back when the Transaction value is dropped during unwinding.
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn with_reader<T, E: From<rusqlite::Error>>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, E>,
    ) -> Result<T, E> {
        let pooled = self.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match pooled {
            Some(c) => c,
            None => {
                let c = Connection::open_with_flags(
                    &self.db_path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                c.busy_timeout(std::time::Duration::from_secs(10))?;
                c.pragma_update(None, "cache_size", -16_384)?;
                c
            }
        };
        let result = f(&conn);
        let mut idle = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
        result
    }

    fn pack_path(&self, name: &str) -> PathBuf {
        self.packs_dir.join(name)
    }

    fn pack_paths(
        conn: &Connection,
        ids: impl IntoIterator<Item = i64>,
        dir: &Path,
    ) -> Result<HashMap<i64, PathBuf>, rusqlite::Error> {
        let mut stmt = conn.prepare_cached("SELECT name FROM packs WHERE id = ?1")?;
        let mut out = HashMap::new();
        for id in ids.into_iter().collect::<HashSet<_>>() {
            if let Some(name) = stmt.query_row([id], |r| r.get::<_, String>(0)).optional()? {
                out.insert(id, dir.join(name));
            }
        }
        Ok(out)
    }
}

/// Runs `f` in an immediate transaction committed with `synchronous=FULL`, for the commits that
/// acknowledge or enable an acknowledged write.
fn durable<T, E: From<rusqlite::Error>>(
    conn: &mut Connection,
    f: impl FnOnce(&Transaction<'_>) -> Result<T, E>,
) -> Result<T, E> {
    conn.pragma_update(None, "synchronous", "FULL")?;
    let result = (|| -> Result<T, E> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = f(&tx)?;
        tx.commit()?;
        Ok(value)
    })();
    let reset = conn.pragma_update(None, "synchronous", "NORMAL");
    let value = result?;
    reset?;
    Ok(value)
}

fn digest_col(bytes: Vec<u8>) -> Result<Digest, rusqlite::Error> {
    Digest::from_slice(&bytes).ok_or_else(|| {
        rusqlite::Error::InvalidColumnType(0, "digest".into(), rusqlite::types::Type::Blob)
    })
}

fn token<T: std::str::FromStr>(s: String) -> Result<T, rusqlite::Error> {
    s.parse().map_err(|_| {
        rusqlite::Error::InvalidColumnType(0, "token".into(), rusqlite::types::Type::Text)
    })
}

fn opt_token<T: std::str::FromStr>(s: Option<String>) -> Result<Option<T>, rusqlite::Error> {
    s.map(token).transpose()
}

const INFO_COLUMNS: &str = "revision, digest, size, accepted_at, principal, base, restored_from, retained, storage_version";

fn info_row(r: &rusqlite::Row<'_>) -> Result<RevisionInfo, rusqlite::Error> {
    Ok(RevisionInfo {
        revision: token(r.get(0)?)?,
        digest: digest_col(r.get(1)?)?,
        size: r.get::<_, i64>(2)? as u64,
        accepted_at: Timestamp::from_unix_millis(r.get(3)?),
        principal: token(r.get(4)?)?,
        storage_version: r.get(8)?,
        base: opt_token(r.get(5)?)?,
        restored_from: opt_token(r.get(6)?)?,
        retained: r.get::<_, i64>(7)? != 0,
    })
}

fn accepted_row(r: &rusqlite::Row<'_>) -> Result<Accepted, rusqlite::Error> {
    Ok(Accepted {
        revision: token(r.get(0)?)?,
        base: opt_token(r.get(1)?)?,
        digest: digest_col(r.get(2)?)?,
    })
}

fn record_verdict(
    conn: &Connection,
    user: &UserId,
    principal: &Principal,
    at: Timestamp,
    verdict: Result<&Revision, &PutError>,
) -> Result<(), rusqlite::Error> {
    let (v, reason, revision) = match verdict {
        Ok(r) => ("accepted", None, Some(r.as_str())),
        Err(e) => ("refused", Some(e.reason().name), None),
    };
    conn.prepare_cached(
        "INSERT INTO put_ledger (user_id, verdict, reason, revision, at, principal) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![user.as_str(), v, reason, revision, at.unix_millis(), principal.as_str()])?;
    Ok(())
}

fn journal(
    conn: &Connection,
    at: Timestamp,
    kind: ReclaimedKind,
    subject: &str,
    user: Option<&str>,
) -> Result<(), rusqlite::Error> {
    conn.prepare_cached(
        "INSERT INTO reclamations (at, kind, subject, user_id) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![at.unix_millis(), kind.as_str(), subject, user])?;
    Ok(())
}

impl RevStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn store_id(&self) -> &StoreId {
        &self.inner.store_id
    }

    fn revisions(&self) -> &Arc<crate::Revisions> {
        &self.inner.revisions
    }

    async fn health(&self) -> Result<(), StorageError> {
        self.blocking(|inner| {
            inner.with_reader(|c| {
                c.query_row("SELECT 1", [], |_| Ok(()))
                    .map_err(StorageError::from)
            })
        })
        .await?;
        self.inner.write_health.verdict()
    }

    async fn provision_user(&self, user: &UserId) -> Result<bool, ProvisionError> {
        let user = user.clone();
        self.blocking(move |inner| {
            let now = inner.now();
            let mut conn = inner.writer();
            durable(&mut conn, |tx| {
                futures::executor::block_on(protocol::provision_in(
                    &mut put::SqliteTx::new(tx, inner),
                    &user,
                    now,
                ))
            })
        })
        .await
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
        let user = user.clone();
        self.blocking(move |inner| {
            inner
                .with_reader(|conn| {
                    conn.prepare_cached(&format!(
                        "SELECT {INFO_COLUMNS} FROM users u JOIN revisions r ON r.user_id = u.user_id AND r.seq = u.current_seq WHERE u.user_id = ?1"
                    ))?
                    .query_row([user.as_str()], info_row)
                    .optional()
                })?
                .ok_or(ReadError::NotFound)
        })
        .await
    }

    async fn head_revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<RevisionInfo, ReadError> {
        let (user, revision) = (user.clone(), revision.clone());
        self.blocking(move |inner| {
            inner
                .with_reader(|conn| {
                    conn.prepare_cached(&format!(
                        "SELECT {INFO_COLUMNS} FROM revisions WHERE user_id = ?1 AND revision = ?2"
                    ))?
                    .query_row(params![user.as_str(), revision.as_str()], info_row)
                    .optional()
                })?
                .filter(|info| info.retained)
                .ok_or(ReadError::NotFound)
        })
        .await
    }

    async fn get(&self, user: &UserId, principal: &Principal) -> Result<ImageDownload, ReadError> {
        self.download(user, None, Some(principal)).await
    }

    async fn get_revision(
        &self,
        user: &UserId,
        revision: &Revision,
        principal: &Principal,
    ) -> Result<ImageDownload, ReadError> {
        self.download(user, Some(revision), Some(principal)).await
    }

    async fn read_revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<ImageDownload, ReadError> {
        self.download(user, Some(revision), None).await
    }

    async fn list_revisions(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<RevisionInfo>, StorageError> {
        let user = user.clone();
        self.blocking(move |inner| {
            inner.with_reader(|conn| {
                conn.prepare_cached(&format!("SELECT {INFO_COLUMNS} FROM revisions WHERE user_id = ?1 ORDER BY seq DESC LIMIT ?2"))?
                    .query_map(params![user.as_str(), limit as i64], info_row)?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(StorageError::from)
            })
        })
        .await
    }

    async fn served_ledger(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<ServedEntry>, StorageError> {
        let user = user.clone();
        self.blocking(move |inner| {
            inner.fold_served()?;
            inner.with_reader(|conn| {
                conn.prepare_cached("SELECT revision, at, principal FROM served WHERE user_id IN (?1, ?3) ORDER BY id DESC LIMIT ?2")?
                    .query_map(params![user.as_str(), limit as i64, crate::erase::pseudonym(user.as_str())], |r| {
                        Ok(ServedEntry { revision: token(r.get(0)?)?, at: Timestamp::from_unix_millis(r.get(1)?), principal: token(r.get(2)?)? })
                    })?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(StorageError::from)
            })
        })
        .await
    }

    async fn put_ledger(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<PutLedgerEntry>, StorageError> {
        let user = user.clone();
        self.blocking(move |inner| {
            inner.with_reader(|conn| {
                conn.prepare_cached("SELECT verdict, reason, revision, at, principal FROM put_ledger WHERE user_id IN (?1, ?3) ORDER BY id DESC LIMIT ?2")?
                    .query_map(params![user.as_str(), limit as i64, crate::erase::pseudonym(user.as_str())], |r| {
                        let verdict: String = r.get(0)?;
                        let reason: Option<String> = r.get(1)?;
                        Ok(PutLedgerEntry {
                            verdict: if verdict == "accepted" { Verdict::Accepted } else { Verdict::Refused { reason: reason.unwrap_or_default() } },
                            revision: opt_token(r.get(2)?)?,
                            at: Timestamp::from_unix_millis(r.get(3)?),
                            principal: token(r.get(4)?)?,
                        })
                    })?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(StorageError::from)
            })
        })
        .await
    }

    async fn reclaim(&self) -> Result<ReclaimReport, ReclaimError> {
        self.blocking(|inner| inner.reclaim()).await
    }

    async fn usage(&self, user: &UserId) -> Result<UsageReport, StorageError> {
        let (history, current) = crate::erase::holdings(self, user).await?;
        let chunk_size = self.inner.chunk_size;
        self.blocking(move |inner| {
            futures::executor::block_on(crate::erase::usage(
                inner,
                &history,
                current.as_ref(),
                chunk_size,
            ))
        })
        .await
    }

    async fn erase(&self, user: &UserId) -> Result<ErasureReport, ReclaimError> {
        let erasing = user.clone();
        let erased = self
            .blocking(move |inner| {
                let user = erasing;
                // The served ledger's spool files hold principals too: folded into `served`
                // first, so the pass scrubs them there.
                inner.fold_served()?;
                let mut report =
                    futures::executor::block_on(crate::erase::erase(inner, &user, inner.now()))?;
                // A download that began before the pass wrote its entry to the spool meanwhile.
                if inner.fold_served()? > 0 {
                    let conn = inner.writer();
                    report.ledger_rows_scrubbed += conn.execute(
                        "UPDATE served SET principal = ?2 WHERE user_id = ?1 AND principal <> ?2",
                        [user.as_str(), crate::erase::ERASED],
                    )? as u64;
                }
                // Neither the database file nor a WAL frame may keep a page as it was before
                // the erasure. Blocked by a reader, the erasure stays committed and a retry
                // (reporting zeros) completes the checkpoint.
                inner.checkpoints.truncate()?;
                Ok(report)
            })
            .await;
        if erased.is_ok() {
            // The user's subscribers learn they have no image now, as from a commit.
            self.inner.revisions.announce(user);
        }
        erased
    }

    async fn journal(&self, limit: usize) -> Result<Vec<JournalEntry>, StorageError> {
        self.blocking(move |inner| {
            inner.with_reader(|conn| {
                conn.prepare_cached(
                    "SELECT at, kind, subject, user_id FROM reclamations ORDER BY id DESC LIMIT ?1",
                )?
                .query_map([limit as i64], |r| {
                    let kind: String = r.get(1)?;
                    Ok(JournalEntry {
                        at: Timestamp::from_unix_millis(r.get(0)?),
                        kind: ReclaimedKind::parse(&kind).ok_or_else(|| {
                            rusqlite::Error::InvalidColumnType(
                                1,
                                "kind".into(),
                                rusqlite::types::Type::Text,
                            )
                        })?,
                        subject: r.get(2)?,
                        user: opt_token(r.get(3)?)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
                .map_err(StorageError::from)
            })
        })
        .await
    }

    async fn stats(&self) -> Result<StorageStats, StorageError> {
        self.blocking(|inner| {
            inner.with_reader(|conn| {
                conn.query_row(
                    "SELECT (SELECT count(*) FROM images), (SELECT count(*) FROM chunks), (SELECT coalesce(sum(len), 0) FROM chunks)",
                    [],
                    |r| Ok(StorageStats { images: r.get::<_, i64>(0)? as u64, chunks: r.get::<_, i64>(1)? as u64, chunk_bytes: r.get::<_, i64>(2)? as u64 }),
                )
                .map_err(StorageError::from)
            })
        })
        .await
    }

    async fn check_integrity_watched(
        &self,
        progress: &tokio::sync::watch::Sender<IntegrityReport>,
    ) -> Result<IntegrityReport, StorageError> {
        // Every read is a file or SQLite call, so the whole check runs on one blocking thread.
        let progress = progress.clone();
        self.blocking(move |inner| futures::executor::block_on(integrity::check(inner, &progress)))
            .await
    }
}

#[cfg(test)]
mod tests;
