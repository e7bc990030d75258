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
//!   (feature `postgres`: everything in PostgreSQL, for several stateless replicas). [`AnyStore`]
//!   picks one at run time.
//! - [`PutRequest`], [`RestoreRequest`], [`PutOutcome`], [`RevisionInfo`], [`ImageDownload`].
//! - Errors, one enum per operation family, each with `reason()`: [`PutError`], [`ReadError`],
//!   [`ReclaimError`], [`OpenError`], [`StorageError`].
//! - [`StoreConfig`] with [`Retention`] and an injectable [`Clock`].
//!
//! # How a put is made durable
//!
//! Images are stored as content-addressed chunks (fixed size, one SQLite page by default) plus a
//! manifest, so revisions that differ in a few pages share the rest. A put streams the bytes in,
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
//!   ranges. PostgreSQL keeps chunks as `bytea` rows.
//! - Reclamation keeps the newest [`Retention::keep_newest`] revisions and anything superseded
//!   less than [`Retention::grace`] ago; it never takes a current image, the base or image of a
//!   put in flight, or a leased download, and it refuses to delete anything when the listing of
//!   stored objects is incomplete or holds an object it cannot identify. Every deletion is
//!   journaled ([`RevStore::journal`]). Publication records older than
//!   [`Retention::orphan_after`] are orphans and go with their objects. Unreferenced chunks go at
//!   once in the embedded store (commits re-check their chunks when a sweep ran meanwhile) and
//!   after `orphan_after` in PostgreSQL (where they cannot be told from a streaming put's).
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
//!   live, not before.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod any;
mod cas;
mod chunk;
mod clock;
mod config;
mod error;
mod mem;
mod migrate;
#[cfg(feature = "postgres")]
mod pg;
mod sqlite;
mod store;
mod types;

pub use any::AnyStore;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{DEFAULT_CHUNK_SIZE, DEFAULT_QUOTA_BYTES, Faults, Retention, StoreConfig};
pub use error::{InvalidToken, OpenError, PutError, ReadError, ReclaimError, StorageError, reason};
pub use mem::MemStore;
#[cfg(feature = "postgres")]
pub use pg::{PgConfig, PgStore};
pub use sqlite::SqliteStore;
pub use store::{ImageBody, ImageDownload, RevStore};
pub use types::{
    Digest, IdempotencyKey, IntegrityProblem, IntegrityReport, JournalEntry, Precondition,
    Principal, PutLedgerEntry, PutOutcome, PutRequest, ReclaimReport, ReclaimedKind,
    RestoreRequest, Revision, RevisionInfo, SQLITE_HEADER_LEN, ServedEntry, StorageStats,
    Timestamp, UserId, Verdict, storage_version,
};
