//! Who may use the hub: the users directory. Users, their hub bearer tokens, their OpenID Connect
//! identities, disabled flags and quota overrides, behind one type, [`Directory`], over two
//! backends: embedded SQLite (`sqlite.rs`, the file `users.db` a single gateway keeps) and
//! PostgreSQL (`pg.rs`, shared by any number of gateway replicas).
//!
//! This is not a user database (§8) and never holds one; it only says who may call the hub.
//!
//! The rules live here once, the backends implement primitives ([`backend::Backend`]):
//! - a hub token is `snug_` + base64url of 32 random bytes, shown once when issued and stored only
//!   as its SHA-256, so a copy of the directory lets no one in; its short id (the first 4 bytes of
//!   the hash, hex) is what the ledgers record and what revokes it;
//! - a user name is 1-64 characters, none a control character;
//! - user ids are random (`u` + 32 hex), never derived from a name or an identity, so a user
//!   removed and added again under the same name does not inherit the old user's image;
//! - an OpenID Connect identity is the pair (issuer, subject), never a name: two issuers' subjects
//!   with the same text are two people;
//! - an operator names a user by name or by id, whichever the text is ([`UserKey::NameOrId`], what
//!   every `snug-hub` command that names a user takes); a text that is one user's name and another
//!   user's id names neither ([`UsersError::Ambiguous`]), since an identity provider's display name
//!   could otherwise be chosen to equal someone else's id and steer an erasure meant for them;
//! - a disabled user is, to every lookup that admits a caller ([`Directory::authenticate_token`],
//!   [`Directory::user_by_id`], [`Directory::provision`]), exactly an unknown one: `None`;
//! - first login ([`Directory::provision`]) creates the user record and the identity and nothing
//!   else (§9 item 3: no image), atomically; two replicas provisioning the same subject at once end
//!   with one user, because the identity's primary key admits one row and the loser re-reads it.
//!   A provisioned user's name is the display name made valid (control characters dropped,
//!   trimmed, cut to fit, `user` if nothing is left) qualified by the issuer's host:
//!   `NAME@HOST`; when a user of that name exists, the first free of `NAME-2@HOST` …
//!   `NAME-9@HOST`, then `NAME-` + the first 8 hex of SHA-256(issuer, NUL, subject) + `@HOST`:
//!   deterministic for a given directory, and unique unless that exact name was taken too (then
//!   [`UsersError::NamesExhausted`]). An operator's names ([`Directory::add_user`]) may not hold
//!   an `@`, so the two never collide: whatever name a user picks at their identity provider,
//!   `snug-hub users token carol` can only mean the operator's `carol`.
//!
//! Revocation is heard (`revocations.rs`): [`Directory::revocations`] is what a cache of
//! credentials watches, a generation that grows with every change that may take access away,
//! made by any replica or process, and whether every such change is heard now. A cache that keeps
//! an entry only at the generation it read it at, and only while live, refuses a revoked token, a
//! removed or a disabled user as soon as the change is heard (PostgreSQL: as it commits, on every
//! replica; SQLite: within [`SQLITE_EVERY`] of another process's change, at once of this one's).
//!
//! Browser sessions live here too, so that a session is never worth more than the credential it
//! came from:
//! - a session is made from a live hub token ([`Directory::start_token_session`]) or from an
//!   OpenID Connect identity whose issuer's token was just presented
//!   ([`Directory::start_identity_session`]), by a user who is not disabled, checked in the
//!   transaction that inserts it; its id ([`SessionId`], 16 random bytes) is what the cookie
//!   carries, and the directory keeps only its SHA-256;
//! - [`Directory::session`] (every request with a session cookie: one read, joining the user and
//!   the credential) admits it only while it has not expired, its user exists and is not
//!   disabled, and its credential still exists and is that user's;
//! - a session ends when it is ended ([`Directory::end_session`], logout), when its token is
//!   revoked or its user removed (the row references both with `ON DELETE CASCADE`), and when its
//!   user is disabled (deleted in the transaction that sets the flag, so enabling the user again
//!   brings back no session);
//! - expired rows are pruned as sessions start: each start deletes at most [`PRUNE_BATCH`]
//!   expired sessions, which is bounded work per start, and keeps the expired rows from
//!   outnumbering the sessions started while they expired (each start adds one row and removes up
//!   to 64 dead ones), so the table holds about the sessions of one lifetime. How long a session
//!   may live is the caller's to say (the gateway's seven days, or less for OpenID Connect).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub(crate) mod backend;
mod pg;
mod revocations;
mod sqlite;

