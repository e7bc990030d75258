//! The `ErrorInfo` of `snug.sync.v1` beside its reasons: the domain, and the metadata keys a
//! status fills in. The reasons themselves are `snug_reasons::sync`'s, named where a status is
//! built; clients switch on them, and they never change meaning.

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

/// Metadata key: the target page a delta's literal failed on (on DELTA_PAGE_MISMATCH).
pub const PAGE: &str = "page";
