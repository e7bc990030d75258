//! The gateway's own state: users and their bearer tokens, in a small SQLite file.
//!
//! This is not a user database (§8) and never holds one; it only says who may call the hub.
//! Tokens are 32 random bytes, shown once when issued and stored only as their SHA-256, so a
//! copy of this file lets no one in. User ids are random, never derived from the name, so a user
//! removed and added again under the same name does not inherit the old user's image.
//!
//! Connection discipline (Stem's): WAL, `foreign_keys=ON`, one writer (`BEGIN IMMEDIATE`, so two
//! `snug-hub users` commands queue rather than deadlock), readers never block it. Writes are
//! `synchronous=FULL`: a token printed to an operator must survive a crash.

use std::{
    path::{Path, PathBuf},
    sync::Mutex,
    time::{SystemTime, UNIX_EPOCH},
};

use base64::Engine as _;
use rusqlite::{Connection, OptionalExtension as _, TransactionBehavior, params};
use sha2::{Digest as _, Sha256};

/// The file name under the gateway's directory.
pub const USERS_FILE: &str = "users.db";

/// The prefix of every token, so secret scanners and people recognise one.
pub const TOKEN_PREFIX: &str = "snug_";

/// The schema, applied once (`PRAGMA user_version` 0 → 1). Every table declares its class next to
/// its DDL (the Stem discipline); a test checks that every table has one.
const SCHEMA_V1: &str = "
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

/// Version 2: OpenID Connect identities (issuer + subject, never a name alone) and whether each
/// may log in. Interim: the users directory that replaces this file keeps its own.
const SCHEMA_V2: &str = "
-- class: record — who an OpenID Connect login is; created by the first valid token.
CREATE TABLE identities (
    issuer     TEXT NOT NULL,
    subject    TEXT NOT NULL,
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    disabled   INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
    PRIMARY KEY (issuer, subject)
) STRICT;
";

/// A user of the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Opaque, random, stable: the id the sync service keys the image by.
    pub id: String,
    /// What the operator calls the user.
    pub name: String,
    /// Creation time, Unix milliseconds.
    pub created_at: i64,
    /// Live tokens.
    pub tokens: u32,
}

/// A newly issued bearer token. Its text is shown once and never stored.
pub struct IssuedToken {
    /// The token to hand to the user.
    pub token: String,
    /// A short, non-secret identifier of the token (the first hex digits of its hash), recorded
    /// as the principal in the sync ledgers.
    pub id: String,
}

impl std::fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedToken")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Why the store refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    /// A name that is empty, too long, or holds control characters.
    #[error("a user name must be 1-64 printable characters")]
    InvalidName,
    /// `users add` for a name that exists.
    #[error("a user named {0:?} already exists (issue another token with `snug-hub users token`)")]
    Exists(String),
    /// No user has that name.
    #[error("no user named {0:?}")]
    NoSuchUser(String),
    /// The file is newer than this build.
    #[error("the users file has schema version {0}, newer than this build understands")]
    TooNew(i64),
    /// The CSPRNG failed.
    #[error("the system random number generator failed")]
    Entropy,
    /// SQLite failed.
    #[error("the users file failed")]
    Sqlite(#[from] rusqlite::Error),
    /// The directory could not be created.
    #[error("cannot create {path}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The users file. One connection behind a mutex: lookups are microseconds, and a connection
/// per request would cost more than the wait.
#[derive(Debug)]
pub struct UserStore {
    conn: Mutex<Connection>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn random<const N: usize>() -> Result<[u8; N], UsersError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|_| UsersError::Entropy)?;
    Ok(bytes)
}

/// SHA-256 of a token's text.
fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.chars().count()) && !name.chars().any(char::is_control)
}

