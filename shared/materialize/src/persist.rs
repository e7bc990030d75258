//! Write-back (the reference materializer's `save`): a runtime's tables, registry row and
//! `uses_db` flag into the user database, in one `BEGIN IMMEDIATE` transaction.
//!
//! Better than the reference in two ways:
//! - An unchanged runtime writes nothing. A runtime materialized (or last persisted) by this
//!   crate knows whether any row or schema changed since; any other runtime is compared table
//!   by table, and when nothing differs the transaction is rolled back without having written a
//!   page.
//! - Only tables whose shape or content changed are dropped and rewritten; the others are not
//!   touched (the reference rewrites every table of the app on any change).
//!
//! At-rest names are made only by SQLite: the natural DDL runs (guarded by an authorizer that
//! allows it to create exactly that one table) and is followed by
//! `ALTER TABLE "<name>" RENAME TO "app_<token>__<name>"` with `legacy_alter_table` on, as in the
//! reference — on a scratch database holding only that table, whose resulting statement the
//! user database then runs under the same guard, so the work per table does not grow with the
//! user database's schema. Statement text is never edited.
//!
//! Every step is linear in the number of tables: lookups go through maps, table options are
//! read once, and an empty table is not copied (`ddl/tests.rs` counts the steps).

use std::collections::{HashMap, HashSet};

use rusqlite::Connection;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use serde::Serialize;
use snug_schema::{Interrupt, MAX_USERDB_BYTES, UserDb};

use crate::error::PersistError;
use crate::namespace::{AppNamespace, is_kv, quote_ident};
use crate::runtime::AppDatabase;
use crate::sandbox::{Mode, denied_function};
use crate::scan::{RuntimeScan, RuntimeTable, ScanError, scan};
use crate::schema_json::{AppSchema, ObjectKind};
use crate::tables::{Shape, TableFlags, copy_rows, same_rows};
use crate::userside::{
    RUNTIME_ALIAS, RestTable, app_uses_db, attach_runtime, detach_runtime, end_transaction,
    registration, rest_tables,
};

/// What happened to the app's `snug_app_schemas` row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RegistryChange {
    /// Already up to date; not written.
    #[default]
    Unchanged,
    /// Written (inserted or replaced).
    Written,
    /// Deleted: the runtime has no objects left to register.
    Deleted,
}

/// What a persist did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PersistReport {
    /// Whether anything was written. `false` means the user database's bytes are untouched.
    pub wrote: bool,
    /// Whether the runtime was known unchanged since it was materialized or last persisted, so
    /// not even a comparison ran.
    pub unchanged_runtime: bool,
    /// Natural names of tables created or rewritten (shape or content differed).
    pub tables_written: Vec<String>,
    /// Natural names of tables left exactly as they were.
    pub tables_unchanged: Vec<String>,
    /// At-rest names of tables dropped because the runtime no longer has them.
    pub tables_dropped: Vec<String>,
    /// What happened to the registry row.
    pub registry: RegistryChange,
    /// Whether `snug_apps.uses_db` flipped to 1.
    pub uses_db_set: bool,
    /// Audit rows appended to `snug_app_migrations` (apply-DDL only).
    pub migrations_appended: usize,
}

/// Audit rows written in the same transaction as the write-back (apply-DDL).
pub(crate) struct Audit<'a> {
    pub(crate) statements: &'a [String],
    pub(crate) applied_at: String,
}

/// The write-back decided by comparing the runtime with the rest state.
#[derive(Debug, Default)]
struct Plan<'s> {
    uses_db: bool,
    create: Vec<&'s RuntimeTable>,
    unchanged: Vec<String>,
    drop: Vec<String>,
    registry: Option<RegistryWrite>,
}

#[derive(Debug)]
enum RegistryWrite {
    Upsert(String),
    Delete,
}

impl Plan<'_> {
    fn flips_uses_db(&self, scan: &RuntimeScan) -> bool {
        !self.uses_db && !scan.tables.is_empty()
    }

    fn is_noop(&self, scan: &RuntimeScan) -> bool {
        self.create.is_empty()
            && self.drop.is_empty()
            && self.registry.is_none()
            && !self.flips_uses_db(scan)
    }
}