use std::{
    path::PathBuf,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use base64::Engine as _;
use sha2::{Digest as _, Sha256};

pub use pg::PgDirectory;
pub use revocations::{Revocations, SQLITE_EVERY};
pub use snug_pg::{PgConfig, valid_schema};
pub use sqlite::{SqliteDirectory, USERS_FILE};

use backend::{Backend, Conflict, ListRows, NewSession, NewToken, SessionRow, SessionSource};

/// The prefix of every hub token, so secret scanners and people recognise one.
pub const TOKEN_PREFIX: &str = "snug_";

/// The longest bearer token text looked up; anything longer is unknown without a query.
const MAX_TOKEN_LEN: usize = 128;

/// The longest user name, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// The longest issuer and subject, in bytes (OIDC limits `sub` to 255 ASCII characters).
const MAX_ISSUER_BYTES: usize = 2048;
const MAX_SUBJECT_BYTES: usize = 255;

/// A user of the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Opaque, random, stable: the id the sync service keys the image by.
    pub id: String,
    /// What the operator (or the identity provider's display name) calls the user; unique.
    pub name: String,
    /// Creation time, Unix milliseconds.
    pub created_at: i64,
    /// A disabled user is refused everywhere, as an unknown one is.
    pub disabled: bool,
    /// The user's own image quota in bytes, overriding the sync service's default.
    pub quota_bytes: Option<u64>,
}

/// A hub token as listed: never its text, which is not stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    /// The short id (8 hex digits) that revokes it and that the ledgers record.
    pub id: String,
    /// Issue time, Unix milliseconds.
    pub created_at: i64,
}

/// An OpenID Connect identity: the issuer and the subject it names the user by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct OidcIdentity {
    /// The issuer URL, exactly as in the token's `iss`.
    pub issuer: String,
    /// The subject, exactly as in the token's `sub` (or the configured claim).
    pub subject: String,
}

/// A user with their tokens and identities, as `users list` shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// The user.
    pub user: User,
    /// Live tokens, oldest first.
    pub tokens: Vec<TokenInfo>,
    /// Identities that log in as this user.
    pub identities: Vec<OidcIdentity>,
}

/// A newly issued bearer token. Its text is shown once and never stored.
pub struct IssuedToken {
    /// The token to hand to the user.
    pub token: String,
    /// Its short id (see [`TokenInfo::id`]).
    pub id: String,
}

impl std::fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedToken")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// A caller a hub token admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// The token's user (never a disabled one).
    pub user: User,
    /// The token's short id.
    pub token_id: String,
}

/// At most this many expired sessions are deleted each time a session starts (the bound on the
/// pruning work one start does; see the crate docs).
pub const PRUNE_BATCH: u32 = 64;

/// The prefix of a session id.
const SESSION_PREFIX: char = 's';

/// A browser session's id: `s` + 32 hex digits (16 random bytes). The session cookie carries it
/// (sealed by the gateway); the directory keeps only its SHA-256, so a copy of the directory names
/// no session a cookie could carry. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionId(String);

impl std::fmt::Debug for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionId(<redacted>)")
    }
}

impl SessionId {
    fn generate() -> Result<Self, UsersError> {
        Ok(Self(format!(
            "{SESSION_PREFIX}{}",
            hex::encode(random::<16>()?)
        )))
    }

    /// The id `text` spells, if it has the shape of one (whether it names a session is the
    /// directory's to say).
    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix(SESSION_PREFIX)?;
        (hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| Self(text.to_owned()))
    }

    /// The id's text, for the cookie.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn hash(&self) -> [u8; 32] {
        Sha256::digest(self.0.as_bytes()).into()
    }
}

/// What a session was made from, and so what ends it besides logout and its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionCredential {
    /// A hub token: revoking it ends the session.
    Token {
        /// The token's short id (see [`TokenInfo::id`]).
        token_id: String,
    },
    /// An OpenID Connect identity, whose issuer's token was presented when the session started.
    Identity {
        /// The identity.
        identity: OidcIdentity,
        /// When the issuer's token was presented, Unix milliseconds: the gateway bounds the
        /// session's age from it, so the issuer is asked again (and its claims re-checked).
        presented_at: i64,
    },
}

