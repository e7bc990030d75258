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

/// A Snug Hub image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubImage {
    name: String,
    tag: String,
}

impl HubImage {
    /// An image that exists locally (nothing is ever pulled).
    pub fn new(name: impl Into<String>, tag: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            tag: tag.into(),
        }
    }

    /// Parses `name:tag` (a registry host with a port is fine: the tag is after the last `:`
    /// that follows the last `/`).
    pub fn parse(reference: &str) -> Result<Self, Error> {
        let bad = || Error::BadImageReference(reference.to_owned());
        let slash = reference.rfind('/').map_or(0, |i| i + 1);
        let colon = reference[slash..]
            .rfind(':')
            .map(|i| slash + i)
            .ok_or_else(bad)?;
        let (name, tag) = (&reference[..colon], &reference[colon + 1..]);
        if name.is_empty() || tag.is_empty() || reference.chars().any(char::is_whitespace) {
            return Err(bad());
        }
        Ok(Self::new(name, tag))
    }

    /// The image `SNUG_HUB_IMAGE` names when it is set, otherwise the image of this checkout
    /// ([`HubImage::build_from_checkout`] on the workspace this crate was built from).
    pub async fn resolve() -> Result<Self, Error> {
        match std::env::var(IMAGE_ENV) {
            Ok(reference) if !reference.trim().is_empty() => Self::parse(reference.trim()),
            _ => Self::build_from_checkout(&workspace_root()).await,
        }
    }

    /// Builds the image of the checkout at `root` unless an identical one exists.
    ///
    /// `deploy/build-image.sh --context` builds the static binary (incrementally, in its own
    /// target directory) and writes the build context, printing a digest of it; the image is
    /// tagged with that digest, so an existing image with the tag is exactly this source and is
    /// reused, and any change to the binary, the Dockerfile or the context makes a new one.
    /// The build itself is testcontainers' (BuildKit through the Engine API), and pulls nothing.
    pub async fn build_from_checkout(root: &Path) -> Result<Self, Error> {
        build_from_context_script(root, "deploy/build-image.sh", IMAGE_NAME).await
    }

    /// Builds the test PostgreSQL image of the checkout at `root` ([`POSTGRES_IMAGE_NAME`],
    /// `deploy/build-postgres-image.sh --context`: Debian's PostgreSQL 15 installed on this
    /// machine, FROM scratch, with a cluster that trusts every connection) unless an identical one
    /// exists, as [`HubImage::build_from_checkout`] does.
    pub async fn postgres_from_checkout(root: &Path) -> Result<Self, Error> {
        build_from_context_script(root, "deploy/build-postgres-image.sh", POSTGRES_IMAGE_NAME).await
    }

    /// Builds the Garage image of the checkout at `root` ([`GARAGE_IMAGE_NAME`],
    /// `deploy/build-garage-image.sh --context`, around the `garage` binary at
    /// `$SNUG_TEST_GARAGE`, else the one `.ci/run` installs) unless an identical one exists, as
    /// [`HubImage::build_from_checkout`] does.
    pub async fn garage_from_checkout(root: &Path) -> Result<Self, Error> {
        build_from_context_script(root, "deploy/build-garage-image.sh", GARAGE_IMAGE_NAME).await
    }

    /// The repository name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tag.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// `name:tag`.
    pub fn reference(&self) -> String {
        format!("{}:{}", self.name, self.tag)
    }
}

