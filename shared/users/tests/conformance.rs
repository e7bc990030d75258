//! The directory's conformance suite, run on every backend: embedded SQLite always, PostgreSQL
//! when `SNUG_TEST_POSTGRES_URL` names a server (skipped otherwise, unless
//! `SNUG_REQUIRE_POSTGRES_TLS` says CI runs one, as `.ci/run` does).

use std::sync::atomic::{AtomicU32, Ordering};

use snug_users::{Directory, DirectoryConfig, OidcIdentity, PgConfig, TOKEN_PREFIX, UsersError};

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
                ["hub_identities", "hub_tokens", "hub_users"]
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
        dir.disable("Erin P").await.expect("disable");
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
        dir.remove_user("hal").await.expect("remove");
        let again = dir
            .provision("https://id.example", "hal", "hal")
            .await
            .expect("provision")
            .expect("user");
        assert_ne!(first.id, again.id, "{at}");
        assert_eq!(again.name, "hal", "{at}");
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
        // The name was taken by the operator's ivy: the first free suffix.
        assert_eq!(ivy.name, "ivy-2", "{at}");
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
        assert_eq!(elsewhere.name, "ivy-3", "{at}");
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
        // Every suffix taken: the hash-tagged name, then exhaustion.
        for n in 4..=9 {
            dir.add_user(&format!("ivy-{n}")).await.expect("add");
        }
        let tagged = dir
            .provision(issuer, "sub-2", "ivy")
            .await
            .expect("provision")
            .expect("user");
        let names = snug_users::provisioned_names("ivy", issuer, "sub-2");
        assert_eq!(tagged.name, names[9], "{at}");
        let blocker = snug_users::provisioned_names("ivy", issuer, "sub-3");
        dir.add_user(&blocker[9]).await.expect("add");
        assert!(
            matches!(
                dir.provision(issuer, "sub-3", "ivy").await,
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
            ["racer", "racer-2", "racer-3", "racer-4", "racer-5"],
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
