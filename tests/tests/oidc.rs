//! OpenID Connect end to end (issue 20, points 1-3): a hub trusting a test issuer started here
//! (`snug_test_support::oidc::Issuer`), bearer JWTs beside hub tokens, first-login provisioning,
//! every refusal the same 401, the JWKS refetch limit under a flood of forged `kid`s, a key
//! rotation mid-test, the browser login followed redirect by redirect, and its session's bound
//! (issue 36 point 6), after which the next login checks the required claim again.

use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use serde_json::json;
use snug_e2e::{Answer, Http, Hub, OCTET, Options, Payload, assert_error, bearer, get_userdb};
use snug_gateway::oidc::OidcArgs;
use snug_test_support::oidc::{
    Issuer, SigningKey, forge_alg_none, forge_hs256_with_public_key, merged, tamper_signature,
};

const INTERVAL: Duration = Duration::from_millis(1500);

async fn hub_trusting(issuer: &Issuer) -> (Hub, Http) {
    hub_with_session_bound(issuer, None).await
}

/// As [`hub_trusting`], with `SNUG_OIDC_SESSION_MAX_AGE` set to `session_max_age`.
async fn hub_with_session_bound(issuer: &Issuer, session_max_age: Option<Duration>) -> (Hub, Http) {
    let hub = Hub::start(Options {
        oidc: Some(OidcArgs {
            issuers: vec![issuer.url().to_owned()],
            audience: Some(issuer.audience()),
            required_claim: Some("groups=snug-users".to_owned()),
            jwks_min_interval: Some(INTERVAL),
            session_max_age,
            ..OidcArgs::default()
        }),
        ..Options::default()
    })
    .await;
    let http = Http::new(hub.http);
    (hub, http)
}

fn member() -> serde_json::Value {
    json!({"groups": ["staff", "snug-users"]})
}

async fn me(http: &Http, token: &str) -> Answer {
    http.send(
        "GET",
        "/auth/me",
        &[("authorization", &bearer(token))],
        Payload::Empty,
    )
    .await
}

#[tokio::test]
async fn issuer_tokens_are_accepted_and_every_refusal_is_the_same_401() {
    let issuer = Issuer::start_at_path("/realms/snug").await;
    let (hub, http) = hub_trusting(&issuer).await;
    let hub_token = hub.add_user("bob");

    // First login provisions the user record, and nothing else: no image.
    let token = issuer.token_with("alice", member());
    let first = me(&http, &token).await;
    assert_eq!(
        first.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&first.body)
    );
    // Qualified by the issuer's host: no operator's name can be the same (issue 36 point 10).
    assert_eq!(first.json()["name"], "alice@127.0.0.1");
    assert_eq!(first.json()["via"], "bearer");
    let user_id = first.json()["userId"].as_str().expect("id").to_owned();
    let again = me(&http, &issuer.token_with("alice", member())).await;
    assert_eq!(
        again.json()["userId"],
        user_id,
        "the same issuer + subject, the same user"
    );
    let users = hub.list_users();
    assert_eq!(users.iter().filter(|u| u.user.id == user_id).count(), 1);
    let provisioned = users.iter().find(|u| u.user.id == user_id).expect("user");
    assert!(
        provisioned.tokens.is_empty(),
        "first login issues no hub token"
    );
    assert_eq!(provisioned.identities.len(), 1);
    let image = get_userdb(&http, &token).await;
    assert_error(&image, 404, "NOT_FOUND");
    // Hub tokens keep working beside OIDC.
    assert_eq!(me(&http, &hub_token).await.json()["name"], "bob");

    let now = snug_test_support::oidc::now();
    let stranger = SigningKey::p256("rsa-1");
    let unpublished = SigningKey::ed25519("ed-unpublished");
    let valid = issuer.claims("carol");
    let valid = merged(valid, &member());
    let signer = issuer.signer();
    let refused: Vec<(&str, String)> = vec![
        (
            "expired",
            issuer.token_with("carol", merged(member(), &json!({"exp": now - 120}))),
        ),
        (
            "not yet valid",
            issuer.token_with("carol", merged(member(), &json!({"nbf": now + 600}))),
        ),
        (
            "wrong audience",
            issuer.token_with("carol", merged(member(), &json!({"aud": "another-app"}))),
        ),
        (
            "wrong issuer",
            issuer.token_with(
                "carol",
                merged(member(), &json!({"iss": "http://127.0.0.1:1/realms/snug"})),
            ),
        ),
        ("unknown kid", unpublished.sign(&valid)),
        ("alg none", forge_alg_none("rsa-1", &valid)),
        (
            "HMAC with the public key",
            forge_hs256_with_public_key(&signer, &valid, &signer.public_bytes()),
        ),
        (
            "HMAC with the JWK text",
            forge_hs256_with_public_key(&signer, &valid, signer.jwk().to_string().as_bytes()),
        ),
        (
            "tampered signature",
            tamper_signature(&issuer.token_with("carol", member())),
        ),
        ("another key under the published kid", stranger.sign(&valid)),
        ("required claim absent", issuer.token("carol")),
        (
            "no subject",
            issuer.token_with("carol", json!({"groups": ["snug-users"], "sub": null})),
        ),
        ("not a token at all", "a.b.c".to_owned()),
    ];
    let unknown_hub_token = me(&http, "snug_not-a-token").await;
    assert_error(&unknown_hub_token, 401, "UNAUTHENTICATED");
    for (case, token) in &refused {
        let answer = me(&http, token).await;
        assert_eq!(answer.status, 401, "{case}");
        assert_error(&answer, 401, "UNAUTHENTICATED");
        assert_eq!(
            answer.body, unknown_hub_token.body,
            "{case}: the same answer as any bad token"
        );
    }
    // Nobody was provisioned by a refused token.
    let names: Vec<String> = hub.list_users().into_iter().map(|u| u.user.name).collect();
    assert!(!names.iter().any(|n| n.starts_with("carol")), "{names:?}");

    // A disabled user's valid token is the same 401.
    hub.disable_user("alice@127.0.0.1");
    let disabled = me(&http, &issuer.token_with("alice", member())).await;
    assert_error(&disabled, 401, "UNAUTHENTICATED");
    assert_eq!(disabled.body, unknown_hub_token.body);
}

