//! Tests of the namespace token and object-name rules (spec §8.2, reference checks S12–S14),
//! exercised through `snug-schema`'s functions, which this crate reuses.

#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use snug_schema::{app_data_token, is_uuid_shaped, is_valid_app_object_name, is_valid_token};

use super::{AppNamespace, quote_ident};

/// The identity the token encodes: a UUID-shaped namespace is compared without regard to
/// case (the token lowercases it, as the reference does); any other namespace byte for byte.
fn identity(namespace: &str) -> String {
    if is_uuid_shaped(namespace) {
        namespace.to_ascii_lowercase()
    } else {
        format!("raw:{namespace}")
    }
}

/// Namespaces of every shape the token distinguishes: arbitrary unicode, UUIDs in random case,
/// 32 hex digits that are not UUIDs, x-prefixed hex that looks like a token, and near-UUIDs.
fn namespace() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
        "[0-9a-fA-F]{32}",
        "x[0-9a-f]{0,16}",
        "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{11}",
        "[a-z-]{0,20}",
    ]
}

/// Flips the case of the characters `mask` selects.
fn recase(namespace: &str, mask: u64) -> String {
    namespace
        .chars()
        .enumerate()
        .map(|(idx, c)| {
            if mask >> (idx % 64) & 1 == 1 {
                if c.is_ascii_lowercase() {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                }
            } else {
                c
            }
        })
        .collect()
}

proptest! {
    #[test]
    fn the_token_is_total(ns in namespace()) {
        let token = app_data_token(&ns);
        prop_assert!(is_valid_token(&token), "{ns:?} -> {token:?}");
        prop_assert!(token.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'x').contains(&b)));
        let namespace = AppNamespace::new(&ns);
        prop_assert_eq!(namespace.token(), token.as_str());
    }

    #[test]
    fn the_token_is_injective(a in namespace(), b in namespace()) {
        prop_assert_eq!(
            app_data_token(&a) == app_data_token(&b),
            identity(&a) == identity(&b),
            "{:?} / {:?}", a, b
        );
    }

    #[test]
    fn case_variants_collide_only_for_uuids(ns in namespace(), mask in any::<u64>()) {
        let variant = recase(&ns, mask);
        prop_assert_eq!(
            app_data_token(&ns) == app_data_token(&variant),
            identity(&ns) == identity(&variant),
            "{:?} / {:?}", ns, variant
        );
    }

    #[test]
    fn a_rest_name_maps_back_to_its_natural_name(ns in namespace(), name in "[A-Za-z][A-Za-z0-9_]{0,40}") {
        let ns = AppNamespace::new(&ns);
        let rest = ns.rest_table_name(&name);
        prop_assert_eq!(ns.natural_name(&rest), Some(name.as_str()));
        prop_assert_eq!(ns.natural_name(&rest.to_ascii_uppercase()).map(str::to_owned), Some(name.to_ascii_uppercase()));
    }
}

#[test]
fn tokens_follow_the_reference_cases() {
    let cases = [
        (
            "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c",
            "a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c",
        ),
        (
            "A7F3B2C1-0D4E-4F5A-8B6C-9D0E1F2A3B4C",
            "a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c",
        ),
        ("starter--chess", "x737461727465722d2d6368657373"),
        ("", "x"),
        ("täble", "x74c3a4626c65"),
        (
            "a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c",
            "x6137663362326331306434653466356138623663396430653166326133623463",
        ),
    ];
    for (ns, token) in cases {
        assert_eq!(AppNamespace::new(ns).token(), token, "{ns:?}");
    }
    assert_eq!(
        AppNamespace::new("deadbeef").rest_table_name("trades"),
        "app_x6465616462656566__trades"
    );
}

#[test]
fn object_names_follow_s14() {
    let accepted = [
        "A".repeat(41),
        "trades".into(),
        "snug_kv".into(),
        "t_1".into(),
        "Snugkv".into(),
        "apps".into(),
    ];
    let rejected = [
        "a".repeat(42),
        "1trades".into(),
        "APP_x".into(),
        "app_x".into(),
        "SNUG_kv".into(),
        "snug_kv2".into(),
        "Snug_KV".into(),
        "sqlite_x".into(),
        "SQLite_x".into(),
        "snug_apps".into(),
        "two words".into(),
        "dash-ed".into(),
        "dot.ted".into(),
        "quo\"te".into(),
        "apo'strophe".into(),
        "tåble".into(),
        "ｔrades".into(),
        "_lead".into(),
        "".into(),
    ];
    for name in &accepted {
        assert!(is_valid_app_object_name(name), "{name:?} must be accepted");
    }
    for name in &rejected {
        assert!(!is_valid_app_object_name(name), "{name:?} must be rejected");
    }
}

#[test]
fn identifiers_are_quoted_whatever_they_hold() {
    assert_eq!(quote_ident("plain"), "\"plain\"");
    assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    assert_eq!(quote_ident(""), "\"\"");
}

#[test]
fn natural_names_need_the_whole_prefix() {
    let ns = AppNamespace::new("");
    assert_eq!(ns.natural_name("app_x__t"), Some("t"));
    assert_eq!(ns.natural_name("app_x61__t"), None);
    assert_eq!(ns.natural_name("app_x_"), None);
}
