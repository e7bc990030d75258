//! The directory origin: a personal origin that is a plain directory (a USB stick, a synced
//! folder), so two devices sharing it get a hub's conflict rules without any hub.
//!
//! The directory holds `user.snug` beside `user.snug.rev` (JSON: revision, SHA-256 hex, size),
//! with compare-and-swap under an exclusive `flock` on `user.snug.lock` (readers take it shared).
//! A revision token is `r<n>-<16 hex>`, `n` counting up from the one it replaces. It keeps only its
//! current revision. The storage version is not recorded: `describe` reads it from the image's
//! header, and `download` checks size and SHA-256 under the lock, so a torn origin is reported as
//! `ORIGIN_INCONSISTENT` rather than as a corrupt download.
//! A personal origin may hold what a hub never does (§11.3): a protected copy, and the credentials
//! on request; what it is sent is the caller's decision ([`Origin::is_personal`]).
//!
//! Its identity (issue 35) is kept beside the image in `user.snug.origin` (JSON: 32 random hex
//! digits), written at `snug sync origin DIR --init` and, for a directory an earlier release made,
//! on first use, under the exclusive lock; every device that reaches the directory reads the same
//! one. A directory that cannot be written to and has none is known by its path.
//!
//! It keeps no history: a forced push that overwrites its current image first has the image
//! [`preserve`](Origin::preserve)d beside it as `user.snug.replaced-<revision>-<UTC time>.snug`.

use std::{
    fs::File,
    io::{Read as _, Write},
    path::{Path, PathBuf},
};

use sha2::{Digest as _, Sha256};

use crate::lock::open_lock_file;

use super::{
    AddressKind, DOWNLOAD_BUFFER, Origin, OriginError, OriginId, Pushed, Selector, SnapshotInfo,
    header_storage_version,
};

/// The image and revision file names of a directory origin.
const DIR_IMAGE: &str = "user.snug";
const DIR_REVISION: &str = "user.snug.rev";
const DIR_LOCK: &str = "user.snug.lock";
const DIR_IDENTITY: &str = "user.snug.origin";

#[derive(serde::Serialize, serde::Deserialize)]
struct IdentityFile {
    origin: String,
}

