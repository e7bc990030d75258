//! The routes: `/userdb` and its revisions, sessions, health, and the OpenAPI document.
//!
//! Check order follows the reference server (notes §(d)) where it has the route: for
//! `PUT /userdb`, 401 → 403 (CSRF) → 415 → 413 (declared length) → 400 (leading bytes) → 428 →
//! 413 (while streaming) → 400 (validation) → 412 → 204. One deliberate difference: the reference
//! answers an oversize body with 413 before authenticating (its body parser runs first); here an
//! unauthenticated client learns nothing, not even the quota.

use std::sync::Arc;

use axum::{
    Json, Router,
    body::Body,
    extract::{FromRequestParts, MatchedPath, Path, RawQuery, State, rejection::PathRejection},
    handler::Handler as _,
    http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts},
    middleware::from_fn,
    response::{IntoResponse, Response},
    routing::MethodRouter,
};
use serde_json::json;
use snug_files::format::{CONTAINER_MAGIC, SQLITE_MAGIC};
use snug_proto::sync::v1 as sync_pb;
use snug_rpc::watch::Sent;

use crate::{
    AppState,
    auth::Via,
    backend::{Caller, Heard, Patches, Precondition},
    config::AuthMode,
    encoding,
    error::ApiError,
    etag::{self, Condition},
    events, session,
    upload::Upload,
};

/// Every route, with its methods in OpenAPI spelling. The router is built from this table and
/// nothing else, and a test checks the OpenAPI document describes exactly these operations.
pub const ROUTES: &[(&str, &[&str])] = &[
    ("/userdb", &["get", "head", "put"]),
    ("/userdb/events", &["get"]),
    ("/userdb/revisions", &["get"]),
    ("/userdb/revisions/{rev}", &["get", "head"]),
    ("/userdb/revisions/{rev}/restore", &["post"]),
    ("/userdb/revisions/{rev}/plan", &["post"]),
    ("/userdb/delta", &["put", "post"]),
    ("/userdb/apps/{appId}/export", &["get"]),
    ("/auth/session", &["post"]),
    ("/auth/logout", &["post"]),
    ("/auth/me", &["get"]),
    ("/auth/login", &["get"]),
    ("/auth/callback", &["get"]),
    ("/openapi.json", &["get"]),
    ("/healthz", &["get"]),
    ("/readyz", &["get"]),
];

/// The OpenAPI 3.1 document, hand-written next to the code it describes.
pub const OPENAPI: &str = include_str!("../openapi.json");