/// Writes `runtime` back into `user_db` (spec §8.2).
///
/// Fails closed: a runtime with an invalid object name, a virtual table or a foreign `snug_kv`,
/// and a namespace whose token another registered app id also has, are refused before the
/// user database is touched; any later failure (including the size cap,
/// [`PersistError::TooLarge`]) rolls the one transaction back, so the app's previous rest
/// state, the secrets and every other app are exactly as they were.
pub fn persist(
    user_db: &mut UserDb,
    runtime: &mut AppDatabase,
) -> Result<PersistReport, PersistError> {
    persist_with(user_db, runtime, None)
}

pub(crate) fn persist_with(
    user_db: &mut UserDb,
    runtime: &mut AppDatabase,
    audit: Option<&Audit<'_>>,
) -> Result<PersistReport, PersistError> {
    if let Some(other_app_id) = user_db.other_app_with_token(runtime.namespace())? {
        return Err(PersistError::AppTokenCollision {
            namespace: runtime.namespace().to_owned(),
            other_app_id,
            token: runtime.token().to_owned(),
        });
    }
    if audit.is_none() && runtime.is_clean_for(user_db) {
        return Ok(PersistReport {
            unchanged_runtime: true,
            ..PersistReport::default()
        });
    }
    let scanned = {
        let _internal = runtime.enter(Mode::Internal);
        scan(runtime.conn())
    };
    let scanned = scanned.map_err(|err| match err {
        ScanError::Refused(refusal) => PersistError::Refused(refusal),
        ScanError::Sqlite(err) => PersistError::Sqlite(err),
    })?;
    let ns = runtime.app_namespace().clone();

    if user_db.pending_adoption().is_some() {
        // The legacy file is read-only until adopted, and adopting it is a write: decide first
        // whether there is anything to write at all.
        let user = user_db.connection();
        let attached = attach_runtime(user, runtime.uri())?;
        let planned = (|| {
            user.execute_batch("BEGIN")?;
            let plan = plan(user, &ns, &scanned);
            end_transaction(user, false)?;
            plan.map(|plan| plan.is_noop(&scanned))
        })();
        detach_runtime(user, attached)?;
        if planned? && audit.is_none() {
            runtime.mark_clean(user_db);
            return Ok(PersistReport::default());
        }
        user_db.ensure_writable().map_err(PersistError::Adopt)?;
    }

    let now = user_db.clock().timestamp();
    let interrupt = user_db.interrupt().clone();
    let user = user_db.connection_mut();
    let attached = attach_runtime(user, runtime.uri())?;
    let written = (|| {
        user.execute_batch("BEGIN IMMEDIATE")?;
        let result = write(user, &ns, &scanned, audit, &now, &interrupt);
        let commit = matches!(&result, Ok(report) if report.wrote);
        match end_transaction(user, commit) {
            Ok(()) => result,
            Err(err) => {
                let _ = end_transaction(user, false);
                result.and(Err(PersistError::Sqlite(err)))
            }
        }
    })();
    detach_runtime(user, attached)?;
    let report = written?;
    runtime.mark_clean(user_db);
    if report.wrote {
        // The registry row now lists every table the runtime has, recovered ones included.
        runtime.clear_unregistered();
    }
    Ok(report)
}

