//! The vocabulary of the store: identities, revisions, digests, preconditions and records.

use std::fmt;

use sha2::{Digest as _, Sha256};
use snug_files::format::SQLITE_MAGIC;

use crate::error::{InvalidToken, PutError};

/// Longest accepted [`UserId`] or [`Principal`], in bytes.
const MAX_ID_LEN: usize = 256;
/// Longest accepted [`Revision`] or [`IdempotencyKey`], in bytes.
const MAX_TOKEN_LEN: usize = 128;

fn check_id(kind: &'static str, s: &str) -> Result<(), InvalidToken> {
    if s.is_empty() {
        return Err(InvalidToken {
            kind,
            problem: "empty",
        });
    }
    if s.len() > MAX_ID_LEN {
        return Err(InvalidToken {
            kind,
            problem: "too long",
        });
    }
    if s.chars().any(char::is_control) {
        return Err(InvalidToken {
            kind,
            problem: "contains a control character",
        });
    }
    Ok(())
}

/// Tokens travel inside an RFC 9110 quoted ETag and in gRPC metadata, so they are limited to
/// characters that need no escaping anywhere: no `"`, no spaces, no commas.
fn check_token(kind: &'static str, s: &str) -> Result<(), InvalidToken> {
    if s.is_empty() {
        return Err(InvalidToken {
            kind,
            problem: "empty",
        });
    }
    if s.len() > MAX_TOKEN_LEN {
        return Err(InvalidToken {
            kind,
            problem: "too long",
        });
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
    {
        return Err(InvalidToken {
            kind,
            problem: "contains a character outside [A-Za-z0-9._~-]",
        });
    }
    Ok(())
}

macro_rules! string_newtype {
    ($(#[$meta:meta])* $name:ident, $kind:literal, $check:ident) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps `value`.
            pub fn new(value: impl Into<String>) -> Result<Self, InvalidToken> {
                let value = value.into();
                $check($kind, &value)?;
                Ok(Self(value))
            }

            /// The value as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = InvalidToken;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }
    };
}

string_newtype!(
    /// The user whose image is stored: an opaque id assigned by the hub's authentication.
    ///
    /// 1–256 bytes of UTF-8 without control characters.
    UserId,
    "user id",
    check_id
);

string_newtype!(
    /// Who performed an operation (a user, a device, an operator), as recorded in the ledgers.
    ///
    /// 1–256 bytes of UTF-8 without control characters.
    Principal,
    "principal",
    check_id
);

string_newtype!(
    /// An opaque, strong revision token, unique per accepted write.
    ///
    /// Tokens this store generates look like `r<seq>-<16 lowercase hex>`: `seq` counts the user's
    /// accepted writes and the suffix is 64 bits from the operating system's CSPRNG, so a token is
    /// never reused even if a store is restored from backup and writes again from the same count.
    /// The same shape as the reference server's ETags keeps logs comparable; callers must not parse
    /// it. Any token made of `[A-Za-z0-9._~-]` (1–128 bytes) is accepted as input, so it is always
    /// safe inside a quoted ETag: it never contains `"`, a space or a comma.
    Revision,
    "revision",
    check_token
);

string_newtype!(
    /// A client-chosen key that makes a retried put recognisable even after other writes landed.
    ///
    /// Same alphabet as [`Revision`].
    IdempotencyKey,
    "idempotency key",
    check_token
);

string_newtype!(
    /// The store's own identity: 128 bits from the CSPRNG as 32 lowercase hex, written into the
    /// store's metadata the first time it is opened and never changed, so every replica on one
    /// store reports the same one and every other store (another hub, a store rebuilt from
    /// nothing) another. A client keys its sync state by origin, and a hub origin is one store
    /// and one user (issue 35): revision tokens repeat across stores, store ids do not.
    StoreId,
    "store id",
    check_token
);

impl StoreId {
    /// A new identity, for a store being created.
    pub(crate) fn generate() -> Result<Self, getrandom::Error> {
        let mut id = [0u8; 16];
        getrandom::fill(&mut id)?;
        Ok(Self(hex::encode(id)))
    }

    /// An identity unique within this process, for a memory store when the CSPRNG fails.
    pub(crate) fn process_local() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(format!("memory-{}-{n}", std::process::id()))
    }
}

impl Revision {
    /// Generates the token for a user's `seq`-th accepted write.
    pub(crate) fn generate(seq: u64) -> Result<Self, getrandom::Error> {
        let mut suffix = [0u8; 8];
        getrandom::fill(&mut suffix)?;
        Ok(Self(format!("r{seq}-{}", hex::encode(suffix))))
    }
}

/// A SHA-256 digest: of a whole image (its identity and end-to-end check) or of one chunk.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub(crate) [u8; 32]);

impl Digest {
    /// Hashes `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// Wraps raw digest bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Result<Self, InvalidToken> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).map_err(|_| InvalidToken {
            kind: "digest",
            problem: "not 64 hex digits",
        })?;
        Ok(Self(out))
    }

    /// The raw digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lowercase hex, 64 digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub(crate) fn from_slice(bytes: &[u8]) -> Option<Self> {
        Some(Self(bytes.try_into().ok()?))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

