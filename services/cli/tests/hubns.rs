//! End-to-end tests of the hub-namespace commands (issue 17 point 12): on a new file an app can be
//! installed and then used by `snug app sql`; apps and versions, docs, chat, settings, profile,
//! sync config and secrets round-trip with the reference's encodings; every bad input has its
//! JSON code and exit code and leaves FILE byte-identical.

use std::path::{Path, PathBuf};

use serde_json::Value;
use snug_test_support::{Snug, sha256_hex, vectors_dir};

const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Runs `snug ARGS --json` with `env`, asserts the exit code and returns the JSON body.
#[track_caller]
fn run_env(args: &[&str], env: &[(&str, &str)], exit: i32) -> Value {
    SNUG.json(args, env, exit)
}

#[track_caller]
fn ok(args: &[&str]) -> Value {
    let body = run_env(args, &[], 0);
    assert_eq!(body["ok"], true, "{body}");
    body
}

/// Asserts a refusal: exit code, JSON code, and `file` byte-identical afterwards.
#[track_caller]
fn refused(args: &[&str], file: &Path, exit: i32, code: &str) {
    SNUG.assert_refused(args, &[], file, exit, code);
}

/// Asserts a successful command that had nothing to do: FILE is not rewritten.
#[track_caller]
fn unchanged(args: &[&str], file: &Path) -> Value {
    let before = sha256_hex(file);
    let body = ok(args);
    assert_eq!(body["written"], false, "{body}");
    assert_eq!(
        sha256_hex(file),
        before,
        "{args:?} rewrote {}",
        file.display()
    );
    body
}

fn new_file(dir: &Path) -> PathBuf {
    let file = dir.join("user.snug");
    ok(&["init", p(&file)]);
    file
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

fn query(file: &Path, sql: &str) -> Vec<String> {
    snug_test_support::query(file, sql)
}

#[test]
fn an_app_installed_offline_on_a_new_file_takes_sql() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = new_file(dir.path());
    // Before the install there is no app to run SQL against.
    refused(
        &["app", "sql", p(&file), "--app", "notes", "SELECT 1"],
        &file,
        2,
        "APP_NOT_FOUND",
    );
    let html = write(dir.path(), "notes.html", "<h1>Notes</h1>");
    let body = ok(&[
        "app",
        "install",
        p(&file),
        "--app",
        "notes",
        "--name",
        "Notes",
        "--html-file",
        p(&html),
        "--uses-db",
    ]);
    assert_eq!(
        (&body["app_id"], &body["created"]),
        (&"notes".into(), &true.into())
    );
    assert_eq!(body["written"], true);

    ok(&[
        "app",
        "sql",
        p(&file),
        "--app",
        "notes",
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)",
        "INSERT INTO notes (body) VALUES ('offline works')",
    ]);
    let body = ok(&[
        "app",
        "sql",
        p(&file),
        "--app",
        "notes",
        "SELECT body FROM notes",
    ]);
    assert_eq!(body["results"][0]["rows"][0][0], "offline works", "{body}");

    let shown = ok(&["app", "show", p(&file), "--app", "notes"]);
    assert_eq!(shown["app"]["display_name"], "Notes");
    assert_eq!(shown["version"]["html"], "<h1>Notes</h1>");
    assert_eq!(
        shown["version"]["pinned"], true,
        "version 1 is the factory version"
    );
    let html_only = SNUG.run(&["app", "show", p(&file), "--app", "notes", "--html"], &[]);
    assert_eq!(
        String::from_utf8_lossy(&html_only.stdout),
        "<h1>Notes</h1>\n"
    );

    // A taken id is refused; the same install source is found again, not installed twice.
    refused(
        &["app", "install", p(&file), "--app", "notes"],
        &file,
        2,
        "APP_EXISTS",
    );
    let first = ok(&[
        "app",
        "install",
        p(&file),
        "--name",
        "Chess",
        "--install-source",
        "starter:chess",
    ]);
    assert_eq!(first["created"], true);
    let again = unchanged(
        &[
            "app",
            "install",
            p(&file),
            "--name",
            "Chess again",
            "--install-source",
            "starter:chess",
        ],
        &file,
    );
    assert_eq!(again["created"], false);
    assert_eq!(again["app_id"], first["app_id"]);
    let apps = ok(&["app", "show", p(&file)]);
    assert_eq!(apps["apps"].as_array().expect("apps").len(), 2);
    refused(&["app", "install", p(&file)], &file, 2, "USAGE");
}

