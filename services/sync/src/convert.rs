//! Proto messages to the store's types and back.
//!
//! Every identifier from a request is validated here through the store's newtypes, so a malformed
//! one is an INVALID_ARGUMENT naming its field before the store is asked anything.

use snug_proto::sync::v1 as pb;
use snug_revstore::{
    ErasureReport, IdempotencyKey, IntegrityProblem, Precondition, Principal, PutLedgerEntry,
    Revision, RevisionInfo, ServedEntry, Timestamp, UsageReport, UserId, Verdict,
};
use snug_rpc::status::invalid_argument;
use tonic::Status;

use crate::{error_info::DOMAIN, status};

/// Entries a list returns when the request says 0.
const DEFAULT_LIMIT: usize = 100;
/// Most entries one list returns.
const MAX_LIMIT: usize = 1000;

/// The authenticated caller, as the gateway stated it.
#[derive(Debug)]
pub(crate) struct Caller {
    pub(crate) user: UserId,
    pub(crate) principal: Principal,
    /// Whose share of the upload budget the caller's requests take: the user's, and its client
    /// address's when known ([`owners`]).
    pub(crate) owners: Vec<String>,
}

/// The owners of a caller's uploads in the upload budget, each held to half of it: the user,
/// and the client address (an IPv6 address by its /64, which one host usually holds whole) when
/// the gateway named one. An address that does not parse names no owner.
pub(crate) fn owners(caller: &pb::Caller) -> Vec<String> {
    let mut owners = vec![format!("user:{}", caller.user_id)];
    if let Ok(ip) = caller.client_address.parse::<std::net::IpAddr>() {
        // The client as the gateway's rate limits count it (an IPv6 address by its /64).
        owners.push(format!("address:{}", snug_rpc::client::network(ip)));
    }
    owners
}

/// Validates the caller; `field` is its path in the request (`caller`, `header.caller`).
pub(crate) fn caller(caller: Option<pb::Caller>, field: &str) -> Result<Caller, Status> {
    let caller =
        caller.ok_or_else(|| invalid_argument(DOMAIN, field, "the request names no caller"))?;
    let owners = owners(&caller);
    Ok(Caller {
        owners,
        user: UserId::new(caller.user_id)
            .map_err(|e| status::invalid(&format!("{field}.user_id"), e))?,
        principal: Principal::new(caller.principal)
            .map_err(|e| status::invalid(&format!("{field}.principal"), e))?,
    })
}

/// Validates a bare user id (the admin-side RPCs, which name a user rather than a caller).
pub(crate) fn user(user_id: String, field: &str) -> Result<UserId, Status> {
    UserId::new(user_id).map_err(|e| status::invalid(field, e))
}

/// Validates the precondition; a missing one is PRECONDITION_REQUIRED, as the store defines it.
pub(crate) fn precondition(
    precondition: Option<pb::Precondition>,
    field: &str,
) -> Result<Precondition, Status> {
    use pb::precondition::Condition;
    let stated = match precondition.and_then(|p| p.condition) {
        None => None,
        Some(Condition::MustNotExist(pb::MustNotExist {})) => Some(Precondition::MustNotExist),
        Some(Condition::MustMatch(token)) => Some(Precondition::MustMatch(revision(
            token,
            &format!("{field}.must_match"),
        )?)),
    };
    Precondition::required(stated).map_err(status::put_error)
}

/// Validates a revision token.
pub(crate) fn revision(token: String, field: &str) -> Result<Revision, Status> {
    Revision::new(token).map_err(|e| status::invalid(field, e))
}

/// Validates an optional idempotency key.
pub(crate) fn idempotency_key(
    key: Option<String>,
    field: &str,
) -> Result<Option<IdempotencyKey>, Status> {
    key.map(IdempotencyKey::new)
        .transpose()
        .map_err(|e| status::invalid(field, e))
}

/// A list limit: 0 means the default, and no request gets more than the maximum.
pub(crate) fn limit(requested: u32) -> usize {
    match requested {
        0 => DEFAULT_LIMIT,
        n => (n as usize).min(MAX_LIMIT),
    }
}

