//! [`AppDatabase`]: one app's runtime database — a fresh in-memory SQLite database holding only
//! that app's objects under their natural names, with the sandbox installed.
//!
//! The database lives in SQLite's `memdb` VFS under a process-unique, unguessable name
//! (`file:/snug-app-<n>-<random>?vfs=memdb`). Only this crate knows the name; it uses it to
//! ATTACH the runtime to the *user* database's connection for bulk `INSERT … SELECT` in both
//! directions. The runtime's own connection never attaches anything (the sandbox refuses it and
//! `SQLITE_LIMIT_ATTACHED` is 0), so app SQL cannot reach the user database.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::limits::Limit;
use rusqlite::{Connection, OpenFlags};
use snug_schema::{Interrupt, MAX_USERDB_BYTES, SQLITE_MAGIC, UserDb};

use crate::error::LoadError;
use crate::namespace::AppNamespace;
use crate::sandbox::{Mode, ModeGuard, Sandbox};

/// Length of the SQLite file header.
const SQLITE_HEADER_LEN: usize = 100;

/// What a runtime looked like when it last matched the user database: after materialization or
/// the last persist. An unchanged runtime persists as a no-op without reading a row.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Baseline {
    /// `sqlite3_total_changes()`: every row inserted, updated or deleted by the connection,
    /// including by triggers, and including changes later rolled back (which only costs a
    /// comparison, never a missed write).
    total_changes: u64,
    /// `PRAGMA schema_version`: bumped by every DDL statement in `main`.
    schema_version: i64,
    /// The user database it was taken against (`snug_meta.db_id`), so a runtime is never
    /// skipped against a different file.
    db_id: Option<String>,
}

/// One app's runtime database.
///
/// Obtain one with [`materialize`](crate::materialize) (from a user database),
/// [`AppDatabase::from_bytes`] (a runtime image from elsewhere, e.g. `snug app persist --from`)
/// or [`AppDatabase::empty`]. Run app SQL with [`AppDatabase::execute`] or on
/// [`AppDatabase::connection`], write it back with [`persist`](crate::persist), and serialize
/// it with [`AppDatabase::to_bytes`] (a standalone SQLite file with natural names).
///
/// Every statement on the connection passes the sandbox (see the `sandbox` module): no
/// ATTACH/DETACH/VACUUM, no virtual tables, no extension loading, pragmas from an allowlist
/// only, new object names checked against the §8.2 rule. Foreign keys are off, as in the
/// reference (an app may turn them on). The database cannot grow past the user-database cap.
pub struct AppDatabase {
    conn: Connection,
    namespace: AppNamespace,
    uri: String,
    sandbox: Sandbox,
    baseline: Option<Baseline>,
    unregistered: Vec<String>,
    /// The user database's, for a runtime materialized from one: statements on the runtime
    /// stop with the work they are part of.
    interrupt: Interrupt,
}

impl std::fmt::Debug for AppDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppDatabase")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// A process-unique, unguessable memdb name. The counter guarantees uniqueness; the random
/// part only keeps other code in the process from guessing it, so a CSPRNG failure degrades to
/// the counter rather than failing.
fn memdb_uri() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut random = [0u8; 12];
    let suffix: String = match getrandom::fill(&mut random) {
        Ok(()) => random.iter().map(|b| format!("{b:02x}")).collect(),
        Err(_) => String::from("0"),
    };
    format!(
        "file:/snug-app-{}-{n}-{suffix}?vfs=memdb",
        std::process::id()
    )
}

/// Sets the connection up as a runtime: the reference's semantics (foreign keys off) and the
/// hardening (DEFENSIVE, untrusted schema, no attached databases, bounded values).
fn configure(conn: &Connection) -> rusqlite::Result<()> {
    // The bundled SQLite is compiled with foreign keys on; the reference never enables them,
    // and materialization copies child rows before parents.
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false)?;
    conn.pragma_update(None, "trusted_schema", "OFF")?;
    conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
    // No single value may exceed what the whole user database may hold.
    let max_len = i32::try_from(MAX_USERDB_BYTES).unwrap_or(i32::MAX);
    conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, max_len)?;
    Ok(())
}

