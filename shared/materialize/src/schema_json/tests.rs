//! Tests of the `schema_json` codec against the reference's text.

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::{Expect, expect};

use super::*;
use crate::test_support::{CHESS, TRADER, sample_db, schema_json};

#[test]
fn the_reference_text_round_trips_byte_for_byte() {
    let db = sample_db();
    for namespace in [TRADER, CHESS] {
        let text = schema_json(&db, namespace).unwrap();
        let schema = AppSchema::parse(&text).unwrap();
        assert_eq!(schema.to_json(), text, "{namespace}");
    }
}

#[track_caller]
fn check(text: &str, expect: Expect) {
    let outcome = match AppSchema::parse(text) {
        Ok(schema) => format!("{schema:?}\n{}", schema.to_json()),
        Err(err) => format!("{err:?}"),
    };
    expect.assert_eq(&outcome);
}

#[test]
fn parsing_is_strict_about_shape_and_lenient_about_extras() {
    check(
        r#"{"objects":[],"extra":1}"#,
        expect![[r#"
            AppSchema { objects: [], sequences: [] }
            {"objects":[]}"#]],
    );
    check(
        r#"{"objects":[{"type":"view","name":"v","ddl":"CREATE VIEW v AS SELECT 1","note":"x"}],"sequences":{}}"#,
        expect![[r#"
            AppSchema { objects: [SchemaObject { kind: View, name: "v", ddl: "CREATE VIEW v AS SELECT 1" }], sequences: [] }
            {"objects":[{"type":"view","name":"v","ddl":"CREATE VIEW v AS SELECT 1"}]}"#]],
    );
    check(
        r#"{"sequences":{}}"#,
        expect![[r#"Shape { detail: "missing field `objects` at line 1 column 16" }"#]],
    );
    check(
        r#"[]"#,
        expect![[
            r#"Shape { detail: "invalid length 0, expected struct RawSchema with 2 elements at line 1 column 2" }"#
        ]],
    );
    check(
        r#"{"objects":[{"type":"TABLE","name":"t","ddl":"CREATE TABLE t (a)"}]}"#,
        expect![[r#"UnknownKind { index: 0, kind: "TABLE" }"#]],
    );
    check(
        r#"{"objects":[],"sequences":{"t":"3"}}"#,
        expect![[r#"BadSequence { table: "t" }"#]],
    );
}

#[test]
fn encoding_escapes_as_json_stringify_does() {
    let schema = AppSchema {
        objects: vec![SchemaObject {
            kind: ObjectKind::Table,
            name: "t".into(),
            ddl: "CREATE TABLE t (\"q\" TEXT DEFAULT 'a\\b', x -- é\n\t\u{1}\u{2028})".into(),
        }],
        sequences: vec![("t".into(), 7), ("a".into(), -1)],
    };
    expect![[r#"{"objects":[{"type":"table","name":"t","ddl":"CREATE TABLE t (\"q\" TEXT DEFAULT 'a\\b', x -- é\n\t\u0001 )"}],"sequences":{"t":7,"a":-1}}"#]]
        .assert_eq(&schema.to_json());
}

#[test]
fn sameness_ignores_order_but_not_content() {
    let object = |kind, name: &str, ddl: &str| SchemaObject {
        kind,
        name: name.into(),
        ddl: ddl.into(),
    };
    let a = AppSchema {
        objects: vec![
            object(ObjectKind::Table, "t", "CREATE TABLE t (a)"),
            object(ObjectKind::Index, "i", "CREATE INDEX i ON t (a)"),
            object(ObjectKind::Table, "u", "CREATE TABLE u (a)"),
        ],
        sequences: vec![("t".into(), 1), ("u".into(), 2)],
    };
    let mut reordered = a.clone();
    reordered.objects.swap(1, 2);
    reordered.sequences.reverse();
    assert!(a.same_as(&reordered));
    let mut changed = a.clone();
    changed.sequences[0].1 = 5;
    assert!(!a.same_as(&changed));
    let mut changed = a.clone();
    changed.objects[1].ddl = "CREATE INDEX i ON t (a DESC)".into();
    assert!(!a.same_as(&changed));
}
