//! One error enum per operation family, each with its reason in `snug-reasons` (`reason()`).
//!
//! The reasons `snug.sync.v1` sends are the registry's `sync` ones, so the put ledger, the gRPC
//! status and the gateway's JSON say the same word for the same cause; the refusals only an
//! operator meets (validation, reclamation, migrations, the store lock) are its `hub` ones.
//! Nobody switches on message text. The messages of the denial variants are
//! fixed strings so that a missing user, a reclaimed image and another user's image read the same.

use std::{error::Error as StdError, io};

use snug_reasons::{Reason, hub, sync};

use crate::types::{Digest, Revision};

/// The fixed message of every denial, so that no variant of "not yours" leaks through wording.
pub(crate) const NOT_FOUND_MESSAGE: &str = "no such image";

type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// A value that failed validation (user id, principal, revision, key or digest).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind}: {problem}")]
pub struct InvalidToken {
    /// What was being parsed.
    pub kind: &'static str,
    /// What is wrong with it.
    pub problem: &'static str,
}

impl InvalidToken {
    /// Always `INVALID_FIELD`.
    pub fn reason(&self) -> &'static Reason {
        &hub::INVALID_FIELD
    }
}

/// A failure of the storage itself, as opposed to a refusal by the store's rules.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The backend could not be reached or an I/O operation failed; retrying later may succeed.
    #[error("storage unavailable")]
    Unavailable(#[source] BoxError),
    /// Stored bytes failed verification against their content address.
    #[error("stored {object} failed verification")]
    Corrupt {
        /// Which object: e.g. `chunk <hex>` or `pack <name>`.
        object: String,
    },
    /// The storage is out of space (a full disk or file-system quota, or a database that cannot
    /// grow): retrying will not help until an operator makes room.
    #[error("storage is full")]
    Full(#[source] BoxError),
}

impl StorageError {
    /// `STORAGE_UNAVAILABLE` or `STORAGE_CORRUPT`.
    pub fn reason(&self) -> &'static Reason {
        match self {
            StorageError::Unavailable(_) => &sync::STORAGE_UNAVAILABLE,
            StorageError::Corrupt { .. } => &sync::STORAGE_CORRUPT,
            StorageError::Full(_) => &sync::STORAGE_FULL,
        }
    }

    pub(crate) fn unavailable(e: impl Into<BoxError>) -> Self {
        StorageError::Unavailable(e.into())
    }
}

/// `ENOSPC` and `EDQUOT`: no room on the file system, or none left in the owner's quota.
const OUT_OF_SPACE: [i32; 2] = [28, 122];

impl From<io::Error> for StorageError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::StorageFull
            || e.raw_os_error().is_some_and(|c| OUT_OF_SPACE.contains(&c))
        {
            StorageError::Full(Box::new(e))
        } else {
            StorageError::Unavailable(Box::new(e))
        }
    }
}

impl From<rusqlite::Error> for StorageError {
    fn from(e: rusqlite::Error) -> Self {
        // SQLite reports a full disk as SQLITE_FULL, and an I/O error whose extended code says
        // the write failed for want of space the same way on some paths.
        let full = matches!(
            &e,
            rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DiskFull
        );
        if full {
            StorageError::Full(Box::new(e))
        } else {
            StorageError::Unavailable(Box::new(e))
        }
    }
}

impl From<getrandom::Error> for StorageError {
    fn from(e: getrandom::Error) -> Self {
        StorageError::Unavailable(Box::new(io::Error::other(e.to_string())))
    }
}

impl From<tokio::task::JoinError> for StorageError {
    fn from(e: tokio::task::JoinError) -> Self {
        StorageError::Unavailable(Box::new(e))
    }
}

#[cfg(feature = "postgres")]
impl From<tokio_postgres::Error> for StorageError {
    fn from(e: tokio_postgres::Error) -> Self {
        // Class 53: insufficient resources; 53100 is disk_full.
        if e.code() == Some(&tokio_postgres::error::SqlState::DISK_FULL) {
            StorageError::Full(Box::new(e))
        } else {
            StorageError::Unavailable(Box::new(e))
        }
    }
}

#[cfg(feature = "postgres")]
impl From<deadpool_postgres::PoolError> for StorageError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        StorageError::Unavailable(Box::new(e))
    }
}

