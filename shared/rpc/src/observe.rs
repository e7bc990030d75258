//! Per-request observation for the gRPC servers: a server span parented on the caller's
//! `traceparent`, and the metrics of [`crate::metrics`] (calls by method, code and reason,
//! latency, bytes, and the derived CAS-conflict and unlock counters).
//!
//! A call is over when its final status is known, which for a streaming response is the
//! trailers at the end of the body, not the response headers; so the response body is wrapped
//! ([`Observed`]) and the span and the measurements end with it. The same body wrapper serves
//! the gateway's HTTP middleware and the traced client channel.
//!
//! # Design notes
//!
//! (Moved from ARCHITECTURE.md, which stays a map.)
//!
//! - **Logs**: one line per event on stderr, `text` or `json` (`SNUG_LOG_FORMAT`), filtered by
//!   `RUST_LOG` (default `info`). A JSON line is one object: `timestamp`, `level`, `message`, the
//!   event's fields, `target`, and `span` (the current span's fields); inside a traced request it
//!   starts with `trace_id` and `span_id`, the ids of the exported span, so logs and traces join.
//! - **Traces**: OpenTelemetry over OTLP/gRPC when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (`https://`
//!   verified against `OTEL_EXPORTER_OTLP_CERTIFICATE` or the compiled-in roots, or `http://`; batch
//!   processor, flushed at shutdown after the drain; `service.name` from `OTEL_SERVICE_NAME` or the
//!   role). The gateway's `http.server` span per request (`PUT /userdb`, named by method and route
//!   template) continues a client's W3C `traceparent`; each gRPC call the gateway makes is a
//!   `grpc.client` span whose context goes out as `traceparent`; each service's `grpc.server` span
//!   (named `package.Service/Method`) is parented on it. So one `PUT /userdb` is one trace across the
//!   gateway, schema and sync processes. Spans record the gRPC code, the HTTP status and the error
//!   reason (`error.type`). Health checks (`grpc.health.v1`, `/healthz`, `/readyz`) are counted but
//!   not traced. The exporter's own transport crates (h2, hyper, tonic, tower) are never exported,
//!   so exports do not trace themselves. These three per-call spans (`telemetry::CALL_SPANS`) are
//!   `debug` spans that the exporter takes at any `RUST_LOG`: at the default `info`, log lines
//!   neither build nor show them (three spans with their fields formatted for every request cost a
//!   fifth of a small GET's throughput), and a line inside one still carries its trace ids.
//! - **Metrics**: Prometheus text format on `GET /metrics` of the admin port (`SNUG_ADMIN_LISTEN`,
//!   off when unset; one registry per process, so the all-in-one hub has one scrape target):
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `snug_http_requests_total` | `method`, `route`, `status`, `reason` | HTTP requests answered by the gateway |
//! | `snug_http_request_duration_seconds` (histogram) | same | until the last response byte |
//! | `snug_http_request_bytes_total`, `snug_http_response_bytes_total` | `route` | body bytes in and out |
//! | `snug_http_zero_copy_bytes_total` | — | response bytes sent from sealed memory with `sendfile` (no copy) |
//! | `snug_grpc_server_requests_total` | `method`, `code`, `reason` | gRPC calls served (every service; shed calls too, and calls whose client went away) |
//! | `snug_grpc_server_request_duration_seconds` (histogram) | same | until the final status (the trailers, for a stream) |
//! | `snug_grpc_server_request_bytes_total`, `snug_grpc_server_response_bytes_total` | `method` | HTTP/2 data bytes in and out, gRPC framing included |
//! | `snug_sync_cas_conflicts_total` | `reason` (`REVISION_MISMATCH`, `STALE_REVISION`) | sync writes refused by the compare-and-swap |
//! | `snug_container_unlock_attempts_total` | `outcome` (`ok`, `locked`, `corrupt`) | Unlock, RemoveProtection, ChangePassphrase and RotateRecoveryKey calls that tried a secret |
//! | `snug_sync_delta_bases_total` | `source` (`kept`, `read`) | delta pushes assembled from the image the sync replica wrote last (its base cache) or from a base read back from the store |
//! | `snug_sync_base_cache_bytes` (gauge) | — | bytes the sync replica's base cache holds (`SNUG_SYNC_BASE_CACHE_BYTES` at most) |
//! | `snug_events_streams` (gauge) | — | event streams (`GET /userdb/events`) open at the gateway |
//! | `snug_events_sent_total` | `event` (`revision`, `no-image`, `gap`, `heartbeat`) | events sent on them |
//! | `snug_events_delivery_lag_seconds` (histogram) | — | from a revision's acceptance by the store to its event leaving the gateway (clocks of two machines when they differ) |
//!
//! `route` is the route template (`/userdb/revisions/{rev}/restore`, `unmatched` for none), never
//! the raw path; `method` is `package.Service/Method` from the compiled descriptor sets (`unknown`
//! otherwise); `reason` is the JSON error `code` (HTTP) or the `ErrorInfo` reason (gRPC), empty on
//! success. A call whose client went away is counted as CANCELLED: with reason `BODY_ABORTED`
//! when its request stream broke off (whatever the service answered the stream it was reading),
//! with none when it was dropped before it was answered; one dropped at the client's
//! `grpc-timeout` is DEADLINE_EXCEEDED, as the deadline's own answer is
//! (`snug_rpc::deadline`). The CAS and unlock counters are derived from each call's final status in
//! `snug_rpc::observe`, so the services need no code of their own for them.
//! **Architecture Invariant:** no secret in a log line, a span or a metric label: label values come
//! from closed sets, spans carry methods, routes, codes and reasons only, and
//! `services/hub/tests/observability.rs` runs the real binary as separate processes at `RUST_LOG=trace`
//! through protect/unlock, bearer tokens and session cookies, and searches every captured log line,
//! exported span and scraped metric for each secret (and the token's hash).
//! The same test checks the cross-process trace (parent links from the gateway's client spans to each
//! service's server span, and the client's own `traceparent`) and the metrics by route and reason.

