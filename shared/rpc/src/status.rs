//! Building `tonic::Status` values that carry a google.rpc `ErrorInfo` reason.
//!
//! Clients (the gateway, other hubs) switch on `ErrorInfo.reason`, never on the message text, so
//! every status a service returns is made here with a reason of `snug-reasons`.
//! A service names a [`Reason`] of `snug-reasons` and [`from_reason`] (or [`Mapped::new`]) takes the
//! gRPC code from it, so no service picks a code by hand.

use std::collections::HashMap;

use snug_reasons::Reason;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt as _};

/// Returns the gRPC code of `reason`. A reason without one (the gateway's, the CLI's) is no
/// service's to send; a test of `snug-reasons` keeps those out of every service domain.
pub fn code_of(reason: &Reason) -> Code {
    reason
        .grpc
        .map_or(Code::Internal, |code| Code::from(code.number()))
}

/// Builds a status for `reason`: its gRPC code and `ErrorInfo { reason, domain, metadata }`.
pub fn from_reason(
    reason: &'static Reason,
    domain: &'static str,
    message: impl Into<String>,
    metadata: impl IntoIterator<Item = (&'static str, String)>,
) -> Status {
    error(code_of(reason), reason.name, domain, message, metadata)
}

/// Builds a status with `ErrorInfo { reason, domain, metadata }` attached and a code chosen by
/// the caller; services use [`from_reason`], whose code comes from the reason.
pub fn error(
    code: Code,
    reason: &'static str,
    domain: &'static str,
    message: impl Into<String>,
    metadata: impl IntoIterator<Item = (&'static str, String)>,
) -> Status {
    // Bounded here, for every status of every service: a message or value that echoes a client's
    // input (an app id of 10 KB) would otherwise push the trailers past the 16 KiB a gRPC client
    // accepts, and the caller would see RESOURCE_EXHAUSTED instead of this status.
    let metadata: HashMap<String, String> = metadata
        .into_iter()
        .map(|(k, v)| (k.to_owned(), excerpt(&v, MAX_METADATA_CHARS)))
        .collect();
    Status::with_error_details(
        code,
        excerpt(&message.into(), MAX_MESSAGE_CHARS),
        ErrorDetails::with_error_info(reason, domain, metadata),
    )
}

/// The most characters of a status message that are sent ([`excerpt`]).
pub const MAX_MESSAGE_CHARS: usize = 1024;

/// The most characters of one `ErrorInfo` metadata value that are sent ([`excerpt`]).
pub const MAX_METADATA_CHARS: usize = 256;

/// `text` as a status carries it: control characters other than newlines and tabs escaped (a
/// client's bytes never reach a terminal or a log line raw), and at most `max` characters of
/// the result, the rest replaced by a count of what was left out.
pub fn excerpt(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max + 32));
    let mut kept = 0;
    for (at, c) in text.char_indices() {
        let escaped: String = if c.is_control() && c != '\n' && c != '\t' {
            c.escape_default().collect()
        } else {
            c.to_string()
        };
        if kept + escaped.chars().count() > max {
            out.push_str(&format!("… ({} more bytes)", text.len() - at));
            return out;
        }
        kept += escaped.chars().count();
        out.push_str(&escaped);
    }
    out
}

/// A malformed request: `INVALID_ARGUMENT` with reason `INVALID_ARGUMENT` and the field's path.
pub fn invalid_argument(domain: &'static str, field: &str, message: impl Into<String>) -> Status {
    from_reason(
        &snug_reasons::rpc::INVALID_ARGUMENT,
        domain,
        message,
        [("field", field.to_owned())],
    )
}

/// The most bytes an identifier a request names (an app id, a doc slug, a chat thread id, a
/// settings or secret key, a connection slot) may have. Far above any the reference
/// implementation or this project makes (a UUID is 36, a starter's app id a few dozen), and small
/// enough that a refusal, a log line or a table name built from one stays small.
pub const MAX_IDENTIFIER_BYTES: usize = 256;

/// Why `value` cannot be an identifier a service accepts, if it cannot: longer than
/// [`MAX_IDENTIFIER_BYTES`], or holding a control character. The answer never repeats the value,
/// so a hostile one cannot grow a status past what a client accepts (issue 23, point 5).
pub fn identifier_problem(value: &str) -> Option<String> {
    if value.len() > MAX_IDENTIFIER_BYTES {
        return Some(format!(
            "an identifier is at most {MAX_IDENTIFIER_BYTES} bytes; this one is {}",
            value.len()
        ));
    }
    value
        .chars()
        .any(char::is_control)
        .then(|| "an identifier holds no control characters".to_owned())
}

