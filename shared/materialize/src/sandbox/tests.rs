//! Tests of the app-SQL sandbox: every escape refused, ordinary app SQL allowed.

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::{Expect, expect};

use crate::{AppDatabase, ExecuteLimits};

/// Runs each statement on a fresh runtime holding `t(x)` and an AUTOINCREMENT table, and
/// reports `ok` or the reason and the error chain.
#[track_caller]
fn check(statements: &[&str], expect: Expect) {
    let mut out = String::new();
    for sql in statements {
        let mut runtime = AppDatabase::empty("sandbox").unwrap();
        runtime
            .execute(
                &[
                    "CREATE TABLE t (x)",
                    "INSERT INTO t VALUES (1)",
                    "CREATE TABLE seq (id INTEGER PRIMARY KEY AUTOINCREMENT)",
                    "INSERT INTO seq DEFAULT VALUES",
                ],
                &ExecuteLimits::default(),
            )
            .unwrap();
        let limits = ExecuteLimits {
            max_steps: Some(1_000_000),
            ..ExecuteLimits::default()
        };
        let outcome = match runtime.execute(&[*sql], &limits) {
            Ok(_) => "ok".to_owned(),
            Err(crate::ExecuteError::Statement { problem, .. }) => {
                format!("{}: {}", problem.reason(), chain(&problem))
            }
            Err(err) => format!("{}: {}", err.reason(), chain(&err)),
        };
        out.push_str(&format!("{sql:?}\n  -> {outcome}\n"));
    }
    expect.assert_eq(&out);
}

fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

