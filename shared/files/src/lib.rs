//! Crash-safe replacement of files: temp file in the same directory, fsync, rename, fsync directory.
//!
//! Every writer of a user's bytes in Snug Hub goes through [`write_atomically`]: the CLI's outputs
//! and in-place commands, and later the embedded stores. A reader therefore sees either the old
//! file or the new one, never a torn mix, even across a power cut.
//!
//! [`sealed`] keeps immutable buffers (small ones freely, large ones within a budget) in sealed
//! memfds as well, so that a socket can send them without copying.
//!
//! What this crate deliberately does not do: lock files against concurrent writers (the last
//! rename wins, and callers that need compare-and-swap keep their own revision), or follow the
//! §10 naming rules (those belong to `snug-schema`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod format;
pub mod sealed;

use std::{
    fs::{self, File, OpenOptions},
    io::{self, Write},
    path::{Path, PathBuf},
};

/// Replaces `dest` with `bytes` atomically and durably.
///
/// The bytes are written to a temporary sibling (same directory, so the rename cannot cross file
/// systems), flushed with `fsync`, renamed over `dest`, and then the directory is `fsync`ed so the
/// rename itself survives a crash. On any error the temporary file is removed and `dest` is left
/// exactly as it was.
pub fn write_atomically(dest: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomically_with(dest, |file| file.write_all(bytes))
}

/// Like [`write_atomically`], but lets `fill` stream the content into the temporary file.
pub fn write_atomically_with(
    dest: &Path,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let temp = TempSibling::create(dest)?;
    let result = (|| {
        let mut file = OpenOptions::new().write(true).open(&temp.path)?;
        fill(&mut file)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temp.path, dest)?;
        sync_parent_dir(dest)
    })();
    match result {
        Ok(()) => {
            temp.disarm();
            Ok(())
        }
        Err(err) => Err(err),
    }
}

/// Creates `dest` with `bytes` atomically and durably, refusing (`AlreadyExists`) if `dest`
/// exists: the complete file is published with a hard link, which fails rather than replace a
/// file created meanwhile (a legacy file's adoption must never clobber the canonical one).
pub fn write_new_atomically(dest: &Path, bytes: &[u8]) -> io::Result<()> {
    let temp = TempSibling::create(dest)?;
    {
        let mut file = OpenOptions::new().write(true).open(&temp.path)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    // The temporary name is removed when `temp` drops; the link keeps the file.
    fs::hard_link(&temp.path, dest)?;
    sync_parent_dir(dest)
}

/// Flushes the directory holding `path`, which makes a completed rename or create durable.
pub fn sync_parent_dir(path: &Path) -> io::Result<()> {
    let parent = parent_dir(path);
    File::open(parent)?.sync_all()
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A temporary file beside its destination that removes itself unless disarmed.
///
/// The name starts with `.` and carries the destination's name plus a random suffix, so a crash
/// leaves an obviously stray file next to the user's own rather than anything that looks like it.
#[derive(Debug)]
pub struct TempSibling {
    path: PathBuf,
    armed: bool,
}

impl TempSibling {
    /// Creates a new, empty temporary file in `dest`'s directory.
    pub fn create(dest: &Path) -> io::Result<Self> {
        let dir = parent_dir(dest);
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "snug".to_owned());
        for _ in 0..16 {
            let mut suffix = [0u8; 6];
            getrandom::fill(&mut suffix).map_err(|e| io::Error::other(e.to_string()))?;
            let hex: String = suffix.iter().map(|b| format!("{b:02x}")).collect();
            let path = dir.join(format!(".{name}.{hex}.tmp"));
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(_) => return Ok(Self { path, armed: true }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "could not pick a free temporary file name",
        ))
    }

    /// The temporary file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the file: the caller has renamed it into place.
    pub fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for TempSibling {
    fn drop(&mut self) {
        if self.armed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests;
