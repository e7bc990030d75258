//! Tests of [`ImportBaseline`]: a baseline given as grants and contracts reconciles exactly as
//! the database it was read from (the import other hubs run without sending their file).

#![allow(clippy::unwrap_used, reason = "tests")]

use serde_json::json;

use super::*;
use crate::test_support::{clock, new_db};
use crate::{ContractSource, NewApp, SaveVersion};

const REQUIREMENT: &str = r#"{"slot":"broker","provider":{"name":"Example Broker"},"kind":"api_key","declaredApiHosts":["api.broker.example"]}"#;

fn put_connection(db: &UserDb, requirement: &str, status: &str) {
    db.connection()
        .execute(
            "INSERT OR REPLACE INTO snug_connections (app_id, slot, requirement_json, requirement_version, provenance, \
             status, allowed_hosts, approved_at, created_at, updated_at) \
             VALUES ('a', 'broker', ?1, 4, 'inference', ?2, '[\"api.broker.example\"]', ?3, 't', 't')",
            params![requirement, status, (status == "approved").then_some("2026-02-02T00:00:00.000Z")],
        )
        .unwrap();
}

fn with_contract(db: &mut UserDb, contract: serde_json::Value) {
    db.install_app(&NewApp {
        app_id: Some("a".to_owned()),
        ..NewApp::default()
    })
    .unwrap();
    db.save_app_version(
        "a",
        "v2",
        &SaveVersion {
            contract: ContractSource::Set(contract),
            ..SaveVersion::default()
        },
    )
    .unwrap();
}

fn rows(db: &UserDb) -> Vec<(String, Option<String>, i64, i64)> {
    db.connection()
        .prepare("SELECT status, approved_at, requirement_version, imported FROM snug_connections")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn grants_and_contracts_given_directly_reconcile_as_the_database_they_came_from() {
    let contract = json!({"overview": "known", "maxOutputTokens": 10});
    let mut local = new_db();
    with_contract(&mut local, contract.clone());
    put_connection(&local, REQUIREMENT, "approved");

    let mut incoming = new_db();
    with_contract(&mut incoming, contract.clone());
    put_connection(&incoming, REQUIREMENT, "declared");
    let bytes = incoming.to_bytes().unwrap();

    let read = ImportBaseline::of(&local).unwrap();
    let given = ImportBaseline::new(
        [ApprovedGrant {
            app_id: "a".to_owned(),
            slot: "broker".to_owned(),
            requirement_json: REQUIREMENT.to_owned(),
            allowed_hosts: r#"["api.broker.example"]"#.to_owned(),
            approved_at: Some("2026-02-02T00:00:00.000Z".to_owned()),
            requirement_version: 4,
        }],
        // Another key order: contracts are compared by canonical form.
        [json!({"maxOutputTokens": 10, "overview": "known"})],
    );
    assert_eq!(read, given);
    assert_eq!(given.grant_count(), 1);

    let options = ImportOptions::default();
    let (from_db, db_report) = import(&bytes, Some(&local), &options, clock()).unwrap();
    let (from_grants, grants_report) = import_against(&bytes, &given, &options, clock()).unwrap();
    assert_eq!(db_report, grants_report);
    assert_eq!(
        (
            grants_report.restored_grants,
            grants_report.dropped_runtime_contracts.len()
        ),
        (1, 0)
    );
    assert_eq!(rows(&from_db), rows(&from_grants));
    assert_eq!(
        rows(&from_grants),
        [(
            "approved".to_owned(),
            Some("2026-02-02T00:00:00.000Z".to_owned()),
            4,
            0
        )]
    );
    assert!(from_grants.needs_endpoint_confirm().unwrap());

    // The empty baseline is the strictest: no grant, no contract.
    let (strict, report) =
        import_against(&bytes, &ImportBaseline::default(), &options, clock()).unwrap();
    assert_eq!(report.restored_grants, 0);
    assert_eq!(report.dropped_runtime_contracts.len(), 1);
    assert_eq!(rows(&strict)[0].0, "declared");
    assert_eq!(
        report,
        import(&bytes, None, &options, clock()).unwrap().1,
        "the same as an import with no local database"
    );
}
