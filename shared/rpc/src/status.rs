//! Building `tonic::Status` values that carry a google.rpc `ErrorInfo` reason.
//!
//! Clients (the gateway, other hubs) switch on `ErrorInfo.reason`, never on the message text, so
//! every status a service returns is made here with a reason from that service's `reason.rs`.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt as _};

/// Reasons shared by every service (each service adds its own in its `reason.rs`).
pub mod reason {
    /// A malformed request; metadata `field` names the offending field.
    pub const INVALID_ARGUMENT: &str = "INVALID_ARGUMENT";
    /// The request's payload exceeds the cap.
    pub const TOO_LARGE: &str = "TOO_LARGE";
    /// Too much work in flight; retry later.
    pub const OVERLOADED: &str = "OVERLOADED";
    /// A bug. The message is generic; the cause is in the server's log.
    pub const INTERNAL: &str = "INTERNAL";
}

/// Builds a status with `ErrorInfo { reason, domain, metadata }` attached.
pub fn error(
    code: Code,
    reason: &'static str,
    domain: &'static str,
    message: impl Into<String>,
    metadata: impl IntoIterator<Item = (&'static str, String)>,
) -> Status {
    let metadata: HashMap<String, String> =
        metadata.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    Status::with_error_details(
        code,
        message,
        ErrorDetails::with_error_info(reason, domain, metadata),
    )
}

/// A malformed request: `INVALID_ARGUMENT` with reason `INVALID_ARGUMENT` and the field's path.
pub fn invalid_argument(domain: &'static str, field: &str, message: impl Into<String>) -> Status {
    error(
        Code::InvalidArgument,
        reason::INVALID_ARGUMENT,
        domain,
        message,
        [("field", field.to_owned())],
    )
}

/// A payload over its cap: `RESOURCE_EXHAUSTED` with reason `TOO_LARGE`.
pub fn too_large(domain: &'static str, max: u64) -> Status {
    error(
        Code::ResourceExhausted,
        reason::TOO_LARGE,
        domain,
        format!("the payload exceeds the limit of {max} bytes"),
        [("limit", max.to_string())],
    )
}

/// A bug or an unexpected failure. The cause is logged here with the request's span, and the
/// client gets a generic message, so internals (paths, SQL) never leak.
pub fn internal(domain: &'static str, cause: &dyn std::error::Error) -> Status {
    tracing::error!(error = %cause, domain, "internal error");
    error(
        Code::Internal,
        reason::INTERNAL,
        domain,
        "internal error; the server log has the details",
        [],
    )
}

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
}
