//! `snug sync` end to end: the built binary against the whole hub started in-process (snug-e2e)
//! and against a directory origin. Two "devices" are two files with their own sidecars.

use std::path::Path;

use snug_e2e::{Hub, Options, userdb_vector};
use snug_test_support::{Snug, set_theme};

const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

/// Runs `snug --json ARGS` with `env`, off the async runtime's threads; returns (exit code, JSON).
async fn snug(args: Vec<String>, env: Vec<(&'static str, String)>) -> (i32, serde_json::Value) {
    tokio::task::spawn_blocking(move || SNUG.exit_and_json(&args, env))
        .await
        .expect("join")
}

/// Runs `snug --json sync COMMAND FILE --origin ORIGIN`.
async fn sync(command: &str, file: &Path, origin: &str) -> (i32, serde_json::Value) {
    let file = file.display().to_string();
    snug(args(&["sync", command, &file, "--origin", origin]), vec![]).await
}

fn args(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn setting(file: &Path) -> Option<String> {
    snug_test_support::theme(file)
}

fn secret_rows(file: &Path) -> i64 {
    let conn = rusqlite::Connection::open(file).expect("open");
    conn.query_row("SELECT count(*) FROM snug_secrets", [], |r| r.get(0))
        .expect("count")
}

/// Runs the whole push / pull / divergence / force story between two devices and `origin`.
async fn two_devices(
    origin: String,
    env: Vec<(&'static str, String)>,
    revisions: impl Fn() -> usize,
) {
    let dir = tempfile::tempdir().expect("dir");
    let a = dir.path().join("a").join("user.snug");
    let b = dir.path().join("b").join("user.snug");
    std::fs::create_dir_all(a.parent().expect("parent")).expect("mkdir");
    std::fs::create_dir_all(b.parent().expect("parent")).expect("mkdir");
    // Device A holds the sample, with two credentials in snug_secrets.
    std::fs::write(&a, userdb_vector("sample-v6.user.snug")).expect("write");
    let (a_s, b_s) = (a.display().to_string(), b.display().to_string());
    let push = |file: &str, extra: &[&str]| {
        let mut all = args(&["sync", "push", file, "--origin", &origin]);
        all.extend(args(extra));
        snug(all, env.clone())
    };
    let pull = |file: &str, extra: &[&str]| {
        let mut all = args(&["sync", "pull", file, "--origin", &origin]);
        all.extend(args(extra));
        snug(all, env.clone())
    };

    // First push from A.
    let (code, json) = push(&a_s, &[]).await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["pushed"], true);
    let r1 = json["revision"].as_str().expect("revision").to_owned();
    assert_eq!(snug_test_support::sync_record(&a)["revision"], r1);
    assert!(
        snug_test_support::sync_record(&a)["syncedAt"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert_eq!(secret_rows(&a), 2, "pushing never changes the local file");
    assert_eq!(revisions(), 1);

    // Unchanged: the gate sends nothing.
    let (code, json) = push(&a_s, &[]).await;
    assert_eq!(
        (code, json["pushed"].clone(), json["reason"].clone()),
        (0, false.into(), "UNCHANGED".into()),
        "{json}"
    );
    assert_eq!(revisions(), 1, "nothing was written");

    // Device B pulls a copy (no file yet), edits and pushes.
    let (code, json) = pull(&b_s, &[]).await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["revision"], r1);
    let (code, json) = pull(&b_s, &[]).await;
    assert_eq!(
        (code, json["reason"].clone()),
        (0, "UP_TO_DATE".into()),
        "{json}"
    );
    let (code, json) = push(&b_s, &[]).await;
    assert_eq!(
        (code, json["pushed"].clone()),
        (0, false.into()),
        "a fresh pull is not a change: {json}"
    );
    set_theme(&b, "dark");
    let (code, json) = push(&b_s, &[]).await;
    assert_eq!(code, 0, "{json}");
    let r2 = json["revision"].as_str().expect("revision").to_owned();
    assert_ne!(r2, r1);

    // A, unchanged, pulls B's edit and keeps its own credentials.
    let (code, json) = pull(&a_s, &[]).await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["revision"], r2);
    assert_eq!(json["secretsKept"], 2);
    assert_eq!(setting(&a).as_deref(), Some("\"dark\""));
    assert_eq!(secret_rows(&a), 2);
    let (code, json) = push(&a_s, &[]).await;
    assert_eq!(
        (code, json["pushed"].clone()),
        (0, false.into()),
        "re-anchored after the pull: {json}"
    );

    // Both edit; B pushes first; A's push and pull are refused as divergence (exit 6).
    set_theme(&a, "light");
    set_theme(&b, "solarized");
    let (code, _) = push(&b_s, &[]).await;
    assert_eq!(code, 0);
    let before = revisions();
    let (code, json) = push(&a_s, &[]).await;
    assert_eq!(code, 6, "{json}");
    assert_eq!(json["error"]["code"], "DIVERGED");
    assert_eq!(json["exit_code"], 6);
    let (code, json) = pull(&a_s, &[]).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (6, "DIVERGED".into()),
        "{json}"
    );
    assert_eq!(
        setting(&a).as_deref(),
        Some("\"light\""),
        "a refused pull leaves the file alone"
    );
    assert_eq!(revisions(), before, "a refused push writes nothing");

    // Last writer wins only when asked.
    let (code, json) = push(&a_s, &["--force"]).await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["forced"], true);
    let (code, json) = pull(&b_s, &[]).await;
    assert_eq!(code, 0, "B had nothing unpushed: {json}");
    assert_eq!(setting(&b).as_deref(), Some("\"light\""));
    // And the other way: B edits, A edits, A takes the origin's copy with pull --force.
    set_theme(&b, "b-wins");
    assert_eq!(push(&b_s, &[]).await.0, 0);
    set_theme(&a, "a-loses");
    assert_eq!(pull(&a_s, &[]).await.0, 6);
    let (code, json) = pull(&a_s, &["--force"]).await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(setting(&a).as_deref(), Some("\"b-wins\""));
    assert_eq!(
        secret_rows(&a),
        2,
        "local credentials survive even a forced pull"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_pull_and_divergence_against_the_hub() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let http = snug_e2e::Http::new(hub.http);
    let auth = format!("Bearer {token}");
    let count = || {
        let http = http.clone();
        let auth = auth.clone();
        // The revision count, read through the gateway from a plain thread.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        let answer = runtime.block_on(http.send(
            "GET",
            "/userdb/revisions",
            &[("authorization", &auth)],
            snug_e2e::Payload::Empty,
        ));
        answer.json()["revisions"].as_array().map_or(0, Vec::len)
    };
    let counter = move || std::thread::scope(|s| s.spawn(count).join().expect("count"));
    two_devices(hub.url(), vec![("SNUG_TOKEN", token.clone())], counter).await;

    // What the hub holds is the export: no credentials, even though device A has two.
    let got = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &auth)],
            snug_e2e::Payload::Empty,
        )
        .await;
    let dir = tempfile::tempdir().expect("dir");
    let copy = dir.path().join("copy.snug");
    std::fs::write(&copy, &got.body).expect("write");
    assert_eq!(secret_rows(&copy), 0);

    // Without a token: an auth failure, not divergence.
    let file = dir.path().join("user.snug");
    std::fs::write(&file, userdb_vector("fresh-v6.user.snug")).expect("write");
    let (code, json) = snug(
        args(&[
            "sync",
            "push",
            &file.display().to_string(),
            "--origin",
            &hub.url(),
        ]),
        vec![],
    )
    .await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (11, "SYNC_AUTH".into()),
        "{json}"
    );
    assert!(
        json["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("none was given") && m.contains("SNUG_TOKEN")),
        "{json}"
    );
    // --include-secrets never reaches a hub.
    let (code, _) = snug(
        args(&[
            "sync",
            "push",
            &file.display().to_string(),
            "--origin",
            &hub.url(),
            "--include-secrets",
        ]),
        vec![("SNUG_TOKEN", token)],
    )
    .await;
    assert_eq!(code, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_pull_and_divergence_against_a_directory_origin() {
    let dir = tempfile::tempdir().expect("dir");
    let origin = dir.path().join("origin");
    let origin_s = origin.display().to_string();
    let (code, json) = snug(args(&["sync", "origin", &origin_s]), vec![]).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (1, "NO_ORIGIN".into())
    );
    let (code, json) = snug(args(&["sync", "origin", &origin_s, "--init"]), vec![]).await;
    assert_eq!(
        (code, json["revision"].clone()),
        (0, serde_json::Value::Null),
        "{json}"
    );

    let rev_file = origin.join("user.snug.rev");
    let count = {
        let rev_file = rev_file.clone();
        move || {
            // r<count>-<random>: the revision file names how many writes were accepted.
            std::fs::read(&rev_file).ok().map_or(0, |bytes| {
                let json: serde_json::Value = serde_json::from_slice(&bytes).expect("rev JSON");
                json["revision"].as_str().expect("rev")[1..]
                    .split('-')
                    .next()
                    .expect("n")
                    .parse()
                    .expect("number")
            })
        }
    };
    two_devices(format!("file://{origin_s}"), vec![], count).await;

    let (code, json) = snug(args(&["sync", "origin", &origin_s]), vec![]).await;
    assert_eq!(code, 0);
    let image = std::fs::read(origin.join("user.snug")).expect("image");
    assert_eq!(
        json["sha256"],
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&image))
    );
    assert_eq!(
        secret_rows(&origin.join("user.snug")),
        0,
        "secrets only on request"
    );

    // A plain path works as well as file://, and --include-secrets is allowed for a directory.
    let other = dir.path().join("other-origin");
    std::fs::create_dir_all(&other).expect("mkdir");
    let file = dir.path().join("c.snug");
    std::fs::write(&file, userdb_vector("sample-v6.user.snug")).expect("write");
    let (code, json) = snug(
        args(&[
            "sync",
            "push",
            &file.display().to_string(),
            "--origin",
            &other.display().to_string(),
            "--include-secrets",
        ]),
        vec![],
    )
    .await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(secret_rows(&other.join("user.snug")), 2);

    // A torn origin (an image that does not match its revision file) is reported, not trusted.
    std::fs::write(other.join("user.snug"), userdb_vector("fresh-v6.user.snug")).expect("tamper");
    let fresh = dir.path().join("d.snug");
    let (code, json) = sync("pull", &fresh, &other.display().to_string()).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (1, "ORIGIN_INCONSISTENT".into()),
        "{json}"
    );
    assert!(!fresh.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sync_on_the_same_file_is_refused_while_the_first_runs() {
    let dir = tempfile::tempdir().expect("dir");
    let origin = dir.path().join("origin");
    std::fs::create_dir_all(&origin).expect("mkdir");
    let origin = origin.display().to_string();
    let file = dir.path().join("a.snug");
    std::fs::write(&file, userdb_vector("sample-v6.user.snug")).expect("write");
    let before = std::fs::read(&file).expect("read");

    // Another `snug sync` on a.snug holds its lock (as the running process would).
    let held = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.path().join("a.snug.sync.lock"))
        .expect("lock file");
    held.lock().expect("lock");
    for command in ["push", "pull", "bootstrap"] {
        let (code, json) = sync(command, &file, &origin).await;
        assert_eq!(code, 7, "{command}: {json}");
        assert_eq!(json["error"]["code"], "SYNC_IN_PROGRESS", "{command}");
        assert_eq!(std::fs::read(&file).expect("read"), before, "{command}");
        assert!(
            !dir.path().join("a.snug.sync.json").exists(),
            "{command} wrote no sidecar"
        );
        assert!(
            std::fs::read_dir(&origin).expect("origin").next().is_none(),
            "{command} touched the origin"
        );
    }
    // Another file is not held up, and once the lock is released the push goes through.
    let other = dir.path().join("b.snug");
    std::fs::write(&other, userdb_vector("sample-v6.user.snug")).expect("write");
    let other_origin = dir.path().join("other-origin");
    std::fs::create_dir_all(&other_origin).expect("mkdir");
    let (code, json) = sync("push", &other, &other_origin.display().to_string()).await;
    assert_eq!((code, json["pushed"].clone()), (0, true.into()), "{json}");
    assert!(
        !dir.path().join("b.snug.sync.lock").exists(),
        "a finished sync leaves no lock file"
    );
    // The holder goes away as a finished sync does: it removes the file, then lets go.
    std::fs::remove_file(dir.path().join("a.snug.sync.lock")).expect("remove");
    drop(held);
    let (code, json) = sync("push", &file, &origin).await;
    assert_eq!((code, json["pushed"].clone()), (0, true.into()), "{json}");
    // A lock file left by a holder that died (the lock itself died with it) is taken over.
    std::fs::write(dir.path().join("a.snug.sync.lock"), b"").expect("stale lock file");
    set_theme(&file, "\"dark\"");
    let (code, json) = sync("push", &file, &origin).await;
    assert_eq!((code, json["pushed"].clone()), (0, true.into()), "{json}");
    assert!(!dir.path().join("a.snug.sync.lock").exists());
}
