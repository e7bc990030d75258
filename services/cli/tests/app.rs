//! End-to-end tests of `snug app …` (list, export, sql, persist): exit codes, JSON error codes,
//! results against the reference vectors, and inputs byte-identical whenever nothing changed.

use std::path::{Path, PathBuf};

use snug_test_support::{Snug, query, sha256_hex, vectors_dir};

const PASSPHRASE: &str = "correct horse battery staple";
const UUID_APP: &str = "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c";
const CHESS_APP: &str = "starter--chess";
const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

fn userdb(name: &str) -> PathBuf {
    vectors_dir().join("userdb").join(name)
}

/// A private copy of the sample user database, since some commands replace their FILE.
fn sample_copy(dir: &Path, name: &str) -> PathBuf {
    snug_test_support::sample_copy(dir, name)
}

/// Asserts a refusal: exit code, JSON code, and FILE byte-identical afterwards.
#[track_caller]
fn assert_refused(args: &[&str], env: &[(&str, &str)], file: &Path, exit: i32, code: &str) {
    SNUG.assert_refused(args, env, file, exit, code);
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn tables(path: &Path) -> Vec<String> {
    query(
        path,
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
    )
}

#[test]
fn list_names_both_sample_apps() {
    let file = userdb("sample-v6.user.snug");
    let body = SNUG.json(&["app", "list", p(&file)], &[], 0);
    let apps = body["apps"].as_array().expect("apps");
    let names: Vec<&str> = apps
        .iter()
        .map(|a| a["namespace"].as_str().expect("ns"))
        .collect();
    assert!(
        names.contains(&UUID_APP) && names.contains(&CHESS_APP),
        "{names:?}"
    );
    let text = SNUG.run(&["app", "list", p(&file)], &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("app_x737461727465722d2d6368657373__moves"),
        "{text}"
    );
}

#[test]
fn export_writes_natural_names_for_either_namespace_shape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = userdb("sample-v6.user.snug");
    let before = sha256_hex(&file);
    for (app, expected) in [(UUID_APP, "trades"), (CHESS_APP, "moves")] {
        let out = dir.path().join(format!("{app}.snug"));
        let body = SNUG.json(
            &["app", "export", p(&file), "--app", app, "--out", p(&out)],
            &[],
            0,
        );
        assert_eq!(body["app"], app);
        assert!(
            tables(&out).contains(&expected.to_owned()),
            "{:?}",
            tables(&out)
        );
        assert!(tables(&out).iter().all(|t| !t.starts_with("app_")));
        // An existing OUT is not replaced without --force.
        assert_refused(
            &["app", "export", p(&file), "--app", app, "--out", p(&out)],
            &[],
            &out,
            1,
            "OUTPUT_EXISTS",
        );
    }
    assert_eq!(sha256_hex(&file), before);
}

#[test]
fn sql_reads_without_writing_and_persists_writes_atomically() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = sample_copy(dir.path(), "user.snug");
    let before = sha256_hex(&file);
    let body = SNUG.json(
        &[
            "app",
            "sql",
            p(&file),
            "--app",
            UUID_APP,
            "SELECT symbol, name FROM equities ORDER BY symbol",
        ],
        &[],
        0,
    );
    assert_eq!(body["wrote"], false);
    assert!(
        body["results"][0]["columns"]
            .as_array()
            .is_some_and(|c| c.len() == 2),
        "{body}"
    );
    assert_eq!(sha256_hex(&file), before, "a read rewrote FILE");
    // A no-op write (no row matches) changes nothing, so FILE is not rewritten either.
    let body = SNUG.json(
        &[
            "app",
            "sql",
            p(&file),
            "--app",
            UUID_APP,
            "DELETE FROM trades WHERE symbol = 'nope'",
        ],
        &[],
        0,
    );
    assert_eq!(body["wrote"], false);
    assert_eq!(sha256_hex(&file), before);

    let output = SNUG.run(
        &[
            "app",
            "sql",
            p(&file),
            "--app",
            CHESS_APP,
            "INSERT INTO moves VALUES ('Qh5x')",
        ],
        &[],
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_ne!(sha256_hex(&file), before, "a write did not reach FILE");
    let output = SNUG.run(
        &[
            "app",
            "sql",
            p(&file),
            "--app",
            CHESS_APP,
            "SELECT san FROM moves WHERE san = 'Qh5x'",
        ],
        &[],
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("Qh5x") && text.contains("(1 row(s))"),
        "{text}"
    );
}

