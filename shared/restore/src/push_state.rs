//! The push-state sidecar (spec §8.2, notes (d) "Sync loop"): the last pushed revision and
//! hash live beside the user file, never inside it, so the file never contains its own
//! revision and recording a push never changes the image.
//!
//! Format: `SNUGSYNC1\n` followed by JSON `{"lastPushedRevision"?, "lastPushedHash"?,
//! "lastSyncAt"?}`. Bare JSON (no magic) is accepted on read; anything unreadable is the empty
//! state, which means "never pushed" — the safe reading, since the sync loop then compares
//! with the origin instead of trusting a stale anchor.
//!
//! The file name is `<user file>.sync.json`, under the §10 read-and-adopt rule: beside
//! `user.snug`, the sidecar of a not-yet-adopted `user.sqlite` (`user.sqlite.sync.json`) is
//! read until `user.snug.sync.json` exists, and writes always go to the canonical name. Once
//! `user.snug` exists, a `user.sqlite` beside it is the user's backup (`snug_schema::Standing`):
//! that legacy sidecar is the lineage `user.snug` continues, so the backup has no push state at
//! all; it reads as never pushed and none is ever saved for it.

use std::{
    fs::File,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use snug_files::write_atomically;
use snug_schema::{
    LEGACY_USER_FILE, LEGACY_USER_FILE_EXTENSION, SYNC_SIDECAR_SUFFIX, Standing, USER_FILE,
    UserFile, resolve_derived, resolve_given,
};

use crate::lock::open_lock_file;

/// The sidecar's leading bytes.
pub const SYNC_MAGIC: &[u8] = b"SNUGSYNC1\n";

/// What the sync loop last pushed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushState {
    /// The origin's revision (ETag) after the last successful push.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pushed_revision: Option<String>,
    /// SHA-256 hex of the plaintext last pushed (the no-change gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pushed_hash: Option<String>,
    /// ISO-8601 time of the last sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_at: Option<String>,
}

/// Tolerant field reading: a field of the wrong type is absent rather than a reason to forget
/// the whole state.
#[derive(Deserialize)]
struct RawState {
    #[serde(default, rename = "lastPushedRevision")]
    last_pushed_revision: serde_json::Value,
    #[serde(default, rename = "lastPushedHash")]
    last_pushed_hash: serde_json::Value,
    #[serde(default, rename = "lastSyncAt")]
    last_sync_at: serde_json::Value,
}

fn text(value: serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s),
        _ => None,
    }
}

impl PushState {
    /// Reads a sidecar's bytes: `SNUGSYNC1\n` + JSON, or bare JSON. Anything else (including
    /// JSON that is not an object) is the empty state.
    pub fn decode(bytes: &[u8]) -> PushState {
        let json = bytes.strip_prefix(SYNC_MAGIC).unwrap_or(bytes);
        match serde_json::from_slice::<RawState>(json) {
            Ok(raw) => PushState {
                last_pushed_revision: text(raw.last_pushed_revision),
                last_pushed_hash: text(raw.last_pushed_hash),
                last_sync_at: text(raw.last_sync_at),
            },
            Err(_) => PushState::default(),
        }
    }

