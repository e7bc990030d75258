//! The storage-version-6 DDL of the hub-namespace tables, each table's class, and the columns migrations append.
//!
//! The statement texts are byte-identical to the reference's `USERDB_DDL` so that `sqlite_master.sql`
//! of a file created here equals that of a file created there (SQLite stores the text minus
//! `IF NOT EXISTS`). Column names, types, order and constraints are the normative part; the text
//! convention is kept as well because a snapshot test locks it.

use serde::Serialize;

/// The storage schema version this crate reads and writes (`PRAGMA user_version`, spec §8).
pub const STORAGE_VERSION: i64 = 6;

/// Largest user database accepted on import and produced by export: 64 MiB (`MAX_USERDB_BYTES`, spec §8).
pub const MAX_USERDB_BYTES: u64 = 67_108_864;

/// How many unpinned versions of an app are kept at least (`VERSIONS_RETAINED`, spec §8.1).
pub const VERSIONS_RETAINED: usize = 5;

/// The v3 table that v5 dropped. It has no DDL here, so no replay or heal can ever recreate it.
pub const DROPPED_AUTH_SPECS_TABLE: &str = "snug_auth_specs";

/// The v1 blob table that v2 dropped (v1 app data does not survive, spec §8).
pub const DROPPED_APP_DATA_TABLE: &str = "snug_app_data";

/// Name of the partial unique index on `snug_apps(install_source)`.
pub const INSTALL_SOURCE_INDEX: &str = "idx_snug_apps_install_source";

/// What a hub table holds, which decides whether it leaves the machine in an export.
///
/// Export is default-deny: a table survives only when its class says so (see
/// [`TableClass::exported`]). Tables that are not hub tables are classified by
/// [`classify_table`]: per-app data tables are [`TableClass::Portable`], anything else is foreign
/// and never exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TableClass {
    /// The user's content: apps, versions, docs, chat, app schemas, connection requirements and grants.
    /// Travels in every export.
    Portable,
    /// Bookkeeping the host maintains about the file itself (`snug_meta`: db id, created-at).
    /// Travels so that a copy keeps its identity.
    HostInternal,
    /// User and host configuration (`snug_settings`): endpoints, model choices and the namespaced
    /// host keys of §8.1. Travels, but an importer treats it as executable config and re-arms
    /// `needsEndpointConfirm`.
    Config,
    /// Sync-origin configuration only (`snug_sync`); self-describing when ported, holds no credentials.
    SyncConfig,
    /// Credential values (`snug_secrets`). Stripped by a default export; kept only on explicit request.
    Secret,
}

impl TableClass {
    /// Returns whether a table of this class is part of an export made with or without secrets.
    pub fn exported(self, include_secrets: bool) -> bool {
        match self {
            TableClass::Portable
            | TableClass::HostInternal
            | TableClass::Config
            | TableClass::SyncConfig => true,
            TableClass::Secret => include_secrets,
        }
    }
}

/// One hub-namespace table: its name, class and `CREATE TABLE IF NOT EXISTS` text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableDef {
    /// The table name (always `snug_` prefixed).
    pub name: &'static str,
    /// What the table holds; decides export.
    pub class: TableClass,
    /// The exact reference DDL, `CREATE TABLE IF NOT EXISTS …`.
    pub ddl: &'static str,
    /// The columns `PRAGMA table_info` reports for the DDL, in order. A test derives them from the
    /// DDL; they are spelled out so the healthy-open check needs no scratch database.
    pub columns: &'static [Column],
}

/// One column as `PRAGMA table_info` reports it. Shapes are compared this way, never by DDL
/// text, because `ALTER TABLE … ADD COLUMN` splices text differently from a fresh `CREATE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Column {
    /// Column name.
    pub name: &'static str,
    /// Declared type.
    pub decl_type: &'static str,
    /// Whether the column is `NOT NULL`.
    pub not_null: bool,
    /// The default expression text, if any.
    pub default: Option<&'static str>,
    /// 1-based position in the primary key, 0 when not part of it.
    pub pk: u8,
}

impl Column {
    const fn new(
        name: &'static str,
        decl_type: &'static str,
        not_null: bool,
        default: Option<&'static str>,
        pk: u8,
    ) -> Self {
        Column {
            name,
            decl_type,
            not_null,
            default,
            pk,
        }
    }
}

