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

use std::{
    fs::File,
    io::{Read as _, Write},
    path::{Path, PathBuf},
};

use sha2::{Digest as _, Sha256};

use crate::lock::open_lock_file;

use super::{
    DOWNLOAD_BUFFER, Origin, OriginError, Pushed, Selector, SnapshotInfo, header_storage_version,
};

/// The image and revision file names of a directory origin.
const DIR_IMAGE: &str = "user.snug";
const DIR_REVISION: &str = "user.snug.rev";
const DIR_LOCK: &str = "user.snug.lock";

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
