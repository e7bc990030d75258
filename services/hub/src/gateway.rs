//! The HTTP side of `snug-hub`: the gateway alone, and the gateway beside the gRPC services in
//! one process.
//!
//! In one process the gateway calls the services in-process (`snug_rpc::server::local`): the
//! same generated clients and servers as a split deployment, without a loopback socket between
//! them, so what the tests exercise in one process is what runs in many.

use std::{net::SocketAddr, path::Path};

use anyhow::Context as _;
use snug_admin_service::{Admin, AdminToken, SyncClient};
use snug_files::sealed::Sealer;
use snug_gateway::config::GatewayConfig;
use snug_proto::sync::v1::sync_service_client::SyncServiceClient;
use snug_rpc::server::{ServerConfig, Services, shutdown_signal};

/// The address a client on this machine uses to reach `bound` (an unspecified listen address
/// such as 0.0.0.0 is reached through loopback).
pub(crate) fn loopback_url(bound: SocketAddr) -> String {
    let ip = if bound.ip().is_unspecified() {
        match bound {
            SocketAddr::V4(_) => std::net::IpAddr::from([127, 0, 0, 1]),
            SocketAddr::V6(_) => std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        }
    } else {
        bound.ip()
    };
    format!("http://{}", SocketAddr::new(ip, bound.port()))
}

/// Runs the gRPC services and the gateway (its files in `gateway_dir`) in one process until
/// SIGTERM; the gateway sends what the sync store among `services` sealed with `sealer`.
pub(crate) async fn serve_with_gateway(
    server: &ServerConfig,
    services: Services,
    gateway: &GatewayConfig,
    gateway_dir: &Path,
    sealer: Sealer,
) -> anyhow::Result<()> {
    let grpc_listener = tokio::net::TcpListener::bind(server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", server.listen))?;
    // The gateway calls the very services the gRPC port serves, in-process: the same generated
    // clients and servers, without a loopback socket and HTTP/2 framing between them.
    let own = snug_rpc::server::local(
        server,
        Services {
            routes: services.routes.clone(),
            names: services.names.clone(),
            classify: services.classify.clone(),
        },
    )
    .await;
    let sync = SyncServiceClient::new(snug_gateway::backend::local(own.clone()));
    let state = snug_gateway::build(
        gateway,
        gateway_dir.to_owned(),
        snug_gateway::Addresses::in_process(own),
        snug_gateway::Runtime {
            sealer,
            upload_pace: server.upload_pace(),
            // In-process calls cross no network: nothing to present.
            service_token: None,
        },
    )
    .await
    .context("the gateway refused its configuration")?;
    crate::start_admin(
        server.admin_listen,
        admin_routes(server, &state, Some(sync), gateway.rpc_deadline).await?,
    )
    .await?;
    let http_listener = tokio::net::TcpListener::bind(gateway.http_listen)
        .await
        .with_context(|| format!("cannot listen on {}", gateway.http_listen))?;
    let grpc = async {
        snug_rpc::server::serve(server, grpc_listener, services, shutdown_signal())
            .await
            .context("the gRPC server failed")
    };
    let http = async {
        snug_gateway::serve(state, http_listener, shutdown_signal())
            .await
            .context("the HTTP gateway failed")
    };
    tokio::try_join!(grpc, http)?;
    Ok(())
}

/// Runs the gateway alone (its files in `gateway_dir`), against services at the configured
/// addresses. No store shares its process, so its sealer is a disabled one.
pub(crate) async fn serve_gateway(
    server: &ServerConfig,
    gateway: &GatewayConfig,
    gateway_dir: &Path,
) -> anyhow::Result<()> {
    let state = snug_gateway::build(
        gateway,
        gateway_dir.to_owned(),
        snug_gateway::Addresses::default(),
        snug_gateway::Runtime {
            sealer: Sealer::disabled(),
            upload_pace: server.upload_pace(),
            service_token: server.service_token.clone(),
        },
    )
    .await
    .context("the gateway refused its configuration")?;
    let sync = match &gateway.sync_addr {
        Some(addr) => Some(SyncServiceClient::new(
            snug_gateway::backend::channel(
                addr,
                gateway.rpc_connect_timeout,
                server.service_token.as_ref(),
            )
            .context("SNUG_SYNC_ADDR")?,
        )),
        None => None,
    };
    crate::start_admin(
        server.admin_listen,
        admin_routes(server, &state, sync, gateway.rpc_deadline).await?,
    )
    .await?;
    let listener = tokio::net::TcpListener::bind(gateway.http_listen)
        .await
        .with_context(|| format!("cannot listen on {}", gateway.http_listen))?;
    snug_gateway::serve(state, listener, shutdown_signal())
        .await
        .context("the HTTP gateway failed")
}

/// The admin API (`snug.admin.v1`) over the gateway's users directory and the sync service `sync`
/// reaches, for the admin port; none with auth off (no directory: everyone is the local user).
async fn admin_routes(
    server: &ServerConfig,
    state: &snug_gateway::AppState,
    sync: Option<SyncClient>,
    deadline: std::time::Duration,
) -> anyhow::Result<Option<snug_rpc::server::LocalChannel>> {
    let Some(directory) = state.auth.directory() else {
        return Ok(None);
    };
    let token = AdminToken::from_process_env()?;
    if token.is_none() {
        tracing::warn!(
            "the admin API refuses every call: SNUG_ADMIN_TOKEN_SHA256 is not set (make one with `snug-hub admin-token`)"
        );
    }
    let admin = Admin::new(directory.clone(), sync, deadline);
    let services = snug_admin_service::services(admin, token);
    Ok(Some(snug_rpc::server::local(server, services).await))
}
