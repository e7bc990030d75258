//! One error enum per operation family, each with a stable machine reason (`reason()`; for
//! opening, importing and exporting, [`snug_reasons::Reasoned`] in `reasoned.rs`).
//!
//! Services map reasons to gRPC codes and the CLI maps them to exit codes; both match the enums
//! exhaustively, so a new variant does not compile until someone picks its code. Reasons are
//! `UPPER_SNAKE`, at most 63 characters, and never change once published.

use std::path::PathBuf;

use serde::Serialize;

use crate::isolation::TokenCollision;

/// Why the bytes are not a well-formed SQLite file, found before or by SQLite itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Malformation {
    /// The SQLite magic is there but the 100-byte header is not.
    #[error("the file is {len} bytes, shorter than a SQLite header")]
    TruncatedHeader {
        /// The file length.
        len: u64,
    },
    /// The header's page size is not a power of two between 512 and 65536.
    #[error("the header declares an invalid page size {page_size}")]
    BadPageSize {
        /// The page size as decoded from bytes 16..18.
        page_size: u32,
    },
    /// The file does not end on a page boundary: truncated or padded.
    #[error("the file is {len} bytes, not a whole number of {page_size}-byte pages")]
    PartialPage {
        /// The file length.
        len: u64,
        /// The page size.
        page_size: u32,
    },
    /// The header's read or write format version is neither 1 (rollback) nor 2 (WAL).
    #[error("unsupported SQLite file format versions (write {write}, read {read})")]
    UnsupportedFileFormat {
        /// Header byte 18.
        write: u8,
        /// Header byte 19.
        read: u8,
    },
    /// `PRAGMA user_version` is negative: no storage version ladder starts there.
    #[error("the storage version {found} is negative")]
    NegativeVersion {
        /// The stamped version.
        found: i64,
    },
    /// `PRAGMA quick_check` reported damage.
    #[error("quick_check failed: {first_problem}")]
    QuickCheck {
        /// The first line SQLite reported.
        first_problem: String,
    },
}

/// A schema no conforming hub writes, refused before anything executes against it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Hostility {
    /// A trigger. Snug files carry no triggers at rest (app triggers live in `schema_json`), and a
    /// trigger on a hub table would run on the host's own writes — e.g. copy secrets into a portable table.
    #[error("the file defines trigger {name:?} on {table:?}")]
    Trigger {
        /// Trigger name.
        name: String,
        /// The table it fires on.
        table: String,
    },
    /// A view. Views at rest could shadow or re-expose hub data; app views live in `schema_json`.
    #[error("the file defines view {name:?}")]
    View {
        /// View name.
        name: String,
    },
    /// A virtual table: it would run module code chosen by the file.
    #[error("the file defines virtual table {name:?}")]
    VirtualTable {
        /// Table name.
        name: String,
    },
    /// An index on a hub table other than the autoindexes and `idx_snug_apps_install_source`
    /// (or that index with a different definition): it could make the host's writes fail.
    #[error("the file defines unexpected index {name:?} on hub table {table:?}")]
    ForeignIndex {
        /// Index name.
        name: String,
        /// The hub table it indexes.
        table: String,
    },
    /// A table that is neither a hub table, a valid `app_<token>__<name>` table nor SQLite's own
    /// (refused on import only; an opened file keeps it and never exports it).
    #[error("the file contains foreign table {name:?}")]
    ForeignTable {
        /// Table name.
        name: String,
    },
    /// A hub table whose columns are not the v6 shape even after migration and heal.
    #[error("hub table {table:?} does not have the storage-version-6 shape: {problem}")]
    ShapeMismatch {
        /// The hub table.
        table: &'static str,
        /// What differs.
        problem: ShapeProblem,
    },
}

/// How a hub table's columns differ from the v6 shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ShapeProblem {
    /// An expected column is absent and no migration appends it.
    #[error("column {column:?} is missing")]
    MissingColumn {
        /// The expected column.
        column: &'static str,
    },
    /// A column exists that the v6 DDL does not declare.
    #[error("unexpected column {column:?}")]
    ExtraColumn {
        /// The found column.
        column: String,
    },
    /// A column has another position, type, nullability, default or key membership.
    #[error("column {column:?} is declared differently")]
    ColumnDiffers {
        /// The expected column.
        column: &'static str,
    },
    /// The table is `WITHOUT ROWID` or `STRICT`; hub tables are ordinary rowid tables.
    #[error("the table is WITHOUT ROWID or STRICT")]
    TableOptions,
}

