//! Tests of the hub origin's pure parts: how an unexpected answer becomes an origin error, and
//! how a revision token becomes a path segment.

use expect_test::{Expect, expect};

use super::*;

#[track_caller]
fn check_refused(token: Option<&str>, status: u16, body: &str, expect: Expect) {
    let origin = HubOrigin::new("http://127.0.0.1:9", token.map(str::to_owned));
    let err = origin.refused(status, body);
    expect.assert_eq(&format!("{}: {err}", err.reason()));
}

#[test]
fn a_refusal_keeps_the_hubs_code_where_the_registry_knows_it() {
    check_refused(
        Some("snug_x"),
        401,
        "",
        expect![
            "SYNC_AUTH: the origin refused the token (it answered 401 Unauthorized): it is wrong, revoked or another hub's; ask the hub's operator for a new one (snug-hub users token NAME)"
        ],
    );
    check_refused(
        None,
        401,
        r#"{"code":"UNAUTHENTICATED","message":"a bearer token is required"}"#,
        expect![
            "SYNC_AUTH: the origin wants a token (it answered 401: a bearer token is required) and none was given: set SNUG_TOKEN or pass --token-file FILE"
        ],
    );
    check_refused(
        Some("snug_x"),
        403,
        r#"{"code":"FORBIDDEN"}"#,
        expect![
            "SYNC_AUTH: the origin refused the token (it answered 403: {\"code\":\"FORBIDDEN\"}): it is wrong, revoked or another hub's; ask the hub's operator for a new one (snug-hub users token NAME)"
        ],
    );
    check_refused(
        None,
        429,
        "",
        expect![
            "RATE_LIMITED: the origin is rate limiting this client (it answered 429 Too Many Requests); wait a little and run this again"
        ],
    );
    check_refused(
        None,
        503,
        r#"{"code":"OVERLOADED","message":"too many uploads"}"#,
        expect!["OVERLOADED: http://127.0.0.1:9/userdb answered 503: too many uploads"],
    );
    check_refused(
        None,
        503,
        "",
        expect!["SYNC_HTTP: http://127.0.0.1:9/userdb answered 503 Service Unavailable"],
    );
    check_refused(
        None,
        400,
        r#"{"code":"HOSTILE_SCHEMA","message":"no"}"#,
        expect!["HOSTILE_SCHEMA: http://127.0.0.1:9/userdb answered 400: no"],
    );
    check_refused(
        None,
        400,
        r#"{"code":"NOT_OURS","message":"no"}"#,
        expect!["SYNC_HTTP: http://127.0.0.1:9/userdb answered 400: no"],
    );
    check_refused(
        None,
        500,
        "plain text",
        expect!["SYNC_HTTP: http://127.0.0.1:9/userdb answered 500: plain text"],
    );
}

#[test]
fn a_revision_token_is_one_percent_encoded_path_segment() {
    expect!["r12-00ff"].assert_eq(&path_segment("r12-00ff"));
    expect!["a%20b%2F..%3Fc~_"].assert_eq(&path_segment("a b/..?c~_"));
    expect!["https://hub.example/userdb/revisions/r1-x"]
        .assert_eq(&HubOrigin::new("https://hub.example/", None).revision_url("r1-x"));
    expect!["https://hub.example/userdb"]
        .assert_eq(&HubOrigin::new("https://hub.example/userdb", None).name());
}

/// Every JSON code the gateway answers with is passed on as a registered word, so a client and
/// the hub speak one vocabulary without a list kept by hand.
#[test]
fn every_code_the_gateway_sends_is_passed_on() {
    for reason in snug_reasons::ALL {
        if let Some(http) = reason.http {
            let code =
                hub_code(http.code).unwrap_or_else(|| panic!("{} is not passed on", http.code));
            let found = code;
            assert!(
                found.name == http.code || found.http.is_some_and(|h| h.code == http.code),
                "{} became {code}",
                http.code
            );
        }
    }
    assert_eq!(hub_code("NOT_OURS"), None);
    assert_eq!(hub_code(""), None);
}

/// The identity a hub states is 32 lowercase hex digits; anything else is not an identity,
/// and the origin is known by its URL.
#[test]
fn a_hub_states_its_identity_as_32_hex_digits() {
    assert_eq!(
        OriginId::hub("0123456789abcdef0123456789abcdef").map(|id| id.to_string()),
        Some("hub:0123456789abcdef0123456789abcdef".to_owned())
    );
    for refused in [
        "",
        "0123",
        "0123456789ABCDEF0123456789ABCDEF",
        "zz23456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef0",
    ] {
        assert_eq!(OriginId::hub(refused), None, "{refused:?}");
    }
    let id = OriginId::address(AddressKind::Url, "https://hub.example/userdb");
    assert_eq!(OriginId::parse(id.as_str()), Some(id.clone()));
    assert!(!id.is_stated());
    assert_eq!(OriginId::parse("hub:nothex"), None);
    assert_eq!(OriginId::parse("other:x"), None);
}

/// The one fallback rule of the delta routes, as a table: what falls back to the whole file,
/// what is a conflict, and what stands.
#[test]
fn a_delta_route_falls_back_only_where_a_whole_file_could_do_better() {
    use super::{DeltaAnswer::*, delta_answer};
    let cases: &[(u16, &str, super::DeltaAnswer)] = &[
        (200, "", Taken),
        (204, "", Taken),
        (404, "NOT_FOUND", WholeFile),
        (404, "REVISION_NOT_FOUND", WholeFile),
        (405, "", WholeFile),
        (501, "", WholeFile),
        (400, "DELTA_MALFORMED", WholeFile),
        (413, "DELTA_TOO_LARGE", WholeFile),
        (409, "DELTA_BASE_GONE", WholeFile),
        (409, "", Conflict),
        (412, "PRECONDITION_FAILED", Conflict),
        (401, "UNAUTHENTICATED", Refused),
        (403, "FORBIDDEN", Refused),
        (413, "QUOTA_EXCEEDED", Refused),
        (429, "RATE_LIMITED", Refused),
        (503, "OVERLOADED", Refused),
        (500, "STORAGE_CORRUPT", Refused),
        (400, "BAD_REQUEST", Refused),
    ];
    for (status, code, expected) in cases {
        assert_eq!(delta_answer(*status, code), *expected, "{status} {code:?}");
    }
}
