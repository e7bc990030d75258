//! The origin contract: the one trait ([`Origin`]) through which a client describes a revision
//! before it downloads a byte of it, fetches exactly that revision, and pushes a new one with
//! compare-and-swap on the revision it replaces; and its two implementations, a hub over HTTP
//! ([`HubOrigin`], `hub.rs`, feature `hub`) and a personal origin in a directory ([`DirOrigin`],
//! `dir.rs`). The install pipeline uses describe and download; a sync client pushes.

use std::{io::Write, time::Duration};

use snug_schema::SQLITE_MAGIC;

mod dir;
#[cfg(feature = "hub")]
mod hub;

pub use dir::DirOrigin;
#[cfg(feature = "hub")]
pub use hub::HubOrigin;

pub use snug_delta::page_size_of as delta_page_size;

/// How much of a download is read at a time.
const DOWNLOAD_BUFFER: usize = 256 * 1024;

/// Who an origin is (issue 35): the key of a file's sync state at that origin, so one origin's
/// revisions are never read as another's (revision tokens repeat across origins).
///
/// A Snug hub states its own (`hub:` and the 32 hex of its `Snug-Origin` header: its store and
/// the authenticated user); a directory origin keeps one in its directory (`dir:` and 32 hex,
/// written at `snug sync origin DIR --init` or on first use); an origin that states none is
/// known by its address (`url:` or `path:`), the best a client can do, and what a plain hub (the
/// reference implementation's) gets.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OriginId(String);

impl OriginId {
    /// The identity a hub states in its `Snug-Origin` header; `None` unless it is 32 lowercase
    /// hex digits.
    pub fn hub(stated: &str) -> Option<Self> {
        is_identity_hex(stated).then(|| Self(format!("hub:{stated}")))
    }

    /// The identity a directory origin keeps; `None` unless it is 32 lowercase hex digits.
    pub fn directory(kept: &str) -> Option<Self> {
        is_identity_hex(kept).then(|| Self(format!("dir:{kept}")))
    }

    /// The identity of an origin that states none: its address (a URL or a path).
    pub fn address(kind: AddressKind, address: &str) -> Self {
        let prefix = match kind {
            AddressKind::Url => "url",
            AddressKind::Path => "path",
        };
        Self(format!("{prefix}:{address}"))
    }

    /// Reads an identity as [`OriginId::as_str`] wrote it; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let (kind, rest) = text.split_once(':')?;
        match kind {
            "hub" | "dir" if is_identity_hex(rest) => Some(Self(text.to_owned())),
            "url" | "path" if !rest.is_empty() && !rest.chars().any(char::is_control) => {
                Some(Self(text.to_owned()))
            }
            _ => None,
        }
    }

    /// The identity as text (`hub:…`, `dir:…`, `url:…`, `path:…`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the origin stated this identity itself (a hub's or a directory's), rather than
    /// being known by its address.
    pub fn is_stated(&self) -> bool {
        self.0.starts_with("hub:") || self.0.starts_with("dir:")
    }
}

impl std::fmt::Display for OriginId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an address-based [`OriginId`] is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressKind {
    /// A hub's URL.
    Url,
    /// A directory's path.
    Path,
}

fn is_identity_hex(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

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

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// The origin took the bytes as its new current revision.
    Accepted {
        /// The new revision's token.
        revision: String,
    },
    /// The origin's revision was not the base: somebody else wrote first. Nothing was written.
    Conflict {
        /// The origin's current revision, when it says (`None`: it holds no copy).
        current: Option<String>,
    },
}

/// [`Origin::wait_for_change`] by asking `origin` for its head once a second.
pub(crate) fn poll_for_change<O: Origin + ?Sized>(
    origin: &O,
    current: Option<&str>,
    within: Duration,
) -> Result<bool, OriginError> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let now = match origin.describe(&Selector::Current) {
            Ok(head) => Some(head.revision),
            Err(OriginError::Empty) => None,
            Err(err) => return Err(err),
        };
        if now.as_deref() != current {
            return Ok(true);
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        std::thread::sleep(left.min(Duration::from_secs(1)));
    }
}

