//! The directory in PostgreSQL: one directory for any number of gateway replicas.
//!
//! Connections are `snug-pg`'s (the sync store's DSN and TLS rules); the tables live in the
//! configured schema, created if missing under an advisory lock so replicas may start together.
//! Their names carry a `hub_` prefix, so the directory may share a schema with the sync store.
//! Uniqueness is the database's: a name, a token's short id or an identity that another
//! transaction took first fails the insert with a unique violation on a named constraint, which
//! the write reports as a [`Conflict`]; the transaction rolls back whole, so a lost race leaves
//! nothing behind.

use deadpool_postgres::{GenericClient, Pool};
use sha2::{Digest as _, Sha256};
use tokio_postgres::{Row, error::SqlState};

use crate::{
    OidcIdentity, PgConfig, TokenInfo, User, UsersError,
    backend::{Backend, Conflict, ListRows, NewToken, Write},
};

/// The tables, each with its class (the Stem discipline), created if missing.
const SCHEMA: &str = "
-- class: record — who may use the hub.
CREATE TABLE IF NOT EXISTS hub_users (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL CONSTRAINT hub_users_name_unique UNIQUE,
    created_at  BIGINT NOT NULL,
    disabled    BOOLEAN NOT NULL DEFAULT false,
    quota_bytes BIGINT CHECK (quota_bytes IS NULL OR quota_bytes >= 0)
);
-- class: record — hub tokens, as SHA-256 of the text; deleted with their user.
CREATE TABLE IF NOT EXISTS hub_tokens (
    hash       BYTEA PRIMARY KEY CHECK (length(hash) = 32),
    short_id   TEXT NOT NULL CONSTRAINT hub_tokens_short_id_unique UNIQUE,
    user_id    TEXT NOT NULL REFERENCES hub_users(id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS hub_tokens_by_user ON hub_tokens(user_id);
-- class: record — OpenID Connect identities (issuer + subject) that log in as a user; deleted with their user.
CREATE TABLE IF NOT EXISTS hub_identities (
    issuer     TEXT NOT NULL,
    subject    TEXT NOT NULL,
    user_id    TEXT NOT NULL REFERENCES hub_users(id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    CONSTRAINT hub_identities_pk PRIMARY KEY (issuer, subject)
);
CREATE INDEX IF NOT EXISTS hub_identities_by_user ON hub_identities(user_id);
";

const USER_COLUMNS: &str = "u.id, u.name, u.created_at, u.disabled, u.quota_bytes";

/// The PostgreSQL directory.
#[derive(Clone)]
pub struct PgDirectory {
    pool: Pool,
    schema: Option<String>,
}

impl std::fmt::Debug for PgDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDirectory")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

fn user(row: &Row) -> User {
    let quota: Option<i64> = row.get(4);
    User {
        id: row.get(0),
        name: row.get(1),
        created_at: row.get(2),
        disabled: row.get(3),
        quota_bytes: quota.and_then(|q| u64::try_from(q).ok()),
    }
}

/// The conflict a failed statement reports, if it was a unique violation this file names.
fn conflict(err: &tokio_postgres::Error) -> Option<Conflict> {
    if err.code() != Some(&SqlState::UNIQUE_VIOLATION) {
        return None;
    }
    match err.as_db_error().and_then(|db| db.constraint())? {
        "hub_users_name_unique" => Some(Conflict::Name),
        "hub_tokens_short_id_unique" => Some(Conflict::ShortId),
        "hub_identities_pk" => Some(Conflict::Identity),
        _ => None,
    }
}

/// Runs an insert; a unique violation on a named constraint is its [`Conflict`].
async fn insert(
    tx: &impl GenericClient,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Result<u64, Conflict>, UsersError> {
    match tx.execute(sql, params).await {
        Ok(n) => Ok(Ok(n)),
        Err(err) => match conflict(&err) {
            Some(c) => Ok(Err(c)),
            None => Err(err.into()),
        },
    }
}

impl PgDirectory {
    /// Connects and creates the schema and tables if missing.
    pub async fn connect(pg: &PgConfig) -> Result<Self, UsersError> {
        let pool = snug_pg::pool(pg).map_err(|e| UsersError::Unavailable(Box::new(e)))?;
        let key_source = format!("snug-users:{}", pg.schema.as_deref().unwrap_or(""));
        let digest = Sha256::digest(key_source.as_bytes());
        let mut key = [0u8; 8];
        key.copy_from_slice(&digest[..8]);
        let lock_key = i64::from_le_bytes(key);
        let mut client = pool.get().await?;
        // Concurrent CREATE … IF NOT EXISTS can race on the catalog; the advisory lock serialises
        // replicas starting together.
        if let Some(schema) = &pg.schema {
            let tx = client.transaction().await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock_key])
                .await?;
            tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .await?;
            tx.commit().await?;
        }
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock_key])
            .await?;
        tx.batch_execute(SCHEMA).await?;
        tx.commit().await?;
        drop(client);
        Ok(Self {
            pool,
            schema: pg.schema.clone(),
        })
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, UsersError> {
        Ok(self.pool.get().await?)
    }

    async fn find(
        client: &impl GenericClient,
        column: &str,
        value: &str,
    ) -> Result<Option<User>, UsersError> {
        // `column` is one of two literals chosen in this file, never input.
        let row = client
            .query_opt(
                &format!("SELECT {USER_COLUMNS} FROM hub_users u WHERE u.{column} = $1"),
                &[&value],
            )
            .await?;
        Ok(row.as_ref().map(user))
    }

    /// The table names in the directory's schema, for the class check.
    #[doc(hidden)]
    pub async fn table_names(&self) -> Result<Vec<String>, UsersError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE 'hub\\_%' ORDER BY 1",
                &[],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

impl Backend for PgDirectory {
    async fn health(&self) -> Result<(), UsersError> {
        self.client().await?.simple_query("SELECT 1").await?;
        Ok(())
    }

    async fn insert_user(
        &self,
        user: &User,
        token: Option<&NewToken>,
        identity: Option<&OidcIdentity>,
    ) -> Write {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let quota = user.quota_bytes.and_then(|q| i64::try_from(q).ok());
        if let Err(c) = insert(
            &tx,
            "INSERT INTO hub_users (id, name, created_at, disabled, quota_bytes) VALUES ($1, $2, $3, $4, $5)",
            &[&user.id, &user.name, &user.created_at, &user.disabled, &quota],
        )
        .await?
        {
            return Ok(Err(c));
        }
        if let Some(token) = token
            && let Err(c) = insert(
                &tx,
                "INSERT INTO hub_tokens (hash, short_id, user_id, created_at) VALUES ($1, $2, $3, $4)",
                &[&&token.hash[..], &token.short_id, &user.id, &token.created_at],
            )
            .await?
        {
            return Ok(Err(c));
        }
        if let Some(identity) = identity
            && let Err(c) = insert(
                &tx,
                "INSERT INTO hub_identities (issuer, subject, user_id, created_at) VALUES ($1, $2, $3, $4)",
                &[&identity.issuer, &identity.subject, &user.id, &user.created_at],
            )
            .await?
        {
            return Ok(Err(c));
        }
        tx.commit().await?;
        Ok(Ok(()))
    }

    async fn insert_token(&self, name: &str, token: &NewToken) -> Write {
        let client = self.client().await?;
        match insert(
            &client,
            "INSERT INTO hub_tokens (hash, short_id, user_id, created_at) SELECT $1, $2, id, $4 FROM hub_users WHERE name = $3",
            &[&&token.hash[..], &token.short_id, &name, &token.created_at],
        )
        .await?
        {
            Ok(0) => Ok(Err(Conflict::NoUser)),
            Ok(_) => Ok(Ok(())),
            Err(c) => Ok(Err(c)),
        }
    }

    async fn delete_token(&self, short_id: &str) -> Result<Option<String>, UsersError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "DELETE FROM hub_tokens t USING hub_users u WHERE t.short_id = $1 AND u.id = t.user_id RETURNING u.name",
                &[&short_id],
            )
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn list(&self) -> Result<ListRows, UsersError> {
        let mut client = self.client().await?;
        // One snapshot for the three reads.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let users = tx
            .query(
                &format!("SELECT {USER_COLUMNS} FROM hub_users u ORDER BY u.name"),
                &[],
            )
            .await?
            .iter()
            .map(user)
            .collect();
        let tokens = tx
            .query("SELECT user_id, short_id, created_at FROM hub_tokens", &[])
            .await?
            .iter()
            .map(|r| {
                (
                    r.get(0),
                    TokenInfo {
                        id: r.get(1),
                        created_at: r.get(2),
                    },
                )
            })
            .collect();
        let identities = tx
            .query("SELECT user_id, issuer, subject FROM hub_identities", &[])
            .await?
            .iter()
            .map(|r| {
                (
                    r.get(0),
                    OidcIdentity {
                        issuer: r.get(1),
                        subject: r.get(2),
                    },
                )
            })
            .collect();
        tx.commit().await?;
        Ok(ListRows {
            users,
            tokens,
            identities,
        })
    }

    async fn set_disabled(&self, name: &str, disabled: bool) -> Result<Option<User>, UsersError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "UPDATE hub_users u SET disabled = $2 WHERE u.name = $1 RETURNING {USER_COLUMNS}"
                ),
                &[&name, &disabled],
            )
            .await?;
        Ok(row.as_ref().map(user))
    }

    async fn set_quota(&self, name: &str, bytes: Option<i64>) -> Result<Option<User>, UsersError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "UPDATE hub_users u SET quota_bytes = $2 WHERE u.name = $1 RETURNING {USER_COLUMNS}"
                ),
                &[&name, &bytes],
            )
            .await?;
        Ok(row.as_ref().map(user))
    }

    async fn delete_user(&self, name: &str) -> Result<Option<User>, UsersError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!("DELETE FROM hub_users u WHERE u.name = $1 RETURNING {USER_COLUMNS}"),
                &[&name],
            )
            .await?;
        Ok(row.as_ref().map(user))
    }

    async fn by_token_hash(&self, hash: &[u8; 32]) -> Result<Option<(User, String)>, UsersError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {USER_COLUMNS}, t.short_id FROM hub_tokens t JOIN hub_users u ON u.id = t.user_id WHERE t.hash = $1"
                ),
                &[&&hash[..]],
            )
            .await?;
        Ok(row.map(|r| (user(&r), r.get(5))))
    }

    async fn by_id(&self, id: &str) -> Result<Option<User>, UsersError> {
        let client = self.client().await?;
        Self::find(&client, "id", id).await
    }

    async fn by_identity(&self, identity: &OidcIdentity) -> Result<Option<User>, UsersError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {USER_COLUMNS} FROM hub_identities i JOIN hub_users u ON u.id = i.user_id WHERE i.issuer = $1 AND i.subject = $2"
                ),
                &[&identity.issuer, &identity.subject],
            )
            .await?;
        Ok(row.as_ref().map(user))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_table_declares_its_class() {
        let mut pending = false;
        let mut tables = Vec::new();
        for line in super::SCHEMA.lines().map(str::trim) {
            if line.starts_with("-- class: record") {
                pending = true;
            } else if let Some(rest) = line.strip_prefix("CREATE TABLE IF NOT EXISTS ") {
                assert!(pending, "{rest} has no class line");
                pending = false;
                tables.push(rest.split([' ', '(']).next().expect("name").to_owned());
            }
        }
        assert_eq!(tables, ["hub_users", "hub_tokens", "hub_identities"]);
    }
}
