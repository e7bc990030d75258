//! Which sync calls feed the runtime's conflict counter (`snug_sync_cas_conflicts_total`): the writes the compare-and-swap refused, by reason.

use snug_rpc::observe::{Derived, GrpcStatus};

use crate::reason::{self, DOMAIN};

/// The compare-and-swap refusal a status is, if it is one (sync.proto's two ABORTED reasons).
pub fn classify(_method: &str, status: &GrpcStatus) -> Option<Derived> {
    if status.domain.as_deref() != Some(DOMAIN) {
        return None;
    }
    match status.reason.as_deref()? {
        r if r == reason::REVISION_MISMATCH => {
            Some(Derived::CasConflict(reason::REVISION_MISMATCH))
        }
        r if r == reason::STALE_REVISION => Some(Derived::CasConflict(reason::STALE_REVISION)),
        _ => None,
    }
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
                expected.map(Derived::CasConflict),
                "{status:?}"
            );
        }
    }
}