#[test]
fn versions_save_revert_reset_delete_and_their_refusals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = new_file(dir.path());
    let v1 = write(dir.path(), "v1.html", "<p>v1</p>");
    let v2 = write(dir.path(), "v2.html", "<p>v2</p>");
    ok(&[
        "app",
        "install",
        p(&file),
        "--app",
        "a",
        "--html-file",
        p(&v1),
    ]);
    let contract = write(dir.path(), "contract.json", r#"{"overview":"notes"}"#);
    let saved = ok(&[
        "app",
        "save",
        p(&file),
        "--app",
        "a",
        "--html-file",
        p(&v2),
        "--note",
        "second",
        "--contract-file",
        p(&contract),
    ]);
    assert_eq!(saved["version"], 2);
    assert_eq!(
        query(
            &file,
            "SELECT runtime_contract_json FROM snug_app_versions WHERE version = 2"
        ),
        [r#"{"overview":"notes"}"#]
    );
    let reverted = ok(&["app", "revert", p(&file), "--app", "a", "--to", "1"]);
    assert_eq!(reverted["version"], 3);
    let reset = ok(&["app", "reset", p(&file), "--app", "a"]);
    assert_eq!(reset["version"], 4);
    assert_eq!(
        query(
            &file,
            "SELECT coalesce(note, '') FROM snug_app_versions WHERE app_id = 'a' ORDER BY version"
        ),
        ["", "second", "revert to v1", "reset to factory (v1)"]
    );
    let versions = ok(&["app", "versions", p(&file), "--app", "a"]);
    let numbers: Vec<i64> = versions["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| v["version"].as_i64().expect("number"))
        .collect();
    assert_eq!(numbers, [4, 3, 2, 1], "newest first");
    ok(&[
        "app",
        "delete-version",
        p(&file),
        "--app",
        "a",
        "--version",
        "2",
    ]);

    refused(
        &[
            "app",
            "save",
            p(&file),
            "--app",
            "nope",
            "--html-file",
            p(&v2),
        ],
        &file,
        2,
        "APP_NOT_FOUND",
    );
    let array = write(dir.path(), "array.json", "[1]");
    refused(
        &[
            "app",
            "save",
            p(&file),
            "--app",
            "a",
            "--html-file",
            p(&v2),
            "--contract-file",
            p(&array),
        ],
        &file,
        2,
        "INVALID_CONTRACT",
    );
    refused(
        &[
            "app",
            "save",
            p(&file),
            "--app",
            "a",
            "--html-file",
            p(&v2),
            "--contract-from",
            "2",
        ],
        &file,
        2,
        "VERSION_NOT_FOUND",
    );
    refused(
        &["app", "versions", p(&file), "--app", "nope"],
        &file,
        2,
        "APP_NOT_FOUND",
    );
    refused(
        &["app", "show", p(&file), "--app", "a", "--version", "99"],
        &file,
        2,
        "VERSION_NOT_FOUND",
    );
    refused(
        &["app", "revert", p(&file), "--app", "a", "--to", "2"],
        &file,
        2,
        "VERSION_NOT_FOUND",
    );
    refused(
        &["app", "reset", p(&file), "--app", "nope"],
        &file,
        2,
        "APP_NOT_FOUND",
    );
    refused(
        &[
            "app",
            "delete-version",
            p(&file),
            "--app",
            "a",
            "--version",
            "4",
        ],
        &file,
        2,
        "VERSION_CURRENT",
    );
    refused(
        &[
            "app",
            "delete-version",
            p(&file),
            "--app",
            "a",
            "--version",
            "1",
        ],
        &file,
        2,
        "VERSION_PINNED",
    );
    refused(&["app", "meta", p(&file), "--app", "a"], &file, 2, "USAGE");
    refused(
        &["app", "meta", p(&file), "--app", "nope", "--name", "X"],
        &file,
        2,
        "APP_NOT_FOUND",
    );
    refused(
        &["app", "delete", p(&file), "--app", "nope"],
        &file,
        2,
        "APP_NOT_FOUND",
    );
    refused(
        &["app", "model", p(&file), "--app", "nope", "claude-x"],
        &file,
        2,
        "APP_NOT_FOUND",
    );

    let meta = ok(&[
        "app",
        "meta",
        p(&file),
        "--app",
        "a",
        "--name",
        "Renamed",
        "--icon-emoji",
        "📝",
    ]);
    assert_eq!(meta["app"]["display_name"], "Renamed");
    assert_eq!(meta["app"]["icon_emoji"], "📝");
    ok(&["app", "model", p(&file), "--app", "a", "claude-x"]);
    assert_eq!(
        query(
            &file,
            "SELECT value FROM snug_settings WHERE key = 'appModel:a'"
        ),
        [r#""claude-x""#]
    );
    unchanged(&["app", "model", p(&file), "--app", "a", "claude-x"], &file);
    assert_eq!(
        ok(&["app", "model", p(&file), "--app", "a"])["model"],
        "claude-x"
    );
    ok(&["app", "model", p(&file), "--app", "a", "--clear"]);
    assert!(
        query(
            &file,
            "SELECT value FROM snug_settings WHERE key = 'appModel:a'"
        )
        .is_empty()
    );
}

#[test]
fn deleting_an_app_removes_everything_it_owns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = new_file(dir.path());
    ok(&["app", "install", p(&file), "--app", "a", "--uses-db"]);
    ok(&[
        "app",
        "sql",
        p(&file),
        "--app",
        "a",
        "CREATE TABLE t (x)",
        "INSERT INTO t VALUES (1)",
    ]);
    let doc = write(dir.path(), "vision.md", "# Vision\nkeep it small");
    ok(&["docs", "seed", p(&file), "--app", "a", p(&doc)]);
    ok(&[
        "chat",
        "append",
        p(&file),
        "--thread",
        "app:a",
        "--app",
        "a",
        "--role",
        "user",
        "--content",
        "hi",
    ]);
    ok(&["app", "model", p(&file), "--app", "a", "m"]);
    let value = write(dir.path(), "value.txt", "sk-test\n");
    ok(&[
        "secrets",
        "set",
        p(&file),
        "auth:a:broker:api_key",
        "--value-file",
        p(&value),
    ]);

    let deleted = ok(&["app", "delete", p(&file), "--app", "a"]);
    let report = &deleted["deleted"];
    assert_eq!(
        report["tables_dropped"].as_array().expect("tables").len(),
        1,
        "{report}"
    );
    assert_eq!(report["secrets_deleted"], 1);
    assert_eq!(report["settings_deleted"], 1);
    for table in [
        "snug_apps",
        "snug_app_versions",
        "snug_app_docs",
        "snug_chat_threads",
        "snug_secrets",
    ] {
        assert_eq!(
            query(
                &file,
                &format!("SELECT CAST(count(*) AS TEXT) FROM {table}")
            ),
            ["0"],
            "{table}"
        );
    }
    assert!(
        query(
            &file,
            "SELECT name FROM sqlite_master WHERE name LIKE 'app_%'"
        )
        .is_empty(),
        "the data table went too"
    );
}

#[test]
fn docs_seed_absent_slugs_only_and_refuse_unknown_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = new_file(dir.path());
    ok(&["app", "install", p(&file), "--app", "a"]);
    let vision = write(dir.path(), "vision.md", "# The vision\nfirst");
    let lessons = write(dir.path(), "lessons.md", "no heading");
    let prompt_b = write(dir.path(), "b.txt", "second prompt");
    let prompt_a = write(dir.path(), "a.txt", "first prompt");
    let seeded = ok(&[
        "docs",
        "seed",
        p(&file),
        "--app",
        "a",
        p(&vision),
        p(&lessons),
        "--prompt",
        p(&prompt_b),
        "--prompt",
        p(&prompt_a),
    ]);
    assert_eq!(seeded["seeded"], 3);
    let got = ok(&["docs", "get", p(&file), "--app", "a", "--slug", "vision"]);
    assert_eq!(got["doc"]["title"], "The vision");
    let prompt = ok(&[
        "docs",
        "get",
        p(&file),
        "--app",
        "a",
        "--slug",
        "build-prompt",
    ]);
    assert_eq!(
        prompt["doc"]["content"],
        "first prompt\n\n---\n\nsecond prompt"
    );

    // The wiki is the app's living memory: an edited doc survives a second seeding.
    let edited = write(dir.path(), "edited.md", "edited by the app");
    ok(&[
        "docs",
        "set",
        p(&file),
        "--app",
        "a",
        "--slug",
        "vision",
        "--content-file",
        p(&edited),
    ]);
    let again = unchanged(&["docs", "seed", p(&file), "--app", "a", p(&vision)], &file);
    assert_eq!(again["seeded"], 0);
    let got = ok(&["docs", "get", p(&file), "--app", "a", "--slug", "vision"]);
    assert_eq!(got["doc"]["content"], "edited by the app");
    assert_eq!(got["doc"]["title"], "The vision", "the title is kept");
    let listed = ok(&["docs", "list", p(&file), "--app", "a"]);
    assert_eq!(listed["docs"].as_array().expect("docs").len(), 3);
    ok(&[
        "docs",
        "delete",
        p(&file),
        "--app",
        "a",
        "--slug",
        "lessons",
    ]);

    refused(
        &["docs", "seed", p(&file), "--app", "nope", p(&vision)],
        &file,
        2,
        "APP_NOT_FOUND",
    );
    refused(&["docs", "seed", p(&file), "--app", "a"], &file, 2, "USAGE");
    refused(
        &[
            "docs",
            "set",
            p(&file),
            "--app",
            "nope",
            "--slug",
            "x",
            "--content-file",
            p(&edited),
        ],
        &file,
        2,
        "APP_NOT_FOUND",
    );
    refused(
        &["docs", "get", p(&file), "--app", "a", "--slug", "lessons"],
        &file,
        2,
        "DOC_NOT_FOUND",
    );
    refused(
        &[
            "docs",
            "delete",
            p(&file),
            "--app",
            "a",
            "--slug",
            "lessons",
        ],
        &file,
        2,
        "DOC_NOT_FOUND",
    );
    refused(
        &["docs", "list", p(&file), "--app", "nope"],
        &file,
        2,
        "APP_NOT_FOUND",
    );
    let binary = dir.path().join("binary.md");
    std::fs::write(&binary, [0xff, 0xfe]).expect("write");
    refused(
        &[
            "docs",
            "set",
            p(&file),
            "--app",
            "a",
            "--slug",
            "x",
            "--content-file",
            p(&binary),
        ],
        &file,
        2,
        "INVALID_ARGUMENT",
    );
}

#[test]
fn chat_append_prune_pin_and_delete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = new_file(dir.path());
    let first = ok(&[
        "chat",
        "append",
        p(&file),
        "--thread",
        "thr-1",
        "--title",
        "Plans",
        "--role",
        "system",
        "--content",
        "bootstrap",
        "--pinned",
    ]);
    let first_id = first["message_id"].as_i64().expect("id");
    for n in 0..4 {
        ok(&[
            "chat",
            "append",
            p(&file),
            "--thread",
            "thr-1",
            "--role",
            "user",
            "--content",
            &format!("m{n}"),
            "--meta",
            r#"{"n": 1}"#,
        ]);
    }
    let pruned = ok(&[
        "chat",
        "prune",
        p(&file),
        "--thread",
        "thr-1",
        "--keep",
        "2",
    ]);
    assert_eq!(pruned["deleted"], 2);
    unchanged(
        &[
            "chat",
            "prune",
            p(&file),
            "--thread",
            "thr-1",
            "--keep",
            "2",
        ],
        &file,
    );
    let messages = ok(&["chat", "messages", p(&file), "--thread", "thr-1"]);
    let contents: Vec<&str> = messages["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["content"].as_str().expect("content"))
        .collect();
    assert_eq!(
        contents,
        ["bootstrap", "m2", "m3"],
        "the pinned one survives"
    );
    assert_eq!(
        messages["messages"][1]["meta"], r#"{"n":1}"#,
        "meta in compact JSON"
    );
    let page = ok(&[
        "chat",
        "messages",
        p(&file),
        "--thread",
        "thr-1",
        "--limit",
        "1",
    ]);
    assert_eq!(page["more"], true);
    let threads = ok(&["chat", "threads", p(&file)]);
    assert_eq!(threads["threads"][0]["title"], "Plans");
    ok(&[
        "chat",
        "pin",
        p(&file),
        "--message",
        &first_id.to_string(),
        "--unpin",
    ]);

    refused(
        &[
            "chat",
            "append",
            p(&file),
            "--thread",
            "thr-1",
            "--role",
            "robot",
            "--content",
            "x",
        ],
        &file,
        2,
        "INVALID_ARGUMENT",
    );
    refused(
        &[
            "chat",
            "append",
            p(&file),
            "--thread",
            "thr-1",
            "--role",
            "user",
            "--content",
            "x",
            "--meta",
            "{nope",
        ],
        &file,
        2,
        "INVALID_ARGUMENT",
    );
    refused(
        &[
            "chat",
            "append",
            p(&file),
            "--thread",
            "thr-1",
            "--role",
            "user",
        ],
        &file,
        2,
        "USAGE",
    );
    refused(
        &["chat", "pin", p(&file), "--message", "9999"],
        &file,
        2,
        "MESSAGE_NOT_FOUND",
    );
    refused(
        &[
            "chat",
            "prune",
            p(&file),
            "--thread",
            "thr-none",
            "--keep",
            "1",
        ],
        &file,
        2,
        "THREAD_NOT_FOUND",
    );
    refused(
        &["chat", "messages", p(&file), "--thread", "thr-none"],
        &file,
        2,
        "THREAD_NOT_FOUND",
    );

    let deleted = ok(&["chat", "delete", p(&file), "--thread", "thr-1"]);
    assert_eq!(deleted["deleted"], 3);
    refused(
        &["chat", "delete", p(&file), "--thread", "thr-1"],
        &file,
        2,
        "THREAD_NOT_FOUND",
    );
}

#[test]
fn settings_profile_and_sync_config_use_the_compact_json_encoding() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = new_file(dir.path());
    for (group, table, key, given, stored) in [
        (
            "settings",
            "snug_settings",
            "mode",
            r#" "byok" "#,
            r#""byok""#,
        ),
        (
            "settings",
            "snug_settings",
            "endpoints",
            r#"{ "a": [1, 2], "b": true }"#,
            r#"{"a":[1,2],"b":true}"#,
        ),
        (
            "profile",
            "snug_profile",
            "displayName",
            r#""Ada""#,
            r#""Ada""#,
        ),
        (
            "sync-config",
            "snug_sync",
            "origin",
            r#"{"kind": "hub"}"#,
            r#"{"kind":"hub"}"#,
        ),
    ] {
        ok(&[group, "set", p(&file), key, given]);
        assert_eq!(
            query(
                &file,
                &format!("SELECT value FROM {table} WHERE key = '{key}'")
            ),
            [stored],
            "{group} {key}"
        );
        let got = ok(&[group, "get", p(&file), key]);
        assert_eq!(got["value_json"], stored);
        unchanged(&[group, "set", p(&file), key, stored], &file);
        let listed = ok(&[group, "list", p(&file)]);
        assert!(
            listed["entries"]
                .as_array()
                .expect("entries")
                .iter()
                .any(|e| e["key"] == key),
            "{listed}"
        );
        refused(
            &[group, "set", p(&file), key, "{not json"],
            &file,
            2,
            "INVALID_ARGUMENT",
        );
        let deleted = ok(&[group, "delete", p(&file), key]);
        assert_eq!(deleted["existed"], true);
        let absent = unchanged(&[group, "delete", p(&file), key], &file);
        assert_eq!(absent["existed"], false);
        assert_eq!(ok(&[group, "get", p(&file), key])["present"], false);
    }

    ok(&[
        "settings",
        "sidecar-identities",
        p(&file),
        "--set",
        "alice",
        "--set",
        "bob",
    ]);
    assert_eq!(
        ok(&["settings", "sidecar-identities", p(&file)])["identities"],
        serde_json::json!(["alice", "bob"])
    );
    ok(&["settings", "sidecar-identities", p(&file), "--clear"]);
    assert!(
        query(
            &file,
            "SELECT value FROM snug_settings WHERE key = 'sidecarIdentityDirectory'"
        )
        .is_empty()
    );

    // A row no conforming hub writes is a damaged file.
    let conn = rusqlite::Connection::open(&file).expect("open");
    conn.execute(
        "INSERT INTO snug_settings (key, value) VALUES ('broken', 'not json')",
        [],
    )
    .expect("insert");
    drop(conn);
    refused(
        &["settings", "get", p(&file), "broken"],
        &file,
        4,
        "CORRUPT_ROW",
    );
}

