//! §10 read-and-adopt on every command (issue #17 point 2): a lone legacy `user.sqlite` is read
//! by every command given its directory's user file and written only as `user.snug`; once
//! `user.snug` exists, `user.sqlite` is the user's backup, a file of its own with no push state,
//! so syncing it is syncing a file that never synced (exit 6, nothing overwritten) on a directory
//! origin and on a hub.

use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use snug_e2e::{Hub, Options, userdb_vector};
use snug_test_support::{Snug, set_theme};

const CHESS_APP: &str = "starter--chess";
const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

/// Runs `snug --json ARGS` with `env` off the async runtime's threads; returns (exit, JSON).
async fn snug(args: Vec<String>, env: Vec<(&'static str, String)>) -> (i32, serde_json::Value) {
    tokio::task::spawn_blocking(move || snug_blocking(&args, &env))
        .await
        .expect("join")
}

fn snug_blocking(args: &[String], env: &[(&'static str, String)]) -> (i32, serde_json::Value) {
    SNUG.exit_and_json(args, env.iter().cloned())
}

fn args(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn sha256(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).expect("read")))
}

/// Every file in `dir` with its SHA-256, so a refusal can be shown to have changed nothing.
fn snapshot(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|path| path.is_file())
        .map(|path| {
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            (name, sha256(&path))
        })
        .collect();
    files.sort();
    files
}