#[tokio::test]
async fn forged_kids_cannot_make_the_hub_hammer_the_issuer_and_rotation_works() {
    let issuer = Issuer::start().await;
    let (_hub, http) = hub_trusting(&issuer).await;
    let old_token = issuer.token_with("alice", member());
    assert_eq!(me(&http, &old_token).await.status, 200);
    let after_first = issuer.jwks_fetches();
    assert_eq!(after_first, 1);

    // A flood of tokens naming kids the issuer never had.
    let claims = merged(issuer.claims("mallory"), &member());
    let flood: Vec<String> = (0..40)
        .map(|i| SigningKey::ed25519(&format!("forged-{i}")).sign(&claims))
        .collect();
    let answers = futures::future::join_all(flood.iter().map(|t| me(&http, t))).await;
    for answer in &answers {
        assert_error(answer, 401, "UNAUTHENTICATED");
    }
    assert!(
        issuer.jwks_fetches() <= after_first + snug_gateway::oidc::REFETCH_BURST,
        "{} JWKS fetches for 40 forged kids within one interval",
        issuer.jwks_fetches()
    );

    // Rotation: a new key is published and signs; its first token may come before the hub may
    // fetch again, so it is tried until the interval has passed.
    let new_key = SigningKey::p256("ec-2");
    issuer.add_key(new_key.clone());
    issuer.sign_with(new_key);
    tokio::time::sleep(INTERVAL).await;
    let fetches = issuer.jwks_fetches();
    let rotated = me(&http, &issuer.token_with("alice", member())).await;
    assert_eq!(
        rotated.status, 200,
        "the new kid is accepted after one refetch"
    );
    assert_eq!(issuer.jwks_fetches(), fetches + 1);
    // The old key still verifies while it is published and cached.
    assert_eq!(me(&http, &old_token).await.status, 200);

    // The old key is dropped; after the next refresh its tokens are refused.
    issuer.drop_key("rsa-1");
    tokio::time::sleep(INTERVAL).await;
    let forged = SigningKey::ed25519("forged-refresh").sign(&claims);
    assert_error(&me(&http, &forged).await, 401, "UNAUTHENTICATED");
    assert_error(&me(&http, &old_token).await, 401, "UNAUTHENTICATED");
    assert_eq!(
        me(&http, &issuer.token_with("alice", member()))
            .await
            .status,
        200
    );
}