/// Builds the router from [`ROUTES`].
pub fn router(state: Arc<AppState>) -> Router {
    let mut router = Router::new();
    for (path, methods) in ROUTES {
        let mut route = MethodRouter::new();
        for method in *methods {
            route = add(path, method, route);
        }
        router = router.route(path, route);
    }
    router
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

fn add(
    path: &str,
    method: &str,
    route: MethodRouter<Arc<AppState>>,
) -> MethodRouter<Arc<AppState>> {
    match (path, method) {
        // HEAD shares the GET handler, which asks the sync service for the revision only.
        ("/userdb", "get") => route.get(get_userdb),
        ("/userdb", "head") => route.head(get_userdb),
        ("/userdb", "put") => route.put(put_userdb),
        ("/userdb/events", "get") => route.get(userdb_events),
        ("/userdb/revisions", "get") => route.get(list_revisions),
        ("/userdb/revisions/{rev}", "get") => route.get(get_revision),
        ("/userdb/revisions/{rev}", "head") => route.head(get_revision),
        ("/userdb/revisions/{rev}/restore", "post") => route.post(restore_revision),
        // The delta routes take and give zstd bodies (encoding.rs).
        ("/userdb/revisions/{rev}/plan", "post") => {
            route.post(plan_delta.layer(from_fn(encoding::delta_codings)))
        }
        ("/userdb/delta", "put") => route.put(put_delta.layer(from_fn(encoding::delta_codings))),
        ("/userdb/delta", "post") => route.post(pull_delta.layer(from_fn(encoding::delta_codings))),
        ("/userdb/apps/{appId}/export", "get") => route.get(export_app),
        ("/auth/session", "post") => route.post(start_session),
        ("/auth/logout", "post") => route.post(logout),
        ("/auth/me", "get") => route.get(me),
        ("/auth/login", "get") => route.get(crate::oidc::login),
        ("/auth/callback", "get") => route.get(crate::oidc::callback),
        ("/openapi.json", "get") => route.get(openapi),
        ("/healthz", "get") => route.get(healthz),
        ("/readyz", "get") => route.get(readyz),
        // ROUTES and this match are edited together; a test builds the router, so a mismatch
        // fails the test suite rather than a deployment.
        (path, method) => panic!("ROUTES lists {method} {path} but no handler is wired for it"),
    }
}

async fn no_route() -> ApiError {
    ApiError::from_reason(&snug_reasons::gateway::NO_ROUTE, "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::from_reason(
        &snug_reasons::gateway::METHOD_NOT_ALLOWED,
        "this route does not take that method",
    )
}

/// The caller of a route about their image, authenticated and known to the sync service: the
/// prologue every such route shares. A request that may change something (any method but GET
/// and HEAD) made with a session cookie must carry its CSRF header too.
struct Authed(Caller);

impl FromRequestParts<Arc<AppState>> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, ApiError> {
        let identity = if parts.method == Method::GET || parts.method == Method::HEAD {
            state.auth.identify(&parts.headers).await?
        } else {
            let route = parts
                .extensions
                .get::<MatchedPath>()
                .map_or(parts.uri.path(), MatchedPath::as_str);
            let what = format!("{} {route}", parts.method);
            state.auth.identify_for_write(&parts.headers, &what).await?
        };
        // A trusted proxy's own address (a request it did not forward for anyone) names no
        // client: counting it would put every client behind the proxy in one share.
        let trusted = &state.settings.connections.trusted;
        let caller = Caller {
            client_address: parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|peer| crate::rate::client_address(peer.0, &parts.headers, trusted))
                .filter(|client| !crate::rate::is_trusted(trusted, *client)),
            ..identity.caller()
        };
        state.backends.provision(&caller).await?;
        Ok(Self(caller))
    }
}

fn not_pushed() -> ApiError {
    ApiError::from_reason(&snug_reasons::sync::NOT_FOUND, "no user DB pushed yet")
}

/// The one answer for a revision the caller cannot have: unknown, reclaimed, malformed, or
/// another user's all read the same, so a probe learns nothing about other users' histories.
fn no_such_revision() -> ApiError {
    ApiError::from_reason(&snug_reasons::sync::NOT_FOUND, "no such revision")
}

/// The response header carrying the image's storage version (its SQLite `user_version`), so a
/// client can refuse a file too new for it from a HEAD, before downloading anything.
const STORAGE_VERSION_HEADER: &str = "snug-storage-version";

/// The `{rev}` path segment. A segment that does not even decode, or cannot be a revision, is
/// answered like a revision that is not the user's (not found), without asking the sync service.
fn revision_param(rev: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    rev.ok()
        .map(|Path(rev)| rev)
        .filter(|rev| etag::is_revision(rev))
        .ok_or_else(no_such_revision)
}

/// An image response (200, 304, HEAD): `body` under the image's headers, with a
/// `Content-Length` when one is given.
fn image_response(
    status: StatusCode,
    info: &sync_pb::RevisionInfo,
    content_length: Option<u64>,
    body: Body,
) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    // These, and what the edge adds (CORS, `Vary`), in one allocation.
    headers.reserve(12);
    if let Some(length) = content_length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    if let Some(value) = etag::header_value(&info.revision) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // §10: the artifact a hub offers for download is `snug-user.snug`, whichever revision it is.
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"snug-user.snug\""),
    );
    if let Some(digest) = etag::repr_digest(&info.sha256) {
        headers.insert("repr-digest", digest);
    }
    if let Some(version) = info.storage_version {
        headers.insert(STORAGE_VERSION_HEADER, HeaderValue::from(version));
    }
    response
}

/// The response header stating the caller's origin identity on this hub
/// ([`crate::backend::origin_id`]): the same on every replica of one store, different on every
/// other store and for every other user, so a client keys its sync state by it (issue 35).
pub const ORIGIN_HEADER: &str = "snug-origin";

