//! The open pipeline shared by every way a user database comes in: header check, defensive
//! connection settings, hostile-schema refusal, migration ladder, self-heal, legacy credential
//! wipe and `snug_meta` seeding.
//!
//! Order matters and is the reference's: migrate → heal → wipe (only when the version advanced)
//! → seed meta. Everything that writes runs in one `BEGIN IMMEDIATE` transaction, so a crash or
//! a refusal part-way leaves the file as it was. A healthy current file takes the read-only path
//! and is never written: no transaction, no `PRAGMA user_version = 6` re-stamp.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;

use crate::clock::{Clock, uuid_v4};
use crate::ddl::{
    ADDED_COLUMNS, AddedColumn, DROPPED_APP_DATA_TABLE, DROPPED_AUTH_SPECS_TABLE, INDEX_DDL,
    INSTALL_SOURCE_INDEX, STORAGE_VERSION, TABLES, TableKind, classify_table, hub_table,
};
use crate::error::{Hostility, Malformation, Refusal, ShapeProblem};
use crate::wipe::wipe_legacy_credentials;

/// SQLite's 16-byte magic at offset 0 of every database file.
pub use snug_files::format::SQLITE_MAGIC;

/// Length of the SQLite database header.
pub(crate) const SQLITE_HEADER_LEN: usize = 100;

/// How much the pipeline trusts the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trust {
    /// The user's own file: foreign tables are kept (and never exported); an empty database is
    /// initialised.
    Own,
    /// An imported file: it must already be a Snug user database (`snug_meta`) and may hold only
    /// hub, app-data and SQLite-internal tables.
    Foreign,
}

/// What opening a user database did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpenReport {
    /// `PRAGMA user_version` as found (0 for a new file).
    pub found_version: i64,
    /// Whether the ladder ran (found < [`STORAGE_VERSION`]).
    pub advanced: bool,
    /// What the self-heal restored.
    pub heal: HealReport,
    /// Legacy `auth:<appId>:<field>` secrets deleted (only ever non-zero when `advanced`).
    pub credentials_wiped: usize,
    /// Whether `snug_meta` got a new `db_id` / `created_at`.
    pub seeded_meta: bool,
    /// Whether anything was written. False means the file's bytes are exactly as they were.
    pub wrote: bool,
}

/// What the self-heal found missing and restored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HealReport {
    /// Hub tables that were missing (the whole DDL was replayed).
    pub tables: Vec<&'static str>,
    /// Migration-added columns that were missing, as `table.column`.
    pub columns: Vec<String>,
    /// Whether the install-source index was missing.
    pub index: bool,
    /// Apps whose duplicate `install_source` was cleared so the unique index could be rebuilt.
    pub install_sources_cleared: usize,
}

impl HealReport {
    /// Returns whether the heal restored anything.
    pub fn healed(&self) -> bool {
        !self.tables.is_empty() || !self.columns.is_empty() || self.index
    }
}

/// What a heal would do to a file, computed without writing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HealPlan {
    /// Hub tables absent from `sqlite_master`.
    pub missing_tables: Vec<&'static str>,
    /// Migration-added columns absent from existing hub tables, as `table.column`.
    pub missing_columns: Vec<String>,
    /// Whether the install-source index is absent.
    pub missing_index: bool,
}

impl HealPlan {
    /// Returns whether nothing needs restoring.
    pub fn is_empty(&self) -> bool {
        self.missing_tables.is_empty() && self.missing_columns.is_empty() && !self.missing_index
    }
}

/// One `sqlite_master` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaObject {
    /// `table`, `index`, `trigger` or `view`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Object name.
    pub name: String,
    /// The table it belongs to.
    pub tbl_name: String,
    /// Its SQL text (`None` for autoindexes).
    pub sql: Option<String>,
}

