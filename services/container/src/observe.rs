//! Which container calls feed the runtime's unlock counter (`snug_container_unlock_attempts_total`): the calls that try a secret, by the outcome their status means.

use snug_rpc::observe::{Derived, GrpcStatus};
use tonic::Code;

use crate::{
    SERVICE_NAME,
    error_info::{self, DOMAIN},
};

/// The methods that try a secret against a container: each call is an unlock attempt.
const UNLOCK_METHODS: [&str; 4] = [
    "Unlock",
    "RemoveProtection",
    "ChangePassphrase",
    "RotateRecoveryKey",
];

/// The unlock outcome a call's final status means, if the call got as far as trying a secret
/// (a malformed or shed request is no attempt; nor is a file refused by the iteration policy,
/// which is opened before any secret is tried).
pub fn classify(method: &str, status: &GrpcStatus) -> Option<Derived> {
    let name = method.strip_prefix(SERVICE_NAME)?.strip_prefix('/')?;
    if !UNLOCK_METHODS.contains(&name) {
        return None;
    }
    if status.code == Code::Ok {
        return Some(Derived::UnlockAttempt("ok"));
    }
    if status.domain.as_deref() != Some(DOMAIN) {
        return None;
    }
    let reason = error_info::REASONS.find(status.reason.as_deref()?)?;
    if reason == &snug_reasons::container::LOCKED {
        Some(Derived::UnlockAttempt("locked"))
    } else if [
        &snug_reasons::container::CORRUPT,
        &snug_reasons::container::NOT_A_CONTAINER,
        &snug_reasons::container::UNSUPPORTED_FORMAT_VERSION,
    ]
    .contains(&reason)
    {
        Some(Derived::UnlockAttempt("corrupt"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Code, reason: &str, domain: &str) -> GrpcStatus {
        GrpcStatus {
            code,
            reason: Some(reason.to_owned()),
            domain: Some(domain.to_owned()),
        }
    }

    #[test]
    fn unlock_outcomes_follow_the_reason() {
        let unlock = "snug.container.v1.ContainerService/Unlock";
        let ok = GrpcStatus {
            code: Code::Ok,
            reason: None,
            domain: None,
        };
        let cases = [
            (unlock, ok.clone(), Some("ok")),
            (
                unlock,
                status(Code::FailedPrecondition, "LOCKED", "snug.container"),
                Some("locked"),
            ),
            (
                "snug.container.v1.ContainerService/RotateRecoveryKey",
                status(Code::InvalidArgument, "CORRUPT", "snug.container"),
                Some("corrupt"),
            ),
            (
                unlock,
                status(Code::Unavailable, "OVERLOADED", "snug.rpc"),
                None,
            ),
            (
                unlock,
                status(Code::InvalidArgument, "INVALID_ARGUMENT", "snug.container"),
                None,
            ),
            (
                unlock,
                status(Code::FailedPrecondition, "LOCKED", "elsewhere"),
                None,
            ),
            (
                "snug.container.v1.ContainerService/Protect",
                ok.clone(),
                None,
            ),
            ("snug.sync.v1.SyncService/Unlock", ok, None),
        ];
        for (method, status, expected) in cases {
            assert_eq!(
                classify(method, &status),
                expected.map(Derived::UnlockAttempt),
                "{method} {status:?}"
            );
        }
    }
}