/// A live browser session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The id the cookie carries.
    pub id: SessionId,
    /// The session's user (never a disabled one).
    pub user: User,
    /// The credential it came from.
    pub credential: SessionCredential,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds; the session is refused from this instant on.
    pub expires_at: i64,
}

impl Session {
    fn of(id: SessionId, row: SessionRow) -> Self {
        Self {
            id,
            user: row.user,
            credential: row.credential,
            created_at: row.created_at,
            expires_at: row.expires_at,
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why the directory refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    /// A name that is empty, too long, or holds control characters, or an operator's name that
    /// holds an `@` (those are identity-provider users' names).
    #[error(
        "a user name must be 1-64 characters, none of them a control character; an operator's names hold no '@' (reserved for identity-provider users: NAME@ISSUER-HOST)"
    )]
    InvalidName,
    /// An issuer or subject that is empty, too long, or holds control characters.
    #[error(
        "an identity is an issuer (1-2048 bytes) and a subject (1-255 bytes) without control characters"
    )]
    InvalidIdentity,
    /// A quota the stores cannot hold (over 2^63 - 1 bytes).
    #[error("a quota must be at most 9223372036854775807 bytes (2^63 - 1), not {0}")]
    InvalidQuota(u64),
    /// `users add` for a name that exists.
    #[error("a user named {0:?} already exists (issue another token with `snug-hub users token`)")]
    Exists(String),
    /// No user has that name.
    #[error("no user named {0:?}")]
    NoSuchUser(String),
    /// The text is one user's name and another user's id ([`UserKey::NameOrId`]).
    #[error(
        "{text:?} names two users: the one named so (id {named_id}) and the one with that id (named {id_of:?}); name the first by its id, the second by its name"
    )]
    Ambiguous {
        /// What the operator typed.
        text: String,
        /// The id of the user whose name it is.
        named_id: String,
        /// The name of the user whose id it is.
        id_of: String,
    },
    /// No token has that short id.
    #[error("no token with id {0:?}")]
    NoSuchToken(String),
    /// First login found every name it may give the user taken.
    #[error("cannot name the new user: {0:?} and the names derived from it are taken")]
    NamesExhausted(String),
    /// The SQLite file is newer than this build.
    #[error("the users file has schema version {0}, newer than this build understands")]
    TooNew(i64),
    /// The CSPRNG failed.
    #[error("the system random number generator failed")]
    Entropy,
    /// The directory's directory could not be created.
    #[error("cannot create {path}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The backend failed (the file, the database, the connection); retrying may help.
    #[error("the users directory failed")]
    Unavailable(#[source] BoxError),
}

impl From<rusqlite::Error> for UsersError {
    fn from(e: rusqlite::Error) -> Self {
        UsersError::Unavailable(Box::new(e))
    }
}

impl From<tokio_postgres::Error> for UsersError {
    fn from(e: tokio_postgres::Error) -> Self {
        UsersError::Unavailable(Box::new(e))
    }
}

impl From<deadpool_postgres::PoolError> for UsersError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        UsersError::Unavailable(Box::new(e))
    }
}

