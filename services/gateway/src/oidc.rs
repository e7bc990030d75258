//! OpenID Connect at the gateway: bearer JWTs from configured issuers, first-login provisioning,
//! and the browser login (`GET /auth/login` → the issuer → `GET /auth/callback` → the hub's own
//! session and CSRF cookies).
//!
//! The rules of a token are `snug-identity`'s (pure); this module does the I/O around them:
//! - discovery is fetched lazily, on the first token or login of an issuer, and again on the next
//!   one if it failed; its `issuer` must equal the configured URL exactly;
//! - each issuer's JWKS is cached; it is fetched again when a token names an unknown `kid` or
//!   the cache is older than [`KEYS_MAX_AGE`], at most [`REFETCH_BURST`] times per
//!   `SNUG_OIDC_JWKS_MIN_INTERVAL` (default [`DEFAULT_REFETCH_INTERVAL`]) per issuer, whatever
//!   the outcome: a flood of forged `kid`s costs the issuer a few requests per interval, and a
//!   key rotated in just after a stray unknown `kid` is still fetched at once;
//! - a fetch runs outside the cache's lock: tokens whose keys are cached are verified while it
//!   is in flight (a slow issuer delays only the tokens that need its answer), and callers that
//!   need the same fetch wait for it rather than making their own;
//! - a key the hub cannot use (an RSA modulus under 2,048 bits, broken parameters) is skipped,
//!   not fatal to its set (`snug_identity::KeySet::parse`);
//! - issuers are https (verified against the compiled-in web PKI roots, as the image has no CA
//!   store), or plain http on a loopback address only; the client follows no redirects;
//! - every refusal is the uniform 401 `UNAUTHENTICATED` hub tokens get; the cause is logged only;
//! - the first valid token of a new issuer + subject creates the user record through
//!   [`Provision`], and nothing else (no image); a disabled user's valid token is the same 401.
//!
//! The browser flow is the authorization code flow with PKCE S256, `state` and `nonce`; what the
//! callback must check is sealed into a short-lived HttpOnly cookie with the session key
//! (`snug_identity::Flow`), so any replica can finish a flow another began. `return_to` is a path
//! on the hub or an origin listed in `SNUG_CORS_ORIGINS` (400 otherwise).
//!
//! A session made from an issuer's token (the callback's, or a JWT given to `POST /auth/session`)
//! is bound to the identity and to when that token was presented. It is admitted for at most
//! `SNUG_OIDC_SESSION_MAX_AGE` from then (default [`DEFAULT_SESSION_MAX_AGE`], 12 hours: a
//! working day without a second login, and a group membership removed at the issuer locks the
//! user out the same day), and only while its issuer is still configured. The bound is checked
//! on every request against the current setting, so lowering it shortens every session at once;
//! raising it lengthens none already started (their records and cookies expire as they were made).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{
    extract::{Query, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use base64::Engine as _;
use snug_identity::{Claims, Discovery, Flow, KeySet, Policy, Refusal};
use tokio::sync::Mutex;

use crate::{
    AppState,
    error::ApiError,
    session::{self, SessionSource},
};

/// Longest a key set is trusted before it is fetched again on the next token.
pub const KEYS_MAX_AGE: Duration = Duration::from_secs(15 * 60);
/// Default least time between two fetches of one issuer's documents.
pub const DEFAULT_REFETCH_INTERVAL: Duration = Duration::from_secs(30);

/// JWKS fetches allowed per issuer within one refetch interval.
pub const REFETCH_BURST: usize = 3;
/// How long a browser has to come back from the issuer.
pub const LOGIN_TTL_SECS: u64 = 600;
/// Default longest age of an OpenID Connect session, from its issuer's token's presentation.
pub const DEFAULT_SESSION_MAX_AGE: Duration = Duration::from_secs(12 * 60 * 60);
/// The cookie holding the login flow.
pub const FLOW_COOKIE: &str = "snug_oidc_flow";
/// The path of the callback, under `SNUG_PUBLIC_URL`.
pub const CALLBACK_PATH: &str = "/auth/callback";
/// Timeout of every request to an issuer.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest document accepted from an issuer.
const MAX_DOCUMENT: usize = 1 << 20;

pub use crate::config::OidcArgs;

pub use crate::config::CLIENT_SECRET_ENV;

/// Why the OpenID Connect settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OidcConfigError {
    /// An issuer URL that is not https (or http on loopback).
    #[error("SNUG_OIDC_ISSUER: {0}")]
    Issuer(#[from] snug_identity::UrlError),
    /// The audience, user claim or required claim.
    #[error("OpenID Connect: {0}")]
    Policy(#[from] snug_identity::PolicyError),
    /// An issuer without an audience.
    #[error("SNUG_OIDC_ISSUER is set but SNUG_OIDC_AUDIENCE is not")]
    NoAudience,
    /// `SNUG_PUBLIC_URL` is not a base URL.
    #[error("SNUG_PUBLIC_URL: {0}")]
    PublicUrl(snug_identity::UrlError),
    /// OpenID Connect with auth off.
    #[error("SNUG_OIDC_ISSUER needs authentication on (SNUG_AUTH=on)")]
    AuthOff,
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client for the issuers: {0}")]
    Client(String),
    /// A session bound of zero: every browser login would end at once.
    #[error("SNUG_OIDC_SESSION_MAX_AGE must be longer than 0 (the default is 12h)")]
    SessionMaxAge,
}

/// A verified login: who, according to which issuer.
pub type VerifiedClaims = Claims;

/// A caller an OpenID Connect bearer token admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcCaller {
    /// Their user record.
    pub user: ProvisionedUser,
    /// A short, non-secret id of the token, as the ledgers record it (`oidc:` + hex).
    pub token_id: String,
    /// The token's issuer.
    pub issuer: String,
    /// The subject it names (`sub`, or the configured claim).
    pub subject: String,
}

/// A user record as the hub's directory returns it for a provisioned identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionedUser {
    /// The stable user id (the sync service keys the image by it).
    pub id: String,
    /// The user's name.
    pub name: String,
    /// The user's own image quota, if the directory sets one.
    pub quota_bytes: Option<u64>,
}

