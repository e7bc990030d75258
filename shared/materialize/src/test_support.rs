//! Shared test fixtures: the reference vectors, user databases on a stepping clock, runtime
//! images with arbitrary (hostile) schemas, and a canonical dump of a database's content and
//! shape for equality checks.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test fixtures")]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::types::ValueRef;
use snug_schema::{NewApp, SteppingClock, UserDb};

use crate::AppDatabase;

/// The UUID-namespaced app of the `sample-v6` vector.
pub(crate) const TRADER: &str = "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c";
/// The non-UUID-namespaced app of the `sample-v6` vector.
pub(crate) const CHESS: &str = "starter--chess";

pub(crate) use snug_test_support::vectors_dir;

/// Reads a vector file, failing the test if it is missing.
pub(crate) fn vector(rel: &str) -> Vec<u8> {
    let path = snug_test_support::vector(rel);
    std::fs::read(&path).unwrap_or_else(|err| panic!("vector {}: {err}", path.display()))
}

/// The `sample-v6` manifest entry.
pub(crate) fn sample_manifest() -> serde_json::Value {
    let manifest: serde_json::Value =
        serde_json::from_slice(&vector("manifest.json")).expect("manifest is JSON");
    manifest["userdb"]
        .as_array()
        .expect("userdb entries")
        .iter()
        .find(|e| e["name"] == "sample-v6")
        .expect("sample-v6 entry")
        .clone()
}

/// A clock at 2026-01-01T00:00:00.000Z advancing one second per reading.
pub(crate) fn clock() -> Arc<SteppingClock> {
    Arc::new(SteppingClock::new(
        std::time::UNIX_EPOCH + Duration::from_millis(1_767_225_600_000),
        Duration::from_secs(1),
    ))
}

/// The `sample-v6` user database, in memory.
pub(crate) fn sample_db() -> UserDb {
    UserDb::from_bytes(&vector("userdb/sample-v6.user.snug"), clock())
        .expect("sample opens")
        .0
}

/// Copies the `sample-v6` user database to `dir/user.snug` and opens it in place.
pub(crate) fn sample_file(dir: &Path) -> (UserDb, PathBuf) {
    let path = snug_test_support::sample_copy(dir, "user.snug");
    let (db, report) = UserDb::open_path(&path, clock()).expect("sample opens");
    assert!(!report.wrote, "a healthy vector opens without writing");
    (db, path)
}

/// A new in-memory user database with one app per namespace.
pub(crate) fn db_with_apps(namespaces: &[&str]) -> UserDb {
    let (mut db, _) = UserDb::create_in_memory(clock()).unwrap();
    install(&mut db, namespaces);
    db
}

/// Installs one app per namespace.
pub(crate) fn install(db: &mut UserDb, namespaces: &[&str]) {
    for ns in namespaces {
        db.install_app(&NewApp {
            app_id: Some((*ns).to_owned()),
            display_name: format!("app {ns}"),
            html: "<p>app</p>".into(),
            ..NewApp::default()
        })
        .unwrap();
    }
}

/// A runtime for `namespace` whose schema and rows are made by `sql` on a plain, unsandboxed
/// connection: any schema at all, including ones the sandbox would refuse.
pub(crate) fn raw_runtime(namespace: &str, sql: &str) -> AppDatabase {
    let mut conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(sql).unwrap();
    let bytes = conn.serialize(rusqlite::MAIN_DB).unwrap().to_vec();
    AppDatabase::from_bytes(namespace, &bytes).unwrap()
}

pub(crate) use snug_test_support::sha256_hex as sha256_file;

fn render(value: ValueRef<'_>) -> String {
    match value {
        ValueRef::Null => "NULL".into(),
        ValueRef::Integer(i) => format!("{i}"),
        ValueRef::Real(r) => format!("{r:?}r"),
        ValueRef::Text(t) => format!("{:?}", String::from_utf8_lossy(t)),
        ValueRef::Blob(b) => format!("x'{}'", hex::encode(b)),
    }
}

