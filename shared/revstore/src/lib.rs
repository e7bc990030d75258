//! Snug Hub's sync origin store: revisions of each user's one-file database, kept the Coven way.
//!
//! A user owns their data as one SQLite file (Snug Protocol Part II §8). When the hub is the
//! user's sync origin (§9.3), it keeps that file's revisions here: every put names exactly one
//! [`Precondition`] (must-not-exist for the first write, must-match the current [`Revision`]
//! otherwise), and an accepted put atomically moves the user's pointer to a new, opaque, strong
//! revision token. Each revision carries the SHA-256 [`Digest`] of its bytes so clients verify end
//! to end.
//!
//! # Main types
//!
//! - [`RevStore`]: the one trait, with backends [`MemStore`] (tests), [`SqliteStore`] (the
//!   embedded default: SQLite metadata plus pack files under a data directory) and `PgStore`
//!   (feature `postgres`, for several stateless replicas: everything in PostgreSQL, or metadata
//!   in PostgreSQL and the bytes as pack objects in an S3-compatible bucket,
//!   `PgStore::connect_with_objects` with a `Bucket`). [`AnyStore`] picks one at run
//!   time.
//! - [`PutRequest`], [`RestoreRequest`], [`PutOutcome`], [`RevisionInfo`], [`ImageDownload`].
//! - [`BaseImage`] (an image whole with its chunks' addresses, the base of a derived put),
//!   [`Held`] (what [`RevStore::put_held`] answers) and [`BaseCache`] (the images a process
//!   wrote last, kept as the bases of the delta pushes that follow them).
//! - [`UsageReport`], [`ErasureReport`].
//! - Errors, one enum per operation family, each with its `snug-reasons` reason (`reason()`): [`PutError`], [`ReadError`],
//!   [`ReclaimError`], [`OpenError`], [`StorageError`].
//! - [`StoreConfig`] with [`Retention`] and an injectable [`Clock`].
//!
//! # How a put is made durable
//!
//! Images are stored as content-addressed chunks (fixed size, one SQLite page by default) plus a
//! manifest, so revisions that differ in a few pages share the rest; the persistent backends keep
//! a manifest as the chunks it changes against the image that was current when it was committed
//! (`manifest.rs`), so a small edit costs a few manifest entries, not one per chunk. A put streams the bytes in,
//! enforcing the quota and hashing as they arrive; it records a durable publication record; it
//! creates the new objects create-once (different bytes at an occupied address are refused); it
//! reads them back and verifies every chunk against its address; and only then one transaction
//! compare-and-swaps the user's pointer, appends the history row and the ledger row, and clears
//! the publication record. A crash at any step loses no acknowledged revision and leaves nothing
//! torn; a retry of the same put is answered with the revision it already produced.
//!
//! # Decisions worth knowing
//!
//! - Revision tokens are `r<seq>-<16 hex>` (per-user sequence plus 64 random bits), opaque to
//!   callers and safe inside a quoted ETag. A retry of a landed write (same base, same bytes, or
//!   the same [`IdempotencyKey`]) is answered with the revision it produced (`replayed: true`).
//! - [`PutError::Conflict`] (must-not-exist while an image exists, or a revision this user never
//!   had, including another user's) and [`PutError::Stale`] (an earlier revision of this user) are
//!   distinct; both report the current revision. [`PutError::PreconditionRequired`] exists for
//!   service adapters (see [`Precondition::required`]); the store's own API cannot omit one.
//! - Chunks are content-addressed (SHA-256) and deduplicated across revisions and users. The
//!   embedded store packs the new chunks of one put into one pack file (one fsync per put) and
//!   keeps, per image, both the manifest and its coalesced extents, so a download reads a few
//!   ranges. PostgreSQL keeps chunks as `bytea` rows, or, with an object store, packs them like
//!   the embedded store into pack objects of up to [`PACK_BYTES`] (`objects.rs`, `pg/packs.rs`:
//!   named in the publication record before they are written, written create-once, read back and
//!   verified; downloads check every chunk). The pack layout is one module (`pack.rs`) for both.
//! - Reclamation keeps the newest [`Retention::keep_newest`] revisions and anything superseded
//!   less than [`Retention::grace`] ago; it never takes a current image, the base or image of a
//!   put in flight, or a leased download, and it refuses to delete anything when the listing of
//!   stored objects is incomplete or holds an object it cannot identify. Every deletion is
//!   journaled ([`RevStore::journal`]). A put that does not land (refused at its commit, its
//!   body broken off) marks its publication record abandoned, and what it staged (its pack, its
//!   chunk rows) is reclaimed at once (`reclaim::discard`); only a crash's record waits for
//!   [`Retention::orphan_after`] and then goes with its objects. Each unfinished put holds its
//!   declared size against the user's limit on staged bytes ([`StoreConfig::staged_limit_bytes`];
//!   beyond it [`PutError::PutsInFlight`]). Unreferenced chunks go at once in the embedded store
//!   (commits re-check their chunks when a sweep ran meanwhile) and after `orphan_after` in
//!   PostgreSQL (where a streaming put records the rows it relies on in `streamed_chunks`).
//! - A user can be erased ([`RevStore::erase`], issue 20): one reclamation pass scoped to the
//!   user that ignores retention (`erase.rs`): their publication records with what they staged,
//!   every history row, the images and chunks no other user's revision names, pack files or
//!   objects left empty (and, in packs that also hold other users' chunks, the erased chunks'
//!   ranges overwritten with zeros), the principals of their ledger rows (replaced by `erased`),
//!   each deletion journaled first. The user record stays, with no image. "Gone" per backend: the
//!   memory store forgets; the embedded store runs SQLite with `secure_delete=ON` (freed cells
//!   and pages zeroed, always, since ordinary page splits free pages too) and checkpoints the WAL
//!   with TRUNCATE after an erasure; PostgreSQL deletes rows, whose dead tuples the server
//!   reclaims at its next VACUUM (run `VACUUM` on the store's schema where the physical pages
//!   must not keep them either); a bucket must not keep object versions. A store created before
//!   `secure_delete` was on may still hold stale bytes in pages freed back then: `VACUUM` it once.
//! - [`RevStore::usage`] reports per user the current image's size and the bytes only the earlier
//!   retained revisions hold ([`UsageReport`] defines them); a put may carry the user's own quota
//!   ([`PutRequest::quota_bytes`]), which replaces [`StoreConfig::quota_bytes`] in the one check.
//! - Time comes from a [`Clock`], so retention is testable without sleeping.
//!
//! # What this crate deliberately does not do
//!
//! - Authenticate or authorize: the caller says which user and principal; the store scopes every
//!   lookup by user so another user's revisions are indistinguishable from missing ones.
//! - Look inside images beyond their header: it stores bytes. The one thing it reads is the
//!   storage version (the SQLite header's `user_version`, [`RevisionInfo::storage_version`]),
//!   recorded as the bytes stream in and never judged; checking the SQLite magic, whether the
//!   version is one the hub understands, or the SNUGENC1 container is the service's job.
//! - Speak gRPC or HTTP, or open sockets other than the PostgreSQL client's.
//! - Merge divergent histories: a conflict is reported with the current revision, and the client
//!   decides (Snug's conflict policy v1).
//! - Compact pack files whose chunks are partly dead: a pack is deleted when none of its chunks is
//!   live, not before (an erasure zeroes its erased chunks' ranges in place instead).
//!
//! # Design notes
//!
//! (Moved from ARCHITECTURE.md, which stays a map; the map's paragraph opens it.)
//!
//! The sync origin's storage (§9.3): per user, the current revision or none, and a history of
//! revisions, each an opaque strong token (`r<seq>-<16 hex>`) carrying the SHA-256 of its bytes.
//! One trait, `RevStore` (put, restore, head, head_revision, get, get_revision, list_revisions, the
//! served and put ledgers, reclaim, journal, usage, erase, health, stats, check_integrity), with three backends: `MemStore`
//! (tests), `SqliteStore` (the embedded default: SQLite metadata plus pack files under one
//! directory) and `PgStore` (feature `postgres`: everything in PostgreSQL, chunks as `bytea`, a
//! deadpool of tokio-postgres connections, TLS with libpq's `sslmode`/`sslrootcert` over rustls:
//! `snug-pg`, shared with the users directory); `AnyStore` picks one at run time.
//! One conformance suite (`tests/conformance`) runs against every backend, plus a concurrency test
//! (16 writers × 200 puts on one user: one linear history, no acknowledged write lost) and a crash
//! test (a child SIGKILLed at random points during puts, then the store reopened and checked).
//! A put follows Coven's publication order: stream the bytes in (quota and SHA-256 checked as they
//! arrive; an over-quota put is refused at the byte that crosses the quota), write a durable
//! publication record, create the new objects create-once (different bytes at an occupied address
//! are refused as `IMAGE_CONFLICT`), read them back and verify every chunk against its address, then
//! one transaction compare-and-swaps the user's pointer, appends the history and ledger rows and
//! clears the publication record.
//! The order of a put and of a restore is written once, as one driver (`protocol.rs`) over the
//! few storage primitives each backend implements (begin with a publication record, a chunk sink,
//! publish create-once, read back, commit, abandon); the compare-and-swap decision it takes inside
//! each backend's commit is one pure function (`cas.rs`), so the backends agree on which refusal a
//! caller gets; likewise which revisions a reclamation pass releases and which publication records
//! are orphans is one rule (`retention.rs`) each backend applies to the facts it loads; and the
//! integrity check is one driver (`integrity.rs`) over each backend's raw reads, so every backend
//! names a defect with the same word.
//! Images are content-addressed chunks (4 KiB, one SQLite page, by default) plus a manifest, so
//! revisions that differ in a few pages share the rest; the embedded store writes the new chunks of
//! one put into one pack file (`packs/<sha256>.pack`, one fsync per put) and keeps each image's
//! coalesced extents, so a download reads a few ranges.
//! Downloads of a user's current image, the origin's hot read, are served from a cached plan
//! (`sqlite/serve.rs`: the revision, its extents and its open pack files, read once under the writer
//! lock; a small image's bytes kept whole, since content-addressed bytes never change, and sealed
//! (by the [`StoreConfig::sealer`] the composition root hands the store and the gateway, so the
//! gateway in the process sends them with `sendfile`); a large image, only sealed and within the
//! sealer's budget for that: the first whole download gathers its
//! pieces after handing each on, and seals them when the last is read; an abandoned or failed
//! download gives the claim back; an image that does not fit takes the place of the one downloaded
//! least recently if that was five minutes ago or more, by forgetting that one's plan; only the
//! cached plan of a user's current revision keeps bytes, a download of a named revision reads its
//! packs). A commit that
//! moves the pointer forgets the plan under the writer lock before it is visible, and reclamation
//! clears the cache before it checks leases while a cache hit takes its lease under the cache's lock,
//! so a hit is always the current revision as of its lookup and its bytes survive any pass. Each
//! download's served-ledger entry is written before its first byte to the ledger's spool
//! (`sqlite/spool.rs`: `served/<generation>.spool`, checksummed records, durable as a
//! `synchronous=NORMAL` commit is), by one writer on the blocking pool that writes everything queued
//! meanwhile in one `write(2)` while the downloads wait (a file write can wait on the file system's
//! own journal; an async worker must not); an entry that cannot be written fails its download, so
//! nothing is served unrecorded. Folds move the spool into the `served` table in bulk (every 4,096
//! downloads in the background, and on every read of the ledger, reclamation pass, explicit
//! checkpoint and open): each file's entries and its generation number go in one durable transaction
//! before the file is deleted, so a crash at any point neither loses an entry nor folds one twice,
//! and a torn last record is ignored. (Committing each batch of entries to SQLite instead made SQLite
//! a tenth of the hub's CPU under 32 concurrent small GETs, with WAL writes and checkpoints to
//! match.) The writer's automatic WAL checkpoint is off; checkpoints run on a connection of their own
//! beside it after large commits (puts, folds), catching up under the writer lock only once the WAL
//! passes 4 MiB, since SQLite restarts a WAL only when a write begins with every frame copied.
//! Every table declares one class in its migration — `record` (never rebuilt), `ledger`
//! (append-only audit) or `bookkeeping` (work in progress) — and a test checks the declarations
//! against the tables that exist; migrations are forward-only and checksummed.
//! Each revision records, beside its SHA-256, size, principal and time, the image's storage version
//! (`RevisionInfo::storage_version`: the SQLite header's `user_version`, read from the first 100
//! bytes as they stream in; `None` for anything that is not a SQLite header), so a client can decide
//! before downloading; the store records it and never judges it (a v7 image is stored as 7), and a
//! restore carries its source's. Migration 2 added the column and fills it for the revisions already
//! stored: PostgreSQL in its SQL, from each image's first chunk checked with `sha256()` against its
//! address; the embedded store in code, in the same transaction, from the pack files (one read and
//! one hash of a chunk per image). A revision whose bytes were already reclaimed, or whose header
//! fails its address check, stays `None` (unknown); a migration test starts from the schema-1
//! database and checks both.
//! **Architecture Invariant:** a put names exactly one `Precondition` (must-not-exist or
//! must-match); a mismatch (`Conflict`, reported with the current revision, or none) and a stale
//! base (`Stale`: an earlier revision of this user, even one whose bytes were reclaimed) are distinct
//! errors, and `PreconditionRequired` exists only for adapters whose wire format can omit one.
//! **Architecture Invariant:** a crash at any point loses no acknowledged revision and leaves nothing
//! torn; a retry of a landed put (same base and bytes, or the same idempotency key) is answered with
//! the revision it produced.
//! **Architecture Invariant:** uniform denial — an unknown user, a reclaimed revision and another
//! user's revision are the same `NotFound` with the same message.
//! **Architecture Invariant:** first contact (`provision_user`) creates the user record only, never
//! an image.
//! Retention keeps each user's newest N revisions and anything superseded less than the grace period
//! ago, and never reclaims a current image, the base or image of a put in flight, a leased download,
//! or anything at all when the listing of stored objects is incomplete or holds an object it cannot
//! identify; every deletion is journaled; a failed put's record and what it staged go as soon as it
//! fails, and a crashed put's once it is older than `orphan_after`.
//! Deliberately not here: authentication, looking inside images beyond that header field, gRPC,
//! merging divergent histories, compacting partly dead packs.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod any;
mod base_cache;
mod cas;
mod chunk;
mod clock;
mod config;
mod erase;
mod error;
mod integrity;
mod manifest;
mod mem;
mod migrate;
#[cfg(feature = "postgres")]
mod objects;
mod pack;
#[cfg(feature = "postgres")]
mod pg;
mod protocol;
mod reclaim;
mod retention;
mod revisions;
mod sqlite;
mod store;
mod types;
mod write_health;

