//! File naming (spec §10): `user.snug` is canonical, a legacy `user.sqlite` is read and adopted.
//!
//! Read-and-adopt: when only the legacy file exists it is read, and the next write creates the
//! canonical file. Nothing is ever renamed, copied over or deleted; the legacy file stays as the
//! user's own backup, and once the canonical file exists it takes precedence. Names derived from
//! the user file (the sync sidecar, quarantine copies) follow the same rule independently, so a
//! sidecar written beside `user.sqlite` is still found after the user file was adopted.

use std::path::{Path, PathBuf};

/// The canonical user file name (`USERDB_FILE`).
pub const USER_FILE: &str = "user.snug";

/// The legacy user file name (`USERDB_LEGACY_FILE`), accepted on input.
pub const LEGACY_USER_FILE: &str = "user.sqlite";

/// The name a hub offers its download under.
pub const EXPORT_FILE: &str = "snug-user.snug";

/// The canonical extension of a user file.
pub const USER_FILE_EXTENSION: &str = "snug";

/// The historical extension, accepted on input (never rejected on its extension alone).
pub const LEGACY_USER_FILE_EXTENSION: &str = "sqlite";

/// The suffix of the sync sidecar derived from the user file name (`<file>.sync.json`).
pub const SYNC_SIDECAR_SUFFIX: &str = ".sync.json";

/// Which file to read and which to write for one name under the read-and-adopt rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserFile {
    /// The file to read: the canonical one if it exists, else the legacy one if that exists,
    /// else `None` (nothing to read yet).
    pub read: Option<PathBuf>,
    /// The file every write goes to: always the canonical name.
    pub write: PathBuf,
}

impl UserFile {
    /// Returns whether the read comes from the legacy name, i.e. the next write adopts.
    pub fn is_adopting(&self) -> bool {
        self.read.as_ref().is_some_and(|read| *read != self.write)
    }
}

/// Resolves the user file in `dir`: `user.snug` if it exists, else `user.sqlite` for reading;
/// always `user.snug` for writing.
pub fn resolve_user_file(dir: &Path) -> UserFile {
    resolve_derived(dir, "")
}

/// Resolves a name derived from the user file by appending `suffix` (e.g.
/// [`SYNC_SIDECAR_SUFFIX`]): `user.snug<suffix>` if it exists, else `user.sqlite<suffix>` for
/// reading; always `user.snug<suffix>` for writing.
pub fn resolve_derived(dir: &Path, suffix: &str) -> UserFile {
    let canonical = dir.join(format!("{USER_FILE}{suffix}"));
    let legacy = dir.join(format!("{LEGACY_USER_FILE}{suffix}"));
    let read = if canonical.exists() {
        Some(canonical.clone())
    } else if legacy.exists() {
        Some(legacy)
    } else {
        None
    };
    UserFile {
        read,
        write: canonical,
    }
}

/// Returns whether a file name carries an extension a user file is offered under (`.snug` or
/// `.sqlite`, any case). This is a hint for pickers only: the format is decided by the leading
/// bytes ([`detect_format`]), never by the name.
pub fn has_user_file_extension(name: &str) -> bool {
    Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|ext| {
            ext.eq_ignore_ascii_case(USER_FILE_EXTENSION)
                || ext.eq_ignore_ascii_case(LEGACY_USER_FILE_EXTENSION)
        })
}

/// What a file is, by its leading bytes (spec §10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    /// `SQLite format 3\0`: a plain user database.
    Sqlite,
    /// `SNUGENC1\n`: a protected user database (§11).
    Protected,
    /// Neither.
    Unknown,
}

/// Decides a file's format from its leading bytes.
pub fn detect_format(leading: &[u8]) -> FileFormat {
    if leading.starts_with(crate::open::SQLITE_MAGIC) {
        FileFormat::Sqlite
    } else if leading.starts_with(snug_container::MAGIC) {
        FileFormat::Protected
    } else {
        FileFormat::Unknown
    }
}

#[cfg(test)]
mod tests;
