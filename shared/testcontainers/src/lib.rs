//! `snug-testcontainers`: Snug Hub in Docker for integration suites, through
//! [testcontainers](https://docs.rs/testcontainers/0.28.0).
//!
//! Test support, not a domain crate: a suite of another team (a hub in another language, a
//! client, an operator's smoke test) starts the real image the way it is deployed and talks to
//! it over HTTP and gRPC on loopback ports.
//!
//! - [`HubImage`] names the image: one that exists (`SNUG_HUB_IMAGE`, or [`HubImage::new`]), or
//!   one built from this checkout ([`HubImage::build_from_checkout`]), tagged by a digest of its
//!   build context so it is built once and rebuilt only when the binary or the Dockerfile changed.
//! - [`AllInOne`] runs `snug-hub serve`: every service and the gateway in one container.
//! - [`SplitHub`] runs the container, schema, materialize and sync services and the gateway as
//!   five containers on a Docker network of their own, the gateway reaching the services by
//!   name; the gateway's HTTP port and every gRPC port are mapped to ports on 127.0.0.1 only. A
//!   single service can be stopped and started again ([`SplitHub::stop_service`],
//!   [`SplitHub::start_service`]); the sync service keeps its revisions on its volume across a
//!   restart.
//!
//! Every container runs as the image's non-root user with a read-only root filesystem, every
//! capability dropped, `no-new-privileges`, a tmpfs on `/tmp` and its data on the `/data`
//! volume; authentication is on, and users come from the image's own `snug-hub users add`
//! ([`AllInOne::add_user`], [`SplitHub::add_user`]). A container is ready when the image's
//! HEALTHCHECK (`snug-hub healthcheck`) passes.
//!
//! ```no_run
//! use snug_testcontainers::{HubImage, HubOptions, Service, SplitHub};
//!
//! # async fn example() -> Result<(), snug_testcontainers::Error> {
//! snug_testcontainers::docker_available().await?;
//! let image = HubImage::resolve().await?; // SNUG_HUB_IMAGE, or built from this checkout
//! let hub = SplitHub::start(&image, HubOptions::default()).await?;
//! let token = hub.add_user("alice").await?;
//! // HTTP at hub.gateway_url() with `Authorization: Bearer {token}`; gRPC at
//! // hub.grpc_endpoint(Service::Sync), e.g. "http://127.0.0.1:49153", with
//! // `authorization: Bearer {hub.service_token()}` (the services require it).
//! hub.stop_service(Service::Sync).await?; // PUT /userdb now answers 503
//! hub.start_service(Service::Sync).await?; // and succeeds again, the revisions kept
//! # let _ = token;
//! # Ok(())
//! # }
//! ```
//!
//! Containers are removed (with their volumes) when the value that owns them is dropped, which
//! must happen inside the Tokio runtime that started them; the network goes with the last
//! container. Every container carries the label [`LABEL`], so what a killed test run left behind
//! can be found and removed (`docker rm -f $(docker ps -aq --filter label=org.snug-hub.testcontainers)`).
//!
//! Deliberately not here: PostgreSQL for the sync service (the embedded store is what a volume
//! keeps), TLS, and any registry: images are built locally, never pulled.