#[test]
fn secrets_are_raw_text_never_from_argv_and_listed_by_key_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = new_file(dir.path());
    let value = write(dir.path(), "key.txt", "sk-ant-example\n");
    ok(&[
        "secrets",
        "set",
        p(&file),
        "byok:anthropic",
        "--value-file",
        p(&value),
    ]);
    assert_eq!(
        query(
            &file,
            "SELECT value FROM snug_secrets WHERE key = 'byok:anthropic'"
        ),
        ["sk-ant-example"],
        "raw text, trailing newline dropped"
    );
    let body = run_env(
        &["secrets", "set", p(&file), "byok:openai"],
        &[("SNUG_SECRET_VALUE", "sk-env")],
        0,
    );
    assert_eq!(body["ok"], true);
    let listed = ok(&["secrets", "list", p(&file)]);
    assert_eq!(
        listed["keys"],
        serde_json::json!(["byok:anthropic", "byok:openai"])
    );
    assert!(
        !listed.to_string().contains("sk-"),
        "values are never listed"
    );
    refused(&["secrets", "set", p(&file), "byok:x"], &file, 2, "USAGE");
    ok(&["secrets", "delete", p(&file), "byok:openai"]);
    unchanged(&["secrets", "delete", p(&file), "byok:openai"], &file);
}

