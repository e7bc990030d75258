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
    let bytes = files::read(file)?;
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

// --- snug app … ---------------------------------------------------------------------------------

/// Where a new version's runtime contract comes from (default: copied forward).
#[derive(Debug, Args)]
#[group(multiple = false)]
pub(crate) struct ContractArgs {
    /// A file holding the contract, a JSON object.
    #[arg(long, value_name = "JSON_FILE")]
    contract_file: Option<PathBuf>,
    /// Copy the contract of this stored version.
    #[arg(long, value_name = "VERSION")]
    contract_from: Option<i64>,
    /// Store no contract.
    #[arg(long)]
    clear_contract: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AppOps {
    /// Installs an app with version 1, pinned (the factory version). With --install-source, an
    /// app already installed from that source is kept and named instead (nothing is written).
    Install {
        /// The user database.
        file: PathBuf,
        /// The app id (`snug_apps.app_id`); a fresh UUID when absent.
        #[arg(long)]
        app: Option<String>,
        /// Display name (default: the app id).
        #[arg(long)]
        name: Option<String>,
        /// A file holding the complete HTML of version 1 (default: empty).
        #[arg(long, value_name = "HTML_FILE")]
        html_file: Option<PathBuf>,
        /// Description.
        #[arg(long)]
        description: Option<String>,
        /// Icon emoji.
        #[arg(long)]
        icon_emoji: Option<String>,
        /// Icon colour.
        #[arg(long)]
        icon_color: Option<String>,
        /// The app keeps data in its own tables.
        #[arg(long)]
        uses_db: bool,
        /// Note on version 1.
        #[arg(long)]
        note: Option<String>,
        /// Install identity (`starter:<folder>`, `share:<lineage>`, `agent:<lineage>`).
        #[arg(long)]
        install_source: Option<String>,
    },
    /// Saves a new version; every pinned version and the newest 5 unpinned ones are kept.
    Save {
        /// The user database.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// A file holding the version's complete HTML.
        #[arg(long, value_name = "HTML_FILE")]
        html_file: PathBuf,
        /// Note on the version.
        #[arg(long)]
        note: Option<String>,
        /// Pin it: pinned versions are never pruned.
        #[arg(long)]
        pinned: bool,
        #[command(flatten)]
        contract: ContractArgs,
    },
    /// Lists an app's stored versions, newest first.
    Versions {
        /// The user database, plain or protected.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Shows every app, or one app and a version of it (the current one by default).
    Show {
        /// The user database, plain or protected.
        file: PathBuf,
        /// The app (`snug_apps.app_id`); every app when absent.
        #[arg(long)]
        app: Option<String>,
        /// The version to show (with --app).
        #[arg(long, requires = "app")]
        version: Option<i64>,
        /// Print only the version's HTML (with --app).
        #[arg(long, requires = "app")]
        html: bool,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Copies a stored version forward as a new version (note `revert to v<N>`).
    Revert {
        /// The user database.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// The version to copy forward.
        #[arg(long, value_name = "VERSION")]
        to: i64,
    },
    /// Copies the factory version (the newest pinned one) forward as a new version.
    Reset {
        /// The user database.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
    },
    /// Deletes one stored version; pinned and current versions are refused.
    DeleteVersion {
        /// The user database.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// The version.
        #[arg(long)]
        version: i64,
    },
    /// Changes an app's display metadata.
    Meta {
        /// The user database.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// New display name.
        #[arg(long)]
        name: Option<String>,
        /// New description (an empty one clears it).
        #[arg(long)]
        description: Option<String>,
        /// New icon emoji (an empty one clears it).
        #[arg(long)]
        icon_emoji: Option<String>,
        /// New icon colour (an empty one clears it).
        #[arg(long)]
        icon_color: Option<String>,
        /// Whether the app keeps data in its own tables.
        #[arg(long)]
        uses_db: Option<bool>,
    },
    /// Deletes an app with everything it owns: versions, docs, chat, data tables, schema rows,
    /// connections, its credentials and settings keys.
    Delete {
        /// The user database.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
    },
    /// Shows, sets or clears an app's model preference (`appModel:<appId>`).
    Model {
        /// The user database (plain or protected to show; plain to change).
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// The model id to set.
        #[arg(conflicts_with = "clear")]
        model: Option<String>,
        /// Clear the preference (inherit the global setting).
        #[arg(long)]
        clear: bool,
        #[command(flatten)]
        secrets: SecretArgs,
    },
}

/// An optional text where the empty string means "clear it".
fn clearable(value: Option<String>) -> Option<Option<String>> {
    value.map(|text| (!text.is_empty()).then_some(text))
}

pub(crate) fn run_app(command: AppOps, limits: &Limits) -> Result<Outcome, Failure> {
    match command {
        AppOps::Install {
            file,
            app,
            name,
            html_file,
            description,
            icon_emoji,
            icon_color,
            uses_db,
            note,
            install_source,
        } => {
            let html = match &html_file {
                Some(path) => read_text(path)?,
                None => String::new(),
            };
            let display_name = match name.or_else(|| app.clone()) {
                Some(name) => name,
                None => return Err(Failure::usage("give the app a --name (or an --app id)")),
            };
            let new = NewApp {
                app_id: app,
                display_name,
                description,
                icon_emoji,
                icon_color,
                uses_db,
                html,
                note,
                install_source,
            };
            let (installed, length) = write(&file, |db| {
                let installed = db.install_app(&new)?;
                let created = installed.created;
                Ok(Change {
                    result: installed,
                    changed: created,
                })
            })?;
            let text = if installed.created {
                format!("Installed app {} (version 1, pinned)", installed.app_id)
            } else {
                format!(
                    "app {} is already installed from {}",
                    installed.app_id,
                    new.install_source.as_deref().unwrap_or_default()
                )
            };
            Ok(written(
                &file,
                length,
                text,
                json!({ "app_id": installed.app_id, "created": installed.created }),
            ))
        }
        AppOps::Save {
            file,
            app,
            html_file,
            note,
            pinned,
            contract,
        } => {
            let html = read_text(&html_file)?;
            let contract = match (contract.contract_file, contract.contract_from) {
                (Some(path), _) => {
                    // Text that is not JSON is as much "not a JSON object" as an array is.
                    match serde_json::from_str(&read_text(&path)?) {
                        Ok(value) => ContractSource::Set(value),
                        Err(_) => return Err(AppError::InvalidContract.into()),
                    }
                }
                (None, Some(version)) => ContractSource::CopyFrom(version),
                (None, None) if contract.clear_contract => ContractSource::Clear,
                (None, None) => ContractSource::CopyForward,
            };
            let options = SaveVersion {
                note,
                pinned,
                contract,
            };
            let (version, length) = write(&file, |db| {
                Ok(changed(db.save_app_version(&app, &html, &options)?))
            })?;
            Ok(written(
                &file,
                length,
                format!("Saved app {app} version {version}"),
                json!({ "app_id": app, "version": version }),
            ))
        }
        AppOps::Versions { file, app, secrets } => {
            let db = read(&file, &secrets, limits)?;
            let versions = db.app_versions(&app)?;
            let mut text = format!("app {app}: {} version(s)", versions.len());
            for v in &versions {
                text.push_str(&format!(
                    "\n  v{:<4} {}{}{}{}",
                    v.version,
                    v.created_at,
                    if v.pinned { "  pinned" } else { "" },
                    if v.has_runtime_contract {
                        "  contract"
                    } else {
                        ""
                    },
                    v.note
                        .as_deref()
                        .map(|n| format!("  ({n})"))
                        .unwrap_or_default()
                ));
            }
            Ok(read_outcome(
                text,
                json!({ "app_id": app, "versions": versions }),
            ))
        }
        AppOps::Show {
            file,
            app,
            version,
            html,
            secrets,
        } => {
            let db = read(&file, &secrets, limits)?;
            let Some(app_id) = app else {
                let apps = db.apps()?;
                let mut text = format!("{}: {} app(s)", file.display(), apps.len());
                for app in &apps {
                    text.push_str(&format!(
                        "\n  {}  {} (v{}{})",
                        app.app_id,
                        app.display_name,
                        app.current_version,
                        app.install_source
                            .as_deref()
                            .map(|s| format!(", from {s}"))
                            .unwrap_or_default()
                    ));
                }
                return Ok(read_outcome(text, json!({ "apps": apps })));
            };
            let app = db.app(&app_id)?;
            let shown = match version {
                Some(version) => db.app_version(&app_id, version)?,
                None => db.current_app_version(&app_id)?,
            };
            let model = db.app_model(&app_id)?;
            let text = if html {
                shown.html.clone()
            } else {
                format!(
                    "{} ({})\n  current version {}, showing v{}{}: {} bytes of HTML\n  model: {}",
                    app.display_name,
                    app.app_id,
                    app.current_version,
                    shown.version,
                    if shown.pinned { " (pinned)" } else { "" },
                    shown.html.len(),
                    model.as_deref().unwrap_or("inherited")
                )
            };
            Ok(read_outcome(
                text,
                json!({ "app": app, "version": shown, "model": model }),
            ))
        }
        AppOps::Revert { file, app, to } => {
            let (version, length) = write(&file, |db| Ok(changed(db.revert_app(&app, to)?)))?;
            Ok(written(
                &file,
                length,
                format!("Reverted app {app} to v{to} as version {version}"),
                json!({ "app_id": app, "version": version }),
            ))
        }
        AppOps::Reset { file, app } => {
            let (version, length) = write(&file, |db| Ok(changed(db.reset_to_factory(&app)?)))?;
            Ok(written(
                &file,
                length,
                format!("Reset app {app} to its factory version as version {version}"),
                json!({ "app_id": app, "version": version }),
            ))
        }
        AppOps::DeleteVersion { file, app, version } => {
            let ((), length) = write(&file, |db| {
                Ok(changed(db.delete_app_version(&app, version)?))
            })?;
            Ok(written(
                &file,
                length,
                format!("Deleted app {app} version {version}"),
                json!({ "app_id": app, "version": version }),
            ))
        }
        AppOps::Meta {
            file,
            app,
            name,
            description,
            icon_emoji,
            icon_color,
            uses_db,
        } => {
            let change = AppMetaUpdate {
                display_name: name,
                description: clearable(description),
                icon_emoji: clearable(icon_emoji),
                icon_color: clearable(icon_color),
                uses_db,
            };
            if change == AppMetaUpdate::default() {
                return Err(Failure::usage(
                    "say what to change: --name, --description, --icon-emoji, --icon-color or --uses-db",
                ));
            }
            let (updated, length) =
                write(&file, |db| Ok(changed(db.update_app_meta(&app, &change)?)))?;
            Ok(written(
                &file,
                length,
                format!("Updated app {app}"),
                json!({ "app": updated }),
            ))
        }
        AppOps::Delete { file, app } => {
            let (deleted, length) = write(&file, |db| Ok(changed(db.delete_app(&app)?)))?;
            Ok(written(
                &file,
                length,
                format!(
                    "Deleted app {app}: {} row(s), {} data table(s), {} credential(s), {} setting(s)",
                    deleted.rows_deleted,
                    deleted.tables_dropped.len(),
                    deleted.secrets_deleted,
                    deleted.settings_deleted
                ),
                json!({ "app_id": app, "deleted": deleted }),
            ))
        }
        AppOps::Model {
            file,
            app,
            model,
            clear,
            secrets,
        } => {
            if model.is_none() && !clear {
                let db = read(&file, &secrets, limits)?;
                require_app(&db, &app)?;
                let model = db.app_model(&app)?;
                return Ok(read_outcome(
                    format!(
                        "app {app}: model {}",
                        model.as_deref().unwrap_or("inherited")
                    ),
                    json!({ "app_id": app, "model": model }),
                ));
            }
            let ((), length) = write(&file, |db| {
                require_app(db, &app)?;
                let before = db.app_model(&app)?;
                if before == model {
                    return Ok(Change {
                        result: (),
                        changed: false,
                    });
                }
                db.set_app_model(&app, model.as_deref())?;
                Ok(changed(()))
            })?;
            Ok(written(
                &file,
                length,
                format!(
                    "app {app}: model {}",
                    model.as_deref().unwrap_or("inherited")
                ),
                json!({ "app_id": app, "model": model }),
            ))
        }
    }
}

// --- snug docs … --------------------------------------------------------------------------------

#[derive(Debug, Subcommand)]
pub(crate) enum DocsCommand {
    /// Seeds an app's wiki from Markdown files: slug = file name without `.md`, title = its first
    /// `# ` heading; prompt files join into the `build-prompt` doc. Only slugs the app does not
    /// have are written: an existing doc is never overwritten.
    Seed {
        /// The user database.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// Authoring files (`vision.md`, `lessons.md`, …).
        #[arg(value_name = "MARKDOWN_FILE")]
        docs: Vec<PathBuf>,
        /// Prompt files, joined in name order into `build-prompt`.
        #[arg(long = "prompt", value_name = "FILE")]
        prompts: Vec<PathBuf>,
    },
    /// Creates or replaces a doc (an existing title is kept without --title).
    Set {
        /// The user database.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// The doc's slug (`lessons`, `vision`, `build-prompt`, …).
        #[arg(long)]
        slug: String,
        /// Title.
        #[arg(long)]
        title: Option<String>,
        /// A file holding the Markdown.
        #[arg(long, value_name = "MARKDOWN_FILE")]
        content_file: PathBuf,
    },
    /// Prints one doc's Markdown.
    Get {
        /// The user database, plain or protected.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// The doc's slug.
        #[arg(long)]
        slug: String,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Lists an app's docs.
    List {
        /// The user database, plain or protected.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Deletes one doc.
    Delete {
        /// The user database.
        file: PathBuf,
        /// The app (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// The doc's slug.
        #[arg(long)]
        slug: String,
    },
}

fn borrowed(files: &[(String, String)]) -> Vec<(&str, &str)> {
    files
        .iter()
        .map(|(name, text)| (name.as_str(), text.as_str()))
        .collect()
}

/// A file's name as a seed takes it.
fn file_name(path: &Path) -> Result<String, Failure> {
    path.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .ok_or_else(|| invalid(format!("{} has no UTF-8 file name", path.display())))
}

pub(crate) fn run_docs(command: DocsCommand, limits: &Limits) -> Result<Outcome, Failure> {
    match command {
        DocsCommand::Seed {
            file,
            app,
            docs,
            prompts,
        } => {
            if docs.is_empty() && prompts.is_empty() {
                return Err(Failure::usage(
                    "give Markdown files to seed (or --prompt files)",
                ));
            }
            let read_all = |paths: &[PathBuf]| -> Result<Vec<(String, String)>, Failure> {
                paths
                    .iter()
                    .map(|path| Ok((file_name(path)?, read_text(path)?)))
                    .collect()
            };
            let docs = read_all(&docs)?;
            let prompts = read_all(&prompts)?;
            let seeds = snug_schema::starter_doc_seeds(&borrowed(&docs), &borrowed(&prompts));
            let slugs: Vec<&str> = seeds.iter().map(|s| s.slug.as_str()).collect();
            let (inserted, length) = write(&file, |db| {
                require_app(db, &app)?;
                let inserted = db.seed_docs_absent_only(&app, &seeds)?;
                Ok(Change {
                    result: inserted,
                    changed: inserted > 0,
                })
            })?;
            Ok(written(
                &file,
                length,
                format!(
                    "Seeded {inserted} of {} doc(s) for app {app} (existing slugs are kept)",
                    seeds.len()
                ),
                json!({ "app_id": app, "seeded": inserted, "slugs": slugs }),
            ))
        }
        DocsCommand::Set {
            file,
            app,
            slug,
            title,
            content_file,
        } => {
            let content = read_text(&content_file)?;
            let ((), length) = write(&file, |db| {
                require_app(db, &app)?;
                db.upsert_doc(&app, &slug, title.as_deref(), &content)?;
                Ok(changed(()))
            })?;
            Ok(written(
                &file,
                length,
                format!("Wrote doc {slug} of app {app}"),
                json!({ "app_id": app, "slug": slug }),
            ))
        }
        DocsCommand::Get {
            file,
            app,
            slug,
            secrets,
        } => {
            let db = read(&file, &secrets, limits)?;
            let doc = db.doc(&app, &slug)?;
            Ok(read_outcome(doc.content.clone(), json!({ "doc": doc })))
        }
        DocsCommand::List { file, app, secrets } => {
            let db = read(&file, &secrets, limits)?;
            require_app(&db, &app)?;
            let docs = db.docs(&app)?;
            let mut text = format!("app {app}: {} doc(s)", docs.len());
            for doc in &docs {
                text.push_str(&format!(
                    "\n  {:<16} {} ({} bytes, {})",
                    doc.slug,
                    doc.title.as_deref().unwrap_or(""),
                    doc.content.len(),
                    doc.updated_at
                ));
            }
            Ok(read_outcome(text, json!({ "app_id": app, "docs": docs })))
        }
        DocsCommand::Delete { file, app, slug } => {
            let ((), length) = write(&file, |db| Ok(changed(db.delete_doc(&app, &slug)?)))?;
            Ok(written(
                &file,
                length,
                format!("Deleted doc {slug} of app {app}"),
                json!({ "app_id": app, "slug": slug }),
            ))
        }
    }
}

// --- snug chat … --------------------------------------------------------------------------------

#[derive(Debug, Subcommand)]
pub(crate) enum ChatCommand {
    /// Appends a message, creating its thread when new.
    Append {
        /// The user database.
        file: PathBuf,
        /// The thread (`app:<appId>`, `thr-<uuid>`, `builder:*`).
        #[arg(long)]
        thread: String,
        /// Who wrote it: user, assistant or system.
        #[arg(long)]
        role: String,
        /// The message text.
        #[arg(long, conflicts_with = "content_file")]
        content: Option<String>,
        /// A file holding the message text.
        #[arg(long, value_name = "FILE")]
        content_file: Option<PathBuf>,
        /// The thread's app (a new thread's; an existing thread keeps its own when absent).
        #[arg(long)]
        app: Option<String>,
        /// The thread's title (an existing thread keeps its own when absent).
        #[arg(long)]
        title: Option<String>,
        /// Pin it: pruning spares pinned messages (bootstrap turns).
        #[arg(long)]
        pinned: bool,
        /// The JSON sidecar, as JSON text.
        #[arg(long, value_name = "JSON")]
        meta: Option<String>,
    },
    /// Deletes a thread's unpinned messages beyond the newest KEEP unpinned ones.
    Prune {
        /// The user database.
        file: PathBuf,
        /// The thread.
        #[arg(long)]
        thread: String,
        /// How many of the newest unpinned messages to keep.
        #[arg(long)]
        keep: usize,
    },
    /// Pins a message (or unpins it with --unpin).
    Pin {
        /// The user database.
        file: PathBuf,
        /// The message id (`snug_chat_messages.id`).
        #[arg(long)]
        message: i64,
        /// Unpin instead.
        #[arg(long)]
        unpin: bool,
    },
    /// Deletes a thread and all its messages, pinned ones included.
    Delete {
        /// The user database.
        file: PathBuf,
        /// The thread.
        #[arg(long)]
        thread: String,
    },
    /// Lists chat threads, most recently updated first.
    Threads {
        /// The user database, plain or protected.
        file: PathBuf,
        /// Only this app's threads.
        #[arg(long)]
        app: Option<String>,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Lists a thread's messages in order.
    Messages {
        /// The user database, plain or protected.
        file: PathBuf,
        /// The thread.
        #[arg(long)]
        thread: String,
        /// Only messages with a larger id.
        #[arg(long, value_name = "ID")]
        after: Option<i64>,
        /// At most this many.
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        secrets: SecretArgs,
    },
}

pub(crate) fn run_chat(command: ChatCommand, limits: &Limits) -> Result<Outcome, Failure> {
    match command {
        ChatCommand::Append {
            file,
            thread,
            role,
            content,
            content_file,
            app,
            title,
            pinned,
            meta,
        } => {
            let role = ChatRole::parse(&role).ok_or_else(|| {
                invalid(format!(
                    "--role {role:?}: the role is user, assistant or system"
                ))
            })?;
            let content = match (content, content_file) {
                (Some(text), _) => text,
                (None, Some(path)) => read_text(&path)?,
                (None, None) => {
                    return Err(Failure::usage(
                        "give the message: --content or --content-file",
                    ));
                }
            };
            let meta = meta
                .as_deref()
                .map(|m| parse_json("--meta", m))
                .transpose()?;
            let message = NewChatMessage {
                thread_id: thread.clone(),
                app_id: app,
                title,
                role,
                content,
                pinned,
                meta,
            };
            let (id, length) = write(&file, |db| Ok(changed(db.append_chat_message(&message)?)))?;
            Ok(written(
                &file,
                length,
                format!("Appended message {id} to thread {thread}"),
                json!({ "thread_id": thread, "message_id": id }),
            ))
        }
        ChatCommand::Prune { file, thread, keep } => {
            let (deleted, length) = write(&file, |db| {
                let deleted = db.prune_chat_messages(&thread, keep)?;
                Ok(Change {
                    result: deleted,
                    changed: deleted > 0,
                })
            })?;
            Ok(written(
                &file,
                length,
                format!("Pruned {deleted} message(s) from thread {thread}"),
                json!({ "thread_id": thread, "deleted": deleted }),
            ))
        }
        ChatCommand::Pin {
            file,
            message,
            unpin,
        } => {
            let ((), length) = write(&file, |db| {
                Ok(changed(db.pin_chat_message(message, !unpin)?))
            })?;
            Ok(written(
                &file,
                length,
                format!(
                    "{} message {message}",
                    if unpin { "Unpinned" } else { "Pinned" }
                ),
                json!({ "message_id": message, "pinned": !unpin }),
            ))
        }
        ChatCommand::Delete { file, thread } => {
            let (deleted, length) =
                write(&file, |db| Ok(changed(db.delete_chat_thread(&thread)?)))?;
            Ok(written(
                &file,
                length,
                format!("Deleted thread {thread} and its {deleted} message(s)"),
                json!({ "thread_id": thread, "deleted": deleted }),
            ))
        }
        ChatCommand::Threads { file, app, secrets } => {
            let db = read(&file, &secrets, limits)?;
            let threads = db.chat_threads(app.as_deref())?;
            let mut text = format!("{} thread(s)", threads.len());
            for t in &threads {
                text.push_str(&format!(
                    "\n  {}  {}{}",
                    t.thread_id,
                    t.title.as_deref().unwrap_or(""),
                    t.app_id
                        .as_deref()
                        .map(|a| format!(" (app {a})"))
                        .unwrap_or_default()
                ));
            }
            Ok(read_outcome(text, json!({ "threads": threads })))
        }
        ChatCommand::Messages {
            file,
            thread,
            after,
            limit,
            secrets,
        } => {
            let db = read(&file, &secrets, limits)?;
            let after = after.unwrap_or(i64::MIN);
            let mut messages: Vec<_> = db
                .chat_messages(&thread)?
                .into_iter()
                .filter(|m| m.id > after)
                .collect();
            let limit = limit.unwrap_or(usize::MAX);
            let more = messages.len() > limit;
            messages.truncate(limit);
            let mut text = format!("thread {thread}: {} message(s)", messages.len());
            for m in &messages {
                text.push_str(&format!(
                    "\n  [{}] {}{}: {}",
                    m.id,
                    m.role.as_str(),
                    if m.pinned { " (pinned)" } else { "" },
                    m.content
                ));
            }
            if more {
                text.push_str("\n  … more: ask again with --after the last id");
            }
            Ok(read_outcome(
                text,
                json!({ "thread_id": thread, "messages": messages, "more": more }),
            ))
        }
    }
}

// --- snug settings|profile|sync-config … --------------------------------------------------------

#[derive(Debug, Subcommand)]
pub(crate) enum KvCommand {
    /// Prints one value as JSON text (null output and exit 0 when the key is absent).
    Get {
        /// The user database, plain or protected.
        file: PathBuf,
        /// The key.
        key: String,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Stores a value, given as JSON text (`'"x"'`, `true`, `'{"a":1}'`), in the reference's
    /// compact encoding.
    Set {
        /// The user database.
        file: PathBuf,
        /// The key.
        key: String,
        /// The value, as JSON text.
        value: String,
    },
    /// Removes a key.
    Delete {
        /// The user database.
        file: PathBuf,
        /// The key.
        key: String,
    },
    /// Lists every entry, by key.
    List {
        /// The user database, plain or protected.
        file: PathBuf,
        #[command(flatten)]
        secrets: SecretArgs,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum SettingsCommand {
    #[command(flatten)]
    Kv(KvCommand),
    /// Shows or replaces the third-party identity directory (`sidecarIdentityDirectory`, §20).
    SidecarIdentities {
        /// The user database (plain or protected to show; plain to change).
        file: PathBuf,
        /// Replace the directory with these identities, in order.
        #[arg(long = "set", value_name = "IDENTITY", conflicts_with = "clear")]
        identities: Vec<String>,
        /// Remove the directory.
        #[arg(long)]
        clear: bool,
        #[command(flatten)]
        secrets: SecretArgs,
    },
}

pub(crate) fn run_settings(command: SettingsCommand, limits: &Limits) -> Result<Outcome, Failure> {
    match command {
        SettingsCommand::Kv(command) => run_kv(KvTable::Settings, command, limits),
        SettingsCommand::SidecarIdentities {
            file,
            identities,
            clear,
            secrets,
        } => {
            if identities.is_empty() && !clear {
                let db = read(&file, &secrets, limits)?;
                let identities = db.sidecar_identity_directory()?;
                return Ok(read_outcome(
                    format!(
                        "{} identit(ies): {}",
                        identities.len(),
                        identities.join(", ")
                    ),
                    json!({ "identities": identities }),
                ));
            }
            let ((), length) = write(&file, |db| {
                if db.sidecar_identity_directory()? == identities {
                    return Ok(Change {
                        result: (),
                        changed: false,
                    });
                }
                db.set_sidecar_identity_directory(&identities)?;
                Ok(changed(()))
            })?;
            Ok(written(
                &file,
                length,
                format!(
                    "sidecar identity directory: {} identit(ies)",
                    identities.len()
                ),
                json!({ "identities": identities }),
            ))
        }
    }
}

pub(crate) fn run_kv(
    table: KvTable,
    command: KvCommand,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    let name = table.name();
    match command {
        KvCommand::Get { file, key, secrets } => {
            let db = read(&file, &secrets, limits)?;
            let value = db.kv_get(table, &key)?;
            let encoded = value.as_ref().map(encode_json);
            Ok(read_outcome(
                encoded.clone().unwrap_or_else(|| "null".to_owned()),
                json!({ "table": name, "key": key, "present": value.is_some(), "value_json": encoded }),
            ))
        }
        KvCommand::Set { file, key, value } => {
            let value = parse_json("the value", &value)?;
            let ((), length) = write(&file, |db| {
                if db.kv_get(table, &key)?.as_ref() == Some(&value) {
                    return Ok(Change {
                        result: (),
                        changed: false,
                    });
                }
                db.kv_set(table, &key, &value)?;
                Ok(changed(()))
            })?;
            let encoded = encode_json(&value);
            Ok(written(
                &file,
                length,
                format!("{name}: {key} = {encoded}"),
                json!({ "table": name, "key": key, "value_json": encoded }),
            ))
        }
        KvCommand::Delete { file, key } => {
            let (existed, length) = write(&file, |db| {
                let existed = db.kv_delete(table, &key)?;
                Ok(Change {
                    result: existed,
                    changed: existed,
                })
            })?;
            let text = if existed {
                format!("{name}: deleted {key}")
            } else {
                format!("{name}: no key {key}")
            };
            Ok(written(
                &file,
                length,
                text,
                json!({ "table": name, "key": key, "existed": existed }),
            ))
        }
        KvCommand::List { file, secrets } => {
            let db = read(&file, &secrets, limits)?;
            let entries = db.kv_entries(table)?;
            let mut text = format!("{name}: {} entr(ies)", entries.len());
            let mut listed = Vec::with_capacity(entries.len());
            for (key, value) in entries {
                let encoded = encode_json(&value);
                text.push_str(&format!("\n  {key} = {encoded}"));
                listed.push(json!({ "key": key, "value_json": encoded }));
            }
            Ok(read_outcome(
                text,
                json!({ "table": name, "entries": listed }),
            ))
        }
    }
}

// --- snug secrets … -----------------------------------------------------------------------------

/// The environment variable holding the value for `snug secrets set`.
const ENV_SECRET_VALUE: &str = "SNUG_SECRET_VALUE";

#[derive(Debug, Subcommand)]
pub(crate) enum SecretsCommand {
    /// Lists the credential keys in `snug_secrets`; values are never shown.
    List {
        /// The user database, plain or protected.
        file: PathBuf,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Stores a credential value (raw text) read from a file or SNUG_SECRET_VALUE, never from
    /// the command line. A default export strips it.
    Set {
        /// The user database.
        file: PathBuf,
        /// The key (`byok:anthropic`, `auth:<appId>:<slot>:<field>`, …).
        key: String,
        /// A file holding the value (one trailing newline is ignored). Also: SNUG_SECRET_VALUE.
        #[arg(long, value_name = "FILE")]
        value_file: Option<PathBuf>,
    },
    /// Removes a credential, zeroing its bytes in place.
    Delete {
        /// The user database.
        file: PathBuf,
        /// The key.
        key: String,
    },
}

pub(crate) fn run_secrets(command: SecretsCommand, limits: &Limits) -> Result<Outcome, Failure> {
    match command {
        SecretsCommand::List { file, secrets } => {
            let db = read(&file, &secrets, limits)?;
            let keys = db.secret_keys()?;
            let mut text = format!("{} credential(s)", keys.len());
            for key in &keys {
                text.push_str(&format!("\n  {key}"));
            }
            Ok(read_outcome(text, json!({ "keys": keys })))
        }
        SecretsCommand::Set {
            file,
            key,
            value_file,
        } => {
            let value = match &value_file {
                Some(path) => secrets::read_secret_file(path)?,
                None => match std::env::var(ENV_SECRET_VALUE) {
                    Ok(value) => zeroize::Zeroizing::new(value),
                    Err(_) => {
                        return Err(Failure::usage(format!(
                            "give the value in a file (--value-file) or in {ENV_SECRET_VALUE}; \
                             never on the command line"
                        )));
                    }
                },
            };
            let ((), length) = write(&file, |db| {
                db.set_secret(&key, &value)?;
                Ok(changed(()))
            })?;
            Ok(written(
                &file,
                length,
                format!("stored credential {key}"),
                json!({ "key": key }),
            ))
        }
        SecretsCommand::Delete { file, key } => {
            let (existed, length) = write(&file, |db| {
                let existed = db.delete_secret(&key)?;
                Ok(Change {
                    result: existed,
                    changed: existed,
                })
            })?;
            Ok(written(
                &file,
                length,
                if existed {
                    format!("deleted credential {key}")
                } else {
                    format!("no credential {key}")
                },
                json!({ "key": key, "existed": existed }),
            ))
        }
    }
}
