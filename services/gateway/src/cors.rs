//! CORS, fail-closed: an origin on the configured list gets credentialed CORS headers; any other
//! origin gets none at all.
//!
//! Written here rather than taken from tower-http's `CorsLayer` because that layer adds
//! `Access-Control-Allow-Credentials`, `-Allow-Methods` and `-Allow-Headers` to responses for
//! every origin and only withholds `-Allow-Origin`; browsers still refuse those, but "an unknown
//! origin gets no CORS headers" is the stated contract, and it is simpler to keep exactly.

use std::sync::Arc;

use axum::{
    extract::Request,
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Response},
};

/// Headers a browser script may send (preflight `Access-Control-Allow-Headers`).
pub const ALLOW_HEADERS: &str =
    "authorization, content-type, if-match, if-none-match, x-snug-csrf, snug-delta-patches";
/// Methods a browser script may use.
pub const ALLOW_METHODS: &str = "GET, HEAD, PUT, POST";
/// Response headers a browser script may read.
pub const EXPOSE_HEADERS: &str =
    "ETag, Repr-Digest, Retry-After, Snug-Storage-Version, Snug-Origin";
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

/// What CORS makes of one request: whether its origin is allowed, and whether it is a preflight
/// (answered here, without reaching a route).
#[derive(Debug)]
pub struct Cors {
    allowed: Option<HeaderValue>,
    preflight: bool,
}

impl Origins {
    /// Judges `request`'s origin and method.
    pub fn judge(&self, request: &Request) -> Cors {
        Cors {
            allowed: self.allowed(request.headers()),
            preflight: request.method() == Method::OPTIONS
                && request
                    .headers()
                    .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD),
        }
    }
}

impl Cors {
    /// The answer to a preflight, or `None` for a request that goes on to its route.
    pub fn preflight_answer(&self) -> Option<Response> {
        self.preflight
            .then(|| self.decorate(StatusCode::NO_CONTENT.into_response()))
    }

    /// Adds the CORS headers an allowed origin gets (and `Vary: Origin` for everyone).
    pub fn decorate(&self, mut response: Response) -> Response {
        let headers = response.headers_mut();
        // Caches must not serve one origin's answer to another.
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
        let Some(origin) = &self.allowed else {
            return response;
        };
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        if self.preflight {
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
}