/// The seam to the users directory: find the user of `issuer` + `subject`, creating the user
/// record (only) on first login; `None` for a disabled user.
pub trait Provision: Send + Sync + std::fmt::Debug {
    /// See the trait docs.
    fn provision<'a>(
        &'a self,
        claims: &'a Claims,
    ) -> futures::future::BoxFuture<'a, Result<Option<ProvisionedUser>, ProvisionError>>;
}

/// Why an identity was not provisioned.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// The token's identity can never be a user's (a subject over the directory's limit, a
    /// control character): the token is refused like any other bad token.
    #[error("unusable identity: {0}")]
    Unusable(String),
    /// The directory failed; retry later.
    #[error("the users directory failed: {0}")]
    Unavailable(String),
}

/// The browser login's settings.
#[derive(Debug, Clone)]
struct Login {
    client_id: String,
    client_secret: Option<String>,
    redirect_uri: String,
    /// The ID token's audience is the client.
    policy: Policy,
}

/// What is known of one issuer.
#[derive(Debug)]
struct Issuer {
    url: String,
    /// Held only to read or update, never across a request to the issuer.
    state: std::sync::Mutex<IssuerState>,
    /// Held by the caller fetching the keys; others that need the same answer wait for it.
    fetching: Mutex<()>,
}

#[derive(Debug, Default)]
struct IssuerState {
    discovery: Option<Discovery>,
    keys: Option<(Arc<KeySet>, Instant)>,
    /// When the fetches of the last interval were made.
    fetches: std::collections::VecDeque<Instant>,
}

impl Issuer {
    fn state(&self) -> std::sync::MutexGuard<'_, IssuerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cached(&self) -> Option<(Arc<KeySet>, Instant)> {
        self.state()
            .keys
            .as_ref()
            .map(|(keys, at)| (Arc::clone(keys), *at))
    }

    /// Whether a fetch may be made now (at most [`REFETCH_BURST`] per `interval`); counts it.
    fn may_fetch(&self, interval: Duration) -> bool {
        let mut state = self.state();
        while state
            .fetches
            .front()
            .is_some_and(|at| at.elapsed() >= interval)
        {
            state.fetches.pop_front();
        }
        if state.fetches.len() >= REFETCH_BURST {
            return false;
        }
        state.fetches.push_back(Instant::now());
        true
    }
}

