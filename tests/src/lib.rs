//! Snug Hub's cross-crate tests live in `tests/tests/`; this library holds what they share: the
//! whole hub started in-process (the schema, sync and materialize services over gRPC on loopback, the HTTP
//! gateway in front, composed as `snug-hub serve` composes them) and a small HTTP client that
//! checks every answer against the served OpenAPI document.
//!
//! Other crates' tests use it too (the `snug sync` client's tests in `services/cli`).
//!
//! The environment of the tests and benchmarks (`tests/tests/tidy.rs` checks this table against
//! the code; the hub's own variables are in `services/hub/src/main.rs`, the CLI's in
//! `services/cli/src/main.rs`):
//!
//! | variable | meaning |
//! |---|---|
//! | `SNUG_VECTORS_DIR` | the reference vectors (default `../shared/vectors/reference`) |
//! | `SNUG_TEST_POSTGRES_URL` | a PostgreSQL server for the PostgreSQL cases; without it they skip |
//! | `SNUG_TEST_GARAGE` | the `garage` binary the object-store cases start (default: `garage` on `PATH`, else `/var/tmp/snug-hub-tools/bin/garage`); without one they skip |
//! | `SNUG_REQUIRE_GARAGE` | `1`: the object-store cases fail without a `garage` binary instead of skipping |
//! | `SNUG_TEST_PG_BIN` | PostgreSQL's server binaries (`initdb`, `pg_ctl`) for the revstore fault test that restarts a private cluster (default: the newest `/usr/lib/postgresql/*/bin`); without them it skips, or fails under `SNUG_REQUIRE_GARAGE=1` |
//! | `SNUG_TEST_POSTGRES_CA` | the CA file of that server, whose certificate names DNS `localhost` only and which admits role `snug_tls_only` over TLS only (as `.ci/run` sets it up): the revstore TLS cases; without it they skip |
//! | `SNUG_REQUIRE_POSTGRES_TLS` | `1`: the revstore TLS cases fail without `SNUG_TEST_POSTGRES_CA` instead of skipping |
//! | `SNUG_TEST_PYTHON` | the Python with schemathesis, grpcio-tools and the Python package's build and test requirements (default: the `k8s/validate.sh` venv) |
//! | `SNUG_K8S_VENV` | where `k8s/validate.sh` keeps that venv (default `/var/tmp/snug-hub-venv`) |
//! | `SNUG_REQUIRE_DOCKER` | `1`: the container suites fail without Docker instead of skipping |
//! | `SNUG_REQUIRE_GRPCIO_TOOLS` | `1`: the Python client suites (`python_client.rs`, `python_package.rs`) fail without grpcio-tools and the package's requirements |
//! | `SNUG_TEST_CHROMIUM` | the Chromium (or Chrome) binary the browser tests drive (default: `chromium`, `chromium-browser`, `google-chrome` or `google-chrome-stable` on `PATH`); without one they skip |
//! | `SNUG_REQUIRE_BROWSER` | `1`: the browser tests fail without Chromium instead of skipping |
//! | `SNUG_REQUIRE_SCHEMATHESIS` | `1`: the schemathesis suite fails without schemathesis |
//! | `SNUG_HUB_IMAGE` | test this image (`name:tag`) instead of building one |
//! | `SNUG_REVSTORE_CRASH_CHILD` | internal: marks the revstore crash test's child process |
//! | `SNUG_BENCH_RUNS` | container benches: measured runs per row |
//! | `SNUG_BENCH_CHILD`, `SNUG_BENCH_FILE` | internal: the container bench's child process and its input |
//! | `SNUG_BENCH_DIR` | revstore bench: where its stores are made (default: the temp dir) |
//! | `SNUG_BENCH_BIG_GET_ROUNDS` | gateway bench: rounds of the 64 MiB GET row |
//! | `SNUG_BENCH_LINK` | delta bench: `1` times the pushes over an emulated 100 Mbit/s, 20 ms RTT link |
//! | `SNUG_BENCH_EVENTS_ROWS` | events bench: only the rows named (`poll`, `idle`, `polling`, `delivery`, comma-separated) |
//! | `SNUG_BENCH_DELTA_HUB`, `SNUG_BENCH_DELTA_LINK` | internal: the delta bench's hub and link-relay child processes |
//!
//! # Design notes
//!
//! (Moved from ARCHITECTURE.md, which stays a map.)
//!
//! The hub as it ships is tested through `snug-testcontainers`: `tests/tests/containers.rs` runs the
//! /userdb conformance cases against the split deployment's gateway port, stops the schema
//! container mid-run (503, nothing stored, recovery) and restarts the sync container between two
//! PUTs (the revision survives on its volume), and checks the all-in-one container runs read-only
//! as uid 65532; `tests/tests/python_client.rs` generates a Python client from `proto/` with
//! grpcio-tools (`tests/python/`) and calls the container, schema and sync containers with it, and
//! checks every proto field, RPC, enum value and error reason is documented;
//! `tests/tests/python_package.rs` installs the Python client package (`shared/clients/python`)
//! into a temporary directory with the CI virtualenv's pip (no network) and runs its pytest suite,
//! which starts the image through the package's own testcontainers module.
//! Without Docker (or grpcio-tools) these tests skip with a message on stderr; `.ci/run` sets
//! `SNUG_REQUIRE_DOCKER=1` and `SNUG_REQUIRE_GRPCIO_TOOLS=1` so CI fails instead, builds the static
//! binary and the image once before `cargo test` (in `SNUG_STATIC_TARGET_DIR`, default
//! `/work/target-static`), and installs grpcio-tools and googleapis-common-protos into the Python
//! virtualenv the tests find through `SNUG_TEST_PYTHON`. `SNUG_HUB_IMAGE=name:tag` tests an existing
//! image instead of building one.
//!
//! Unit tests sit beside the code; the shared reference vectors (`../shared/vectors/reference`,
//! override with `SNUG_VECTORS_DIR`) are read by the tests and a missing directory fails them.
//! Property tests cover round trips and tampering; the fuzz target covers the parser.
//! Services are tested in-process over loopback; the CLI by running the built binary.
//! The revstore conformance suite and the sync service's tests also run against PostgreSQL when
//! `SNUG_TEST_POSTGRES_URL` names a server (each test in a fresh schema), and skip visibly without
//! it; `.ci/run` starts a throwaway PostgreSQL 15 cluster on 127.0.0.1 (installing Debian's
//! `postgresql` package if needed) so CI always runs them.
//! Object storage is tested against a real Garage (`snug_test_support::garage`, one single-node
//! server per test on 127.0.0.1), found through `SNUG_TEST_GARAGE` and skipped visibly without
//! one; `.ci/run` installs Garage 2.5.0 into `/var/tmp/snug-hub-tools` (once, reused) and sets
//! `SNUG_REQUIRE_GARAGE=1`.
//! The sync service enables `snug-revstore/postgres`, so `cargo test --workspace` builds the
//! PostgreSQL cases through feature unification.
//! Crypto tests use a low PBKDF2 count except where a test is about the 600,000 default; dependencies
//! and `snug-container` are optimised even in dev builds (see `Cargo.toml`), because unoptimised
//! PBKDF2 is orders of magnitude slower.
//! The gateway's OpenAPI document is also fuzzed: `tests/tests/schemathesis.rs` starts the hub
//! in-process with one user and a pushed image, and runs schemathesis (pinned in `k8s/validate.sh`)
//! on the served document twice, with the user's bearer token and with none, over every operation
//! (coverage and fuzzing phases, a fixed seed, 100 cases per operation), with the checks for 5xx,
//! undocumented statuses, content types, headers and bodies, accepted schema-violating input, 405s
//! and their `Allow`, and ignored auth; a config file makes it sometimes use the real revision and
//! app ids so the 200 paths are reached.
//! It skips visibly without schemathesis unless `SNUG_REQUIRE_SCHEMATHESIS=1`, as `.ci/run` sets.
//! Benchmarks are not tests: they print figures with the named peer measured in the same run.
//!
//! How it works in detail: the module docs of `tests/src/lib.rs`.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use snug_files::sealed::Sealer;
use snug_gateway::config::{AuthMode, GatewayConfig};
use snug_rpc::{
    runtime::Runtime,
    server::{ServerConfig, Services},
};
use snug_sync_service::{SyncConfig, SyncServer};
use snug_users::{Directory, DirectoryConfig};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};

