//! The hub-namespace operations offline (§7: a hub is a convenience, never a requirement; §8.1):
//! what `snug.schema.v1` ApplyOperations and Query offer other hubs, as `snug` commands on a
//! local user file, through `snug-schema` directly.
//!
//! - `snug app install|save|versions|show|revert|reset|delete-version|meta|delete|model`: apps and
//!   their versions (install-source dedup, retention, copy-forward revert and reset to the
//!   factory version, delete with everything the app owns);
//! - `snug docs seed|set|get|list|delete`: the per-app wiki (seeding fills absent slugs only);
//! - `snug chat append|prune|pin|delete|threads|messages`: chat history;
//! - `snug settings|profile|sync-config get|set|delete|list`: the JSON key/value tables, values in
//!   the reference's compact encoding; `snug settings sidecar-identities` for §20's directory;
//! - `snug secrets list|set|delete`: credential values, never on the command line.
//!
//! Writers read FILE whole, change an in-memory copy and replace FILE atomically, and only when
//! the operation changed something: a refused operation, or one with nothing to do (an install
//! whose source is already installed, a delete of an absent key), leaves FILE byte-for-byte as it
//! was. A protected FILE is refused with `PROTECTED` by writers (as `snug app sql` does) and
//! opened with its secret by readers. Readers never write.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use snug_container::Limits;
use snug_schema::{
    AppError, AppMetaUpdate, ChatError, ChatRole, ContractSource, DocError, FileFormat, KvError,
    KvTable, NewApp, NewChatMessage, SaveVersion, SystemClock, UserDb, encode_json,
};

use crate::{
    Outcome,
    failure::{Exit, Failure, with_causes},
    files,
    secrets::{self, SecretArgs},
};

mod apps;
mod chat;
mod docs;
mod kv;
mod stored_secrets;

pub(crate) use apps::{AppOps, run_app};
pub(crate) use chat::{ChatCommand, run_chat};
pub(crate) use docs::{DocsCommand, run_docs};
pub(crate) use kv::{KvCommand, SettingsCommand, run_kv, run_settings};
pub(crate) use stored_secrets::{SecretsCommand, run_secrets};

// --- errors -------------------------------------------------------------------------------------
//
// A name that is not in the file (app, version, doc, thread, message) and a request the file's
// state forbids (a taken app id or one whose token another app holds, a pinned or current version, no factory version, a contract that
// is not an object) are usage errors (2): the file is fine, the command line is not. A row no
// conforming hub writes is a damaged file (4). Caps and host failures are 1.

impl From<AppError> for Failure {
    fn from(err: AppError) -> Self {
        let exit = match &err {
            AppError::AppNotFound { .. }
            | AppError::VersionNotFound { .. }
            | AppError::VersionPinned { .. }
            | AppError::VersionCurrent { .. }
            | AppError::NoFactoryVersion { .. }
            | AppError::AppExists { .. }
            | AppError::AppTokenCollision { .. }
            | AppError::InvalidContract => Exit::Usage,
            AppError::TooLarge { .. } | AppError::Entropy(_) | AppError::Sqlite(_) => Exit::Other,
        };
        Failure::new(exit, err.reason(), with_causes(&err))
    }
}

impl From<DocError> for Failure {
    fn from(err: DocError) -> Self {
        let exit = match &err {
            DocError::DocNotFound { .. } => Exit::Usage,
            DocError::TooLarge { .. } | DocError::Sqlite(_) => Exit::Other,
        };
        Failure::new(exit, err.reason(), with_causes(&err))
    }
}

impl From<ChatError> for Failure {
    fn from(err: ChatError) -> Self {
        let exit = match &err {
            ChatError::ThreadNotFound { .. } | ChatError::MessageNotFound { .. } => Exit::Usage,
            ChatError::UnknownRole { .. } => Exit::Corrupt,
            ChatError::TooLarge { .. } | ChatError::Sqlite(_) => Exit::Other,
        };
        Failure::new(exit, err.reason(), with_causes(&err))
    }
}

impl From<KvError> for Failure {
    fn from(err: KvError) -> Self {
        let exit = match &err {
            KvError::NotJson { .. } | KvError::UnexpectedType { .. } => Exit::Corrupt,
            KvError::TooLarge { .. } | KvError::Sqlite(_) => Exit::Other,
        };
        Failure::new(exit, err.reason(), with_causes(&err))
    }
}

/// A malformed value on the command line (JSON that does not parse, a role that does not exist).
fn invalid(message: impl Into<String>) -> Failure {
    Failure::of(&snug_reasons::rpc::INVALID_ARGUMENT, message)
}