/// How a lookup names a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserKey<'a> {
    /// By the opaque id only.
    Id(&'a str),
    /// By the unique name only.
    Name(&'a str),
    /// By name or by id, whichever the text is (the rule in the crate docs).
    NameOrId(&'a str),
}

/// The one user of `users` that `key` names, disabled or not: [`UsersError::NoSuchUser`] when
/// none is, [`UsersError::Ambiguous`] when the text is one user's name and another's id.
pub fn find(mut users: Vec<UserInfo>, key: UserKey<'_>) -> Result<UserInfo, UsersError> {
    let (text, by_name, by_id) = match key {
        UserKey::Id(text) => (text, false, true),
        UserKey::Name(text) => (text, true, false),
        UserKey::NameOrId(text) => (text, true, true),
    };
    let named = users
        .iter()
        .position(|info| by_name && info.user.name == text);
    let with_id = users.iter().position(|info| by_id && info.user.id == text);
    let found = match (named, with_id) {
        (Some(named), Some(with_id)) if named != with_id => {
            return Err(UsersError::Ambiguous {
                text: text.to_owned(),
                named_id: users[named].user.id.clone(),
                id_of: users[with_id].user.name.clone(),
            });
        }
        (Some(found), _) | (None, Some(found)) => found,
        (None, None) => return Err(UsersError::NoSuchUser(text.to_owned())),
    };
    Ok(users.swap_remove(found))
}

/// Where the directory lives.
#[derive(Debug, Clone)]
pub enum DirectoryConfig {
    /// `users.db` in this directory (created if missing).
    Sqlite {
        /// The directory.
        dir: PathBuf,
    },
    /// PostgreSQL, connected as `snug-pg` connects (libpq's `sslmode`), tables in the schema it
    /// names, created if missing.
    Postgres(PgConfig),
}

/// The directory, whichever backend holds it (chosen by configuration at run time).
#[derive(Debug, Clone)]
pub enum Directory {
    /// Embedded SQLite.
    Sqlite(SqliteDirectory),
    /// PostgreSQL.
    Postgres(PgDirectory),
}

macro_rules! each {
    ($self:ident, $b:ident => $e:expr) => {
        match $self {
            Directory::Sqlite($b) => $e,
            Directory::Postgres($b) => $e,
        }
    };
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
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

/// A token's short id: the first 4 bytes of its hash, hex.
pub(crate) fn short_id(hash: &[u8]) -> String {
    hex::encode(&hash[..4.min(hash.len())])
}

/// Whether `name` is a valid user name.
pub fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME_CHARS).contains(&name.chars().count()) && !name.chars().any(char::is_control)
}

fn valid_identity(issuer: &str, subject: &str) -> bool {
    let ok =
        |s: &str, max: usize| !s.is_empty() && s.len() <= max && !s.chars().any(char::is_control);
    ok(issuer, MAX_ISSUER_BYTES) && ok(subject, MAX_SUBJECT_BYTES)
}

fn quota(bytes: Option<u64>) -> Result<Option<i64>, UsersError> {
    bytes
        .map(|b| i64::try_from(b).map_err(|_| UsersError::InvalidQuota(b)))
        .transpose()
}

fn new_user(name: &str) -> Result<User, UsersError> {
    Ok(User {
        id: format!("u{}", hex::encode(random::<16>()?)),
        name: name.to_owned(),
        created_at: now_ms(),
        disabled: false,
        quota_bytes: None,
    })
}

/// A fresh token: its text (returned once) and what is stored.
fn new_token() -> Result<(String, NewToken), UsersError> {
    let token = format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random::<32>()?)
    );
    let hash = token_hash(&token);
    Ok((
        token,
        NewToken {
            short_id: short_id(&hash),
            hash,
            created_at: now_ms(),
        },
    ))
}

/// A 4-byte short id can collide with another live token's (one in 2^32 per pair); such a token
/// is drawn again, up to this many times.
const TOKEN_DRAWS: usize = 4;

/// The names first login tries for `display_name`, in order (the rule in the crate docs).
pub fn provisioned_names(display_name: &str, issuer: &str, subject: &str) -> Vec<String> {
    let qualifier: String = format!("@{}", issuer_host(issuer))
        .chars()
        .take(QUALIFIER_CHARS)
        .collect();
    // Room for the longest suffix (`-` and 8 hex) and the qualifier.
    let room = MAX_NAME_CHARS - 9 - qualifier.chars().count();
    let cleaned: String = display_name
        .chars()
        .filter(|c| !c.is_control() && *c != '@')
        .collect();
    let mut base: String = cleaned.trim().chars().take(room).collect();
    base = base.trim_end().to_owned();
    if base.is_empty() {
        base = "user".to_owned();
    }
    let mut digest = Sha256::new();
    digest.update(issuer.as_bytes());
    digest.update([0]);
    digest.update(subject.as_bytes());
    let tag = hex::encode(&digest.finalize()[..4]);
    let mut names = vec![format!("{base}{qualifier}")];
    names.extend((2..=9).map(|n| format!("{base}-{n}{qualifier}")));
    names.push(format!("{base}-{tag}{qualifier}"));
    names
}

/// The longest issuer qualifier a provisioned name carries (`@` and the host, cut).
const QUALIFIER_CHARS: usize = 24;

