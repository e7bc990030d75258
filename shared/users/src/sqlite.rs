//! The directory in one SQLite file, `users.db`: the embedded backend of a single gateway.
//!
//! Connection discipline (Stem's): WAL, `foreign_keys=ON`, one writer (`BEGIN IMMEDIATE`, so a
//! `snug-hub users` command and the gateway queue rather than deadlock), readers never block it.
//! Writes are `synchronous=FULL`: a token printed to an operator must survive a crash.
//!
//! Two connections. Lookups (every request's authentication) run inline on a read-only
//! connection under a mutex: they are index probes of microseconds, cheaper than a hop to a
//! blocking thread, and WAL lets them proceed while a write commits. Writes (rare: an operator's
//! command, a first login) run on a blocking thread on the writer connection, because a commit
//! waits for an fsync, which must not stall the async runtime's workers.
//!
//! Schema versions (`PRAGMA user_version`): 1 is the file earlier releases wrote (users, tokens);
//! 2 adds the disabled flag, the quota override, the tokens' short ids and the identities; 3 adds
//! the sessions. An older file is migrated forward in place when opened (forward-only: no step is
//! ever undone or edited); a file newer than this build is refused.

use std::{
    path::Path,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use rusqlite::{Connection, OpenFlags, OptionalExtension as _, Row, TransactionBehavior, params};

use crate::{
    OidcIdentity, SessionCredential, TokenInfo, User, UsersError,
    backend::{
        Backend, Conflict, ListRows, NewSession, NewToken, SessionRow, SessionSource, Write,
    },
};

/// The file name under the gateway's directory.
pub const USERS_FILE: &str = "users.db";

/// Version 1, as earlier releases applied it. Every table declares its class next to its DDL (the
/// Stem discipline); a test checks that every table has one.
pub(crate) const SCHEMA_V1: &str = "
-- class: record — who may use the hub; written only by `snug-hub users`.
CREATE TABLE users (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
) STRICT;
-- class: record — credentials, as SHA-256 of the token; deleted with their user.
CREATE TABLE tokens (
    hash       BLOB PRIMARY KEY CHECK (length(hash) = 32),
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX tokens_by_user ON tokens(user_id);
";

/// Version 2: what an operator may change about a user, revocation by short id, and the
/// OpenID Connect identities first login records.
pub(crate) const SCHEMA_V2: &str = "
ALTER TABLE users ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1));
ALTER TABLE users ADD COLUMN quota_bytes INTEGER CHECK (quota_bytes IS NULL OR quota_bytes >= 0);
ALTER TABLE tokens ADD COLUMN short_id TEXT NOT NULL DEFAULT '';
UPDATE tokens SET short_id = lower(hex(substr(hash, 1, 4)));
CREATE UNIQUE INDEX tokens_by_short_id ON tokens(short_id);
-- class: record — OpenID Connect identities (issuer + subject) that log in as a user; deleted with their user.
CREATE TABLE identities (
    issuer     TEXT NOT NULL,
    subject    TEXT NOT NULL,
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (issuer, subject)
) STRICT;
CREATE INDEX identities_by_user ON identities(user_id);
";

/// Version 3: browser sessions, each bound to the credential it came from. The references
/// cascade, so revoking the token or removing the user (or the identity with them) deletes the
/// session in the same transaction; each is indexed, so that cascade is a probe, not a scan.
pub(crate) const SCHEMA_V3: &str = "
-- class: record — browser sessions (SHA-256 of the id the cookie carries), each bound to the hub token or OpenID Connect identity it came from; deleted at logout, with that credential or their user, when the user is disabled, and pruned once expired.
CREATE TABLE sessions (
    hash         BLOB PRIMARY KEY CHECK (length(hash) = 32),
    user_id      TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    token_hash   BLOB REFERENCES tokens(hash) ON DELETE CASCADE,
    issuer       TEXT,
    subject      TEXT,
    presented_at INTEGER,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    FOREIGN KEY (issuer, subject) REFERENCES identities(issuer, subject) ON DELETE CASCADE,
    CHECK ((token_hash IS NULL) = (issuer IS NOT NULL)
        AND (issuer IS NULL) = (subject IS NULL)
        AND (issuer IS NULL) = (presented_at IS NULL))
) STRICT;
CREATE INDEX sessions_by_user ON sessions(user_id);
CREATE INDEX sessions_by_token ON sessions(token_hash);
CREATE INDEX sessions_by_identity ON sessions(issuer, subject);
CREATE INDEX sessions_by_expiry ON sessions(expires_at);
";