/// A sync origin (the reference's SyncProvider contract): a hub over HTTP, a directory, anything
/// that can describe a revision, stream its bytes, and take a new one with compare-and-swap.
/// Implementations may block.
pub trait Origin {
    /// Returns how messages name this origin (a hub's URL, a directory's path).
    fn name(&self) -> String {
        "the origin".to_owned()
    }

    /// Returns whether this is a personal origin (the user's own storage, such as a directory),
    /// which may hold a protected copy and, on request, the credentials; a hub holds only the
    /// secrets-stripped plaintext (§11.3). The default is a hub's answer, which never sends more
    /// than a hub may hold.
    fn is_personal(&self) -> bool {
        false
    }

    /// Returns who this origin is ([`OriginId`]), asking it where it states its identity (a hub
    /// answers with it on every `HEAD /userdb`; a directory keeps it in a file). The default is
    /// the identity of an origin that states none: its [`name`](Origin::name).
    fn identity(&self) -> Result<OriginId, OriginError> {
        Ok(OriginId::address(AddressKind::Url, &self.name()))
    }

    /// Whether the origin keeps the revisions it replaces (a hub's history), so a push that
    /// overwrites a head leaves it restorable there. An origin that keeps only its current
    /// revision (a directory) is asked to [`preserve`](Origin::preserve) a head before a forced
    /// push overwrites it.
    fn keeps_history(&self) -> bool {
        true
    }

    /// Whether pushes and pulls may go by difference, so what a client keeps of the base it last
    /// synced ([`SyncedBase`]) is worth keeping.
    fn syncs_by_difference(&self) -> bool {
        false
    }

    /// Keeps a copy of `head`, the current revision a forced push is about to overwrite, where
    /// the origin keeps no history; returns where it went. Origins with history keep it already
    /// ([`keeps_history`](Origin::keeps_history)) and return `None`.
    fn preserve(&self, head: &SnapshotInfo) -> Result<Option<String>, OriginError> {
        let _ = head;
        Ok(None)
    }

    /// Makes the retained `revision`'s bytes the origin's new current revision, a copy-forward
    /// (§8.1: a revert is a new version), if the current one is still `base`. The default
    /// downloads the revision and pushes its bytes; a hub does it in place.
    fn restore(&self, revision: &SnapshotInfo, base: &str) -> Result<Pushed, OriginError> {
        let mut bytes = Vec::with_capacity(usize::try_from(revision.size).unwrap_or(0));
        self.download(revision, &mut bytes)?;
        if bytes.len() as u64 != revision.size || snug_delta::sha256(&bytes) != revision.sha256 {
            return Err(OriginError::BadResponse {
                detail: format!("bytes that are not revision {}", revision.revision),
            });
        }
        self.push(&bytes, Some(base))
    }

    /// Says what `which` names, without downloading it: the origin's current revision, or a
    /// retained one by token.
    fn describe(&self, which: &Selector) -> Result<SnapshotInfo, OriginError>;

    /// Waits, at most `within`, until the origin's current revision is no longer `current`
    /// (`None`: it held no copy): `true` once it changed (or may have), `false` when `within`
    /// passed first (issue 40). The default asks [`describe`](Origin::describe) once a second; a
    /// hub is told at once, by its event stream.
    fn wait_for_change(
        &self,
        current: Option<&str>,
        within: Duration,
    ) -> Result<bool, OriginError> {
        poll_for_change(self, current, within)
    }

    /// Writes the bytes of `snapshot` (as [`describe`](Origin::describe) returned it) to `sink`.
    ///
    /// The implementation should fetch that exact revision (an immutable address where the
    /// origin has one) and fail rather than send another revision's bytes; the pipeline checks
    /// the length and SHA-256 either way. A write to `sink` fails once more bytes arrive than
    /// the snapshot declared; return that error (as [`OriginError::Sink`]) without retrying.
    fn download(&self, snapshot: &SnapshotInfo, sink: &mut dyn Write) -> Result<(), OriginError>;