/// The host of an issuer URL (`https://id.example:8443/realms/x` → `id.example`); the URL itself
/// when it has none.
fn issuer_host(issuer: &str) -> &str {
    let rest = issuer.split_once("://").map_or(issuer, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if let Some(bracketed) = host.strip_prefix('[') {
        return bracketed.split(']').next().unwrap_or(bracketed);
    }
    host.split(':')
        .next()
        .filter(|h| !h.is_empty())
        .unwrap_or(issuer)
}

impl Directory {
    /// Opens the directory `config` names: the SQLite file is created and migrated forward, the
    /// PostgreSQL schema and tables are created if missing (several replicas may start at once).
    pub async fn open(config: &DirectoryConfig) -> Result<Self, UsersError> {
        Ok(match config {
            DirectoryConfig::Sqlite { dir } => {
                let dir = dir.clone();
                // Creating, migrating and fsyncing a file: blocking work.
                let opened = tokio::task::spawn_blocking(move || SqliteDirectory::open(&dir))
                    .await
                    .map_err(|e| UsersError::Unavailable(Box::new(e)))??;
                Directory::Sqlite(opened)
            }
            DirectoryConfig::Postgres(pg) => Directory::Postgres(PgDirectory::connect(pg).await?),
        })
    }

    /// `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self {
            Directory::Sqlite(_) => "sqlite",
            Directory::Postgres(_) => "postgres",
        }
    }

    /// What a cache of credentials watches: see `revocations.rs`.
    pub fn revocations(&self) -> tokio::sync::watch::Receiver<Revocations> {
        each!(self, b => b.hearing.watch())
    }

    /// A revoking change of this process committed (whatever it answered: it may have).
    fn revoked<T>(&self, result: Result<T, UsersError>) -> Result<T, UsersError> {
        each!(self, b => b.hearing.revoked());
        result
    }

    /// Whether the backend answers.
    pub async fn health(&self) -> Result<(), UsersError> {
        each!(self, b => b.health().await)
    }

    /// Adds a user and issues their first token.
    pub async fn add_user(&self, name: &str) -> Result<(User, IssuedToken), UsersError> {
        if !valid_name(name) || name.contains('@') {
            return Err(UsersError::InvalidName);
        }
        let user = new_user(name)?;
        for _ in 0..TOKEN_DRAWS {
            let (text, token) = new_token()?;
            match each!(self, b => b.insert_user(&user, Some(&token), None).await)? {
                Ok(()) => {
                    return Ok((
                        user,
                        IssuedToken {
                            token: text,
                            id: token.short_id,
                        },
                    ));
                }
                Err(Conflict::Name) => return Err(UsersError::Exists(name.to_owned())),
                Err(Conflict::ShortId) => continue,
                Err(other) => return Err(other.unexpected()),
            }
        }
        Err(UsersError::Entropy)
    }

    /// Issues another token for an existing user (a new device, or a lost token).
    pub async fn issue_token(&self, name: &str) -> Result<IssuedToken, UsersError> {
        for _ in 0..TOKEN_DRAWS {
            let (text, token) = new_token()?;
            match each!(self, b => b.insert_token(name, &token).await)? {
                Ok(()) => {
                    return Ok(IssuedToken {
                        token: text,
                        id: token.short_id,
                    });
                }
                Err(Conflict::NoUser) => return Err(UsersError::NoSuchUser(name.to_owned())),
                Err(Conflict::ShortId) => continue,
                Err(other) => return Err(other.unexpected()),
            }
        }
        Err(UsersError::Entropy)
    }

    /// Revokes one token by its short id; returns the name of the user it belonged to.
    pub async fn revoke_token(&self, token_id: &str) -> Result<String, UsersError> {
        let id = token_id.trim().to_ascii_lowercase();
        self.revoked(each!(self, b => b.delete_token(&id).await))?
            .ok_or_else(|| UsersError::NoSuchToken(token_id.to_owned()))
    }

    /// Every user, by name, with their tokens and identities.
    pub async fn list(&self) -> Result<Vec<UserInfo>, UsersError> {
        let rows = each!(self, b => b.list().await)?;
        Ok(assemble(rows))
    }

    /// The user `key` names ([`find`] over [`Directory::list`]), disabled or not, with their
    /// tokens and identities.
    pub async fn find(&self, key: UserKey<'_>) -> Result<UserInfo, UsersError> {
        find(self.list().await?, key)
    }

    /// Disables a user: every token and identity of theirs is refused from the next request on,
    /// as if they did not exist, and their sessions are ended (deleted: enabling the user again
    /// brings none back); their tokens and identities are kept.
    pub async fn disable(&self, name: &str) -> Result<User, UsersError> {
        self.revoked(each!(self, b => b.set_disabled(name, true).await))?
            .ok_or_else(|| UsersError::NoSuchUser(name.to_owned()))
    }

    /// Enables a disabled user again.
    pub async fn enable(&self, name: &str) -> Result<User, UsersError> {
        each!(self, b => b.set_disabled(name, false).await)?
            .ok_or_else(|| UsersError::NoSuchUser(name.to_owned()))
    }

    /// Sets (`Some`) or clears (`None`) a user's quota override.
    pub async fn set_quota(&self, name: &str, bytes: Option<u64>) -> Result<User, UsersError> {
        let bytes = quota(bytes)?;
        self.revoked(each!(self, b => b.set_quota(name, bytes).await))?
            .ok_or_else(|| UsersError::NoSuchUser(name.to_owned()))
    }

    /// Removes a user with their tokens, identities and sessions. Their image stays in the sync
    /// store, under an id no new user can get.
    pub async fn remove_user(&self, name: &str) -> Result<User, UsersError> {
        self.revoked(each!(self, b => b.delete_user(name).await))?
            .ok_or_else(|| UsersError::NoSuchUser(name.to_owned()))
    }

    /// The user a hub token belongs to; `None` for an unknown token or a disabled user (the two
    /// are indistinguishable to the caller).
    pub async fn authenticate_token(
        &self,
        token: &str,
    ) -> Result<Option<Authenticated>, UsersError> {
        if !token.starts_with(TOKEN_PREFIX) || token.len() > MAX_TOKEN_LEN {
            return Ok(None);
        }
        // The lookup is by hash: an index probe on a value an attacker cannot steer towards a
        // stored one, so it leaks nothing through timing about the stored tokens.
        let hash = token_hash(token);
        let found = each!(self, b => b.by_token_hash(&hash).await)?;
        Ok(found
            .filter(|(user, _)| !user.disabled)
            .map(|(user, token_id)| Authenticated { user, token_id }))
    }

    /// The user with this id, if they exist and are not disabled.
    pub async fn user_by_id(&self, id: &str) -> Result<Option<User>, UsersError> {
        Ok(each!(self, b => b.by_id(id).await)?.filter(|u| !u.disabled))
    }

    /// First login: the user `(issuer, subject)` names, created with that identity (and nothing
    /// else) if new; `None` if that user is disabled. Atomic and race-safe across replicas.
    pub async fn provision(
        &self,
        issuer: &str,
        subject: &str,
        display_name: &str,
    ) -> Result<Option<User>, UsersError> {
        if !valid_identity(issuer, subject) {
            return Err(UsersError::InvalidIdentity);
        }
        let identity = OidcIdentity {
            issuer: issuer.to_owned(),
            subject: subject.to_owned(),
        };
        let names = provisioned_names(display_name, issuer, subject);
        for name in &names {
            if let Some(user) = each!(self, b => b.by_identity(&identity).await)? {
                return Ok(Some(user).filter(|u| !u.disabled));
            }
            let user = new_user(name)?;
            match each!(self, b => b.insert_user(&user, None, Some(&identity)).await)? {
                Ok(()) => {
                    tracing::info!(user = %user.id, name = %user.name, issuer, "provisioned a user at first login");
                    return Ok(Some(user));
                }
                // Another replica provisioned this subject first: the next turn reads its user.
                Err(Conflict::Identity) | Err(Conflict::Name) => continue,
                Err(other) => return Err(other.unexpected()),
            }
        }
        // The last candidate may have lost to the same subject on another replica.
        if let Some(user) = each!(self, b => b.by_identity(&identity).await)? {
            return Ok(Some(user).filter(|u| !u.disabled));
        }
        Err(UsersError::NamesExhausted(names[0].clone()))
    }
}

