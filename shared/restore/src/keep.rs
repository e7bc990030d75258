//! Copies kept before anything of the user's is replaced (issue 35): nothing a sync replaces is
//! lost without a copy.
//!
//! A pull that replaces a file holding changes its origin lacks (`--force`) first writes the
//! file's bytes as they are on disk beside it, and a forced push to an origin that keeps no
//! history first has the origin keep its head. Either copy is named for what it is and where it
//! came from: `<file name>.replaced-<revision>-<UTC time>.snug`, where the revision is the one
//! the bytes were last synced as (`unsynced` for a file that never was), so the copy sorts next
//! to the file it was taken from and its name says which file, which revision and when (§10: a
//! derived name follows the file). The bytes are copied exactly: a protected file's copy is the
//! same container, as protected as the file was. A copy is created new, never over another file,
//! and made durable before the replacement goes ahead.

use std::{
    fs::OpenOptions,
    io::{self, Write as _},
    path::{Path, PathBuf},
};

use snug_schema::Clock;

/// The label of a copy of a file that was never synced with the origin replacing it.
pub const UNSYNCED: &str = "unsynced";

/// Writes `bytes` beside `file` under its replaced-copy name (see the module docs), returning
/// the path. `revision` is what the bytes were last synced as; anything that is not a plausible
/// revision token becomes [`UNSYNCED`], so a name never carries a path separator.
pub fn keep_beside(
    file: &Path,
    revision: &str,
    bytes: &[u8],
    clock: &dyn Clock,
) -> io::Result<PathBuf> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "user.snug".to_owned());
    let label = if revision.is_empty()
        || revision.len() > 128
        || !revision
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
    {
        UNSYNCED
    } else {
        revision
    };
    // `2026-12-06T18:00:00.123Z` as `20261206T180000.123Z`: no colons, which some file systems
    // refuse, and still sorted by time.
    let stamp: String = clock
        .timestamp()
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut attempt = 0u32;
    loop {
        let suffix = if attempt == 0 {
            String::new()
        } else {
            format!("-{attempt}")
        };
        let path = dir.join(format!("{name}.replaced-{label}-{stamp}{suffix}.snug"));
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut out) => {
                let written = out.write_all(bytes).and_then(|()| out.sync_all());
                if let Err(err) = written {
                    let _ = std::fs::remove_file(&path);
                    return Err(err);
                }
                snug_files::sync_parent_dir(&path)?;
                return Ok(path);
            }
            // Two copies in one millisecond: the second gets a number.
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => {
                attempt += 1;
            }
            Err(err) => return Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_named_for_its_file_revision_and_time_and_never_overwrites() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("user.snug");
        let clock = snug_schema::SteppingClock::frozen_at_unix_ms(1_796_500_800_123);
        let first = keep_beside(&file, "r3-00ff", b"one", &clock).expect("keep");
        let second = keep_beside(&file, "r3-00ff", b"two", &clock).expect("keep");
        let odd = keep_beside(&file, "../../etc", b"three", &clock).expect("keep");
        let names: Vec<String> = [&first, &second, &odd]
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names[0],
            "user.snug.replaced-r3-00ff-20261205T200000.123Z.snug"
        );
        assert_eq!(
            names[1],
            "user.snug.replaced-r3-00ff-20261205T200000.123Z-1.snug"
        );
        assert_eq!(
            names[2],
            "user.snug.replaced-unsynced-20261205T200000.123Z.snug"
        );
        assert_eq!(std::fs::read(&first).expect("read"), b"one");
        assert_eq!(std::fs::read(&second).expect("read"), b"two");
        assert!(odd.starts_with(dir.path()));
    }
}
