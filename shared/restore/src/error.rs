//! The two error families of this crate: [`RestoreError`] (the install pipeline) and
//! [`GateError`] (the push gate's hash), each with a stable [`reason`](RestoreError::reason).

use std::path::PathBuf;

use snug_reasons::Reasoned;
use snug_schema::{ExportError, ImportError, KvError, OpenError};

use crate::origin::OriginError;

/// Why a restore did not install anything. On every variant but [`RestoreError::Unbound`] the
/// destination and its push-state sidecar are byte-identical to what they were, and no temporary
/// file is left behind.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The origin could not describe or deliver the revision.
    #[error(transparent)]
    Origin(#[from] OriginError),
    /// The revision named by the caller cannot be a revision token (empty, too long, or with
    /// control characters or spaces).
    #[error("{revision:?} is not a revision token")]
    InvalidRevision {
        /// What was given.
        revision: String,
    },
    /// The revision is stamped newer than this build understands. Raised before the download
    /// when the origin declares the version, and on the downloaded header when it does not.
    #[error(
        "revision {revision} is at storage version {found}; this build supports up to {supported}: upgrade snug before pulling it"
    )]
    SchemaTooNew {
        /// The revision.
        revision: String,
        /// Its storage version.
        found: i64,
        /// [`snug_schema::STORAGE_VERSION`].
        supported: i64,
    },
    /// The revision is larger than a user database may be.
    #[error("revision {revision} is {size} bytes; the limit is {max}")]
    TooLarge {
        /// The revision.
        revision: String,
        /// Its declared size.
        size: u64,
        /// [`snug_schema::MAX_USERDB_BYTES`].
        max: u64,
    },
    /// The destination's directory does not exist (a restore never creates directories: a typo
    /// in the path should not become a new, empty place).
    #[error("{} is not in an existing directory", path.display())]
    NoDirectory {
        /// The destination.
        path: PathBuf,
    },
    /// The destination is a directory.
    #[error("{} is a directory; name the user file inside it (for example {}/user.snug)", path.display(), path.display())]
    IsDirectory {
        /// The destination.
        path: PathBuf,
    },
    /// The caller asked for a bootstrap (a new device) and the destination already holds a file.
    #[error("{} already exists; a bootstrap only creates a new file (use pull to update it)", path.display())]
    DestinationExists {
        /// The file found.
        path: PathBuf,
    },
    /// The destination exists and is not a Snug user database by its leading bytes, or is too
    /// large to be one; it is someone's file, so it is left alone.
    #[error("{} is not a Snug user database ({found}); it was left alone", path.display())]
    NotSnugFile {
        /// The file found.
        path: PathBuf,
        /// What it is instead.
        found: &'static str,
    },
    /// The destination is a SNUGENC1 protected file and no secret was given to open it
    /// ([`crate::prepare_unlocking`] installs into it resealed).
    #[error(
        "{} is protected; give its passphrase or recovery key to pull into it (it stays protected)",
        path.display()
    )]
    Protected {
        /// The file found.
        path: PathBuf,
    },
    /// The destination is the legacy `user.sqlite` beside an existing `user.snug`: the user's own
    /// backup (§10), which a pull would overwrite and which has no push state to bind. Pull into
    /// `user.snug` instead.
    #[error(
        "{} is the backup left beside the adopted user.snug (§10); pull into user.snug, or copy the backup elsewhere to sync it as a file of its own",
        path.display()
    )]
    LegacyBackup {
        /// The backup.
        path: PathBuf,
    },
    /// The destination is a SQLite file that does not open as a user database (damaged, hostile,
    /// or newer than this build). It may hold the only copy of unpushed work, so it is never
    /// replaced: move it aside and pull into the empty path.
    #[error("{} cannot be opened as a user database; move it aside and pull again", path.display())]
    Unreadable {
        /// The file found.
        path: PathBuf,
        /// Why it does not open.
        #[source]
        source: OpenError,
    },
    /// The destination has changes that were never pushed and the origin's revision differs
    /// from them. Nothing was downloaded; `force` replaces the local changes.
    #[error(
        "{} has changes that were never pushed ({}) and the origin offers revision {revision}; push --force to keep the local file, or pull --force to take the origin's",
        path.display(),
        last_synced.as_deref().map_or("it was never synced with this origin".to_owned(), |r| format!("its last sync was revision {r}"))
    )]
    Diverged {
        /// The destination.
        path: PathBuf,
        /// The revision that would have been installed.
        revision: String,
        /// The revision the destination was last synced with, if any.
        last_synced: Option<String>,
    },
    /// The download's length differs from the length the origin declared.
    #[error("revision {revision} arrived with {received} bytes; the origin declared {declared}")]
    SizeMismatch {
        /// The revision.
        revision: String,
        /// The declared length.
        declared: u64,
        /// What arrived (at least `declared + 1` when the origin sent too much).
        received: u64,
    },
    /// The downloaded bytes do not match the SHA-256 the origin recorded for the revision.
    #[error(
        "revision {revision} does not match its recorded SHA-256 (expected {expected}, got {actual})"
    )]
    DigestMismatch {
        /// The revision.
        revision: String,
        /// The recorded SHA-256, hex.
        expected: String,
        /// The SHA-256 of what arrived, hex.
        actual: String,
    },
    /// The verified image does not open, migrate and heal as a user database.
    #[error("revision {revision} was refused")]
    Refused {
        /// The revision.
        revision: String,
        /// Why the open pipeline refused it.
        #[source]
        source: ImportError,
    },
    /// The revision is a protected (SNUGENC1) file that did not open: no secret was given, none
    /// of those given opened it (locked: the origin's copy is healthy), or the container is
    /// damaged or from a newer format.
    #[error("revision {revision} is a protected file that did not open")]
    Container {
        /// The revision.
        revision: String,
        /// Why it did not open.
        #[source]
        source: snug_container::OpenError,
    },
    /// The destination is a protected (SNUGENC1) file that did not open with the secret given:
    /// locked (the file is healthy and untouched), damaged, out of the iteration policy or from a
    /// newer format.
    #[error("{} is a protected file that did not open", path.display())]
    LocalContainer {
        /// The destination.
        path: PathBuf,
        /// Why it did not open.
        #[source]
        source: snug_container::OpenError,
    },
    /// Resealing the installed database into the revision's container failed.
    #[error("the installed database could not be resealed in the revision's container")]
    Reseal(#[source] snug_container::SealError),
    /// The destination or its sidecar changed between prepare and install (another process
    /// wrote it). Nothing was replaced; run the pull again to decide afresh.
    #[error("{} changed while the revision was being installed; nothing was replaced", path.display())]
    DestinationChanged {
        /// The file that changed.
        path: PathBuf,
    },
    /// Another program has the file open in WAL mode, with changes in its write-ahead log that
    /// are not in the file yet: replacing the file under it would lose them, and that program
    /// (or the next one to open the file) would write them into the new one. Nothing was done.
    #[error(
        "{} is open in WAL mode with changes not yet in the file ({} bytes in {}); close the \
         program that has it open (or run sqlite3 on it with PRAGMA wal_checkpoint(TRUNCATE)) \
         and run the command again; nothing was changed",
        path.display(),
        wal_bytes,
        wal.display()
    )]
    InUse {
        /// The user database.
        path: PathBuf,
        /// Its write-ahead log.
        wal: PathBuf,
        /// The log's length.
        wal_bytes: u64,
    },
    /// A local file operation failed.
    #[error("cannot {action} {}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The destination's local credentials could not be carried into the new file.
    #[error("the local credentials could not be carried over")]
    Secrets(#[source] KvError),
    /// SQLite failed while serializing the installed image.
    #[error("sqlite failed")]
    Storage(#[source] rusqlite::Error),
    /// The push gate's hash of the destination or of the installed file could not be computed.
    #[error(transparent)]
    Gate(#[from] GateError),
    /// The file was installed, but the sidecar binding it to the revision could not be renamed
    /// into place. The old sidecar still names the previous revision, so the next push or pull
    /// sees a changed file and refuses as diverged rather than overwriting anything.
    #[error("{} was installed but its push state could not be recorded", path.display())]
    Unbound {
        /// The sidecar.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl RestoreError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            RestoreError::Origin(err) => err.reason(),
            RestoreError::InvalidRevision { .. } => &snug_reasons::restore::INVALID_REVISION,
            RestoreError::SchemaTooNew { .. } => &snug_reasons::schema::SCHEMA_TOO_NEW,
            RestoreError::TooLarge { .. } => &snug_reasons::restore::USERDB_TOO_LARGE,
            RestoreError::NoDirectory { .. } => &snug_reasons::restore::DESTINATION_NO_DIRECTORY,
            RestoreError::IsDirectory { .. } => &snug_reasons::restore::DESTINATION_IS_DIRECTORY,
            RestoreError::DestinationExists { .. } => &snug_reasons::restore::DESTINATION_EXISTS,
            RestoreError::NotSnugFile { .. } => &snug_reasons::restore::DESTINATION_NOT_SNUG,
            RestoreError::Protected { .. } => &snug_reasons::schema::PROTECTED,
            RestoreError::LegacyBackup { .. } => &snug_reasons::restore::LEGACY_BACKUP,
            RestoreError::Unreadable { source, .. } => Reasoned::reason(source),
            RestoreError::Diverged { .. } => &snug_reasons::restore::DIVERGED,
            RestoreError::SizeMismatch { .. } => &snug_reasons::restore::SIZE_MISMATCH,
            RestoreError::DigestMismatch { .. } => &snug_reasons::restore::DIGEST_MISMATCH,
            RestoreError::Refused { source, .. } => Reasoned::reason(source),
            RestoreError::Container { source, .. }
            | RestoreError::LocalContainer { source, .. } => container_reason(source),
            RestoreError::Reseal(_) => &snug_reasons::restore::RESEAL_FAILED,
            RestoreError::DestinationChanged { .. } => &snug_reasons::restore::DESTINATION_CHANGED,
            RestoreError::InUse { .. } => &snug_reasons::restore::FILE_IN_USE,
            RestoreError::Io { .. } => &snug_reasons::cli::IO,
            RestoreError::Secrets(err) => err.reason(),
            RestoreError::Storage(_) => &snug_reasons::cli::STORAGE,
            RestoreError::Gate(err) => err.reason(),
            RestoreError::Unbound { .. } => &snug_reasons::restore::PUSH_STATE_NOT_WRITTEN,
        }
    }
}

/// The reason of a container that did not open, as the container service reports it.
fn container_reason(source: &snug_container::OpenError) -> &'static snug_reasons::Reason {
    match source {
        snug_container::OpenError::Locked => &snug_reasons::container::LOCKED,
        snug_container::OpenError::Corrupt(corruption) => corruption.reason(),
        // The pipeline's word for a revision too large to install, however it was found.
        snug_container::OpenError::TooLarge { .. } => &snug_reasons::restore::USERDB_TOO_LARGE,
    }
}

/// Why the push gate's hash (the SHA-256 of a file's default export) could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The file does not open as a user database.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The export failed.
    #[error(transparent)]
    Export(#[from] ExportError),
}

impl GateError {
    /// Returns the stable machine reason (the library's own: `MALFORMED`, `USERDB_TOO_LARGE`, …).
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            GateError::Open(err) => Reasoned::reason(err),
            GateError::Export(err) => Reasoned::reason(err),
        }
    }
}

#[cfg(test)]
mod tests;
