//! The `ErrorInfo` reasons of `snug.sync.v1` (domain `snug.sync`).
//!
//! Clients switch on these strings; they are part of the API and never change meaning. The
//! store's own refusals use the reason strings `snug-revstore` defines (re-exported here), so the
//! put ledger, the gRPC status and the gateway's JSON all say the same word for the same cause.

pub use snug_revstore::reason::{
    BODY_ABORTED, IDEMPOTENCY_KEY_REUSED, IMAGE_CONFLICT, NOT_FOUND, PRECONDITION_REQUIRED,
    QUOTA_EXCEEDED, REVISION_MISMATCH, STALE_REVISION, STORAGE_CORRUPT, STORAGE_UNAVAILABLE,
};
pub use snug_rpc::status::reason::{INTERNAL, INVALID_ARGUMENT};

/// The registry's domain of this service: every reason it sends, with its gRPC code.
pub const REASONS: snug_reasons::Domain = snug_reasons::sync::DOMAIN;

/// The error domain of this service.
pub const DOMAIN: &str = REASONS.name;

/// Metadata key: the user's current revision (on REVISION_MISMATCH and STALE_REVISION).
pub const CURRENT_REVISION: &str = "currentRevision";
/// Metadata key: the revision the writer built on (on STALE_REVISION).
pub const BASE_REVISION: &str = "baseRevision";
/// Metadata key: the per-user quota in bytes (on QUOTA_EXCEEDED).
pub const QUOTA_BYTES: &str = "quotaBytes";
/// Metadata key: the revision an idempotency key produced (on IDEMPOTENCY_KEY_REUSED).
pub const REVISION: &str = "revision";
/// Metadata key: the bytes the user's unfinished puts hold (on PUTS_IN_FLIGHT).
pub const STAGED_BYTES: &str = "stagedBytes";
/// Metadata key: the most bytes one user's unfinished puts may hold (on PUTS_IN_FLIGHT).
pub const LIMIT_BYTES: &str = "limitBytes";

/// Every reason this service can return, for the reason-table tests: the names of
/// [`REASONS`], in its order.
pub const ALL: &[&str] = &snug_reasons::names::<{ REASONS.reasons.len() }>(REASONS.reasons);
/// Metadata key: the target page a delta's literal failed on (on DELTA_PAGE_MISMATCH).
pub const PAGE: &str = "page";
