//! Who is calling: a bearer token, a session cookie, or (auth off) the local user.
//!
//! A request with an `Authorization` header is judged by it alone: a bad token is 401 even if a
//! valid cookie rides along, so a client never silently acts as someone else. Cookie-authenticated
//! writes must pass the CSRF double-submit check; bearer requests are exempt, because a browser
//! never attaches a bearer token by itself, so a cross-site page cannot make it send one.

use std::sync::Arc;

use axum::http::{HeaderMap, header};

use crate::{
    backend::Caller,
    config::AuthMode,
    error::{ApiError, reason},
    oidc::Oidc,
    rate::RateLimits,
    session::{self, SESSION_COOKIE, SessionKey},
};
use snug_users::{Directory, UsersError};

/// The one user of a gateway with auth off.
pub const LOCAL_USER: &str = "local";

/// How the caller proved who they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// A bearer token; the token's short id.
    Bearer(String),
    /// The session cookie.
    Session,
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
            Via::Bearer(token) => format!("token:{token}"),
            Via::Session => "session".to_owned(),
            Via::Local => LOCAL_USER.to_owned(),
        };
        Caller {
            user_id: self.user_id.clone(),
            principal: format!("{}/{principal}", self.name),
            quota_bytes: self.quota_bytes,
        }
    }

    /// Whether a write by this caller needs the CSRF header.
    pub fn needs_csrf(&self) -> bool {
        self.via == Via::Session
    }
}

/// The authenticator: the mode, the users directory and the session key.
///
/// Nothing about a credential is cached: every request reads the directory, so a token revoked,
/// a user disabled or removed (on any replica, or by `snug-hub users`) is refused by every
/// gateway on its next request after the change commits.
#[derive(Debug, Clone)]
pub struct Auth {
    mode: AuthMode,
    users: Option<Arc<Directory>>,
    key: Option<SessionKey>,
    rate_limits: Option<Arc<RateLimits>>,
    oidc: Option<Arc<Oidc>>,
}

fn unauthenticated(message: &str) -> ApiError {
    ApiError::from_reason(reason::UNAUTHENTICATED, message)
}

impl Auth {
    /// Auth off: everyone is [`LOCAL_USER`].
    pub fn off() -> Self {
        Self {
            mode: AuthMode::Off,
            users: None,
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
        Self {
            mode: AuthMode::On,
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

    async fn authenticate(&self, headers: &HeaderMap) -> Result<Identity, ApiError> {
        let (Some(users), Some(key)) = (&self.users, &self.key) else {
            return Ok(Identity {
                user_id: LOCAL_USER.to_owned(),
                name: LOCAL_USER.to_owned(),
                via: Via::Local,
                quota_bytes: None,
            });
        };
        let store_failed = |err: UsersError| {
            tracing::error!(error = %err, backend = users.backend(), "the users directory failed");
            ApiError::unavailable("the hub cannot check credentials right now; retry shortly")
        };
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
                    via: Via::Bearer(caller.token_id),
                    quota_bytes: caller.user.quota_bytes,
                });
            }
            // Unknown, revoked and disabled are one answer.
            let found = users
                .authenticate_token(token)
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
            let user_id = key
                .verify(value, session::now_ms())
                .ok_or_else(|| unauthenticated("no valid session"))?;
            let user = users
                .user_by_id(&user_id)
                .await
                .map_err(store_failed)?
                .ok_or_else(|| unauthenticated("no valid session"))?;
            return Ok(Identity {
                user_id: user.id,
                name: user.name,
                via: Via::Session,
                quota_bytes: user.quota_bytes,
            });
        }
        Err(unauthenticated("no valid session or bearer token"))
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
                reason::CSRF_REJECTED,
                format!("{what} requires the x-snug-csrf header matching the snug_csrf cookie"),
            ));
        }
        Ok(identity)
    }
}
