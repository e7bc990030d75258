//! The process's Prometheus metrics: one registry, served in the Prometheus text format on the
//! admin port ([`crate::admin`]).
//!
//! One registry per process, not per server: `snug-hub serve` runs the gateway and every service
//! in one process, and one scrape of its admin port must see all of them.
//!
//! Every label value comes from a closed set — a route template from the gateway's route table, a
//! gRPC method from the compiled descriptor sets, a status, an `ErrorInfo` reason the server
//! itself chose — so no request can mint new series, and nothing a client sends (a path, a
//! header, a secret) can become a label.

use std::{sync::LazyLock, time::Duration};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// The `Content-Type` of [`encode`]'s output (Prometheus text exposition format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Latency buckets, in seconds: from a cached HEAD (≈1 ms) to a 64 MiB transfer on a slow link.
const LATENCY_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Labels of one HTTP request outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// The request method (`GET`, …; `OTHER` for anything unusual).
    pub method: &'static str,
    /// The route template (`/userdb/revisions/{rev}/restore`), `unmatched` for no route.
    pub route: &'static str,
    /// The HTTP status code.
    pub status: u16,
    /// The error body's `code`; empty on success.
    pub reason: &'static str,
}

/// Labels naming an HTTP route.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The route template.
    pub route: &'static str,
}

/// Labels of one gRPC call outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcLabels {
    /// `package.Service/Method`, `unknown` for a path no compiled service declares.
    pub method: &'static str,
    /// The gRPC code (`OK`, `FAILED_PRECONDITION`, …).
    pub code: &'static str,
    /// The `google.rpc.ErrorInfo` reason; empty when the status carries none.
    pub reason: String,
}

/// Labels naming a gRPC method.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    /// `package.Service/Method`, or `unknown`.
    pub method: &'static str,
}

/// Labels of a refused compare-and-swap.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConflictLabels {
    /// `REVISION_MISMATCH` or `STALE_REVISION`.
    pub reason: &'static str,
}

/// Labels of an attempt to open a protected container with a secret.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnlockLabels {
    /// `ok`, `locked` (no secret opened it) or `corrupt` (damaged, or not a container at all).
    pub outcome: &'static str,
}

/// Labels of an event sent on an event stream.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    /// `revision`, `no-image`, `gap` or `heartbeat`.
    pub event: &'static str,
}

/// Labels of the base a delta push was assembled from.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BaseLabels {
    /// `kept` (the image the replica wrote last, from its base cache) or `read` (from the store).
    pub source: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Every metric the hub exports; see the crate's ARCHITECTURE.md section "Observability".
