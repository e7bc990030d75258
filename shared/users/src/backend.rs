//! The primitives a backend of the directory implements; the rules over them are `lib.rs`'s.
//!
//! Every write is one transaction. Uniqueness (names, token short ids, identities) is the
//! backend's constraint to enforce and report as a [`Conflict`], so a race between replicas is
//! decided by the database, never by a read before the write.
//!
//! A session row references the credential it was made from (a token's hash, or an identity)
//! and its user with `ON DELETE CASCADE`, so revoking the token, removing the user (with their
//! identities) deletes the session in the same transaction, on every backend, without a rule
//! here having to remember it.

use crate::{OidcIdentity, SessionCredential, TokenInfo, User, UsersError};

/// A token as stored.
#[derive(Debug, Clone)]
pub(crate) struct NewToken {
    /// SHA-256 of the token's text.
    pub(crate) hash: [u8; 32],
    /// The first 4 bytes of `hash`, hex.
    pub(crate) short_id: String,
    /// Unix milliseconds.
    pub(crate) created_at: i64,
}

/// What a new session is made from.
#[derive(Debug, Clone)]
pub(crate) enum SessionSource {
    /// The hub token with this SHA-256.
    Token {
        /// SHA-256 of the token's text.
        hash: [u8; 32],
    },
    /// An OpenID Connect identity whose issuer's token was presented at the session's creation.
    Identity(OidcIdentity),
}

/// A session as stored.
#[derive(Debug, Clone)]
pub(crate) struct NewSession {
    /// SHA-256 of the session id (the cookie carries the id; the directory keeps only its hash).
    pub(crate) hash: [u8; 32],
    /// The credential it was made from.
    pub(crate) source: SessionSource,
    /// Unix milliseconds; for an identity also when the issuer's token was presented.
    pub(crate) created_at: i64,
    /// Unix milliseconds.
    pub(crate) expires_at: i64,
}

/// A session as read back, with its user (disabled or not) and live credential.
#[derive(Debug, Clone)]
pub(crate) struct SessionRow {
    /// The session's user.
    pub(crate) user: User,
    /// The credential, still present in the directory.
    pub(crate) credential: SessionCredential,
    /// Unix milliseconds.
    pub(crate) created_at: i64,
    /// Unix milliseconds.
    pub(crate) expires_at: i64,
}

/// Which uniqueness rule or reference a write ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Conflict {
    /// A user of that name exists.
    Name,
    /// A live token has that short id.
    ShortId,
    /// That identity belongs to a user already.
    Identity,
    /// No user of that name.
    NoUser,
}

impl Conflict {
    /// A conflict the calling rule cannot meet: a backend reporting what its write cannot cause.
    pub(crate) fn unexpected(self) -> UsersError {
        UsersError::Unavailable(format!("unexpected conflict {self:?}").into())
    }
}

/// Everything `list` shows, read in one snapshot.
#[derive(Debug, Default)]
pub(crate) struct ListRows {
    /// Every user, by name.
    pub(crate) users: Vec<User>,
    /// Every token, with its user's id.
    pub(crate) tokens: Vec<(String, TokenInfo)>,
    /// Every identity, with its user's id.
    pub(crate) identities: Vec<(String, OidcIdentity)>,
}

/// A write's outcome: done, or refused by a [`Conflict`]; the outer error is a failure.
pub(crate) type Write = Result<Result<(), Conflict>, UsersError>;

/// The primitives. Lookups return disabled users too: admitting or refusing them is the rules'.
pub(crate) trait Backend {
    /// Whether the backend answers.
    async fn health(&self) -> Result<(), UsersError>;
    /// Inserts `user` with, atomically, its first token and/or its identity.
    async fn insert_user(
        &self,
        user: &User,
        token: Option<&NewToken>,
        identity: Option<&OidcIdentity>,
    ) -> Write;
    /// Inserts a token for the user named `name`.
    async fn insert_token(&self, name: &str, token: &NewToken) -> Write;
    /// Deletes the token with this short id; the name of its user, if there was one.
    async fn delete_token(&self, short_id: &str) -> Result<Option<String>, UsersError>;
    /// Every user, token and identity.
    async fn list(&self) -> Result<ListRows, UsersError>;
    /// Sets the disabled flag; the user as it now is. Disabling deletes the user's sessions in
    /// the same transaction (after the flag is set, so that a session a concurrent write inserts
    /// is either refused by the flag or deleted).
    async fn set_disabled(&self, name: &str, disabled: bool) -> Result<Option<User>, UsersError>;
    /// Sets or clears the quota override; the user as it now is.
    async fn set_quota(&self, name: &str, bytes: Option<i64>) -> Result<Option<User>, UsersError>;
    /// Deletes the user with their tokens and identities; the user as it was.
    async fn delete_user(&self, name: &str) -> Result<Option<User>, UsersError>;
    /// The user owning the token with this hash, and the token's short id.
    async fn by_token_hash(&self, hash: &[u8; 32]) -> Result<Option<(User, String)>, UsersError>;
    /// The user with this id.
    async fn by_id(&self, id: &str) -> Result<Option<User>, UsersError>;
    /// The user this identity belongs to.
    async fn by_identity(&self, identity: &OidcIdentity) -> Result<Option<User>, UsersError>;
    /// Inserts `session` if its credential exists and belongs to a user who is not disabled,
    /// checked in the same transaction (a revocation or a disable racing it either comes first
    /// and refuses it, or comes after and deletes it); the session as stored, or `None`.
    async fn insert_session(&self, session: &NewSession) -> Result<Option<SessionRow>, UsersError>;
    /// The session with this hash, if its credential still exists and is its user's.
    async fn session_by_hash(&self, hash: &[u8; 32]) -> Result<Option<SessionRow>, UsersError>;
    /// Deletes the session with this hash; whether there was one.
    async fn delete_session(&self, hash: &[u8; 32]) -> Result<bool, UsersError>;
    /// Deletes at most `limit` sessions that expired at or before `now`; how many.
    async fn prune_sessions(&self, now: i64, limit: u32) -> Result<u64, UsersError>;
}