/// Checks the 100-byte SQLite header of an in-memory image, before SQLite sees it.
///
/// Returns whether the header marks the file as WAL (format versions 2), which an in-memory
/// copy must be switched out of.
pub(crate) fn check_header(bytes: &[u8], file_len: u64) -> Result<bool, Refusal> {
    if !bytes.starts_with(SQLITE_MAGIC) {
        return Err(Refusal::NotSqlite);
    }
    if bytes.len() < SQLITE_HEADER_LEN {
        return Err(Refusal::Malformed(Malformation::TruncatedHeader {
            len: file_len,
        }));
    }
    let raw = u32::from(u16::from_be_bytes([bytes[16], bytes[17]]));
    // The value 1 encodes 65536, which does not fit the two-byte field.
    let page_size = if raw == 1 { 65_536 } else { raw };
    if !(512..=65_536).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(Refusal::Malformed(Malformation::BadPageSize { page_size }));
    }
    if !file_len.is_multiple_of(u64::from(page_size)) {
        return Err(Refusal::Malformed(Malformation::PartialPage {
            len: file_len,
            page_size,
        }));
    }
    let (write, read) = (bytes[18], bytes[19]);
    if !(1..=2).contains(&write) || !(1..=2).contains(&read) {
        return Err(Refusal::Malformed(Malformation::UnsupportedFileFormat {
            write,
            read,
        }));
    }
    Ok(write == 2 || read == 2)
}

/// Applies the connection settings every user database is opened with.
///
/// Defensive mode forbids writes to `sqlite_master` and other footguns a crafted file could
/// steer the host into; `trusted_schema=OFF` stops schema-embedded SQL (defaults, CHECKs,
/// generated columns, indexes) from calling any function not marked innocuous;
/// `cell_size_check` makes a corrupt page an error rather than a wild read. Extension loading
/// needs rusqlite's `load_extension` feature, which this workspace does not enable, and is
/// switched off in SQLite by default, so neither `load_extension()` nor the C API can load code.
pub(crate) fn configure(conn: &Connection) -> rusqlite::Result<()> {
    use rusqlite::config::DbConfig;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false)?;
    conn.pragma_update(None, "trusted_schema", "OFF")?;
    conn.pragma_update(None, "cell_size_check", "ON")?;
    Ok(())
}

/// Reads `PRAGMA user_version`.
pub(crate) fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Reads every `sqlite_master` row in creation order.
pub fn schema_objects(conn: &Connection) -> rusqlite::Result<Vec<SchemaObject>> {
    let mut stmt =
        conn.prepare("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid")?;
    let rows = stmt.query_map([], |row| {
        Ok(SchemaObject {
            kind: row.get(0)?,
            name: row.get(1)?,
            tbl_name: row.get(2)?,
            sql: row.get(3)?,
        })
    })?;
    rows.collect()
}

fn is_table(object: &SchemaObject) -> bool {
    object.kind == "table"
}

fn has_table(objects: &[SchemaObject], name: &str) -> bool {
    objects.iter().any(|o| is_table(o) && o.name == name)
}

