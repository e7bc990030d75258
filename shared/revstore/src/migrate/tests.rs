//! Tests of the migration planner and the class declarations.

use super::*;

const STEPS: &[Migration] = &[
    Migration {
        version: 1,
        sql: "CREATE TABLE a(x)",
    },
    Migration {
        version: 2,
        sql: "CREATE TABLE b(x)",
    },
];

#[track_caller]
fn check(applied: &[(i64, &str)], expect: &str) {
    let applied: Vec<(i64, String)> = applied.iter().map(|(v, s)| (*v, (*s).to_owned())).collect();
    let got = match plan(&applied, STEPS) {
        Ok(todo) => format!(
            "Ok({:?})",
            todo.iter().map(|m| m.version).collect::<Vec<_>>()
        ),
        Err(e) => format!("Err({})", e.reason()),
    };
    assert_eq!(got, expect);
}

#[test]
fn fresh_store_applies_everything() {
    check(&[], "Ok([1, 2])");
}

#[test]
fn rerun_is_a_no_op() {
    let one = checksum(STEPS[0].sql);
    let two = checksum(STEPS[1].sql);
    check(&[(1, &one), (2, &two)], "Ok([])");
    check(&[(1, &one)], "Ok([2])");
}

#[test]
fn edited_step_is_rejected() {
    check(&[(1, "0000")], "Err(MIGRATION_CHANGED)");
}

#[test]
fn newer_store_is_refused() {
    check(&[(3, "x")], "Err(STORE_SCHEMA_TOO_NEW)");
}

#[test]
fn classes_are_read_from_comments() {
    let sql = "-- class: record\nCREATE TABLE a (x);\nCREATE TABLE b (y);\n-- class: ledger\nCREATE TABLE IF NOT EXISTS c(z);";
    assert_eq!(
        declared_classes(sql),
        vec![
            ("a".to_owned(), Some(TableClass::Record)),
            ("b".to_owned(), None),
            ("c".to_owned(), Some(TableClass::Ledger)),
        ]
    );
}

#[test]
fn every_shipped_table_declares_a_class() {
    for m in SQLITE {
        for (table, class) in declared_classes(m.sql) {
            assert!(class.is_some(), "sqlite table {table} has no class");
        }
    }
    #[cfg(feature = "postgres")]
    for m in POSTGRES {
        for (table, class) in declared_classes(m.sql) {
            assert!(class.is_some(), "postgres table {table} has no class");
        }
    }
}
