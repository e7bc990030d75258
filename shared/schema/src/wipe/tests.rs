//! Tests of the segment-count rules for legacy and per-app credential keys.

#![allow(clippy::unwrap_used, reason = "tests")]

use super::*;

#[test]
fn legacy_keys_are_exactly_three_segments_outside_flow() {
    let legacy = [
        "auth:a1:api_key",
        "auth:a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c:token",
        "auth::x",
        "auth:a1:",
    ];
    let kept = [
        "auth:a1:slot1:api_key",
        "auth:a1:slot1:_connection",
        "auth:_state_hmac",
        "auth:_flow:abc",
        "byok:anthropic",
        "dropbox:token",
        "share:link1",
        "auth",
        "auth:a1",
        "auth:a1:b:c:d",
        "AUTH:a1:api_key",
        "xauth:a1:api_key",
    ];
    for key in legacy {
        assert!(is_legacy_credential_key(key), "{key} is legacy");
    }
    for key in kept {
        assert!(!is_legacy_credential_key(key), "{key} is kept");
    }
}

#[test]
fn app_keys_match_whole_segments_only() {
    assert!(is_app_credential_key("auth:a:slot:field", "a"));
    assert!(is_app_credential_key("auth:a:field", "a"));
    assert!(
        !is_app_credential_key("auth:a:b:slot:field", "a"),
        "belongs to app a:b"
    );
    assert!(is_app_credential_key("auth:a:b:slot:field", "a:b"));
    assert!(!is_app_credential_key("auth:ab:slot:field", "a"));
    assert!(!is_app_credential_key("auth:a:", "a"));
    assert!(!is_app_credential_key("auth:_flow:abc", "_flow"));
    assert!(!is_app_credential_key("byok:a:x", "a"));
    assert!(!is_app_credential_key("auth:%:x", "_"));
}

#[test]
fn the_wipe_deletes_only_legacy_keys_and_zeroes_them() {
    let mut conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE snug_secrets (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        .unwrap();
    for (key, value) in [
        ("auth:a1:api_key", "LEGACY-VALUE-1"),
        ("auth:a1:slot1:api_key", "live"),
        ("auth:_flow:abc", "flow"),
        ("auth:_state_hmac", "hmac"),
        ("byok:anthropic", "sk"),
    ] {
        conn.execute("INSERT INTO snug_secrets VALUES (?1, ?2)", [key, value])
            .unwrap();
    }
    assert_eq!(wipe_legacy_credentials(&conn).unwrap(), 1);
    let keys: Vec<String> = conn
        .prepare("SELECT key FROM snug_secrets ORDER BY key")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        keys,
        [
            "auth:_flow:abc",
            "auth:_state_hmac",
            "auth:a1:slot1:api_key",
            "byok:anthropic"
        ]
    );
    let image = conn.serialize(rusqlite::MAIN_DB).unwrap();
    assert!(
        !image.windows(14).any(|w| w == b"LEGACY-VALUE-1"),
        "secure_delete zeroed the value"
    );
    let secure: i64 = conn
        .pragma_query_value(None, "secure_delete", |r| r.get(0))
        .unwrap();
    assert_eq!(secure, 0, "the setting is restored");
}
