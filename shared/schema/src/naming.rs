//! File naming (spec §10): `user.snug` is canonical, a legacy `user.sqlite` is read and adopted.
//!
//! Read-and-adopt: when only the legacy file exists it is read, and the next write creates the
//! canonical file. Nothing is ever renamed, copied over or deleted; the legacy file stays as the
//! user's own backup, and once the canonical file exists it takes precedence. Names derived from
//! the user file (the sync sidecar, quarantine copies) follow the same rule independently, so a
//! sidecar written beside `user.sqlite` is still found after the user file was adopted.
//!
//! Derived names follow the file they belong to: once `user.snug` exists, a `user.sqlite` beside
//! it is the user's backup, a file of its own, and the legacy sidecar it leaves belongs to the
//! lineage `user.snug` continues, never to the backup ([`resolve_given`], [`Standing::Backup`]).

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

/// What a path a command was given for a user file stands for under §10, decided here once for
/// every command (reads, writes, the sync sidecar and lock): see [`resolve_given`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenFile {
    /// The file to read: the given one, or the legacy `user.sqlite` a missing `user.snug` stands
    /// for; `None` when there is nothing to read yet.
    pub read: Option<PathBuf>,
    /// Where a write goes: `user.snug` while a legacy file is being adopted, else the given path.
    pub write: PathBuf,
    /// Whose file it is, which decides its derived names.
    pub standing: Standing,
}

/// How a given user file stands under the read-and-adopt rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// The file under the name it was given: `user.snug`, any name other than the two of §10, or
    /// a `user.sqlite` when neither file exists. Its derived names are its own.
    AsNamed,
    /// `user.sqlite` with no `user.snug` beside it, given under either name: it is read, the next
    /// write creates `user.snug`, and its derived names follow the same rule
    /// ([`resolve_derived`]), so its push state carries over to `user.snug`.
    Adopting,
    /// `user.sqlite` beside an existing `user.snug`: the user's own backup, a file of its own.
    /// The lineage it once carried (its push state above all) continues in `user.snug`, so the
    /// backup has no push state and is never anchored to an origin: syncing it is syncing a file
    /// that never synced.
    Backup,
}

/// Decides what `path` stands for under §10 (see [`Standing`]).
///
/// Only the two §10 names in one directory are related; any other name stands for itself.
pub fn resolve_given(path: &Path) -> GivenFile {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path.file_name().and_then(|n| n.to_str());
    let as_named = || GivenFile {
        read: path.exists().then(|| path.to_owned()),
        write: path.to_owned(),
        standing: Standing::AsNamed,
    };
    let canonical = dir.join(USER_FILE);
    let legacy = dir.join(LEGACY_USER_FILE);
    match name {
        Some(USER_FILE) if !path.exists() && legacy.exists() => GivenFile {
            read: Some(legacy),
            write: path.to_owned(),
            standing: Standing::Adopting,
        },
        Some(LEGACY_USER_FILE) if canonical.exists() => GivenFile {
            standing: Standing::Backup,
            ..as_named()
        },
        Some(LEGACY_USER_FILE) if path.exists() => GivenFile {
            read: Some(path.to_owned()),
            write: canonical,
            standing: Standing::Adopting,
        },
        _ => as_named(),
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