impl AppDatabase {
    /// Returns a new, empty runtime for `namespace`.
    pub fn empty(namespace: &str) -> rusqlite::Result<AppDatabase> {
        AppDatabase::create(AppNamespace::new(namespace), &Interrupt::never())
    }

    pub(crate) fn create(
        namespace: AppNamespace,
        interrupt: &Interrupt,
    ) -> rusqlite::Result<AppDatabase> {
        let uri = memdb_uri();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_EXRESCODE;
        let mut conn = Connection::open_with_flags(&uri, flags)?;
        #[cfg(test)]
        crate::test_support::count_vm_steps(&mut conn);
        configure(&conn)?;
        interrupt.install(&mut conn)?;
        let sandbox = Sandbox::default();
        sandbox.install(&mut conn)?;
        let mut db = AppDatabase {
            conn,
            namespace,
            uri,
            sandbox,
            baseline: None,
            unregistered: Vec::new(),
            interrupt: interrupt.clone(),
        };
        db.cap_size()?;
        Ok(db)
    }

    /// Loads a runtime image (a standalone SQLite file, e.g. a per-app export or a runtime
    /// saved by another host) for `namespace`.
    ///
    /// The bytes are checked (SQLite magic, cap, `quick_check`) but their schema is not judged
    /// here: [`persist`](crate::persist) refuses invalid names and virtual tables before it
    /// touches the user database, and the sandbox applies to anything run on it.
    pub fn from_bytes(namespace: &str, bytes: &[u8]) -> Result<AppDatabase, LoadError> {
        let size = bytes.len() as u64;
        if size > MAX_USERDB_BYTES {
            return Err(LoadError::TooLarge {
                size,
                max: MAX_USERDB_BYTES,
            });
        }
        if !bytes.starts_with(SQLITE_MAGIC) {
            return Err(LoadError::NotSqlite);
        }
        if bytes.len() < SQLITE_HEADER_LEN {
            return Err(LoadError::Malformed {
                problem: format!("{} bytes is shorter than a SQLite header", bytes.len()),
            });
        }
        let mut header = [0u8; SQLITE_HEADER_LEN];
        header.copy_from_slice(&bytes[..SQLITE_HEADER_LEN]);
        // An in-memory copy has no WAL: a WAL-mode header is switched to rollback in the copy.
        if header[18] == 2 || header[19] == 2 {
            header[18] = 1;
            header[19] = 1;
        }
        let raw_page_size = u32::from(u16::from_be_bytes([header[16], header[17]]));
        let page_size = if raw_page_size == 1 {
            65_536
        } else {
            raw_page_size
        };
        let mut source = Connection::open_in_memory()?;
        configure(&source)?;
        let reader = std::io::Read::chain(&header[..], &bytes[SQLITE_HEADER_LEN..]);
        source
            .deserialize_read_exact(rusqlite::MAIN_DB, reader, bytes.len(), true)
            .map_err(LoadError::from_sqlite)?;
        let verdict: String = source
            .query_row("PRAGMA quick_check(1)", [], |row| row.get(0))
            .map_err(LoadError::from_sqlite)?;
        if verdict != "ok" {
            return Err(LoadError::Malformed { problem: verdict });
        }
        let mut db = AppDatabase::create(AppNamespace::new(namespace), &Interrupt::never())?;
        {
            let _internal = db.sandbox.enter(Mode::Internal);
            // A memdb destination cannot change its page size during a backup, so the empty
            // destination takes the source's first.
            db.conn
                .pragma_update(None, "page_size", i64::from(page_size))?;
        }
        {
            let backup = rusqlite::backup::Backup::new(&source, &mut db.conn)?;
            backup.run_to_completion(4096, Duration::ZERO, None)?;
        }
        db.cap_size()?;
        Ok(db)
    }

    /// Returns the app's namespace.
    pub fn namespace(&self) -> &str {
        self.namespace.as_str()
    }

