//! The HTTP side of `snug-hub`: the gateway alone, the gateway beside the gRPC services in one
//! process, and `snug-hub users` (the users directory: users and their hub tokens).
//!
//! In one process the gateway still reaches the services over gRPC, on the loopback address of
//! the process's own gRPC listener: the same code path as a split deployment, so what the tests
//! exercise in one process is what runs in many.

use std::{net::SocketAddr, path::Path, process::ExitCode};

use anyhow::Context as _;
use clap::Subcommand;
use snug_admin_service::{Admin, AdminToken, SyncClient};
use snug_files::sealed::Sealer;
use snug_gateway::config::{GatewayConfig, UsersConfig};
use snug_proto::admin::v1 as admin_pb;
use snug_proto::sync::v1::sync_service_client::SyncServiceClient;
use snug_rpc::server::{ServerConfig, Services, shutdown_signal};
use snug_sync_service::SyncConfig;
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
    let sync = SyncServiceClient::new(snug_gateway::backend::local(own.clone()));
    let state = snug_gateway::build(
        gateway,
        gateway_dir.to_owned(),
        snug_gateway::Addresses::in_process(own),
        sealer,
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
        Sealer::disabled(),
    )
    .await
    .context("the gateway refused its configuration")?;
    let sync = match &gateway.sync_addr {
        Some(addr) => Some(SyncServiceClient::new(
            snug_gateway::backend::channel(addr, gateway.rpc_connect_timeout)
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

/// `snug-hub users …`: who may use the hub's HTTP surface. Each command is one call of the admin
/// API's implementation (`snug_admin_service::Admin`), made in-process: the CLI and the admin
/// port run the same code; this layer only parses and prints.
///
/// Exit status: 0 done; 1 the directory or the sync service failed; 2 a usage error; 3 no such
/// user or token; 4 the name is taken.
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
    List {
        /// Also each user's usage of the sync store (see `users usage`).
        #[arg(long)]
        usage: bool,
    },
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
    /// What a user holds in the sync store: the current image's bytes, the bytes only their
    /// history holds, and their revisions.
    Usage {
        /// The user's name.
        name: String,
    },
    /// Removes a user with their tokens and identities. Without --erase their image stays in the
    /// sync store, unreachable; with it, everything the store keeps of them is erased first.
    Remove {
        /// The user's name.
        name: String,
        /// Also erase the user's images, history, the chunks no other user references and the
        /// personal fields of their ledger rows, and print what was deleted.
        #[arg(long)]
        erase: bool,
    },
}

/// Where `snug-hub users` reaches the sync store, for usage and erasure.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct UsersSync {
    /// The sync service of a running hub (e.g. http://127.0.0.1:50051); without it the store is
    /// opened here as `snug-hub serve sync` would open it (which a running hub's lock refuses).
    #[arg(long = "sync-addr", env = "SNUG_SYNC_ADDR")]
    sync_addr: Option<String>,
}

impl UsersSync {
    /// A client of the sync service: over the network, or served in-process over the store.
    async fn client(&self, sync: &SyncConfig) -> anyhow::Result<SyncClient> {
        let channel = match &self.sync_addr {
            Some(addr) => snug_gateway::backend::channel(addr, std::time::Duration::from_secs(5))
                .with_context(|| format!("{addr:?} is not a service address"))?,
            None => {
                let store = snug_sync_service::open_store(sync).await.context(
                    "cannot open the sync store (while a hub has it open, pass --sync-addr)",
                )?;
                let services = snug_sync_service::services(store, sync);
                snug_gateway::backend::local(
                    snug_rpc::server::local(&ServerConfig::for_tests(), services).await,
                )
            }
        };
        Ok(SyncServiceClient::new(channel))
    }
}

fn quota_text(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "default".to_owned(), |b| format!("{b} bytes"))
}

fn user_ref(name: String) -> Option<admin_pb::UserRef> {
    Some(admin_pb::UserRef {
        by: Some(admin_pb::user_ref::By::Name(name)),
    })
}

fn usage_text(usage: &admin_pb::Usage) -> String {
    format!(
        "current {} bytes, history {} bytes, {} revision(s) ({} retained)",
        usage.current_bytes, usage.history_bytes, usage.revisions, usage.retained_revisions
    )
}

/// A refusal of the admin API as the CLI reports it: its message, and the exit status its
/// reason stands for.
fn refused(status: tonic::Status) -> anyhow::Result<ExitCode> {
    use tonic_types::StatusExt as _;
    let reason = status
        .get_error_details()
        .error_info()
        .map(|info| info.reason.clone())
        .unwrap_or_default();
    let code = snug_reasons::admin::users_exit(&reason);
    let reason = if reason.is_empty() {
        String::new()
    } else {
        format!(" ({reason})")
    };
    eprintln!("snug-hub users: {}{reason}", status.message());
    Ok(ExitCode::from(code))
}

/// Runs a `users` command against the directory `config` names (the SQLite file in `dir`, or
/// PostgreSQL), and, for usage and erasure, the sync store `sync` names.
pub(crate) async fn users(
    command: UsersCommand,
    config: &UsersConfig,
    dir: &Path,
    reach: &UsersSync,
    sync: &SyncConfig,
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
    let needs_sync = matches!(
        command,
        UsersCommand::Usage { .. }
            | UsersCommand::List { usage: true }
            | UsersCommand::Remove { erase: true, .. }
    );
    let sync = if needs_sync {
        Some(reach.client(sync).await?)
    } else {
        None
    };
    let admin = Admin::new(directory, sync, std::time::Duration::from_secs(600));
    match run_users(&admin, command).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(status) => refused(status),
    }
}