use std::{
    collections::HashSet,
    future::Future,
    pin::Pin,
    sync::{
        Arc, LazyLock,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, ready},
    time::Instant,
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use prometheus_client::metrics::counter::Counter;
use prost::Message as _;
use tonic::Code;
use tonic_types::StatusExt as _;
use tower::{Layer, Service};

use crate::{
    metrics::{self, GrpcLabels, MethodLabels},
    trace_context,
};

/// How a body ended, as told to an [`Observed`] body's callback.
#[derive(Debug)]
pub enum End<'a> {
    /// The body ended with trailers (a gRPC status, for a gRPC body).
    Trailers(&'a http::HeaderMap),
    /// The body ended without trailers.
    Finished,
    /// The body failed mid-stream.
    Failed,
    /// The body was dropped before its end (the peer went away, or the call was cancelled).
    Dropped,
}

/// A gRPC status reduced to what observation needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcStatus {
    /// The code.
    pub code: Code,
    /// The `ErrorInfo` reason, if the status carries one.
    pub reason: Option<String>,
    /// The `ErrorInfo` domain, if the status carries one.
    pub domain: Option<String>,
}

/// The gRPC status in `headers` (a Trailers-Only response or the trailers), if there is one.
pub fn grpc_status_of(headers: &http::HeaderMap) -> Option<GrpcStatus> {
    let status = tonic::Status::from_header_map(headers)?;
    let info = status.get_details_error_info();
    Some(GrpcStatus {
        code: status.code(),
        reason: info.as_ref().map(|i| i.reason.clone()),
        domain: info.map(|i| i.domain),
    })
}

