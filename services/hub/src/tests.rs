//! The command line as `snug-hub` parses it: the global options in every position, and `serve`'s
//! own flags beside them (issue 36, point 5).

use clap::Parser as _;

use crate::{Cli, Command, SyncCommand};

/// What a command line parses to, as one line: the command's name, then the data directory, the
/// sync service's address and `--json` as the command sees them (`serve gateway`'s address is the
/// one `run` copies into the gateway's settings).
#[track_caller]
fn check(argv: &[&str], expected: &str) {
    let cli = Cli::try_parse_from(argv).unwrap_or_else(|err| panic!("{argv:?}: {err}"));
    let command = match &cli.command {
        Command::Serve(args) => match args.service {
            None => "serve",
            Some(_) => "serve SERVICE",
        },
        Command::Users { .. } => "users",
        Command::AdminToken => "admin-token",
        Command::Sync {
            command: SyncCommand::Check { .. },
        } => "sync check",
        Command::Sync {
            command: SyncCommand::Usage { .. },
        } => "sync usage",
        Command::Sync {
            command: SyncCommand::Erase { .. },
        } => "sync erase",
        Command::Healthcheck(_) => "healthcheck",
    };
    let global = &cli.global;
    let parsed = format!(
        "{command}: data {}, sync {}, json {}",
        global.data.data_dir.display(),
        global.sync_addr.as_deref().unwrap_or("-"),
        global.json
    );
    assert_eq!(parsed, expected, "{argv:?}");
}

#[test]
fn global_options_are_taken_before_or_after_the_subcommand() {
    let cases: [(&[&str], &str); 9] = [
        (
            &["snug-hub", "serve"],
            "serve: data ./snug-data, sync -, json false",
        ),
        (
            &[
                "snug-hub",
                "serve",
                "--data-dir",
                "/d",
                "--listen",
                "0.0.0.0:1",
            ],
            "serve: data /d, sync -, json false",
        ),
        (
            &[
                "snug-hub",
                "--data-dir",
                "/d",
                "serve",
                "gateway",
                "--sync-addr",
                "http://s:1",
            ],
            "serve SERVICE: data /d, sync http://s:1, json false",
        ),
        (
            &[
                "snug-hub",
                "--sync-addr",
                "http://s:1",
                "serve",
                "gateway",
                "--auth",
                "off",
            ],
            "serve SERVICE: data ./snug-data, sync http://s:1, json false",
        ),
        (
            &["snug-hub", "--json", "users", "--data-dir", "/d", "list"],
            "users: data /d, sync -, json true",
        ),
        (
            &[
                "snug-hub",
                "users",
                "list",
                "--json",
                "--sync-addr",
                "http://s:1",
            ],
            "users: data ./snug-data, sync http://s:1, json true",
        ),
        (
            &["snug-hub", "sync", "check", "--json", "--data-dir", "/d"],
            "sync check: data /d, sync -, json true",
        ),
        (
            &[
                "snug-hub",
                "--data-dir",
                "/d",
                "sync",
                "usage",
                "--user",
                "alice",
            ],
            "sync usage: data /d, sync -, json false",
        ),
        (
            &["snug-hub", "sync", "erase", "--store-id", "local", "--json"],
            "sync erase: data ./snug-data, sync -, json true",
        ),
    ];
    for (argv, expected) in cases {
        check(argv, expected);
    }
}