/// [`identifier_problem`] as the status of a field of a request: INVALID_ARGUMENT naming `field`.
pub fn identifier(domain: &'static str, field: &str, value: &str) -> Result<(), Status> {
    match identifier_problem(value) {
        None => Ok(()),
        Some(problem) => Err(invalid_argument(domain, field, problem)),
    }
}

/// A payload over its cap: `RESOURCE_EXHAUSTED` with reason `TOO_LARGE`.
pub fn too_large(domain: &'static str, max: u64) -> Status {
    from_reason(
        &snug_reasons::rpc::TOO_LARGE,
        domain,
        format!("the payload exceeds the limit of {max} bytes"),
        [("limit", max.to_string())],
    )
}

/// A bug or an unexpected failure. The cause is logged here with the request's span, and the
/// client gets a generic message, so internals (paths, SQL) never leak.
pub fn internal(domain: &'static str, cause: &dyn std::error::Error) -> Status {
    tracing::error!(error = %cause, domain, "internal error");
    from_reason(
        &snug_reasons::rpc::INTERNAL,
        domain,
        "internal error; the server log has the details",
        [],
    )
}

/// The ErrorInfo domain of one service, for [`Mapped`].
pub trait Domain {
    /// The domain string, e.g. `snug.schema`.
    const DOMAIN: &'static str;
}

/// A domain error with its code, reason and metadata chosen, before it becomes a `Status`.
///
/// Services build these in their one exhaustive error mapping (`status.rs`), so a caller can
/// still add metadata (the index of the failing entry of a batch) before the status is made.
pub struct Mapped<D>(MappedInner, std::marker::PhantomData<fn() -> D>);

enum MappedInner {
    Error {
        code: Code,
        reason: &'static Reason,
        message: String,
        metadata: Vec<(&'static str, String)>,
    },
    /// A bug or a host failure, logged by [`internal`] when the status is made — that is, when
    /// the caller is answered: a job whose caller went away ends with whatever error it met,
    /// and nobody is answered and nothing logged as a failure for it.
    Internal { cause: String },
}

impl<D> std::fmt::Debug for Mapped<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            MappedInner::Error {
                code,
                reason,
                message,
                metadata,
            } => f
                .debug_struct("Mapped")
                .field("code", code)
                .field("reason", reason)
                .field("message", message)
                .field("metadata", metadata)
                .finish(),
            MappedInner::Internal { cause } => {
                f.debug_tuple("Mapped::Internal").field(cause).finish()
            }
        }
    }
}

impl<D: Domain> Mapped<D> {
    /// Builds a mapping; the gRPC code is the reason's.
    pub fn new(
        reason: &'static Reason,
        message: impl Into<String>,
        metadata: impl IntoIterator<Item = (&'static str, String)>,
    ) -> Self {
        Mapped(
            MappedInner::Error {
                code: code_of(reason),
                reason,
                message: message.into(),
                metadata: metadata.into_iter().collect(),
            },
            std::marker::PhantomData,
        )
    }

    /// A domain error under its own reason and metadata ([`snug_reasons::Reasoned`]); one whose
    /// reason no service sends (a failure of the host) is INTERNAL.
    pub fn refused(err: &impl snug_reasons::Reasoned) -> Self {
        let reason = err.reason();
        if reason.grpc.is_none() || *reason == snug_reasons::rpc::INTERNAL {
            return Mapped::internal(err);
        }
        Mapped::new(reason, err.message(), err.metadata())
    }

    /// A malformed request: reason `INVALID_ARGUMENT`, metadata `field`.
    pub fn invalid_argument(field: impl Into<String>, message: impl Into<String>) -> Self {
        Mapped::new(
            &snug_reasons::rpc::INVALID_ARGUMENT,
            message,
            [("field", field.into())],
        )
    }

    /// [`identifier_problem`] of a request's field, as INVALID_ARGUMENT naming `field`.
    pub fn identifier(field: impl Into<String>, value: &str) -> Result<(), Self> {
        match identifier_problem(value) {
            None => Ok(()),
            Some(problem) => Err(Mapped::invalid_argument(field, problem)),
        }
    }

    /// A payload or response over its cap: reason `TOO_LARGE`, metadata `limit`.
    pub fn too_large(message: impl Into<String>, limit: u64) -> Self {
        Mapped::new(
            &snug_reasons::rpc::TOO_LARGE,
            message,
            [("limit", limit.to_string())],
        )
    }

    /// A bug or a host failure: logged when it becomes a status, generic to the client.
    pub fn internal(cause: &dyn std::error::Error) -> Self {
        Mapped(
            MappedInner::Internal {
                cause: cause.to_string(),
            },
            std::marker::PhantomData,
        )
    }

    /// Adds a metadata entry (not to INTERNAL, which never describes the request).
    pub fn with(mut self, key: &'static str, value: String) -> Self {
        if let MappedInner::Error { metadata, .. } = &mut self.0 {
            metadata.push((key, value));
        }
        self
    }

    /// Returns the reason, for tests and logs.
    pub fn reason(&self) -> &'static Reason {
        match &self.0 {
            MappedInner::Error { reason, .. } => reason,
            MappedInner::Internal { .. } => &snug_reasons::rpc::INTERNAL,
        }
    }
}

