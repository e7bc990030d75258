//! `snug app sql` never writes on a read: with the app's schema record lost (its tables still at
//! rest), a SELECT leaves FILE byte-identical and reports the unregistered tables; only a
//! statement that changes the app rewrites FILE, registering them.

use std::{
    path::{Path, PathBuf},
    process::Output,
};

use snug_test_support::{Snug, sample_copy, sha256_hex};

const TRADER: &str = "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c";
const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

fn unregistered_sample(dir: &Path) -> PathBuf {
    let path = sample_copy(dir, "user.snug");
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.execute("DELETE FROM snug_app_schemas WHERE app_id = ?1", [TRADER])
        .expect("lose the schema record");
    drop(conn);
    path
}

fn snug(args: &[&str]) -> (Output, serde_json::Value) {
    let output = SNUG
        .command()
        .args(args)
        .arg("--json")
        .output()
        .expect("run snug");
    let body = snug_test_support::json(&output);
    (output, body)
}

fn registered(path: &Path) -> bool {
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM snug_app_schemas WHERE app_id = ?1)",
        [TRADER],
        |row| row.get(0),
    )
    .expect("query")
}

#[test]
fn a_select_leaves_file_byte_identical_and_reports_the_unregistered_tables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = unregistered_sample(dir.path());
    let f = file.to_str().expect("utf-8");
    let before = sha256_hex(&file);
    for read_only in [false, true] {
        let mut args = vec![
            "app",
            "sql",
            f,
            "--app",
            TRADER,
            "SELECT count(*) FROM trades",
        ];
        if read_only {
            args.push("--read-only");
        }
        let (output, body) = snug(&args);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {body}");
        assert_eq!(body["wrote"], false, "{body}");
        assert_eq!(
            body["unregistered_tables"],
            serde_json::json!(["trades", "equities"])
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("trades, equities"), "a warning: {stderr}");
        assert_eq!(sha256_hex(&file), before, "{args:?} rewrote {f}");
    }
    assert!(!registered(&file));
}

#[test]
fn a_write_rewrites_file_and_registers_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = unregistered_sample(dir.path());
    let f = file.to_str().expect("utf-8");
    let before = sha256_hex(&file);
    let (output, body) = snug(&[
        "app",
        "sql",
        f,
        "--app",
        TRADER,
        "INSERT INTO trades (symbol, qty) VALUES ('NEW', 1)",
    ]);
    assert_eq!(output.status.code(), Some(0), "{body}");
    assert_eq!(body["wrote"], true);
    assert_eq!(body["unregistered_tables"], serde_json::json!([]));
    assert_ne!(sha256_hex(&file), before);
    assert!(registered(&file));
}
