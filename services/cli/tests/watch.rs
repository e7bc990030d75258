//! `snug sync watch` (issue 40 point 5) with the built binary: a device keeps its file up to
//! date as another pushes, hearing of it from the hub's event stream (and from a directory
//! origin by asking); with `--push` its own edits reach the hub; divergence stops it with exit 6
//! and nothing overwritten; an interruption leaves the file whole and the next sync works.

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use snug_e2e::{Hub, Options, userdb_vector};
use snug_test_support::{Snug, set_theme};

const BIN: &str = env!("CARGO_BIN_EXE_snug");
const SNUG: Snug = Snug::new(BIN);

/// Runs `snug --json ARGS` with `env`; returns (exit code, JSON).
async fn snug(args: &[&str], env: &[(&'static str, String)]) -> (i32, serde_json::Value) {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    let env = env.to_vec();
    tokio::task::spawn_blocking(move || SNUG.exit_and_json(&args, env))
        .await
        .expect("join")
}

/// A running `snug --json sync watch`, its lines read on a thread of their own.
struct Watcher {
    child: Child,
    lines: mpsc::Receiver<serde_json::Value>,
}

impl Watcher {
    fn start(file: &Path, origin: &str, extra: &[&str], env: &[(&'static str, String)]) -> Self {
        let mut command = Command::new(BIN);
        command
            .args(["--json", "sync", "watch"])
            .arg(file)
            .args(["--origin", origin])
            .args(extra)
            .env_remove("SNUG_PASSPHRASE")
            .env_remove("SNUG_RECOVERY_KEY")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("snug sync watch");
        let stdout = child.stdout.take().expect("stdout");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line).expect("a JSON line");
                if send.send(value).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// The next line within `within`.
    fn next(&self, within: Duration) -> Option<serde_json::Value> {
        self.lines.recv_timeout(within).ok()
    }

    /// Lines until one names `revision`.
    fn until_revision(&self, revision: &str) -> serde_json::Value {
        loop {
            let line = self
                .next(Duration::from_secs(20))
                .expect("a step within 20 s");
            if line["revision"] == revision {
                return line;
            }
        }
    }

    /// Interrupts it as Ctrl-C does, and waits for it.
    fn interrupt(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        self.child.wait().expect("wait")
    }

    /// Waits for it to end by itself, within `within`.
    fn exit_code(mut self, within: Duration) -> (Option<i32>, Vec<serde_json::Value>) {
        let started = std::time::Instant::now();
        while started.elapsed() < within {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let lines = self.lines.try_iter().collect();
                return (status.code(), lines);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!("snug sync watch did not stop");
    }
}

fn theme(file: &Path) -> Option<String> {
    snug_test_support::theme(file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watching_device_pulls_each_push_as_it_lands_and_pushes_its_own_with_push() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let env = [("SNUG_TOKEN", token.clone())];
    let origin = hub.url();
    let dir = tempfile::tempdir().expect("dir");
    let (a, b) = (dir.path().join("a.snug"), dir.path().join("b.snug"));
    std::fs::write(&a, userdb_vector("sample-v6.user.snug")).expect("write");
    let a_str = a.display().to_string();
    let (code, pushed) = snug(&["sync", "push", &a_str, "--origin", &origin], &env).await;
    assert_eq!(code, 0, "{pushed}");

    // Device B starts from nothing: the watch creates its file, then follows.
    let watcher = Watcher::start(&b, &origin, &[], &env);
    let first = watcher.until_revision(pushed["revision"].as_str().expect("revision"));
    assert_eq!(first["ok"], true, "{first}");
    set_theme(&a, "heard");
    let (code, second) = snug(&["sync", "push", &a_str], &env).await;
    assert_eq!(code, 0, "{second}");
    watcher.until_revision(second["revision"].as_str().expect("revision"));
    assert_eq!(theme(&b).as_deref(), Some("\"heard\""));
    // Ctrl-C: the file is whole, and the next sync of it is not refused as busy.
    let before = std::fs::read(&b).expect("read");
    let status = watcher.interrupt();
    assert!(!status.success());
    assert_eq!(std::fs::read(&b).expect("read"), before);
    let b_str = b.display().to_string();
    let (code, pulled) = snug(&["sync", "pull", &b_str], &env).await;
    assert_eq!(code, 0, "the lock died with the watcher: {pulled}");

    // With --push, B's own edit reaches the hub once B's file is quiet, and A pulls it.
    let watcher = Watcher::start(&b, &origin, &["--push", "--debounce", "1"], &env);
    assert!(
        watcher.next(Duration::from_secs(20)).is_some(),
        "the first step"
    );
    set_theme(&b, "from b");
    let line = loop {
        let line = watcher.next(Duration::from_secs(20)).expect("the push");
        if line["pushed"] == true {
            break line;
        }
    };
    assert_eq!(line["transfer"]["delta"], true, "{line}");
    let (code, pulled) = snug(&["sync", "pull", &a_str], &env).await;
    assert_eq!(
        (code, pulled["revision"].clone()),
        (0, line["revision"].clone())
    );
    assert_eq!(theme(&a).as_deref(), Some("\"from b\""));
    let _ = watcher.interrupt();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_over_unpushed_changes_stops_at_divergence_and_overwrites_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let origin = dir.path().join("origin");
    std::fs::create_dir_all(&origin).expect("mkdir");
    let origin = origin.display().to_string();
    let (a, b) = (dir.path().join("a.snug"), dir.path().join("b.snug"));
    std::fs::write(&a, userdb_vector("sample-v6.user.snug")).expect("write");
    let a_str = a.display().to_string();
    let (code, _) = snug(&["sync", "push", &a_str, "--origin", &origin], &[]).await;
    assert_eq!(code, 0);
    let (code, _) = snug(
        &[
            "sync",
            "bootstrap",
            &b.display().to_string(),
            "--origin",
            &origin,
        ],
        &[],
    )
    .await;
    assert_eq!(code, 0);
    // A directory origin is asked once a second.
    let watcher = Watcher::start(&b, &origin, &[], &[]);
    assert!(
        watcher.next(Duration::from_secs(20)).is_some(),
        "the first step"
    );
    set_theme(&b, "unpushed");
    let local = std::fs::read(&b).expect("read");
    set_theme(&a, "elsewhere");
    let (code, _) = snug(&["sync", "push", &a_str], &[]).await;
    assert_eq!(code, 0);
    let (code, lines) = watcher.exit_code(Duration::from_secs(20));
    assert_eq!(code, Some(6), "{lines:?}");
    assert_eq!(
        std::fs::read(&b).expect("read"),
        local,
        "nothing overwritten"
    );
}
