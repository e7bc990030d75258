//! tonic's own refusals of a request, typed: what a client sent wrong, or how it went away, as a
//! documented code and reason rather than tonic's bare status (issue 23, point 6).
//!
//! tonic refuses some requests before any code of ours sees a message, with a status that has no
//! `ErrorInfo`:
//!
//! | tonic says | it means | typed as |
//! |---|---|---|
//! | OUT_OF_RANGE "… decoded message length too large …" | one message over the decode limit | RESOURCE_EXHAUSTED `TOO_LARGE`, metadata `limit` |
//! | INTERNAL "Missing request message." | a unary request with an empty body | INVALID_ARGUMENT `INVALID_ARGUMENT`, `field` = `(message)` |
//! | INTERNAL "Unexpected EOF decoding stream." | the body ended inside a message | the same |
//! | INTERNAL "protocol error: … compress…flag …" | a message frame with a bad compression flag | the same |
//! | any code, with the transport's error as its source | the client's stream broke off (cancelled, connection dropped) | CANCELLED `BODY_ABORTED` |
//!
//! (Undecodable message bytes are typed by `snug_proto::codec` already.) A service reading a
//! stream gets the typed status from [`typed`] ([`crate::chunks`] does it for every upload); a
//! unary request never reaches a service, so [`TypedRefusalsLayer`] types the answer tonic
//! makes for it on its way out. Both use [`typed`], so the rule is written once.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use tonic::{Code, Status};
use tonic_types::StatusExt as _;
use tower::{Layer, Service};

use crate::{limit::DOMAIN, status};

/// Returns the typed status of a refusal tonic made itself, or `status` unchanged when it is
/// not one (a status with an `ErrorInfo` is always ours, and passes).
pub fn typed(status: Status, domain: &'static str) -> Status {
    if status.get_details_error_info().is_some() {
        return status;
    }
    // A status tonic made from the request body's own error: the transport failed under the
    // stream, which for a server means the client broke it off.
    if std::error::Error::source(&status).is_some() {
        return status::from_reason(
            &snug_reasons::rpc::BODY_ABORTED,
            domain,
            "the request stream broke off before its end (the client cancelled or its connection dropped); nothing was kept",
            [],
        );
    }
    let message = status.message();
    match status.code() {
        Code::OutOfRange if message.contains("decoded message length too large") => {
            let limit = message
                .rsplit("the limit is: ")
                .next()
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok());
            match limit {
                Some(limit) => status::too_large(domain, limit),
                None => status::from_reason(
                    &snug_reasons::rpc::TOO_LARGE,
                    domain,
                    "a message exceeds the decode limit",
                    [],
                ),
            }
        }
        Code::Internal if message == "Missing request message." => {
            undecodable(domain, "the request holds no message")
        }
        Code::Internal if message == "Unexpected EOF decoding stream." => {
            undecodable(domain, "the stream ended inside a message")
        }
        Code::Internal if message.starts_with("protocol error: received message with") => {
            undecodable(domain, "a message frame has an invalid compression flag")
        }
        _ => status,
    }
}

fn undecodable(domain: &'static str, why: &str) -> Status {
    status::invalid_argument(
        domain,
        snug_proto::codec::WHOLE_MESSAGE,
        format!("the message cannot be decoded ({why})"),
    )
}

/// Types the answers tonic gives unary requests it refused itself; see the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct TypedRefusalsLayer;

impl<S> Layer<S> for TypedRefusalsLayer {
    type Service = TypedRefusals<S>;

    fn layer(&self, inner: S) -> TypedRefusals<S> {
        TypedRefusals { inner }
    }
}

/// The service [`TypedRefusalsLayer`] produces.
#[derive(Debug, Clone)]
pub struct TypedRefusals<S> {
    inner: S,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

impl<S, B> Service<http::Request<B>> for TypedRefusals<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            // Only a Trailers-Only answer (the status in the headers) can be a refusal made
            // before any message was read; a status in the trailers came after the service ran.
            let Some(status) = Status::from_header_map(response.headers()) else {
                return Ok(response);
            };
            if status.code() == Code::Ok || status.get_details_error_info().is_some() {
                return Ok(response);
            }
            let retyped = typed(status, DOMAIN);
            if retyped.get_details_error_info().is_none() {
                return Ok(response);
            }
            Ok(retyped.into_http())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(status: Status, expected: (Code, Option<&str>, Option<&str>)) {
        let typed = typed(status, "snug.test");
        assert_eq!(
            (
                typed.code(),
                status::reason_of(&typed).as_deref(),
                status::metadata_of(&typed, "limit")
                    .or_else(|| status::metadata_of(&typed, "field"))
                    .as_deref(),
            ),
            expected,
            "{typed:?}"
        );
    }

    #[test]
    fn tonics_refusals_become_documented_codes_and_reasons() {
        check(
            Status::out_of_range(
                "Error, decoded message length too large: found 9000000 bytes, the limit is: 1114112 bytes",
            ),
            (Code::ResourceExhausted, Some("TOO_LARGE"), Some("1114112")),
        );
        check(
            Status::internal("Missing request message."),
            (
                Code::InvalidArgument,
                Some("INVALID_ARGUMENT"),
                Some("(message)"),
            ),
        );
        check(
            Status::internal("Unexpected EOF decoding stream."),
            (
                Code::InvalidArgument,
                Some("INVALID_ARGUMENT"),
                Some("(message)"),
            ),
        );
        check(
            Status::internal(
                "protocol error: received message with compressed-flag but no grpc-encoding was specified",
            ),
            (
                Code::InvalidArgument,
                Some("INVALID_ARGUMENT"),
                Some("(message)"),
            ),
        );
        // The transport's error under a status: the stream broke off.
        check(
            Status::from_error(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset,
            ))),
            (Code::Cancelled, Some("BODY_ABORTED"), None),
        );
        // Ours, and anything else, pass unchanged.
        check(
            status::too_large("snug.test", 7),
            (Code::ResourceExhausted, Some("TOO_LARGE"), Some("7")),
        );
        check(
            Status::internal("something else"),
            (Code::Internal, None, None),
        );
        check(Status::unavailable("shed"), (Code::Unavailable, None, None));
    }
}
