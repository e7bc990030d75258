//! The download path's in-memory state: each user's current download plan, and the WAL
//! checkpoints moved off the writer.
//!
//! A download of a user's current image is the hot read of an origin: every device of every user
//! polls it. Reading its rows, re-opening its packs and committing a ledger entry of its own under
//! the writer lock made downloads queue behind one another (measured: ~6,000 downloads per second
//! of a 112 KiB image on two cores, the writer's SQL and locking a third of the CPU). Here the
//! rows are read once per revision, the open pack files are kept with them, a small image's bytes
//! are kept whole (an image is content-addressed, so they never change), and ledger entries go to
//! a spool (`spool.rs`).

use std::{
    collections::HashMap,
    sync::{
        Arc, Condvar, Mutex, MutexGuard, OnceLock,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use rusqlite::Connection;
use snug_files::sealed::{NoRoom, Reservation, Sealer};

use super::packs::{self, Extent, PackFiles};
use crate::{
    StorageError,
    store::{LeaseGuard, Leases},
    types::RevisionInfo,
};

/// Users whose current plan is kept. Each holds its pack files open and at most
/// [`INLINE_IMAGE`] bytes (twice that, and one memfd, when sealed), so the cache is bounded at
/// 64 MiB of bytes (128 MiB sealed) and a few hundred files; larger images are kept only sealed,
/// within the budget of the store's sealer for them (`StoreConfig::sealer`).
const CACHED_HEADS: usize = 256;

/// A large image kept sealed that has not been downloaded for this long gives its place in the
/// budget to another that does not fit (`Heads::make_room`). Long enough that two images taking
/// turns never evict each other on every download (each eviction costs the next keeper a copy of
/// its image), short enough that an image nobody fetches does not hold the budget for good.
pub(super) const LARGE_IDLE_MILLIS: i64 = 5 * 60 * 1000;

/// Images up to this size are kept whole in their plan after the first read.
pub(super) const INLINE_IMAGE: u64 = 256 << 10;

/// What serving one revision needs, read from its rows once.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) info: RevisionInfo,
    pub(super) extents: Vec<Extent>,
    pub(super) files: PackFiles,
    /// The whole image once read: images up to [`INLINE_IMAGE`], and larger ones sealed.
    bytes: OnceLock<Bytes>,
    /// Whether a download is gathering the whole of a large image to keep it.
    gathering: AtomicBool,
    /// When a download last began from this plan (Unix milliseconds, the store's clock).
    served_at: AtomicI64,
    /// Whether the plan is cached for later downloads (a user's current revision); bytes are
    /// kept only in such a plan, since no other download would find them.
    cached: bool,
}

impl Plan {
    pub(super) fn new(
        info: RevisionInfo,
        extents: Vec<Extent>,
        files: PackFiles,
        cached: bool,
    ) -> Self {
        Self {
            info,
            extents,
            files,
            bytes: OnceLock::new(),
            gathering: AtomicBool::new(false),
            served_at: AtomicI64::new(i64::MIN),
            cached,
        }
    }

    /// Notes that a download began from this plan at `at`.
    pub(super) fn note_served(&self, at: i64) {
        self.served_at.fetch_max(at, Ordering::Relaxed);
    }

    /// Whether this plan keeps a large image, sealed.
    fn keeps_large(&self) -> bool {
        self.info.size > INLINE_IMAGE && self.bytes.get().is_some()
    }

    /// The image's bytes, if they are kept in memory.
    pub(super) fn bytes(&self) -> Option<Bytes> {
        self.bytes.get().cloned()
    }

    /// Keeps `bytes`, the whole image, if it is small enough and the plan cached; sealed by
    /// `sealer` where it is enabled, because a gateway in this process sends sealed bytes without
    /// copying them.
    pub(super) fn keep(&self, bytes: &Bytes, sealer: &Sealer) {
        if self.cached && self.info.size <= INLINE_IMAGE && bytes.len() as u64 == self.info.size {
            let _ = self.bytes.get_or_init(|| sealer.seal(bytes.clone()));
        }
    }

    /// A gathering of this large image's bytes to keep it sealed, if the plan is cached, the image
    /// larger than [`INLINE_IMAGE`], not kept yet, no other download is gathering it, and
    /// `sealer`'s budget for large sealed images has room for it, or gets it from `make_room`
    /// when other images hold it. A large image is kept only sealed: in memory it saves a
    /// download nothing but the copies a gateway in this process skips with `sendfile`.
    pub(super) fn gather(
        &self,
        sealer: &Sealer,
        make_room: impl FnOnce() -> bool,
    ) -> Option<Gathering<'_>> {
        let size = usize::try_from(self.info.size).ok()?;
        if !self.cached
            || self.info.size <= INLINE_IMAGE
            || self.bytes.get().is_some()
            || self.gathering.swap(true, Ordering::AcqRel)
        {
            return None;
        }
        let reservation = match sealer.reserve(size) {
            Ok(reservation) => Some(reservation),
            Err(NoRoom::Taken) if make_room() => sealer.reserve(size).ok(),
            Err(_) => None,
        };
        match reservation {
            Some(reservation) => Some(Gathering {
                plan: self,
                reservation: Some(reservation),
                bytes: Vec::with_capacity(size),
            }),
            None => {
                self.gathering.store(false, Ordering::Release);
                None
            }
        }
    }

    /// The reads of the whole image, one task per download piece of whole chunks.
    pub(super) fn read_tasks(&self, chunk_size: usize) -> std::io::Result<Vec<packs::ReadTask>> {
        packs::read_tasks(&self.extents, &self.files, packs::piece_len(chunk_size))
    }
}

