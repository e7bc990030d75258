//! The composed hub in-process: health, reflection, the container and the schema services on one
//! port, composed the way `snug-hub serve` composes them.

use snug_rpc::server::{ServerConfig, serve};
use tokio::net::TcpListener;
use tonic::transport::Channel;

async fn start() -> Channel {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut services = snug_container_service::services(&Default::default());
    services.routes = services.routes.add_service(snug_schema_service::service(
        snug_schema_service::SchemaServer::new(&Default::default()),
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
    let services = snug_container_service::services(&Default::default());
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
