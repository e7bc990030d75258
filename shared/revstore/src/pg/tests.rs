//! PostgreSQL-specific checks; they run when `SNUG_TEST_POSTGRES_URL` names a server.

use std::collections::BTreeSet;

use super::*;
use crate::migrate::{RUNNER_TABLE, declared_classes};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_table_has_exactly_one_declared_class() {
    let Ok(url) = std::env::var("SNUG_TEST_POSTGRES_URL") else {
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = format!("revstore_classes_{}", std::process::id());
    let pg = PgConfig {
        url,
        schema: Some(schema),
        pool_size: 2,
    };
    let store = PgStore::connect(pg.clone(), StoreConfig::default())
        .await
        .expect("connect");
    // A second connect (another replica starting) migrates nothing and succeeds.
    PgStore::connect(pg, StoreConfig::default())
        .await
        .expect("reconnect");
    let actual: BTreeSet<String> = store
        .table_names()
        .await
        .expect("tables")
        .into_iter()
        .collect();
    let mut declared: BTreeSet<String> = BTreeSet::new();
    for m in migrate::POSTGRES {
        for (table, class) in declared_classes(m.sql) {
            assert!(class.is_some(), "table {table} has no class");
            assert!(
                declared.insert(table.clone()),
                "table {table} declared twice"
            );
        }
    }
    declared.insert(RUNNER_TABLE.0.to_owned());
    assert_eq!(actual, declared);
}

#[test]
fn schema_names_are_plain_identifiers() {
    assert!(valid_schema("snug_hub"));
    assert!(!valid_schema("Snug"));
    assert!(!valid_schema("a;drop"));
    assert!(!valid_schema("1abc"));
    assert!(!valid_schema(""));
}
