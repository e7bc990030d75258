//! The HTTP side of `snug-hub`: the gateway alone, the gateway beside the gRPC services in one
//! process, and `snug-hub users` (the gateway's users and bearer tokens).
//!
//! In one process the gateway still reaches the services over gRPC, on the loopback address of
//! the process's own gRPC listener: the same code path as a split deployment, so what the tests
//! exercise in one process is what runs in many.

use std::{net::SocketAddr, path::Path, process::ExitCode};

use anyhow::Context as _;
use clap::Subcommand;
use snug_files::sealed::Sealer;
use snug_gateway::{config::GatewayConfig, users::UserStore};
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
    let state = snug_gateway::build(
        gateway,
        gateway_dir.to_owned(),
        snug_gateway::Addresses::in_process(own),
        sealer,
    )
    .context("the gateway refused its configuration")?;
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
    gateway: &GatewayConfig,
    gateway_dir: &Path,
) -> anyhow::Result<()> {
    let state = snug_gateway::build(
        gateway,
        gateway_dir.to_owned(),
        snug_gateway::Addresses::default(),
        Sealer::disabled(),
    )
    .context("the gateway refused its configuration")?;
    let listener = tokio::net::TcpListener::bind(gateway.http_listen)
        .await
        .with_context(|| format!("cannot listen on {}", gateway.http_listen))?;
    snug_gateway::serve(state, listener, shutdown_signal())
        .await
        .context("the HTTP gateway failed")
}

/// `snug-hub users …`: who may use the hub's HTTP surface.
#[derive(Debug, Subcommand)]
pub(crate) enum UsersCommand {
    /// Adds a user and prints their first bearer token. The token is shown only this once.
    Add {
        /// The user's name (1-64 printable characters).
        name: String,
    },
    /// Issues another bearer token for an existing user (a new device, or a lost token).
    Token {
        /// The user's name.
        name: String,
    },
    /// Lists users (never tokens: only their hashes are stored).
    List,
    /// Removes a user and all their tokens; their image stays in the sync store, unreachable.
    Remove {
        /// The user's name.
        name: String,
    },
}

/// Runs a `users` command against the gateway's users file in `dir`.
pub(crate) fn users(command: UsersCommand, dir: &Path) -> anyhow::Result<ExitCode> {
    let store = UserStore::open(dir)
        .with_context(|| format!("cannot open the users file in {}", dir.display()))?;
    match command {
        UsersCommand::Add { name } => {
            let (user, token) = store.add(&name)?;
            eprintln!(
                "added user {:?} (id {}); their bearer token follows and is not stored — hand it over now",
                user.name, user.id
            );
            println!("{}", token.token);
        }
        UsersCommand::Token { name } => {
            let token = store.issue_token(&name)?;
            eprintln!(
                "a new bearer token for {name:?} follows and is not stored — hand it over now"
            );
            println!("{}", token.token);
        }
        UsersCommand::List => {
            for user in store.list()? {
                println!("{}\t{}\t{} token(s)", user.name, user.id, user.tokens);
            }
        }
        UsersCommand::Remove { name } => {
            let user = store.remove(&name)?;
            eprintln!(
                "removed user {:?} (id {}) and their tokens",
                user.name, user.id
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