/// A canonical description of a database's main schema: every `sqlite_master` row
/// `(type, name, tbl_name, sql)` in creation order, then per table its options, columns
/// (`table_xinfo`) and rows (rowid included for rowid tables) in key order, including
/// `sqlite_sequence`.
pub(crate) fn dump(conn: &Connection) -> String {
    let mut out = String::new();
    let mut tables = Vec::new();
    {
        let mut stmt = conn
            .prepare("SELECT type, name, tbl_name, sql FROM main.sqlite_master ORDER BY rowid")
            .unwrap();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            let (kind, name, tbl, sql): (String, String, String, Option<String>) = (
                row.get(0).unwrap(),
                row.get(1).unwrap(),
                row.get(2).unwrap(),
                row.get(3).unwrap(),
            );
            writeln!(
                out,
                "{kind} {name} on {tbl}: {}",
                sql.as_deref().unwrap_or("-")
            )
            .unwrap();
            if kind == "table" {
                tables.push(name);
            }
        }
    }
    tables.sort();
    for table in tables {
        let (wr, strict): (i64, i64) = conn
            .query_row(
                "SELECT wr, strict FROM pragma_table_list WHERE schema = 'main' AND name = ?1",
                [&table],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        writeln!(out, "table {table} without_rowid={wr} strict={strict}").unwrap();
        let mut stmt = conn
            .prepare("SELECT name, type, \"notnull\", dflt_value, pk, hidden FROM pragma_table_xinfo(?1)")
            .unwrap();
        let mut columns = Vec::new();
        let mut rows = stmt.query([&table]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            let name: String = row.get(0).unwrap();
            writeln!(
                out,
                "  column {name} {} notnull={} default={} pk={} hidden={}",
                row.get::<_, String>(1).unwrap(),
                row.get::<_, i64>(2).unwrap(),
                row.get::<_, Option<String>>(3)
                    .unwrap()
                    .unwrap_or_else(|| "-".into()),
                row.get::<_, i64>(4).unwrap(),
                row.get::<_, i64>(5).unwrap(),
            )
            .unwrap();
            columns.push(format!("\"{}\"", name.replace('"', "\"\"")));
        }
        let select = if wr == 0 {
            format!(
                "SELECT rowid, {} FROM main.\"{table}\" ORDER BY rowid",
                columns.join(", ")
            )
        } else {
            format!("SELECT {} FROM main.\"{table}\"", columns.join(", "))
        };
        let mut stmt = conn.prepare(&select).unwrap();
        let n = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            let values: Vec<String> = (0..n).map(|i| render(row.get_ref(i).unwrap())).collect();
            writeln!(out, "  row {}", values.join(" | ")).unwrap();
        }
    }
    out
}

/// Opens a standalone database image for inspection.
pub(crate) fn open_image(bytes: &[u8]) -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    conn.deserialize_read_exact(rusqlite::MAIN_DB, bytes, bytes.len(), true)
        .unwrap();
    conn
}

/// `sqlite_master.sql` of a table in the user database.
pub(crate) fn table_sql(db: &UserDb, table: &str) -> Option<String> {
    use rusqlite::OptionalExtension;
    db.connection()
        .query_row(
            "SELECT sql FROM main.sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |row| row.get(0),
        )
        .optional()
        .unwrap()
}

/// The registry row's `schema_json` of an app.
pub(crate) fn schema_json(db: &UserDb, namespace: &str) -> Option<String> {
    use rusqlite::OptionalExtension;
    db.connection()
        .query_row(
            "SELECT schema_json FROM main.snug_app_schemas WHERE app_id = ?1",
            [namespace],
            |row| row.get(0),
        )
        .optional()
        .unwrap()
}

thread_local! {
    /// Virtual-machine steps counted on this thread by [`count_vm_steps`] connections.
    static VM_STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The cumulative step count each statement text last reported (for statements run again).
    static LAST_STEPS: std::cell::RefCell<std::collections::HashMap<String, i64>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Counts, on this thread, the virtual-machine steps of every statement run on `conn` from now
/// on — the statements this crate (or the test) runs, not SQLite's own reading of its schema,
/// which SQLite does not report. The crate instruments the connections it opens itself (the
/// runtime and the rename stage) when built for tests.
pub(crate) fn count_vm_steps(conn: &mut Connection) {
    use rusqlite::StatementStatus;
    use rusqlite::trace::{TraceEvent, TraceEventCodes};
    fn on_profile(event: TraceEvent<'_>) {
        let TraceEvent::Profile(stmt, _) = event else {
            return;
        };
        // Both counters are cumulative over a statement's runs: the steps of this run are the
        // difference from its previous run, or all of them on its first.
        let steps = i64::from(stmt.get_status(StatementStatus::VmStep));
        let runs = stmt.get_status(StatementStatus::Run);
        let before = LAST_STEPS.with_borrow_mut(|last| {
            let previous = last.insert(stmt.sql().into_owned(), steps);
            if runs <= 1 { 0 } else { previous.unwrap_or(0) }
        });
        VM_STEPS.set(VM_STEPS.get() + (steps - before).max(0) as u64);
    }
    conn.trace_v2(TraceEventCodes::SQLITE_TRACE_PROFILE, Some(on_profile))
        .expect("a trace hook installs");
}

/// Returns the steps [`count_vm_steps`] counted on this thread since the last call.
pub(crate) fn take_vm_steps() -> u64 {
    LAST_STEPS.with_borrow_mut(std::collections::HashMap::clear);
    VM_STEPS.replace(0)
}