pub use snug_test_support::vectors_dir;

pub mod nginx;

/// Reads a user-database vector by file name.
pub fn userdb_vector(name: &str) -> Vec<u8> {
    std::fs::read(vectors_dir().join("userdb").join(name)).expect("vector file")
}

/// A valid, secrets-free user database of at most `len` bytes (and more than `len` less 16 KiB):
/// the reference's fresh export with settings rows of filler JSON strings
/// ([`snug_test_support::userdb::filled`]). Also returns where a
/// filler byte sits, so a caller can change one byte and still have a valid database.
pub fn userdb_with_filler(len: usize) -> (Vec<u8>, usize) {
    userdb_with_seeded_filler(len, 0x9e37_79b9_7f4a_7c15)
}

/// [`userdb_with_filler`] with filler made from `seed` (nonzero): different seeds give databases
/// that share no filler page.
pub fn userdb_with_seeded_filler(len: usize, seed: u64) -> (Vec<u8>, usize) {
    // In the form the hub stores, so that a test can compare what it gets back byte for byte.
    let bytes = stored_form(&snug_test_support::userdb::filled(len, seed));
    assert!(bytes.len() <= len, "{} bytes", bytes.len());
    // A filler character in the middle of the file: a hex digit inside a JSON string.
    let mid = bytes.len() / 2;
    let at = (mid..bytes.len())
        .find(|&i| bytes[i..i + 8].iter().all(u8::is_ascii_hexdigit))
        .expect("filler");
    (bytes, at)
}

