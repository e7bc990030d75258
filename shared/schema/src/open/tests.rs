//! Tests of the open pipeline: header checks, every ladder start, heal, hostility, seeding.

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::{Expect, expect};
use rusqlite::Connection;

use super::*;
use crate::test_support::clock;

/// The exact v1 DDL (reference `userdb-v2.test.ts`, as stored in the legacy-v1 vector).
const V1_DDL: &str = "
CREATE TABLE snug_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE snug_profile (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE snug_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE snug_secrets (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE snug_apps (app_id TEXT PRIMARY KEY, display_name TEXT NOT NULL, description TEXT,
        icon_emoji TEXT, icon_color TEXT, uses_db INTEGER NOT NULL DEFAULT 0, current_version INTEGER NOT NULL,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE snug_app_versions (app_id TEXT NOT NULL, version INTEGER NOT NULL, html TEXT NOT NULL,
        note TEXT, created_at TEXT NOT NULL, PRIMARY KEY (app_id, version));
CREATE TABLE snug_chat_threads (thread_id TEXT PRIMARY KEY, app_id TEXT, title TEXT,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE snug_chat_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, thread_id TEXT NOT NULL,
        role TEXT NOT NULL, content TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE snug_app_data (namespace TEXT PRIMARY KEY, bytes BLOB NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE snug_sync (key TEXT PRIMARY KEY, value TEXT NOT NULL);
";

/// The v3 draft table (types inferred as TEXT, notes a.3).
const AUTH_SPECS_DDL: &str = "CREATE TABLE snug_auth_specs (app_id TEXT PRIMARY KEY, spec_json TEXT, status TEXT, \
     allowed_hosts TEXT, approved_at TEXT, created_at TEXT, updated_at TEXT)";

const SAMPLE_ROWS: &str = "
INSERT INTO snug_meta VALUES ('db_id', 'the-id'), ('created_at', '2025-01-01T00:00:00.000Z');
INSERT INTO snug_apps (app_id, display_name, current_version, created_at, updated_at) VALUES ('a1', 'A', 4, 't', 't');
INSERT INTO snug_app_versions (app_id, version, html, created_at) VALUES ('a1', 3, 'v3', 't'), ('a1', 4, 'v4', 't');
INSERT INTO snug_secrets VALUES ('auth:a1:api_key', 'legacy'), ('auth:a1:s:api_key', 'slot'), ('byok:openai', 'sk');
";

/// Builds a file at storage version `version` with sample rows, as each version's writers left it.
fn file_at(version: i64) -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    if version == 0 {
        return conn;
    }
    conn.execute_batch(V1_DDL).unwrap();
    if version >= 2 {
        conn.execute_batch("DROP TABLE snug_app_data").unwrap();
        // Replaying the v6 DDL up to v5 shapes: v2 columns and tables; the contract column is v6.
        for table in &TABLES {
            if table.name != "snug_connections" || version >= 4 {
                conn.execute_batch(table.ddl).unwrap();
            }
        }
        for added in ADDED_COLUMNS.iter().filter(|a| a.since <= version) {
            add_column_if_missing(&conn, added).unwrap();
        }
        conn.execute_batch(INDEX_DDL).unwrap();
    }
    if (3..=4).contains(&version) {
        conn.execute_batch(AUTH_SPECS_DDL).unwrap();
    }
    conn.execute_batch(SAMPLE_ROWS).unwrap();
    conn.pragma_update(None, "user_version", version).unwrap();
    conn
}

fn table_names(conn: &Connection) -> Vec<String> {
    schema_objects(conn)
        .unwrap()
        .into_iter()
        .filter(|o| o.kind == "table")
        .map(|o| o.name)
        .collect()
}

/// One `table_info` row: name, type, notnull, default, pk.
type ColumnRow = (String, String, i64, Option<String>, i64);

/// Every table with its columns, by table name.
type Shapes = Vec<(String, Vec<ColumnRow>)>;

fn fresh_shapes() -> Shapes {
    let mut conn = Connection::open_in_memory().unwrap();
    run(&mut conn, &*clock(), Trust::Own).unwrap();
    shapes(&conn)
}

fn shapes(conn: &Connection) -> Shapes {
    let mut names = table_names(conn);
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let mut stmt = conn
                .prepare(
                    "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1)",
                )
                .unwrap();
            let cols = stmt
                .query_map([&name], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect();
            (name, cols)
        })
        .collect()
}

#[test]
fn every_ladder_start_ends_at_the_v6_shapes() {
    let expected = fresh_shapes();
    for version in 0..=STORAGE_VERSION {
        let mut conn = file_at(version);
        let report =
            run(&mut conn, &*clock(), Trust::Own).unwrap_or_else(|e| panic!("v{version}: {e:?}"));
        assert_eq!(report.found_version, version);
        assert_eq!(report.advanced, version < STORAGE_VERSION, "v{version}");
        assert!(
            !report.heal.healed(),
            "v{version}: the ladder alone reaches v6: {report:?}"
        );
        assert_eq!(user_version(&conn).unwrap(), STORAGE_VERSION);
        assert_eq!(shapes(&conn), expected, "v{version}");
        let names = table_names(&conn);
        assert!(
            !names
                .iter()
                .any(|n| n == DROPPED_AUTH_SPECS_TABLE || n == DROPPED_APP_DATA_TABLE),
            "v{version}"
        );
        if version == 0 {
            assert!(report.seeded_meta);
            continue;
        }
        assert!(!report.seeded_meta, "v{version}: an existing db_id is kept");
        // The wipe runs exactly when the version advances.
        let expected_wipe = usize::from(version < STORAGE_VERSION);
        assert_eq!(report.credentials_wiped, expected_wipe, "v{version}");
        let pins: Vec<(i64, i64)> = conn
            .prepare("SELECT version, pinned FROM snug_app_versions ORDER BY version")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let expected_pins = if version == 1 {
            vec![(3, 1), (4, 0)]
        } else {
            vec![(3, 0), (4, 0)]
        };
        assert_eq!(
            pins, expected_pins,
            "v{version}: only the v1→v2 step pins the oldest survivor"
        );
        // A second open finds nothing to do.
        let again = run(&mut conn, &*clock(), Trust::Own).unwrap();
        assert!(!again.wrote, "v{version}: {again:?}");
    }
}

#[test]
fn a_healthy_file_is_only_read() {
    let mut conn = file_at(STORAGE_VERSION);
    let before = conn.total_changes();
    let report = run(&mut conn, &*clock(), Trust::Own).unwrap();
    assert!(!report.wrote && !report.advanced && !report.heal.healed());
    assert_eq!(conn.total_changes(), before);
    assert!(conn.is_autocommit());
}

#[test]
fn missing_migration_columns_and_the_index_are_restored() {
    let mut conn = file_at(STORAGE_VERSION);
    conn.execute_batch(
        "ALTER TABLE snug_app_versions DROP COLUMN runtime_contract_json;
         ALTER TABLE snug_chat_messages DROP COLUMN meta;
         DROP INDEX idx_snug_apps_install_source;
         INSERT INTO snug_apps (app_id, display_name, current_version, created_at, updated_at, install_source)
             VALUES ('b1', 'B', 1, 't', 't', 'starter:x'), ('b2', 'B', 1, 't', 't', 'starter:x');",
    )
    .unwrap();
    let report = run(&mut conn, &*clock(), Trust::Own).unwrap();
    expect![[r#"
        HealReport {
            tables: [],
            columns: [
                "snug_chat_messages.meta",
                "snug_app_versions.runtime_contract_json",
            ],
            index: true,
            install_sources_cleared: 1,
        }
    "#]]
    .assert_debug_eq(&report.heal);
    assert_eq!(
        report.credentials_wiped, 0,
        "a heal is not a version advance"
    );
    assert_eq!(shapes(&conn), fresh_shapes());
}

#[test]
fn a_missing_table_replays_the_ddl_but_never_resurrects_auth_specs() {
    let mut conn = file_at(STORAGE_VERSION);
    conn.execute_batch("DROP TABLE snug_connections; DROP TABLE snug_meta")
        .unwrap();
    let report = run(&mut conn, &*clock(), Trust::Own).unwrap();
    assert_eq!(report.heal.tables, ["snug_meta", "snug_connections"]);
    assert!(report.seeded_meta, "the restored snug_meta gets an id");
    assert!(
        !table_names(&conn)
            .iter()
            .any(|n| n == DROPPED_AUTH_SPECS_TABLE)
    );
}

#[test]
fn meta_seeding_keeps_an_existing_created_at() {
    let mut conn = file_at(STORAGE_VERSION);
    conn.execute_batch("DELETE FROM snug_meta WHERE key = 'db_id'")
        .unwrap();
    let report = run(&mut conn, &*clock(), Trust::Own).unwrap();
    assert!(report.seeded_meta);
    let created: String = conn
        .query_row(
            "SELECT value FROM snug_meta WHERE key = 'created_at'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(created, "2025-01-01T00:00:00.000Z");
}

#[track_caller]
fn check_refusal(setup: &str, trust: Trust, expect: Expect) {
    let mut conn = file_at(STORAGE_VERSION);
    conn.execute_batch(setup).unwrap();
    let before = shapes(&conn);
    let err = run(&mut conn, &*clock(), trust).unwrap_err();
    assert_eq!(shapes(&conn), before, "a refusal leaves the file as it was");
    expect.assert_eq(&crate::OpenError::from(err).to_string());
}

#[test]
fn hostile_schemas_are_refused_before_anything_runs() {
    check_refusal(
        "CREATE TRIGGER t AFTER INSERT ON snug_secrets BEGIN INSERT INTO snug_profile VALUES (new.key, new.value); END",
        Trust::Own,
        expect![[r#"refused hostile schema: the file defines trigger "t" on "snug_secrets""#]],
    );
    check_refusal(
        "CREATE VIEW v AS SELECT * FROM snug_secrets",
        Trust::Own,
        expect![[r#"refused hostile schema: the file defines view "v""#]],
    );
    check_refusal(
        "CREATE INDEX snoop ON snug_secrets (value)",
        Trust::Own,
        expect![[
            r#"refused hostile schema: the file defines unexpected index "snoop" on hub table "snug_secrets""#
        ]],
    );
    check_refusal(
        "DROP INDEX idx_snug_apps_install_source; CREATE INDEX idx_snug_apps_install_source ON snug_apps (install_source)",
        Trust::Own,
        expect![[
            r#"refused hostile schema: the file defines unexpected index "idx_snug_apps_install_source" on hub table "snug_apps""#
        ]],
    );
    check_refusal(
        "DROP TABLE snug_secrets; CREATE TABLE SNUG_SECRETS (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        Trust::Own,
        expect![[r#"refused hostile schema: the file contains foreign table "SNUG_SECRETS""#]],
    );
    check_refusal(
        "CREATE TABLE notes (x)",
        Trust::Foreign,
        expect![[r#"refused hostile schema: the file contains foreign table "notes""#]],
    );
    check_refusal(
        "DROP TABLE snug_sync; CREATE TABLE snug_sync (key TEXT PRIMARY KEY, value TEXT NOT NULL, spy TEXT)",
        Trust::Own,
        expect![[
            r#"refused hostile schema: hub table "snug_sync" does not have the storage-version-6 shape: unexpected column "spy""#
        ]],
    );
    check_refusal(
        "DROP TABLE snug_sync; CREATE TABLE snug_sync (key TEXT PRIMARY KEY, value TEXT)",
        Trust::Own,
        expect![[
            r#"refused hostile schema: hub table "snug_sync" does not have the storage-version-6 shape: column "value" is declared differently"#
        ]],
    );
    check_refusal(
        "ALTER TABLE snug_apps DROP COLUMN description",
        Trust::Own,
        expect![[
            r#"refused hostile schema: hub table "snug_apps" does not have the storage-version-6 shape: column "description" is missing"#
        ]],
    );
    check_refusal(
        "DROP TABLE snug_chat_messages; CREATE TABLE snug_chat_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, \
         thread_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, created_at TEXT NOT NULL, \
         pinned INTEGER NOT NULL DEFAULT 0, meta TEXT) STRICT",
        Trust::Own,
        expect![[
            r#"refused hostile schema: hub table "snug_chat_messages" does not have the storage-version-6 shape: the table is WITHOUT ROWID or STRICT"#
        ]],
    );
    check_refusal(
        "DROP TABLE snug_sync; CREATE TABLE snug_sync (key TEXT PRIMARY KEY, value TEXT NOT NULL, g TEXT GENERATED ALWAYS AS (value))",
        Trust::Own,
        expect![[
            r#"refused hostile schema: hub table "snug_sync" does not have the storage-version-6 shape: unexpected column "g""#
        ]],
    );
    check_refusal(
        "DROP TABLE snug_connections; DROP TABLE snug_apps; CREATE TABLE snug_apps (app_id TEXT PRIMARY KEY)",
        Trust::Own,
        expect![[
            r#"refused hostile schema: hub table "snug_apps" does not have the storage-version-6 shape: column "display_name" is missing"#
        ]],
    );
}

#[test]
fn foreign_tables_are_kept_on_open_and_legacy_tables_are_allowed_where_they_belonged() {
    let mut conn = file_at(STORAGE_VERSION);
    conn.execute_batch("CREATE TABLE notes (x)").unwrap();
    assert!(run(&mut conn, &*clock(), Trust::Own).is_ok());
    assert!(table_names(&conn).contains(&"notes".to_owned()));
    for version in [1, 3, 4] {
        let mut conn = file_at(version);
        assert!(
            run(&mut conn, &*clock(), Trust::Foreign).is_ok(),
            "v{version}"
        );
    }
    let mut conn = file_at(STORAGE_VERSION);
    conn.execute_batch(AUTH_SPECS_DDL).unwrap();
    assert!(matches!(
        run(&mut conn, &*clock(), Trust::Foreign),
        Err(Refusal::Hostile(Hostility::ForeignTable { .. }))
    ));
}

#[test]
fn identity_rules_differ_for_own_and_foreign_files() {
    let mut empty = Connection::open_in_memory().unwrap();
    assert!(matches!(
        run(&mut empty, &*clock(), Trust::Foreign),
        Err(Refusal::NotAUserDatabase)
    ));
    let mut empty = Connection::open_in_memory().unwrap();
    assert!(
        run(&mut empty, &*clock(), Trust::Own).unwrap().seeded_meta,
        "an empty own file is a new file"
    );
    let mut app = Connection::open_in_memory().unwrap();
    app.execute_batch("CREATE TABLE trades (id INTEGER PRIMARY KEY)")
        .unwrap();
    assert!(matches!(
        run(&mut app, &*clock(), Trust::Own),
        Err(Refusal::NotAUserDatabase)
    ));
    let mut no_meta = file_at(STORAGE_VERSION);
    no_meta.execute_batch("DROP TABLE snug_meta").unwrap();
    assert!(matches!(
        run(&mut no_meta, &*clock(), Trust::Foreign),
        Err(Refusal::NotAUserDatabase)
    ));
    let mut negative = file_at(STORAGE_VERSION);
    negative.pragma_update(None, "user_version", -3).unwrap();
    assert!(matches!(
        run(&mut negative, &*clock(), Trust::Own),
        Err(Refusal::Malformed(Malformation::NegativeVersion {
            found: -3
        }))
    ));
}

#[track_caller]
fn check_header_of(bytes: &[u8], len: u64, expect: Expect) {
    let verdict = match check_header(bytes, len) {
        Ok(wal) => format!("ok wal={wal}"),
        Err(refusal) => crate::OpenError::from(refusal).to_string(),
    };
    expect.assert_eq(&verdict);
}

fn header(page_size: u16, write: u8, read: u8) -> Vec<u8> {
    let mut bytes = SQLITE_MAGIC.to_vec();
    bytes.resize(SQLITE_HEADER_LEN, 0);
    bytes[16..18].copy_from_slice(&page_size.to_be_bytes());
    bytes[18] = write;
    bytes[19] = read;
    bytes
}

#[test]
fn headers_are_checked_before_sqlite_sees_them() {
    check_header_of(b"", 0, expect!["not a SQLite database"]);
    check_header_of(&[0; 4096], 4096, expect!["not a SQLite database"]);
    check_header_of(b"SNUGENC1\n", 9, expect!["not a SQLite database"]);
    check_header_of(
        SQLITE_MAGIC,
        16,
        expect!["malformed SQLite file: the file is 16 bytes, shorter than a SQLite header"],
    );
    check_header_of(&header(4096, 1, 1), 8192, expect!["ok wal=false"]);
    check_header_of(&header(1, 2, 2), 65536, expect!["ok wal=true"]);
    check_header_of(
        &header(4096, 1, 1),
        8000,
        expect![
            "malformed SQLite file: the file is 8000 bytes, not a whole number of 4096-byte pages"
        ],
    );
    check_header_of(
        &header(1000, 1, 1),
        4000,
        expect!["malformed SQLite file: the header declares an invalid page size 1000"],
    );
    check_header_of(
        &header(256, 1, 1),
        512,
        expect!["malformed SQLite file: the header declares an invalid page size 256"],
    );
    check_header_of(
        &header(4096, 3, 1),
        4096,
        expect!["malformed SQLite file: unsupported SQLite file format versions (write 3, read 1)"],
    );
}

#[test]
fn inspection_reports_without_writing() {
    let mut conn = file_at(1);
    let before = conn.total_changes();
    let inspection = inspect(&conn).unwrap();
    assert_eq!(conn.total_changes(), before);
    assert_eq!(inspection.migrate_from, Some(1));
    assert_eq!(inspection.legacy_credentials, 1);
    assert!(inspection.open_refusal.is_none() && inspection.import_refusal.is_none());
    assert!(inspection.heal.missing_tables.contains(&"snug_connections"));
    let data = inspection
        .tables
        .iter()
        .find(|t| t.name == DROPPED_APP_DATA_TABLE)
        .unwrap();
    assert_eq!(data.kind, TableKind::Foreign);
    run(&mut conn, &*clock(), Trust::Own).unwrap();
    let inspection = inspect(&conn).unwrap();
    assert!(
        inspection.heal.is_empty()
            && inspection.migrate_from.is_none()
            && !inspection.needs_meta_seed
    );
    assert!(
        inspection
            .tables
            .iter()
            .all(|t| t.kind != TableKind::Foreign)
    );
}

#[test]
fn connections_are_configured_defensively() {
    use rusqlite::config::DbConfig;
    let conn = Connection::open_in_memory().unwrap();
    configure(&conn).unwrap();
    assert!(conn.db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE).unwrap());
    assert!(
        !conn
            .db_config(DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA)
            .unwrap()
    );
    let cell_size_check: i64 = conn
        .pragma_query_value(None, "cell_size_check", |r| r.get(0))
        .unwrap();
    assert_eq!(cell_size_check, 1);
    let err = conn
        .query_row("SELECT load_extension('libnothing')", [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap_err();
    assert!(
        err.to_string().contains("not authorized") || err.to_string().contains("no such function"),
        "{err}"
    );
    let err = conn
        .execute_batch("PRAGMA writable_schema = ON; DELETE FROM sqlite_master")
        .unwrap_err();
    assert!(err.to_string().contains("may not be modified"), "{err}");
}

#[test]
fn constants_agree_with_the_container_crate() {
    assert_eq!(crate::MAX_USERDB_BYTES, snug_container::MAX_USERDB_BYTES);
}
