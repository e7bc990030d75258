//! Logs and traces for Snug Hub binaries: text or JSON log lines on stderr, and OpenTelemetry
//! traces exported over OTLP/gRPC when (and only when) an endpoint is configured.
//!
//! With no endpoint nothing of OpenTelemetry is built: no exporter, no batch thread, no layer,
//! and propagation ([`crate::trace_context`]) finds no span context to send. With one, every
//! `tracing` span the filter lets through becomes an OpenTelemetry span, and each log line
//! written inside one carries its `trace_id` and `span_id`, so a log search and a trace view
//! meet on the same ids.
//!
//! The collector is reached over plaintext HTTP/2 (`http://`) or TLS (`https://`). Over TLS the
//! collector's certificate must chain to the CA file in `OTEL_EXPORTER_OTLP_CERTIFICATE` if it is
//! set, else to the Mozilla roots compiled in from `webpki-roots` (the image ships no CA store), and
//! must name the endpoint's host; there is no switch to skip that check.

use std::{fmt, path::PathBuf};

use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_otlp::{WithExportConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use rustls::pki_types::{CertificateDer, pem::PemObject as _};
use tonic::transport::{Certificate, ClientTlsConfig};
use tracing::{Event, Subscriber};
use tracing_subscriber::{
    EnvFilter, Layer,
    filter::{FilterExt as _, filter_fn},
    fmt::{self as tfmt, FmtContext, FormatEvent, FormatFields, format::Writer},
    prelude::*,
    registry::LookupSpan,
};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, for a terminal.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Logging and tracing settings every `snug-hub` command takes, from flags or the environment.
///
/// The OpenTelemetry variables keep their standard names, so a collector's usual deployment
/// recipe works unchanged.
#[derive(Debug, Clone, clap::Args)]
pub struct TelemetryConfig {
    /// Log line format.
    #[arg(
        long,
        env = "SNUG_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,
    /// OTLP/gRPC collector to export traces to: `https://otel-collector:4317` (TLS) or
    /// `http://otel-collector:4317` (plaintext HTTP/2). Unset: traces are not exported, and nothing
    /// of OpenTelemetry runs.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", global = true)]
    pub otlp_endpoint: Option<String>,
    /// PEM file of the CA certificates an `https://` collector's certificate must chain to,
    /// instead of the compiled-in Mozilla roots.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_CERTIFICATE", global = true)]
    pub otlp_certificate: Option<PathBuf>,
    /// The `service.name` of exported spans; defaults to the process's role, such as
    /// `snug-hub-gateway`.
    #[arg(long, env = "OTEL_SERVICE_NAME", global = true)]
    pub service_name: Option<String>,
}

impl TelemetryConfig {
    /// Logs only: text lines, no trace export (for tests and tools).
    pub fn logs_only(log_format: LogFormat) -> Self {
        Self {
            log_format,
            otlp_endpoint: None,
            otlp_certificate: None,
            service_name: None,
        }
    }

    /// The endpoint, if one is really configured (an empty variable counts as unset, as the
    /// OpenTelemetry specification asks).
    fn endpoint(&self) -> Option<&str> {
        self.otlp_endpoint
            .as_deref()
            .map(str::trim)
            .filter(|e| !e.is_empty())
    }
}

/// Why telemetry could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is not an `https://host:port` or `http://host:port` URL. The
    /// value itself is not repeated: an endpoint URL may carry credentials.
    #[error("OTEL_EXPORTER_OTLP_ENDPOINT is unusable: {problem}")]
    InvalidEndpoint {
        /// What is wrong with it.
        problem: &'static str,
    },
    /// `OTEL_EXPORTER_OTLP_CERTIFICATE` cannot be used: unreadable, holding no PEM certificate, or
    /// set for a plaintext `http://` endpoint (where it would silently verify nothing).
    #[error("OTEL_EXPORTER_OTLP_CERTIFICATE {path:?} is unusable: {problem}")]
    InvalidCertificate {
        /// The file named.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The OTLP exporter could not be built.
    #[error("cannot build the OTLP trace exporter: {detail}")]
    Exporter {
        /// The exporter's own description.
        detail: String,
    },
}

impl TelemetryError {
    /// The failure's reason, for the operator who set the variables.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            TelemetryError::InvalidEndpoint { .. } => &snug_reasons::hub::INVALID_OTLP_ENDPOINT,
            TelemetryError::InvalidCertificate { .. } => {
                &snug_reasons::hub::INVALID_OTLP_CERTIFICATE
            }
            TelemetryError::Exporter { .. } => &snug_reasons::hub::OTLP_EXPORTER_FAILED,
        }
    }
}

