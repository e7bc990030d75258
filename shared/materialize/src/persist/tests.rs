//! Tests of write-back: reference format, no-op on an unchanged runtime, per-table rewrites,
//! fail-closed refusals, the cap, adoption, and rename-only naming.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use expect_test::{Expect, expect};
use snug_schema::{UserDb, app_data_token};

use crate::test_support::{
    CHESS, TRADER, clock, db_with_apps, dump, install, raw_runtime, sample_db, sample_file,
    schema_json, sha256_file, table_sql, vector,
};
use crate::{AppDatabase, ExecuteLimits, RegistryChange, materialize, persist};

fn run(runtime: &mut AppDatabase, statements: &[&str]) {
    runtime
        .execute(statements, &ExecuteLimits::default())
        .unwrap();
}

#[test]
fn persisting_into_a_fresh_file_reproduces_the_reference_at_rest_state() {
    // The sample's two apps, materialized and persisted into a database that has never seen
    // them, produce the reference's at-rest DDL and registry text byte for byte.
    let sample = sample_db();
    let mut fresh = db_with_apps(&[TRADER, CHESS]);
    for namespace in [TRADER, CHESS] {
        let mut runtime = materialize(&sample, namespace).unwrap();
        let report = persist(&mut fresh, &mut runtime).unwrap();
        assert!(report.wrote);
        assert_eq!(report.registry, RegistryChange::Written);
        assert!(report.uses_db_set);
        assert_eq!(
            schema_json(&fresh, namespace),
            schema_json(&sample, namespace),
            "registry text of {namespace}"
        );
        let token = app_data_token(namespace);
        let rest: Vec<String> = {
            let mut stmt = sample
                .connection()
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ?1 ESCAPE '!'")
                .unwrap();
            stmt.query_map([format!("app!_{token}!_!_%")], |row| row.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        assert!(!rest.is_empty());
        for table in rest {
            assert_eq!(
                table_sql(&fresh, &table),
                table_sql(&sample, &table),
                "{table}"
            );
        }
        // Round trip: materializing again gives the same runtime.
        let again = materialize(&fresh, namespace).unwrap();
        assert_eq!(
            dump(again.connection()),
            dump(materialize(&sample, namespace).unwrap().connection())
        );
    }
}

#[test]
fn an_unchanged_runtime_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut db, path) = sample_file(dir.path());
    let before = sha256_file(&path);
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();

    // Known unchanged: the runtime's own counters say so, nothing is even compared.
    let mut runtime = materialize(&db, TRADER).unwrap();
    run(
        &mut runtime,
        &["SELECT * FROM trades", "SELECT * FROM v_totals"],
    );
    let changes = db.connection().total_changes();
    let report = persist(&mut db, &mut runtime).unwrap();
    assert!(!report.wrote && report.unchanged_runtime, "{report:?}");
    assert_eq!(db.connection().total_changes(), changes);

    // Not known: an image of the same database from elsewhere is compared table by table.
    let image = runtime.to_bytes().unwrap();
    let mut foreign = AppDatabase::from_bytes(TRADER, &image).unwrap();
    let report = persist(&mut db, &mut foreign).unwrap();
    assert!(!report.wrote && !report.unchanged_runtime, "{report:?}");
    assert_eq!(report.tables_unchanged, ["snug_kv", "trades", "equities"]);
    assert_eq!(db.connection().total_changes(), changes);

    // Writes that cancel out leave the rest state as it was: compared, nothing written.
    run(
        &mut runtime,
        &[
            "UPDATE trades SET qty = qty + 1",
            "UPDATE trades SET qty = qty - 1",
        ],
    );
    let report = persist(&mut db, &mut runtime).unwrap();
    assert!(!report.wrote && !report.unchanged_runtime, "{report:?}");

    assert_eq!(db.connection().total_changes(), changes);
    assert_eq!(sha256_file(&path), before);
    assert_eq!(
        std::fs::metadata(&path).unwrap().modified().unwrap(),
        modified
    );
    assert!(!runtime.is_dirty(), "a persist re-anchors the runtime");
}

/// Root page of an at-rest table: a dropped and re-created table gets a new one.
fn rootpage(db: &UserDb, table: &str) -> i64 {
    db.connection()
        .query_row(
            "SELECT rootpage FROM sqlite_master WHERE name = ?1",
            [table],
            |row| row.get(0),
        )
        .unwrap()
}

