//! Tests of the hub origin's pure parts: how an unexpected answer becomes an origin error, and
//! how a revision token becomes a path segment.

use expect_test::{Expect, expect};

use super::*;

#[track_caller]
fn check_refused(status: u16, body: &str, expect: Expect) {
    let err = HubOrigin::refused(status, body);
    expect.assert_eq(&format!("{}: {err}", err.reason()));
}

#[test]
fn a_refusal_keeps_the_hubs_code_only_where_it_is_one_of_ours() {
    check_refused(
        401,
        "",
        expect!["SYNC_AUTH: the origin refused the credentials: 401"],
    );
    check_refused(
        403,
        r#"{"code":"FORBIDDEN"}"#,
        expect!["SYNC_AUTH: the origin refused the credentials: 403"],
    );
    check_refused(
        503,
        r#"{"code":"OVERLOADED","message":"too many uploads"}"#,
        expect!["OVERLOADED: answered 503: too many uploads"],
    );
    check_refused(
        400,
        r#"{"code":"NOT_OURS","message":"no"}"#,
        expect!["SYNC_HTTP: answered 400: no"],
    );
    check_refused(
        500,
        "plain text",
        expect!["SYNC_HTTP: answered 500: plain text"],
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

/// Every hub code passed on is one the gateway answers with (its JSON `code` in `snug-reasons`).
#[test]
fn hub_codes_are_the_gateways() {
    for code in HUB_CODES {
        assert!(
            snug_reasons::ALL
                .iter()
                .any(|reason| reason.http.is_some_and(|http| http.code == *code)),
            "{code} is no JSON code the gateway sends"
        );
    }
}
