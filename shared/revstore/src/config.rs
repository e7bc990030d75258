//! Store configuration shared by every backend.

use std::{
    sync::{
        Arc,
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

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            quota_bytes: DEFAULT_QUOTA_BYTES,
            chunk_size: DEFAULT_CHUNK_SIZE,
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

/// Switches tests use to make a backend misbehave in ways a real disk or network does.
#[doc(hidden)]
#[derive(Clone, Debug, Default)]
pub struct Faults(Arc<FaultFlags>);

#[derive(Debug, Default)]
struct FaultFlags {
    incomplete_listing: AtomicBool,
}

impl Faults {
    /// Makes the next object listings report that they did not complete.
    pub fn set_incomplete_listing(&self, on: bool) {
        self.0.incomplete_listing.store(on, Ordering::SeqCst);
    }

    pub(crate) fn incomplete_listing(&self) -> bool {
        self.0.incomplete_listing.load(Ordering::SeqCst)
    }
}