/// How to start a hub.
#[derive(Debug, Clone)]
pub struct Options {
    /// Authentication on (tokens, sessions) or off (the local user).
    pub auth: AuthMode,
    /// Allowed browser origins.
    pub origins: Vec<String>,
    /// The per-user quota.
    pub quota_bytes: u64,
    /// The gateway's per-call deadline.
    pub deadline: Duration,
    /// The gateway calls the services in-process, as `snug-hub serve` does; `false`: over
    /// loopback gRPC, as a split deployment does (and as a test that stops the services needs).
    pub in_process: bool,
    /// Where the sync store keeps its files; `None`: in the hub's temporary directory. A test
    /// points it at a small file system of its own to fill the disk (`tests/full_disk.rs`).
    pub sync_dir: Option<std::path::PathBuf>,
    /// Keep only this many revisions, with no grace period, so a test's reclamation pass
    /// (`Hub::store().reclaim()`) takes the older ones at once; `None`: the defaults.
    pub keep_revisions: Option<u32>,
    /// The gateway's rate limits as the hub ships them (on with auth on); off otherwise, since
    /// a test suite sends bursts from one address.
    pub rate_limits: bool,
    /// Proxies whose `X-Forwarded-For` the gateway believes.
    pub trusted_proxies: Vec<String>,
    /// The services' upload budget (the sync service holds a pushed image in it while it
    /// validates it; the gateway holds none); `None`: the default.
    pub upload_budget: Option<snug_rpc::budget::UploadBudget>,
    /// The pace every upload must keep, at the gateway and in the services alike.
    pub upload_pace: snug_rpc::pace::Pace,
    /// Time for a connection's first request headers to arrive (from accept), or a kept-alive
    /// one's next request's.
    pub header_timeout: Duration,
    /// Time a connection may stay idle between requests.
    pub idle_timeout: Duration,
    /// Open connections at most, in all and from one address.
    pub max_connections: (usize, usize),
    /// OpenID Connect; a `public_url` left empty is the hub's own `http://127.0.0.1:PORT`.
    pub oidc: Option<snug_gateway::oidc::OidcArgs>,
    /// The service token the gRPC services require and the gateway presents.
    pub service_token: Option<snug_rpc::service_token::ServiceToken>,
    /// How long one event stream lasts (`SNUG_EVENTS_STREAM_LIFETIME`).
    pub events_stream_lifetime: Duration,
    /// The caps on open event streams (`SNUG_EVENTS_MAX_STREAMS…`).
    pub events_caps: snug_gateway::config::Caps,
    /// HTTP requests in flight at once (`SNUG_HTTP_CONCURRENCY_LIMIT`).
    pub http_concurrency_limit: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            auth: AuthMode::On,
            origins: vec!["https://app.example".to_owned()],
            quota_bytes: 64 * 1024 * 1024,
            deadline: Duration::from_secs(20),
            in_process: true,
            sync_dir: None,
            keep_revisions: None,
            rate_limits: false,
            trusted_proxies: Vec::new(),
            upload_budget: None,
            upload_pace: snug_rpc::pace::Pace::default(),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: (4096, 256),
            oidc: None,
            service_token: None,
            events_stream_lifetime: Duration::from_secs(300),
            events_caps: snug_gateway::config::Caps {
                max: 10_000,
                per_user: 32,
                per_address: 128,
            },
            http_concurrency_limit: 256,
        }
    }
}

/// An open event stream, read as a browser's `EventSource` reads one.
pub struct Events {
    /// The answer's status.
    pub status: u16,
    /// The answer's headers.
    pub headers: http::HeaderMap,
    body: hyper::body::Incoming,
    text: String,
}