    /// Returns the app's namespace token.
    pub fn token(&self) -> &str {
        self.namespace.token()
    }

    pub(crate) fn app_namespace(&self) -> &AppNamespace {
        &self.namespace
    }

    /// Returns the natural names of the app's at-rest tables that its schema record did not
    /// list when this runtime was materialized, recovered here with their rows.
    ///
    /// A read never writes: they are registered only by a persist that writes (a change to the
    /// runtime, or apply-DDL); until then the user database keeps them as they are at rest.
    pub fn unregistered_tables(&self) -> &[String] {
        &self.unregistered
    }

    /// Records that a persist registered every table, recovered ones included.
    pub(crate) fn clear_unregistered(&mut self) {
        self.unregistered.clear();
    }

    /// Returns the sandboxed connection, for app SQL a host runs itself.
    ///
    /// Statements prepared on it are subject to the sandbox. Changes are written back only by
    /// [`persist`](crate::persist); leave no transaction open across a persist (it reads the
    /// committed state).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Returns the database as a standalone SQLite image with natural names: the per-app export.
    pub fn to_bytes(&mut self) -> rusqlite::Result<Vec<u8>> {
        Ok(self.conn.serialize(rusqlite::MAIN_DB)?.to_vec())
    }

    /// Returns whether the runtime may differ from the user database it was materialized from
    /// or last persisted to. `false` means a persist is a no-op; `true` means a persist compares
    /// (and writes only what differs).
    pub fn is_dirty(&self) -> bool {
        match &self.baseline {
            None => true,
            Some(baseline) => self.counters().is_none_or(|now| {
                now.0 != baseline.total_changes || now.1 != baseline.schema_version
            }),
        }
    }

    fn counters(&self) -> Option<(u64, i64)> {
        let schema_version = self
            .conn
            .pragma_query_value(None, "schema_version", |row| row.get(0))
            .ok()?;
        Some((self.conn.total_changes(), schema_version))
    }

    /// Records the current state as matching `user_db` (after materialize or persist).
    pub(crate) fn mark_clean(&mut self, user_db: &UserDb) {
        let db_id = user_db.db_id().ok().flatten();
        self.baseline = self
            .counters()
            .map(|(total_changes, schema_version)| Baseline {
                total_changes,
                schema_version,
                db_id,
            });
    }

    /// Returns whether the runtime is unchanged since it last matched `user_db`.
    pub(crate) fn is_clean_for(&self, user_db: &UserDb) -> bool {
        if self.is_dirty() {
            return false;
        }
        let db_id = user_db.db_id().ok().flatten();
        self.baseline
            .as_ref()
            .is_some_and(|baseline| db_id.is_some() && baseline.db_id == db_id)
    }

    /// Bounds the runtime at the user-database cap: a write that would grow it further fails
    /// with SQLITE_FULL instead of growing memory without limit.
    fn cap_size(&mut self) -> rusqlite::Result<()> {
        let _internal = self.sandbox.enter(Mode::Internal);
        let page_size: i64 = self
            .conn
            .pragma_query_value(None, "page_size", |row| row.get(0))?;
        let max_pages = i64::try_from(MAX_USERDB_BYTES).unwrap_or(i64::MAX) / page_size.max(512);
        self.conn.pragma_update(None, "max_page_count", max_pages)?;
        Ok(())
    }

    pub(crate) fn uri(&self) -> &str {
        &self.uri
    }

    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    pub(crate) fn conn_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }

    pub(crate) fn interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    pub(crate) fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    pub(crate) fn enter(&self, mode: Mode) -> ModeGuard {
        self.sandbox.enter(mode)
    }

    /// Ends a materialization: the runtime matches `user_db` as far as a persist is concerned,
    /// even with `unregistered` tables recovered, so that reading the app writes nothing; the
    /// first persist that writes registers them with everything else.
    pub(crate) fn finish_materialize(
        &mut self,
        user_db: &UserDb,
        unregistered: Vec<String>,
    ) -> rusqlite::Result<()> {
        self.cap_size()?;
        self.mark_clean(user_db);
        self.unregistered = unregistered;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
