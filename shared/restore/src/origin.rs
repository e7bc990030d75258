//! The origin side of a restore: the trait a caller implements so the pipeline can ask what a
//! revision is before it downloads a byte of it, and then fetch exactly that revision.

use std::io::Write;

use snug_schema::SQLITE_MAGIC;

/// Which revision of the user's file to install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The origin's current revision.
    Current,
    /// A revision from the origin's retained history, by its token (`r<n>-<hex>` on a Snug hub).
    Revision(String),
}

impl Selector {
    /// Returns the named revision, if this selects one.
    pub fn revision(&self) -> Option<&str> {
        match self {
            Selector::Current => None,
            Selector::Revision(revision) => Some(revision),
        }
    }
}

/// What an origin records about one revision, known before any of its bytes are downloaded.
///
/// This is the metadata of issue #8 point 1 (the hub's `HEAD /userdb/revisions/{rev}`): enough to
/// refuse a revision this build cannot open, and to verify the bytes once they arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The revision token (the hub's strong ETag, unquoted).
    pub revision: String,
    /// The SHA-256 of the revision's bytes, recorded when the origin accepted them.
    pub sha256: [u8; 32],
    /// The length of the revision's bytes.
    pub size: u64,
    /// The image's storage version (`user_version`), when the origin knows it. An unknown
    /// version is read from the downloaded header before anything else looks at the bytes.
    pub storage_version: Option<u32>,
}

impl SnapshotInfo {
    /// Returns the recorded SHA-256 as lowercase hex.
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.sha256)
    }
}

/// A sync origin as the install pipeline sees it: a hub over HTTP, a directory, anything that can
/// describe a revision and stream its bytes. Implementations may block.
pub trait Origin {
    /// Says what `which` names, without downloading it: the origin's current revision, or a
    /// retained one by token.
    fn describe(&self, which: &Selector) -> Result<SnapshotInfo, OriginError>;

    /// Writes the bytes of `snapshot` (as [`describe`](Origin::describe) returned it) to `sink`.
    ///
    /// The implementation should fetch that exact revision (an immutable address where the
    /// origin has one) and fail rather than send another revision's bytes; the pipeline checks
    /// the length and SHA-256 either way. A write to `sink` fails once more bytes arrive than
    /// the snapshot declared; return that error (as [`OriginError::Sink`]) without retrying.
    fn download(&self, snapshot: &SnapshotInfo, sink: &mut dyn Write) -> Result<(), OriginError>;
}

/// Why an origin could not describe or deliver a revision.
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    /// The origin holds no copy yet (nothing was ever pushed).
    #[error("the origin holds no copy yet; push one first")]
    Empty,
    /// The origin has no such revision (never existed, reclaimed, or another user's).
    #[error("the origin has no revision {revision}")]
    UnknownRevision {
        /// The revision asked for.
        revision: String,
    },
    /// The origin refused the credentials.
    #[error("the origin refused the credentials: {detail}")]
    Unauthorized {
        /// What the origin answered.
        detail: String,
    },
    /// The origin could not be reached (connection, TLS, timeout).
    #[error("cannot reach the origin: {detail}")]
    Unreachable {
        /// The transport's error.
        detail: String,
    },
    /// The revision was the origin's current one when it was described, and the origin moved on
    /// before it was downloaded (an origin that keeps no history, or a hub without revision
    /// addresses). Pull again to decide afresh.
    #[error(
        "the origin moved from revision {revision} to {current} during the download; pull again"
    )]
    Moved {
        /// The revision described.
        revision: String,
        /// What the origin holds now.
        current: String,
    },
    /// Any other failure, with a stable code from the origin's own vocabulary (a hub's JSON
    /// `code` such as `OVERLOADED`, `SYNC_HTTP` for an unexpected status, `NO_ORIGIN`, `IO`).
    #[error("{detail}")]
    Other {
        /// The stable code.
        code: &'static str,
        /// What happened.
        detail: String,
    },
    /// The origin answered something that breaks its contract (a missing ETag or digest, the
    /// wrong revision's bytes).
    #[error("the origin sent {detail}")]
    BadResponse {
        /// What was wrong.
        detail: String,
    },
    /// The origin's own records disagree (a directory origin whose image does not match its
    /// revision file, an interrupted push).
    #[error("the origin is inconsistent: {detail}")]
    Inconsistent {
        /// What disagrees.
        detail: String,
    },
    /// The download broke off before its end.
    #[error("the download broke off: {detail}")]
    Interrupted {
        /// The transport's error.
        detail: String,
    },
    /// Writing to the pipeline's sink failed (its cap, or the local disk).
    #[error("the downloaded bytes could not be stored")]
    Sink(#[source] std::io::Error),
}

impl OriginError {
    /// Returns the stable machine reason (the `snug sync` vocabulary, shared with the hub's
    /// reference client: `SYNC_NETWORK`, `SYNC_AUTH`, `SYNC_BAD_RESPONSE`, …).
    pub fn reason(&self) -> &'static str {
        match self {
            OriginError::Empty => "SYNC_ORIGIN_EMPTY",
            OriginError::UnknownRevision { .. } => "REVISION_NOT_FOUND",
            OriginError::Unauthorized { .. } => "SYNC_AUTH",
            OriginError::Unreachable { .. } => "SYNC_NETWORK",
            OriginError::Moved { .. } => "ORIGIN_MOVED",
            OriginError::Other { code, .. } => code,
            OriginError::BadResponse { .. } => "SYNC_BAD_RESPONSE",
            OriginError::Inconsistent { .. } => "ORIGIN_INCONSISTENT",
            OriginError::Interrupted { .. } => "DOWNLOAD_INTERRUPTED",
            OriginError::Sink(_) => "IO",
        }
    }
}

/// Reads the storage version (`user_version`, a big-endian signed 32-bit integer at offset 60)
/// from the first bytes of a plain SQLite image; `None` for anything that is not one (a
/// SNUGENC1 container, a short or foreign file).
///
/// Origins that keep no metadata of their own (a directory) describe a revision with it, and the
/// pipeline checks every downloaded image with it before the image is opened.
pub fn header_storage_version(header: &[u8]) -> Option<i64> {
    if !header.starts_with(SQLITE_MAGIC) {
        return None;
    }
    let field: [u8; 4] = header.get(60..64)?.try_into().ok()?;
    Some(i64::from(i32::from_be_bytes(field)))
}

#[cfg(test)]
mod tests;
