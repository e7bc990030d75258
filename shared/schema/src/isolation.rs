//! §8.2 isolation between registered apps: two app ids with one `appDataToken` name the same
//! at-rest tables, so each would read and write the other's data.
//!
//! `appDataToken` lowercases a UUID-shaped namespace, so `A7F3…` and `a7f3…` are two app ids
//! with one token. No conforming hub registers both: [`UserDb::install_app`] refuses the second,
//! a file holding such a pair is refused wherever it enters (import, migrate, a hub's push
//! validation, `snug check`), and the materializer refuses either namespace.

use std::collections::BTreeMap;

use rusqlite::Connection;
use serde::Serialize;

use crate::db::UserDb;
use crate::error::OpenError;
use crate::token::app_data_token;

/// Two registered apps whose namespaces have one token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenCollision {
    /// The token both app ids map to.
    pub token: String,
    /// One app id (the first of the pair in byte order).
    pub app_id: String,
    /// Another registered app id with the same token.
    pub other_app_id: String,
}

impl std::fmt::Display for TokenCollision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "apps {:?} and {:?} share the data token {}, so each would reach the other's tables (§8.2)",
            self.app_id, self.other_app_id, self.token
        )
    }
}

/// Returns every registered app id; none when the file has no `snug_apps` yet (a file before
/// migration, or an empty one).
pub(crate) fn registered_app_ids(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let has_apps: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = 'snug_apps')",
        [],
        |row| row.get(0),
    )?;
    if !has_apps {
        return Ok(Vec::new());
    }
    // Only a text id is a namespace anyone can name: every lookup binds the namespace as text.
    let mut stmt = conn.prepare(
        "SELECT app_id FROM main.snug_apps WHERE typeof(app_id) = 'text' ORDER BY app_id",
    )?;
    let ids = stmt.query_map([], |row| row.get::<_, String>(0))?;
    ids.collect()
}

/// Returns every pair of registered apps whose tokens are equal: for each shared token, the
/// first app id paired with each of the others.
pub(crate) fn token_collisions(conn: &Connection) -> rusqlite::Result<Vec<TokenCollision>> {
    let mut by_token: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for app_id in registered_app_ids(conn)? {
        by_token
            .entry(app_data_token(&app_id))
            .or_default()
            .push(app_id);
    }
    let mut collisions = Vec::new();
    for (token, ids) in by_token {
        let Some((first, others)) = ids.split_first() else {
            continue;
        };
        for other in others {
            collisions.push(TokenCollision {
                token: token.clone(),
                app_id: first.clone(),
                other_app_id: other.clone(),
            });
        }
    }
    Ok(collisions)
}

/// Returns a registered app id other than `namespace` whose token is `namespace`'s.
pub(crate) fn other_holder(conn: &Connection, namespace: &str) -> rusqlite::Result<Option<String>> {
    let token = app_data_token(namespace);
    Ok(registered_app_ids(conn)?
        .into_iter()
        .find(|app_id| app_id != namespace && app_data_token(app_id) == token))
}

impl UserDb {
    /// Returns every pair of registered apps that share a token (empty for a conforming file).
    pub fn app_token_collisions(&self) -> rusqlite::Result<Vec<TokenCollision>> {
        token_collisions(self.connection())
    }

    /// Returns a registered app id other than `namespace` whose `appDataToken` equals
    /// `namespace`'s: if there is one, `namespace`'s at-rest tables are that app's too, and
    /// nothing may read or write them under either id.
    pub fn other_app_with_token(&self, namespace: &str) -> rusqlite::Result<Option<String>> {
        other_holder(self.connection(), namespace)
    }

    /// Refuses a file in which two registered apps share a token
    /// ([`OpenError::AppTokenCollision`]); the check a migration makes before it hands the file
    /// on. Opening the user's own file does not refuse it, so that one of the apps can still be
    /// deleted.
    pub fn check_app_isolation(&self) -> Result<(), OpenError> {
        match self.app_token_collisions()?.into_iter().next() {
            Some(collision) => Err(OpenError::AppTokenCollision { collision }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
