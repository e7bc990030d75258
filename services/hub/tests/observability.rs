//! Observability of the real `snug-hub` binary, run as separate processes the way a split
//! deployment runs it: one `PUT /userdb` is one trace across the gateway and sync
//! processes (exported over OTLP/gRPC to a collector in this test), the admin ports count it by
//! route template, method, gRPC code and reason, JSON log lines carry the trace ids, and no secret
//! ever reaches a log line, a span or a metric.

use std::{
    net::SocketAddr,
    path::Path,
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use base64::Engine as _;
use bytes::Bytes;
use opentelemetry_proto::tonic::{
    collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
        trace_service_server::{TraceService, TraceServiceServer},
    },
    common::v1::any_value,
    trace::v1::{Span, span::SpanKind},
};
use prost::Message as _;
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use snug_e2e::{Answer, Http, Payload, userdb_vector};
use snug_proto::container::v1::{self as pb, container_service_client::ContainerServiceClient};
use snug_rpc::chunks::{self, Chunked as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tonic::transport::Channel;

mod support;

use support::{BIN, Process};

/// How long a process may take to start, answer or stop.
const OCTET: (&str, &str) = ("content-type", "application/octet-stream");
const GRPC_LISTENING: &str = "gRPC server listening";
const ADMIN_LISTENING: &str = "admin port listening (GET /metrics)";
const HTTP_LISTENING: &str = "HTTP gateway listening";

/// An OTLP/gRPC trace receiver on loopback that keeps every export it is sent.
#[derive(Clone, Default)]
struct Collector {
    exports: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.exports
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl Collector {
    /// Starts a collector; returns it and its endpoint URL.
    async fn start() -> (Collector, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let collector = Collector::default();
        let server = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
        tokio::spawn(server);
        (collector, format!("http://{addr}"))
    }

    fn exports(&self) -> Vec<ExportTraceServiceRequest> {
        self.exports
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every span received, with the `service.name` of the process that sent it.
    fn spans(&self) -> Vec<(String, Span)> {
        let mut spans = Vec::new();
        for export in self.exports() {
            for resource_spans in export.resource_spans {
                let service = resource_spans
                    .resource
                    .iter()
                    .flat_map(|r| r.attributes.iter())
                    .find(|kv| kv.key == "service.name")
                    .and_then(|kv| kv.value.as_ref())
                    .and_then(|v| match &v.value {
                        Some(any_value::Value::StringValue(s)) => Some(s.clone()),
                        _ => None,
                    })
                    .unwrap_or_default();
                for scope in resource_spans.scope_spans {
                    spans.extend(scope.spans.into_iter().map(|span| (service.clone(), span)));
                }
            }
        }
        spans
    }
}

/// One `snug-hub` process, its stderr (JSON log lines) collected as it runs.
/// The environment every process of a test gets.
fn base_env(collector: &str, data_dir: &Path, rust_log: &str) -> Vec<(&'static str, String)> {
    vec![
        ("SNUG_LOG_FORMAT", "json".to_owned()),
        ("RUST_LOG", rust_log.to_owned()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.to_owned()),
        ("SNUG_LISTEN", "127.0.0.1:0".to_owned()),
        ("SNUG_ADMIN_LISTEN", "127.0.0.1:0".to_owned()),
        ("SNUG_HTTP_LISTEN", "127.0.0.1:0".to_owned()),
        ("SNUG_SHUTDOWN_GRACE", "2s".to_owned()),
        ("SNUG_DATA_DIR", data_dir.display().to_string()),
    ]
}

/// A gRPC service process: started, with its gRPC and admin addresses.
async fn service(
    name: &'static str,
    role: &str,
    env: &[(&'static str, String)],
) -> (Process, String, String) {
    let mut process = Process::spawn(name, &["serve", role], env);
    let grpc = process.logged(GRPC_LISTENING, "addr").await;
    let admin = process.logged(ADMIN_LISTENING, "addr").await;
    (process, grpc, admin)
}

/// The gateway process in front of `sync`: it, its HTTP address and admin address.
async fn gateway(
    env: &[(&'static str, String)],
    sync: &str,
    extra: &[(&'static str, String)],
) -> (Process, SocketAddr, String) {
    let mut env = env.to_vec();
    env.push(("SNUG_SYNC_ADDR", format!("http://{sync}")));
    env.extend_from_slice(extra);
    let mut process = Process::spawn("gateway", &["serve", "gateway"], &env);
    let http = process
        .logged(HTTP_LISTENING, "addr")
        .await
        .parse()
        .expect("HTTP address");
    let admin = process.logged(ADMIN_LISTENING, "addr").await;
    (process, http, admin)
}

/// `GET /metrics` from an admin port.
async fn scrape(admin: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(admin)
        .await
        .expect("connect to the admin port");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    body.to_owned()
}

/// Scrapes until every `(series, value)` in `expected` is there: the gateway counts a request
/// when its response body is done with, which can be a moment after the client has read it.
async fn scrape_until(admin: &str, expected: &[(&str, f64)]) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = scrape(admin).await;
        let complete = expected
            .iter()
            .all(|(series, v)| value(&metrics, series) == Some(*v));
        if complete || Instant::now() > deadline {
            return metrics;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The value of one series, named with all its labels.
fn value(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

fn hex_id(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Whether `span` is `ancestor` or descends from it through `spans`.
fn descends(span: &Span, ancestor: &Span, spans: &[&Span]) -> bool {
    let mut current = span;
    for _ in 0..32 {
        if current.span_id == ancestor.span_id {
            return true;
        }
        match spans.iter().find(|s| s.span_id == current.parent_span_id) {
            Some(parent) => current = parent,
            None => return false,
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_put_is_one_trace_across_processes_and_is_counted_by_route_and_reason() {
    let (collector, endpoint) = Collector::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let env = base_env(
        &endpoint,
        dir.path(),
        "info,snug_rpc=debug,snug_gateway=debug",
    );
    let (mut sync, sync_addr, sync_admin) = service("sync", "sync", &env).await;
    let (mut gateway, http_addr, gateway_admin) = gateway(&env, &sync_addr, &[]).await;
    let http = Http::new(http_addr);
    let image = userdb_vector("fresh-v6.export.snug");
    // A device listening for revisions while the put lands (issue 40's metrics).
    let mut events = http.events(&[]).await;
    assert_eq!(events.status, 200);
    let within = std::time::Duration::from_secs(10);
    for expected in ["retry", "no-image"] {
        assert_eq!(events.next(within).await.expect(expected).event, expected);
    }

    // The client is traced itself: the gateway continues the client's trace.
    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{client_trace}-{client_span}-01");
    let put = http
        .send(
            "PUT",
            "/userdb",
            &[OCTET, ("if-none-match", "*"), ("traceparent", &traceparent)],
            Payload::Whole(image.clone()),
        )
        .await;
    assert_eq!(put.status, 204, "{:?}", String::from_utf8_lossy(&put.body));
    let heard = events.next(within).await.expect("the revision");
    assert_eq!(heard.id.as_deref(), Some(put.header("etag")));
    let stale = http
        .send(
            "PUT",
            "/userdb",
            &[OCTET, ("if-match", "\"r999-0123456789abcdef\"")],
            Payload::Whole(image.clone()),
        )
        .await;
    assert_eq!(
        (stale.status, stale.code().as_str()),
        (412, "REVISION_MISMATCH")
    );
    let restore = http
        .send(
            "POST",
            "/userdb/revisions/r4242-feedfacefeedface/restore",
            &[("if-match", "*")],
            Payload::Empty,
        )
        .await;
    assert!(
        restore.status >= 400,
        "a revision that never existed cannot be restored: {}",
        restore.status
    );
    let missing = http
        .send("GET", "/no/such/thing", &[], Payload::Empty)
        .await;
    assert_eq!(missing.status, 404);

    // Metrics: the gateway by route template and reason, the services by method, code, reason.
    let put_ok = r#"{method="PUT",route="/userdb",status="204",reason=""}"#;
    let unmatched = r#"snug_http_requests_total{method="GET",route="unmatched",status="404",reason="NOT_FOUND"}"#;
    let gateway_metrics = scrape_until(
        &gateway_admin,
        &[
            (&format!("snug_http_requests_total{put_ok}"), 1.0),
            (unmatched, 1.0),
        ],
    )
    .await;
    assert_eq!(
        value(
            &gateway_metrics,
            &format!("snug_http_requests_total{put_ok}")
        ),
        Some(1.0),
        "{gateway_metrics}"
    );
    assert_eq!(
        value(
            &gateway_metrics,
            &format!("snug_http_request_duration_seconds_count{put_ok}")
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &gateway_metrics,
            r#"snug_http_requests_total{method="PUT",route="/userdb",status="412",reason="REVISION_MISMATCH"}"#
        ),
        Some(1.0),
        "{gateway_metrics}"
    );
    let restore_series = format!(
        r#"snug_http_requests_total{{method="POST",route="/userdb/revisions/{{rev}}/restore",status="{}",reason="{}"}}"#,
        restore.status,
        restore.code()
    );
    assert_eq!(
        value(&gateway_metrics, &restore_series),
        Some(1.0),
        "{restore_series} in\n{gateway_metrics}"
    );
    assert_eq!(
        value(&gateway_metrics, unmatched),
        Some(1.0),
        "{gateway_metrics}"
    );
    assert!(
        !gateway_metrics.contains("r4242-feedfacefeedface"),
        "a raw path became a label"
    );
    for (series, expected) in [
        ("snug_events_streams", 1.0),
        (r#"snug_events_sent_total{event="no-image"}"#, 1.0),
        (r#"snug_events_sent_total{event="revision"}"#, 1.0),
        (r#"snug_events_sent_total{event="gap"}"#, 0.0),
        ("snug_events_delivery_lag_seconds_count", 1.0),
    ] {
        assert_eq!(
            value(&gateway_metrics, series),
            Some(expected),
            "{series} in\n{gateway_metrics}"
        );
    }
    assert!(
        !gateway_metrics.contains("/no/such/thing"),
        "a raw path became a label"
    );
    let received = value(
        &gateway_metrics,
        r#"snug_http_request_bytes_total{route="/userdb"}"#,
    )
    .unwrap_or(0.0);
    assert_eq!(received, 2.0 * image.len() as f64, "{gateway_metrics}");
    assert!(
        value(
            &gateway_metrics,
            r#"snug_http_response_bytes_total{route="/userdb"}"#
        )
        .unwrap_or(0.0)
            > 0.0
    );

    let sync_metrics = scrape(&sync_admin).await;
    let put_image = "snug.sync.v1.SyncService/PutImage";
    assert_eq!(
        value(
            &sync_metrics,
            &format!(
                r#"snug_grpc_server_requests_total{{method="{put_image}",code="OK",reason=""}}"#
            )
        ),
        Some(1.0),
        "{sync_metrics}"
    );
    assert_eq!(
        value(
            &sync_metrics,
            &format!(
                r#"snug_grpc_server_requests_total{{method="{put_image}",code="ABORTED",reason="REVISION_MISMATCH"}}"#
            )
        ),
        Some(1.0),
        "{sync_metrics}"
    );
    assert_eq!(
        value(
            &sync_metrics,
            r#"snug_sync_cas_conflicts_total{reason="REVISION_MISMATCH"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &sync_metrics,
            r#"snug_sync_cas_conflicts_total{reason="STALE_REVISION"}"#
        ),
        Some(0.0)
    );
    let stored = value(
        &sync_metrics,
        &format!(r#"snug_grpc_server_request_bytes_total{{method="{put_image}"}}"#),
    )
    .unwrap_or(0.0);
    assert!(stored >= image.len() as f64, "{sync_metrics}");
    // The image the accepted put wrote is kept as the base of the next delta push.
    let kept = value(&sync_metrics, "snug_sync_base_cache_bytes").unwrap_or(0.0);
    assert!(kept >= image.len() as f64, "{sync_metrics}");
    for source in ["kept", "read"] {
        let series = format!(r#"snug_sync_delta_bases_total{{source="{source}"}}"#);
        assert_eq!(value(&sync_metrics, &series), Some(0.0), "{sync_metrics}");
    }

    // Stopping flushes the spans still buffered: nothing below waits for a periodic export.
    drop(http);
    let _ = gateway.terminate().await;
    let sync_log = sync.terminate().await;

    let spans = collector.spans();
    let in_trace: Vec<&(String, Span)> = spans
        .iter()
        .filter(|(_, s)| hex_id(&s.trace_id) == client_trace)
        .collect();
    let services: std::collections::BTreeSet<&str> = in_trace
        .iter()
        .map(|(service, _)| service.as_str())
        .collect();
    assert_eq!(
        services.into_iter().collect::<Vec<_>>(),
        ["snug-hub-gateway", "snug-hub-sync"],
        "spans: {:#?}",
        spans
            .iter()
            .map(|(service, s)| (service, &s.name, hex_id(&s.trace_id)))
            .collect::<Vec<_>>()
    );
    let gateway_spans: Vec<&Span> = in_trace
        .iter()
        .filter(|(service, _)| service == "snug-hub-gateway")
        .map(|(_, s)| s)
        .collect();
    let put_span = gateway_spans
        .iter()
        .find(|s| s.name == "PUT /userdb" && s.kind == SpanKind::Server as i32)
        .expect("the gateway's PUT /userdb span");
    assert_eq!(
        hex_id(&put_span.parent_span_id),
        client_span,
        "the gateway continues the client's trace"
    );
    // The sync service's PutImage span is a child of the gateway's client span for it.
    let (service, method) = ("snug-hub-sync", put_image);
    let server = in_trace
        .iter()
        .find(|(s, span)| {
            s == service && span.name == method && span.kind == SpanKind::Server as i32
        })
        .map(|(_, span)| span)
        .unwrap_or_else(|| panic!("no {method} server span from {service}"));
    let client = gateway_spans
        .iter()
        .find(|s| s.span_id == server.parent_span_id)
        .unwrap_or_else(|| {
            panic!("{service}'s {method} span has no parent among the gateway's spans")
        });
    assert_eq!(client.name, method);
    assert_eq!(client.kind, SpanKind::Client as i32);
    assert!(
        descends(client, put_span, &gateway_spans),
        "{method}: the client span is inside PUT /userdb"
    );
    {
        // The service's log lines inside the call carry the same ids as its span.
        let line = sync_log
            .iter()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|line| {
                line["message"] == "gRPC call finished"
                    && line["trace_id"] == client_trace
                    && line["span_id"] == hex_id(&server.span_id)
            })
            .unwrap_or_else(|| {
                panic!(
                    "no JSON log line of the traced PutImage in:\n{}",
                    sync_log.join("\n")
                )
            });
        assert_eq!(line["code"], "OK");
        assert_eq!(line["level"], "DEBUG");
        assert!(line["timestamp"].is_string());
    }
    // The refused PUT sent no traceparent, so it is a trace of its own.
    let refused = spans
        .iter()
        .filter(|(service, s)| service == "snug-hub-sync" && s.name == put_image)
        .find(|(_, s)| hex_id(&s.trace_id) != client_trace)
        .expect("the refused PutImage span");
    assert!(
        refused.1.attributes.iter().any(|kv| kv.key == "error.type"),
        "{:?}",
        refused.1.attributes
    );
}

async fn protect(
    client: &mut ContainerServiceClient<Channel>,
    plaintext: Bytes,
    passphrase: &str,
) -> (String, Bytes) {
    let header = pb::ProtectRequest::header(pb::ProtectHeader {
        passphrase: passphrase.to_owned(),
        iterations: 10_000,
        custody_rule_acknowledged: true,
        expected_length: Some(plaintext.len() as u64),
    });
    let request = chunks::upload(header, plaintext);
    let mut stream = client.protect(request).await.expect("protect").into_inner();
    let (result, container) = chunks::download(&mut stream, u64::MAX, |r| r.container_length)
        .await
        .expect("protect's answer");
    (result.recovery_key, container)
}

fn secrets(passphrase: Option<&str>, recovery_key: Option<&str>) -> pb::Secrets {
    pb::Secrets {
        passphrase: passphrase.map(str::to_owned),
        recovery_key: recovery_key.map(str::to_owned),
    }
}

async fn unlock(
    client: &mut ContainerServiceClient<Channel>,
    container: Bytes,
    secrets: pb::Secrets,
) -> Result<Bytes, tonic::Status> {
    let header = pb::UnlockRequest::header(pb::UnlockHeader {
        secrets: Some(secrets),
        expected_length: None,
        iteration_policy: None,
    });
    let request = chunks::upload(header, container);
    let mut stream = client.unlock(request).await?.into_inner();
    let (_, plaintext) = chunks::download(&mut stream, u64::MAX, |r| r.plaintext_length).await?;
    Ok(plaintext)
}

async fn rotate(
    client: &mut ContainerServiceClient<Channel>,
    container: Bytes,
    secrets: pb::Secrets,
) -> String {
    let header = pb::RotateRecoveryKeyRequest::header(pb::RotateRecoveryKeyHeader {
        secrets: Some(secrets),
        expected_length: None,
        iteration_policy: None,
        new_recovery_key: None,
    });
    let request = chunks::upload(header, container);
    let mut stream = client
        .rotate_recovery_key(request)
        .await
        .expect("rotate")
        .into_inner();
    let (result, _) = chunks::download(&mut stream, u64::MAX, |r| r.container_length)
        .await
        .expect("rotate's answer");
    result.recovery_key
}

fn reason(status: &tonic::Status) -> String {
    snug_rpc::status::reason_of(status).unwrap_or_default()
}

/// The value of the cookie `name` an answer sets.
fn set_cookie(answer: &Answer, name: &str) -> String {
    answer
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|cookie| {
            cookie
                .split(';')
                .next()?
                .strip_prefix(name)?
                .strip_prefix('=')
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no {name} cookie set: {:?}", answer.headers))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_a_log_line_a_span_or_a_metric() {
    let (collector, endpoint) = Collector::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let env = base_env(&endpoint, dir.path(), "trace");
    // Everything every process writes, every span exported, every metric scraped.
    let mut captured: Vec<String> = Vec::new();

    let added = Command::new(BIN)
        .args(["users", "add", "alice"])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("snug-hub users add");
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    // stdout is the token itself, handed to the operator by design; stderr is the log.
    let token = String::from_utf8(added.stdout)
        .expect("utf-8")
        .trim()
        .to_owned();
    assert!(token.starts_with("snug_"), "{token}");
    captured.push(String::from_utf8_lossy(&added.stderr).into_owned());

    let session_secret = "a-session-key-of-at-least-32-characters-7c1e9b";
    let (mut container, container_addr, container_admin) =
        service("container", "container", &env).await;
    let (mut schema, _, schema_admin) = service("schema", "schema", &env).await;
    let (mut sync, sync_addr, sync_admin) = service("sync", "sync", &env).await;
    let (mut gateway, http_addr, gateway_admin) = gateway(
        &env,
        &sync_addr,
        &[
            ("SNUG_AUTH", "on".to_owned()),
            ("SNUG_CORS_ORIGINS", "https://app.example".to_owned()),
            ("SNUG_SESSION_SECRET", session_secret.to_owned()),
        ],
    )
    .await;

    // The container service: protect, unlock with each secret, a wrong one, a damaged file,
    // and a recovery-key rotation (whose answer is a new secret).
    let passphrase = "correct horse battery staple 7f3a";
    let wrong_passphrase = "incorrect pony 91c2 guess";
    let mut client = ContainerServiceClient::connect(format!("http://{container_addr}"))
        .await
        .expect("connect");
    let plaintext = Bytes::from(userdb_vector("fresh-v6.export.snug"));
    let (recovery_key, sealed) = protect(&mut client, plaintext.clone(), passphrase).await;
    assert_eq!(
        unlock(&mut client, sealed.clone(), secrets(Some(passphrase), None))
            .await
            .expect("unlock"),
        plaintext
    );
    assert_eq!(
        unlock(
            &mut client,
            sealed.clone(),
            secrets(None, Some(&recovery_key))
        )
        .await
        .expect("unlock"),
        plaintext
    );
    let locked = unlock(
        &mut client,
        sealed.clone(),
        secrets(Some(wrong_passphrase), None),
    )
    .await
    .expect_err("locked");
    assert_eq!(reason(&locked), "LOCKED");
    let mut damaged = sealed.to_vec();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x55;
    let corrupt = unlock(
        &mut client,
        Bytes::from(damaged),
        secrets(Some(passphrase), None),
    )
    .await
    .expect_err("corrupt");
    assert_eq!(reason(&corrupt), "CORRUPT");
    let rotated_key = rotate(&mut client, sealed.clone(), secrets(Some(passphrase), None)).await;
    assert_ne!(rotated_key, recovery_key);

    // The gateway: a bearer token traded for a session, cookie-authenticated reads and writes,
    // and a wrong token.
    let http = Http::new(http_addr);
    let bearer = format!("Bearer {token}");
    let session = http
        .send(
            "POST",
            "/auth/session",
            &[("authorization", &bearer)],
            Payload::Empty,
        )
        .await;
    assert!(
        session.status < 300,
        "{}: {:?}",
        session.status,
        String::from_utf8_lossy(&session.body)
    );
    let session_cookie = set_cookie(&session, "snug_session");
    let csrf = set_cookie(&session, "snug_csrf");
    let cookies = format!("snug_session={session_cookie}; snug_csrf={csrf}");
    let me = http
        .send("GET", "/auth/me", &[("cookie", &cookies)], Payload::Empty)
        .await;
    assert_eq!(me.status, 200);
    let put = http
        .send(
            "PUT",
            "/userdb",
            &[
                OCTET,
                ("if-none-match", "*"),
                ("cookie", &cookies),
                ("x-snug-csrf", &csrf),
            ],
            Payload::Whole(plaintext.to_vec()),
        )
        .await;
    assert_eq!(put.status, 204, "{:?}", String::from_utf8_lossy(&put.body));
    let got = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &bearer)],
            Payload::Empty,
        )
        .await;
    assert_eq!(got.status, 200);
    let wrong_token = "snug_AAAAwrongTokenThatIsNotIssuedAnywhereZZZZ0000000";
    let refused = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &format!("Bearer {wrong_token}"))],
            Payload::Empty,
        )
        .await;
    assert_eq!(refused.status, 401);

    let container_metrics = scrape(&container_admin).await;
    for (outcome, count) in [("ok", 3.0), ("locked", 1.0), ("corrupt", 1.0)] {
        let series = format!(r#"snug_container_unlock_attempts_total{{outcome="{outcome}"}}"#);
        assert_eq!(
            value(&container_metrics, &series),
            Some(count),
            "{series} in\n{container_metrics}"
        );
    }
    assert_eq!(
        value(
            &container_metrics,
            r#"snug_grpc_server_requests_total{method="snug.container.v1.ContainerService/Unlock",code="FAILED_PRECONDITION",reason="LOCKED"}"#
        ),
        Some(1.0)
    );
    captured.push(container_metrics);
    for admin in [&schema_admin, &sync_admin, &gateway_admin] {
        captured.push(scrape(admin).await);
    }

    drop(http);
    drop(client);
    for process in [&mut gateway, &mut container, &mut schema, &mut sync] {
        captured.extend(process.terminate().await);
    }
    let exports = collector.exports();
    let spans = collector.spans();
    for export in &exports {
        captured.push(format!("{export:?}"));
        captured.push(String::from_utf8_lossy(&export.encode_to_vec()).into_owned());
    }

    // What was captured is the real thing: traced requests from every process, at TRACE level.
    for (service, name) in [
        (
            "snug-hub-container",
            "snug.container.v1.ContainerService/Unlock",
        ),
        (
            "snug-hub-container",
            "snug.container.v1.ContainerService/Protect",
        ),
        ("snug-hub-gateway", "POST /auth/session"),
        ("snug-hub-gateway", "PUT /userdb"),
        ("snug-hub-sync", "snug.sync.v1.SyncService/PutImage"),
    ] {
        assert!(
            spans
                .iter()
                .any(|(s, span)| s == service && span.name == name),
            "no {name} span from {service}"
        );
    }
    let traced_lines = captured
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["level"] == "TRACE" || line["trace_id"].is_string())
        .count();
    assert!(
        traced_lines > 10,
        "the processes logged at TRACE level with trace ids"
    );

    let hash = Sha256::digest(token.as_bytes());
    let forbidden: Vec<(&str, String)> = vec![
        ("the passphrase", passphrase.to_owned()),
        ("a wrong passphrase", wrong_passphrase.to_owned()),
        ("the recovery key", recovery_key.clone()),
        (
            "the recovery key without separators",
            recovery_key.replace('-', ""),
        ),
        ("the rotated recovery key", rotated_key.clone()),
        (
            "the rotated recovery key without separators",
            rotated_key.replace('-', ""),
        ),
        ("the bearer token", token.clone()),
        (
            "the token's secret part",
            token.trim_start_matches("snug_").to_owned(),
        ),
        ("the token's hash (hex)", hex::encode(hash)),
        (
            "the token's hash (base64url)",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash),
        ),
        (
            "the token's hash (base64)",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(hash),
        ),
        ("the session cookie", session_cookie.clone()),
        ("the CSRF cookie", csrf.clone()),
        ("the session key", session_secret.to_owned()),
        ("a wrong token", wrong_token.to_owned()),
    ];
    let haystack = captured.join("\n").to_lowercase();
    // Controls: the search does see the processes' output and the exported span names.
    assert!(
        haystack.contains(r#"added user "alice""#),
        "the users command's stderr is captured"
    );
    assert!(haystack.contains("snug.container.v1.containerservice/unlock"));
    assert!(
        haystack.len() > 100_000,
        "suspiciously little output captured: {} bytes",
        haystack.len()
    );
    for (what, secret) in &forbidden {
        assert!(
            secret.len() >= 16,
            "{what} is too short to search for meaningfully"
        );
        assert!(
            !haystack.contains(&secret.to_lowercase()),
            "{what} appears in a log line, a span or a metric"
        );
    }
}