/// Compares the runtime (attached as [`RUNTIME_ALIAS`]) with the rest state.
fn plan<'s>(
    user: &Connection,
    ns: &AppNamespace,
    scanned: &'s RuntimeScan,
) -> Result<Plan<'s>, PersistError> {
    let Some(uses_db) = app_uses_db(user, ns)? else {
        return Err(PersistError::AppNotFound {
            namespace: ns.as_str().to_owned(),
        });
    };
    let registered = registration(user, ns)?;
    // An unreadable registry is rewritten from the runtime, which is the truth being persisted.
    let stored: Option<AppSchema> = registered
        .as_ref()
        .filter(|row| row.token == ns.token())
        .and_then(|row| AppSchema::parse(&row.schema_json).ok());
    let rest = rest_tables(user, ns)?;
    // Every lookup below is by exact name, through a map: a write-back of `n` tables does work
    // in `n`, not `n²`.
    let mut rest_by_name: HashMap<&str, &RestTable> = HashMap::new();
    for table in &rest {
        rest_by_name.entry(table.name.as_str()).or_insert(table);
    }
    let stored_ddl: HashMap<&str, &str> = stored.as_ref().map_or_else(HashMap::new, |s| {
        let mut ddl = HashMap::new();
        for object in s.objects.iter().filter(|o| o.kind == ObjectKind::Table) {
            ddl.entry(object.name.as_str())
                .or_insert(object.ddl.as_str());
        }
        ddl
    });
    let flags = TableFlags::read(user, "main")?;
    let mut plan = Plan {
        uses_db,
        ..Plan::default()
    };
    let mut kept: HashSet<&str> = HashSet::new();
    for table in &scanned.tables {
        let rest_name = ns.rest_table_name(&table.name);
        let Some(existing) = rest_by_name.get(rest_name.as_str()) else {
            plan.create.push(table);
            continue;
        };
        // Shape: the registered natural DDL is the runtime's verbatim (snug_kv has a fixed
        // shape and is never registered), and SQLite reports the same columns and options.
        let same_ddl = is_kv(&table.name)
            || stored_ddl
                .get(table.name.as_str())
                .is_some_and(|ddl| *ddl == table.sql);
        let same_shape =
            same_ddl && Shape::read(user, &flags, &existing.name)?.as_ref() == Some(&table.shape);
        let same = same_shape
            && same_rows(
                user,
                &table.shape,
                ("main", &existing.name),
                (RUNTIME_ALIAS, &table.name),
            )?;
        if same {
            kept.insert(&existing.name);
            plan.unchanged.push(table.name.clone());
        } else {
            plan.create.push(table);
        }
    }
    plan.drop = rest
        .iter()
        .filter(|r| !kept.contains(r.name.as_str()))
        .map(|r| r.name.clone())
        .collect();
    plan.registry = if scanned.schema.is_empty() {
        registered.is_some().then_some(RegistryWrite::Delete)
    } else if stored.is_some_and(|s| s.same_as(&scanned.schema)) {
        None
    } else {
        Some(RegistryWrite::Upsert(scanned.schema.to_json()))
    };
    Ok(plan)
}

