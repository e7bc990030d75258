//! Apps and their versions (spec §8.1, notes b.5): install, save with retention, revert,
//! reset-to-factory, delete a version, update metadata, and delete an app with everything it owns.
//!
//! Retention keeps every pinned version plus the newest [`VERSIONS_RETAINED`] unpinned versions
//! by version number, counted as rows. The reference deletes `version <= new - 5`, which keeps
//! fewer than five unpinned rows after manual deletes or pinned saves; counting rows keeps the
//! "≥ 5 unpinned" promise in every case and agrees with the reference when versions are dense.

use rusqlite::{OptionalExtension, Row, Transaction, params};
use serde::Serialize;

use crate::clock::uuid_v4;
use crate::db::{UserDb, check_cap};
use crate::ddl::VERSIONS_RETAINED;
use crate::error::AppError;
use crate::kv::{SIDECAR_HOST, SIDECAR_IDENTITY_DIRECTORY_KEY};
use crate::token::{app_data_token, app_rest_table_prefix};
use crate::wipe::is_app_credential_key;

/// An app to install.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewApp {
    /// The app id; a fresh UUID v4 when `None`.
    pub app_id: Option<String>,
    /// Display name.
    pub display_name: String,
    /// Optional description.
    pub description: Option<String>,
    /// Optional icon emoji.
    pub icon_emoji: Option<String>,
    /// Optional icon colour.
    pub icon_color: Option<String>,
    /// Whether the app keeps data.
    pub uses_db: bool,
    /// The complete HTML of version 1.
    pub html: String,
    /// Note on version 1.
    pub note: Option<String>,
    /// Install identity (`starter:<folder>`, `share:<lineage>`, `agent:<lineage>`): an app with
    /// the same source is found, not installed twice.
    pub install_source: Option<String>,
}

/// The outcome of [`UserDb::install_app`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Installed {
    /// The app's id.
    pub app_id: String,
    /// False when an app with the same install source already existed and was returned.
    pub created: bool,
}

/// One `snug_apps` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct App {
    /// App id (also the data namespace).
    pub app_id: String,
    /// Display name.
    pub display_name: String,
    /// Description.
    pub description: Option<String>,
    /// Icon emoji.
    pub icon_emoji: Option<String>,
    /// Icon colour.
    pub icon_color: Option<String>,
    /// Whether the app keeps data.
    pub uses_db: bool,
    /// The version the app runs.
    pub current_version: i64,
    /// Creation time.
    pub created_at: String,
    /// Last change.
    pub updated_at: String,
    /// Install identity.
    pub install_source: Option<String>,
}

impl App {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<App> {
        Ok(App {
            app_id: row.get(0)?,
            display_name: row.get(1)?,
            description: row.get(2)?,
            icon_emoji: row.get(3)?,
            icon_color: row.get(4)?,
            uses_db: row.get::<_, i64>(5)? == 1,
            current_version: row.get(6)?,
            created_at: row.get(7)?,
            updated_at: row.get(8)?,
            install_source: row.get(9)?,
        })
    }
}

const APP_COLUMNS: &str = "app_id, display_name, description, icon_emoji, icon_color, uses_db, \
                           current_version, created_at, updated_at, install_source";

/// One `snug_app_versions` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppVersion {
    /// The app.
    pub app_id: String,
    /// Version number.
    pub version: i64,
    /// Complete HTML.
    pub html: String,
    /// Note (`revert to v3`, `reset to factory (v1)`, …).
    pub note: Option<String>,
    /// Creation time.
    pub created_at: String,
    /// Pinned versions are never pruned.
    pub pinned: bool,
    /// The runtime contract as stored (raw JSON text), if any.
    pub runtime_contract_json: Option<String>,
}

/// A version without its HTML, for listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionSummary {
    /// Version number.
    pub version: i64,
    /// Note.
    pub note: Option<String>,
    /// Creation time.
    pub created_at: String,
    /// Whether it is pinned.
    pub pinned: bool,
    /// Whether it carries a runtime contract.
    pub has_runtime_contract: bool,
}