fn normalize_ws(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Returns the `sqlite_master.sql` text SQLite stores for `INDEX_DDL`.
fn stored_index_sql() -> String {
    INDEX_DDL.replacen("IF NOT EXISTS ", "", 1)
}

/// Refuses schema objects no conforming hub writes. Runs on the file as found, before any write.
///
/// `version` is the file's storage version: the tables a later migration drops (`snug_app_data`
/// up to v1, `snug_auth_specs` up to v4) are legitimate in a file that old.
pub(crate) fn check_hostile(
    objects: &[SchemaObject],
    version: i64,
    trust: Trust,
) -> Result<(), Hostility> {
    let expected_index = normalize_ws(&stored_index_sql());
    for object in objects {
        match object.kind.as_str() {
            "trigger" => {
                return Err(Hostility::Trigger {
                    name: object.name.clone(),
                    table: object.tbl_name.clone(),
                });
            }
            "view" => {
                return Err(Hostility::View {
                    name: object.name.clone(),
                });
            }
            "table" => {
                let virtual_table = object.sql.as_deref().is_some_and(|sql| {
                    sql.get(..20)
                        .is_some_and(|head| head.eq_ignore_ascii_case("CREATE VIRTUAL TABLE"))
                });
                if virtual_table {
                    return Err(Hostility::VirtualTable {
                        name: object.name.clone(),
                    });
                }
                // SQLite names are case-insensitive: `SNUG_SECRETS` IS the secrets table to
                // SQLite but not to an exact-name check, so a hub name in another spelling is refused.
                let lower = object.name.to_ascii_lowercase();
                if lower != object.name && hub_table(&lower).is_some() {
                    return Err(Hostility::ForeignTable {
                        name: object.name.clone(),
                    });
                }
                let dropped_later = (object.name == DROPPED_APP_DATA_TABLE && version <= 1)
                    || (object.name == DROPPED_AUTH_SPECS_TABLE && version <= 4);
                if trust == Trust::Foreign
                    && classify_table(&object.name) == TableKind::Foreign
                    && !dropped_later
                {
                    return Err(Hostility::ForeignTable {
                        name: object.name.clone(),
                    });
                }
            }
            "index" => {
                let ours = object.name == INSTALL_SOURCE_INDEX
                    && object.tbl_name == "snug_apps"
                    && object.sql.as_deref().map(normalize_ws).as_deref()
                        == Some(expected_index.as_str());
                let autoindex =
                    object.sql.is_none() && object.name.starts_with("sqlite_autoindex_");
                let on_hub_table = hub_table(&object.tbl_name.to_ascii_lowercase()).is_some();
                if (object.name == INSTALL_SOURCE_INDEX && !ours)
                    || (on_hub_table && !ours && !autoindex)
                {
                    return Err(Hostility::ForeignIndex {
                        name: object.name.clone(),
                        table: object.tbl_name.clone(),
                    });
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// One row of `pragma_table_xinfo` for a hub table.
#[derive(Debug)]
struct FoundColumn {
    table: String,
    name: String,
    decl_type: String,
    not_null: bool,
    default: Option<String>,
    pk: i64,
    hidden: i64,
}

/// Reads the columns of every hub table present, in one statement.
fn hub_columns(conn: &Connection) -> rusqlite::Result<Vec<FoundColumn>> {
    let mut stmt = conn.prepare(
        "SELECT m.name, c.name, c.type, c.\"notnull\", c.dflt_value, c.pk, c.hidden \
         FROM sqlite_master AS m, pragma_table_xinfo(m.name) AS c \
         WHERE m.type = 'table' AND m.name LIKE 'snug!_%' ESCAPE '!' ORDER BY m.name, c.cid",
    )?;
    let rows = stmt.query_map([], |row| {
        Ok(FoundColumn {
            table: row.get(0)?,
            name: row.get(1)?,
            decl_type: row.get(2)?,
            not_null: row.get::<_, i64>(3)? != 0,
            default: row.get(4)?,
            pk: row.get(5)?,
            hidden: row.get(6)?,
        })
    })?;
    rows.collect()
}

/// Computes what a heal would restore on a file at the current version.
fn heal_plan(
    conn: &Connection,
    objects: &[SchemaObject],
    version: i64,
) -> rusqlite::Result<HealPlan> {
    let missing_tables: Vec<&'static str> = TABLES
        .iter()
        .filter(|t| !has_table(objects, t.name))
        .map(|t| t.name)
        .collect();
    let columns = hub_columns(conn)?;
    let missing_columns = ADDED_COLUMNS
        .iter()
        .filter(|added| added.since <= version)
        .filter(|added| has_table(objects, added.table))
        .filter(|added| {
            !columns
                .iter()
                .any(|c| c.table == added.table && c.name == added.column)
        })
        .map(|added| format!("{}.{}", added.table, added.column))
        .collect();
    let missing_index = !objects
        .iter()
        .any(|o| o.kind == "index" && o.name == INSTALL_SOURCE_INDEX);
    Ok(HealPlan {
        missing_tables,
        missing_columns,
        missing_index,
    })
}

/// Checks every hub table against the v6 shape (names, types, nullability, defaults, key
/// positions, no hidden/generated columns, ordinary rowid table).
pub(crate) fn check_shapes(conn: &Connection) -> Result<(), Refusal> {
    let columns = hub_columns(conn)?;
    for table in &TABLES {
        let found: Vec<&FoundColumn> = columns.iter().filter(|c| c.table == table.name).collect();
        if found.is_empty() {
            continue;
        }
        let mismatch = |problem| {
            Refusal::Hostile(Hostility::ShapeMismatch {
                table: table.name,
                problem,
            })
        };
        for (idx, expected) in table.columns.iter().enumerate() {
            let Some(column) = found.get(idx) else {
                return Err(mismatch(ShapeProblem::MissingColumn {
                    column: expected.name,
                }));
            };
            if column.name != expected.name {
                let exists_elsewhere = found.iter().any(|c| c.name == expected.name);
                return Err(mismatch(if exists_elsewhere {
                    ShapeProblem::ColumnDiffers {
                        column: expected.name,
                    }
                } else {
                    ShapeProblem::MissingColumn {
                        column: expected.name,
                    }
                }));
            }
            let same = column.decl_type == expected.decl_type
                && column.not_null == expected.not_null
                && column.default.as_deref() == expected.default
                && column.pk == i64::from(expected.pk)
                && column.hidden == 0;
            if !same {
                return Err(mismatch(ShapeProblem::ColumnDiffers {
                    column: expected.name,
                }));
            }
        }
        if let Some(extra) = found.get(table.columns.len()) {
            return Err(mismatch(ShapeProblem::ExtraColumn {
                column: extra.name.clone(),
            }));
        }
    }
    check_table_options(conn)
}

/// Hub tables must be ordinary rowid tables: `snug_chat_messages` relies on AUTOINCREMENT and
/// every writer on plain (non-STRICT) type affinity.
fn check_table_options(conn: &Connection) -> Result<(), Refusal> {
    let mut stmt = conn.prepare(
        "SELECT name, wr, strict FROM pragma_table_list WHERE schema = 'main' AND name LIKE 'snug!_%' ESCAPE '!'",
    )?;
    let rows = stmt.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, i64>(1)?,
            row.get::<_, i64>(2)?,
        ))
    })?;
    for row in rows {
        let (name, without_rowid, strict) = row?;
        if let Some(def) = hub_table(&name)
            && (without_rowid != 0 || strict != 0)
        {
            return Err(Refusal::Hostile(Hostility::ShapeMismatch {
                table: def.name,
                problem: ShapeProblem::TableOptions,
            }));
        }
    }
    Ok(())
}

/// Returns whether `snug_meta` lacks a `db_id` (false when the table itself is missing).
fn needs_meta_seed(conn: &Connection, objects: &[SchemaObject]) -> rusqlite::Result<bool> {
    if !has_table(objects, "snug_meta") {
        return Ok(true);
    }
    let found: Option<i64> = conn
        .query_row("SELECT 1 FROM snug_meta WHERE key = 'db_id'", [], |row| {
            row.get(0)
        })
        .optional()?;
    Ok(found.is_none())
}

/// The read-only verdict on a file: its version, and whether opening it must write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Assessment {
    /// `PRAGMA user_version` as found.
    pub(crate) found: i64,
    /// Whether the ladder, a heal or the meta seed must run.
    pub(crate) needs_write: bool,
}

impl OpenReport {
    /// The report of an open that found nothing to do.
    pub(crate) fn untouched(found_version: i64) -> Self {
        OpenReport {
            found_version,
            advanced: false,
            heal: HealReport::default(),
            credentials_wiped: 0,
            seeded_meta: false,
            wrote: false,
        }
    }
}

/// Decides, by reading only, whether the file is refused and whether opening it must write.
///
/// This is the healthy-open check: `user_version`, one `sqlite_master` scan, one
/// `pragma_table_xinfo` join over the hub tables, `pragma_table_list` and one `snug_meta` lookup.
pub(crate) fn assess(conn: &Connection, trust: Trust) -> Result<Assessment, Refusal> {
    let found = user_version(conn)?;
    if found > STORAGE_VERSION {
        return Err(Refusal::SchemaTooNew { found });
    }
    if found < 0 {
        return Err(Refusal::Malformed(Malformation::NegativeVersion { found }));
    }
    let objects = schema_objects(conn)?;
    if !is_user_database(&objects, trust) {
        return Err(Refusal::NotAUserDatabase);
    }
    check_hostile(&objects, found, trust).map_err(Refusal::Hostile)?;
    if found < STORAGE_VERSION {
        return Ok(Assessment {
            found,
            needs_write: true,
        });
    }
    let plan = heal_plan(conn, &objects, found)?;
    if !plan.is_empty() || needs_meta_seed(conn, &objects)? {
        return Ok(Assessment {
            found,
            needs_write: true,
        });
    }
    check_shapes(conn)?;
    Ok(Assessment {
        found,
        needs_write: false,
    })
}

/// Returns whether the schema is a Snug user database for an open with `trust`.
fn is_user_database(objects: &[SchemaObject], trust: Trust) -> bool {
    match trust {
        Trust::Foreign => has_table(objects, "snug_meta"),
        // An empty database is a new file; otherwise at least one hub table must be there, so a
        // random application's database is never adopted as a user database.
        Trust::Own => {
            let has_user_tables = objects
                .iter()
                .any(|o| is_table(o) && classify_table(&o.name) != TableKind::SqliteInternal);
            !has_user_tables
                || objects
                    .iter()
                    .any(|o| is_table(o) && hub_table(&o.name).is_some())
        }
    }
}

/// Runs the whole pipeline on a configured connection and returns what it did.
pub(crate) fn run(
    conn: &mut Connection,
    clock: &dyn Clock,
    trust: Trust,
) -> Result<OpenReport, Refusal> {
    let assessment = assess(conn, trust)?;
    if !assessment.needs_write {
        return Ok(OpenReport::untouched(assessment.found));
    }
    let found = assessment.found;
    let advanced = found < STORAGE_VERSION;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for step in found..STORAGE_VERSION {
        migrate_step(&tx, step)?;
    }
    if advanced {
        tx.pragma_update(None, "user_version", STORAGE_VERSION)?;
    }
    let heal = heal(&tx)?;
    let credentials_wiped = if advanced {
        wipe_legacy_credentials(&tx)?
    } else {
        0
    };
    let seeded_meta = seed_meta(&tx, clock)?;
    // A refusal here drops the transaction, which rolls every change back.
    check_shapes(&tx)?;
    tx.commit()?;
    Ok(OpenReport {
        found_version: found,
        advanced,
        heal,
        credentials_wiped,
        seeded_meta,
        wrote: true,
    })
}

/// Runs `MIGRATIONS[from]`: the step from storage version `from` to `from + 1` (notes b.1).
fn migrate_step(conn: &Connection, from: i64) -> rusqlite::Result<()> {
    match from {
        // v0 is an empty file: replaying the current DDL creates the complete schema.
        0 => replay(conn, 1),
        // v2 (ADR-0010): native per-app tables; the v1 blob table and its data do not survive,
        // and the oldest SURVIVING version of each app becomes its factory pin.
        1 => {
            replay(conn, 2)?;
            conn.execute_batch(&format!("DROP TABLE IF EXISTS {DROPPED_APP_DATA_TABLE}"))?;
            conn.execute(
                "UPDATE snug_app_versions SET pinned = 1 WHERE (app_id, version) IN \
                 (SELECT app_id, MIN(version) FROM snug_app_versions GROUP BY app_id)",
                [],
            )?;
            Ok(())
        }
        // v3 added snug_auth_specs and v4 snug_connections; neither table is in the v6 DDL's
        // replay set except snug_connections, which the replay creates.
        2 | 3 => replay(conn, from + 1),
        // v5: the one destructive step. Grants are not migrated: a connected app re-enters the
        // wizard rather than inherit consent for a shape the user never saw.
        4 => {
            conn.execute_batch(&format!("DROP TABLE IF EXISTS {DROPPED_AUTH_SPECS_TABLE}"))?;
            replay(conn, 5)
        }
        // v6: runtime_contract_json appended to snug_app_versions.
        _ => replay(conn, 6),
    }
}

/// Replays the idempotent DDL for a file reaching `version`: every table, then every column a
/// migration up to `version` appends, then the index (which needs `install_source`).
fn replay(conn: &Connection, version: i64) -> rusqlite::Result<()> {
    for table in &TABLES {
        conn.execute_batch(table.ddl)?;
    }
    for added in ADDED_COLUMNS.iter().filter(|added| added.since <= version) {
        add_column_if_missing(conn, added)?;
    }
    create_index(conn)?;
    Ok(())
}

fn column_exists(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2)",
        params![table, column],
        |row| row.get(0),
    )
}