pub(crate) fn timestamp(at: Timestamp) -> prost_types::Timestamp {
    let millis = at.unix_millis();
    prost_types::Timestamp {
        seconds: millis.div_euclid(1000),
        // In 0..1_000_000_000 by construction, as the Timestamp message requires.
        nanos: (millis.rem_euclid(1000) * 1_000_000) as i32,
    }
}

pub(crate) fn revision_info(info: RevisionInfo) -> pb::RevisionInfo {
    pb::RevisionInfo {
        revision: info.revision.to_string(),
        sha256: info.digest.to_hex(),
        size: info.size,
        accepted_at: Some(timestamp(info.accepted_at)),
        principal: info.principal.to_string(),
        base: info.base.map(|r| r.to_string()),
        restored_from: info.restored_from.map(|r| r.to_string()),
        retained: info.retained,
        storage_version: info.storage_version,
    }
}

pub(crate) fn served_entry(entry: ServedEntry) -> pb::ServedEntry {
    pb::ServedEntry {
        revision: entry.revision.to_string(),
        served_at: Some(timestamp(entry.at)),
        principal: entry.principal.to_string(),
    }
}

pub(crate) fn write_entry(entry: PutLedgerEntry) -> pb::WriteEntry {
    let (verdict, reason) = match entry.verdict {
        Verdict::Accepted => (pb::Verdict::Accepted, String::new()),
        Verdict::Refused { reason } => (pb::Verdict::Refused, reason),
    };
    pb::WriteEntry {
        verdict: verdict.into(),
        reason,
        revision: entry.revision.map(|r| r.to_string()),
        at: Some(timestamp(entry.at)),
        principal: entry.principal.to_string(),
    }
}

/// One defect of an integrity check, as the wire says it.
pub(crate) fn integrity_problem(problem: &IntegrityProblem) -> pb::IntegrityProblem {
    use pb::IntegrityProblemKind as Kind;
    let hex = |d: &snug_revstore::Digest| d.to_hex();
    let mut wire = pb::IntegrityProblem::default();
    let kind = match problem {
        IntegrityProblem::DanglingPointer { user } => {
            wire.user = user.as_str().to_owned();
            Kind::DanglingPointer
        }
        IntegrityProblem::MissingImage { image } => {
            wire.image = hex(image);
            Kind::MissingImage
        }
        IntegrityProblem::MissingChunk { image, chunk } => {
            wire.image = hex(image);
            wire.chunk = hex(chunk);
            Kind::MissingChunk
        }
        IntegrityProblem::ChunkMismatch { chunk } => {
            wire.chunk = hex(chunk);
            Kind::ChunkMismatch
        }
        IntegrityProblem::ImageMismatch { image } => {
            wire.image = hex(image);
            Kind::ImageMismatch
        }
        IntegrityProblem::UnfinishedWipe { object, ranges } => {
            wire.object.clone_from(object);
            wire.ranges = *ranges;
            Kind::UnfinishedWipe
        }
    };
    wire.kind = kind.into();
    wire
}

/// A user's usage as GetUsage answers it (and `snug-hub sync usage` reports it from a store it
/// opens itself).
pub fn usage_response(usage: UsageReport) -> pb::GetUsageResponse {
    pb::GetUsageResponse {
        current_bytes: usage.current_bytes,
        history_bytes: usage.history_bytes,
        revisions: usage.revisions,
        retained_revisions: usage.retained_revisions,
    }
}

/// An erasure's report as EraseUser answers it (and `snug-hub sync erase` reports it from a
/// store it opens itself).
pub fn erasure_response(report: ErasureReport) -> pb::EraseUserResponse {
    pb::EraseUserResponse {
        revisions: report.revisions,
        publications: report.publications,
        images: report.images,
        chunks: report.chunks,
        bytes: report.bytes,
        packs: report.packs,
        packs_wiped: report.packs_wiped,
        ledger_rows_scrubbed: report.ledger_rows_scrubbed,
        ranges_wiped: report.ranges_wiped,
        wipes_pending: report.wipes_pending,
    }
}
