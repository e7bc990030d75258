//! The one table from an error reason to an HTTP answer, and the JSON error body.
//!
//! Every error the gateway sends is `{code, message, retryable}` (plus `revision` on 412), and
//! every one is chosen here from a machine-readable reason: a service's `google.rpc.ErrorInfo`
//! reason, or one of the gateway's own (`snug_reasons::gateway`). Message text is never inspected (STYLE.md
//! §7.3 point 6). A status without a reason (a transport failure, a deadline) falls back to the
//! gRPC code, mapped per google.rpc.Code's HTTP notes, except that every "the service did not
//! answer" outcome is 503 with `Retry-After`: to an HTTP client a slow service and a down one
//! are the same temporary condition.

use axum::{
    Json,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;
use tonic::Code;

use crate::etag;

/// One row of the table: what a reason becomes over HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// The `ErrorInfo` reason (a service's) or one of `snug_reasons::gateway`.
    pub reason: &'static snug_reasons::Reason,
    /// The HTTP status.
    pub status: StatusCode,
    /// The JSON `code`. Mostly the reason itself; the reference server's vocabulary where the
    /// reference already named the same condition (`USERDB_TOO_LARGE`, `NOT_FOUND`).
    pub code: &'static str,
    /// Whether the same request may succeed later unchanged (412 is retryable after a pull).
    pub retryable: bool,
}