/// Refusals shared by open and import; each public error enum converts from it.
#[derive(Debug)]
pub(crate) enum Refusal {
    NotSqlite,
    Malformed(Malformation),
    Unreadable(rusqlite::Error),
    NotAUserDatabase,
    SchemaTooNew { found: i64 },
    Hostile(Hostility),
    Entropy(getrandom::Error),
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for Refusal {
    fn from(err: rusqlite::Error) -> Self {
        // SQLite reports a damaged or non-database file lazily, on the first statement that
        // touches it; those codes describe the file, not the host's storage.
        if is_corruption(&err) {
            Refusal::Unreadable(err)
        } else {
            Refusal::Sqlite(err)
        }
    }
}

pub(crate) fn is_corruption(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// Why a user database could not be opened, created or migrated.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The bytes do not start with `SQLite format 3\0` (empty and zeroed files included: they are
    /// damage, never "fresh").
    #[error("not a SQLite database")]
    NotSqlite,
    /// The file is a SNUGENC1 protected container: unlock it first (spec §11). It is healthy and
    /// must not be treated as corrupt.
    #[error("this Snug file is protected; unlock it with its passphrase or recovery key")]
    Protected,
    /// A SQLite header that cannot be right.
    #[error("malformed SQLite file: {problem}")]
    Malformed {
        /// What is wrong.
        problem: Malformation,
    },
    /// SQLite itself found the file damaged or not a database.
    #[error("damaged SQLite file")]
    Unreadable(#[source] rusqlite::Error),
    /// A SQLite database with tables but none of the hub tables: not a Snug user database.
    #[error("a SQLite database, but not a Snug user database")]
    NotAUserDatabase,
    /// Stamped with a newer storage version than this build understands; nothing was written.
    #[error(
        "the file is at storage version {found}; this build supports up to {supported}: it needs a newer build to open it; do not overwrite the file"
    )]
    SchemaTooNew {
        /// The stamped version.
        found: i64,
        /// [`STORAGE_VERSION`](crate::STORAGE_VERSION).
        supported: i64,
    },
    /// A schema no conforming hub writes.
    #[error("refused hostile schema: {problem}")]
    HostileSchema {
        /// What was found.
        problem: Hostility,
    },
    /// Two registered apps share an `appDataToken` (§8.2): refused by migrate and inspection.
    #[error(
        "{collision}; no conforming hub registers both, so the file is refused (delete one of the apps)"
    )]
    AppTokenCollision {
        /// The two app ids and their token.
        collision: TokenCollision,
    },
    /// Reading the file from disk failed.
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The operating system's CSPRNG failed while minting a database id.
    #[error("no randomness for a database id")]
    Entropy(#[source] getrandom::Error),
    /// SQLite failed for a reason unrelated to the file's content.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
}

impl From<Refusal> for OpenError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NotSqlite => OpenError::NotSqlite,
            Refusal::Malformed(problem) => OpenError::Malformed { problem },
            Refusal::Unreadable(err) => OpenError::Unreadable(err),
            Refusal::NotAUserDatabase => OpenError::NotAUserDatabase,
            Refusal::SchemaTooNew { found } => OpenError::SchemaTooNew {
                found,
                supported: crate::STORAGE_VERSION,
            },
            Refusal::Hostile(problem) => OpenError::HostileSchema { problem },
            Refusal::Entropy(err) => OpenError::Entropy(err),
            Refusal::Sqlite(err) => OpenError::Sqlite(err),
        }
    }
}

impl From<rusqlite::Error> for OpenError {
    fn from(err: rusqlite::Error) -> Self {
        Refusal::from(err).into()
    }
}