/// A download's copy of a large image's pieces, kept sealed in its plan once complete; dropped
/// before that (the download failed or was abandoned), it gives its budget claim back and lets
/// a later download gather.
pub(super) struct Gathering<'a> {
    plan: &'a Plan,
    reservation: Option<Reservation>,
    bytes: Vec<u8>,
}

impl Gathering<'_> {
    /// Adds the next piece.
    pub(super) fn push(&mut self, piece: &[u8]) {
        self.bytes.extend_from_slice(piece);
    }

    /// Keeps the gathered image sealed in its plan, if it is whole.
    pub(super) fn finish(mut self) {
        if self.bytes.len() as u64 != self.plan.info.size {
            return;
        }
        let bytes = std::mem::take(&mut self.bytes);
        if let Some(sealed) = self.reservation.take().and_then(|r| r.seal(bytes)) {
            let _ = self.plan.bytes.set(sealed);
        }
    }
}

impl Drop for Gathering<'_> {
    fn drop(&mut self) {
        self.plan.gathering.store(false, Ordering::Release);
    }
}

/// Each user's current-revision plan.
///
/// Consistency rests on the writer lock: a plan is only inserted by a download that read its rows
/// under the writer lock, and every change to what a plan describes (a commit that moves the
/// user's pointer, a reclamation pass) forgets plans under the writer lock before the change is
/// visible to anyone. A plan found here is therefore the user's current revision as of some
/// moment during the lookup. Reclamation clears the cache under [`Heads::lock`] before it checks
/// leases, and a hit takes its lease under the same lock, so a hit's lease is always seen by the
/// pass that could otherwise delete its bytes.
#[derive(Debug, Default)]
pub(super) struct Heads(Mutex<HashMap<String, Arc<Plan>>>);

impl Heads {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Plan>>> {
        // A poisoned map is still a map of whole plans: every mutation is one insert or remove.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The user's current plan with a lease on its image, if it is cached.
    pub(super) fn hit(&self, user: &str, leases: &Leases) -> Option<(Arc<Plan>, LeaseGuard)> {
        let heads = self.lock();
        let plan = heads.get(user)?.clone();
        let lease = leases.take(plan.info.digest);
        Some((plan, lease))
    }

    /// Caches `plan` as the user's current one. Call with the writer lock held, having read the
    /// plan under it.
    pub(super) fn insert(&self, user: &str, plan: Arc<Plan>) {
        let mut heads = self.lock();
        if heads.len() >= CACHED_HEADS && !heads.contains_key(user) {
            // Any victim will do: a miss costs one read of the rows.
            if let Some(victim) = heads.keys().next().cloned() {
                heads.remove(&victim);
            }
        }
        heads.insert(user.to_owned(), plan);
    }

    /// Forgets the user's plan. Call with the writer lock held, before the change commits.
    pub(super) fn forget(&self, user: &str) {
        self.lock().remove(user);
    }

    /// Forgets every plan, for a commit that moved chunks of images other than its own (a
    /// healed chunk). Call with the writer lock held, so no plan read before the move is cached
    /// after it.
    pub(super) fn forget_all(&self) {
        self.lock().clear();
    }

    /// Forgets the plan of the large image kept sealed that was downloaded least recently, if
    /// that was at least [`LARGE_IDLE_MILLIS`] before `now` and it is not `for_plan`'s own, so
    /// that `for_plan` may keep its image instead; whether one was forgotten. Its bytes, and its
    /// claim on the budget, go when the downloads still reading them end; its user's next
    /// download reads the rows again, like any miss.
    pub(super) fn make_room(&self, for_plan: &Plan, now: i64) -> bool {
        let forgotten = {
            let mut heads = self.lock();
            let coldest = heads
                .iter()
                .filter(|(_, plan)| !std::ptr::eq(&***plan, for_plan) && plan.keeps_large())
                .map(|(user, plan)| (plan.served_at.load(Ordering::Relaxed), user))
                .filter(|(served_at, _)| now.saturating_sub(*served_at) >= LARGE_IDLE_MILLIS)
                .min()
                .map(|(_, user)| user.clone());
            coldest.and_then(|user| heads.remove(&user))
        };
        // Dropped outside the lock: the last reference frees a large buffer.
        forgotten.is_some()
    }

