//! Test helpers the workspace's suites share; a dev-dependency only (tidy checks it).
//!
//! - [`vectors_dir`] and [`vector`]: the reference implementation's vectors, found through
//!   `SNUG_VECTORS_DIR` or beside the workspace (`../shared/vectors/reference`). A missing
//!   directory fails the test: a conformance suite that silently skips proves nothing.
//! - [`Snug`]: runs the built `snug` CLI with the caller's secrets cleared from its environment,
//!   and [`body`] / [`assert_refusal`] read its `--json` answers.
//! - [`sample_copy`]: a private copy of the reference's sample user database.
//! - [`query`], [`query_pairs`] and [`execute`]: one statement on a SQLite file; [`theme`]: the
//!   `theme` setting the sync suites edit on one device and look for on another.
//! - [`files`]: every file under a directory, for "no byte of X anywhere" checks.
//! - [`sha256_hex`]: a file's digest, for the "byte-identical afterwards" checks.
//! - [`userdb::filled`]: a valid user database of a chosen size, distinct per seed.
//! - [`garage::Garage`]: a real S3-compatible object store, a single-node Garage on loopback
//!   ports in a temporary directory, which a fault test can kill and start again.
//! - [`oidc::Issuer`]: a test OpenID Connect issuer (discovery, a JWKS with rotation, signed and
//!   forged tokens, the authorization-code flow with PKCE) on a loopback port.
//! - [`tmpfs::Tmpfs`]: a small `tmpfs` mounted for a test (root only), a disk that really fills.
//! - [`browser::Browser`]: a headless Chromium driven over the DevTools protocol, for what only a
//!   real browser enforces (cookies, cross-origin redirects, CORS), and [`browser::Site`], a tiny
//!   HTTP server for the pages it loads.
//!
//! It deliberately does not start the hub's services: the in-process hub lives in `snug-e2e`, and
//! the service crates keep their own in-process harnesses. Garage is a backing service, like the
//! PostgreSQL `.ci/run` starts.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod browser;
pub mod garage;
pub mod oidc;
pub mod tmpfs;
pub mod userdb;

use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use sha2::{Digest as _, Sha256};

/// The PostgreSQL server of the PostgreSQL cases, `SNUG_TEST_POSTGRES_URL`; `None` (said on
/// stderr, so the skip is visible) without one. With `SNUG_REQUIRE_POSTGRES_TLS` set, as `.ci/run`
/// sets it, a missing server fails the test instead: CI never skips them.
#[track_caller]
pub fn postgres_url() -> Option<String> {
    match std::env::var("SNUG_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("SNUG_REQUIRE_POSTGRES_TLS").is_none(),
                "SNUG_REQUIRE_POSTGRES_TLS is set but SNUG_TEST_POSTGRES_URL is not"
            );
            eprintln!("postgres cases skipped: SNUG_TEST_POSTGRES_URL is not set");
            None
        }
    }
}

/// Returns the reference vectors directory: `SNUG_VECTORS_DIR`, else
/// `../shared/vectors/reference` relative to the workspace root. Panics when it is missing.
#[track_caller]
pub fn vectors_dir() -> PathBuf {
    let dir = std::env::var_os("SNUG_VECTORS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // This crate sits two folders below the workspace root.
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/vectors/reference")
        });
    assert!(
        dir.join("manifest.json").is_file(),
        "reference vectors not found at {} (set SNUG_VECTORS_DIR)",
        dir.display()
    );
    dir
}

/// Returns the path of `path` inside the reference vectors (`vector("userdb/sample-v6.user.snug")`).
#[track_caller]
pub fn vector(path: &str) -> PathBuf {
    vectors_dir().join(path)
}

/// The reference's sample user database (`userdb/sample-v6.user.snug`): two apps, two credentials.
pub const SAMPLE: &str = "userdb/sample-v6.user.snug";

/// Copies the reference's [`SAMPLE`] to `dir/name` and returns the copy's path: a private file a
/// test may change or a command may replace.
#[track_caller]
pub fn sample_copy(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::copy(vector(SAMPLE), &path).expect("copy the sample");
    path
}

/// Returns the hex SHA-256 of the file at `path`.
#[track_caller]
pub fn sha256_hex(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    hex::encode(Sha256::digest(bytes))
}

/// Returns the first column of every row `sql` yields from the SQLite file at `path`, opened
/// read-only.
#[track_caller]
pub fn query<T: rusqlite::types::FromSql>(path: &Path, sql: &str) -> Vec<T> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open");
    conn.prepare(sql)
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

/// Returns the first two columns of every row `sql` yields from the SQLite file at `path`.
#[track_caller]
pub fn query_pairs(path: &Path, sql: &str) -> Vec<(String, String)> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open");
    conn.prepare(sql)
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

/// Changes the user's content as an app would: the `theme` setting of the user database at
/// `path` becomes `value` (stored as JSON).
pub fn set_theme(path: &Path, value: &str) {
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.execute(
        "INSERT OR REPLACE INTO snug_settings (key, value) VALUES ('theme', ?1)",
        [serde_json::json!(value).to_string()],
    )
    .expect("set the theme");
}