/// Plans and applies the write-back inside the open `BEGIN IMMEDIATE`. The caller commits when
/// the report says something was written, and rolls back otherwise.
fn write(
    user: &mut Connection,
    ns: &AppNamespace,
    scanned: &RuntimeScan,
    audit: Option<&Audit<'_>>,
    now: &str,
    interrupt: &Interrupt,
) -> Result<PersistReport, PersistError> {
    let plan = plan(user, ns, scanned)?;
    let size_before = db_size(user)?;
    let mut report = PersistReport {
        tables_unchanged: plan.unchanged.clone(),
        uses_db_set: plan.flips_uses_db(scanned),
        ..PersistReport::default()
    };
    if plan.is_noop(scanned) && audit.is_none() {
        return Ok(report);
    }
    report.wrote = true;
    for table in &plan.drop {
        user.execute_batch(&format!("DROP TABLE main.{}", quote_ident(table)))?;
    }
    let recreated: HashSet<String> = plan
        .create
        .iter()
        .map(|t| ns.rest_table_name(&t.name))
        .collect();
    report.tables_dropped = plan
        .drop
        .iter()
        .filter(|name| !recreated.contains(name.as_str()))
        .cloned()
        .collect();
    if !plan.create.is_empty() {
        create_at_rest(user, ns, &plan.create, interrupt)?;
    }
    for table in &plan.create {
        // Per table, as statements this short never reach SQLite's progress handler.
        interrupt.check()?;
        copy_rows(
            user,
            &table.shape,
            (RUNTIME_ALIAS, &table.name),
            ("main", &ns.rest_table_name(&table.name)),
        )?;
        report.tables_written.push(table.name.clone());
    }
    match &plan.registry {
        Some(RegistryWrite::Upsert(json)) => {
            user.execute(
                "INSERT OR REPLACE INTO main.snug_app_schemas (app_id, token, schema_json, updated_at) \
                 VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![ns.as_str(), ns.token(), json, now],
            )?;
            report.registry = crate::persist::RegistryChange::Written;
        }
        Some(RegistryWrite::Delete) => {
            user.execute(
                "DELETE FROM main.snug_app_schemas WHERE app_id = ?1",
                [ns.as_str()],
            )?;
            report.registry = RegistryChange::Deleted;
        }
        None => {}
    }
    if report.uses_db_set {
        user.execute(
            "UPDATE main.snug_apps SET uses_db = 1 WHERE app_id = ?1 AND uses_db = 0",
            [ns.as_str()],
        )?;
    }
    if let Some(audit) = audit {
        let last: i64 = user.query_row(
            "SELECT COALESCE(MAX(seq), 0) FROM main.snug_app_migrations WHERE app_id = ?1",
            [ns.as_str()],
            |row| row.get(0),
        )?;
        let mut insert = user.prepare(
            "INSERT INTO main.snug_app_migrations (app_id, seq, ddl, applied_at) VALUES (?1, ?2, ?3, ?4)",
        )?;
        for (seq, ddl) in (last + 1..).zip(audit.statements) {
            insert.execute(rusqlite::params![ns.as_str(), seq, ddl, audit.applied_at])?;
        }
        report.migrations_appended = audit.statements.len();
    }
    // The cap is measured as the reference measures it, after every change and before commit.
    // Unlike the reference, a write-back that does not grow the file is let through even when
    // the file is already over the cap (imported that way): refusing it would also refuse the
    // deletes that bring the file back under.
    let size = db_size(user)?;
    if size > MAX_USERDB_BYTES && size > size_before {
        return Err(PersistError::TooLarge {
            size,
            max: MAX_USERDB_BYTES,
        });
    }
    Ok(report)
}

/// Returns `page_count * page_size` of the user database: its size as SQLite will write it.
fn db_size(user: &Connection) -> rusqlite::Result<u64> {
    let pages: i64 = user.pragma_query_value(Some("main"), "page_count", |row| row.get(0))?;
    let page_size: i64 = user.pragma_query_value(Some("main"), "page_size", |row| row.get(0))?;
    Ok(u64::try_from(pages.saturating_mul(page_size)).unwrap_or(u64::MAX))
}

/// Creates each table at rest: natural DDL, then SQLite's rename.
///
/// The rename runs on a scratch database holding only the table being renamed, and the text
/// SQLite leaves there is what the user database runs. Renaming in the user database itself
/// rewrites, reloads and re-checks its whole schema (`ALTER TABLE … RENAME` passes every row of
/// `sqlite_master` through the parser three times), so a write-back of `n` new tables cost
/// `n` times the schema: 800 tables took seconds. The text is the same either way: with
/// `legacy_alter_table` on and foreign keys off, as here and in the reference, a rename changes
/// only the renamed table's own statement.
fn create_at_rest(
    user: &mut Connection,
    ns: &AppNamespace,
    tables: &[&RuntimeTable],
    interrupt: &Interrupt,
) -> Result<(), PersistError> {
    // The reference runs the natural DDL in the user database, where an existing object of that
    // name (hub names are reserved, so only a foreign table or an index) fails it; that refusal
    // is kept, checked once against every name (SQLite compares them ASCII case-insensitively).
    let taken: HashSet<String> = {
        let mut stmt = user.prepare("SELECT name FROM main.sqlite_master")?;
        let names = stmt.query_map([], |row| row.get::<_, String>(0))?;
        names
            .map(|name| name.map(|name| name.to_ascii_lowercase()))
            .collect::<rusqlite::Result<_>>()?
    };
    if let Some(table) = tables
        .iter()
        .find(|table| taken.contains(&table.name.to_ascii_lowercase()))
    {
        return Err(PersistError::NameCollision {
            name: table.name.clone(),
        });
    }
    let mut stage = Stage::open()?;
    for table in tables {
        interrupt.check()?;
        let failed = |source| PersistError::CreateFailed {
            name: table.name.clone(),
            source,
        };
        let rest_name = ns.rest_table_name(&table.name);
        let rest_sql = stage
            .renamed(&table.name, &table.sql, &rest_name)
            .map_err(failed)?;
        guarded_create(user, &rest_name, &rest_sql).map_err(failed)?;
    }
    Ok(())
}

