//! The composed hub in-process: health, reflection, the container and the schema services on one
//! port, composed the way `snug-hub serve` composes them.

use snug_rpc::{
    runtime::Runtime,
    server::{ServerConfig, serve},
};
use tokio::net::TcpListener;
use tonic::transport::Channel;

async fn start() -> Channel {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let runtime = Runtime::default();
    let mut services = snug_container_service::services(&Default::default(), &runtime);
    services.routes = services.routes.add_service(snug_schema_service::service(
        snug_schema_service::SchemaServer::new(&Default::default(), &runtime),
    ));
    services.names.push(snug_schema_service::SERVICE_NAME);
    tokio::spawn(async move {
        serve(
            &ServerConfig::for_tests(),
            listener,
            services,
            std::future::pending(),
        )
        .await
    });
    Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect")
}

#[tokio::test]
async fn health_reports_serving_for_the_server_and_each_service() {
    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };
    let mut health = HealthClient::new(start().await);
    for service in [
        "",
        snug_container_service::SERVICE_NAME,
        snug_schema_service::SERVICE_NAME,
    ] {
        let status = health
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .expect("check")
            .into_inner()
            .status();
        assert_eq!(status, ServingStatus::Serving, "{service:?}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "snug.nope.v1.Nope".to_owned(),
        })
        .await
        .expect_err("unknown service");
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn reflection_lists_the_services() {
    use tokio_stream::StreamExt as _;
    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let mut client = ServerReflectionClient::new(start().await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .expect("reflection")
        .into_inner();
    let response = responses.next().await.expect("one response").expect("ok");
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection response");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&snug_container_service::SERVICE_NAME.to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&snug_schema_service::SERVICE_NAME.to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"grpc.health.v1.Health".to_owned()),
        "{names:?}"
    );
}

#[tokio::test]
async fn both_services_answer_on_the_shared_port() {
    use snug_proto::schema::v1::{
        self as pb, inspect_user_database_request::Message,
        schema_service_client::SchemaServiceClient,
    };
    let channel = start().await;
    // A container call and a schema call on one connection: the routes really are composed.
    let format = snug_proto::container::v1::container_service_client::ContainerServiceClient::new(
        channel.clone(),
    )
    .detect_format(snug_proto::container::v1::DetectFormatRequest {
        leading_bytes: b"SQLite format 3\0".as_slice().into(),
    })
    .await
    .expect("container service")
    .into_inner();
    assert_eq!(format.format(), snug_proto::container::v1::Format::Sqlite);
    let header = pb::InspectUserDatabaseRequest {
        message: Some(Message::Header(pb::InspectUserDatabaseHeader {
            expected_length: None,
        })),
    };
    let status = SchemaServiceClient::new(channel)
        .inspect_user_database(tokio_stream::iter([header]))
        .await
        .expect_err("an empty file is not SQLite");
    assert_eq!(
        snug_rpc::status::reason_of(&status).as_deref(),
        Some("NOT_SQLITE")
    );
}

/// Starts the container service with `config` and returns a channel plus the shutdown trigger and
/// the server task.
async fn start_with(
    config: ServerConfig,
) -> (
    Channel,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let services = snug_container_service::services(&Default::default(), &Runtime::default());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        serve(&config, listener, services, async move {
            let _ = rx.await;
        })
        .await
    });
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    (channel, tx, server)
}

fn reference_container() -> bytes::Bytes {
    let path = snug_e2e::vectors_dir().join("containers/c01-reference-random-600k.snug");
    bytes::Bytes::from(std::fs::read(path).expect("reference vector"))
}

/// One 600,000-iteration unlock: slow enough (~80 ms) to observe timeouts and limits.
async fn slow_unlock(channel: Channel, container: bytes::Bytes) -> Result<(), tonic::Status> {
    use snug_proto::container::v1::{self as pb, container_service_client::ContainerServiceClient};
    let header = pb::UnlockRequest {
        message: Some(pb::unlock_request::Message::Header(pb::UnlockHeader {
            secrets: Some(pb::Secrets {
                passphrase: Some("correct horse battery staple".to_owned()),
                recovery_key: None,
            }),
            expected_length: None,
            iteration_policy: None,
        })),
    };
    let request = snug_rpc::chunks::upload(header, container);
    let mut client = ContainerServiceClient::new(channel);
    let mut stream = client.unlock(request).await?.into_inner();
    while stream.message().await?.is_some() {}
    Ok(())
}

