//! The `ErrorInfo` of `snug.container.v1` beside its reasons: the domain, and the metadata keys a
//! status fills in. The reasons themselves are `snug_reasons::container`'s, named where a status is
//! built; clients switch on them, and they never change meaning.

/// The registry's domain of this service: every reason it sends, with its gRPC code.
pub const REASONS: snug_reasons::Domain = snug_reasons::container::DOMAIN;

/// The error domain of this service.
pub const DOMAIN: &str = REASONS.name;
