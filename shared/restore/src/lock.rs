//! Lock files, for the push-state sidecar's sync lock and the directory origin's lock: their
//! contents are never used, only the advisory lock on them (`flock` where there is one).

use std::{fs::File, path::Path};

/// Opens a lock file, creating it empty if it is missing.
pub(crate) fn open_lock_file(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}
