//! Tests of the apps' table listing.

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::expect;

use crate::list_apps_tables;
use crate::test_support::{db_with_apps, sample_db};

#[test]
fn the_sample_lists_both_apps() {
    let listing = list_apps_tables(&sample_db()).unwrap();
    expect![[r#"
        {
          "apps": [
            {
              "namespace": "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c",
              "token": "a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c",
              "uses_db": true,
              "registered": true,
              "tables": [
                {
                  "name": "trades",
                  "rest_name": "app_a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c__trades",
                  "rows": 2
                },
                {
                  "name": "equities",
                  "rest_name": "app_a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c__equities",
                  "rows": 2
                },
                {
                  "name": "snug_kv",
                  "rest_name": "app_a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c__snug_kv",
                  "rows": 1
                }
              ]
            },
            {
              "namespace": "starter--chess",
              "token": "x737461727465722d2d6368657373",
              "uses_db": true,
              "registered": true,
              "tables": [
                {
                  "name": "moves",
                  "rest_name": "app_x737461727465722d2d6368657373__moves",
                  "rows": 2
                }
              ]
            }
          ],
          "orphaned": []
        }"#]]
    .assert_eq(&serde_json::to_string_pretty(&listing).unwrap());
}

#[test]
fn apps_without_data_and_orphaned_tables_are_listed() {
    let mut db = db_with_apps(&["empty"]);
    db.connection_mut()
        .execute_batch("CREATE TABLE app_x6e6f626f6479__left (x); INSERT INTO app_x6e6f626f6479__left VALUES (1)")
        .unwrap();
    let listing = list_apps_tables(&db).unwrap();
    expect![[r#"
        AppsTables {
            apps: [
                AppTables {
                    namespace: "empty",
                    token: "x656d707479",
                    uses_db: false,
                    registered: false,
                    tables: [],
                },
            ],
            orphaned: [
                "app_x6e6f626f6479__left",
            ],
        }
    "#]]
    .assert_debug_eq(&listing);
}