/// The one condition every put states about the user's current revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// The user has no image yet: the first write (`If-None-Match: *`).
    MustNotExist,
    /// The user's current revision is exactly this one (`If-Match: <revision>`).
    MustMatch(Revision),
}

impl Precondition {
    /// Turns an optional precondition from a request into a required one.
    ///
    /// Service adapters call this so that a request without a precondition gets the same typed
    /// refusal ([`PutError::PreconditionRequired`]) everywhere; the store's own API cannot express a
    /// put without one.
    pub fn required(precondition: Option<Precondition>) -> Result<Precondition, PutError> {
        precondition.ok_or(PutError::PreconditionRequired)
    }

    /// The revision the writer built on, `None` for a first write.
    pub fn base(&self) -> Option<&Revision> {
        match self {
            Precondition::MustNotExist => None,
            Precondition::MustMatch(r) => Some(r),
        }
    }
}

/// A point in time, in milliseconds since the Unix epoch (UTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// Wraps milliseconds since the Unix epoch.
    pub const fn from_unix_millis(ms: i64) -> Self {
        Self(ms)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn unix_millis(self) -> i64 {
        self.0
    }

    /// This instant moved back by `d` (saturating).
    pub fn minus(self, d: std::time::Duration) -> Self {
        Self(
            self.0
                .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }

    /// This instant moved forward by `d` (saturating).
    pub fn plus(self, d: std::time::Duration) -> Self {
        Self(
            self.0
                .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }
}

/// Length of the SQLite database header, which holds `user_version` at offset 60.
pub const SQLITE_HEADER_LEN: usize = 100;

/// The storage version an image declares: its SQLite `user_version` (the big-endian `u32` at
/// byte offset 60 of the database header), read from the image's first bytes.
///
/// `None` when the bytes cannot be a SQLite database header: fewer than
/// [`SQLITE_HEADER_LEN`] bytes, or not starting with `SQLite format 3\0`. The store records the
/// number without judging it (a version newer than the hub understands is the service's or the
/// client's call), so a client can decide before downloading whether it can open a revision.
pub fn storage_version(header: &[u8]) -> Option<u32> {
    if header.len() < SQLITE_HEADER_LEN || !header.starts_with(SQLITE_MAGIC) {
        return None;
    }
    let stamp: [u8; 4] = header[60..64].try_into().ok()?;
    Some(u32::from_be_bytes(stamp))
}

/// One accepted revision of a user's image, as Head and the history report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevisionInfo {
    /// The revision token.
    pub revision: Revision,
    /// SHA-256 of the image bytes, for end-to-end verification by clients.
    pub digest: Digest,
    /// Image size in bytes.
    pub size: u64,
    /// When the store accepted the write.
    pub accepted_at: Timestamp,
    /// Who wrote it.
    pub principal: Principal,
    /// The image's storage version (its SQLite `user_version`, see [`storage_version`]) as
    /// recorded when the bytes were accepted; a restore carries its source's. `None` when the
    /// image is not a SQLite database, or when the store cannot know (a revision accepted before
    /// the store recorded versions whose bytes were already reclaimed).
    pub storage_version: Option<u32>,
    /// The revision it replaced (`None` for the first write).
    pub base: Option<Revision>,
    /// For a restore: the revision whose bytes were copied forward.
    pub restored_from: Option<Revision>,
    /// False once retention reclaimed its bytes; the history row stays so a put based on it is
    /// reported as stale rather than unknown.
    pub retained: bool,
}

/// A write of a new image.
#[derive(Clone, Debug)]
pub struct PutRequest {
    /// Whose image.
    pub user: UserId,
    /// What the writer believes is current.
    pub precondition: Precondition,
    /// Who writes, for the ledger.
    pub principal: Principal,
    /// Optional key that makes a retry recognisable even after later writes.
    pub idempotency_key: Option<IdempotencyKey>,
    /// The image's size, when the writer declares it: what the put holds against the user's limit
    /// on staged bytes ([`crate::StoreConfig::staged_limit_bytes`]) until it lands; an undeclared
    /// put holds the quota. Not checked against the body here: the caller enforces it.
    pub expected_length: Option<u64>,
    /// The quota on this image for this user, when the caller's users directory sets one: it
    /// replaces [`crate::StoreConfig::quota_bytes`] for this put, higher or lower, and is
    /// enforced by the same check, at the byte that crosses it. `None`: the store's default.
    pub quota_bytes: Option<u64>,
}

/// A copy-forward of an old revision's bytes as a new revision.
#[derive(Clone, Debug)]
pub struct RestoreRequest {
    /// Whose image.
    pub user: UserId,
    /// The retained revision whose bytes become current again.
    pub from: Revision,
    /// What the writer believes is current.
    pub precondition: Precondition,
    /// Who restores, for the ledger.
    pub principal: Principal,
    /// Optional key that makes a retry recognisable.
    pub idempotency_key: Option<IdempotencyKey>,
}

/// The result of an accepted put or restore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutOutcome {
    /// The revision now recorded for these bytes.
    pub info: RevisionInfo,
    /// True when this call was a retry of a write the store had already accepted: nothing new was
    /// written and `info` is the earlier acceptance.
    pub replayed: bool,
}

