//! `snug-hub`: runs Snug Hub's services, all in one process or one by name.
//!
//! `snug-hub serve` is the whole hub on its embedded defaults; `snug-hub serve container` runs only
//! the container service, for deployments that split the capabilities into separate processes or
//! pods. Both use the same service code (`services/*` crates), so there is no second
//! implementation of anything here: this file only parses configuration and composes routes.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use snug_container_service::ContainerConfig;
use snug_rpc::server::{ServerConfig, Services, serve, shutdown_signal};

#[derive(Debug, Parser)]
#[command(name = "snug-hub", version, about = "Snug Hub: the hub side of the Snug Protocol")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
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
    },
    /// Asks a running server's grpc.health.v1 endpoint whether it is serving; exits 0 if so.
    ///
    /// Images built FROM scratch have no shell or probe binary, so health checks call this.
    Healthcheck {
        /// The server's address, e.g. http://127.0.0.1:50051.
        #[arg(long, env = "SNUG_HEALTHCHECK_ADDR", default_value = "http://127.0.0.1:50051")]
        addr: String,
        /// The service to ask about; empty means the server as a whole.
        #[arg(long, default_value = "")]
        service: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ServiceName {
    /// snug.container.v1: the SNUGENC1 container capability.
    Container,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
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
        } => {
            snug_rpc::telemetry::init(server.log_format);
            let services = compose(service, &container);
            let listener = tokio::net::TcpListener::bind(server.listen)
                .await
                .with_context(|| format!("cannot listen on {}", server.listen))?;
            serve(&server, listener, services, shutdown_signal())
                .await
                .context("the gRPC server failed")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Healthcheck { addr, service } => healthcheck(&addr, &service).await,
    }
}

/// Chooses the services one process hosts.
fn compose(only: Option<ServiceName>, container: &ContainerConfig) -> Services {
    match only {
        // Until the other capabilities land, the whole hub is the container service.
        None | Some(ServiceName::Container) => snug_container_service::services(container),
    }
}

async fn healthcheck(addr: &str, service: &str) -> anyhow::Result<ExitCode> {
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};
    let channel = tonic::transport::Channel::from_shared(addr.to_owned())
        .context("invalid address")?
        .connect_timeout(std::time::Duration::from_secs(3))
        .timeout(std::time::Duration::from_secs(3))
        .connect()
        .await
        .with_context(|| format!("cannot reach {addr}"))?;
    let response = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .context("health check failed")?
        .into_inner();
    let status = response.status();
    println!("{}", status.as_str_name());
    Ok(if status == ServingStatus::Serving {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