fn storage(err: impl std::fmt::Display) -> Failure {
    Failure::of(&snug_reasons::cli::STORAGE, format!("sqlite failed: {err}"))
}

fn parse_json(what: &str, text: &str) -> Result<Value, Failure> {
    serde_json::from_str(text).map_err(|err| invalid(format!("{what} is not JSON text: {err}")))
}

fn read_text(path: &Path) -> Result<String, Failure> {
    String::from_utf8(files::read(path)?)
        .map_err(|_| invalid(format!("{} is not UTF-8 text", path.display())))
}

// --- opening and writing FILE -------------------------------------------------------------------

fn not_sqlite(file: &Path) -> Failure {
    let mut failure = Failure::from(snug_schema::OpenError::NotSqlite);
    failure.message = format!(
        "{} is neither a SQLite user database nor a protected Snug file",
        file.display()
    );
    failure
}

/// Opens FILE for reading in memory; a protected file is unlocked with its secret.
fn read(file: &Path, secret_args: &SecretArgs, limits: &Limits) -> Result<UserDb, Failure> {
    let bytes = files::with_log(file, files::read(file)?)?;
    let plaintext = match snug_schema::detect_format(&bytes) {
        FileFormat::Sqlite => bytes,
        FileFormat::Unknown => return Err(not_sqlite(file)),
        FileFormat::Protected => {
            // Structure first, so damage is reported before anyone is asked for a secret.
            snug_container::inspect(&bytes, limits)?;
            let secrets = secrets::opening_secrets(secret_args)?;
            snug_container::open_owned(bytes, &secrets, limits)?.plaintext
        }
    };
    Ok(UserDb::from_bytes(&plaintext, Arc::new(SystemClock))?.0)
}

/// What a writer's operation reports: its result, and whether it changed the database.
struct Change<T> {
    result: T,
    changed: bool,
}

fn changed<T>(result: T) -> Change<T> {
    Change {
        result,
        changed: true,
    }
}

/// Opens FILE, runs `operation` on the in-memory copy and, if it changed something, replaces FILE
/// atomically. Returns the result and the new length (`None`: FILE was not rewritten).
fn write<T>(
    file: &Path,
    operation: impl FnOnce(&mut UserDb) -> Result<Change<T>, Failure>,
) -> Result<(T, Option<u64>), Failure> {
    // FILE's bytes without the changes in its write-ahead log are not its content, and the
    // program holding the log would write it into the replaced file.
    files::not_in_use(file)?;
    let bytes = files::read(file)?;
    match snug_schema::detect_format(&bytes) {
        FileFormat::Sqlite => {}
        FileFormat::Unknown => return Err(not_sqlite(file)),
        FileFormat::Protected => {
            return Err(Failure::of(
                &snug_reasons::schema::PROTECTED,
                format!(
                    "{} is protected (SNUGENC1) and this command does not write protected files; \
                     `snug unlock` it, run the command on the plain copy, then `snug protect` that",
                    file.display()
                ),
            ));
        }
    }
    let (mut db, report) = UserDb::from_bytes(&bytes, Arc::new(SystemClock))?;
    drop(bytes);
    let Change { result, changed } = operation(&mut db)?;
    if !changed {
        return Ok((result, None));
    }
    if report.advanced {
        // As `snug migrate`: tables and credentials the migration dropped leave no bytes behind.
        db.connection().execute_batch("VACUUM").map_err(storage)?;
    }
    let image = db.to_bytes().map_err(storage)?;
    files::write(file, &image)?;
    Ok((result, Some(image.len() as u64)))
}

/// A writer's outcome: `text`, then whether FILE was rewritten; `json` gains `file` and `written`.
fn written(file: &Path, length: Option<u64>, text: String, mut json: Value) -> Outcome {
    let text = match length {
        Some(length) => format!("{text}\n{} updated ({length} bytes)", file.display()),
        None => format!("{text}\nnothing changed; {} not rewritten", file.display()),
    };
    json["ok"] = Value::Bool(true);
    json["file"] = json!(file);
    json["written"] = Value::Bool(length.is_some());
    json["length"] = json!(length);
    Outcome { text, json }
}

fn read_outcome(text: String, mut json: Value) -> Outcome {
    json["ok"] = Value::Bool(true);
    Outcome { text, json }
}

/// Fails unless the app exists: docs and the model preference are keyed by app id without a
/// foreign key, so an unknown app would leave orphan rows (as the schema service refuses them).
fn require_app(db: &UserDb, app_id: &str) -> Result<(), Failure> {
    db.app(app_id).map(|_| ()).map_err(Failure::from)
}