/// One block of an event stream: `event` (`message` when it names none; `:` for a comment,
/// whose text is its `data`; `retry` for a reconnection hint), its `id` and its `data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sse {
    /// The event's type.
    pub event: String,
    /// Its `id:` line, if any.
    pub id: Option<String>,
    /// Its `data:` lines, joined.
    pub data: String,
}

impl Events {
    /// The next block within `within`; `None` when none came or the stream ended.
    pub async fn next(&mut self, within: Duration) -> Option<Sse> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(end) = self.text.find("\n\n") {
                let block: String = self.text.drain(..end + 2).collect();
                return Some(parse_sse(&block));
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .ok()??;
            if let Ok(data) = frame.expect("a frame").into_data() {
                self.text
                    .push_str(std::str::from_utf8(&data).expect("UTF-8 events"));
            }
        }
    }

    /// The stream's end: `true` when it ended within `within` with nothing more to read.
    pub async fn ended(&mut self, within: Duration) -> bool {
        self.next(within).await.is_none() && self.text.is_empty()
    }
}

fn parse_sse(block: &str) -> Sse {
    let mut sse = Sse {
        event: "message".to_owned(),
        id: None,
        data: String::new(),
    };
    for line in block.lines().filter(|line| !line.is_empty()) {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "" => {
                sse.event = ":".to_owned();
                sse.data = value.to_owned();
            }
            "event" => sse.event = value.to_owned(),
            "id" => sse.id = Some(value.to_owned()),
            "data" if sse.data.is_empty() => sse.data = value.to_owned(),
            "data" => {
                sse.data.push('\n');
                sse.data.push_str(value);
            }
            "retry" => {
                sse.event = "retry".to_owned();
                sse.data = value.to_owned();
            }
            _ => {}
        }
    }
    sse
}

