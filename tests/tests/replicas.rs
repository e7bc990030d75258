//! Stateless gateways (issue 20, point 4): one sync service on PostgreSQL and two gateway
//! instances, each built and served on its own port with a data directory of its own, sharing one
//! users directory on PostgreSQL and one session secret. A session started on one is accepted by
//! the other; a compare-and-swap race between clients of both has one winner; a token revoked in
//! the directory is refused by both once they hear of it; a disabled user gets, everywhere, the
//! 401 an unknown token gets; a user provisioned by first login on one is the same user on the
//! other. Sessions end on every replica (issue 36 point 6): at a logout on either, when their
//! token is revoked, their user disabled or removed, and for an OpenID Connect session when its
//! bound has passed. A replica keeps the credentials it checked until the directory's change is
//! heard (pushed by PostgreSQL as it commits): each refusal after a change is awaited within
//! [`HEARD_WITHIN`] and the time it took is printed.
//!
//! Needs `SNUG_TEST_POSTGRES_URL` (skipped without it, unless `SNUG_REQUIRE_POSTGRES_TLS` says CI
//! runs PostgreSQL, as `.ci/run` does).

use std::{
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use snug_e2e::{
    Answer, Http, OCTET, Payload, assert_error, bearer, etag_revision, get_userdb, put_userdb,
    spawn_services, userdb_with_seeded_filler,
};
use snug_gateway::config::{
    AuthMode, GatewayConfig, OidcArgs, PostgresUrl, UsersConfig, UsersStore,
};
use snug_sync_service::{Backend, SyncConfig, SyncServer};
use snug_test_support::oidc::Issuer;
use snug_users::Directory;
use tokio::{net::TcpListener, sync::oneshot};

const SECRET: &str = "one session secret every replica shares, 32+ chars";
const ORIGIN: &str = "https://app.example";

/// The two gateways, the directory they share, and what keeps the services running.
struct Replicas {
    a: Http,
    b: Http,
    directory: Directory,
    _services: oneshot::Sender<()>,
    _dirs: tempfile::TempDir,
}

async fn replicas() -> Option<Replicas> {
    replicas_with(OidcArgs::default()).await
}

/// As [`replicas`], both gateways trusting the OpenID Connect settings `oidc`.
async fn replicas_with(oidc: OidcArgs) -> Option<Replicas> {
    replicas_each(oidc.clone(), oidc).await
}

/// As [`replicas`], gateway `a` with the OpenID Connect settings `oidc_a` and `b` with `oidc_b`
/// (a deployment part-way through changing them).
async fn replicas_each(oidc_a: OidcArgs, oidc_b: OidcArgs) -> Option<Replicas> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let url = snug_test_support::postgres_url()?;
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let tag = format!("{}_{n}", std::process::id());
    let dirs = tempfile::tempdir().expect("temp dir");

    let sync_config = SyncConfig {
        store: Backend::Postgres,
        postgres_url: Some(snug_sync_service::PostgresUrl::new(url.clone())),
        postgres_schema: Some(format!("replicas_sync_{tag}")),
        postgres_pool_size: 4,
        reclaim_interval: Duration::ZERO,
        ..SyncConfig::default()
    };
    let runtime = snug_rpc::runtime::Runtime::default();
    let store = snug_sync_service::open_store(&sync_config, &runtime)
        .await
        .expect("sync store on PostgreSQL");
    let sync = SyncServer::new(store, &sync_config, &runtime);
    let grpc_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let grpc = grpc_listener.local_addr().expect("addr");
    let (services, _task) = spawn_services(grpc_listener, sync, None);

    let users = UsersConfig {
        store: UsersStore::Postgres,
        postgres_url: Some(PostgresUrl(url.clone())),
        postgres_schema: Some(format!("replicas_users_{tag}")),
        postgres_pool_size: 4,
    };
    let directory = Directory::open(&users.directory(dirs.path()).expect("settings"))
        .await
        .expect("directory");
    assert!(matches!(directory, Directory::Postgres(_)));
    let mut gateways = Vec::new();
    for (name, oidc) in [("a", oidc_a), ("b", oidc_b)] {
        let config = GatewayConfig {
            auth: Some(AuthMode::On),
            cors_origins: vec![ORIGIN.to_owned()],
            session_secret: Some(SECRET.to_owned()),
            rate_limit_burst: Some(0),
            users: users.clone(),
            oidc,
            ..GatewayConfig::for_tests()
        };
        // Each replica has a data directory of its own: nothing is shared through files.
        let state = snug_gateway::build(
            &config,
            dirs.path().join(name),
            snug_gateway::Addresses::all(&format!("http://{grpc}")),
            snug_gateway::Runtime::new(snug_files::sealed::Sealer::disabled()),
        )
        .await
        .expect("gateway");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        gateways.push(Http::new(listener.local_addr().expect("addr")));
        tokio::spawn(snug_gateway::serve(state, listener, std::future::pending()));
    }
    let b = gateways.pop().expect("b");
    let a = gateways.pop().expect("a");
    Some(Replicas {
        a,
        b,
        directory,
        _services: services,
        _dirs: dirs,
    })
}