fn add_column_if_missing(conn: &Connection, added: &AddedColumn) -> rusqlite::Result<bool> {
    if column_exists(conn, added.table, added.column)? {
        return Ok(false);
    }
    // Names come from the constant table above, never from the file.
    conn.execute_batch(&format!(
        "ALTER TABLE {} ADD COLUMN {} {}",
        added.table, added.column, added.decl
    ))?;
    Ok(true)
}

/// Creates the unique install-source index if it is missing, first clearing duplicate sources
/// (all but the oldest row keep theirs) that a file without the index may have collected.
/// Returns how many sources were cleared.
fn create_index(conn: &Connection) -> rusqlite::Result<usize> {
    let exists: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?1)",
        [INSTALL_SOURCE_INDEX],
        |row| row.get(0),
    )?;
    if exists {
        return Ok(0);
    }
    let cleared = conn.execute(
        "UPDATE snug_apps SET install_source = NULL WHERE install_source IS NOT NULL AND rowid NOT IN \
         (SELECT MIN(rowid) FROM snug_apps WHERE install_source IS NOT NULL GROUP BY install_source)",
        [],
    )?;
    conn.execute_batch(INDEX_DDL)?;
    Ok(cleared)
}

/// The self-heal (spec §8 obligation 1), beyond the reference in restoring missing
/// migration-added columns and a missing index.
fn heal(conn: &Connection) -> rusqlite::Result<HealReport> {
    let objects = schema_objects(conn)?;
    let plan = heal_plan(conn, &objects, STORAGE_VERSION)?;
    if plan.is_empty() {
        return Ok(HealReport::default());
    }
    let mut report = HealReport {
        tables: plan.missing_tables.clone(),
        ..HealReport::default()
    };
    if !plan.missing_tables.is_empty() {
        // The replay set is exactly the 13 live tables: snug_auth_specs has no DDL, so it can
        // never be resurrected, and its absence is never counted as a miss.
        for table in &TABLES {
            conn.execute_batch(table.ddl)?;
        }
    }
    for added in &ADDED_COLUMNS {
        if add_column_if_missing(conn, added)? {
            report
                .columns
                .push(format!("{}.{}", added.table, added.column));
        }
    }
    report.index = plan.missing_index;
    report.install_sources_cleared = create_index(conn)?;
    Ok(report)
}

