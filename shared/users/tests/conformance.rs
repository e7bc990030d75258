//! The directory's conformance suite, run on every backend: embedded SQLite always, PostgreSQL
//! when `SNUG_TEST_POSTGRES_URL` names a server (skipped otherwise, unless
//! `SNUG_REQUIRE_POSTGRES_TLS` says CI runs one, as `.ci/run` does).

use std::sync::atomic::{AtomicU32, Ordering};

use std::time::Duration;

use snug_users::{
    Directory, DirectoryConfig, OidcIdentity, PRUNE_BATCH, PgConfig, SessionCredential, SessionId,
    TOKEN_PREFIX, UsersError,
};

/// Where a directory lives; opening it twice gives two "replicas" of one directory.
enum Place {
    Sqlite(tempfile::TempDir),
    Postgres(PgConfig),
}

impl Place {
    fn name(&self) -> &'static str {
        match self {
            Place::Sqlite(_) => "sqlite",
            Place::Postgres(_) => "postgres",
        }
    }

    async fn open(&self) -> Directory {
        let config = match self {
            Place::Sqlite(dir) => DirectoryConfig::Sqlite {
                dir: dir.path().join("gateway"),
            },
            Place::Postgres(pg) => DirectoryConfig::Postgres(pg.clone()),
        };
        Directory::open(&config).await.expect("open the directory")
    }
}