/// `answer` (a success or a refusal alike) with the caller's [`ORIGIN_HEADER`]: a client that
/// finds no image learns whose origin is empty as surely as one that finds one.
fn with_origin(answer: Result<Response, ApiError>, origin: &str) -> Response {
    let mut response = answer.into_response();
    if let Ok(value) = HeaderValue::from_str(origin) {
        response.headers_mut().insert(ORIGIN_HEADER, value);
    }
    response
}

/// `GET /userdb` (and `HEAD`): the current image with its revision and digest. A long poll
/// (`If-None-Match` naming the current revision, and `Prefer: wait=N`) first waits, at most N
/// seconds (60 at most), for the revision to change (`long_poll`).
async fn get_userdb(
    State(state): State<Arc<AppState>>,
    Authed(caller): Authed,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let origin = state.backends.origin_id(&caller).await?;
    let waited = match events::preferred_wait(&headers) {
        Some(wait) if headers.contains_key(header::IF_NONE_MATCH) => {
            long_poll(&state, &caller, &headers, wait).await?
        }
        _ => None,
    };
    let answer = serve_image(&state, &caller, None, &method, &headers)
        .await
        .and_then(|image| image.ok_or_else(not_pushed));
    let mut response = with_origin(answer, &origin);
    if let Some(value) =
        waited.and_then(|wait| HeaderValue::from_str(&format!("wait={}", wait.as_secs())).ok())
    {
        response.headers_mut().insert("preference-applied", value);
    }
    Ok(response)
}

/// Whether `request` is a long poll of `GET`/`HEAD /userdb`: it waits for a revision, as an
/// event stream does, so it is counted among those and not among the requests in flight.
pub(crate) fn waits(request: &axum::extract::Request) -> bool {
    matches!(*request.method(), Method::GET | Method::HEAD)
        && request.uri().path() == "/userdb"
        && request.headers().contains_key(header::IF_NONE_MATCH)
        && events::preferred_wait(request.headers()).is_some()
}

/// Waits, at most `wait`, for the caller's revision to stop being the one `If-None-Match`
/// names: returns the wait granted, or `None` when there was nothing to wait for (the
/// condition does not name the current revision, or there is no image).
async fn long_poll(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    wait: std::time::Duration,
) -> Result<Option<std::time::Duration>, ApiError> {
    let Some(condition) = etag::parse(headers, header::IF_NONE_MATCH) else {
        return Ok(None);
    };
    let Some(current) = state.backends.head(caller, None).await? else {
        return Ok(None);
    };
    if !condition.matches_weak(&current.revision) {
        return Ok(None);
    }
    // A subscription while it waits: within the event streams' caps.
    let _admitted = state
        .streams
        .admit(&caller.user_id, caller.client_address)?;
    let mut watching = state.backends.watch(caller);
    let changed = async {
        loop {
            match watching.next().await {
                Heard::Heartbeat => {}
                // Another revision, no image, or a failed read: the answer is read anew.
                Heard::History(Ok(history))
                    if history.first().map(|head| head.revision.as_str())
                        == Some(current.revision.as_str()) => {}
                Heard::History(_) => return,
            }
        }
    };
    let _ = tokio::time::timeout(wait, changed).await;
    Ok(Some(wait))
}

/// `GET /userdb/events`: the caller's revisions as Server-Sent Events (`events.rs`), from the
/// current one, or from the one after `Last-Event-ID`.
async fn userdb_events(
    State(state): State<Arc<AppState>>,
    Authed(caller): Authed,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let after = events::last_event_id(&headers)?;
    let admitted = state
        .streams
        .admit(&caller.user_id, caller.client_address)?;
    let origin = state.backends.origin_id(&caller).await?;
    let sent = after.map_or(Sent::Nothing, Sent::Revision);
    let heard = state.backends.watch(&caller).into_stream();
    let lifetime = state.settings.events_stream_lifetime;
    let revoked = state.auth.revoked(&headers);
    let body = state.streams.body(heard, sent, lifetime, revoked, admitted);
    let mut response = Response::new(Body::from_stream(body));
    events::stream_headers(response.headers_mut());
    Ok(with_origin(Ok(response), &origin))
}