impl Directory {
    /// Starts a session from the hub token `token` at `now` (Unix milliseconds), for `lifetime`;
    /// `None` if the token is unknown or revoked or its user disabled. Revoking the token, or
    /// disabling or removing its user, ends the session.
    pub async fn start_token_session(
        &self,
        token: &str,
        now: i64,
        lifetime: Duration,
    ) -> Result<Option<Session>, UsersError> {
        if !token.starts_with(TOKEN_PREFIX) || token.len() > MAX_TOKEN_LEN {
            return Ok(None);
        }
        let source = SessionSource::Token {
            hash: token_hash(token),
        };
        self.start_session(source, now, lifetime).await
    }

    /// Starts a session for `identity`, whose issuer's token was presented (and verified by the
    /// caller) at `now` (Unix milliseconds), for `lifetime`; `None` if the identity belongs to no
    /// user or to a disabled one. Disabling or removing the user ends the session.
    pub async fn start_identity_session(
        &self,
        identity: &OidcIdentity,
        now: i64,
        lifetime: Duration,
    ) -> Result<Option<Session>, UsersError> {
        if !valid_identity(&identity.issuer, &identity.subject) {
            return Ok(None);
        }
        let source = SessionSource::Identity(identity.clone());
        self.start_session(source, now, lifetime).await
    }

