//! The operator's commands, run as the built `snug-hub` (issue 36, point 5): a user is named by
//! name or by id alike, an unknown one is refused with a typed error and nothing is erased,
//! `users remove --erase` is confirmed (the user's name typed on a terminal, `--yes` elsewhere),
//! and the global options are accepted before or after the subcommand.

mod support;

use std::{
    io::Write as _,
    path::Path,
    process::{Command, Output, Stdio},
};

use support::{BIN, CHUNK, config, files_holding, image, json, store_image, text};

/// Runs `snug-hub ARGS` with none of the hub's variables inherited but `env`, stdin closed.
fn hub_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    support::run(args, env)
}

fn hub(args: &[&str]) -> Output {
    hub_with(args, &[])
}

fn path(data: &Path) -> &str {
    data.to_str().expect("a UTF-8 temporary path")
}

/// Adds the user `name` to the directory under `data`; returns their id.
fn add_user(data: &Path, name: &str) -> String {
    let added = hub(&["users", "add", name, "--data-dir", path(data)]);
    assert!(added.status.success(), "{}", text(&added.stderr));
    user_id(data, name).expect("the user just added")
}

/// The id of the user `name` in the directory under `data`, if there is one.
fn user_id(data: &Path, name: &str) -> Option<String> {
    let listed = json(&hub(&["users", "list", "--json", "--data-dir", path(data)]));
    listed["users"]
        .as_array()
        .expect("users")
        .iter()
        .find(|user| user["name"] == name)
        .map(|user| user["id"].as_str().expect("id").to_owned())
}

/// The 64 bytes of `bytes` a scan for them looks for.
fn needle(bytes: &[u8]) -> &[u8] {
    &bytes[5 * CHUNK..5 * CHUNK + 64]
}

/// Whether any file of the store under `data` still holds `bytes`' needle.
fn held(data: &Path, bytes: &[u8]) -> bool {
    !files_holding(&data.join("sync"), needle(bytes)).is_empty()
}