/// A personal origin in a plain directory: `user.snug` and `user.snug.rev`, compare-and-swap under
/// an exclusive lock on `user.snug.lock`.
///
/// A push writes the image (atomically) and then the revision file (atomically); the revision file
/// is the commit point and names the image's SHA-256 and size. A push interrupted between the two
/// leaves an image that does not match its revision file: readers report that as
/// `ORIGIN_INCONSISTENT` rather than trusting either, and the interrupted device's retry (same
/// base) completes it. The storage version is not recorded: it is read from the image's header.
#[derive(Debug)]
pub struct DirOrigin {
    dir: PathBuf,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RevisionFile {
    revision: String,
    sha256: String,
    size: u64,
}

fn dir_io(action: &'static str, path: &Path, source: std::io::Error) -> OriginError {
    OriginError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

impl DirOrigin {
    /// Returns the origin in `dir`. Nothing is read until the first call; a missing directory
    /// is refused then (`NO_ORIGIN`), never created.
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// Returns the directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock(&self, exclusive: bool) -> Result<File, OriginError> {
        let path = self.dir.join(DIR_LOCK);
        if !self.dir.is_dir() {
            return Err(OriginError::NoOrigin {
                path: self.dir.clone(),
            });
        }
        let file = open_lock_file(&path).map_err(|e| dir_io("open", &path, e))?;
        let locked = if exclusive {
            file.lock()
        } else {
            file.lock_shared()
        };
        locked.map_err(|e| dir_io("lock", &path, e))?;
        Ok(file)
    }

    fn current(&self) -> Result<Option<RevisionFile>, OriginError> {
        let path = self.dir.join(DIR_REVISION);
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|_| OriginError::Inconsistent {
                        detail: format!("{} is not a revision file", path.display()),
                    })
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                if self.dir.join(DIR_IMAGE).exists() {
                    return Err(OriginError::Inconsistent {
                        detail: format!(
                            "{} has {DIR_IMAGE} but no {DIR_REVISION}: a first push was interrupted; push again",
                            self.dir.display()
                        ),
                    });
                }
                Ok(None)
            }
            Err(err) => Err(dir_io("read", &path, err)),
        }
    }

    /// Gives the directory an identity if it has none (`snug sync origin DIR --init`), and
    /// returns it.
    pub fn init(&self) -> Result<OriginId, OriginError> {
        match self.kept_identity()? {
            Some(identity) => Ok(identity),
            None => self.create_identity(),
        }
    }

    fn kept_identity(&self) -> Result<Option<OriginId>, OriginError> {
        let path = self.dir.join(DIR_IDENTITY);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<IdentityFile>(&bytes)
                .ok()
                .and_then(|file| OriginId::directory(&file.origin))
                .map(Some)
                .ok_or_else(|| OriginError::Inconsistent {
                    detail: format!(
                        "{} is not an origin identity (JSON {{\"origin\": 32 hex digits}})",
                        path.display()
                    ),
                }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(dir_io("read", &path, err)),
        }
    }

    /// Writes a new identity under the exclusive lock, unless another device wrote one first.
    fn create_identity(&self) -> Result<OriginId, OriginError> {
        let _lock = self.lock(true)?;
        if let Some(identity) = self.kept_identity()? {
            return Ok(identity);
        }
        let mut random = [0u8; 16];
        getrandom::fill(&mut random).map_err(|_| OriginError::EntropyUnavailable)?;
        let origin = hex::encode(random);
        let path = self.dir.join(DIR_IDENTITY);
        let record = serde_json::to_vec(&IdentityFile {
            origin: origin.clone(),
        })
        .unwrap_or_default();
        snug_files::write_atomically(&path, &record).map_err(|e| dir_io("write", &path, e))?;
        OriginId::directory(&origin).ok_or(OriginError::EntropyUnavailable)
    }

    fn torn(&self) -> OriginError {
        OriginError::Inconsistent {
            detail: format!(
                "{} does not match {DIR_REVISION}: a push was interrupted; retry after it is repeated",
                self.dir.join(DIR_IMAGE).display()
            ),
        }
    }
}

impl Origin for DirOrigin {
    /// Returns the directory's path.
    fn name(&self) -> String {
        self.dir.display().to_string()
    }

    fn is_personal(&self) -> bool {
        true
    }

    fn identity(&self) -> Result<OriginId, OriginError> {
        if !self.dir.is_dir() {
            return Err(OriginError::NoOrigin {
                path: self.dir.clone(),
            });
        }
        if let Some(identity) = self.kept_identity()? {
            return Ok(identity);
        }
        match self.create_identity() {
            Ok(identity) => Ok(identity),
            // A directory this device may only read (a mounted backup) is known by its path.
            Err(OriginError::Io { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
                ) =>
            {
                let path = std::fs::canonicalize(&self.dir).unwrap_or_else(|_| self.dir.clone());
                Ok(OriginId::address(
                    AddressKind::Path,
                    &path.display().to_string(),
                ))
            }
            Err(err) => Err(err),
        }
    }

    fn keeps_history(&self) -> bool {
        false
    }

    fn preserve(&self, head: &SnapshotInfo) -> Result<Option<String>, OriginError> {
        let _lock = self.lock(false)?;
        let image = self.dir.join(DIR_IMAGE);
        let bytes = std::fs::read(&image).map_err(|e| dir_io("read", &image, e))?;
        if bytes.len() as u64 != head.size || Sha256::digest(&bytes).as_slice() != head.sha256 {
            // Not the head that was described: the push after this will be refused as a
            // conflict, so there is nothing to keep.
            return Ok(None);
        }
        let kept =
            crate::keep::keep_beside(&image, &head.revision, &bytes, &snug_schema::SystemClock)
                .map_err(|e| dir_io("keep a copy of", &image, e))?;
        Ok(Some(kept.display().to_string()))
    }

    fn describe(&self, which: &Selector) -> Result<SnapshotInfo, OriginError> {
        let _lock = self.lock(false)?;
        let rev = self.current()?.ok_or(OriginError::Empty)?;
        if let Selector::Revision(asked) = which
            && *asked != rev.revision
        {
            // A directory keeps only its current revision.
            return Err(OriginError::UnknownRevision {
                revision: asked.clone(),
            });
        }
        let sha256 = hex::decode(&rev.sha256)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| self.torn())?;
        let path = self.dir.join(DIR_IMAGE);
        let mut header = Vec::with_capacity(100);
        File::open(&path)
            .and_then(|f| f.take(100).read_to_end(&mut header))
            .map_err(|e| dir_io("read", &path, e))?;
        let storage_version = header_storage_version(&header).and_then(|v| u32::try_from(v).ok());
        Ok(SnapshotInfo {
            revision: rev.revision,
            sha256,
            size: rev.size,
            storage_version,
        })
    }

