//! Device bootstrap and restore from a sync origin (issue #8), the Coven way: a device that joins
//! or restores installs one verified revision of the user's file instead of replaying anything.
//!
//! The origin is a trait the caller implements ([`Origin`]: describe a revision, then stream its
//! bytes); this crate has no sockets, no HTTP and no gRPC. The CLI implements it for a hub over
//! HTTP and for a directory origin; another hub implements it over whatever it talks.
//!
//! The pipeline, each step refusing with a typed [`RestoreError`] and a stable
//! [`reason`](RestoreError::reason):
//!
//! 1. [`prepare`]: select the revision (current, or a named one from history) and read what the
//!    origin records about it; refuse a storage version newer than this build
//!    (`SCHEMA_TOO_NEW`) or a size over the cap **before downloading anything**; check the
//!    destination (its directory exists, it is not a directory, it is a plain Snug user database
//!    if it exists); never clobber: a destination whose push-gate hash differs from its sidecar's
//!    last pushed hash has unpushed changes and is refused (`DIVERGED`) unless `force`.
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
//! What this crate deliberately does not do: talk to a network, merge two histories (a
//! divergence is surfaced, and `force` is the explicit last-writer-wins), push, or create the
//! destination's directory.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod gate;
mod install;
mod origin;

pub use error::{GateError, RestoreError};
pub use gate::{PushImage, content_hash, push_image};
pub use install::{
    Downloaded, Installed, Options, Plan, Prepared, Progress, Restored, UpToDate, prepare, restore,
};
pub use origin::{Origin, OriginError, Selector, SnapshotInfo, header_storage_version};
