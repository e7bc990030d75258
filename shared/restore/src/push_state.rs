//! The sync-state sidecar (spec §8.2, notes (d) "Sync loop"): what a file knows of its syncs lives
//! beside it, never inside it, so the file never contains its own revision and recording a sync
//! never changes the image.
//!
//! One record per origin (issue 35), keyed by the origin's identity ([`OriginId`]): the revision
//! the file last synced as there, the origin's SHA-256 of that revision, the push gate's hash of
//! the file as it then was, and when. A file synced with a directory and a hub has two records,
//! and neither is ever read as the other's: revision tokens repeat across origins, identities do
//! not. Against an origin it holds no record for, a file has never synced there.
//!
//! Format: JSON, `{"format": "snug-sync-state/2", "lastOrigin"?, "origins": {id: record},
//! "unclaimed"?}`. Releases before it wrote `SNUGSYNC1\n` and one origin-less record
//! (`{"lastPushedRevision", "lastPushedHash", "lastSyncAt"}`): that record is read as
//! [`Unclaimed`] and adopted ([`SyncState::adopt`]) by the first origin whose head is exactly the
//! recorded revision with the recorded SHA-256; until then it stays in the file, and no origin is
//! taken to be in it. Anything unreadable is the empty state, which means "never synced": the
//! safe reading, since the sync loop then compares with the origin instead of trusting a stale
//! anchor. Releases before this format read it as empty too.
//!
//! The file name is `<user file>.sync.json`, under the §10 read-and-adopt rule: beside
//! `user.snug`, the sidecar of a not-yet-adopted `user.sqlite` (`user.sqlite.sync.json`) is
//! read until `user.snug.sync.json` exists, and writes always go to the canonical name. Once
//! `user.snug` exists, a `user.sqlite` beside it is the user's backup (`snug_schema::Standing`):
//! that legacy sidecar is the lineage `user.snug` continues, so the backup has no sync state at
//! all; it reads as never synced and none is ever saved for it.

use std::{
    collections::BTreeMap,
    fs::File,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use snug_files::write_atomically;
use snug_schema::{
    LEGACY_USER_FILE, LEGACY_USER_FILE_EXTENSION, SYNC_SIDECAR_SUFFIX, Standing, USER_FILE,
    UserFile, resolve_derived, resolve_given,
};

use crate::{OriginId, SnapshotInfo, lock::open_lock_file};

/// The leading bytes of the sidecar written by releases before [`FORMAT`]; still read.
pub const SYNC_MAGIC: &[u8] = b"SNUGSYNC1\n";

/// The sidecar's format word.
pub const FORMAT: &str = "snug-sync-state/2";

/// What a file last did with one origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OriginState {
    /// Where the origin was reached (its URL or path), for messages and for `--origin` left out.
    pub address: String,
    /// The origin's revision the file last synced as (pushed, pulled or found already there).
    pub revision: String,
    /// The origin's SHA-256 of that revision (hex).
    pub sha256: String,
    /// The push gate's hash of the file as it was at that sync (hex): the file is unchanged
    /// since while its gate hash is this.
    pub content_hash: String,
    /// When (ISO-8601, UTC).
    pub synced_at: String,
}

/// A record written by a release that kept one state for every origin: it names no origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unclaimed {
    /// The revision last pushed or pulled, at whichever origin that was.
    #[serde(rename = "lastPushedRevision")]
    pub revision: String,
    /// The push gate's hash recorded with it (hex).
    #[serde(rename = "lastPushedHash")]
    pub hash: String,
    /// When.
    #[serde(
        default,
        rename = "lastSyncAt",
        skip_serializing_if = "Option::is_none"
    )]
    pub synced_at: Option<String>,
}

/// What one file knows of its syncs: a record per origin, the origin it last synced with, and
/// a record of an earlier release's that no origin has claimed yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncState {
    origins: BTreeMap<String, OriginState>,
    /// The address of the origin the file last synced with, so a later command may leave
    /// `--origin` out.
    pub last_origin: Option<String>,
    /// An earlier release's record, until an origin adopts it.
    pub unclaimed: Option<Unclaimed>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Encoded<'a> {
    format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_origin: Option<&'a str>,
    origins: &'a BTreeMap<String, OriginState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unclaimed: Option<&'a Unclaimed>,
}