impl End<'_> {
    /// The call's final status: the trailers' if the body ended with them, else the one the
    /// response headers carried (Trailers-Only), else what the ending implies.
    pub fn grpc_status(&self, in_headers: Option<GrpcStatus>) -> GrpcStatus {
        let bare = |code| GrpcStatus {
            code,
            reason: None,
            domain: None,
        };
        match self {
            End::Trailers(trailers) => grpc_status_of(trailers)
                .or(in_headers)
                .unwrap_or_else(|| bare(Code::Unknown)),
            End::Finished => in_headers.unwrap_or_else(|| bare(Code::Unknown)),
            End::Failed => in_headers.unwrap_or_else(|| bare(Code::Unknown)),
            End::Dropped => in_headers.unwrap_or_else(|| bare(Code::Cancelled)),
        }
    }
}

type OnEnd = Box<dyn FnOnce(End<'_>) + Send>;

/// A body that counts its data bytes and calls back once when it ends, however it ends.
pub struct Observed<B> {
    inner: B,
    bytes: Option<Counter>,
    on_end: Option<OnEnd>,
}

impl<B> std::fmt::Debug for Observed<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observed")
            .field("ended", &self.on_end.is_none())
            .finish_non_exhaustive()
    }
}

impl<B> Observed<B> {
    /// Wraps `inner`; data bytes are added to `bytes`, and `on_end` runs once at the end.
    pub fn new(
        inner: B,
        bytes: Option<Counter>,
        on_end: impl FnOnce(End<'_>) + Send + 'static,
    ) -> Self {
        Self {
            inner,
            bytes,
            on_end: Some(Box::new(on_end)),
        }
    }

    /// Wraps `inner` only to count its data bytes.
    pub fn counting(inner: B, bytes: Counter) -> Self {
        Self {
            inner,
            bytes: Some(bytes),
            on_end: None,
        }
    }

    fn end(&mut self, end: End<'_>) {
        if let Some(on_end) = self.on_end.take() {
            on_end(end);
        }
    }
}

impl<B> Body for Observed<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    if let Some(bytes) = &this.bytes {
                        bytes.inc_by(data.len() as u64);
                    }
                } else if let Some(trailers) = frame.trailers_ref() {
                    this.end(End::Trailers(trailers));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(err)) => {
                this.end(End::Failed);
                Poll::Ready(Some(Err(err)))
            }
            None => {
                this.end(End::Finished);
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for Observed<B> {
    fn drop(&mut self) {
        // A body nobody polls to its end (an empty one is often never polled at all) still
        // reports; whether it was complete is decided by the callback's view of the status.
        self.end(End::Dropped);
    }
}

/// Every method the compiled services declare, as `package.Service/Method`.
static KNOWN_METHODS: LazyLock<HashSet<String>> = LazyLock::new(|| {
    let mut known = HashSet::new();
    for set in [
        snug_proto::FILE_DESCRIPTOR_SET,
        tonic_health::pb::FILE_DESCRIPTOR_SET,
        tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
    ] {
        let Ok(set) = prost_types::FileDescriptorSet::decode(set) else {
            continue;
        };
        for file in set.file {
            let package = file.package.unwrap_or_default();
            for service in file.service {
                let service_name = service.name.unwrap_or_default();
                for method in service.method {
                    known.insert(format!(
                        "{package}.{service_name}/{}",
                        method.name.unwrap_or_default()
                    ));
                }
            }
        }
    }
    known
});

/// The `method` label for a request path: `package.Service/Method` if a compiled service declares
/// it, else `unknown` (a client cannot mint series by calling made-up paths).
pub fn method_label(path: &str) -> &'static str {
    KNOWN_METHODS
        .get(path.trim_start_matches('/'))
        .map_or("unknown", String::as_str)
}