#[test]
fn refusals_have_their_exit_codes_and_leave_file_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = sample_copy(dir.path(), "user.snug");
    let garbage = dir.path().join("garbage.bin");
    std::fs::write(&garbage, b"PK\x03\x04 a zip file, not a user database").expect("write");
    let f = p(&file);
    // Usage-level: SQL the user typed, an unknown app.
    assert_refused(
        &[
            "app",
            "sql",
            f,
            "--app",
            UUID_APP,
            "ATTACH DATABASE ':memory:' AS x",
        ],
        &[],
        &file,
        2,
        "FORBIDDEN_STATEMENT",
    );
    assert_refused(
        &[
            "app",
            "sql",
            f,
            "--app",
            UUID_APP,
            "PRAGMA writable_schema = 1",
        ],
        &[],
        &file,
        2,
        "FORBIDDEN_STATEMENT",
    );
    assert_refused(
        &[
            "app",
            "sql",
            f,
            "--app",
            UUID_APP,
            "SELECT load_extension('x')",
        ],
        &[],
        &file,
        2,
        "FORBIDDEN_STATEMENT",
    );
    assert_refused(
        &[
            "app",
            "sql",
            f,
            "--app",
            UUID_APP,
            "SELECT * FROM snug_secrets",
        ],
        &[],
        &file,
        2,
        "STATEMENT_FAILED",
    );
    assert_refused(
        &["app", "sql", f, "--app", UUID_APP, "SELECT 1; SELECT 2"],
        &[],
        &file,
        2,
        "NOT_ONE_STATEMENT",
    );
    assert_refused(
        &[
            "app",
            "sql",
            f,
            "--app",
            CHESS_APP,
            "CREATE TABLE app_x (y)",
        ],
        &[],
        &file,
        2,
        "INVALID_NAME",
    );
    assert_refused(
        &[
            "app",
            "sql",
            f,
            "--app",
            CHESS_APP,
            "--read-only",
            "INSERT INTO moves VALUES ('d4')",
        ],
        &[],
        &file,
        2,
        "READ_ONLY",
    );
    assert_refused(
        &["app", "sql", f, "--app", "no-such-app", "SELECT 1"],
        &[],
        &file,
        2,
        "APP_NOT_FOUND",
    );
    assert_refused(
        &["app", "list", p(&garbage)],
        &[],
        &garbage,
        4,
        "NOT_SQLITE",
    );
    let future = dir.path().join("future.sqlite");
    std::fs::copy(userdb("future-v7.user.sqlite"), &future).expect("copy");
    assert_refused(
        &["app", "list", p(&future)],
        &[],
        &future,
        5,
        "SCHEMA_TOO_NEW",
    );
}

#[test]
fn persist_of_an_unchanged_runtime_does_not_rewrite_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = sample_copy(dir.path(), "user.snug");
    let before = std::fs::read(&file).expect("read");
    let modified = std::fs::metadata(&file)
        .expect("meta")
        .modified()
        .expect("mtime");
    for app in [UUID_APP, CHESS_APP] {
        let token = if app == UUID_APP {
            "a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c"
        } else {
            "x737461727465722d2d6368657373"
        };
        let runtime = userdb(&format!("sample-v6.app-{token}.runtime.sqlite"));
        let body = SNUG.json(
            &[
                "app",
                "persist",
                p(&file),
                "--app",
                app,
                "--from",
                p(&runtime),
            ],
            &[],
            0,
        );
        assert_eq!(body["unchanged"], true, "{body}");
    }
    assert_eq!(std::fs::read(&file).expect("read"), before, "FILE changed");
    assert_eq!(
        std::fs::metadata(&file)
            .expect("meta")
            .modified()
            .expect("mtime"),
        modified
    );
}