/// Where a new version's runtime contract comes from.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum ContractSource {
    /// Copy the current version's contract text verbatim.
    #[default]
    CopyForward,
    /// Copy the contract text of this version verbatim (it must exist).
    CopyFrom(i64),
    /// Store this contract (a JSON object), encoded compactly.
    Set(serde_json::Value),
    /// Store no contract.
    Clear,
}

/// Options of [`UserDb::save_app_version`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SaveVersion {
    /// Note on the new version.
    pub note: Option<String>,
    /// Pin it (an installed starter update is pinned; ordinary saves are not).
    pub pinned: bool,
    /// Its runtime contract.
    pub contract: ContractSource,
}

/// A metadata change; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppMetaUpdate {
    /// New display name.
    pub display_name: Option<String>,
    /// New description (`Some(None)` clears it).
    pub description: Option<Option<String>>,
    /// New icon emoji (`Some(None)` clears it).
    pub icon_emoji: Option<Option<String>>,
    /// New icon colour (`Some(None)` clears it).
    pub icon_color: Option<Option<String>>,
    /// New `uses_db`.
    pub uses_db: Option<bool>,
}

/// What [`UserDb::delete_app`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeletedApp {
    /// The app's at-rest data tables that were dropped.
    pub tables_dropped: Vec<String>,
    /// Rows removed from hub tables (versions, docs, chat, schemas, migrations, connections, app).
    pub rows_deleted: usize,
    /// `snug_secrets` keys removed (`auth:<appId>:…` credentials and its share-link secrets).
    pub secrets_deleted: usize,
    /// `snug_settings` keys removed (per-app namespaced keys).
    pub settings_deleted: usize,
    /// Whether the sidecar identity directory was wiped because no approved grant needs it any more.
    pub sidecar_directory_wiped: bool,
}

/// Settings keys `<prefix>:<appId>` that belong to one app.
const PER_APP_SETTING_PREFIXES: [&str; 8] = [
    "appModel",
    "appProvider",
    "appRenamed",
    "starterVersion",
    "sharedBundle",
    "scheduleMuted",
    "accessLog",
    "accessMuted",
];

/// Settings keys `<prefix>:<appId>:<id>` (exactly one more segment) that belong to one app.
const PER_APP_SETTING_SUBKEY_PREFIXES: [&str; 3] =
    ["shareLink", "scheduleDeclined", "accessDeclined"];

/// Returns whether settings key `key` belongs to app `app_id` (whole-segment match).
pub fn is_app_setting_key(key: &str, app_id: &str) -> bool {
    let Some((prefix, rest)) = key.split_once(':') else {
        return false;
    };
    if PER_APP_SETTING_PREFIXES.contains(&prefix) {
        return rest == app_id;
    }
    if PER_APP_SETTING_SUBKEY_PREFIXES.contains(&prefix) {
        return rest
            .strip_prefix(app_id)
            .and_then(|tail| tail.strip_prefix(':'))
            .is_some_and(|id| !id.is_empty() && !id.contains(':'));
    }
    false
}

fn not_found(app_id: &str) -> AppError {
    AppError::AppNotFound {
        app_id: app_id.to_owned(),
    }
}

fn current_version_of(tx: &Transaction<'_>, app_id: &str) -> Result<i64, AppError> {
    tx.query_row(
        "SELECT current_version FROM snug_apps WHERE app_id = ?1",
        [app_id],
        |row| row.get(0),
    )
    .optional()?
    .ok_or_else(|| not_found(app_id))
}

