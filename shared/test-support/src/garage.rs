//! A real S3-compatible object store for tests: a single-node Garage on loopback ports.
//!
//! [`Garage::start_if_available`] finds the `garage` binary (`SNUG_TEST_GARAGE`, else `garage` on
//! `PATH`, else [`INSTALLED`], where `.ci/run` installs it), writes a configuration into a fresh
//! temporary directory, and starts `garage server` with its S3 API, RPC and admin API on free
//! `127.0.0.1` ports. It returns once the admin API's `/health` says the cluster is up and the S3
//! port accepts connections: the node then has its layout (zone `dc1`, one node), an access key
//! and a bucket the key may read, write and own.
//!
//! The layout, key and bucket are made by the server itself at start (`garage server
//! --single-node --default-bucket`, Garage 2.x, with the key and bucket named in
//! `GARAGE_DEFAULT_ACCESS_KEY`, `GARAGE_DEFAULT_SECRET_KEY` and `GARAGE_DEFAULT_BUCKET`), not by
//! five `garage` CLI calls after it: one process instead of six, idempotent on every restart, and
//! the same start the FROM-scratch image in `deploy/` makes, where there is no shell to run a CLI
//! from. [`Garage::cli`] runs the CLI against this node (`garage -c <its config>`) for whatever
//! a test wants to inspect or change.
//!
//! Faults: [`Garage::stop`] kills the server with SIGKILL (a crash: nothing is flushed or
//! drained) and keeps its directory; [`Garage::start`] starts it again on the same ports over the
//! same data. Dropping the [`Garage`] kills the server and removes the directory.
//!
//! Without a binary, [`Garage::start_if_available`] says so on stderr and returns `None`, unless
//! `SNUG_REQUIRE_GARAGE=1` (set by `.ci/run`), where it panics: the same rule as PostgreSQL's
//! `SNUG_TEST_POSTGRES_URL` and Docker's `SNUG_REQUIRE_DOCKER`. The S3 traffic itself (SigV4) is
//! the store's business; this module only starts, stops and describes the server.

