//! Who is calling: a bearer token, a session cookie, or (auth off) the local user.
//!
//! A request with an `Authorization` header is judged by it alone: a bad token is 401 even if a
//! valid cookie rides along, so a client never silently acts as someone else. Cookie-authenticated
//! writes must pass the CSRF double-submit check; bearer requests are exempt, because a browser
//! never attaches a bearer token by itself, so a cross-site page cannot make it send one.
//!
//! A session is never worth more than the credential it came from. [`Auth::start_session`]
//! records it in the users directory bound to that credential (the hub token, or the OpenID
//! Connect identity with when its issuer's token was presented), and a session cookie admits its
//! caller only while that record lives: one directory read, the same read that finds the user,
//! so logout ([`Auth::end_session`]), revoking the token, disabling or removing the user refuse
//! the cookie from the next request on, on every replica. An OpenID Connect session is
//! further refused once its issuer's token was presented longer ago than
//! `SNUG_OIDC_SESSION_MAX_AGE` (default [`crate::oidc::DEFAULT_SESSION_MAX_AGE`]), or when its
//! issuer is no longer configured: the browser logs in again, so the issuer, and the required
//! claim, are asked again. Every such refusal is the uniform 401.
//!
//! What the directory said of a hub token or a session is kept (`credentials.rs`) until the
//! directory hears a change that may take access away, made anywhere: so "from the next request
//! on" means from the moment the change is heard — as it commits with PostgreSQL, on every
//! replica; within `snug_users::SQLITE_EVERY` of a `snug-hub users` command with SQLite.

use std::{sync::Arc, time::Duration};

use axum::http::{HeaderMap, header};

use crate::{
    backend::Caller,
    config::AuthMode,
    credentials::{self, Kept},
    error::ApiError,
    oidc::Oidc,
    rate::RateLimits,
    session::{self, SESSION_COOKIE, SessionKey, SessionSource, StartedSession},
};
use snug_users::{Directory, OidcIdentity, SessionCredential, UsersError};

/// The one user of a gateway with auth off.
pub const LOCAL_USER: &str = "local";

/// How the caller proved who they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// A hub bearer token; the token's short id.
    Bearer(String),
    /// An OpenID Connect issuer's bearer token (a JWT).
    IssuerToken {
        /// The token's short id, as the ledgers record it (`oidc:` + hex).
        token_id: String,
        /// The identity it names.
        identity: OidcIdentity,
    },
    /// The session cookie; the session's id.
    Session(snug_users::SessionId),
    /// Auth is off.
    Local,
}

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The stable user id the sync service keys the image by.
    pub user_id: String,
    /// The user's name.
    pub name: String,
    /// How they authenticated.
    pub via: Via,
    /// The user's own image quota in bytes (`snug-hub users quota`), overriding the sync
    /// service's default; `None`: the default applies.
    pub quota_bytes: Option<u64>,
}

impl Identity {
    /// The caller as the sync service records it: the user, and which credential acted.
    pub fn caller(&self) -> Caller {
        let principal = match &self.via {
            Via::Bearer(token)
            | Via::IssuerToken {
                token_id: token, ..
            } => format!("token:{token}"),
            Via::Session(_) => "session".to_owned(),
            Via::Local => LOCAL_USER.to_owned(),
        };
        Caller {
            user_id: self.user_id.clone(),
            principal: format!("{}/{principal}", self.name),
            quota_bytes: self.quota_bytes,
            client_address: None,
        }
    }

    /// Whether a write by this caller needs the CSRF header.
    pub fn needs_csrf(&self) -> bool {
        matches!(self.via, Via::Session(_))
    }
}

/// The authenticator: the mode, the users directory and the session key.
#[derive(Debug, Clone)]
pub struct Auth {
    mode: AuthMode,
    users: Option<Arc<Directory>>,
    /// What the directory said of credentials, kept until a revocation is heard.
    kept: Option<Arc<KeptCredentials>>,
    key: Option<SessionKey>,
    rate_limits: Option<Arc<RateLimits>>,
    oidc: Option<Arc<Oidc>>,
}

