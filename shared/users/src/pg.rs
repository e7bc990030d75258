//! The directory in PostgreSQL: one directory for any number of gateway replicas.
//!
//! Connections are `snug-pg`'s (the sync store's DSN and TLS rules); the tables live in the
//! configured schema, created if missing under an advisory lock so replicas may start together.
//! Their names carry a `hub_` prefix, so the directory may share a schema with the sync store.
//! Uniqueness is the database's: a name, a token's short id or an identity that another
//! transaction took first fails the insert with a unique violation on a named constraint, which
//! the write reports as a [`Conflict`]; the transaction rolls back whole, so a lost race leaves
//! nothing behind.
//!
//! Migrations are the schema text itself, forward-only: every statement is `IF NOT EXISTS`, and a
//! later release only appends (the sessions table came after the first three), so connecting
//! brings any earlier directory up to date and changes nothing in a current one.
//!
//! A session is inserted against its credential read `FOR SHARE` in the same transaction: a
//! revocation (a delete of the token) or a disable (an update of the user) that commits first
//! makes that read find nothing or a disabled user, and one that comes after waits for the insert
//! to commit and then deletes the session (the cascade, or the disable's own delete, a statement
//! of its own so that its snapshot sees the new row).

use std::sync::Arc;

use deadpool_postgres::{GenericClient, Pool};
use sha2::{Digest as _, Sha256};
use tokio_postgres::{Row, error::SqlState};