/// Runs `script --context DIR` in the checkout at `root`, which writes an image's build context
/// and prints its content tag, and builds `name:<tag>` from that context unless it exists.
async fn build_from_context_script(
    root: &Path,
    script: &str,
    name: &str,
) -> Result<HubImage, Error> {
    let context = tempfile::Builder::new()
        .prefix(&format!("{name}-image-"))
        .tempdir()?;
    let path = root.join(script);
    let dir = context.path().to_path_buf();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .arg(&path)
            .arg("--context")
            .arg(&dir)
            // cargo's progress goes straight to the test's stderr: a first build takes minutes.
            .stderr(std::process::Stdio::inherit())
            .output()
    })
    .await
    .map_err(|err| Error::Build(format!("the build task failed: {err}")))??;
    if !output.status.success() {
        return Err(Error::Build(format!(
            "{script} --context exited with {}",
            output.status
        )));
    }
    let tag = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let well_formed = tag.len() == 20
        && tag.starts_with("ctx-")
        && tag[4..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !well_formed {
        return Err(Error::Build(format!(
            "{script} printed {tag:?}, not a content tag"
        )));
    }
    let mut buildable = GenericBuildableImage::new(name, tag.as_str());
    for entry in std::fs::read_dir(context.path())? {
        let entry = entry?;
        let file = entry.file_name().to_string_lossy().into_owned();
        buildable = if file == "Dockerfile" {
            buildable.with_dockerfile(entry.path())
        } else {
            buildable.with_file(entry.path(), format!("./{file}"))
        };
    }
    let built = buildable
        .build_image_with(BuildImageOptions::new().with_skip_if_exists(true))
        .await?;
    Ok(HubImage::new(built.name(), built.tag()))
}

/// The workspace this crate belongs to (two levels above `shared/testcontainers`).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
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

/// The container, schema, materialize and sync services and the gateway, each in its own
/// container on a network of their own.
pub struct SplitHub {
    network: String,
    names: BTreeMap<Service, String>,
    // Declared before `stores`, so dropped first: the sync service goes before its store.
    containers: BTreeMap<Service, ContainerAsync<GenericImage>>,
    /// Host ports, refreshed when a service starts again (Docker picks a new one).
    ports: Mutex<BTreeMap<Service, u16>>,
    /// Empty with the embedded store.
    stores: Stores,
    startup_timeout: Duration,
    service_token: String,
}

/// The PostgreSQL and Garage containers of a [`SyncBackend::PostgresObjects`] deployment.
#[derive(Default)]
struct Stores {
    names: BTreeMap<Backing, String>,
    containers: BTreeMap<Backing, ContainerAsync<GenericImage>>,
    /// Host ports, refreshed when a store starts again.
    ports: Mutex<BTreeMap<Backing, u16>>,
    objects: Option<Objects>,
    /// What the sync container is told about them.
    sync_env: BTreeMap<String, String>,
}

