//! W3C trace-context propagation (`traceparent`, `tracestate`) across HTTP and gRPC hops, so one
//! `PUT /userdb` is one trace from the gateway through every service it calls.
//!
//! - [`set_parent_from`]: a server parents its request span on the caller's `traceparent`;
//! - [`Traced`]: wraps a client channel; every call gets a client span, and the span's context
//!   travels in the request's headers.
//!
//! With OpenTelemetry off (no exporter configured) spans have no context, so nothing is injected
//! and an incoming `traceparent` is ignored: the headers cost nothing then.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use opentelemetry::{
    propagation::{Extractor, Injector, TextMapPropagator as _},
    trace::TraceContextExt as _,
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tower::Service;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::observe::{End, Observed, grpc_status_of};

/// Parents `span` on the context named by `headers`' `traceparent`, if it names a valid one.
///
/// Must run before `span` is first entered: an OpenTelemetry span's parent is fixed when it
/// starts. A malformed `traceparent` is ignored (the span starts a new trace), never an error:
/// the header comes from outside.
pub fn set_parent_from(span: &tracing::Span, headers: &http::HeaderMap) {
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// Writes `span`'s context into `headers` as `traceparent` (and `tracestate`), if it has one.
pub fn inject(span: &tracing::Span, headers: &mut http::HeaderMap) {
    let cx = span.context();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Health probes run every few seconds from load balancers; tracing them would bury real traces.
pub(crate) fn is_health(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.Health/")
}

/// A gRPC client transport (a tonic `Channel`) whose calls are traced: each call gets a
/// `grpc.client` span, child of the caller's current span, whose context goes out as
/// `traceparent`; the span ends when the response body does, and records the call's gRPC code.
#[derive(Debug, Clone)]
pub struct Traced<S> {
    inner: S,
}

impl<S> Traced<S> {
    /// Traces the calls made through `inner`.
    pub fn new(inner: S) -> Self {
        Self { inner }
    }
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

impl<S, B> Service<http::Request<B>> for Traced<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let path = request.uri().path();
        if is_health(path) {
            return Box::pin(self.inner.call(request));
        }
        let method = path.trim_start_matches('/').to_owned();
        let span = tracing::debug_span!(
            crate::telemetry::GRPC_CLIENT_SPAN,
            otel.name = %method,
            otel.kind = "client",
            rpc.system = "grpc",
            rpc.method = %method,
            rpc.grpc.status_code = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        inject(&span, request.headers_mut());
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.instrument(span.clone()).await?;
            let in_headers = grpc_status_of(response.headers());
            Ok(response.map(|body| {
                tonic::body::Body::new(Observed::new(body, None, move |end: End<'_>| {
                    let status = end.grpc_status(in_headers);
                    span.record("rpc.grpc.status_code", status.code as i64);
                    if status.code != tonic::Code::Ok {
                        span.record("otel.status_code", "error");
                    }
                }))
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::prelude::*;

    use super::*;

    fn with_otel(run: impl FnOnce()) {
        let provider = SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, run);
    }

    #[test]
    fn a_context_injected_into_headers_parents_the_next_span() {
        with_otel(|| {
            let client = tracing::info_span!("client");
            let mut headers = http::HeaderMap::new();
            inject(&client, &mut headers);
            let traceparent = headers
                .get("traceparent")
                .expect("traceparent")
                .to_str()
                .expect("ascii");
            let client_cx = client.context();
            let client_ids = client_cx.span().span_context().clone();
            assert_eq!(
                traceparent,
                format!("00-{}-{}-01", client_ids.trace_id(), client_ids.span_id())
            );

            let server = tracing::info_span!("server");
            set_parent_from(&server, &headers);
            let server_cx = server.context();
            let server_ids = server_cx.span().span_context().clone();
            assert_eq!(server_ids.trace_id(), client_ids.trace_id());
            assert_ne!(server_ids.span_id(), client_ids.span_id());
        });
    }

    #[test]
    fn a_malformed_traceparent_starts_a_new_trace() {
        with_otel(|| {
            for bad in [
                "",
                "garbage",
                "00-zzzz-yyyy-01",
                "00-00000000000000000000000000000000-0000000000000000-01",
            ] {
                let mut headers = http::HeaderMap::new();
                headers.insert(
                    "traceparent",
                    http::HeaderValue::from_str(bad).expect("header"),
                );
                let span = tracing::info_span!("server");
                set_parent_from(&span, &headers);
                let cx = span.context();
                let ids = cx.span().span_context().clone();
                assert!(ids.is_valid(), "{bad}: the span still gets ids of its own");
                assert_ne!(
                    ids.trace_id().to_string(),
                    "00000000000000000000000000000000"
                );
            }
        });
    }

    #[test]
    fn without_opentelemetry_nothing_is_injected() {
        let span = tracing::info_span!("client");
        let mut headers = http::HeaderMap::new();
        inject(&span, &mut headers);
        assert!(headers.is_empty());
    }
}