#[test]
fn every_writer_refuses_protected_newer_and_foreign_files_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let protected = dir.path().join("protected.snug");
    std::fs::copy(
        vectors_dir().join("containers/c01-reference-random-600k.snug"),
        &protected,
    )
    .expect("copy");
    let too_new = dir.path().join("too-new.snug");
    std::fs::copy(vectors_dir().join("userdb/sample-v6.user.snug"), &too_new).expect("copy");
    let conn = rusqlite::Connection::open(&too_new).expect("open");
    conn.execute_batch("PRAGMA user_version = 7;")
        .expect("stamp");
    drop(conn);
    let garbage = write(dir.path(), "garbage.snug", "not a database");
    let html = write(dir.path(), "x.html", "<p>x</p>");
    let value = write(dir.path(), "v.txt", "v");
    let writers: Vec<Vec<String>> = [
        vec!["app", "install", "FILE", "--app", "x"],
        vec!["app", "save", "FILE", "--app", "x", "--html-file", p(&html)],
        vec!["app", "revert", "FILE", "--app", "x", "--to", "1"],
        vec!["app", "reset", "FILE", "--app", "x"],
        vec!["app", "delete", "FILE", "--app", "x"],
        vec![
            "docs",
            "set",
            "FILE",
            "--app",
            "x",
            "--slug",
            "s",
            "--content-file",
            p(&html),
        ],
        vec![
            "chat",
            "append",
            "FILE",
            "--thread",
            "t",
            "--role",
            "user",
            "--content",
            "c",
        ],
        vec!["settings", "set", "FILE", "k", "1"],
        vec!["profile", "delete", "FILE", "k"],
        vec!["sync-config", "set", "FILE", "k", "1"],
        vec!["secrets", "set", "FILE", "k", "--value-file", p(&value)],
    ]
    .into_iter()
    .map(|args| args.into_iter().map(str::to_owned).collect())
    .collect();
    for (file, exit, code) in [
        (&protected, 3, "PROTECTED"),
        (&too_new, 5, "SCHEMA_TOO_NEW"),
        (&garbage, 4, "NOT_SQLITE"),
    ] {
        for args in &writers {
            let args: Vec<&str> = args
                .iter()
                .map(|a| if a == "FILE" { p(file) } else { a.as_str() })
                .collect();
            refused(&args, file, exit, code);
        }
    }
    // Readers open a protected file with its secret, and never write it.
    let before = sha256_hex(&protected);
    let body = run_env(
        &["settings", "list", p(&protected)],
        &[("SNUG_PASSPHRASE", "correct horse battery staple")],
        0,
    );
    assert_eq!(body["ok"], true, "{body}");
    assert_eq!(sha256_hex(&protected), before);
    refused(
        &["settings", "list", p(&protected)],
        &protected,
        3,
        "LOCKED",
    );
}

