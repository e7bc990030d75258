//! §8.2 isolation in the materializer: a namespace whose `appDataToken` another registered app
//! id also has (`A7F3…` beside `a7f3…`) is refused by materialize, export, SQL, DDL and persist,
//! with the user database's bytes unchanged.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;

use snug_materialize::{
    AppDatabase, DdlError, ExecuteError, ExecuteLimits, MaterializeError, PersistError,
};
use snug_schema::{NewApp, SteppingClock, UserDb, app_data_token};

const UPPER: &str = "A7F3B2C1-0D4E-4F5A-8B6C-9D0E1F2A3B4C";
const LOWER: &str = "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c";
const OTHER: &str = "starter--notes";

fn db() -> UserDb {
    let clock = Arc::new(SteppingClock::frozen_at_unix_ms(1_767_225_600_000));
    UserDb::create_in_memory(clock).unwrap().0
}

fn install(db: &mut UserDb, app_id: &str) {
    db.install_app(&NewApp {
        app_id: Some(app_id.to_owned()),
        display_name: app_id.to_owned(),
        html: "<p>v1</p>".to_owned(),
        uses_db: true,
        ..NewApp::default()
    })
    .unwrap();
}

/// `UPPER` with a table and a row, and `OTHER`; `LOWER` is then registered behind install's back.
fn colliding_db() -> UserDb {
    let mut db = db();
    install(&mut db, UPPER);
    install(&mut db, OTHER);
    snug_materialize::apply_ddl(
        &mut db,
        UPPER,
        &[
            "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)",
            "INSERT INTO notes (body) VALUES ('upper''s private note')",
        ],
    )
    .unwrap();
    snug_materialize::apply_ddl(&mut db, OTHER, &["CREATE TABLE t (x)"]).unwrap();
    register_behind_installs_back(&db, LOWER);
    db
}

fn register_behind_installs_back(db: &UserDb, app_id: &str) {
    db.connection()
        .execute(
            "INSERT INTO snug_apps (app_id, display_name, uses_db, current_version, created_at, updated_at) \
             VALUES (?1, 'lower', 1, 1, 't', 't')",
            [app_id],
        )
        .unwrap();
}

fn assert_collision(err: &MaterializeError, namespace: &str, other: &str) {
    match err {
        MaterializeError::AppTokenCollision {
            namespace: ns,
            other_app_id,
            token,
        } => {
            assert_eq!((ns.as_str(), other_app_id.as_str()), (namespace, other));
            assert_eq!(*token, app_data_token(namespace));
        }
        other => panic!("expected APP_TOKEN_COLLISION, got {other:?}"),
    }
    assert_eq!(err.reason(), "APP_TOKEN_COLLISION");
}

#[test]
fn neither_colliding_namespace_can_be_materialized_or_exported() {
    let mut db = colliding_db();
    let before = db.to_bytes().unwrap();
    for (namespace, other) in [(LOWER, UPPER), (UPPER, LOWER)] {
        assert_collision(
            &snug_materialize::materialize(&db, namespace).unwrap_err(),
            namespace,
            other,
        );
        assert_collision(
            &snug_materialize::export_app(&db, namespace).unwrap_err(),
            namespace,
            other,
        );
    }
    // A third app is isolated from the pair and keeps working.
    let runtime = snug_materialize::materialize(&db, OTHER).unwrap();
    assert_eq!(runtime.namespace(), OTHER);
    assert_eq!(db.to_bytes().unwrap(), before);
}

#[test]
fn sql_and_ddl_on_a_colliding_namespace_are_refused_without_a_write() {
    let mut db = colliding_db();
    let before = db.to_bytes().unwrap();
    let err = snug_materialize::execute(
        &mut db,
        LOWER,
        &["SELECT body FROM notes"],
        &ExecuteLimits::default(),
    )
    .unwrap_err();
    match &err {
        ExecuteError::Materialize(inner) => assert_collision(inner, LOWER, UPPER),
        other => panic!("{other:?}"),
    }
    let err = snug_materialize::apply_ddl(&mut db, LOWER, &["DROP TABLE notes"]).unwrap_err();
    match &err {
        DdlError::Materialize(inner) => assert_collision(inner, LOWER, UPPER),
        other => panic!("{other:?}"),
    }
    assert_eq!(err.reason(), "APP_TOKEN_COLLISION");
    assert_eq!(db.to_bytes().unwrap(), before);
}

#[test]
fn persist_under_a_colliding_namespace_is_refused_without_a_write() {
    let mut db = colliding_db();
    let before = db.to_bytes().unwrap();
    let mut runtime = AppDatabase::empty(LOWER).unwrap();
    runtime
        .connection()
        .execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        .unwrap();
    let err = snug_materialize::persist(&mut db, &mut runtime).unwrap_err();
    assert!(
        matches!(&err, PersistError::AppTokenCollision { namespace, other_app_id, .. }
            if namespace == LOWER && other_app_id == UPPER),
        "{err:?}"
    );
    assert_eq!(err.reason(), "APP_TOKEN_COLLISION");
    assert_eq!(
        db.to_bytes().unwrap(),
        before,
        "upper's tables are untouched"
    );
}

#[test]
fn an_unregistered_case_variant_cannot_reach_a_registered_apps_tables() {
    let mut db = db();
    install(&mut db, UPPER);
    snug_materialize::apply_ddl(
        &mut db,
        UPPER,
        &[
            "CREATE TABLE notes (body TEXT)",
            "INSERT INTO notes VALUES ('mine')",
        ],
    )
    .unwrap();
    let before = db.to_bytes().unwrap();
    assert_collision(
        &snug_materialize::export_app(&db, LOWER).unwrap_err(),
        LOWER,
        UPPER,
    );
    let mut runtime = AppDatabase::empty(LOWER).unwrap();
    runtime
        .connection()
        .execute_batch("CREATE TABLE notes (body TEXT)")
        .unwrap();
    assert_eq!(
        snug_materialize::persist(&mut db, &mut runtime)
            .unwrap_err()
            .reason(),
        "APP_TOKEN_COLLISION"
    );
    assert_eq!(db.to_bytes().unwrap(), before);
    // The registered id itself is unaffected.
    let report = snug_materialize::execute(
        &mut db,
        UPPER,
        &["SELECT body FROM notes"],
        &ExecuteLimits::default(),
    )
    .unwrap();
    assert_eq!(report.results[0].rows.len(), 1);
}