/// One row of the served ledger: an image handed to a principal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedEntry {
    /// The revision served.
    pub revision: Revision,
    /// When.
    pub at: Timestamp,
    /// To whom.
    pub principal: Principal,
}

/// Whether a write was accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The write became (or, for a replay, already was) a revision.
    Accepted,
    /// The write was refused; `reason` is the error's [`PutError::reason`].
    Refused {
        /// UPPER_SNAKE reason.
        reason: String,
    },
}

/// One row of the put ledger: a write accepted or refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutLedgerEntry {
    /// Accepted or refused, with the reason.
    pub verdict: Verdict,
    /// The revision created (accepted writes only).
    pub revision: Option<Revision>,
    /// When.
    pub at: Timestamp,
    /// By whom.
    pub principal: Principal,
}

/// What a reclamation journal row deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReclaimedKind {
    /// A revision's bytes were released (its history row stays, marked not retained).
    Revision,
    /// An image manifest no retained revision referenced.
    Image,
    /// A content-addressed chunk no image referenced.
    Chunk,
    /// A pack file (embedded store) holding no live chunk.
    Pack,
    /// A publication record of a put that never completed.
    Publication,
}

impl ReclaimedKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReclaimedKind::Revision => "revision",
            ReclaimedKind::Image => "image",
            ReclaimedKind::Chunk => "chunk",
            ReclaimedKind::Pack => "pack",
            ReclaimedKind::Publication => "publication",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "revision" => ReclaimedKind::Revision,
            "image" => ReclaimedKind::Image,
            "chunk" => ReclaimedKind::Chunk,
            "pack" => ReclaimedKind::Pack,
            "publication" => ReclaimedKind::Publication,
            _ => return None,
        })
    }
}

/// One journaled deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalEntry {
    /// When.
    pub at: Timestamp,
    /// What kind of object.
    pub kind: ReclaimedKind,
    /// The object's identity (revision token, hex digest, pack name, publication id).
    pub subject: String,
    /// The user it belonged to, where it had one.
    pub user: Option<UserId>,
}

/// Counts of what one reclamation pass deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReclaimReport {
    /// Revisions whose bytes were released.
    pub revisions: u64,
    /// Image manifests deleted.
    pub images: u64,
    /// Chunks deleted.
    pub chunks: u64,
    /// Pack files deleted (embedded store).
    pub packs: u64,
    /// Orphaned publication records cleared.
    pub publications: u64,
    /// Byte ranges an earlier erasure left to wipe, overwritten with zeros by this pass.
    pub ranges_wiped: u64,
    /// Byte ranges still to wipe after this pass (a wipe failed again).
    pub wipes_pending: u64,
}