/// The gateway's OpenID Connect: issuers, their cached keys, the policy, the provisioning seam.
#[derive(Debug)]
pub struct Oidc {
    issuers: Vec<Issuer>,
    policy: Policy,
    login: Option<Login>,
    refetch_interval: Duration,
    session_max_age: Duration,
    client: reqwest::Client,
    provision: Arc<dyn Provision>,
}

fn now_secs() -> u64 {
    session::now_ms() / 1000
}

/// Why a token or login was refused (logged, never shown).
#[derive(Debug, thiserror::Error)]
enum Denied {
    #[error(transparent)]
    Token(#[from] Refusal),
    #[error("the issuer could not be reached or answered badly: {0}")]
    Issuer(String),
}

impl Oidc {
    /// Checks `args`; `None` when no issuer is configured.
    pub fn from_args(
        args: &OidcArgs,
        auth_on: bool,
        provision: Arc<dyn Provision>,
    ) -> Result<Option<Self>, OidcConfigError> {
        let urls: Vec<String> = args
            .issuers
            .iter()
            .map(|u| u.trim().to_owned())
            .filter(|u| !u.is_empty())
            .collect();
        if urls.is_empty() {
            return Ok(None);
        }
        if !auth_on {
            return Err(OidcConfigError::AuthOff);
        }
        for url in &urls {
            snug_identity::check_url(url)?;
        }
        let audience = args
            .audience
            .as_deref()
            .filter(|a| !a.trim().is_empty())
            .ok_or(OidcConfigError::NoAudience)?;
        let user_claim = args.user_claim.as_deref().filter(|c| !c.trim().is_empty());
        let required = args.required_claim.as_deref();
        let policy = Policy::new(audience, user_claim, required)?;
        let session_max_age = args.session_max_age.unwrap_or(DEFAULT_SESSION_MAX_AGE);
        if session_max_age.is_zero() {
            return Err(OidcConfigError::SessionMaxAge);
        }
        let login = match args.public_url.as_deref().filter(|u| !u.trim().is_empty()) {
            None => None,
            Some(public) => {
                let public = public.trim().trim_end_matches('/');
                snug_identity::check_url(public).map_err(OidcConfigError::PublicUrl)?;
                let client_id = args
                    .client_id
                    .clone()
                    .filter(|c| !c.trim().is_empty())
                    .unwrap_or_else(|| audience.to_owned());
                Some(Login {
                    policy: Policy::new(&client_id, user_claim, required)?,
                    client_id,
                    client_secret: args.client_secret.clone(),
                    redirect_uri: format!("{public}{CALLBACK_PATH}"),
                })
            }
        };
        Ok(Some(Self {
            issuers: urls
                .into_iter()
                .map(|url| Issuer {
                    url,
                    state: std::sync::Mutex::new(IssuerState::default()),
                    fetching: Mutex::new(()),
                })
                .collect(),
            policy,
            login,
            refetch_interval: args.jwks_min_interval.unwrap_or(DEFAULT_REFETCH_INTERVAL),
            session_max_age,
            client: http_client()?,
            provision,
        }))
    }

    fn issuer(&self, url: Option<&str>) -> Result<&Issuer, Refusal> {
        self.issuers
            .iter()
            .find(|i| Some(i.url.as_str()) == url)
            .ok_or_else(|| Refusal::WrongIssuer(url.map(str::to_owned)))
    }

    /// How long a session started now from an issuer's token lasts: the bound, never over the
    /// seven days of any session.
    pub fn session_lifetime(&self) -> Duration {
        self.session_max_age.min(session::SESSION_TTL)
    }

    /// Whether a session of `issuer`'s identity, whose token was presented at `presented_at`,
    /// is still admitted at `now` (both Unix milliseconds): within the bound, and the issuer
    /// still one of the hub's.
    pub fn admits_session(&self, issuer: &str, presented_at: i64, now: i64) -> bool {
        let bound = i64::try_from(self.session_max_age.as_millis()).unwrap_or(i64::MAX);
        self.issuers.iter().any(|i| i.url == issuer) && presented_at.saturating_add(bound) > now
    }

