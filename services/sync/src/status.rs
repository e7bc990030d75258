//! The one place `snug.sync.v1` chooses a reason, and with it the gRPC code: store errors to
//! `tonic::Status`.
//!
//! An image refused by the validation every write passes (`write.rs`) keeps the reason and
//! metadata its domain error states ([`image_refused`]). For the store, there is one exhaustive
//! match per `snug-revstore` error enum, so a new variant does not compile
//! until someone picks its code and reason here. Reasons are the store's own (`err.reason()` and
//! the status always agree; a test checks it), and each code is the reason's own in `snug-reasons`,
//! which a test checks against the table in `sync.proto`.

use snug_delta::DeltaError;
use snug_reasons::sync as reasons;
use snug_revstore::{
    InvalidToken, ProvisionError, PutError, ReadError, ReclaimError, StorageError,
};
use snug_rpc::status::from_reason;
use tonic::Status;

use crate::error_info::{self, DOMAIN};

/// The message of every denial. One fixed text, so that no wording tells a missing user from a
/// reclaimed image or from another user's image.
pub const DENIED: &str = "no such image";

/// Maps a refused or failed put or restore.
pub fn put_error(err: PutError) -> Status {
    match err {
        PutError::PreconditionRequired => from_reason(
            &reasons::PRECONDITION_REQUIRED,
            DOMAIN,
            "a write requires a precondition: must_not_exist for the first write, \
             must_match the current revision otherwise",
            [],
        ),
        PutError::NotFound => denied(),
        PutError::Conflict { current } => {
            let message = match &current {
                Some(_) => "revision mismatch: the write named a revision that is not current",
                None => {
                    "revision mismatch: there is no image yet; the first write uses must_not_exist"
                }
            };
            from_reason(
                &reasons::REVISION_MISMATCH,
                DOMAIN,
                message,
                current.map(|current| (error_info::CURRENT_REVISION, current.to_string())),
            )
        }
        PutError::Stale { base, current } => from_reason(
            &reasons::STALE_REVISION,
            DOMAIN,
            format!("stale revision: the image changed since {base}"),
            [
                (error_info::CURRENT_REVISION, current.to_string()),
                (error_info::BASE_REVISION, base.to_string()),
            ],
        ),
        PutError::QuotaExceeded { quota } => quota_exceeded(quota),
        PutError::ImageConflict { identity } => {
            // Content addresses are SHA-256: different bytes at one address means damaged storage,
            // which an operator must see; the client only learns that the write was refused.
            tracing::error!(
                identity,
                "different bytes occupy a content-addressed identity"
            );
            from_reason(
                &reasons::IMAGE_CONFLICT,
                DOMAIN,
                "the store refused the image: different bytes occupy its content address; \
                 the server log has the details",
                [],
            )
        }
        PutError::IdempotencyKeyReused { revision } => from_reason(
            &reasons::IDEMPOTENCY_KEY_REUSED,
            DOMAIN,
            "the idempotency key was already used for a different write",
            [(error_info::REVISION, revision.to_string())],
        ),
        PutError::BodyAborted(cause) => {
            tracing::info!(error = %cause, "an upload stream failed before its end");
            from_reason(
                &reasons::BODY_ABORTED,
                DOMAIN,
                "the image stream failed before its end; nothing was written",
                [],
            )
        }
        PutError::PutsInFlight { staged, limit } => {
            // Counted by the request metrics under reason="PUTS_IN_FLIGHT".
            tracing::info!(
                staged,
                limit,
                "refused a put: the user's unfinished puts are at their limit"
            );
            from_reason(
                &reasons::PUTS_IN_FLIGHT,
                DOMAIN,
                "this user's unfinished uploads already hold the most bytes one user may stage; retry when they finish",
                [
                    (error_info::STAGED_BYTES, staged.to_string()),
                    (error_info::LIMIT_BYTES, limit.to_string()),
                ],
            )
        }
        PutError::Storage(err) => storage_error(err),
    }
}

/// Maps a failed erasure. It lists no objects, so the listing refusals of a reclamation pass
/// cannot happen there; should one, it is the storage failing to answer.
pub fn reclaim_error(err: ReclaimError) -> Status {
    match err {
        ReclaimError::Storage(err) => storage_error(err),
        err @ (ReclaimError::IncompleteListing | ReclaimError::UnreadableCandidate { .. }) => {
            storage_error(StorageError::Unavailable(Box::new(err)))
        }
    }
}

/// Maps a failed head or download.
pub fn read_error(err: ReadError) -> Status {
    match err {
        ReadError::NotFound => denied(),
        ReadError::Storage(err) => storage_error(err),
    }
}