impl UserStore {
    /// Opens (creating if needed) `dir/users.db`.
    pub fn open(dir: &Path) -> Result<Self, UsersError> {
        std::fs::create_dir_all(dir).map_err(|source| UsersError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        Self::from_connection(Connection::open(dir.join(USERS_FILE))?)
    }

    /// An in-memory store, for tests.
    pub fn in_memory() -> Result<Self, UsersError> {
        Self::from_connection(Connection::open_in_memory()?)
    }

    fn from_connection(mut conn: Connection) -> Result<Self, UsersError> {
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        match version {
            0 => {
                tx.execute_batch(SCHEMA_V1)?;
                tx.execute_batch(SCHEMA_V2)?;
                tx.pragma_update(None, "user_version", 2)?;
            }
            1 => {
                tx.execute_batch(SCHEMA_V2)?;
                tx.pragma_update(None, "user_version", 2)?;
            }
            2 => {}
            newer => return Err(UsersError::TooNew(newer)),
        }
        tx.commit()?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A poisoned connection is still a whole connection: SQLite rolled back whatever the
        // panicking holder left open.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a user and issues their first token.
    pub fn add(&self, name: &str) -> Result<(User, IssuedToken), UsersError> {
        if !valid_name(name) {
            return Err(UsersError::InvalidName);
        }
        let id = format!("u{}", hex::encode(random::<16>()?));
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let exists: bool = tx.query_row(
            "SELECT EXISTS(SELECT 1 FROM users WHERE name = ?1)",
            [name],
            |r| r.get(0),
        )?;
        if exists {
            return Err(UsersError::Exists(name.to_owned()));
        }
        let created_at = now_ms();
        tx.execute(
            "INSERT INTO users (id, name, created_at) VALUES (?1, ?2, ?3)",
            params![id, name, created_at],
        )?;
        let token = issue(&tx, &id)?;
        tx.commit()?;
        Ok((
            User {
                id,
                name: name.to_owned(),
                created_at,
                tokens: 1,
            },
            token,
        ))
    }

    /// Issues another token for an existing user (a new device, or a lost token).
    pub fn issue_token(&self, name: &str) -> Result<IssuedToken, UsersError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let id: Option<String> = tx
            .query_row("SELECT id FROM users WHERE name = ?1", [name], |r| r.get(0))
            .optional()?;
        let id = id.ok_or_else(|| UsersError::NoSuchUser(name.to_owned()))?;
        let token = issue(&tx, &id)?;
        tx.commit()?;
        Ok(token)
    }

    /// Removes a user and every token of theirs. Their image stays in the sync store, under an id
    /// no new user can get.
    pub fn remove(&self, name: &str) -> Result<User, UsersError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let user =
            find(&tx, "name", name)?.ok_or_else(|| UsersError::NoSuchUser(name.to_owned()))?;
        tx.execute("DELETE FROM users WHERE id = ?1", [&user.id])?;
        tx.commit()?;
        Ok(user)
    }

    /// Every user, by name.
    pub fn list(&self) -> Result<Vec<User>, UsersError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "SELECT u.id, u.name, u.created_at, (SELECT count(*) FROM tokens t WHERE t.user_id = u.id)
             FROM users u ORDER BY u.name",
        )?;
        let users = stmt
            .query_map([], |r| {
                Ok(User {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    created_at: r.get(2)?,
                    tokens: r.get(3)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(users)
    }

    /// The user a bearer token belongs to, and the token's id; `None` for an unknown token.
    pub fn authenticate_token(&self, token: &str) -> Result<Option<(User, String)>, UsersError> {
        if !token.starts_with(TOKEN_PREFIX) || token.len() > 128 {
            return Ok(None);
        }
        let hash = token_hash(token);
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "SELECT u.id, u.name, u.created_at FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?1",
        )?;
        // The lookup is by hash: an index probe on a value an attacker cannot steer towards a
        // stored one, so it leaks nothing through timing about the stored tokens.
        let user = stmt
            .query_row([&hash[..]], |r| {
                Ok(User {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    created_at: r.get(2)?,
                    tokens: 0,
                })
            })
            .optional()?;
        Ok(user.map(|user| (user, hex::encode(&hash[..4]))))
    }

    /// The user with this id, if they still exist (a session outlives nothing it names).
    pub fn user_by_id(&self, id: &str) -> Result<Option<User>, UsersError> {
        let conn = self.lock();
        Ok(find(&conn, "id", id)?)
    }

    /// The user of the OpenID Connect identity `issuer` + `subject`, created on its first login
    /// (the user record only, no token, no image) under `display_name` if that name is free,
    /// else a name made unique by a digest of the identity. `None` if the identity is disabled.
    pub fn provision(
        &self,
        issuer: &str,
        subject: &str,
        display_name: Option<&str>,
    ) -> Result<Option<User>, UsersError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found: Option<(String, bool)> = tx
            .query_row(
                "SELECT user_id, disabled FROM identities WHERE issuer = ?1 AND subject = ?2",
                [issuer, subject],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        if let Some((id, disabled)) = found {
            if disabled {
                return Ok(None);
            }
            return Ok(find(&tx, "id", &id)?);
        }
        let digest = hex::encode(&Sha256::digest(format!("{issuer}\0{subject}").as_bytes())[..6]);
        let wanted: String = display_name
            .unwrap_or("")
            .chars()
            .filter(|c| !c.is_control())
            .take(48)
            .collect();
        let taken = |name: &str| -> Result<bool, rusqlite::Error> {
            tx.query_row(
                "SELECT EXISTS(SELECT 1 FROM users WHERE name = ?1)",
                [name],
                |r| r.get(0),
            )
        };
        let name = if !wanted.trim().is_empty() && !taken(&wanted)? {
            wanted
        } else if wanted.trim().is_empty() {
            format!("oidc-{digest}")
        } else {
            format!("{wanted}-{digest}")
        };
        let id = format!("u{}", hex::encode(random::<16>()?));
        let created_at = now_ms();
        tx.execute(
            "INSERT INTO users (id, name, created_at) VALUES (?1, ?2, ?3)",
            params![id, name, created_at],
        )?;
        tx.execute(
            "INSERT INTO identities (issuer, subject, user_id) VALUES (?1, ?2, ?3)",
            params![issuer, subject, id],
        )?;
        tx.commit()?;
        Ok(Some(User {
            id,
            name,
            created_at,
            tokens: 0,
        }))
    }

    /// Disables or enables the OpenID Connect identity `issuer` + `subject`; whether it exists.
    pub fn set_identity_disabled(
        &self,
        issuer: &str,
        subject: &str,
        disabled: bool,
    ) -> Result<bool, UsersError> {
        let conn = self.lock();
        let changed = conn.execute(
            "UPDATE identities SET disabled = ?3 WHERE issuer = ?1 AND subject = ?2",
            params![issuer, subject, disabled],
        )?;
        Ok(changed > 0)
    }

    #[cfg(test)]
    fn tables(&self) -> Vec<String> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .expect("prepare");
        stmt.query_map([], |r| r.get(0))
            .expect("query")
            .map(|r| r.expect("row"))
            .collect()
    }
}

