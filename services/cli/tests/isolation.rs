//! §8.2 isolation on the command line: in a file where two registered apps share an
//! `appDataToken` (`A7F3…` beside `a7f3…`), `snug app sql`, `persist` and `export` refuse either
//! namespace, and `snug check` and `snug migrate` refuse the file (exit 4, `APP_TOKEN_COLLISION`),
//! with FILE byte-identical and no output written.

use std::path::{Path, PathBuf};

use snug_test_support::{Snug, sample_copy, sha256_hex, vectors_dir};

const LOWER: &str = "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c";
const UPPER: &str = "A7F3B2C1-0D4E-4F5A-8B6C-9D0E1F2A3B4C";
const CHESS_APP: &str = "starter--chess";
const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

fn userdb(name: &str) -> PathBuf {
    vectors_dir().join("userdb").join(name)
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// The reference sample with a twin of its UUID app registered under the upper-case id, so the
/// twin's token names the sample app's `trades` tables.
fn colliding_file(dir: &Path) -> PathBuf {
    let path = sample_copy(dir, "user.snug");
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.execute(
        "INSERT INTO snug_apps (app_id, display_name, uses_db, current_version, created_at, updated_at) \
         VALUES (?1, 'Twin', 1, 1, 't', 't')",
        [UPPER],
    )
    .expect("insert the twin");
    drop(conn);
    path
}

/// Runs `snug ARGS --json` and asserts the collision refusal and an unchanged FILE.
#[track_caller]
fn assert_collision(args: &[&str], file: &Path) {
    let before = sha256_hex(file);
    let mut args = args.to_vec();
    args.push("--json");
    let output = SNUG.run(&args, &[]);
    let body = snug_test_support::json(&output);
    assert_eq!(output.status.code(), Some(4), "{args:?}: {body}");
    assert_eq!(
        body["error"]["code"], "APP_TOKEN_COLLISION",
        "{args:?}: {body}"
    );
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(LOWER) && message.contains(UPPER),
        "{args:?}: the message names both apps: {message}"
    );
    assert_eq!(
        sha256_hex(file),
        before,
        "{args:?} changed {}",
        file.display()
    );
}

#[test]
fn app_commands_refuse_either_namespace_of_a_shared_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = colliding_file(dir.path());
    let f = p(&file);
    let runtime = userdb("sample-v6.app-a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c.runtime.sqlite");
    let out = dir.path().join("app.snug");
    for app in [UPPER, LOWER] {
        assert_collision(
            &["app", "sql", f, "--app", app, "SELECT * FROM trades"],
            &file,
        );
        assert_collision(
            &["app", "sql", f, "--app", app, "DELETE FROM trades"],
            &file,
        );
        assert_collision(
            &["app", "persist", f, "--app", app, "--from", p(&runtime)],
            &file,
        );
        assert_collision(&["app", "export", f, "--app", app, "--out", p(&out)], &file);
        assert!(!out.exists(), "no export of the shared tables");
    }
    // An app outside the pair still works.
    let output = SNUG.run(
        &["app", "export", f, "--app", CHESS_APP, "--out", p(&out)],
        &[],
    );
    assert!(output.status.success(), "{output:?}");
}

#[test]
fn check_and_migrate_refuse_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = colliding_file(dir.path());
    let out = dir.path().join("migrated.snug");
    assert_collision(&["check", p(&file)], &file);
    assert_collision(&["migrate", p(&file), "--out", p(&out)], &file);
    assert!(!out.exists(), "no migrated copy of a refused file");
}