/// What [`init`] started; [`Telemetry::shutdown`] flushes the spans still buffered.
#[derive(Debug)]
#[must_use = "call shutdown() before exiting, or buffered spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are being exported.
    pub fn is_exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports every span still buffered and stops the exporter. Bounded by the exporter's
    /// timeout, so an unreachable collector delays exit by seconds, not forever.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        // The SDK's shutdown blocks on its export thread; keep it off the async workers.
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "flushing traces at shutdown failed"),
            Err(err) => tracing::warn!(error = %err, "flushing traces at shutdown panicked"),
        }
    }
}

/// Crates whose spans never become OpenTelemetry spans: the exporter's own transport (h2,
/// hyper, tonic, tower) would otherwise trace its own exports, and every export would cause more.
const NOT_EXPORTED: &[&str] = &[
    "h2",
    "hyper",
    "hyper_util",
    "tonic",
    "tower",
    "opentelemetry",
];

/// Installs the global subscriber: log lines on stderr, filtered by `RUST_LOG` (default `info`),
/// and, when an OTLP endpoint is configured, an OpenTelemetry layer under the same filter.
///
/// `role` names the process (`snug-hub-gateway`, …) and is its `service.name` unless
/// `OTEL_SERVICE_NAME` says otherwise. Must run inside a Tokio runtime (the tonic exporter
/// needs its reactor). A second call changes nothing and exports nothing.
pub fn init(config: &TelemetryConfig, role: &str) -> Result<Telemetry, TelemetryError> {
    let provider = match config.endpoint() {
        Some(endpoint) => {
            let name = config
                .service_name
                .as_deref()
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .unwrap_or(role);
            Some(provider(
                endpoint,
                config.otlp_certificate.as_deref(),
                name,
            )?)
        }
        None => None,
    };
    let otel = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("snug-hub"))
            .with_filter(export_filter(env_filter()))
    });
    let installed = tracing_subscriber::registry()
        .with(log_layer(config.log_format, std::io::stderr).with_filter(env_filter()))
        .with(otel)
        .try_init()
        .is_ok();
    if installed {
        Ok(Telemetry { provider })
    } else {
        if let Some(provider) = provider {
            let _ = provider.shutdown();
        }
        Ok(Telemetry { provider: None })
    }
}

fn env_filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}

/// The spans of one HTTP request or gRPC call (`snug_gateway::observe`, `crate::observe`,
/// `crate::trace_context`). They are `debug` spans, so log lines at the default `info` level
/// neither build nor format them (at `info` they cost a fifth of a small GET: three spans per
/// request, their fields formatted for log lines that never show them); the trace exporter takes
/// them whatever the log level, and a log line inside one still carries its trace and span ids.
pub const CALL_SPANS: [&str; 3] = [HTTP_SERVER_SPAN, GRPC_CLIENT_SPAN, GRPC_SERVER_SPAN];

/// The gateway's span of one HTTP request.
pub const HTTP_SERVER_SPAN: &str = "http.server";
/// The span of one gRPC call a client makes.
pub const GRPC_CLIENT_SPAN: &str = "grpc.client";
/// The span of one gRPC call a service answers.
pub const GRPC_SERVER_SPAN: &str = "grpc.server";

