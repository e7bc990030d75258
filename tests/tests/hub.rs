//! The composed hub in-process: health, reflection and the container service on one port.

use snug_rpc::server::{ServerConfig, serve};
use tokio::net::TcpListener;
use tonic::transport::Channel;

async fn start() -> Channel {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let services = snug_container_service::services(&Default::default());
    tokio::spawn(async move {
        serve(&ServerConfig::for_tests(), listener, services, std::future::pending()).await
    });
    Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect")
}

#[tokio::test]
async fn health_reports_serving_for_the_server_and_each_service() {
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};
    let mut health = HealthClient::new(start().await);
    for service in ["", snug_container_service::SERVICE_NAME] {
        let status = health
            .check(HealthCheckRequest { service: service.to_owned() })
            .await
            .expect("check")
            .into_inner()
            .status();
        assert_eq!(status, ServingStatus::Serving, "{service:?}");
    }
    let unknown = health
        .check(HealthCheckRequest { service: "snug.nope.v1.Nope".to_owned() })
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
    assert!(names.contains(&snug_container_service::SERVICE_NAME.to_owned()), "{names:?}");
    assert!(names.contains(&"grpc.health.v1.Health".to_owned()), "{names:?}");
}