/// A device directory holding `user.snug` (the sample) synced to `origin`, and beside it the
/// backup `user.sqlite` that differs from it. Returns (device dir, user.snug, user.sqlite, r1).
async fn adopted_device(
    root: &Path,
    origin: &str,
    env: &[(&'static str, String)],
) -> (PathBuf, PathBuf, PathBuf, String) {
    let device = root.join("device");
    std::fs::create_dir_all(&device).expect("mkdir");
    let canonical = device.join("user.snug");
    let legacy = device.join("user.sqlite");
    std::fs::write(&canonical, userdb_vector("sample-v6.user.snug")).expect("write");
    std::fs::write(&legacy, userdb_vector("sample-v6.user.snug")).expect("write");
    set_theme(&legacy, "the-old-backup");
    let (code, json) = snug(
        args(&["sync", "push", p(&canonical), "--origin", origin]),
        env.to_vec(),
    )
    .await;
    assert_eq!(code, 0, "{json}");
    let r1 = json["revision"].as_str().expect("revision").to_owned();
    (device, canonical, legacy, r1)
}

/// Pushing the backup diverges and writes nothing anywhere; a pull into it is refused.
async fn the_backup_never_passes_for_the_user_file(
    device: &Path,
    legacy: &Path,
    origin: &str,
    env: &[(&'static str, String)],
    origin_state: &dyn Fn() -> String,
) {
    let local_before = snapshot(device);
    let origin_before = origin_state();
    let (code, json) = snug(
        args(&["sync", "push", p(legacy), "--origin", origin]),
        env.to_vec(),
    )
    .await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (6, "DIVERGED".into()),
        "the backup has no push state, so it never synced: {json}"
    );
    assert!(
        json["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("never synced")),
        "{json}"
    );
    assert_eq!(snapshot(device), local_before, "nothing local changed");
    assert_eq!(
        origin_state(),
        origin_before,
        "the origin's copy is untouched"
    );

    let (code, json) = snug(
        args(&["sync", "pull", p(legacy), "--origin", origin]),
        env.to_vec(),
    )
    .await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (2, "LEGACY_BACKUP".into()),
        "{json}"
    );
    assert_eq!(snapshot(device), local_before);
    assert_eq!(origin_state(), origin_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_backup_diverges_from_a_directory_origin_and_overwrites_nothing() {
    let root = tempfile::tempdir().expect("dir");
    let origin_dir = root.path().join("origin");
    let origin = p(&origin_dir).to_owned();
    let (code, json) = snug(args(&["sync", "origin", &origin, "--init"]), vec![]).await;
    assert_eq!(code, 0, "{json}");
    let (device, canonical, legacy, r1) = adopted_device(root.path(), &origin, &[]).await;
    let origin_state = || format!("{:?}", snapshot(&origin_dir));
    the_backup_never_passes_for_the_user_file(&device, &legacy, &origin, &[], &origin_state).await;

    // Last writer wins only when asked, and even then the backup records no push state: the
    // user file's lineage is left as it was, so user.snug now sees the origin moved.
    let lineage = std::fs::read(device.join("user.snug.sync.json")).expect("sidecar");
    let (code, json) = snug(
        args(&["sync", "push", p(&legacy), "--origin", &origin, "--force"]),
        vec![],
    )
    .await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(
        (json["pushed"].clone(), json["recorded"].clone()),
        (true.into(), false.into())
    );
    assert_ne!(json["revision"], r1.as_str());
    assert!(!device.join("user.sqlite.sync.json").exists());
    assert_eq!(
        std::fs::read(device.join("user.snug.sync.json")).expect("sidecar"),
        lineage
    );
    set_theme(&canonical, "newer");
    let (code, json) = snug(
        args(&["sync", "push", p(&canonical), "--origin", &origin]),
        vec![],
    )
    .await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (6, "DIVERGED".into()),
        "{json}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_backup_diverges_from_a_hub_and_overwrites_nothing() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let env = vec![("SNUG_TOKEN", token.clone())];
    let root = tempfile::tempdir().expect("dir");
    let (device, _canonical, legacy, r1) = adopted_device(root.path(), &hub.url(), &env).await;
    // The hub's state as its history lists it, read from a plain thread.
    let http = snug_e2e::Http::new(hub.http);
    let auth = format!("Bearer {token}");
    let history = move || {
        let (http, auth) = (http.clone(), auth.clone());
        std::thread::scope(|s| {
            s.spawn(move || {
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
                answer.json()["revisions"].to_string()
            })
            .join()
            .expect("history")
        })
    };
    assert!(history().contains(&r1));
    the_backup_never_passes_for_the_user_file(&device, &legacy, &hub.url(), &env, &history).await;
}

#[test]
fn a_lone_legacy_file_is_read_by_every_command_and_written_only_as_user_snug() {
    let root = tempfile::tempdir().expect("dir");
    let device = root.path().join("device");
    std::fs::create_dir_all(&device).expect("mkdir");
    let canonical = device.join("user.snug");
    let legacy = device.join("user.sqlite");
    std::fs::write(&legacy, userdb_vector("sample-v6.user.snug")).expect("write");
    let legacy_hash = sha256(&legacy);
    let run = |items: &[&str], exit: i32| {
        let (code, json) = snug_blocking(&args(items), &[]);
        assert_eq!(code, exit, "snug {items:?}: {json}");
        json
    };

    // Reads, given the canonical name: check, export, migrate, app list, app export, app sql.
    let json = run(&["check", p(&canonical)], 0);
    assert_eq!(json["file"], p(&legacy), "{json}");
    let export = root.path().join("export.snug");
    run(&["export", p(&canonical), "--out", p(&export)], 0);
    let migrated = root.path().join("migrated.snug");
    run(&["migrate", p(&canonical), "--out", p(&migrated)], 0);
    let json = run(&["app", "list", p(&canonical)], 0);
    assert!(
        json["apps"].as_array().is_some_and(|a| !a.is_empty()),
        "{json}"
    );
    let app_out = root.path().join("chess.sqlite");
    run(
        &[
            "app",
            "export",
            p(&canonical),
            "--app",
            CHESS_APP,
            "--out",
            p(&app_out),
        ],
        0,
    );
    run(
        &[
            "app",
            "sql",
            p(&canonical),
            "--app",
            CHESS_APP,
            "SELECT count(*) FROM moves",
        ],
        0,
    );
    // An output never lands on the legacy file the input stands for.
    let json = run(
        &["export", p(&canonical), "--out", p(&legacy), "--force"],
        2,
    );
    assert_eq!(json["error"]["code"], "USAGE");
    assert!(!canonical.exists(), "a read never creates user.snug");
    assert_eq!(sha256(&legacy), legacy_hash);

    // A push reads the legacy file, under either name, and keeps one push state.
    let origin = root.path().join("origin");
    run(&["sync", "origin", p(&origin), "--init"], 0);
    let json = run(&["sync", "push", p(&canonical), "--origin", p(&origin)], 0);
    assert_eq!(json["pushed"], true, "{json}");
    let json = run(&["sync", "push", p(&legacy), "--origin", p(&origin)], 0);
    assert_eq!(
        json["reason"], "UNCHANGED",
        "one file, one push state: {json}"
    );
    assert!(!canonical.exists(), "a push never writes the user file");

    // The first write, given either name, creates user.snug; the legacy file stays as it was.
    let json = run(
        &[
            "app",
            "sql",
            p(&legacy),
            "--app",
            CHESS_APP,
            "INSERT INTO moves VALUES ('Nf3-adopted')",
        ],
        0,
    );
    assert_eq!(json["wrote"], true, "{json}");
    assert!(canonical.exists(), "the write adopted the canonical name");
    assert_eq!(
        sha256(&legacy),
        legacy_hash,
        "the legacy file is never written"
    );
    let json = run(
        &[
            "app",
            "sql",
            p(&canonical),
            "--app",
            CHESS_APP,
            "SELECT san FROM moves WHERE san = 'Nf3-adopted'",
        ],
        0,
    );
    assert_eq!(
        json["results"][0]["rows"].as_array().map(Vec::len),
        Some(1),
        "{json}"
    );
    // From now on user.sqlite is the backup: reading it reads the backup itself.
    let json = run(
        &[
            "app",
            "sql",
            p(&legacy),
            "--app",
            CHESS_APP,
            "SELECT san FROM moves WHERE san = 'Nf3-adopted'",
        ],
        0,
    );
    assert_eq!(
        json["results"][0]["rows"].as_array().map(Vec::len),
        Some(0),
        "{json}"
    );
}