#[test]
fn only_changed_tables_are_rewritten() {
    let mut db = sample_db();
    let token = app_data_token(TRADER);
    let rest = |name: &str| format!("app_{token}__{name}");
    let roots_before: Vec<i64> = ["snug_kv", "equities"]
        .iter()
        .map(|t| rootpage(&db, &rest(t)))
        .collect();
    let mut runtime = materialize(&db, TRADER).unwrap();
    run(
        &mut runtime,
        &["UPDATE trades SET qty = 10 WHERE symbol = 'AAPL'"],
    );
    let changes = db.connection().total_changes();
    let report = persist(&mut db, &mut runtime).unwrap();
    expect![[r#"
        PersistReport {
            wrote: true,
            unchanged_runtime: false,
            tables_written: [
                "trades",
            ],
            tables_unchanged: [
                "snug_kv",
                "equities",
            ],
            tables_dropped: [],
            registry: Unchanged,
            uses_db_set: false,
            migrations_appended: 0,
        }
    "#]]
    .assert_debug_eq(&report);
    // Exactly the rewritten table's two rows were inserted; nothing else changed a row.
    assert_eq!(db.connection().total_changes() - changes, 2);
    let roots_after: Vec<i64> = ["snug_kv", "equities"]
        .iter()
        .map(|t| rootpage(&db, &rest(t)))
        .collect();
    assert_eq!(
        roots_before, roots_after,
        "untouched tables keep their pages"
    );
    let qty: f64 = db
        .connection()
        .query_row(
            &format!("SELECT qty FROM {} WHERE symbol = 'AAPL'", rest("trades")),
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert!((qty - 10.0).abs() < f64::EPSILON);
}

#[test]
fn schema_changes_drop_and_register() {
    let mut db = sample_db();
    let mut runtime = materialize(&db, TRADER).unwrap();
    run(
        &mut runtime,
        &[
            "DROP VIEW v_totals",
            "DROP TABLE equities",
            "ALTER TABLE trades ADD COLUMN note TEXT",
            "CREATE TABLE tags (tag TEXT)",
        ],
    );
    let report = persist(&mut db, &mut runtime).unwrap();
    assert_eq!(report.tables_written, ["trades", "tags"]);
    assert_eq!(
        report.tables_dropped,
        [format!("app_{}__equities", app_data_token(TRADER))]
    );
    assert_eq!(report.registry, RegistryChange::Written);
    expect![[r#"{"objects":[{"type":"table","name":"trades","ddl":"CREATE TABLE trades (id INTEGER PRIMARY KEY AUTOINCREMENT, symbol TEXT NOT NULL, qty REAL DEFAULT 0, note TEXT)"},{"type":"index","name":"idx_trades_symbol","ddl":"CREATE INDEX idx_trades_symbol ON trades (symbol)"},{"type":"table","name":"tags","ddl":"CREATE TABLE tags (tag TEXT)"}],"sequences":{"trades":3}}"#]]
        .assert_eq(&schema_json(&db, TRADER).unwrap());

    // Dropping everything deletes the registry row and every rest table.
    let mut runtime = materialize(&db, TRADER).unwrap();
    run(
        &mut runtime,
        &["DROP TABLE trades", "DROP TABLE tags", "DROP TABLE snug_kv"],
    );
    let report = persist(&mut db, &mut runtime).unwrap();
    assert_eq!(report.registry, RegistryChange::Deleted);
    assert_eq!(report.tables_dropped.len(), 3);
    assert_eq!(schema_json(&db, TRADER), None);
    let listing = crate::list_apps_tables(&db).unwrap();
    assert!(
        listing
            .apps
            .iter()
            .all(|app| app.namespace != TRADER || app.tables.is_empty())
    );
}

#[test]
fn uses_db_flips_when_a_table_first_exists() {
    let mut db = db_with_apps(&["fresh"]);
    assert!(!db.app("fresh").unwrap().uses_db);
    let mut runtime = materialize(&db, "fresh").unwrap();
    run(
        &mut runtime,
        &["CREATE TABLE snug_kv (key TEXT PRIMARY KEY, value TEXT)"],
    );
    let report = persist(&mut db, &mut runtime).unwrap();
    assert!(report.uses_db_set);
    assert!(db.app("fresh").unwrap().uses_db);
    // snug_kv is never registered.
    assert_eq!(schema_json(&db, "fresh"), None);
}

/// Persists a runtime made by `sql` (unsandboxed, so any schema) into a file-backed copy of
/// the sample as app TRADER, and reports the outcome. A refusal must leave the file's bytes
/// exactly as they were: rest state, secrets and the other app included.
#[track_caller]
fn check_refused(sql: &str, expect: Expect) {
    let dir = tempfile::tempdir().unwrap();
    let (mut db, path) = sample_file(dir.path());
    let before = sha256_file(&path);
    let mut runtime = raw_runtime(TRADER, sql);
    let outcome = match persist(&mut db, &mut runtime) {
        Ok(report) => format!("ok: wrote={}", report.wrote),
        Err(err) => format!("{}: {err}", err.reason()),
    };
    if outcome.starts_with("ok") {
        expect.assert_eq(&outcome);
        return;
    }
    assert_eq!(sha256_file(&path), before, "a refusal writes nothing");
    assert_eq!(
        db.secret_keys().unwrap().len(),
        2,
        "the secrets are untouched"
    );
    expect.assert_eq(&outcome);
}

#[test]
fn hostile_names_fail_closed() {
    check_refused(
        "CREATE TABLE \"a\"\"b\" (x)",
        expect![[
            r#"INVALID_NAME: write-back refused: table name "a\"b" breaks the §8.2 object-name rule"#
        ]],
    );
    check_refused(
        "CREATE TABLE snug_secrets (x)",
        expect![[
            r#"INVALID_NAME: write-back refused: table name "snug_secrets" breaks the §8.2 object-name rule"#
        ]],
    );
    check_refused(
        "CREATE TABLE SNUG_kv (key TEXT PRIMARY KEY, value TEXT)",
        expect![[
            r#"INVALID_NAME: write-back refused: table name "SNUG_kv" breaks the §8.2 object-name rule"#
        ]],
    );
    check_refused(
        "CREATE TABLE App_x (x)",
        expect![[
            r#"INVALID_NAME: write-back refused: table name "App_x" breaks the §8.2 object-name rule"#
        ]],
    );
    check_refused(
        &format!("CREATE TABLE {} (x)", "a".repeat(42)),
        expect![[
            r#"INVALID_NAME: write-back refused: table name "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" breaks the §8.2 object-name rule"#
        ]],
    );
    check_refused(
        &format!("CREATE TABLE {} (x)", "A".repeat(41)),
        expect!["ok: wrote=true"],
    );
    check_refused(
        "CREATE TABLE \"tåble\" (x)",
        expect![[
            r#"INVALID_NAME: write-back refused: table name "tåble" breaks the §8.2 object-name rule"#
        ]],
    );
    check_refused(
        "CREATE TABLE \"1trades\" (x)",
        expect![[
            r#"INVALID_NAME: write-back refused: table name "1trades" breaks the §8.2 object-name rule"#
        ]],
    );
    check_refused(
        "CREATE TABLE \"with space\" (x)",
        expect![[
            r#"INVALID_NAME: write-back refused: table name "with space" breaks the §8.2 object-name rule"#
        ]],
    );
    check_refused(
        "CREATE TABLE \"dash-ed\" (x)",
        expect![[
            r#"INVALID_NAME: write-back refused: table name "dash-ed" breaks the §8.2 object-name rule"#
        ]],
    );
    check_refused(
        "CREATE TABLE ok (x); CREATE INDEX \"dot.ted\" ON ok (x)",
        expect![[
            r#"INVALID_NAME: write-back refused: index name "dot.ted" breaks the §8.2 object-name rule"#
        ]],
    );
    check_refused(
        "CREATE TABLE ok (x); CREATE VIEW snug_view AS SELECT x FROM ok",
        expect![[
            r#"INVALID_NAME: write-back refused: view name "snug_view" breaks the §8.2 object-name rule"#
        ]],
    );
    check_refused(
        "CREATE TABLE ok (x); CREATE TRIGGER \"t'q\" AFTER INSERT ON ok BEGIN SELECT 1; END",
        expect![[
            r#"INVALID_NAME: write-back refused: trigger name "t'q" breaks the §8.2 object-name rule"#
        ]],
    );
    check_refused(
        "CREATE TABLE ok (x); CREATE INDEX snug_kv ON ok (x)",
        expect![[
            r#"INVALID_NAME: write-back refused: index name "snug_kv" breaks the §8.2 object-name rule"#
        ]],
    );
    check_refused(
        "CREATE VIRTUAL TABLE docs USING fts5(body)",
        expect![[r#"VIRTUAL_TABLE: write-back refused: virtual table "docs" cannot be persisted"#]],
    );
    check_refused(
        "CREATE TABLE snug_kv (k, v)",
        expect![
            "INVALID_KV_TABLE: write-back refused: snug_kv is not the driver's (key TEXT PRIMARY KEY, value TEXT) table"
        ],
    );
}

#[test]
fn a_refused_runtime_leaves_every_app_as_it_was() {
    let mut db = sample_db();
    let trader = dump(materialize(&db, TRADER).unwrap().connection());
    let chess = dump(materialize(&db, CHESS).unwrap().connection());
    let secrets = db.secret_keys().unwrap();
    let mut runtime = materialize(&db, TRADER).unwrap();
    run(
        &mut runtime,
        &["DELETE FROM trades", "CREATE TABLE keep (x)"],
    );
    // A rename is the one way app SQL can reach an invalid name; persist catches it.
    run(&mut runtime, &["ALTER TABLE keep RENAME TO snug_secrets"]);
    let err = persist(&mut db, &mut runtime).unwrap_err();
    assert_eq!(err.reason(), "INVALID_NAME");
    assert_eq!(dump(materialize(&db, TRADER).unwrap().connection()), trader);
    assert_eq!(dump(materialize(&db, CHESS).unwrap().connection()), chess);
    assert_eq!(db.secret_keys().unwrap(), secrets);
}

#[test]
fn the_cap_rolls_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (mut db, path) = sample_file(dir.path());
    // 40 MB of docs elsewhere in the file: the app's 30 MB fit its runtime but not the file.
    db.connection_mut()
        .execute_batch(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40) \
             INSERT INTO snug_app_docs SELECT 'filler', 'doc' || i, NULL, zeroblob(1000000), 't' FROM n",
        )
        .unwrap();
    let before = sha256_file(&path);
    let mut runtime = materialize(&db, CHESS).unwrap();
    run(
        &mut runtime,
        &[
            "INSERT INTO moves (san) VALUES ('e3')",
            "CREATE TABLE blobs (b BLOB)",
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30) \
             INSERT INTO blobs SELECT zeroblob(1000000) FROM n",
        ],
    );
    let err = persist(&mut db, &mut runtime).unwrap_err();
    assert_eq!(err.reason(), "TOO_LARGE", "{err}");
    assert_eq!(sha256_file(&path), before);
    let moves: i64 = db
        .connection()
        .query_row(
            &format!("SELECT count(*) FROM app_{}__moves", app_data_token(CHESS)),
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(
        moves, 2,
        "the smaller change in the same write-back was rolled back too"
    );
}

#[test]
fn unknown_apps_are_refused() {
    let mut db = db_with_apps(&[]);
    let mut runtime = raw_runtime("ghost", "CREATE TABLE t (x)");
    assert_eq!(
        persist(&mut db, &mut runtime).unwrap_err().reason(),
        "APP_NOT_FOUND"
    );
}

#[test]
fn a_taken_natural_name_is_a_collision_not_a_clobber() {
    let mut db = db_with_apps(&["a"]);
    // A foreign table in the user file (kept by the open pipeline, never exported).
    db.connection_mut()
        .execute_batch("CREATE TABLE notes (private TEXT); INSERT INTO notes VALUES ('mine')")
        .unwrap();
    let mut runtime = raw_runtime("a", "CREATE TABLE Notes (x)");
    let err = persist(&mut db, &mut runtime).unwrap_err();
    assert_eq!(err.reason(), "NAME_COLLISION");
    let kept: String = db
        .connection()
        .query_row("SELECT private FROM notes", [], |row| row.get(0))
        .unwrap();
    assert_eq!(kept, "mine");
}

#[test]
fn at_rest_names_come_from_sqlite_rename_only() {
    let mut db = db_with_apps(&["r"]);
    let mut runtime = materialize(&db, "r").unwrap();
    run(
        &mut runtime,
        &[
            "CREATE TABLE parent (id INTEGER PRIMARY KEY)",
            "CREATE TABLE child (pid INTEGER REFERENCES parent (id), note TEXT CHECK (note <> 'parent'))",
        ],
    );
    persist(&mut db, &mut runtime).unwrap();
    let token = app_data_token("r");
    // SQLite renamed the table itself; the REFERENCES text is left alone (foreign keys off and
    // legacy_alter_table on, as in the reference).
    expect![[r#"
        Some(
            "CREATE TABLE \"app_x72__child\" (pid INTEGER REFERENCES parent (id), note TEXT CHECK (note <> 'parent'))",
        )
    "#]]
    .assert_debug_eq(&table_sql(&db, &format!("app_{token}__child")));
    // A CHECK that qualifies a column with its own table name cannot survive SQLite's rename
    // (in the reference neither): the write-back fails whole.
    let mut runtime = materialize(&db, "r").unwrap();
    run(
        &mut runtime,
        &["CREATE TABLE checked (n INTEGER CHECK (checked.n > 0))"],
    );
    let err = persist(&mut db, &mut runtime).unwrap_err();
    assert_eq!(err.reason(), "DDL_FAILED");
    assert_eq!(table_sql(&db, &format!("app_{token}__checked")), None);
}

#[test]
fn rowids_survive_the_round_trip() {
    let mut db = db_with_apps(&["rows"]);
    let mut runtime = materialize(&db, "rows").unwrap();
    run(
        &mut runtime,
        &[
            "CREATE TABLE t (label TEXT)",
            "INSERT INTO t (rowid, label) VALUES (7, 'seven'), (2, 'two')",
        ],
    );
    persist(&mut db, &mut runtime).unwrap();
    let again = materialize(&db, "rows").unwrap();
    let rowids: Vec<i64> = again
        .connection()
        .prepare("SELECT rowid FROM t ORDER BY rowid")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rowids, [2, 7]);
}

#[test]
fn a_legacy_file_is_adopted_only_when_something_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = dir.path().join("user.sqlite");
    std::fs::write(&legacy, vector("userdb/sample-v6.user.snug")).unwrap();
    let legacy_hash = sha256_file(&legacy);
    let (mut db, _) = UserDb::open_dir(dir.path(), clock()).unwrap();

    let image = materialize(&db, TRADER).unwrap().to_bytes().unwrap();
    let mut same = AppDatabase::from_bytes(TRADER, &image).unwrap();
    assert!(!persist(&mut db, &mut same).unwrap().wrote);
    assert!(!dir.path().join("user.snug").exists());

    let mut runtime = materialize(&db, TRADER).unwrap();
    run(
        &mut runtime,
        &["INSERT INTO trades (symbol) VALUES ('NVDA')"],
    );
    assert!(persist(&mut db, &mut runtime).unwrap().wrote);
    assert!(dir.path().join("user.snug").exists());
    assert_eq!(
        sha256_file(&legacy),
        legacy_hash,
        "the legacy file is never modified"
    );
    let (reopened, _) = UserDb::open_dir(dir.path(), clock()).unwrap();
    let rows: i64 = materialize(&reopened, TRADER)
        .unwrap()
        .connection()
        .query_row("SELECT count(*) FROM trades", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 3);
}

#[test]
fn a_second_install_of_the_same_data_is_independent() {
    // Two apps with the same schema never share rows.
    let mut db = db_with_apps(&["one"]);
    install(&mut db, &["two"]);
    for (ns, value) in [("one", 1), ("two", 2)] {
        let mut runtime = materialize(&db, ns).unwrap();
        run(
            &mut runtime,
            &[
                "CREATE TABLE n (v)",
                &format!("INSERT INTO n VALUES ({value})"),
            ],
        );
        persist(&mut db, &mut runtime).unwrap();
    }
    for (ns, value) in [("one", 1), ("two", 2)] {
        let v: i64 = materialize(&db, ns)
            .unwrap()
            .connection()
            .query_row("SELECT v FROM n", [], |row| row.get(0))
            .unwrap();
        assert_eq!(v, value);
    }
}

#[test]
fn a_file_already_over_the_cap_may_shrink_but_not_grow() {
    let mut db = sample_db();
    db.connection_mut()
        .execute_batch(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 70) \
             INSERT INTO snug_app_docs SELECT 'filler', 'doc' || i, NULL, zeroblob(1000000), 't' FROM n",
        )
        .unwrap();
    assert!(db.size_bytes().unwrap() > snug_schema::MAX_USERDB_BYTES);
    let mut runtime = materialize(&db, CHESS).unwrap();
    run(
        &mut runtime,
        &["INSERT INTO moves SELECT printf('%.5000c', 'x')"],
    );
    assert_eq!(
        persist(&mut db, &mut runtime).unwrap_err().reason(),
        "TOO_LARGE"
    );
    let mut runtime = materialize(&db, CHESS).unwrap();
    run(&mut runtime, &["DELETE FROM moves"]);
    assert!(persist(&mut db, &mut runtime).unwrap().wrote);
}