/// Issue 36 point 10: a key rotated in just after a stray unknown `kid` is fetched at once (the
/// refetch budget allows a small burst), and a token whose subject no user record can hold is
/// the uniform 401, not a 503.
#[tokio::test]
async fn a_key_rotated_in_after_a_stray_kid_is_accepted_at_once_and_an_overlong_subject_is_401() {
    let issuer = Issuer::start().await;
    let (_hub, http) = hub_trusting(&issuer).await;
    assert_eq!(
        me(&http, &issuer.token_with("alice", member()))
            .await
            .status,
        200
    );
    let stray = SigningKey::ed25519("stray").sign(&merged(issuer.claims("alice"), &member()));
    assert_error(&me(&http, &stray).await, 401, "UNAUTHENTICATED");
    let fetches = issuer.jwks_fetches();
    let rotated = SigningKey::p256("ec-rotated");
    issuer.add_key(rotated.clone());
    issuer.sign_with(rotated);
    assert_eq!(
        me(&http, &issuer.token_with("alice", member()))
            .await
            .status,
        200,
        "the rotated key is accepted without waiting out the interval"
    );
    assert_eq!(issuer.jwks_fetches(), fetches + 1);

    let overlong = issuer.token_with(&"s".repeat(300), member());
    assert_error(&me(&http, &overlong).await, 401, "UNAUTHENTICATED");
}

/// A GET to an absolute URL (the issuer), with optional cookies; the answer unread but headers.
async fn get_url(url: &str) -> (u16, http::HeaderMap) {
    let client: Client<_, Full<bytes::Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let response = client
        .request(
            http::Request::get(url)
                .body(Full::new(bytes::Bytes::new()))
                .expect("request"),
        )
        .await
        .expect("GET");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let _ = response.into_body().collect().await;
    (status, headers)
}

/// `/auth/login?return_to=…` → the issuer: the callback path-and-query the issuer redirects to,
/// and the flow cookie.
async fn start_login(http: &Http, hub: &Hub, return_to: &str, issuer: &Issuer) -> (String, String) {
    let login = http
        .send(
            "GET",
            &format!(
                "/auth/login?return_to={}",
                snug_test_support::oidc::form_encode(return_to)
            ),
            &[],
            Payload::Empty,
        )
        .await;
    assert_eq!(
        login.status,
        303,
        "{:?}",
        String::from_utf8_lossy(&login.body)
    );
    let to_issuer = login.header("location").to_owned();
    assert!(
        to_issuer.starts_with(&issuer.authorization_endpoint()),
        "{to_issuer}"
    );
    for part in [
        "code_challenge_method=S256",
        "response_type=code",
        "nonce=",
        "state=",
    ] {
        assert!(to_issuer.contains(part), "{to_issuer} lacks {part}");
    }
    let flow = login.cookie("snug_oidc_flow");
    let (status, headers) = get_url(&to_issuer).await;
    assert!(
        matches!(status, 302 | 303 | 307),
        "the issuer approves: {status}"
    );
    let back = headers
        .get("location")
        .and_then(|v| v.to_str().ok())
        .expect("location")
        .to_owned();
    let path = back
        .strip_prefix(&hub.url())
        .unwrap_or_else(|| panic!("the issuer sends the browser to the hub: {back}"))
        .to_owned();
    assert!(path.starts_with("/auth/callback?"), "{path}");
    (path, flow)
}

