//! PostgreSQL connections as the hub's stores make them: one connection-string and TLS rule
//! (libpq's `sslmode` and `sslrootcert`, `tls.rs`), one schema rule, one pool.
//!
//! The sync store (`snug-revstore`'s `PgStore`) and the users directory (`snug-users`) both
//! connect through [`pool`], so a DSN that works for one works for the other, and neither copies
//! the TLS code. A library of connections only: what tables a store keeps is the store's.

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

mod listen;
mod tls;

pub use listen::{Heard, ListenError, Listening, follow, listen};
pub use tls::PgTlsError;

/// How to reach the database.
#[derive(Clone)]
pub struct PgConfig {
    /// A libpq-style URL or key/value string, e.g.
    /// `postgresql://hub@db.internal:5432/hub?sslmode=verify-full&sslrootcert=/etc/hub/pg-ca.pem`.
    /// `sslmode` and `sslrootcert` mean what they mean to libpq (the table in `tls.rs`).
    pub url: String,
    /// The schema holding the store's tables (created if missing); `None` uses the server's
    /// default search path.
    pub schema: Option<String>,
    /// Maximum pooled connections per replica.
    pub pool_size: usize,
}

impl std::fmt::Debug for PgConfig {
    // The URL may carry a password: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConfig")
            .field("url", &"<redacted>")
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

/// Why a pool could not be built. Messages never repeat the connection string.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// TLS could not be set up as the connection string asks.
    #[error(transparent)]
    Tls(#[from] PgTlsError),
    /// The connection string does not parse.
    #[error("the PostgreSQL connection string does not parse")]
    Url(#[source] tokio_postgres::Error),
    /// The schema name is not a plain lowercase identifier.
    #[error("invalid schema name {0:?} (lowercase letters, digits and _, at most 63)")]
    Schema(String),
    /// The pool could not be built.
    #[error("cannot build the PostgreSQL pool")]
    Pool(#[source] deadpool_postgres::BuildError),
}

/// Whether `s` is a schema name this crate puts in `search_path` and `CREATE SCHEMA` unquoted:
/// lowercase letters, digits and `_`, not starting with a digit, at most 63 bytes.
pub fn valid_schema(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !s.as_bytes()[0].is_ascii_digit()
}

/// A pool of connections as `pg` says: TLS per its `sslmode`, `search_path` set to its schema.
/// Connects lazily: the first `get` reaches the server. Creating the schema is the caller's
/// (under its own advisory lock), since only it knows what else must happen atomically.
pub fn pool(pg: &PgConfig) -> Result<Pool, PgError> {
    let (config, tls) = connector(pg)?;
    let manager = Manager::from_config(
        config,
        tls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(pg.pool_size.max(2))
        .build()
        .map_err(PgError::Pool)
}

/// The settings and TLS connector of a connection as `pg` says, pooled or not.
fn connector(pg: &PgConfig) -> Result<(tokio_postgres::Config, tls::MakeRustlsConnect), PgError> {
    let (url, tls_params) = tls::split(&pg.url)?;
    let tls = tls::MakeRustlsConnect::new(&tls_params)?;
    let mut config: tokio_postgres::Config = url.parse().map_err(PgError::Url)?;
    config.ssl_mode(tls::negotiation(tls_params.mode));
    if let Some(schema) = &pg.schema {
        if !valid_schema(schema) {
            return Err(PgError::Schema(schema.clone()));
        }
        config.options(format!("-c search_path={schema}"));
    }
    Ok((config, tls))
}

#[cfg(test)]
mod tests {
    #[test]
    fn schema_names_are_plain_identifiers() {
        assert!(super::valid_schema("snug_hub"));
        for bad in ["Snug", "a;drop", "1abc", "", &"a".repeat(64)] {
            assert!(!super::valid_schema(bad), "{bad}");
        }
    }
}