/// The refusal a command printed with `--json`: its exit status, then the JSON error's code
/// and exit code, checked against each other and against stderr.
#[track_caller]
fn refusal(output: &Output) -> (Option<i32>, serde_json::Value) {
    let body: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("one JSON object: {}", text(&output.stdout)));
    assert_eq!(body["ok"], false, "{body}");
    assert_eq!(
        body["exit_code"].as_i64(),
        output.status.code().map(i64::from),
        "{body}"
    );
    if let Some(code) = body["error"]["code"].as_str() {
        assert!(
            text(&output.stderr).contains(&format!("({code})")),
            "{}",
            text(&output.stderr)
        );
    }
    (output.status.code(), body["error"]["code"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_erasure_take_a_name_or_an_id_and_refuse_an_unknown_user() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path();
    let at = path(data);
    let alice = add_user(data, "alice");
    let bob = add_user(data, "bob");
    let alice_bytes = image(1, 12 * CHUNK);
    let bob_bytes = image(2, 12 * CHUNK);
    store_image(data, &alice, &alice_bytes).await;
    store_image(data, &bob, &bob_bytes).await;

    let by_name = json(&hub(&[
        "sync",
        "usage",
        "--user",
        "alice",
        "--data-dir",
        at,
    ]));
    let by_id = json(&hub(&["sync", "usage", "--user", &alice, "--data-dir", at]));
    assert_eq!(by_name, by_id);
    assert_eq!(
        (&by_name["user"], &by_name["name"]),
        (&alice.as_str().into(), &"alice".into())
    );
    assert_eq!(by_name["currentBytes"], alice_bytes.len());
    assert_eq!(by_name["revisions"], 1);

    // Nobody is named by these: each is refused with the registry's reason and exit status, and
    // nothing of anyone is erased.
    let refusals: [(&[&str], i32, &str); 5] = [
        (&["sync", "usage", "--user", "nobody"], 3, "USER_NOT_FOUND"),
        (&["sync", "erase", "--user", "nobody"], 3, "USER_NOT_FOUND"),
        (&["sync", "erase", "--user", "Alice"], 3, "USER_NOT_FOUND"),
        (
            &["sync", "erase", "--store-id", "nobody"],
            3,
            "USER_NOT_FOUND",
        ),
        (
            &["sync", "erase", "--user", "a\u{1b}"],
            2,
            "INVALID_ARGUMENT",
        ),
    ];
    for (args, exit, code) in refusals {
        let output = hub(&[args, &["--data-dir", at, "--json"]].concat());
        assert_eq!(refusal(&output), (Some(exit), code.into()), "{args:?}");
    }
    assert!(held(data, &alice_bytes) && held(data, &bob_bytes));

    let erased = json(&hub(&[
        "sync",
        "erase",
        "--user",
        "alice",
        "--data-dir",
        at,
    ]));
    assert_eq!(erased["user"], alice.as_str());
    assert_eq!(erased["revisions"], 1, "{erased}");
    assert_eq!(erased["bytes"], alice_bytes.len(), "{erased}");
    assert_eq!(
        (&erased["wipesPending"], &erased["complete"]),
        (&0.into(), &true.into()),
        "no wipe is left: {erased}"
    );
    assert!(
        !held(data, &alice_bytes),
        "no byte of alice's image is left"
    );
    assert!(held(data, &bob_bytes), "bob's image is untouched");
    let after = json(&hub(&["sync", "usage", "--user", &alice, "--data-dir", at]));
    assert_eq!(
        (&after["name"], &after["revisions"], &after["currentBytes"]),
        (&"alice".into(), &0.into(), &0.into())
    );
    // A user named as another's id: that text names neither, and each stays reachable by the
    // other word (no erasure meant for one lands on the other).
    let mallory = add_user(data, &bob);
    let ambiguous = hub(&["sync", "erase", "--user", &bob, "--data-dir", at, "--json"]);
    assert_eq!(refusal(&ambiguous), (Some(2), "INVALID_ARGUMENT".into()));
    assert!(held(data, &bob_bytes));
    let named = json(&hub(&["sync", "usage", "--user", "bob", "--data-dir", at]));
    assert_eq!(
        (&named["user"], &named["revisions"]),
        (&bob.as_str().into(), &1.into())
    );
    let by_id = json(&hub(&[
        "sync",
        "usage",
        "--user",
        &mallory,
        "--data-dir",
        at,
    ]));
    assert_eq!(
        (&by_id["name"], &by_id["revisions"]),
        (&bob.as_str().into(), &0.into())
    );

    // alice is still in the directory: erasing her again is done, with nothing left to delete.
    let again = json(&hub(&[
        "sync",
        "erase",
        "--user",
        "alice",
        "--data-dir",
        at,
    ]));
    assert_eq!(
        (&again["revisions"], &again["bytes"]),
        (&0.into(), &0.into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removal_with_erasure_needs_yes_off_a_terminal() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path();
    let at = path(data);
    let carol = add_user(data, "carol");
    let bytes = image(3, 12 * CHUNK);
    store_image(data, &carol, &bytes).await;

    for args in [
        &["users", "remove", "carol", "--erase"][..],
        &["users", "remove", &carol, "--erase"],
    ] {
        let refused = hub(&[args, &["--data-dir", at, "--json"]].concat());
        assert_eq!(refusal(&refused), (Some(2), "USAGE".into()), "{args:?}");
        assert!(
            text(&refused.stderr).contains("--yes"),
            "{}",
            text(&refused.stderr)
        );
    }
    // Nothing changed: carol is listed, enabled, and her image is whole.
    let listed = json(&hub(&["users", "list", "--json", "--data-dir", at]));
    assert_eq!(listed["users"][0]["name"], "carol", "{listed}");
    assert_eq!(listed["users"][0]["disabled"], false, "{listed}");
    assert!(held(data, &bytes));

    let removed = hub(&[
        "users",
        "remove",
        &carol,
        "--erase",
        "--yes",
        "--data-dir",
        at,
    ]);
    assert!(removed.status.success(), "{}", text(&removed.stderr));
    assert!(
        text(&removed.stdout).starts_with("erased: 1 revision(s)"),
        "{}",
        text(&removed.stdout)
    );
    assert_eq!(user_id(data, "carol"), None);
    assert!(!held(data, &bytes), "no byte of carol's image is left");
    // Nor her id, in any file the hub keeps: the users directory forgot it, and the sync
    // store's tombstone and ledger rows keep a pseudonym of it.
    for needle in [carol.as_bytes(), b"carol"] {
        let holding = files_holding(data, needle);
        assert!(holding.is_empty(), "{holding:?} hold {}", text(needle));
    }
    let gone = hub(&[
        "sync",
        "usage",
        "--store-id",
        &carol,
        "--data-dir",
        at,
        "--json",
    ]);
    assert_eq!(refusal(&gone), (Some(3), "USER_NOT_FOUND".into()));

    // Removed without --erase, a user's image stays under an id no directory names; it is
    // reached as a store id, not as a name.
    let dave = add_user(data, "dave");
    let daves = image(4, 12 * CHUNK);
    store_image(data, &dave, &daves).await;
    let removed = hub(&["users", "remove", "dave", "--data-dir", at]);
    assert!(removed.status.success(), "{}", text(&removed.stderr));
    let by_name = hub(&[
        "sync",
        "erase",
        "--user",
        "dave",
        "--data-dir",
        at,
        "--json",
    ]);
    assert_eq!(refusal(&by_name), (Some(3), "USER_NOT_FOUND".into()));
    assert!(held(data, &daves));
    let erased = json(&hub(&[
        "sync",
        "erase",
        "--store-id",
        &dave,
        "--data-dir",
        at,
    ]));
    assert_eq!(
        (&erased["revisions"], &erased["name"]),
        (&1.into(), &serde_json::Value::Null)
    );
    assert!(!held(data, &daves), "no byte of dave's image is left");
}

/// Runs `snug-hub ARGS` with a pseudo-terminal as stdin, on which `typed` is typed.
fn on_a_terminal(args: &[&str], typed: &str) -> Output {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let controller = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
    grantpt(&controller).expect("grantpt");
    unlockpt(&controller).expect("unlockpt");
    let name = ptsname(&controller, Vec::new()).expect("ptsname");
    let terminal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_str().expect("a UTF-8 name"))
        .expect("open the terminal");
    let mut controller = std::fs::File::from(controller);
    let child = Command::new(BIN)
        .args(args)
        .env_remove("SNUG_SYNC_ADDR")
        .env_remove("SNUG_USERS_STORE")
        .stdin(Stdio::from(terminal))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run snug-hub");
    // The terminal's line discipline holds the line until the command reads it.
    controller.write_all(typed.as_bytes()).expect("type");
    // The controller stays open while the command runs (closing it hangs the terminal up under
    // the command), but not forever: a command still waiting for a line after a minute is
    // hung up on, so a regression fails the test instead of stalling it.
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        drop(controller);
    });
    child.wait_with_output().expect("wait")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_removal_with_erasure_asks_for_the_users_name() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path();
    let at = path(data);
    let erin = add_user(data, "erin");
    let bytes = image(5, 12 * CHUNK);
    store_image(data, &erin, &bytes).await;
    let remove = ["users", "remove", &erin, "--erase", "--data-dir", at];

    // A wrong name, a yes, an empty line, the end of input (^D).
    for typed in ["Erin\n", "y\n", "\n", "\u{4}"] {
        let refused = on_a_terminal(&remove, typed);
        assert_eq!(refused.status.code(), Some(2), "{typed:?}");
        assert!(
            text(&refused.stderr).contains("type their name to confirm")
                && text(&refused.stderr).contains("not confirmed"),
            "{typed:?}: {}",
            text(&refused.stderr)
        );
        assert_eq!(user_id(data, "erin").as_deref(), Some(erin.as_str()));
        assert!(held(data, &bytes), "{typed:?}");
    }
    let removed = on_a_terminal(&remove, "erin\n");
    assert!(removed.status.success(), "{}", text(&removed.stderr));
    assert_eq!(user_id(data, "erin"), None);
    assert!(!held(data, &bytes), "no byte of erin's image is left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_options_are_taken_before_or_after_the_subcommand() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path();
    let at = path(data);
    let alice = add_user(data, "alice");
    let bytes = image(6, 12 * CHUNK);
    store_image(data, &alice, &bytes).await;

    // Without a sync service the commands open the store themselves.
    let usage = ["sync", "usage", "--user", "alice"];
    let reference = json(&hub(&[&usage[..], &["--data-dir", at]].concat()));
    assert_eq!(reference["currentBytes"], bytes.len());
    let listed = json(&hub(&["--json", "--data-dir", at, "users", "list"]));
    assert_eq!(
        listed,
        json(&hub(&["users", "list", "--data-dir", at, "--json"]))
    );

    // A running sync service holds the store now: only through it are the answers the same.
    let (served, runtime) = config(data);
    let store = snug_sync_service::open_store(&served, &runtime)
        .await
        .expect("open the store");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        snug_sync_service::serve(
            &snug_rpc::server::ServerConfig::for_tests(),
            &served,
            &runtime,
            store,
            listener,
            std::future::pending(),
        )
        .await
    });
    let held_here = hub(&[&usage[..], &["--data-dir", at, "--json"]].concat());
    let (exit, code) = refusal(&held_here);
    assert_eq!((exit, code), (Some(1), serde_json::Value::Null));
    assert!(
        text(&held_here.stderr).contains("--sync-addr"),
        "{}",
        text(&held_here.stderr)
    );

    let url = url.as_str();
    let before = [
        &["--sync-addr", url, "--data-dir", at, "--json"][..],
        &usage,
    ]
    .concat();
    let after = [
        &usage[..],
        &["--json", "--data-dir", at, "--sync-addr", url],
    ]
    .concat();
    let old_spelling = [&usage[..], &["--addr", url, "--data-dir", at]].concat();
    for args in [&before, &after, &old_spelling] {
        assert_eq!(json(&hub(args)), reference, "{args:?}");
    }
    let from_env = hub_with(&usage, &[("SNUG_SYNC_ADDR", url), ("SNUG_DATA_DIR", at)]);
    assert_eq!(json(&from_env), reference);
    for args in [
        &[
            "--sync-addr",
            url,
            "users",
            "usage",
            "alice",
            "--data-dir",
            at,
        ][..],
        &[
            "users",
            "--data-dir",
            at,
            "usage",
            &alice,
            "--sync-addr",
            url,
        ],
    ] {
        let output = hub(args);
        assert!(
            output.status.success(),
            "{args:?}: {}",
            text(&output.stderr)
        );
        assert!(
            text(&output.stdout).starts_with(&format!("alice\tcurrent {} bytes", bytes.len())),
            "{args:?}: {}",
            text(&output.stdout)
        );
    }
    let unknown = hub(&[
        "--json",
        "--sync-addr",
        url,
        "--data-dir",
        at,
        "sync",
        "erase",
        "--user",
        "nobody",
    ]);
    assert_eq!(refusal(&unknown), (Some(3), "USER_NOT_FOUND".into()));
    let check = hub(&["--sync-addr", url, "sync", "check", "--json"]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stderr));
    assert_eq!(json(&check)["imagesChecked"], 1);

    // `--json` is refused where there is no report to give, before the subcommand or after.
    for args in [&["--json", "serve"][..], &["healthcheck", "--json"]] {
        assert_eq!(refusal(&hub(args)), (Some(2), "USAGE".into()), "{args:?}");
    }
}
