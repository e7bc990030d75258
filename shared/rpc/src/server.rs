//! Serving a set of gRPC services: configuration, health, reflection, limits and shutdown.

use std::{convert::Infallible, future::Future, net::SocketAddr, time::Duration};

use tokio::net::TcpListener;
use tonic::{body::Body, server::NamedService, service::Routes};
use tonic_health::ServingStatus;

/// Settings every gRPC server takes, from flags or the environment.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerConfig {
    /// Address the gRPC server listens on.
    #[arg(long, env = "SNUG_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Deadline for one request, unless the client's `grpc-timeout` is shorter.
    #[arg(long, env = "SNUG_REQUEST_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Requests served at once across all connections; beyond it requests are shed with
    /// UNAVAILABLE (reason OVERLOADED) instead of queueing without bound. Health checks are exempt.
    #[arg(long, env = "SNUG_CONCURRENCY_LIMIT", default_value_t = 64)]
    pub concurrency_limit: usize,
    /// How long in-flight requests may run after SIGTERM before the server stops anyway.
    #[arg(long, env = "SNUG_SHUTDOWN_GRACE", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Address of the admin port (`GET /metrics`, Prometheus text format); unset: no admin port.
    #[arg(long, env = "SNUG_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,
    /// MiB of uploads the services of one process buffer at once (`crate::budget`; the gateway
    /// streams bodies on and buffers none). Beyond it an upload waits up to
    /// SNUG_UPLOAD_BUDGET_WAIT, then is refused as busy (gRPC UNAVAILABLE/OVERLOADED, HTTP 503
    /// with Retry-After).
    #[arg(long, env = "SNUG_UPLOAD_BUDGET_MIB", default_value_t = crate::budget::DEFAULT_MIB)]
    pub upload_budget_mib: u64,
    /// How long an upload waits for room in the upload budget before it is refused.
    #[arg(long, env = "SNUG_UPLOAD_BUDGET_WAIT", default_value = "5s", value_parser = parse_duration)]
    pub upload_budget_wait: Duration,
    /// KiB a second an upload must send on average after its grace (`crate::pace`), or it is
    /// cut off and its share of the budget freed; 0 turns the rule off.
    #[arg(long, env = "SNUG_UPLOAD_MIN_RATE_KIB", default_value_t = crate::pace::DEFAULT_MIN_RATE_KIB)]
    pub upload_min_rate_kib: u64,
    /// How long an upload may take before its minimum rate counts.
    #[arg(long, env = "SNUG_UPLOAD_GRACE", default_value = "10s", value_parser = parse_duration)]
    pub upload_grace: Duration,
    /// The service token every call but health's must present (`crate::service_token`); the
    /// composition root sets it from its one option, which its clients send too.
    #[arg(skip)]
    pub service_token: Option<crate::service_token::ServiceToken>,
}

/// Starts `serve` (a service's `serve`, handed a listener on a free loopback port) in the
/// background and connects to it: the harness the services' tests and benches start a service
/// with, configured by [`ServerConfig::for_tests`] as their callers choose.
pub async fn on_loopback<F, Fut, E>(
    serve: F,
) -> Result<tonic::transport::Channel, Box<dyn std::error::Error + Send + Sync>>
where
    F: FnOnce(TcpListener) -> Fut,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(serve(listener));
    Ok(
        tonic::transport::Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await?,
    )
}

impl ServerConfig {
    /// A configuration for tests and in-process use: loopback, generous limits.
    pub fn for_tests() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            request_timeout: Duration::from_secs(60),
            concurrency_limit: 64,
            shutdown_grace: Duration::from_secs(5),
            admin_listen: None,
            upload_budget_mib: crate::budget::DEFAULT_MIB,
            upload_budget_wait: crate::budget::DEFAULT_WAIT,
            upload_min_rate_kib: crate::pace::DEFAULT_MIN_RATE_KIB,
            upload_grace: crate::pace::DEFAULT_GRACE,
            service_token: None,
        }
    }

    /// The pace every upload is held to, by the services and the gateway alike.
    pub fn upload_pace(&self) -> crate::pace::Pace {
        crate::pace::Pace {
            grace: self.upload_grace,
            min_rate: self.upload_min_rate_kib.saturating_mul(1024),
        }
    }

    /// A new upload budget of the configured size and wait. Each call is a budget of its own: the
    /// composition root calls it once, for the services of its process.
    pub fn upload_budget(&self) -> crate::budget::UploadBudget {
        crate::budget::UploadBudget::from_mib(self.upload_budget_mib, self.upload_budget_wait)
            .paced(self.upload_pace())
    }
}

