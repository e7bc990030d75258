//! Tests of the namespace token and object-name rules (reference checks S12–S14).

#![allow(clippy::unwrap_used, reason = "tests")]

use expect_test::{Expect, expect};

use super::*;

#[track_caller]
fn check_token(namespace: &str, expect: Expect) {
    let token = app_data_token(namespace);
    assert!(
        is_valid_token(&token),
        "{token} must be a token this module recognises"
    );
    expect.assert_eq(&token);
}

#[test]
fn tokens_follow_app_data_token() {
    check_token(
        "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c",
        expect!["a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c"],
    );
    check_token(
        "A7F3B2C1-0D4E-4F5A-8B6C-9D0E1F2A3B4C",
        expect!["a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c"],
    );
    check_token("starter--chess", expect!["x737461727465722d2d6368657373"]);
    check_token("", expect!["x"]);
    check_token("täble", expect!["x74c3a4626c65"]);
    check_token(
        "a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c",
        expect!["x6137663362326331306434653466356138623663396430653166326133623463"],
    );
    check_token(
        "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4",
        expect!["x61376633623263312d306434652d346635612d386236632d3964306531663261336234"],
    );
}

#[test]
fn tokens_are_injective_over_samples() {
    let samples = [
        "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c",
        "a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c",
        "x",
        "",
        "starter--chess",
        "starter-chess",
        "täble",
        "ta\u{308}ble",
    ];
    let mut tokens: Vec<String> = samples.iter().map(|s| app_data_token(s)).collect();
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), samples.len());
}

#[test]
fn rest_names_join_and_split() {
    assert_eq!(
        app_rest_table_name("deadbeef", "trades"),
        "app_deadbeef__trades"
    );
    assert_eq!(
        parse_rest_table_name("app_x74__trades"),
        Some(("x74", "trades"))
    );
    assert_eq!(
        parse_rest_table_name("app_deadbeef__trades"),
        None,
        "deadbeef is no token"
    );
    assert_eq!(parse_rest_table_name("app_x74__"), None);
    assert_eq!(parse_rest_table_name("app_x74_trades"), None);
}

#[test]
fn object_names_follow_the_rule() {
    let accepted = ["A", "trades", "t_1", "snug_kv", &"A".repeat(41)];
    let rejected = [
        "",
        &"a".repeat(42),
        "1trades",
        "_x",
        "APP_x",
        "app_x",
        "Snug_x",
        "SNUG_kv",
        "snug_kv2",
        "sqlite_x",
        "SQLite_x",
        "my table",
        "my-table",
        "my.table",
        "my\"table",
        "täble",
    ];
    for name in accepted {
        assert!(is_valid_app_object_name(name), "{name:?} must be accepted");
    }
    for name in rejected {
        assert!(!is_valid_app_object_name(name), "{name:?} must be rejected");
    }
}

#[test]
fn tokens_the_function_never_makes_are_rejected() {
    for token in [
        "",
        "x7",
        "xZZ",
        "X74",
        "A7F3B2C10D4E4F5A8B6C9D0E1F2A3B4C",
        "a7f3",
        "xff",
        &app_data_token("a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c").replacen("", "x", 1),
    ] {
        assert!(!is_valid_token(token), "{token:?}");
    }
}