    /// Judges a bearer JWT: the caller it names, or the uniform 401.
    pub async fn identify(&self, token: &str) -> Result<OidcCaller, ApiError> {
        let claims = self.verify(token, &self.policy).await.map_err(|why| {
            tracing::info!(reason = %why, "an OpenID Connect token was refused");
            unauthenticated()
        })?;
        let user = self.provisioned(&claims).await?;
        Ok(OidcCaller {
            token_id: format!("oidc:{}", short_id(token)),
            user,
            issuer: claims.issuer,
            subject: claims.subject,
        })
    }

    async fn provisioned(&self, claims: &Claims) -> Result<ProvisionedUser, ApiError> {
        match self.provision.provision(claims).await {
            Ok(Some(user)) => Ok(user),
            Ok(None) => {
                tracing::info!(issuer = %claims.issuer, subject = %claims.subject, "a disabled user's valid token was refused");
                Err(unauthenticated())
            }
            Err(ProvisionError::Unusable(why)) => {
                tracing::info!(issuer = %claims.issuer, reason = %why, "an OpenID Connect token's identity cannot be a user's");
                Err(unauthenticated())
            }
            Err(err) => {
                tracing::error!(error = %err, "the users directory failed");
                Err(ApiError::unavailable(
                    "the hub cannot check credentials right now; retry shortly",
                ))
            }
        }
    }

    async fn verify(&self, token: &str, policy: &Policy) -> Result<Claims, Denied> {
        let unverified = snug_identity::peek(token)?;
        let issuer = self.issuer(unverified.issuer.as_deref())?;
        let keys = self.keys(issuer, false).await?;
        match snug_identity::verify(token, &issuer.url, &keys, policy, now_secs()) {
            Err(Refusal::UnknownKid(_)) => {
                // Perhaps the issuer rotated: fetch again, unless it was fetched too recently.
                let keys = self.keys(issuer, true).await?;
                Ok(snug_identity::verify(
                    token,
                    &issuer.url,
                    &keys,
                    policy,
                    now_secs(),
                )?)
            }
            other => Ok(other?),
        }
    }

    /// The issuer's keys: the cached set, or a fresh one when there is none, it is too old, or
    /// `unknown_kid` asks, as far as the refetch budget allows.
    async fn keys(&self, issuer: &Issuer, unknown_kid: bool) -> Result<Arc<KeySet>, Denied> {
        let asked = Instant::now();
        let cached = issuer.cached();
        let stale = match &cached {
            None => true,
            Some((_, fetched)) => unknown_kid || fetched.elapsed() >= KEYS_MAX_AGE,
        };
        let none_yet = || Denied::Issuer(format!("no keys of {} yet", issuer.url));
        if !stale {
            return cached.map(|(keys, _)| keys).ok_or_else(none_yet);
        }
        // A set that is only old serves its callers while one of them refreshes it; a caller
        // that needs a new set (none yet, or an unknown kid) waits for the fetch in flight.
        let _fetching = match (&cached, unknown_kid) {
            (Some((keys, _)), false) => match issuer.fetching.try_lock() {
                Ok(guard) => guard,
                Err(_) => return Ok(Arc::clone(keys)),
            },
            _ => issuer.fetching.lock().await,
        };
        // Fetched by another caller while this one waited: that answer is this one's too.
        if let Some((keys, fetched)) = issuer.cached()
            && fetched >= asked
        {
            return Ok(keys);
        }
        if issuer.may_fetch(self.refetch_interval) {
            match self.fetch_keys(issuer).await {
                Ok(keys) => issuer.state().keys = Some((Arc::new(keys), Instant::now())),
                Err(why) => {
                    tracing::warn!(issuer = %issuer.url, error = %why, "cannot refresh the issuer's keys")
                }
            }
        }
        issuer.cached().map(|(keys, _)| keys).ok_or_else(none_yet)
    }

    async fn fetch_keys(&self, issuer: &Issuer) -> Result<KeySet, String> {
        let discovery = self.discovery(issuer).await?;
        let body = self.get(&discovery.jwks_uri).await?;
        KeySet::parse(&body).map_err(|e| e.to_string())
    }

