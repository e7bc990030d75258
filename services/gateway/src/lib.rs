//! The hub's HTTP gateway: `/userdb` (spec §9.3) and its revisions, composed from the
//! `snug.sync.v1` (and, for per-app export, `snug.materialize.v1`) services over gRPC.
//!
//! - [`routes`]: the handlers and the route table the OpenAPI document (`openapi.json`) describes;
//! - [`auth`], [`session`]: bearer tokens (checked against the users directory, `snug-users`:
//!   the gateway's own SQLite file, or PostgreSQL shared by every replica), signed session cookies
//!   with CSRF double-submit, or auth off for one local user;
//! - [`oidc`], [`provision`]: OpenID Connect bearer tokens beside the hub's own, first-login
//!   provisioning into the users directory, and the browser login (`/auth/login`, `/auth/callback`);
//! - [`cors`]: fail-closed CORS for an explicit origin list;
//! - [`rate`]: rate limits, a token bucket per client address (at the edge, before anyone is
//!   authenticated, as the reference answers 429 before 401) and per authenticated user;
//! - [`error`]: the one table from an `ErrorInfo` reason to an HTTP status and JSON code;
//! - [`backend`]: the gRPC clients, every call under a deadline;
//! - [`config`]: flags, environment, and the checks that refuse an unsafe start;
//! - [`observe`]: the request span (parented on a client's `traceparent`) and the HTTP metrics;
//! - [`zero_copy`]: connections that send sealed buffers with `sendfile` instead of copying them.
//!
//! Layer order, outermost first (see [`app`]): observation (so shed and refused requests are
//! traced and counted too), CORS (so a browser can read even a 401 or 503), the Host guard when
//! auth is off, load shedding in front of one global concurrency limit (a burst beyond the limit
//! is answered 503 at once instead of queueing), then the routes. Deadlines are per gRPC call, not per HTTP request:
//! a 64 MiB download to a slow client may rightly take longer than any one call.
//!
//! What this crate deliberately does not do: look inside a user database, hold or store one, or
//! link any domain crate (checked by `tests/tests/tidy.rs`). A body is streamed on as it arrives
//! ([`upload`]); validating, scrubbing and storing an image are the sync service's, which owns
//! every write. The gateway's only judgements of a body are HTTP's: its media type, a declared
//! length over the caller's quota (refused before the body is read), and its leading bytes.
//!
//! # Design notes
//!
//! (Moved from ARCHITECTURE.md, which stays a map.)
//!
//! Layer order, outermost first: observation (`observe.rs`: the request span and metrics) → CORS (so a browser can read a 401 or 503) →
//! closing the connection after a refused upload → Host guard (auth off only) → the per-address
//! rate limit (auth on; health probes exempt) → load shedding in
//! front of one global concurrency limit (`SNUG_HTTP_CONCURRENCY_LIMIT`; beyond it 503 at once) →
//! routes. The first four are one middleware (`edge` in `lib.rs`) and the stack is one
//! `Router::layer`: axum boxes every route's service once per layer and clones that box on every
//! request, which as four layers cost a tenth of a small GET.
//! Connections are `zero_copy::ZeroCopyStream`s: a response buffer the store sealed (its small
//! images, and large ones within `SNUG_ZERO_COPY_CACHE_MIB`, when it runs in this process, as in
//! `snug-hub serve`, which hands the store and [`build`] the same `snug_files::sealed::Sealer`)
//! goes out with `sendfile` from the
//! sealed memfd, the response head before it with `MSG_MORE`, so the kernel hands the socket page
//! references instead of copying the image (what nginx's `sendfile on` does for a file); every other
//! buffer, and every platform or sandbox without `sendfile`, is written as by a plain `TcpStream`.
//! Deadlines are per gRPC call (`SNUG_RPC_DEADLINE`, wrapped around the whole call, because a server
//! that accepts TCP and never answers would otherwise hold a request forever), not per HTTP request:
//! a 64 MiB download to a slow client may rightly outlast any one call; a download's chunks must each
//! arrive within the deadline.
//! An upload that goes idle for `SNUG_UPLOAD_IDLE_TIMEOUT` is abandoned.
//!
//! `PUT /userdb` checks in the reference's order (401 → 403 → 415 → 413 from `Content-Length` →
//! 400 by leading bytes → 428 → 413 while streaming → 400 from validation → 412 → 204), except that
//! authentication comes first (the reference's body parser answers 413 before it authenticates).
//! Everything after the leading bytes is the sync service's (PutImage): the body is streamed to
//! it as it arrives, each piece within `SNUG_UPLOAD_IDLE_TIMEOUT`, and the call's deadline starts
//! once the body has ended. A body that breaks off or stalls is answered 400 `BODY_INCOMPLETE`
//! while the call is dropped, so the service keeps nothing.
//! `If-Match` takes quoted or bare revisions; `*`, lists and weak tags are compared with the current
//! revision (HeadImage) per RFC 9110; `If-None-Match: *` is the first write; `If-Match` wins if both.
//! ETags are strong and quoted; `Repr-Digest` (RFC 9530) is the stored SHA-256;
//! `Snug-Storage-Version` is the recorded storage version (absent when unknown), and revision JSON
//! carries it as `storageVersion` (null when unknown). Conditional GET (`If-None-Match`) answers 304
//! from HeadImage, without a download.
//! `GET|HEAD /userdb/revisions/{rev}` serve one retained revision (GetImage / HeadImage with
//! `revision`) with exactly the headers of `/userdb` and the same 304 rule; an unknown, reclaimed,
//! malformed (even undecodable) or another user's revision is one identical 404 `NOT_FOUND`.
//! Delta sync (issue 21): `POST /userdb/revisions/{rev}/plan` streams a push manifest to
//! PlanImageDelta and its layout back; `PUT /userdb/delta` (`If-Match` names the base) streams the
//! delta to PutImageDelta, which assembles, validates and stores the image under must-match of the
//! base (204 with the ETag); `POST /userdb/delta` (a manifest, or `?base=<rev>` and no body)
//! streams GetImageDelta's delta back with the revision's ETag. Their bounds are the sync
//! service's (`snug_delta::Limits`), which refuses a declared length over them before any chunk.
//! The per-app export pipes the sync download chunk by chunk into ExportApp and streams its answer
//! on: the gateway holds neither file.
//!
//! Auth (`SNUG_AUTH`): `on` (the default on a non-loopback address) or `off` (the default on a
//! loopback address, so `snug-hub serve` runs with no setup: every request is the user `local`).
//! With auth off the hub refuses to listen on a non-loopback address, and answers only requests whose
//! `Host` is a loopback name (421 otherwise): any web page can make a browser reach 127.0.0.1, and DNS
//! rebinding can make it look same-origin, but the `Host` it sends still names the attacker's domain.
//! The remaining risk is any local process or user of the machine, which can read and write the
//! image; use auth on for a machine that is shared.
//! With auth on:
//! - users and bearer tokens live in the users directory (`snug-users`): by default the gateway's
//!   own SQLite file `<SNUG_DATA_DIR>/gateway/users.db`, or with `SNUG_USERS_STORE=postgres`
//!   PostgreSQL (`SNUG_USERS_POSTGRES_URL`, `SNUG_USERS_POSTGRES_SCHEMA`), which any number of
//!   gateway replicas share; a token is `snug_` + base64url of 32 random bytes, shown once by
//!   `snug-hub users add NAME` (or `users token NAME`) and stored only as its SHA-256; user ids are
//!   random, so a user removed and re-added under the same name does not inherit the old image;
//!   every request reads the directory (nothing is cached), so a revoked token or a disabled or
//!   removed user is refused by every replica on its next request; a disabled user's tokens and
//!   sessions get the same 401 as unknown ones; the caller's quota override rides in
//!   [`auth::Identity::quota_bytes`];
//! - browsers trade a token for a session with `POST /auth/session` (`Authorization: Bearer …`), which
//!   sets `snug_session` (the reference's format extended by the session's id:
//!   `base64url(JSON{userId, exp, sid})` `.` `base64url(HMAC-SHA256)`, 7 days, HttpOnly,
//!   SameSite=Lax, Path=/, `Secure` unless plain http to a loopback name) and `snug_csrf` (32 random
//!   bytes hex, readable by the page); cookie-authenticated PUT and POST need `x-snug-csrf` equal to
//!   it (403 `CSRF_REJECTED`); bearer requests are exempt;
//! - a session is a record in the users directory (`snug_users::Session`), bound to the credential
//!   it came from: the hub token, or the OpenID Connect identity and when its issuer's token was
//!   presented (the browser login, or `POST /auth/session` with a JWT). Every request with the
//!   cookie reads the record, its user and its credential in one query (the read that finds the
//!   user), so the seal alone admits no one: `POST /auth/logout` deletes the record (and clears
//!   both cookies), and a copy of the cookie saved before is refused after it; revoking the token,
//!   disabling the user (which deletes their sessions: enabling them again revives none) or
//!   removing them end the session on every replica from the next request on. An OpenID Connect
//!   session is refused once its issuer's token was presented more than `SNUG_OIDC_SESSION_MAX_AGE`
//!   ago (default 12 hours, [`oidc::DEFAULT_SESSION_MAX_AGE`]) or its issuer is no longer
//!   configured, so the browser logs in again and the issuer's claims, the required one included,
//!   are checked again. Expired records are pruned as sessions start (at most
//!   `snug_users::PRUNE_BATCH` per start). Cookies from a release without session records (no
//!   `sid`) are refused: their users log in again once;
//! - the session key is `SNUG_SESSION_SECRET` (≥ 32 characters, environment only) or
//!   `<SNUG_DATA_DIR>/gateway/session.key`, generated on first start with mode 0600; with a shared
//!   (PostgreSQL) users directory the secret is required (`ConfigError::SharedUsersNeedSessionSecret`),
//!   since a key each replica generated would refuse the sessions the others issue;
//! - a request with an `Authorization` header is judged by it alone (a bad token is 401 even beside
//!   a valid cookie); a removed user's tokens and sessions stop working at once;
//! - CORS is fail-closed: `SNUG_CORS_ORIGINS` lists the origins (no wildcard; the hub refuses to start
//!   with auth on and an empty list); a listed origin gets credentialed CORS with `ETag`,
//!   `Repr-Digest`, `Retry-After` and `Snug-Storage-Version` exposed and preflights allowing `authorization`, `content-type`,
//!   `if-match`, `if-none-match`, `x-snug-csrf`; any other origin gets no `Access-Control-*` header
//!   at all (written by hand: tower-http's `CorsLayer` sends its other CORS headers to every origin).
//!
//! Every error is JSON `{code, message, retryable}` (+ `revision` on 412), chosen by one table
//! (`error::table()`, built from `snug-reasons`) from the service's `ErrorInfo` reason or the gateway's own; a status without a
//! reason falls back to google.rpc.Code's HTTP mapping, except that any "no answer" (UNAVAILABLE,
//! DEADLINE_EXCEEDED, CANCELLED, a missed deadline) is 503 `SERVICE_UNAVAILABLE` with
//! `Retry-After: 1`. Tests check that every reason `sync.proto` and `materialize.proto` declare, and
//! every reason ValidateSyncImage documents, has a row.
//!
//! The rows (status, JSON `code`, `retryable` per reason) are the HTTP column of
//! `shared/reasons/REASONS.md`, generated from the registry; what the table cannot say: 401 carries
//! `WWW-Authenticate`, every 503 `Retry-After`, and 412 (`REVISION_MISMATCH`, `STALE_REVISION`) the
//! current revision as its `ETag` and in the body's `revision`.
//!
//! SCHEMA_TOO_NEW is 400 here although the service calls it FAILED_PRECONDITION (google.rpc maps that
//! to 400 too): for an upload, the body is what the hub cannot take. `USERDB_TOO_LARGE` and
//! `NOT_FOUND` keep the reference server's words so its clients need no change.
//!
//! # Design notes
//!
//! (Moved from ARCHITECTURE.md, which stays a map; the map's paragraph opens it.)
//!
//! The hub's HTTP surface (§9.3) composed from `snug.sync.v1` and `snug.materialize.v1` over
//! gRPC: `GET|HEAD|PUT /userdb`, `GET /userdb/revisions`,
//! `GET|HEAD /userdb/revisions/{rev}`, `POST /userdb/revisions/{rev}/restore`, `GET /userdb/apps/{appId}/export`, `POST /auth/session`,
//! `POST /auth/logout`, `GET /auth/me`, `GET /openapi.json`, `GET /healthz`, `GET /readyz`.
//! The router is built from one table (`routes::ROUTES`); `openapi.json` (OpenAPI 3.1, hand-written,
//! served as is) is checked against that table and against every status the end-to-end tests observe.
//! The test suite also runs schemathesis against it (see Testing): no 5xx, and no answer it does not promise.
//! **Architecture Invariant:** the gateway links no domain crate (tidy): it knows files only as bytes
//! and the services' contracts; validation and storage are the sync service's, which writes every
//! revision (PutImage, PutImageDelta), and the gateway streams a body to it once without holding it.
//! **Architecture Invariant:** the bytes a client PUTs are the bytes stored and served, never
//! rewritten, with one stated exception: the sync service zeroes the image's free space before it
//! stores it (an export from this project's CLI or library has none, and is stored as sent), so
//! `Repr-Digest`, the revision's `sha256` and the sync service's replay check refer to the stored
//! bytes; GET declares `Content-Length`, so a download that breaks off is visibly short.
//! **Architecture Invariant:** a user can only name their own image: the sync `Caller` is always the
//! authenticated user, and another user's revision is the same 404 as one that never existed.
//!
//! How it works in detail: the module docs of `services/gateway/src/lib.rs`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auth;
pub mod backend;
pub mod config;
pub mod connections;
pub mod cors;
pub mod credentials;
pub mod encoding;
pub mod error;
pub mod etag;
pub mod events;
pub mod linger;
pub mod observe;
pub mod oidc;
pub mod provision;
pub mod rate;
pub mod routes;
pub mod session;
pub mod upload;
pub mod zero_copy;

