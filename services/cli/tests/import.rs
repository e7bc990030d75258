//! End-to-end tests of `snug import IN --into FILE` (issue 17 point 7): reconciliation against
//! FILE's grants, the contract guard and the re-confirmation latch; typed refusals with exit
//! codes, and IN and FILE byte-identical whenever the import is refused.

use std::path::{Path, PathBuf};

use snug_test_support::{Snug, assert_refusal, query, sha256_hex, vector};

const SAMPLE_APP: &str = "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c";
const APPROVED_AT: &str = "2026-03-03T00:00:00.000Z";
const SNUG: Snug = Snug::new(env!("CARGO_BIN_EXE_snug"));

/// A copy of the sample user database at `dir/name`, changed by `sql`.
fn sample_with(dir: &Path, name: &str, sql: &str) -> PathBuf {
    let path = snug_test_support::sample_copy(dir, name);
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.execute_batch(sql).expect("sql");
    drop(conn);
    path
}

/// The sample with a second, structurally unusable connection row and the latch turned off.
fn incoming(dir: &Path) -> PathBuf {
    sample_with(
        dir,
        "incoming.snug",
        &format!(
            "INSERT INTO snug_connections (app_id, slot, requirement_json, requirement_version, \
             provenance, status, allowed_hosts, created_at, updated_at) VALUES ('{SAMPLE_APP}', \
             'feed', '{{\"slot\":\"feed\",\"nope\":1}}', 1, 'inference', 'approved', '[]', 't', 't'); \
             INSERT OR REPLACE INTO snug_settings (key, value) VALUES ('needsEndpointConfirm', 'false');"
        ),
    )
}

/// The sample as the user's own file holds it once they approved the broker connection.
fn user_file(dir: &Path) -> PathBuf {
    sample_with(
        dir,
        "user.snug",
        &format!(
            "UPDATE snug_connections SET status = 'approved', approved_at = '{APPROVED_AT}', \
             requirement_version = 2;"
        ),
    )
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Asserts a refused import: exit code, JSON code, and both files as they were.
#[track_caller]
fn assert_refused(input: &Path, into: &Path, env: &[(&str, &str)], exit: i32, code: &str) {
    let before = (sha256_hex(input), into.exists().then(|| sha256_hex(into)));
    let body = SNUG.json(&["import", p(input), "--into", p(into)], env, exit);
    assert_refusal(&body, exit, code);
    let after = (sha256_hex(input), into.exists().then(|| sha256_hex(into)));
    assert_eq!(after, before, "a refused import changed a file");
}

#[test]
fn import_reconciles_against_the_users_file_and_reports_the_dropped_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = incoming(dir.path());
    let into = user_file(dir.path());
    let input_hash = sha256_hex(&input);

    let body = SNUG.json(&["import", p(&input), "--into", p(&into)], &[], 0);
    assert_eq!(body["ok"], true, "{body}");
    assert_eq!(body["replaced"], true);
    let report = &body["report"];
    assert_eq!(report["restored_grants"], 1, "{report}");
    assert_eq!(report["demoted_connections"], 0);
    let dropped = report["dropped_connections"].as_array().expect("dropped");
    assert_eq!(dropped.len(), 1, "{report}");
    assert_eq!(dropped[0]["app_id"], SAMPLE_APP);
    assert_eq!(dropped[0]["slot"], "feed");
    assert_eq!(dropped[0]["reason"]["kind"], "unknown_key");
    assert_eq!(
        report["dropped_runtime_contracts"],
        serde_json::json!([]),
        "FILE holds both contracts"
    );
    assert_eq!(sha256_hex(&input), input_hash, "IN is only read");

    assert_eq!(
        query::<String>(
            &into,
            "SELECT slot || ' ' || status || ' ' || approved_at FROM snug_connections"
        ),
        [format!("broker approved {APPROVED_AT}")]
    );
    assert_eq!(
        query::<String>(
            &into,
            "SELECT value FROM snug_settings WHERE key = 'needsEndpointConfirm'"
        ),
        ["true"],
        "the latch is re-armed whatever IN said"
    );

    // The text names what was dropped.
    let fresh = dir.path().join("text.snug");
    let output = SNUG.run(&["import", p(&input), "--into", p(&fresh)], &[]);
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("dropped") && text.contains("feed"), "{text}");
    assert!(text.contains("created"), "{text}");
}

