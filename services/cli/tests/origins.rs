//! Every answer `snug sync` gives is true (issue 35), checked with the built binary against the
//! whole hub started in-process and against directory origins: state per origin (a directory and
//! a hub, both orders, with and without another device's image on the hub), no "unchanged"
//! without the origin (a dead address, an address without a scheme, a file behind its origin),
//! nothing replaced without a copy, an earlier release's sidecar adopted only where it matches,
//! and each message with its cause and remedy.

use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use snug_e2e::{Hub, Options, Payload, userdb_vector};
use snug_test_support::Snug;

const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

/// Runs `snug --json ARGS` with `env`, off the async runtime's threads; returns (exit, JSON).
async fn snug(args: &[&str], env: &[(&'static str, &str)]) -> (i32, serde_json::Value) {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    let env: Vec<(&'static str, String)> = env.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    tokio::task::spawn_blocking(move || SNUG.exit_and_json(&args, env))
        .await
        .expect("join")
}

fn edit(file: &Path, value: &str) {
    snug_test_support::execute(
        file,
        &format!(
            "INSERT OR REPLACE INTO snug_settings (key, value) VALUES ('theme', '\"{value}\"')"
        ),
    );
}

fn theme(file: &Path) -> Option<String> {
    snug_test_support::theme(file)
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Every file in `dir` with its bytes, for "nothing changed here".
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    snug_test_support::files(dir)
}

/// A device: a directory holding one user file, the sample with two credentials.
fn device(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("user.snug");
    std::fs::write(&file, userdb_vector("sample-v6.user.snug")).expect("write");
    file
}

/// A directory origin made with `snug sync origin --init`.
async fn dir_origin(root: &Path, name: &str) -> String {
    let origin = root.join(name).display().to_string();
    let (code, json) = snug(&["sync", "origin", &origin, "--init"], &[]).await;
    assert_eq!(code, 0, "{json}");
    assert!(
        json["identity"]
            .as_str()
            .is_some_and(|id| id.starts_with("dir:")),
        "{json}"
    );
    origin
}

/// The hub's current image for `token`: (status, ETag, body).
async fn hub_image(hub: &Hub, token: &str) -> (u16, String, Vec<u8>) {
    let answer = snug_e2e::get_userdb(&snug_e2e::Http::new(hub.http), token).await;
    (
        answer.status,
        answer.header("etag").trim_matches('"').to_owned(),
        answer.body.to_vec(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_and_a_hub_each_keep_their_own_state_in_both_orders() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let env = [("SNUG_TOKEN", token.as_str())];
    let root = tempfile::tempdir().expect("dir");
    let dir = dir_origin(root.path(), "stick").await;
    let url = hub.url();

    // Directory first, then the empty hub: never "unchanged" at an origin that has nothing.
    let a = device(root.path(), "a");
    let a_s = a.display().to_string();
    let (code, json) = snug(&["sync", "push", &a_s, "--origin", &dir], &[]).await;
    assert_eq!((code, json["pushed"].clone()), (0, true.into()), "{json}");
    let at_dir = json["revision"].clone();
    assert_eq!(hub_image(&hub, &token).await.0, 404);
    let (code, json) = snug(&["sync", "push", &a_s, "--origin", &url], &env).await;
    assert_eq!((code, json["pushed"].clone()), (0, true.into()), "{json}");
    assert_eq!(json["kind"], "first");
    let (status, etag, body) = hub_image(&hub, &token).await;
    assert_eq!(
        (status, etag.as_str()),
        (200, json["revision"].as_str().expect("rev"))
    );
    assert_eq!(sha256(&body), json["sha256"].as_str().expect("sha"));
    // Each origin is "unchanged" now, each confirmed by that origin; the two records differ.
    for origin in [&dir, &url] {
        let (code, json) = snug(&["sync", "push", &a_s, "--origin", origin], &env).await;
        assert_eq!(
            (code, json["reason"].clone()),
            (0, "UNCHANGED".into()),
            "{json}"
        );
    }
    let state: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.path().join("a/user.snug.sync.json")).expect("sidecar"),
    )
    .expect("JSON");
    let records = state["origins"].as_object().expect("records");
    assert_eq!(records.len(), 2, "{state}");
    assert!(
        records.keys().any(|id| id.starts_with("dir:"))
            && records.keys().any(|id| id.starts_with("hub:"))
    );
    assert!(records.values().any(|r| r["revision"] == at_dir));

    // Hub first, then an empty directory: the same.
    let b = device(root.path(), "b");
    let b_s = b.display().to_string();
    edit(&b, "b own");
    let token_b = hub.add_user("bob");
    let env_b = [("SNUG_TOKEN", token_b.as_str())];
    let (code, json) = snug(&["sync", "push", &b_s, "--origin", &url], &env_b).await;
    assert_eq!((code, json["pushed"].clone()), (0, true.into()), "{json}");
    let other_dir = dir_origin(root.path(), "other-stick").await;
    let (code, json) = snug(&["sync", "push", &b_s, "--origin", &other_dir], &[]).await;
    assert_eq!((code, json["pushed"].clone()), (0, true.into()), "{json}");
    // Revision tokens repeat across origins (both are r1 here); identities do not.
    assert!(json["revision"].as_str().expect("rev").starts_with("r1-"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_holding_another_devices_image_is_never_taken_for_the_file_synced_elsewhere() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let env = [("SNUG_TOKEN", token.as_str())];
    let root = tempfile::tempdir().expect("dir");
    let dir = dir_origin(root.path(), "stick").await;
    let url = hub.url();

    // Another device put its image on the hub.
    let other = device(root.path(), "other");
    edit(&other, "the other device");
    let (code, json) = snug(
        &[
            "sync",
            "push",
            &other.display().to_string(),
            "--origin",
            &url,
        ],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{json}");
    let (_, hub_revision, hub_bytes) = hub_image(&hub, &token).await;

    // This file synced with the directory only.
    let a = device(root.path(), "a");
    let a_s = a.display().to_string();
    assert_eq!(
        snug(&["sync", "push", &a_s, "--origin", &dir], &[]).await.0,
        0
    );
    let before = files(&root.path().join("a"));

    // Push: never synced with the hub, which holds something else: a divergence, nothing sent.
    let (code, json) = snug(&["sync", "push", &a_s, "--origin", &url], &env).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (6, "DIVERGED".into()),
        "{json}"
    );
    assert!(
        json["error"]["message"]
            .as_str()
            .expect("message")
            .contains("never synced with it"),
        "{json}"
    );
    // Pull: refused, the file and its sidecar untouched.
    let (code, json) = snug(&["sync", "pull", &a_s, "--origin", &url], &env).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (6, "DIVERGED".into()),
        "{json}"
    );
    assert_eq!(files(&root.path().join("a")), before);
    let (_, revision, bytes) = hub_image(&hub, &token).await;
    assert_eq!((revision, bytes), (hub_revision.clone(), hub_bytes));

    // The way out that loses nothing: the hub's copy beside the file.
    let (code, json) = snug(
        &["sync", "pull", &a_s, "--origin", &url, "--keep-both"],
        &env,
    )
    .await;
    assert_eq!((code, json["keptBoth"].clone()), (0, true.into()), "{json}");
    let beside = PathBuf::from(json["file"].as_str().expect("file"));
    assert_eq!(
        beside,
        root.path()
            .join(format!("a/user.snug.origin-{hub_revision}.snug"))
    );
    assert_eq!(theme(&beside).as_deref(), Some("\"the other device\""));
    for (name, bytes) in &before {
        assert_eq!(
            std::fs::read(root.path().join("a").join(name)).expect("read"),
            *bytes,
            "{name} untouched"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_unchanged_without_an_origin_that_answers() {
    let root = tempfile::tempdir().expect("dir");
    let dir = dir_origin(root.path(), "stick").await;
    let a = device(root.path(), "a");
    let a_s = a.display().to_string();
    assert_eq!(
        snug(&["sync", "push", &a_s, "--origin", &dir], &[]).await.0,
        0
    );
    let before = files(&root.path().join("a"));

    // A port where nothing listens: the push pushes nothing and says why, exit 10.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr")
    };
    let dead_url = format!("http://{dead}");
    let (code, json) = snug(&["sync", "push", &a_s, "--origin", &dead_url], &[]).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (10, "SYNC_NETWORK".into()),
        "{json}"
    );
    assert!(
        json["error"]["message"]
            .as_str()
            .expect("message")
            .contains("nothing was changed"),
        "{json}"
    );
    // No scheme: what was understood, and what to type.
    let (code, json) = snug(&["sync", "push", &a_s, "--origin", &dead.to_string()], &[]).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (2, "USAGE".into()),
        "{json}"
    );
    let message = json["error"]["message"].as_str().expect("message");
    assert!(message.contains(&format!("use http://{dead}")), "{message}");
    // Pull and `snug sync origin` alike.
    let (code, _) = snug(&["sync", "pull", &a_s, "--origin", &dead_url], &[]).await;
    assert_eq!(code, 10);
    let (code, json) = snug(&["sync", "origin", &dead_url], &[]).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (10, "SYNC_NETWORK".into()),
        "{json}"
    );
    assert_eq!(
        files(&root.path().join("a")),
        before,
        "nothing changed locally"
    );

    // A directory origin that vanished is an error too, never "unchanged".
    std::fs::rename(&dir, root.path().join("moved")).expect("move");
    let (code, json) = snug(&["sync", "push", &a_s, "--origin", &dir], &[]).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (1, "NO_ORIGIN".into()),
        "{json}"
    );
    // With no --origin, the one the file last synced with is used (and still refused here).
    let (code, json) = snug(&["sync", "push", &a_s], &[]).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (1, "NO_ORIGIN".into()),
        "{json}"
    );
    assert_eq!(files(&root.path().join("a")), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_to_a_plain_http_hub_says_so() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let root = tempfile::tempdir().expect("dir");
    let a = device(root.path(), "a");
    let url = format!("https://{}", hub.http);
    let (code, json) = snug(
        &["sync", "push", &a.display().to_string(), "--origin", &url],
        &[("SNUG_TOKEN", &token)],
    )
    .await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (10, "SYNC_NETWORK".into()),
        "{json}"
    );
    let message = json["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("TLS handshake") && message.contains("use http://"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_revision_pulled_is_behind_until_restored_as_a_new_head() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let env = [("SNUG_TOKEN", token.as_str())];
    let root = tempfile::tempdir().expect("dir");
    let url = hub.url();
    let a = device(root.path(), "a");
    let a_s = a.display().to_string();
    let mut revisions = Vec::new();
    for value in ["one", "two", "three"] {
        edit(&a, value);
        let (code, json) = snug(&["sync", "push", &a_s, "--origin", &url], &env).await;
        assert_eq!(code, 0, "{json}");
        revisions.push(json["revision"].as_str().expect("rev").to_owned());
    }
    let (old, newest) = (revisions[0].clone(), revisions[2].clone());
    let old_sha = {
        let answer = snug_e2e::Http::new(hub.http)
            .send(
                "HEAD",
                &format!("/userdb/revisions/{old}"),
                &[("authorization", &snug_e2e::bearer(&token))],
                Payload::Empty,
            )
            .await;
        answer.header("repr-digest").to_owned()
    };

    // The older revision, pulled.
    let (code, json) = snug(
        &["sync", "pull", &a_s, "--origin", &url, "--revision", &old],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(theme(&a).as_deref(), Some("\"one\""));
    // A push is not "unchanged" (the hub is at the newest): it is behind, a divergence.
    let (code, json) = snug(&["sync", "push", &a_s], &env).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (6, "DIVERGED".into()),
        "{json}"
    );
    let message = json["error"]["message"].as_str().expect("message");
    assert!(
        message.contains(&old) && message.contains(&newest) && message.contains("--restore"),
        "{message}"
    );
    assert_eq!(hub_image(&hub, &token).await.1, newest, "nothing pushed");

    // --restore: the file's content becomes a new head, a copy of the old revision.
    let (code, json) = snug(&["sync", "push", &a_s, "--restore"], &env).await;
    assert_eq!(
        (code, json["kind"].clone()),
        (0, "restore".into()),
        "{json}"
    );
    assert_eq!(json["restoredFrom"], old);
    let restored = json["revision"].as_str().expect("rev").to_owned();
    assert!(![&old, &newest].contains(&&restored), "a new revision");
    let (_, etag, body) = hub_image(&hub, &token).await;
    assert_eq!(etag, restored);
    let copy = root.path().join("restored.snug");
    std::fs::write(&copy, &body).expect("write");
    assert_eq!(theme(&copy).as_deref(), Some("\"one\""));
    let head = snug_e2e::Http::new(hub.http)
        .send(
            "HEAD",
            "/userdb",
            &[("authorization", &snug_e2e::bearer(&token))],
            Payload::Empty,
        )
        .await;
    assert_eq!(
        head.header("repr-digest"),
        old_sha,
        "the new head's bytes are the old revision's"
    );
    let listed = snug_e2e::Http::new(hub.http)
        .send(
            "GET",
            "/userdb/revisions",
            &[("authorization", &snug_e2e::bearer(&token))],
            Payload::Empty,
        )
        .await
        .json();
    let revisions: Vec<&str> = listed["revisions"]
        .as_array()
        .expect("revisions")
        .iter()
        .filter_map(|r| r["revision"].as_str())
        .collect();
    assert!(
        revisions.contains(&newest.as_str()),
        "the superseded head stays: {listed}"
    );

    // `snug sync restore`: the hub copies a revision forward in place, and the file gets it.
    let (code, json) = snug(
        &[
            "sync",
            "restore",
            &a_s,
            "--revision",
            &revisions_of(&listed, 1),
        ],
        &env,
    )
    .await;
    assert_eq!((code, json["restored"].clone()), (0, true.into()), "{json}");
    let (_, etag, _) = hub_image(&hub, &token).await;
    assert_eq!(json["revision"], etag);
    assert_eq!(theme(&a).as_deref(), Some("\"three\""), "{json}");
    let (code, json) = snug(&["sync", "push", &a_s], &env).await;
    assert_eq!(
        (code, json["reason"].clone()),
        (0, "UNCHANGED".into()),
        "{json}"
    );
    // Restoring over unpushed changes is refused before the hub changes.
    edit(&a, "unpushed");
    let (code, json) = snug(&["sync", "restore", &a_s, "--revision", &old], &env).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (6, "DIVERGED".into()),
        "{json}"
    );
    assert_eq!(hub_image(&hub, &token).await.1, etag);
}

