//! The Garage image (`deploy/build-garage-image.sh`, FROM scratch around the installed binary):
//! built from the binary the harness finds, started read-only as uid 65532 with every capability
//! dropped, it makes its layout, key and bucket, and answers on its S3 and admin ports, which are
//! published on 127.0.0.1 only.
//!
//! Skips (visibly) without Docker or without a `garage` binary, unless `SNUG_REQUIRE_DOCKER=1`
//! or `SNUG_REQUIRE_GARAGE=1` (both set by `.ci/run`).

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use snug_test_support::garage::{BUCKET, Garage, INSTALLED};

#[test]
fn the_garage_image_starts_and_answers_on_its_s3_port() {
    let Some(binary) = prerequisites() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let built = Command::new("bash")
        .arg(root.join("deploy/build-garage-image.sh"))
        .arg("snug-garage:dev")
        .arg(&binary)
        .output()
        .expect("run deploy/build-garage-image.sh");
    let stdout = String::from_utf8_lossy(&built.stdout);
    assert!(
        built.status.success(),
        "build-garage-image.sh: {stdout}\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let image = stdout
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("build-garage-image.sh printed {stdout:?}"));

    let started = Instant::now();
    let container = Container::run(&[
        "--read-only",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        // Docker's own label of what snug-testcontainers starts: .ci/run removes leftovers.
        "--label",
        "org.snug-hub.testcontainers=garage-image",
        "-p",
        "127.0.0.1::3900",
        "-p",
        "127.0.0.1::3903",
        "-e",
        &format!("GARAGE_RPC_SECRET={}", "5a".repeat(32)),
        "-e",
        "GARAGE_DEFAULT_ACCESS_KEY=GK0123456789abcdef01234567",
        "-e",
        &format!("GARAGE_DEFAULT_SECRET_KEY={}", "ab".repeat(32)),
        "-e",
        &format!("GARAGE_DEFAULT_BUCKET={BUCKET}"),
        image,
    ]);
    let s3 = container.port("3900/tcp");
    let admin = container.port("3903/tcp");
    assert!(s3.ip().is_loopback() && admin.ip().is_loopback());
    loop {
        if http_get(admin, "/health").is_some_and(|answer| answer.starts_with("HTTP/1.1 200")) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the Garage container did not become healthy; its log:\n{}",
            container.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // An unsigned request reaches the S3 API, which refuses it in S3's own words.
    let answer = http_get(s3, &format!("/{BUCKET}/")).expect("the S3 port answers");
    assert!(
        answer.starts_with("HTTP/1.1 403") && answer.contains("AccessDenied"),
        "{answer}"
    );
    // The CLI in the image reaches the server over the container's loopback RPC port.
    let info = docker(&["exec", &container.id, "/garage", "bucket", "info", BUCKET]);
    assert!(
        info.contains("GK0123456789abcdef01234567"),
        "garage bucket info: {info}"
    );
    eprintln!("garage image: {image} served in {:?}", started.elapsed());
}

/// The garage binary, or `None` (after saying why on stderr) when Docker or the binary is
/// missing and may be.
fn prerequisites() -> Option<PathBuf> {
    let docker = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output();
    if !docker.as_ref().is_ok_and(|output| output.status.success()) {
        let required = std::env::var("SNUG_REQUIRE_DOCKER").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "SNUG_REQUIRE_DOCKER=1 but no Docker Engine: {docker:?}"
        );
        let _ = writeln!(
            std::io::stderr(),
            "the_garage_image_starts_and_answers_on_its_s3_port SKIPPED: no Docker Engine \
             (SNUG_REQUIRE_DOCKER=1 makes this a failure)"
        );
        return None;
    }
    let binary = Garage::binary();
    if binary.is_none() {
        let required = std::env::var("SNUG_REQUIRE_GARAGE").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "SNUG_REQUIRE_GARAGE=1 but no garage binary ({INSTALLED})"
        );
        let _ = writeln!(
            std::io::stderr(),
            "the_garage_image_starts_and_answers_on_its_s3_port SKIPPED: no garage binary \
             (SNUG_REQUIRE_GARAGE=1 makes this a failure)"
        );
    }
    binary
}

/// A running container, removed (with its anonymous volume) on drop.
struct Container {
    id: String,
}

impl Container {
    fn run(args: &[&str]) -> Self {
        let mut all = vec!["run", "-d"];
        all.extend_from_slice(args);
        Self {
            id: docker(&all).trim().to_owned(),
        }
    }

    /// The host address Docker published `port` on.
    fn port(&self, port: &str) -> SocketAddr {
        let published = docker(&["port", &self.id, port]);
        let first = published.lines().next().unwrap_or_default();
        first
            .parse()
            .unwrap_or_else(|err| panic!("docker port {port}: {published:?}: {err}"))
    }

    fn logs(&self) -> String {
        let output = Command::new("docker")
            .args(["logs", &self.id])
            .output()
            .expect("docker logs");
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", "-v", &self.id])
            .output();
    }
}

/// Runs `docker ARGS`, asserts success and returns its stdout.
#[track_caller]
fn docker(args: &[&str]) -> String {
    let output = Command::new("docker")
        .args(args)
        .output()
        .expect("run docker");
    assert!(
        output.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The whole answer to `GET path` over HTTP/1.1 (`Connection: close`), or `None` when nothing
/// answers.
fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let timeout = Duration::from_secs(2);
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer).filter(|answer| !answer.is_empty())
}
