//! Tests of sandboxed SQL: typed values, bounds, all-or-nothing, and write-back.

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::expect;

use crate::test_support::{CHESS, TRADER, sample_db, sample_file, sha256_file};
use crate::{ExecuteLimits, Overflow, SqlValue, execute, materialize};

fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap()
}

#[test]
fn values_are_typed() {
    let mut db = sample_db();
    let report = execute(
        &mut db,
        CHESS,
        &["SELECT NULL AS n, 42 AS i, -1.5 AS r, 'é' AS t, x'00ff' AS b, 1e999 AS inf, san FROM moves ORDER BY rowid"],
        &ExecuteLimits::default(),
    )
    .unwrap();
    let result = &report.results[0];
    assert_eq!(
        result.rows[0],
        vec![
            SqlValue::Null,
            SqlValue::Integer(42),
            SqlValue::Real(-1.5),
            SqlValue::Text("é".into()),
            SqlValue::Blob(vec![0, 255]),
            SqlValue::Real(f64::INFINITY),
            SqlValue::Text("e4".into()),
        ]
    );
    expect![[r#"{"columns":["n","i","r","t","b","inf","san"],"rows":[[null,42,-1.5,"é",{"blob":"00ff"},null,"e4"],[null,42,-1.5,"é",{"blob":"00ff"},null,"e5"]],"truncated":false,"changes":null}"#]].assert_eq(&json(result));
    assert!(!report.persist.wrote);
}

#[test]
fn results_are_bounded_by_rows_and_bytes() {
    let mut db = sample_db();
    let many = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) SELECT i FROM n";
    let wide = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100) \
                SELECT printf('%.1000c', 'x') FROM n";
    let report = execute(&mut db, CHESS, &[many, wide], &ExecuteLimits::default()).unwrap();
    let (rows, bytes) = (&report.results[0], &report.results[1]);
    assert_eq!((rows.rows.len(), rows.truncated), (200, true));
    assert!(bytes.truncated);
    assert_eq!(
        bytes.rows.len(),
        32,
        "32 rows of 1004 JSON bytes fit 32 KiB"
    );
    assert!(json(&bytes.rows).len() <= 32 * 1024);

    let limits = ExecuteLimits {
        max_rows: 5,
        max_bytes: 1 << 20,
        ..ExecuteLimits::default()
    };
    let report = execute(&mut db, CHESS, &[many], &limits).unwrap();
    assert_eq!(report.results[0].rows.len(), 5);

    let small = "SELECT san FROM moves";
    let report = execute(&mut db, CHESS, &[small], &limits).unwrap();
    assert!(!report.results[0].truncated);

    let fail = ExecuteLimits {
        overflow: Overflow::Fail,
        ..ExecuteLimits::default()
    };
    let err = execute(&mut db, CHESS, &[many], &fail).unwrap_err();
    assert_eq!(err.reason(), "RESULT_TOO_LARGE");
}

#[test]
fn a_truncated_write_still_writes_everything() {
    let mut db = sample_db();
    let limits = ExecuteLimits {
        max_rows: 3,
        ..ExecuteLimits::default()
    };
    let report = execute(
        &mut db,
        CHESS,
        &[
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50) \
           INSERT INTO moves (san) SELECT 'm' || i FROM n RETURNING san",
        ],
        &limits,
    )
    .unwrap();
    assert_eq!(report.results[0].rows.len(), 3);
    assert!(report.results[0].truncated);
    assert_eq!(report.results[0].changes, Some(50));
    let count = execute(&mut db, CHESS, &["SELECT count(*) FROM moves"], &limits).unwrap();
    assert_eq!(count.results[0].rows[0][0], SqlValue::Integer(52));
}

#[test]
fn changes_are_reported_for_row_writes_only() {
    let mut db = sample_db();
    let report = execute(
        &mut db,
        CHESS,
        &[
            "CREATE TABLE notes (body TEXT)",
            "INSERT INTO notes VALUES ('a'), ('b')",
            "UPDATE notes SET body = upper(body)",
            "SELECT * FROM notes",
            "DELETE FROM notes WHERE body = 'A'",
            "CREATE INDEX idx_body ON notes (body)",
        ],
        &ExecuteLimits::default(),
    )
    .unwrap();
    let changes: Vec<Option<u64>> = report.results.iter().map(|r| r.changes).collect();
    assert_eq!(changes, [None, Some(2), Some(2), None, Some(1), None]);
    assert!(report.persist.wrote);
    assert_eq!(report.persist.tables_written, ["notes"]);
    assert_eq!(report.persist.tables_unchanged, ["moves"]);
}

#[test]
fn a_failing_statement_rolls_the_whole_call_back() {
    let dir = tempfile::tempdir().unwrap();
    let (mut db, path) = sample_file(dir.path());
    let before = sha256_file(&path);
    let err = execute(
        &mut db,
        CHESS,
        &[
            "INSERT INTO moves VALUES ('d4')",
            "CREATE TABLE t (x)",
            "SELECT * FROM nope",
        ],
        &ExecuteLimits::default(),
    )
    .unwrap_err();
    expect![[r#"STATEMENT_FAILED: Statement { index: 2, problem: Failed(SqliteFailure(Error { code: Unknown, extended_code: 1 }, Some("no such table: nope"))) }"#]].assert_eq(&format!("{}: {err:?}", err.reason()));
    assert_eq!(sha256_file(&path), before);
}

#[test]
fn reads_write_nothing_and_writes_persist() {
    let dir = tempfile::tempdir().unwrap();
    let (mut db, path) = sample_file(dir.path());
    let before = sha256_file(&path);
    let report = execute(
        &mut db,
        TRADER,
        &[
            "SELECT * FROM v_totals",
            "SELECT value FROM snug_kv WHERE key = 'theme'",
        ],
        &ExecuteLimits::default(),
    )
    .unwrap();
    assert!(!report.persist.wrote);
    assert_eq!(sha256_file(&path), before);

    let report = execute(
        &mut db,
        TRADER,
        &["INSERT INTO trades (symbol, qty) VALUES ('NVDA', 2) RETURNING id"],
        &ExecuteLimits::default(),
    )
    .unwrap();
    // AUTOINCREMENT continues after the reference's deleted maximum (3).
    assert_eq!(report.results[0].rows, vec![vec![SqlValue::Integer(4)]]);
    assert!(report.persist.wrote);
    assert_eq!(report.persist.tables_written, ["trades"]);
    assert_ne!(sha256_file(&path), before);
    let runtime = materialize(&db, TRADER).unwrap();
    let seq: i64 = runtime
        .connection()
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'trades'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(seq, 4);
}

#[test]
fn an_empty_call_is_a_no_op() {
    let mut db = sample_db();
    let report = execute::<&str>(&mut db, CHESS, &[], &ExecuteLimits::default()).unwrap();
    assert!(report.results.is_empty() && !report.persist.wrote);
}
