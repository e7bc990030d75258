//! Every acceptance and refusal of `snug_identity::verify`, as a table, against keys of all three
//! algorithms signed by the test issuer's signer (ring, independent of the verifier).

use serde_json::{Value, json};
use snug_identity::{KeySet, Policy, Refusal, SKEW_SECS, peek, verify};
use snug_test_support::oidc::{
    SigningKey, forge_alg_none, forge_hs256_with_public_key, merged, tamper_claims,
    tamper_signature,
};

const ISS: &str = "https://id.example/realms/snug";
const AUD: &str = "snug-hub";
const NOW: u64 = 1_800_000_000;

fn claims(edit: Value) -> Value {
    merged(
        json!({
            "iss": ISS, "aud": AUD, "sub": "u-123", "exp": NOW + 300, "iat": NOW,
            "preferred_username": "alice", "groups": ["staff", "snug-users"], "tier": "gold",
        }),
        &edit,
    )
}

struct Keys {
    rsa: SigningKey,
    ec: SigningKey,
    ed: SigningKey,
    set: KeySet,
}

fn keys() -> Keys {
    let rsa = SigningKey::rsa("rsa-1");
    let ec = SigningKey::p256("ec-1");
    let ed = SigningKey::ed25519("ed-1");
    let doc = json!({"keys": [rsa.jwk(), ec.jwk(), ed.jwk(),
        // Skipped, not refused: an encryption key and a curve the hub does not use.
        {"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
        {"kty": "EC", "kid": "p384", "crv": "P-384", "x": "AA", "y": "AA"}]});
    let set = KeySet::parse(doc.to_string().as_bytes()).expect("jwks");
    assert_eq!(set.keys().len(), 3);
    Keys { rsa, ec, ed, set }
}

fn policy(required: Option<&str>) -> Policy {
    Policy::new(AUD, None, required).expect("policy")
}

#[test]
fn every_acceptance_and_refusal() {
    let k = keys();
    let ok = |key: &SigningKey, edit: Value| key.sign(&claims(edit));
    let header = |key: &SigningKey, edit: Value| {
        key.sign_raw(
            &merged(
                json!({"alg": key.alg(), "kid": key.kid(), "typ": "JWT"}),
                &edit,
            ),
            &claims(json!({})),
        )
    };
    type Case = (
        &'static str,
        String,
        Option<&'static str>,
        Result<&'static str, Refusal>,
    );
    let cases: Vec<Case> = vec![
        ("RS256", ok(&k.rsa, json!({})), None, Ok("u-123")),
        ("ES256", ok(&k.ec, json!({})), None, Ok("u-123")),
        ("EdDSA", ok(&k.ed, json!({})), None, Ok("u-123")),
        (
            "aud as an array",
            ok(&k.rsa, json!({"aud": ["other", AUD]})),
            None,
            Ok("u-123"),
        ),
        (
            "exp within the skew",
            ok(&k.rsa, json!({"exp": NOW - SKEW_SECS + 1})),
            None,
            Ok("u-123"),
        ),
        (
            "nbf within the skew",
            ok(&k.rsa, json!({"nbf": NOW + SKEW_SECS})),
            None,
            Ok("u-123"),
        ),
        (
            "fractional exp",
            ok(&k.ec, json!({"exp": (NOW + 10) as f64 + 0.5})),
            None,
            Ok("u-123"),
        ),
        (
            "required string claim",
            ok(&k.rsa, json!({})),
            Some("tier=gold"),
            Ok("u-123"),
        ),
        (
            "required group",
            ok(&k.rsa, json!({})),
            Some("groups=snug-users"),
            Ok("u-123"),
        ),
        (
            "no kid, one key of the alg",
            k.ed.sign_raw(&json!({"alg": "EdDSA"}), &claims(json!({}))),
            None,
            Ok("u-123"),
        ),
        (
            "expired",
            ok(&k.rsa, json!({"exp": NOW - SKEW_SECS})),
            None,
            Err(Refusal::Expired),
        ),
        (
            "not yet valid",
            ok(&k.rsa, json!({"nbf": NOW + SKEW_SECS + 1})),
            None,
            Err(Refusal::NotYetValid),
        ),
        (
            "wrong issuer",
            ok(&k.rsa, json!({"iss": "https://id.example/realms/other"})),
            None,
            Err(Refusal::WrongIssuer(Some(
                "https://id.example/realms/other".into(),
            ))),
        ),
        (
            "issuer with a trailing slash",
            ok(&k.rsa, json!({"iss": format!("{ISS}/")})),
            None,
            Err(Refusal::WrongIssuer(Some(format!("{ISS}/")))),
        ),
        (
            "no issuer",
            ok(&k.rsa, json!({"iss": null})),
            None,
            Err(Refusal::WrongIssuer(None)),
        ),
        (
            "wrong audience",
            ok(&k.rsa, json!({"aud": "other"})),
            None,
            Err(Refusal::WrongAudience),
        ),
        (
            "audience array without ours",
            ok(&k.rsa, json!({"aud": ["a", "b"]})),
            None,
            Err(Refusal::WrongAudience),
        ),
        (
            "no audience",
            ok(&k.rsa, json!({"aud": null})),
            None,
            Err(Refusal::WrongAudience),
        ),
        (
            "no exp",
            ok(&k.rsa, json!({"exp": null})),
            None,
            Err(Refusal::MissingClaim("exp".into())),
        ),
        (
            "exp not a number",
            ok(&k.rsa, json!({"exp": "soon"})),
            None,
            Err(Refusal::MissingClaim("exp".into())),
        ),
        (
            "no sub",
            ok(&k.rsa, json!({"sub": null})),
            None,
            Err(Refusal::MissingClaim("sub".into())),
        ),
        (
            "empty sub",
            ok(&k.rsa, json!({"sub": ""})),
            None,
            Err(Refusal::MissingClaim("sub".into())),
        ),
        (
            "sub not a string",
            ok(&k.rsa, json!({"sub": 7})),
            None,
            Err(Refusal::MissingClaim("sub".into())),
        ),
        (
            "required claim absent",
            ok(&k.rsa, json!({"tier": null})),
            Some("tier=gold"),
            Err(Refusal::RequiredClaimAbsent("tier".into())),
        ),
        (
            "required claim other value",
            ok(&k.rsa, json!({"tier": "silver"})),
            Some("tier=gold"),
            Err(Refusal::RequiredClaimAbsent("tier".into())),
        ),
        (
            "required group absent",
            ok(&k.rsa, json!({"groups": ["staff"]})),
            Some("groups=snug-users"),
            Err(Refusal::RequiredClaimAbsent("groups".into())),
        ),
        (
            "unknown kid",
            header(&k.rsa, json!({"kid": "rsa-9"})),
            None,
            Err(Refusal::UnknownKid(Some("rsa-9".into()))),
        ),
        (
            "no kid, several RSA keys? one; EC key named for RS256",
            header(&k.rsa, json!({"kid": "ec-1"})),
            None,
            Err(Refusal::DisallowedAlg("RS256".into())),
        ),
        (
            "ES256 header on the RSA key",
            header(&k.ec, json!({"kid": "rsa-1"})),
            None,
            Err(Refusal::DisallowedAlg("ES256".into())),
        ),
        (
            "alg none",
            forge_alg_none("rsa-1", &claims(json!({}))),
            None,
            Err(Refusal::DisallowedAlg("none".into())),
        ),
        (
            "HS256 keyed by the RSA public key",
            forge_hs256_with_public_key(&k.rsa, &claims(json!({})), &k.rsa.public_bytes()),
            None,
            Err(Refusal::DisallowedAlg("HS256".into())),
        ),
        (
            "HS256 keyed by the JWK text",
            forge_hs256_with_public_key(
                &k.ec,
                &claims(json!({})),
                k.ec.jwk().to_string().as_bytes(),
            ),
            None,
            Err(Refusal::DisallowedAlg("HS256".into())),
        ),
        (
            "RS512",
            header(&k.rsa, json!({"alg": "RS512"})),
            None,
            Err(Refusal::DisallowedAlg("RS512".into())),
        ),
        (
            "tampered signature RS256",
            tamper_signature(&ok(&k.rsa, json!({}))),
            None,
            Err(Refusal::BadSignature),
        ),
        (
            "tampered signature ES256",
            tamper_signature(&ok(&k.ec, json!({}))),
            None,
            Err(Refusal::BadSignature),
        ),
        (
            "tampered signature EdDSA",
            tamper_signature(&ok(&k.ed, json!({}))),
            None,
            Err(Refusal::BadSignature),
        ),
        (
            "tampered claims",
            tamper_claims(&ok(&k.rsa, json!({})), &claims(json!({"sub": "admin"}))),
            None,
            Err(Refusal::BadSignature),
        ),
        (
            "signed by a key not in the set under its kid",
            SigningKey::p256("ec-1").sign(&claims(json!({}))),
            None,
            Err(Refusal::BadSignature),
        ),
        (
            "crit header",
            header(&k.rsa, json!({"crit": ["exp"]})),
            None,
            Err(Refusal::Malformed("the header has crit extensions")),
        ),
        (
            "two parts",
            "eyJhbGciOiJSUzI1NiJ9.e30".to_owned(),
            None,
            Err(Refusal::Malformed("not three dot-separated parts")),
        ),
        (
            "garbage",
            "a.b.c".to_owned(),
            None,
            Err(Refusal::Malformed(
                "the header is not a base64url JSON object",
            )),
        ),
        (
            "claims not an object",
            k.rsa
                .sign_raw(&json!({"alg": "RS256", "kid": "rsa-1"}), &json!([1])),
            None,
            Err(Refusal::Malformed(
                "the claims are not a base64url JSON object",
            )),
        ),
        (
            "empty signature",
            format!(
                "{}.",
                ok(&k.rsa, json!({})).rsplit_once('.').expect("jws").0
            ),
            None,
            Err(Refusal::BadSignature),
        ),
        (
            "huge",
            "a".repeat(20_000),
            None,
            Err(Refusal::Malformed("longer than any token the hub accepts")),
        ),
    ];
    let mut failures = Vec::new();
    for (name, token, required, want) in &cases {
        let got = verify(token, ISS, &k.set, &policy(*required), NOW).map(|c| c.subject);
        let want = want.clone().map(str::to_owned);
        if got != want {
            failures.push(format!("{name}: got {got:?}, want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn claims_carry_issuer_subject_name_and_nonce() {
    let k = keys();
    let token = k.ec.sign(&claims(json!({"nonce": "n-1"})));
    let c = verify(&token, ISS, &k.set, &policy(None), NOW).expect("valid");
    assert_eq!(c.issuer, ISS);
    assert_eq!(c.subject, "u-123");
    assert_eq!(c.display_name.as_deref(), Some("alice"));
    assert_eq!(c.nonce.as_deref(), Some("n-1"));
    assert_eq!(c.expires_at, NOW + 300);
    // Another user claim names the user.
    let by_email = Policy::new(AUD, Some("email"), None).expect("policy");
    let token = k.rsa.sign(&claims(json!({"email": "a@id.example"})));
    assert_eq!(
        verify(&token, ISS, &k.set, &by_email, NOW)
            .expect("valid")
            .subject,
        "a@id.example"
    );
    let unverified = peek(&token).expect("peek");
    assert_eq!(unverified.kid.as_deref(), Some("rsa-1"));
    assert_eq!(unverified.issuer.as_deref(), Some(ISS));
}

#[test]
fn without_a_kid_an_ambiguous_key_choice_is_refused() {
    let a = SigningKey::p256("a");
    let b = SigningKey::p256("b");
    let doc = json!({"keys": [a.jwk(), b.jwk()]});
    let set = KeySet::parse(doc.to_string().as_bytes()).expect("jwks");
    let token = a.sign_raw(&json!({"alg": "ES256"}), &claims(json!({})));
    assert_eq!(
        verify(&token, ISS, &set, &policy(None), NOW),
        Err(Refusal::UnknownKid(None))
    );
}

#[test]
fn key_sets_skip_broken_and_foreign_keys_and_refuse_a_set_of_broken_ones() {
    let k = keys();
    let mut rsa = k.rsa.jwk();
    rsa["alg"] = json!("RS512");
    let skipped = json!({"keys": [rsa, {"kty": "oct", "k": "c2VjcmV0"}]});
    assert!(
        KeySet::parse(skipped.to_string().as_bytes())
            .expect("jwks")
            .keys()
            .is_empty()
    );
    for bad in [
        json!({"keys": [{"kty": "RSA", "kid": "short", "n": "AQAB", "e": "AQAB"}]}),
        json!({"keys": [{"kty": "EC", "kid": "e", "crv": "P-256", "x": "AA"}]}),
        json!({"keys": [{"kty": "OKP", "kid": "o", "crv": "Ed25519", "x": "AAAA"}]}),
        json!({"nokeys": []}),
    ] {
        assert!(KeySet::parse(bad.to_string().as_bytes()).is_err(), "{bad}");
    }
    assert!(KeySet::parse(b"not json").is_err());
    // One short RSA key among good ones costs only itself (issue 36 point 10).
    let good = SigningKey::p256("good");
    let mixed = json!({"keys": [
        {"kty": "RSA", "kid": "short", "n": "AQAB", "e": "AQAB"},
        good.jwk(),
    ]});
    let set = KeySet::parse(mixed.to_string().as_bytes()).expect("the good key is kept");
    assert_eq!(set.keys().len(), 1);
    assert!(set.has_kid("good") && !set.has_kid("short"));
    let token = good.sign(&claims(json!({})));
    assert!(verify(&token, ISS, &set, &policy(None), NOW).is_ok());
}

#[test]
fn policies_refuse_unusable_settings() {
    assert!(Policy::new("", None, None).is_err());
    assert!(Policy::new(AUD, Some(" "), None).is_err());
    for bad in ["groups", "=x", "groups=", "   "] {
        let result = Policy::new(AUD, None, Some(bad));
        // An all-blank setting means "none".
        assert_eq!(result.is_err(), bad.trim() != "", "{bad:?}");
    }
}