/// Seeds `snug_meta` when it has no `db_id`: `db_id` (UUID v4) and `created_at`, raw strings.
/// An existing `created_at` is kept.
fn seed_meta(conn: &Connection, clock: &dyn Clock) -> Result<bool, Refusal> {
    let has_id: Option<i64> = conn
        .query_row("SELECT 1 FROM snug_meta WHERE key = 'db_id'", [], |row| {
            row.get(0)
        })
        .optional()?;
    if has_id.is_some() {
        return Ok(false);
    }
    let db_id = uuid_v4().map_err(Refusal::Entropy)?;
    conn.execute(
        "INSERT INTO snug_meta (key, value) VALUES ('db_id', ?1)",
        [db_id],
    )?;
    conn.execute(
        "INSERT INTO snug_meta (key, value) VALUES ('created_at', ?1) ON CONFLICT (key) DO NOTHING",
        [clock.timestamp()],
    )?;
    Ok(true)
}

/// A read-only report on a user database: version, tables and what an open would do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inspection {
    /// `PRAGMA user_version`.
    pub storage_version: i64,
    /// [`STORAGE_VERSION`].
    pub supported_version: i64,
    /// Every table with its kind, class and row count.
    pub tables: Vec<TableSummary>,
    /// What an open would migrate: `Some(found)` when the ladder would run.
    pub migrate_from: Option<i64>,
    /// What a heal would restore, measured against v6 (for an older file most of this is what
    /// the ladder creates).
    pub heal: HealPlan,
    /// Legacy credential keys an open would wipe (only when the ladder runs).
    pub legacy_credentials: usize,
    /// Whether `snug_meta` has no `db_id` yet.
    pub needs_meta_seed: bool,
    /// Why opening the file as the user's own would refuse it, if it would.
    pub open_refusal: Option<RefusalSummary>,
    /// Why importing the file would refuse it (stricter: `snug_meta` required, foreign tables
    /// refused, no two apps sharing a token), if it would. Container and cap checks are not part
    /// of an inspection.
    pub import_refusal: Option<RefusalSummary>,
    /// Pairs of registered apps that share an `appDataToken` (§8.2); a migration, an import and
    /// a hub's push validation refuse a file with any.
    pub token_collisions: Vec<crate::isolation::TokenCollision>,
}

