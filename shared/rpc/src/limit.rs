//! A server-wide concurrency limit that sheds excess requests at once — but never health checks.
//!
//! tower's `GlobalConcurrencyLimit` plus tonic's load shedding would also shed
//! `grpc.health.v1` calls when every slot is busy with (legitimately slow) key derivations, and a
//! kubelet that cannot get a health answer restarts a pod that is merely busy. So the limit is
//! ours: health calls bypass it, and a shed request gets a typed `UNAVAILABLE` status with the
//! `OVERLOADED` reason (retryable) instead of an anonymous error.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use tokio::sync::Semaphore;

use tower::{Layer, Service};

use crate::status;

/// The error domain of statuses the shared runtime itself produces.
pub const DOMAIN: &str = "snug.rpc";

const HEALTH_PREFIX: &str = "/grpc.health.v1.Health/";

/// Limits requests in flight across every connection; see the module docs.
#[derive(Debug, Clone)]
pub struct ShedLayer {
    permits: Arc<Semaphore>,
}

impl ShedLayer {
    /// A limit of `limit` requests in flight (at least one).
    pub fn new(limit: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(limit.max(1))),
        }
    }
}

impl<S> Layer<S> for ShedLayer {
    type Service = Shed<S>;

    fn layer(&self, inner: S) -> Shed<S> {
        Shed {
            inner,
            permits: self.permits.clone(),
        }
    }
}

/// The service [`ShedLayer`] produces.
#[derive(Debug, Clone)]
pub struct Shed<S> {
    inner: S,
    permits: Arc<Semaphore>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

impl<S, B> Service<http::Request<B>> for Shed<S>
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
        if request.uri().path().starts_with(HEALTH_PREFIX) {
            return Box::pin(self.inner.call(request));
        }
        match self.permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let response = self.inner.call(request);
                Box::pin(async move {
                    let response = response.await;
                    drop(permit);
                    response
                })
            }
            Err(_) => Box::pin(async {
                Ok(status::from_reason(
                    &snug_reasons::rpc::OVERLOADED,
                    DOMAIN,
                    "the server is at its concurrency limit; retry shortly",
                    [],
                )
                .into_http())
            }),
        }
    }
}
