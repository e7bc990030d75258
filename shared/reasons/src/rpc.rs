//! The reasons every service shares (`snug_rpc::status` builds them); each service's
//! [`Domain`](crate::Domain) lists the ones it sends.

use crate::{CliExit, Exit, GrpcCode, Reason, http};

/// A malformed request; metadata `field` names the offending field.
pub const INVALID_ARGUMENT: Reason = Reason {
    name: "INVALID_ARGUMENT",
    grpc: Some(GrpcCode::InvalidArgument),
    http: http(400, "INVALID_ARGUMENT", false),
    exit: CliExit::Always(Exit::Usage),
    summary: "a malformed request; metadata `field` names the field",
};

/// The request's payload, a stream, a file or a response exceeds its cap; metadata `limit`.
pub const TOO_LARGE: Reason = Reason {
    name: "TOO_LARGE",
    grpc: Some(GrpcCode::ResourceExhausted),
    http: http(413, "USERDB_TOO_LARGE", false),
    exit: CliExit::Always(Exit::Other),
    summary: "a stream, a file, a write's result or a response exceeds its cap; metadata `limit`",
};

/// Too much work in flight; retry later.
pub const OVERLOADED: Reason = Reason {
    name: "OVERLOADED",
    grpc: Some(GrpcCode::Unavailable),
    http: http(503, "OVERLOADED", true),
    exit: CliExit::Never,
    summary: "too many jobs queued; retry later",
};

/// The client's upload broke off before its end (the client cancelled the call or its connection
/// dropped); nothing was kept. Counted as CANCELLED.
pub const BODY_ABORTED: Reason = Reason {
    name: "BODY_ABORTED",
    grpc: Some(GrpcCode::Cancelled),
    http: http(400, "BODY_INCOMPLETE", true),
    exit: CliExit::Never,
    summary: "the upload stream broke off before its end (the client cancelled or went away); nothing was kept",
};

/// An upload fell behind the minimum rate after its grace (`snug_rpc::pace`); it was cut off,
/// its share of the upload budget freed, and nothing was kept.
pub const UPLOAD_TOO_SLOW: Reason = Reason {
    name: "UPLOAD_TOO_SLOW",
    grpc: Some(GrpcCode::DeadlineExceeded),
    // What the gateway answers for its own pace too: the body did not arrive in time.
    http: http(400, "BODY_INCOMPLETE", true),
    exit: CliExit::Never,
    summary: "an upload fell behind the minimum rate after its grace (SNUG_UPLOAD_MIN_RATE_KIB, SNUG_UPLOAD_GRACE); it was cut off and nothing was kept",
};

/// A call to a service that requires the hub's service token (`SNUG_SERVICE_TOKEN`) came
/// without it, or with another; nothing was done.
pub const SERVICE_TOKEN_REFUSED: Reason = Reason {
    name: "SERVICE_TOKEN_REFUSED",
    grpc: Some(GrpcCode::Unauthenticated),
    // Only the hub's own components call with the token: a gateway refused so is misconfigured,
    // which its client can neither fix nor wait out.
    http: http(500, "INTERNAL", false),
    exit: CliExit::Never,
    summary: "the call lacks the hub's service token (SNUG_SERVICE_TOKEN), or has another; nothing was done",
};

/// The call outlived its deadline, the client's `grpc-timeout` or the server's request timeout;
/// its work was stopped and nothing was kept.
pub const DEADLINE_EXCEEDED: Reason = Reason {
    name: "DEADLINE_EXCEEDED",
    grpc: Some(GrpcCode::DeadlineExceeded),
    // The gateway's answer to a service that did not answer in time.
    http: http(503, "SERVICE_UNAVAILABLE", true),
    exit: CliExit::Never,
    summary: "the call outlived its deadline (the client's `grpc-timeout` or the server's request timeout); its work was stopped, nothing was kept",
};

/// A bug or a host failure. The message is generic; the cause is in the server's log.
pub const INTERNAL: Reason = Reason {
    name: "INTERNAL",
    grpc: Some(GrpcCode::Internal),
    http: http(500, "INTERNAL", false),
    exit: CliExit::Always(Exit::Other),
    summary: "a bug or a host failure; the message is generic and the cause is logged",
};
