//! Tests of materialization and per-app export: the reference vector, fidelity, isolation,
//! namespace shapes, and fail-closed replay of hostile registries.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use expect_test::{Expect, expect};
use snug_schema::{UserDb, app_data_token};

use crate::test_support::{
    CHESS, TRADER, clock, db_with_apps, dump, open_image, sample_db, sample_manifest, vector,
    vectors_dir,
};
use crate::{ExecuteLimits, export_app, materialize, persist};

#[test]
fn sample_apps_materialize_to_the_reference_runtime_databases() {
    let manifest = sample_manifest();
    let exports = manifest["app_runtime_exports"]
        .as_object()
        .expect("exports");
    assert_eq!(exports.len(), 2, "both apps of the vector are checked");
    let db = sample_db();
    for (namespace, entry) in exports {
        let expected = open_image(&vector(entry["file"].as_str().unwrap()));
        let mut runtime = materialize(&db, namespace).unwrap();
        assert_eq!(
            dump(runtime.connection()),
            dump(&expected),
            "app {namespace} differs from {}",
            entry["file"]
        );
        // The per-app export is the same database as a standalone file.
        let exported = open_image(&runtime.to_bytes().unwrap());
        assert_eq!(dump(&exported), dump(&expected));
        assert_eq!(
            dump(&open_image(&export_app(&db, namespace).unwrap())),
            dump(&expected)
        );
    }
}

