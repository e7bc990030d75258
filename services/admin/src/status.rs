//! The one place `snug.admin.v1` chooses a reason: directory errors and sync refusals to
//! `tonic::Status`.

use snug_reasons::admin as reasons;
use snug_rpc::status::from_reason;
use snug_users::UsersError;
use tonic::{Code, Status};

use crate::error_info::DOMAIN;

/// INVALID_ARGUMENT naming `field`.
pub(crate) fn invalid(field: &str, message: &str) -> Status {
    snug_rpc::status::invalid_argument(DOMAIN, field, message)
}

pub(crate) fn unauthenticated(message: &str) -> Status {
    from_reason(&reasons::UNAUTHENTICATED, DOMAIN, message, [])
}

pub(crate) fn service_unavailable(message: &str) -> Status {
    from_reason(&reasons::SERVICE_UNAVAILABLE, DOMAIN, message, [])
}

/// Maps a refusal or failure of the users directory. One exhaustive match, so a new variant
/// does not compile until it has a reason.
pub(crate) fn directory_error(err: UsersError) -> Status {
    match err {
        UsersError::InvalidName => invalid("name", &err.to_string()),
        UsersError::InvalidIdentity => invalid("identity", &err.to_string()),
        UsersError::InvalidQuota(_) => invalid("quota_bytes", &err.to_string()),
        UsersError::Exists(_) => from_reason(&reasons::USER_EXISTS, DOMAIN, err.to_string(), []),
        UsersError::NoSuchUser(text) => from_reason(
            &reasons::USER_NOT_FOUND,
            DOMAIN,
            format!("no such user: {text:?}"),
            [],
        ),
        // A malformed reference: the request must name the user otherwise (the message says how).
        UsersError::Ambiguous { .. } => invalid("user", &err.to_string()),
        UsersError::NoSuchToken(_) => from_reason(
            &reasons::TOKEN_NOT_FOUND,
            DOMAIN,
            "no live token has this id",
            [],
        ),
        UsersError::NamesExhausted(_) | UsersError::TooNew(_) | UsersError::Entropy => {
            snug_rpc::status::internal(DOMAIN, &err)
        }
        UsersError::Io { .. } | UsersError::Unavailable(_) => {
            tracing::error!(error = ?err, "the users directory failed");
            from_reason(
                &reasons::DIRECTORY_UNAVAILABLE,
                DOMAIN,
                "the users directory failed or cannot be reached; retry shortly",
                [],
            )
        }
    }
}

/// A status of the sync service: passed on as it came (its own domain and reason), except that
/// a sync service that cannot be reached is SERVICE_UNAVAILABLE here.
pub(crate) fn sync_error(status: Status) -> Status {
    let has_reason = tonic_types::StatusExt::get_error_details(&status)
        .error_info()
        .is_some();
    if has_reason {
        return status;
    }
    match status.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
            tracing::warn!(code = ?status.code(), message = status.message(), "the sync service did not answer");
            service_unavailable("the sync service did not answer; retry shortly")
        }
        _ => status,
    }
}
