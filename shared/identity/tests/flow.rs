//! Discovery documents, the https-or-loopback rule, PKCE and the sealed login-flow cookie.

use serde_json::json;
use snug_identity::{
    Discovery, DiscoveryError, Flow, FlowError, UrlError, check_url, discovery_url, is_jwt,
    pkce_challenge,
};

#[test]
fn pkce_s256_matches_rfc_7636_appendix_b() {
    assert_eq!(
        pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    );
}

#[test]
fn issuer_urls_are_https_or_loopback() {
    for ok in [
        "https://id.example",
        "https://id.example/realms/snug",
        "http://127.0.0.1:5556/dex",
        "http://localhost:8080",
        "http://[::1]:9000",
    ] {
        assert_eq!(check_url(ok), Ok(()), "{ok}");
    }
    for (bad, want) in [
        ("http://id.example", "NotHttps"),
        ("http://10.0.0.1", "NotHttps"),
        ("http://localhost.evil.example", "NotHttps"),
        ("ftp://id.example", "NotAUrl"),
        ("id.example", "NotAUrl"),
        ("https://", "NotAUrl"),
        ("https://user@id.example", "Extra"),
        ("https://id.example/#x", "Extra"),
    ] {
        let got = match check_url(bad) {
            Err(UrlError::NotHttps(_)) => "NotHttps",
            Err(UrlError::NotAUrl(_)) => "NotAUrl",
            Err(UrlError::Extra(_)) => "Extra",
            Ok(()) => "ok",
        };
        assert_eq!(got, want, "{bad}");
    }
}

#[test]
fn discovery_needs_the_exact_issuer_and_safe_endpoints() {
    let iss = "https://id.example/realms/snug";
    assert_eq!(
        discovery_url(&format!("{iss}/")),
        format!("{iss}/.well-known/openid-configuration")
    );
    let doc = |edit: serde_json::Value| {
        snug_test_support::oidc::merged(
            json!({"issuer": iss, "jwks_uri": format!("{iss}/certs"),
                   "authorization_endpoint": format!("{iss}/auth"),
                   "token_endpoint": format!("{iss}/token"),
                   "code_challenge_methods_supported": ["plain", "S256"]}),
            &edit,
        )
        .to_string()
    };
    let ok = Discovery::parse(doc(json!({})).as_bytes(), iss).expect("ok");
    assert_eq!(ok.jwks_uri, format!("{iss}/certs"));
    assert!(matches!(
        Discovery::parse(doc(json!({"issuer": format!("{iss}/")})).as_bytes(), iss),
        Err(DiscoveryError::IssuerMismatch { .. })
    ));
    assert!(matches!(
        Discovery::parse(
            doc(json!({"jwks_uri": "http://id.example/certs"})).as_bytes(),
            iss
        ),
        Err(DiscoveryError::Url(UrlError::NotHttps(_)))
    ));
    assert!(matches!(
        Discovery::parse(
            doc(json!({"code_challenge_methods_supported": ["plain"]})).as_bytes(),
            iss
        ),
        Err(DiscoveryError::NoS256)
    ));
    assert!(matches!(
        Discovery::parse(doc(json!({"jwks_uri": null})).as_bytes(), iss),
        Err(DiscoveryError::Malformed(_))
    ));
    let minimal = Discovery::parse(
        doc(
            json!({"authorization_endpoint": null, "token_endpoint": null,
                   "code_challenge_methods_supported": null}),
        )
        .as_bytes(),
        iss,
    )
    .expect("ok");
    assert_eq!(minimal.token_endpoint, None);
}

#[test]
fn the_flow_cookie_opens_only_under_its_key_and_before_it_expires() {
    let key = b"0123456789abcdef0123456789abcdef";
    let random: [u8; 96] = std::array::from_fn(|i| i as u8);
    let flow = Flow::new("https://id.example", "/after", &random, 1_000, 600);
    assert_eq!(flow.verifier.len(), 43);
    assert_ne!(flow.state, flow.nonce);
    let sealed = flow.seal(key);
    assert_eq!(Flow::open(&sealed, key, 1_599), Ok(flow.clone()));
    assert_eq!(Flow::open(&sealed, key, 1_600), Err(FlowError::Expired));
    assert_eq!(
        Flow::open(&sealed, b"another key of thirty-two bytes!", 1_000),
        Err(FlowError::Forged)
    );
    let (first, tag) = sealed.split_once('.').expect("dot");
    let mut other = flow.clone();
    other.return_to = "https://evil.example".into();
    let forged_first = other.seal(key).split_once('.').expect("dot").0.to_owned();
    assert_eq!(
        Flow::open(&format!("{forged_first}.{tag}"), key, 1_000),
        Err(FlowError::Forged)
    );
    assert_eq!(Flow::open(first, key, 1_000), Err(FlowError::Forged));
    assert_eq!(Flow::open("", key, 1_000), Err(FlowError::Forged));
    assert!(flow.state_matches(&flow.state.clone()));
    assert!(!flow.state_matches("x"));
    assert!(!flow.state_matches(""));
}

#[test]
fn jwts_and_hub_tokens_are_told_apart() {
    assert!(is_jwt("a.b.c"));
    assert!(!is_jwt("snug_abcdefABCDEF0123-_"));
    assert!(!is_jwt("a.b"));
}