use std::{
    collections::BTreeMap,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use testcontainers::{
    ContainerAsync, ContainerRequest, GenericBuildableImage, GenericImage, Image as _,
    ImageExt as _, TestcontainersError, bollard,
    core::{
        BuildImageOptions, CmdWaitFor, ExecCommand, Healthcheck, IntoContainerPort as _, WaitFor,
    },
    runners::{AsyncBuilder as _, AsyncRunner as _},
};

mod image;
mod split;

pub use image::HubImage;
use image::workspace_root;
pub use split::SplitHub;

/// The label on every container this crate starts.
pub const LABEL: &str = "org.snug-hub.testcontainers";

/// The repository name of images built by [`HubImage::build_from_checkout`].
pub const IMAGE_NAME: &str = "snug-hub";

/// The environment variable naming an existing image (`name:tag`) for [`HubImage::resolve`].
pub const IMAGE_ENV: &str = "SNUG_HUB_IMAGE";

/// The gRPC port every service listens on inside its container.
pub const GRPC_PORT: u16 = 50051;

/// The gateway's HTTP port inside its container.
pub const HTTP_PORT: u16 = 8080;

/// The repository name of the test PostgreSQL image ([`HubImage::postgres_from_checkout`]).
pub const POSTGRES_IMAGE_NAME: &str = "snug-postgres";

/// The repository name of the Garage image ([`HubImage::garage_from_checkout`]).
pub const GARAGE_IMAGE_NAME: &str = "snug-garage";

/// The bucket the Garage container of a [`SyncBackend::PostgresObjects`] deployment makes.
pub const BUCKET: &str = "snug-hub";

/// The key prefix under which the sync service keeps its pack objects in [`BUCKET`].
pub const OBJECTS_PREFIX: &str = "objects";

/// The S3 region the Garage container answers to (its `s3_region`); SigV4 signatures name it.
pub const S3_REGION: &str = "garage";

/// Why a hub could not be built, started or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Docker Engine cannot be reached.
    #[error("Docker is not available: {0}")]
    DockerUnavailable(String),
    /// A Docker call failed.
    #[error("docker: {0}")]
    Docker(#[from] TestcontainersError),
    /// `deploy/build-image.sh` failed, or said something unexpected.
    #[error("building the image failed: {0}")]
    Build(String),
    /// `SNUG_HUB_IMAGE` is not `name:tag`.
    #[error("{IMAGE_ENV}={0:?} is not an image reference like snug-hub:dev")]
    BadImageReference(String),
    /// A command run inside a container failed.
    #[error("`{command}` in {container} exited with {code:?}: {stderr}")]
    Exec {
        /// The container.
        container: String,
        /// The command line.
        command: String,
        /// Its exit code, when it had one.
        code: Option<i64>,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A container did not pass its health check in time.
    #[error("{container} did not become healthy within {waited:?}; last probe: {last}")]
    NotHealthy {
        /// The container.
        container: String,
        /// How long it was given.
        waited: Duration,
        /// The health check's last output.
        last: String,
    },
    /// A container has no host port for a port it should publish.
    #[error("{container} publishes no host port for {port}")]
    NoHostPort {
        /// The container.
        container: String,
        /// The port inside it.
        port: u16,
    },
    /// The deployment has no such store container (it uses the embedded store).
    #[error("this deployment has no {0:?} container (its sync backend is embedded)")]
    NoStoreContainer(Backing),
    /// A local file operation failed (the build context).
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// Checks that a Docker Engine answers, at `DOCKER_HOST` or the default socket.
pub async fn docker_available() -> Result<(), Error> {
    let docker = bollard::Docker::connect_with_defaults()
        .map_err(|err| Error::DockerUnavailable(err.to_string()))?;
    match tokio::time::timeout(Duration::from_secs(10), docker.ping()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(Error::DockerUnavailable(err.to_string())),
        Err(_) => Err(Error::DockerUnavailable(
            "no answer to a ping within 10 s".to_owned(),
        )),
    }
}

/// How to start a hub.
#[derive(Debug, Clone)]
pub struct HubOptions {
    /// Browser origins the gateway allows (`SNUG_CORS_ORIGINS`); authentication is on in a
    /// container, and the gateway refuses to start without at least one.
    pub cors_origins: Vec<String>,
    /// Extra environment for every hub container (e.g. `SNUG_RPC_DEADLINE`,
    /// `SNUG_SYNC_QUOTA_BYTES`); not for the PostgreSQL and Garage containers.
    pub env: BTreeMap<String, String>,
    /// Extra environment for one service's container, applied after `env`.
    pub service_env: BTreeMap<Service, BTreeMap<String, String>>,
    /// How long a container may take to become healthy.
    pub startup_timeout: Duration,
    /// Where a [`SplitHub`]'s sync service keeps its revisions ([`AllInOne`] always uses the
    /// embedded store).
    pub sync_backend: SyncBackend,
    /// An [`AllInOne`] with a writable root file system, as a plain `docker run IMAGE serve`
    /// starts it; every container is read-only otherwise.
    pub writable_root: bool,
    /// The gateway's rate limits as the image ships them (on, since auth is on in a container);
    /// off by default (`SNUG_RATE_LIMIT_BURST=0`), since an integration suite sends bursts from
    /// one address. `env` can set the limits either way.
    pub rate_limits: bool,
    /// An [`AllInOne`]'s memory limit in bytes (`docker run --memory`, swap included); none by
    /// default.
    pub memory_limit: Option<i64>,
}

impl Default for HubOptions {
    fn default() -> Self {
        Self {
            cors_origins: vec!["https://app.example".to_owned()],
            env: BTreeMap::new(),
            service_env: BTreeMap::new(),
            startup_timeout: Duration::from_secs(60),
            sync_backend: SyncBackend::Embedded,
            writable_root: false,
            rate_limits: false,
            memory_limit: None,
        }
    }
}

impl HubOptions {
    /// Adds an environment variable for every container.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// The environment every hub container gets: `env`, with rate limits off unless asked for,
    /// and the gRPC services on the container's network requiring the deployment's
    /// `service_token` (which the gateway presents).
    fn hub_env(&self, service_token: &str) -> BTreeMap<String, String> {
        let mut env = self.env.clone();
        env.insert("SNUG_LISTEN".to_owned(), format!("0.0.0.0:{GRPC_PORT}"));
        env.insert("SNUG_SERVICE_TOKEN".to_owned(), service_token.to_owned());
        if !self.rate_limits {
            env.entry("SNUG_RATE_LIMIT_BURST".to_owned())
                .or_insert_with(|| "0".to_owned());
        }
        env
    }

    /// Chooses where a [`SplitHub`]'s sync service keeps its revisions.
    pub fn with_sync_backend(mut self, sync_backend: SyncBackend) -> Self {
        self.sync_backend = sync_backend;
        self
    }

    /// Adds an environment variable for one service's container.
    pub fn with_service_env(
        mut self,
        service: Service,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.service_env
            .entry(service)
            .or_default()
            .insert(name.into(), value.into());
        self
    }
}

/// One container of a split deployment: what `snug-hub serve <service>` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Service {
    /// `snug.container.v1`.
    Container,
    /// `snug.schema.v1`.
    Schema,
    /// `snug.materialize.v1`.
    Materialize,
    /// `snug.sync.v1`, with the embedded store on its `/data` volume.
    Sync,
    /// The HTTP gateway, reaching the others over the deployment's network.
    Gateway,
}

impl Service {
    /// Every service, the gateway last.
    pub const ALL: [Service; 5] = [
        Service::Container,
        Service::Schema,
        Service::Materialize,
        Service::Sync,
        Service::Gateway,
    ];

    /// The name `snug-hub serve` takes.
    pub fn name(self) -> &'static str {
        match self {
            Service::Container => "container",
            Service::Schema => "schema",
            Service::Materialize => "materialize",
            Service::Sync => "sync",
            Service::Gateway => "gateway",
        }
    }

    /// The port this service listens on inside its container.
    pub fn port(self) -> u16 {
        if self == Service::Gateway {
            HTTP_PORT
        } else {
            GRPC_PORT
        }
    }
}

/// Where the sync service of a [`SplitHub`] keeps its revisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SyncBackend {
    /// The embedded SQLite store on the sync container's `/data` volume.
    #[default]
    Embedded,
    /// PostgreSQL for the metadata and an S3 bucket for the image bytes (pack objects), as a
    /// replicated deployment keeps them: a PostgreSQL container and a Garage container
    /// ([`Backing`]) on the deployment's network, healthy before the hub's containers start.
    /// The sync service is pointed at them by name (`SNUG_SYNC_STORE=postgres`,
    /// `SNUG_SYNC_POSTGRES_URL`, `SNUG_SYNC_OBJECTS=s3://`[`BUCKET`]`/`[`OBJECTS_PREFIX`] and
    /// the `AWS_*` settings of the bucket's endpoint, region and key).
    PostgresObjects,
}