/// `GET /userdb/revisions/{rev}` (and `HEAD`): one retained revision's bytes, with the same
/// headers as `GET /userdb` (the ETag is that revision), so a client can fetch exactly the
/// revision it chose from the listing even after newer ones landed.
async fn get_revision(
    State(state): State<Arc<AppState>>,
    Authed(caller): Authed,
    rev: Result<Path<String>, PathRejection>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let rev = revision_param(rev)?;
    serve_image(&state, &caller, Some(&rev), &method, &headers)
        .await?
        .ok_or_else(no_such_revision)
}

/// Answers a GET or HEAD of an image (the current one, or the retained `revision`), honouring
/// `If-None-Match`; `None` when the sync service has no such image for the caller.
async fn serve_image(
    state: &AppState,
    caller: &Caller,
    revision: Option<&str>,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Option<Response>, ApiError> {
    let if_none_match = etag::parse(headers, header::IF_NONE_MATCH);
    if *method == Method::HEAD || if_none_match.is_some() {
        // Answering from the revision alone spares a download (and a served-ledger entry that
        // would record bytes the client never got).
        let Some(info) = state.backends.head(caller, revision).await? else {
            return Ok(None);
        };
        if if_none_match
            .as_ref()
            .is_some_and(|c| c.matches_weak(&info.revision))
        {
            return Ok(Some(image_response(
                StatusCode::NOT_MODIFIED,
                &info,
                None,
                Body::empty(),
            )));
        }
        if *method == Method::HEAD {
            return Ok(Some(image_response(
                StatusCode::OK,
                &info,
                Some(info.size),
                Body::empty(),
            )));
        }
    }
    let Some((info, body)) = state.backends.get(caller, revision).await? else {
        return Ok(None);
    };
    // The length is declared up front, so a download that breaks off is visibly short.
    Ok(Some(image_response(
        StatusCode::OK,
        &info,
        Some(info.size),
        Body::from_stream(body),
    )))
}

/// What the client's conditional headers ask of the current revision, before it is known.
enum Wanted {
    Precondition(Precondition),
    /// `If-Match: *`, a list, or a value that cannot be a revision: compared with the current
    /// revision (one HeadImage), then sent as must-match of that revision.
    AgainstCurrent(Condition),
}

/// Reads `If-Match` / `If-None-Match: *`. `If-Match` wins when both are present (reference).
fn wanted(headers: &HeaderMap) -> Option<Wanted> {
    if let Some(condition) = etag::parse(headers, header::IF_MATCH) {
        return Some(match condition.single_strong() {
            Some(revision) if etag::is_revision(revision) => {
                Wanted::Precondition(Precondition::MustMatch(revision.to_owned()))
            }
            _ => Wanted::AgainstCurrent(condition),
        });
    }
    match etag::parse(headers, header::IF_NONE_MATCH) {
        Some(Condition::Any) => Some(Wanted::Precondition(Precondition::MustNotExist)),
        _ => None,
    }
}

fn precondition_required(what: &str) -> ApiError {
    ApiError::from_reason(
        &snug_reasons::sync::PRECONDITION_REQUIRED,
        format!("{what} requires If-Match: <revision> (or If-None-Match: * for the first write)"),
    )
}

/// Turns [`Wanted`] into a precondition, asking for the current revision when needed.
async fn resolve(
    state: &AppState,
    caller: &Caller,
    wanted: Wanted,
) -> Result<Precondition, ApiError> {
    match wanted {
        Wanted::Precondition(p) => Ok(p),
        Wanted::AgainstCurrent(condition) => match state.backends.head(caller, None).await? {
            Some(info) if condition.matches_strong(&info.revision) => {
                Ok(Precondition::MustMatch(info.revision))
            }
            Some(info) => {
                let mut error = ApiError::from_reason(
                    &snug_reasons::sync::REVISION_MISMATCH,
                    "stale revision: pull the current DB and retry",
                );
                error.revision = Some(info.revision);
                Err(error)
            }
            None => Err(ApiError::from_reason(
                &snug_reasons::sync::REVISION_MISMATCH,
                "no user DB exists yet: the first write must use If-None-Match: *",
            )),
        },
    }
}

/// `PUT /userdb`: a compare-and-swap write of a plain image, which the sync service validates,
/// scrubs and stores (PutImage); the body is streamed to it, never held here.
async fn put_userdb(
    State(state): State<Arc<AppState>>,
    Authed(caller): Authed,
    headers: HeaderMap,
    mut upload: Upload,
) -> Result<Response, ApiError> {
    // The one quota check made here: a declared length over it is refused before the body is
    // read, so a client that sent `Expect: 100-continue` never sends it. The bytes themselves
    // are held to the quota by the sync service as they arrive.
    let quota = state.backends.quota_for(&caller).await?;
    if let Some(length) = upload.content_length()
        && length > quota
    {
        return Err(ApiError::from_reason(
            &snug_reasons::sync::QUOTA_EXCEEDED,
            format!("the user DB is {length} bytes; the per-user quota is {quota}"),
        ));
    }
    plain_sqlite(upload.leading(SQLITE_MAGIC.len()).await?)?;
    let wanted = wanted(&headers).ok_or_else(|| precondition_required("PUT /userdb"))?;
    let origin = state.backends.origin_id(&caller).await?;
    let answer = match resolve(&state, &caller, wanted).await {
        Ok(precondition) => written(
            state.backends.put(&caller, &precondition, upload).await,
            &precondition,
        ),
        Err(err) => Err(err),
    };
    Ok(with_origin(answer, &origin))
}

/// The one early refusal by content: an upload that does not start as a plain SQLite database
/// (judged on its first bytes) is refused before anything is sent on. Everything else about the
/// image is the sync service's to judge, on the whole of it.
fn plain_sqlite(leading: &[u8]) -> Result<(), ApiError> {
    if leading.starts_with(SQLITE_MAGIC) {
        return Ok(());
    }
    Err(if leading.starts_with(CONTAINER_MAGIC) {
        ApiError::from_reason(
            &snug_reasons::schema::CONTAINER_NOT_ACCEPTED,
            "a hub sync origin stores the secrets-stripped plaintext only; push the unprotected export, never a SNUGENC1 container (§11.3)",
        )
    } else {
        ApiError::from_reason(
            &snug_reasons::schema::NOT_SQLITE,
            "body is not a SQLite database (magic bytes missing)",
        )
    })
}

/// The answer to a write of a whole image, `PUT /userdb` and `PUT /userdb/delta` alike: 204
/// with the new revision as the `ETag`, or the refusal in HTTP words.
fn written(
    stored: Result<sync_pb::RevisionInfo, ApiError>,
    precondition: &Precondition,
) -> Result<Response, ApiError> {
    let info = stored.map_err(|err| conflict_in_http_words(err, precondition))?;
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Some(value) = etag::header_value(&info.revision) {
        response.headers_mut().insert(header::ETAG, value);
    }
    Ok(response)
}

/// A refused first write says what the client met in its own words: `If-None-Match: *` named
/// no revision, so the refusal is that an image exists, with the ETag to name instead.
fn conflict_in_http_words(err: ApiError, precondition: &Precondition) -> ApiError {
    match (precondition, &err.revision) {
        (Precondition::MustNotExist, Some(current))
            if err.status == StatusCode::PRECONDITION_FAILED =>
        {
            let message = format!(
                "an image already exists (ETag \"{current}\"); If-None-Match: * only creates \
                 the first one: to replace it, pull it and send If-Match: \"{current}\""
            );
            err.with_message(message)
        }
        _ => err,
    }
}

/// `POST /userdb/revisions/{rev}/plan` (issue 21): delta push, step 1. The body is the new
/// image's manifest; the answer is the layout that builds it from the caller's retained revision
/// `rev`: which pages to copy from it and which to send. For a summary (a sparse manifest) the
/// answer is `rev`'s own manifest sparse against it, for a client that plans itself (issue 38).
/// Stores nothing.
async fn plan_delta(
    State(state): State<Arc<AppState>>,
    Authed(caller): Authed,
    rev: Result<Path<String>, PathRejection>,
    upload: Upload,
) -> Result<Response, ApiError> {
    // A base that cannot be a revision is a base that is gone, like one that is not the user's.
    let rev = revision_param(rev).map_err(|_| base_gone())?;
    let (size, layout) = state.backends.plan_delta(&caller, &rev, upload).await?;
    Ok(delta_response(size, layout))
}

fn base_gone() -> ApiError {
    ApiError::from_reason(
        &snug_reasons::sync::DELTA_BASE_GONE,
        "the delta's base is not a retained revision of this image; send the whole file",
    )
}

fn delta_response(size: u64, body: crate::backend::ImageBody) -> Response {
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Declared up front, so an answer that breaks off is visibly short.
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    response
}

/// `PUT /userdb/delta` (issue 21): delta push, step 2. `If-Match` names the base (one strong
/// revision, which the write must also find current); the body is the delta. The sync service
/// assembles the image from the base, checks it against the SHA-256 the delta claims and writes
/// it exactly as `PUT /userdb`'s image (PutImageDelta: validation, free-space zeroing,
/// compare-and-swap); 204 with the `ETag`.
async fn put_delta(
    State(state): State<Arc<AppState>>,
    Authed(caller): Authed,
    headers: HeaderMap,
    upload: Upload,
) -> Result<Response, ApiError> {
    let base = match wanted(&headers) {
        Some(Wanted::Precondition(Precondition::MustMatch(base))) => base,
        _ => {
            return Err(ApiError::from_reason(
                &snug_reasons::sync::PRECONDITION_REQUIRED,
                "PUT /userdb/delta requires If-Match: <revision>, the base the delta was made from (the first write sends the whole file)",
            ));
        }
    };
    let precondition = Precondition::MustMatch(base.clone());
    written(
        state.backends.put_delta(&caller, &base, upload).await,
        &precondition,
    )
}

/// The request header by which a pull says it rebuilds patched pages.
const PATCHES_HEADER: &str = "snug-delta-patches";

/// `POST /userdb/delta` (issue 21): delta pull. The body is the manifest of the file the client
/// has (or, with `?base=<rev>`, empty: the client's file is that retained revision, or its file
/// sparse against that revision); the answer is a delta that rebuilds the current image from it, with the revision as the
/// `ETag`. The client verifies the rebuilt image against the SHA-256 the delta carries, which
/// is the revision's. With `Snug-Delta-Patches: 1` the delta may patch pages: against a base,
/// any page that differs from the base's by a few bytes; against a manifest with shapes, a page
/// whose shape it names. With `2`, against a base with no manifest, it may also compress a
/// changed page against the base's pages (`snug_delta::Delta::build_compressed`).
async fn pull_delta(
    State(state): State<Arc<AppState>>,
    Authed(caller): Authed,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    upload: Upload,
) -> Result<Response, ApiError> {
    // `?base=<rev>`: the client's file is that revision, so no manifest is sent.
    let mut base = None;
    for pair in query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("base", value)) if base.is_none() => {
                // A base that cannot be a revision is a base that is gone.
                base = Some(
                    Some(value.to_owned())
                        .filter(|rev| etag::is_revision(rev))
                        .ok_or_else(base_gone)?,
                );
            }
            _ => {
                return Err(ApiError::from_reason(
                    &snug_reasons::gateway::BAD_REQUEST,
                    "the only query parameter is base, once",
                ));
            }
        }
    }
    let patches = match headers.get(PATCHES_HEADER).map(HeaderValue::as_bytes) {
        None | Some(b"0") => Patches::None,
        Some(b"1") => Patches::Patched,
        Some(b"2") => Patches::Compressed,
        Some(_) => {
            return Err(ApiError::from_reason(
                &snug_reasons::gateway::BAD_REQUEST,
                "Snug-Delta-Patches is 2 (this client rebuilds patched and compressed pages), 1 \
                 (patched pages) or 0",
            ));
        }
    };
    let (result, delta) = state
        .backends
        .get_delta(&caller, base.as_deref(), patches, upload)
        .await?
        .ok_or_else(not_pushed)?;
    let info = result.revision.ok_or_else(|| {
        ApiError::from_reason(
            &snug_reasons::gateway::BAD_GATEWAY,
            "the sync service answered a delta without its revision",
        )
    })?;
    let mut response = delta_response(result.size, delta);
    if let Some(value) = etag::header_value(&info.revision) {
        response.headers_mut().insert(header::ETAG, value);
    }
    if let Some(version) = info.storage_version {
        response
            .headers_mut()
            .insert(STORAGE_VERSION_HEADER, HeaderValue::from(version));
    }
    Ok(response)
}