/// The canonical upper-case name of a gRPC code, as the gRPC specification spells it.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// A counter a finished call feeds beyond the per-call request metrics. The runtime owns the
/// counters; which calls feed them is the knowledge of the service that serves them
/// ([`Classify`]), so no method name or reason of a service is spelled here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Derived {
    /// `snug_container_unlock_attempts_total`: a call that tried a secret against a container,
    /// with its outcome (`ok`, `locked`, `corrupt`).
    UnlockAttempt(&'static str),
    /// `snug_sync_cas_conflicts_total`: a write refused by the compare-and-swap, with its reason.
    CasConflict(&'static snug_reasons::Reason),
}

/// How a service tells which of its calls feed a [`Derived`] counter, from the method
/// (`package.Service/Method`) and the call's final status. Services hand theirs to the runtime
/// in [`crate::server::Services::classify`].
pub type Classify = fn(method: &str, status: &GrpcStatus) -> Option<Derived>;

/// Records a finished gRPC call: the request counters, latency, and the derived counters.
fn record(method: &'static str, status: &GrpcStatus, started: Instant, classify: &[Classify]) {
    let metrics = metrics::global();
    let labels = GrpcLabels {
        method,
        code: code_name(status.code),
        reason: status.reason.clone().unwrap_or_default(),
    };
    metrics.record_grpc(&labels, started.elapsed());
    for derived in classify
        .iter()
        .filter_map(|classify| classify(method, status))
    {
        match derived {
            Derived::UnlockAttempt(outcome) => metrics
                .unlock_attempts
                .get_or_create(&metrics::UnlockLabels { outcome })
                .inc(),
            Derived::CasConflict(reason) => metrics
                .cas_conflicts
                .get_or_create(&metrics::ConflictLabels {
                    reason: reason.name,
                })
                .inc(),
        };
    }
}

/// The gRPC server layer: see the module docs. Outermost in [`crate::server::serve`], so shed
/// and timed-out calls are observed too.
#[derive(Debug, Clone, Default)]
pub struct ObserveLayer {
    classify: Arc<[Classify]>,
}

impl ObserveLayer {
    /// Observes the calls of services whose derived counters `classify` decides.
    pub fn new(classify: &[Classify]) -> Self {
        Self {
            classify: classify.into(),
        }
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            classify: self.classify.clone(),
        }
    }
}

/// The service [`ObserveLayer`] produces.
#[derive(Debug, Clone)]
pub struct Observe<S> {
    inner: S,
    classify: Arc<[Classify]>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

impl<S> Service<http::Request<tonic::body::Body>> for Observe<S>
where
    S: Service<http::Request<tonic::body::Body>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let started = Instant::now();
        let method = method_label(request.uri().path());
        let span = if trace_context::is_health(request.uri().path()) {
            tracing::Span::none()
        } else {
            let span = tracing::debug_span!(
                crate::telemetry::GRPC_SERVER_SPAN,
                otel.name = method,
                otel.kind = "server",
                rpc.system = "grpc",
                rpc.method = method,
                rpc.grpc.status_code = tracing::field::Empty,
                otel.status_code = tracing::field::Empty,
                error.type = tracing::field::Empty,
            );
            trace_context::set_parent_from(&span, request.headers());
            span
        };
        let metrics = metrics::global();
        let labels = MethodLabels { method };
        let client_timeout = crate::deadline::client_timeout(request.headers());
        // The request body failing under the service is the client going away mid-upload
        // (cancelled, or its connection dropped), whatever the service then makes of the
        // stream it was reading: tonic turns a cancel into a clean end, a dropped connection
        // into UNKNOWN.
        let broke_off = Arc::new(AtomicBool::new(false));
        let request = {
            let broke_off = Arc::clone(&broke_off);
            let bytes = metrics.grpc_request_bytes.get_or_create(&labels).clone();
            request.map(move |body| {
                tonic::body::Body::new(Observed::new(body, Some(bytes), move |end| {
                    if matches!(end, End::Failed) {
                        broke_off.store(true, Ordering::Relaxed);
                    }
                }))
            })
        };
        let response = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        let response_bytes = metrics.grpc_response_bytes.get_or_create(&labels).clone();
        let call = Call {
            method,
            started,
            classify: self.classify.clone(),
            span,
            broke_off,
        };
        Box::pin(async move {
            // Counts the call if its future is dropped before it was answered: the client reset
            // the stream or dropped the connection, or tonic's own reading of `grpc-timeout` ran
            // out first (`crate::deadline`).
            let unanswered = Unanswered(Some((call, client_timeout)));
            let response = tracing::Instrument::instrument(response, unanswered.span()).await;
            let Some((call, _)) = unanswered.disarm() else {
                unreachable!("armed until here");
            };
            let response = match response {
                Ok(response) => response,
                Err(err) => {
                    call.end(GrpcStatus {
                        code: Code::Unknown,
                        reason: None,
                        domain: None,
                    });
                    return Err(err);
                }
            };
            let in_headers = grpc_status_of(response.headers());
            Ok(response.map(|body| {
                tonic::body::Body::new(Observed::new(
                    body,
                    Some(response_bytes),
                    move |end: End<'_>| call.end(end.grpc_status(in_headers)),
                ))
            }))
        })
    }
}