/// Maps a refused first contact: an erased id, or the storage.
pub fn provision_error(err: ProvisionError) -> Status {
    match err {
        ProvisionError::Erased => from_reason(
            &reasons::USER_ERASED,
            DOMAIN,
            "this user id was erased from the store and is never used again",
            [],
        ),
        ProvisionError::Storage(err) => storage_error(err),
    }
}

/// Maps a failure of the storage itself. The cause is logged here, not sent: it may name paths,
/// hosts or SQL.
pub fn storage_error(err: StorageError) -> Status {
    match err {
        StorageError::Unavailable(cause) => {
            tracing::warn!(error = %cause, "the sync store is unavailable");
            from_reason(
                &reasons::STORAGE_UNAVAILABLE,
                DOMAIN,
                "the storage backend is unavailable; retry later",
                [],
            )
        }
        StorageError::Full(cause) => {
            // One fixed message and field an alert can match; counted by the request metrics
            // under reason="STORAGE_FULL".
            tracing::error!(alert = "STORAGE_FULL", error = %cause, "the sync store is out of space; make room or grow its volume");
            from_reason(
                &reasons::STORAGE_FULL,
                DOMAIN,
                "the storage is out of space; an operator must make room",
                [],
            )
        }
        StorageError::Corrupt { object } => {
            tracing::error!(object, "stored bytes failed verification");
            from_reason(
                &reasons::STORAGE_CORRUPT,
                DOMAIN,
                "stored bytes failed verification; the server log has the details",
                [],
            )
        }
    }
}

/// This service's ErrorInfo domain, for the mappings built as [`snug_rpc::status::Mapped`].
#[derive(Debug)]
pub enum SyncDomain {}

impl snug_rpc::status::Domain for SyncDomain {
    const DOMAIN: &'static str = DOMAIN;
}

/// Maps an image the service refuses to store: the validation's own reason and metadata
/// (`snug_schema`'s `reasoned.rs`), the words the schema service uses for the same verdict.
pub fn image_refused(err: snug_schema::SyncImageError) -> Status {
    snug_rpc::status::Mapped::<SyncDomain>::refused(&err).into()
}

/// The uniform denial: no such user, no image, a reclaimed or another user's revision.
pub fn denied() -> Status {
    from_reason(&reasons::NOT_FOUND, DOMAIN, DENIED, [])
}

/// An image over the per-user quota, declared or streamed.
pub fn quota_exceeded(quota: u64) -> Status {
    from_reason(
        &reasons::QUOTA_EXCEEDED,
        DOMAIN,
        format!("the image exceeds the per-user quota of {quota} bytes"),
        [(error_info::QUOTA_BYTES, quota.to_string())],
    )
}

/// A request field that failed the store's validation (user id, principal, revision, key).
pub fn invalid(field: &str, err: InvalidToken) -> Status {
    snug_rpc::status::invalid_argument(DOMAIN, field, err.to_string())
}

/// Maps a refused manifest or delta (issue 21). Nothing was stored for any of them.
pub fn delta_error(err: DeltaError, quota: u64) -> Status {
    match err {
        DeltaError::Malformed { .. }
        | DeltaError::PageSize { .. }
        | DeltaError::Duplicate { .. }
        | DeltaError::Gap { .. }
        | DeltaError::OutOfRange { .. } => {
            from_reason(&reasons::DELTA_INVALID, DOMAIN, err.to_string(), [])
        }
        // A page count over the quota is an image over the quota.
        DeltaError::TooLarge { .. } => quota_exceeded(quota),
        DeltaError::PageMismatch { page } => from_reason(
            &reasons::DELTA_PAGE_MISMATCH,
            DOMAIN,
            err.to_string(),
            [(error_info::PAGE, page.to_string())],
        ),
        DeltaError::DigestMismatch => from_reason(
            &reasons::DELTA_DIGEST_MISMATCH,
            DOMAIN,
            "the assembled image does not have the claimed SHA-256; send the whole file",
            [],
        ),
        // Made against other bytes than the base named: as good as a base that is gone.
        DeltaError::SourceMismatch { .. } => base_gone(),
    }
}

/// A delta's base that is not a retained revision of this user: unknown, reclaimed and another
/// user's alike, one fixed message, as the uniform denial.
pub fn base_gone() -> Status {
    from_reason(
        &reasons::DELTA_BASE_GONE,
        DOMAIN,
        "the delta's base is not a retained revision of this image; send the whole file",
        [],
    )
}