/// The 13 hub tables at storage version 6, in the reference's creation order.
///
/// Every entry carries its class next to its DDL; a table cannot be added without choosing one.
pub const TABLES: [TableDef; 13] = [
    TableDef {
        name: "snug_meta",
        class: TableClass::HostInternal,
        ddl: "CREATE TABLE IF NOT EXISTS snug_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        columns: &[
            Column::new("key", "TEXT", false, None, 1),
            Column::new("value", "TEXT", true, None, 0),
        ],
    },
    TableDef {
        name: "snug_profile",
        class: TableClass::Portable,
        ddl: "CREATE TABLE IF NOT EXISTS snug_profile (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        columns: &[
            Column::new("key", "TEXT", false, None, 1),
            Column::new("value", "TEXT", true, None, 0),
        ],
    },
    TableDef {
        name: "snug_settings",
        class: TableClass::Config,
        ddl: "CREATE TABLE IF NOT EXISTS snug_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        columns: &[
            Column::new("key", "TEXT", false, None, 1),
            Column::new("value", "TEXT", true, None, 0),
        ],
    },
    TableDef {
        name: "snug_secrets",
        class: TableClass::Secret,
        ddl: "CREATE TABLE IF NOT EXISTS snug_secrets (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        columns: &[
            Column::new("key", "TEXT", false, None, 1),
            Column::new("value", "TEXT", true, None, 0),
        ],
    },
    TableDef {
        name: "snug_apps",
        class: TableClass::Portable,
        ddl: "CREATE TABLE IF NOT EXISTS snug_apps (\n    app_id TEXT PRIMARY KEY,\n    display_name TEXT NOT NULL,\n    description TEXT,\n    icon_emoji TEXT,\n    icon_color TEXT,\n    uses_db INTEGER NOT NULL DEFAULT 0,\n    current_version INTEGER NOT NULL,\n    created_at TEXT NOT NULL,\n    updated_at TEXT NOT NULL,\n    install_source TEXT\n  )",
        columns: &[
            Column::new("app_id", "TEXT", false, None, 1),
            Column::new("display_name", "TEXT", true, None, 0),
            Column::new("description", "TEXT", false, None, 0),
            Column::new("icon_emoji", "TEXT", false, None, 0),
            Column::new("icon_color", "TEXT", false, None, 0),
            Column::new("uses_db", "INTEGER", true, Some("0"), 0),
            Column::new("current_version", "INTEGER", true, None, 0),
            Column::new("created_at", "TEXT", true, None, 0),
            Column::new("updated_at", "TEXT", true, None, 0),
            Column::new("install_source", "TEXT", false, None, 0),
        ],
    },
    TableDef {
        name: "snug_app_versions",
        class: TableClass::Portable,
        ddl: "CREATE TABLE IF NOT EXISTS snug_app_versions (\n    app_id TEXT NOT NULL,\n    version INTEGER NOT NULL,\n    html TEXT NOT NULL,\n    note TEXT,\n    created_at TEXT NOT NULL,\n    pinned INTEGER NOT NULL DEFAULT 0,\n    runtime_contract_json TEXT,\n    PRIMARY KEY (app_id, version)\n  )",
        columns: &[
            Column::new("app_id", "TEXT", true, None, 1),
            Column::new("version", "INTEGER", true, None, 2),
            Column::new("html", "TEXT", true, None, 0),
            Column::new("note", "TEXT", false, None, 0),
            Column::new("created_at", "TEXT", true, None, 0),
            Column::new("pinned", "INTEGER", true, Some("0"), 0),
            Column::new("runtime_contract_json", "TEXT", false, None, 0),
        ],
    },
    TableDef {
        name: "snug_app_schemas",
        class: TableClass::Portable,
        ddl: "CREATE TABLE IF NOT EXISTS snug_app_schemas (\n    app_id TEXT PRIMARY KEY,\n    token TEXT NOT NULL,\n    schema_json TEXT NOT NULL,\n    updated_at TEXT NOT NULL\n  )",
        columns: &[
            Column::new("app_id", "TEXT", false, None, 1),
            Column::new("token", "TEXT", true, None, 0),
            Column::new("schema_json", "TEXT", true, None, 0),
            Column::new("updated_at", "TEXT", true, None, 0),
        ],
    },
    TableDef {
        name: "snug_app_migrations",
        class: TableClass::Portable,
        ddl: "CREATE TABLE IF NOT EXISTS snug_app_migrations (\n    app_id TEXT NOT NULL,\n    seq INTEGER NOT NULL,\n    ddl TEXT NOT NULL,\n    applied_at TEXT NOT NULL,\n    PRIMARY KEY (app_id, seq)\n  )",
        columns: &[
            Column::new("app_id", "TEXT", true, None, 1),
            Column::new("seq", "INTEGER", true, None, 2),
            Column::new("ddl", "TEXT", true, None, 0),
            Column::new("applied_at", "TEXT", true, None, 0),
        ],
    },
    TableDef {
        name: "snug_app_docs",
        class: TableClass::Portable,
        ddl: "CREATE TABLE IF NOT EXISTS snug_app_docs (\n    app_id TEXT NOT NULL,\n    slug TEXT NOT NULL,\n    title TEXT,\n    content TEXT NOT NULL,\n    updated_at TEXT NOT NULL,\n    PRIMARY KEY (app_id, slug)\n  )",
        columns: &[
            Column::new("app_id", "TEXT", true, None, 1),
            Column::new("slug", "TEXT", true, None, 2),
            Column::new("title", "TEXT", false, None, 0),
            Column::new("content", "TEXT", true, None, 0),
            Column::new("updated_at", "TEXT", true, None, 0),
        ],
    },
    TableDef {
        name: "snug_chat_threads",
        class: TableClass::Portable,
        ddl: "CREATE TABLE IF NOT EXISTS snug_chat_threads (\n    thread_id TEXT PRIMARY KEY,\n    app_id TEXT,\n    title TEXT,\n    created_at TEXT NOT NULL,\n    updated_at TEXT NOT NULL\n  )",
        columns: &[
            Column::new("thread_id", "TEXT", false, None, 1),
            Column::new("app_id", "TEXT", false, None, 0),
            Column::new("title", "TEXT", false, None, 0),
            Column::new("created_at", "TEXT", true, None, 0),
            Column::new("updated_at", "TEXT", true, None, 0),
        ],
    },
    TableDef {
        name: "snug_chat_messages",
        class: TableClass::Portable,
        ddl: "CREATE TABLE IF NOT EXISTS snug_chat_messages (\n    id INTEGER PRIMARY KEY AUTOINCREMENT,\n    thread_id TEXT NOT NULL,\n    role TEXT NOT NULL,\n    content TEXT NOT NULL,\n    created_at TEXT NOT NULL,\n    pinned INTEGER NOT NULL DEFAULT 0,\n    meta TEXT\n  )",
        columns: &[
            Column::new("id", "INTEGER", false, None, 1),
            Column::new("thread_id", "TEXT", true, None, 0),
            Column::new("role", "TEXT", true, None, 0),
            Column::new("content", "TEXT", true, None, 0),
            Column::new("created_at", "TEXT", true, None, 0),
            Column::new("pinned", "INTEGER", true, Some("0"), 0),
            Column::new("meta", "TEXT", false, None, 0),
        ],
    },
    TableDef {
        name: "snug_sync",
        class: TableClass::SyncConfig,
        ddl: "CREATE TABLE IF NOT EXISTS snug_sync (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        columns: &[
            Column::new("key", "TEXT", false, None, 1),
            Column::new("value", "TEXT", true, None, 0),
        ],
    },
    TableDef {
        name: "snug_connections",
        class: TableClass::Portable,
        ddl: "CREATE TABLE IF NOT EXISTS snug_connections (\n    app_id TEXT NOT NULL,\n    slot TEXT NOT NULL,\n    requirement_json TEXT NOT NULL,\n    requirement_version INTEGER NOT NULL,\n    provenance TEXT NOT NULL,\n    confidence REAL,\n    status TEXT NOT NULL,\n    pending_requirement_json TEXT,\n    imported INTEGER NOT NULL DEFAULT 0,\n    allowed_hosts TEXT NOT NULL DEFAULT '[]',\n    approved_at TEXT,\n    revoked_at TEXT,\n    created_at TEXT NOT NULL,\n    updated_at TEXT NOT NULL,\n    PRIMARY KEY (app_id, slot)\n  )",
        columns: &[
            Column::new("app_id", "TEXT", true, None, 1),
            Column::new("slot", "TEXT", true, None, 2),
            Column::new("requirement_json", "TEXT", true, None, 0),
            Column::new("requirement_version", "INTEGER", true, None, 0),
            Column::new("provenance", "TEXT", true, None, 0),
            Column::new("confidence", "REAL", false, None, 0),
            Column::new("status", "TEXT", true, None, 0),
            Column::new("pending_requirement_json", "TEXT", false, None, 0),
            Column::new("imported", "INTEGER", true, Some("0"), 0),
            Column::new("allowed_hosts", "TEXT", true, Some("'[]'"), 0),
            Column::new("approved_at", "TEXT", false, None, 0),
            Column::new("revoked_at", "TEXT", false, None, 0),
            Column::new("created_at", "TEXT", true, None, 0),
            Column::new("updated_at", "TEXT", true, None, 0),
        ],
    },
];