/// Parses a duration: a whole number with one of the units `ms`, `s`, `m`, `h` or `d`
/// (`250ms`, `30s`, `5m`, `24h`, `7d`), or a bare number of seconds. Every duration flag and
/// variable of the hub reads its value with this one parser, so each accepts the same units and
/// refuses with the same message.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let refusal = || {
        format!(
            "`{text}` is not a duration: use a whole number with ms, s, m, h or d (250ms, 30s, 5m, 24h, 7d)"
        )
    };
    let n: u64 = number.parse().map_err(|_| refusal())?;
    let seconds = |scale: u64| {
        n.checked_mul(scale)
            .map(Duration::from_secs)
            .ok_or_else(refusal)
    };
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => seconds(1),
        "m" => seconds(60),
        "h" => seconds(60 * 60),
        "d" => seconds(24 * 60 * 60),
        _ => Err(refusal()),
    }
}

/// Returns a generated server that accepts and sends messages of at most `$limit` bytes (by
/// default one chunk, [`crate::chunks::MAX_MESSAGE_SIZE`]; a service whose headers may be larger
/// passes its own), the same limit both ways.
///
/// A macro, because the limits are inherent methods of each generated server, not a trait.
#[macro_export]
macro_rules! with_message_limits {
    ($server:expr) => {
        $crate::with_message_limits!($server, $crate::chunks::MAX_MESSAGE_SIZE)
    };
    ($server:expr, $limit:expr) => {
        $server
            .max_decoding_message_size($limit)
            .max_encoding_message_size($limit)
    };
}

/// What one server hosts: the service routes, plus the names health reports on.
///
/// A service crate's `services()` is `Services::default().with(service, classify)`; a process that
/// hosts several adds the others with [`Services::with`] too.
#[derive(Default)]
pub struct Services {
    /// The gRPC services, already wrapped in their generated servers.
    pub routes: Routes,
    /// Fully qualified service names (`snug.container.v1.ContainerService`) for grpc.health.v1.
    pub names: Vec<&'static str>,
    /// Which of the services' calls feed the runtime's derived counters, one per service that
    /// has any (`crate::observe::Classify`).
    pub classify: Vec<crate::observe::Classify>,
}

impl Services {
    /// Adds `service` (a generated server, with [`with_message_limits!`]): its routes, its name
    /// for health (the generated server's, so the two cannot disagree) and `classify`, which of
    /// its calls feed the derived counters.
    pub fn with<S>(mut self, service: S, classify: &[crate::observe::Classify]) -> Self
    where
        S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        self.routes = self.routes.add_service(service);
        self.names.push(S::NAME);
        self.classify.extend_from_slice(classify);
        self
    }
}

