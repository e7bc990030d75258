//! The primitives a backend of the directory implements; the rules over them are `lib.rs`'s.
//!
//! Every write is one transaction. Uniqueness (names, token short ids, identities) is the
//! backend's constraint to enforce and report as a [`Conflict`], so a race between replicas is
//! decided by the database, never by a read before the write.

use crate::{OidcIdentity, TokenInfo, User, UsersError};

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
    /// Sets the disabled flag; the user as it now is.
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
}