/// Formats a protobuf timestamp as RFC 3339 UTC with milliseconds.
fn rfc3339(ts: Option<&prost_types::Timestamp>) -> Option<String> {
    let ts = ts?;
    let secs = ts.seconds;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    Some(format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60,
        ts.nanos.max(0) / 1_000_000
    ))
}

fn revision_json(info: &sync_pb::RevisionInfo) -> serde_json::Value {
    json!({
        "revision": info.revision,
        "sha256": info.sha256,
        "size": info.size,
        "acceptedAt": rfc3339(info.accepted_at.as_ref()),
        "principal": info.principal,
        "base": info.base,
        "restoredFrom": info.restored_from,
        "retained": info.retained,
        "storageVersion": info.storage_version,
    })
}

/// `GET /userdb/revisions`: the user's revisions, newest first.
async fn list_revisions(
    State(state): State<Arc<AppState>>,
    Authed(caller): Authed,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let mut limit = 100u32;
    for pair in query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("limit", value)) => {
                limit = value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| {
                        ApiError::from_reason(
                            &snug_reasons::gateway::BAD_REQUEST,
                            "limit must be a number from 1 to 1000",
                        )
                    })?;
            }
            _ => {
                return Err(ApiError::from_reason(
                    &snug_reasons::gateway::BAD_REQUEST,
                    "the only query parameter is limit",
                ));
            }
        }
    }
    let revisions = state.backends.list_revisions(&caller, limit).await?;
    let body = json!({ "revisions": revisions.iter().map(revision_json).collect::<Vec<_>>() });
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(body)).into_response())
}