fn text(value: &serde_json::Value) -> Option<String> {
    value.as_str().map(str::to_owned)
}

impl SyncState {
    /// Reads a sidecar's bytes: this format, or an earlier release's (`SNUGSYNC1\n` and JSON,
    /// or bare JSON). Unreadable parts are left out rather than a reason to forget the rest; a
    /// sidecar that is no JSON object at all is the empty state.
    pub fn decode(bytes: &[u8]) -> SyncState {
        let json = bytes.strip_prefix(SYNC_MAGIC).unwrap_or(bytes);
        let Ok(serde_json::Value::Object(object)) = serde_json::from_slice(json) else {
            return SyncState::default();
        };
        let mut state = SyncState {
            last_origin: object.get("lastOrigin").and_then(text),
            ..SyncState::default()
        };
        if let Some(serde_json::Value::Object(origins)) = object.get("origins") {
            for (id, record) in origins {
                let record = serde_json::from_value::<OriginState>(record.clone());
                if let (Some(id), Ok(record)) = (OriginId::parse(id), record) {
                    state.origins.insert(id.as_str().to_owned(), record);
                }
            }
        }
        // An earlier release's record: top-level fields, or kept unclaimed by this format.
        let earlier = match object.get("unclaimed") {
            Some(serde_json::Value::Object(unclaimed)) => unclaimed.clone(),
            _ => object.clone(),
        };
        state.unclaimed = match (
            earlier.get("lastPushedRevision").and_then(text),
            earlier.get("lastPushedHash").and_then(text),
        ) {
            (Some(revision), Some(hash)) => Some(Unclaimed {
                revision,
                hash,
                synced_at: earlier.get("lastSyncAt").and_then(text),
            }),
            _ => None,
        };
        state
    }

    /// Returns the sidecar's bytes: compact JSON in this format.
    pub fn encode(&self) -> Vec<u8> {
        let encoded = Encoded {
            format: FORMAT,
            last_origin: self.last_origin.as_deref(),
            origins: &self.origins,
            unclaimed: self.unclaimed.as_ref(),
        };
        // Serializing strings and maps of strings cannot fail.
        serde_json::to_vec(&encoded).unwrap_or_default()
    }

    /// Returns whether the file never synced anywhere (and no earlier release recorded a sync).
    pub fn is_empty(&self) -> bool {
        self.origins.is_empty() && self.unclaimed.is_none()
    }

    /// The file's record at `origin`; `None`: it never synced there.
    pub fn at(&self, origin: &OriginId) -> Option<&OriginState> {
        self.origins.get(origin.as_str())
    }

    /// Every origin the file synced with, by identity.
    pub fn origins(&self) -> impl Iterator<Item = (&str, &OriginState)> {
        self.origins.iter().map(|(id, state)| (id.as_str(), state))
    }

    /// Records a sync with `origin`, which becomes the origin the file last synced with.
    pub fn record(&mut self, origin: &OriginId, state: OriginState) {
        self.last_origin = Some(state.address.clone());
        self.origins.insert(origin.as_str().to_owned(), state);
    }

    /// Adopts the earlier release's [`Unclaimed`] record for `origin`, if the file has no record
    /// there and the origin's `head` is exactly the recorded revision with the recorded SHA-256
    /// (what that release recorded as the hash of the pushed bytes); returns whether it did.
    /// Any other origin leaves it unclaimed: the file is then "never synced" there.
    pub fn adopt(&mut self, origin: &OriginId, address: &str, head: Option<&SnapshotInfo>) -> bool {
        let (Some(unclaimed), Some(head)) = (&self.unclaimed, head) else {
            return false;
        };
        if self.at(origin).is_some()
            || head.revision != unclaimed.revision
            || head.sha256_hex() != unclaimed.hash
        {
            return false;
        }
        let state = OriginState {
            address: address.to_owned(),
            revision: head.revision.clone(),
            sha256: head.sha256_hex(),
            content_hash: unclaimed.hash.clone(),
            synced_at: unclaimed.synced_at.clone().unwrap_or_default(),
        };
        self.unclaimed = None;
        self.record(origin, state);
        true
    }
}