/// How much the store holds, for operators and for the storage benchmark.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorageStats {
    /// Image manifests.
    pub images: u64,
    /// Distinct chunks in the chunk index.
    pub chunks: u64,
    /// Sum of the indexed chunks' lengths: the deduplicated payload.
    pub chunk_bytes: u64,
}

/// One defect found by an integrity check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntegrityProblem {
    /// A user's pointer names a revision that is missing or not retained.
    DanglingPointer {
        /// The user.
        user: UserId,
    },
    /// A retained revision's image manifest is missing.
    MissingImage {
        /// The image digest.
        image: Digest,
    },
    /// A chunk an image references is missing.
    MissingChunk {
        /// The image.
        image: Digest,
        /// The chunk.
        chunk: Digest,
    },
    /// A stored chunk's bytes do not hash to its address.
    ChunkMismatch {
        /// The chunk.
        chunk: Digest,
    },
    /// An image's chunks reassemble to bytes with a different digest or size.
    ImageMismatch {
        /// The image.
        image: Digest,
    },
    /// An erasure left byte ranges of erased chunks to overwrite with zeros in this object (a
    /// wipe failed); the next erasure or reclamation pass retries them.
    UnfinishedWipe {
        /// The pack file or pack object.
        object: String,
        /// How many ranges are left to wipe in it.
        ranges: u64,
    },
}

/// The result of [`crate::RevStore::check_integrity`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntegrityReport {
    /// Images whose bytes were reassembled and hashed.
    pub images_checked: u64,
    /// Bytes of sound chunks read and hashed, summed over the images (a chunk shared by two
    /// images counts twice).
    pub bytes_checked: u64,
    /// Everything wrong, up to ten thousand problems; empty for a healthy store.
    pub problems: Vec<IntegrityProblem>,
    /// Problems found beyond those listed.
    pub problems_omitted: u64,
}

/// What one user's images take in the store ([`crate::RevStore::usage`]).
///
/// Chunks are deduplicated across revisions and users, so the two byte counts are defined on the
/// user's own images, whatever other users share:
///
/// - `current_bytes`: the size of the current image (what a download of it sends), 0 without one.
/// - `history_bytes`: the bytes of the distinct chunks that the user's retained revisions other
///   than the current one name and the current image does not, each chunk counted once: what the
///   user's history keeps at rest beyond the current image. A chunk another user's image also
///   names still counts (erasing the user would not free it, so this is not [`ErasureReport`]'s
///   `bytes_deleted` in advance). Revisions whose bytes retention already reclaimed add nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageReport {
    /// Size of the current image in bytes (0 when the user has none).
    pub current_bytes: u64,
    /// Bytes of the chunks only the user's earlier retained revisions name (see above).
    pub history_bytes: u64,
    /// Revisions in the user's history, reclaimed ones included (their rows stay).
    pub revisions: u64,
    /// Of those, the revisions whose bytes are still retained (the current one included).
    pub retained_revisions: u64,
}

/// What one erasure deleted ([`crate::RevStore::erase`]). Erasing a user with nothing left
/// reports zeros.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErasureReport {
    /// History rows deleted (every revision of the user, retained or not).
    pub revisions: u64,
    /// Unfinished puts of the user whose publication records were taken.
    pub publications: u64,
    /// Image records deleted (those no other user's revision names).
    pub images: u64,
    /// Chunks deleted: those the user's images named and no remaining image names.
    pub chunks: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Pack files or pack objects deleted whole.
    pub packs: u64,
    /// Pack files or pack objects that also hold other users' chunks, rewritten with the
    /// deleted chunks' ranges zeroed.
    pub packs_wiped: u64,
    /// Put-ledger and served-ledger rows of the user whose principal was scrubbed.
    pub ledger_rows_scrubbed: u64,
    /// Byte ranges overwritten with zeros in objects that stay (this erasure's, and any an
    /// earlier erasure left pending).
    pub ranges_wiped: u64,
    /// Byte ranges still to be overwritten with zeros: a wipe failed, and the store keeps the
    /// ranges and retries them (the next erasure, every reclamation pass). Not zero: the erasure
    /// is not complete.
    pub wipes_pending: u64,
}

impl ErasureReport {
    /// Whether nothing of the erasure is left to do: every erased byte is gone from the store's
    /// files and objects (the backend's own free space aside, see the crate docs).
    pub fn complete(&self) -> bool {
        self.wipes_pending == 0
    }
}
