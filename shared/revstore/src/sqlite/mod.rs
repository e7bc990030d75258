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
//! - `served/<generation>.journal`: served-ledger entries not yet folded into `meta.sqlite`
//!   (see [`journal`]); folded on open, on reads of the ledger, by reclamation passes and every
//!   few thousand downloads.
//! - `tmp/`: packs being written; emptied on open (the directory lock proves no one else writes).
//! - `LOCK`: held with an exclusive file lock for as long as the store is open.
//!
//! All blocking work (SQLite, file I/O, hashing) runs on Tokio's blocking pool.

mod journal;
mod packs;
mod reclaim;
mod serve;

use std::{
    collections::{HashMap, HashSet},
    fs::{self, File, OpenOptions},
    io,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
};

use bytes::Bytes;
use futures::Stream;
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};
use tokio::sync::mpsc;

use self::{
    journal::{ServedJournal, ServedRow},
    packs::{ChunkLoc, TempPack},
    serve::{Checkpoints, Heads, Plan},
};
use crate::{
    cas::{Accepted, Facts},
    chunk::{self, ChunkSink, Ingested},
    config::StoreConfig,
    error::{OpenError, PutError, ReadError, ReclaimError, StorageError, image_conflict},
    integrity, migrate,
    protocol::{
        self, Decision, Image, Intent, Primitives, Proposal, RECORD_GONE, ReadBack, Source,
    },
    store::{Guarded, ImageBody, ImageDownload, LeaseGuard, Leases, RevStore},
    types::{
        Digest, ErasureReport, IdempotencyKey, IntegrityReport, JournalEntry, Precondition,
        Principal, PutLedgerEntry, PutOutcome, PutRequest, ReclaimReport, ReclaimedKind,
        RestoreRequest, Revision, RevisionInfo, SQLITE_HEADER_LEN, ServedEntry, StorageStats,
        StoreId, Timestamp, UsageReport, UserId, Verdict, storage_version,
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
    /// Bounds the downloads reading their rows under the writer lock at once: beyond what can
    /// run, more would only crowd the mutex (measured at 32 concurrent GETs: context switches and
    /// futex waits were a fifth of the CPU). Downloads served from [`Heads`] take no permit.
    opens: tokio::sync::Semaphore,
    /// Where downloads record their served-ledger entries before their first byte.
    served: ServedJournal,
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
        let served = ServedJournal::open(dir.join("served"), &writer)?;
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

    /// Folds the served-ledger journal into `served` (see [`ServedJournal`]), then lets a
    /// checkpoint copy what the fold wrote.
    fn fold_served(&self) -> Result<usize, StorageError> {
        let folded = self.served.fold(&self.writer)?;
        if folded > 0 {
            self.checkpoints.note_large_commit();
        }
        Ok(folded)
    }

    /// Runs the served-ledger journal's writer on the blocking pool until its queue is empty,
    /// starting a fold beside it whenever one is due.
    fn start_served_writer(self: &Arc<Self>) {
        let inner = self.clone();
        tokio::task::spawn_blocking(move || {
            inner.served.write_queued(|| {
                let inner = inner.clone();
                tokio::task::spawn_blocking(move || {
                    if let Err(err) = inner.fold_served() {
                        tracing::warn!(error = %err, "folding the served-ledger journal failed; it is retried by the next fold");
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

/// Gathers what the compare-and-swap decision needs; `None` if the user is not provisioned.
fn load_facts(
    conn: &Connection,
    user: &UserId,
    precondition: &Precondition,
    key: Option<&IdempotencyKey>,
) -> Result<Option<Facts>, rusqlite::Error> {
    let Some(current_seq) = conn
        .prepare_cached("SELECT current_seq FROM users WHERE user_id = ?1")?
        .query_row([user.as_str()], |r| r.get::<_, Option<i64>>(0))
        .optional()?
    else {
        return Ok(None);
    };
    let current = match current_seq {
        None => None,
        Some(seq) => conn
            .prepare_cached(
                "SELECT revision, base, digest FROM revisions WHERE user_id = ?1 AND seq = ?2",
            )?
            .query_row(params![user.as_str(), seq], accepted_row)
            .optional()?,
    };
    let base_known = match precondition.base() {
        None => false,
        Some(base) => conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM revisions WHERE user_id = ?1 AND revision = ?2)",
            )?
            .query_row(params![user.as_str(), base.as_str()], |r| r.get(0))?,
    };
    let keyed = match key {
        None => None,
        Some(key) => conn
            .prepare_cached(
                "SELECT revision, base, digest FROM revisions WHERE user_id = ?1 AND idempotency_key = ?2 ORDER BY seq DESC LIMIT 1",
            )?
            .query_row(params![user.as_str(), key.as_str()], accepted_row)
            .optional()?,
    };
    Ok(Some(Facts {
        current,
        base_known,
        keyed,
        staged: 0,
    }))
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
        Err(e) => ("refused", Some(e.reason()), None),
    };
    conn.prepare_cached(
        "INSERT INTO put_verdicts (user_id, verdict, reason, revision, at, principal) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
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

/// What the chunk writer produced for one put.
pub(crate) struct Absorbed {
    manifest: Vec<Digest>,
    /// Per chunk: where it already is (`pack >= 0`) or its offset in the new pack (`pack == NEW`).
    locs: Vec<ChunkLoc>,
    pack: Option<NewPack>,
}

pub(crate) struct NewPack {
    temp: TempPack,
    chunks: Vec<(Digest, u64, u32)>,
}

/// Pseudo pack id for chunks in the pack this put is writing.
const NEW: i64 = -1;

/// Hands chunk batches to the blocking chunk writer.
pub(crate) struct ChannelSink(mpsc::Sender<Vec<Bytes>>);

impl ChunkSink for ChannelSink {
    async fn accept(&mut self, chunks: Vec<Bytes>) -> Result<(), PutError> {
        // A closed channel means the writer failed; its own error is reported by the caller.
        self.0
            .send(chunks)
            .await
            .map_err(|_| PutError::Storage(StorageError::unavailable("chunk writer stopped")))
    }
}

impl Inner {
    /// Hashes chunks, deduplicates them against the chunk index and this put, and appends the new
    /// ones to a temporary pack. Runs on a blocking thread while the async side keeps reading.
    fn absorb(&self, mut rx: mpsc::Receiver<Vec<Bytes>>) -> Result<Absorbed, PutError> {
        // Two stages on two threads: one hashes chunks, the other deduplicates and writes them.
        // With the whole-image digest computed on the async side, the three passes over the bytes
        // run side by side instead of one after another.
        let (hashed_tx, hashed_rx) = std::sync::mpsc::sync_channel::<(Vec<Bytes>, Vec<Digest>)>(2);
        std::thread::scope(|scope| {
            scope.spawn(move || {
                while let Some(batch) = rx.blocking_recv() {
                    let hashes: Vec<Digest> = batch.iter().map(|c| Digest::of(c)).collect();
                    if hashed_tx.send((batch, hashes)).is_err() {
                        break;
                    }
                }
            });
            self.with_reader(|conn| {
                let mut manifest = Vec::new();
                let mut locs = Vec::new();
                let mut pack: Option<NewPack> = None;
                let mut in_pack: HashMap<Digest, (u64, u32)> = HashMap::new();
                for (batch, hashes) in hashed_rx {
                    let unknown: Vec<&Digest> = hashes
                        .iter()
                        .filter(|h| !in_pack.contains_key(*h))
                        .collect();
                    let found = lookup_chunks(conn, &unknown)?;
                    for (bytes, hash) in batch.iter().zip(&hashes) {
                        let len = bytes.len() as u32;
                        let loc = if let Some(loc) = found.get(hash) {
                            *loc
                        } else if let Some((offset, len)) = in_pack.get(hash) {
                            ChunkLoc {
                                pack: NEW,
                                offset: *offset,
                                len: *len,
                            }
                        } else {
                            if pack.is_none() {
                                pack = Some(NewPack {
                                    temp: TempPack::create(&self.tmp_dir)?,
                                    chunks: Vec::new(),
                                });
                            }
                            let p = pack.as_mut().ok_or_else(|| io::Error::other("no pack"))?;
                            let offset = p.temp.append(bytes)?;
                            p.chunks.push((*hash, offset, len));
                            in_pack.insert(*hash, (offset, len));
                            ChunkLoc {
                                pack: NEW,
                                offset,
                                len,
                            }
                        };
                        manifest.push(*hash);
                        locs.push(loc);
                    }
                }
                if let Some(p) = pack.as_mut() {
                    let file = p.temp.finish_writes()?;
                    // Read the new chunks back while the fsync runs: both must succeed before the
                    // pack is published, and neither needs the other.
                    let files = HashMap::from([(NEW, Arc::new(file.try_clone()?))]);
                    let new_locs: Vec<ChunkLoc> = p
                        .chunks
                        .iter()
                        .map(|(_, offset, len)| ChunkLoc {
                            pack: NEW,
                            offset: *offset,
                            len: *len,
                        })
                        .collect();
                    let new_digests: Vec<Digest> = p.chunks.iter().map(|(d, _, _)| *d).collect();
                    let (synced, verified) = std::thread::scope(|s| {
                        let sync = s.spawn(|| file.sync_all());
                        let verified = packs::verify_chunks(&files, &new_locs, &new_digests);
                        (
                            sync.join()
                                .unwrap_or_else(|_| Err(io::Error::other("fsync thread panicked"))),
                            verified,
                        )
                    });
                    synced?;
                    if let Err(chunk) = verified {
                        return Err(StorageError::Corrupt {
                            object: format!("chunk {chunk}"),
                        }
                        .into());
                    }
                }
                Ok(Absorbed {
                    manifest,
                    locs,
                    pack,
                })
            })
        })
    }
}

/// Checks that every chunk a put deduplicated against the index is still where it found it.
fn check_reused(conn: &Connection, absorbed: &Absorbed) -> Result<(), PutError> {
    let mut stmt = conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM chunks WHERE hash = ?1 AND pack_id = ?2 AND offset = ?3)",
    )?;
    for (loc, hash) in absorbed.locs.iter().zip(&absorbed.manifest) {
        if loc.pack != NEW
            && !stmt.query_row(
                params![hash.as_bytes().as_slice(), loc.pack, loc.offset as i64],
                |r| r.get::<_, bool>(0),
            )?
        {
            return Err(
                StorageError::unavailable("a chunk was reclaimed during the put; retry").into(),
            );
        }
    }
    Ok(())
}

/// Looks up where the given chunks are stored, in batches of bound parameters.
fn lookup_chunks(
    conn: &Connection,
    hashes: &[&Digest],
) -> Result<HashMap<Digest, ChunkLoc>, rusqlite::Error> {
    let mut out = HashMap::new();
    for group in hashes.chunks(256) {
        let placeholders = vec!["?"; group.len()].join(",");
        let sql =
            format!("SELECT hash, pack_id, offset, len FROM chunks WHERE hash IN ({placeholders})");
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(
            rusqlite::params_from_iter(group.iter().map(|h| h.as_bytes().as_slice())),
            |r| {
                Ok((
                    digest_col(r.get(0)?)?,
                    ChunkLoc {
                        pack: r.get(1)?,
                        offset: r.get::<_, i64>(2)? as u64,
                        len: r.get::<_, i64>(3)? as u32,
                    },
                ))
            },
        )?;
        for row in rows {
            let (h, loc) = row?;
            out.insert(h, loc);
        }
    }
    Ok(out)
}

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
    fn reused_by(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Vec<Digest>>> {
        self.reused
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Refuses early or writes the durable publication record that marks the put as in flight.
    fn begin(&self, intent: &Intent) -> Result<Begun, PutError> {
        let now = self.now();
        let mut conn = self.writer();
        let epoch = self.sweep_epoch.load(Ordering::SeqCst);

        durable(&mut conn, |tx| {
            let mut facts =
                load_facts(tx, &intent.user, &intent.precondition, intent.key.as_ref())?;
            if let Some(facts) = facts.as_mut() {
                facts.staged = tx
                    .prepare_cached(
                        "SELECT COALESCE(SUM(reserved), 0) FROM publications WHERE user_id = ?1",
                    )?
                    .query_row([intent.user.as_str()], |r| r.get::<_, i64>(0))?
                    as u64;
            }
            if let Some(err) = intent.early(facts.as_ref()) {
                record_verdict(tx, &intent.user, &intent.principal, now, Err(&err))?;
                return Ok::<_, PutError>(Err(err));
            }
            tx.prepare_cached(
                "INSERT INTO publications (user_id, base, idempotency_key, started_at, digest, reserved) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                intent.user.as_str(),
                intent.base().map(Revision::as_str),
                intent.key.as_ref().map(IdempotencyKey::as_str),
                now.unix_millis(),
                intent.image.as_ref().map(|d| d.as_bytes().as_slice()),
                intent.reserve.min(i64::MAX as u64) as i64,
            ])?;
            Ok(Ok(Begun {
                publication: tx.last_insert_rowid(),
                epoch,
            }))
        })?
    }

    /// Marks the publication record of a put that stopped before its commit abandoned, ledgering
    /// the refusal when it was one; `reclaim::discard` then takes what it staged.
    fn abandon(&self, begun: Begun, intent: &Intent, err: &PutError) {
        let now = self.now();
        let conn = self.writer();
        self.reused_by().remove(&begun.publication);
        let result = (|| -> Result<(), rusqlite::Error> {
            conn.execute(
                "UPDATE publications SET abandoned_at = ?2 WHERE id = ?1",
                params![begun.publication, now.unix_millis()],
            )?;
            if err.is_ledgered() {
                record_verdict(&conn, &intent.user, &intent.principal, now, Err(err))?;
            }
            Ok(())
        })();
        if let Err(e) = result {
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
                    let locs: Vec<ChunkLoc> = pack
                        .chunks
                        .iter()
                        .map(|(_, offset, len)| ChunkLoc {
                            pack: NEW,
                            offset: *offset,
                            len: *len,
                        })
                        .collect();
                    let digests: Vec<Digest> = pack.chunks.iter().map(|(d, _, _)| *d).collect();
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

    /// Reads back the deduplicated chunks of a put and checks them against their addresses.
    fn read_back_staged(&self, staged: &Staged) -> Result<(), PutError> {
        let absorbed = &staged.absorbed;
        let mut paths: HashMap<i64, PathBuf> = HashMap::new();
        // The chunks this put wrote were read back from its pack while the pack was synced (the
        // file published under its name is that file), and a pack that was already in place was
        // compared chunk by chunk by `publish`.
        let (old_locs, old_digests): (Vec<ChunkLoc>, Vec<Digest>) = absorbed
            .locs
            .iter()
            .zip(&absorbed.manifest)
            .filter(|(l, _)| l.pack != NEW)
            .map(|(l, d)| (*l, *d))
            .unzip();
        if !old_locs.is_empty() {
            let existing: Vec<i64> = old_locs.iter().map(|l| l.pack).collect();
            paths.extend(
                self.with_reader(|conn| Inner::pack_paths(conn, existing, &self.packs_dir))?,
            );
            let files = packs::open_packs(&paths).map_err(|_| {
                StorageError::unavailable("a pack was reclaimed during the put; retry")
            })?;
            if let Err(chunk) = packs::verify_chunks(&files, &old_locs, &old_digests) {
                return Err(StorageError::Corrupt {
                    object: format!("chunk {chunk}"),
                }
                .into());
            }
        }
        Ok(())
    }

    /// The one transaction that decides, creates the image row, swaps the pointer, appends
    /// history and ledger, and clears the publication record.
    fn commit(
        &self,
        begun: Begun,
        proposal: &Proposal<Arc<Staged>>,
    ) -> Result<PutOutcome, PutError> {
        let now = self.now();
        let intent = &proposal.intent;
        let user = &intent.user;
        let digest = proposal.image.digest;
        let mut conn = self.writer();
        // Under the writer lock until the image row (which then names the chunks) is committed
        // or the transaction is rolled back: no pass can run in between.
        self.reused_by().remove(&begun.publication);
        let epoch_moved = self.sweep_epoch.load(Ordering::SeqCst) != begun.epoch;
        // A refusal returns an error, which rolls the transaction back; the driver then clears
        // the publication record and ledgers the refusal (`abandon`).
        let outcome = durable(&mut conn, |tx| {
            if tx.execute(
                "DELETE FROM publications WHERE id = ?1",
                [begun.publication],
            )? == 0
            {
                return Err(PutError::Storage(StorageError::unavailable(RECORD_GONE)));
            }
            let facts = load_facts(tx, user, &intent.precondition, intent.key.as_ref())?;
            match (proposal.decide(facts.as_ref()), &proposal.source) {
                (Decision::Accept, Source::Streamed(staged)) => {
                    self.ensure_image(tx, &proposal.image, staged, epoch_moved, now)?;
                }
                (Decision::Accept, Source::Existing { .. }) => {
                    let present: bool = tx.query_row(
                        "SELECT EXISTS (SELECT 1 FROM images WHERE digest = ?1)",
                        [digest.as_bytes().as_slice()],
                        |r| r.get(0),
                    )?;
                    if !present {
                        return Err(PutError::NotFound);
                    }
                }
                (Decision::Replay(revision), _) => {
                    let info = tx
                        .prepare_cached(&format!("SELECT {INFO_COLUMNS} FROM revisions WHERE user_id = ?1 AND revision = ?2"))?
                        .query_row(params![user.as_str(), revision.as_str()], info_row)?;
                    record_verdict(tx, user, &intent.principal, now, Ok(&revision))?;
                    return Ok(PutOutcome {
                        info,
                        replayed: true,
                    });
                }
                (Decision::Refuse(err), _) => return Err(err),
            }
            let last_seq: i64 = tx.query_row(
                "SELECT last_seq FROM users WHERE user_id = ?1",
                [user.as_str()],
                |r| r.get(0),
            )?;
            let seq = last_seq + 1;
            let info = proposal.accepted(seq as u64, now)?;
            tx.prepare_cached(
                "INSERT INTO revisions (user_id, seq, revision, digest, size, accepted_at, principal, base, restored_from, idempotency_key, storage_version)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                user.as_str(),
                seq,
                info.revision.as_str(),
                digest.as_bytes().as_slice(),
                info.size as i64,
                now.unix_millis(),
                info.principal.as_str(),
                info.base.as_ref().map(Revision::as_str),
                info.restored_from.as_ref().map(Revision::as_str),
                intent.key.as_ref().map(IdempotencyKey::as_str),
                info.storage_version,
            ])?;
            tx.prepare_cached(
                "UPDATE users SET last_seq = ?2, current_seq = ?2 WHERE user_id = ?1",
            )?
            .execute(params![user.as_str(), seq])?;
            record_verdict(tx, user, &intent.principal, now, Ok(&info.revision))?;
            Ok(PutOutcome {
                info,
                replayed: false,
            })
        });
        if outcome.as_ref().is_ok_and(|o| !o.replayed) {
            // Still under the writer lock: no download reads the old plan's rows from here on.
            self.heads.forget(user.as_str());
        }
        self.checkpoints.note_large_commit();
        outcome
    }

    /// Registers the new pack and chunks and creates the image row, create-once.
    fn ensure_image(
        &self,
        tx: &Transaction<'_>,
        image: &Image,
        staged: &Staged,
        epoch_moved: bool,
        now: Timestamp,
    ) -> Result<(), PutError> {
        let (digest, size) = (image.digest, image.size);
        let absorbed = &staged.absorbed;
        let pack_name = staged.pack_name.as_deref();
        let manifest = chunk::encode_manifest(&absorbed.manifest);
        let existing: Option<(i64, Vec<u8>)> = tx
            .prepare_cached("SELECT size, manifest FROM images WHERE digest = ?1")?
            .query_row([digest.as_bytes().as_slice()], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        if let Some((existing_size, existing_manifest)) = existing {
            if existing_size as u64 != size || existing_manifest != manifest {
                return Err(image_conflict(&digest));
            }
            return Ok(());
        }
        if epoch_moved {
            // A reclamation ran since the put began: make sure every deduplicated chunk is still
            // where the read-back found it (from `publish` on, the pass kept them).
            check_reused(tx, absorbed)?;
        }
        let mut moved: HashMap<Digest, ChunkLoc> = HashMap::new();
        let mut pack_id = NEW;
        if let (Some(pack), Some(name)) = (&absorbed.pack, pack_name) {
            tx.prepare_cached(
                "INSERT OR IGNORE INTO packs (name, size, created_at) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![name, pack.temp.len as i64, now.unix_millis()])?;
            pack_id = tx.query_row("SELECT id FROM packs WHERE name = ?1", [name], |r| r.get(0))?;
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
        tx.prepare_cached("INSERT INTO images (digest, size, manifest, extents, created_at) VALUES (?1, ?2, ?3, ?4, ?5)")?
            .execute(params![digest.as_bytes().as_slice(), size as i64, manifest, extents, now.unix_millis()])?;
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

impl Inner {
    /// Reads a download's plan from the rows and takes its lease; a plan of the current revision
    /// is cached for the next download.
    fn open_download(
        &self,
        user: &UserId,
        revision: Option<&Revision>,
    ) -> Result<(Arc<Plan>, LeaseGuard), ReadError> {
        // Under the writer lock, which reclamation also holds: either the revision was already
        // reclaimed (and is not found), or the lease taken here protects it from the next pass.
        let conn = self.writer();
        let row = match revision {
            None => conn
                .prepare_cached(&format!(
                    "SELECT {INFO_COLUMNS} FROM users u JOIN revisions r ON r.user_id = u.user_id AND r.seq = u.current_seq WHERE u.user_id = ?1"
                ))?
                .query_row([user.as_str()], info_row)
                .optional()?,
            Some(rev) => conn
                .prepare_cached(&format!("SELECT {INFO_COLUMNS} FROM revisions WHERE user_id = ?1 AND revision = ?2"))?
                .query_row(params![user.as_str(), rev.as_str()], info_row)
                .optional()?,
        };
        let info = match row {
            Some(info) if info.retained => info,
            _ => return Err(ReadError::NotFound),
        };
        let extents: Vec<u8> = conn
            .prepare_cached("SELECT extents FROM images WHERE digest = ?1")?
            .query_row([info.digest.as_bytes().as_slice()], |r| r.get(0))
            .optional()?
            .ok_or_else(|| StorageError::Corrupt {
                object: format!("image {}", info.digest),
            })?;
        let extents = packs::decode_extents(&extents).ok_or_else(|| StorageError::Corrupt {
            object: format!("image {}", info.digest),
        })?;
        let paths = Inner::pack_paths(&conn, extents.iter().map(|e| e.pack), &self.packs_dir)?;
        let files = packs::open_packs(&paths).map_err(StorageError::from)?;
        let lease = self.leases.take(info.digest);
        let plan = Arc::new(Plan::new(info, extents, files, revision.is_none()));
        if revision.is_none() {
            self.heads.insert(user.as_str(), plan.clone());
        }
        drop(conn);
        Ok((plan, lease))
    }
}

impl SqliteStore {
    async fn download(
        &self,
        user: &UserId,
        revision: Option<&Revision>,
        // None: read for the origin's own use, not served, so not in the served ledger.
        principal: Option<&Principal>,
    ) -> Result<ImageDownload, ReadError> {
        let inner = &self.inner;
        let cached = match revision {
            None => inner.heads.hit(user.as_str(), &inner.leases),
            Some(_) => None,
        };
        let (plan, lease) = match cached {
            Some(hit) => hit,
            None => {
                let _permit = inner
                    .opens
                    .acquire()
                    .await
                    .map_err(StorageError::unavailable)?;
                let (user, revision) = (user.clone(), revision.cloned());
                self.blocking(move |inner| inner.open_download(&user, revision.as_ref()))
                    .await?
            }
        };
        // The entry is written before the first byte is handed out; when it cannot be, the
        // lease is released and nothing is served.
        let at = inner.now().unix_millis();
        plan.note_served(at);
        if let Some(principal) = principal {
            let (recorded, start_writer) = inner.served.push(&ServedRow {
                user: user.as_str().to_owned(),
                revision: plan.info.revision.as_str().to_owned(),
                at,
                principal: principal.as_str().to_owned(),
            })?;
            if start_writer {
                inner.start_served_writer();
            }
            recorded
                .await
                .map_err(|_| StorageError::unavailable("the served-ledger writer stopped"))??;
        }
        let info = plan.info.clone();
        let body = match plan.bytes() {
            Some(bytes) => ImageBody::new(Guarded::new(futures::stream::iter([Ok(bytes)]), lease)),
            None => self.read_plan(plan, lease)?,
        };
        Ok(ImageDownload { info, body })
    }

    /// Streams a plan's bytes from its packs in two stages on the blocking pool: one thread reads
    /// the pieces, running ahead by up to two; another checks each against the image's manifest
    /// and hands it on, running ahead of the caller by up to two. Reading and hashing each cost
    /// about as much as the other for a warm pack, so on two cores the check costs little wall
    /// time. A small image's bytes are kept in its plan for the next download, and so is a large
    /// one's where it can be kept sealed ([`Plan::gather`]).
    ///
    /// Every piece is whole chunks, checked against the image's manifest before it is handed on
    /// (or kept): a byte damaged on disk ends the download with [`StorageError::Corrupt`] and
    /// never reaches the caller. Bytes kept in memory were checked this way when they were read.
    /// The manifest (32 bytes per chunk, 1/128 of a 4 KiB-chunked image) is read with each
    /// download rather than kept in the plan, where 256 cached plans of large images would hold
    /// up to 128 MiB of it.
    fn read_plan(&self, plan: Arc<Plan>, lease: LeaseGuard) -> Result<ImageBody, ReadError> {
        let chunk_size = self.inner.chunk_size;
        let tasks = plan.read_tasks(chunk_size).map_err(StorageError::from)?;
        let whole = tasks.len() == 1;
        let (read_tx, read_rx) = std::sync::mpsc::sync_channel::<std::io::Result<Bytes>>(2);
        let reader = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            for task in tasks {
                // A closed channel: the checking stage ended (a failure, or a dropped download).
                if read_tx.send(task.read(&reader.pieces)).is_err() {
                    return;
                }
            }
        });
        let inner = self.inner.clone();
        let (tx, rx) = mpsc::channel::<Result<Bytes, StorageError>>(2);
        tokio::task::spawn_blocking(move || {
            let manifest = match inner.manifest(&plan.info.digest) {
                Ok(manifest) => manifest,
                Err(err) => {
                    let _ = tx.blocking_send(Err(err));
                    return;
                }
            };
            let mut unread = manifest.as_slice();
            let sealer = &inner.config.sealer;
            let mut gathering = plan.gather(sealer, || {
                inner.heads.make_room(&plan, inner.now().unix_millis())
            });
            for read in read_rx {
                let piece = read.map_err(StorageError::from).and_then(|bytes| {
                    let (named, rest) = unread
                        .split_at_checked(bytes.len().div_ceil(chunk_size))
                        .unwrap_or((unread, &[]));
                    unread = rest;
                    chunk::check_run(named, chunk_size, &bytes)?;
                    Ok(bytes)
                });
                if whole && let Ok(bytes) = &piece {
                    plan.keep(bytes, sealer);
                }
                // Gathered after it is handed on, so the download does not wait for the copy.
                let gathered = gathering.as_ref().and(piece.as_ref().ok()).cloned();
                let failed = piece.is_err();
                // A closed channel means the caller dropped the download.
                if tx.blocking_send(piece).is_err() || failed {
                    return;
                }
                if let (Some(gathering), Some(bytes)) = (&mut gathering, gathered) {
                    gathering.push(&bytes);
                }
            }
            if let Some(gathering) = gathering {
                gathering.finish();
            }
        });
        let pieces = Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|piece| (piece, rx))
        }));
        Ok(ImageBody::new(Guarded::new(pieces, lease)))
    }
}

/// Hands the chunks of a put to the blocking chunk writer, whose outcome `publish` awaits.
pub(crate) struct SqliteSink {
    channel: ChannelSink,
    writer: tokio::task::JoinHandle<Result<Absorbed, PutError>>,
}

impl ChunkSink for SqliteSink {
    async fn accept(&mut self, chunks: Vec<Bytes>) -> Result<(), PutError> {
        self.channel.accept(chunks).await
    }
}

impl Primitives for SqliteStore {
    type Publication = Begun;
    type Sink = SqliteSink;
    type Staged = Arc<Staged>;

    fn chunk_size(&self) -> usize {
        self.inner.chunk_size
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
            tracing::warn!(reason = err.reason(), error = %err, "could not reclaim what a failed put staged; the next reclamation pass takes it");
        }
    }

    fn sink(&self, _: &Begun) -> SqliteSink {
        let (tx, rx) = mpsc::channel::<Vec<Bytes>>(4);
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
            let conn = inner.writer();
            record_verdict(
                &conn,
                &intent.user,
                &intent.principal,
                inner.now(),
                Err(&err),
            )
            .map_err(StorageError::from)
        })
        .await
    }
}

impl RevStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn store_id(&self) -> &StoreId {
        &self.inner.store_id
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

    async fn provision_user(&self, user: &UserId) -> Result<bool, StorageError> {
        let user = user.clone();
        self.blocking(move |inner| {
            let now = inner.now();
            let mut conn = inner.writer();
            durable(&mut conn, |tx| {
                let n = tx.execute(
                    "INSERT OR IGNORE INTO users (user_id, created_at) VALUES (?1, ?2)",
                    params![user.as_str(), now.unix_millis()],
                )?;
                Ok::<_, StorageError>(n == 1)
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
                conn.prepare_cached("SELECT revision, at, principal FROM served WHERE user_id = ?1 ORDER BY id DESC LIMIT ?2")?
                    .query_map(params![user.as_str(), limit as i64], |r| {
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
                conn.prepare_cached("SELECT verdict, reason, revision, at, principal FROM put_verdicts WHERE user_id = ?1 ORDER BY id DESC LIMIT ?2")?
                    .query_map(params![user.as_str(), limit as i64], |r| {
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
        let user = user.clone();
        self.blocking(move |inner| {
            // The served ledger's journal files hold principals too: folded into `served` first,
            // so the pass scrubs them there.
            inner.fold_served()?;
            let mut report = futures::executor::block_on(crate::erase::erase(
                inner,
                &user,
                &inner.config.retention,
                inner.now(),
            ))?;
            // A download that began before the pass wrote its entry to the journal meanwhile.
            if inner.fold_served()? > 0 {
                let conn = inner.writer();
                report.ledger_rows_scrubbed += conn.execute(
                    "UPDATE served SET principal = ?2 WHERE user_id = ?1 AND principal <> ?2",
                    [user.as_str(), crate::erase::ERASED],
                )? as u64;
            }
            // Neither the database file nor a WAL frame may keep a page as it was before the
            // erasure. Blocked by a reader, the erasure stays committed and a retry (reporting
            // zeros) completes the checkpoint.
            inner.checkpoints.truncate()?;
            Ok(report)
        })
        .await
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

impl Inner {
    /// The chunk digests of a stored image, in image order.
    fn manifest(&self, digest: &Digest) -> Result<Vec<Digest>, StorageError> {
        let corrupt = || StorageError::Corrupt {
            object: format!("image {digest}"),
        };
        let manifest: Vec<u8> = self
            .with_reader(|conn| {
                conn.prepare_cached("SELECT manifest FROM images WHERE digest = ?1")?
                    .query_row([digest.as_bytes().as_slice()], |r| r.get(0))
                    .optional()
            })?
            .ok_or_else(corrupt)?;
        chunk::decode_manifest(&manifest).ok_or_else(corrupt)
    }

    /// Reads an image back and checks every chunk against its address.
    fn verify_image(&self, digest: &Digest) -> Result<(), PutError> {
        let (manifest, locs, paths) = self.with_reader(|conn| -> Result<_, PutError> {
            let (manifest, extents): (Vec<u8>, Vec<u8>) = conn
                .prepare_cached("SELECT manifest, extents FROM images WHERE digest = ?1")?
                .query_row([digest.as_bytes().as_slice()], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?
                .ok_or(PutError::NotFound)?;
            let corrupt = || StorageError::Corrupt {
                object: format!("image {digest}"),
            };
            let manifest = chunk::decode_manifest(&manifest).ok_or_else(corrupt)?;
            let extents = packs::decode_extents(&extents).ok_or_else(corrupt)?;
            let locs = packs::expand(&extents, self.chunk_size as u64);
            let paths = Inner::pack_paths(conn, extents.iter().map(|e| e.pack), &self.packs_dir)?;
            Ok((manifest, locs, paths))
        })?;
        if locs.len() != manifest.len() {
            return Err(StorageError::Corrupt {
                object: format!("image {digest}"),
            }
            .into());
        }
        let files = packs::open_packs(&paths).map_err(StorageError::from)?;
        packs::verify_chunks(&files, &locs, &manifest).map_err(|c| StorageError::Corrupt {
            object: format!("chunk {c}"),
        })?;
        Ok(())
    }

    fn reclaim(&self) -> Result<ReclaimReport, ReclaimError> {
        // A pass runs periodically: it keeps the `served` table at most one pass behind the
        // journal even when no one reads the ledger.
        if let Err(err) = self.fold_served() {
            tracing::warn!(error = %err, "folding the served-ledger journal failed; the next pass retries");
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

/// Where an image's chunks sit in the pack files, for the integrity check.
#[derive(Debug)]
struct PackLayout {
    locs: Vec<ChunkLoc>,
    /// The image's pack files that could be opened; a pack missing here is damage.
    files: HashMap<i64, std::fs::File>,
    /// Manifest positions whose chunk has no index row.
    unindexed: HashSet<usize>,
}

// The check runs on one blocking thread (see `check_integrity`), so each read is a plain call.
impl integrity::Inspect for Inner {
    type Layout = PackLayout;

    async fn dangling_pointers(&self) -> Result<Vec<UserId>, StorageError> {
        let users: Vec<String> = self.with_reader(|conn| {
            conn.prepare(
                "SELECT u.user_id FROM users u WHERE u.current_seq IS NOT NULL AND NOT EXISTS
                 (SELECT 1 FROM revisions r WHERE r.user_id = u.user_id AND r.seq = u.current_seq AND r.retained = 1)",
            )?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()
        })?;
        Ok(users.into_iter().map(token).collect::<Result<_, _>>()?)
    }

    async fn retained_images(&self) -> Result<Vec<Digest>, StorageError> {
        let digests: Vec<Vec<u8>> = self.with_reader(|conn| {
            conn.prepare("SELECT DISTINCT digest FROM revisions WHERE retained = 1")?
                .query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()
        })?;
        Ok(digests
            .into_iter()
            .map(digest_col)
            .collect::<Result<_, _>>()?)
    }

    async fn image(&self, digest: &Digest) -> Result<integrity::Record<PackLayout>, StorageError> {
        self.with_reader(|conn| {
            let row: Option<(i64, Vec<u8>, Vec<u8>)> = conn
                .prepare_cached("SELECT size, manifest, extents FROM images WHERE digest = ?1")?
                .query_row([digest.as_bytes().as_slice()], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()?;
            let Some((size, manifest, extents)) = row else {
                return Ok(integrity::Record::Missing);
            };
            let (Some(manifest), Some(extents)) = (
                chunk::decode_manifest(&manifest),
                packs::decode_extents(&extents),
            ) else {
                return Ok(integrity::Record::Malformed);
            };
            let locs = packs::expand(&extents, self.chunk_size as u64);
            if locs.len() != manifest.len() {
                return Ok(integrity::Record::Malformed);
            }
            let mut indexed =
                conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM chunks WHERE hash = ?1)")?;
            let mut unindexed = HashSet::new();
            for (i, c) in manifest.iter().enumerate() {
                if !indexed.query_row([c.as_bytes().as_slice()], |r| r.get::<_, bool>(0))? {
                    unindexed.insert(i);
                }
            }
            let mut named = conn.prepare_cached("SELECT name FROM packs WHERE id = ?1")?;
            let mut files = HashMap::new();
            for pack in extents.iter().map(|e| e.pack).collect::<HashSet<_>>() {
                let name: Option<String> = named.query_row([pack], |r| r.get(0)).optional()?;
                if let Some(file) = name.and_then(|n| std::fs::File::open(self.pack_path(&n)).ok())
                {
                    files.insert(pack, file);
                }
            }
            Ok(integrity::Record::Image(integrity::Image {
                size: size as u64,
                manifest,
                layout: PackLayout {
                    locs,
                    files,
                    unindexed,
                },
            }))
        })
    }

    async fn read(
        &self,
        image: &integrity::Image<PackLayout>,
        run: std::ops::Range<usize>,
    ) -> Result<Vec<integrity::Stored>, StorageError> {
        use std::os::unix::fs::FileExt as _;
        let layout = &image.layout;
        Ok(run
            .map(|i| {
                let loc = layout.locs[i];
                let file = layout
                    .files
                    .get(&loc.pack)
                    .filter(|_| !layout.unindexed.contains(&i));
                let mut buf = vec![0u8; loc.len as usize];
                match file.map(|f| f.read_exact_at(&mut buf, loc.offset)) {
                    Some(Ok(())) => integrity::Stored::Bytes(Bytes::from(buf)),
                    _ => integrity::Stored::Missing,
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests;
