//! The hub in a child process of its own, so its CPU time is measured apart from the client's.
//!
//! A client push spawns short-lived threads (ureq's resolver, the manifest's hashing), so no
//! subtraction of threads inside one process gives the hub's share; two processes do. The child
//! is this bench binary again with [`CHILD`] set: it starts `snug_e2e::Hub` on loopback, prints
//! its URL and serves until its stdin closes. The CPU time of either process is its `utime` and
//! `stime` from `/proc/<pid>/stat`, which count every thread it ever ran, exited ones included.
//! The link relay (`link.rs`) is started the same way.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    process::{Child, ChildStdin, Command, Stdio},
    time::Duration,
};

use snug_e2e::{Hub, Options};

/// Set in the child's environment to the directory of the hub's sync store: serve a hub instead
/// of running the benchmark (the parent measures the store's size on disk there).
pub(crate) const CHILD: &str = "SNUG_BENCH_DELTA_HUB";

/// The per-user quota: the user database's own cap, so every image of the run fits.
const QUOTA: u64 = snug_schema::MAX_USERDB_BYTES;

fn options(store: std::path::PathBuf) -> Options {
    Options {
        sync_dir: Some(store),
        auth: snug_gateway::config::AuthMode::Off,
        origins: vec![],
        quota_bytes: QUOTA,
        deadline: Duration::from_secs(300),
        ..Options::default()
    }
}

/// Serves a hub when this process is the child, returning once its stdin closes; `false` when
/// this process is the benchmark.
pub(crate) fn serve_if_child() -> bool {
    let Some(store) = std::env::var_os(CHILD) else {
        return false;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let hub = runtime.block_on(Hub::start(options(store.into())));
    println!("{}", hub.url());
    std::io::stdout().flush().expect("flush");
    // The parent closes stdin when it is done (or dies): then the hub and its files go.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(hub);
    drop(runtime);
    true
}

/// A child process of this binary (the hub, the link relay) that printed its URL, stopped
/// (stdin closed, then waited for) when dropped.
pub(crate) struct Spawned {
    child: Child,
    stdin: Option<ChildStdin>,
    pub(crate) url: String,
}

impl Spawned {
    /// Starts this binary again with `role` set to `value` in its environment.
    pub(crate) fn start(role: &str, value: &str) -> Self {
        let exe = std::env::current_exe().expect("current exe");
        let mut child = Command::new(exe)
            .env(role, value)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("child");
        let mut url = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut url)
            .expect("child's url");
        assert!(url.starts_with("http://127.0.0.1:"), "{role} said {url:?}");
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            url: url.trim().to_owned(),
        }
    }

    /// The CPU time the child has used so far.
    pub(crate) fn cpu(&self) -> Duration {
        cpu_of(&format!("/proc/{}/stat", self.child.id()))
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// The CPU time (user and system) this process has used: the client's, the hub being a child.
pub(crate) fn client_cpu() -> Duration {
    cpu_of("/proc/self/stat")
}

/// `utime + stime` of a `/proc/<pid>/stat`, in clock ticks of 10 ms (Linux's USER_HZ).
fn cpu_of(path: &str) -> Duration {
    let stat = std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{path}: {err}"));
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..]
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    Duration::from_millis(ticks * 10)
}
