//! `snug.restore`: the codes of the install pipeline and the sync client (`snug-restore`, `snug sync`); no `ErrorInfo` carries them, the CLI's JSON `code` does.

use crate::{CliExit, Domain, Exit, Reason};

pub use crate::{
    cli::{ENTROPY_UNAVAILABLE, IO},
    container::LOCKED,
    gateway::RATE_LIMITED,
    schema::{PROTECTED, SCHEMA_TOO_NEW},
};

const fn restore(name: &'static str, exit: Exit, summary: &'static str) -> Reason {
    Reason {
        name,
        grpc: None,
        http: None,
        exit: CliExit::Always(exit),
        summary,
    }
}

/// A revision token that cannot be one (not an entity-tag, or absurdly long).
pub const INVALID_REVISION: Reason = restore(
    "INVALID_REVISION",
    Exit::Usage,
    "a revision token that cannot be one",
);
/// The revision is larger than a user database may be.
pub const USERDB_TOO_LARGE: Reason = restore(
    "USERDB_TOO_LARGE",
    Exit::Other,
    "the revision is larger than a user database may be",
);
/// The destination's directory does not exist.
pub const DESTINATION_NO_DIRECTORY: Reason = restore(
    "DESTINATION_NO_DIRECTORY",
    Exit::Usage,
    "the destination's directory does not exist",
);
/// The destination is a directory.
pub const DESTINATION_IS_DIRECTORY: Reason = restore(
    "DESTINATION_IS_DIRECTORY",
    Exit::Usage,
    "the destination is a directory",
);
/// A bootstrap's destination exists (pull updates a file).
pub const DESTINATION_EXISTS: Reason = restore(
    "DESTINATION_EXISTS",
    Exit::Other,
    "a bootstrap's destination exists",
);
/// The destination is not a Snug user database.
pub const DESTINATION_NOT_SNUG: Reason = restore(
    "DESTINATION_NOT_SNUG",
    Exit::Corrupt,
    "the destination is not a Snug user database",
);
/// The destination is the backup beside an adopted `user.snug` (§10).
pub const LEGACY_BACKUP: Reason = restore(
    "LEGACY_BACKUP",
    Exit::Usage,
    "the legacy backup beside an adopted user.snug, which has no push state",
);
/// The origin and the local file both changed since the last sync; nothing was overwritten.
pub const DIVERGED: Reason = restore(
    "DIVERGED",
    Exit::Diverged,
    "the origin and the local file both changed since the last sync",
);
/// The download's length is not the revision's.
pub const SIZE_MISMATCH: Reason = restore(
    "SIZE_MISMATCH",
    Exit::Corrupt,
    "the download's length is not the revision's",
);
/// The download's SHA-256 is not the revision's.
pub const DIGEST_MISMATCH: Reason = restore(
    "DIGEST_MISMATCH",
    Exit::Corrupt,
    "the download's SHA-256 is not the revision's",
);
/// The installed database could not be resealed in its container.
pub const RESEAL_FAILED: Reason = restore(
    "RESEAL_FAILED",
    Exit::Other,
    "the installed database could not be resealed in its container",
);
/// The destination or its sidecar changed while the revision was installed; nothing replaced.
pub const DESTINATION_CHANGED: Reason = restore(
    "DESTINATION_CHANGED",
    Exit::Other,
    "the destination changed during the install; nothing was replaced",
);
/// Another program has the file open in WAL mode with changes not yet in it; nothing was done.
pub const FILE_IN_USE: Reason = restore(
    "FILE_IN_USE",
    Exit::Busy,
    "another program has the file open in WAL mode with changes not yet in it; nothing was done",
);
/// The file was installed but its push state could not be recorded.
pub const PUSH_STATE_NOT_WRITTEN: Reason = restore(
    "PUSH_STATE_NOT_WRITTEN",
    Exit::Other,
    "the file was installed but its push state could not be recorded",
);
/// Another `snug sync` is working on the same file.
pub const SYNC_IN_PROGRESS: Reason = restore(
    "SYNC_IN_PROGRESS",
    Exit::Busy,
    "another sync is working on the same file",
);
/// The origin holds no copy yet.
pub const SYNC_ORIGIN_EMPTY: Reason = restore(
    "SYNC_ORIGIN_EMPTY",
    Exit::Other,
    "the origin holds no copy yet",
);
/// The origin has no such revision.
pub const REVISION_NOT_FOUND: Reason = restore(
    "REVISION_NOT_FOUND",
    Exit::Other,
    "the origin has no such revision",
);
/// The hub refused the credentials, or wants some and none were given.
pub const SYNC_AUTH: Reason = restore(
    "SYNC_AUTH",
    Exit::Unauthorized,
    "the hub refused the credentials, or wants some and none were given",
);
/// The origin could not be reached.
pub const SYNC_NETWORK: Reason = restore(
    "SYNC_NETWORK",
    Exit::Unavailable,
    "the origin could not be reached",
);
/// The hub answers at another address.
pub const ORIGIN_MOVED: Reason = restore(
    "ORIGIN_MOVED",
    Exit::Other,
    "the hub answers at another address",
);
/// The origin answered with something this client cannot use.
pub const SYNC_BAD_RESPONSE: Reason = restore(
    "SYNC_BAD_RESPONSE",
    Exit::Unavailable,
    "the origin answered with something this client cannot use",
);
/// A hub's refusal this client has no word for (its HTTP status in the message).
pub const SYNC_HTTP: Reason = restore(
    "SYNC_HTTP",
    Exit::Unavailable,
    "a hub's refusal this client has no word for",
);
/// A directory origin's copy and revision file disagree (an interrupted push); never trusted.
pub const ORIGIN_INCONSISTENT: Reason = restore(
    "ORIGIN_INCONSISTENT",
    Exit::Other,
    "a directory origin's copy and revision file disagree",
);
/// The download broke off.
pub const DOWNLOAD_INTERRUPTED: Reason = restore(
    "DOWNLOAD_INTERRUPTED",
    Exit::Unavailable,
    "the download broke off",
);
/// The directory given as an origin does not exist (`snug sync origin DIR --init` creates it).
pub const NO_ORIGIN: Reason = restore(
    "NO_ORIGIN",
    Exit::Other,
    "the directory given as an origin does not exist",
);

/// The pipeline's and the sync client's codes, with the other domains' they also give.
pub const DOMAIN: Domain = Domain {
    name: "snug.restore",
    reasons: &[
        &INVALID_REVISION,
        &USERDB_TOO_LARGE,
        &DESTINATION_NO_DIRECTORY,
        &DESTINATION_IS_DIRECTORY,
        &DESTINATION_EXISTS,
        &DESTINATION_NOT_SNUG,
        &LEGACY_BACKUP,
        &DIVERGED,
        &SIZE_MISMATCH,
        &DIGEST_MISMATCH,
        &RESEAL_FAILED,
        &DESTINATION_CHANGED,
        &FILE_IN_USE,
        &PUSH_STATE_NOT_WRITTEN,
        &SYNC_IN_PROGRESS,
        &SYNC_ORIGIN_EMPTY,
        &REVISION_NOT_FOUND,
        &SYNC_AUTH,
        &SYNC_NETWORK,
        &ORIGIN_MOVED,
        &SYNC_BAD_RESPONSE,
        &SYNC_HTTP,
        &ORIGIN_INCONSISTENT,
        &DOWNLOAD_INTERRUPTED,
        &NO_ORIGIN,
        &RATE_LIMITED,
        &SCHEMA_TOO_NEW,
        &PROTECTED,
        &LOCKED,
        &IO,
        &ENTROPY_UNAVAILABLE,
    ],
};