#[test]
fn ways_out_of_the_database_are_refused() {
    check(
        &[
            "ATTACH 'file:/tmp/x.db' AS x",
            "ATTACH ':memory:' AS m",
            "DETACH main",
            "VACUUM",
            "VACUUM INTO '/tmp/snug-sandbox-escape.db'",
            "SELECT load_extension('/tmp/evil.so')",
            "SELECT fts3_tokenizer('simple')",
            "CREATE VIRTUAL TABLE v USING fts5(body)",
            "CREATE VIRTUAL TABLE r USING rtree(id, a, b)",
            "INSERT INTO sqlite_master VALUES ('table', 'x', 'x', 0, 'CREATE TABLE x (y)')",
            "UPDATE sqlite_schema SET sql = 'CREATE TABLE t (x, y)' WHERE name = 't'",
        ],
        expect![[r#"
            "ATTACH 'file:/tmp/x.db' AS x"
              -> FORBIDDEN_STATEMENT: ATTACH is not allowed (VACUUM and VACUUM INTO attach internally)
            "ATTACH ':memory:' AS m"
              -> FORBIDDEN_STATEMENT: ATTACH is not allowed (VACUUM and VACUUM INTO attach internally)
            "DETACH main"
              -> FORBIDDEN_STATEMENT: DETACH is not allowed
            "VACUUM"
              -> STATEMENT_FAILED: SQLite failed the statement: cannot VACUUM from within a transaction: Error code 1: SQL logic error
            "VACUUM INTO '/tmp/snug-sandbox-escape.db'"
              -> STATEMENT_FAILED: SQLite failed the statement: cannot VACUUM from within a transaction: Error code 1: SQL logic error
            "SELECT load_extension('/tmp/evil.so')"
              -> FORBIDDEN_STATEMENT: function load_extension() is not allowed
            "SELECT fts3_tokenizer('simple')"
              -> FORBIDDEN_STATEMENT: function fts3_tokenizer() is not allowed
            "CREATE VIRTUAL TABLE v USING fts5(body)"
              -> VIRTUAL_TABLE: virtual table "v" (module "fts5") is not allowed
            "CREATE VIRTUAL TABLE r USING rtree(id, a, b)"
              -> VIRTUAL_TABLE: virtual table "r" (module "rtree") is not allowed
            "INSERT INTO sqlite_master VALUES ('table', 'x', 'x', 0, 'CREATE TABLE x (y)')"
              -> STATEMENT_FAILED: SQLite failed the statement: table sqlite_master may not be modified: Error code 1: SQL logic error
            "UPDATE sqlite_schema SET sql = 'CREATE TABLE t (x, y)' WHERE name = 't'"
              -> STATEMENT_FAILED: SQLite failed the statement: table sqlite_master may not be modified: Error code 1: SQL logic error
        "#]],
    );
}

#[test]
fn schema_writes_are_refused_in_any_spelling() {
    check(
        &[
            "PRAGMA writable_schema = ON",
            "PRAGMA \"writable_schema\" = 1",
            "PRAGMA main.writable_schema = 1",
            "PRAGMA 'WRITABLE_SCHEMA' = TRUE",
            "PRAGMA writable_schema",
            "SELECT * FROM pragma_writable_schema",
            "PRAGMA schema_version = 99",
            "PRAGMA journal_mode = OFF",
            "PRAGMA max_page_count = 1",
            "PRAGMA trusted_schema = ON",
            "PRAGMA temp_store_directory = '/tmp'",
            "PRAGMA locking_mode = EXCLUSIVE",
        ],
        expect![[r#"
            "PRAGMA writable_schema = ON"
              -> FORBIDDEN_STATEMENT: PRAGMA writable_schema is not allowed
            "PRAGMA \"writable_schema\" = 1"
              -> FORBIDDEN_STATEMENT: PRAGMA writable_schema is not allowed
            "PRAGMA main.writable_schema = 1"
              -> FORBIDDEN_STATEMENT: PRAGMA writable_schema is not allowed
            "PRAGMA 'WRITABLE_SCHEMA' = TRUE"
              -> FORBIDDEN_STATEMENT: PRAGMA WRITABLE_SCHEMA is not allowed
            "PRAGMA writable_schema"
              -> FORBIDDEN_STATEMENT: PRAGMA writable_schema is not allowed
            "SELECT * FROM pragma_writable_schema"
              -> FORBIDDEN_STATEMENT: PRAGMA writable_schema is not allowed
            "PRAGMA schema_version = 99"
              -> FORBIDDEN_STATEMENT: PRAGMA schema_version is not allowed
            "PRAGMA journal_mode = OFF"
              -> FORBIDDEN_STATEMENT: PRAGMA journal_mode is not allowed
            "PRAGMA max_page_count = 1"
              -> FORBIDDEN_STATEMENT: PRAGMA max_page_count is not allowed
            "PRAGMA trusted_schema = ON"
              -> FORBIDDEN_STATEMENT: PRAGMA trusted_schema is not allowed
            "PRAGMA temp_store_directory = '/tmp'"
              -> FORBIDDEN_STATEMENT: PRAGMA temp_store_directory is not allowed
            "PRAGMA locking_mode = EXCLUSIVE"
              -> FORBIDDEN_STATEMENT: PRAGMA locking_mode is not allowed
        "#]],
    );
}

#[test]
fn transaction_control_belongs_to_the_host() {
    check(
        &[
            "BEGIN",
            "COMMIT",
            "ROLLBACK",
            "SAVEPOINT s",
            "RELEASE s",
            "END",
        ],
        expect![[r#"
            "BEGIN"
              -> FORBIDDEN_STATEMENT: transaction control is not allowed; each call runs as one transaction
            "COMMIT"
              -> FORBIDDEN_STATEMENT: transaction control is not allowed; each call runs as one transaction
            "ROLLBACK"
              -> FORBIDDEN_STATEMENT: transaction control is not allowed; each call runs as one transaction
            "SAVEPOINT s"
              -> FORBIDDEN_STATEMENT: transaction control is not allowed; each call runs as one transaction
            "RELEASE s"
              -> FORBIDDEN_STATEMENT: transaction control is not allowed; each call runs as one transaction
            "END"
              -> FORBIDDEN_STATEMENT: transaction control is not allowed; each call runs as one transaction
        "#]],
    );
}

#[test]
fn new_names_follow_the_rule() {
    check(
        &[
            "CREATE TABLE snug_x (a)",
            "CREATE TABLE \"two words\" (a)",
            "CREATE TABLE app_t (a)",
            "CREATE INDEX Sqlite_i ON t (x)",
            "CREATE VIEW SNUG_v AS SELECT 1",
            "CREATE TRIGGER \"t-g\" AFTER INSERT ON t BEGIN SELECT 1; END",
            "CREATE TABLE snug_kv (key TEXT PRIMARY KEY, value TEXT)",
            "CREATE TEMP TABLE \"scratch space\" (a)",
            &format!("CREATE TABLE {} (a)", "n".repeat(41)),
            &format!("CREATE TABLE {} (a)", "n".repeat(42)),
        ],
        expect![[r#"
            "CREATE TABLE snug_x (a)"
              -> INVALID_NAME: object name "snug_x" is not allowed (§8.2: ^[A-Za-z][A-Za-z0-9_]{0,40}$, no snug_/sqlite_/app_ prefix)
            "CREATE TABLE \"two words\" (a)"
              -> INVALID_NAME: object name "two words" is not allowed (§8.2: ^[A-Za-z][A-Za-z0-9_]{0,40}$, no snug_/sqlite_/app_ prefix)
            "CREATE TABLE app_t (a)"
              -> INVALID_NAME: object name "app_t" is not allowed (§8.2: ^[A-Za-z][A-Za-z0-9_]{0,40}$, no snug_/sqlite_/app_ prefix)
            "CREATE INDEX Sqlite_i ON t (x)"
              -> STATEMENT_FAILED: SQLite failed the statement: object name reserved for internal use: Sqlite_i: Error code 1: SQL logic error
            "CREATE VIEW SNUG_v AS SELECT 1"
              -> INVALID_NAME: object name "SNUG_v" is not allowed (§8.2: ^[A-Za-z][A-Za-z0-9_]{0,40}$, no snug_/sqlite_/app_ prefix)
            "CREATE TRIGGER \"t-g\" AFTER INSERT ON t BEGIN SELECT 1; END"
              -> INVALID_NAME: object name "t-g" is not allowed (§8.2: ^[A-Za-z][A-Za-z0-9_]{0,40}$, no snug_/sqlite_/app_ prefix)
            "CREATE TABLE snug_kv (key TEXT PRIMARY KEY, value TEXT)"
              -> ok
            "CREATE TEMP TABLE \"scratch space\" (a)"
              -> ok
            "CREATE TABLE nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn (a)"
              -> ok
            "CREATE TABLE nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn (a)"
              -> INVALID_NAME: object name "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn" is not allowed (§8.2: ^[A-Za-z][A-Za-z0-9_]{0,40}$, no snug_/sqlite_/app_ prefix)
        "#]],
    );
}

#[test]
fn ordinary_app_sql_is_allowed() {
    check(
        &[
            "SELECT * FROM t",
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10) SELECT sum(i) FROM n",
            "INSERT INTO t VALUES (2) RETURNING x",
            "UPDATE t SET x = x + 1",
            "DELETE FROM t WHERE x > 100",
            "CREATE TABLE u (id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT)",
            "CREATE INDEX idx ON t (x)",
            "CREATE VIEW v AS SELECT x FROM t",
            "CREATE TRIGGER trg AFTER INSERT ON t BEGIN UPDATE t SET x = x; END",
            "ALTER TABLE t ADD COLUMN y TEXT",
            "ALTER TABLE t RENAME TO t2",
            "DROP TABLE t",
            "PRAGMA user_version = 7",
            "PRAGMA foreign_keys = ON",
            "PRAGMA table_info(t)",
            "PRAGMA main.table_xinfo('t')",
            "SELECT * FROM pragma_table_info('t')",
            "PRAGMA integrity_check",
            "PRAGMA page_count",
            "SELECT json_extract('{\"a\":1}', '$.a'), value FROM json_each('[1,2]')",
            "UPDATE sqlite_sequence SET seq = 5",
            "ANALYZE",
            "CREATE TEMP TABLE scratch (a)",
            "SELECT 1;",
            "SELECT 1; -- trailing comment",
        ],
        expect![[r#"
            "SELECT * FROM t"
              -> ok
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10) SELECT sum(i) FROM n"
              -> ok
            "INSERT INTO t VALUES (2) RETURNING x"
              -> ok
            "UPDATE t SET x = x + 1"
              -> ok
            "DELETE FROM t WHERE x > 100"
              -> ok
            "CREATE TABLE u (id INTEGER PRIMARY KEY AUTOINCREMENT, v TEXT)"
              -> ok
            "CREATE INDEX idx ON t (x)"
              -> ok
            "CREATE VIEW v AS SELECT x FROM t"
              -> ok
            "CREATE TRIGGER trg AFTER INSERT ON t BEGIN UPDATE t SET x = x; END"
              -> ok
            "ALTER TABLE t ADD COLUMN y TEXT"
              -> ok
            "ALTER TABLE t RENAME TO t2"
              -> ok
            "DROP TABLE t"
              -> ok
            "PRAGMA user_version = 7"
              -> ok
            "PRAGMA foreign_keys = ON"
              -> ok
            "PRAGMA table_info(t)"
              -> ok
            "PRAGMA main.table_xinfo('t')"
              -> ok
            "SELECT * FROM pragma_table_info('t')"
              -> ok
            "PRAGMA integrity_check"
              -> ok
            "PRAGMA page_count"
              -> ok
            "SELECT json_extract('{\"a\":1}', '$.a'), value FROM json_each('[1,2]')"
              -> ok
            "UPDATE sqlite_sequence SET seq = 5"
              -> ok
            "ANALYZE"
              -> ok
            "CREATE TEMP TABLE scratch (a)"
              -> ok
            "SELECT 1;"
              -> ok
            "SELECT 1; -- trailing comment"
              -> ok
        "#]],
    );
}

#[test]
fn one_statement_per_entry() {
    check(
        &[
            "",
            "   ",
            "-- only a comment",
            "SELECT 1; SELECT 2",
            "SELECT 1; DROP TABLE t",
            "SELECT 1; ATTACH ':memory:' AS m",
            "SELECT 1; garbage",
        ],
        expect![[r#"
            ""
              -> NOT_ONE_STATEMENT: entry is not exactly one statement
            "   "
              -> NOT_ONE_STATEMENT: entry is not exactly one statement
            "-- only a comment"
              -> NOT_ONE_STATEMENT: entry is not exactly one statement
            "SELECT 1; SELECT 2"
              -> NOT_ONE_STATEMENT: entry is not exactly one statement
            "SELECT 1; DROP TABLE t"
              -> NOT_ONE_STATEMENT: entry is not exactly one statement
            "SELECT 1; ATTACH ':memory:' AS m"
              -> NOT_ONE_STATEMENT: entry is not exactly one statement
            "SELECT 1; garbage"
              -> NOT_ONE_STATEMENT: entry is not exactly one statement
        "#]],
    );
}

#[test]
fn resources_are_bounded() {
    check(
        &[
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n",
            "SELECT length(zeroblob(100000000))",
            "SELECT length(randomblob(1000))",
        ],
        expect![[r#"
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
              -> BUDGET_EXCEEDED: the statement exceeded its budget of 1000000 virtual machine steps
            "SELECT length(zeroblob(100000000))"
              -> STATEMENT_FAILED: SQLite failed the statement: string or blob too big: Error code 18: string or blob too big
            "SELECT length(randomblob(1000))"
              -> ok
        "#]],
    );
}

#[test]
fn nothing_escapes_to_disk() {
    let target = std::env::temp_dir().join(format!("snug-sandbox-{}.db", std::process::id()));
    let mut runtime = AppDatabase::empty("sandbox").unwrap();
    let sql = format!("VACUUM INTO '{}'", target.display());
    assert!(
        runtime
            .execute(&[sql.as_str()], &ExecuteLimits::default())
            .is_err()
    );
    // A host running SQL on the connection directly (outside a transaction) is refused too.
    assert!(runtime.connection().execute_batch(&sql).is_err());
    assert!(
        runtime
            .connection()
            .execute_batch("ATTACH ':memory:' AS m")
            .is_err()
    );
    assert!(!target.exists());
    // The runtime's own connection has nothing attached and cannot attach.
    let attached: i64 = runtime
        .connection()
        .query_row("SELECT count(*) FROM pragma_database_list", [], |row| {
            row.get(0)
        })
        .unwrap();
    assert_eq!(attached, 1);
}