/// A running hub.
pub struct Hub {
    /// The gateway's address.
    pub http: SocketAddr,
    /// The services' gRPC address.
    pub grpc: SocketAddr,
    /// The gateway's users directory (auth on): its SQLite file's directory.
    users: Option<PathBuf>,
    sync: SyncServer,
    service_token: Option<snug_rpc::service_token::ServiceToken>,
    grpc_task: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    _http_task: JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Hub {
    /// Starts the services and the gateway on ephemeral loopback ports, with data in a new
    /// temporary directory.
    pub async fn start(options: Options) -> Hub {
        let dir = tempfile::tempdir().expect("tempdir");
        let http_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let http = http_listener.local_addr().expect("addr");
        let oidc = options.oidc.clone().map(|mut oidc| {
            oidc.public_url
                .get_or_insert_with(|| format!("http://{http}"));
            oidc
        });
        let config = GatewayConfig {
            oidc: oidc.unwrap_or_default(),
            auth: Some(options.auth),
            cors_origins: options.origins.clone(),
            rpc_deadline: options.deadline,
            rpc_connect_timeout: Duration::from_millis(500),
            session_secret: Some("an e2e session secret of more than 32 chars".to_owned()),
            rate_limit_burst: (!options.rate_limits).then_some(0),
            trusted_proxies: options.trusted_proxies.clone(),
            http_header_timeout: options.header_timeout,
            http_idle_timeout: options.idle_timeout,
            http_max_connections: options.max_connections.0,
            http_max_connections_per_address: options.max_connections.1,
            events_stream_lifetime: options.events_stream_lifetime,
            events_max_streams: options.events_caps.max,
            events_max_streams_per_user: options.events_caps.per_user,
            events_max_streams_per_address: options.events_caps.per_address,
            http_concurrency_limit: options.http_concurrency_limit,
            ..GatewayConfig::for_tests()
        };
        // As `snug-hub serve` composes them: one sealer for the store and the gateway. Each hub
        // has its own, so hubs running side by side share no sealed buffers or budget.
        let sealer = Sealer::new(config.zero_copy_cache_bytes());
        let sync_runtime = Runtime {
            upload_budget: options
                .upload_budget
                .clone()
                .unwrap_or_default()
                .paced(options.upload_pace),
            sealer: sealer.clone(),
            dir: options
                .sync_dir
                .clone()
                .unwrap_or_else(|| dir.path().join("sync")),
        };
        let sync_config = SyncConfig {
            quota_bytes: options.quota_bytes,
            reclaim_interval: Duration::ZERO,
            ..SyncConfig::default()
        };
        let sync_config = match options.keep_revisions {
            Some(keep) => SyncConfig {
                keep_revisions: keep,
                grace: Duration::ZERO,
                ..sync_config
            },
            None => sync_config,
        };
        let store = snug_sync_service::open_store(&sync_config, &sync_runtime)
            .await
            .expect("sync store");
        let sync = SyncServer::new(store, &sync_config, &sync_runtime);
        let grpc_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let grpc = grpc_listener.local_addr().expect("addr");
        let grpc_task = Some(spawn_services(
            grpc_listener,
            sync.clone(),
            options.service_token.clone(),
        ));

        let gateway_dir = dir.path().join("gateway");
        let addresses = if options.in_process {
            let services = services(sync.clone());
            snug_gateway::Addresses::in_process(
                snug_rpc::server::local(&ServerConfig::for_tests(), services).await,
            )
        } else {
            snug_gateway::Addresses::all(&format!("http://{grpc}"))
        };
        let runtime = snug_gateway::Runtime {
            sealer,
            upload_pace: options.upload_pace,
            service_token: options.service_token.clone(),
        };
        let state = snug_gateway::build(&config, gateway_dir.clone(), addresses, runtime)
            .await
            .expect("gateway");
        let users = (options.auth == AuthMode::On).then_some(gateway_dir);
        let http_task = tokio::spawn(async move {
            let _ = snug_gateway::serve(state, http_listener, std::future::pending()).await;
        });
        Hub {
            http,
            grpc,
            users,
            sync,
            service_token: options.service_token,
            grpc_task,
            _http_task: http_task,
            _dir: dir,
        }
    }

    /// The sync service's store, for tests that reclaim or inspect it directly.
    pub fn store(&self) -> &snug_revstore::AnyStore {
        self.sync.store()
    }

    /// Adds a user (auth on) and returns a bearer token for them.
    pub fn add_user(&self, name: &str) -> String {
        let name = name.to_owned();
        self.with_users(async move |users| users.add_user(&name).await.expect("add user").1.token)
    }

    /// Removes the user named `name` with their tokens (auth on).
    pub fn remove_user(&self, name: &str) {
        let name = name.to_owned();
        self.with_users(async move |users| {
            users.remove_user(&name).await.expect("remove user");
        });
        heard();
    }

    /// Every user of the directory with their tokens and identities (auth on).
    pub fn list_users(&self) -> Vec<snug_users::UserInfo> {
        self.with_users(async move |users| users.list().await.expect("list"))
    }

    /// Disables the user named `name` (auth on).
    pub fn disable_user(&self, name: &str) {
        let name = name.to_owned();
        self.with_users(async move |users| {
            users.disable(&name).await.expect("disable user");
        });
        heard();
    }

    /// Enables the user named `name` again (auth on).
    pub fn enable_user(&self, name: &str) {
        let name = name.to_owned();
        self.with_users(async move |users| {
            users.enable(&name).await.expect("enable user");
        });
    }

    /// Issues another token for the user named `name` (auth on): its text and its short id.
    pub fn issue_token(&self, name: &str) -> (String, String) {
        let name = name.to_owned();
        self.with_users(async move |users| {
            let issued = users.issue_token(&name).await.expect("issue token");
            (issued.token, issued.id)
        })
    }

    /// Revokes the token with this short id (auth on), as `snug-hub users revoke-token` does.
    pub fn revoke_token(&self, id: &str) {
        let id = id.to_owned();
        self.with_users(async move |users| {
            users.revoke_token(&id).await.expect("revoke token");
        });
        heard();
    }

    /// The id of the user named `name` (auth on).
    pub fn user_id(&self, name: &str) -> String {
        let name = name.to_owned();
        self.with_users(async move |users| {
            users
                .list()
                .await
                .expect("list")
                .into_iter()
                .find(|u| u.user.name == name)
                .expect("a user of that name")
                .user
                .id
        })
    }

    /// Runs `f` on the gateway's users directory from synchronous test code, on a runtime of its
    /// own (so it works whatever runtime, if any, the caller is on), as `snug-hub users` would.
    /// Runs `f` on the users directory as another process does (`snug-hub users …`): the
    /// running hub hears a change that takes access away within `snug_users::SQLITE_EVERY`, so
    /// the helpers that make one return after twice that.
    fn with_users<T: Send>(&self, f: impl AsyncFnOnce(&Directory) -> T + Send) -> T {
        let dir = self.users.clone().expect("auth on");
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime");
                    runtime.block_on(async move {
                        let users = Directory::open(&DirectoryConfig::Sqlite { dir })
                            .await
                            .expect("users directory");
                        f(&users).await
                    })
                })
                .join()
                .expect("users thread")
        })
    }

    /// The directory holding everything the hub stores (the sync store's files, the gateway's).
    pub fn data_dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// The gateway's base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.http)
    }

    /// Stops the gRPC services (the gateway keeps running): a killed service.
    pub async fn stop_services(&mut self) {
        if let Some((stop, task)) = self.grpc_task.take() {
            let _ = stop.send(());
            let _ = task.await;
        }
    }

    /// Starts the services again on the same port, over the same store.
    pub async fn restart_services(&mut self) {
        let listener = loop {
            // The old listener's port is free once its task ended; binding can still race the
            // kernel briefly.
            match TcpListener::bind(self.grpc).await {
                Ok(listener) => break listener,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        self.grpc_task = Some(spawn_services(
            listener,
            self.sync.clone(),
            self.service_token.clone(),
        ));
    }
}

/// The services a test hub runs (all but the container service, which the gateway never calls).
fn services(sync: SyncServer) -> Services {
    let runtime = Runtime::default();
    snug_schema_service::services(&Default::default(), &runtime)
        .with(
            snug_sync_service::service(sync),
            &[snug_sync_service::observe::classify],
        )
        .with(
            snug_materialize_service::service(snug_materialize_service::MaterializeServer::new(
                &Default::default(),
                &runtime,
            )),
            &[],
        )
}

/// Serves the schema, sync (over `sync`) and materialize services on `listener`, requiring
/// `token` when given, until the returned sender is used or dropped: the gRPC side of a split
/// hub, for tests that put gateways of their own in front of it.
pub fn spawn_services(
    listener: TcpListener,
    sync: SyncServer,
    token: Option<snug_rpc::service_token::ServiceToken>,
) -> (oneshot::Sender<()>, JoinHandle<()>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let services = services(sync);
    let config = ServerConfig {
        shutdown_grace: Duration::from_millis(200),
        service_token: token,
        ..ServerConfig::for_tests()
    };
    let task = tokio::spawn(async move {
        let _ = snug_rpc::server::serve(&config, listener, services, async {
            let _ = stopped.await;
        })
        .await;
    });
    (stop, task)
}

/// An HTTP answer, whole.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: http::HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Answer {
    /// A header's value as text ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {:?}", String::from_utf8_lossy(&self.body)))
    }

    /// The JSON error `code`.
    pub fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or("").to_owned()
    }

    /// The `Set-Cookie` headers as (name, value, attributes).
    pub fn set_cookies(&self) -> Vec<(String, String, String)> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .map(|v| {
                let text = v.to_str().expect("ascii");
                let (pair, attributes) = text.split_once(';').unwrap_or((text, ""));
                let (name, value) = pair.split_once('=').expect("name=value");
                (name.to_owned(), value.to_owned(), attributes.to_owned())
            })
            .collect()
    }

    /// The value a `Set-Cookie` header gives cookie `name`; panics when none does.
    pub fn cookie(&self, name: &str) -> String {
        let cookies = self.set_cookies();
        cookies
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, value, _)| value.clone())
            .unwrap_or_else(|| panic!("no {name} cookie in {cookies:?}"))
    }
}

