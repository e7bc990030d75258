//! Tests of §8.2 isolation between registered apps: two app ids of one token are refused on
//! install, import, import check, migration and inspection, and deleting one keeps the shared tables.

#![allow(clippy::unwrap_used, reason = "tests")]

use snug_reasons::Reasoned as _;

use super::*;
use crate::test_support::{clock, new_db};
use crate::{ImportOptions, NewApp};

const UPPER: &str = "A7F3B2C1-0D4E-4F5A-8B6C-9D0E1F2A3B4C";
const LOWER: &str = "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c";

fn app(app_id: &str) -> NewApp {
    NewApp {
        app_id: Some(app_id.to_owned()),
        display_name: app_id.to_owned(),
        html: "<p>v1</p>".to_owned(),
        uses_db: true,
        ..NewApp::default()
    }
}

/// A database holding `UPPER` (installed) and `LOWER` (written behind install's back, as a
/// faulty or hostile host would), with one at-rest table under their shared token.
fn colliding_db() -> UserDb {
    let mut db = new_db();
    db.install_app(&app(UPPER)).unwrap();
    let conn = db.connection();
    conn.execute(
        "INSERT INTO snug_apps (app_id, display_name, uses_db, current_version, created_at, updated_at) \
         VALUES (?1, 'lower', 1, 1, 't', 't')",
        [LOWER],
    )
    .unwrap();
    conn.execute_batch(&format!(
        "CREATE TABLE app_{}__notes (id INTEGER PRIMARY KEY, body TEXT); \
         INSERT INTO app_{}__notes (body) VALUES ('the upper app''s note');",
        app_data_token(UPPER),
        app_data_token(UPPER)
    ))
    .unwrap();
    db
}

fn the_pair() -> TokenCollision {
    TokenCollision {
        token: app_data_token(LOWER),
        app_id: UPPER.to_owned(),
        other_app_id: LOWER.to_owned(),
    }
}

#[test]
fn case_variant_uuids_share_a_token_and_other_namespaces_do_not() {
    assert_eq!(app_data_token(UPPER), app_data_token(LOWER));
    assert_ne!(app_data_token("Notes"), app_data_token("notes"));
    let mut db = new_db();
    for id in ["Notes", "notes", LOWER] {
        db.install_app(&app(id)).unwrap();
    }
    assert_eq!(db.app_token_collisions().unwrap(), []);
    assert_eq!(db.other_app_with_token("Notes").unwrap(), None);
    assert_eq!(
        db.other_app_with_token(UPPER).unwrap().as_deref(),
        Some(LOWER)
    );
    db.check_app_isolation().unwrap();
}

#[test]
fn install_refuses_an_app_id_whose_token_is_taken() {
    let mut db = new_db();
    db.install_app(&app(UPPER)).unwrap();
    let before = db.to_bytes().unwrap();
    let err = db.install_app(&app(LOWER)).unwrap_err();
    assert_eq!(err.reason(), "APP_TOKEN_COLLISION");
    assert!(
        matches!(&err, crate::AppError::AppTokenCollision { app_id, other_app_id }
            if app_id == LOWER && other_app_id == UPPER),
        "{err:?}"
    );
    assert_eq!(db.to_bytes().unwrap(), before, "nothing was written");
    assert!(db.app(LOWER).is_err());
}

#[test]
fn a_colliding_file_is_listed_and_refused_by_migration() {
    let mut db = colliding_db();
    assert_eq!(db.app_token_collisions().unwrap(), [the_pair()]);
    let err = db.check_app_isolation().unwrap_err();
    assert_eq!(err.reason().name, "APP_TOKEN_COLLISION");
    let message = err.to_string();
    assert!(
        message.contains(UPPER) && message.contains(LOWER),
        "{message}"
    );

    let bytes = db.to_bytes().unwrap();
    let err = crate::migrate_bytes(&bytes, clock()).unwrap_err();
    assert!(
        matches!(&err, OpenError::AppTokenCollision { collision } if *collision == the_pair()),
        "{err:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in.snug"), dir.path().join("out.snug"));
    std::fs::write(&src, &bytes).unwrap();
    let err = crate::migrate_file(&src, &dst, clock()).unwrap_err();
    assert_eq!(err.reason().name, "APP_TOKEN_COLLISION");
    assert!(!dst.exists(), "no output for a refused file");
    assert_eq!(
        std::fs::read(&src).unwrap(),
        bytes,
        "the input is untouched"
    );
}

#[test]
fn import_and_import_check_refuse_a_colliding_file() {
    let bytes = colliding_db().to_bytes().unwrap();
    let options = ImportOptions::default();
    let err = crate::import(&bytes, None, &options, clock()).unwrap_err();
    assert!(
        matches!(&err, crate::ImportError::AppTokenCollision { collision } if *collision == the_pair()),
        "{err:?}"
    );
    let err = crate::import_check(&bytes, &options, clock()).unwrap_err();
    assert_eq!(err.reason().name, "APP_TOKEN_COLLISION");
}

#[test]
fn inspection_predicts_the_import_refusal_but_not_an_open_refusal() {
    let bytes = colliding_db().to_bytes().unwrap();
    let inspection = crate::inspect_bytes(&bytes).unwrap();
    assert_eq!(inspection.token_collisions, [the_pair()]);
    assert_eq!(inspection.open_refusal, None);
    let refusal = inspection.import_refusal.unwrap();
    assert_eq!(refusal.reason, "APP_TOKEN_COLLISION");
    assert!(refusal.message.contains(LOWER), "{}", refusal.message);

    let clean = crate::inspect_bytes(&new_db().to_bytes().unwrap()).unwrap();
    assert_eq!(clean.token_collisions, []);
    assert_eq!(clean.import_refusal, None);
}

#[test]
fn deleting_one_of_two_colliding_apps_keeps_the_other_apps_tables() {
    let mut db = colliding_db();
    let table = format!("app_{}__notes", app_data_token(UPPER));
    let deleted = db.delete_app(LOWER).unwrap();
    assert_eq!(deleted.tables_dropped, Vec::<String>::new());
    let notes: String = db
        .connection()
        .query_row(&format!("SELECT body FROM {table}"), [], |row| row.get(0))
        .unwrap();
    assert_eq!(notes, "the upper app's note");
    // The repaired file is conforming again, and deleting the last holder drops the table.
    db.check_app_isolation().unwrap();
    let bytes = db.to_bytes().unwrap();
    crate::import_check(&bytes, &ImportOptions::default(), clock()).unwrap();
    assert_eq!(db.delete_app(UPPER).unwrap().tables_dropped, [table]);
}