pub use any::AnyStore;
pub use base_cache::BaseCache;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{
    DEFAULT_CHUNK_SIZE, DEFAULT_QUOTA_BYTES, FaultPoint, Faults, Retention, StoreConfig,
};
pub use error::{
    InvalidToken, OpenError, ProvisionError, PutError, ReadError, ReclaimError, StorageError,
};
pub use mem::MemStore;
#[cfg(feature = "postgres")]
pub use objects::{Bucket, Created, Listed, ObjectError, ObjectStorage, PACK_BYTES};
#[cfg(feature = "postgres")]
pub use pg::{PgConfig, PgStore, PgTlsError, listen::channel as revisions_channel};
pub use revisions::{AllChanges, Change, Revisions, Subscription};
pub use sqlite::SqliteStore;
pub use store::{BaseImage, Held, ImageBody, ImageDownload, RevStore};
pub use types::{
    Digest, ErasureReport, IdempotencyKey, IntegrityProblem, IntegrityReport, JournalEntry,
    Precondition, Principal, PutLedgerEntry, PutOutcome, PutRequest, ReclaimReport, ReclaimedKind,
    RestoreRequest, Revision, RevisionInfo, SQLITE_HEADER_LEN, ServedEntry, StorageStats, StoreId,
    Timestamp, UsageReport, UserId, Verdict, storage_version,
};
