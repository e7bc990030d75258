//! `snug-hub users` (the users directory: users and their hub tokens) and `snug-hub
//! admin-token`: the operator's commands on who may use the hub's HTTP surface.

use std::{io::IsTerminal as _, path::Path, process::ExitCode};

use clap::Subcommand;
use snug_admin_service::{Admin, AdminToken};
use snug_gateway::config::UsersConfig;
use snug_proto::admin::v1 as admin_pb;
use snug_rpc::{runtime::Runtime, service_token::ServiceToken};
use snug_sync_service::SyncConfig;

use crate::operator::{self, Refusal};

/// `snug-hub users …`: who may use the hub's HTTP surface. Each command is one call of the admin
/// API's implementation (`snug_admin_service::Admin`), made in-process: the CLI and the admin
/// port run the same code; this layer only parses and prints. A user is named by name or by id
/// (`Admin::resolve`, the rule every operator command shares).
///
/// Exit status: 0 done; 1 the directory or the sync service failed; 2 a usage error; 3 no such
/// user or token; 4 the name is taken.
#[derive(Debug, Subcommand)]
pub(crate) enum UsersCommand {
    /// Adds a user and prints their first bearer token. The token is shown only this once.
    Add {
        /// The user's name (1-64 characters, no control characters).
        name: String,
    },
    /// Issues another bearer token for an existing user (a new device, or a lost token).
    Token {
        /// The user's name or id.
        #[arg(value_name = "USER")]
        user: String,
    },
    /// Revokes one bearer token by its id (as `users list` shows it); the user's other tokens
    /// keep working. Every gateway refuses it from its next request on.
    RevokeToken {
        /// The token's id: 8 hex digits.
        id: String,
    },
    /// Lists users with their state, quota, token ids and identities (never token texts: only
    /// their hashes are stored).
    List {
        /// Also each user's usage of the sync store (see `users usage`).
        #[arg(long)]
        usage: bool,
    },
    /// Disables a user: their tokens, sessions and identities are refused as unknown ones until
    /// `users enable`; nothing is deleted.
    Disable {
        /// The user's name or id.
        #[arg(value_name = "USER")]
        user: String,
    },
    /// Enables a disabled user again.
    Enable {
        /// The user's name or id.
        #[arg(value_name = "USER")]
        user: String,
    },
    /// Sets a user's image quota in bytes (overriding the sync service's default), or clears it.
    Quota {
        /// The user's name or id.
        #[arg(value_name = "USER")]
        user: String,
        /// The quota in bytes.
        #[arg(required_unless_present = "clear")]
        bytes: Option<u64>,
        /// Clears the user's quota: the default applies again.
        #[arg(long, conflicts_with = "bytes")]
        clear: bool,
    },
    /// What a user holds in the sync store: the current image's bytes, the bytes only their
    /// history holds, and their revisions.
    Usage {
        /// The user's name or id.
        #[arg(value_name = "USER")]
        user: String,
    },
    /// Removes a user with their tokens and identities. Without --erase their image stays in the
    /// sync store, unreachable (`snug-hub sync erase --store-id ID` erases it later); with it,
    /// everything the store keeps of them is erased first.
    Remove {
        /// The user's name or id.
        #[arg(value_name = "USER")]
        user: String,
        /// Also erase the user's images, history, the chunks no other user references and the
        /// personal fields of their ledger rows, and print what was deleted. On a terminal it
        /// asks for the user's name to be typed; elsewhere it needs --yes.
        #[arg(long)]
        erase: bool,
        /// With --erase: do not ask for confirmation. Required when stdin is not a terminal.
        #[arg(long, requires = "erase")]
        yes: bool,
    },
}

fn quota_text(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "default".to_owned(), |b| format!("{b} bytes"))
}

fn by_id(id: String) -> Option<admin_pb::UserRef> {
    Some(admin_pb::UserRef {
        by: Some(admin_pb::user_ref::By::Id(id)),
    })
}

fn usage_text(usage: &admin_pb::Usage) -> String {
    format!(
        "current {} bytes, history {} bytes, {} revision(s) ({} retained)",
        usage.current_bytes, usage.history_bytes, usage.revisions, usage.retained_revisions
    )
}

fn usage_json(usage: &admin_pb::Usage) -> serde_json::Value {
    serde_json::json!({
        "currentBytes": usage.current_bytes,
        "historyBytes": usage.history_bytes,
        "revisions": usage.revisions,
        "retainedRevisions": usage.retained_revisions,
    })
}

/// A user as `--json` shows them: never a token's text, which is not stored.
fn user_json(user: &admin_pb::User) -> serde_json::Value {
    let mut json = serde_json::json!({
        "id": user.id,
        "name": user.name,
        "disabled": user.disabled,
        "quotaBytes": user.quota_bytes,
        "tokens": user.tokens.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        "identities": user
            .identities
            .iter()
            .map(|i| serde_json::json!({ "issuer": i.issuer, "subject": i.subject }))
            .collect::<Vec<_>>(),
    });
    if let Some(usage) = &user.usage {
        json["usage"] = usage_json(usage);
    }
    json
}