impl Mapping {
    /// The row of a reason with an HTTP answer in the registry.
    fn of(reason: &'static snug_reasons::Reason) -> Option<Mapping> {
        let http = reason.http?;
        Some(Mapping {
            reason,
            // The registry's statuses are checked to be 4xx or 5xx by its tests and here.
            status: StatusCode::from_u16(http.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code: http.code,
            retryable: http.retryable,
        })
    }
}

/// The mapping, reason → HTTP: every reason of `snug-reasons` with an HTTP answer (the gateway's
/// own, and the services' reasons the gateway's calls can meet). Reason names are unique across
/// every domain (the registry's test), so a service's reason is looked up by name alone.
/// A test checks that every reason `sync.proto` and `materialize.proto` declare, and every one
/// ValidateSyncImage documents, is here.
pub fn table() -> impl Iterator<Item = Mapping> {
    snug_reasons::ALL.iter().copied().filter_map(Mapping::of)
}

/// Returns the row of `reason`, if the table has one.
pub fn lookup(reason: &str) -> Option<Mapping> {
    snug_reasons::find(reason).and_then(Mapping::of)
}

/// The status for a gRPC code without a reason, per google.rpc.Code's HTTP mapping. Codes that
/// mean "no answer" (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED: the channel's own failures) are
/// 503 so that clients retry.
fn by_code(code: Code) -> (StatusCode, &'static str, bool) {
    match code {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => {
            (StatusCode::SERVICE_UNAVAILABLE, "SERVICE_UNAVAILABLE", true)
        }
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => {
            (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", false)
        }
        Code::NotFound => (StatusCode::NOT_FOUND, "NOT_FOUND", false),
        Code::AlreadyExists | Code::Aborted => (StatusCode::CONFLICT, "CONFLICT", true),
        Code::PermissionDenied => (StatusCode::FORBIDDEN, "PERMISSION_DENIED", false),
        Code::Unauthenticated => (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", false),
        Code::ResourceExhausted => (StatusCode::TOO_MANY_REQUESTS, "RESOURCE_EXHAUSTED", true),
        Code::Unimplemented => (StatusCode::NOT_IMPLEMENTED, "UNIMPLEMENTED", false),
        Code::Ok | Code::Unknown | Code::Internal | Code::DataLoss => {
            (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", false)
        }
    }
}

/// How long a client should wait before retrying a 503, in seconds.
pub const RETRY_AFTER_SECONDS: u32 = 1;

/// An error answer: status, JSON body and the headers that go with it.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The JSON `code`.
    pub code: &'static str,
    /// A human-readable message (never parsed by anyone).
    pub message: String,
    /// Whether retrying the same request later may succeed.
    pub retryable: bool,
    /// On 412: the user's current revision, sent as `ETag` and as `revision`; absent when the
    /// user has no image.
    pub revision: Option<String>,
    /// Seconds for `Retry-After` when the answer names its own (429); every 503 says
    /// [`RETRY_AFTER_SECONDS`].
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// The error for a reason. One without an HTTP answer in the registry is a bug, reported as
    /// 500 so that it is noticed rather than guessed at.
    pub fn from_reason(reason: &'static snug_reasons::Reason, message: impl Into<String>) -> Self {
        let message = message.into();
        match Mapping::of(reason) {
            Some(m) => Self {
                status: m.status,
                code: m.code,
                message,
                retryable: m.retryable,
                revision: None,
                retry_after: None,
            },
            None => {
                tracing::error!(
                    reason = reason.name,
                    "an error reason without an HTTP answer"
                );
                Self {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    code: "INTERNAL",
                    message,
                    retryable: false,
                    revision: None,
                    retry_after: None,
                }
            }
        }
    }

    /// The error for a service's status: by its `ErrorInfo` reason, else by its code.
    pub fn from_status(status: &tonic::Status) -> Self {
        let name = snug_rpc::status::reason_of(status);
        match name.as_deref().and_then(snug_reasons::find) {
            Some(reason) if reason.http.is_some() => {
                let mut error = Self::from_reason(reason, status.message());
                // The sync service reports the user's current revision on a CAS refusal; the
                // client needs it (ETag and `revision`) to pull and retry.
                if error.status == StatusCode::PRECONDITION_FAILED {
                    error.revision = snug_rpc::status::metadata_of(status, "currentRevision");
                }
                error
            }
            _ => {
                let reason = name;
                let (http, code, retryable) = by_code(status.code());
                if http == StatusCode::SERVICE_UNAVAILABLE {
                    tracing::warn!(code = ?status.code(), reason = ?reason, "a service did not answer");
                    return Self::unavailable(
                        "a service the hub needs is unavailable; retry shortly",
                    );
                }
                tracing::warn!(code = ?status.code(), reason = ?reason, "a service error without a known reason");
                Self {
                    status: http,
                    code,
                    message: status.message().to_owned(),
                    retryable,
                    revision: None,
                    retry_after: None,
                }
            }
        }
    }

    /// A service that did not answer in time or could not be reached.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::from_reason(&snug_reasons::gateway::SERVICE_UNAVAILABLE, message)
    }

    /// Replaces the message, keeping the status and code.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }
}

impl From<crate::rate::Limited> for ApiError {
    fn from(limited: crate::rate::Limited) -> Self {
        let mut error = Self::from_reason(
            &snug_reasons::gateway::RATE_LIMITED,
            "too many requests — slow down and retry",
        );
        error.retry_after = Some(limited.retry_after_seconds);
        error
    }
}

#[derive(Serialize)]
struct Body<'a> {
    code: &'a str,
    message: &'a str,
    retryable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    revision: Option<&'a str>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut headers = HeaderMap::new();
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        } else if self.status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"snug\""),
            );
        }
        // RFC 7694: a refused coding names the ones taken; the delta routes' middleware says
        // `zstd` over this (encoding.rs), every other route takes none.
        if snug_reasons::gateway::UNSUPPORTED_CONTENT_ENCODING == *self.code {
            headers.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        if let Some(revision) = &self.revision
            && let Some(value) = etag::header_value(revision)
        {
            headers.insert(header::ETAG, value);
        }
        // Error bodies are about this request only; nobody should cache them.
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        let body = Body {
            code: self.code,
            message: &self.message,
            retryable: self.retryable,
            revision: self.revision.as_deref(),
        };
        let mut response = (self.status, headers, Json(body)).into_response();
        // For the metrics and the request span (observe.rs), which never parse bodies.
        response.extensions_mut().insert(ErrorCode(self.code));
        response
    }
}

/// The error `code` of a response an [`ApiError`] produced, left on the response for the
/// metrics and the request span (`observe.rs`), which never parse bodies. It lives here, not in
/// `observe.rs`, so the error table depends on nothing that depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode(pub &'static str);

#[cfg(test)]
mod tests {
    use super::*;