/// The migrations, by the version they lead to.
const MIGRATIONS: [&str; 3] = [SCHEMA_V1, SCHEMA_V2, SCHEMA_V3];

/// A session with its user and credential; the credential's joins admit only one that still
/// exists and is the session's user's (the cascades already guarantee it; the query says it).
const SESSION_SELECT: &str = "SELECT u.id, u.name, u.created_at, u.disabled, u.quota_bytes,
        s.created_at, s.expires_at, t.short_id, s.issuer, s.subject, s.presented_at
    FROM sessions s
    JOIN users u ON u.id = s.user_id
    LEFT JOIN tokens t ON t.hash = s.token_hash AND t.user_id = s.user_id
    LEFT JOIN identities i ON i.issuer = s.issuer AND i.subject = s.subject AND i.user_id = s.user_id
    WHERE s.hash = ?1 AND (t.hash IS NOT NULL OR i.issuer IS NOT NULL)";

const USER_COLUMNS: &str = "u.id, u.name, u.created_at, u.disabled, u.quota_bytes";

/// The embedded directory.
#[derive(Debug, Clone)]
pub struct SqliteDirectory {
    reader: Arc<Mutex<Connection>>,
    writer: Arc<Mutex<Connection>>,
    pub(crate) hearing: Arc<crate::revocations::Hearing>,
}

fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // A poisoned connection is still a whole connection: SQLite rolled back whatever the
    // panicking holder left open.
    conn.lock().unwrap_or_else(|p| p.into_inner())
}

fn user(row: &Row<'_>) -> rusqlite::Result<User> {
    let quota: Option<i64> = row.get(4)?;
    Ok(User {
        id: row.get(0)?,
        name: row.get(1)?,
        created_at: row.get(2)?,
        disabled: row.get(3)?,
        quota_bytes: quota.and_then(|q| u64::try_from(q).ok()),
    })
}

fn session_row(row: &Row<'_>) -> rusqlite::Result<SessionRow> {
    let token_id: Option<String> = row.get(7)?;
    let credential = match token_id {
        Some(token_id) => SessionCredential::Token { token_id },
        None => SessionCredential::Identity {
            identity: OidcIdentity {
                issuer: row.get(8)?,
                subject: row.get(9)?,
            },
            presented_at: row.get(10)?,
        },
    };
    Ok(SessionRow {
        user: user(row)?,
        credential,
        created_at: row.get(5)?,
        expires_at: row.get(6)?,
    })
}

fn find(conn: &Connection, column: &str, value: &str) -> rusqlite::Result<Option<User>> {
    // `column` is one of two literals chosen in this file, never input.
    conn.prepare_cached(&format!(
        "SELECT {USER_COLUMNS} FROM users u WHERE u.{column} = ?1"
    ))?
    .query_row([value], user)
    .optional()
}

fn exists(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<bool> {
    conn.prepare_cached(sql)?.query_row(params, |r| r.get(0))
}

impl SqliteDirectory {
    /// Opens (creating if needed) `dir/users.db` and migrates it forward. Blocking.
    pub fn open(dir: &Path) -> Result<Self, UsersError> {
        std::fs::create_dir_all(dir).map_err(|source| UsersError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(USERS_FILE);
        let mut writer = Connection::open(&path)?;
        writer.busy_timeout(Duration::from_secs(5))?;
        writer.pragma_update(None, "journal_mode", "WAL")?;
        writer.pragma_update(None, "synchronous", "FULL")?;
        writer.pragma_update(None, "foreign_keys", "ON")?;
        // A removed user's name, id, identities and token hashes are overwritten where they
        // were, not left in free space (issue 36): the directory keeps no trace of an erasure.
        writer.pragma_update(None, "secure_delete", "ON")?;
        let tx = writer.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        let known = MIGRATIONS.len() as i64;
        if version > known {
            return Err(UsersError::TooNew(version));
        }
        for (index, sql) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", index as i64 + 1)?;
        }
        tx.commit()?;
        let reader = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        reader.busy_timeout(Duration::from_secs(5))?;
        Ok(Self {
            reader: Arc::new(Mutex::new(reader)),
            writer: Arc::new(Mutex::new(writer)),
            hearing: crate::revocations::Hearing::sqlite(path),
        })
    }

    /// Runs `f` in an immediate transaction on the writer, on a blocking thread.
    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, UsersError> + Send + 'static,
    ) -> Result<T, UsersError> {
        let writer = self.writer.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = lock(&writer);
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let value = f(&tx)?;
            tx.commit()?;
            Ok(value)
        })
        .await
        .map_err(|e| UsersError::Unavailable(Box::new(e)))?
    }

    /// The table names, for the class check.
    #[cfg(test)]
    fn tables(&self) -> Vec<String> {
        let conn = lock(&self.reader);
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .expect("prepare");
        stmt.query_map([], |r| r.get(0))
            .expect("query")
            .map(|r| r.expect("row"))
            .collect()
    }
}