/// What the trace exporter takes: what `logged` lets through, and the [`CALL_SPANS`] at any
/// level, except spans of the crates in [`NOT_EXPORTED`].
fn export_filter<S>(logged: EnvFilter) -> impl tracing_subscriber::layer::Filter<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let call_span = filter_fn(|meta| meta.is_span() && CALL_SPANS.contains(&meta.name()));
    let exported_crate = filter_fn(|meta| {
        !NOT_EXPORTED.iter().any(|prefix| {
            meta.target()
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['_', ':']))
        })
    });
    logged.or(call_span).and(exported_crate)
}

/// The log-line layer in `format`, writing to `writer`, with trace ids on lines inside a span.
pub fn log_layer<S, W>(format: LogFormat, writer: W) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> tfmt::MakeWriter<'w> + Send + Sync + 'static,
{
    match format {
        LogFormat::Text => tfmt::layer()
            .with_writer(writer)
            .event_format(WithTraceIds {
                inner: tfmt::format(),
                json: false,
            })
            .boxed(),
        LogFormat::Json => tfmt::layer()
            .with_writer(writer)
            .fmt_fields(tfmt::format::JsonFields::new())
            .event_format(WithTraceIds {
                inner: tfmt::format()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true),
                json: true,
            })
            .boxed(),
    }
}

/// Builds the tracer provider: OTLP/gRPC through the batch processor (its own thread, so a slow
/// collector never stalls a request), resource `service.name` and `service.version`; over TLS
/// when the endpoint is `https://`, trusting `certificate`'s CAs if given.
fn provider(
    endpoint: &str,
    certificate: Option<&std::path::Path>,
    service_name: &str,
) -> Result<SdkTracerProvider, TelemetryError> {
    let tls = match (check_endpoint(endpoint)?, certificate) {
        (Transport::Tls, Some(path)) => {
            Some(ClientTlsConfig::new().ca_certificate(ca_certificate(path)?))
        }
        (Transport::Tls, None) => Some(ClientTlsConfig::new().with_webpki_roots()),
        (Transport::Plaintext, Some(path)) => {
            return Err(TelemetryError::InvalidCertificate {
                path: path.to_owned(),
                problem: "the endpoint is plaintext http://; use https://".to_owned(),
            });
        }
        (Transport::Plaintext, None) => None,
    };
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint);
    if let Some(tls) = tls {
        builder = builder.with_tls_config(tls);
    }
    let exporter = builder.build().map_err(|err| TelemetryError::Exporter {
        detail: err.to_string(),
    })?;
    let resource = Resource::builder()
        .with_service_name(service_name.to_owned())
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// How the collector is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// `https://`: TLS, the collector's certificate verified.
    Tls,
    /// `http://`: plaintext HTTP/2.
    Plaintext,
}

/// The exporter accepts anything and fails at the first export; refuse a bad endpoint at start.
fn check_endpoint(endpoint: &str) -> Result<Transport, TelemetryError> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|_| TelemetryError::InvalidEndpoint {
            problem: "not a URL",
        })?;
    let transport = match uri.scheme_str() {
        Some("https") => Transport::Tls,
        Some("http") => Transport::Plaintext,
        _ => {
            return Err(TelemetryError::InvalidEndpoint {
                problem: "the scheme must be https:// or http://",
            });
        }
    };
    if uri.host().is_none_or(str::is_empty) {
        return Err(TelemetryError::InvalidEndpoint {
            problem: "the URL has no host",
        });
    }
    Ok(transport)
}

/// Reads the CA file of `OTEL_EXPORTER_OTLP_CERTIFICATE`. tonic would take any bytes and trust no
/// one for a file without a certificate, failing only at the first export; refuse that at start.
fn ca_certificate(path: &std::path::Path) -> Result<Certificate, TelemetryError> {
    let invalid = |problem: String| TelemetryError::InvalidCertificate {
        path: path.to_owned(),
        problem,
    };
    let pem = std::fs::read(path).map_err(|err| invalid(format!("cannot read it: {err}")))?;
    let mut n_certs = 0_usize;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        cert.map_err(|err| invalid(format!("not a PEM certificate file: {err}")))?;
        n_certs += 1;
    }
    if n_certs == 0 {
        return Err(invalid("holds no PEM certificate".to_owned()));
    }
    Ok(Certificate::from_pem(pem))
}