    /// Offers `bytes` as the origin's new current revision, if its current one is still `base`
    /// (`None`: if it holds no copy yet). A lost race is [`Pushed::Conflict`], not an error, and
    /// writes nothing.
    fn push(&self, bytes: &[u8], base: Option<&str>) -> Result<Pushed, OriginError>;

    /// [`download`](Origin::download), given the file the client has (`local`: the
    /// secrets-free export of its copy, and the revision it is, if it is one), so an origin that offers delta pulls (issue 21) sends
    /// only the pages that file lacks. Every other origin, and any failure of the delta, falls
    /// back to the whole download; the pipeline checks the length and SHA-256 either way.
    fn download_from(
        &self,
        snapshot: &SnapshotInfo,
        local: Option<LocalCopy<'_>>,
        sink: &mut dyn Write,
    ) -> Result<(), OriginError> {
        let _ = local;
        self.download(snapshot, sink)
    }

    /// [`push`](Origin::push), given what this client holds of `base` as it last synced it
    /// ([`SyncedBase`]), so an origin that offers delta pushes (issue 21) is sent only the
    /// changed pages, without first being told every page of the new image, and with the base's
    /// bytes those pages compressed against the base's (issue 38). Wrong ids or bytes cost a
    /// fallback, never a wrong image: the origin checks what it assembles against the image's
    /// SHA-256. `pages` is the manifest of `bytes` with shapes where the caller has made it (to
    /// keep it for the next push), so it is not made twice.
    fn push_from(
        &self,
        bytes: &[u8],
        base: Option<&str>,
        synced: Option<SyncedBase<'_>>,
        pages: Option<&snug_delta::Manifest>,
    ) -> Result<Pushed, OriginError> {
        let _ = (synced, pages);
        self.push(bytes, base)
    }

    /// What this origin moved so far: body bytes sent and received, and whether a transfer went
    /// by difference. An origin that moves no bytes over a network reports zeros.
    fn traffic(&self) -> Traffic {
        Traffic::default()
    }

    /// Returns the origin's current revision, or `None` when it holds no copy yet.
    fn head(&self) -> Result<Option<SnapshotInfo>, OriginError> {
        match self.describe(&Selector::Current) {
            Ok(info) => Ok(Some(info)),
            Err(OriginError::Empty) => Ok(None),
            Err(err) => Err(err),
        }
    }
}

/// The file a client has, as a source for a delta pull.
#[derive(Debug, Clone, Copy)]
pub struct LocalCopy<'a> {
    /// The secrets-free export of the local copy (what a push would send).
    pub bytes: &'a [u8],
    /// The origin's revision these bytes are, when known (the push state names it and the file
    /// has not changed since), so the origin can use its own copy of them; a delta that does
    /// not rebuild the revision from them says they were not.
    pub revision: Option<&'a str>,
    /// The revision this device last synced with the origin and that revision's pages as it
    /// recorded them (`push_state::load_pages`), when known: the bytes are that revision's but
    /// for the pages that differ, which is all a hub origin then has to name (issue 38).
    pub synced: Option<(&'a str, &'a snug_delta::Manifest)>,
}

/// What a client holds of the base it last synced with an origin.
#[derive(Debug, Clone, Copy)]
pub struct SyncedBase<'a> {
    /// Its page ids and, where recorded, shapes ([`crate::push_state::load_pages`]).
    pub pages: &'a snug_delta::Manifest,
    /// Its bytes, where kept ([`crate::push_state::load_base`]): exactly the origin's copy.
    pub image: Option<&'a [u8]>,
}

/// What an origin moved over the network (request and response bodies; headers not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Body bytes sent.
    pub sent: u64,
    /// Body bytes received.
    pub received: u64,
    /// Whether a push or pull went by difference (issue 21).
    pub delta: bool,
}