use std::{
    fmt::Write as _,
    io::{Read as _, Write as _},
    net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use sha2::{Digest as _, Sha256};

/// Where `.ci/run` installs Garage (`cargo install garage --root /var/tmp/snug-hub-tools`).
pub const INSTALLED: &str = "/var/tmp/snug-hub-tools/bin/garage";

/// The S3 region the node answers to (its `s3_region`); SigV4 signatures name it.
pub const REGION: &str = "garage";

/// The bucket the node makes at start, readable, writable and owned by its key.
pub const BUCKET: &str = "snug-test";

/// How long a start may take before the harness gives up: a cold start takes well under a
/// second, but CI machines are shared.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One single-node Garage on loopback; see the module docs.
#[derive(Debug)]
pub struct Garage {
    binary: PathBuf,
    /// Holds `garage.toml`, `meta/`, `data/` and `server.log`; removed on drop.
    dir: tempfile::TempDir,
    s3: SocketAddr,
    rpc: SocketAddr,
    admin: SocketAddr,
    access_key_id: String,
    secret_access_key: String,
    server: Option<Child>,
}

impl Garage {
    /// The `garage` binary: `SNUG_TEST_GARAGE` (which must then exist), else `garage` on `PATH`,
    /// else [`INSTALLED`]; `None` when there is none.
    #[track_caller]
    pub fn binary() -> Option<PathBuf> {
        if let Some(path) = std::env::var_os("SNUG_TEST_GARAGE") {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "SNUG_TEST_GARAGE={} is not a file",
                path.display()
            );
            return Some(path);
        }
        let on_path = std::env::var_os("PATH")
            .into_iter()
            .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
            .map(|dir| dir.join("garage"))
            .find(|candidate| candidate.is_file());
        on_path.or_else(|| Some(PathBuf::from(INSTALLED)).filter(|path| path.is_file()))
    }

    /// Starts a Garage, or returns `None` (after saying why on stderr) when there is no binary
    /// and `SNUG_REQUIRE_GARAGE` is not `1`. Panics when the server does not come up.
    #[track_caller]
    pub fn start_if_available() -> Option<Self> {
        match Self::binary() {
            Some(binary) => Some(Self::launch(&binary)),
            None => {
                let required = std::env::var("SNUG_REQUIRE_GARAGE").is_ok_and(|v| v == "1");
                assert!(
                    !required,
                    "SNUG_REQUIRE_GARAGE=1 but no garage binary: set SNUG_TEST_GARAGE, put \
                     garage on PATH or install it to {INSTALLED} (.ci/run does)"
                );
                let test = std::thread::current().name().unwrap_or("test").to_owned();
                // Straight to the process's stderr, past the harness's capture: a skip must be seen.
                let _ = writeln!(
                    std::io::stderr(),
                    "{test} SKIPPED: no garage binary (SNUG_TEST_GARAGE, PATH, {INSTALLED}; \
                     SNUG_REQUIRE_GARAGE=1 makes this a failure)"
                );
                None
            }
        }
    }

    /// Starts a Garage from `binary` in a fresh directory on free loopback ports and waits until
    /// it serves. Panics (with the server's log) when it does not come up.
    #[track_caller]
    pub fn launch(binary: &Path) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("snug-garage-")
            .tempdir()
            .expect("temporary directory for garage");
        let [s3, rpc, admin] = free_ports();
        let seed = random_hex(dir.path());
        let mut garage = Self {
            binary: binary.to_owned(),
            // Garage's own formats: `GK` and 24 hex digits, 64 hex digits (any id of 8 or more
            // characters is accepted; these look like the keys `garage key create` makes).
            access_key_id: format!("GK{}", &seed[..24]),
            secret_access_key: random_hex(&dir.path().join("secret")),
            s3,
            rpc,
            admin,
            dir,
            server: None,
        };
        std::fs::write(garage.config(), garage.config_text(&seed)).expect("write garage.toml");
        garage.start();
        garage
    }

    /// The S3 endpoint, `http://127.0.0.1:PORT` (path-style requests: `/BUCKET/KEY`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.s3)
    }

    /// The S3 API's address.
    pub fn s3_addr(&self) -> SocketAddr {
        self.s3
    }

    /// The region requests are signed for, [`REGION`].
    pub fn region(&self) -> &str {
        REGION
    }

    /// The access key id of the key that owns [`Garage::bucket`].
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    /// That key's secret.
    pub fn secret_access_key(&self) -> &str {
        &self.secret_access_key
    }

    /// The bucket, [`BUCKET`].
    pub fn bucket(&self) -> &str {
        BUCKET
    }

    /// The standard variables an S3 client (and the hub) reads to reach this node:
    /// `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`.
    pub fn aws_env(&self) -> [(&'static str, String); 4] {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_REGION", REGION.to_owned()),
            ("AWS_ACCESS_KEY_ID", self.access_key_id.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret_access_key.clone()),
        ]
    }

    /// The node's directory (`garage.toml`, `meta/`, `data/`, `server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The configuration file the server and [`Garage::cli`] read.
    pub fn config(&self) -> PathBuf {
        self.dir.path().join("garage.toml")
    }

    /// Whether the server process runs (it may still be starting).
    pub fn is_running(&mut self) -> bool {
        match &mut self.server {
            Some(child) => child.try_wait().expect("poll garage").is_none(),
            None => false,
        }
    }

    /// Kills the server with SIGKILL, as a crash would, and waits for it; keeps its data. A
    /// no-op when it is not running.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server (again) on its ports over its data and waits until it serves; a no-op
    /// when it runs. Panics (with the server's log) when it does not come up.
    #[track_caller]
    pub fn start(&mut self) {
        if self.is_running() {
            return;
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open garage's log");
        let mut command = self.command();
        command
            .args(["server", "--single-node", "--default-bucket"])
            .env("GARAGE_DEFAULT_ACCESS_KEY", &self.access_key_id)
            .env("GARAGE_DEFAULT_SECRET_KEY", &self.secret_access_key)
            .env("GARAGE_DEFAULT_BUCKET", BUCKET)
            .env("RUST_LOG", "garage=info,warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log's handle"))
            .stderr(log);
        self.server = Some(command.spawn().unwrap_or_else(|err| {
            panic!("start {}: {err}", self.binary.display());
        }));
        self.wait_until_serving();
    }

    /// Runs `garage -c <config> ARGS` against this node and returns its output (whatever its exit
    /// code: a test asserts what it expects).
    #[track_caller]
    pub fn cli(&self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .output()
            .unwrap_or_else(|err| panic!("run {}: {err}", self.binary.display()))
    }

    /// The server's log so far (stdout and stderr of every start), for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// `garage -c <config>` with every `GARAGE_*` variable of the caller's environment removed, so
    /// that a developer's shell (an RPC host, a secret) cannot point it elsewhere.
    fn command(&self) -> Command {
        let mut command = Command::new(&self.binary);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("GARAGE_") {
                command.env_remove(name);
            }
        }
        command.arg("-c").arg(self.config());
        command
    }

    fn config_text(&self, seed: &str) -> String {
        let dir = self.dir.path();
        let quoted = |path: &Path| toml_string(&path.to_string_lossy());
        let mut text = String::new();
        // fsync off: a node lives as long as one test, and no test observes an OS crash (stop()
        // kills the process, whose writes the kernel still holds).
        let _ = write!(
            text,
            "metadata_dir = {meta}\n\
             data_dir = {data}\n\
             db_engine = \"sqlite\"\n\
             replication_factor = 1\n\
             metadata_fsync = false\n\
             data_fsync = false\n\
             disable_scrub = true\n\
             rpc_bind_addr = \"{rpc}\"\n\
             rpc_public_addr = \"{rpc}\"\n\
             rpc_secret = \"{rpc_secret}\"\n\
             bootstrap_peers = []\n\
             \n\
             [s3_api]\n\
             api_bind_addr = \"{s3}\"\n\
             s3_region = \"{REGION}\"\n\
             root_domain = \".s3.garage.localhost\"\n\
             \n\
             [admin]\n\
             api_bind_addr = \"{admin}\"\n\
             admin_token = \"{admin_token}\"\n",
            meta = quoted(&dir.join("meta")),
            data = quoted(&dir.join("data")),
            rpc = self.rpc,
            s3 = self.s3,
            admin = self.admin,
            rpc_secret = seed,
            admin_token = random_hex(&dir.join("admin")),
        );
        text
    }

    #[track_caller]
    fn wait_until_serving(&mut self) {
        let started = Instant::now();
        loop {
            if let Some(child) = &mut self.server
                && let Some(status) = child.try_wait().expect("poll garage")
            {
                self.server = None;
                panic!(
                    "garage exited at start ({status}); its log:\n{}",
                    self.log()
                );
            }
            // /health is unauthenticated and answers 200 once every partition has its quorum:
            // here, once the single-node layout (made before the APIs start) is in place.
            if http_status(self.admin, "/health") == Some(200)
                && TcpStream::connect_timeout(&self.s3, Duration::from_secs(1)).is_ok()
            {
                return;
            }
            if started.elapsed() > START_TIMEOUT {
                self.stop();
                panic!(
                    "garage did not serve on {} within {START_TIMEOUT:?}; its log:\n{}",
                    self.s3,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        // Before the directory goes (the fields drop after this).
        self.stop();
    }
}

/// Three free loopback ports, held open together so they differ, then released for the server.
/// Another process may take one in between; the start then fails with the bind error in the log.
fn free_ports() -> [SocketAddr; 3] {
    let bind = || {
        TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port")
    };
    let listeners = [bind(), bind(), bind()];
    listeners.map(|listener| listener.local_addr().expect("local address"))
}

/// 64 hex digits no other call returns: SHA-256 of the time, the process, a counter and `salt`.
/// A test secret, not a key anyone must fail to guess; it saves a dependency on a CSPRNG crate.
fn random_hex(salt: &Path) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = Sha256::new();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    hasher.update(nanos.to_le_bytes());
    hasher.update(std::process::id().to_le_bytes());
    hasher.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    hasher.update(salt.as_os_str().as_encoded_bytes());
    hex::encode(hasher.finalize())
}

/// A TOML basic string.
fn toml_string(value: &str) -> String {
    let mut quoted = String::from("\"");
    for c in value.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// The status code of `GET path` on `addr` over HTTP/1.0, or `None` when nothing answers.
fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let timeout = Duration::from_secs(1);
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut head = [0_u8; 12];
    stream.read_exact(&mut head).ok()?;
    // "HTTP/1.x NNN"
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}