/// Returns the `theme` row of `snug_settings` in the user database at `path` (its JSON text),
/// or `None` when there is none or the file cannot be read as one.
pub fn theme(path: &Path) -> Option<String> {
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.query_row(
        "SELECT value FROM snug_settings WHERE key = 'theme'",
        [],
        |r| r.get(0),
    )
    .ok()
}

/// Runs `statements` (a batch) on the SQLite file at `path`.
#[track_caller]
pub fn execute(path: &Path, statements: &str) {
    rusqlite::Connection::open(path)
        .expect("open")
        .execute_batch(statements)
        .expect("sql");
}

/// Returns every readable file under `dir`, recursively, as (path, bytes).
#[track_caller]
pub fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.push((path.display().to_string(), bytes));
            }
        }
    }
    out
}

/// The variables `snug` reads secrets and policy from (its `main.rs` table). [`Snug`] clears them
/// so a developer's shell never leaks into a test; a test sets the ones it means.
pub const SNUG_ENVIRONMENT: [&str; 7] = [
    "SNUG_PASSPHRASE",
    "SNUG_RECOVERY_KEY",
    "SNUG_NEW_PASSPHRASE",
    "SNUG_MIN_ITERATIONS",
    "SNUG_MAX_ITERATIONS",
    "SNUG_TOKEN",
    "SNUG_SECRET_VALUE",
];

/// The built `snug` binary. `env!("CARGO_BIN_EXE_snug")` exists only in the CLI crate's own
/// tests, so each test file names it: `const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));`.
#[derive(Clone, Copy, Debug)]
pub struct Snug {
    bin: &'static str,
}

impl Snug {
    /// Returns a runner for the binary at `bin`.
    pub const fn new(bin: &'static str) -> Self {
        Self { bin }
    }

    /// Returns a command for the binary with every [`SNUG_ENVIRONMENT`] variable cleared.
    pub fn command(&self) -> Command {
        let mut command = Command::new(self.bin);
        for name in SNUG_ENVIRONMENT {
            command.env_remove(name);
        }
        command
    }

    /// Runs `snug ARGS` with a clean environment plus `env`.
    #[track_caller]
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.command()
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("run snug")
    }

    /// Runs `snug ARGS --json` with `env`, asserts the exit code and returns the JSON body.
    #[track_caller]
    pub fn json(&self, args: &[&str], env: &[(&str, &str)], exit: i32) -> serde_json::Value {
        let mut args = args.to_vec();
        args.push("--json");
        let output = self.run(&args, env);
        body(&output, exit)
    }

    /// Runs `snug --json ARGS` with `env`; returns the exit code and the JSON body (the sync
    /// suites call it off their async runtime's threads, where the hub runs).
    #[track_caller]
    pub fn exit_and_json<S, K, V>(
        &self,
        args: impl IntoIterator<Item = S>,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> (i32, serde_json::Value)
    where
        S: AsRef<OsStr>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let output = self
            .command()
            .arg("--json")
            .args(args)
            .envs(env)
            .output()
            .expect("run snug");
        (output.status.code().expect("exit code"), json(&output))
    }

    /// Asserts a refusal of `snug ARGS --json`: the exit code, the JSON error code, and `file`
    /// byte-identical afterwards.
    #[track_caller]
    pub fn assert_refused(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
        file: &Path,
        exit: i32,
        code: &str,
    ) {
        let before = sha256_hex(file);
        let body = self.json(args, env, exit);
        assert_refusal(&body, exit, code);
        assert_eq!(
            sha256_hex(file),
            before,
            "{args:?} changed {}",
            file.display()
        );
    }
}

/// Asserts `output` exited with `exit` and returns its stdout parsed as JSON.
#[track_caller]
pub fn body(output: &Output, exit: i32) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(exit),
        "stdout {stdout} stderr {stderr}"
    );
    json(output)
}

/// Returns `output`'s stdout parsed as JSON, whatever the exit code.
#[track_caller]
pub fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}; stderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Asserts a `--json` body is a typed refusal: `ok` false, the error `code` and the `exit` code.
#[track_caller]
pub fn assert_refusal(body: &serde_json::Value, exit: i32, code: &str) {
    assert_eq!(body["ok"], false, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert_eq!(body["exit_code"], exit, "{body}");
}

/// The record `file`'s sync state keeps for the origin it last synced with (its
/// `<file>.sync.json`, issue 35: one record per origin, `lastOrigin` naming the last).
#[track_caller]
pub fn sync_record(file: &Path) -> serde_json::Value {
    let mut name = file.as_os_str().to_owned();
    name.push(".sync.json");
    let bytes = std::fs::read(PathBuf::from(name)).expect("sidecar");
    let state: serde_json::Value = serde_json::from_slice(&bytes).expect("the sidecar is JSON");
    let last = state["lastOrigin"].clone();
    state["origins"]
        .as_object()
        .expect("records by origin")
        .values()
        .find(|record| record["address"] == last)
        .expect("a record for the last origin")
        .clone()
}