use crate::{
    OidcIdentity, PgConfig, SessionCredential, TokenInfo, User, UsersError,
    backend::{
        Backend, Conflict, ListRows, NewSession, NewToken, SessionRow, SessionSource, Write,
    },
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
-- class: record — browser sessions (SHA-256 of the id the cookie carries), each bound to the hub token or OpenID Connect identity it came from; deleted at logout, with that credential or their user, when the user is disabled, and pruned once expired.
CREATE TABLE IF NOT EXISTS hub_sessions (
    hash         BYTEA PRIMARY KEY CHECK (length(hash) = 32),
    user_id      TEXT NOT NULL REFERENCES hub_users(id) ON DELETE CASCADE,
    token_hash   BYTEA REFERENCES hub_tokens(hash) ON DELETE CASCADE,
    issuer       TEXT,
    subject      TEXT,
    presented_at BIGINT,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    FOREIGN KEY (issuer, subject) REFERENCES hub_identities(issuer, subject) ON DELETE CASCADE,
    CONSTRAINT hub_sessions_one_credential CHECK ((token_hash IS NULL) = (issuer IS NOT NULL)
        AND (issuer IS NULL) = (subject IS NULL)
        AND (issuer IS NULL) = (presented_at IS NULL))
);
CREATE INDEX IF NOT EXISTS hub_sessions_by_user ON hub_sessions(user_id);
CREATE INDEX IF NOT EXISTS hub_sessions_by_token ON hub_sessions(token_hash);
CREATE INDEX IF NOT EXISTS hub_sessions_by_identity ON hub_sessions(issuer, subject);
CREATE INDEX IF NOT EXISTS hub_sessions_by_expiry ON hub_sessions(expires_at);
";

/// A session with its user and credential; the credential's joins admit only one that still
/// exists and is the session's user's (the cascades already guarantee it; the query says it).
const SESSION_SELECT: &str = "SELECT u.id, u.name, u.created_at, u.disabled, u.quota_bytes,
        s.created_at, s.expires_at, t.short_id, s.issuer, s.subject, s.presented_at
    FROM hub_sessions s
    JOIN hub_users u ON u.id = s.user_id
    LEFT JOIN hub_tokens t ON t.hash = s.token_hash AND t.user_id = s.user_id
    LEFT JOIN hub_identities i ON i.issuer = s.issuer AND i.subject = s.subject AND i.user_id = s.user_id
    WHERE s.hash = $1 AND (t.hash IS NOT NULL OR i.issuer IS NOT NULL)";

const USER_COLUMNS: &str = "u.id, u.name, u.created_at, u.disabled, u.quota_bytes";

/// The PostgreSQL directory.
#[derive(Clone)]
pub struct PgDirectory {
    pool: Pool,
    schema: Option<String>,
    pub(crate) hearing: Arc<crate::revocations::Hearing>,
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

fn session_row(row: &Row) -> SessionRow {
    let token_id: Option<String> = row.get(7);
    let credential = match token_id {
        Some(token_id) => SessionCredential::Token { token_id },
        None => SessionCredential::Identity {
            identity: OidcIdentity {
                issuer: row.get(8),
                subject: row.get(9),
            },
            presented_at: row.get(10),
        },
    };
    SessionRow {
        user: user(row),
        credential,
        created_at: row.get(5),
        expires_at: row.get(6),
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
        let channel = crate::revocations::channel(pg.schema.as_deref());
        tx.batch_execute(&crate::revocations::pg_triggers(&channel))
            .await?;
        tx.commit().await?;
        drop(client);
        // Listening before the directory answers anything: no change is made unheard by a cache.
        let listening = snug_pg::listen(pg, &channel)
            .await
            .map_err(|e| UsersError::Unavailable(Box::new(e)))?;
        Ok(Self {
            pool,
            schema: pg.schema.clone(),
            hearing: crate::revocations::Hearing::postgres(pg.clone(), channel, listening),
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
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // The update first: it waits for a session insert holding the user `FOR SHARE`, and the
        // delete after it, a statement of its own, sees that session committed.
        let found = tx
            .query_opt(
                &format!(
                    "UPDATE hub_users u SET disabled = $2 WHERE u.name = $1 RETURNING {USER_COLUMNS}"
                ),
                &[&name, &disabled],
            )
            .await?
            .as_ref()
            .map(user);
        if disabled && let Some(found) = &found {
            tx.execute("DELETE FROM hub_sessions WHERE user_id = $1", &[&found.id])
                .await?;
        }
        tx.commit().await?;
        Ok(found)
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

    async fn insert_session(&self, session: &NewSession) -> Result<Option<SessionRow>, UsersError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let (token_hash, identity, presented_at, owner) = match &session.source {
            SessionSource::Token { hash } => {
                let owner = tx
                    .query_opt(
                        &format!(
                            "SELECT {USER_COLUMNS} FROM hub_tokens t JOIN hub_users u ON u.id = t.user_id WHERE t.hash = $1 FOR SHARE"
                        ),
                        &[&&hash[..]],
                    )
                    .await?;
                (Some(hash.to_vec()), None, None, owner)
            }
            SessionSource::Identity(identity) => {
                let owner = tx
                    .query_opt(
                        &format!(
                            "SELECT {USER_COLUMNS} FROM hub_identities i JOIN hub_users u ON u.id = i.user_id WHERE i.issuer = $1 AND i.subject = $2 FOR SHARE"
                        ),
                        &[&identity.issuer, &identity.subject],
                    )
                    .await?;
                (None, Some(identity), Some(session.created_at), owner)
            }
        };
        let Some(owner) = owner.as_ref().map(user).filter(|u| !u.disabled) else {
            return Ok(None);
        };
        tx.execute(
            "INSERT INTO hub_sessions (hash, user_id, token_hash, issuer, subject, presented_at, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &&session.hash[..],
                &owner.id,
                &token_hash,
                &identity.map(|i| &i.issuer),
                &identity.map(|i| &i.subject),
                &presented_at,
                &session.created_at,
                &session.expires_at,
            ],
        )
        .await?;
        let row = tx.query_opt(SESSION_SELECT, &[&&session.hash[..]]).await?;
        tx.commit().await?;
        Ok(row.as_ref().map(session_row))
    }

    async fn session_by_hash(&self, hash: &[u8; 32]) -> Result<Option<SessionRow>, UsersError> {
        let client = self.client().await?;
        let row = client.query_opt(SESSION_SELECT, &[&&hash[..]]).await?;
        Ok(row.as_ref().map(session_row))
    }

    async fn delete_session(&self, hash: &[u8; 32]) -> Result<bool, UsersError> {
        let client = self.client().await?;
        let deleted = client
            .execute("DELETE FROM hub_sessions WHERE hash = $1", &[&&hash[..]])
            .await?;
        Ok(deleted > 0)
    }

    async fn prune_sessions(&self, now: i64, limit: u32) -> Result<u64, UsersError> {
        let client = self.client().await?;
        // SKIP LOCKED: replicas pruning at once take different rows instead of queueing.
        let deleted = client
            .execute(
                "DELETE FROM hub_sessions WHERE hash IN (SELECT hash FROM hub_sessions WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
                &[&now, &i64::from(limit)],
            )
            .await?;
        Ok(deleted)
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
        assert_eq!(
            tables,
            ["hub_users", "hub_tokens", "hub_identities", "hub_sessions"]
        );
    }
}