/// Returns the stored contract text of a version, or `VersionNotFound`.
fn contract_of(
    tx: &Transaction<'_>,
    app_id: &str,
    version: i64,
) -> Result<Option<String>, AppError> {
    tx.query_row(
        "SELECT runtime_contract_json FROM snug_app_versions WHERE app_id = ?1 AND version = ?2",
        params![app_id, version],
        |row| row.get::<_, Option<String>>(0),
    )
    .optional()?
    .ok_or_else(|| AppError::VersionNotFound {
        app_id: app_id.to_owned(),
        version,
    })
}

/// Inserts version `current + 1`, prunes, moves the app to it and checks the cap.
fn append_version(
    tx: &Transaction<'_>,
    app_id: &str,
    html: &str,
    note: Option<&str>,
    pinned: bool,
    contract: Option<String>,
    now: &str,
) -> Result<i64, AppError> {
    let current = current_version_of(tx, app_id)?;
    // MAX(version) guards against a current_version that lags a stored row (hand-edited files).
    let newest: i64 = tx.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM snug_app_versions WHERE app_id = ?1",
        [app_id],
        |row| row.get(0),
    )?;
    let version = current.max(newest) + 1;
    tx.execute(
        "INSERT INTO snug_app_versions (app_id, version, html, note, created_at, pinned, runtime_contract_json) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![app_id, version, html, note, now, i64::from(pinned), contract],
    )?;
    prune_versions(tx, app_id)?;
    tx.execute(
        "UPDATE snug_apps SET current_version = ?2, updated_at = ?3 WHERE app_id = ?1",
        params![app_id, version, now],
    )?;
    check_cap(tx)?;
    Ok(version)
}

/// Deletes unpinned versions beyond the newest [`VERSIONS_RETAINED`] unpinned ones.
fn prune_versions(tx: &Transaction<'_>, app_id: &str) -> rusqlite::Result<usize> {
    tx.execute(
        "DELETE FROM snug_app_versions WHERE app_id = ?1 AND pinned = 0 AND version NOT IN \
         (SELECT version FROM snug_app_versions WHERE app_id = ?1 AND pinned = 0 ORDER BY version DESC LIMIT ?2)",
        params![app_id, VERSIONS_RETAINED as i64],
    )
}

fn encode_contract(contract: &serde_json::Value) -> Result<String, AppError> {
    if !contract.is_object() {
        return Err(AppError::InvalidContract);
    }
    Ok(crate::kv::encode_json(contract))
}