/// A container the sync service's store runs in, beside the hub's own
/// ([`SyncBackend::PostgresObjects`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Backing {
    /// PostgreSQL 15 ([`POSTGRES_IMAGE_NAME`]), superuser `postgres`, every connection trusted:
    /// test tooling on the deployment's private network only.
    Postgres,
    /// A single-node Garage ([`GARAGE_IMAGE_NAME`]) holding [`BUCKET`].
    Garage,
}

impl Backing {
    /// Both, in the order they are described.
    pub const ALL: [Backing; 2] = [Backing::Postgres, Backing::Garage];

    /// The suffix of its container's name.
    pub fn name(self) -> &'static str {
        match self {
            Backing::Postgres => "postgres",
            Backing::Garage => "garage",
        }
    }

    /// The port it serves inside its container: PostgreSQL's, or Garage's S3 API.
    pub fn port(self) -> u16 {
        match self {
            Backing::Postgres => 5432,
            Backing::Garage => 3900,
        }
    }

    /// The image's own HEALTHCHECK command, run to wait for a restarted container.
    fn probe(self) -> &'static [&'static str] {
        match self {
            Backing::Postgres => &[
                "/usr/lib/postgresql/15/bin/pg_isready",
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                "5432",
                "-U",
                "postgres",
                "-d",
                "postgres",
            ],
            Backing::Garage => &["/garage", "health", "-q"],
        }
    }
}