#[test]
fn import_into_a_new_file_knows_no_grant_and_no_contract_unless_trusted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = incoming(dir.path());
    let into = dir.path().join("new.snug");
    let body = SNUG.json(&["import", p(&input), "--into", p(&into)], &[], 0);
    assert_eq!(body["replaced"], false);
    assert_eq!(body["report"]["restored_grants"], 0);
    assert_eq!(body["report"]["demoted_connections"], 1);
    let cleared: Vec<(String, i64)> = body["report"]["dropped_runtime_contracts"]
        .as_array()
        .expect("contracts")
        .iter()
        .map(|c| {
            (
                c["app_id"].as_str().expect("app").to_owned(),
                c["version"].as_i64().expect("version"),
            )
        })
        .collect();
    assert_eq!(
        cleared,
        [(SAMPLE_APP.to_owned(), 8), (SAMPLE_APP.to_owned(), 9)]
    );
    assert_eq!(
        query::<i64>(
            &into,
            "SELECT count(*) FROM snug_app_versions WHERE runtime_contract_json IS NOT NULL"
        ),
        [0]
    );

    let trusted = dir.path().join("trusted.snug");
    let body = SNUG.json(
        &[
            "import",
            p(&input),
            "--into",
            p(&trusted),
            "--trusted-origin",
        ],
        &[],
        0,
    );
    assert_eq!(
        body["report"]["dropped_runtime_contracts"],
        serde_json::json!([])
    );
    assert_eq!(
        query::<i64>(
            &trusted,
            "SELECT count(*) FROM snug_app_versions WHERE runtime_contract_json IS NOT NULL"
        ),
        [2]
    );
}

#[test]
fn import_refusals_have_their_exit_codes_and_leave_both_files_unchanged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let into = user_file(dir.path());

    let garbage = dir.path().join("garbage.snug");
    std::fs::write(&garbage, b"not a database at all").expect("write");
    assert_refused(&garbage, &into, &[], 4, "NOT_SQLITE");

    let hostile = sample_with(
        dir.path(),
        "hostile.snug",
        "CREATE TRIGGER spy AFTER INSERT ON snug_settings BEGIN SELECT 1; END;",
    );
    assert_refused(&hostile, &into, &[], 4, "HOSTILE_SCHEMA");

    let too_new = sample_with(dir.path(), "too-new.snug", "PRAGMA user_version = 7;");
    assert_refused(&too_new, &into, &[], 5, "SCHEMA_TOO_NEW");

    let protected = vector("containers/c01-reference-random-600k.snug");
    assert_refused(&protected, &into, &[], 3, "LOCKED");
    assert_refused(
        &protected,
        &into,
        &[("SNUG_PASSPHRASE", "not the passphrase")],
        3,
        "LOCKED",
    );

    // A bad FILE is refused before anything is written, under its own reason.
    let input = incoming(dir.path());
    assert_refused(&input, &garbage, &[], 4, "NOT_SQLITE");
    assert_refused(&input, &too_new, &[], 5, "SCHEMA_TOO_NEW");
    let protected_into = dir.path().join("protected-into.snug");
    std::fs::copy(&protected, &protected_into).expect("copy");
    assert_refused(&input, &protected_into, &[], 3, "PROTECTED");

    // IN is never its own destination.
    assert_refused(&input, &input, &[], 2, "USAGE");
    // A refusal never creates FILE either.
    let absent = dir.path().join("absent.snug");
    assert_refused(&garbage, &absent, &[], 4, "NOT_SQLITE");
    assert!(!absent.exists());
}

#[test]
fn a_protected_in_is_imported_with_its_secret_and_lands_plain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let into = dir.path().join("user.snug");
    let protected = vector("containers/c01-reference-random-600k.snug");
    let body = SNUG.json(
        &["import", p(&protected), "--into", p(&into)],
        &[("SNUG_PASSPHRASE", "correct horse battery staple")],
        0,
    );
    assert_eq!(body["report"]["was_protected"], true, "{body}");
    assert!(
        std::fs::read(&into)
            .expect("read")
            .starts_with(b"SQLite format 3\0")
    );
}