async fn run_users(admin: &Admin, command: UsersCommand) -> Result<(), tonic::Status> {
    use snug_admin_service::AdminService as _;
    use tonic::Request;
    match command {
        UsersCommand::Add { name } => {
            let added = admin
                .add_user(Request::new(admin_pb::AddUserRequest { name }))
                .await?
                .into_inner();
            let user = added.user.unwrap_or_default();
            eprintln!(
                "added user {:?} (id {}); their bearer token (id {}) follows and is not stored — hand it over now",
                user.name,
                user.id,
                user.tokens.first().map_or("?", |t| t.id.as_str())
            );
            println!("{}", added.token);
        }
        UsersCommand::Token { name } => {
            let issued = admin
                .issue_token(Request::new(admin_pb::IssueTokenRequest {
                    user: user_ref(name.clone()),
                }))
                .await?
                .into_inner();
            eprintln!(
                "a new bearer token (id {}) for {name:?} follows and is not stored — hand it over now",
                issued.token_id
            );
            println!("{}", issued.token);
        }
        UsersCommand::RevokeToken { id } => {
            let revoked = admin
                .revoke_token(Request::new(admin_pb::RevokeTokenRequest {
                    token_id: id.clone(),
                }))
                .await?
                .into_inner();
            eprintln!(
                "revoked token {id} of user {:?}",
                revoked.user.unwrap_or_default().name
            );
        }
        UsersCommand::List { usage } => {
            let listed = admin
                .list_users(Request::new(admin_pb::ListUsersRequest {
                    include_usage: usage,
                }))
                .await?
                .into_inner();
            for user in listed.users {
                let tokens: Vec<&str> = user.tokens.iter().map(|t| t.id.as_str()).collect();
                let identities: Vec<String> = user
                    .identities
                    .iter()
                    .map(|i| format!("{} {}", i.issuer, i.subject))
                    .collect();
                let usage = user
                    .usage
                    .as_ref()
                    .map(|u| format!("\t{}", usage_text(u)))
                    .unwrap_or_default();
                println!(
                    "{}\t{}\t{}\tquota {}\t{} token(s) [{}]\tidentities [{}]{usage}",
                    user.name,
                    user.id,
                    if user.disabled { "disabled" } else { "enabled" },
                    quota_text(user.quota_bytes),
                    tokens.len(),
                    tokens.join(" "),
                    identities.join(", ")
                );
            }
        }
        UsersCommand::Disable { name } => set_disabled(admin, name, true).await?,
        UsersCommand::Enable { name } => set_disabled(admin, name, false).await?,
        UsersCommand::Quota { name, bytes, clear } => {
            let set = admin
                .set_quota(Request::new(admin_pb::SetQuotaRequest {
                    user: user_ref(name),
                    quota_bytes: if clear { None } else { bytes },
                }))
                .await?
                .into_inner();
            let user = set.user.unwrap_or_default();
            eprintln!(
                "quota of user {:?} is now {}",
                user.name,
                quota_text(user.quota_bytes)
            );
        }
        UsersCommand::Usage { name } => {
            let usage = admin
                .get_usage(Request::new(admin_pb::GetUsageRequest {
                    user: user_ref(name.clone()),
                }))
                .await?
                .into_inner()
                .usage
                .unwrap_or_default();
            println!("{name}\t{}", usage_text(&usage));
        }
        UsersCommand::Remove { name, erase } => {
            let removed = admin
                .remove_user(Request::new(admin_pb::RemoveUserRequest {
                    user: user_ref(name),
                    erase,
                }))
                .await?
                .into_inner();
            let user = removed.user.unwrap_or_default();
            eprintln!(
                "removed user {:?} (id {}) with their tokens and identities",
                user.name, user.id
            );
            if let Some(erased) = removed.erasure {
                println!(
                    "erased: {} revision(s), {} unfinished write(s), {} image(s), {} chunk(s), {} bytes, {} pack(s) deleted, {} pack(s) wiped, {} ledger row(s) scrubbed",
                    erased.revisions,
                    erased.publications,
                    erased.images,
                    erased.chunks,
                    erased.bytes,
                    erased.packs,
                    erased.packs_wiped,
                    erased.ledger_rows_scrubbed
                );
            }
        }
    }
    Ok(())
}

async fn set_disabled(admin: &Admin, name: String, disabled: bool) -> Result<(), tonic::Status> {
    use snug_admin_service::AdminService as _;
    let set = admin
        .set_user_disabled(tonic::Request::new(admin_pb::SetUserDisabledRequest {
            user: user_ref(name),
            disabled,
        }))
        .await?
        .into_inner();
    let user = set.user.unwrap_or_default();
    eprintln!(
        "{} user {:?} (id {})",
        if disabled { "disabled" } else { "enabled" },
        user.name,
        user.id
    );
    Ok(())
}

/// `snug-hub admin-token`: makes an admin token; prints the token (for the operator's client) on
/// stdout and its SHA-256 (for SNUG_ADMIN_TOKEN_SHA256, in a Secret) on stderr.
pub(crate) fn admin_token() -> anyhow::Result<ExitCode> {
    let (token, record) = AdminToken::generate()
        .map_err(|_| anyhow::anyhow!("the system random number generator failed"))?;
    eprintln!(
        "an admin token follows and is not stored; give the hub only its SHA-256:\n  SNUG_ADMIN_TOKEN_SHA256={}",
        record.hex()
    );
    println!("{token}");
    Ok(ExitCode::SUCCESS)
}
