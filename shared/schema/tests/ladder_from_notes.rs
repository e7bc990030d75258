//! The v2–v5 → v6 migration ladder, checked against fixtures and expectations written from the
//! reference notes (`../shared/reference/snug-reference-notes.md` §(a.1), §(a.3), §(b.1)–(b.4)),
//! not from this crate's own table lists, so that one mistake cannot pass on both sides.
//!
//! The fixtures are `tests/ladder/v{2,3,4,5}.sql`; the v6 facts below are the notes' a.1 table.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;
use std::sync::Arc;

use rusqlite::Connection;
use snug_schema::SteppingClock;

/// One column as `PRAGMA table_info` reports it: name, declared type, NOT NULL, default, key position.
type Col = (&'static str, &'static str, bool, Option<&'static str>, i64);

const fn c(name: &'static str, ty: &'static str, not_null: bool) -> Col {
    (name, ty, not_null, None, 0)
}

const fn key(name: &'static str, ty: &'static str, not_null: bool, pk: i64) -> Col {
    (name, ty, not_null, None, pk)
}

const fn dflt(name: &'static str, ty: &'static str, value: &'static str) -> Col {
    (name, ty, true, Some(value), 0)
}

const KV: &[Col] = &[key("key", "TEXT", false, 1), c("value", "TEXT", true)];

const SNUG_APPS: &[Col] = &[
    key("app_id", "TEXT", false, 1),
    c("display_name", "TEXT", true),
    c("description", "TEXT", false),
    c("icon_emoji", "TEXT", false),
    c("icon_color", "TEXT", false),
    dflt("uses_db", "INTEGER", "0"),
    c("current_version", "INTEGER", true),
    c("created_at", "TEXT", true),
    c("updated_at", "TEXT", true),
    c("install_source", "TEXT", false),
];
const SNUG_APP_VERSIONS: &[Col] = &[
    key("app_id", "TEXT", true, 1),
    key("version", "INTEGER", true, 2),
    c("html", "TEXT", true),
    c("note", "TEXT", false),
    c("created_at", "TEXT", true),
    dflt("pinned", "INTEGER", "0"),
    c("runtime_contract_json", "TEXT", false),
];
const SNUG_APP_SCHEMAS: &[Col] = &[
    key("app_id", "TEXT", false, 1),
    c("token", "TEXT", true),
    c("schema_json", "TEXT", true),
    c("updated_at", "TEXT", true),
];
const SNUG_APP_MIGRATIONS: &[Col] = &[
    key("app_id", "TEXT", true, 1),
    key("seq", "INTEGER", true, 2),
    c("ddl", "TEXT", true),
    c("applied_at", "TEXT", true),
];
const SNUG_APP_DOCS: &[Col] = &[
    key("app_id", "TEXT", true, 1),
    key("slug", "TEXT", true, 2),
    c("title", "TEXT", false),
    c("content", "TEXT", true),
    c("updated_at", "TEXT", true),
];
const SNUG_CHAT_THREADS: &[Col] = &[
    key("thread_id", "TEXT", false, 1),
    c("app_id", "TEXT", false),
    c("title", "TEXT", false),
    c("created_at", "TEXT", true),
    c("updated_at", "TEXT", true),
];
const SNUG_CHAT_MESSAGES: &[Col] = &[
    key("id", "INTEGER", false, 1),
    c("thread_id", "TEXT", true),
    c("role", "TEXT", true),
    c("content", "TEXT", true),
    c("created_at", "TEXT", true),
    dflt("pinned", "INTEGER", "0"),
    c("meta", "TEXT", false),
];
const SNUG_CONNECTIONS: &[Col] = &[
    key("app_id", "TEXT", true, 1),
    key("slot", "TEXT", true, 2),
    c("requirement_json", "TEXT", true),
    c("requirement_version", "INTEGER", true),
    c("provenance", "TEXT", true),
    c("confidence", "REAL", false),
    c("status", "TEXT", true),
    c("pending_requirement_json", "TEXT", false),
    dflt("imported", "INTEGER", "0"),
    dflt("allowed_hosts", "TEXT", "'[]'"),
    c("approved_at", "TEXT", false),
    c("revoked_at", "TEXT", false),
    c("created_at", "TEXT", true),
    c("updated_at", "TEXT", true),
];

/// Notes a.1: the 13 hub tables at storage version 6, columns in order.
fn v6_tables() -> BTreeMap<&'static str, &'static [Col]> {
    BTreeMap::from([
        ("snug_meta", KV),
        ("snug_profile", KV),
        ("snug_settings", KV),
        ("snug_secrets", KV),
        ("snug_sync", KV),
        ("snug_apps", SNUG_APPS),
        ("snug_app_versions", SNUG_APP_VERSIONS),
        ("snug_app_schemas", SNUG_APP_SCHEMAS),
        ("snug_app_migrations", SNUG_APP_MIGRATIONS),
        ("snug_app_docs", SNUG_APP_DOCS),
        ("snug_chat_threads", SNUG_CHAT_THREADS),
        ("snug_chat_messages", SNUG_CHAT_MESSAGES),
        ("snug_connections", SNUG_CONNECTIONS),
    ])
}

const FIXTURES: [(i64, &str); 4] = [
    (2, include_str!("ladder/v2.sql")),
    (3, include_str!("ladder/v3.sql")),
    (4, include_str!("ladder/v4.sql")),
    (5, include_str!("ladder/v5.sql")),
];

fn clock() -> Arc<SteppingClock> {
    Arc::new(SteppingClock::frozen_at_unix_ms(1_767_225_600_000))
}

/// Builds a fixture with a plain connection (no snug-schema code involved) and returns its image.
fn fixture(sql: &str) -> Vec<u8> {
    let mut conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(sql).unwrap();
    conn.serialize(rusqlite::MAIN_DB).unwrap().to_vec()
}

fn open(bytes: &[u8]) -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    conn.deserialize_read_exact(rusqlite::MAIN_DB, bytes, bytes.len(), true)
        .unwrap();
    conn
}