    async fn start_session(
        &self,
        source: SessionSource,
        now: i64,
        lifetime: Duration,
    ) -> Result<Option<Session>, UsersError> {
        let id = SessionId::generate()?;
        let lifetime = i64::try_from(lifetime.as_millis()).unwrap_or(i64::MAX);
        let new = NewSession {
            hash: id.hash(),
            source,
            created_at: now,
            expires_at: now.saturating_add(lifetime),
        };
        let Some(row) = each!(self, b => b.insert_session(&new).await)? else {
            return Ok(None);
        };
        // Pruning rides on starts (bounded, see the crate docs); the session already committed,
        // so a failure here is logged, not the start's.
        if let Err(err) = self.prune_sessions(now).await {
            tracing::warn!(error = %err, "cannot prune expired sessions");
        }
        Ok(Some(Session::of(id, row)))
    }

    /// The session `id` names at `now` (Unix milliseconds): `None` once it has expired or ended,
    /// its credential is gone, or its user is disabled or removed. One read.
    pub async fn session(&self, id: &SessionId, now: i64) -> Result<Option<Session>, UsersError> {
        let row = each!(self, b => b.session_by_hash(&id.hash()).await)?;
        Ok(row
            .filter(|row| !row.user.disabled && row.expires_at > now)
            .map(|row| Session::of(id.clone(), row)))
    }

    /// Deletes at most [`PRUNE_BATCH`] sessions that expired at or before `now` (Unix
    /// milliseconds); how many. Every session start does this; it is public for a sweep.
    pub async fn prune_sessions(&self, now: i64) -> Result<u64, UsersError> {
        each!(self, b => b.prune_sessions(now, PRUNE_BATCH).await)
    }

    /// Ends the session `id` names (logout): from the next request on, on every replica, its
    /// cookie is refused. Whether there was such a session.
    pub async fn end_session(&self, id: &SessionId) -> Result<bool, UsersError> {
        self.revoked(each!(self, b => b.delete_session(&id.hash()).await))
    }
}