/// A writer refuses FILE while another program has it open in WAL mode with changes in its log:
/// replacing it would lose them, and that program would write them into the new file.
#[test]
fn a_writer_leaves_a_file_with_changes_in_its_write_ahead_log_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = new_file(dir.path());
    let conn = with_a_change_in_its_log(&file);
    refused(
        &["settings", "set", p(&file), "mode", r#""byok""#],
        &file,
        7,
        "FILE_IN_USE",
    );
    drop(conn);
    ok(&["settings", "set", p(&file), "mode", r#""byok""#]);
    assert_eq!(
        query(
            &file,
            "SELECT value FROM snug_profile WHERE key = 'displayName'"
        ),
        [r#""in the log""#],
        "the change in the log is kept"
    );
}

/// A reader sees what SQLite sees: the changes another program committed to the write-ahead log
/// of FILE and not yet into it, read through SQLite, with FILE and its log left as they are.
#[test]
fn a_reader_sees_the_changes_in_the_write_ahead_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = new_file(dir.path());
    let conn = with_a_change_in_its_log(&file);
    let before = (
        sha256_hex(&file),
        sha256_hex(&dir.path().join("user.snug-wal")),
    );
    let got = ok(&["profile", "get", p(&file), "displayName"]);
    assert_eq!(got["value_json"], r#""in the log""#, "{got}");
    let out = dir.path().join("export.snug");
    ok(&["export", p(&file), "--out", p(&out)]);
    assert_eq!(
        query(
            &out,
            "SELECT value FROM snug_profile WHERE key = 'displayName'"
        ),
        [r#""in the log""#]
    );
    assert_eq!(
        (
            sha256_hex(&file),
            sha256_hex(&dir.path().join("user.snug-wal"))
        ),
        before,
        "reading wrote nothing"
    );
    drop(conn);
}

/// Opens `file` as another program would, in WAL mode, and commits a change that stays in the
/// log while the returned connection is open.
fn with_a_change_in_its_log(file: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(file).expect("open");
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
         INSERT INTO snug_profile (key, value) VALUES ('displayName', '\"in the log\"');",
    )
    .expect("a change in the log");
    conn
}
