//! The `ErrorInfo` reasons of `snug.admin.v1` (domain `snug.admin`), from `snug-reasons`.

/// The registry's domain of this service: every reason it sends, with its gRPC code.
pub const REASONS: snug_reasons::Domain = snug_reasons::admin::DOMAIN;

/// The error domain of this service.
pub const DOMAIN: &str = REASONS.name;

/// Every reason this service can return, for the reason-table tests: the names of [`REASONS`],
/// in its order.
pub const ALL: &[&str] = &snug_reasons::names::<{ REASONS.reasons.len() }>(REASONS.reasons);
