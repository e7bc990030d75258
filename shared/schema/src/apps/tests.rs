//! Tests of apps and versions: install, retention, copy-forward, deletes (reference U4–U8, V6–V8).

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::expect;
use serde_json::json;

use super::*;
use crate::test_support::new_db;
use crate::{ChatRole, KvTable, NewChatMessage, UserDb};

fn install(db: &mut UserDb, app_id: &str, source: Option<&str>) -> Installed {
    db.install_app(&NewApp {
        app_id: Some(app_id.to_owned()),
        display_name: format!("App {app_id}"),
        html: "<p>v1</p>".to_owned(),
        install_source: source.map(str::to_owned),
        ..NewApp::default()
    })
    .unwrap()
}

fn save(db: &mut UserDb, app_id: &str, html: &str) -> i64 {
    db.save_app_version(app_id, html, &SaveVersion::default())
        .unwrap()
}

/// Renders the stored versions as `v<n>[*]` (`*` = pinned), newest first.
fn versions(db: &UserDb, app_id: &str) -> String {
    db.app_versions(app_id)
        .unwrap()
        .iter()
        .map(|v| format!("v{}{}", v.version, if v.pinned { "*" } else { "" }))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn install_creates_a_pinned_v1_and_dedups_by_install_source() {
    let mut db = new_db();
    let first = install(&mut db, "a", Some("starter:chess"));
    assert_eq!(
        first,
        Installed {
            app_id: "a".to_owned(),
            created: true
        }
    );
    let again = db
        .install_app(&NewApp {
            display_name: "Other".to_owned(),
            install_source: Some("starter:chess".to_owned()),
            ..NewApp::default()
        })
        .unwrap();
    assert_eq!(
        again,
        Installed {
            app_id: "a".to_owned(),
            created: false
        }
    );
    assert_eq!(versions(&db, "a"), "v1*");
    let v1 = db.app_version("a", 1).unwrap();
    assert_eq!(
        (v1.html.as_str(), v1.runtime_contract_json),
        ("<p>v1</p>", None)
    );
    assert!(matches!(
        db.install_app(&NewApp {
            app_id: Some("a".to_owned()),
            ..NewApp::default()
        }),
        Err(AppError::AppExists { .. })
    ));
    let generated = db
        .install_app(&NewApp {
            display_name: "G".to_owned(),
            ..NewApp::default()
        })
        .unwrap();
    assert!(crate::is_uuid_shaped(&generated.app_id) && generated.created);
}

#[test]
fn retention_keeps_every_pin_and_five_unpinned() {
    let mut db = new_db();
    install(&mut db, "a", None);
    for n in 2..=8 {
        save(&mut db, "a", &format!("v{n}"));
    }
    expect!["v8 v7 v6 v5 v4 v1*"].assert_eq(&versions(&db, "a"));

    // A pinned save (an installed starter update) is kept and does not count against the five.
    db.save_app_version(
        "a",
        "starter update",
        &SaveVersion {
            pinned: true,
            ..SaveVersion::default()
        },
    )
    .unwrap();
    save(&mut db, "a", "v10");
    expect!["v10 v9* v8 v7 v6 v5 v1*"].assert_eq(&versions(&db, "a"));

    // After manual deletes the rule still keeps five unpinned rows (the reference's
    // number-based rule would keep only v11..v14 here).
    db.delete_app_version("a", 8).unwrap();
    db.delete_app_version("a", 7).unwrap();
    for n in 11..=12 {
        save(&mut db, "a", &format!("v{n}"));
    }
    expect!["v12 v11 v10 v9* v6 v5 v1*"].assert_eq(&versions(&db, "a"));
    let unpinned = db
        .app_versions("a")
        .unwrap()
        .iter()
        .filter(|v| !v.pinned)
        .count();
    assert_eq!(unpinned, VERSIONS_RETAINED);
}

#[test]
fn revert_and_reset_copy_forward() {
    let mut db = new_db();
    install(&mut db, "a", None);
    let contract = json!({"overview": "tracker", "maxOutputTokens": 1024});
    db.save_app_version(
        "a",
        "v2",
        &SaveVersion {
            contract: ContractSource::Set(contract),
            ..SaveVersion::default()
        },
    )
    .unwrap();
    save(&mut db, "a", "v3");
    assert_eq!(
        db.app_version("a", 3)
            .unwrap()
            .runtime_contract_json
            .as_deref(),
        Some(r#"{"maxOutputTokens":1024,"overview":"tracker"}"#),
        "copied forward verbatim"
    );
    let reverted = db.revert_app("a", 1).unwrap();
    let v = db.app_version("a", reverted).unwrap();
    assert_eq!(
        (reverted, v.html.as_str(), v.note.as_deref(), v.pinned),
        (4, "<p>v1</p>", Some("revert to v1"), false)
    );
    assert_eq!(
        v.runtime_contract_json, None,
        "the contract comes from the reverted-to version"
    );
    assert_eq!(db.app("a").unwrap().current_version, 4);

    for n in 5..=12 {
        save(&mut db, "a", &format!("v{n}"));
    }
    // v2 is pruned by now: reverting to it fails, reset-to-factory still finds v1.
    assert!(matches!(
        db.revert_app("a", 2),
        Err(AppError::VersionNotFound { version: 2, .. })
    ));
    let reset = db.reset_to_factory("a").unwrap();
    let v = db.app_version("a", reset).unwrap();
    assert_eq!(
        (v.html.as_str(), v.note.as_deref()),
        ("<p>v1</p>", Some("reset to factory (v1)"))
    );

    // The factory is the NEWEST pin.
    db.save_app_version(
        "a",
        "starter v2",
        &SaveVersion {
            pinned: true,
            ..SaveVersion::default()
        },
    )
    .unwrap();
    save(&mut db, "a", "edit");
    let reset = db.reset_to_factory("a").unwrap();
    let v = db.app_version("a", reset).unwrap();
    assert_eq!(
        (v.html.as_str(), v.note.as_deref()),
        ("starter v2", Some("reset to factory (v14)"))
    );
}

#[test]
fn contracts_are_copied_from_an_explicit_source_or_cleared() {
    let mut db = new_db();
    install(&mut db, "a", None);
    db.save_app_version(
        "a",
        "v2",
        &SaveVersion {
            contract: ContractSource::Set(json!({"k": 1})),
            ..SaveVersion::default()
        },
    )
    .unwrap();
    db.save_app_version(
        "a",
        "v3",
        &SaveVersion {
            contract: ContractSource::Clear,
            ..SaveVersion::default()
        },
    )
    .unwrap();
    db.save_app_version(
        "a",
        "v4",
        &SaveVersion {
            contract: ContractSource::CopyFrom(2),
            ..SaveVersion::default()
        },
    )
    .unwrap();
    assert_eq!(
        db.app_version("a", 4)
            .unwrap()
            .runtime_contract_json
            .as_deref(),
        Some(r#"{"k":1}"#)
    );
    let err = db.save_app_version(
        "a",
        "x",
        &SaveVersion {
            contract: ContractSource::CopyFrom(99),
            ..SaveVersion::default()
        },
    );
    assert!(matches!(
        err,
        Err(AppError::VersionNotFound { version: 99, .. })
    ));
    let err = db.save_app_version(
        "a",
        "x",
        &SaveVersion {
            contract: ContractSource::Set(json!([1])),
            ..SaveVersion::default()
        },
    );
    assert!(matches!(err, Err(AppError::InvalidContract)));
    assert_eq!(
        db.app("a").unwrap().current_version,
        4,
        "failed saves change nothing"
    );
}

#[test]
fn deleting_a_version_checks_existence_then_pin_then_current() {
    let mut db = new_db();
    install(&mut db, "a", None);
    save(&mut db, "a", "v2");
    save(&mut db, "a", "v3");
    let reasons: Vec<&str> = [99, 1, 3]
        .iter()
        .map(|v| db.delete_app_version("a", *v).unwrap_err().reason().name)
        .collect();
    assert_eq!(
        reasons,
        ["VERSION_NOT_FOUND", "VERSION_PINNED", "VERSION_CURRENT"]
    );
    db.delete_app_version("a", 2).unwrap();
    assert_eq!(versions(&db, "a"), "v3 v1*");
    assert_eq!(
        db.delete_app_version("nope", 1).unwrap_err().reason(),
        "APP_NOT_FOUND"
    );
}

#[test]
fn metadata_updates_keep_versions() {
    let mut db = new_db();
    install(&mut db, "a", None);
    save(&mut db, "a", "v2");
    let app = db
        .update_app_meta(
            "a",
            &AppMetaUpdate {
                display_name: Some("Renamed".to_owned()),
                icon_emoji: Some(Some("📈".to_owned())),
                ..AppMetaUpdate::default()
            },
        )
        .unwrap();
    assert_eq!(
        (
            app.display_name.as_str(),
            app.icon_emoji.as_deref(),
            app.current_version
        ),
        ("Renamed", Some("📈"), 2)
    );
    assert_eq!(db.app("a").unwrap(), app);
    assert_eq!(versions(&db, "a"), "v2 v1*");
}

#[test]
fn missing_apps_and_versions_are_typed() {
    let mut db = new_db();
    let reasons = [
        db.app("x").unwrap_err().reason(),
        db.app_version("x", 1).unwrap_err().reason(),
        db.app_versions("x").unwrap_err().reason(),
        db.save_app_version("x", "", &SaveVersion::default())
            .unwrap_err()
            .reason(),
        db.revert_app("x", 1).unwrap_err().reason(),
        db.reset_to_factory("x").unwrap_err().reason(),
        db.update_app_meta("x", &AppMetaUpdate::default())
            .unwrap_err()
            .reason(),
        db.delete_app("x").unwrap_err().reason(),
    ];
    assert!(reasons.iter().all(|r| *r == "APP_NOT_FOUND"), "{reasons:?}");
    install(&mut db, "a", None);
    assert_eq!(
        db.app_version("a", 7).unwrap_err().reason(),
        "VERSION_NOT_FOUND"
    );
}

#[test]
fn writes_over_the_cap_are_refused_whole() {
    let mut db = new_db();
    install(&mut db, "a", None);
    let huge = "x".repeat(usize::try_from(crate::MAX_USERDB_BYTES).unwrap());
    let err = db
        .save_app_version("a", &huge, &SaveVersion::default())
        .unwrap_err();
    assert!(
        matches!(
            err,
            AppError::TooLarge {
                max: crate::MAX_USERDB_BYTES,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(versions(&db, "a"), "v1*");
    assert_eq!(db.app("a").unwrap().current_version, 1);
}

#[test]
fn deleting_an_app_removes_everything_it_owns_and_nothing_else() {
    let mut db = new_db();
    for app in ["a", "a:b", "keep"] {
        install(&mut db, app, None);
        db.upsert_doc(app, "vision", None, "doc").unwrap();
        db.append_chat_message(&NewChatMessage {
            thread_id: format!("app:{app}"),
            app_id: Some(app.to_owned()),
            title: None,
            role: ChatRole::User,
            content: "hi".to_owned(),
            pinned: true,
            meta: None,
        })
        .unwrap();
        let credential = if app == "a" {
            "CRED-FOR-A"
        } else {
            "CRED-OTHER"
        };
        db.set_secret(&format!("auth:{app}:slot:api_key"), credential)
            .unwrap();
        db.set_secret(&format!("auth:{app}:legacy"), "credential")
            .unwrap();
        db.set_setting(&crate::app_model_key(app), &json!("m"))
            .unwrap();
        db.set_setting(
            &format!("shareLink:{app}:L{}", app.len()),
            &json!({"id": "x"}),
        )
        .unwrap();
        db.set_secret(&format!("share:L{}", app.len()), "link-secret")
            .unwrap();
    }
    let token = crate::app_data_token("a");
    db.connection()
        .execute_batch(&format!(
            "CREATE TABLE \"app_{token}__trades\" (id INTEGER PRIMARY KEY AUTOINCREMENT, v);
             INSERT INTO \"app_{token}__trades\" (v) VALUES ('ROW-SENTINEL');
             CREATE TABLE \"app_{token}__snug_kv\" (key TEXT PRIMARY KEY, value TEXT);
             INSERT INTO snug_app_schemas VALUES ('a', '{token}', '{{\"objects\":[]}}', 't');
             INSERT INTO snug_connections (app_id, slot, requirement_json, requirement_version, provenance, status,
                 allowed_hosts, created_at, updated_at)
                 VALUES ('a', 'wa', '{{}}', 1, 'user', 'approved', '[\"whatsapp.sidecar.localhost\"]', 't', 't');"
        ))
        .unwrap();
    db.set_sidecar_identity_directory(&["alice".to_owned()])
        .unwrap();
    db.set_setting("mode", &json!("byok")).unwrap();
    db.set_secret("byok:anthropic", "sk").unwrap();

    let deleted = db.delete_app("a").unwrap();
    expect![[r#"
        DeletedApp {
            tables_dropped: [
                "app_x61__snug_kv",
                "app_x61__trades",
            ],
            rows_deleted: 7,
            secrets_deleted: 3,
            settings_deleted: 2,
            sidecar_directory_wiped: true,
        }
    "#]]
    .assert_debug_eq(&deleted);
    assert!(matches!(db.app("a"), Err(AppError::AppNotFound { .. })));
    assert_eq!(
        db.secret_keys().unwrap(),
        [
            "auth:a:b:legacy",
            "auth:a:b:slot:api_key",
            "auth:keep:legacy",
            "auth:keep:slot:api_key",
            "byok:anthropic",
            "share:L3",
            "share:L4"
        ]
    );
    let settings: Vec<String> = db
        .kv_entries(KvTable::Settings)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        settings,
        [
            "appModel:a:b",
            "appModel:keep",
            "mode",
            "shareLink:a:b:L3",
            "shareLink:keep:L4"
        ]
    );
    for app in ["a:b", "keep"] {
        assert_eq!(versions(&db, app), "v1*");
        assert_eq!(db.docs(app).unwrap().len(), 1);
        assert_eq!(db.chat_messages(&format!("app:{app}")).unwrap().len(), 1);
    }
    // secure_delete zeroed the app's rows and credentials in place.
    let image = db.to_bytes().unwrap();
    for gone in [&b"ROW-SENTINEL"[..], b"CRED-FOR-A"] {
        assert!(
            !image.windows(gone.len()).any(|w| w == gone),
            "{}",
            String::from_utf8_lossy(gone)
        );
    }
}

#[test]
fn setting_keys_belong_to_apps_by_whole_segments() {
    assert!(is_app_setting_key("appModel:a", "a"));
    assert!(!is_app_setting_key("appModel:a:b", "a"));
    assert!(is_app_setting_key("shareLink:a:L1", "a"));
    assert!(!is_app_setting_key("shareLink:a:b:L1", "a"));
    assert!(is_app_setting_key("scheduleDeclined:a:hash", "a"));
    assert!(!is_app_setting_key("schedule:a", "a"));
    assert!(!is_app_setting_key("mode", "a"));
    assert!(!is_app_setting_key("sidecarIdentityDirectory", "a"));
}