#[tokio::test]
async fn sigterm_style_shutdown_flips_health_and_stops_the_server() {
    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };
    let mut config = ServerConfig::for_tests();
    config.shutdown_grace = std::time::Duration::from_secs(2);
    let (channel, shutdown, server) = start_with(config).await;
    let mut health = HealthClient::new(channel.clone());
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("watch")
        .into_inner();
    let first = watch.message().await.expect("watch ok").expect("status");
    assert_eq!(first.status(), ServingStatus::Serving);
    shutdown.send(()).expect("trigger shutdown");
    // The first thing a draining server does is tell watchers it no longer serves.
    let next = watch.message().await.expect("watch ok").expect("status");
    assert_eq!(next.status(), ServingStatus::NotServing);
    drop(watch);
    drop(health);
    drop(channel);
    let result = tokio::time::timeout(std::time::Duration::from_secs(10), server)
        .await
        .expect("the server stops within its grace period")
        .expect("join");
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test]
async fn the_request_timeout_bounds_a_slow_call() {
    let mut config = ServerConfig::for_tests();
    config.request_timeout = std::time::Duration::from_millis(5);
    let (channel, _shutdown, _server) = start_with(config).await;
    let status = slow_unlock(channel, reference_container())
        .await
        .expect_err("a 600k-iteration unlock cannot finish in 5 ms");
    // Typed (issue 23, point 6): tonic's own timeout answered CANCELLED "Timeout expired".
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert_eq!(
        snug_rpc::status::reason_of(&status).as_deref(),
        Some("DEADLINE_EXCEEDED")
    );
}

#[tokio::test]
async fn requests_beyond_the_concurrency_limit_are_shed_not_queued() {
    let mut config = ServerConfig::for_tests();
    config.concurrency_limit = 1;
    let (channel, _shutdown, _server) = start_with(config).await;
    let container = reference_container();
    let results =
        futures::future::join_all((0..6).map(|_| slow_unlock(channel.clone(), container.clone())))
            .await;
    let shed = results
        .iter()
        .filter(|r| {
            matches!(r, Err(s) if s.code() == tonic::Code::Unavailable
                && snug_rpc::status::reason_of(s).as_deref() == Some("OVERLOADED"))
        })
        .count();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert!(ok >= 1, "{results:?}");
    assert!(shed >= 1, "a burst over the limit is shed: {results:?}");
    assert_eq!(ok + shed, results.len(), "{results:?}");
}

#[tokio::test]
async fn health_checks_are_answered_while_the_limit_is_saturated() {
    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };
    let mut config = ServerConfig::for_tests();
    config.concurrency_limit = 1;
    let (channel, _shutdown, _server) = start_with(config).await;
    let container = reference_container();
    // Keep the single slot busy with back-to-back 600k-iteration unlocks while probing health.
    let busy = tokio::spawn({
        let channel = channel.clone();
        async move {
            for _ in 0..4 {
                let _ = slow_unlock(channel.clone(), container.clone()).await;
            }
        }
    });
    let mut health = HealthClient::new(channel.clone());
    for _ in 0..20 {
        let status = health
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .expect("health is never shed")
            .into_inner()
            .status();
        assert_eq!(status, ServingStatus::Serving);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    busy.await.expect("busy task");
}

/// Every service the hub runs, on one loopback port, as `snug-hub serve` composes them.
async fn start_every_service() -> (std::net::SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sync_config = snug_sync_service::SyncConfig::default();
    let runtime = Runtime::default();
    let sync_runtime = runtime.in_dir(dir.path().join("sync"));
    let store = snug_sync_service::open_store(&sync_config, &sync_runtime)
        .await
        .expect("sync store");
    let sync = snug_sync_service::SyncServer::new(store, &sync_config, &sync_runtime);
    let services = snug_container_service::services(&Default::default(), &runtime)
        .with(
            snug_schema_service::service(snug_schema_service::SchemaServer::new(
                &Default::default(),
                &runtime,
            )),
            &[],
        )
        .with(
            snug_materialize_service::service(snug_materialize_service::MaterializeServer::new(
                &Default::default(),
                &runtime,
            )),
            &[],
        )
        .with(snug_sync_service::service(sync), &[]);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        serve(
            &ServerConfig::for_tests(),
            listener,
            services,
            std::future::pending(),
        )
        .await
    });
    (addr, dir)
}