/// The bucket of a [`SyncBackend::PostgresObjects`] deployment and the key that owns it, for a
/// test that looks at the objects itself (at [`SplitHub::s3_endpoint`]).
#[derive(Clone, PartialEq, Eq)]
pub struct Objects {
    /// The bucket, [`BUCKET`].
    pub bucket: String,
    /// The key prefix of the pack objects, [`OBJECTS_PREFIX`].
    pub prefix: String,
    /// The region requests are signed for, [`S3_REGION`].
    pub region: String,
    /// The access key id (`GK` and 24 hex digits, Garage's format), made for this deployment.
    pub access_key_id: String,
    /// Its secret, made for this deployment.
    pub secret_access_key: String,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

/// What a command run inside a container printed.
#[derive(Debug, Clone)]
pub struct ExecOutput {
    /// The exit code.
    pub code: i64,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// A unique name part for one deployment, so concurrent suites never share a name.
fn deployment_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{:x}-{:x}{:x}",
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// `bytes` random bytes from the kernel, as hex: the secrets of one deployment's Garage.
fn random_hex(bytes: usize) -> Result<String, Error> {
    use std::io::Read as _;
    let mut buffer = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buffer)?;
    Ok(buffer.iter().map(|b| format!("{b:02x}")).collect())
}

/// The PostgreSQL and Garage images of this checkout, built (or found by their content tags)
/// once per process: each build script copies some 100 MB, and nothing it reads changes while
/// a suite runs.
async fn store_images() -> Result<(HubImage, HubImage), Error> {
    static IMAGES: tokio::sync::OnceCell<(HubImage, HubImage)> = tokio::sync::OnceCell::const_new();
    IMAGES
        .get_or_try_init(|| async {
            let root = workspace_root();
            futures::try_join!(
                HubImage::postgres_from_checkout(&root),
                HubImage::garage_from_checkout(&root)
            )
        })
        .await
        .cloned()
}

/// The container request every container of this crate shares (the hub's and the stores'):
/// hardening, port publishing on 127.0.0.1 only, and readiness by the image's own HEALTHCHECK.
/// An empty `cmd` keeps the image's CMD.
fn container_request(
    image: &HubImage,
    container_name: &str,
    cmd: Vec<String>,
    env: &BTreeMap<String, String>,
    ports: &[u16],
    startup_timeout: Duration,
    memory_limit: Option<i64>,
) -> ContainerRequest<GenericImage> {
    let mut generic =
        GenericImage::new(image.name(), image.tag()).with_wait_for(WaitFor::healthcheck());
    for port in ports {
        generic = generic.with_exposed_port(port.tcp());
    }
    // The image's HEALTHCHECK command with a test-friendly cadence: every half second rather than
    // every ten, and patient enough that a slow first start is not declared unhealthy.
    let health = Healthcheck::empty()
        .with_interval(Duration::from_millis(500))
        .with_timeout(Duration::from_secs(4))
        .with_retries(20)
        .with_start_period(startup_timeout);
    let bindings: Vec<u16> = ports.to_vec();
    let mut request = generic
        .with_container_name(container_name)
        .with_label(LABEL, "1")
        // Read-only, and nothing at /tmp: the hub writes only to its volume.
        .with_readonly_rootfs(true)
        .with_cap_drop("ALL")
        .with_security_opt("no-new-privileges")
        .with_health_check(health)
        .with_startup_timeout(startup_timeout)
        // testcontainers publishes every exposed port on all interfaces; these containers publish
        // theirs on loopback only, each on a port Docker picks.
        .with_host_config_modifier(move |host_config| {
            // Swap included: a limited container must not page its way past the limit.
            host_config.memory = memory_limit;
            host_config.memory_swap = memory_limit;
            host_config.publish_all_ports = Some(false);
            host_config.port_bindings = Some(
                bindings
                    .iter()
                    .map(|port| {
                        (
                            format!("{port}/tcp"),
                            Some(vec![bollard::models::PortBinding {
                                host_ip: Some(Ipv4Addr::LOCALHOST.to_string()),
                                host_port: Some(String::new()),
                            }]),
                        )
                    })
                    .collect(),
            );
        });
    if !cmd.is_empty() {
        request = request.with_cmd(cmd);
    }
    for (name, value) in env {
        request = request.with_env_var(name, value);
    }
    request
}

/// Runs `argv` in `container` and waits for it to exit.
async fn exec(
    container: &ContainerAsync<GenericImage>,
    name: &str,
    argv: &[&str],
) -> Result<ExecOutput, Error> {
    let command =
        ExecCommand::new(argv.iter().copied()).with_cmd_ready_condition(CmdWaitFor::exit());
    let mut result = container.exec(command).await?;
    let stdout = String::from_utf8_lossy(&result.stdout_to_vec().await?).into_owned();
    let stderr = String::from_utf8_lossy(&result.stderr_to_vec().await?).into_owned();
    let code = result.exit_code().await?.ok_or_else(|| Error::Exec {
        container: name.to_owned(),
        command: argv.join(" "),
        code: None,
        stderr: stderr.clone(),
    })?;
    Ok(ExecOutput {
        code,
        stdout,
        stderr,
    })
}

/// `snug-hub users add NAME` in `container`; returns the bearer token it printed.
async fn add_user(
    container: &ContainerAsync<GenericImage>,
    container_name: &str,
    user: &str,
) -> Result<String, Error> {
    let argv = ["/snug-hub", "users", "add", user];
    let output = exec(container, container_name, &argv).await?;
    let token = output.stdout.trim();
    if output.code != 0 || token.is_empty() || token.contains(char::is_whitespace) {
        return Err(Error::Exec {
            container: container_name.to_owned(),
            command: argv.join(" "),
            code: Some(output.code),
            stderr: output.stderr,
        });
    }
    Ok(token.to_owned())
}

/// Runs `probe` (an image's HEALTHCHECK command) in `container` until it exits 0.
async fn wait_healthy(
    container: &ContainerAsync<GenericImage>,
    name: &str,
    probe: &[&str],
    timeout: Duration,
) -> Result<(), Error> {
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < timeout {
        match exec(container, name, probe).await {
            Ok(output) if output.code == 0 => return Ok(()),
            Ok(output) => last = format!("{}{}", output.stdout, output.stderr),
            Err(err) => last = err.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(Error::NotHealthy {
        container: name.to_owned(),
        waited: timeout,
        last,
    })
}

/// The host port Docker published `port` on.
async fn host_port(
    container: &ContainerAsync<GenericImage>,
    name: &str,
    port: u16,
) -> Result<u16, Error> {
    container
        .get_host_port_ipv4(port.tcp())
        .await
        .map_err(|err| match err {
            TestcontainersError::PortNotExposed { .. } => Error::NoHostPort {
                container: name.to_owned(),
                port,
            },
            other => Error::Docker(other),
        })
}

/// Everything the container printed, for a failing test's message.
async fn logs(container: &ContainerAsync<GenericImage>) -> String {
    let stdout = container.stdout_to_vec().await.unwrap_or_default();
    let stderr = container.stderr_to_vec().await.unwrap_or_default();
    format!(
        "{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    )
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// `snug-hub serve` in one container: every gRPC service and the HTTP gateway.
pub struct AllInOne {
    name: String,
    container: ContainerAsync<GenericImage>,
    http_port: u16,
    grpc_port: u16,
    service_token: String,
}

impl AllInOne {
    /// Starts the whole hub and waits until its health check passes.
    pub async fn start(image: &HubImage, options: HubOptions) -> Result<Self, Error> {
        let name = format!("snug-hub-{}", deployment_id());
        let service_token = random_hex(32)?;
        let mut env = options.hub_env(&service_token);
        env.insert(
            "SNUG_CORS_ORIGINS".to_owned(),
            options.cors_origins.join(","),
        );
        let request = container_request(
            image,
            &name,
            vec!["serve".to_owned()],
            &env,
            &[GRPC_PORT, HTTP_PORT],
            options.startup_timeout,
            options.memory_limit,
        )
        .with_readonly_rootfs(!options.writable_root);
        let container = request.start().await?;
        let http_port = host_port(&container, &name, HTTP_PORT).await?;
        let grpc_port = host_port(&container, &name, GRPC_PORT).await?;
        Ok(Self {
            name,
            container,
            http_port,
            grpc_port,
            service_token,
        })
    }

    /// The service token every gRPC call must present (`authorization: Bearer <token>`), but
    /// health checks.
    pub fn service_token(&self) -> &str {
        &self.service_token
    }

    /// The gateway's base URL, e.g. `http://127.0.0.1:49154`.
    pub fn url(&self) -> String {
        format!("http://{}", self.http_addr())
    }

    /// The gateway's address on the host.
    pub fn http_addr(&self) -> SocketAddr {
        loopback(self.http_port)
    }

    /// The gRPC endpoint of every service, e.g. `http://127.0.0.1:49153`.
    pub fn grpc_endpoint(&self) -> String {
        format!("http://{}", self.grpc_addr())
    }

    /// The gRPC address on the host.
    pub fn grpc_addr(&self) -> SocketAddr {
        loopback(self.grpc_port)
    }

    /// Adds a user with `snug-hub users add` and returns their bearer token.
    pub async fn add_user(&self, user: &str) -> Result<String, Error> {
        add_user(&self.container, &self.name, user).await
    }

    /// Runs a command inside the container (the image has no shell: `argv[0]` is a path, such
    /// as `/snug-hub`).
    pub async fn exec(&self, argv: &[&str]) -> Result<ExecOutput, Error> {
        exec(&self.container, &self.name, argv).await
    }

    /// The container's name.
    pub fn container_name(&self) -> &str {
        &self.name
    }

    /// The container's id.
    pub fn container_id(&self) -> &str {
        self.container.id()
    }

    /// What the container printed so far.
    pub async fn logs(&self) -> String {
        logs(&self.container).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_parse() {
        let parsed = |text: &str| {
            HubImage::parse(text)
                .map(|image| image.reference())
                .map_err(|err| err.to_string())
        };
        assert_eq!(parsed("snug-hub:dev"), Ok("snug-hub:dev".to_owned()));
        assert_eq!(
            parsed("registry.local:5000/team/snug-hub:ctx-0123"),
            Ok("registry.local:5000/team/snug-hub:ctx-0123".to_owned())
        );
        let image = HubImage::parse("registry.local:5000/snug-hub:v1").expect("parses");
        assert_eq!(
            (image.name(), image.tag()),
            ("registry.local:5000/snug-hub", "v1")
        );
        for bad in [
            "snug-hub",
            "registry.local:5000/snug-hub",
            ":dev",
            "snug-hub:",
            "snug hub:dev",
            "",
        ] {
            assert!(parsed(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn deployment_ids_differ() {
        let ids: std::collections::BTreeSet<String> = (0..100).map(|_| deployment_id()).collect();
        assert_eq!(ids.len(), 100);
    }

    #[test]
    fn every_service_has_its_serve_name_and_port() {
        let names: Vec<(&str, u16)> = Service::ALL.iter().map(|s| (s.name(), s.port())).collect();
        assert_eq!(
            names,
            [
                ("container", 50051),
                ("schema", 50051),
                ("materialize", 50051),
                ("sync", 50051),
                ("gateway", 8080)
            ]
        );
    }
}
