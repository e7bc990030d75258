//! Tests of the key/value encodings (reference U10) and the namespaced settings keys.

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::expect;
use serde_json::{Value, json};

use rusqlite::OptionalExtension;

use super::*;
use crate::test_support::new_db;

fn raw(db: &UserDb, table: &str, key: &str) -> Option<String> {
    db.connection()
        .query_row(
            &format!("SELECT value FROM {table} WHERE key = ?1"),
            [key],
            |row| row.get(0),
        )
        .optional()
        .unwrap()
}

#[test]
fn json_tables_store_compact_json_and_secrets_store_raw_text() {
    let mut db = new_db();
    for (table, name) in [
        (KvTable::Settings, "snug_settings"),
        (KvTable::Profile, "snug_profile"),
        (KvTable::Sync, "snug_sync"),
    ] {
        let value = json!({"kind": "hub", "n": [1, 2.5, null], "s": "é/\"q\""});
        db.kv_set(table, "k", &value).unwrap();
        assert_eq!(db.kv_get(table, "k").unwrap(), Some(value));
        expect![[r#"{"kind":"hub","n":[1,2.5,null],"s":"é/\"q\""}"#]]
            .assert_eq(&raw(&db, name, "k").unwrap());
        db.kv_set(table, "undefined", &Value::Null).unwrap();
        assert_eq!(raw(&db, name, "undefined").as_deref(), Some("null"));
        assert!(db.kv_delete(table, "k").unwrap());
        assert!(!db.kv_delete(table, "k").unwrap());
        assert_eq!(db.kv_get(table, "k").unwrap(), None);
    }
    db.set_secret("byok:anthropic", "sk-ant-\"raw\"").unwrap();
    assert_eq!(
        raw(&db, "snug_secrets", "byok:anthropic").as_deref(),
        Some("sk-ant-\"raw\"")
    );
    assert_eq!(
        db.secret("byok:anthropic").unwrap().as_deref(),
        Some("sk-ant-\"raw\"")
    );
    assert!(db.delete_secret("byok:anthropic").unwrap());
    assert_eq!(db.secret_keys().unwrap(), Vec::<String>::new());
    db.connection()
        .execute("INSERT INTO snug_profile VALUES ('bad', 'not json')", [])
        .unwrap();
    assert_eq!(db.profile("bad").unwrap_err().reason(), "CORRUPT_ROW");
}

#[test]
fn namespaced_settings_keys() {
    let mut db = new_db();
    assert_eq!(app_model_key("a1"), "appModel:a1");
    assert_eq!(db.app_model("a1").unwrap(), None, "absent means inherit");
    db.set_app_model("a1", Some("claude-x")).unwrap();
    assert_eq!(
        raw(&db, "snug_settings", "appModel:a1").as_deref(),
        Some("\"claude-x\"")
    );
    assert_eq!(db.app_model("a1").unwrap().as_deref(), Some("claude-x"));
    db.set_app_model("a1", None).unwrap();
    assert_eq!(raw(&db, "snug_settings", "appModel:a1"), None);

    db.set_sidecar_identity_directory(&["alice@x".to_owned(), "bob@y".to_owned()])
        .unwrap();
    assert_eq!(
        raw(&db, "snug_settings", SIDECAR_IDENTITY_DIRECTORY_KEY).as_deref(),
        Some(r#"["alice@x","bob@y"]"#)
    );
    assert_eq!(
        db.sidecar_identity_directory().unwrap(),
        ["alice@x", "bob@y"]
    );
    db.set_sidecar_identity_directory(&[]).unwrap();
    assert!(db.sidecar_identity_directory().unwrap().is_empty());

    assert!(!db.needs_endpoint_confirm().unwrap());
    db.set_needs_endpoint_confirm(true).unwrap();
    assert_eq!(
        raw(&db, "snug_settings", NEEDS_ENDPOINT_CONFIRM_KEY).as_deref(),
        Some("true")
    );
    assert!(db.needs_endpoint_confirm().unwrap());
}

#[test]
fn canonical_json_sorts_keys_recursively_and_keeps_arrays() {
    let value: Value =
        serde_json::from_str(r#"{ "b": {"z": 1, "a": [ {"y": 2, "x": 1}, 3 ]}, "a": "é" }"#)
            .unwrap();
    expect![[r#"{"a":"é","b":{"a":[{"x":1,"y":2},3],"z":1}}"#]].assert_eq(&canonical_json(&value));
}
