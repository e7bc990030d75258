//! `snug-hub users …` through the binary, against each store of the users directory: the embedded
//! file in `--data-dir`, and PostgreSQL when `SNUG_TEST_POSTGRES_URL` names a server (skipped
//! otherwise, unless `SNUG_REQUIRE_POSTGRES_TLS` says CI runs one). What the commands did is
//! checked through `snug-users`, as the gateway reads it.

use std::process::{Command, Output};

use snug_users::{Directory, DirectoryConfig, PgConfig};

const BIN: &str = env!("CARGO_BIN_EXE_snug-hub");

/// One store: the environment and data directory the commands get, and the directory as the
/// gateway would open it.
struct Store {
    name: &'static str,
    env: Vec<(&'static str, String)>,
    data: tempfile::TempDir,
    config: DirectoryConfig,
}

fn stores() -> Vec<Store> {
    let data = tempfile::tempdir().expect("dir");
    let sqlite = Store {
        name: "sqlite",
        env: vec![("SNUG_USERS_STORE", "sqlite".to_owned())],
        config: DirectoryConfig::Sqlite {
            dir: data.path().join("gateway"),
        },
        data,
    };
    let mut stores = vec![sqlite];
    if let Some(url) = snug_test_support::postgres_url() {
        let schema = format!("hub_users_cli_{}", std::process::id());
        stores.push(Store {
            name: "postgres",
            env: vec![
                ("SNUG_USERS_STORE", "postgres".to_owned()),
                ("SNUG_USERS_POSTGRES_URL", url.clone()),
                ("SNUG_USERS_POSTGRES_SCHEMA", schema.clone()),
            ],
            config: DirectoryConfig::Postgres(PgConfig {
                url,
                schema: Some(schema),
                pool_size: 2,
            }),
            data: tempfile::tempdir().expect("dir"),
        });
    }
    stores
}

fn users(store: &Store, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("users")
        .arg("--data-dir")
        .arg(store.data.path())
        .args(args)
        .env_remove("SNUG_USERS_STORE")
        .env_remove("SNUG_USERS_POSTGRES_URL")
        .env_remove("SNUG_USERS_POSTGRES_SCHEMA")
        .envs(store.env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run snug-hub users")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[track_caller]
fn ok(store: &Store, args: &[&str]) -> Output {
    let output = users(store, args);
    assert!(
        output.status.success(),
        "{}: users {args:?}: {}",
        store.name,
        stderr(&output)
    );
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_users_command_against_every_store() {
    for store in stores() {
        let at = store.name;
        let first = stdout(&ok(&store, &["add", "alice"]));
        assert!(first.starts_with("snug_"), "{at}: {first}");
        let second = stdout(&ok(&store, &["token", "alice"]));
        assert_ne!(first, second, "{at}");
        let directory = Directory::open(&store.config).await.expect("open");
        let admitted = |token: String| {
            let directory = directory.clone();
            async move {
                directory
                    .authenticate_token(&token)
                    .await
                    .expect("lookup")
                    .map(|a| (a.user.name, a.token_id, a.user.quota_bytes))
            }
        };
        let (name, first_id, quota) = admitted(first.clone()).await.expect("the first token");
        assert_eq!((name.as_str(), quota), ("alice", None), "{at}");
        let listed = stdout(&ok(&store, &["list"]));
        assert!(
            listed.starts_with("alice\t")
                && listed.contains("\tenabled\tquota default\t2 token(s)"),
            "{at}: {listed}"
        );
        assert!(listed.contains(&first_id), "{at}: list names the token ids");

        ok(&store, &["revoke-token", &first_id]);
        assert!(admitted(first.clone()).await.is_none(), "{at}: revoked");
        assert!(
            admitted(second.clone()).await.is_some(),
            "{at}: its sibling"
        );

        ok(&store, &["disable", "alice"]);
        assert!(admitted(second.clone()).await.is_none(), "{at}: disabled");
        assert!(
            stdout(&ok(&store, &["list"])).contains("\tdisabled\t"),
            "{at}"
        );
        ok(&store, &["enable", "alice"]);
        assert!(admitted(second.clone()).await.is_some(), "{at}: enabled");

        ok(&store, &["quota", "alice", "1048576"]);
        assert_eq!(
            admitted(second.clone()).await.expect("known").2,
            Some(1 << 20),
            "{at}"
        );
        assert!(
            stdout(&ok(&store, &["list"])).contains("quota 1048576 bytes"),
            "{at}"
        );
        ok(&store, &["quota", "alice", "--clear"]);
        assert_eq!(
            admitted(second.clone()).await.expect("known").2,
            None,
            "{at}"
        );

        ok(&store, &["remove", "alice"]);
        assert!(admitted(second.clone()).await.is_none(), "{at}: removed");
        assert_eq!(stdout(&ok(&store, &["list"])), "", "{at}");

        // Refusals: (arguments, exit code, words stderr must hold). The exit codes are the admin
        // API's reasons': 2 a malformed request, 3 no such user or token, 4 the name is taken.
        ok(&store, &["add", "bob"]);
        let refusals: [(&[&str], i32, &str); 12] = [
            (&["add", "bob"], 4, "(USER_EXISTS)"),
            (&["add", ""], 2, "user name"),
            (
                &["token", "nobody"],
                3,
                "no such user: \"nobody\" (USER_NOT_FOUND)",
            ),
            (&["revoke-token", "00000000"], 3, "(TOKEN_NOT_FOUND)"),
            (&["disable", "nobody"], 3, "no such user"),
            (&["quota", "bob"], 2, "<BYTES>"),
            (&["quota", "bob", "5", "--clear"], 2, "cannot be used"),
            (&["remove", "nobody"], 3, "no such user"),
            (&["remove", "nobody", "--erase", "--yes"], 3, "no such user"),
            // Off a terminal an erasure needs --yes, whoever it names (issue 36, point 5).
            (
                &["remove", "bob", "--erase"],
                2,
                "needs --yes when stdin is not a terminal (nothing was changed) (USAGE)",
            ),
            (&["remove", "bob", "--yes"], 2, "--erase"),
            (&["usage", "nobody"], 3, "no such user"),
        ];
        for (args, code, words) in refusals {
            let output = users(&store, args);
            assert_eq!(
                output.status.code(),
                Some(code),
                "{at}: {args:?}: {}",
                stderr(&output)
            );
            assert!(
                stderr(&output).contains(words),
                "{at}: {args:?}: {}",
                stderr(&output)
            );
            assert_eq!(stdout(&output), "", "{at}: {args:?} prints no token");
        }
        // Usage and erasure reach the sync store (opened here, as no hub runs): bob has no image.
        // A user is named by name or by id alike (issue 36, point 5).
        let usage = stdout(&ok(&store, &["usage", "bob"]));
        assert!(
            usage.starts_with("bob\tcurrent 0 bytes, history 0 bytes"),
            "{at}: {usage}"
        );
        let bob_id = stdout(&ok(&store, &["list"]))
            .split('\t')
            .nth(1)
            .expect("the id column")
            .to_owned();
        assert_eq!(stdout(&ok(&store, &["usage", &bob_id])), usage, "{at}");
        ok(&store, &["disable", &bob_id]);
        assert!(
            stdout(&ok(&store, &["list"])).contains("\tdisabled\t"),
            "{at}: disabled by id"
        );
        let erased = stdout(&ok(&store, &["remove", "bob", "--erase", "--yes"]));
        assert!(
            erased.starts_with("erased: 0 revision(s)"),
            "{at}: {erased}"
        );
        assert_eq!(stdout(&ok(&store, &["list"])), "", "{at}");
    }
}

#[test]
fn a_postgres_store_needs_its_url_and_never_prints_it() {
    let data = tempfile::tempdir().expect("dir");
    let run = |url: Option<&str>| {
        let mut command = Command::new(BIN);
        command
            .args(["users", "--data-dir"])
            .arg(data.path())
            .arg("list")
            .env("SNUG_USERS_STORE", "postgres")
            .env_remove("SNUG_USERS_POSTGRES_URL");
        if let Some(url) = url {
            command.env("SNUG_USERS_POSTGRES_URL", url);
        }
        command.output().expect("run")
    };
    let missing = run(None);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("SNUG_USERS_POSTGRES_URL"),
        "{}",
        stderr(&missing)
    );
    // Nothing listens on port 1: the connection fails, and the password stays out of the output.
    let unreachable = run(Some(
        "postgresql://hub:hunter2-secret@127.0.0.1:1/hub?sslmode=disable&connect_timeout=2",
    ));
    assert_eq!(unreachable.status.code(), Some(1));
    let all = format!("{}{}", stderr(&unreachable), stdout(&unreachable));
    assert!(all.contains("PostgreSQL"), "{all}");
    assert!(!all.contains("hunter2"), "{all}");
}