pub struct Metrics {
    registry: Registry,
    /// HTTP requests answered, by method, route, status and reason.
    pub http_requests: Family<HttpLabels, Counter>,
    /// HTTP request durations until the last response byte, same labels.
    pub http_duration: Histograms<HttpLabels>,
    /// HTTP request body bytes received, by route.
    pub http_request_bytes: Family<RouteLabels, Counter>,
    /// HTTP response body bytes sent, by route.
    pub http_response_bytes: Family<RouteLabels, Counter>,
    /// HTTP response bytes the kernel sent from sealed memory, without copying them.
    pub http_zero_copy_bytes: Counter,
    /// gRPC calls served, by method, code and reason.
    pub grpc_requests: Family<GrpcLabels, Counter>,
    /// gRPC call durations until the final status, same labels.
    pub grpc_duration: Histograms<GrpcLabels>,
    /// gRPC request bytes received (message framing included), by method.
    pub grpc_request_bytes: Family<MethodLabels, Counter>,
    /// gRPC response bytes sent (message framing included), by method.
    pub grpc_response_bytes: Family<MethodLabels, Counter>,
    /// Writes the sync origin refused because the client's revision was not the current one.
    pub cas_conflicts: Family<ConflictLabels, Counter>,
    /// Attempts to open a protected container with a secret, by outcome.
    pub unlock_attempts: Family<UnlockLabels, Counter>,
    /// Delta pushes assembled, by where their base came from.
    pub sync_delta_bases: Family<BaseLabels, Counter>,
    /// Bytes the sync service's base cache holds.
    pub sync_base_cache_bytes: Gauge,
    /// Event streams open at the gateway.
    pub events_streams: Gauge,
    /// Events sent on event streams, by event.
    pub events_sent: Family<EventLabels, Counter>,
    /// Seconds from a revision's acceptance to its event leaving the gateway.
    pub events_delivery_lag: Histogram,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::default();
        let http_requests = Family::default();
        let http_duration: Histograms<HttpLabels> = Family::new_with_constructor(latency_histogram);
        let http_request_bytes = Family::default();
        let http_response_bytes = Family::default();
        let http_zero_copy_bytes = Counter::default();
        let grpc_requests = Family::default();
        let grpc_duration: Histograms<GrpcLabels> = Family::new_with_constructor(latency_histogram);
        let grpc_request_bytes = Family::default();
        let grpc_response_bytes = Family::default();
        let cas_conflicts: Family<ConflictLabels, Counter> = Family::default();
        let unlock_attempts: Family<UnlockLabels, Counter> = Family::default();
        let sync_delta_bases: Family<BaseLabels, Counter> = Family::default();
        let sync_base_cache_bytes = Gauge::default();
        let events_streams = Gauge::default();
        let events_sent: Family<EventLabels, Counter> = Family::default();
        let events_delivery_lag = latency_histogram();
        registry.register(
            "snug_http_requests",
            "HTTP requests answered by the gateway",
            http_requests.clone(),
        );
        registry.register(
            "snug_http_request_duration_seconds",
            "HTTP request duration until the last response byte",
            http_duration.clone(),
        );
        registry.register(
            "snug_http_request_bytes",
            "HTTP request body bytes received",
            http_request_bytes.clone(),
        );
        registry.register(
            "snug_http_response_bytes",
            "HTTP response body bytes sent",
            http_response_bytes.clone(),
        );
        registry.register(
            "snug_http_zero_copy_bytes",
            "HTTP response bytes sent from sealed memory with sendfile, without a copy",
            http_zero_copy_bytes.clone(),
        );
        registry.register(
            "snug_grpc_server_requests",
            "gRPC calls served",
            grpc_requests.clone(),
        );
        registry.register(
            "snug_grpc_server_request_duration_seconds",
            "gRPC call duration until the final status",
            grpc_duration.clone(),
        );
        registry.register(
            "snug_grpc_server_request_bytes",
            "gRPC request bytes received, message framing included",
            grpc_request_bytes.clone(),
        );
        registry.register(
            "snug_grpc_server_response_bytes",
            "gRPC response bytes sent, message framing included",
            grpc_response_bytes.clone(),
        );
        registry.register(
            "snug_sync_cas_conflicts",
            "Sync writes refused because the client's base revision is not the current one",
            cas_conflicts.clone(),
        );
        registry.register(
            "snug_container_unlock_attempts",
            "Attempts to open a protected container with a secret, by outcome",
            unlock_attempts.clone(),
        );
        registry.register(
            "snug_sync_delta_bases",
            "Delta pushes assembled, by where their base came from: kept (the image this replica wrote last) or read (from the store)",
            sync_delta_bases.clone(),
        );
        registry.register(
            "snug_sync_base_cache_bytes",
            "Bytes of the images the sync service keeps as the bases of the next delta pushes",
            sync_base_cache_bytes.clone(),
        );
        registry.register(
            "snug_events_streams",
            "Event streams (GET /userdb/events) open at the gateway",
            events_streams.clone(),
        );
        registry.register(
            "snug_events_sent",
            "Events sent on event streams, by event",
            events_sent.clone(),
        );
        registry.register(
            "snug_events_delivery_lag_seconds",
            "Seconds from a revision's acceptance by the store to its event leaving the gateway",
            events_delivery_lag.clone(),
        );
        // Every outcome exists from the start, so a rate over a fresh process is 0, not absent.
        for reason in ["REVISION_MISMATCH", "STALE_REVISION"] {
            let _ = cas_conflicts.get_or_create(&ConflictLabels { reason });
        }
        for outcome in ["ok", "locked", "corrupt"] {
            let _ = unlock_attempts.get_or_create(&UnlockLabels { outcome });
        }
        for source in ["kept", "read"] {
            let _ = sync_delta_bases.get_or_create(&BaseLabels { source });
        }
        for event in ["revision", "no-image", "gap", "heartbeat"] {
            let _ = events_sent.get_or_create(&EventLabels { event });
        }
        Self {
            registry,
            http_requests,
            http_duration,
            http_request_bytes,
            http_response_bytes,
            http_zero_copy_bytes,
            grpc_requests,
            grpc_duration,
            grpc_request_bytes,
            grpc_response_bytes,
            cas_conflicts,
            unlock_attempts,
            sync_delta_bases,
            sync_base_cache_bytes,
            events_streams,
            events_sent,
            events_delivery_lag,
        }
    }

    /// Records one answered HTTP request.
    pub fn record_http(&self, labels: &HttpLabels, elapsed: Duration) {
        self.http_requests.get_or_create(labels).inc();
        self.http_duration
            .get_or_create(labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Records one served gRPC call.
    pub fn record_grpc(&self, labels: &GrpcLabels, elapsed: Duration) {
        self.grpc_requests.get_or_create(labels).inc();
        self.grpc_duration
            .get_or_create(labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Every metric in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry);
        text
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn global() -> &'static Metrics {
    &METRICS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_names_each_series_with_its_labels() {
        let metrics = Metrics::new();
        let labels = HttpLabels {
            method: "PUT",
            route: "/userdb",
            status: 412,
            reason: "REVISION_MISMATCH",
        };
        metrics.record_http(&labels, Duration::from_millis(3));
        metrics.record_http(&labels, Duration::from_millis(7));
        metrics
            .http_request_bytes
            .get_or_create(&RouteLabels { route: "/userdb" })
            .inc_by(4096);
        let text = metrics.encode();
        assert!(
            text.contains(r#"snug_http_requests_total{method="PUT",route="/userdb",status="412",reason="REVISION_MISMATCH"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"snug_http_request_duration_seconds_bucket{method="PUT",route="/userdb",status="412",reason="REVISION_MISMATCH",le="0.005"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"snug_http_request_duration_seconds_count{method="PUT",route="/userdb",status="412",reason="REVISION_MISMATCH"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"snug_http_request_bytes_total{route="/userdb"} 4096"#),
            "{text}"
        );
        assert!(
            text.contains("# TYPE snug_http_request_duration_seconds histogram"),
            "{text}"
        );
        // A family nothing was recorded in yet is left out whole.
        assert!(!text.contains("snug_grpc_server_requests_total"), "{text}");
    }

    /// The metrics table in `observe.rs`'s module docs names exactly the families registered here
    /// (counters with the `_total` the text format adds).
    #[test]
    fn the_documented_metrics_are_the_registered_ones() {
        let literals = |text: &str, start: &str| -> std::collections::BTreeSet<String> {
            text.match_indices(start)
                .map(|(at, _)| {
                    text[at + start.len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                        .collect::<String>()
                })
                .map(|name| name.trim_end_matches("_total").to_owned())
                .collect()
        };
        let source = include_str!("metrics.rs");
        let registrations = &source[..source.find("#[cfg(test)]").unwrap_or(source.len())];
        let registered = literals(registrations, "\"snug_");
        let documented: std::collections::BTreeSet<String> = include_str!("observe.rs")
            .lines()
            .filter_map(|line| line.strip_prefix("//! | "))
            .flat_map(|row| {
                let first = row.split(" | ").next().unwrap_or("");
                first
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .filter_map(|name| name.strip_prefix("snug_"))
                    .map(|name| name.trim_end_matches("_total").to_owned())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(registered.len() >= 10, "{registered:?}");
        assert_eq!(documented, registered);
    }

    #[test]
    fn conflict_and_unlock_series_exist_before_any_event() {
        let text = Metrics::new().encode();
        for series in [
            r#"snug_sync_cas_conflicts_total{reason="REVISION_MISMATCH"} 0"#,
            r#"snug_sync_cas_conflicts_total{reason="STALE_REVISION"} 0"#,
            r#"snug_container_unlock_attempts_total{outcome="ok"} 0"#,
            r#"snug_container_unlock_attempts_total{outcome="locked"} 0"#,
            r#"snug_container_unlock_attempts_total{outcome="corrupt"} 0"#,
        ] {
            assert!(text.contains(series), "{series} missing from\n{text}");
        }
    }
}
