//! Listing every app's tables at rest (`snug app list`).

use serde::Serialize;
use snug_schema::{UserDb, classify_table, ddl::TableKind};

use crate::error::ListError;
use crate::namespace::{AppNamespace, quote_ident};

/// One at-rest table of an app.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppTable {
    /// The natural name the app uses.
    pub name: String,
    /// `app_<token>__<name>`.
    pub rest_name: String,
    /// Row count.
    pub rows: u64,
}

/// One app's data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppTables {
    /// The namespace (`snug_apps.app_id`).
    pub namespace: String,
    /// `appDataToken(namespace)`.
    pub token: String,
    /// `snug_apps.uses_db`.
    pub uses_db: bool,
    /// Whether a `snug_app_schemas` row registers the app's schema.
    pub registered: bool,
    /// Tables at rest, in creation order (`snug_kv` included).
    pub tables: Vec<AppTable>,
}

/// Every app's tables, and at-rest tables no app owns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AppsTables {
    /// One entry per `snug_apps` row, in creation order.
    pub apps: Vec<AppTables>,
    /// At-rest table names (`app_<token>__<name>`) whose token belongs to no app: left behind
    /// by a faulty writer; no materialization reads them.
    pub orphaned: Vec<String>,
}

/// Lists, for each app, its token, `uses_db`, and its at-rest tables with natural names and
/// row counts.
pub fn list_apps_tables(user_db: &UserDb) -> Result<AppsTables, ListError> {
    let conn = user_db.connection();
    let apps: Vec<(String, bool, bool)> = {
        let mut stmt = conn.prepare(
            "SELECT a.app_id, a.uses_db = 1, s.app_id IS NOT NULL FROM main.snug_apps AS a \
             LEFT JOIN main.snug_app_schemas AS s ON s.app_id = a.app_id \
             ORDER BY a.created_at, a.rowid",
        )?;
        stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?
    };
    let tables: Vec<String> = {
        let mut stmt = conn
            .prepare("SELECT name FROM main.sqlite_master WHERE type = 'table' ORDER BY rowid")?;
        stmt.query_map([], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?
    };
    let mut listing = AppsTables::default();
    let mut claimed = vec![false; tables.len()];
    for (namespace, uses_db, registered) in apps {
        let ns = AppNamespace::new(&namespace);
        let mut app = AppTables {
            token: ns.token().to_owned(),
            namespace,
            uses_db,
            registered,
            tables: Vec::new(),
        };
        for (idx, table) in tables.iter().enumerate() {
            let Some(natural) = ns.natural_name(table) else {
                continue;
            };
            claimed[idx] = true;
            let rows: i64 = conn.query_row(
                &format!("SELECT count(*) FROM main.{}", quote_ident(table)),
                [],
                |row| row.get(0),
            )?;
            app.tables.push(AppTable {
                name: natural.to_owned(),
                rest_name: table.clone(),
                rows: u64::try_from(rows).unwrap_or(0),
            });
        }
        listing.apps.push(app);
    }
    listing.orphaned = tables
        .iter()
        .zip(claimed)
        .filter(|(table, claimed)| {
            !claimed && matches!(classify_table(table), TableKind::AppData { .. })
        })
        .map(|(table, _)| table.clone())
        .collect();
    Ok(listing)
}

#[cfg(test)]
mod tests;