fn insert_token(tx: &Connection, user_id: &str, token: &NewToken) -> Result<(), UsersError> {
    tx.prepare_cached(
        "INSERT INTO tokens (hash, user_id, created_at, short_id) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        &token.hash[..],
        user_id,
        token.created_at,
        token.short_id
    ])?;
    Ok(())
}

fn short_id_taken(tx: &Connection, short_id: &str) -> rusqlite::Result<bool> {
    exists(
        tx,
        "SELECT EXISTS(SELECT 1 FROM tokens WHERE short_id = ?1)",
        [short_id],
    )
}

impl Backend for SqliteDirectory {
    async fn health(&self) -> Result<(), UsersError> {
        let conn = lock(&self.reader);
        conn.query_row("SELECT count(*) FROM users", [], |r| r.get::<_, i64>(0))?;
        Ok(())
    }

    async fn insert_user(
        &self,
        user: &User,
        token: Option<&NewToken>,
        identity: Option<&OidcIdentity>,
    ) -> Write {
        let (user, token, identity) = (user.clone(), token.cloned(), identity.cloned());
        // One writer at a time (BEGIN IMMEDIATE), so checking and then inserting is not a race.
        self.write(move |tx| {
            if exists(
                tx,
                "SELECT EXISTS(SELECT 1 FROM users WHERE name = ?1)",
                [&user.name],
            )? {
                return Ok(Err(Conflict::Name));
            }
            if let Some(identity) = &identity
                && exists(
                    tx,
                    "SELECT EXISTS(SELECT 1 FROM identities WHERE issuer = ?1 AND subject = ?2)",
                    [&identity.issuer, &identity.subject],
                )?
            {
                return Ok(Err(Conflict::Identity));
            }
            if let Some(token) = &token
                && short_id_taken(tx, &token.short_id)?
            {
                return Ok(Err(Conflict::ShortId));
            }
            tx.prepare_cached(
                "INSERT INTO users (id, name, created_at, disabled, quota_bytes) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                user.id,
                user.name,
                user.created_at,
                user.disabled,
                user.quota_bytes.and_then(|q| i64::try_from(q).ok())
            ])?;
            if let Some(token) = &token {
                insert_token(tx, &user.id, token)?;
            }
            if let Some(identity) = &identity {
                tx.prepare_cached(
                    "INSERT INTO identities (issuer, subject, user_id, created_at) VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![
                    identity.issuer,
                    identity.subject,
                    user.id,
                    user.created_at
                ])?;
            }
            Ok(Ok(()))
        })
        .await
    }

    async fn insert_token(&self, name: &str, token: &NewToken) -> Write {
        let (name, token) = (name.to_owned(), token.clone());
        self.write(move |tx| {
            let Some(user) = find(tx, "name", &name)? else {
                return Ok(Err(Conflict::NoUser));
            };
            if short_id_taken(tx, &token.short_id)? {
                return Ok(Err(Conflict::ShortId));
            }
            insert_token(tx, &user.id, &token)?;
            Ok(Ok(()))
        })
        .await
    }

    async fn delete_token(&self, short_id: &str) -> Result<Option<String>, UsersError> {
        let short_id = short_id.to_owned();
        self.write(move |tx| {
            let owner: Option<String> = tx
                .query_row(
                    "SELECT u.name FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.short_id = ?1",
                    [&short_id],
                    |r| r.get(0),
                )
                .optional()?;
            tx.execute("DELETE FROM tokens WHERE short_id = ?1", [&short_id])?;
            Ok(owner)
        })
        .await
    }

    async fn list(&self) -> Result<ListRows, UsersError> {
        let mut conn = lock(&self.reader);
        // One read transaction: the three sets are one snapshot.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
        let users = tx
            .prepare(&format!(
                "SELECT {USER_COLUMNS} FROM users u ORDER BY u.name"
            ))?
            .query_map([], user)?
            .collect::<Result<Vec<_>, _>>()?;
        let tokens = tx
            .prepare("SELECT user_id, short_id, created_at FROM tokens")?
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    TokenInfo {
                        id: r.get(1)?,
                        created_at: r.get(2)?,
                    },
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let identities = tx
            .prepare("SELECT user_id, issuer, subject FROM identities")?
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    OidcIdentity {
                        issuer: r.get(1)?,
                        subject: r.get(2)?,
                    },
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        tx.finish()?;
        Ok(ListRows {
            users,
            tokens,
            identities,
        })
    }

    async fn set_disabled(&self, name: &str, disabled: bool) -> Result<Option<User>, UsersError> {
        let name = name.to_owned();
        self.write(move |tx| {
            tx.execute(
                "UPDATE users SET disabled = ?2 WHERE name = ?1",
                params![name, disabled],
            )?;
            if disabled {
                tx.execute(
                    "DELETE FROM sessions WHERE user_id IN (SELECT id FROM users WHERE name = ?1)",
                    [&name],
                )?;
            }
            Ok(find(tx, "name", &name)?)
        })
        .await
    }

    async fn set_quota(&self, name: &str, bytes: Option<i64>) -> Result<Option<User>, UsersError> {
        let name = name.to_owned();
        self.write(move |tx| {
            tx.execute(
                "UPDATE users SET quota_bytes = ?2 WHERE name = ?1",
                params![name, bytes],
            )?;
            Ok(find(tx, "name", &name)?)
        })
        .await
    }

    async fn delete_user(&self, name: &str) -> Result<Option<User>, UsersError> {
        let name = name.to_owned();
        let removed = self
            .write(move |tx| {
                let user = find(tx, "name", &name)?;
                if let Some(user) = &user {
                    tx.execute("DELETE FROM users WHERE id = ?1", [&user.id])?;
                }
                Ok(user)
            })
            .await?;
        if removed.is_some() {
            // The WAL still holds the pages as they were before the removal: copy the zeroed
            // pages into the database and empty the log, so no file keeps the user's bytes.
            let writer = self.writer.clone();
            tokio::task::spawn_blocking(move || {
                lock(&writer).query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            })
            .await
            .map_err(|e| UsersError::Unavailable(Box::new(e)))??;
        }
        Ok(removed)
    }

    async fn by_token_hash(&self, hash: &[u8; 32]) -> Result<Option<(User, String)>, UsersError> {
        let conn = lock(&self.reader);
        let found = conn
            .prepare_cached(&format!(
                "SELECT {USER_COLUMNS}, t.short_id FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?1"
            ))?
            .query_row([&hash[..]], |r| Ok((user(r)?, r.get(5)?)))
            .optional()?;
        Ok(found)
    }

    async fn by_id(&self, id: &str) -> Result<Option<User>, UsersError> {
        Ok(find(&lock(&self.reader), "id", id)?)
    }

    async fn by_identity(&self, identity: &OidcIdentity) -> Result<Option<User>, UsersError> {
        let conn = lock(&self.reader);
        let found = conn
            .prepare_cached(&format!(
                "SELECT {USER_COLUMNS} FROM identities i JOIN users u ON u.id = i.user_id WHERE i.issuer = ?1 AND i.subject = ?2"
            ))?
            .query_row([&identity.issuer, &identity.subject], user)
            .optional()?;
        Ok(found)
    }

    async fn insert_session(&self, session: &NewSession) -> Result<Option<SessionRow>, UsersError> {
        let session = session.clone();
        // One writer at a time (BEGIN IMMEDIATE): the credential read here is the one the session
        // is inserted against; no revocation or disable can fall between.
        self.write(move |tx| {
            let (token_hash, identity, presented_at, owner) = match &session.source {
                SessionSource::Token { hash } => {
                    let owner = tx
                        .prepare_cached(&format!(
                            "SELECT {USER_COLUMNS} FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?1"
                        ))?
                        .query_row([&hash[..]], user)
                        .optional()?;
                    (Some(hash.to_vec()), None, None, owner)
                }
                SessionSource::Identity(identity) => {
                    let owner = tx
                        .prepare_cached(&format!(
                            "SELECT {USER_COLUMNS} FROM identities i JOIN users u ON u.id = i.user_id WHERE i.issuer = ?1 AND i.subject = ?2"
                        ))?
                        .query_row([&identity.issuer, &identity.subject], user)
                        .optional()?;
                    (None, Some(identity.clone()), Some(session.created_at), owner)
                }
            };
            let Some(owner) = owner.filter(|u| !u.disabled) else {
                return Ok(None);
            };
            tx.prepare_cached(
                "INSERT INTO sessions (hash, user_id, token_hash, issuer, subject, presented_at, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                &session.hash[..],
                owner.id,
                token_hash,
                identity.as_ref().map(|i| &i.issuer),
                identity.as_ref().map(|i| &i.subject),
                presented_at,
                session.created_at,
                session.expires_at
            ])?;
            Ok(tx
                .prepare_cached(SESSION_SELECT)?
                .query_row([&session.hash[..]], session_row)
                .optional()?)
        })
        .await
    }

    async fn session_by_hash(&self, hash: &[u8; 32]) -> Result<Option<SessionRow>, UsersError> {
        let conn = lock(&self.reader);
        let found = conn
            .prepare_cached(SESSION_SELECT)?
            .query_row([&hash[..]], session_row)
            .optional()?;
        Ok(found)
    }

    async fn delete_session(&self, hash: &[u8; 32]) -> Result<bool, UsersError> {
        let hash = *hash;
        self.write(move |tx| {
            Ok(tx.execute("DELETE FROM sessions WHERE hash = ?1", [&hash[..]])? > 0)
        })
        .await
    }

    async fn prune_sessions(&self, now: i64, limit: u32) -> Result<u64, UsersError> {
        self.write(move |tx| {
            let deleted = tx.execute(
                "DELETE FROM sessions WHERE hash IN (SELECT hash FROM sessions WHERE expires_at <= ?1 LIMIT ?2)",
                params![now, limit],
            )?;
            Ok(deleted as u64)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_declares_its_class() {
        let dir = tempfile::tempdir().expect("dir");
        let store = SqliteDirectory::open(dir.path()).expect("open");
        let mut declared = Vec::new();
        let mut pending = false;
        for line in MIGRATIONS.iter().flat_map(|m| m.lines()).map(str::trim) {
            if line.starts_with("-- class: record")
                || line.starts_with("-- class: bookkeeping")
                || line.starts_with("-- class: ledger")
            {
                pending = true;
            } else if let Some(rest) = line.strip_prefix("CREATE TABLE ") {
                assert!(pending, "{rest} has no class line");
                pending = false;
                declared.push(rest.split([' ', '(']).next().expect("name").to_owned());
            }
        }
        declared.sort();
        assert_eq!(store.tables(), declared);
    }

    /// After a removal no file of the directory holds the user's name, id, identity or token
    /// hash: not the database's free space, not the write-ahead log (issue 36 point 4).
    #[tokio::test]
    async fn a_removed_user_leaves_no_byte_in_the_directorys_files() {
        let dir = tempfile::tempdir().expect("dir");
        let directory = crate::Directory::open(&crate::DirectoryConfig::Sqlite {
            dir: dir.path().to_path_buf(),
        })
        .await
        .expect("open");
        let name = "zebulon-quartermaine";
        let (user, token) = directory.add_user(name).await.expect("add");
        directory.add_user("someone-else").await.expect("another");
        let hash = crate::token_hash(&token.token);
        let needles: [(&str, Vec<u8>); 3] = [
            ("name", name.as_bytes().to_vec()),
            ("id", user.id.as_bytes().to_vec()),
            ("token hash", hash.to_vec()),
        ];
        let holding = |needles: &[(&str, Vec<u8>)]| -> Vec<String> {
            let mut found = Vec::new();
            for entry in std::fs::read_dir(dir.path()).expect("read dir") {
                let path = entry.expect("entry").path();
                let bytes = std::fs::read(&path).expect("read");
                for (what, needle) in needles {
                    if bytes.windows(needle.len()).any(|w| w == needle.as_slice()) {
                        found.push(format!("{what} in {}", path.display()));
                    }
                }
            }
            found
        };
        assert!(
            !holding(&needles).is_empty(),
            "the premise: the files hold the user"
        );
        directory.remove_user(name).await.expect("remove");
        assert_eq!(holding(&needles), Vec::<String>::new());
        // The directory still works, and the other user is whole.
        directory
            .find(crate::UserKey::Name("someone-else"))
            .await
            .expect("the other user");
    }
}
