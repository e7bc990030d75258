//! What the tests that run `snug-hub` share: the binary run as a process with its log, images
//! made up of distinct chunks, stored the way a hub stores them, and a scan of the store's files
//! for their bytes.

#![allow(
    dead_code,
    reason = "each test binary uses its own part of this module"
)]

use std::{
    path::Path,
    process::{Child, Command, Output, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use serde_json::Value;

use bytes::Bytes;
use sha2::{Digest as _, Sha256};
use snug_revstore::{Precondition, Principal, PutRequest, RevStore as _, UserId};
use snug_sync_service::SyncConfig;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_snug-hub");

/// Chunks of the embedded store (one SQLite page).
pub(crate) const CHUNK: usize = 4096;

/// Runs `snug-hub ARGS` to its end with `env`, and no hub variable inherited from the machine
/// running the tests (an operator's command, as typed).
pub(crate) fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command.args(args);
    for name in [
        "SNUG_DATA_DIR",
        "SNUG_SYNC_ADDR",
        "SNUG_SYNC_STORE",
        "SNUG_USERS_STORE",
    ] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command.output().expect("run snug-hub")
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `len` bytes of distinct pseudo-random chunks; images of different seeds share no chunk.
pub(crate) fn image(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut n = 0u64;
    while out.len() < len {
        let mut digest = Sha256::new();
        digest.update(seed.to_le_bytes());
        digest.update(n.to_le_bytes());
        out.extend_from_slice(&digest.finalize());
        n += 1;
    }
    out.truncate(len);
    out
}

/// The embedded store under `data`, as `snug-hub --data-dir DATA` opens it, without reclamation:
/// its configuration and its runtime.
pub(crate) fn config(data: &Path) -> (SyncConfig, snug_rpc::runtime::Runtime) {
    let config = SyncConfig {
        reclaim_interval: std::time::Duration::ZERO,
        ..SyncConfig::default()
    };
    let runtime = snug_rpc::runtime::Runtime {
        dir: data.join("sync"),
        ..Default::default()
    };
    (config, runtime)
}

/// Stores `bytes` as the first image of the store's user `user` under `data`, then closes it.
pub(crate) async fn store_image(data: &Path, user: &str, bytes: &[u8]) {
    let (config, runtime) = config(data);
    let store = snug_sync_service::open_store(&config, &runtime)
        .await
        .expect("open the store");
    let user = UserId::new(user).expect("user");
    store.provision_user(&user).await.expect("provision");
    let body = futures::stream::iter([Ok(Bytes::copy_from_slice(bytes))]);
    store
        .put(
            PutRequest {
                user,
                precondition: Precondition::MustNotExist,
                principal: Principal::new("test").expect("principal"),
                idempotency_key: None,
                expected_length: None,
                quota_bytes: None,
            },
            body,
        )
        .await
        .expect("put");
    drop(store);
    released(&data.join("sync").join("LOCK")).await;
}

/// Waits until the store's lock is free: the store's background work (a checkpoint, the served
/// ledger's writer) holds it a moment past the handle's drop, as it would in a hub shutting down.
async fn released(lock: &Path) {
    let file = std::fs::File::open(lock).expect("open the store's lock file");
    for _ in 0..200 {
        if file.try_lock().is_ok() {
            file.unlock().expect("unlock");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the store's lock is still held 10s after its handle was dropped");
}

/// The one JSON object a successful command printed.
#[track_caller]
pub(crate) fn json(output: &Output) -> serde_json::Value {
    assert!(output.status.success(), "{}", text(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

/// Every file under `dir`, recursively, that holds `needle`.
pub(crate) fn files_holding(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    // A file the store's background work removed since the listing holds nothing.
    let gone = |err: &std::io::Error| err.kind() == std::io::ErrorKind::NotFound;
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        let kind = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta.file_type(),
            Err(err) if gone(&err) => continue,
            Err(err) => panic!("{}: {err}", path.display()),
        };
        if kind.is_dir() {
            found.extend(files_holding(&path, needle));
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let content = match std::fs::read(&path) {
            Ok(content) => content,
            Err(err) if gone(&err) => continue,
            Err(err) => panic!("{}: {err}", path.display()),
        };
        if content.windows(needle.len()).any(|w| w == needle) {
            found.push(path);
        }
    }
    found
}

/// How long a process is given to log a line, or to stop.
const PROCESS_WAIT: Duration = Duration::from_secs(60);

/// A running `snug-hub` process and the lines it writes to stderr (its log).
pub(crate) struct Process {
    name: &'static str,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Process {
    /// Runs `snug-hub ARGS` with exactly the environment `env` (nothing inherited, so a variable
    /// set on the machine running the tests cannot change what is tested).
    pub(crate) fn spawn(name: &'static str, args: &[&str], env: &[(&str, String)]) -> Process {
        let mut child = Command::new(BIN)
            .args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn snug-hub");
        let stderr = child.stderr.take().expect("stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let reader = std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            }
        });
        Process {
            name,
            child,
            lines,
            reader: Some(reader),
        }
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits for the JSON log line whose message is `message`; returns its field `field`.
    pub(crate) async fn logged(&mut self, message: &str, field: &str) -> String {
        let deadline = Instant::now() + PROCESS_WAIT;
        loop {
            let found = self
                .lines()
                .iter()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .find(|line| line["message"] == message)
                .and_then(|line| line[field].as_str().map(str::to_owned));
            if let Some(value) = found {
                return value;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited ({status}) before logging {message:?}:\n{}",
                    self.name,
                    self.lines().join("\n")
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} never logged {message:?}:\n{}",
                self.name,
                self.lines().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends SIGTERM and waits for a clean exit (which includes flushing its spans); returns
    /// every line the process wrote.
    pub(crate) async fn terminate(&mut self) -> Vec<String> {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "could not signal {}", self.name);
        let deadline = Instant::now() + PROCESS_WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(
                    status.success(),
                    "{} exited with {status}:\n{}",
                    self.name,
                    self.lines().join("\n")
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not stop after SIGTERM",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.lines()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