/// Why an origin could not describe, deliver or take a revision.
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
    /// The origin refused the credentials: the token sent, or the request without one.
    #[error("{}", unauthorized_message(*token_sent, detail))]
    Unauthorized {
        /// What the origin answered.
        detail: String,
        /// Whether a token was sent (it was refused) or none (the origin wants one).
        token_sent: bool,
    },
    /// The origin answered 429 for longer than this client waits (each `Retry-After` honoured,
    /// within a bound); nothing was changed.
    #[error("the origin is rate limiting this client ({detail}); wait a little and run this again")]
    RateLimited {
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
    /// A directory origin that does not exist (`snug sync origin DIR --init` creates one).
    #[error("{} is not a directory", path.display())]
    NoOrigin {
        /// The directory.
        path: std::path::PathBuf,
    },
    /// A directory origin's file could not be read or written.
    #[error("cannot {action} {}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The operating system's random number generator failed (a new revision token needs it).
    #[error("the system random number generator failed")]
    EntropyUnavailable,
    /// Any other refusal, with a stable code from the hub's vocabulary (its JSON `code` where
    /// the registry knows it, such as `OVERLOADED` or `HOSTILE_SCHEMA`, else `SYNC_HTTP`).
    #[error("{detail}")]
    Other {
        /// The hub's word for it, as the registry knows it (`SYNC_HTTP` where it does not).
        reason: &'static snug_reasons::Reason,
        /// The HTTP status (0 where there was none).
        status: u16,
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

fn unauthorized_message(token_sent: bool, detail: &str) -> String {
    if token_sent {
        format!(
            "the origin refused the token ({detail}): it is wrong, revoked or another hub's; \
             ask the hub's operator for a new one (snug-hub users token NAME)"
        )
    } else {
        format!(
            "the origin wants a token ({detail}) and none was given: set SNUG_TOKEN or pass \
             --token-file FILE"
        )
    }
}

impl OriginError {
    /// Whether the origin could not be asked or did not answer usably (unreachable, a broken or
    /// garbled answer, rate limited, overloaded or down): the request may succeed later, and
    /// nothing was decided. The CLI gives these their own exit code.
    pub fn is_unavailable(&self) -> bool {
        match self {
            OriginError::Unreachable { .. }
            | OriginError::BadResponse { .. }
            | OriginError::Interrupted { .. }
            | OriginError::RateLimited { .. } => true,
            OriginError::Other { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }

    /// Returns the stable machine reason (the `snug sync` vocabulary, shared with the hub's
    /// reference client: `SYNC_NETWORK`, `SYNC_AUTH`, `SYNC_BAD_RESPONSE`, …).
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            OriginError::Empty => &snug_reasons::restore::SYNC_ORIGIN_EMPTY,
            OriginError::UnknownRevision { .. } => &snug_reasons::restore::REVISION_NOT_FOUND,
            OriginError::Unauthorized { .. } => &snug_reasons::restore::SYNC_AUTH,
            OriginError::RateLimited { .. } => &snug_reasons::gateway::RATE_LIMITED,
            OriginError::Unreachable { .. } => &snug_reasons::restore::SYNC_NETWORK,
            OriginError::Moved { .. } => &snug_reasons::restore::ORIGIN_MOVED,
            OriginError::NoOrigin { .. } => &snug_reasons::restore::NO_ORIGIN,
            OriginError::Io { .. } => &snug_reasons::cli::IO,
            OriginError::EntropyUnavailable => &snug_reasons::cli::ENTROPY_UNAVAILABLE,
            OriginError::Other { reason, .. } => reason,
            OriginError::BadResponse { .. } => &snug_reasons::restore::SYNC_BAD_RESPONSE,
            OriginError::Inconsistent { .. } => &snug_reasons::restore::ORIGIN_INCONSISTENT,
            OriginError::Interrupted { .. } => &snug_reasons::restore::DOWNLOAD_INTERRUPTED,
            OriginError::Sink(_) => &snug_reasons::cli::IO,
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
