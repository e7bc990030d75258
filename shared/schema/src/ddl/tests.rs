//! Tests of the DDL table: snapshot, classes, derived names and spelled-out columns.

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::{Expect, expect};
use rusqlite::Connection;

use super::*;

#[track_caller]
fn check(actual: &str, expect: Expect) {
    expect.assert_eq(actual);
}

#[test]
fn the_ddl_text_is_locked() {
    let mut text: Vec<&str> = TABLES.iter().map(|t| t.ddl).collect();
    text.push(INDEX_DDL);
    check(
        &text.join(";\n"),
        expect![[r#"
        CREATE TABLE IF NOT EXISTS snug_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS snug_profile (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS snug_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS snug_secrets (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS snug_apps (
            app_id TEXT PRIMARY KEY,
            display_name TEXT NOT NULL,
            description TEXT,
            icon_emoji TEXT,
            icon_color TEXT,
            uses_db INTEGER NOT NULL DEFAULT 0,
            current_version INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            install_source TEXT
          );
        CREATE TABLE IF NOT EXISTS snug_app_versions (
            app_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            html TEXT NOT NULL,
            note TEXT,
            created_at TEXT NOT NULL,
            pinned INTEGER NOT NULL DEFAULT 0,
            runtime_contract_json TEXT,
            PRIMARY KEY (app_id, version)
          );
        CREATE TABLE IF NOT EXISTS snug_app_schemas (
            app_id TEXT PRIMARY KEY,
            token TEXT NOT NULL,
            schema_json TEXT NOT NULL,
            updated_at TEXT NOT NULL
          );
        CREATE TABLE IF NOT EXISTS snug_app_migrations (
            app_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            ddl TEXT NOT NULL,
            applied_at TEXT NOT NULL,
            PRIMARY KEY (app_id, seq)
          );
        CREATE TABLE IF NOT EXISTS snug_app_docs (
            app_id TEXT NOT NULL,
            slug TEXT NOT NULL,
            title TEXT,
            content TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (app_id, slug)
          );
        CREATE TABLE IF NOT EXISTS snug_chat_threads (
            thread_id TEXT PRIMARY KEY,
            app_id TEXT,
            title TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
          );
        CREATE TABLE IF NOT EXISTS snug_chat_messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            thread_id TEXT NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            created_at TEXT NOT NULL,
            pinned INTEGER NOT NULL DEFAULT 0,
            meta TEXT
          );
        CREATE TABLE IF NOT EXISTS snug_sync (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS snug_connections (
            app_id TEXT NOT NULL,
            slot TEXT NOT NULL,
            requirement_json TEXT NOT NULL,
            requirement_version INTEGER NOT NULL,
            provenance TEXT NOT NULL,
            confidence REAL,
            status TEXT NOT NULL,
            pending_requirement_json TEXT,
            imported INTEGER NOT NULL DEFAULT 0,
            allowed_hosts TEXT NOT NULL DEFAULT '[]',
            approved_at TEXT,
            revoked_at TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (app_id, slot)
          );
        CREATE UNIQUE INDEX IF NOT EXISTS idx_snug_apps_install_source
            ON snug_apps (install_source) WHERE install_source IS NOT NULL"#]],
    );
}

#[test]
fn every_table_has_a_class_and_the_classes_are_locked() {
    let classes: Vec<String> = TABLES
        .iter()
        .map(|t| format!("{} {:?}", t.name, t.class))
        .collect();
    check(
        &classes.join("\n"),
        expect![[r#"
        snug_meta HostInternal
        snug_profile Portable
        snug_settings Config
        snug_secrets Secret
        snug_apps Portable
        snug_app_versions Portable
        snug_app_schemas Portable
        snug_app_migrations Portable
        snug_app_docs Portable
        snug_chat_threads Portable
        snug_chat_messages Portable
        snug_sync SyncConfig
        snug_connections Portable"#]],
    );
}

#[test]
fn every_create_statement_is_a_classified_table() {
    let mut names: Vec<&str> = TABLES
        .iter()
        .map(|t| created_table_name(t.ddl).expect("parsable DDL"))
        .collect();
    assert_eq!(names, TABLES.iter().map(|t| t.name).collect::<Vec<_>>());
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 13);
    assert!(
        TABLES.iter().all(
            |t| t.name.starts_with("snug_") && t.ddl.starts_with("CREATE TABLE IF NOT EXISTS ")
        )
    );
    // A table created from a file must come back as a hub table with its class (default-deny
    // export relies on this), and nothing else may be classified as one.
    let conn = Connection::open_in_memory().unwrap();
    for table in &TABLES {
        conn.execute_batch(table.ddl).unwrap();
    }
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap();
    let created: Vec<String> = stmt
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for name in created {
        match classify_table(&name) {
            TableKind::Hub { class, .. } => {
                assert_eq!(Some(class), hub_table(&name).map(|t| t.class))
            }
            TableKind::SqliteInternal => assert_eq!(name, "sqlite_sequence"),
            other => panic!("{name} classified as {other:?}"),
        }
    }
}

#[test]
fn the_dropped_tables_have_no_ddl() {
    for table in &TABLES {
        assert!(
            !table.ddl.contains(DROPPED_AUTH_SPECS_TABLE)
                && !table.ddl.contains(DROPPED_APP_DATA_TABLE)
        );
    }
    assert!(hub_table(DROPPED_AUTH_SPECS_TABLE).is_none());
    // snug_connections holds requirements and grants, never credential state (reference S11).
    let connections = hub_table("snug_connections").unwrap();
    for word in [
        "token",
        "refresh",
        "expires",
        "verifier",
        "flow",
        "session",
        "last_error",
        "secret",
        "password",
    ] {
        assert!(!connections.ddl.contains(word), "{word}");
    }
}

#[test]
fn the_spelled_out_columns_are_what_sqlite_reports() {
    let conn = Connection::open_in_memory().unwrap();
    for table in &TABLES {
        conn.execute_batch(table.ddl).unwrap();
        let mut stmt = conn
            .prepare("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1)")
            .unwrap();
        let found: Vec<(String, String, bool, Option<String>, u8)> = stmt
            .query_map([table.name], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get::<_, i64>(2)? != 0,
                    row.get(3)?,
                    row.get(4)?,
                ))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let expected: Vec<(String, String, bool, Option<String>, u8)> = table
            .columns
            .iter()
            .map(|c| {
                (
                    c.name.to_owned(),
                    c.decl_type.to_owned(),
                    c.not_null,
                    c.default.map(str::to_owned),
                    c.pk,
                )
            })
            .collect();
        assert_eq!(found, expected, "{}", table.name);
    }
}

#[test]
fn added_columns_are_last_and_declared_as_in_the_ddl() {
    for added in &ADDED_COLUMNS {
        let table = hub_table(added.table).unwrap();
        let column = table
            .columns
            .iter()
            .find(|c| c.name == added.column)
            .unwrap();
        assert!(
            added.decl.starts_with(column.decl_type),
            "{}.{}",
            added.table,
            added.column
        );
        let later: Vec<_> = table
            .columns
            .iter()
            .skip_while(|c| c.name != added.column)
            .skip(1)
            .collect();
        assert!(
            later.iter().all(|c| ADDED_COLUMNS
                .iter()
                .any(|a| a.table == added.table && a.column == c.name)),
            "{}.{} is followed only by other added columns",
            added.table,
            added.column
        );
    }
}

#[track_caller]
fn check_kind(name: &str, expect: Expect) {
    expect.assert_eq(&format!("{:?}", classify_table(name)));
}

#[test]
fn table_names_are_classified() {
    check_kind(
        "snug_secrets",
        expect![[r#"Hub { name: "snug_secrets", class: Secret }"#]],
    );
    check_kind(
        "snug_settings",
        expect![[r#"Hub { name: "snug_settings", class: Config }"#]],
    );
    check_kind("sqlite_sequence", expect!["SqliteInternal"]);
    check_kind("SQLITE_stat1", expect!["SqliteInternal"]);
    check_kind(
        "app_a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c__trades",
        expect![[r#"AppData { token: "a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c", name: "trades" }"#]],
    );
    check_kind(
        "app_x737461727465722d2d6368657373__snug_kv",
        expect![[r#"AppData { token: "x737461727465722d2d6368657373", name: "snug_kv" }"#]],
    );
    check_kind(
        "app_x737461727465722d2d6368657373__a__b",
        expect![[r#"AppData { token: "x737461727465722d2d6368657373", name: "a__b" }"#]],
    );
    check_kind(
        "app_A7F3B2C10D4E4F5A8B6C9D0E1F2A3B4C__trades",
        expect!["Foreign"],
    );
    check_kind("app_x7__trades", expect!["Foreign"]);
    check_kind("app_x74__1trades", expect!["Foreign"]);
    check_kind("app_x74__snug_other", expect!["Foreign"]);
    check_kind("snug_auth_specs", expect!["Foreign"]);
    check_kind("notes", expect!["Foreign"]);
    check_kind("sqlité", expect!["Foreign"]);
}

#[test]
fn only_secrets_depend_on_the_export_option() {
    for class in [
        TableClass::Portable,
        TableClass::HostInternal,
        TableClass::Config,
        TableClass::SyncConfig,
    ] {
        assert!(class.exported(false) && class.exported(true), "{class:?}");
    }
    assert!(!TableClass::Secret.exported(false) && TableClass::Secret.exported(true));
}