fn strings(conn: &Connection, sql: &str) -> Vec<String> {
    conn.prepare(sql)
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn columns(conn: &Connection, table: &str) -> Vec<(String, String, bool, Option<String>, i64)> {
    conn.prepare(&format!("PRAGMA table_info({table})"))
        .unwrap()
        .query_map([], |row| {
            Ok((
                row.get(1)?,
                row.get(2)?,
                row.get::<_, i64>(3)? != 0,
                row.get(4)?,
                row.get(5)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Checks a migrated image against the notes' v6 facts and the fixture's rows.
fn assert_v6(found: i64, conn: &Connection) {
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, 6, "v{found}: stamped 6 (b.1)");

    // a.1: exactly the 13 hub tables plus the app's table and SQLite's own; b.1: snug_auth_specs
    // dropped at 4→5, never recreated.
    let tables = strings(
        conn,
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!' \
         AND name NOT LIKE 'app!_%' ESCAPE '!' ORDER BY name",
    );
    let expected = v6_tables();
    assert_eq!(
        tables,
        expected.keys().map(|t| (*t).to_owned()).collect::<Vec<_>>(),
        "v{found}: the v6 table set"
    );
    for (table, cols) in &expected {
        let want: Vec<_> = cols
            .iter()
            .map(|(n, t, nn, d, pk)| {
                (
                    (*n).to_owned(),
                    (*t).to_owned(),
                    *nn,
                    d.map(str::to_owned),
                    *pk,
                )
            })
            .collect();
        assert_eq!(
            columns(conn, table),
            want,
            "v{found}: {table} columns (a.1)"
        );
    }

    // a.1: the partial unique index on snug_apps(install_source).
    let (unique, partial): (i64, i64) = conn
        .query_row(
            "SELECT \"unique\", partial FROM pragma_index_list('snug_apps') WHERE name = 'idx_snug_apps_install_source'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (unique, partial),
        (1, 1),
        "v{found}: the install-source index"
    );

    // Rows survive; the added column is NULL (b.1 5→6), pins stay as they were (1→2 does not rerun).
    let versions: Vec<(i64, i64, Option<String>)> = conn
        .prepare(
            "SELECT version, pinned, runtime_contract_json FROM snug_app_versions ORDER BY version",
        )
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(versions, [(1, 1, None), (2, 0, None)], "v{found}");
    assert_eq!(
        strings(conn, "SELECT label FROM app_x6170702d31__items"),
        ["first item"],
        "v{found}: app data at rest survives (a.2)"
    );
    assert_eq!(
        strings(
            conn,
            "SELECT content || '/' || meta FROM snug_chat_messages"
        ),
        [r#"hi/{"k":1}"#],
        "v{found}"
    );

    // b.3: the open advanced the version, so the three-segment legacy credential is wiped and
    // every other secret kept.
    assert_eq!(
        strings(conn, "SELECT key FROM snug_secrets ORDER BY key"),
        [
            "auth:_flow:f1",
            "auth:_state_hmac",
            "auth:app-1:broker:apiKey",
            "byok:anthropic"
        ],
        "v{found}: the legacy wipe (b.3)"
    );

    // b.4 seedMeta: a db_id is kept when present and minted when not.
    let db_id = strings(conn, "SELECT value FROM snug_meta WHERE key = 'db_id'");
    assert_eq!(db_id.len(), 1, "v{found}: one db_id");
    if found > 2 {
        assert_eq!(db_id, ["0b6f1f0e-7d3c-4e4b-9a55-3f2d1c0b9a88"], "v{found}");
    } else {
        assert_eq!(db_id[0].len(), 36, "v{found}: a fresh UUID");
    }
    // b.1 4→5: approvals in snug_auth_specs are not migrated; v4+ connection rows are kept.
    let connections = strings(conn, "SELECT slot || ':' || status FROM snug_connections");
    let want: &[&str] = if found >= 4 {
        &["broker:approved"]
    } else {
        &[]
    };
    assert_eq!(connections, want, "v{found}: connections");
}

#[test]
fn fixtures_are_at_their_versions_before_migration() {
    for (version, sql) in FIXTURES {
        let conn = open(&fixture(sql));
        let stamped: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .unwrap();
        assert_eq!(stamped, version);
        let specs = strings(
            &conn,
            "SELECT name FROM sqlite_master WHERE name = 'snug_auth_specs'",
        );
        assert_eq!(
            specs.len(),
            usize::from(version == 3 || version == 4),
            "v{version}"
        );
        let contract = columns(&conn, "snug_app_versions")
            .iter()
            .any(|col| col.0 == "runtime_contract_json");
        assert!(!contract, "v{version} predates runtime_contract_json");
    }
}

#[test]
fn every_version_migrates_in_memory_to_the_notes_v6_facts() {
    for (version, sql) in FIXTURES {
        let input = fixture(sql);
        let (image, report) = snug_schema::migrate_bytes(&input, clock()).unwrap();
        assert_eq!(report.found_version, version);
        assert!(report.advanced && report.wrote, "v{version}");
        assert_eq!(report.credentials_wiped, 1, "v{version}");
        assert_eq!(report.seeded_meta, version == 2, "v{version}");
        assert_v6(version, &open(&image));
        // Migrating the result again is a no-op (b.4: a clean current-version open writes nothing).
        let (again, report) = snug_schema::migrate_bytes(&image, clock()).unwrap();
        assert!(!report.wrote, "v{version}: a second open writes nothing");
        assert_eq!(again, image);
    }
}

#[test]
fn every_version_migrates_file_to_file_and_the_input_is_only_read() {
    let dir = tempfile::tempdir().unwrap();
    for (version, sql) in FIXTURES {
        let src = dir.path().join(format!("v{version}.sqlite"));
        let dst = dir.path().join(format!("v{version}.snug"));
        let input = fixture(sql);
        std::fs::write(&src, &input).unwrap();
        let report = snug_schema::migrate_file(&src, &dst, clock()).unwrap();
        assert_eq!(report.found_version, version);
        assert_eq!(
            std::fs::read(&src).unwrap(),
            input,
            "v{version}: input untouched"
        );
        assert_v6(version, &open(&std::fs::read(&dst).unwrap()));
    }
}