/// Every `snug.*.v1` method: its path and whether its request is a stream.
fn every_method() -> Vec<(String, bool)> {
    use prost::Message as _;
    let set = prost_types::FileDescriptorSet::decode(snug_proto::FILE_DESCRIPTOR_SET)
        .expect("descriptor set");
    let mut methods = Vec::new();
    for file in set.file {
        let package = file.package.unwrap_or_default();
        if !package.starts_with("snug.") {
            continue;
        }
        for service in file.service {
            let name = service.name.unwrap_or_default();
            for method in service.method {
                methods.push((
                    format!("/{package}.{name}/{}", method.name.unwrap_or_default()),
                    method.client_streaming.unwrap_or(false),
                ));
            }
        }
    }
    methods
}

/// Sends messages' bytes as they are, so a test can send what no generated client would.
#[derive(Clone, Default)]
struct RawCodec;

struct RawEncoder;

struct RawDecoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = bytes::Bytes;
    type Decode = bytes::Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl tonic::codec::Encoder for RawEncoder {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: bytes::Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawDecoder {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<bytes::Bytes>, tonic::Status> {
        let len = bytes::Buf::remaining(src);
        Ok(Some(bytes::Buf::copy_to_bytes(src, len)))
    }
}

/// The admin port as the gateway roles serve it, over a fresh users directory and no sync
/// service (every refusal here comes before either is asked), and its admin token.
async fn start_admin_port() -> (std::net::SocketAddr, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let directory = snug_users::Directory::open(&snug_users::DirectoryConfig::Sqlite {
        dir: dir.path().to_owned(),
    })
    .await
    .expect("directory");
    let admin = snug_admin_service::Admin::new(directory, None, std::time::Duration::from_secs(5));
    let (token, record) = snug_admin_service::AdminToken::generate().expect("token");
    let local = snug_rpc::server::local(
        &ServerConfig::for_tests(),
        snug_admin_service::services(admin, Some(record)),
    )
    .await;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, snug_rpc::admin::router(Some(local))).await });
    (addr, token, dir)
}