    /// The issuer's discovery document, fetched once (again after a failure), outside the lock.
    async fn discovery(&self, issuer: &Issuer) -> Result<Discovery, String> {
        if let Some(discovery) = &issuer.state().discovery {
            return Ok(discovery.clone());
        }
        let body = self.get(&snug_identity::discovery_url(&issuer.url)).await?;
        let discovery = Discovery::parse(&body, &issuer.url).map_err(|e| e.to_string())?;
        issuer.state().discovery = Some(discovery.clone());
        Ok(discovery)
    }

    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let response = self
            .client
            .get(url)
            .header(header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        read_body(url, response).await
    }

    /// Exchanges an authorization code at the issuer's token endpoint for its ID token.
    async fn exchange(
        &self,
        login: &Login,
        token_endpoint: &str,
        code: &str,
        verifier: &str,
    ) -> Result<String, String> {
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", login.redirect_uri.as_str()),
            ("code_verifier", verifier),
        ];
        let mut request = self.client.post(token_endpoint);
        match &login.client_secret {
            // RFC 6749 §2.3.1: client_secret_basic, id and secret form-encoded first.
            Some(secret) => {
                let basic = format!("{}:{}", form_encode(&login.client_id), form_encode(secret));
                request = request.header(
                    header::AUTHORIZATION,
                    format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode(basic)
                    ),
                );
            }
            None => form.push(("client_id", login.client_id.as_str())),
        }
        let body = form
            .iter()
            .map(|(k, v)| format!("{k}={}", form_encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let response = request
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("POST {token_endpoint}: {e}"))?;
        let body = read_body(token_endpoint, response).await?;
        let answer: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| format!("token endpoint answer: {e}"))?;
        answer
            .get("id_token")
            .and_then(|t| t.as_str())
            .map(str::to_owned)
            .ok_or_else(|| "the token endpoint answered no id_token".to_owned())
    }
}

async fn read_body(url: &str, response: reqwest::Response) -> Result<Vec<u8>, String> {
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url} answered {status}"));
    }
    if response
        .content_length()
        .is_some_and(|n| n > MAX_DOCUMENT as u64)
    {
        return Err(format!("{url} answered more than {MAX_DOCUMENT} bytes"));
    }
    let bytes = response.bytes().await.map_err(|e| format!("{url}: {e}"))?;
    if bytes.len() > MAX_DOCUMENT {
        return Err(format!("{url} answered more than {MAX_DOCUMENT} bytes"));
    }
    Ok(bytes.to_vec())
}

/// The HTTP client for issuers: rustls on ring with the web PKI roots, no redirects.
fn http_client() -> Result<reqwest::Client, OidcConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| OidcConfigError::Client(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(FETCH_TIMEOUT)
        .build()
        .map_err(|e| OidcConfigError::Client(e.to_string()))
}

/// A short, non-secret id of a token for the ledgers (first hex digits of its SHA-256).
fn short_id(token: &str) -> String {
    use sha2::Digest as _;
    hex::encode(&sha2::Sha256::digest(token.as_bytes())[..4])
}

fn unauthenticated() -> ApiError {
    ApiError::from_reason(
        &snug_reasons::gateway::UNAUTHENTICATED,
        "the bearer token is not valid",
    )
}

fn login_refused(message: &str) -> ApiError {
    ApiError::from_reason(&snug_reasons::gateway::UNAUTHENTICATED, message)
}

fn bad_request(message: &str) -> ApiError {
    ApiError::from_reason(&snug_reasons::gateway::BAD_REQUEST, message)
}

fn no_login() -> ApiError {
    ApiError::from_reason(
        &snug_reasons::gateway::NO_ROUTE,
        "browser login is not configured on this hub (SNUG_OIDC_ISSUER and SNUG_PUBLIC_URL)",
    )
}

/// Percent-encodes a form or query value (RFC 3986 unreserved characters pass).
pub fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Where a finished login may send the browser: a path on the hub (`/…`, not `//…`), or a URL
/// on an origin of `origins` (normalised as `config::parse_origin` does). `None` otherwise.
pub fn checked_return_to(return_to: Option<&str>, origins: &[String]) -> Option<String> {
    let Some(target) = return_to.filter(|t| !t.is_empty()) else {
        return Some("/".to_owned());
    };
    if target.chars().any(|c| c.is_control() || c == '\\') {
        return None;
    }
    if target.starts_with('/') {
        return (!target.starts_with("//")).then(|| target.to_owned());
    }
    let (scheme, rest) = target.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    let origin = format!(
        "{}://{}",
        scheme.to_ascii_lowercase(),
        authority.to_ascii_lowercase()
    );
    origins.contains(&origin).then(|| target.to_owned())
}