use std::{future::Future, net::SocketAddr, sync::Arc};

use axum::{
    Router,
    extract::{Request, State},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use snug_files::sealed::Sealer;
use snug_rpc::pace::Pace;
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tracing::Instrument as _;

use crate::{
    auth::Auth,
    backend::Backends,
    config::{AuthMode, ConfigError, GatewayConfig, Settings},
    error::ApiError,
};
use snug_users::{Directory, UsersError};

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    /// The checked configuration.
    pub settings: Settings,
    /// Who is calling.
    pub auth: Auth,
    /// The services.
    pub backends: Backends,
    /// Where the store in this process seals the buffers it keeps, so that the connections send
    /// them with `sendfile`; disabled when the store runs elsewhere.
    pub sealer: Sealer,
    /// The pace every request body must keep (`snug_rpc::pace`).
    pub upload_pace: Pace,
    /// The open event streams (`GET /userdb/events`), ended together at shutdown.
    pub streams: events::Streams,
}

/// What the composition root hands the gateway beside its configuration.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// The sealer of the sync store in this process ([`GatewayConfig::zero_copy_cache_bytes`]),
    /// or a disabled one when the store runs elsewhere.
    pub sealer: Sealer,
    /// The pace every request body must keep: the process's, shared with its services.
    pub upload_pace: Pace,
    /// The token the services at the configured addresses require
    /// (`snug_rpc::service_token`), sent with every call to them.
    pub service_token: Option<snug_rpc::service_token::ServiceToken>,
}

