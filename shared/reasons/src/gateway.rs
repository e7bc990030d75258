//! `snug.gateway`: the reasons the HTTP gateway gives itself, before or instead of a service.
//!
//! No service sends these, so they have no gRPC code, but for the two the admin API shares
//! (`UNAUTHENTICATED`, `SERVICE_UNAVAILABLE`); each is an HTTP answer.

use crate::{CliExit, Domain, GrpcCode, Http, Reason, http};

const fn gateway(name: &'static str, http: Option<Http>, summary: &'static str) -> Reason {
    Reason {
        name,
        grpc: None,
        http,
        exit: CliExit::Never,
        summary,
    }
}

/// No valid bearer token or session.
/// The admin API (`snug.admin.v1`) sends it too, as gRPC UNAUTHENTICATED.
pub const UNAUTHENTICATED: Reason = Reason {
    grpc: Some(GrpcCode::Unauthenticated),
    ..gateway(
        "UNAUTHENTICATED",
        http(401, "UNAUTHENTICATED", false),
        "no valid credentials: bearer token, session or admin token",
    )
};

/// A cookie-authenticated write without the matching `x-snug-csrf` header.
pub const CSRF_REJECTED: Reason = gateway(
    "CSRF_REJECTED",
    http(403, "CSRF_REJECTED", false),
    "a cookie-authenticated write without the matching `x-snug-csrf` header",
);

/// A `PUT /userdb` body that is not `application/octet-stream`.
pub const UNSUPPORTED_MEDIA_TYPE: Reason = gateway(
    "UNSUPPORTED_MEDIA_TYPE",
    http(415, "UNSUPPORTED_MEDIA_TYPE", false),
    "a `PUT /userdb` body that is not `application/octet-stream`",
);

/// A request body in a content coding the route does not take (RFC 7694: the answer's
/// `Accept-Encoding` says which it takes).
pub const UNSUPPORTED_CONTENT_ENCODING: Reason = gateway(
    "UNSUPPORTED_CONTENT_ENCODING",
    http(415, "UNSUPPORTED_CONTENT_ENCODING", false),
    "a request body in a `Content-Encoding` the route does not take (only the delta routes take `zstd`)",
);

/// No such route.
pub const NO_ROUTE: Reason = gateway("NO_ROUTE", http(404, "NOT_FOUND", false), "no such route");

/// The route exists but not for this method.
pub const METHOD_NOT_ALLOWED: Reason = gateway(
    "METHOD_NOT_ALLOWED",
    http(405, "METHOD_NOT_ALLOWED", false),
    "the route exists but not for this method",
);

/// A service did not answer within its deadline, or could not be reached.
/// The admin API sends it too, as gRPC UNAVAILABLE, when the sync service does not answer.
pub const SERVICE_UNAVAILABLE: Reason = Reason {
    grpc: Some(GrpcCode::Unavailable),
    ..gateway(
        "SERVICE_UNAVAILABLE",
        http(503, "SERVICE_UNAVAILABLE", true),
        "a service did not answer within its deadline, or could not be reached",
    )
};

/// The gateway sheds load: too many requests in flight.
pub const GATEWAY_OVERLOADED: Reason = gateway(
    "GATEWAY_OVERLOADED",
    http(503, "OVERLOADED", true),
    "the gateway sheds load: too many requests in flight",
);

/// With authentication off, a request whose Host is not a loopback name (DNS rebinding guard).
pub const MISDIRECTED_REQUEST: Reason = gateway(
    "MISDIRECTED_REQUEST",
    http(421, "MISDIRECTED_REQUEST", false),
    "with authentication off, a request whose Host is not a loopback name",
);

/// A malformed request the gateway refuses before any service sees it.
pub const BAD_REQUEST: Reason = gateway(
    "BAD_REQUEST",
    http(400, "BAD_REQUEST", false),
    "a malformed request the gateway refuses before any service sees it",
);

/// A request body that stopped arriving (idle timeout) or broke off.
pub const BODY_INCOMPLETE: Reason = gateway(
    "BODY_INCOMPLETE",
    http(400, "BODY_INCOMPLETE", true),
    "a request body that stopped arriving (idle timeout) or broke off",
);

/// A coded request body that does not decode.
pub const BODY_ENCODING_INVALID: Reason = gateway(
    "BODY_ENCODING_INVALID",
    http(400, "BODY_ENCODING_INVALID", false),
    "a `Content-Encoding: zstd` body that is not zstd, ends inside a frame, or asks for a window over 8 MiB",
);

/// A service answered with something the gateway cannot use (a bug on one side).
pub const BAD_GATEWAY: Reason = gateway(
    "BAD_GATEWAY",
    http(502, "BAD_GATEWAY", true),
    "a service answered with something the gateway cannot use",
);

/// The route needs a service this deployment does not run (no address configured).
pub const NOT_DEPLOYED: Reason = gateway(
    "NOT_DEPLOYED",
    http(501, "NOT_DEPLOYED", false),
    "the route needs a service this deployment does not run",
);

/// A client address or principal that spent its rate limit's burst (the reference's 429).
/// `snug sync` waits out its `Retry-After` within a bound, then reports it (exit 10).
pub const RATE_LIMITED: Reason = Reason {
    exit: CliExit::Always(crate::Exit::Unavailable),
    ..gateway(
        "RATE_LIMITED",
        http(429, "RATE_LIMITED", true),
        "a client address or principal that spent its rate limit's burst; `Retry-After` says when to retry",
    )
};

/// The gateway's own reasons.
pub const DOMAIN: Domain = Domain {
    name: "snug.gateway",
    reasons: &[
        &UNAUTHENTICATED,
        &CSRF_REJECTED,
        &UNSUPPORTED_MEDIA_TYPE,
        &UNSUPPORTED_CONTENT_ENCODING,
        &NO_ROUTE,
        &METHOD_NOT_ALLOWED,
        &SERVICE_UNAVAILABLE,
        &GATEWAY_OVERLOADED,
        &MISDIRECTED_REQUEST,
        &BAD_REQUEST,
        &BODY_INCOMPLETE,
        &BODY_ENCODING_INVALID,
        &BAD_GATEWAY,
        &NOT_DEPLOYED,
        &RATE_LIMITED,
    ],
};