impl<D: Domain> From<Mapped<D>> for Status {
    fn from(mapped: Mapped<D>) -> Status {
        match mapped.0 {
            MappedInner::Error {
                code,
                reason,
                message,
                metadata,
            } => error(code, reason.name, D::DOMAIN, message, metadata),
            MappedInner::Internal { cause } => internal(D::DOMAIN, &Cause(cause)),
        }
    }
}

/// A cause kept as its text until it is logged.
#[derive(Debug)]
struct Cause(String);

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Cause {}

/// Returns the `ErrorInfo` reason of a status, if it carries one.
pub fn reason_of(status: &Status) -> Option<String> {
    status.get_details_error_info().map(|info| info.reason)
}

/// Returns one metadata value of a status's `ErrorInfo`.
pub fn metadata_of(status: &Status, key: &str) -> Option<String> {
    status
        .get_details_error_info()
        .and_then(|info| info.metadata.get(key).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_info_round_trips_through_the_status() {
        let status = error(
            Code::FailedPrecondition,
            "LOCKED",
            "snug.container",
            "locked",
            [("slots", "2".to_owned())],
        );
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert_eq!(reason_of(&status).as_deref(), Some("LOCKED"));
        assert_eq!(metadata_of(&status, "slots").as_deref(), Some("2"));
        let info = status.get_details_error_info().expect("error info");
        assert_eq!(info.domain, "snug.container");
    }

    #[test]
    fn excerpts_escape_control_characters_and_stop_at_the_bound() {
        let cases: [(&str, usize, &str); 6] = [
            ("app-1", 16, "app-1"),
            ("line one\nline two\t!", 64, "line one\nline two\t!"),
            ("bell\u{7}esc\u{1b}[31m", 64, "bell\\u{7}esc\\u{1b}[31m"),
            ("abcdef", 3, "abc… (3 more bytes)"),
            ("ééé", 2, "éé… (2 more bytes)"),
            ("a\u{1b}b", 4, "a… (2 more bytes)"),
        ];
        for (text, max, expected) in cases {
            assert_eq!(excerpt(text, max), expected, "{text:?} at {max}");
        }
    }

    /// An identifier of any length fits the trailers: what a status echoes is bounded.
    #[test]
    fn a_status_echoing_a_huge_identifier_stays_small() {
        let id = "x".repeat(100_000);
        let status = from_reason(
            &snug_reasons::rpc::INVALID_ARGUMENT,
            "snug.test",
            format!("no app {id}"),
            [("appId", id.clone())],
        );
        assert!(
            status.message().len() < MAX_MESSAGE_CHARS + 64,
            "{}",
            status.message().len()
        );
        let value = metadata_of(&status, "appId").expect("appId");
        assert!(value.starts_with("xxxx") && value.len() < MAX_METADATA_CHARS + 64);
        // google.rpc.Status repeats the message beside the ErrorInfo: both bounded, far below 16 KiB.
        assert!(
            status.details().len() < 2048,
            "{} bytes of details",
            status.details().len()
        );
    }
}