/// The query of `GET /auth/login`.
#[derive(Debug, serde::Deserialize)]
pub struct LoginQuery {
    return_to: Option<String>,
    issuer: Option<String>,
}

/// The query of `GET /auth/callback`.
#[derive(Debug, serde::Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

fn secure(headers: &HeaderMap) -> &'static str {
    if session::plain_http_on_loopback(headers) {
        ""
    } else {
        "; Secure"
    }
}

fn redirect(to: &str, cookies: &[String]) -> Result<Response, ApiError> {
    let location = HeaderValue::from_str(to)
        .map_err(|_| bad_request("the redirect target is not a valid header value"))?;
    let mut response = (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, location),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
    )
        .into_response();
    for cookie in cookies {
        if let Ok(value) = HeaderValue::from_str(cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    Ok(response)
}

/// `GET /auth/login`: sends the browser to the issuer's authorization endpoint.
pub async fn login(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    query: Result<Query<LoginQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let (Some(oidc), Some(key)) = (state.auth.oidc(), state.auth.key()) else {
        return Err(no_login());
    };
    let Some(login) = &oidc.login else {
        return Err(no_login());
    };
    let Query(query) =
        query.map_err(|_| bad_request("GET /auth/login takes return_to and issuer"))?;
    let return_to = checked_return_to(query.return_to.as_deref(), &state.settings.cors_origins)
        .ok_or_else(|| {
            bad_request(
                "return_to must be a path on this hub or a URL on an origin in SNUG_CORS_ORIGINS",
            )
        })?;
    let issuer = match query.issuer.as_deref() {
        None => &oidc.issuers[0],
        Some(url) => oidc
            .issuer(Some(url))
            .map_err(|_| bad_request("issuer is not one of the hub's issuers"))?,
    };
    let discovery = oidc.discovery(issuer).await.map_err(|why| {
        tracing::warn!(issuer = %issuer.url, error = %why, "cannot read the issuer's discovery document");
        ApiError::unavailable("the identity provider cannot be reached; retry shortly")
    })?;
    let Some(endpoint) = discovery.authorization_endpoint else {
        return Err(no_login());
    };
    let mut random = [0u8; snug_identity::flow::RANDOM_BYTES];
    getrandom::fill(&mut random)
        .map_err(|_| ApiError::unavailable("the system random number generator failed"))?;
    let flow = Flow::new(&issuer.url, &return_to, &random, now_secs(), LOGIN_TTL_SECS);
    let sep = if endpoint.contains('?') { '&' } else { '?' };
    let target = format!(
        "{endpoint}{sep}response_type=code&client_id={}&redirect_uri={}&scope=openid%20profile%20email&state={}&nonce={}&code_challenge={}&code_challenge_method=S256",
        form_encode(&login.client_id),
        form_encode(&login.redirect_uri),
        flow.state,
        flow.nonce,
        flow.challenge(),
    );
    // SameSite=Lax: the issuer's redirect back is a top-level GET, which Lax cookies ride on.
    let cookie = format!(
        "{FLOW_COOKIE}={}; Path={CALLBACK_PATH}; Max-Age={LOGIN_TTL_SECS}; HttpOnly; SameSite=Lax{}",
        flow.seal(key.secret()),
        secure(&headers)
    );
    redirect(&target, &[cookie])
}

/// `GET /auth/callback`: checks the flow, exchanges the code, verifies the ID token and its
/// nonce, provisions the user, and starts the hub's own session.
pub async fn callback(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    query: Result<Query<CallbackQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let (Some(oidc), Some(key)) = (state.auth.oidc(), state.auth.key()) else {
        return Err(no_login());
    };
    let Some(login) = &oidc.login else {
        return Err(no_login());
    };
    let Query(query) = query.map_err(|_| bad_request("GET /auth/callback takes code and state"))?;
    let flow = session::cookie(&headers, FLOW_COOKIE)
        .ok_or_else(|| bad_request("no login in progress in this browser; start at /auth/login"))
        .and_then(|value| {
            Flow::open(value, key.secret(), now_secs()).map_err(|why| bad_request(&why.to_string()))
        })?;
    if !query
        .state
        .as_deref()
        .is_some_and(|s| flow.state_matches(s))
    {
        return Err(bad_request(
            "the login's state does not match; start again at /auth/login",
        ));
    }
    if let Some(error) = &query.error {
        tracing::info!(error = %error, "the issuer refused the login");
        return Err(login_refused("the identity provider did not log you in"));
    }
    let code = query
        .code
        .as_deref()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| bad_request("the callback has no code"))?;
    let issuer = oidc
        .issuer(Some(&flow.issuer))
        .map_err(|_| bad_request("the login names an issuer this hub no longer trusts"))?;
    let discovery = oidc.discovery(issuer).await.map_err(|why| {
        tracing::warn!(issuer = %issuer.url, error = %why, "cannot read the issuer's discovery document");
        ApiError::unavailable("the identity provider cannot be reached; retry shortly")
    })?;
    let token_endpoint = discovery.token_endpoint.ok_or_else(no_login)?;
    let id_token = oidc
        .exchange(login, &token_endpoint, code, &flow.verifier)
        .await
        .map_err(|why| {
            tracing::info!(error = %why, "the code exchange failed");
            login_refused("the identity provider did not confirm the login")
        })?;
    let claims = oidc.verify(&id_token, &login.policy).await.map_err(|why| {
        tracing::info!(reason = %why, "the ID token was refused");
        login_refused("the identity provider's answer was not valid")
    })?;
    if claims.issuer != flow.issuer || claims.nonce.as_deref() != Some(flow.nonce.as_str()) {
        tracing::info!("the ID token's issuer or nonce is not the flow's");
        return Err(login_refused(
            "the identity provider's answer was not valid",
        ));
    }
    oidc.provisioned(&claims).await?;
    let identity = snug_users::OidcIdentity {
        issuer: claims.issuer,
        subject: claims.subject,
    };
    // The session is bound to the identity and to now, when the issuer's token was presented.
    let started = state
        .auth
        .start_session(SessionSource::Identity(&identity))
        .await?
        .ok_or_else(|| login_refused("the identity provider did not log you in"))?;
    let csrf = session::new_csrf()
        .ok_or_else(|| ApiError::unavailable("the system random number generator failed"))?;
    let secure_flag = secure(&headers);
    let [session_cookie, csrf_cookie] = session::set_cookies(
        &started.cookie,
        &csrf,
        !secure_flag.is_empty(),
        started.lifetime,
    );
    let clear_flow = format!(
        "{FLOW_COOKIE}=; Path={CALLBACK_PATH}; Max-Age=0; HttpOnly; SameSite=Lax{secure_flag}"
    );
    redirect(&flow.return_to, &[session_cookie, csrf_cookie, clear_flow])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_to_is_a_hub_path_or_a_listed_origin() {
        let origins = vec![
            "https://app.example".to_owned(),
            "http://localhost:5173".to_owned(),
        ];
        for (given, want) in [
            (None, Some("/")),
            (Some(""), Some("/")),
            (Some("/userdb"), Some("/userdb")),
            (
                Some("https://app.example/after?x=1"),
                Some("https://app.example/after?x=1"),
            ),
            (Some("https://APP.example"), Some("https://APP.example")),
            (
                Some("http://localhost:5173/"),
                Some("http://localhost:5173/"),
            ),
            (Some("//evil.example/x"), None),
            (Some("/\\evil.example"), None),
            (Some("https://evil.example/"), None),
            (Some("https://app.example.evil.example/"), None),
            (Some("https://app.example@evil.example/"), None),
            (Some("http://app.example/"), None),
            (Some("javascript:alert(1)"), None),
            (Some("https://app.example:444/"), None),
        ] {
            assert_eq!(
                checked_return_to(given, &origins).as_deref(),
                want,
                "{given:?}"
            );
        }
    }

    #[derive(Debug)]
    struct Nobody;
    impl Provision for Nobody {
        fn provision<'a>(
            &'a self,
            _: &'a Claims,
        ) -> futures::future::BoxFuture<'a, Result<Option<ProvisionedUser>, ProvisionError>>
        {
            Box::pin(async { Ok(None) })
        }
    }

    #[test]
    fn sessions_are_bounded_from_the_presentation_of_the_issuers_token() {
        const ISSUER: &str = "https://id.example";
        let build = |max_age: Option<Duration>| {
            let args = OidcArgs {
                issuers: vec![ISSUER.to_owned()],
                audience: Some("hub".to_owned()),
                session_max_age: max_age,
                ..OidcArgs::default()
            };
            Oidc::from_args(&args, true, Arc::new(Nobody))
        };
        assert!(matches!(
            build(Some(Duration::ZERO)),
            Err(OidcConfigError::SessionMaxAge)
        ));
        let hour = 3_600_000;
        let presented = 1_700_000_000_000;
        // (bound, issuer, now) → admitted, and the lifetime a session started now gets.
        let cases: [(Option<Duration>, &str, i64, bool); 7] = [
            (None, ISSUER, presented, true),
            (None, ISSUER, presented + 12 * hour - 1, true),
            (None, ISSUER, presented + 12 * hour, false),
            (
                Some(Duration::from_secs(60)),
                ISSUER,
                presented + 59_999,
                true,
            ),
            (
                Some(Duration::from_secs(60)),
                ISSUER,
                presented + 60_000,
                false,
            ),
            // An issuer the hub no longer trusts admits none of its sessions.
            (None, "https://other.example", presented, false),
            (
                Some(Duration::from_secs(30 * 86_400)),
                ISSUER,
                presented + 29 * 24 * hour,
                true,
            ),
        ];
        for (bound, issuer, now, admitted) in cases {
            let oidc = build(bound).expect("settings").expect("on");
            assert_eq!(
                oidc.admits_session(issuer, presented, now),
                admitted,
                "{bound:?} {issuer} +{}ms",
                now - presented
            );
        }
        let lifetime = |bound| build(bound).expect("ok").expect("on").session_lifetime();
        assert_eq!(lifetime(None), DEFAULT_SESSION_MAX_AGE);
        assert_eq!(
            lifetime(Some(Duration::from_secs(60))),
            Duration::from_secs(60)
        );
        assert_eq!(
            lifetime(Some(Duration::from_secs(30 * 86_400))),
            session::SESSION_TTL,
            "no session outlives seven days, whatever the bound"
        );
    }

    #[test]
    fn settings_refuse_plain_http_issuers_and_missing_audiences() {
        let args = |issuer: &str, audience: Option<&str>| OidcArgs {
            issuers: vec![issuer.to_owned()],
            audience: audience.map(str::to_owned),
            ..OidcArgs::default()
        };
        let build = |a: &OidcArgs, on| Oidc::from_args(a, on, Arc::new(Nobody));
        assert!(matches!(build(&OidcArgs::default(), true), Ok(None)));
        assert!(matches!(
            build(&args("http://id.example", Some("hub")), true),
            Err(OidcConfigError::Issuer(_))
        ));
        assert!(matches!(
            build(&args("https://id.example", None), true),
            Err(OidcConfigError::NoAudience)
        ));
        assert!(matches!(
            build(&args("https://id.example", Some("hub")), false),
            Err(OidcConfigError::AuthOff)
        ));
        let mut bad_claim = args("https://id.example", Some("hub"));
        bad_claim.required_claim = Some("groups".into());
        assert!(matches!(
            build(&bad_claim, true),
            Err(OidcConfigError::Policy(_))
        ));
        let mut bad_public = args("http://127.0.0.1:1", Some("hub"));
        bad_public.public_url = Some("http://hub.example".into());
        assert!(matches!(
            build(&bad_public, true),
            Err(OidcConfigError::PublicUrl(_))
        ));
        bad_public.public_url = Some("https://hub.example/".into());
        let ok = build(&bad_public, true).expect("ok").expect("on");
        assert_eq!(
            ok.login.as_ref().map(|l| l.redirect_uri.as_str()),
            Some("https://hub.example/auth/callback")
        );
    }
}