/// What a `users` command prints on stdout: text for people, or one JSON object with `--json`.
/// Notes for the operator (what was done, a token's id) go to stderr either way.
struct Printed {
    text: Option<String>,
    json: serde_json::Value,
}

/// Runs a `users` command against the directory `config` names (the SQLite file in `dir`, or
/// PostgreSQL), and, for usage and erasure, the sync service at `sync_addr` (presenting `token`)
/// or the store `sync` names, opened here.
pub(crate) async fn users(
    command: UsersCommand,
    config: &UsersConfig,
    dir: &Path,
    sync_addr: Option<&str>,
    token: Option<&ServiceToken>,
    sync: (&SyncConfig, &Runtime),
    json: bool,
) -> anyhow::Result<ExitCode> {
    // Refused before anything is opened: off a terminal, an erasure without --yes changes
    // nothing, not even a disabled flag.
    if let UsersCommand::Remove {
        erase: true,
        yes: false,
        ..
    } = &command
        && !std::io::stdin().is_terminal()
    {
        return Ok(Refusal::usage(
            "users remove --erase needs --yes when stdin is not a terminal (nothing was changed)",
        )
        .report("snug-hub users", json));
    }
    let directory = operator::directory(config, dir).await?;
    let needs_sync = matches!(
        command,
        UsersCommand::Usage { .. }
            | UsersCommand::List { usage: true }
            | UsersCommand::Remove { erase: true, .. }
    );
    let sync = if needs_sync {
        Some(operator::sync_client(sync_addr, token, sync).await?)
    } else {
        None
    };
    let admin = Admin::new(directory, sync, operator::SYNC_DEADLINE);
    Ok(match run_users(&admin, command).await {
        Ok(printed) => {
            if json {
                println!("{}", printed.json);
            } else if let Some(text) = printed.text {
                println!("{text}");
            }
            ExitCode::SUCCESS
        }
        Err(refusal) => refusal.report("snug-hub users", json),
    })
}

/// Asks the operator on the terminal to type the name of the user about to be erased; refuses
/// unless exactly that name (without the line's end) comes back.
async fn confirm_erasure(user: &snug_users::User) -> Result<(), Refusal> {
    eprint!(
        "this erases everything the sync store keeps of user {:?} (id {}) and removes them; type their name to confirm: ",
        user.name, user.id
    );
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(|err| Refusal::failed(&err.into()))?
    .map_err(|err| Refusal::failed(&anyhow::Error::from(err).context("cannot read the answer")))?;
    let answer = answer.strip_suffix('\n').unwrap_or(&answer);
    let answer = answer.strip_suffix('\r').unwrap_or(answer);
    if answer == user.name {
        Ok(())
    } else {
        Err(Refusal::usage(format!(
            "not confirmed: the answer was not {:?} (nothing was changed)",
            user.name
        )))
    }
}