/// Issue 23, point 6, on every method of every service (the admin API's on the admin port, with
/// its token): what no well-behaved client sends is
/// refused with a documented code and an `ErrorInfo` reason, never tonic's bare INTERNAL,
/// OUT_OF_RANGE or UNKNOWN — a body without a message (a unary request's is INVALID_ARGUMENT
/// with `field` = `(message)`), bytes that do not decode (the same), and a message over every
/// service's decode limit (RESOURCE_EXHAUSTED, TOO_LARGE).
#[tokio::test]
async fn every_method_refuses_what_no_client_sends_with_a_typed_status() {
    let (addr, _dir) = start_every_service().await;
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let (admin_addr, admin_token, _admin_dir) = start_admin_port().await;
    let admin_channel = Channel::from_shared(format!("http://{admin_addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    // Over the largest decode limit of any service (8 MiB plus framing, schema and materialize).
    let oversize = bytes::Bytes::from(vec![0u8; 8 * 1024 * 1024 + 128 * 1024]);
    // Field 1 announces five bytes and carries one.
    let garbage = bytes::Bytes::from_static(&[0x0a, 0x05, 0x01]);
    let methods = every_method();
    assert!(methods.len() >= 30, "the methods were found: {methods:?}");
    let mut wrong = Vec::new();
    for (path, streaming) in methods {
        for (case, messages) in [
            ("empty", Vec::new()),
            ("garbage", vec![garbage.clone()]),
            ("oversize", vec![oversize.clone()]),
        ] {
            let admin = path.starts_with("/snug.admin.");
            let mut grpc =
                tonic::client::Grpc::new(if admin { &admin_channel } else { &channel }.clone());
            grpc.ready().await.expect("ready");
            let route =
                tonic::codegen::http::uri::PathAndQuery::try_from(path.as_str()).expect("path");
            // A stream of messages fits every method: a unary one takes the first.
            let mut request = tonic::Request::new(futures::stream::iter(messages));
            if admin {
                request.metadata_mut().insert(
                    "authorization",
                    format!("Bearer {admin_token}").parse().expect("metadata"),
                );
            }
            let answer = grpc.streaming(request, route, RawCodec).await;
            let status = match answer {
                Err(status) => status,
                Ok(response) => {
                    let mut stream = response.into_inner();
                    match stream.message().await {
                        Err(status) => status,
                        Ok(_) => {
                            wrong.push(format!("{path} {case}: answered"));
                            continue;
                        }
                    }
                }
            };
            let reason = snug_rpc::status::reason_of(&status);
            let field = snug_rpc::status::metadata_of(&status, "field");
            let expected = match (case, streaming) {
                ("oversize", _) => {
                    status.code() == tonic::Code::ResourceExhausted
                        && reason.as_deref() == Some("TOO_LARGE")
                }
                ("garbage", _) | ("empty", false) => {
                    status.code() == tonic::Code::InvalidArgument
                        && reason.as_deref() == Some("INVALID_ARGUMENT")
                        && (case == "empty" || field.as_deref() == Some("(message)"))
                }
                // A stream without its header: refused by the service itself, typed.
                _ => {
                    reason.is_some()
                        && !matches!(status.code(), tonic::Code::Internal | tonic::Code::Unknown)
                }
            };
            if !expected {
                wrong.push(format!(
                    "{path} {case}: {:?} {reason:?} field {field:?}: {}",
                    status.code(),
                    status.message()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Issue 23, point 6: a client whose connection drops in the middle of an upload is counted as
/// CANCELLED (reason BODY_ABORTED), not UNKNOWN. The client here is bare HTTP/2 over a socket
/// the test closes, with no RST_STREAM first.
#[tokio::test]
async fn a_client_that_drops_its_connection_mid_upload_is_counted_as_cancelled() {
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    let (addr, _dir) = start_every_service().await;
    let method = "snug.materialize.v1.MaterializeService/ApplyDdl";
    let count = |code: &str, reason: &str| {
        let prefix = format!(
            r#"snug_grpc_server_requests_total{{method="{method}",code="{code}",reason="{reason}"}}"#
        );
        snug_rpc::metrics::global()
            .encode()
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = (count("CANCELLED", "BODY_ABORTED"), count("UNKNOWN", ""));

    let socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(socket),
    )
    .await
    .expect("handshake");
    let connection = tokio::spawn(connection);
    let (frames, body) =
        tokio::sync::mpsc::channel::<Result<Frame<bytes::Bytes>, std::convert::Infallible>>(4);
    let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(body));
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .expect("request");
    let call = tokio::spawn(sender.send_request(request));
    // The header (app id and a statement), then the first bytes of a user database that
    // never ends.
    use prost::Message as _;
    let header = snug_proto::materialize::v1::ApplyDdlRequest {
        message: Some(
            snug_proto::materialize::v1::apply_ddl_request::Message::Header(
                snug_proto::materialize::v1::ApplyDdlHeader {
                    app_id: "starter--chess".to_owned(),
                    statements: vec!["CREATE TABLE t (x)".to_owned()],
                    expected_length: Some(1 << 20),
                },
            ),
        ),
    };
    let chunk = snug_proto::materialize::v1::ApplyDdlRequest {
        message: Some(
            snug_proto::materialize::v1::apply_ddl_request::Message::Chunk(
                bytes::Bytes::from_static(b"SQLite format 3\0"),
            ),
        ),
    };
    for message in [header.encode_to_vec(), chunk.encode_to_vec()] {
        let mut frame = vec![0u8];
        frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
        frame.extend_from_slice(&message);
        frames
            .send(Ok(Frame::data(bytes::Bytes::from(frame))))
            .await
            .expect("sent");
    }
    // Let the server start reading, then drop the connection under it.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    connection.abort();
    call.abort();
    drop(frames);

    let counted = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            let now = (count("CANCELLED", "BODY_ABORTED"), count("UNKNOWN", ""));
            if now.0 > before.0 {
                return now;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("counted as CANCELLED, reason BODY_ABORTED");
    assert_eq!(counted.1, before.1, "not counted as UNKNOWN");
}