/// `POST /userdb/revisions/{rev}/restore`: a retained revision's bytes become current again, as a
/// new revision, under the same preconditions as a PUT.
async fn restore_revision(
    State(state): State<Arc<AppState>>,
    Authed(caller): Authed,
    rev: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let wanted = wanted(&headers).ok_or_else(|| precondition_required("restoring a revision"))?;
    let rev = revision_param(rev)?;
    let precondition = resolve(&state, &caller, wanted).await?;
    let info = state
        .backends
        .restore(&caller, &rev, &precondition)
        .await
        .map_err(|err| {
            if err.status == StatusCode::NOT_FOUND {
                no_such_revision()
            } else {
                err
            }
        })?;
    let mut response = (
        [(header::CACHE_CONTROL, "no-store")],
        Json(json!({ "revision": revision_json(&info) })),
    )
        .into_response();
    if let Some(value) = etag::header_value(&info.revision) {
        response.headers_mut().insert(header::ETAG, value);
    }
    Ok(response)
}

/// `GET /userdb/apps/{appId}/export`: one app of the current image as a standalone database
/// with natural names (§8.2 "per-app export"), materialized by the materialization service.
async fn export_app(
    State(state): State<Arc<AppState>>,
    Authed(caller): Authed,
    app_id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    // Taken as a Result so that a segment that does not decode (`%FF`) is this API's JSON 400,
    // not axum's plain-text rejection; checked after authentication, so a stranger learns nothing.
    let Ok(Path(app_id)) = app_id else {
        return Err(ApiError::from_reason(
            &snug_reasons::rpc::INVALID_ARGUMENT,
            "the app id is not valid percent-encoded UTF-8",
        ));
    };
    let (result, body) = state
        .backends
        .export_app(&caller, &app_id)
        .await?
        .ok_or_else(not_pushed)?;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(result.length));
    // The service names the file `<token>.snug`: hex and one dot, safe in a quoted header value.
    let safe = !result.file_name.is_empty()
        && result
            .file_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.');
    let name = if safe {
        result.file_name.as_str()
    } else {
        "app.snug"
    };
    if let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    Ok((StatusCode::OK, headers, Body::from_stream(body)).into_response())
}

