//! Which sync calls feed the runtime's conflict counter (`snug_sync_cas_conflicts_total`): the writes the compare-and-swap refused, by reason.

use snug_rpc::observe::{Derived, GrpcStatus};

use crate::error_info::{self, DOMAIN};

/// The compare-and-swap refusal a status is, if it is one (sync.proto's two ABORTED reasons).
pub fn classify(_method: &str, status: &GrpcStatus) -> Option<Derived> {
    if status.domain.as_deref() != Some(DOMAIN) {
        return None;
    }
    let reason = error_info::REASONS.find(status.reason.as_deref()?)?;
    let conflicts = [
        &snug_reasons::sync::REVISION_MISMATCH,
        &snug_reasons::sync::STALE_REVISION,
    ];
    conflicts
        .contains(&reason)
        .then_some(Derived::CasConflict(reason))
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    #[test]
    fn conflicts_follow_the_reason_in_this_domain() {
        let status = |reason: &str, domain: &str| GrpcStatus {
            code: Code::Aborted,
            reason: Some(reason.to_owned()),
            domain: Some(domain.to_owned()),
        };
        let put = "snug.sync.v1.SyncService/PutImage";
        let cases = [
            (
                status("STALE_REVISION", "snug.sync"),
                Some("STALE_REVISION"),
            ),
            (
                status("REVISION_MISMATCH", "snug.sync"),
                Some("REVISION_MISMATCH"),
            ),
            (status("REVISION_MISMATCH", "elsewhere"), None),
            (status("QUOTA_EXCEEDED", "snug.sync"), None),
            (
                GrpcStatus {
                    code: Code::Ok,
                    reason: None,
                    domain: None,
                },
                None,
            ),
        ];
        for (status, expected) in cases {
            assert_eq!(
                classify(put, &status),
                expected
                    .and_then(snug_reasons::find)
                    .map(Derived::CasConflict),
                "{status:?}"
            );
        }
    }
}