fn find(conn: &Connection, column: &str, value: &str) -> Result<Option<User>, rusqlite::Error> {
    // `column` is one of two literals chosen in this file, never input.
    let sql = format!(
        "SELECT u.id, u.name, u.created_at, (SELECT count(*) FROM tokens t WHERE t.user_id = u.id)
         FROM users u WHERE u.{column} = ?1"
    );
    conn.prepare_cached(&sql)?
        .query_row([value], |r| {
            Ok(User {
                id: r.get(0)?,
                name: r.get(1)?,
                created_at: r.get(2)?,
                tokens: r.get(3)?,
            })
        })
        .optional()
}

fn issue(conn: &Connection, user_id: &str) -> Result<IssuedToken, UsersError> {
    let secret = random::<32>()?;
    let token = format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
    );
    let hash = token_hash(&token);
    conn.execute(
        "INSERT INTO tokens (hash, user_id, created_at) VALUES (?1, ?2, ?3)",
        params![&hash[..], user_id, now_ms()],
    )?;
    Ok(IssuedToken {
        token,
        id: hex::encode(&hash[..4]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_authenticate_their_user_and_nothing_else() {
        let store = UserStore::in_memory().expect("store");
        let (alice, token) = store.add("alice").expect("add");
        let (bob, _) = store.add("bob").expect("add");
        assert_ne!(alice.id, bob.id);
        let (found, id) = store
            .authenticate_token(&token.token)
            .expect("lookup")
            .expect("known");
        assert_eq!(found.id, alice.id);
        assert_eq!(id, token.id);
        assert!(
            store
                .authenticate_token("snug_not-a-token")
                .expect("lookup")
                .is_none()
        );
        assert!(
            store
                .authenticate_token(&token.token[1..])
                .expect("lookup")
                .is_none()
        );
        let second = store.issue_token("alice").expect("issue");
        assert_ne!(second.token, token.token);
        assert_eq!(store.list().expect("list")[0].tokens, 2);
    }

    #[test]
    fn tokens_are_stored_hashed() {
        let dir = tempfile::tempdir().expect("dir");
        let store = UserStore::open(dir.path()).expect("store");
        let (_, token) = store.add("alice").expect("add");
        drop(store);
        let raw = std::fs::read(dir.path().join(USERS_FILE)).expect("read");
        let wal = std::fs::read(dir.path().join(format!("{USERS_FILE}-wal"))).unwrap_or_default();
        let secret = token.token.as_bytes();
        for bytes in [raw, wal] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret),
                "the token text is on disk"
            );
        }
    }

    #[test]
    fn removal_ends_tokens_and_a_new_user_of_the_same_name_is_someone_else() {
        let store = UserStore::in_memory().expect("store");
        let (old, token) = store.add("carol").expect("add");
        assert!(matches!(store.add("carol"), Err(UsersError::Exists(_))));
        store.remove("carol").expect("remove");
        assert!(
            store
                .authenticate_token(&token.token)
                .expect("lookup")
                .is_none()
        );
        assert!(store.user_by_id(&old.id).expect("lookup").is_none());
        let (new, _) = store.add("carol").expect("add again");
        assert_ne!(new.id, old.id);
        assert!(matches!(
            store.remove("nobody"),
            Err(UsersError::NoSuchUser(_))
        ));
        assert!(matches!(store.add(""), Err(UsersError::InvalidName)));
        assert!(matches!(store.add("a\nb"), Err(UsersError::InvalidName)));
    }

    #[test]
    fn every_table_declares_its_class() {
        let store = UserStore::in_memory().expect("store");
        let mut declared = Vec::new();
        let mut pending = false;
        for line in SCHEMA_V1.lines().map(str::trim) {
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
}