/// The trace and span ids of the OpenTelemetry span current on this thread, if any.
///
/// The OpenTelemetry layer activates a span's context when the span is entered, so this is the
/// innermost exported span around the caller.
pub fn current_ids() -> Option<(String, String)> {
    let cx = opentelemetry::Context::current();
    let span = cx.span();
    let context = span.span_context();
    context.is_valid().then(|| {
        (
            context.trace_id().to_string(),
            context.span_id().to_string(),
        )
    })
}

/// Adds `trace_id` and `span_id` to every line written inside an exported span: as the first
/// two keys of a JSON line, or as a `trace_id=… span_id=…` prefix of a text line (written
/// straight through, so a terminal keeps its colours).
struct WithTraceIds<F> {
    inner: F,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some((trace_id, span_id)) = current_ids() else {
            return self.inner.format_event(ctx, writer, event);
        };
        if !self.json {
            write!(writer, "trace_id={trace_id} span_id={span_id} ")?;
            return self.inner.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => write!(
                writer,
                "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",{rest}"
            ),
            None => writer.write_str(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    use super::*;

    /// Collects what a layer writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> tfmt::MakeWriter<'w> for Captured {
        type Writer = Captured;
        fn make_writer(&'w self) -> Captured {
            self.clone()
        }
    }

    impl Captured {
        fn lines(&self) -> Vec<String> {
            let bytes = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
            String::from_utf8(bytes)
                .expect("utf-8")
                .lines()
                .map(str::to_owned)
                .collect()
        }
    }

    /// A subscriber like [`init`]'s, scoped to the test, with a provider that exports nothing
    /// (its spans still get real ids).
    fn with_subscriber(format: LogFormat, run: impl FnOnce()) -> Vec<String> {
        let captured = Captured::default();
        let provider = SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(log_layer(format, captured.clone()))
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, run);
        captured.lines()
    }

    #[test]
    fn a_json_line_parses_and_carries_its_fields_and_trace_ids() {
        let mut expected = None;
        let lines = with_subscriber(LogFormat::Json, || {
            tracing::info!(user = "u1", "outside any span");
            let span = tracing::info_span!("request", route = "/userdb");
            let _entered = span.enter();
            let cx = span.context();
            let ids = cx.span().span_context().clone();
            expected = Some((ids.trace_id().to_string(), ids.span_id().to_string()));
            tracing::warn!(bytes = 42_u64, "inside the span");
        });
        assert_eq!(lines.len(), 2, "{lines:?}");
        let outside: serde_json::Value = serde_json::from_str(&lines[0]).expect("JSON line");
        assert_eq!(outside["message"], "outside any span");
        assert_eq!(outside["user"], "u1");
        assert_eq!(outside["level"], "INFO");
        assert!(outside.get("trace_id").is_none(), "{outside}");

        let inside: serde_json::Value = serde_json::from_str(&lines[1]).expect("JSON line");
        let (trace_id, span_id) = expected.expect("span ids");
        assert_eq!(inside["message"], "inside the span");
        assert_eq!(inside["bytes"], 42);
        assert_eq!(inside["level"], "WARN");
        assert_eq!(inside["span"]["route"], "/userdb");
        assert_eq!(inside["trace_id"], trace_id.as_str());
        assert_eq!(inside["span_id"], span_id.as_str());
        assert_eq!(trace_id.len(), 32);
        assert!(inside["timestamp"].is_string());
    }