/// The hub tokens and sessions the directory admitted.
#[derive(Debug)]
struct KeptCredentials {
    tokens: Kept<snug_users::Authenticated>,
    sessions: Kept<snug_users::Session>,
}

/// A gateway time (Unix milliseconds, unsigned) as the directory records times.
fn directory_time(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn unauthenticated(message: &str) -> ApiError {
    ApiError::from_reason(&snug_reasons::gateway::UNAUTHENTICATED, message)
}

impl Auth {
    /// Auth off: everyone is [`LOCAL_USER`].
    pub fn off() -> Self {
        Self {
            mode: AuthMode::Off,
            users: None,
            kept: None,
            key: None,
            rate_limits: None,
            oidc: None,
        }
    }

    /// Auth on, against `users`, with sessions signed by `key`; every authenticated request
    /// counts against its user's bucket of `rate_limits`, if any.
    pub fn on(
        users: Arc<Directory>,
        key: SessionKey,
        rate_limits: Option<Arc<RateLimits>>,
    ) -> Self {
        let kept = KeptCredentials {
            tokens: Kept::new(users.revocations()),
            sessions: Kept::new(users.revocations()),
        };
        Self {
            mode: AuthMode::On,
            kept: Some(Arc::new(kept)),
            users: Some(users),
            key: Some(key),
            rate_limits,
            oidc: None,
        }
    }

    /// Also accepts OpenID Connect bearer tokens (JWTs), judged by `oidc`.
    pub fn with_oidc(mut self, oidc: Option<Arc<Oidc>>) -> Self {
        self.oidc = oidc;
        self
    }

    /// The OpenID Connect verifier, when configured.
    pub fn oidc(&self) -> Option<&Oidc> {
        self.oidc.as_deref()
    }

    /// The mode.
    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// The users directory (auth on), for the admin API the composition root serves beside.
    pub fn directory(&self) -> Option<&Directory> {
        self.users.as_deref()
    }

    /// The session key (auth on).
    pub fn key(&self) -> Option<&SessionKey> {
        self.key.as_ref()
    }

    /// Identifies the caller, or answers 401; a caller over their rate limit is 429.
    pub async fn identify(&self, headers: &HeaderMap) -> Result<Identity, ApiError> {
        let identity = self.authenticate(headers).await?;
        if let Some(limits) = &self.rate_limits {
            limits.check_principal(&identity.user_id)?;
        }
        Ok(identity)
    }

    /// Resolves, with the refusal, once the credential of `headers` no longer admits anyone
    /// (revoked, its user disabled or removed, its session ended): checked again whenever the
    /// directory hears such a change. Never, with auth off. What it holds while it waits is the
    /// credential's headers and a channel receiver: it is held by every idle event stream.
    pub fn revoked(
        &self,
        headers: &HeaderMap,
    ) -> impl Future<Output = ApiError> + Send + 'static + use<> {
        // Copied, not cloned: a clone shares the connection's read buffer, which hyper then
        // cannot reuse, so it allocates another (8 KiB per idle stream).
        let copy = |name: header::HeaderName| {
            headers
                .get_all(&name)
                .iter()
                .filter_map(|value| axum::http::HeaderValue::from_bytes(value.as_bytes()).ok())
                .map(|value| (name.clone(), value))
                .collect::<Vec<_>>()
        };
        let credential: Box<[(header::HeaderName, axum::http::HeaderValue)]> =
            copy(header::AUTHORIZATION)
                .into_iter()
                .chain(copy(header::COOKIE))
                .collect();
        let revocations = self.users.as_ref().map(|users| users.revocations());
        let auth = self.clone();
        async move {
            let Some(mut revocations) = revocations else {
                return std::future::pending().await;
            };
            loop {
                if revocations.changed().await.is_err() {
                    return std::future::pending().await;
                }
                let headers: HeaderMap = credential.iter().cloned().collect();
                // Boxed: the check's state exists only while it runs.
                match Box::pin(auth.authenticate(&headers)).await {
                    Err(refused) if refused.status == axum::http::StatusCode::UNAUTHORIZED => {
                        return refused;
                    }
                    // Admitted still, or the directory could not say: the stream goes on.
                    _ => {}
                }
            }
        }
    }

    async fn authenticate(&self, headers: &HeaderMap) -> Result<Identity, ApiError> {
        let (Some(users), Some(key)) = (&self.users, &self.key) else {
            return Ok(Identity {
                user_id: LOCAL_USER.to_owned(),
                name: LOCAL_USER.to_owned(),
                via: Via::Local,
                quota_bytes: None,
            });
        };
        let store_failed = |err: UsersError| self.store_failed(err);
        if let Some(value) = headers.get(header::AUTHORIZATION) {
            let token = snug_rpc::bearer::token(value).ok_or_else(|| {
                unauthenticated("the Authorization header must be `Bearer <token>`")
            })?;
            if let Some(oidc) = &self.oidc
                && snug_identity::is_jwt(token)
            {
                let caller = oidc.identify(token).await?;
                return Ok(Identity {
                    user_id: caller.user.id,
                    name: caller.user.name,
                    via: Via::IssuerToken {
                        token_id: caller.token_id,
                        identity: OidcIdentity {
                            issuer: caller.issuer,
                            subject: caller.subject,
                        },
                    },
                    quota_bytes: caller.user.quota_bytes,
                });
            }
            // Unknown, revoked and disabled are one answer.
            let found = self
                .token(users, token)
                .await
                .map_err(store_failed)?
                .ok_or_else(|| unauthenticated("the bearer token is not valid"))?;
            return Ok(Identity {
                user_id: found.user.id,
                name: found.user.name,
                via: Via::Bearer(found.token_id),
                quota_bytes: found.user.quota_bytes,
            });
        }
        if let Some(value) = session::cookie(headers, SESSION_COOKIE) {
            let refused = || unauthenticated("no valid session");
            let now = session::now_ms();
            let cookie = key.verify(value, now).ok_or_else(refused)?;
            // The one read: the record, its user and its credential together.
            let found = self
                .session(users, &cookie.session_id, directory_time(now))
                .await
                .map_err(store_failed)?
                .filter(|found| found.user.id == cookie.user_id)
                .ok_or_else(refused)?;
            if let SessionCredential::Identity {
                identity,
                presented_at,
            } = &found.credential
            {
                let admitted = self.oidc.as_ref().is_some_and(|oidc| {
                    oidc.admits_session(&identity.issuer, *presented_at, directory_time(now))
                });
                if !admitted {
                    tracing::info!(issuer = %identity.issuer, "an OpenID Connect session outlived its bound or its issuer");
                    return Err(refused());
                }
            }
            return Ok(Identity {
                user_id: found.user.id,
                name: found.user.name,
                via: Via::Session(found.id),
                quota_bytes: found.user.quota_bytes,
            });
        }
        Err(unauthenticated("no valid session or bearer token"))
    }

    /// What the directory says of a hub token, kept or read.
    async fn token(
        &self,
        users: &Directory,
        token: &str,
    ) -> Result<Option<snug_users::Authenticated>, UsersError> {
        let Some(kept) = &self.kept else {
            return users.authenticate_token(token).await;
        };
        let key = credentials::key("bearer", token);
        let fill = match kept.tokens.get(&key) {
            Ok(found) => return Ok(Some(found)),
            Err(fill) => fill,
        };
        let found = users.authenticate_token(token).await?;
        if let Some(found) = &found {
            kept.tokens.keep(key, fill, found.clone());
        }
        Ok(found)
    }

    /// The session `id` names at `now`, kept or read; a kept one is refused once it expires.
    async fn session(
        &self,
        users: &Directory,
        id: &snug_users::SessionId,
        now: i64,
    ) -> Result<Option<snug_users::Session>, UsersError> {
        let Some(kept) = &self.kept else {
            return users.session(id, now).await;
        };
        let key = credentials::key("session", id.as_str());
        let fill = match kept.sessions.get(&key) {
            Ok(found) => return Ok(Some(found).filter(|found| found.expires_at > now)),
            Err(fill) => fill,
        };
        let found = users.session(id, now).await?;
        if let Some(found) = &found {
            kept.sessions.keep(key, fill, found.clone());
        }
        Ok(found)
    }

    /// Starts a session bound to `source`, recorded in the users directory: the sealed cookie
    /// value and its lifetime (seven days; for an OpenID Connect identity at most
    /// `SNUG_OIDC_SESSION_MAX_AGE`). `None` if the credential no longer admits anyone (revoked,
    /// disabled, removed since the caller was identified): the caller answers its 401.
    pub async fn start_session(
        &self,
        source: SessionSource<'_>,
    ) -> Result<Option<StartedSession>, ApiError> {
        let (Some(users), Some(key)) = (&self.users, &self.key) else {
            return Err(unauthenticated("authentication is off on this hub"));
        };
        let now = session::now_ms();
        let started = match source {
            SessionSource::HubToken(token) => {
                users
                    .start_token_session(token, directory_time(now), session::SESSION_TTL)
                    .await
            }
            SessionSource::Identity(identity) => {
                // Without OpenID Connect configured no identity session could be admitted.
                let Some(oidc) = &self.oidc else {
                    return Ok(None);
                };
                users
                    .start_identity_session(identity, directory_time(now), oidc.session_lifetime())
                    .await
            }
        }
        .map_err(|err| self.store_failed(err))?;
        Ok(started.map(|started| {
            let expires_at_ms = u64::try_from(started.expires_at).unwrap_or(0);
            StartedSession {
                cookie: key.sign(&started.user.id, &started.id, expires_at_ms),
                lifetime: Duration::from_millis(expires_at_ms.saturating_sub(now)),
                expires_at_ms,
                user: started.user,
            }
        }))
    }

    /// Ends the session the request's cookie names, if its seal is ours (logout): the record
    /// goes, so that cookie, wherever a copy of it was kept, is refused by every replica.
    pub async fn end_session(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let (Some(users), Some(key)) = (&self.users, &self.key) else {
            return Ok(());
        };
        // An expired cookie's record is ended too: `exp` does not matter to a deletion.
        let named = session::cookie(headers, SESSION_COOKIE).and_then(|value| key.verify(value, 0));
        if let Some(cookie) = named {
            users
                .end_session(&cookie.session_id)
                .await
                .map_err(|err| self.store_failed(err))?;
        }
        Ok(())
    }

    fn store_failed(&self, err: UsersError) -> ApiError {
        let backend = self.users.as_deref().map_or("none", Directory::backend);
        tracing::error!(error = %err, backend, "the users directory failed");
        ApiError::unavailable("the hub cannot check credentials right now; retry shortly")
    }

    /// Identifies the caller of a write: as [`Auth::identify`], plus the CSRF check (403) for a
    /// cookie session.
    pub async fn identify_for_write(
        &self,
        headers: &HeaderMap,
        what: &str,
    ) -> Result<Identity, ApiError> {
        let identity = self.identify(headers).await?;
        if identity.needs_csrf() && !session::csrf_ok(headers) {
            return Err(ApiError::from_reason(
                &snug_reasons::gateway::CSRF_REJECTED,
                format!("{what} requires the x-snug-csrf header matching the snug_csrf cookie"),
            ));
        }
        Ok(identity)
    }
}
