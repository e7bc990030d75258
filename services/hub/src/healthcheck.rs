//! `snug-hub healthcheck`: asks a running `snug-hub serve` whether it is serving, probing what
//! that process serves — gRPC health for one service, the gateway's `GET /healthz` for
//! `serve gateway`, both for the whole hub.
//!
//! An image built FROM scratch has no shell and no probe binary, and its HEALTHCHECK is one fixed
//! command for every role the image can run. So the probe finds the role and the addresses the
//! way the server did: it parses the command line of the container's main process (PID 1 is
//! `snug-hub serve …`, or an init such as docker-init running it) with the server's own parser,
//! over the same environment. Outside a container, `--role` and the environment say it.

use std::{net::SocketAddr, process::ExitCode, time::Duration};

use anyhow::{Context as _, bail};
use clap::Parser as _;
use snug_rpc::server::ServerConfig;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::{Cli, Command, ServiceName, gateway::loopback_url};

/// How long one probe may take; the image's HEALTHCHECK allows 4 s for the whole command.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// What `snug-hub serve` runs: the whole hub, or one service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Role {
    /// `snug-hub serve`: the gRPC services and the HTTP gateway.
    All,
    /// `snug-hub serve container`.
    Container,
    /// `snug-hub serve schema`.
    Schema,
    /// `snug-hub serve materialize`.
    Materialize,
    /// `snug-hub serve sync`.
    Sync,
    /// `snug-hub serve gateway`.
    Gateway,
}

impl From<Option<ServiceName>> for Role {
    fn from(service: Option<ServiceName>) -> Self {
        match service {
            None => Role::All,
            Some(ServiceName::Container) => Role::Container,
            Some(ServiceName::Schema) => Role::Schema,
            Some(ServiceName::Materialize) => Role::Materialize,
            Some(ServiceName::Sync) => Role::Sync,
            Some(ServiceName::Gateway) => Role::Gateway,
        }
    }
}

/// One endpoint to probe.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Probe {
    /// grpc.health.v1 Check at this URL, for this service name ("" is the whole server).
    Grpc { url: String, service: String },
    /// `GET /healthz` on the gateway at this address.
    Http { addr: SocketAddr },
}

/// The arguments of `snug-hub healthcheck`.
#[derive(Debug, clap::Args)]
pub(crate) struct HealthcheckArgs {
    /// Probe only this gRPC address (e.g. http://127.0.0.1:50051), whatever the role.
    #[arg(long, env = "SNUG_HEALTHCHECK_ADDR")]
    addr: Option<String>,
    /// With `--addr`: the gRPC service to ask about; empty means the server as a whole.
    #[arg(long, default_value = "")]
    service: String,
    /// The role to probe, when it cannot be read from the container's main process; its
    /// addresses then come from the environment (`SNUG_LISTEN`, `SNUG_HTTP_LISTEN`).
    #[arg(long, value_enum)]
    role: Option<Role>,
}

