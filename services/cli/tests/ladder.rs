//! `snug migrate` on the v2–v5 ladder fixtures written from the reference notes
//! (`shared/schema/tests/ladder/*.sql`, built here with plain SQLite): each comes out at storage
//! version 6 with the notes' v6 table set, `runtime_contract_json` appended, `snug_auth_specs`
//! gone and the legacy three-segment credential wiped; the input is only read.

use std::{path::Path, process::Command};

const FIXTURES: [(i64, &str); 4] = [
    (
        2,
        include_str!("../../../shared/schema/tests/ladder/v2.sql"),
    ),
    (
        3,
        include_str!("../../../shared/schema/tests/ladder/v3.sql"),
    ),
    (
        4,
        include_str!("../../../shared/schema/tests/ladder/v4.sql"),
    ),
    (
        5,
        include_str!("../../../shared/schema/tests/ladder/v5.sql"),
    ),
];

/// Notes a.1: the 13 hub tables at storage version 6.
const V6_TABLES: [&str; 13] = [
    "snug_app_docs",
    "snug_app_migrations",
    "snug_app_schemas",
    "snug_app_versions",
    "snug_apps",
    "snug_chat_messages",
    "snug_chat_threads",
    "snug_connections",
    "snug_meta",
    "snug_profile",
    "snug_secrets",
    "snug_settings",
    "snug_sync",
];

fn strings(conn: &rusqlite::Connection, sql: &str) -> Vec<String> {
    conn.prepare(sql)
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("query")
        .map(|r| r.expect("row"))
        .collect()
}

fn build(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).expect("create");
    conn.execute_batch(sql).expect("fixture");
}

#[test]
fn snug_migrate_brings_every_fixture_to_the_notes_v6_facts() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (version, sql) in FIXTURES {
        let input = dir.path().join(format!("v{version}.sqlite"));
        let out = dir.path().join(format!("v{version}.snug"));
        build(&input, sql);
        let before = std::fs::read(&input).expect("read");
        let output = Command::new(env!("CARGO_BIN_EXE_snug"))
            .args(["migrate", input.to_str().expect("utf-8"), "--out"])
            .arg(&out)
            .arg("--json")
            .output()
            .expect("run snug");
        assert_eq!(output.status.code(), Some(0), "v{version}: {output:?}");
        assert_eq!(
            std::fs::read(&input).expect("read"),
            before,
            "v{version}: input untouched"
        );

        let conn =
            rusqlite::Connection::open_with_flags(&out, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .expect("open");
        let stamped: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .expect("user_version");
        assert_eq!(stamped, 6, "v{version}");
        let tables = strings(
            &conn,
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'snug!_%' ESCAPE '!' ORDER BY name",
        );
        assert_eq!(
            tables, V6_TABLES,
            "v{version}: the v6 table set, no snug_auth_specs"
        );
        let version_columns = strings(
            &conn,
            "SELECT name FROM pragma_table_info('snug_app_versions')",
        );
        assert_eq!(
            version_columns,
            [
                "app_id",
                "version",
                "html",
                "note",
                "created_at",
                "pinned",
                "runtime_contract_json"
            ],
            "v{version}"
        );
        let secrets = strings(
            &conn,
            "SELECT key FROM snug_secrets WHERE key = 'auth:app-1:apiKey'",
        );
        assert!(
            secrets.is_empty(),
            "v{version}: the legacy credential is wiped"
        );
        assert_eq!(
            strings(&conn, "SELECT label FROM app_x6170702d31__items"),
            ["first item"],
            "v{version}"
        );
    }
}