impl Runtime {
    /// `sealer`, with the default pace.
    pub fn new(sealer: Sealer) -> Self {
        Self {
            sealer,
            upload_pace: Pace::default(),
            service_token: None,
        }
    }
}

/// Why the gateway could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is unsafe or incomplete.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The OpenID Connect settings are unusable.
    #[error(transparent)]
    Oidc(#[from] oidc::OidcConfigError),
    /// The users directory could not be opened.
    #[error("cannot open the users directory")]
    Users(#[from] UsersError),
}

/// The services' addresses, overriding the configured ones (the all-in-one hub passes its own).
#[derive(Debug, Clone, Default)]
pub struct Addresses {
    /// Every service in this process, reached without a socket (`snug-hub serve`); when set, the
    /// addresses are not used.
    pub local: Option<snug_rpc::server::LocalChannel>,
    /// `snug.sync.v1`.
    pub sync: Option<String>,
    /// `snug.materialize.v1`.
    pub materialize: Option<String>,
}

impl Addresses {
    /// Every service at one address (the services of one `snug-hub serve` process).
    pub fn all(url: &str) -> Self {
        Self {
            sync: Some(url.to_owned()),
            materialize: Some(url.to_owned()),
            local: None,
        }
    }

    /// Every service in this process, called through `services` (see [`Addresses::local`]).
    pub fn in_process(services: snug_rpc::server::LocalChannel) -> Self {
        Self {
            local: Some(services),
            ..Self::default()
        }
    }
}

/// Builds the gateway's state from its configuration. `dir` holds the SQLite users file and the
/// generated session key; `addresses` override the configured service addresses.
pub async fn build(
    config: &GatewayConfig,
    dir: std::path::PathBuf,
    addresses: Addresses,
    runtime: Runtime,
) -> Result<Arc<AppState>, StartError> {
    let settings = Settings::resolve(config, dir)?;
    let backends = backends(config, &settings, addresses, runtime.service_token.as_ref())?;
    let auth = match (settings.auth, &settings.session_key, &settings.users) {
        (AuthMode::On, Some(key), Some(users)) => {
            let users = Arc::new(Directory::open(users).await?);
            let oidc = oidc::Oidc::from_args(&config.oidc, true, users.clone())?;
            Auth::on(users, key.clone(), settings.rate_limits.clone()).with_oidc(oidc.map(Arc::new))
        }
        _ => {
            oidc::Oidc::from_args(&config.oidc, false, Arc::new(provision::Nobody))?;
            Auth::off()
        }
    };
    if settings.auth == AuthMode::Off {
        tracing::warn!("authentication is off: every request is the local user (loopback only)");
    }
    Ok(Arc::new(AppState {
        streams: events::Streams::new(settings.events),
        settings,
        auth,
        backends,
        sealer: runtime.sealer,
        upload_pace: runtime.upload_pace,
    }))
}

/// The gRPC clients: over this process's own services when `addresses.local` is set, else over
/// connections to the given or configured addresses.
fn backends(
    config: &GatewayConfig,
    settings: &Settings,
    addresses: Addresses,
    token: Option<&snug_rpc::service_token::ServiceToken>,
) -> Result<Backends, ConfigError> {
    if let Some(local) = addresses.local {
        let channel = backend::local(local);
        return Ok(Backends::new(
            channel.clone(),
            Some(channel),
            settings.rpc_deadline,
        ));
    }
    if config.schema_addr.is_some() {
        // Kept so an existing deployment's environment still starts; nothing reads it.
        tracing::warn!(
            "SNUG_SCHEMA_ADDR is set but the gateway no longer calls the schema service: the sync service validates every image it stores"
        );
    }
    let sync_addr = addresses
        .sync
        .or_else(|| config.sync_addr.clone())
        .ok_or(ConfigError::MissingAddress("SNUG_SYNC_ADDR"))?;
    Ok(Backends::new(
        backend::channel(&sync_addr, settings.rpc_connect_timeout, token)?,
        match addresses
            .materialize
            .or_else(|| config.materialize_addr.clone())
        {
            Some(addr) => Some(backend::channel(
                &addr,
                settings.rpc_connect_timeout,
                token,
            )?),
            None => None,
        },
        settings.rpc_deadline,
    ))
}

/// The whole HTTP application: routes inside the layers described in the crate docs.
pub fn app(state: Arc<AppState>) -> Router {
    let origins = cors::Origins(Arc::new(state.settings.cors_origins.clone()));
    let guard_host = state.settings.auth == AuthMode::Off;
    let rate_limits = state.settings.rate_limits.clone();
    let in_flight = InFlight(Arc::new(tokio::sync::Semaphore::new(
        state.settings.http_concurrency_limit,
    )));
    // One `Router::layer` for the whole stack (outermost first): each one boxes every route's
    // service again, and clones that box on every request.
    routes::router(state).layer(
        ServiceBuilder::new()
            .layer(middleware::from_fn_with_state(
                Edge {
                    origins,
                    guard_host,
                    rate_limits,
                },
                edge,
            ))
            .layer(middleware::from_fn_with_state(in_flight, limit_in_flight)),
    )
}

/// The requests in flight at once (`SNUG_HTTP_CONCURRENCY_LIMIT`): one more is shed at once
/// with 503, never queued. A long poll (`Prefer: wait`, `routes::waits`) holds no place: it is a
/// subscription, counted against the event streams' caps while it waits, so a thousand waiting
/// devices cannot shut everyone else out.
#[derive(Debug, Clone)]
struct InFlight(Arc<tokio::sync::Semaphore>);

async fn limit_in_flight(State(limit): State<InFlight>, request: Request, next: Next) -> Response {
    if routes::waits(&request) {
        return next.run(request).await;
    }
    match limit.0.try_acquire() {
        // Held until the response's head is ready, as the requests it counts are.
        Ok(_permit) => next.run(request).await,
        Err(_) => ApiError::from_reason(
            &snug_reasons::gateway::GATEWAY_OVERLOADED,
            "the hub is busy; retry shortly",
        )
        .into_response(),
    }
}

/// What the edge of the gateway needs to judge a request before any route sees it.
#[derive(Debug, Clone)]
struct Edge {
    origins: cors::Origins,
    /// Auth is off: only requests addressed to a loopback name are served.
    guard_host: bool,
    /// Per client address, before anyone is authenticated (the reference answers 429 before 401).
    rate_limits: Option<Arc<rate::RateLimits>>,
}

/// The gateway's edge, one middleware for what could be four (each layer of its own would clone
/// the route's service and box a future on every request, a tenth of a small GET's cost): in
/// order, observation, CORS, closing the connection after a refused upload, and the Host guard.
async fn edge(State(edge): State<Edge>, request: Request, next: Next) -> Response {
    let (request, observation) = observe::Observation::start(request);
    let span = observation.span().clone();
    let response = edge.answer(request, next).instrument(span).await;
    observation.finish(response)
}

impl Edge {
    async fn answer(&self, request: Request, next: Next) -> Response {
        let cors = self.origins.judge(&request);
        if let Some(preflight) = cors.preflight_answer() {
            return preflight;
        }
        let upload = http1_upload(&request);
        let response = if self.guard_host && !addressed_to_loopback(&request) {
            ApiError::from_reason(
                &snug_reasons::gateway::MISDIRECTED_REQUEST,
                "with authentication off this hub only answers requests addressed to localhost",
            )
            .into_response()
        } else if let Err(limited) = self.within_rate(&request) {
            ApiError::from(limited).into_response()
        } else {
            next.run(request).await
        };
        cors.decorate(close_after_refused_upload(upload, response))
    }
}

impl Edge {
    /// Counts the request against its client address's bucket. Health probes are exempt (an
    /// orchestrator's probes all come from one address), and so are requests without a peer
    /// address (a router driven in-process, as tests do).
    fn within_rate(&self, request: &Request) -> Result<(), rate::Limited> {
        let Some(limits) = &self.rate_limits else {
            return Ok(());
        };
        if matches!(request.uri().path(), "/healthz" | "/readyz") {
            return Ok(());
        }
        match request
            .extensions()
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
        {
            Some(peer) => limits.check_address(peer.0, request.headers()),
            None => Ok(()),
        }
    }
}

/// With auth off, only requests addressed to a loopback name are served. A browser page from any
/// site can reach 127.0.0.1, and DNS rebinding can make it look same-origin; the `Host` header it
/// sends still names the attacker's domain, and that is refused.
fn addressed_to_loopback(request: &Request) -> bool {
    request
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
        .is_some_and(session::is_loopback_host)
}

/// Whether `request` is an HTTP/1 request with a body.
fn http1_upload(request: &Request) -> bool {
    let headers = request.headers();
    request.version() <= axum::http::Version::HTTP_11
        && (headers.contains_key(axum::http::header::TRANSFER_ENCODING)
            || headers
                .get(axum::http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.trim() != "0"))
}

/// An upload refused before its body was read (412, 415, 413, 503…) ends its HTTP/1.1
/// connection, and says so. hyper does not read an unread body to its end, so it closes the
/// connection after such an answer anyway; without `Connection: close` a client that reuses the
/// connection finds it dead on its next request.
fn close_after_refused_upload(http1_upload: bool, mut response: Response) -> Response {
    if http1_upload && (response.status().is_client_error() || response.status().is_server_error())
    {
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    response
}

/// Serves the gateway on `listener` until `shutdown` completes; in-flight requests then finish.
///
/// The accept loop is this crate's own rather than `axum::serve`, which gives hyper no timer and
/// no say over which connection may stay: every connection is admitted and watched by
/// [`connections::Connections`] (silent ones closed at the header or idle timeout from accept,
/// a cap per client address, the silent shed first at the global cap), and hyper's own header
/// timeout bounds an HTTP/1 request whose headers dribble in.
pub async fn serve(
    state: Arc<AppState>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::Listener as _;
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

    if let Ok(local) = listener.local_addr() {
        tracing::info!(addr = %local, auth = ?state.settings.auth, origins = ?state.settings.cors_origins, "HTTP gateway listening");
    }
    let limits = state.settings.connections.clone();
    let connections = connections::Connections::new(limits.clone());
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.idle_timeout / 2))
        .keep_alive_timeout(limits.header_timeout);
    let builder = Arc::new(builder);
    let mut listener = zero_copy::ZeroCopyListener::new(listener, state.sealer.clone());
    let serving = Arc::clone(&state);
    let app = app(state);
    let (stopping, _) = tokio::sync::watch::channel(false);
    // Each connection's task holds a sender: all of them gone is every connection ended.
    let (running, mut ended) = tokio::sync::mpsc::channel::<std::convert::Infallible>(1);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        // Admission may wait (every connection busy) and must not hold up shutdown.
        let admitted = tokio::select! {
            admitted = connections.admit(peer.ip()) => admitted,
            () = &mut shutdown => break,
        };
        let admitted = match admitted {
            Ok(admitted) => admitted,
            Err(refused) => {
                tracing::debug!(%peer, ?refused, "a connection was refused at accept");
                continue;
            }
        };
        // TCP_NODELAY: a response's last small segment must not wait for the client's delayed ACK.
        let _ = stream.tcp().set_nodelay(true);
        let service = connection_service(app.clone(), peer, Arc::clone(admitted.watch()));
        let builder = Arc::clone(&builder);
        let mut stopping = stopping.subscribe();
        let running = running.clone();
        // The stream holds the connection's place among the open ones while it lingers.
        let admitted = Arc::new(admitted);
        let stream =
            linger::Lingering::new(stream, Arc::clone(admitted.watch()), Arc::clone(&admitted));
        tokio::spawn(async move {
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            // Set once the connection was asked to end: a GOAWAY (HTTP/2) or a close after the
            // response in flight (HTTP/1), and for a silent one a hard stop shortly after.
            let mut winding_down = false;
            let mut hard_stop: Option<tokio::time::Instant> = None;
            loop {
                let quieted = admitted.watch().quieted();
                let deadline = admitted.deadline();
                tokio::select! {
                    // A request ended: the idle deadline starts now.
                    () = quieted, if hard_stop.is_none() => {}
                    ended = connection.as_mut() => {
                        if let Err(err) = ended {
                            tracing::trace!(error = %err, "a connection ended with an error");
                        }
                        break;
                    }
                    () = admitted.watch().shed_requested(), if !winding_down => {
                        tracing::debug!(%peer, "a silent connection was shed to admit another");
                        break;
                    }
                    () = sleep_until(deadline), if deadline.is_some() && hard_stop.is_none() => {
                        // The rule may have moved the deadline (a request started and ended).
                        if admitted.deadline().is_some_and(|d| d <= tokio::time::Instant::now()) {
                            tracing::debug!(%peer, "a silent connection was closed");
                            connection.as_mut().graceful_shutdown();
                            winding_down = true;
                            hard_stop = Some(tokio::time::Instant::now() + SILENT_GRACE);
                        }
                    }
                    () = sleep_until(hard_stop), if hard_stop.is_some() => break,
                    _ = stopping.changed(), if !winding_down => {
                        winding_down = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(admitted);
            drop(running);
        });
    }
    drop(listener);
    // Event streams never end on their own: ended now, a connection can finish its response.
    serving.streams.close();
    stopping.send_replace(true);
    drop(running);
    let _ = ended.recv().await;
    Ok(())
}

/// How long a connection closed for silence may take to say goodbye (an HTTP/2 GOAWAY) before
/// it is dropped.
const SILENT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Sleeps until `deadline`, or for ever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The router for one connection from `peer`: each request is in flight on `watch` from its
/// headers until its response body ends or is dropped.
fn connection_service(
    app: axum::Router,
    peer: SocketAddr,
    watch: Arc<connections::Watch>,
) -> impl hyper::service::Service<
    Request<hyper::body::Incoming>,
    Response = Response,
    Error = std::convert::Infallible,
    Future: Send,
> + Clone
+ Send
+ 'static {
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;
    hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
        let busy = watch.begin();
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        let request = request.map(|body| {
            axum::body::Body::new(Unread {
                body,
                watch: Arc::clone(&watch),
                ended: false,
            })
        });
        let app = app.clone();
        async move {
            let response = app.oneshot(request).await?;
            Ok(response.map(|body| {
                axum::body::Body::new(body.map_frame(move |frame| {
                    let _in_flight = &busy;
                    frame
                }))
            }))
        }
    })
}

/// A request's body that tells its connection's [`connections::Watch`] when it is dropped before
/// its end (the request was answered without it), so the connection lingers ([`linger`]).
struct Unread {
    body: hyper::body::Incoming,
    watch: Arc<connections::Watch>,
    /// Read to its end (a chunked body's end is known only by reading it).
    ended: bool,
}

impl hyper::body::Body for Unread {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let frame = std::task::ready!(std::pin::Pin::new(&mut self.body).poll_frame(cx));
        self.ended |= frame.is_none();
        std::task::Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Unread {
    fn drop(&mut self) {
        if !self.ended && !hyper::body::Body::is_end_stream(&self.body) {
            self.watch.leave_unread();
        }
    }
}