impl Stores {
    /// Starts PostgreSQL and Garage on `network` (both at once) and waits until both are
    /// healthy: the sync service connects to both as it starts, and exits if it cannot.
    async fn start(id: &str, network: &str, startup_timeout: Duration) -> Result<Self, Error> {
        let (postgres_image, garage_image) = store_images().await?;
        let names: BTreeMap<Backing, String> = Backing::ALL
            .iter()
            .map(|backing| (*backing, format!("snug-hub-{id}-{}", backing.name())))
            .collect();
        let objects = Objects {
            bucket: BUCKET.to_owned(),
            prefix: OBJECTS_PREFIX.to_owned(),
            region: S3_REGION.to_owned(),
            // Garage's own formats: `GK` and 24 hex digits, 64 hex digits.
            access_key_id: format!("GK{}", random_hex(12)?),
            secret_access_key: random_hex(32)?,
        };
        let garage_env = BTreeMap::from([
            // The node's RPC is on its own loopback; the secret only has to be the same across a
            // restart of this container, which keeps its environment.
            ("GARAGE_RPC_SECRET".to_owned(), random_hex(32)?),
            (
                "GARAGE_DEFAULT_ACCESS_KEY".to_owned(),
                objects.access_key_id.clone(),
            ),
            (
                "GARAGE_DEFAULT_SECRET_KEY".to_owned(),
                objects.secret_access_key.clone(),
            ),
            ("GARAGE_DEFAULT_BUCKET".to_owned(), objects.bucket.clone()),
        ]);
        let requests = Backing::ALL.map(|backing| {
            let (image, env) = match backing {
                Backing::Postgres => (&postgres_image, BTreeMap::new()),
                Backing::Garage => (&garage_image, garage_env.clone()),
            };
            container_request(
                image,
                &names[&backing],
                Vec::new(),
                &env,
                &[backing.port()],
                startup_timeout,
                None,
            )
            .with_network(network)
        });
        let started =
            futures::future::join_all(requests.into_iter().map(|request| request.start())).await;
        let mut containers = BTreeMap::new();
        for (backing, result) in Backing::ALL.iter().zip(started) {
            // A container that did start is removed when `containers` drops.
            containers.insert(*backing, result?);
        }
        let sync_env = BTreeMap::from([
            ("SNUG_SYNC_STORE".to_owned(), "postgres".to_owned()),
            (
                "SNUG_SYNC_POSTGRES_URL".to_owned(),
                // The test server has no certificate (ssl = off), so no TLS is asked for rather
                // than `prefer`'s offer refused on every connection.
                format!(
                    "postgres://postgres@{}:{}/postgres?sslmode=disable",
                    names[&Backing::Postgres],
                    Backing::Postgres.port()
                ),
            ),
            (
                "SNUG_SYNC_OBJECTS".to_owned(),
                format!("s3://{}/{}", objects.bucket, objects.prefix),
            ),
            (
                "AWS_ENDPOINT_URL".to_owned(),
                format!(
                    "http://{}:{}",
                    names[&Backing::Garage],
                    Backing::Garage.port()
                ),
            ),
            ("AWS_REGION".to_owned(), objects.region.clone()),
            (
                "AWS_ACCESS_KEY_ID".to_owned(),
                objects.access_key_id.clone(),
            ),
            (
                "AWS_SECRET_ACCESS_KEY".to_owned(),
                objects.secret_access_key.clone(),
            ),
            // Plain http to a name on the deployment's private network: the S3 client allows
            // it only to loopback unless told.
            ("AWS_ALLOW_HTTP".to_owned(), "true".to_owned()),
        ]);
        let stores = Self {
            names,
            containers,
            ports: Mutex::new(BTreeMap::new()),
            objects: Some(objects),
            sync_env,
        };
        for backing in Backing::ALL {
            stores.refresh_port(backing).await?;
        }
        Ok(stores)
    }

    /// The container of `backing`, or the error saying the deployment has none.
    fn container(&self, backing: Backing) -> Result<&ContainerAsync<GenericImage>, Error> {
        self.containers
            .get(&backing)
            .ok_or(Error::NoStoreContainer(backing))
    }

    async fn refresh_port(&self, backing: Backing) -> Result<u16, Error> {
        let port = host_port(
            self.container(backing)?,
            &self.names[&backing],
            backing.port(),
        )
        .await?;
        self.ports
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(backing, port);
        Ok(port)
    }

    fn port(&self, backing: Backing) -> Option<u16> {
        self.ports
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&backing)
            .copied()
    }
}