/// Runs the probes and exits 0 when every one answers that it is serving.
pub(crate) async fn run(args: HealthcheckArgs) -> anyhow::Result<ExitCode> {
    let probes = match args.addr {
        Some(url) => vec![Probe::Grpc {
            url,
            service: args.service,
        }],
        None => {
            let (role, server, http_listen) = match args.role {
                Some(role) => {
                    let (_, server, http_listen) = serve_config(&["snug-hub", "serve"])?;
                    (role, server, http_listen)
                }
                None => match main_process_serve_args() {
                    Some(argv) => serve_config(&argv)
                        .context("cannot read the main process's command line")?,
                    None => serve_config(&["snug-hub", "serve"])?,
                },
            };
            probes_for(role, &server, http_listen)
        }
    };
    let mut healthy = true;
    for probe in &probes {
        match check(probe).await {
            Ok(answer) => println!("{answer}"),
            Err(err) => {
                healthy = false;
                println!("{err:#}");
            }
        }
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The role and listen addresses `snug-hub serve` takes from `argv` and the environment.
fn serve_config<S: AsRef<str>>(argv: &[S]) -> anyhow::Result<(Role, ServerConfig, SocketAddr)> {
    let cli = Cli::try_parse_from(argv.iter().map(AsRef::as_ref))
        .map_err(|err| anyhow::anyhow!("{err}"))?;
    match cli.command {
        Command::Serve(args) => Ok((
            Role::from(args.service),
            args.server,
            args.gateway.http_listen,
        )),
        _ => bail!("not a `snug-hub serve` command line"),
    }
}

/// What a process in `role` listening on these addresses serves.
fn probes_for(role: Role, server: &ServerConfig, http_listen: SocketAddr) -> Vec<Probe> {
    let grpc = Probe::Grpc {
        url: loopback_url(server.listen),
        service: String::new(),
    };
    let http = Probe::Http { addr: http_listen };
    match role {
        Role::All => vec![grpc, http],
        Role::Gateway => vec![http],
        Role::Container | Role::Schema | Role::Materialize | Role::Sync => vec![grpc],
    }
}

/// PID 1's `snug-hub serve …` arguments, when PID 1 runs one (directly or under an init).
fn main_process_serve_args() -> Option<Vec<String>> {
    let raw = std::fs::read("/proc/1/cmdline").ok()?;
    serve_args(&raw)
}

/// The `snug-hub serve …` part of a NUL-separated command line.
fn serve_args(cmdline: &[u8]) -> Option<Vec<String>> {
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect();
    let start = argv.windows(2).position(|pair| {
        let program = pair[0].rsplit('/').next().unwrap_or(&pair[0]);
        program == "snug-hub" && pair[1] == "serve"
    })?;
    Some(argv[start..].to_vec())
}

async fn check(probe: &Probe) -> anyhow::Result<String> {
    match probe {
        Probe::Grpc { url, service } => grpc_health(url, service).await,
        Probe::Http { addr } => http_health(*addr).await,
    }
}

async fn grpc_health(url: &str, service: &str) -> anyhow::Result<String> {
    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };
    let channel = tonic::transport::Channel::from_shared(url.to_owned())
        .with_context(|| format!("grpc {url}: invalid address"))?
        .connect_timeout(PROBE_TIMEOUT)
        .timeout(PROBE_TIMEOUT)
        .connect()
        .await
        .with_context(|| format!("grpc {url}: cannot connect"))?;
    let status = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .with_context(|| format!("grpc {url}: health check failed"))?
        .into_inner()
        .status();
    if status != ServingStatus::Serving {
        bail!("grpc {url}: {}", status.as_str_name());
    }
    Ok(format!("grpc {url}: {}", status.as_str_name()))
}

/// `GET /healthz` over plain HTTP/1.1 on loopback: a fixed request and a status line are all a
/// liveness probe needs, so no HTTP client is linked for it.
async fn http_health(listen: SocketAddr) -> anyhow::Result<String> {
    let url = format!("{}/healthz", loopback_url(listen));
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/healthz")
        .parse()
        .with_context(|| format!("http {url}: invalid address"))?;
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .context("cannot connect")?;
        // `localhost` as the Host: with auth off the gateway serves only loopback names.
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .context("cannot send the request")?;
        let mut head = Vec::with_capacity(256);
        let mut buf = [0u8; 256];
        // The status line is all that is read; a misbehaving peer cannot make the probe buffer more.
        while !head.contains(&b'\n') && head.len() < 4096 {
            let n = stream
                .read(&mut buf)
                .await
                .context("cannot read the answer")?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        anyhow::Ok(head)
    };
    let head = tokio::time::timeout(PROBE_TIMEOUT, exchange)
        .await
        .map_err(|_| anyhow::anyhow!("http {url}: no answer within {PROBE_TIMEOUT:?}"))?
        .with_context(|| format!("http {url}"))?;
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line).trim().to_owned();
    let status = line.split(' ').nth(1).unwrap_or_default();
    if status != "200" {
        bail!("http {url}: {line:?}");
    }
    Ok(format!("http {url}: {line}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles_and_probes(argv: &[&str]) -> (Role, Vec<Probe>) {
        let (role, server, http) = serve_config(argv).expect("a serve command line");
        (role, probes_for(role, &server, http))
    }

    #[test]
    fn every_role_probes_what_it_serves() {
        let grpc = |port: u16| Probe::Grpc {
            url: format!("http://127.0.0.1:{port}"),
            service: String::new(),
        };
        let http = |port: u16| Probe::Http {
            addr: SocketAddr::from(([0, 0, 0, 0], port)),
        };
        let cases: &[(&[&str], Role, Vec<Probe>)] = &[
            (
                &[
                    "snug-hub",
                    "serve",
                    "--listen",
                    "0.0.0.0:7001",
                    "--http-listen",
                    "0.0.0.0:7002",
                ],
                Role::All,
                vec![grpc(7001), http(7002)],
            ),
            (
                &["snug-hub", "serve", "schema", "--listen", "0.0.0.0:7003"],
                Role::Schema,
                vec![grpc(7003)],
            ),
            (
                &["snug-hub", "serve", "sync", "--listen", "0.0.0.0:7004"],
                Role::Sync,
                vec![grpc(7004)],
            ),
            (
                &["snug-hub", "serve", "container", "--listen", "0.0.0.0:7005"],
                Role::Container,
                vec![grpc(7005)],
            ),
            (
                &[
                    "snug-hub",
                    "serve",
                    "materialize",
                    "--listen",
                    "0.0.0.0:7006",
                ],
                Role::Materialize,
                vec![grpc(7006)],
            ),
            (
                &[
                    "snug-hub",
                    "serve",
                    "gateway",
                    "--http-listen",
                    "0.0.0.0:7007",
                ],
                Role::Gateway,
                vec![http(7007)],
            ),
        ];
        for (argv, role, probes) in cases {
            assert_eq!(roles_and_probes(argv), (*role, probes.clone()), "{argv:?}");
        }
    }

    #[test]
    fn the_serve_command_is_found_directly_or_under_an_init() {
        assert_eq!(
            serve_args(b"/snug-hub\0serve\0gateway\0"),
            Some(vec![
                "/snug-hub".to_owned(),
                "serve".to_owned(),
                "gateway".to_owned()
            ])
        );
        assert_eq!(
            serve_args(b"/sbin/docker-init\0--\0/snug-hub\0serve\0"),
            Some(vec!["/snug-hub".to_owned(), "serve".to_owned()])
        );
        assert_eq!(serve_args(b"/sbin/init\0splash\0"), None);
        assert_eq!(serve_args(b"/snug-hub\0users\0add\0serve\0"), None);
        assert_eq!(serve_args(b""), None);
    }

    #[tokio::test]
    async fn an_http_probe_reads_the_status_line() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            for answer in [
                "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
                "HTTP/1.1 503 Service Unavailable\r\n\r\n",
            ] {
                let (mut stream, _) = listener.accept().await.expect("accept");
                let mut request = [0u8; 512];
                let n = stream.read(&mut request).await.expect("read");
                assert!(request[..n].starts_with(b"GET /healthz HTTP/1.1\r\n"));
                stream.write_all(answer.as_bytes()).await.expect("write");
            }
        });
        assert!(http_health(addr).await.is_ok());
        let err = http_health(addr).await.expect_err("503 is not healthy");
        assert!(format!("{err:#}").contains("503"), "{err:#}");
        server.await.expect("server");
        // Nothing listens any more: refused, not a hang.
        assert!(http_health(addr).await.is_err());
    }
}