#[tokio::test]
async fn the_browser_login_ends_in_the_hubs_own_session() {
    let issuer = Issuer::start().await;
    issuer.set_extra_claims(member());
    let (hub, http) = hub_trusting(&issuer).await;

    // A return_to on an origin the hub does not list is refused before anything else.
    for bad in [
        "https://evil.example/",
        "//evil.example/x",
        "https://app.example.evil.example/",
    ] {
        let answer = http
            .send(
                "GET",
                &format!(
                    "/auth/login?return_to={}",
                    snug_test_support::oidc::form_encode(bad)
                ),
                &[],
                Payload::Empty,
            )
            .await;
        assert_error(&answer, 400, "BAD_REQUEST");
    }

    let (callback, flow) = start_login(&http, &hub, "https://app.example/after", &issuer).await;
    let flow_cookie = format!("snug_oidc_flow={flow}");

    // A callback whose state is not the flow's is refused, and so is one without the cookie.
    let tampered = callback.replace("state=", "state=x");
    let bad_state = http
        .send(
            "GET",
            &tampered,
            &[("cookie", &flow_cookie)],
            Payload::Empty,
        )
        .await;
    assert_error(&bad_state, 400, "BAD_REQUEST");
    let no_cookie = http.send("GET", &callback, &[], Payload::Empty).await;
    assert_error(&no_cookie, 400, "BAD_REQUEST");

    let done = http
        .send(
            "GET",
            &callback,
            &[("cookie", &flow_cookie)],
            Payload::Empty,
        )
        .await;
    assert_eq!(
        done.status,
        303,
        "{:?}",
        String::from_utf8_lossy(&done.body)
    );
    assert_eq!(done.header("location"), "https://app.example/after");
    let session = done.cookie("snug_session");
    let csrf = done.cookie("snug_csrf");
    assert_eq!(
        done.cookie("snug_oidc_flow"),
        "",
        "the flow cookie is cleared"
    );

    // The code was used once: replaying the callback is refused by the issuer, so by the hub.
    let replay = http
        .send(
            "GET",
            &callback,
            &[("cookie", &flow_cookie)],
            Payload::Empty,
        )
        .await;
    assert_error(&replay, 401, "UNAUTHENTICATED");

    // The session works as one from POST /auth/session: /auth/me tells the page its CSRF token.
    let jar = format!("snug_session={session}; snug_csrf={csrf}");
    let me = http
        .send(
            "GET",
            "/auth/me",
            &[("cookie", &jar), ("origin", "https://app.example")],
            Payload::Empty,
        )
        .await;
    assert_eq!(me.status, 200);
    assert_eq!(me.json()["via"], "session");
    assert_eq!(me.json()["name"], "alice@127.0.0.1");
    assert_eq!(me.json()["csrfToken"], csrf);
    assert_eq!(
        me.header("access-control-allow-origin"),
        "https://app.example"
    );

    // A write needs x-snug-csrf.
    let image = snug_e2e::userdb_vector("fresh-v6.export.snug");
    let without = http
        .send(
            "PUT",
            "/userdb",
            &[("cookie", &jar), OCTET, ("if-none-match", "*")],
            Payload::Whole(image.clone()),
        )
        .await;
    assert_error(&without, 403, "CSRF_REJECTED");
    let pushed = http
        .send(
            "PUT",
            "/userdb",
            &[
                ("cookie", &jar),
                OCTET,
                ("if-none-match", "*"),
                ("x-snug-csrf", &csrf),
            ],
            Payload::Whole(image),
        )
        .await;
    assert_eq!(
        pushed.status,
        204,
        "{:?}",
        String::from_utf8_lossy(&pushed.body)
    );

    // A disabled user cannot log in through the browser either.
    hub.disable_user("alice@127.0.0.1");
    let (callback, flow) = start_login(&http, &hub, "/", &issuer).await;
    let refused = http
        .send(
            "GET",
            &callback,
            &[("cookie", &format!("snug_oidc_flow={flow}"))],
            Payload::Empty,
        )
        .await;
    assert_error(&refused, 401, "UNAUTHENTICATED");
}

/// `GET /auth/me` with the `Cookie` header `jar`.
async fn me_with_cookie(http: &Http, jar: &str) -> Answer {
    http.send("GET", "/auth/me", &[("cookie", jar)], Payload::Empty)
        .await
}

/// Completes a browser login: the callback's answer.
async fn log_in(http: &Http, hub: &Hub, issuer: &Issuer) -> Answer {
    let (callback, flow) = start_login(http, hub, "/", issuer).await;
    http.send(
        "GET",
        &callback,
        &[("cookie", &format!("snug_oidc_flow={flow}"))],
        Payload::Empty,
    )
    .await
}