impl UserDb {
    /// Installs an app with version 1 (pinned: the factory version), or returns the existing
    /// app with the same install source.
    ///
    /// An app id whose `appDataToken` is another installed app's (`A7F3…` beside `a7f3…`) is
    /// refused ([`AppError::AppTokenCollision`]): the two would share their tables (§8.2).
    pub fn install_app(&mut self, new: &NewApp) -> Result<Installed, AppError> {
        let now = self.now();
        let app_id = match &new.app_id {
            Some(app_id) => app_id.clone(),
            None => uuid_v4().map_err(AppError::Entropy)?,
        };
        let tx = self.write_tx()?;
        if let Some(source) = &new.install_source {
            let existing: Option<String> = tx
                .query_row(
                    "SELECT app_id FROM snug_apps WHERE install_source = ?1",
                    [source],
                    |row| row.get(0),
                )
                .optional()?;
            if let Some(app_id) = existing {
                return Ok(Installed {
                    app_id,
                    created: false,
                });
            }
        }
        let taken: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM snug_apps WHERE app_id = ?1)",
            [&app_id],
            |row| row.get(0),
        )?;
        if taken {
            return Err(AppError::AppExists { app_id });
        }
        if let Some(other_app_id) = crate::isolation::other_holder(&tx, &app_id)? {
            return Err(AppError::AppTokenCollision {
                app_id,
                other_app_id,
            });
        }
        tx.execute(
            &format!("INSERT INTO snug_apps ({APP_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?7, ?8)"),
            params![
                app_id,
                new.display_name,
                new.description,
                new.icon_emoji,
                new.icon_color,
                i64::from(new.uses_db),
                now,
                new.install_source
            ],
        )?;
        tx.execute(
            "INSERT INTO snug_app_versions (app_id, version, html, note, created_at, pinned, runtime_contract_json) \
             VALUES (?1, 1, ?2, ?3, ?4, 1, NULL)",
            params![app_id, new.html, new.note, now],
        )?;
        check_cap(&tx)?;
        tx.commit()?;
        Ok(Installed {
            app_id,
            created: true,
        })
    }

    /// Saves `html` as a new version, then prunes to every pinned version plus the newest
    /// [`VERSIONS_RETAINED`] unpinned ones. Returns the new version number.
    pub fn save_app_version(
        &mut self,
        app_id: &str,
        html: &str,
        options: &SaveVersion,
    ) -> Result<i64, AppError> {
        let now = self.now();
        let tx = self.write_tx()?;
        let current = current_version_of(&tx, app_id)?;
        let contract = match &options.contract {
            // A pruned or missing current row simply has no contract to carry.
            ContractSource::CopyForward => match contract_of(&tx, app_id, current) {
                Ok(contract) => contract,
                Err(AppError::VersionNotFound { .. }) => None,
                Err(err) => return Err(err),
            },
            ContractSource::CopyFrom(version) => contract_of(&tx, app_id, *version)?,
            ContractSource::Set(contract) => Some(encode_contract(contract)?),
            ContractSource::Clear => None,
        };
        let version = append_version(
            &tx,
            app_id,
            html,
            options.note.as_deref(),
            options.pinned,
            contract,
            &now,
        )?;
        tx.commit()?;
        Ok(version)
    }

    /// Reverts to version `to` by copying it forward as a new version (note `revert to v<to>`,
    /// contract taken from `to`). Returns the new version number.
    pub fn revert_app(&mut self, app_id: &str, to: i64) -> Result<i64, AppError> {
        let now = self.now();
        let tx = self.write_tx()?;
        current_version_of(&tx, app_id)?;
        let (html, contract) = tx
            .query_row(
                "SELECT html, runtime_contract_json FROM snug_app_versions WHERE app_id = ?1 AND version = ?2",
                params![app_id, to],
                |row| Ok((row.get::<_, String>(0)?, row.get::<_, Option<String>>(1)?)),
            )
            .optional()?
            .ok_or_else(|| AppError::VersionNotFound { app_id: app_id.to_owned(), version: to })?;
        let note = format!("revert to v{to}");
        let version = append_version(&tx, app_id, &html, Some(&note), false, contract, &now)?;
        tx.commit()?;
        Ok(version)
    }

    /// Resets to the factory version — the NEWEST pinned version (starter updates add pins) — by
    /// copying it forward (note `reset to factory (v<n>)`). Returns the new version number.
    pub fn reset_to_factory(&mut self, app_id: &str) -> Result<i64, AppError> {
        let now = self.now();
        let tx = self.write_tx()?;
        current_version_of(&tx, app_id)?;
        let (factory, html, contract) = tx
            .query_row(
                "SELECT version, html, runtime_contract_json FROM snug_app_versions \
                 WHERE app_id = ?1 AND pinned = 1 ORDER BY version DESC LIMIT 1",
                [app_id],
                |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, Option<String>>(2)?,
                    ))
                },
            )
            .optional()?
            .ok_or_else(|| AppError::NoFactoryVersion {
                app_id: app_id.to_owned(),
            })?;
        let note = format!("reset to factory (v{factory})");
        let version = append_version(&tx, app_id, &html, Some(&note), false, contract, &now)?;
        tx.commit()?;
        Ok(version)
    }

    /// Deletes one version. Checked in order: it exists, it is not pinned, it is not current.
    pub fn delete_app_version(&mut self, app_id: &str, version: i64) -> Result<(), AppError> {
        let tx = self.write_tx()?;
        let current = current_version_of(&tx, app_id)?;
        let pinned: bool = tx
            .query_row(
                "SELECT pinned = 1 FROM snug_app_versions WHERE app_id = ?1 AND version = ?2",
                params![app_id, version],
                |row| row.get(0),
            )
            .optional()?
            .ok_or_else(|| AppError::VersionNotFound {
                app_id: app_id.to_owned(),
                version,
            })?;
        if pinned {
            return Err(AppError::VersionPinned {
                app_id: app_id.to_owned(),
                version,
            });
        }
        if version == current {
            return Err(AppError::VersionCurrent {
                app_id: app_id.to_owned(),
                version,
            });
        }
        tx.execute(
            "DELETE FROM snug_app_versions WHERE app_id = ?1 AND version = ?2",
            params![app_id, version],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Changes display metadata; versions are untouched.
    pub fn update_app_meta(
        &mut self,
        app_id: &str,
        update: &AppMetaUpdate,
    ) -> Result<App, AppError> {
        let now = self.now();
        let tx = self.write_tx()?;
        let mut app = tx
            .query_row(
                &format!("SELECT {APP_COLUMNS} FROM snug_apps WHERE app_id = ?1"),
                [app_id],
                App::from_row,
            )
            .optional()?
            .ok_or_else(|| not_found(app_id))?;
        if let Some(name) = &update.display_name {
            app.display_name.clone_from(name);
        }
        if let Some(description) = &update.description {
            app.description.clone_from(description);
        }
        if let Some(emoji) = &update.icon_emoji {
            app.icon_emoji.clone_from(emoji);
        }
        if let Some(color) = &update.icon_color {
            app.icon_color.clone_from(color);
        }
        if let Some(uses_db) = update.uses_db {
            app.uses_db = uses_db;
        }
        app.updated_at = now;
        tx.execute(
            "UPDATE snug_apps SET display_name = ?2, description = ?3, icon_emoji = ?4, icon_color = ?5, \
             uses_db = ?6, updated_at = ?7 WHERE app_id = ?1",
            params![
                app_id,
                app.display_name,
                app.description,
                app.icon_emoji,
                app.icon_color,
                i64::from(app.uses_db),
                app.updated_at
            ],
        )?;
        check_cap(&tx)?;
        tx.commit()?;
        Ok(app)
    }

    /// Returns one app.
    pub fn app(&self, app_id: &str) -> Result<App, AppError> {
        self.connection()
            .query_row(
                &format!("SELECT {APP_COLUMNS} FROM snug_apps WHERE app_id = ?1"),
                [app_id],
                App::from_row,
            )
            .optional()?
            .ok_or_else(|| not_found(app_id))
    }

    /// Returns every app, oldest first.
    pub fn apps(&self) -> Result<Vec<App>, AppError> {
        let mut stmt = self.connection().prepare(&format!(
            "SELECT {APP_COLUMNS} FROM snug_apps ORDER BY created_at, app_id"
        ))?;
        let apps = stmt
            .query_map([], App::from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(apps)
    }

    /// Returns one version with its HTML.
    pub fn app_version(&self, app_id: &str, version: i64) -> Result<AppVersion, AppError> {
        self.app(app_id)?;
        self.connection()
            .query_row(
                "SELECT app_id, version, html, note, created_at, pinned, runtime_contract_json \
                 FROM snug_app_versions WHERE app_id = ?1 AND version = ?2",
                params![app_id, version],
                |row| {
                    Ok(AppVersion {
                        app_id: row.get(0)?,
                        version: row.get(1)?,
                        html: row.get(2)?,
                        note: row.get(3)?,
                        created_at: row.get(4)?,
                        pinned: row.get::<_, i64>(5)? == 1,
                        runtime_contract_json: row.get(6)?,
                    })
                },
            )
            .optional()?
            .ok_or_else(|| AppError::VersionNotFound {
                app_id: app_id.to_owned(),
                version,
            })
    }

    /// Returns the version the app currently runs.
    pub fn current_app_version(&self, app_id: &str) -> Result<AppVersion, AppError> {
        let app = self.app(app_id)?;
        self.app_version(app_id, app.current_version)
    }

    /// Lists an app's stored versions, newest first.
    pub fn app_versions(&self, app_id: &str) -> Result<Vec<VersionSummary>, AppError> {
        self.app(app_id)?;
        let mut stmt = self.connection().prepare(
            "SELECT version, note, created_at, pinned, runtime_contract_json IS NOT NULL \
             FROM snug_app_versions WHERE app_id = ?1 ORDER BY version DESC",
        )?;
        let versions = stmt
            .query_map([app_id], |row| {
                Ok(VersionSummary {
                    version: row.get(0)?,
                    note: row.get(1)?,
                    created_at: row.get(2)?,
                    pinned: row.get::<_, i64>(3)? == 1,
                    has_runtime_contract: row.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(versions)
    }

    /// Deletes an app and everything that belongs to it, in one transaction: its at-rest data
    /// tables (not those under a token another registered app also holds: they are that app's
    /// data as well, so deleting one of two colliding apps repairs the file), chat threads and messages, docs, versions, migrations, schema registry row,
    /// connections (tombstones too), `auth:<appId>:…` secrets, per-app settings keys and their
    /// share-link secrets, the sidecar identity directory when no approved grant needs it any
    /// more, and last the app row.
    ///
    /// `secure_delete` is on for the transaction so the app's rows and credentials are zeroed
    /// in place rather than left in free pages (the reference VACUUMs afterwards instead).
    pub fn delete_app(&mut self, app_id: &str) -> Result<DeletedApp, AppError> {
        let conn = self.connection();
        let previous_secure: i64 =
            conn.pragma_query_value(None, "secure_delete", |row| row.get(0))?;
        conn.pragma_update(None, "secure_delete", "ON")?;
        let result = self.delete_app_inner(app_id);
        self.connection()
            .pragma_update(None, "secure_delete", previous_secure)?;
        result
    }

    fn delete_app_inner(&mut self, app_id: &str) -> Result<DeletedApp, AppError> {
        let tx = self.write_tx()?;
        let exists: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM snug_apps WHERE app_id = ?1)",
            [app_id],
            |row| row.get(0),
        )?;
        if !exists {
            return Err(not_found(app_id));
        }
        let mut deleted = DeletedApp::default();

        // The registry's token wins over a recomputed one in case a file was written by an
        // implementation that derived it differently; both prefixes are dropped.
        let mut prefixes = vec![app_rest_table_prefix(&app_data_token(app_id))];
        let registered: Option<String> = tx
            .query_row(
                "SELECT token FROM snug_app_schemas WHERE app_id = ?1",
                [app_id],
                |row| row.get(0),
            )
            .optional()?;
        if let Some(token) = registered.filter(|t| crate::token::is_valid_token(t)) {
            let prefix = app_rest_table_prefix(&token);
            if !prefixes.contains(&prefix) {
                prefixes.push(prefix);
            }
        }
        // A prefix another registered app also holds (a file with two app ids of one token)
        // names that app's tables too: deleting this app must not delete its data.
        let others: Vec<String> = crate::isolation::registered_app_ids(&tx)?
            .into_iter()
            .filter(|other| other != app_id)
            .collect();
        prefixes.retain(|prefix| {
            !others
                .iter()
                .any(|other| app_rest_table_prefix(&app_data_token(other)) == *prefix)
        });
        let tables: Vec<String> = {
            let mut stmt =
                tx.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?;
            let names = stmt
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            names
                .into_iter()
                .filter(|name| prefixes.iter().any(|p| name.starts_with(p.as_str())))
                .collect()
        };
        for table in &tables {
            tx.execute_batch(&format!("DROP TABLE \"{}\"", table.replace('"', "\"\"")))?;
        }
        deleted.tables_dropped = tables;

        let thread_filter = "app_id = ?1 OR thread_id = 'app:' || ?1";
        deleted.rows_deleted += tx.execute(
            &format!(
                "DELETE FROM snug_chat_messages WHERE thread_id IN (SELECT thread_id FROM snug_chat_threads WHERE {thread_filter})"
            ),
            [app_id],
        )?;
        deleted.rows_deleted += tx.execute(
            &format!("DELETE FROM snug_chat_threads WHERE {thread_filter}"),
            [app_id],
        )?;
        for table in [
            "snug_app_docs",
            "snug_app_versions",
            "snug_app_migrations",
            "snug_app_schemas",
            "snug_connections",
        ] {
            deleted.rows_deleted +=
                tx.execute(&format!("DELETE FROM {table} WHERE app_id = ?1"), [app_id])?;
        }

        // Settings and secrets are matched on whole segments in Rust, never with LIKE, so an
        // app id that prefixes another app's id cannot take the other app's keys.
        let setting_keys: Vec<String> = {
            let mut stmt = tx.prepare("SELECT key FROM snug_settings")?;
            let keys = stmt
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            keys.into_iter()
                .filter(|key| is_app_setting_key(key, app_id))
                .collect()
        };
        // An app id containing ':' makes `auth:<a>:<b>:<c>` ambiguous (slot key of `a` or
        // legacy key of `a:b`); a key another existing app can also claim is kept.
        let other_apps: Vec<String> = {
            let mut stmt = tx.prepare("SELECT app_id FROM snug_apps WHERE app_id <> ?1")?;
            stmt.query_map([app_id], |row| row.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?
        };
        let mut secret_keys: Vec<String> = {
            let mut stmt = tx.prepare("SELECT key FROM snug_secrets WHERE key LIKE 'auth:%'")?;
            let keys = stmt
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            keys.into_iter()
                .filter(|key| is_app_credential_key(key, app_id))
                .filter(|key| {
                    !other_apps
                        .iter()
                        .any(|other| is_app_credential_key(key, other))
                })
                .collect()
        };
        for key in &setting_keys {
            if let Some(link_id) = key
                .strip_prefix("shareLink:")
                .and_then(|rest| rest.rsplit(':').next())
            {
                secret_keys.push(format!("share:{link_id}"));
            }
            deleted.settings_deleted +=
                tx.execute("DELETE FROM snug_settings WHERE key = ?1", [key])?;
        }
        for key in &secret_keys {
            deleted.secrets_deleted +=
                tx.execute("DELETE FROM snug_secrets WHERE key = ?1", [key])?;
        }

        deleted.sidecar_directory_wiped = wipe_orphaned_sidecar_directory(&tx)?;
        deleted.rows_deleted += tx.execute("DELETE FROM snug_apps WHERE app_id = ?1", [app_id])?;
        tx.commit()?;
        Ok(deleted)
    }
}

/// Deletes `sidecarIdentityDirectory` when no approved connection's frozen hosts include the
/// sidecar host (§20: the directory lives only as long as a grant that uses it).
pub(crate) fn wipe_orphaned_sidecar_directory(tx: &Transaction<'_>) -> rusqlite::Result<bool> {
    let mut stmt =
        tx.prepare("SELECT allowed_hosts FROM snug_connections WHERE status = 'approved'")?;
    let hosts = stmt.query_map([], |row| row.get::<_, String>(0))?;
    for allowed in hosts {
        let allowed = allowed?;
        let needed = serde_json::from_str::<Vec<String>>(&allowed)
            .map(|hosts| hosts.iter().any(|h| h == SIDECAR_HOST))
            // An unparseable ceiling is kept conservatively: never wipe on doubt.
            .unwrap_or(true);
        if needed {
            return Ok(false);
        }
    }
    Ok(tx.execute(
        "DELETE FROM snug_settings WHERE key = ?1",
        [SIDECAR_IDENTITY_DIRECTORY_KEY],
    )? > 0)
}

#[cfg(test)]
mod tests;
