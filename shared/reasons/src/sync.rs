//! `snug.sync`: the reasons of `snug.sync.v1` (sync.proto's table), which are also the reasons
//! `snug-revstore` writes to its put ledger.
//!
//! The CLI never finds these causes itself: `snug sync` passes a hub's refusal on under the hub's
//! JSON code.

use crate::{CliExit, Domain, GrpcCode, Reason, http};

pub use crate::rpc::{
    BODY_ABORTED, DEADLINE_EXCEEDED, INTERNAL, INVALID_ARGUMENT, OVERLOADED, SERVICE_TOKEN_REFUSED,
    TOO_LARGE, UPLOAD_TOO_SLOW,
};
// An image the service refuses to store (issue 37: the sync service validates what it writes)
// is refused in the words the schema service uses for the same verdict.
pub use crate::container::NOT_A_USER_DATABASE;
pub use crate::schema::{
    APP_TOKEN_COLLISION, CONTAINER_NOT_ACCEPTED, HOSTILE_SCHEMA, MALFORMED, NOT_SQLITE,
    SCHEMA_TOO_NEW, SECRETS_PRESENT,
};

const fn sync(
    name: &'static str,
    grpc: GrpcCode,
    http: Option<crate::Http>,
    summary: &'static str,
) -> Reason {
    Reason {
        name,
        grpc: Some(grpc),
        http,
        exit: CliExit::Never,
        summary,
    }
}

/// A write without a precondition.
pub const PRECONDITION_REQUIRED: Reason = sync(
    "PRECONDITION_REQUIRED",
    GrpcCode::FailedPrecondition,
    http(428, "PRECONDITION_REQUIRED", false),
    "a write without a precondition",
);

/// Must-not-exist while an image exists, or must-match a revision this user never had; metadata
/// `currentRevision`, absent when the user has no image.
pub const REVISION_MISMATCH: Reason = sync(
    "REVISION_MISMATCH",
    GrpcCode::Aborted,
    // Retryable after a pull: the answer carries the current revision.
    http(412, "REVISION_MISMATCH", true),
    "must-not-exist while an image exists, or must-match a revision this user never had",
);

/// Must-match an earlier revision of this user; metadata `currentRevision`, `baseRevision`.
pub const STALE_REVISION: Reason = sync(
    "STALE_REVISION",
    GrpcCode::Aborted,
    http(412, "STALE_REVISION", true),
    "must-match an earlier revision of this user",
);

/// The image, declared or streamed, is over the per-user quota; metadata `quotaBytes`.
pub const QUOTA_EXCEEDED: Reason = sync(
    "QUOTA_EXCEEDED",
    GrpcCode::ResourceExhausted,
    http(413, "USERDB_TOO_LARGE", false),
    "the image, declared or streamed, is over the per-user quota",
);

/// The uniform denial: no such user, no image, a reclaimed or another user's revision.
pub const NOT_FOUND: Reason = sync(
    "NOT_FOUND",
    GrpcCode::NotFound,
    http(404, "NOT_FOUND", false),
    "no such user, no image yet, a reclaimed or another user's revision",
);

/// The idempotency key already produced a different write; metadata `revision`.
pub const IDEMPOTENCY_KEY_REUSED: Reason = sync(
    "IDEMPOTENCY_KEY_REUSED",
    GrpcCode::FailedPrecondition,
    http(409, "IDEMPOTENCY_KEY_REUSED", false),
    "the idempotency key produced a different write",
);

/// Different bytes at a content address: damaged storage.
pub const IMAGE_CONFLICT: Reason = sync(
    "IMAGE_CONFLICT",
    GrpcCode::Internal,
    http(500, "IMAGE_CONFLICT", false),
    "different bytes occupy a content address: stored data is damaged",
);

/// The backend cannot be reached or failed an I/O; retry.
pub const STORAGE_UNAVAILABLE: Reason = sync(
    "STORAGE_UNAVAILABLE",
    GrpcCode::Unavailable,
    http(503, "STORAGE_UNAVAILABLE", true),
    "the storage backend cannot be reached or failed; retry later",
);

/// Stored bytes failed verification.
pub const STORAGE_CORRUPT: Reason = sync(
    "STORAGE_CORRUPT",
    GrpcCode::DataLoss,
    http(500, "STORAGE_CORRUPT", false),
    "stored bytes failed verification against their address",
);