/// Why an import was refused. Nothing local changes on any of these.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A SNUGENC1 container that no supplied secret opened. It is healthy; ask for the secret.
    #[error("this Snug file is protected; enter its passphrase or recovery key")]
    Locked,
    /// A SNUGENC1 container that cannot be read whatever the secret.
    #[error("this Snug file is damaged: {0}")]
    CorruptContainer(#[source] snug_container::Corruption),
    /// The plaintext user database exceeds the cap.
    #[error("the user database is {size} bytes; the limit is {max}")]
    TooLarge {
        /// Plaintext size in bytes.
        size: u64,
        /// [`MAX_USERDB_BYTES`](crate::MAX_USERDB_BYTES).
        max: u64,
    },
    /// Neither a SQLite database nor a SNUGENC1 container.
    #[error("not a SQLite database or a Snug protected file")]
    NotSqlite,
    /// A SQLite header that cannot be right, or a failed `quick_check`.
    #[error("malformed SQLite file: {problem}")]
    Malformed {
        /// What is wrong.
        problem: Malformation,
    },
    /// SQLite itself found the file damaged.
    #[error("damaged SQLite file")]
    Unreadable(#[source] rusqlite::Error),
    /// A SQLite database without `snug_meta`: not a Snug user database, so it is not adopted.
    #[error("a SQLite database, but not a Snug user database")]
    NotAUserDatabase,
    /// Stamped newer than this build understands.
    #[error("the file is at storage version {found}; this build supports up to {supported}")]
    SchemaTooNew {
        /// The stamped version.
        found: i64,
        /// [`STORAGE_VERSION`](crate::STORAGE_VERSION).
        supported: i64,
    },
    /// A schema no conforming hub writes.
    #[error("refused hostile schema: {problem}")]
    HostileSchema {
        /// What was found.
        problem: Hostility,
    },
    /// Two registered apps share an `appDataToken` (§8.2).
    #[error("{collision}; no conforming hub registers both, so the file is refused")]
    AppTokenCollision {
        /// The two app ids and their token.
        collision: TokenCollision,
    },
    /// The CSPRNG failed while minting a database id for a file that had none.
    #[error("no randomness for a database id")]
    Entropy(#[source] getrandom::Error),
    /// SQLite failed for a reason unrelated to the file's content.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
}

impl From<Refusal> for ImportError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NotSqlite => ImportError::NotSqlite,
            Refusal::Malformed(problem) => ImportError::Malformed { problem },
            Refusal::Unreadable(err) => ImportError::Unreadable(err),
            Refusal::NotAUserDatabase => ImportError::NotAUserDatabase,
            Refusal::SchemaTooNew { found } => ImportError::SchemaTooNew {
                found,
                supported: crate::STORAGE_VERSION,
            },
            Refusal::Hostile(problem) => ImportError::HostileSchema { problem },
            Refusal::Entropy(err) => ImportError::Entropy(err),
            Refusal::Sqlite(err) => ImportError::Sqlite(err),
        }
    }
}

impl From<rusqlite::Error> for ImportError {
    fn from(err: rusqlite::Error) -> Self {
        Refusal::from(err).into()
    }
}

/// Why an export failed. The source is never modified.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The source file could not be opened as a user database.
    #[error("cannot open the source")]
    Source(#[source] OpenError),
    /// The export would exceed the cap.
    #[error("the export is {size} bytes; the limit is {max}")]
    TooLarge {
        /// Export size in bytes.
        size: u64,
        /// [`MAX_USERDB_BYTES`](crate::MAX_USERDB_BYTES).
        max: u64,
    },
    /// The output path already exists; exports never overwrite.
    #[error("{path} already exists")]
    OutputExists {
        /// The output path.
        path: PathBuf,
    },
    /// Reading or writing a file failed.
    #[error("i/o on {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// SQLite failed.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
    /// The output, as SQLite wrote it, could not be walked to zero its free space (a bug: the
    /// output is withheld rather than left with free space nobody checked).
    #[error("the export's free space could not be scrubbed")]
    Scrub(#[source] crate::scrub::ScrubError),
}

impl From<rusqlite::Error> for ExportError {
    fn from(err: rusqlite::Error) -> Self {
        ExportError::Sqlite(err)
    }
}

/// Why writing a database image to a file failed.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// A file operation failed.
    #[error("i/o on {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// SQLite failed.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
}