    /// Forgets every plan. Reclamation calls this with the writer lock held, before it checks
    /// leases: a hit made before took its lease under this lock, so the check sees it, and no hit
    /// can follow until the writer lock is free.
    pub(super) fn clear(&self) {
        self.lock().clear();
    }
}

/// A WAL of more frames than this (4 KiB pages: 4 MiB) is caught up under the writer lock after
/// a checkpoint, so that it starts over (see [`Checkpoints`]).
const WAL_FRAMES_HIGH: i64 = 1024;

/// WAL checkpoints, run on a connection of their own instead of by the committing writer.
///
/// SQLite's automatic checkpoint runs inside the commit that crosses its threshold, on the
/// writer's connection and under its lock, and a checkpoint writes and fsyncs the database file:
/// one download in a few hundred waited for that fsync, and every download behind it too. Here
/// the writer's automatic checkpoint is off and a PASSIVE checkpoint runs beside it (WAL mode lets
/// a checkpoint and a writer proceed together).
///
/// SQLite starts the WAL over only when a write begins with every frame copied, and beside a busy
/// writer a checkpoint never quite gets there: frames arrive while it copies. Under a steady
/// stream of commits the WAL would grow without end. So once the WAL holds more than
/// [`WAL_FRAMES_HIGH`] frames, a second checkpoint copies what arrived during the first while
/// holding the writer lock; the first did the bulk of the copying, so the writer waits only for
/// the tail, and its next write starts the WAL over.
#[derive(Debug)]
pub(super) struct Checkpoints {
    db_path: std::path::PathBuf,
    writer: Arc<Mutex<Connection>>,
    state: Mutex<CheckpointState>,
    /// Signalled whenever `state.running` goes back to false.
    idle: Condvar,
}

#[derive(Debug, Default)]
struct CheckpointState {
    running: bool,
    conn: Option<Connection>,
}

impl Checkpoints {
    pub(super) fn new(db_path: std::path::PathBuf, writer: Arc<Mutex<Connection>>) -> Self {
        Self {
            db_path,
            writer,
            state: Mutex::new(CheckpointState::default()),
            idle: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, CheckpointState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a checkpoint on the blocking pool (or runs it here, outside a Tokio runtime) unless
    /// one is running; called after the commits that write many pages (a put, a ledger fold).
    pub(super) fn note_large_commit(self: &Arc<Self>) {
        {
            let mut state = self.lock();
            if state.running {
                return;
            }
            state.running = true;
        }
        let this = self.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || this.run());
            }
            Err(_) => this.run(),
        }
    }

    fn run(&self) {
        let conn = self.lock().conn.take();
        let conn = match conn {
            Some(conn) => Ok(conn),
            None => Connection::open(&self.db_path).and_then(|c| {
                c.busy_timeout(Duration::from_secs(1))?;
                Ok(c)
            }),
        };
        // The state lock is not held while the checkpoint runs.
        let conn = match conn {
            Ok(conn) => {
                // PASSIVE never waits for readers or the writer. A failure is only a WAL that
                // stays longer.
                let outcome = checkpoint(&conn).and_then(|(frames, _)| {
                    if frames > WAL_FRAMES_HIGH {
                        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
                        checkpoint(&conn)?;
                    }
                    Ok(())
                });
                if let Err(err) = outcome {
                    tracing::warn!(error = %err, "a WAL checkpoint of the store failed");
                }
                Some(conn)
            }
            Err(err) => {
                tracing::warn!(error = %err, "the store's checkpoint connection failed");
                None
            }
        };
        let mut state = self.lock();
        state.conn = conn;
        state.running = false;
        self.idle.notify_all();
    }

    /// Copies every WAL frame into the database file and truncates the WAL, so that no page lives
    /// on anywhere in the version it had before the last commit (an erasure's promise).
    ///
    /// A TRUNCATE checkpoint beside a running PASSIVE one is refused as busy, and the commit
    /// being made durable is usually what started that one; so this waits for it and keeps
    /// another from starting. The writer lock is taken only after that wait: the background
    /// checkpoint may itself need it. Readers still holding an older snapshot are waited for up
    /// to the writer's busy timeout; past that the caller gets a retryable error, never a
    /// success with the older page still in the file.
    pub(super) fn truncate(&self) -> Result<(), StorageError> {
        let mut state = self.lock();
        while state.running {
            state = self.idle.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state.running = true;
        drop(state);
        let outcome = {
            let conn = self.writer.lock().unwrap_or_else(|p| p.into_inner());
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            })
        };
        let mut state = self.lock();
        state.running = false;
        self.idle.notify_all();
        drop(state);
        match outcome? {
            0 => Ok(()),
            _ => Err(StorageError::unavailable(
                "a reader kept the WAL checkpoint from completing; retry",
            )),
        }
    }
}

/// A PASSIVE checkpoint: (frames in the WAL, frames copied to the database).
fn checkpoint(conn: &Connection) -> Result<(i64, i64), rusqlite::Error> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
    })
}