impl SplitHub {
    /// Starts the five containers (all at once) and waits until each one's health check passes;
    /// with [`SyncBackend::PostgresObjects`], starts the PostgreSQL and Garage containers first
    /// (building their images from this checkout unless they exist, once per process) and waits
    /// for them too.
    pub async fn start(image: &HubImage, options: HubOptions) -> Result<Self, Error> {
        let id = deployment_id();
        let network = format!("snug-hub-{id}");
        let stores = match options.sync_backend {
            SyncBackend::Embedded => Stores::default(),
            SyncBackend::PostgresObjects => {
                Stores::start(&id, &network, options.startup_timeout).await?
            }
        };
        let service_token = random_hex(32)?;
        let names: BTreeMap<Service, String> = Service::ALL
            .iter()
            .map(|service| (*service, format!("snug-hub-{id}-{}", service.name())))
            .collect();
        let requests = Service::ALL.map(|service| {
            let mut env = options.hub_env(&service_token);
            if service == Service::Gateway {
                for (variable, target) in [
                    ("SNUG_SYNC_ADDR", Service::Sync),
                    ("SNUG_MATERIALIZE_ADDR", Service::Materialize),
                ] {
                    env.insert(
                        variable.to_owned(),
                        format!("http://{}:{GRPC_PORT}", names[&target]),
                    );
                }
                env.insert(
                    "SNUG_CORS_ORIGINS".to_owned(),
                    options.cors_origins.join(","),
                );
            }
            if service == Service::Sync {
                env.extend(stores.sync_env.clone());
            }
            env.extend(
                options
                    .service_env
                    .get(&service)
                    .cloned()
                    .unwrap_or_default(),
            );
            let cmd = vec!["serve".to_owned(), service.name().to_owned()];
            container_request(
                image,
                &names[&service],
                cmd,
                &env,
                &[service.port()],
                options.startup_timeout,
                None,
            )
            .with_network(network.as_str())
        });
        // All at once: five sequential starts would each wait for the previous health check.
        let started =
            futures::future::join_all(requests.into_iter().map(|request| request.start())).await;
        let mut containers = BTreeMap::new();
        let mut first_error = None;
        for (service, result) in Service::ALL.iter().zip(started) {
            match result {
                Ok(container) => {
                    containers.insert(*service, container);
                }
                Err(err) => {
                    first_error.get_or_insert(Error::Docker(err));
                }
            }
        }
        // The containers that did start are removed when `containers` drops.
        if let Some(err) = first_error {
            return Err(err);
        }
        let hub = Self {
            network,
            names,
            containers,
            ports: Mutex::new(BTreeMap::new()),
            stores,
            startup_timeout: options.startup_timeout,
            service_token,
        };
        for service in Service::ALL {
            hub.refresh_port(service).await?;
        }
        Ok(hub)
    }

    async fn refresh_port(&self, service: Service) -> Result<u16, Error> {
        let port = host_port(
            &self.containers[&service],
            &self.names[&service],
            service.port(),
        )
        .await?;
        self.ports
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(service, port);
        Ok(port)
    }