async fn me(http: &Http, headers: &[(&str, &str)]) -> Answer {
    http.send("GET", "/auth/me", headers, Payload::Empty).await
}

/// The most a replica may take to hear a change of the directory made elsewhere: pushed, so
/// milliseconds; the margin is a loaded machine's.
const HEARD_WITHIN: Duration = Duration::from_secs(5);

/// `GET /auth/me` with `headers` on `http` until it is refused or [`HEARD_WITHIN`] has passed:
/// the last answer.
async fn refused_soon(http: &Http, headers: &[(&str, &str)]) -> Answer {
    let started = std::time::Instant::now();
    loop {
        let answer = me(http, headers).await;
        if answer.status == 401 || started.elapsed() > HEARD_WITHIN {
            eprintln!("refused after {:?}", started.elapsed());
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A `Cookie` header with both session cookies, from a `POST /auth/session` answer.
fn cookies(answer: &Answer) -> String {
    answer
        .set_cookies()
        .iter()
        .map(|(name, value, _)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// What a 401 says, beside its status: everything a caller could tell two refusals apart by.
fn refusal(answer: &Answer) -> (u16, String, String, String) {
    (
        answer.status,
        answer.code(),
        answer.json()["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        answer.header("www-authenticate").to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_started_on_one_replica_is_accepted_by_the_other() {
    let Some(r) = replicas().await else { return };
    let (alice, token) = r.directory.add_user("alice").await.expect("add");
    let auth = bearer(&token.token);
    let started =
        r.a.send(
            "POST",
            "/auth/session",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_eq!(started.status, 200, "{:?}", started.body);
    let csrf = started.json()["csrfToken"]
        .as_str()
        .expect("csrf")
        .to_owned();
    let cookie = cookies(&started);
    let seen = me(&r.b, &[("cookie", &cookie)]).await;
    assert_eq!(seen.status, 200);
    assert_eq!(seen.json()["userId"], alice.id.as_str());
    assert_eq!(seen.json()["via"], "session");
    // A cookie-authenticated write on the other replica, CSRF double-submit included.
    let (image, _) = userdb_with_seeded_filler(512 * 1024, 7);
    let put =
        r.b.send(
            "PUT",
            "/userdb",
            &[
                ("cookie", &cookie),
                ("x-snug-csrf", &csrf),
                ("if-none-match", "*"),
                OCTET,
            ],
            Payload::Whole(image),
        )
        .await;
    assert_eq!(put.status, 204, "{:?}", put.body);
    let got =
        r.a.send("GET", "/userdb", &[("cookie", &cookie)], Payload::Empty)
            .await;
    assert_eq!(got.status, 200);
    assert_eq!(etag_revision(&got), etag_revision(&put));
    // Disabling the user ends the session on both replicas, and enabling them again does not
    // bring it back (issue 36 point 6).
    r.directory.disable("alice").await.expect("disable");
    for http in [&r.a, &r.b] {
        assert_error(
            &refused_soon(http, &[("cookie", &cookie)]).await,
            401,
            "UNAUTHENTICATED",
        );
    }
    r.directory.enable("alice").await.expect("enable");
    for http in [&r.a, &r.b] {
        assert_error(
            &me(http, &[("cookie", &cookie)]).await,
            401,
            "UNAUTHENTICATED",
        );
    }
}

/// Starts a session on `http` from `token`: the `Cookie` header and the CSRF token.
async fn start_session(http: &Http, token: &str) -> (String, String) {
    let started = http
        .send(
            "POST",
            "/auth/session",
            &[("authorization", &bearer(token))],
            Payload::Empty,
        )
        .await;
    assert_eq!(started.status, 200, "{:?}", started.body);
    let csrf = started.json()["csrfToken"]
        .as_str()
        .expect("csrf")
        .to_owned();
    (cookies(&started), csrf)
}

/// Whether the session `cookie` is refused, with the uniform 401, by both replicas (within
/// [`HEARD_WITHIN`]).
async fn refused_everywhere(r: &Replicas, cookie: &str) {
    for http in [&r.a, &r.b] {
        assert_error(
            &refused_soon(http, &[("cookie", cookie)]).await,
            401,
            "UNAUTHENTICATED",
        );
    }
}

/// Issue 36 point 6, across replicas: a session ends on both at a logout on either, when the
/// token it came from is revoked, and when its user is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_ends_on_every_replica_at_logout_revocation_and_removal() {
    let Some(r) = replicas().await else { return };
    let (_, token) = r.directory.add_user("erin").await.expect("add");
    let other = r.directory.issue_token("erin").await.expect("issue");

    // Logout on b ends a session started on a, for a copy of its cookie saved before.
    let (saved, csrf) = start_session(&r.a, &token.token).await;
    assert_eq!(me(&r.b, &[("cookie", &saved)]).await.status, 200);
    let logout =
        r.b.send(
            "POST",
            "/auth/logout",
            &[("cookie", &saved), ("x-snug-csrf", &csrf)],
            Payload::Empty,
        )
        .await;
    assert_eq!(logout.status, 204);
    refused_everywhere(&r, &saved).await;

    // Revoking the token ends its sessions, not those of the user's other token.
    let (from_token, _) = start_session(&r.a, &token.token).await;
    let (from_other, _) = start_session(&r.b, &other.token).await;
    r.directory.revoke_token(&token.id).await.expect("revoke");
    refused_everywhere(&r, &from_token).await;
    for http in [&r.a, &r.b] {
        assert_eq!(me(http, &[("cookie", &from_other)]).await.status, 200);
    }

    // Removing the user ends the rest.
    r.directory.remove_user("erin").await.expect("remove");
    refused_everywhere(&r, &from_other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cas_race_between_clients_of_both_replicas_has_one_winner() {
    let Some(r) = replicas().await else { return };
    let (_, token) = r.directory.add_user("racer").await.expect("add");
    let put = |http: &Http, condition: (&'static str, String), seed: u64| {
        let (http, token) = (http.clone(), token.token.clone());
        async move {
            let (image, _) = userdb_with_seeded_filler(512 * 1024, seed);
            put_userdb(&http, &token, (condition.0, &condition.1), image).await
        }
    };
    let first = put(&r.a, ("if-none-match", "*".to_owned()), 1).await;
    assert_eq!(first.status, 204, "{:?}", first.body);
    let mut current = etag_revision(&first);
    for round in 0..6u64 {
        let condition = ("if-match", format!("\"{current}\""));
        let (from_a, from_b) = tokio::join!(
            put(&r.a, condition.clone(), 100 + 2 * round),
            put(&r.b, condition, 101 + 2 * round)
        );
        let (winner, loser) = match (from_a.status, from_b.status) {
            (204, 412) => (from_a, from_b),
            (412, 204) => (from_b, from_a),
            other => panic!("round {round}: one 204 and one 412 expected, got {other:?}"),
        };
        let won = etag_revision(&winner);
        assert_ne!(won, current, "round {round}");
        assert_eq!(
            etag_revision(&loser),
            won,
            "round {round}: the 412 carries the winner's ETag"
        );
        assert_eq!(loser.json()["revision"], won.as_str(), "round {round}");
        // Both replicas serve the winner.
        for http in [&r.a, &r.b] {
            let got = get_userdb(http, &token.token).await;
            assert_eq!(etag_revision(&got), won, "round {round}");
        }
        current = won;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_token_is_refused_by_every_replica_as_soon_as_the_revocation_is_heard() {
    let Some(r) = replicas().await else { return };
    let (_, kept) = r.directory.add_user("bob").await.expect("add");
    let revoked = r.directory.issue_token("bob").await.expect("issue");
    // Both replicas have admitted both tokens: nothing they might remember saves the revoked one.
    for http in [&r.a, &r.b] {
        for token in [&kept.token, &revoked.token] {
            assert_eq!(
                me(http, &[("authorization", &bearer(token))]).await.status,
                200
            );
        }
    }
    r.directory.revoke_token(&revoked.id).await.expect("revoke");
    for http in [&r.a, &r.b] {
        let refused = refused_soon(http, &[("authorization", &bearer(&revoked.token))]).await;
        assert_error(&refused, 401, "UNAUTHENTICATED");
        assert_eq!(
            me(http, &[("authorization", &bearer(&kept.token))])
                .await
                .status,
            200,
            "the user's other token still works"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_disabled_user_gets_everywhere_the_401_of_an_unknown_token() {
    let Some(r) = replicas().await else { return };
    let (_, token) = r.directory.add_user("carol").await.expect("add");
    let auth = bearer(&token.token);
    assert_eq!(me(&r.b, &[("authorization", &auth)]).await.status, 200);
    r.directory.disable("carol").await.expect("disable");
    // An unknown token of the same shape.
    let unknown = bearer(&format!("snug_{}", "A".repeat(43)));
    for http in [&r.a, &r.b] {
        refused_soon(http, &[("authorization", &auth)]).await;
        for (method, path) in [
            ("GET", "/auth/me"),
            ("GET", "/userdb"),
            ("GET", "/userdb/revisions"),
            ("POST", "/auth/session"),
        ] {
            let disabled = http
                .send(method, path, &[("authorization", &auth)], Payload::Empty)
                .await;
            let stranger = http
                .send(method, path, &[("authorization", &unknown)], Payload::Empty)
                .await;
            assert_error(&disabled, 401, "UNAUTHENTICATED");
            assert_eq!(refusal(&disabled), refusal(&stranger), "{method} {path}");
        }
    }
}

#[tokio::test]
async fn a_user_provisioned_by_first_login_on_one_replica_is_the_same_user_on_the_other() {
    let issuer = Issuer::start().await;
    let Some(replicas) = replicas_with(OidcArgs {
        issuers: vec![issuer.url().to_owned()],
        audience: Some(issuer.audience()),
        ..OidcArgs::default()
    })
    .await
    else {
        return;
    };
    let on_a = me(
        &replicas.a,
        &[("authorization", &bearer(&issuer.token("dana")))],
    )
    .await;
    assert_eq!(
        on_a.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&on_a.body)
    );
    let on_b = me(
        &replicas.b,
        &[("authorization", &bearer(&issuer.token("dana")))],
    )
    .await;
    assert_eq!(
        on_b.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&on_b.body)
    );
    assert_eq!(on_a.json()["userId"], on_b.json()["userId"]);
    let users = replicas.directory.list().await.expect("list");
    assert_eq!(users.len(), 1, "{users:?}");
    assert_eq!(users[0].identities.len(), 1);
    assert_eq!(users[0].identities[0].issuer, issuer.url());
    assert!(
        users[0].tokens.is_empty(),
        "first login issues no hub token"
    );

    // Disabled through the directory: both replicas refuse the next valid token.
    replicas
        .directory
        .disable(&users[0].user.name)
        .await
        .expect("disable");
    for http in [&replicas.a, &replicas.b] {
        let refused = me(http, &[("authorization", &bearer(&issuer.token("dana")))]).await;
        assert_error(&refused, 401, "UNAUTHENTICATED");
    }
}

/// Issue 36 point 6: a session made from an issuer's token is refused by both replicas once
/// `SNUG_OIDC_SESSION_MAX_AGE` has passed since that token was presented; a new token starts a
/// new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_openid_connect_session_ends_everywhere_after_its_bound() {
    let bound = Duration::from_secs(3);
    let issuer = Issuer::start().await;
    let Some(r) = replicas_with(OidcArgs {
        issuers: vec![issuer.url().to_owned()],
        audience: Some(issuer.audience()),
        session_max_age: Some(bound),
        ..OidcArgs::default()
    })
    .await
    else {
        return;
    };
    // The token is presented between these two instants.
    let before = std::time::Instant::now();
    let (cookie, _) = start_session(&r.a, &issuer.token("fay")).await;
    let after = std::time::Instant::now();
    for http in [&r.a, &r.b] {
        let seen = me(http, &[("cookie", &cookie)]).await;
        assert_eq!(seen.status, 200, "{:?}", seen.body);
        assert_eq!(seen.json()["via"], "session");
    }
    assert!(
        before.elapsed() < bound,
        "the checks within the bound ran late; the test proves nothing"
    );
    let expired = after + bound + Duration::from_millis(100);
    tokio::time::sleep(expired.saturating_duration_since(std::time::Instant::now())).await;
    refused_everywhere(&r, &cookie).await;
    let (again, _) = start_session(&r.b, &issuer.token("fay")).await;
    assert_eq!(me(&r.a, &[("cookie", &again)]).await.status, 200);
}

/// Issue 36 point 6: the bound is checked on every request against the gateway's own setting, so
/// a replica with a lower bound (or one that no longer trusts the issuer) refuses a session
/// another replica started and still admits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lower_bound_or_a_dropped_issuer_refuses_sessions_already_started() {
    let bound = Duration::from_secs(2);
    let issuer = Issuer::start().await;
    let trusting = |session_max_age| OidcArgs {
        issuers: vec![issuer.url().to_owned()],
        audience: Some(issuer.audience()),
        session_max_age,
        ..OidcArgs::default()
    };
    let Some(r) = replicas_each(trusting(None), trusting(Some(bound))).await else {
        return;
    };
    let after_start = |r: &Replicas| {
        let (http, token) = (r.a.clone(), issuer.token("gil"));
        async move {
            let (cookie, _) = start_session(&http, &token).await;
            (cookie, std::time::Instant::now())
        }
    };
    let (cookie, after) = after_start(&r).await;
    assert_eq!(me(&r.a, &[("cookie", &cookie)]).await.status, 200);
    let expired = after + bound + Duration::from_millis(100);
    tokio::time::sleep(expired.saturating_duration_since(std::time::Instant::now())).await;
    assert_error(
        &me(&r.b, &[("cookie", &cookie)]).await,
        401,
        "UNAUTHENTICATED",
    );
    assert_eq!(
        me(&r.a, &[("cookie", &cookie)]).await.status,
        200,
        "the default bound (12h) still admits it"
    );

    // A replica that trusts no issuer any more admits no session an issuer's token made, and
    // still admits a hub token's.
    let Some(r) = replicas_each(trusting(None), OidcArgs::default()).await else {
        return;
    };
    let (cookie, _) = after_start(&r).await;
    assert_eq!(me(&r.a, &[("cookie", &cookie)]).await.status, 200);
    assert_error(
        &me(&r.b, &[("cookie", &cookie)]).await,
        401,
        "UNAUTHENTICATED",
    );
    let (_, token) = r.directory.add_user("hal").await.expect("add");
    let (by_token, _) = start_session(&r.a, &token.token).await;
    assert_eq!(me(&r.b, &[("cookie", &by_token)]).await.status, 200);
}