/// One call being observed, recorded once when it ends.
struct Call {
    method: &'static str,
    started: Instant,
    classify: Arc<[Classify]>,
    span: tracing::Span,
    broke_off: Arc<AtomicBool>,
}

/// A status counted for a call that ended without one of its own.
fn runtime_status(reason: &snug_reasons::Reason) -> GrpcStatus {
    GrpcStatus {
        code: crate::status::code_of(reason),
        reason: Some(reason.name.to_owned()),
        domain: Some(crate::limit::DOMAIN.to_owned()),
    }
}

impl Call {
    /// Records the call with its final status — or, when the client broke its request stream off,
    /// as the abort it was, whatever the service answered a client no longer there.
    fn end(self, status: GrpcStatus) {
        let status = if self.broke_off.load(Ordering::Relaxed) {
            runtime_status(&snug_reasons::rpc::BODY_ABORTED)
        } else {
            status
        };
        record(self.method, &status, self.started, &self.classify);
        let span = self.span;
        span.record("rpc.grpc.status_code", status.code as i64);
        if let Some(reason) = &status.reason {
            span.record("error.type", reason.as_str());
        }
        if status.code != Code::Ok {
            span.record("otel.status_code", "error");
        }
        let _entered = span.enter();
        tracing::debug!(
            code = code_name(status.code),
            reason = status.reason.as_deref().unwrap_or(""),
            elapsed_ms = self.started.elapsed().as_secs_f64() * 1e3,
            "gRPC call finished"
        );
    }
}

/// Records a call whose future is dropped before it was answered; see [`Observe::call`].
struct Unanswered(Option<(Call, Option<std::time::Duration>)>);

impl Unanswered {
    fn span(&self) -> tracing::Span {
        self.0
            .as_ref()
            .map_or_else(tracing::Span::none, |(call, _)| call.span.clone())
    }

    fn disarm(mut self) -> Option<(Call, Option<std::time::Duration>)> {
        self.0.take()
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        let Some((call, client_timeout)) = self.0.take() else {
            return;
        };
        let status = if crate::deadline::expired(client_timeout, call.started.elapsed()) {
            runtime_status(&snug_reasons::rpc::DEADLINE_EXCEEDED)
        } else {
            // No status was sent: the client cancelled the call, or left.
            GrpcStatus {
                code: Code::Cancelled,
                reason: None,
                domain: None,
            }
        };
        call.end(status);
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::BodyExt as _;

    use super::*;
    use crate::status;

    #[test]
    fn method_labels_come_from_the_descriptor_sets() {
        assert_eq!(
            method_label("/snug.sync.v1.SyncService/PutImage"),
            "snug.sync.v1.SyncService/PutImage"
        );
        assert_eq!(
            method_label("/snug.container.v1.ContainerService/Unlock"),
            "snug.container.v1.ContainerService/Unlock"
        );
        assert_eq!(
            method_label("/grpc.health.v1.Health/Check"),
            "grpc.health.v1.Health/Check"
        );
        assert_eq!(method_label("/snug.sync.v1.SyncService/Nope"), "unknown");
        assert_eq!(method_label("/../../etc/passwd"), "unknown");
        assert_eq!(method_label(""), "unknown");
    }

    fn series(text: &str, prefix: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(prefix))
            .and_then(|value| value.trim().parse().ok())
    }