/// The partial unique index: a starter identity installs at most once (`USERDB_INDEX_DDL`).
pub const INDEX_DDL: &str = "CREATE UNIQUE INDEX IF NOT EXISTS idx_snug_apps_install_source\n    ON snug_apps (install_source) WHERE install_source IS NOT NULL";

/// A column that a migration appends with `ALTER TABLE … ADD COLUMN` (always last in its table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddedColumn {
    /// The table the column belongs to.
    pub table: &'static str,
    /// The column name.
    pub column: &'static str,
    /// The column declaration after the name, as in the v6 DDL.
    pub decl: &'static str,
    /// The storage version that introduced it.
    pub since: i64,
}

/// Columns added by migrations, in the order they must be appended so that a migrated table's
/// column order equals a fresh one's (`pinned` before `runtime_contract_json`).
pub const ADDED_COLUMNS: [AddedColumn; 5] = [
    AddedColumn {
        table: "snug_apps",
        column: "install_source",
        decl: "TEXT",
        since: 2,
    },
    AddedColumn {
        table: "snug_app_versions",
        column: "pinned",
        decl: "INTEGER NOT NULL DEFAULT 0",
        since: 2,
    },
    AddedColumn {
        table: "snug_chat_messages",
        column: "pinned",
        decl: "INTEGER NOT NULL DEFAULT 0",
        since: 2,
    },
    AddedColumn {
        table: "snug_chat_messages",
        column: "meta",
        decl: "TEXT",
        since: 2,
    },
    AddedColumn {
        table: "snug_app_versions",
        column: "runtime_contract_json",
        decl: "TEXT",
        since: 6,
    },
];