/// Why the sidecar could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PushStateError {
    /// Reading or writing the sidecar failed.
    #[error("cannot access {path}")]
    Io {
        /// The sidecar.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is the legacy `user.sqlite` beside an existing `user.snug`: the user's backup,
    /// which has no push state of its own to record (the legacy sidecar belongs to `user.snug`).
    #[error(
        "{} is the backup left beside the adopted user.snug; it has no push state to record",
        path.display()
    )]
    LegacyBackup {
        /// The backup.
        path: PathBuf,
    },
}

impl PushStateError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            PushStateError::Io { .. } => &snug_reasons::cli::IO,
            PushStateError::LegacyBackup { .. } => &snug_reasons::restore::LEGACY_BACKUP,
        }
    }
}

/// Returns where the sidecar of `user_file` is read from and written to; `None` for a legacy
/// backup, which has none ([`Standing::Backup`]).
///
/// For `user.snug` and `user.sqlite` this is `snug-schema`'s [`resolve_derived`] rule exactly.
/// For any other name `<f>` it is `<f>.sync.json`; for `<stem>.snug`, a `<stem>.sqlite.sync.json`
/// written before the file was renamed is read until the canonical sidecar exists.
pub fn sidecar_location(user_file: &Path) -> Option<UserFile> {
    if resolve_given(user_file).standing == Standing::Backup {
        return None;
    }
    Some(own_sidecar_location(user_file))
}

fn own_sidecar_location(user_file: &Path) -> UserFile {
    let dir = match user_file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = user_file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name == USER_FILE || name == LEGACY_USER_FILE {
        return resolve_derived(dir, SYNC_SIDECAR_SUFFIX);
    }
    let write = dir.join(format!("{name}{SYNC_SIDECAR_SUFFIX}"));
    let legacy = Path::new(&name)
        .extension()
        .filter(|ext| ext.eq_ignore_ascii_case("snug"))
        .map(|_| {
            let stem = Path::new(&name)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            dir.join(format!(
                "{stem}.{LEGACY_USER_FILE_EXTENSION}{SYNC_SIDECAR_SUFFIX}"
            ))
        });
    let read = if write.exists() {
        Some(write.clone())
    } else {
        legacy.filter(|path| path.exists())
    };
    UserFile { read, write }
}

/// Returns the path of the lock a sync client holds while it reads and writes the sidecar of
/// `user_file` ([`SyncLock`]): the sidecar's canonical name with `.lock` for `.json`
/// (`notes.snug.sync.lock`), so every name of one user file, a legacy one being adopted too,
/// shares one lock. A legacy backup is a file of its own and has its own
/// (`user.sqlite.sync.lock`).
pub fn lock_location(user_file: &Path) -> PathBuf {
    match sidecar_location(user_file) {
        Some(sidecar) => sidecar.write.with_extension("lock"),
        None => {
            let mut name = user_file.as_os_str().to_owned();
            name.push(".sync.lock");
            PathBuf::from(name)
        }
    }
}