/// The scratch database [`create_at_rest`] renames tables in: in memory, empty between tables,
/// configured as the user database is during a persist (defensive, untrusted schema, foreign
/// keys off) plus `legacy_alter_table`, the reference's rename semantics.
struct Stage {
    conn: Connection,
}

impl Stage {
    fn open() -> rusqlite::Result<Stage> {
        use rusqlite::config::DbConfig;
        #[cfg_attr(not(test), allow(unused_mut))]
        let mut conn = Connection::open_in_memory()?;
        #[cfg(test)]
        crate::test_support::count_vm_steps(&mut conn);
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false)?;
        conn.pragma_update(None, "trusted_schema", "OFF")?;
        conn.pragma_update(None, "foreign_keys", "OFF")?;
        conn.pragma_update(None, "legacy_alter_table", "ON")?;
        Ok(Stage { conn })
    }

    /// Runs table `name`'s natural DDL `sql` (under the same guard as in the user database),
    /// renames the table to `rest_name` and returns the statement SQLite then records for it;
    /// the scratch database is empty again afterwards.
    fn renamed(&mut self, name: &str, sql: &str, rest_name: &str) -> rusqlite::Result<String> {
        let conn = &mut self.conn;
        let renamed = guarded_create(conn, name, sql).and_then(|()| {
            conn.execute_batch(&format!(
                "ALTER TABLE main.{} RENAME TO {}",
                quote_ident(name),
                quote_ident(rest_name)
            ))?;
            conn.query_row(
                "SELECT sql FROM main.sqlite_master WHERE type = 'table' AND name = ?1",
                [rest_name],
                |row| row.get::<_, String>(0),
            )
        });
        // Dropping by either name empties the stage whether or not the rename happened.
        for left in [rest_name, name] {
            conn.execute_batch(&format!("DROP TABLE IF EXISTS main.{}", quote_ident(left)))?;
        }
        renamed
    }
}

/// Runs a table's natural DDL on the user connection under an authorizer that allows exactly
/// the creation of table `name` in `main` (and the bookkeeping SQLite does for it).
///
/// The text comes from the runtime's `sqlite_master`, which a runtime image from elsewhere
/// controls; the authorizer makes sure it can do nothing else to the user database.
fn guarded_create(user: &mut Connection, name: &str, sql: &str) -> rusqlite::Result<()> {
    let expected = name.to_owned();
    user.authorizer(Some(move |ctx: AuthContext<'_>| {
        let in_main = ctx
            .database_name
            .is_none_or(|db| db.eq_ignore_ascii_case("main"));
        let internal = |n: &str| {
            n.get(..7)
                .is_some_and(|head| head.eq_ignore_ascii_case("sqlite_"))
        };
        let allowed = in_main
            && match ctx.action {
                AuthAction::CreateTable { table_name } => {
                    table_name.eq_ignore_ascii_case(&expected) || internal(table_name)
                }
                AuthAction::CreateIndex { index_name, .. } => internal(index_name),
                AuthAction::Insert { table_name } | AuthAction::Update { table_name, .. } => {
                    table_name.eq_ignore_ascii_case("sqlite_master")
                }
                AuthAction::Function { function_name } => !denied_function(function_name),
                AuthAction::Read { .. } | AuthAction::Select | AuthAction::Reindex { .. } => true,
                _ => false,
            };
        if allowed {
            Authorization::Allow
        } else {
            Authorization::Deny
        }
    }))?;
    let result = user.prepare(sql).and_then(|mut stmt| stmt.execute([]));
    let cleared = user.authorizer(None::<fn(AuthContext<'_>) -> Authorization>);
    result.and(cleared).map(|_| ())
}

#[cfg(test)]
mod tests;
