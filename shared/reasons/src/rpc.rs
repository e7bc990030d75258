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

/// A bug or a host failure. The message is generic; the cause is in the server's log.
pub const INTERNAL: Reason = Reason {
    name: "INTERNAL",
    grpc: Some(GrpcCode::Internal),
    http: http(500, "INTERNAL", false),
    exit: CliExit::Always(Exit::Other),
    summary: "a bug or a host failure; the message is generic and the cause is logged",
};
