//! `snug.admin`: the reasons of `snug.admin.v1` (admin.proto's table), the hub's administration
//! API on the admin port.
//!
//! `UNAUTHENTICATED` and `SERVICE_UNAVAILABLE` are the gateway's words for the same causes (no
//! valid credentials; a service that does not answer), defined once in [`crate::gateway`].

use crate::{CliExit, Domain, GrpcCode, Reason};

pub use crate::gateway::{SERVICE_UNAVAILABLE, UNAUTHENTICATED};
pub use crate::rpc::{DEADLINE_EXCEEDED, INTERNAL, INVALID_ARGUMENT, OVERLOADED, TOO_LARGE};

const fn admin(name: &'static str, grpc: GrpcCode, summary: &'static str) -> Reason {
    Reason {
        name,
        grpc: Some(grpc),
        // The admin API is gRPC only: no HTTP route gives these.
        http: None,
        exit: CliExit::Never,
        summary,
    }
}

/// No user has this id or name.
pub const USER_NOT_FOUND: Reason = admin(
    "USER_NOT_FOUND",
    GrpcCode::NotFound,
    "no user has this id or name",
);

/// A user already has this name.
pub const USER_EXISTS: Reason = admin(
    "USER_EXISTS",
    GrpcCode::AlreadyExists,
    "a user already has this name",
);

/// No live hub token has this id.
pub const TOKEN_NOT_FOUND: Reason = admin(
    "TOKEN_NOT_FOUND",
    GrpcCode::NotFound,
    "no live hub token has this id",
);

/// The users directory failed or cannot be reached.
pub const DIRECTORY_UNAVAILABLE: Reason = admin(
    "DIRECTORY_UNAVAILABLE",
    GrpcCode::Unavailable,
    "the users directory failed or cannot be reached; retry later",
);

/// Every reason a status of domain `snug.admin` can carry, in admin.proto's order.
pub const DOMAIN: Domain = Domain {
    name: "snug.admin",
    reasons: &[
        &UNAUTHENTICATED,
        &USER_NOT_FOUND,
        &USER_EXISTS,
        &TOKEN_NOT_FOUND,
        &DIRECTORY_UNAVAILABLE,
        &SERVICE_UNAVAILABLE,
        &OVERLOADED,
        &TOO_LARGE,
        &INVALID_ARGUMENT,
        &DEADLINE_EXCEEDED,
        &INTERNAL,
    ],
};

/// The exit status of `snug-hub users`, the operator's client of this API, and of the other
/// operator commands that name a user (`snug-hub sync usage|erase`), for each reason that has one
/// of its own: 2 a malformed request, 3 no such user or token, 4 the name is taken.
/// Every other refusal (the directory or the store failing, no answer) exits 1.
pub const USERS_EXIT: &[(&Reason, u8)] = &[
    (&INVALID_ARGUMENT, 2),
    (&USER_NOT_FOUND, 3),
    (&TOKEN_NOT_FOUND, 3),
    (&USER_EXISTS, 4),
];

/// `snug-hub users`' exit status for a refusal whose `ErrorInfo.reason` is `reason`
/// ([`USERS_EXIT`], else 1).
pub fn users_exit(reason: &str) -> u8 {
    USERS_EXIT
        .iter()
        .find(|(known, _)| known.name == reason)
        .map_or(1, |(_, exit)| *exit)
}