/// Adds grpc.health.v1 (every name SERVING) and reflection to `routes`.
async fn with_health_and_reflection(
    routes: Routes,
    names: &[&'static str],
) -> (Routes, tonic_health::server::HealthReporter) {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_service_status("", ServingStatus::Serving)
        .await;
    for name in names {
        health_reporter
            .set_service_status(name, ServingStatus::Serving)
            .await;
    }
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(snug_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1();
    let mut routes = routes.add_service(health_service);
    if let Ok(reflection) = reflection {
        routes = routes.add_service(reflection);
    } else {
        tracing::warn!("gRPC reflection is unavailable: the descriptor set did not load");
    }
    (routes, health_reporter)
}

/// A channel to services running in this process: a client over it calls them through their
/// generated servers (protobuf both ways, the same observation and concurrency limit as
/// [`serve`]), without a socket or HTTP/2 framing in between.
pub type LocalChannel = tower::util::BoxCloneSyncService<
    http::Request<tonic::body::Body>,
    http::Response<tonic::body::Body>,
    ChannelError,
>;

/// Why a call over a boxed channel failed to reach its service (the transport's error).
///
/// A concrete type rather than `tower::BoxError`: the generated clients' `Into<StdError>` bound
/// on a boxed trait object makes every future that holds such a client lose `Send` to a
/// higher-ranked lifetime error.
#[derive(Debug)]
pub struct ChannelError(pub tower::BoxError);

impl std::fmt::Display for ChannelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ChannelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// The in-process counterpart of [`serve`]: what `snug-hub serve` gives its own gateway, so a
/// request crosses one network hop (client to gateway) instead of two. Per-call deadlines are
/// the caller's (the gateway bounds every call); nothing is listening, so there is no drain.
pub async fn local(config: &ServerConfig, services: Services) -> LocalChannel {
    let (routes, _health) = with_health_and_reflection(services.routes, &services.names).await;
    let service = tower::ServiceBuilder::new()
        .layer(crate::observe::ObserveLayer::new(&services.classify))
        .layer(crate::refusal::TypedRefusalsLayer)
        .layer(crate::limit::ShedLayer::new(config.concurrency_limit))
        .service(routes);
    tower::util::BoxCloneSyncService::new(tower::ServiceExt::map_err(
        service,
        |never: std::convert::Infallible| -> ChannelError { match never {} },
    ))
}

/// Serves `services` on `listener` until `shutdown` completes, then drains.
///
/// Layer order, outermost first: observation (the request span, parented on the caller's
/// `traceparent`, and the metrics — outside everything else, so typed refusals, deadlines and
/// shed calls are all counted), then the typing of tonic's own refusals
/// (`crate::refusal`), then the service token, when one is configured
/// (`crate::service_token`), then each call's deadline (`crate::deadline`: the client's `grpc-timeout`
/// or the request timeout; when it passes the call is dropped, which stops its blocking job, and
/// answered DEADLINE_EXCEEDED; it replaces tonic's timeout, which answered outside observation
/// with an untyped CANCELLED), then one global concurrency limit that sheds a burst beyond it at
/// once with UNAVAILABLE/`OVERLOADED` rather than piling up memory — health checks bypass it, so
/// a busy pod is never mistaken for a dead one — then the services. Health and reflection are
/// added here so every service has them.
pub async fn serve(
    config: &ServerConfig,
    listener: TcpListener,
    services: Services,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let (routes, health_reporter) =
        with_health_and_reflection(services.routes, &services.names).await;

    // On shutdown, report NOT_SERVING first so load balancers stop routing here, then let tonic
    // drain in-flight requests, bounded by the grace period.
    let grace = config.shutdown_grace;
    let names = services.names.clone();
    let (drained_tx, drained_rx) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: draining in-flight requests");
        health_reporter
            .set_service_status("", ServingStatus::NotServing)
            .await;
        for name in names {
            health_reporter
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
        let _ = drained_tx.send(());
    };

    if let Ok(local) = listener.local_addr() {
        tracing::info!(addr = %local, services = ?services.names, "gRPC server listening");
        if config.service_token.is_none() && !local.ip().is_loopback() {
            tracing::warn!(
                addr = %local,
                "the gRPC services answer anyone who reaches this address: set SNUG_SERVICE_TOKEN (the same in every component) to require the hub's service token"
            );
        }
    }
    let server = tonic::transport::Server::builder()
        .layer(crate::observe::ObserveLayer::new(&services.classify))
        .layer(crate::refusal::TypedRefusalsLayer)
        .layer(crate::service_token::RequireLayer::new(
            config.service_token.clone(),
        ))
        .layer(crate::deadline::DeadlineLayer::new(config.request_timeout))
        .layer(crate::limit::ShedLayer::new(config.concurrency_limit))
        // Large windows and frames let a 64 MiB payload stream without stalling on flow control.
        .initial_stream_window_size(32 * 1024 * 1024)
        .initial_connection_window_size(64 * 1024 * 1024)
        .max_frame_size(1024 * 1024)
        .add_routes(routes)
        // TCP_NODELAY on every accepted connection: without it, the small WINDOW_UPDATE frames a
        // receiver sends are held back by Nagle's algorithm while bulk data is in flight, and a
        // 64 MiB upload stalls on flow control.
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            signal,
        );

    tokio::pin!(server);
    tokio::select! {
        result = &mut server => result,
        () = async {
            let _ = drained_rx.await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(grace = ?grace, "in-flight requests outlived the shutdown grace period");
            Ok(())
        }
    }
}

/// Completes on SIGTERM (Kubernetes, docker stop) or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_refuse_nonsense() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for nonsense in [
            "soon",
            "xh",
            "5w",
            "-1s",
            "1.5s",
            "",
            "ms",
            "99999999999999999999d",
        ] {
            assert_eq!(
                parse_duration(nonsense),
                Err(format!(
                    "`{}` is not a duration: use a whole number with ms, s, m, h or d (250ms, 30s, 5m, 24h, 7d)",
                    nonsense.trim()
                )),
                "{nonsense:?}"
            );
        }
    }
}
