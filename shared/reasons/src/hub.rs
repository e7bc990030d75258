//! `snug.hub`: the refusals an operator meets from the hub itself (its revision store and its
//! configuration); no `ErrorInfo` carries them, the hub's log, its health detail and `snug-hub`'s
//! messages do.

use crate::{CliExit, Domain, Reason};

const fn hub(name: &'static str, summary: &'static str) -> Reason {
    Reason {
        name,
        grpc: None,
        http: None,
        exit: CliExit::Never,
        summary,
    }
}

/// A value the store parses (a user id, a principal, a revision, a key or a digest) is not one.
pub const INVALID_FIELD: Reason = hub(
    "INVALID_FIELD",
    "a user id, principal, revision, key or digest the store cannot parse",
);
/// Reclamation refused: the listing of objects at rest was incomplete.
pub const LISTING_INCOMPLETE: Reason = hub(
    "LISTING_INCOMPLETE",
    "reclamation refused: the listing of objects at rest was incomplete",
);
/// Reclamation refused: an object in the listing could not be identified.
pub const UNREADABLE_CANDIDATE: Reason = hub(
    "UNREADABLE_CANDIDATE",
    "reclamation refused: an object in the listing could not be identified",
);
/// The revision store's schema is newer than this binary (a user database's is `SCHEMA_TOO_NEW`).
pub const STORE_SCHEMA_TOO_NEW: Reason = hub(
    "STORE_SCHEMA_TOO_NEW",
    "the revision store's schema is newer than this binary",
);
/// A migration the store applied differs from the one this binary carries.
pub const MIGRATION_CHANGED: Reason = hub(
    "MIGRATION_CHANGED",
    "a migration the store applied differs from the one this binary carries",
);
/// The store keeps its image bytes somewhere other than where it is configured to.
pub const BYTES_ELSEWHERE: Reason = hub(
    "BYTES_ELSEWHERE",
    "the store keeps its image bytes somewhere other than where it is configured to",
);
/// Another process holds the embedded store's directory.
pub const STORE_LOCKED: Reason = hub(
    "STORE_LOCKED",
    "another process holds the embedded store's directory",
);
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is not a usable URL.
pub const INVALID_OTLP_ENDPOINT: Reason = hub(
    "INVALID_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT is not a usable URL",
);
/// `OTEL_EXPORTER_OTLP_CERTIFICATE` is unreadable, holds no certificate, or is set for plaintext.
pub const INVALID_OTLP_CERTIFICATE: Reason = hub(
    "INVALID_OTLP_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CERTIFICATE cannot be used",
);
/// The OTLP trace exporter could not be built.
pub const OTLP_EXPORTER_FAILED: Reason = hub(
    "OTLP_EXPORTER_FAILED",
    "the OTLP trace exporter could not be built",
);

/// Every reason of the hub's own.
pub const DOMAIN: Domain = Domain {
    name: "snug.hub",
    reasons: &[
        &INVALID_FIELD,
        &LISTING_INCOMPLETE,
        &UNREADABLE_CANDIDATE,
        &STORE_SCHEMA_TOO_NEW,
        &MIGRATION_CHANGED,
        &BYTES_ELSEWHERE,
        &STORE_LOCKED,
        &INVALID_OTLP_ENDPOINT,
        &INVALID_OTLP_CERTIFICATE,
        &OTLP_EXPORTER_FAILED,
    ],
};