/// A refusal an inspection predicts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusalSummary {
    /// The machine reason ([`OpenError::reason`](crate::OpenError::reason)).
    pub reason: &'static str,
    /// The human message.
    pub message: String,
}

/// A table of an inspected file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableSummary {
    /// Table name.
    pub name: String,
    /// What kind of table it is.
    pub kind: TableKind,
    /// Its export class (`None` for foreign and SQLite-internal tables).
    pub class: Option<crate::ddl::TableClass>,
    /// Row count (`None` for a virtual table or a table SQLite cannot read).
    pub rows: Option<u64>,
}

/// Inspects a configured connection without writing.
pub(crate) fn inspect(conn: &Connection) -> rusqlite::Result<Inspection> {
    let version = user_version(conn)?;
    let objects = schema_objects(conn)?;
    let mut tables = Vec::new();
    for object in objects.iter().filter(|o| is_table(o)) {
        let kind = classify_table(&object.name);
        // A virtual table's module may not exist (or may be hostile): it is never queried.
        let virtual_table = object.sql.as_deref().is_some_and(|sql| {
            sql.get(..20)
                .is_some_and(|head| head.eq_ignore_ascii_case("CREATE VIRTUAL TABLE"))
        });
        let rows = if virtual_table {
            None
        } else {
            conn.query_row(
                &format!(
                    "SELECT count(*) FROM \"{}\"",
                    object.name.replace('"', "\"\"")
                ),
                [],
                |row| row.get::<_, i64>(0),
            )
            .ok()
            .and_then(|n| u64::try_from(n).ok())
        };
        tables.push(TableSummary {
            name: object.name.clone(),
            class: kind.class(),
            kind,
            rows,
        });
    }
    let heal = heal_plan(conn, &objects, STORAGE_VERSION)?;
    let migrate_from = (version < STORAGE_VERSION).then_some(version);
    let legacy_credentials = if migrate_from.is_some() && has_table(&objects, "snug_secrets") {
        crate::wipe::legacy_credential_keys(conn)?.len()
    } else {
        0
    };
    let needs_meta_seed = needs_meta_seed(conn, &objects)?;
    // A `snug_apps` without an `app_id` column cannot be read here; the shape check refuses it.
    let token_collisions = crate::isolation::token_collisions(conn).unwrap_or_default();
    let import_refusal = preflight(conn, &objects, version, Trust::Foreign).or_else(|| {
        token_collisions.first().map(|collision| {
            let err = crate::error::ImportError::AppTokenCollision {
                collision: collision.clone(),
            };
            RefusalSummary {
                reason: snug_reasons::Reasoned::reason(&err).name,
                message: err.to_string(),
            }
        })
    });
    Ok(Inspection {
        storage_version: version,
        supported_version: STORAGE_VERSION,
        tables,
        migrate_from,
        heal,
        legacy_credentials,
        needs_meta_seed,
        open_refusal: preflight(conn, &objects, version, Trust::Own),
        import_refusal,
        token_collisions,
    })
}

/// Returns the refusal an open with `trust` would produce before writing.
fn preflight(
    conn: &Connection,
    objects: &[SchemaObject],
    version: i64,
    trust: Trust,
) -> Option<RefusalSummary> {
    let refusal = if version > STORAGE_VERSION {
        Some(Refusal::SchemaTooNew { found: version })
    } else if version < 0 {
        Some(Refusal::Malformed(Malformation::NegativeVersion {
            found: version,
        }))
    } else if !is_user_database(objects, trust) {
        Some(Refusal::NotAUserDatabase)
    } else if let Err(hostility) = check_hostile(objects, version, trust) {
        Some(Refusal::Hostile(hostility))
    } else if version == STORAGE_VERSION {
        check_shapes(conn).err()
    } else {
        None
    };
    refusal.map(|refusal| {
        let err = crate::error::OpenError::from(refusal);
        RefusalSummary {
            reason: snug_reasons::Reasoned::reason(&err).name,
            message: err.to_string(),
        }
    })
}

#[cfg(test)]
mod tests;