/// A request body: whole (with `Content-Length`) or streamed in pieces (chunked, no length).
pub enum Payload {
    /// No body.
    Empty,
    /// The bytes, with their length declared.
    Whole(Vec<u8>),
    /// The bytes sent as a stream of pieces of this size, length undeclared.
    Streamed(Vec<u8>, usize),
}

type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

/// An HTTP/1.1 client that checks each answer's status against the OpenAPI document.
#[derive(Clone)]
pub struct Http {
    base: String,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Body>,
    openapi: Arc<serde_json::Value>,
}

impl Http {
    /// A client for the gateway at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            base: format!("http://{addr}"),
            client: Client::builder(TokioExecutor::new()).build_http(),
            openapi: Arc::new(
                serde_json::from_str(snug_gateway::routes::OPENAPI).expect("openapi"),
            ),
        }
    }

    /// Sends a request and reads the whole answer.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        payload: Payload,
    ) -> Answer {
        let body: Body = match payload {
            Payload::Empty => Full::new(Bytes::new()).boxed(),
            Payload::Whole(bytes) => Full::new(Bytes::from(bytes)).boxed(),
            Payload::Streamed(bytes, piece) => {
                let pieces: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = bytes
                    .chunks(piece.max(1))
                    .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                    .collect();
                StreamBody::new(futures::stream::iter(pieces)).boxed()
            }
        };
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self
            .client
            .request(request.body(body).expect("request"))
            .await
            .expect("HTTP request");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let answer = Answer {
            status,
            headers,
            body,
        };
        self.check_documented(method, path, &answer);
        answer
    }

    /// Opens `GET /userdb/events` with `headers`: the status and headers at once, the events as
    /// they come ([`Events`]).
    pub async fn events(&self, headers: &[(&str, &str)]) -> Events {
        let mut request = http::Request::builder()
            .method("GET")
            .uri(format!("{}/userdb/events", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self
            .client
            .request(
                request
                    .body(Full::new(Bytes::new()).boxed())
                    .expect("request"),
            )
            .await
            .expect("HTTP request");
        Events {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.into_body(),
            text: String::new(),
        }
    }

    /// Asserts the answer's status is one the OpenAPI document lists for the operation.
    fn check_documented(&self, method: &str, path: &str, answer: &Answer) {
        let method = method.to_ascii_lowercase();
        let path = path.split('?').next().unwrap_or(path);
        let template = if path
            .strip_prefix("/userdb/revisions/")
            .and_then(|rest| rest.strip_suffix("/restore"))
            .is_some()
        {
            "/userdb/revisions/{rev}/restore"
        } else if path
            .strip_prefix("/userdb/revisions/")
            .and_then(|rest| rest.strip_suffix("/plan"))
            .is_some()
        {
            "/userdb/revisions/{rev}/plan"
        } else if path
            .strip_prefix("/userdb/apps/")
            .and_then(|rest| rest.strip_suffix("/export"))
            .is_some()
        {
            "/userdb/apps/{appId}/export"
        } else if path
            .strip_prefix("/userdb/revisions/")
            .is_some_and(|rest| !rest.contains('/'))
        {
            "/userdb/revisions/{rev}"
        } else {
            path
        };
        // Preflights and unrouted paths are not operations of the API.
        if method == "options" {
            return;
        }
        let Some(operation) = self.openapi["paths"]
            .get(template)
            .and_then(|p| p.get(&method))
        else {
            assert!(
                answer.status == 404 || answer.status == 405,
                "{method} {path}: not in the OpenAPI document, yet answered {}",
                answer.status
            );
            return;
        };
        let documented = operation["responses"]
            .get(answer.status.to_string())
            .is_some();
        assert!(
            documented,
            "{method} {template} answered {} which the OpenAPI document does not list",
            answer.status
        );
    }
}

/// The Python the suites drive (`SNUG_TEST_PYTHON`, else the CI virtualenv
/// `${SNUG_K8S_VENV:-/var/tmp/snug-hub-venv}` that `k8s/validate.sh` fills), if it can
/// `import` every module of `imports`. Otherwise: a failure when the environment variable
/// `required_by` is `1` (CI sets it), else `None` after saying on the process's stderr (past the
/// harness's capture, so a skip is seen) that `test` skipped and why.
pub fn test_python(test: &str, imports: &str, missing: &str, required_by: &str) -> Option<PathBuf> {
    use std::io::Write as _;
    let python = match std::env::var_os("SNUG_TEST_PYTHON") {
        Some(python) => PathBuf::from(python),
        None => std::env::var_os("SNUG_K8S_VENV")
            .map_or_else(|| PathBuf::from("/var/tmp/snug-hub-venv"), PathBuf::from)
            .join("bin/python"),
    };
    let found = std::process::Command::new(&python)
        .args(["-c", &format!("import {imports}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if found {
        return Some(python);
    }
    let why = format!(
        "no {missing} for {} (set SNUG_TEST_PYTHON to a Python that has it, or run k8s/validate.sh to fill the CI virtualenv)",
        python.display()
    );
    let required = std::env::var(required_by).is_ok_and(|v| v == "1");
    assert!(!required, "{required_by}=1 but {why}");
    let _ = writeln!(std::io::stderr(), "{test} SKIPPED: {why}");
    None
}

/// The revision in a strong, quoted `ETag` (asserting that form).
#[track_caller]
pub fn etag_revision(answer: &Answer) -> String {
    let etag = answer.header("etag");
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && etag.len() > 2,
        "a strong quoted ETag: {etag:?}"
    );
    etag.trim_matches('"').to_owned()
}

/// Asserts the refusal of a stale `If-Match`: a stale-revision code, and the current revision
/// in the ETag and the body.
#[track_caller]
pub fn assert_stale_revision(stale: &Answer, current: &str) {
    assert!(
        matches!(
            stale.code().as_str(),
            "STALE_REVISION" | "REVISION_MISMATCH"
        ),
        "{}",
        stale.code()
    );
    assert_eq!(stale.header("etag"), format!("\"{current}\""));
    assert_eq!(stale.json()["revision"], current);
}

/// Asserts an error answer: `status`, and the JSON `{code, message, retryable}` with `code`.
#[track_caller]
pub fn assert_error(answer: &Answer, status: u16, code: &str) {
    assert_eq!(
        answer.status,
        status,
        "{:?}",
        String::from_utf8_lossy(&answer.body)
    );
    assert!(
        answer
            .header("content-type")
            .starts_with("application/json")
    );
    let json = answer.json();
    assert_eq!(json["code"], code, "{json}");
    assert!(
        json["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{json}"
    );
    assert!(json["retryable"].is_boolean(), "{json}");
}

/// `Content-Type: application/octet-stream`, the one type `PUT /userdb` takes.
pub const OCTET: (&str, &str) = ("content-type", "application/octet-stream");

/// Reads (and discards what the server sends: an HTTP/2 server's SETTINGS, a GOAWAY) until the
/// server closes `stream`; resolves to when, or `None` if it is still open at `give_up`.
pub fn closed_at(
    mut stream: tokio::net::TcpStream,
    give_up: Duration,
) -> tokio::task::JoinHandle<Option<std::time::Instant>> {
    use tokio::io::AsyncReadExt as _;
    tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        let read_all = async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return std::time::Instant::now(),
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(give_up, read_all).await.ok()
    })
}

/// The `Authorization` value for a bearer token.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// `image` as the hub stores and serves it: its SQLite free space zeroed, the one rewrite of a
/// pushed image (ValidateSyncImage); an image already in that form is stored as sent.
pub fn stored_form(image: &[u8]) -> Vec<u8> {
    snug_schema::scrub_free_space(image).expect("a walkable SQLite image")
}

/// `PUT /userdb` with `token`, one precondition header and `body`.
pub async fn put_userdb(
    http: &Http,
    token: &str,
    condition: (&str, &str),
    body: Vec<u8>,
) -> Answer {
    http.send(
        "PUT",
        "/userdb",
        &[("authorization", &bearer(token)), OCTET, condition],
        Payload::Whole(body),
    )
    .await
}

/// [`put_userdb`] repeated while it is a 503, for up to a minute: a restarted service or store
/// is reached again on the gateway's or the store client's next connection attempt.
pub async fn put_userdb_until_served(
    http: &Http,
    token: &str,
    condition: (&str, &str),
    body: &[u8],
) -> Answer {
    let started = std::time::Instant::now();
    loop {
        let answer = put_userdb(http, token, condition, body.to_vec()).await;
        if answer.status != 503 || started.elapsed() > std::time::Duration::from_secs(60) {
            return answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// `GET /userdb` with `token`.
pub async fn get_userdb(http: &Http, token: &str) -> Answer {
    http.send(
        "GET",
        "/userdb",
        &[("authorization", &bearer(token))],
        Payload::Empty,
    )
    .await
}

/// The user id the gateway gave `name` (auth on).
pub fn user_id(hub: &Hub, name: &str) -> String {
    hub.user_id(name)
}

/// Writes `bytes` as `user`'s first image straight into the hub's sync store, past the
/// validation every write through the sync service passes (an image a hub stored before it
/// checked what it now refuses, or one restored from a backup): the store records what it is
/// given, and the gateway reports what the store recorded. Returns the revision.
pub async fn push_unvalidated(hub: &Hub, user: &str, bytes: Vec<u8>) -> String {
    use snug_revstore::{Precondition, Principal, PutRequest, RevStore as _, UserId};
    let user = UserId::new(user).expect("user id");
    hub.store().provision_user(&user).await.expect("provision");
    let request = PutRequest {
        user,
        precondition: Precondition::MustNotExist,
        principal: Principal::new("test/direct").expect("principal"),
        idempotency_key: None,
        expected_length: Some(bytes.len() as u64),
        quota_bytes: None,
    };
    let body = futures::stream::iter([Ok(bytes::Bytes::from(bytes))]);
    let outcome = hub.store().put(request, body).await.expect("put");
    outcome.info.revision.to_string()
}

/// Waits until a running hub has heard a change of its users directory made by another process
/// (the bound the directory states, `snug_users::SQLITE_EVERY`, twice over).
fn heard() {
    std::thread::sleep(2 * snug_users::SQLITE_EVERY);
}
