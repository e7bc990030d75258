//! The gateway's request observation, outermost of its layers: one `http.server` span per request
//! (parented on the client's W3C `traceparent`, so the trace can start in a browser or another
//! service), and the HTTP metrics by method, route template, status and error reason.
//!
//! Labels come from closed sets: the route is the template from [`routes::ROUTES`] that matched
//! (`/userdb/revisions/{rev}/restore`, never the raw path, which holds whatever a client typed),
//! and the reason is the JSON error `code` an [`crate::error::ApiError`] answered with, which it
//! leaves on the response as an [`ErrorCode`] extension. A request is measured until its response
//! body ends (a 64 MiB download is not done when its headers are).

use std::time::Instant;

use axum::{
    body::Body,
    extract::{MatchedPath, Request},
    http::Method,
    response::Response,
};
use snug_rpc::{
    metrics::{self, HttpLabels, RouteLabels},
    observe::{End, Observed},
    telemetry, trace_context,
};

use crate::{error::ErrorCode, routes};

/// The label for a request no route matched.
pub const UNMATCHED: &str = "unmatched";

/// Probes hit these every few seconds; they are counted but not traced.
const UNTRACED: [&str; 2] = ["/healthz", "/readyz"];

/// The route label: the template from the route table, or [`UNMATCHED`].
pub fn route_label(matched: Option<&MatchedPath>) -> &'static str {
    matched
        .and_then(|matched| {
            routes::ROUTES
                .iter()
                .find(|(template, _)| *template == matched.as_str())
        })
        .map_or(UNMATCHED, |(template, _)| template)
}

/// The method label; methods outside HTTP's usual set are `OTHER` (a client could invent any).
pub fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// One request under observation, from its arrival until its response body ends.
pub struct Observation {
    started: Instant,
    span: tracing::Span,
    route_labels: RouteLabels,
    method: &'static str,
}

impl Observation {
    /// Starts observing `request` (routed, so its template is known): opens its span and counts
    /// its body's bytes as they are read.
    pub fn start(request: Request) -> (Request, Observation) {
        let started = Instant::now();
        let route = route_label(request.extensions().get::<MatchedPath>());
        let method = method_label(request.method());
        let span = if UNTRACED.contains(&route) {
            tracing::Span::none()
        } else {
            let span = tracing::debug_span!(
                telemetry::HTTP_SERVER_SPAN,
                otel.name = %format_args!("{method} {route}"),
                otel.kind = "server",
                http.request.method = method,
                http.route = route,
                http.response.status_code = tracing::field::Empty,
                otel.status_code = tracing::field::Empty,
                error.type = tracing::field::Empty,
            );
            trace_context::set_parent_from(&span, request.headers());
            span
        };
        let route_labels = RouteLabels { route };
        let request_bytes = metrics::global()
            .http_request_bytes
            .get_or_create(&route_labels)
            .clone();
        let request = request.map(|body| Body::new(Observed::counting(body, request_bytes)));
        let observation = Observation {
            started,
            span,
            route_labels,
            method,
        };
        (request, observation)
    }

    /// The request's span, for the work that answers it.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Records the response's status and reason on the span, and the request's metrics once the
    /// response body has ended.
    pub fn finish(self, response: Response) -> Response {
        let Observation {
            started,
            span,
            route_labels,
            method,
        } = self;
        let status = response.status();
        let reason = response
            .extensions()
            .get::<ErrorCode>()
            .map_or("", |code| code.0);
        span.record("http.response.status_code", status.as_u16());
        if !reason.is_empty() {
            span.record("error.type", reason);
        }
        if status.is_server_error() {
            span.record("otel.status_code", "error");
        }
        let labels = HttpLabels {
            method,
            route: route_labels.route,
            status: status.as_u16(),
            reason,
        };
        let metrics = metrics::global();
        let response_bytes = metrics
            .http_response_bytes
            .get_or_create(&route_labels)
            .clone();
        response.map(|body| {
            Body::new(Observed::new(
                body,
                Some(response_bytes),
                move |end: End<'_>| {
                    metrics.record_http(&labels, started.elapsed());
                    let _entered = span.enter();
                    tracing::debug!(
                        status = labels.status,
                        reason = labels.reason,
                        failed = matches!(end, End::Failed),
                        elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
                        "HTTP request finished"
                    );
                },
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_outside_the_usual_set_share_one_label() {
        assert_eq!(method_label(&Method::PUT), "PUT");
        assert_eq!(
            method_label(&Method::from_bytes(b"BREW").expect("method")),
            "OTHER"
        );
        assert_eq!(method_label(&Method::TRACE), "OTHER");
    }

    #[test]
    fn no_match_is_unmatched() {
        assert_eq!(route_label(None), UNMATCHED);
    }
}