#[test]
fn persist_writes_a_changed_runtime_and_refuses_hostile_ones_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = sample_copy(dir.path(), "user.snug");
    let runtime = dir.path().join("chess.sqlite");
    SNUG.json(
        &[
            "app",
            "export",
            p(&file),
            "--app",
            CHESS_APP,
            "--out",
            p(&runtime),
        ],
        &[],
        0,
    );
    let conn = rusqlite::Connection::open(&runtime).expect("open");
    conn.execute_batch(
        "INSERT INTO moves VALUES ('Nf3'); CREATE TABLE games (id INTEGER PRIMARY KEY)",
    )
    .expect("edit");
    drop(conn);
    let before = sha256_hex(&file);
    let body = SNUG.json(
        &[
            "app",
            "persist",
            p(&file),
            "--app",
            CHESS_APP,
            "--from",
            p(&runtime),
        ],
        &[],
        0,
    );
    assert_eq!(body["unchanged"], false, "{body}");
    assert_ne!(sha256_hex(&file), before);
    assert!(tables(&file).contains(&"app_x737461727465722d2d6368657373__games".to_owned()));

    // Hostile names: refused whole, FILE untouched (exit 4: the runtime file is a bad input).
    let long = format!("CREATE TABLE t{} (x)", "a".repeat(41));
    for (name, sql) in [
        ("reserved", "CREATE TABLE snug_apps (x)"),
        ("quote", r#"CREATE TABLE "a""b" (x)"#),
        ("unicode", r#"CREATE TABLE "café" (x)"#),
        ("42 characters", long.as_str()),
    ] {
        let hostile = dir.path().join(format!("hostile-{name}.sqlite"));
        std::fs::copy(&runtime, &hostile).expect("copy");
        rusqlite::Connection::open(&hostile)
            .expect("open")
            .execute_batch(sql)
            .expect(name);
        assert_refused(
            &[
                "app",
                "persist",
                p(&file),
                "--app",
                CHESS_APP,
                "--from",
                p(&hostile),
            ],
            &[],
            &file,
            4,
            "INVALID_NAME",
        );
    }
    let garbage = dir.path().join("garbage.sqlite");
    std::fs::write(&garbage, b"not sqlite").expect("write");
    assert_refused(
        &[
            "app",
            "persist",
            p(&file),
            "--app",
            CHESS_APP,
            "--from",
            p(&garbage),
        ],
        &[],
        &file,
        4,
        "NOT_SQLITE",
    );
    assert_refused(
        &[
            "app",
            "persist",
            p(&file),
            "--app",
            "no-such-app",
            "--from",
            p(&runtime),
        ],
        &[],
        &file,
        2,
        "APP_NOT_FOUND",
    );
}

#[test]
fn a_protected_file_is_read_and_written_with_its_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let protected = dir.path().join("protected.snug");
    let env = [("SNUG_PASSPHRASE", PASSPHRASE)];
    let output = SNUG.run(
        &[
            "protect",
            p(&userdb("sample-v6.user.snug")),
            "--out",
            p(&protected),
            "--iterations",
            "10000",
        ],
        &env,
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let body = SNUG.json(&["app", "list", p(&protected)], &env, 0);
    assert_eq!(body["protected"], true);
    let out = dir.path().join("chess.snug");
    SNUG.json(
        &[
            "app",
            "export",
            p(&protected),
            "--app",
            CHESS_APP,
            "--out",
            p(&out),
        ],
        &env,
        0,
    );
    assert_eq!(tables(&out), vec!["moves".to_owned()]);
    // Reading needs no write; a write is resealed into the protected file (tests/reseal.rs).
    SNUG.json(
        &[
            "app",
            "sql",
            p(&protected),
            "--app",
            CHESS_APP,
            "SELECT count(*) FROM moves",
        ],
        &env,
        0,
    );
    let body = SNUG.json(
        &[
            "app",
            "sql",
            p(&protected),
            "--app",
            CHESS_APP,
            "INSERT INTO moves VALUES ('e4')",
        ],
        &env,
        0,
    );
    assert_eq!(body["wrote"], true);
    assert!(
        std::fs::read(&protected)
            .expect("read")
            .starts_with(b"SNUGENC1\n")
    );
    SNUG.json(
        &[
            "app",
            "persist",
            p(&protected),
            "--app",
            CHESS_APP,
            "--from",
            p(&out),
        ],
        &env,
        0,
    );
    // Without a secret, the healthy file is locked, not corrupt.
    assert_refused(
        &["app", "list", p(&protected)],
        &[],
        &protected,
        3,
        "LOCKED",
    );
}