    /// Drives the layer with a service that answers each call with the given status, and reads
    /// the metrics back from the text format.
    #[tokio::test]
    async fn calls_are_counted_by_method_code_and_reason_when_their_body_ends() {
        // The sync service's rule for this one reason (services/sync classifies its own calls).
        fn stale(_method: &str, status: &GrpcStatus) -> Option<Derived> {
            (status.reason.as_deref() == Some("STALE_REVISION"))
                .then_some(Derived::CasConflict(&snug_reasons::sync::STALE_REVISION))
        }
        let mut service = ObserveLayer::new(&[stale]).layer(tower::service_fn(
            |request: http::Request<tonic::body::Body>| async move {
                let body = request
                    .into_body()
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                let response = if body.as_ref() == b"stale" {
                    status::error(Code::Aborted, "STALE_REVISION", "snug.sync", "stale", [])
                        .into_http()
                } else {
                    // A streaming answer: the status comes in the trailers after the data.
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                    let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
                        Ok(Frame::data(Bytes::from_static(b"12345678"))),
                        Ok(Frame::trailers(trailers)),
                    ];
                    http::Response::new(tonic::body::Body::new(http_body_util::StreamBody::new(
                        futures::stream::iter(frames),
                    )))
                };
                Ok::<_, Infallible>(response)
            },
        ));
        let path = "/snug.sync.v1.SyncService/RestoreRevision";
        let before = metrics::global().encode();
        let ok_prefix = r#"snug_grpc_server_requests_total{method="snug.sync.v1.SyncService/RestoreRevision",code="OK",reason=""}"#;
        let stale_prefix = r#"snug_grpc_server_requests_total{method="snug.sync.v1.SyncService/RestoreRevision",code="ABORTED",reason="STALE_REVISION"}"#;
        let conflicts = r#"snug_sync_cas_conflicts_total{reason="STALE_REVISION"}"#;

        let request = http::Request::builder()
            .uri(path)
            .body(tonic::body::Body::new(http_body_util::Full::new(
                Bytes::from_static(b"stale"),
            )))
            .expect("request");
        let response = service.call(request).await.expect("response");
        drop(response);

        let request = http::Request::builder()
            .uri(path)
            .body(tonic::body::Body::new(http_body_util::Full::new(
                Bytes::from_static(b"fine"),
            )))
            .expect("request");
        let response = service.call(request).await.expect("response");
        let middle = metrics::global().encode();
        assert_eq!(
            series(&middle, ok_prefix).unwrap_or(0.0),
            series(&before, ok_prefix).unwrap_or(0.0),
            "not counted before the body ends"
        );
        let body = response.into_body().collect().await.expect("body");
        assert!(body.trailers().is_some());