/// Reads the sync state of `user_file`; a missing or unreadable sidecar is the empty state, and
/// so is the state of a legacy backup.
pub fn load(user_file: &Path) -> Result<SyncState, PushStateError> {
    let Some(path) = sidecar_location(user_file).and_then(|sidecar| sidecar.read) else {
        return Ok(SyncState::default());
    };
    match std::fs::read(&path) {
        Ok(bytes) => Ok(SyncState::decode(&bytes)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(SyncState::default()),
        Err(source) => Err(PushStateError::Io { path, source }),
    }
}

/// Writes the sync state of `user_file` atomically to the canonical sidecar name, returning
/// it. The user file itself is never opened. A legacy backup is refused
/// ([`PushStateError::LegacyBackup`]): it has no sync state.
pub fn save(user_file: &Path, state: &SyncState) -> Result<PathBuf, PushStateError> {
    let path = sidecar_location(user_file)
        .ok_or_else(|| PushStateError::LegacyBackup {
            path: user_file.to_owned(),
        })?
        .write;
    write_atomically(&path, &state.encode()).map_err(|source| PushStateError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// The sync lock of one user file ([`lock_location`]), held exclusively while a client reads and
/// writes the file and its sidecar (two at once could leave one's file bound to the other's
/// revision), and removed when dropped, so a refused command leaves nothing behind.
///
/// A process that dies holding it releases it with its descriptors; the file it leaves is taken
/// over by the next client.
#[derive(Debug)]
pub struct SyncLock {
    file: File,
    path: PathBuf,
}

/// Why the sync lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum SyncLockError {
    /// Another client holds it. Nothing was done.
    #[error("{} is held by another sync", path.display())]
    Busy {
        /// The lock file.
        path: PathBuf,
    },
    /// The lock file could not be opened or locked.
    #[error("cannot {action} {}", path.display())]
    Io {
        /// `open` or `lock`.
        action: &'static str,
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl SyncLockError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            SyncLockError::Busy { .. } => &snug_reasons::restore::SYNC_IN_PROGRESS,
            SyncLockError::Io { .. } => &snug_reasons::cli::IO,
        }
    }
}

impl SyncLock {
    /// Takes the sync lock of `user_file`, or refuses at once ([`SyncLockError::Busy`]) when
    /// another client holds it; it never waits.
    pub fn try_acquire(user_file: &Path) -> Result<SyncLock, SyncLockError> {
        let path = lock_location(user_file);
        let io = |action, path: &Path| {
            let path = path.to_owned();
            move |source| SyncLockError::Io {
                action,
                path,
                source,
            }
        };
        loop {
            let file = open_lock_file(&path).map_err(io("open", &path))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(SyncLockError::Busy { path });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io("lock", &path)(e)),
            }
            // The holder before us removes the file before it lets go: if we locked a file that
            // is no longer at `path`, someone may already hold the one that is; open again.
            if names_same_file(&file, &path) {
                return Ok(SyncLock { file, path });
            }
        }
    }

    /// Returns the lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(unix)]
fn names_same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(held), Ok(named)) => held.dev() == named.dev() && held.ino() == named.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn names_same_file(_: &File, _: &Path) -> bool {
    true
}

