//! Reading an app's at-rest state from the user database, and attaching a runtime to the user
//! database's connection for bulk copies.

use rusqlite::{Connection, OptionalExtension};

use crate::namespace::AppNamespace;

/// The schema name a runtime is attached under on the user database's connection. Only this
/// crate attaches it, for the duration of one materialize or persist.
pub(crate) const RUNTIME_ALIAS: &str = "snug_runtime";

/// An at-rest table of an app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RestTable {
    /// `app_<token>__<name>` as stored.
    pub(crate) name: String,
    /// The `<name>` part.
    pub(crate) natural: String,
    /// Its `sqlite_master.sql`.
    pub(crate) sql: String,
}

/// The app's `snug_app_schemas` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Registration {
    pub(crate) token: String,
    pub(crate) schema_json: String,
}

/// Returns the app's `uses_db` flag, or `None` when there is no such app.
pub(crate) fn app_uses_db(conn: &Connection, ns: &AppNamespace) -> rusqlite::Result<Option<bool>> {
    conn.query_row(
        "SELECT uses_db FROM main.snug_apps WHERE app_id = ?1",
        [ns.as_str()],
        // Readers test `=== 1`, as the reference does.
        |row| Ok(row.get::<_, Option<i64>>(0)? == Some(1)),
    )
    .optional()
}

/// Returns the app's registry row.
pub(crate) fn registration(
    conn: &Connection,
    ns: &AppNamespace,
) -> rusqlite::Result<Option<Registration>> {
    conn.query_row(
        "SELECT token, schema_json FROM main.snug_app_schemas WHERE app_id = ?1",
        [ns.as_str()],
        |row| {
            Ok(Registration {
                token: row.get(0)?,
                schema_json: row.get(1)?,
            })
        },
    )
    .optional()
}

/// Returns the app's at-rest tables in creation order.
///
/// Every table whose name starts with the app's prefix (in any case, as SQLite compares names)
/// is listed, valid or not: persist drops the ones the runtime no longer has.
pub(crate) fn rest_tables(
    conn: &Connection,
    ns: &AppNamespace,
) -> rusqlite::Result<Vec<RestTable>> {
    let mut stmt = conn.prepare(
        "SELECT name, coalesce(sql, '') FROM main.sqlite_master WHERE type = 'table' ORDER BY rowid",
    )?;
    let rows = stmt.query_map([], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
    })?;
    let mut tables = Vec::new();
    for row in rows {
        let (name, sql) = row?;
        if let Some(natural) = ns.natural_name(&name) {
            tables.push(RestTable {
                natural: natural.to_owned(),
                name,
                sql,
            });
        }
    }
    Ok(tables)
}

/// What [`attach_runtime`] changed on the user connection, to be undone by [`detach_runtime`].
#[derive(Debug)]
pub(crate) struct Attached {
    foreign_keys: i64,
}

/// Attaches the runtime at `uri` to the user connection as [`RUNTIME_ALIAS`], with foreign keys
/// off: rows are copied table by table, children possibly before parents, and a rename must
/// leave other tables' REFERENCES text alone as it does in the reference (where foreign keys
/// are never enabled). Must be called outside a transaction.
pub(crate) fn attach_runtime(conn: &Connection, uri: &str) -> rusqlite::Result<Attached> {
    let foreign_keys: i64 = conn.pragma_query_value(None, "foreign_keys", |row| row.get(0))?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    if let Err(err) = conn.execute(&format!("ATTACH ?1 AS {RUNTIME_ALIAS}"), [uri]) {
        let _ = conn.pragma_update(None, "foreign_keys", foreign_keys);
        return Err(err);
    }
    Ok(Attached { foreign_keys })
}

/// Undoes [`attach_runtime`]. Must be called outside a transaction.
pub(crate) fn detach_runtime(conn: &Connection, attached: Attached) -> rusqlite::Result<()> {
    let detached = conn.execute_batch(&format!("DETACH {RUNTIME_ALIAS}"));
    let restored = conn.pragma_update(None, "foreign_keys", attached.foreign_keys);
    detached.and(restored)
}

/// Ends the transaction `BEGIN` opened on `conn`: commits when `commit`, else rolls back.
pub(crate) fn end_transaction(conn: &Connection, commit: bool) -> rusqlite::Result<()> {
    if conn.is_autocommit() {
        return Ok(());
    }
    conn.execute_batch(if commit { "COMMIT" } else { "ROLLBACK" })
}