/// A fresh place on every backend here.
fn places() -> Vec<Place> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let mut places = vec![Place::Sqlite(tempfile::tempdir().expect("temp dir"))];
    if let Some(url) = snug_test_support::postgres_url() {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        places.push(Place::Postgres(PgConfig {
            url,
            schema: Some(format!("users_conformance_{}_{n}", std::process::id())),
            pool_size: 8,
        }));
    }
    places
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_authenticate_their_user_and_nothing_else() {
    for place in places() {
        let at = place.name();
        let dir = place.open().await;
        let (alice, token) = dir.add_user("alice").await.expect("add");
        let (bob, _) = dir.add_user("bob").await.expect("add");
        assert_ne!(alice.id, bob.id, "{at}");
        assert!(!alice.disabled && alice.quota_bytes.is_none(), "{at}");
        assert!(token.token.starts_with(TOKEN_PREFIX), "{at}");
        let found = dir
            .authenticate_token(&token.token)
            .await
            .expect("lookup")
            .expect("known");
        assert_eq!(found.user, alice, "{at}");
        assert_eq!(found.token_id, token.id, "{at}");
        let long = format!("{}{}", token.token, "x".repeat(200));
        for unknown in [
            "snug_not-a-token",
            &token.token[1..],
            &token.token[..token.token.len() - 1],
            token.token.replace(TOKEN_PREFIX, "gnus_").as_str(),
            long.as_str(),
            "",
        ] {
            assert!(
                dir.authenticate_token(unknown)
                    .await
                    .expect("lookup")
                    .is_none(),
                "{at}: {unknown:?}"
            );
        }
        let second = dir.issue_token("alice").await.expect("issue");
        assert_ne!(second.token, token.token, "{at}");
        let listed = dir.list().await.expect("list");
        assert_eq!(
            listed
                .iter()
                .map(|u| (u.user.name.as_str(), u.tokens.len()))
                .collect::<Vec<_>>(),
            [("alice", 2), ("bob", 1)],
            "{at}"
        );
        assert!(
            listed[0].tokens.iter().any(|t| t.id == second.id),
            "{at}: list shows short ids"
        );
        assert!(dir.health().await.is_ok(), "{at}");
        if let Directory::Postgres(pg) = &dir {
            // The tables the class check of `pg.rs` covers are all there is.
            assert_eq!(
                pg.table_names().await.expect("tables"),
                ["hub_identities", "hub_sessions", "hub_tokens", "hub_users"]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_typed() {
    for place in places() {
        let at = place.name();
        let dir = place.open().await;
        dir.add_user("carol").await.expect("add");
        let refusals: Vec<(&str, Result<(), UsersError>)> = vec![
            ("add twice", dir.add_user("carol").await.map(drop)),
            ("empty name", dir.add_user("").await.map(drop)),
            ("control character", dir.add_user("a\nb").await.map(drop)),
            (
                "65 characters",
                dir.add_user(&"n".repeat(65)).await.map(drop),
            ),
            (
                "token for nobody",
                dir.issue_token("nobody").await.map(drop),
            ),
            (
                "revoke unknown",
                dir.revoke_token("00000000").await.map(drop),
            ),
            ("disable nobody", dir.disable("nobody").await.map(drop)),
            ("enable nobody", dir.enable("nobody").await.map(drop)),
            (
                "quota for nobody",
                dir.set_quota("nobody", Some(1)).await.map(drop),
            ),
            (
                "quota too large",
                dir.set_quota("carol", Some(u64::MAX)).await.map(drop),
            ),
            ("remove nobody", dir.remove_user("nobody").await.map(drop)),
            ("empty issuer", dir.provision("", "s", "n").await.map(drop)),
            (
                "empty subject",
                dir.provision("https://i", "", "n").await.map(drop),
            ),
        ];
        for (what, result) in refusals {
            let expected = match what {
                "add twice" => matches!(result, Err(UsersError::Exists(_))),
                "empty name" | "control character" | "65 characters" => {
                    matches!(result, Err(UsersError::InvalidName))
                }
                "revoke unknown" => matches!(result, Err(UsersError::NoSuchToken(_))),
                "quota too large" => matches!(result, Err(UsersError::InvalidQuota(_))),
                "empty issuer" | "empty subject" => {
                    matches!(result, Err(UsersError::InvalidIdentity))
                }
                _ => matches!(result, Err(UsersError::NoSuchUser(_))),
            };
            assert!(expected, "{at}: {what}: {result:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_is_refused_and_its_siblings_are_not() {
    for place in places() {
        let at = place.name();
        let dir = place.open().await;
        // A second replica of the same directory sees every change on its next lookup.
        let other = place.open().await;
        let (_, first) = dir.add_user("dave").await.expect("add");
        let second = dir.issue_token("dave").await.expect("issue");
        assert_eq!(
            dir.revoke_token(&first.id.to_uppercase())
                .await
                .expect("revoke"),
            "dave",
            "{at}"
        );
        assert!(
            other
                .authenticate_token(&first.token)
                .await
                .expect("lookup")
                .is_none(),
            "{at}"
        );
        assert!(
            other
                .authenticate_token(&second.token)
                .await
                .expect("lookup")
                .is_some(),
            "{at}"
        );
        assert!(
            matches!(
                dir.revoke_token(&first.id).await,
                Err(UsersError::NoSuchToken(_))
            ),
            "{at}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_user_is_an_unknown_one_until_enabled() {
    for place in places() {
        let at = place.name();
        let dir = place.open().await;
        let other = place.open().await;
        let (erin, token) = dir.add_user("erin").await.expect("add");
        let identity = ("https://id.example", "erin-sub");
        let provisioned = dir
            .provision(identity.0, identity.1, "Erin P")
            .await
            .expect("provision")
            .expect("enabled");
        assert!(dir.disable("erin").await.expect("disable").disabled, "{at}");
        dir.disable(&provisioned.name).await.expect("disable");
        assert!(
            other
                .authenticate_token(&token.token)
                .await
                .expect("lookup")
                .is_none(),
            "{at}"
        );
        assert!(
            other.user_by_id(&erin.id).await.expect("lookup").is_none(),
            "{at}"
        );
        assert!(
            other
                .provision(identity.0, identity.1, "Erin P")
                .await
                .expect("provision")
                .is_none(),
            "{at}: a disabled provisioned user"
        );
        let listed = other.list().await.expect("list");
        assert!(listed.iter().all(|u| u.user.disabled), "{at}");
        assert!(!dir.enable("erin").await.expect("enable").disabled, "{at}");
        assert_eq!(
            other
                .authenticate_token(&token.token)
                .await
                .expect("lookup")
                .map(|a| a.user.id),
            Some(erin.id.clone()),
            "{at}"
        );
        assert!(
            other.user_by_id(&erin.id).await.expect("lookup").is_some(),
            "{at}"
        );
        assert!(
            other
                .user_by_id(&provisioned.id)
                .await
                .expect("lookup")
                .is_none(),
            "{at}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_overrides_are_set_and_cleared() {
    for place in places() {
        let at = place.name();
        let dir = place.open().await;
        let (frank, token) = dir.add_user("frank").await.expect("add");
        for quota in [Some(1u64 << 30), Some(0), None, Some(i64::MAX as u64)] {
            assert_eq!(
                dir.set_quota("frank", quota)
                    .await
                    .expect("set")
                    .quota_bytes,
                quota,
                "{at}"
            );
            let seen = dir
                .authenticate_token(&token.token)
                .await
                .expect("lookup")
                .expect("known");
            assert_eq!(seen.user.quota_bytes, quota, "{at}");
            assert_eq!(
                dir.user_by_id(&frank.id)
                    .await
                    .expect("lookup")
                    .expect("known")
                    .quota_bytes,
                quota,
                "{at}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removal_ends_tokens_and_a_new_user_of_the_same_name_is_someone_else() {
    for place in places() {
        let at = place.name();
        let dir = place.open().await;
        let (old, token) = dir.add_user("gina").await.expect("add");
        assert_eq!(
            dir.remove_user("gina").await.expect("remove").id,
            old.id,
            "{at}"
        );
        assert!(
            dir.authenticate_token(&token.token)
                .await
                .expect("lookup")
                .is_none(),
            "{at}"
        );
        assert!(
            dir.user_by_id(&old.id).await.expect("lookup").is_none(),
            "{at}"
        );
        let (new, _) = dir.add_user("gina").await.expect("add again");
        assert_ne!(new.id, old.id, "{at}");
        // A provisioned user's identity goes with them.
        let first = dir
            .provision("https://id.example", "hal", "hal")
            .await
            .expect("provision")
            .expect("user");
        dir.remove_user("hal@id.example").await.expect("remove");
        let again = dir
            .provision("https://id.example", "hal", "hal")
            .await
            .expect("provision")
            .expect("user");
        assert_ne!(first.id, again.id, "{at}");
        assert_eq!(again.name, "hal@id.example", "{at}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_login_creates_the_record_and_identity_only() {
    for place in places() {
        let at = place.name();
        let dir = place.open().await;
        dir.add_user("ivy").await.expect("operator's ivy");
        let issuer = "https://id.example";
        let ivy = dir
            .provision(issuer, "sub-1", "ivy")
            .await
            .expect("provision")
            .expect("user");
        // Qualified by the issuer: the operator's ivy and the identity provider's never collide.
        assert_eq!(ivy.name, "ivy@id.example", "{at}");
        assert_eq!(
            dir.provision(issuer, "sub-1", "another display name")
                .await
                .expect("again")
                .expect("user"),
            ivy,
            "{at}: the same subject is the same user, whatever its display name now"
        );
        // The same subject text at another issuer is another person.
        let elsewhere = dir
            .provision("https://other.example", "sub-1", "ivy")
            .await
            .expect("provision")
            .expect("user");
        assert_ne!(elsewhere.id, ivy.id, "{at}");
        assert_eq!(elsewhere.name, "ivy@other.example", "{at}");
        // Another subject of the same issuer picking the same name gets the first free suffix.
        let second = dir
            .provision(issuer, "sub-2", "ivy")
            .await
            .expect("provision")
            .expect("user");
        assert_eq!(second.name, "ivy-2@id.example", "{at}");
        // An operator cannot take a provisioned name's form.
        assert!(matches!(
            dir.add_user("mallory@id.example").await,
            Err(snug_users::UsersError::InvalidName)
        ));
        let listed = dir.list().await.expect("list");
        let entry = listed.iter().find(|u| u.user.id == ivy.id).expect("listed");
        assert!(entry.tokens.is_empty(), "{at}: first login issues no token");
        assert_eq!(
            entry.identities,
            [OidcIdentity {
                issuer: issuer.to_owned(),
                subject: "sub-1".to_owned()
            }],
            "{at}"
        );
        // Every suffix taken (by other subjects who chose the same name): the hash-tagged name,
        // then exhaustion.
        for n in 3..=9 {
            let taker = dir
                .provision(issuer, &format!("taker-{n}"), "ivy")
                .await
                .expect("provision")
                .expect("user");
            assert_eq!(taker.name, format!("ivy-{n}@id.example"), "{at}");
        }
        let tagged = dir
            .provision(issuer, "sub-4", "ivy")
            .await
            .expect("provision")
            .expect("user");
        let names = snug_users::provisioned_names("ivy", issuer, "sub-4");
        assert_eq!(tagged.name, names[9], "{at}");
        let blocker = snug_users::provisioned_names("ivy", issuer, "sub-5");
        // Someone who chose the tagged name's base holds it first.
        let chosen = blocker[9].trim_end_matches("@id.example");
        let holder = dir
            .provision(issuer, "holder", chosen)
            .await
            .expect("provision")
            .expect("user");
        assert_eq!(holder.name, blocker[9], "{at}");
        assert!(
            matches!(
                dir.provision(issuer, "sub-5", "ivy").await,
                Err(UsersError::NamesExhausted(_))
            ),
            "{at}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_provisioning_one_subject_at_once_end_with_one_user() {
    for place in places() {
        let at = place.name();
        let replicas = [place.open().await, place.open().await];
        for round in 0..5 {
            let subject = format!("racer-{round}");
            let calls = (0..16).map(|i| {
                let dir = replicas[i % 2].clone();
                let subject = subject.clone();
                tokio::spawn(
                    async move { dir.provision("https://id.example", &subject, "racer").await },
                )
            });
            let results = futures::future::join_all(calls).await;
            let ids: std::collections::BTreeSet<String> = results
                .into_iter()
                .map(|r| r.expect("task").expect("provision").expect("user").id)
                .collect();
            assert_eq!(ids.len(), 1, "{at}: round {round}: {ids:?}");
        }
        let listed = replicas[0].list().await.expect("list");
        assert_eq!(listed.len(), 5, "{at}: one user per subject");
        let mut names: Vec<_> = listed.iter().map(|u| u.user.name.clone()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "racer-2@id.example",
                "racer-3@id.example",
                "racer-4@id.example",
                "racer-5@id.example",
                "racer@id.example"
            ],
            "{at}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_stored_hashed() {
    let place = Place::Sqlite(tempfile::tempdir().expect("dir"));
    let dir = place.open().await;
    let (_, token) = dir.add_user("alice").await.expect("add");
    drop(dir);
    let Place::Sqlite(root) = &place else {
        unreachable!()
    };
    let files = root.path().join("gateway");
    let secret = token.token.as_bytes();
    let mut seen = 0;
    for entry in std::fs::read_dir(&files).expect("read dir") {
        let bytes = std::fs::read(entry.expect("entry").path()).expect("read");
        seen += bytes.len();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret),
            "the token text is on disk"
        );
    }
    assert!(seen > 0);
}

/// A fixed "now" for the session cases, Unix milliseconds: the directory reads no clock for them.
const NOW: i64 = 1_700_000_000_000;
const HOUR: Duration = Duration::from_secs(3600);
const HOUR_MS: i64 = 3_600_000;

/// Whether `id` names a live session at `now`, read through `dir`.
async fn live(dir: &Directory, id: &SessionId, now: i64) -> bool {
    dir.session(id, now)
        .await
        .expect("session lookup")
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_session_lives_until_logout_expiry_or_revocation_of_its_token() {
    for place in places() {
        let at = place.name();
        let dir = place.open().await;
        // Every check reads through a second replica: nothing is remembered by the one that wrote.
        let other = place.open().await;
        let (alice, first) = dir.add_user("alice").await.expect("add");
        let second = dir.issue_token("alice").await.expect("issue");
        let session = dir
            .start_token_session(&first.token, NOW, HOUR)
            .await
            .expect("start")
            .expect("a live token starts a session");
        assert_eq!(session.user, alice, "{at}");
        assert_eq!(
            session.credential,
            SessionCredential::Token {
                token_id: first.id.clone()
            },
            "{at}"
        );
        assert_eq!(
            (session.created_at, session.expires_at),
            (NOW, NOW + HOUR_MS),
            "{at}"
        );
        assert_eq!(
            other.session(&session.id, NOW).await.expect("lookup"),
            Some(session.clone()),
            "{at}"
        );
        // Expiry is exclusive: the last millisecond is in, the expiry instant is out.
        assert!(live(&other, &session.id, NOW + HOUR_MS - 1).await, "{at}");
        assert!(!live(&other, &session.id, NOW + HOUR_MS).await, "{at}");
        // A well-formed id naming nothing is nothing.
        let stranger = SessionId::parse("s0123456789abcdef0123456789abcdef").expect("shape");
        assert!(!live(&other, &stranger, NOW).await, "{at}");

        // Revoking the token ends the sessions it made, and only those.
        let sibling = dir
            .start_token_session(&second.token, NOW, HOUR)
            .await
            .expect("start")
            .expect("session");
        dir.revoke_token(&first.id).await.expect("revoke");
        assert!(!live(&other, &session.id, NOW).await, "{at}: revoked token");
        assert!(live(&other, &sibling.id, NOW).await, "{at}: its sibling");

        // Logout ends it; a second logout finds nothing.
        assert!(dir.end_session(&sibling.id).await.expect("end"), "{at}");
        assert!(!live(&other, &sibling.id, NOW).await, "{at}: ended");
        assert!(!dir.end_session(&sibling.id).await.expect("end"), "{at}");

        // Nothing starts from a revoked, unknown or malformed token.
        for token in [
            first.token.as_str(),
            "snug_not-a-token",
            "",
            &second.token[1..],
        ] {
            assert!(
                dir.start_token_session(token, NOW, HOUR)
                    .await
                    .expect("start")
                    .is_none(),
                "{at}: {token:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_or_removing_a_user_ends_every_session_for_good() {
    for place in places() {
        let at = place.name();
        let dir = place.open().await;
        let other = place.open().await;
        let (_, token) = dir.add_user("bea").await.expect("add");
        let identity = OidcIdentity {
            issuer: "https://id.example".to_owned(),
            subject: "bea-sub".to_owned(),
        };
        let provisioned = dir
            .provision(&identity.issuer, &identity.subject, "Bea P")
            .await
            .expect("provision")
            .expect("user");
        let by_token = dir
            .start_token_session(&token.token, NOW, HOUR)
            .await
            .expect("start")
            .expect("session");
        let by_identity = dir
            .start_identity_session(&identity, NOW, HOUR)
            .await
            .expect("start")
            .expect("an identity of an enabled user starts a session");
        assert_eq!(by_identity.user, provisioned, "{at}");
        assert_eq!(
            by_identity.credential,
            SessionCredential::Identity {
                identity: identity.clone(),
                presented_at: NOW
            },
            "{at}"
        );
        assert!(live(&other, &by_identity.id, NOW).await, "{at}");

        dir.disable("bea").await.expect("disable");
        dir.disable("Bea P@id.example").await.expect("disable");
        for id in [&by_token.id, &by_identity.id] {
            assert!(!live(&other, id, NOW).await, "{at}: disabled");
        }
        // A disabled user starts nothing.
        assert!(
            dir.start_token_session(&token.token, NOW, HOUR)
                .await
                .expect("start")
                .is_none(),
            "{at}"
        );
        assert!(
            dir.start_identity_session(&identity, NOW, HOUR)
                .await
                .expect("start")
                .is_none(),
            "{at}"
        );
        // Enabling again brings no session back: disabling ended them.
        dir.enable("bea").await.expect("enable");
        dir.enable("Bea P@id.example").await.expect("enable");
        for id in [&by_token.id, &by_identity.id] {
            assert!(!live(&other, id, NOW).await, "{at}: enabled again");
        }

        // Removal ends the sessions of the token and of the identity, which go with the user.
        let by_token = dir
            .start_token_session(&token.token, NOW, HOUR)
            .await
            .expect("start")
            .expect("session");
        let by_identity = dir
            .start_identity_session(&identity, NOW, HOUR)
            .await
            .expect("start")
            .expect("session");
        dir.remove_user("bea").await.expect("remove");
        dir.remove_user("Bea P@id.example").await.expect("remove");
        for id in [&by_token.id, &by_identity.id] {
            assert!(!live(&other, id, NOW).await, "{at}: removed");
        }
        // The identity provisioned again is a new user, with none of the old sessions.
        let again = dir
            .provision(&identity.issuer, &identity.subject, "Bea P")
            .await
            .expect("provision")
            .expect("user");
        assert_ne!(again.id, provisioned.id, "{at}");
        assert!(!live(&other, &by_identity.id, NOW).await, "{at}");
        // An identity nobody has starts nothing.
        let unknown = OidcIdentity {
            issuer: identity.issuer.clone(),
            subject: "nobody".to_owned(),
        };
        assert!(
            dir.start_identity_session(&unknown, NOW, HOUR)
                .await
                .expect("start")
                .is_none(),
            "{at}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_sessions_are_pruned_a_bounded_batch_at_a_time() {
    for place in places() {
        let at = place.name();
        let dir = place.open().await;
        let (_, token) = dir.add_user("pia").await.expect("add");
        let batch = i64::from(PRUNE_BATCH);
        let short = Duration::from_secs(1);
        let mut expired = Vec::new();
        for n in 0..batch + 6 {
            // Each start prunes what expired by its own now: none of these yet.
            let session = dir
                .start_token_session(&token.token, NOW + n, short)
                .await
                .expect("start")
                .expect("session");
            expired.push(session.id);
        }
        let later = NOW + 10 * HOUR_MS;
        let kept = dir
            .start_token_session(&token.token, later, HOUR)
            .await
            .expect("start")
            .expect("session");
        // That start took one batch; a sweep takes the rest, then finds nothing.
        assert_eq!(dir.prune_sessions(later).await.expect("prune"), 6, "{at}");
        assert_eq!(dir.prune_sessions(later).await.expect("prune"), 0, "{at}");
        assert!(live(&dir, &kept.id, later).await, "{at}: a live one stays");
        for id in &expired {
            assert!(!live(&dir, id, NOW).await, "{at}: pruned rows are gone");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_disable_racing_session_starts_leaves_none_of_them_alive() {
    for place in places() {
        let at = place.name();
        let replicas = [place.open().await, place.open().await];
        let (_, token) = replicas[0].add_user("rita").await.expect("add");
        for round in 0..5 {
            let starts = (0..8).map(|i| {
                let (dir, token) = (replicas[i % 2].clone(), token.token.clone());
                tokio::spawn(async move { dir.start_token_session(&token, NOW, HOUR).await })
            });
            let disable = {
                let dir = replicas[1].clone();
                tokio::spawn(async move { dir.disable("rita").await })
            };
            let started: Vec<SessionId> = futures::future::join_all(starts)
                .await
                .into_iter()
                .filter_map(|r| r.expect("task").expect("start"))
                .map(|s| s.id)
                .collect();
            disable.await.expect("task").expect("disable");
            replicas[0].enable("rita").await.expect("enable");
            for id in &started {
                assert!(
                    !live(&replicas[0], id, NOW).await,
                    "{at}: round {round}: a session outlived the disable"
                );
            }
        }
    }
}

/// The PostgreSQL tables as the release before sessions created them.
const PG_BEFORE_SESSIONS: &str = "
CREATE TABLE hub_users (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL CONSTRAINT hub_users_name_unique UNIQUE,
    created_at  BIGINT NOT NULL,
    disabled    BOOLEAN NOT NULL DEFAULT false,
    quota_bytes BIGINT CHECK (quota_bytes IS NULL OR quota_bytes >= 0)
);
CREATE TABLE hub_tokens (
    hash       BYTEA PRIMARY KEY CHECK (length(hash) = 32),
    short_id   TEXT NOT NULL CONSTRAINT hub_tokens_short_id_unique UNIQUE,
    user_id    TEXT NOT NULL REFERENCES hub_users(id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL
);
CREATE INDEX hub_tokens_by_user ON hub_tokens(user_id);
CREATE TABLE hub_identities (
    issuer     TEXT NOT NULL,
    subject    TEXT NOT NULL,
    user_id    TEXT NOT NULL REFERENCES hub_users(id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    CONSTRAINT hub_identities_pk PRIMARY KEY (issuer, subject)
);
CREATE INDEX hub_identities_by_user ON hub_identities(user_id);
INSERT INTO hub_users (id, name, created_at) VALUES ('u0123', 'old-alice', 1700000000000);
INSERT INTO hub_tokens (hash, short_id, user_id, created_at)
    VALUES (sha256('snug_old-token'::bytea), substr(encode(sha256('snug_old-token'::bytea), 'hex'), 1, 8), 'u0123', 1700000000001);
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_directory_from_before_sessions_gains_them_on_connect() {
    let Some(url) = snug_test_support::postgres_url() else {
        return;
    };
    let schema = format!("users_before_sessions_{}", std::process::id());
    // Connected as the directory connects (TLS as the URL says), in the server's default schema.
    let pool = snug_pg::pool(&PgConfig {
        url: url.clone(),
        schema: None,
        pool_size: 1,
    })
    .expect("pool");
    let client = pool.get().await.expect("connect");
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; SET search_path TO {schema}; {PG_BEFORE_SESSIONS}"
        ))
        .await
        .expect("the earlier tables");
    let place = Place::Postgres(PgConfig {
        url,
        schema: Some(schema.clone()),
        pool_size: 2,
    });
    let dir = place.open().await;
    let session = dir
        .start_token_session("snug_old-token", NOW, HOUR)
        .await
        .expect("start")
        .expect("an earlier token starts a session");
    assert_eq!(session.user.name, "old-alice");
    assert!(live(&dir, &session.id, NOW).await);
    // Connecting again changes nothing.
    let again = place.open().await;
    assert!(live(&again, &session.id, NOW).await);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .expect("drop");
}