/// Returns the hub table named `name`, if it is one of the 13.
pub fn hub_table(name: &str) -> Option<&'static TableDef> {
    TABLES.iter().find(|t| t.name == name)
}

/// What kind of table a name denotes in a user database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TableKind {
    /// One of the 13 hub tables.
    Hub {
        /// Its name.
        name: &'static str,
        /// Its class.
        class: TableClass,
    },
    /// A per-app data table at rest, `app_<token>__<name>` (spec §8.2).
    AppData {
        /// The namespace token.
        token: String,
        /// The app's natural table name.
        name: String,
    },
    /// A table SQLite maintains itself (`sqlite_sequence`, `sqlite_stat*`).
    SqliteInternal,
    /// Anything else: a table no conforming hub writes. Kept on open, never exported, refused on import.
    Foreign,
}

impl TableKind {
    /// Returns the export class of this kind, or `None` for foreign and SQLite-internal tables.
    pub fn class(&self) -> Option<TableClass> {
        match self {
            TableKind::Hub { class, .. } => Some(*class),
            TableKind::AppData { .. } => Some(TableClass::Portable),
            TableKind::SqliteInternal | TableKind::Foreign => None,
        }
    }
}

/// Classifies a table name found in `sqlite_master`.
pub fn classify_table(name: &str) -> TableKind {
    if let Some(def) = hub_table(name) {
        return TableKind::Hub {
            name: def.name,
            class: def.class,
        };
    }
    if name
        .as_bytes()
        .get(..7)
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(b"sqlite_"))
    {
        return TableKind::SqliteInternal;
    }
    match crate::token::parse_rest_table_name(name) {
        Some((token, natural)) => TableKind::AppData {
            token: token.to_owned(),
            name: natural.to_owned(),
        },
        None => TableKind::Foreign,
    }
}

/// Returns the table name a `CREATE TABLE IF NOT EXISTS <name> …` statement creates.
///
/// Used by the heal and by tests to derive the expected table set from the DDL itself, so the
/// two can never disagree.
pub fn created_table_name(ddl: &str) -> Option<&str> {
    let rest = ddl.strip_prefix("CREATE TABLE IF NOT EXISTS ")?;
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '(')
        .unwrap_or(rest.len());
    let name = &rest[..end];
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests;