impl SaveError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            SaveError::Io { .. } => &snug_reasons::cli::IO,
            SaveError::Sqlite(_) => &snug_reasons::cli::STORAGE,
        }
    }
}

impl From<rusqlite::Error> for SaveError {
    fn from(err: rusqlite::Error) -> Self {
        SaveError::Sqlite(err)
    }
}

/// Why an app or app-version operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// No app with this id.
    #[error("no app {app_id:?}")]
    AppNotFound {
        /// The app id asked for.
        app_id: String,
    },
    /// The app exists but has no such version (never saved, or pruned).
    #[error("app {app_id:?} has no version {version}")]
    VersionNotFound {
        /// The app.
        app_id: String,
        /// The version asked for.
        version: i64,
    },
    /// A pinned version cannot be deleted.
    #[error("version {version} of app {app_id:?} is pinned")]
    VersionPinned {
        /// The app.
        app_id: String,
        /// The pinned version.
        version: i64,
    },
    /// The current version cannot be deleted.
    #[error("version {version} of app {app_id:?} is the current version")]
    VersionCurrent {
        /// The app.
        app_id: String,
        /// The current version.
        version: i64,
    },
    /// Reset-to-factory found no pinned version.
    #[error("app {app_id:?} has no pinned (factory) version")]
    NoFactoryVersion {
        /// The app.
        app_id: String,
    },
    /// An explicit app id is already taken by another app.
    #[error("app {app_id:?} already exists")]
    AppExists {
        /// The app id.
        app_id: String,
    },
    /// The app id's `appDataToken` is already another installed app's (`A7F3…` beside
    /// `a7f3…`), so the two would share their tables (§8.2).
    #[error(
        "app id {app_id:?} has the data token of installed app {other_app_id:?}; the two would share their tables"
    )]
    AppTokenCollision {
        /// The app id asked for.
        app_id: String,
        /// The installed app holding the token.
        other_app_id: String,
    },
    /// A runtime contract that is not a JSON object.
    #[error("the runtime contract must be a JSON object")]
    InvalidContract,
    /// The write would take the database over the cap; nothing was written.
    #[error("the user database would be {size} bytes; the limit is {max}")]
    TooLarge {
        /// Size the database would reach.
        size: u64,
        /// The cap.
        max: u64,
    },
    /// The CSPRNG failed while minting an app id.
    #[error("no randomness for an app id")]
    Entropy(#[source] getrandom::Error),
    /// SQLite failed.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
}

impl AppError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            AppError::AppNotFound { .. } => &snug_reasons::schema::APP_NOT_FOUND,
            AppError::VersionNotFound { .. } => &snug_reasons::schema::VERSION_NOT_FOUND,
            AppError::VersionPinned { .. } => &snug_reasons::schema::VERSION_PINNED,
            AppError::VersionCurrent { .. } => &snug_reasons::schema::VERSION_CURRENT,
            AppError::NoFactoryVersion { .. } => &snug_reasons::schema::NO_FACTORY_VERSION,
            AppError::AppExists { .. } => &snug_reasons::schema::APP_EXISTS,
            AppError::AppTokenCollision { .. } => &snug_reasons::schema::APP_TOKEN_COLLISION,
            AppError::InvalidContract => &snug_reasons::schema::INVALID_CONTRACT,
            AppError::TooLarge { .. } => &snug_reasons::rpc::TOO_LARGE,
            AppError::Entropy(_) => &snug_reasons::cli::ENTROPY_UNAVAILABLE,
            AppError::Sqlite(_) => &snug_reasons::cli::STORAGE,
        }
    }
}

impl From<rusqlite::Error> for AppError {
    fn from(err: rusqlite::Error) -> Self {
        AppError::Sqlite(err)
    }
}

/// Why a chat operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// No thread with this id.
    #[error("no chat thread {thread_id:?}")]
    ThreadNotFound {
        /// The thread asked for.
        thread_id: String,
    },
    /// No message with this id.
    #[error("no chat message {id}")]
    MessageNotFound {
        /// The message id asked for.
        id: i64,
    },
    /// A stored message has a role other than user, assistant or system.
    #[error("chat message {id} has unknown role {role:?}")]
    UnknownRole {
        /// The message.
        id: i64,
        /// The stored role text.
        role: String,
    },
    /// The write would take the database over the cap; nothing was written.
    #[error("the user database would be {size} bytes; the limit is {max}")]
    TooLarge {
        /// Size the database would reach.
        size: u64,
        /// The cap.
        max: u64,
    },
    /// SQLite failed.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
}