/// Joins the backend's three row sets into one entry per user, in the users' order.
fn assemble(rows: ListRows) -> Vec<UserInfo> {
    let mut infos: Vec<UserInfo> = rows
        .users
        .into_iter()
        .map(|user| UserInfo {
            user,
            tokens: Vec::new(),
            identities: Vec::new(),
        })
        .collect();
    let index: std::collections::HashMap<String, usize> = infos
        .iter()
        .enumerate()
        .map(|(i, info)| (info.user.id.clone(), i))
        .collect();
    for (user_id, token) in rows.tokens {
        if let Some(&i) = index.get(&user_id) {
            infos[i].tokens.push(token);
        }
    }
    for (user_id, identity) in rows.identities {
        if let Some(&i) = index.get(&user_id) {
            infos[i].identities.push(identity);
        }
    }
    for info in &mut infos {
        info.tokens
            .sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        info.identities.sort();
    }
    infos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provisioned_names_follow_the_stated_rule() {
        let names = provisioned_names("  Ada\nLovelace ", "https://id.example/realms/x", "42");
        assert_eq!(names[0], "AdaLovelace@id.example");
        assert_eq!(names[1], "AdaLovelace-2@id.example");
        assert_eq!(names[8], "AdaLovelace-9@id.example");
        assert_eq!(names.len(), 10);
        assert!(
            names[9].starts_with("AdaLovelace-")
                && names[9].ends_with("@id.example")
                && names[9].len() == "AdaLovelace-".len() + 8 + "@id.example".len()
        );
        // Deterministic, and a different identity gets a different last resort.
        assert_eq!(
            names,
            provisioned_names("  Ada\nLovelace ", "https://id.example/realms/x", "42")
        );
        assert_ne!(
            names[9],
            provisioned_names("AdaLovelace", "https://id.example/realms/x", "43")[9]
        );
        assert_eq!(provisioned_names("\n\t ", "i", "s")[0], "user@i");
        // A chosen name cannot pose as another issuer's, nor as an operator's.
        assert_eq!(
            provisioned_names("carol@corp.example", "https://id.example:8443", "s")[0],
            "carolcorp.example@id.example"
        );
        assert_eq!(
            provisioned_names("x", "http://[::1]:9000/issuer", "s")[0],
            "x@::1"
        );
        let long = "x".repeat(200);
        for issuer in ["i", &format!("https://{}.example", "h".repeat(300))] {
            for name in provisioned_names(&long, issuer, "s") {
                assert!(valid_name(&name), "{name}");
            }
        }
    }

    /// A directory of three users: `alice` (id `u1`), `bob` (id `u2`), and `u1` (id `u3`), whose
    /// name is alice's id.
    fn three_users() -> Vec<UserInfo> {
        let user = |id: &str, name: &str| UserInfo {
            user: User {
                id: id.to_owned(),
                name: name.to_owned(),
                created_at: 0,
                disabled: id == "u2",
                quota_bytes: None,
            },
            tokens: Vec::new(),
            identities: Vec::new(),
        };
        vec![user("u1", "alice"), user("u2", "bob"), user("u3", "u1")]
    }

    #[test]
    fn a_user_is_found_by_name_or_id_and_never_by_a_guess() {
        use UserKey::{Id, Name, NameOrId};
        // (key, the id of the user found, or the refusal).
        let cases: [(UserKey<'_>, &str); 12] = [
            (Name("alice"), "u1"),
            (Id("u1"), "u1"),
            (NameOrId("alice"), "u1"),
            (NameOrId("u2"), "u2"),
            (NameOrId("bob"), "u2"),
            (Name("u1"), "u3"),
            (NameOrId("u3"), "u3"),
            (Id("alice"), "no such user"),
            (Name("u2"), "no such user"),
            (NameOrId("carol"), "no such user"),
            (NameOrId("Alice"), "no such user"),
            (NameOrId("u1"), "ambiguous: named u3, id of alice"),
        ];
        for (key, expected) in cases {
            let found = match find(three_users(), key) {
                Ok(info) => info.user.id,
                Err(UsersError::NoSuchUser(_)) => "no such user".to_owned(),
                Err(UsersError::Ambiguous {
                    named_id, id_of, ..
                }) => format!("ambiguous: named {named_id}, id of {id_of}"),
                Err(other) => format!("{other:?}"),
            };
            assert_eq!(found, expected, "{key:?}");
        }
    }

    #[test]
    fn names_and_identities_are_checked() {
        let (longest, too_long) = ("é".repeat(64), "é".repeat(65));
        let cases: [(&str, bool); 5] = [
            ("alice", true),
            ("", false),
            ("a\nb", false),
            (&longest, true),
            (&too_long, false),
        ];
        for (name, ok) in cases {
            assert_eq!(valid_name(name), ok, "{name:?}");
        }
        assert!(valid_identity("https://id.example", "abc"));
        assert!(!valid_identity("", "abc"));
        assert!(!valid_identity("https://id.example", ""));
        assert!(!valid_identity("https://id.example", &"s".repeat(256)));
        assert!(!valid_identity("https://id\n.example", "abc"));
    }

    #[test]
    fn session_ids_have_the_stated_shape() {
        let id = SessionId::generate().expect("id");
        assert_eq!(SessionId::parse(id.as_str()), Some(id.clone()));
        assert_eq!(id.as_str().len(), 33);
        assert_eq!(format!("{id:?}"), "SessionId(<redacted>)");
        let cases: [(&str, bool); 6] = [
            ("s0123456789abcdef0123456789abcdef", true),
            ("s0123456789abcdef0123456789abcde", false),
            ("s0123456789abcdef0123456789abcdef0", false),
            ("s0123456789ABCDEF0123456789abcdef", false),
            ("t0123456789abcdef0123456789abcdef", false),
            ("", false),
        ];
        for (text, ok) in cases {
            assert_eq!(SessionId::parse(text).is_some(), ok, "{text:?}");
        }
    }

    #[test]
    fn tokens_have_the_stated_shape() {
        let (text, stored) = new_token().expect("token");
        assert!(text.starts_with(TOKEN_PREFIX));
        assert_eq!(text.len(), TOKEN_PREFIX.len() + 43);
        assert_eq!(stored.hash, token_hash(&text));
        assert_eq!(stored.short_id, hex::encode(&stored.hash[..4]));
        assert!(matches!(
            quota(Some(u64::MAX)),
            Err(UsersError::InvalidQuota(_))
        ));
        assert_eq!(quota(Some(5)).expect("ok"), Some(5));
    }
}
