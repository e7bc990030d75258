//! Tests of import: grant reconciliation (§12.4), the contract guard (§18.2), the re-confirm latch.

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::{Expect, expect};
use serde_json::json;

use super::*;
use crate::test_support::{clock, new_db};
use crate::{NewApp, SaveVersion};

const REQUIREMENT: &str = r#"{"slot":"broker","provider":{"name":"Example Broker"},"kind":"api_key","fields":[{"key":"api_key","label":"API key","type":"secret"}],"declaredApiHosts":["api.broker.example"]}"#;

fn put_connection(db: &UserDb, slot: &str, requirement: &str, status: &str, hosts: &str) {
    db.connection()
        .execute(
            "INSERT OR REPLACE INTO snug_connections (app_id, slot, requirement_json, requirement_version, provenance, \
             status, allowed_hosts, approved_at, created_at, updated_at) \
             VALUES ('a', ?1, ?2, 3, 'inference', ?3, ?4, ?5, 't', 't')",
            params![slot, requirement, status, hosts, (status == "approved").then_some("2026-02-02T00:00:00.000Z")],
        )
        .unwrap();
}

fn connections(db: &UserDb) -> Vec<(String, String, i64, String, Option<String>, i64)> {
    db.connection()
        .prepare("SELECT slot, status, imported, allowed_hosts, approved_at, requirement_version FROM snug_connections ORDER BY slot")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn image(db: &mut UserDb) -> Vec<u8> {
    db.to_bytes().unwrap()
}

#[test]
fn connections_are_restored_demoted_kept_or_dropped() {
    let local = new_db();
    put_connection(
        &local,
        "broker",
        REQUIREMENT,
        "approved",
        r#"["api.broker.example"]"#,
    );
    put_connection(
        &local,
        "widened",
        &REQUIREMENT.replace("broker\",\"p", "widened\",\"p"),
        "approved",
        r#"["api.broker.example"]"#,
    );

    let mut incoming = new_db();
    // Identical requirement and hosts: the local grant is restored (approved_at and version are local).
    put_connection(
        &incoming,
        "broker",
        REQUIREMENT,
        "declared",
        r#"["api.broker.example"]"#,
    );
    // Same requirement, but the file claims a wider ceiling: demoted, hosts re-derived.
    put_connection(
        &incoming,
        "widened",
        &REQUIREMENT.replace("broker\",\"p", "widened\",\"p"),
        "approved",
        r#"["api.broker.example","evil.example"]"#,
    );
    // A revocation tombstone survives untouched.
    put_connection(
        &incoming,
        "gone",
        &REQUIREMENT.replace("broker\",\"p", "gone\",\"p"),
        "revoked",
        "[]",
    );
    // Structurally unusable rows are dropped and reported.
    put_connection(&incoming, "bad1", "not json", "declared", "[]");
    put_connection(
        &incoming,
        "bad2",
        &REQUIREMENT.replace("\"kind\"", "\"evil\":1,\"kind\""),
        "approved",
        "[]",
    );
    put_connection(&incoming, "bad3", REQUIREMENT, "approved", "[]");
    let bytes = image(&mut incoming);

    let (db, report) = import(&bytes, Some(&local), &ImportOptions::default(), clock()).unwrap();
    expect![[r#"
        [
            (
                "broker",
                "approved",
                0,
                "[\"api.broker.example\"]",
                Some(
                    "2026-02-02T00:00:00.000Z",
                ),
                3,
            ),
            (
                "gone",
                "revoked",
                0,
                "[]",
                None,
                3,
            ),
            (
                "widened",
                "declared",
                1,
                "[\"api.broker.example\"]",
                None,
                3,
            ),
        ]
    "#]]
    .assert_debug_eq(&connections(&db));
    assert_eq!((report.restored_grants, report.demoted_connections), (1, 1));
    let dropped: Vec<String> = report
        .dropped_connections
        .iter()
        .map(|d| format!("{} {}", d.slot, d.reason))
        .collect();
    assert_eq!(
        dropped,
        [
            "bad1 requirement_json is not valid JSON",
            "bad2 unknown key \"evil\"",
            "bad3 slot is missing, malformed or does not match the row"
        ]
    );
}

#[test]
fn runtime_contracts_unknown_locally_are_dropped_unless_trusted() {
    let mut local = new_db();
    local
        .install_app(&NewApp {
            app_id: Some("a".to_owned()),
            ..NewApp::default()
        })
        .unwrap();
    let known = json!({"overview": "known", "maxOutputTokens": 10});
    local
        .save_app_version(
            "a",
            "v2",
            &SaveVersion {
                contract: crate::ContractSource::Set(known),
                ..SaveVersion::default()
            },
        )
        .unwrap();

    let mut incoming = new_db();
    incoming
        .install_app(&NewApp {
            app_id: Some("b".to_owned()),
            ..NewApp::default()
        })
        .unwrap();
    for (html, raw) in [
        (
            "same, other key order and spacing",
            r#"{ "maxOutputTokens": 10, "overview": "known" }"#,
        ),
        ("unknown", r#"{"overview":"injected"}"#),
        ("unparseable", "{not json"),
    ] {
        incoming
            .save_app_version("b", html, &SaveVersion::default())
            .unwrap();
        incoming
            .connection()
            .execute("UPDATE snug_app_versions SET runtime_contract_json = ?1 WHERE app_id = 'b' AND html = ?2", [raw, html])
            .unwrap();
    }
    let bytes = image(&mut incoming);

    let (db, report) = import(&bytes, Some(&local), &ImportOptions::default(), clock()).unwrap();
    let dropped: Vec<(String, i64)> = report
        .dropped_runtime_contracts
        .iter()
        .map(|d| (d.app_id.clone(), d.version))
        .collect();
    assert_eq!(dropped, [("b".to_owned(), 3), ("b".to_owned(), 4)]);
    assert!(
        db.app_version("b", 2)
            .unwrap()
            .runtime_contract_json
            .is_some()
    );
    assert!(
        db.app_version("b", 3)
            .unwrap()
            .runtime_contract_json
            .is_none()
    );

    let trusted = ImportOptions {
        trusted_origin: true,
        ..ImportOptions::default()
    };
    let (db, report) = import(&bytes, Some(&local), &trusted, clock()).unwrap();
    assert!(report.dropped_runtime_contracts.is_empty());
    assert!(
        db.app_version("b", 3)
            .unwrap()
            .runtime_contract_json
            .is_some()
    );

    let (_, report) = import(&bytes, None, &ImportOptions::default(), clock()).unwrap();
    assert_eq!(
        report.dropped_runtime_contracts.len(),
        3,
        "with no local database nothing is known"
    );
}

#[test]
fn the_reconfirm_latch_is_rearmed_even_when_the_file_says_false() {
    let mut incoming = new_db();
    incoming.set_needs_endpoint_confirm(false).unwrap();
    incoming
        .set_setting("localUrl", &json!("http://evil.example/v1"))
        .unwrap();
    let (db, _) = import(
        &image(&mut incoming),
        None,
        &ImportOptions::default(),
        clock(),
    )
    .unwrap();
    assert!(db.needs_endpoint_confirm().unwrap());
    assert_eq!(
        db.setting("localUrl").unwrap(),
        Some(json!("http://evil.example/v1")),
        "kept, but gated"
    );
}

#[test]
fn the_sidecar_directory_survives_import() {
    let mut incoming = new_db();
    incoming
        .set_sidecar_identity_directory(&["alice".to_owned()])
        .unwrap();
    let (db, _) = import(
        &image(&mut incoming),
        None,
        &ImportOptions::default(),
        clock(),
    )
    .unwrap();
    assert_eq!(db.sidecar_identity_directory().unwrap(), ["alice"]);
}

#[test]
fn oversized_plaintext_is_refused_before_sqlite_opens_it() {
    let mut bytes = image(&mut new_db());
    let page = 4096;
    bytes.resize(usize::try_from(MAX_USERDB_BYTES).unwrap() + page, 0);
    let err = import(&bytes, None, &ImportOptions::default(), clock()).unwrap_err();
    assert!(
        matches!(
            err,
            ImportError::TooLarge {
                max: MAX_USERDB_BYTES,
                ..
            }
        ),
        "{err:?}"
    );
}

#[track_caller]
fn check_hosts(requirement: serde_json::Value, expect: Expect) {
    expect.assert_eq(&encode_json(&json!(derive_allowed_hosts(&requirement))));
}

#[test]
fn allowed_hosts_are_derived_sorted_unique_and_normalized() {
    check_hosts(
        json!({"declaredApiHosts": ["API.Broker.example", "api.broker.example"]}),
        expect![[r#"["api.broker.example"]"#]],
    );
    check_hosts(
        json!({
            "declaredApiHosts": ["api.spotify.com"],
            "endpoints": {
                "authorizeUrl": "https://accounts.spotify.com/authorize",
                "tokenUrl": "https://accounts.spotify.com:443/api/token",
                "refreshUrl": "https://refresh.spotify.com/?x=1",
                "revokeUrl": "http://plain.example/revoke",
                "otherUrl": "https://other.example/"
            },
            "userLayer": {"declaredApiHosts": ["user.example"], "endpoints": {"tokenUrl": "https://user-token.example/t"}}
        }),
        expect![[
            r#"["accounts.spotify.com","api.spotify.com","refresh.spotify.com","user-token.example","user.example"]"#
        ]],
    );
    check_hosts(
        json!({"declaredApiHosts": ["bad host", "-x.example", "münchen.example", "ok.example"], "endpoints": {"tokenUrl": "https://user@evil.example/"}}),
        expect![[r#"["ok.example"]"#]],
    );
    check_hosts(
        json!({"lanHost": {"class": "rfc1918-ipv4-literal", "label": "Bridge"}}),
        expect!["[]"],
    );
}

#[track_caller]
fn check_requirement_verdict(requirement: &str, expect: Expect) {
    let value: serde_json::Value = serde_json::from_str(requirement).unwrap();
    expect.assert_eq(&match check_requirement(&value, "broker") {
        Ok(()) => "ok".to_owned(),
        Err(problem) => problem.to_string(),
    });
}

#[test]
fn requirements_are_checked_structurally() {
    check_requirement_verdict(REQUIREMENT, expect!["ok"]);
    check_requirement_verdict("[]", expect!["the requirement is not an object"]);
    check_requirement_verdict(
        &REQUIREMENT.replace("api_key\",\"f", "magic\",\"f"),
        expect!["kind is missing or unknown"],
    );
    check_requirement_verdict(
        &REQUIREMENT.replace("Example Broker", "Ѕpotify"),
        expect!["provider is missing or malformed"],
    );
    check_requirement_verdict(
        &REQUIREMENT.replace("[\"api.broker.example\"]", "[]"),
        expect!["declaredApiHosts is missing or malformed"],
    );
    check_requirement_verdict(
        &REQUIREMENT.replace(
            ",\"declaredApiHosts\":[\"api.broker.example\"]",
            ",\"lanHost\":{\"class\":\"rfc1918-ipv4-literal\",\"label\":\"IP\"}",
        ),
        expect!["ok"],
    );
    check_requirement_verdict(
        &REQUIREMENT.replace(
            "}],",
            "}],\"endpoints\":{\"tokenUrl\":\"http://x.example/\"},",
        ),
        expect!["endpoints are malformed"],
    );
    check_requirement_verdict(
        &REQUIREMENT.replace("\"slot\":\"broker\"", "\"slot\":\"Broker\""),
        expect!["slot is missing, malformed or does not match the row"],
    );
}
