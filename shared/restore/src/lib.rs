//! Device bootstrap and restore from a sync origin (issue #8), the Coven way: a device that joins
//! or restores installs one verified revision of the user's file instead of replaying anything.
//!
//! The origin is one trait ([`Origin`]: describe a revision, stream its bytes, push a new one
//! with compare-and-swap) with two implementations here, so any program syncs a file as the
//! `snug` CLI does: [`HubOrigin`], a hub's `/userdb` over HTTP (the default `hub` feature, the
//! crate's only network code; no gRPC), and [`DirOrigin`], a personal origin in a directory.
//! Another hub implements the trait over whatever it talks.
//!
//! The pipeline, each step refusing with a typed [`RestoreError`] and a stable
//! [`reason`](RestoreError::reason):
//!
//! 1. [`prepare`]: select the revision (current, or a named one from history) and read what the
//!    origin records about it; refuse a storage version newer than this build
//!    (`SCHEMA_TOO_NEW`) or a size over the cap **before downloading anything**; check the
//!    destination (its directory exists, it is not a directory, it is a plain Snug user database
//!    if it exists); never clobber: a destination whose push-gate hash differs from its record at
//!    this origin (or that never synced with it) has changes the origin lacks and is refused
//!    (`DIVERGED`), unless `force` (its bytes are then kept beside it first) or `keep_both` (the
//!    revision is installed beside it instead).
//! 2. [`Prepared::download`]: stream into a temporary file in the destination's directory,
//!    capped at the declared length (itself within [`snug_schema::MAX_USERDB_BYTES`]), then
//!    verify the length and the recorded SHA-256.
//! 3. [`Downloaded::install`]: check the header's storage version, open defensively
//!    (`quick_check`, hostile schemas refused), migrate and heal, carry the destination's local
//!    secrets in (the origin never has them), re-check that the destination and its sidecar are
//!    exactly as prepared (`DESTINATION_CHANGED`), replace atomically (fsync, rename, fsync the
//!    directory) and write the sidecar binding the installed file to its revision, with the hash
//!    the push gate will compute for it, so an untouched pulled file is never pushed back.
//!
//! Any failure removes the temporary file and leaves the destination and its sidecar
//! byte-identical. [`restore`] runs the three steps in one call.
//!
//! The sidecar is [`push_state`] (`<file>.sync.json`): per origin, by the origin's identity
//! ([`OriginId`], issue 35), the revision a file last synced as there and the push gate's hash of
//! it, beside the file and never in it; a client holds its [`SyncLock`](push_state::SyncLock)
//! while it reads and writes the two. What a push does is one pure decision ([`decide::push`])
//! over the file, its record at the origin and the origin's head as the origin confirmed it in
//! the same run, so no program that syncs a file says "unchanged" from the sidecar alone.
//! Nothing of the user's is replaced without a copy ([`keep`]).
//!
//! What this crate deliberately does not do: talk to a network outside [`HubOrigin`], merge two
//! histories (a divergence is surfaced, and `force` is the explicit last-writer-wins), talk to
//! the user (the client's command logic words the answers), or create the destination's
//! directory.
//!
//! # Design notes
//!
//! (Moved from ARCHITECTURE.md, which stays a map; the map's paragraph opens it.)
//!
//! Device bootstrap and restore from a sync origin (issue #8), Coven's snapshot-install discipline
//! where the snapshot is one revision of the user's file: a library other hubs call, with no gRPC
//! and HTTP only in the hub origin (tidy). The origin is one trait, blocking:
//! `Origin::describe(&Selector) -> SnapshotInfo` (revision, SHA-256, size, storage version if known;
//! `Selector` is `Current` or `Revision(token)`), `Origin::download(&SnapshotInfo, &mut dyn Write)`
//! and `Origin::push(bytes, base) -> Pushed` (`Accepted` or `Conflict`).
//! `HubOrigin` (`origin/hub.rs`: `HEAD`, then `GET /userdb/revisions/{rev}`; `PUT` with `If-Match`)
//! and `DirOrigin` (`origin/dir.rs`) implement it.
//! Three single-use steps, each consuming the last (`prepare` → `Prepared::download` →
//! `Downloaded::install`; `restore` runs all three), every refusal a typed `RestoreError` with a
//! stable `reason()`:
//! 1. `prepare` checks the destination (its directory exists; not a directory; if present a Snug
//!    user database that opens — else `DESTINATION_*`, `PROTECTED` or the open error's reason; a
//!    protected one opens with the secret given to `prepare_unlocking` and the install reseals the
//!    new database in its container; a
//!    missing `user.snug` stands for an unadopted `user.sqlite` beside it, read and never written),
//!    describes the revision, refuses `SCHEMA_TOO_NEW` and `USERDB_TOO_LARGE` before any download,
//!    answers up to date when the destination's record at this origin already names the revision,
//!    and refuses `DIVERGED` when the destination's push-gate hash differs from that record's and
//!    from the revision's SHA-256, unless `force` or `keep_both`.
//! 2. `download` streams into a `TempSibling` in the destination's directory, refusing any byte past
//!    the declared size, then checks the size (`SIZE_MISMATCH`) and SHA-256 (`DIGEST_MISMATCH`); a
//!    progress callback sees every byte that lands.
//! 3. `install` checks the header's `user_version` (an origin that did not declare one is checked
//!    here, before anything opens the bytes), imports the image as a pull from the user's own origin
//!    (snug-schema's `import` with `trusted_origin`: defensive open, `quick_check`, hostile schemas
//!    refused, migrate and heal, grants reconciled against the local copy, endpoint re-confirmation
//!    re-armed), carries every local `snug_secrets` row in (local wins), writes the result and the new
//!    sidecar to temp files, re-checks the destination and its sidecar against what `prepare` saw
//!    (size, mtime, inode, SHA-256; a file that appeared where there was none), then replaces the
//!    destination (rename over an existing file; a hard link, which cannot clobber, where there was
//!    none), fsyncs the directory, and renames the sidecar into place last.
//!
//! The push gate lives here too (`push_image`, `content_hash`), so `snug sync push` and the pipeline
//! compute one hash: the SHA-256 of the default export with the SQLite header's history counters
//! (change counter, schema cookie, version-valid-for) set to 1, so the hash depends on content only —
//! a credential refreshed on the device, or a re-export, no longer looks like an unpushed change.
//! **Architecture Invariant:** every failure before the final rename leaves the destination and its
//! sidecar byte-identical and no temporary file behind (each step's temp file removes itself on
//! drop); the tests inject each failure through a fake origin and compare the whole directory.
//! **Architecture Invariant:** the sidecar is renamed after the file, so a crash between the two
//! leaves the new file under the old push state (a refusal on the next sync), never the old file
//! under the new state (which a push would send over the origin).
//! **Architecture Invariant:** nothing is downloaded for a revision the origin declares newer than
//! `STORAGE_VERSION`, or for a destination with unpushed changes without `force`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod decide;
mod error;
mod gate;
mod install;
pub mod keep;
mod lock;
mod origin;
pub mod push_state;

pub use error::{GateError, RestoreError};
pub use gate::{PushImage, canonical_export, content_hash, push_image};
pub use install::{
    Downloaded, Installed, Options, Plan, Prepared, Progress, Restored, Unlock, UpToDate, prepare,
    prepare_unlocking, refuse_in_use, restore,
};
#[cfg(feature = "hub")]
pub use origin::HubOrigin;
pub use origin::{
    AddressKind, DirOrigin, LocalCopy, Origin, OriginError, OriginId, Pushed, Selector,
    SnapshotInfo, SyncedBase, Traffic, delta_page_size, header_storage_version,
};