/// The revision at `index` (newest first) of a `/userdb/revisions` listing.
fn revisions_of(listed: &serde_json::Value, index: usize) -> String {
    listed["revisions"][index]["revision"]
        .as_str()
        .expect("revision")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_with_unpushed_changes_is_never_replaced_without_a_copy() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let env = [("SNUG_TOKEN", token.as_str())];
    let root = tempfile::tempdir().expect("dir");
    let url = hub.url();
    let a = device(root.path(), "a");
    let b = device(root.path(), "b");
    let (a_s, b_s) = (a.display().to_string(), b.display().to_string());
    assert_eq!(
        snug(&["sync", "push", &a_s, "--origin", &url], &env)
            .await
            .0,
        0
    );
    assert_eq!(
        snug(&["sync", "pull", &b_s, "--origin", &url, "--force"], &env)
            .await
            .0,
        0
    );
    edit(&b, "b wins");
    assert_eq!(snug(&["sync", "push", &b_s], &env).await.0, 0);
    edit(&a, "a unpushed work");
    let replaced = std::fs::read(&a).expect("read");

    let (code, json) = snug(&["sync", "pull", &a_s, "--force"], &env).await;
    assert_eq!((code, json["forced"].clone()), (0, true.into()), "{json}");
    let kept = PathBuf::from(json["kept"].as_str().expect("a copy was kept"));
    assert_eq!(
        std::fs::read(&kept).expect("read"),
        replaced,
        "the replaced bytes, exactly"
    );
    assert_eq!(
        theme(&kept).as_deref(),
        Some("\"a unpushed work\""),
        "and it opens"
    );
    assert!(
        kept.file_name()
            .expect("name")
            .to_string_lossy()
            .starts_with("user.snug.replaced-r1-")
    );
    assert_eq!(theme(&a).as_deref(), Some("\"b wins\""));

    // push --force names the head it overwrote, which stays in the hub's history.
    edit(&b, "b again");
    assert_eq!(snug(&["sync", "push", &b_s], &env).await.0, 0);
    let (_, b_head, _) = hub_image(&hub, &token).await;
    edit(&a, "a overwrites");
    let (code, json) = snug(&["sync", "push", &a_s, "--force"], &env).await;
    assert_eq!(
        (code, json["overwrote"].clone()),
        (0, b_head.clone().into()),
        "{json}"
    );
    let listed = snug_e2e::Http::new(hub.http)
        .send(
            "GET",
            "/userdb/revisions",
            &[("authorization", &snug_e2e::bearer(&token))],
            Payload::Empty,
        )
        .await
        .json();
    assert!(
        listed["revisions"]
            .as_array()
            .expect("list")
            .iter()
            .any(|r| r["revision"] == b_head.as_str())
    );

    // A directory keeps no history: the head a forced push overwrites is kept there first.
    let stick = dir_origin(root.path(), "stick").await;
    assert_eq!(
        snug(&["sync", "push", &b_s, "--origin", &stick], &[])
            .await
            .0,
        0
    );
    let b_image = std::fs::read(Path::new(&stick).join("user.snug")).expect("image");
    let (code, json) = snug(&["sync", "push", &a_s, "--origin", &stick, "--force"], &[]).await;
    assert_eq!(code, 0, "{json}");
    let preserved = PathBuf::from(json["preserved"].as_str().expect("kept at the origin"));
    assert_eq!(std::fs::read(&preserved).expect("read"), b_image);
    assert!(preserved.starts_with(&stick));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_releases_sidecar_is_adopted_only_where_revision_and_hash_match() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let env = [("SNUG_TOKEN", token.as_str())];
    let root = tempfile::tempdir().expect("dir");
    let url = hub.url();
    let a = device(root.path(), "a");
    let a_s = a.display().to_string();
    // The earlier release pushed the file's canonical export and recorded the revision with
    // its SHA-256.
    let export = snug_restore::canonical_export(
        &std::fs::read(&a).expect("read"),
        std::sync::Arc::new(snug_schema::SystemClock),
    )
    .expect("export");
    let put = snug_e2e::put_userdb(
        &snug_e2e::Http::new(hub.http),
        &token,
        ("if-none-match", "*"),
        export.clone(),
    )
    .await;
    assert_eq!(put.status, 204, "{}", String::from_utf8_lossy(&put.body));
    let revision: serde_json::Value = put.header("etag").trim_matches('"').into();
    let hash: serde_json::Value = sha256(&export).into();
    let sidecar = root.path().join("a/user.snug.sync.json");
    let legacy = |revision: &serde_json::Value, hash: &serde_json::Value| {
        format!(
            "SNUGSYNC1\n{{\"lastPushedRevision\":{revision},\"lastPushedHash\":{hash},\"lastSyncAt\":\"2026-01-01T00:00:00.000Z\"}}"
        )
    };

    // As the previous release left it: the hub's head is that revision with that hash.
    std::fs::write(&sidecar, legacy(&revision, &hash)).expect("write");
    let (code, json) = snug(&["sync", "push", &a_s, "--origin", &url], &env).await;
    assert_eq!(
        (code, json["reason"].clone()),
        (0, "UNCHANGED".into()),
        "{json}"
    );
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&sidecar).expect("read")).expect("JSON");
    assert_eq!(
        state["unclaimed"],
        serde_json::Value::Null,
        "adopted: {state}"
    );

    // The same record against a directory whose head is another file: never synced there.
    let stick = dir_origin(root.path(), "stick").await;
    let other = device(root.path(), "other");
    edit(&other, "other");
    assert_eq!(
        snug(
            &[
                "sync",
                "push",
                &other.display().to_string(),
                "--origin",
                &stick
            ],
            &[]
        )
        .await
        .0,
        0
    );
    std::fs::write(&sidecar, legacy(&revision, &hash)).expect("write");
    let (code, json) = snug(&["sync", "push", &a_s, "--origin", &stick], &[]).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (6, "DIVERGED".into()),
        "{json}"
    );
    // A refusal changes nothing: the record stays for the origin it belongs to.
    assert_eq!(
        std::fs::read_to_string(&sidecar).expect("read"),
        legacy(&revision, &hash)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_and_a_missing_one_are_told_apart() {
    let hub = Hub::start(Options::default()).await;
    let token = hub.add_user("alice");
    let root = tempfile::tempdir().expect("dir");
    let a = device(root.path(), "a");
    let a_s = a.display().to_string();
    let url = hub.url();
    let (code, json) = snug(
        &["sync", "push", &a_s, "--origin", &url],
        &[("SNUG_TOKEN", "snug_wrong")],
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
            .expect("m")
            .contains("refused the token"),
        "{json}"
    );
    let (code, json) = snug(&["sync", "push", &a_s, "--origin", &url], &[]).await;
    assert_eq!(code, 11, "{json}");
    assert!(
        json["error"]["message"]
            .as_str()
            .expect("m")
            .contains("none was given"),
        "{json}"
    );
    // `snug sync origin` reports a hub too: who it is for this user, and what it holds.
    let (code, json) = snug(&["sync", "origin", &url], &[("SNUG_TOKEN", &token)]).await;
    assert_eq!((code, json["kind"].clone()), (0, "hub".into()), "{json}");
    assert!(
        json["identity"]
            .as_str()
            .is_some_and(|id| id.starts_with("hub:")),
        "{json}"
    );
    assert_eq!(json["revision"], serde_json::Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_client_waits_and_retries() {
    // The hub's shipped rate limits, with a burst this test spends at once.
    let hub = Hub::start(Options {
        rate_limits: true,
        ..Options::default()
    })
    .await;
    let token = hub.add_user("alice");
    let http = snug_e2e::Http::new(hub.http);
    let mut limited = 0;
    for _ in 0..200 {
        let answer = snug_e2e::get_userdb(&http, &token).await;
        if answer.status == 429 {
            assert_eq!(answer.code(), "RATE_LIMITED");
            assert!(!answer.header("retry-after").is_empty());
            limited += 1;
            break;
        }
    }
    assert_eq!(limited, 1, "the burst ran out");
    let root = tempfile::tempdir().expect("dir");
    let a = device(root.path(), "a");
    let (code, json) = snug(
        &[
            "sync",
            "push",
            &a.display().to_string(),
            "--origin",
            &hub.url(),
        ],
        &[("SNUG_TOKEN", &token)],
    )
    .await;
    assert_eq!(
        (code, json["pushed"].clone()),
        (0, true.into()),
        "waited out Retry-After: {json}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_into_a_protected_file_without_a_secret_says_none_was_supplied() {
    let root = tempfile::tempdir().expect("dir");
    let stick = dir_origin(root.path(), "stick").await;
    let plain = device(root.path(), "a");
    let protected = root.path().join("a/protected.snug");
    let passphrase = [("SNUG_PASSPHRASE", "correct horse battery staple")];
    let (code, json) = snug(
        &[
            "protect",
            &plain.display().to_string(),
            "--out",
            &protected.display().to_string(),
        ],
        &passphrase,
    )
    .await;
    assert_eq!(code, 0, "{json}");
    let p = protected.display().to_string();
    let (code, json) = snug(&["sync", "push", &p, "--origin", &stick], &passphrase).await;
    assert_eq!(code, 0, "{json}");
    let before = std::fs::read(&protected).expect("read");
    let (code, json) = snug(&["sync", "pull", &p, "--origin", &stick], &[]).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (3, "LOCKED".into()),
        "{json}"
    );
    let message = json["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("no secret was supplied") && message.contains("SNUG_PASSPHRASE"),
        "{message}"
    );
    assert_eq!(std::fs::read(&protected).expect("read"), before);
}

/// A file another program has open in WAL mode, with a committed change still in its log: a push
/// of its bytes on disk would send the file without that change, so it is refused (exit 7) and
/// nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_with_changes_in_its_write_ahead_log_is_not_pushed() {
    let root = tempfile::tempdir().expect("dir");
    let stick = dir_origin(root.path(), "stick").await;
    let a = device(root.path(), "a");
    let a_s = a.display().to_string();
    let conn = rusqlite::Connection::open(&a).expect("open");
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
         INSERT OR REPLACE INTO snug_settings (key, value) VALUES ('theme', '\"in the log\"');",
    )
    .expect("a change in the log");
    let before = files(Path::new(&stick));
    let (code, json) = snug(&["sync", "push", &a_s, "--origin", &stick], &[]).await;
    assert_eq!(
        (code, json["error"]["code"].clone()),
        (7, "FILE_IN_USE".into()),
        "{json}"
    );
    assert_eq!(files(Path::new(&stick)), before, "nothing was sent");
    drop(conn);
    let (code, json) = snug(&["sync", "push", &a_s, "--origin", &stick], &[]).await;
    assert_eq!((code, json["pushed"].clone()), (0, true.into()), "{json}");
    assert_eq!(
        theme(&Path::new(&stick).join("user.snug")).as_deref(),
        Some("\"in the log\""),
        "the origin has the change"
    );
}
