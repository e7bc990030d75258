//! `snug app install|save|versions|show|revert|reset|delete-version|meta|delete|model`: apps and
//! their versions, through `snug-schema`'s app operations.

use super::*;

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
    Install(InstallArgs),
    /// Saves a new version; every pinned version and the newest 5 unpinned ones are kept.
    Save(SaveArgs),
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
    Show(ShowArgs),
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
    Meta(MetaArgs),
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

/// What `snug app install` takes.
#[derive(Debug, Args)]
pub(crate) struct InstallArgs {
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
}

/// What `snug app save` takes.
#[derive(Debug, Args)]
pub(crate) struct SaveArgs {
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
}

/// What `snug app show` takes.
#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
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
}

/// What `snug app meta` takes.
#[derive(Debug, Args)]
pub(crate) struct MetaArgs {
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
}

/// An optional text where the empty string means "clear it".
fn clearable(value: Option<String>) -> Option<Option<String>> {
    value.map(|text| (!text.is_empty()).then_some(text))
}

pub(crate) fn run_app(command: AppOps, limits: &Limits) -> Result<Outcome, Failure> {
    match command {
        AppOps::Install(args) => install(args),
        AppOps::Save(args) => save(args),
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
        AppOps::Show(args) => show(args, limits),
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
        AppOps::Meta(args) => meta(args),
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

fn install(
    InstallArgs {
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
    }: InstallArgs,
) -> Result<Outcome, Failure> {
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

fn save(
    SaveArgs {
        file,
        app,
        html_file,
        note,
        pinned,
        contract,
    }: SaveArgs,
) -> Result<Outcome, Failure> {
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

fn show(
    ShowArgs {
        file,
        app,
        version,
        html,
        secrets,
    }: ShowArgs,
    limits: &Limits,
) -> Result<Outcome, Failure> {
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

fn meta(
    MetaArgs {
        file,
        app,
        name,
        description,
        icon_emoji,
        icon_color,
        uses_db,
    }: MetaArgs,
) -> Result<Outcome, Failure> {
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
    let (updated, length) = write(&file, |db| Ok(changed(db.update_app_meta(&app, &change)?)))?;
    Ok(written(
        &file,
        length,
        format!("Updated app {app}"),
        json!({ "app": updated }),
    ))
}