async fn run_users(admin: &Admin, command: UsersCommand) -> Result<Printed, Refusal> {
    use snug_admin_service::AdminService as _;
    use tonic::Request;
    Ok(match command {
        UsersCommand::Add { name } => {
            let added = admin
                .add_user(Request::new(admin_pb::AddUserRequest { name }))
                .await?
                .into_inner();
            let user = added.user.unwrap_or_default();
            let token_id = user.tokens.first().map_or("?", |t| t.id.as_str());
            eprintln!(
                "added user {:?} (id {}); their bearer token (id {token_id}) follows and is not stored — hand it over now",
                user.name, user.id,
            );
            Printed {
                json: serde_json::json!({ "user": user_json(&user), "token": added.token }),
                text: Some(added.token),
            }
        }
        UsersCommand::Token { user } => {
            let user = admin.resolve(&user).await?.user;
            let issued = admin
                .issue_token(Request::new(admin_pb::IssueTokenRequest {
                    user: by_id(user.id.clone()),
                }))
                .await?
                .into_inner();
            eprintln!(
                "a new bearer token (id {}) for {:?} follows and is not stored — hand it over now",
                issued.token_id, user.name
            );
            Printed {
                json: serde_json::json!({
                    "user": { "id": user.id, "name": user.name },
                    "tokenId": issued.token_id,
                    "token": issued.token,
                }),
                text: Some(issued.token),
            }
        }
        UsersCommand::RevokeToken { id } => {
            let revoked = admin
                .revoke_token(Request::new(admin_pb::RevokeTokenRequest {
                    token_id: id.clone(),
                }))
                .await?
                .into_inner();
            let user = revoked.user.unwrap_or_default();
            eprintln!("revoked token {id} of user {:?}", user.name);
            Printed {
                json: serde_json::json!({ "tokenId": id, "user": user_json(&user) }),
                text: None,
            }
        }
        UsersCommand::List { usage } => {
            let listed = admin
                .list_users(Request::new(admin_pb::ListUsersRequest {
                    include_usage: usage,
                }))
                .await?
                .into_inner();
            let lines: Vec<String> = listed
                .users
                .iter()
                .map(|user| {
                    let tokens: Vec<&str> = user.tokens.iter().map(|t| t.id.as_str()).collect();
                    let identities: Vec<String> = user
                        .identities
                        .iter()
                        .map(|i| format!("{} {}", i.issuer, i.subject))
                        .collect();
                    let usage = user
                        .usage
                        .as_ref()
                        .map(|u| format!("\t{}", usage_text(u)))
                        .unwrap_or_default();
                    format!(
                        "{}\t{}\t{}\tquota {}\t{} token(s) [{}]\tidentities [{}]{usage}",
                        user.name,
                        user.id,
                        if user.disabled { "disabled" } else { "enabled" },
                        quota_text(user.quota_bytes),
                        tokens.len(),
                        tokens.join(" "),
                        identities.join(", ")
                    )
                })
                .collect();
            Printed {
                json: serde_json::json!({
                    "users": listed.users.iter().map(user_json).collect::<Vec<_>>(),
                }),
                text: (!lines.is_empty()).then(|| lines.join("\n")),
            }
        }
        UsersCommand::Disable { user } => set_disabled(admin, &user, true).await?,
        UsersCommand::Enable { user } => set_disabled(admin, &user, false).await?,
        UsersCommand::Quota { user, bytes, clear } => {
            let found = admin.resolve(&user).await?.user;
            let set = admin
                .set_quota(Request::new(admin_pb::SetQuotaRequest {
                    user: by_id(found.id),
                    quota_bytes: if clear { None } else { bytes },
                }))
                .await?
                .into_inner();
            let user = set.user.unwrap_or_default();
            eprintln!(
                "quota of user {:?} is now {}",
                user.name,
                quota_text(user.quota_bytes)
            );
            Printed {
                json: serde_json::json!({ "user": user_json(&user) }),
                text: None,
            }
        }
        UsersCommand::Usage { user } => {
            let found = admin.resolve(&user).await?.user;
            let usage = admin
                .get_usage(Request::new(admin_pb::GetUsageRequest {
                    user: by_id(found.id.clone()),
                }))
                .await?
                .into_inner()
                .usage
                .unwrap_or_default();
            Printed {
                json: serde_json::json!({
                    "user": { "id": found.id, "name": found.name },
                    "usage": usage_json(&usage),
                }),
                text: Some(format!("{}\t{}", found.name, usage_text(&usage))),
            }
        }
        UsersCommand::Remove { user, erase, yes } => {
            let found = admin.resolve(&user).await?.user;
            if erase && !yes {
                confirm_erasure(&found).await?;
            }
            let removed = admin
                .remove_user(Request::new(admin_pb::RemoveUserRequest {
                    user: by_id(found.id),
                    erase,
                }))
                .await?
                .into_inner();
            let user = removed.user.unwrap_or_default();
            eprintln!(
                "removed user {:?} (id {}) with their tokens and identities",
                user.name, user.id
            );
            let erased = removed.erasure.as_ref().map(operator::Erased::from);
            let text = erased.map(|erased| erased.text());
            let erasure = erased.map(|erased| erased.json());
            Printed {
                json: serde_json::json!({ "user": user_json(&user), "erasure": erasure }),
                text,
            }
        }
    })
}

async fn set_disabled(admin: &Admin, user: &str, disabled: bool) -> Result<Printed, Refusal> {
    use snug_admin_service::AdminService as _;
    let found = admin.resolve(user).await?.user;
    let set = admin
        .set_user_disabled(tonic::Request::new(admin_pb::SetUserDisabledRequest {
            user: by_id(found.id),
            disabled,
        }))
        .await?
        .into_inner();
    let user = set.user.unwrap_or_default();
    eprintln!(
        "{} user {:?} (id {})",
        if disabled { "disabled" } else { "enabled" },
        user.name,
        user.id
    );
    Ok(Printed {
        json: serde_json::json!({ "user": user_json(&user) }),
        text: None,
    })
}

/// `snug-hub admin-token`: makes an admin token; prints the token (for the operator's client) on
/// stdout and its SHA-256 (for SNUG_ADMIN_TOKEN_SHA256, in a Secret) on stderr.
pub(crate) fn admin_token(json: bool) -> anyhow::Result<ExitCode> {
    let (token, record) = AdminToken::generate()
        .map_err(|_| anyhow::anyhow!("the system random number generator failed"))?;
    eprintln!(
        "an admin token follows and is not stored; give the hub only its SHA-256:\n  SNUG_ADMIN_TOKEN_SHA256={}",
        record.hex()
    );
    if json {
        println!(
            "{}",
            serde_json::json!({ "token": token, "sha256": record.hex() })
        );
    } else {
        println!("{token}");
    }
    Ok(ExitCode::SUCCESS)
}
