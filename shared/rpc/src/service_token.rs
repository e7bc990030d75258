//! The service token: the shared secret the hub's own components present to the gRPC services
//! they call, and that a service given one requires of every call but a health check (issue 36
//! point 9).
//!
//! The gRPC services take whose data a call concerns from the call itself (the sync service's
//! `Caller`), so whoever reaches their port could act for any user. A deployment whose services
//! listen beyond loopback sets `SNUG_SERVICE_TOKEN` (from a Secret, the same in every pod): each
//! service then refuses a call without `authorization: Bearer <token>` as UNAUTHENTICATED with
//! the reason `SERVICE_TOKEN_REFUSED`, before the call is decoded, and every client the hub
//! builds (the gateway's channels, the admin API's and the operator commands' sync client)
//! sends it. Health checks pass without it: a kubelet's gRPC probe sends no metadata. The
//! comparison is of SHA-256 digests in constant time; the token itself is never logged.
//!
//! The all-in-one `snug-hub serve` calls its services in-process and listens for gRPC on
//! loopback unless told otherwise, so it needs no token; a service told to listen beyond
//! loopback without one warns at start.

use std::{
    convert::Infallible,
    fmt,
    future::Future,
    pin::Pin,
    str::FromStr,
    task::{Context, Poll},
};

use tower::{Layer, Service};

use crate::{bearer::TokenDigest, limit::DOMAIN, status};

/// The environment variable that holds the service token.
pub const ENV: &str = "SNUG_SERVICE_TOKEN";

/// The shortest token accepted: long enough that guessing is hopeless.
pub const MIN_LEN: usize = 32;

const HEALTH_PREFIX: &str = "/grpc.health.v1.Health/";

/// The service token: what a client sends, and the digest a service compares with.
#[derive(Clone)]
pub struct ServiceToken {
    authorization: http::HeaderValue,
    digest: TokenDigest,
}

impl fmt::Debug for ServiceToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServiceToken(<redacted>)")
    }
}

/// Why a service token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "SNUG_SERVICE_TOKEN must be at least {MIN_LEN} printable ASCII characters without spaces (e.g. the output of `openssl rand -hex 32`)"
)]
pub struct BadServiceToken;

impl FromStr for ServiceToken {
    type Err = BadServiceToken;

    fn from_str(text: &str) -> Result<Self, BadServiceToken> {
        let text = text.trim();
        if text.len() < MIN_LEN || !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(BadServiceToken);
        }
        let mut authorization =
            http::HeaderValue::try_from(format!("Bearer {text}")).map_err(|_| BadServiceToken)?;
        authorization.set_sensitive(true);
        Ok(Self {
            authorization,
            digest: TokenDigest::of(text),
        })
    }
}

impl ServiceToken {
    /// The `authorization` value a client sends.
    pub fn authorization(&self) -> &http::HeaderValue {
        &self.authorization
    }

    /// Whether `presented` is this token (constant time in the digest comparison).
    pub fn admits(&self, presented: &str) -> bool {
        self.digest.admits(presented)
    }

    /// Adds the token to a request a client is about to send.
    pub fn insert<B>(&self, request: &mut http::Request<B>) {
        request
            .headers_mut()
            .insert(http::header::AUTHORIZATION, self.authorization.clone());
    }
}

/// The check of every call but health's, when a token is configured: see the module docs.
#[derive(Debug, Clone)]
pub struct RequireLayer {
    token: Option<ServiceToken>,
}

impl RequireLayer {
    /// Requires `token` of every call; `None` requires nothing.
    pub fn new(token: Option<ServiceToken>) -> Self {
        Self { token }
    }
}

impl<S> Layer<S> for RequireLayer {
    type Service = Require<S>;

    fn layer(&self, inner: S) -> Require<S> {
        Require {
            inner,
            token: self.token.clone(),
        }
    }
}

/// The service [`RequireLayer`] produces.
#[derive(Debug, Clone)]
pub struct Require<S> {
    inner: S,
    token: Option<ServiceToken>,
}

impl<S> Require<S> {
    fn admits<B>(&self, request: &http::Request<B>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        request.uri().path().starts_with(HEALTH_PREFIX)
            || request
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(crate::bearer::token)
                .is_some_and(|presented| token.admits(presented))
    }
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

impl<S, B> Service<http::Request<B>> for Require<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if self.admits(&request) {
            return Box::pin(self.inner.call(request));
        }
        tracing::warn!(
            path = request.uri().path(),
            "refused a call without the service token"
        );
        Box::pin(async {
            Ok(status::from_reason(
                &snug_reasons::rpc::SERVICE_TOKEN_REFUSED,
                DOMAIN,
                "this service requires the hub's service token (SNUG_SERVICE_TOKEN) as `authorization: Bearer <token>`",
                [],
            )
            .into_http())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_token_is_long_printable_ascii_and_never_printed() {
        for bad in ["", "short", &"é".repeat(32), &format!("{} x", &TOKEN[..20])] {
            assert_eq!(
                bad.parse::<ServiceToken>().err(),
                Some(BadServiceToken),
                "{bad:?}"
            );
        }
        let token: ServiceToken = format!(" {TOKEN}\n").parse().expect("a token");
        assert!(token.admits(TOKEN));
        assert!(!token.admits(&TOKEN[1..]));
        assert!(!format!("{token:?}").contains(TOKEN));
        assert!(token.authorization().is_sensitive());
        assert_eq!(token.authorization(), &format!("Bearer {TOKEN}"));
    }

    #[test]
    fn only_health_passes_without_the_token() {
        let token: ServiceToken = TOKEN.parse().expect("a token");
        let require = Require {
            inner: (),
            token: Some(token.clone()),
        };
        let call = |path: &str, authorization: Option<&str>| {
            let mut request = http::Request::builder().uri(path);
            if let Some(value) = authorization {
                request = request.header(http::header::AUTHORIZATION, value);
            }
            require.admits(&request.body(()).expect("request"))
        };
        let put = "/snug.sync.v1.SyncService/PutImage";
        assert!(call(put, Some(&format!("Bearer {TOKEN}"))));
        assert!(call(put, Some(&format!("bearer {TOKEN}"))));
        assert!(!call(put, None));
        assert!(!call(put, Some("Bearer wrong")));
        assert!(!call(put, Some(TOKEN)));
        assert!(call("/grpc.health.v1.Health/Check", None));
        assert!(!call(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            None
        ));
        let open = Require {
            inner: (),
            token: None,
        };
        assert!(open.admits(&http::Request::builder().uri(put).body(()).expect("request")));
    }
}