    #[test]
    fn a_text_line_inside_a_span_starts_with_its_trace_id() {
        let mut trace_id = String::new();
        let lines = with_subscriber(LogFormat::Text, || {
            let span = tracing::info_span!("request");
            let _entered = span.enter();
            trace_id = span.context().span().span_context().trace_id().to_string();
            tracing::info!("hello");
        });
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with(&format!("trace_id={trace_id} span_id=")),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("hello"));
    }

    #[test]
    fn call_spans_are_exported_but_not_built_for_info_log_lines() {
        let captured = Captured::default();
        let provider = SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(log_layer(LogFormat::Json, captured.clone()).with_filter(EnvFilter::new("info")))
            .with(
                tracing_opentelemetry::layer()
                    .with_tracer(provider.tracer("test"))
                    .with_filter(export_filter(EnvFilter::new("info"))),
            );
        let mut exported = Vec::new();
        tracing::subscriber::with_default(subscriber, || {
            let spans = [
                tracing::debug_span!(HTTP_SERVER_SPAN, http.route = "/userdb"),
                tracing::debug_span!(GRPC_CLIENT_SPAN, rpc.method = "m"),
                tracing::debug_span!(GRPC_SERVER_SPAN, rpc.method = "m"),
            ];
            for (span, name) in spans.into_iter().zip(CALL_SPANS) {
                let _entered = span.enter();
                let ids = span.context().span().span_context().clone();
                exported.push(ids.is_valid());
                tracing::warn!("inside {name}");
            }
            // Other debug spans stay out of the export at the `info` level.
            let other = tracing::debug_span!("other");
            exported.push(other.context().span().span_context().is_valid());
        });
        assert_eq!(exported, [true, true, true, false]);
        let lines = captured.lines();
        assert_eq!(lines.len(), 3, "{lines:?}");
        for line in lines {
            let line: serde_json::Value = serde_json::from_str(&line).expect("JSON line");
            assert!(line["trace_id"].is_string(), "{line}");
            assert!(
                line.get("span").is_none(),
                "the log layer built no span: {line}"
            );
        }
    }

    #[test]
    fn without_a_provider_no_line_carries_ids() {
        let captured = Captured::default();
        let subscriber =
            tracing_subscriber::registry().with(log_layer(LogFormat::Json, captured.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request");
            let _entered = span.enter();
            tracing::info!("plain");
        });
        let line: serde_json::Value = serde_json::from_str(&captured.lines()[0]).expect("JSON");
        assert!(line.get("trace_id").is_none());
        assert_eq!(line["message"], "plain");
    }

    #[test]
    fn bad_endpoints_are_refused_with_a_reason_and_without_the_value() {
        for (endpoint, fragment) in [
            ("not a url at all", "not a URL"),
            ("grpc://collector:4317", "scheme"),
            ("/just/a/path", "scheme"),
        ] {
            let err = check_endpoint(endpoint).expect_err(endpoint);
            assert_eq!(err.reason(), "INVALID_OTLP_ENDPOINT");
            let text = err.to_string();
            assert!(text.contains(fragment), "{endpoint}: {text}");
            assert!(!text.contains(endpoint), "{text}");
        }
        assert_eq!(
            check_endpoint("http://127.0.0.1:4317").ok(),
            Some(Transport::Plaintext)
        );
        assert_eq!(
            check_endpoint("https://collector:4317").ok(),
            Some(Transport::Tls)
        );
    }

    #[tokio::test]
    async fn an_unusable_certificate_is_refused_at_start() {
        let dir = tempfile::tempdir().expect("temp dir");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").expect("write");
        let (ca, _, _) = issue(&["localhost"]);
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca).expect("write");
        for (endpoint, path, fragment) in [
            ("https://c:4317", junk.clone(), "holds no PEM certificate"),
            (
                "https://c:4317",
                dir.path().join("missing.pem"),
                "cannot read it",
            ),
            ("http://c:4317", ca_file, "plaintext http://"),
        ] {
            let err = provider(endpoint, Some(&path), "test").expect_err(endpoint);
            assert_eq!(err.reason(), "INVALID_OTLP_CERTIFICATE");
            let text = err.to_string();
            assert!(text.contains(fragment), "{text}");
            assert!(text.starts_with("OTEL_EXPORTER_OTLP_CERTIFICATE"), "{text}");
        }
    }

    /// A CA (its certificate in PEM) and a certificate and key it issues for `names`.
    fn issue(names: &[&str]) -> (String, String, String) {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::new()).expect("params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "snug-rpc test CA");
        let ca = ca_params.self_signed(&ca_key).expect("CA");
        let key = rcgen::KeyPair::generate().expect("key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let cert = rcgen::CertificateParams::new(names)
            .expect("params")
            .signed_by(&key, &rcgen::Issuer::new(ca_params, ca_key))
            .expect("certificate");
        (ca.pem(), cert.pem(), key.serialize_pem())
    }

    /// An OTLP/gRPC trace receiver over TLS on loopback that counts the spans it is sent.
    #[derive(Clone, Default)]
    struct TlsCollector {
        spans: Arc<Mutex<Vec<String>>>,
    }

    #[tonic::async_trait]
    impl opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService
        for TlsCollector
    {
        async fn export(
            &self,
            request: tonic::Request<
                opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
            >,
        ) -> Result<
            tonic::Response<
                opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse,
            >,
            tonic::Status,
        > {
            let names = request
                .into_inner()
                .resource_spans
                .into_iter()
                .flat_map(|r| r.scope_spans)
                .flat_map(|s| s.spans)
                .map(|span| span.name);
            self.spans
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(names);
            Ok(tonic::Response::new(
                opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse {
                    partial_success: None,
                },
            ))
        }
    }

    impl TlsCollector {
        /// Starts a collector serving `cert` and `key`; returns it and its `https://` endpoint
        /// under the name `localhost`.
        async fn start(cert: &str, key: &str) -> (TlsCollector, String) {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let port = listener.local_addr().expect("addr").port();
            let collector = TlsCollector::default();
            let tls = tonic::transport::ServerTlsConfig::new()
                .identity(tonic::transport::Identity::from_pem(cert, key));
            let server = tonic::transport::Server::builder()
                .tls_config(tls)
                .expect("server TLS")
                .add_service(
                    opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer::new(
                        collector.clone(),
                    ),
                )
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
            tokio::spawn(server);
            (collector, format!("https://localhost:{port}"))
        }

        fn spans(&self) -> Vec<String> {
            self.spans.lock().unwrap_or_else(|p| p.into_inner()).clone()
        }
    }

    /// Exports one span named `name` through [`provider`], as [`init`] builds it; returns
    /// whether the flush reported success. Bounded, so a stuck export fails the test instead of
    /// hanging it.
    async fn export_one(endpoint: &str, ca: &std::path::Path, name: &'static str) -> bool {
        use opentelemetry::trace::{Span as _, Tracer as _};
        let provider = provider(endpoint, Some(ca), "snug-rpc-test").expect("provider");
        provider.tracer("test").start(name).end();
        let flushed = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            tokio::task::spawn_blocking(move || {
                let flushed = provider.force_flush();
                let _ = provider.shutdown();
                flushed
            }),
        )
        .await
        .expect("the export finished in time")
        .expect("flush thread");
        flushed.is_ok()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn spans_reach_an_https_collector_that_the_configured_ca_vouches_for() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (ca, cert, key) = issue(&["localhost"]);
        let (collector, endpoint) = TlsCollector::start(&cert, &key).await;
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca).expect("write");
        assert!(export_one(&endpoint, &ca_file, "over-tls").await);
        assert_eq!(collector.spans(), ["over-tls"]);

        // A CA that did not issue the collector's certificate: nothing is exported.
        let (other_ca, _, _) = issue(&["localhost"]);
        let other_file = dir.path().join("other-ca.pem");
        std::fs::write(&other_file, other_ca).expect("write");
        assert!(!export_one(&endpoint, &other_file, "wrong-ca").await);
        assert_eq!(collector.spans(), ["over-tls"]);

        // The right CA, but the certificate does not name the host the endpoint uses.
        let by_ip = endpoint.replace("localhost", "127.0.0.1");
        assert!(!export_one(&by_ip, &ca_file, "wrong-name").await);
        assert_eq!(collector.spans(), ["over-tls"]);
    }

    #[test]
    fn an_empty_endpoint_means_off() {
        let mut config = TelemetryConfig::logs_only(LogFormat::Text);
        assert_eq!(config.endpoint(), None);
        config.otlp_endpoint = Some("  ".to_owned());
        assert_eq!(config.endpoint(), None);
        config.otlp_endpoint = Some("http://c:4317".to_owned());
        assert_eq!(config.endpoint(), Some("http://c:4317"));
    }
}