/// The storage is out of space: a full disk or quota under the embedded store, or a database that
/// cannot grow. Not retryable: nothing a client does clears it, and telling every client to retry
/// each second would only add load; an operator must make room (the hub logs it and counts it).
pub const STORAGE_FULL: Reason = sync(
    "STORAGE_FULL",
    GrpcCode::ResourceExhausted,
    http(507, "STORAGE_FULL", false),
    "the storage is out of space; an operator must make room",
);

/// The user's puts in flight (with those that failed or crashed and whose bytes are not reclaimed
/// yet) already hold the most bytes one user may stage: a client opening uploads faster than
/// they land waits for them.
pub const PUTS_IN_FLIGHT: Reason = sync(
    "PUTS_IN_FLIGHT",
    GrpcCode::Unavailable,
    http(503, "PUTS_IN_FLIGHT", true),
    "the user's unfinished puts already hold the most bytes one user may stage; retry shortly",
);

/// A delta manifest or delta that is not the format, or whose runs overlap, leave a gap or
/// reach past either image, or a page size that is not a power of two from 512 to 65536
/// (issue 21); nothing was stored.
pub const DELTA_INVALID: Reason = sync(
    "DELTA_INVALID",
    GrpcCode::InvalidArgument,
    http(400, "DELTA_INVALID", false),
    "a delta manifest or delta that is malformed, overlaps, leaves a gap or reaches out of range",
);

/// A literal page of a delta does not hash to its id; metadata `page`; nothing was stored.
pub const DELTA_PAGE_MISMATCH: Reason = sync(
    "DELTA_PAGE_MISMATCH",
    GrpcCode::InvalidArgument,
    http(400, "DELTA_PAGE_MISMATCH", false),
    "a literal page of a delta does not hash to its id",
);

/// The image a delta assembles does not have the SHA-256 the client claimed (an 8-byte page id
/// collision, or a client bug); nothing was stored; send the whole file.
pub const DELTA_DIGEST_MISMATCH: Reason = sync(
    "DELTA_DIGEST_MISMATCH",
    GrpcCode::InvalidArgument,
    http(400, "DELTA_DIGEST_MISMATCH", false),
    "the assembled image does not have the claimed SHA-256; send the whole file",
);

/// A delta's base is not a retained revision of this user (unknown, reclaimed or another
/// user's, alike), or the delta was made against other bytes: send the whole file.
pub const DELTA_BASE_GONE: Reason = sync(
    "DELTA_BASE_GONE",
    GrpcCode::FailedPrecondition,
    http(409, "DELTA_BASE_GONE", false),
    "the delta's base is not a retained revision of this user; send the whole file",
);

/// The user id was erased from this store (issue 36): it is refused for good, so nothing can be
/// stored again under an id no users directory names.
pub const USER_ERASED: Reason = sync(
    "USER_ERASED",
    GrpcCode::FailedPrecondition,
    http(401, "UNAUTHENTICATED", false),
    "the user id was erased from this store and is never used again",
);

/// The domain `snug.sync` and its reasons, in sync.proto's order.
pub const DOMAIN: Domain = Domain {
    name: "snug.sync",
    reasons: &[
        &PRECONDITION_REQUIRED,
        &REVISION_MISMATCH,
        &STALE_REVISION,
        &QUOTA_EXCEEDED,
        &NOT_FOUND,
        &IDEMPOTENCY_KEY_REUSED,
        &BODY_ABORTED,
        &UPLOAD_TOO_SLOW,
        &SERVICE_TOKEN_REFUSED,
        &IMAGE_CONFLICT,
        &STORAGE_UNAVAILABLE,
        &STORAGE_CORRUPT,
        &STORAGE_FULL,
        &PUTS_IN_FLIGHT,
        &DELTA_INVALID,
        &DELTA_PAGE_MISMATCH,
        &DELTA_DIGEST_MISMATCH,
        &DELTA_BASE_GONE,
        &USER_ERASED,
        &OVERLOADED,
        &TOO_LARGE,
        &INVALID_ARGUMENT,
        &DEADLINE_EXCEEDED,
        &INTERNAL,
        &NOT_SQLITE,
        &MALFORMED,
        &NOT_A_USER_DATABASE,
        &SCHEMA_TOO_NEW,
        &HOSTILE_SCHEMA,
        &APP_TOKEN_COLLISION,
        &CONTAINER_NOT_ACCEPTED,
        &SECRETS_PRESENT,
    ],
};