#[test]
fn sample_runtime_dump_is_what_the_reference_wrote() {
    // The dump itself, so a regression shows as a readable diff.
    let db = sample_db();
    let runtime = materialize(&db, TRADER).unwrap();
    expect![[r#"
        table snug_kv on snug_kv: CREATE TABLE snug_kv (key TEXT PRIMARY KEY, value TEXT)
        index sqlite_autoindex_snug_kv_1 on snug_kv: -
        table trades on trades: CREATE TABLE trades (id INTEGER PRIMARY KEY AUTOINCREMENT, symbol TEXT NOT NULL, qty REAL DEFAULT 0)
        table sqlite_sequence on sqlite_sequence: CREATE TABLE sqlite_sequence(name,seq)
        table equities on equities: CREATE TABLE equities (symbol TEXT PRIMARY KEY, name TEXT) WITHOUT ROWID
        index idx_trades_symbol on trades: CREATE INDEX idx_trades_symbol ON trades (symbol)
        view v_totals on v_totals: CREATE VIEW v_totals AS SELECT symbol, SUM(qty) AS total FROM trades GROUP BY symbol
        table equities without_rowid=1 strict=0
          column symbol TEXT notnull=1 default=- pk=1 hidden=0
          column name TEXT notnull=0 default=- pk=0 hidden=0
          row "AAPL" | "Apple"
          row "MSFT" | "Microsoft"
        table snug_kv without_rowid=0 strict=0
          column key TEXT notnull=0 default=- pk=1 hidden=0
          column value TEXT notnull=0 default=- pk=0 hidden=0
          row 1 | "theme" | "{\"dark\":true}"
        table sqlite_sequence without_rowid=0 strict=0
          column name  notnull=0 default=- pk=0 hidden=0
          column seq  notnull=0 default=- pk=0 hidden=0
          row 1 | "trades" | 3
        table trades without_rowid=0 strict=0
          column id INTEGER notnull=0 default=- pk=1 hidden=0
          column symbol TEXT notnull=1 default=- pk=0 hidden=0
          column qty REAL notnull=0 default=0 pk=0 hidden=0
          row 1 | 1 | "AAPL" | 3.0r
          row 2 | 2 | "MSFT" | 1.5r
    "#]]
    .assert_eq(&dump(runtime.connection()));
}

#[test]
fn vectors_are_found_through_the_manifest_dir() {
    assert!(vectors_dir().join("userdb/sample-v6.user.snug").is_file());
}

/// Runs `sql` in the app's runtime and returns each statement's outcome as `reason` or the
/// number of rows.
fn outcomes(db: &mut UserDb, namespace: &str, statements: &[&str]) -> String {
    let mut runtime = materialize(db, namespace).unwrap();
    statements
        .iter()
        .map(
            |sql| match runtime.execute(&[*sql], &ExecuteLimits::default()) {
                Ok(results) => format!("{sql} -> {} rows\n", results[0].rows.len()),
                Err(err) => format!("{sql} -> {}: {}\n", err.reason(), source_text(&err)),
            },
        )
        .collect()
}

fn source_text(err: &dyn std::error::Error) -> String {
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
fn app_sql_cannot_name_hub_tables_or_other_apps_by_either_name() {
    let mut db = sample_db();
    let chess_moves = format!("app_{}__moves", app_data_token(CHESS));
    let own_rest = format!("app_{}__trades", app_data_token(TRADER));
    let statements = [
        "SELECT count(*) FROM trades".to_owned(),
        "SELECT count(*) FROM snug_secrets".to_owned(),
        "SELECT count(*) FROM main.snug_apps".to_owned(),
        "SELECT count(*) FROM moves".to_owned(),
        format!("SELECT count(*) FROM {chess_moves}"),
        format!("SELECT count(*) FROM {own_rest}"),
        "SELECT name FROM sqlite_master WHERE name LIKE 'snug!_%' ESCAPE '!' AND name <> 'snug_kv'"
            .to_owned(),
        "SELECT name FROM sqlite_master WHERE name LIKE 'app!_%' ESCAPE '!'".to_owned(),
        "SELECT * FROM pragma_database_list WHERE name <> 'main'".to_owned(),
    ];
    let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
    expect![[r#"
        SELECT count(*) FROM trades -> 1 rows
        SELECT count(*) FROM snug_secrets -> STATEMENT_FAILED: statement 0: SQLite failed the statement: no such table: snug_secrets: Error code 1: SQL logic error
        SELECT count(*) FROM main.snug_apps -> STATEMENT_FAILED: statement 0: SQLite failed the statement: no such table: main.snug_apps: Error code 1: SQL logic error
        SELECT count(*) FROM moves -> STATEMENT_FAILED: statement 0: SQLite failed the statement: no such table: moves: Error code 1: SQL logic error
        SELECT count(*) FROM app_x737461727465722d2d6368657373__moves -> STATEMENT_FAILED: statement 0: SQLite failed the statement: no such table: app_x737461727465722d2d6368657373__moves: Error code 1: SQL logic error
        SELECT count(*) FROM app_a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c__trades -> STATEMENT_FAILED: statement 0: SQLite failed the statement: no such table: app_a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c__trades: Error code 1: SQL logic error
        SELECT name FROM sqlite_master WHERE name LIKE 'snug!_%' ESCAPE '!' AND name <> 'snug_kv' -> 0 rows
        SELECT name FROM sqlite_master WHERE name LIKE 'app!_%' ESCAPE '!' -> 0 rows
        SELECT * FROM pragma_database_list WHERE name <> 'main' -> 0 rows
    "#]]
    .assert_eq(&outcomes(&mut db, TRADER, &statements));
}

#[test]
fn fidelity_round_trip_covers_every_table_kind() {
    // A runtime built by app SQL, persisted and materialized again, is the same database.
    let mut db = db_with_apps(&["fidelity"]);
    let mut runtime = crate::AppDatabase::empty("fidelity").unwrap();
    runtime
        .execute(
            &[
                "CREATE TABLE snug_kv (key TEXT PRIMARY KEY, value TEXT)",
                "INSERT INTO snug_kv VALUES ('k', '1')",
                "CREATE TABLE counters (id INTEGER PRIMARY KEY AUTOINCREMENT, n INTEGER)",
                "INSERT INTO counters (n) VALUES (1), (2), (3)",
                "DELETE FROM counters WHERE id = 3",
                "CREATE TABLE pairs (a TEXT, b INTEGER, PRIMARY KEY (a, b)) WITHOUT ROWID",
                "INSERT INTO pairs VALUES ('x', 2), ('x', 1)",
                "CREATE TABLE typed (i INTEGER, r REAL, t TEXT, b BLOB, a ANY) STRICT",
                "INSERT INTO typed VALUES (1, 1.5, 'é', x'00ff10', 7.25)",
                "CREATE TABLE computed (w REAL, h REAL, area REAL GENERATED ALWAYS AS (w * h) VIRTUAL, \
                 perimeter REAL AS (2 * (w + h)) STORED)",
                "INSERT INTO computed (w, h) VALUES (2, 3)",
                "CREATE TABLE gaps (label TEXT)",
                "INSERT INTO gaps (rowid, label) VALUES (10, 'ten'), (3, 'three')",
                "CREATE TABLE log (what TEXT)",
                "CREATE TRIGGER counters_log AFTER INSERT ON counters BEGIN INSERT INTO log VALUES ('insert ' || new.id); END",
                "CREATE INDEX idx_typed_t ON typed (t)",
                "CREATE VIEW v_area AS SELECT area FROM computed",
            ],
            &ExecuteLimits::default(),
        )
        .unwrap();
    let before = dump(runtime.connection());
    persist(&mut db, &mut runtime).unwrap();
    let again = materialize(&db, "fidelity").unwrap();
    assert_eq!(dump(again.connection()), before);
    // The trigger was created after the rows were copied, so it did not fire on the copy.
    let logged: i64 = again
        .connection()
        .query_row("SELECT count(*) FROM log", [], |row| row.get(0))
        .unwrap();
    assert_eq!(logged, 0);
    // AUTOINCREMENT continues after the deleted maximum.
    let mut again = again;
    let results = again
        .execute(
            &["INSERT INTO counters (n) VALUES (4) RETURNING id"],
            &ExecuteLimits::default(),
        )
        .unwrap();
    assert_eq!(results[0].rows, vec![vec![crate::SqlValue::Integer(4)]]);
}

#[test]
fn export_works_for_every_namespace_shape() {
    let namespaces = [
        "0f8fad5b-d9cb-469f-a165-70867728950e",
        "0F8FAD5B-D9CB-469F-A165-70867728950F",
        "starter--chess",
        "",
        "täble 🚀",
        "quote\"d 'and' spaced",
        "0f8fad5bd9cb469fa16570867728950e",
    ];
    let mut db = db_with_apps(&namespaces);
    for namespace in namespaces {
        crate::execute(
            &mut db,
            namespace,
            &[
                "CREATE TABLE notes (body TEXT)".to_owned(),
                format!(
                    "INSERT INTO notes VALUES ('{}')",
                    namespace.replace('\'', "''")
                ),
            ],
            &ExecuteLimits::default(),
        )
        .unwrap();
    }
    for namespace in namespaces {
        let image = open_image(&export_app(&db, namespace).unwrap());
        let body: String = image
            .query_row("SELECT body FROM notes", [], |row| row.get(0))
            .unwrap();
        assert_eq!(body, namespace, "natural names and only this app's rows");
        let tables: i64 = image
            .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
            .unwrap();
        assert_eq!(tables, 1);
    }
}

/// Materializes app "x" whose registry row is `schema_json`, with at-rest table
/// `app_<token>__t (a)` holding one row, and reports the outcome.
#[track_caller]
fn check_registry(schema_json: &str, expect: Expect) {
    let mut db = db_with_apps(&["x"]);
    let token = app_data_token("x");
    let conn = db.connection_mut();
    conn.execute_batch(&format!(
        "CREATE TABLE app_{token}__t (a); INSERT INTO app_{token}__t VALUES (1);"
    ))
    .unwrap();
    conn.execute(
        "INSERT INTO snug_app_schemas VALUES ('x', ?1, ?2, 't')",
        [&token, schema_json],
    )
    .unwrap();
    let outcome = match materialize(&db, "x") {
        Ok(runtime) => dump(runtime.connection()),
        Err(err) => format!("{}: {}", err.reason(), source_text(&err)),
    };
    expect.assert_eq(&outcome);
}

#[test]
fn hostile_registries_fail_closed() {
    check_registry(
        "not json",
        expect![
            "CORRUPT_SCHEMA: the registered schema of app \"x\" is unreadable: schema_json is not the expected JSON shape: expected ident at line 1 column 2"
        ],
    );
    check_registry(
        r#"{"objects":[{"type":"sequence","name":"t","ddl":"CREATE TABLE t (a)"}]}"#,
        expect![[
            r#"CORRUPT_SCHEMA: the registered schema of app "x" is unreadable: schema_json object 0 has unknown type "sequence""#
        ]],
    );
    check_registry(
        r#"{"objects":[{"type":"table","name":"t","ddl":"CREATE TABLE t (a); DROP TABLE snug_secrets"}]}"#,
        expect![[
            r#"NOT_ONE_STATEMENT: the registered table "t" cannot be replayed: the stored DDL is not exactly one statement"#
        ]],
    );
    check_registry(
        r#"{"objects":[{"type":"table","name":"t","ddl":"ATTACH 'other.db' AS o"}]}"#,
        expect![[
            r#"FORBIDDEN_STATEMENT: the registered table "t" cannot be replayed: the stored DDL is not allowed: ATTACH is not allowed (VACUUM and VACUUM INTO attach internally)"#
        ]],
    );
    check_registry(
        r#"{"objects":[{"type":"table","name":"t","ddl":"CREATE TABLE t (a)"},{"type":"index","name":"i","ddl":"PRAGMA writable_schema = ON"}]}"#,
        expect![[
            r#"FORBIDDEN_STATEMENT: the registered index "i" cannot be replayed: the stored DDL is not allowed: PRAGMA writable_schema is not allowed"#
        ]],
    );
    check_registry(
        r#"{"objects":[{"type":"table","name":"t","ddl":"CREATE VIRTUAL TABLE t USING fts5(a)"}]}"#,
        expect![[
            r#"VIRTUAL_TABLE: the registered schema of app "x" is refused: virtual table "t" cannot be persisted"#
        ]],
    );
    check_registry(
        r#"{"objects":[{"type":"table","name":"snug_secrets","ddl":"CREATE TABLE snug_secrets (a)"}]}"#,
        expect![[
            r#"INVALID_NAME: the registered schema of app "x" is refused: table name "snug_secrets" breaks the §8.2 object-name rule"#
        ]],
    );
    check_registry(
        r#"{"objects":[{"type":"table","name":"t","ddl":"CREATE TABLE u (a)"}]}"#,
        expect![[
            r#"SCHEMA_MISMATCH: replaying the registered schema created [(Table, "u")], not [(Table, "t")]"#
        ]],
    );
    check_registry(
        r#"{"objects":[{"type":"table","name":"t","ddl":"CREATE TABLE t (b)"}]}"#,
        expect![[
            r#"SHAPE_MISMATCH: at-rest table "app_x78__t" does not have the columns its registered DDL declares"#
        ]],
    );
    check_registry(
        r#"{"objects":[{"type":"table","name":"t","ddl":"CREATE TABLE t (a)"},{"type":"view","name":"v","ddl":"CREATE VIEW v AS SELECT a FROM t"}],"sequences":{"t":9}}"#,
        expect![[r#"
            table t on t: CREATE TABLE t (a)
            view v on v: CREATE VIEW v AS SELECT a FROM t
            table t without_rowid=0 strict=0
              column a  notnull=0 default=- pk=0 hidden=0
              row 1 | 1
        "#]],
    );
}

#[test]
fn unknown_apps_are_not_found() {
    let db = db_with_apps(&[]);
    let err = materialize(&db, "nope").unwrap_err();
    assert_eq!(err.reason(), "APP_NOT_FOUND");
}

#[test]
fn unregistered_rest_tables_are_recovered_not_lost() {
    let mut db = sample_db();
    db.connection_mut()
        .execute("DELETE FROM snug_app_schemas WHERE app_id = ?1", [TRADER])
        .unwrap();
    let mut runtime = materialize(&db, TRADER).unwrap();
    let rows: i64 = runtime
        .connection()
        .query_row("SELECT count(*) FROM trades", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 2);
    assert_eq!(runtime.unregistered_tables(), ["trades", "equities"]);
    // A read never writes: the unchanged runtime persists as a no-op and the tables stay as found.
    assert!(!runtime.is_dirty());
    assert!(!persist(&mut db, &mut runtime).unwrap().wrote);
    assert!(crate::test_support::schema_json(&db, TRADER).is_none());
    // The first write registers them with everything else.
    runtime
        .connection()
        .execute(
            "DELETE FROM trades WHERE rowid = (SELECT min(rowid) FROM trades)",
            [],
        )
        .unwrap();
    let report = persist(&mut db, &mut runtime).unwrap();
    assert!(report.wrote);
    assert!(crate::test_support::schema_json(&db, TRADER).is_some());
    assert_eq!(runtime.unregistered_tables(), Vec::<String>::new());
}

#[test]
fn a_legacy_file_awaiting_adoption_materializes_row_by_row() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("user.sqlite"),
        vector("userdb/sample-v6.user.snug"),
    )
    .unwrap();
    let (db, _) = UserDb::open_dir(dir.path(), clock()).unwrap();
    assert!(db.pending_adoption().is_some());
    let runtime = materialize(&db, TRADER).unwrap();
    let expected = open_image(&vector(
        "userdb/sample-v6.app-a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c.runtime.sqlite",
    ));
    assert_eq!(dump(runtime.connection()), dump(&expected));
    assert!(
        !dir.path().join("user.snug").exists(),
        "reading adopts nothing"
    );
}

#[test]
fn materialize_reads_only() {
    let dir = tempfile::tempdir().unwrap();
    let (db, path) = crate::test_support::sample_file(dir.path());
    let before = crate::test_support::sha256_file(&path);
    for namespace in [TRADER, CHESS] {
        materialize(&db, namespace).unwrap();
    }
    assert_eq!(crate::test_support::sha256_file(&path), before);
}