fn auth_off() -> ApiError {
    ApiError::from_reason(
        &snug_reasons::gateway::NO_ROUTE,
        "authentication is off on this hub: every request is the local user",
    )
}

/// `POST /auth/session`: trades a bearer token for a browser session (the two cookies).
async fn start_session(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if state.auth.mode() == AuthMode::Off {
        return Err(auth_off());
    }
    let identity = state.auth.identify(&headers).await?;
    let needs_bearer = || {
        ApiError::from_reason(
            &snug_reasons::gateway::UNAUTHENTICATED,
            "POST /auth/session needs Authorization: Bearer <token>",
        )
    };
    // The session is bound to the credential just presented, so it ends with it.
    let source = match &identity.via {
        Via::Bearer(_) => session::SessionSource::HubToken(
            headers
                .get(header::AUTHORIZATION)
                .and_then(snug_rpc::bearer::token)
                .ok_or_else(needs_bearer)?,
        ),
        Via::IssuerToken { identity, .. } => session::SessionSource::Identity(identity),
        Via::Session(_) | Via::Local => return Err(needs_bearer()),
    };
    state.backends.provision(&identity.caller()).await?;
    let started = state.auth.start_session(source).await?.ok_or_else(|| {
        ApiError::from_reason(
            &snug_reasons::gateway::UNAUTHENTICATED,
            "the bearer token is not valid",
        )
    })?;
    let csrf = session::new_csrf()
        .ok_or_else(|| ApiError::unavailable("the system random number generator failed"))?;
    let secure = !session::plain_http_on_loopback(&headers);
    let mut response = (
        [(header::CACHE_CONTROL, "no-store")],
        Json(json!({
            "userId": started.user.id,
            "name": started.user.name,
            "expiresAt": started.expires_at_ms,
            "csrfToken": csrf,
        })),
    )
        .into_response();
    for cookie in session::set_cookies(&started.cookie, &csrf, secure, started.lifetime) {
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    Ok(response)
}

/// `POST /auth/logout`: ends the session the cookie names (its record in the users directory,
/// so a copy of the cookie kept anywhere is refused from now on) and clears the cookies.
async fn logout(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if state.auth.mode() == AuthMode::Off {
        return Err(auth_off());
    }
    state
        .auth
        .identify_for_write(&headers, "POST /auth/logout")
        .await?;
    state.auth.end_session(&headers).await?;
    let secure = !session::plain_http_on_loopback(&headers);
    let mut response = StatusCode::NO_CONTENT.into_response();
    for cookie in session::clear_cookies(secure) {
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    Ok(response)
}

/// `GET /auth/me`: who the credentials belong to.
async fn me(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    let identity = state.auth.identify(&headers).await?;
    let via = match identity.via {
        Via::Bearer(_) | Via::IssuerToken { .. } => "bearer",
        Via::Session(_) => "session",
        Via::Local => "local",
    };
    let mut body = json!({ "userId": identity.user_id, "name": identity.name, "via": via });
    // A page on another (allowed) origin cannot read the hub's snug_csrf cookie, so a session
    // caller is told its value here (CORS lets only listed origins read this answer).
    if matches!(identity.via, Via::Session(_))
        && let Some(csrf) = session::cookie(&headers, session::CSRF_COOKIE)
    {
        body["csrfToken"] = json!(csrf);
    }
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(body)).into_response())
}

/// `GET /openapi.json`.
async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// `GET /healthz`: the process answers (liveness).
async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

/// `GET /readyz`: every service the routes need answers (readiness).
async fn readyz(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let checks = state.backends.readiness().await;
    let failing: Vec<String> = checks
        .iter()
        .filter_map(|(name, result)| result.as_ref().err().map(|why| format!("{name}: {why}")))
        .collect();
    if failing.is_empty() {
        let services: serde_json::Map<String, serde_json::Value> = checks
            .iter()
            .map(|(name, _)| ((*name).to_owned(), json!("SERVING")))
            .collect();
        Ok(Json(json!({ "status": "ready", "services": services })).into_response())
    } else {
        Err(ApiError::unavailable(format!(
            "not ready: {}",
            failing.join("; ")
        )))
    }
}