    fn port(&self, service: Service) -> u16 {
        // Every service's port is recorded before `start` returns.
        self.ports
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&service)
            .copied()
            .unwrap_or(0)
    }

    /// The gateway's base URL, e.g. `http://127.0.0.1:49160`.
    pub fn gateway_url(&self) -> String {
        format!("http://{}", self.gateway_addr())
    }

    /// The gateway's address on the host.
    pub fn gateway_addr(&self) -> SocketAddr {
        loopback(self.port(Service::Gateway))
    }

    /// A service's gRPC endpoint on the host, e.g. `http://127.0.0.1:49153`; `None` for the
    /// gateway. It changes when the service is started again.
    pub fn grpc_endpoint(&self, service: Service) -> Option<String> {
        self.grpc_addr(service).map(|addr| format!("http://{addr}"))
    }

    /// A service's gRPC address on the host; `None` for the gateway.
    pub fn grpc_addr(&self, service: Service) -> Option<SocketAddr> {
        (service != Service::Gateway).then(|| loopback(self.port(service)))
    }

    /// The service token every gRPC call to a service must present (`authorization: Bearer
    /// <token>`), but health checks.
    pub fn service_token(&self) -> &str {
        &self.service_token
    }

    /// The deployment's Docker network.
    pub fn network(&self) -> &str {
        &self.network
    }

    /// A service's container name, which is also its host name on the network.
    pub fn container_name(&self, service: Service) -> &str {
        &self.names[&service]
    }

    /// A service's container id.
    pub fn container_id(&self, service: Service) -> &str {
        self.containers[&service].id()
    }

    /// Adds a user to the gateway with `snug-hub users add` and returns their bearer token.
    pub async fn add_user(&self, user: &str) -> Result<String, Error> {
        add_user(
            &self.containers[&Service::Gateway],
            &self.names[&Service::Gateway],
            user,
        )
        .await
    }

    /// Runs a command inside a service's container (`argv[0]` is a path, such as `/snug-hub`).
    pub async fn exec(&self, service: Service, argv: &[&str]) -> Result<ExecOutput, Error> {
        exec(&self.containers[&service], &self.names[&service], argv).await
    }

    /// Stops one service's container (SIGTERM, a graceful drain, SIGKILL after 10 s). Its
    /// volume stays; the others keep running.
    pub async fn stop_service(&self, service: Service) -> Result<(), Error> {
        self.containers[&service]
            .stop_with_timeout(Some(10))
            .await?;
        Ok(())
    }

    /// Starts a stopped service's container again and waits until its health check passes;
    /// its host port is read anew.
    pub async fn start_service(&self, service: Service) -> Result<(), Error> {
        let container = &self.containers[&service];
        container.start().await?;
        wait_healthy(
            container,
            &self.names[&service],
            &["/snug-hub", "healthcheck"],
            self.startup_timeout,
        )
        .await?;
        self.refresh_port(service).await?;
        Ok(())
    }

    /// Stops and starts one service.
    pub async fn restart_service(&self, service: Service) -> Result<(), Error> {
        self.stop_service(service).await?;
        self.start_service(service).await
    }

    /// What a service's container printed so far.
    pub async fn logs(&self, service: Service) -> String {
        logs(&self.containers[&service]).await
    }

    /// The sync service's store, [`SyncBackend::Embedded`] unless it runs on its own containers.
    pub fn sync_backend(&self) -> SyncBackend {
        if self.stores.containers.is_empty() {
            SyncBackend::Embedded
        } else {
            SyncBackend::PostgresObjects
        }
    }

    /// A store container's name, which is also its host name on the network; `None` with the
    /// embedded store.
    pub fn store_container_name(&self, backing: Backing) -> Option<&str> {
        self.stores.names.get(&backing).map(String::as_str)
    }

    /// The host address a store container's port is published on (127.0.0.1); `None` with the
    /// embedded store. It changes when the store is started again.
    pub fn store_addr(&self, backing: Backing) -> Option<SocketAddr> {
        self.stores.port(backing).map(loopback)
    }

    /// The PostgreSQL server's URL on the host, e.g.
    /// `postgres://postgres@127.0.0.1:49170/postgres?sslmode=disable` (no password: the test
    /// image trusts every connection).
    pub fn postgres_url(&self) -> Option<String> {
        self.store_addr(Backing::Postgres)
            .map(|addr| format!("postgres://postgres@{addr}/postgres?sslmode=disable"))
    }

    /// Garage's S3 endpoint on the host, e.g. `http://127.0.0.1:49171` (path-style requests).
    pub fn s3_endpoint(&self) -> Option<String> {
        self.store_addr(Backing::Garage)
            .map(|addr| format!("http://{addr}"))
    }

    /// The bucket and its key; `None` with the embedded store.
    pub fn objects(&self) -> Option<&Objects> {
        self.stores.objects.as_ref()
    }

    /// Runs a command inside a store container (no shell: `argv[0]` is a path, such as
    /// `/garage`, whose CLI reaches the node over the container's loopback).
    pub async fn exec_store(&self, backing: Backing, argv: &[&str]) -> Result<ExecOutput, Error> {
        exec(
            self.stores.container(backing)?,
            &self.stores.names[&backing],
            argv,
        )
        .await
    }

    /// Stops a store container (PostgreSQL's fast shutdown, Garage's SIGTERM; SIGKILL after
    /// 10 s). Its volume stays; the hub keeps running and answers `STORAGE_UNAVAILABLE` for
    /// what needs the store.
    pub async fn stop_store(&self, backing: Backing) -> Result<(), Error> {
        self.stores
            .container(backing)?
            .stop_with_timeout(Some(10))
            .await?;
        Ok(())
    }

    /// Starts a stopped store container again, over the same volume, and waits until its
    /// health check passes; its host port is read anew.
    pub async fn start_store(&self, backing: Backing) -> Result<(), Error> {
        let container = self.stores.container(backing)?;
        container.start().await?;
        wait_healthy(
            container,
            &self.stores.names[&backing],
            backing.probe(),
            self.startup_timeout,
        )
        .await?;
        self.stores.refresh_port(backing).await?;
        Ok(())
    }

    /// What a store container printed so far; empty with the embedded store.
    pub async fn store_logs(&self, backing: Backing) -> String {
        match self.stores.container(backing) {
            Ok(container) => logs(container).await,
            Err(_) => String::new(),
        }
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