        let after = metrics::global().encode();
        assert_eq!(
            series(&after, ok_prefix).unwrap_or(0.0) - series(&before, ok_prefix).unwrap_or(0.0),
            1.0,
            "{after}"
        );
        assert_eq!(
            series(&after, stale_prefix).unwrap_or(0.0)
                - series(&before, stale_prefix).unwrap_or(0.0),
            1.0,
            "{after}"
        );
        assert_eq!(
            series(&after, conflicts).unwrap_or(0.0) - series(&before, conflicts).unwrap_or(0.0),
            1.0,
            "{after}"
        );
        let bytes = r#"snug_grpc_server_response_bytes_total{method="snug.sync.v1.SyncService/RestoreRevision"}"#;
        assert!(
            series(&after, bytes).unwrap_or(0.0) - series(&before, bytes).unwrap_or(0.0) >= 8.0,
            "{after}"
        );
        let received = r#"snug_grpc_server_request_bytes_total{method="snug.sync.v1.SyncService/RestoreRevision"}"#;
        assert_eq!(
            series(&after, received).unwrap_or(0.0) - series(&before, received).unwrap_or(0.0),
            9.0,
            "{after}"
        );
    }

    /// How many calls of `method` the metrics hold with this code and reason.
    fn calls(method: &str, code: &str, reason: &str) -> f64 {
        series(
            &metrics::global().encode(),
            &format!(
                r#"snug_grpc_server_requests_total{{method="{method}",code="{code}",reason="{reason}"}}"#
            ),
        )
        .unwrap_or(0.0)
    }

    /// A body that yields one frame, then fails as hyper's does when the client's stream breaks.
    fn breaking_body() -> tonic::body::Body {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = vec![
            Ok(Frame::data(Bytes::from_static(b"\0\0\0\0\x02ab"))),
            Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        ];
        tonic::body::Body::new(http_body_util::StreamBody::new(futures::stream::iter(
            frames,
        )))
    }

    /// Issue 23, point 6: a client that goes away is counted as CANCELLED, however the service
    /// took it — an upload that broke off as BODY_ABORTED even when the service, reading the
    /// broken stream, answered something else (tonic turns a dropped connection into UNKNOWN and
    /// a cancel into a clean end of stream), and a call dropped before its answer with no reason;
    /// one dropped at the client's deadline is DEADLINE_EXCEEDED.
    #[tokio::test]
    async fn a_client_that_goes_away_is_counted_as_cancelled() {
        let method = "snug.materialize.v1.MaterializeService/ApplyDdl";
        let path = format!("/{method}");
        let mut service = ObserveLayer::new(&[]).layer(tower::service_fn(
            |request: http::Request<tonic::body::Body>| async move {
                if request.headers().contains_key("x-hang") {
                    std::future::pending::<()>().await;
                }
                // Reads the body as a service would, and answers with what the read gave.
                let read = request.into_body().collect().await;
                let status = match read {
                    Ok(_) => tonic::Status::invalid_argument("the stream ended early"),
                    Err(err) => err,
                };
                Ok::<_, Infallible>(status.into_http())
            },
        ));
        let before = [
            calls(method, "CANCELLED", "BODY_ABORTED"),
            calls(method, "CANCELLED", ""),
            calls(method, "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED"),
            calls(method, "UNKNOWN", ""),
        ];

        let request = http::Request::builder()
            .uri(&path)
            .body(breaking_body())
            .expect("request");
        drop(service.call(request).await.expect("answered"));

        let request = http::Request::builder()
            .uri(&path)
            .header("x-hang", "1")
            .header("grpc-timeout", "60S")
            .body(tonic::body::Body::empty())
            .expect("request");
        let unanswered = service.call(request);
        tokio::time::timeout(std::time::Duration::from_millis(20), unanswered)
            .await
            .expect_err("never answered");

        let request = http::Request::builder()
            .uri(&path)
            .header("x-hang", "1")
            .header("grpc-timeout", "5m")
            .body(tonic::body::Body::empty())
            .expect("request");
        let unanswered = service.call(request);
        tokio::time::timeout(std::time::Duration::from_millis(20), unanswered)
            .await
            .expect_err("never answered");

        let after = [
            calls(method, "CANCELLED", "BODY_ABORTED"),
            calls(method, "CANCELLED", ""),
            calls(method, "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED"),
            calls(method, "UNKNOWN", ""),
        ];
        let counted: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
        assert_eq!(
            counted,
            [1.0, 1.0, 1.0, 0.0],
            "(aborted, cancelled, past the deadline, unknown)"
        );
    }

    #[test]
    fn a_dropped_body_ends_as_cancelled_unless_its_headers_had_a_status() {
        assert_eq!(End::Dropped.grpc_status(None).code, Code::Cancelled);
        let failed = GrpcStatus {
            code: Code::NotFound,
            reason: Some("NOT_FOUND".to_owned()),
            domain: None,
        };
        assert_eq!(End::Dropped.grpc_status(Some(failed.clone())), failed);
        assert_eq!(End::Finished.grpc_status(None).code, Code::Unknown);
    }
}