    /// Returns the sidecar's bytes: `SNUGSYNC1\n` + compact JSON, absent fields omitted.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = SYNC_MAGIC.to_vec();
        // Serializing three optional strings cannot fail.
        let _ = serde_json::to_writer(&mut bytes, self);
        bytes
    }

    /// Returns whether nothing was ever pushed.
    pub fn is_empty(&self) -> bool {
        *self == PushState::default()
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
    pub fn reason(&self) -> &'static str {
        match self {
            PushStateError::Io { .. } => snug_reasons::cli::IO.name,
            PushStateError::LegacyBackup { .. } => snug_reasons::restore::LEGACY_BACKUP.name,
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

/// Reads the push state of `user_file`; a missing or unreadable sidecar is the empty state, and
/// so is the state of a legacy backup.
pub fn load(user_file: &Path) -> Result<PushState, PushStateError> {
    let Some(path) = sidecar_location(user_file).and_then(|sidecar| sidecar.read) else {
        return Ok(PushState::default());
    };
    match std::fs::read(&path) {
        Ok(bytes) => Ok(PushState::decode(&bytes)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(PushState::default()),
        Err(source) => Err(PushStateError::Io { path, source }),
    }
}

/// Writes the push state of `user_file` atomically to the canonical sidecar name, returning
/// it. The user file itself is never opened. A legacy backup is refused
/// ([`PushStateError::LegacyBackup`]): it has no push state.
pub fn save(user_file: &Path, state: &PushState) -> Result<PathBuf, PushStateError> {
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
    pub fn reason(&self) -> &'static str {
        match self {
            SyncLockError::Busy { .. } => snug_reasons::restore::SYNC_IN_PROGRESS.name,
            SyncLockError::Io { .. } => snug_reasons::cli::IO.name,
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

/// Magic of the page-ids sidecar.
pub const PAGES_MAGIC: &[u8] = b"SNUGPAGES1\n";

/// Where `user_file`'s page-ids sidecar lives: `<user file>.sync.pages`, beside the push state
/// (issue 21). `None` for a legacy backup, which has no push state.
pub fn pages_location(user_file: &Path) -> Option<PathBuf> {
    let sidecar = sidecar_location(user_file)?.write;
    let name = sidecar
        .file_name()?
        .to_str()?
        .strip_suffix(".json")?
        .to_owned();
    Some(sidecar.with_file_name(format!("{name}.pages")))
}

/// Records the manifest of `image` (page ids and shapes), the bytes of `revision` as the origin
/// holds them, so the next push from `user_file` can send only the pages that changed, and
/// patch those that only name moved pages (issue 21). A cache: any
/// failure to write it is ignored by callers, and a stale or damaged one only costs a fallback.
pub fn save_pages(user_file: &Path, revision: &str, image: &[u8]) -> Result<(), PushStateError> {
    let manifest = snug_delta::Manifest::with_shapes(image, snug_delta::page_size_of(image))
        .map_err(|err| PushStateError::Io {
            path: user_file.to_owned(),
            source: std::io::Error::other(err),
        })?;
    save_manifest(user_file, revision, &manifest)
}

/// [`save_pages`], given the image's manifest with shapes, made already.
pub fn save_manifest(
    user_file: &Path,
    revision: &str,
    manifest: &snug_delta::Manifest,
) -> Result<(), PushStateError> {
    let path = pages_location(user_file).ok_or_else(|| PushStateError::LegacyBackup {
        path: user_file.to_owned(),
    })?;
    let mut bytes = PAGES_MAGIC.to_vec();
    bytes.extend_from_slice(revision.as_bytes());
    bytes.push(b'\n');
    bytes.extend_from_slice(&manifest.encode());
    write_atomically(&path, &bytes).map_err(|source| PushStateError::Io { path, source })
}

/// The manifest recorded for `revision` whose image has the SHA-256 `sha256_hex` (the origin's
/// record of that revision); `None` when there is none, it is another revision's or image's,
/// or the file does not parse. One recorded before shapes were has none.
pub fn load_pages(
    user_file: &Path,
    revision: &str,
    sha256_hex: &str,
) -> Option<snug_delta::Manifest> {
    let bytes = std::fs::read(pages_location(user_file)?).ok()?;
    let rest = bytes.strip_prefix(PAGES_MAGIC)?;
    let newline = rest.iter().position(|b| *b == b'\n')?;
    if &rest[..newline] != revision.as_bytes() {
        return None;
    }
    let limits = snug_delta::Limits {
        max_length: snug_schema::MAX_USERDB_BYTES,
    };
    let manifest = snug_delta::Manifest::parse(&rest[newline + 1..], &limits).ok()?;
    (hex::encode(manifest.digest) == sha256_hex).then_some(manifest)
}
