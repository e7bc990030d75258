//! The HTTP side of `snug-hub`: the gateway alone, the gateway beside the gRPC services in one
//! process, and `snug-hub users` (the users directory: users and their hub tokens).
//!
//! In one process the gateway still reaches the services over gRPC, on the loopback address of
//! the process's own gRPC listener: the same code path as a split deployment, so what the tests
//! exercise in one process is what runs in many.

use std::{net::SocketAddr, path::Path, process::ExitCode};

use anyhow::Context as _;
use clap::Subcommand;
use snug_files::sealed::Sealer;
use snug_gateway::config::{GatewayConfig, UsersConfig};
use snug_rpc::server::{ServerConfig, Services, shutdown_signal};
use snug_users::Directory;

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
    .await
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
    .await
    .context("the gateway refused its configuration")?;
    let listener = tokio::net::TcpListener::bind(gateway.http_listen)
        .await
        .with_context(|| format!("cannot listen on {}", gateway.http_listen))?;
    snug_gateway::serve(state, listener, shutdown_signal())
        .await
        .context("the HTTP gateway failed")
}

/// `snug-hub users …`: who may use the hub's HTTP surface. Each command is one `snug-users`
/// call; this layer only parses and prints.
#[derive(Debug, Subcommand)]
pub(crate) enum UsersCommand {
    /// Adds a user and prints their first bearer token. The token is shown only this once.
    Add {
        /// The user's name (1-64 characters, no control characters).
        name: String,
    },
    /// Issues another bearer token for an existing user (a new device, or a lost token).
    Token {
        /// The user's name.
        name: String,
    },
    /// Revokes one bearer token by its id (as `users list` shows it); the user's other tokens
    /// keep working. Every gateway refuses it from its next request on.
    RevokeToken {
        /// The token's id: 8 hex digits.
        id: String,
    },
    /// Lists users with their state, quota, token ids and identities (never token texts: only
    /// their hashes are stored).
    List,
    /// Disables a user: their tokens, sessions and identities are refused as unknown ones until
    /// `users enable`; nothing is deleted.
    Disable {
        /// The user's name.
        name: String,
    },
    /// Enables a disabled user again.
    Enable {
        /// The user's name.
        name: String,
    },
    /// Sets a user's image quota in bytes (overriding the sync service's default), or clears it.
    Quota {
        /// The user's name.
        name: String,
        /// The quota in bytes.
        #[arg(required_unless_present = "clear")]
        bytes: Option<u64>,
        /// Clears the user's quota: the default applies again.
        #[arg(long, conflicts_with = "bytes")]
        clear: bool,
    },
    /// Removes a user with their tokens and identities; their image stays in the sync store,
    /// unreachable.
    Remove {
        /// The user's name.
        name: String,
    },
}

fn quota_text(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "default".to_owned(), |b| format!("{b} bytes"))
}

/// Runs a `users` command against the directory `config` names (the SQLite file in `dir`, or
/// PostgreSQL).
pub(crate) async fn users(
    command: UsersCommand,
    config: &UsersConfig,
    dir: &Path,
) -> anyhow::Result<ExitCode> {
    let location = config
        .directory(dir)
        .context("the users directory's settings are unusable")?;
    let directory = Directory::open(&location)
        .await
        .with_context(|| match config.store {
            snug_gateway::config::UsersStore::Sqlite => {
                format!("cannot open the users file in {}", dir.display())
            }
            snug_gateway::config::UsersStore::Postgres => {
                "cannot open the users directory in PostgreSQL".to_owned()
            }
        })?;
    match command {
        UsersCommand::Add { name } => {
            let (user, token) = directory.add_user(&name).await?;
            eprintln!(
                "added user {:?} (id {}); their bearer token (id {}) follows and is not stored — hand it over now",
                user.name, user.id, token.id
            );
            println!("{}", token.token);
        }
        UsersCommand::Token { name } => {
            let token = directory.issue_token(&name).await?;
            eprintln!(
                "a new bearer token (id {}) for {name:?} follows and is not stored — hand it over now",
                token.id
            );
            println!("{}", token.token);
        }
        UsersCommand::RevokeToken { id } => {
            let owner = directory.revoke_token(&id).await?;
            eprintln!("revoked token {id} of user {owner:?}");
        }
        UsersCommand::List => {
            for info in directory.list().await? {
                let tokens: Vec<&str> = info.tokens.iter().map(|t| t.id.as_str()).collect();
                let identities: Vec<String> = info
                    .identities
                    .iter()
                    .map(|i| format!("{} {}", i.issuer, i.subject))
                    .collect();
                println!(
                    "{}\t{}\t{}\tquota {}\t{} token(s) [{}]\tidentities [{}]",
                    info.user.name,
                    info.user.id,
                    if info.user.disabled {
                        "disabled"
                    } else {
                        "enabled"
                    },
                    quota_text(info.user.quota_bytes),
                    tokens.len(),
                    tokens.join(" "),
                    identities.join(", ")
                );
            }
        }
        UsersCommand::Disable { name } => {
            let user = directory.disable(&name).await?;
            eprintln!("disabled user {:?} (id {})", user.name, user.id);
        }
        UsersCommand::Enable { name } => {
            let user = directory.enable(&name).await?;
            eprintln!("enabled user {:?} (id {})", user.name, user.id);
        }
        UsersCommand::Quota { name, bytes, clear } => {
            let user = directory
                .set_quota(&name, if clear { None } else { bytes })
                .await?;
            eprintln!(
                "quota of user {:?} is now {}",
                user.name,
                quota_text(user.quota_bytes)
            );
        }
        UsersCommand::Remove { name } => {
            let user = directory.remove_user(&name).await?;
            eprintln!(
                "removed user {:?} (id {}) with their tokens and identities",
                user.name, user.id
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