/// Why a put or restore was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum PutError {
    /// The request carried no precondition. Returned by [`crate::Precondition::required`]; the
    /// store's API cannot express a put without one.
    #[error(
        "a put requires a precondition: must-match a revision, or must-not-exist for the first write"
    )]
    PreconditionRequired,
    /// The user is not provisioned, or (restore) the source revision is not one the caller may see.
    #[error("{}", NOT_FOUND_MESSAGE)]
    NotFound,
    /// The precondition does not hold and names no earlier revision of this user:
    /// must-not-exist while an image exists, or must-match a revision the user never had.
    #[error("revision mismatch")]
    Conflict {
        /// The user's current revision, if any.
        current: Option<Revision>,
    },
    /// The precondition names an earlier revision of this user: the writer's base is stale.
    #[error("stale revision: the image changed since {base}")]
    Stale {
        /// The revision the writer built on.
        base: Revision,
        /// The user's current revision.
        current: Revision,
    },
    /// The image is larger than the per-user quota; refused before the rest was read.
    #[error("image exceeds the per-user quota of {quota} bytes")]
    QuotaExceeded {
        /// The quota in bytes.
        quota: u64,
    },
    /// Different bytes already occupy this content-addressed identity.
    #[error("different bytes already stored under {identity}")]
    ImageConflict {
        /// The occupied identity (image digest or pack name).
        identity: String,
    },
    /// The idempotency key was used before for a different write (other bytes or another base).
    #[error("idempotency key reused for a different write")]
    IdempotencyKeyReused {
        /// The revision that key produced.
        revision: Revision,
    },
    /// The caller's byte stream failed before its end; nothing was written.
    #[error("the image stream failed")]
    BodyAborted(#[source] io::Error),
    /// The user's unfinished puts (in flight, or failed and not reclaimed yet) already hold
    /// `staged` bytes, and this one would take them past `limit`; refused before any byte is read.
    #[error(
        "unfinished puts hold {staged} bytes of this user's limit of {limit}; retry when they land"
    )]
    PutsInFlight {
        /// Bytes the user's unfinished puts hold (each its declared size, or the quota).
        staged: u64,
        /// The most one user may stage ([`crate::StoreConfig::staged_limit_bytes`]).
        limit: u64,
    },
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl PutError {
    /// The UPPER_SNAKE reason for this cause.
    pub fn reason(&self) -> &'static Reason {
        match self {
            PutError::PreconditionRequired => &sync::PRECONDITION_REQUIRED,
            PutError::NotFound => &sync::NOT_FOUND,
            PutError::Conflict { .. } => &sync::REVISION_MISMATCH,
            PutError::Stale { .. } => &sync::STALE_REVISION,
            PutError::QuotaExceeded { .. } => &sync::QUOTA_EXCEEDED,
            PutError::ImageConflict { .. } => &sync::IMAGE_CONFLICT,
            PutError::IdempotencyKeyReused { .. } => &sync::IDEMPOTENCY_KEY_REUSED,
            PutError::BodyAborted(_) => &sync::BODY_ABORTED,
            PutError::PutsInFlight { .. } => &sync::PUTS_IN_FLIGHT,
            PutError::Storage(e) => e.reason(),
        }
    }

    /// The user's current revision where the refusal reports one.
    pub fn current(&self) -> Option<&Revision> {
        match self {
            PutError::Conflict { current } => current.as_ref(),
            PutError::Stale { current, .. } => Some(current),
            _ => None,
        }
    }

    /// Whether the refusal is worth recording in the put ledger (every rule-based refusal is;
    /// storage failures are logged, not ledgered, because the ledger lives in the same storage).
    pub(crate) fn is_ledgered(&self) -> bool {
        !matches!(self, PutError::Storage(_) | PutError::PreconditionRequired)
    }
}

impl From<rusqlite::Error> for PutError {
    fn from(e: rusqlite::Error) -> Self {
        PutError::Storage(e.into())
    }
}

impl From<io::Error> for PutError {
    fn from(e: io::Error) -> Self {
        PutError::Storage(e.into())
    }
}