impl ChatError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            ChatError::ThreadNotFound { .. } => &snug_reasons::schema::THREAD_NOT_FOUND,
            ChatError::MessageNotFound { .. } => &snug_reasons::schema::MESSAGE_NOT_FOUND,
            ChatError::UnknownRole { .. } => &snug_reasons::schema::CORRUPT_ROW,
            ChatError::TooLarge { .. } => &snug_reasons::rpc::TOO_LARGE,
            ChatError::Sqlite(_) => &snug_reasons::cli::STORAGE,
        }
    }
}

impl From<rusqlite::Error> for ChatError {
    fn from(err: rusqlite::Error) -> Self {
        ChatError::Sqlite(err)
    }
}

/// Why a per-app doc operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DocError {
    /// No doc with this slug for this app.
    #[error("app {app_id:?} has no doc {slug:?}")]
    DocNotFound {
        /// The app.
        app_id: String,
        /// The slug asked for.
        slug: String,
    },
    /// The write would take the database over the cap; nothing was written.
    #[error("the user database would be {size} bytes; the limit is {max}")]
    TooLarge {
        /// Size the database would reach.
        size: u64,
        /// The cap.
        max: u64,
    },
    /// SQLite failed.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
}

impl DocError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            DocError::DocNotFound { .. } => &snug_reasons::schema::DOC_NOT_FOUND,
            DocError::TooLarge { .. } => &snug_reasons::rpc::TOO_LARGE,
            DocError::Sqlite(_) => &snug_reasons::cli::STORAGE,
        }
    }
}

impl From<rusqlite::Error> for DocError {
    fn from(err: rusqlite::Error) -> Self {
        DocError::Sqlite(err)
    }
}

/// Why a key/value accessor (settings, profile, sync, secrets, meta) failed.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// A JSON-encoded table holds a value that is not JSON.
    #[error("{table}.{key} does not hold JSON")]
    NotJson {
        /// The table.
        table: &'static str,
        /// The key.
        key: String,
    },
    /// A value has another JSON type than the typed accessor expects.
    #[error("{table}.{key} holds JSON of an unexpected type")]
    UnexpectedType {
        /// The table.
        table: &'static str,
        /// The key.
        key: String,
    },
    /// The write would take the database over the cap; nothing was written.
    #[error("the user database would be {size} bytes; the limit is {max}")]
    TooLarge {
        /// Size the database would reach.
        size: u64,
        /// The cap.
        max: u64,
    },
    /// SQLite failed.
    #[error("sqlite")]
    Sqlite(#[source] rusqlite::Error),
}

impl KvError {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            KvError::NotJson { .. } | KvError::UnexpectedType { .. } => {
                &snug_reasons::schema::CORRUPT_ROW
            }
            KvError::TooLarge { .. } => &snug_reasons::rpc::TOO_LARGE,
            KvError::Sqlite(_) => &snug_reasons::cli::STORAGE,
        }
    }
}

impl From<rusqlite::Error> for KvError {
    fn from(err: rusqlite::Error) -> Self {
        KvError::Sqlite(err)
    }
}

/// A write that would exceed the cap, produced inside a transaction before it commits.
#[derive(Debug)]
pub(crate) enum CapError {
    TooLarge { size: u64, max: u64 },
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for CapError {
    fn from(err: rusqlite::Error) -> Self {
        CapError::Sqlite(err)
    }
}

macro_rules! from_cap_error {
    ($($ty:ident),*) => {$(
        impl From<CapError> for $ty {
            fn from(err: CapError) -> Self {
                match err {
                    CapError::TooLarge { size, max } => $ty::TooLarge { size, max },
                    CapError::Sqlite(err) => $ty::Sqlite(err),
                }
            }
        }
    )*};
}
from_cap_error!(AppError, ChatError, DocError, KvError);

#[cfg(test)]
mod tests;
