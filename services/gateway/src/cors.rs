//! CORS, fail-closed: an origin on the configured list gets credentialed CORS headers; any other
//! origin gets none at all.
//!
//! Written here rather than taken from tower-http's `CorsLayer` because that layer adds
//! `Access-Control-Allow-Credentials`, `-Allow-Methods` and `-Allow-Headers` to responses for
//! every origin and only withholds `-Allow-Origin`; browsers still refuse those, but "an unknown
//! origin gets no CORS headers" is the stated contract, and it is simpler to keep exactly.

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

/// Headers a browser script may send (preflight `Access-Control-Allow-Headers`).
pub const ALLOW_HEADERS: &str = "authorization, content-type, if-match, if-none-match, x-snug-csrf";
/// Methods a browser script may use.
pub const ALLOW_METHODS: &str = "GET, HEAD, PUT, POST";
/// Response headers a browser script may read.
pub const EXPOSE_HEADERS: &str = "ETag, Repr-Digest, Retry-After, Snug-Storage-Version";
/// How long a browser may cache a preflight answer, in seconds.
const MAX_AGE: &str = "600";

/// The allowed origins, normalised by `config::parse_origin`.
#[derive(Debug, Clone)]
pub struct Origins(pub Arc<Vec<String>>);

impl Origins {
    fn allowed(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        let origin = headers.get(header::ORIGIN)?;
        let text = origin.to_str().ok()?.to_ascii_lowercase();
        self.0.contains(&text).then(|| origin.clone())
    }
}

/// The middleware: answers preflights itself, decorates every other response.
pub async fn layer(State(origins): State<Origins>, request: Request, next: Next) -> Response {
    let allowed = origins.allowed(request.headers());
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut response = if preflight {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    // Caches must not serve one origin's answer to another.
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
    let Some(origin) = allowed else {
        return response;
    };
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    if preflight {
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOW_METHODS),
        );
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(MAX_AGE),
        );
    } else {
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSE_HEADERS),
        );
    }
    response
}