impl Drop for SyncLock {
    fn drop(&mut self) {
        // Removed while still locked, so whoever opened it meanwhile sees it gone (above).
        if cfg!(unix) {
            let _ = std::fs::remove_file(&self.path);
        }
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests;

/// Magic of the page-ids sidecar; the one before origins were told apart (`SNUGPAGES1`) is
/// ignored, costing one fallback.
pub const PAGES_MAGIC: &[u8] = b"SNUGPAGES2\n";

/// Where `user_file`'s page-ids sidecar lives: `<user file>.sync.pages`, beside the sync state
/// (issue 21). `None` for a legacy backup, which has no sync state.
pub fn pages_location(user_file: &Path) -> Option<PathBuf> {
    let sidecar = sidecar_location(user_file)?.write;
    let name = sidecar
        .file_name()?
        .to_str()?
        .strip_suffix(".json")?
        .to_owned();
    Some(sidecar.with_file_name(format!("{name}.pages")))
}

/// Records the manifest of `image` (page ids and shapes), the bytes of `revision` as `origin`
/// holds them, so the next push from `user_file` can send only the pages that changed, and
/// patch those that only name moved pages (issue 21). A cache: any
/// failure to write it is ignored by callers, and a stale or damaged one only costs a fallback.
pub fn save_pages(
    user_file: &Path,
    origin: &OriginId,
    revision: &str,
    image: &[u8],
) -> Result<(), PushStateError> {
    let manifest = snug_delta::Manifest::with_shapes(image, snug_delta::page_size_of(image))
        .map_err(|err| PushStateError::Io {
            path: user_file.to_owned(),
            source: std::io::Error::other(err),
        })?;
    save_manifest(user_file, origin, revision, &manifest)
}

/// [`save_pages`], given the image's manifest with shapes, made already.
pub fn save_manifest(
    user_file: &Path,
    origin: &OriginId,
    revision: &str,
    manifest: &snug_delta::Manifest,
) -> Result<(), PushStateError> {
    let path = pages_location(user_file).ok_or_else(|| PushStateError::LegacyBackup {
        path: user_file.to_owned(),
    })?;
    let mut bytes = PAGES_MAGIC.to_vec();
    bytes.extend_from_slice(origin.as_str().as_bytes());
    bytes.push(b'\n');
    bytes.extend_from_slice(revision.as_bytes());
    bytes.push(b'\n');
    bytes.extend_from_slice(&manifest.encode());
    write_atomically(&path, &bytes).map_err(|source| PushStateError::Io { path, source })
}

/// The manifest recorded for `revision` at `origin` whose image has the SHA-256 `sha256_hex`
/// (the origin's record of that revision); `None` when there is none, it is another origin's,
/// revision's or image's, or the file does not parse. One recorded before shapes were has none.
pub fn load_pages(
    user_file: &Path,
    origin: &OriginId,
    revision: &str,
    sha256_hex: &str,
) -> Option<snug_delta::Manifest> {
    let bytes = std::fs::read(pages_location(user_file)?).ok()?;
    let rest = bytes.strip_prefix(PAGES_MAGIC)?;
    let (recorded_origin, rest) = split_line(rest)?;
    let (recorded_revision, rest) = split_line(rest)?;
    if recorded_origin != origin.as_str().as_bytes() || recorded_revision != revision.as_bytes() {
        return None;
    }
    let limits = snug_delta::Limits {
        max_length: snug_schema::MAX_USERDB_BYTES,
    };
    let manifest = snug_delta::Manifest::parse(rest, &limits).ok()?;
    (hex::encode(manifest.digest) == sha256_hex).then_some(manifest)
}

fn split_line(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let newline = bytes.iter().position(|b| *b == b'\n')?;
    Some((&bytes[..newline], &bytes[newline + 1..]))
}

/// Where `user_file`'s base copy lives: `<user file>.sync.base`, beside the page ids (issue 38).
/// `None` for a legacy backup, which has no sync state.
pub fn base_location(user_file: &Path) -> Option<PathBuf> {
    let pages = pages_location(user_file)?;
    let name = pages
        .file_name()?
        .to_str()?
        .strip_suffix(".pages")?
        .to_owned();
    Some(pages.with_file_name(format!("{name}.base")))
}

/// Keeps `image`, the bytes this file last synced as (what its page ids name), as the base of
/// the next push: with it, a changed page is sent compressed against the base's pages where the
/// edit happened, so rows an edit moved between pages do not travel again (issue 38). Only a
/// plain (unprotected) file's image is kept: it is the secrets-free export, no more private than
/// the file beside it, and created readable by its owner alone. A cache, like the page ids: a
/// failure to keep it costs bytes on the wire, never a wrong image.
pub fn save_base(user_file: &Path, image: &[u8]) -> Result<(), PushStateError> {
    let path = base_location(user_file).ok_or_else(|| PushStateError::LegacyBackup {
        path: user_file.to_owned(),
    })?;
    snug_files::write_atomically_with(&path, |file| {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        std::io::Write::write_all(file, image)
    })
    .map_err(|source| PushStateError::Io { path, source })
}

/// Forgets the base copy (a protected file keeps none); a missing one is no error.
pub fn forget_base(user_file: &Path) {
    if let Some(path) = base_location(user_file) {
        let _ = std::fs::remove_file(path);
    }
}

/// The kept base copy when it is exactly the image `pages` names (its length and SHA-256, which
/// [`load_pages`] checked against the origin's record of the revision); `None` otherwise.
pub fn load_base(user_file: &Path, pages: &snug_delta::Manifest) -> Option<Vec<u8>> {
    let path = base_location(user_file)?;
    if std::fs::metadata(&path).ok()?.len() != pages.geometry.length {
        return None;
    }
    let image = std::fs::read(path).ok()?;
    (snug_delta::sha256(&image) == pages.digest).then_some(image)
}
