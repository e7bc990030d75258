//! An app's namespace and its token (spec §8.2), and SQL identifier quoting.
//!
//! The token and name rules themselves are `snug-schema`'s ([`app_data_token`],
//! [`is_valid_app_object_name`]); this module only pairs a namespace with its token so the
//! token is computed once, and names the at-rest tables.

use snug_schema::{SNUG_KV, app_data_token, app_rest_table_name, app_rest_table_prefix};

/// A host-assigned app namespace (the `snug_apps.app_id`) together with its token.
///
/// Any string is a namespace: UUIDs, `starter--chess`, the empty string, unicode. The token is
/// `appDataToken(namespace)`, which is total, so construction cannot fail.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AppNamespace {
    namespace: String,
    token: String,
}

impl AppNamespace {
    /// Returns the namespace `namespace` with its token.
    pub fn new(namespace: &str) -> Self {
        AppNamespace {
            namespace: namespace.to_owned(),
            token: app_data_token(namespace),
        }
    }

    /// Returns the namespace as the host assigned it.
    pub fn as_str(&self) -> &str {
        &self.namespace
    }

    /// Returns `appDataToken(namespace)`.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Returns the at-rest name of the app's natural table `name`: `app_<token>__<name>`.
    pub fn rest_table_name(&self, name: &str) -> String {
        app_rest_table_name(&self.token, name)
    }

    /// Returns the prefix all of this app's at-rest tables share: `app_<token>__`.
    pub fn rest_table_prefix(&self) -> String {
        app_rest_table_prefix(&self.token)
    }

    /// Returns the natural name of at-rest table `table` when it belongs to this app.
    ///
    /// SQLite compares identifiers case-insensitively (ASCII), so the prefix is matched the same
    /// way: a table `APP_<TOKEN>__x` occupies this app's namespace as far as SQLite is concerned.
    pub fn natural_name<'t>(&self, table: &'t str) -> Option<&'t str> {
        let prefix = self.rest_table_prefix();
        let head = table.get(..prefix.len())?;
        head.eq_ignore_ascii_case(&prefix)
            .then(|| &table[prefix.len()..])
    }
}

/// The canonical DDL of the driver-internal key/value table every app runtime may hold.
pub const SNUG_KV_DDL: &str =
    "CREATE TABLE IF NOT EXISTS snug_kv (key TEXT PRIMARY KEY, value TEXT)";

/// Returns whether `name` is the driver-internal key/value table (exact spelling only).
pub(crate) fn is_kv(name: &str) -> bool {
    name == SNUG_KV
}

/// Quotes an SQL identifier: `"` + name with every `"` doubled + `"`.
///
/// Object names are validated before they reach SQL; column names are not restricted by the
/// spec, so they are always quoted, whatever they contain.
pub(crate) fn quote_ident(name: &str) -> String {
    let mut quoted = String::with_capacity(name.len() + 2);
    quoted.push('"');
    for c in name.chars() {
        if c == '"' {
            quoted.push('"');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests;
