//! `snug-hub`: runs Snug Hub's services, all in one process or one by name.
//!
//! `snug-hub serve` is the whole hub on its embedded defaults; `snug-hub serve container` (or
//! `schema`, `materialize`, `sync`) runs only that service, for deployments that split the
//! capabilities into separate processes or pods. Both use the same service code (`services/*`
//! crates), so there is no second implementation of anything here: this file only parses
//! configuration and composes routes.
//! The whole hub also serves the HTTP gateway (`gateway.rs`); `snug-hub serve gateway` runs the
//! gateway alone against services elsewhere, and `snug-hub users` manages who may call it.

mod gateway;
mod healthcheck;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use snug_container_service::ContainerConfig;
use snug_materialize_service::{MaterializeConfig, MaterializeServer};
use snug_rpc::server::{ServerConfig, Services, serve, shutdown_signal};
use snug_rpc::telemetry::{Telemetry, TelemetryConfig};
use snug_schema_service::{SchemaConfig, SchemaServer};
use snug_sync_service::{SyncConfig, SyncServer};

#[derive(Debug, Parser)]
#[command(
    name = "snug-hub",
    version,
    about = "Snug Hub: the hub side of the Snug Protocol"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    telemetry: TelemetryConfig,
}

#[derive(Debug, Subcommand)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once at startup; boxing the configs buys nothing"
)]
enum Command {
    /// Serves the hub: every service in one process, or the one named.
    Serve {
        /// Which service to run alone; omit it to run the whole hub in one process.
        #[arg(value_enum)]
        service: Option<ServiceName>,
        #[command(flatten)]
        server: ServerConfig,
        #[command(flatten)]
        container: ContainerConfig,
        #[command(flatten)]
        schema: SchemaConfig,
        #[command(flatten)]
        materialize: MaterializeConfig,
        #[command(flatten)]
        sync: SyncConfig,
        #[command(flatten)]
        gateway: snug_gateway::config::GatewayConfig,
    },
    /// Manages the users and bearer tokens of the HTTP gateway (in <data-dir>/gateway/users.db).
    Users {
        /// The hub's data directory.
        #[arg(long, env = "SNUG_DATA_DIR", default_value = "./snug-data")]
        data_dir: std::path::PathBuf,
        #[command(subcommand)]
        command: gateway::UsersCommand,
    },
    /// Asks a running `snug-hub serve` whether it is serving what its role serves; exits 0 if so.
    ///
    /// Images built FROM scratch have no shell or probe binary, so health checks call this.
    Healthcheck(healthcheck::HealthcheckArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ServiceName {
    /// snug.container.v1: the SNUGENC1 container capability.
    Container,
    /// snug.schema.v1: the user database at storage version 6 (migration, export, hub namespace).
    Schema,
    /// snug.materialize.v1: per-app native tables (materialize, persist, DDL, export, sandboxed SQL).
    Materialize,
    /// snug.sync.v1: the hub as a user's sync origin (revisions with compare-and-swap).
    Sync,
    /// The HTTP gateway (/userdb) alone, against services at SNUG_SCHEMA_ADDR and SNUG_SYNC_ADDR.
    Gateway,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("snug-hub: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(err) => {
            tracing::error!(error = ?err, "snug-hub failed");
            eprintln!("snug-hub: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve {
            service,
            server,
            container,
            schema,
            materialize,
            sync,
            gateway,
        } => {
            let telemetry = snug_rpc::telemetry::init(&cli.telemetry, role_name(service))?;
            let served = async {
                start_admin(server.admin_listen).await?;
                serve_role(
                    service,
                    &server,
                    &container,
                    &schema,
                    &materialize,
                    &sync,
                    &gateway,
                )
                .await
            }
            .await;
            // Spans still buffered (the last requests before SIGTERM) are exported before exit.
            telemetry.shutdown().await;
            served
        }
        Command::Healthcheck(args) => {
            let _logs = logs_only(&cli.telemetry);
            healthcheck::run(args).await
        }
        Command::Users { data_dir, command } => {
            let _logs = logs_only(&cli.telemetry);
            gateway::users(command, &data_dir)
        }
    }
}

/// The default `service.name` of each role's spans.
fn role_name(service: Option<ServiceName>) -> &'static str {
    match service {
        None => "snug-hub",
        Some(ServiceName::Container) => "snug-hub-container",
        Some(ServiceName::Schema) => "snug-hub-schema",
        Some(ServiceName::Materialize) => "snug-hub-materialize",
        Some(ServiceName::Sync) => "snug-hub-sync",
        Some(ServiceName::Gateway) => "snug-hub-gateway",
    }
}

/// Log lines in the configured format, never a trace exporter: the short-lived commands have no
/// requests to trace, and a health probe every few seconds must stay cheap.
fn logs_only(config: &TelemetryConfig) -> Option<Telemetry> {
    snug_rpc::telemetry::init(&TelemetryConfig::logs_only(config.log_format), "snug-hub").ok()
}

/// Serves `GET /metrics` on the admin address, if one is configured, until SIGTERM.
async fn start_admin(addr: Option<std::net::SocketAddr>) -> anyhow::Result<()> {
    let Some(addr) = addr else {
        return Ok(());
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (SNUG_ADMIN_LISTEN)"))?;
    tokio::spawn(async move {
        if let Err(err) = snug_rpc::admin::serve(listener, shutdown_signal()).await {
            tracing::error!(error = %err, "the admin port failed");
        }
    });
    Ok(())
}

/// Runs what `snug-hub serve [SERVICE]` names until SIGTERM.
async fn serve_role(
    service: Option<ServiceName>,
    server: &ServerConfig,
    container: &ContainerConfig,
    schema: &SchemaConfig,
    materialize: &MaterializeConfig,
    sync: &SyncConfig,
    gateway: &snug_gateway::config::GatewayConfig,
) -> anyhow::Result<ExitCode> {
    if service == Some(ServiceName::Gateway) {
        gateway::serve_gateway(gateway, &sync.data_dir).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let services = compose(service, container, schema, materialize, sync).await?;
    if service.is_none() {
        gateway::serve_with_gateway(server, services, gateway, &sync.data_dir).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let listener = tokio::net::TcpListener::bind(server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", server.listen))?;
    serve(server, listener, services, shutdown_signal())
        .await
        .context("the gRPC server failed")?;
    Ok(ExitCode::SUCCESS)
}

/// Chooses the services one process hosts; opens the sync store when sync is among them.
async fn compose(
    only: Option<ServiceName>,
    container: &ContainerConfig,
    schema: &SchemaConfig,
    materialize: &MaterializeConfig,
    sync: &SyncConfig,
) -> anyhow::Result<Services> {
    Ok(match only {
        Some(ServiceName::Gateway) => {
            anyhow::bail!("the gateway is served over HTTP, not composed into gRPC")
        }
        Some(ServiceName::Container) => snug_container_service::services(container),
        Some(ServiceName::Schema) => snug_schema_service::services(schema),
        Some(ServiceName::Materialize) => snug_materialize_service::services(materialize),
        Some(ServiceName::Sync) => {
            snug_sync_service::services(snug_sync_service::open_store(sync).await?, sync)
        }
        None => {
            // One router for every service: tonic routes by the service name in the path, so the
            // services are added to the same `Routes` rather than merging two routers (each has
            // its own fallback, and axum refuses to merge two fallbacks).
            let mut all = snug_container_service::services(container);
            all.routes = all
                .routes
                .add_service(snug_schema_service::service(SchemaServer::new(schema)));
            all.names.push(snug_schema_service::SERVICE_NAME);
            all.routes =
                all.routes
                    .add_service(snug_materialize_service::service(MaterializeServer::new(
                        materialize,
                    )));
            all.names.push(snug_materialize_service::SERVICE_NAME);
            // With no configuration this is the embedded store under ./snug-data/sync.
            let sync_server = SyncServer::new(snug_sync_service::open_store(sync).await?, sync);
            sync_server.spawn_reclaimer();
            all.routes = all
                .routes
                .add_service(snug_sync_service::service(sync_server));
            all.names.push(snug_sync_service::SERVICE_NAME);
            all
        }
    })
}