    fn download(&self, snapshot: &SnapshotInfo, sink: &mut dyn Write) -> Result<(), OriginError> {
        let _lock = self.lock(false)?;
        let rev = self.current()?.ok_or(OriginError::Empty)?;
        if rev.revision != snapshot.revision {
            return Err(OriginError::Moved {
                revision: snapshot.revision.clone(),
                current: rev.revision,
            });
        }
        let path = self.dir.join(DIR_IMAGE);
        let mut file = File::open(&path).map_err(|e| dir_io("read", &path, e))?;
        // Checked here, under the lock, so a torn origin is reported as what it is rather than as
        // a corrupt download.
        let len = file.metadata().map_err(|e| dir_io("read", &path, e))?.len();
        if len != rev.size {
            return Err(self.torn());
        }
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; DOWNLOAD_BUFFER];
        loop {
            let n = file
                .read(&mut buffer)
                .map_err(|e| dir_io("read", &path, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            sink.write_all(&buffer[..n]).map_err(OriginError::Sink)?;
        }
        if hex::encode(hasher.finalize()) != rev.sha256 {
            return Err(self.torn());
        }
        Ok(())
    }

    fn push(&self, bytes: &[u8], base: Option<&str>) -> Result<Pushed, OriginError> {
        let _lock = self.lock(true)?;
        let current = match self.current() {
            Ok(current) => current,
            // An interrupted first push left an image and no revision file: a first push may
            // complete it.
            Err(OriginError::Inconsistent { .. })
                if base.is_none() && !self.dir.join(DIR_REVISION).exists() =>
            {
                None
            }
            Err(err) => return Err(err),
        };
        let matches = match (&current, base) {
            (None, None) => true,
            (Some(current), Some(base)) => current.revision == base,
            _ => false,
        };
        if !matches {
            return Ok(Pushed::Conflict {
                current: current.map(|c| c.revision),
            });
        }
        let count = current
            .as_ref()
            .and_then(|c| {
                c.revision
                    .strip_prefix('r')?
                    .split('-')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0);
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|_| OriginError::EntropyUnavailable)?;
        let revision = format!("r{}-{}", count + 1, hex::encode(random));
        let image_path = self.dir.join(DIR_IMAGE);
        snug_files::write_atomically(&image_path, bytes)
            .map_err(|e| dir_io("write", &image_path, e))?;
        let record = RevisionFile {
            revision: revision.clone(),
            sha256: hex::encode(Sha256::digest(bytes)),
            size: bytes.len() as u64,
        };
        let record = serde_json::to_vec_pretty(&record).unwrap_or_default();
        let rev_path = self.dir.join(DIR_REVISION);
        snug_files::write_atomically(&rev_path, &record)
            .map_err(|e| dir_io("write", &rev_path, e))?;
        Ok(Pushed::Accepted { revision })
    }
}

#[cfg(test)]
mod tests;
