//! Tests of DDL application: atomicity, early name rejection and the audit trail.

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::{Expect, expect};
use snug_schema::UserDb;

use crate::test_support::{
    TRADER, count_vm_steps, db_with_apps, sample_file, schema_json, sha256_file, take_vm_steps,
};
use crate::{MAX_DDL_BYTES, MAX_DDL_STATEMENTS, apply_ddl};

fn migrations(db: &UserDb, namespace: &str) -> Vec<(i64, String, String)> {
    db.connection()
        .prepare(
            "SELECT seq, ddl, applied_at FROM snug_app_migrations WHERE app_id = ?1 ORDER BY seq",
        )
        .unwrap()
        .query_map([namespace], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn statements_are_registered_and_audited_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (mut db, _) = sample_file(dir.path());
    let report = apply_ddl(
        &mut db,
        TRADER,
        &[
            "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)",
            "CREATE INDEX idx_notes_body ON notes (body)",
            "INSERT INTO notes (body) VALUES ('seeded')",
        ],
    )
    .unwrap();
    assert_eq!(report.applied, 3);
    assert_eq!(report.persist.migrations_appended, 3);
    assert_eq!(report.persist.tables_written, ["notes"]);
    let report = apply_ddl(&mut db, TRADER, &["ALTER TABLE notes ADD COLUMN tag TEXT"]).unwrap();
    assert_eq!(report.applied, 1);
    expect![[r#"
        [
            (
                1,
                "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)",
                "2026-01-01T00:00:00.000Z",
            ),
            (
                2,
                "CREATE INDEX idx_notes_body ON notes (body)",
                "2026-01-01T00:00:00.000Z",
            ),
            (
                3,
                "INSERT INTO notes (body) VALUES ('seeded')",
                "2026-01-01T00:00:00.000Z",
            ),
            (
                4,
                "ALTER TABLE notes ADD COLUMN tag TEXT",
                "2026-01-01T00:00:02.000Z",
            ),
        ]
    "#]]
    .assert_debug_eq(&migrations(&db, TRADER));
    expect![[r#"{"objects":[{"type":"table","name":"trades","ddl":"CREATE TABLE trades (id INTEGER PRIMARY KEY AUTOINCREMENT, symbol TEXT NOT NULL, qty REAL DEFAULT 0)"},{"type":"table","name":"equities","ddl":"CREATE TABLE equities (symbol TEXT PRIMARY KEY, name TEXT) WITHOUT ROWID"},{"type":"table","name":"notes","ddl":"CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL, tag TEXT)"},{"type":"index","name":"idx_trades_symbol","ddl":"CREATE INDEX idx_trades_symbol ON trades (symbol)"},{"type":"view","name":"v_totals","ddl":"CREATE VIEW v_totals AS SELECT symbol, SUM(qty) AS total FROM trades GROUP BY symbol"},{"type":"index","name":"idx_notes_body","ddl":"CREATE INDEX idx_notes_body ON notes (body)"}],"sequences":{"trades":3}}"#]].assert_eq(&schema_json(&db, TRADER).unwrap());
}

/// Applies `statements` to a file-backed sample and reports the outcome; on failure it also
/// checks that the file is byte-for-byte unchanged.
#[track_caller]
fn check(statements: &[&str], expect: Expect) {
    let dir = tempfile::tempdir().unwrap();
    let (mut db, path) = sample_file(dir.path());
    let before = sha256_file(&path);
    let outcome = match apply_ddl(&mut db, TRADER, statements) {
        Ok(report) => format!("ok: {} applied", report.applied),
        Err(err) => {
            assert_eq!(sha256_file(&path), before, "a failed apply writes nothing");
            assert!(migrations(&db, TRADER).is_empty());
            format!("{}: {err:?}", err.reason())
        }
    };
    expect.assert_eq(&outcome);
}

#[test]
fn all_or_nothing() {
    check(
        &["CREATE TABLE a (x)", "CREATE TABLE b ("],
        expect![[
            r#"DDL_FAILED: Statement { index: 1, problem: Failed(SqliteFailure(Error { code: Unknown, extended_code: 1 }, Some("incomplete input"))) }"#
        ]],
    );
    check(
        &["CREATE TABLE a (x)", "CREATE TABLE a (y)"],
        expect![[
            r#"DDL_FAILED: Statement { index: 1, problem: Failed(SqlInputError { error: Error { code: Unknown, extended_code: 1 }, msg: "table a already exists", sql: "CREATE TABLE a (y)", offset: 13 }) }"#
        ]],
    );
    check(
        &["DROP TABLE trades", "SELECT * FROM trades"],
        expect![[
            r#"DDL_FAILED: Statement { index: 1, problem: Failed(SqliteFailure(Error { code: Unknown, extended_code: 1 }, Some("no such table: trades"))) }"#
        ]],
    );
}

#[test]
fn reserved_names_are_rejected_before_anything_persists() {
    check(
        &["CREATE TABLE fine (x)", "CREATE TABLE snug_evil (x)"],
        expect![[
            r#"INVALID_NAME: Statement { index: 1, problem: Forbidden(InvalidName { name: "snug_evil" }) }"#
        ]],
    );
    check(
        &[
            "CREATE TABLE fine (x)",
            "ALTER TABLE fine RENAME TO app_fine",
        ],
        expect![[r#"INVALID_NAME: Refused(InvalidName { kind: Table, name: "app_fine" })"#]],
    );
    check(
        &["CREATE VIRTUAL TABLE v USING fts5(x)"],
        expect![[
            r#"VIRTUAL_TABLE: Statement { index: 0, problem: Forbidden(VirtualTable { name: "v", module: "fts5" }) }"#
        ]],
    );
    check(
        &["CREATE TABLE \"bad name\" (x)"],
        expect![[
            r#"INVALID_NAME: Statement { index: 0, problem: Forbidden(InvalidName { name: "bad name" }) }"#
        ]],
    );
}

#[test]
fn only_single_sandboxed_statements_are_applied() {
    check(
        &["CREATE TABLE a (x); CREATE TABLE b (x)"],
        expect!["NOT_ONE_STATEMENT: Statement { index: 0, problem: NotOneStatement }"],
    );
    check(
        &["BEGIN"],
        expect!["FORBIDDEN_STATEMENT: Statement { index: 0, problem: Forbidden(Transaction) }"],
    );
    check(
        &["ATTACH ':memory:' AS m"],
        expect!["FORBIDDEN_STATEMENT: Statement { index: 0, problem: Forbidden(Attach) }"],
    );
    check(
        &["PRAGMA writable_schema = 1"],
        expect![[
            r#"FORBIDDEN_STATEMENT: Statement { index: 0, problem: Forbidden(Pragma { name: "writable_schema" }) }"#
        ]],
    );
    check(&[], expect!["ok: 0 applied"]);
}

#[test]
fn unknown_apps_are_not_found() {
    check_unknown(expect!["APP_NOT_FOUND: cannot materialize the app"]);
}

#[track_caller]
fn check_unknown(expect: Expect) {
    let dir = tempfile::tempdir().unwrap();
    let (mut db, _) = sample_file(dir.path());
    let err = apply_ddl(&mut db, "ghost", &["CREATE TABLE t (x)"]).unwrap_err();
    expect.assert_eq(&format!("{}: {err}", err.reason()));
}

/// The virtual-machine steps of the statements one `apply_ddl` call runs (on the user database,
/// the runtime and the rename stage), after `before` was applied to a fresh app uncounted.
fn steps_of(before: &[String], statements: &[String]) -> u64 {
    let mut db = db_with_apps(&[TRADER]);
    if !before.is_empty() {
        apply_ddl(&mut db, TRADER, before).unwrap();
    }
    count_vm_steps(db.connection_mut());
    take_vm_steps();
    let report = apply_ddl(&mut db, TRADER, statements).unwrap();
    assert_eq!(report.applied, statements.len());
    take_vm_steps()
}

fn tables(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("CREATE TABLE t{i} (id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT UNIQUE)"))
        .collect()
}

/// Issue 23, point 4: one call of `n` statements does work in proportion to `n`. Counted in
/// SQLite virtual-machine steps rather than time, so the test is exact: with work linear in
/// `n`, going from 200 to 400 statements adds twice what going from 100 to 200 added; any
/// step that revisits every earlier statement or object (a rename that rewrites the whole
/// schema, a per-table query over `sqlite_master` or `pragma_table_list`) adds more with each
/// doubling. SQLite's own re-reading of its catalogue after each CREATE is not counted: SQLite
/// does not report it, and it is a scan of a few instructions per object.
#[test]
fn the_work_of_a_call_grows_linearly_with_its_statements() {
    type Shape = fn(usize) -> (Vec<String>, Vec<String>);
    let shapes: [(&str, Shape); 5] = [
        ("n new tables", |n| (Vec::new(), tables(n))),
        ("n indexes on one table", |n| {
            let mut statements = vec!["CREATE TABLE items (a TEXT, b TEXT, c INTEGER)".to_owned()];
            statements.extend((1..n).map(|i| format!("CREATE INDEX ix{i} ON items (a, c, b)")));
            (Vec::new(), statements)
        }),
        ("n seed rows", |n| {
            let mut statements =
                vec!["CREATE TABLE seed (id INTEGER PRIMARY KEY, v TEXT)".to_owned()];
            statements.extend((1..n).map(|i| format!("INSERT INTO seed (v) VALUES ('row {i}')")));
            (Vec::new(), statements)
        }),
        ("tables, indexes, views and triggers", |n| {
            let statements = (0..n / 4)
                .flat_map(|i| {
                    [
                        format!("CREATE TABLE m{i} (id INTEGER PRIMARY KEY, v TEXT)"),
                        format!("CREATE INDEX m{i}_v ON m{i} (v)"),
                        format!("CREATE VIEW m{i}_all AS SELECT * FROM m{i}"),
                        format!("CREATE TRIGGER m{i}_t AFTER INSERT ON m{i} BEGIN SELECT 1; END"),
                    ]
                })
                .collect();
            (Vec::new(), statements)
        }),
        ("one table on top of n", |n| {
            (tables(n), vec!["CREATE TABLE extra (x)".to_owned()])
        }),
    ];
    for (shape, make) in shapes {
        let [small, medium, large] = [100, 200, 400].map(|n| {
            let (before, statements) = make(n);
            steps_of(&before, &statements)
        });
        let (first, second) = (medium - small, large - medium);
        assert!(
            second * 100 <= first * 2 * 101,
            "{shape}: {small}, {medium}, {large} steps for 100, 200, 400: the second doubling \
             added {second}, more than twice the first's {first}"
        );
    }
}

/// Issue 23, point 4: one call is bounded in statements and in text, refused before the user
/// database is read (so a file that would not even open gets the same answer), and a list at
/// the bounds is applied.
#[test]
fn a_call_over_its_bounds_is_refused_before_anything_is_read() {
    let selects = |n: usize| vec!["SELECT 1"; n];
    check(
        &selects(MAX_DDL_STATEMENTS + 1),
        expect!["DDL_TOO_LARGE: TooManyStatements { count: 5001, max: 5000 }"],
    );
    let long = format!("SELECT '{}'", "x".repeat(MAX_DDL_BYTES));
    check(
        &[long.as_str()],
        expect!["DDL_TOO_LARGE: TooMuchText { bytes: 1048585, max: 1048576 }"],
    );
    check(&selects(MAX_DDL_STATEMENTS), expect!["ok: 5000 applied"]);
    let at_the_bound = format!("SELECT '{}'", "x".repeat(MAX_DDL_BYTES - 10));
    check(&[at_the_bound.as_str()], expect!["ok: 1 applied"]);
    let mut unopened = db_with_apps(&[TRADER]);
    let err = apply_ddl(
        &mut unopened,
        "no such app",
        &selects(MAX_DDL_STATEMENTS + 1),
    )
    .unwrap_err();
    assert_eq!(
        err.reason(),
        "DDL_TOO_LARGE",
        "the bound is checked first: {err}"
    );
}

/// Issue 23, point 4: a call on a user database opened with an interrupt stops when it fires,
/// in the middle of a statement that would never end and between statements too short for
/// SQLite's progress handler, and writes nothing.
#[test]
fn an_interrupt_stops_a_call_and_nothing_is_written() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use snug_schema::{Interrupt, is_interrupted};

    // Seconds of work, not forever: without the interrupt the call ends, and the test fails.
    let endless = "SELECT count(*) FROM (WITH RECURSIVE c(x) AS \
                   (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000000) SELECT x FROM c)";
    let short = vec!["SELECT 1"; 50];
    for (when, statements, set_after) in [
        ("during a statement", vec![endless], Some(50)),
        ("between statements", short, None),
    ] {
        let flag = Arc::new(AtomicBool::new(set_after.is_none()));
        let bytes = crate::test_support::vector("userdb/sample-v6.user.snug");
        let (mut db, _) = UserDb::from_bytes_with(
            &bytes,
            crate::test_support::clock(),
            &Interrupt::new(Arc::clone(&flag)),
        )
        .unwrap();
        let setter = set_after.map(|ms| {
            let flag = Arc::clone(&flag);
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                flag.store(true, Ordering::Relaxed);
            })
        });
        let err = apply_ddl(&mut db, TRADER, &statements).unwrap_err();
        if let Some(setter) = setter {
            setter.join().unwrap();
        }
        // SQLite's interrupt error, wherever in the chain the step that met it put it.
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&err);
        let mut interrupted = false;
        while let Some(error) = cause {
            interrupted |= error
                .downcast_ref::<rusqlite::Error>()
                .is_some_and(is_interrupted);
            cause = error.source();
        }
        assert!(interrupted, "{when}: {err:?}");
        assert!(migrations(&db, TRADER).is_empty(), "{when}");
    }
}
