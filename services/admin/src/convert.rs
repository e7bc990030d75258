//! Directory records and sync answers to `snug.admin.v1` messages.

use snug_proto::{admin::v1 as pb, sync::v1 as sync_pb};
use snug_users::UserInfo;

fn timestamp(unix_ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: unix_ms.div_euclid(1000),
        nanos: (unix_ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// A user as the API shows it: never a token's text, which is not stored anyway.
pub(crate) fn user(info: UserInfo, usage: Option<pb::Usage>) -> pb::User {
    pb::User {
        id: info.user.id,
        name: info.user.name,
        created_at: Some(timestamp(info.user.created_at)),
        disabled: info.user.disabled,
        quota_bytes: info.user.quota_bytes,
        tokens: info
            .tokens
            .into_iter()
            .map(|token| pb::Token {
                id: token.id,
                created_at: Some(timestamp(token.created_at)),
            })
            .collect(),
        identities: info
            .identities
            .into_iter()
            .map(|identity| pb::Identity {
                issuer: identity.issuer,
                subject: identity.subject,
            })
            .collect(),
        usage,
    }
}

pub(crate) fn usage(usage: sync_pb::GetUsageResponse) -> pb::Usage {
    pb::Usage {
        current_bytes: usage.current_bytes,
        history_bytes: usage.history_bytes,
        revisions: usage.revisions,
        retained_revisions: usage.retained_revisions,
    }
}

pub(crate) fn erasure(report: sync_pb::EraseUserResponse) -> pb::Erasure {
    pb::Erasure {
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