/// Issue 36 point 6: a browser session made from the issuer's token is refused once
/// `SNUG_OIDC_SESSION_MAX_AGE` has passed, so the browser logs in again and the issuer's claims
/// are checked again: a user the issuer dropped from the required group is then refused.
#[tokio::test]
async fn a_browser_session_ends_at_its_bound_and_the_next_login_checks_the_claim_again() {
    let bound = Duration::from_secs(3);
    let issuer = Issuer::start().await;
    issuer.set_extra_claims(member());
    let (hub, http) = hub_with_session_bound(&issuer, Some(bound)).await;

    // The token is presented between these two instants.
    let before = std::time::Instant::now();
    let done = log_in(&http, &hub, &issuer).await;
    let after = std::time::Instant::now();
    assert_eq!(
        done.status,
        303,
        "{:?}",
        String::from_utf8_lossy(&done.body)
    );
    let session = done.cookie("snug_session");
    let set = done.set_cookies();
    let attributes = &set
        .iter()
        .find(|c| c.0 == "snug_session")
        .expect("session cookie")
        .2;
    assert!(
        attributes.contains("Max-Age=3;"),
        "the cookie lasts the bound: {attributes}"
    );
    let jar = format!("snug_session={session}");
    let me_by_cookie = || me_with_cookie(&http, &jar);

    // The issuer drops the user from the group; within the bound the session still holds (the
    // bound is how long a change at the issuer may take to reach the hub).
    issuer.set_extra_claims(json!({"groups": ["staff"]}));
    assert_eq!(me_by_cookie().await.status, 200);
    assert!(
        before.elapsed() < bound,
        "the check within the bound ran late; the test proves nothing"
    );
    let expired = after + bound + Duration::from_millis(100);
    tokio::time::sleep(expired.saturating_duration_since(std::time::Instant::now())).await;
    assert_error(&me_by_cookie().await, 401, "UNAUTHENTICATED");

    // Logging in again asks the issuer, whose token now lacks the required claim.
    let refused = log_in(&http, &hub, &issuer).await;
    assert_error(&refused, 401, "UNAUTHENTICATED");
    // Back in the group, the next login starts a new session.
    issuer.set_extra_claims(member());
    let again = log_in(&http, &hub, &issuer).await;
    assert_eq!(again.status, 303);
    let renewed = format!("snug_session={}", again.cookie("snug_session"));
    let me = http
        .send("GET", "/auth/me", &[("cookie", &renewed)], Payload::Empty)
        .await;
    assert_eq!(me.status, 200);
    assert_eq!(me.json()["name"], "alice@127.0.0.1");
}

/// Issue 36 point 6: a session `POST /auth/session` makes from an issuer's token is bound the
/// same way, and ends when the user is disabled.
#[tokio::test]
async fn a_session_from_an_issuer_token_is_bounded_and_ends_with_its_user() {
    let bound = Duration::from_secs(3);
    let issuer = Issuer::start().await;
    let (hub, http) = hub_with_session_bound(&issuer, Some(bound)).await;
    let start = || async {
        http.send(
            "POST",
            "/auth/session",
            &[(
                "authorization",
                &bearer(&issuer.token_with("alice", member())),
            )],
            Payload::Empty,
        )
        .await
    };
    let before = std::time::Instant::now();
    let started = start().await;
    let after = std::time::Instant::now();
    assert_eq!(
        started.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&started.body)
    );
    let expires_at = started.json()["expiresAt"].as_u64().expect("expiresAt");
    let now = snug_test_support::oidc::now() * 1000;
    assert!(
        expires_at <= now + 3_000 + 1_000,
        "the session lasts the bound, not seven days: {expires_at} vs {now}"
    );
    let jar = format!("snug_session={}", started.cookie("snug_session"));
    let me_by_cookie = || me_with_cookie(&http, &jar);
    assert_eq!(me_by_cookie().await.status, 200);
    assert!(
        before.elapsed() < bound,
        "ran late; the test proves nothing"
    );
    let expired = after + bound + Duration::from_millis(100);
    tokio::time::sleep(expired.saturating_duration_since(std::time::Instant::now())).await;
    assert_error(&me_by_cookie().await, 401, "UNAUTHENTICATED");

    // A new one, ended by disabling the user well within its bound.
    let renewed = start().await;
    assert_eq!(renewed.status, 200);
    let jar = format!("snug_session={}", renewed.cookie("snug_session"));
    assert_eq!(
        http.send("GET", "/auth/me", &[("cookie", &jar)], Payload::Empty)
            .await
            .status,
        200
    );
    hub.disable_user("alice@127.0.0.1");
    let refused = http
        .send("GET", "/auth/me", &[("cookie", &jar)], Payload::Empty)
        .await;
    assert_error(&refused, 401, "UNAUTHENTICATED");
}