/// Why a read (head, get, get_revision) produced nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Uniform denial: no such user, no image yet, a reclaimed revision, or another user's
    /// revision. One variant, one message.
    #[error("{}", NOT_FOUND_MESSAGE)]
    NotFound,
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl ReadError {
    /// `NOT_FOUND` or the storage reason.
    pub fn reason(&self) -> &'static Reason {
        match self {
            ReadError::NotFound => &sync::NOT_FOUND,
            ReadError::Storage(e) => e.reason(),
        }
    }
}

impl From<rusqlite::Error> for ReadError {
    fn from(e: rusqlite::Error) -> Self {
        ReadError::Storage(e.into())
    }
}

/// Why a user was not provisioned.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// The user id was erased from this store (issue 36): it is never used again.
    #[error("this user id was erased from the store and cannot be used again")]
    Erased,
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl ProvisionError {
    /// `USER_ERASED` or the storage reason.
    pub fn reason(&self) -> &'static Reason {
        match self {
            ProvisionError::Erased => &sync::USER_ERASED,
            ProvisionError::Storage(e) => e.reason(),
        }
    }
}

impl From<rusqlite::Error> for ProvisionError {
    fn from(e: rusqlite::Error) -> Self {
        ProvisionError::Storage(e.into())
    }
}

/// Why a reclamation pass deleted nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReclaimError {
    /// The listing of stored objects did not complete; nothing was reclaimed.
    #[error("object listing incomplete; nothing reclaimed")]
    IncompleteListing,
    /// An object in the listing could not be identified; nothing was reclaimed.
    #[error("unreadable candidate {name:?}; nothing reclaimed")]
    UnreadableCandidate {
        /// The object's name as listed.
        name: String,
    },
    /// The storage failed; nothing was reclaimed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl ReclaimError {
    /// The UPPER_SNAKE reason for this cause.
    pub fn reason(&self) -> &'static Reason {
        match self {
            ReclaimError::IncompleteListing => &hub::LISTING_INCOMPLETE,
            ReclaimError::UnreadableCandidate { .. } => &hub::UNREADABLE_CANDIDATE,
            ReclaimError::Storage(e) => e.reason(),
        }
    }
}

impl From<rusqlite::Error> for ReclaimError {
    fn from(e: rusqlite::Error) -> Self {
        ReclaimError::Storage(e.into())
    }
}

impl From<io::Error> for ReclaimError {
    fn from(e: io::Error) -> Self {
        ReclaimError::Storage(e.into())
    }
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The store was written by a newer binary.
    #[error("store schema version {found} is newer than this binary's {supported}")]
    SchemaTooNew {
        /// Highest applied migration.
        found: i64,
        /// Highest migration this binary knows.
        supported: i64,
    },
    /// An applied migration's text differs from this binary's copy.
    #[error("applied migration {version} differs from this binary's")]
    MigrationChanged {
        /// The migration's version.
        version: i64,
    },
    /// Another process has the embedded store open.
    #[error("the store directory is in use by another process")]
    Locked,
    /// The store keeps its image bytes in one place (PostgreSQL rows, or one bucket and prefix)
    /// and was opened configured with another: opening it would hide every image.
    #[error("the store keeps its image bytes in {recorded}, but is configured with {configured}")]
    BytesElsewhere {
        /// Where the store's bytes are: `postgres` or `s3://BUCKET/PREFIX`.
        recorded: String,
        /// Where the configuration says.
        configured: String,
    },
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl OpenError {
    /// The UPPER_SNAKE reason for this cause.
    pub fn reason(&self) -> &'static Reason {
        match self {
            OpenError::SchemaTooNew { .. } => &hub::STORE_SCHEMA_TOO_NEW,
            OpenError::MigrationChanged { .. } => &hub::MIGRATION_CHANGED,
            OpenError::Locked => &hub::STORE_LOCKED,
            OpenError::BytesElsewhere { .. } => &hub::BYTES_ELSEWHERE,
            OpenError::Storage(e) => e.reason(),
        }
    }
}

impl From<rusqlite::Error> for OpenError {
    fn from(e: rusqlite::Error) -> Self {
        OpenError::Storage(e.into())
    }
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Storage(e.into())
    }
}

/// Reports an identity by its hex digest, for [`PutError::ImageConflict`].
pub(crate) fn image_conflict(digest: &Digest) -> PutError {
    PutError::ImageConflict {
        identity: format!("image {digest}"),
    }
}
