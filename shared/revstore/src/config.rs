//! Store configuration shared by every backend.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use snug_files::sealed::Sealer;

use crate::clock::{Clock, SystemClock};

/// `MAX_USERDB_BYTES` of the Snug spec (§8): 64 MiB.
pub const DEFAULT_QUOTA_BYTES: u64 = 67_108_864;

/// Default chunk size: one SQLite page at the reference's default page size, so a changed page
/// changes exactly one chunk and every other chunk of the next revision deduplicates.
pub const DEFAULT_CHUNK_SIZE: u32 = 4096;

/// Settings every backend takes.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Per-user quota on one image, in bytes; an image of exactly this size is accepted.
    pub quota_bytes: u64,
    /// Chunk size for new stores. An existing store keeps the size it was created with, so the
    /// same bytes always chunk the same way and content addresses stay stable.
    pub chunk_size: u32,
    /// The most bytes one user's unfinished puts may hold at once (each counts its declared size,
    /// or the quota when undeclared; a failed put counts until its bytes are reclaimed, a crashed
    /// one until its record is an orphan); `None`: four times the quota. A user with nothing
    /// staged may always start one put.
    pub staged_limit_bytes: Option<u64>,
    /// What reclamation keeps.
    pub retention: Retention,
    /// How long a download lease protects its image when the reader vanishes without releasing it
    /// (PostgreSQL, where replicas share leases through the database).
    pub lease_ttl: Duration,
    /// The time source.
    pub clock: Arc<dyn Clock>,
    /// Where images kept in memory for downloads are sealed, so that a gateway in this process
    /// sends them with `sendfile` (`snug_files::sealed`), and the budget for large ones. Only the
    /// SQLite backend keeps images in memory; disabled by default, and where the composition root
    /// runs no gateway beside the store.
    pub sealer: Sealer,
    /// Fault injection for tests; inert unless a test arms it.
    #[doc(hidden)]
    pub faults: Faults,
}

impl StoreConfig {
    /// [`StoreConfig::staged_limit_bytes`], with its default applied.
    pub fn staged_limit(&self) -> u64 {
        self.staged_limit_bytes
            .unwrap_or_else(|| self.quota_bytes.saturating_mul(4))
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            quota_bytes: DEFAULT_QUOTA_BYTES,
            chunk_size: DEFAULT_CHUNK_SIZE,
            staged_limit_bytes: None,
            retention: Retention::default(),
            lease_ttl: Duration::from_secs(15 * 60),
            clock: Arc::new(SystemClock),
            sealer: Sealer::disabled(),
            faults: Faults::default(),
        }
    }
}

/// The retention policy of reclamation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retention {
    /// The newest N revisions of each user are always kept (the current one among them).
    pub keep_newest: usize,
    /// A revision is kept for this long after it was superseded.
    pub grace: Duration,
    /// A publication record (a put in flight) counts as an orphan this long after its put
    /// started; its objects are then reclaimed and a put still running is refused at commit.
    pub orphan_after: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        // Five mirrors the spec's VERSIONS_RETAINED for app versions; a day lets a device that
        // downloaded yesterday's revision still fetch it.
        Self {
            keep_newest: 5,
            grace: Duration::from_secs(24 * 60 * 60),
            orphan_after: Duration::from_secs(24 * 60 * 60),
        }
    }
}

/// Switches tests use to make a backend misbehave in ways a real disk or network does, and to
/// run code of their own at a [`FaultPoint`] of the protocol, where a race would otherwise need luck.
#[doc(hidden)]
#[derive(Clone, Debug, Default)]
pub struct Faults(Arc<FaultFlags>);

/// A point in the protocol drivers ([`crate::protocol`], [`crate::reclaim`]) where a test may
/// run a hook ([`Faults::once`]).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    /// A put or restore whose objects are durable and read back, before its commit transaction:
    /// what it staged is protected by its publication record alone.
    BeforeCommit,
    /// A reclamation pass that has committed its decisions, before it deletes the objects they
    /// name: the pass must still exclude every put that could reuse one of them.
    BeforeObjectDeletion,
}

type Hook = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct FaultFlags {
    incomplete_listing: AtomicBool,
    failing_wipes: std::sync::atomic::AtomicU32,
    hooks: Mutex<HashMap<FaultPoint, Hook>>,
}

impl std::fmt::Debug for FaultFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultFlags")
            .field("incomplete_listing", &self.incomplete_listing)
            .finish_non_exhaustive()
    }
}

impl Faults {
    /// Makes the next object listings report that they did not complete.
    pub fn set_incomplete_listing(&self, on: bool) {
        self.0.incomplete_listing.store(on, Ordering::SeqCst);
    }

    pub(crate) fn incomplete_listing(&self) -> bool {
        self.0.incomplete_listing.load(Ordering::SeqCst)
    }

    /// Makes the next `n` wipes of an object's erased ranges fail, as a pack that cannot be
    /// written or an object store that refuses would.
    pub fn fail_wipes(&self, n: u32) {
        self.0.failing_wipes.store(n, Ordering::SeqCst);
    }

    /// Whether this wipe is one of those made to fail (counting it).
    pub(crate) fn wipe_fails(&self) -> bool {
        self.0
            .failing_wipes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Runs `hook` the next time a driver reaches `point`, on the driver's thread, which waits
    /// for it (it may block: a driver is at this point with whatever it holds there held).
    pub fn once(&self, point: FaultPoint, hook: impl FnOnce() + Send + 'static) {
        self.hooks().insert(point, Box::new(hook));
    }

    /// Called by the drivers at `point`.
    pub(crate) fn reached(&self, point: FaultPoint) {
        // Taken out before it runs: the hook may arm another, or reach a point itself.
        let hook = self.hooks().remove(&point);
        if let Some(hook) = hook {
            hook();
        }
    }

    fn hooks(&self) -> std::sync::MutexGuard<'_, HashMap<FaultPoint, Hook>> {
        self.0
            .hooks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