    /// The reasons a proto's error table declares (`// | REASON | CODE | …` rows).
    fn proto_reasons(text: &str) -> Vec<String> {
        text.lines()
            .filter_map(|line| line.trim().strip_prefix("// |"))
            .filter_map(|rest| rest.split('|').next())
            .map(str::trim)
            .filter(|r| !r.is_empty() && r.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
            .map(str::to_owned)
            .collect()
    }

    fn proto(path: &str) -> String {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
        std::fs::read_to_string(root.join(path)).expect("proto file")
    }

    #[test]
    fn every_sync_reason_has_a_row() {
        let reasons = proto_reasons(&proto("snug/sync/v1/sync.proto"));
        assert!(reasons.len() >= 10, "the table was parsed: {reasons:?}");
        for reason in reasons {
            assert!(
                lookup(&reason).is_some(),
                "sync reason {reason} has no HTTP mapping"
            );
        }
    }

    #[test]
    fn every_materialize_reason_has_a_row() {
        let reasons = proto_reasons(&proto("snug/materialize/v1/materialize.proto"));
        assert!(reasons.len() >= 20, "the table was parsed: {reasons:?}");
        for reason in reasons {
            assert!(
                lookup(&reason).is_some(),
                "materialize reason {reason} has no HTTP mapping"
            );
        }
    }

    #[test]
    fn every_reason_validate_sync_image_returns_has_a_row() {
        let text = proto("snug/schema/v1/schema.proto");
        // The reasons ValidateSyncImage documents in its `Errors:` lines.
        let start = text.find("rpc ValidateSyncImage").expect("rpc");
        let doc_start = text[..start].rfind("// Validates an image").expect("doc");
        let doc = &text[doc_start..start];
        let errors = doc.split("Errors:").nth(1).expect("errors line");
        let reasons: Vec<&str> = errors
            .split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .filter(|w| w.len() > 2 && !w.chars().any(|c| c.is_ascii_digit()))
            .collect();
        assert!(reasons.contains(&"SECRETS_PRESENT"), "{reasons:?}");
        for reason in reasons {
            assert!(
                lookup(reason).is_some(),
                "schema reason {reason} has no HTTP mapping"
            );
        }
        for shared in ["OVERLOADED", "INVALID_ARGUMENT", "INTERNAL"] {
            assert!(lookup(shared).is_some());
        }
    }

    #[test]
    fn reasons_are_unique_and_well_formed() {
        let mut seen = std::collections::BTreeSet::new();
        for m in table() {
            assert!(seen.insert(m.reason.name), "duplicate row {}", m.reason);
            assert!(
                m.reason.name.len() <= 63
                    && m.reason
                        .name
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c == '_')
            );
            assert!(m.status.is_client_error() || m.status.is_server_error());
            // Every 503 is retryable: it is the "try again shortly" answer.
            if m.status == StatusCode::SERVICE_UNAVAILABLE {
                assert!(m.retryable, "{}", m.reason);
            }
        }
    }

    #[test]
    fn a_status_without_reason_maps_by_code_and_no_answer_is_503() {
        let down = ApiError::from_status(&tonic::Status::unavailable("connection refused"));
        assert_eq!(
            (down.status, down.code, down.retryable),
            (StatusCode::SERVICE_UNAVAILABLE, "SERVICE_UNAVAILABLE", true)
        );
        let late = ApiError::from_status(&tonic::Status::deadline_exceeded("late"));
        assert_eq!(late.status, StatusCode::SERVICE_UNAVAILABLE);
        let missing = ApiError::from_status(&tonic::Status::not_found("x"));
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
    }

    #[test]
    fn the_reason_wins_over_the_code_and_the_message_is_never_read() {
        // A conflict carries the current revision in metadata; the message says something else
        // entirely, and the mapping must not care.
        let status = snug_rpc::status::error(
            Code::Aborted,
            "STALE_REVISION",
            "snug.sync",
            "NOT_FOUND quota exceeded",
            [("currentRevision", "r7-abc".to_owned())],
        );
        let error = ApiError::from_status(&status);
        assert_eq!(error.status, StatusCode::PRECONDITION_FAILED);
        assert_eq!(error.code, "STALE_REVISION");
        assert_eq!(error.revision.as_deref(), Some("r7-abc"));
    }
}
