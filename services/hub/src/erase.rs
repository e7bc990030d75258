//! `snug-hub sync usage` and `snug-hub sync erase`: one user's usage of the sync store and their
//! erasure (issue 20, points 5 and 6), for an operator, through a running sync service
//! (`--sync-addr`, its GetUsage and EraseUser RPCs) or a store opened here (as `snug-hub sync
//! check` does), with the same JSON on stdout either way.
//!
//! Who is meant (issue 36, point 5): `--user` takes a name or an id and is resolved through the
//! users directory by the admin API's one rule ([`snug_admin_service::Admin::resolve`], the one
//! `snug-hub users` uses), so a user's name is never taken for a store id and answered with
//! zeros. An unknown user is refused with `USER_NOT_FOUND` (exit 3) and nothing is erased.
//! `--store-id` names a sync-store id as it is, for what no directory names: a user removed with
//! `snug-hub users remove` but without `--erase`, whose images stay under their old id; the one
//! user of a hub with auth off (`local`); a store restored without its directory. It is refused
//! the same way when the store holds no revision of that id, so a mistyped id is never answered
//! with zeros either (and a second erasure of a removed user's id says there is nothing left).
//!
//! Erasing here erases the user's images, history and ledger principals in the sync store only;
//! removing the user from the users directory is `snug-hub users remove` (or the admin API),
//! whose `--erase` does both.

use std::path::Path;

use snug_admin_service::{Admin, SyncClient, call_sync};
use snug_gateway::config::UsersConfig;
use snug_proto::sync::v1 as pb;
use snug_reasons::admin::USER_NOT_FOUND;

use crate::operator::{self, Refusal, SYNC_DEADLINE};

/// Which user `snug-hub sync usage` and `snug-hub sync erase` are about.
#[derive(Debug, clap::Args)]
pub(crate) struct UserArgs {
    /// The user, by name or by id, as the users directory knows them (`snug-hub users list`).
    #[arg(
        long = "user",
        value_name = "NAME_OR_ID",
        required_unless_present = "store_id",
        conflicts_with = "store_id"
    )]
    user: Option<String>,
    /// A sync-store id as it is, not looked up in the users directory: the images of a user
    /// removed without --erase, or `local` on a hub with auth off. Refused when the store holds
    /// no revision of it.
    #[arg(long = "store-id", value_name = "ID")]
    store_id: Option<String>,
}

/// The user a command is about: their id in the sync store, and their name where the users
/// directory gave one.
struct Target {
    user_id: String,
    name: Option<String>,
}

impl Target {
    /// The JSON fields naming the user, before the report's own.
    fn json(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut fields = serde_json::Map::new();
        fields.insert("user".to_owned(), self.user_id.clone().into());
        fields.insert("name".to_owned(), self.name.clone().into());
        fields
    }
}

/// Where the user is looked up and their images are.
pub(crate) struct Reach<'a> {
    /// The users directory's settings.
    pub(crate) users: &'a UsersConfig,
    /// The directory the SQLite users file is in.
    pub(crate) gateway_dir: &'a Path,
    /// The sync service.
    pub(crate) sync: SyncClient,
}

/// Resolves `args` to one user, or refuses; see the module docs for the rule.
async fn target(args: UserArgs, reach: &Reach<'_>) -> Result<Target, Refusal> {
    if let Some(user_id) = args.store_id {
        snug_rpc::status::identifier(snug_admin_service::error_info::DOMAIN, "store_id", &user_id)?;
        let usage = usage_of(reach, &user_id).await?;
        if usage.revisions == 0 {
            return Err(Refusal::of(
                &USER_NOT_FOUND,
                format!(
                    "the sync store holds no revision of store id {user_id:?}: nothing to report or erase"
                ),
            ));
        }
        return Ok(Target {
            user_id,
            name: None,
        });
    }
    let Some(text) = args.user else {
        return Err(Refusal::usage("name the user with --user or --store-id"));
    };
    // A malformed name is a usage error wherever the directory is (`Admin::resolve` checks it
    // again, as every lookup of the admin API does).
    snug_rpc::status::identifier(snug_admin_service::error_info::DOMAIN, "user", &text)?;
    if !operator::directory_exists(reach.users, reach.gateway_dir) {
        return Err(Refusal::of(
            &USER_NOT_FOUND,
            format!(
                "there is no users directory in {} to look {text:?} up in: point --data-dir (or --users-store) at the gateway's, or name a sync-store id with --store-id",
                reach.gateway_dir.display()
            ),
        ));
    }
    let directory = operator::directory(reach.users, reach.gateway_dir)
        .await
        .map_err(|err| Refusal::failed(&err))?;
    let admin = Admin::new(directory, Some(reach.sync.clone()), SYNC_DEADLINE);
    let info = admin.resolve(&text).await?;
    Ok(Target {
        user_id: info.user.id,
        name: Some(info.user.name),
    })
}

async fn usage_of(reach: &Reach<'_>, user_id: &str) -> Result<pb::GetUsageResponse, Refusal> {
    let mut sync = reach.sync.clone();
    let request = pb::GetUsageRequest {
        user_id: user_id.to_owned(),
    };
    Ok(call_sync(SYNC_DEADLINE, sync.get_usage(request)).await?)
}

/// The user's usage as one JSON object.
pub(crate) async fn usage(args: UserArgs, reach: &Reach<'_>) -> Result<serde_json::Value, Refusal> {
    let target = target(args, reach).await?;
    let usage = usage_of(reach, &target.user_id).await?;
    let mut report = target.json();
    report.extend([
        ("currentBytes".to_owned(), usage.current_bytes.into()),
        ("historyBytes".to_owned(), usage.history_bytes.into()),
        ("revisions".to_owned(), usage.revisions.into()),
        (
            "retainedRevisions".to_owned(),
            usage.retained_revisions.into(),
        ),
    ]);
    Ok(report.into())
}

/// Erases the user in the sync store; what was deleted as one JSON object.
pub(crate) async fn erase(args: UserArgs, reach: &Reach<'_>) -> Result<serde_json::Value, Refusal> {
    let target = target(args, reach).await?;
    let mut sync = reach.sync.clone();
    let request = pb::EraseUserRequest {
        user_id: target.user_id.clone(),
    };
    let erased = call_sync(SYNC_DEADLINE, sync.erase_user(request)).await?;
    tracing::info!(user = %target.user_id, revisions = erased.revisions, bytes = erased.bytes, "erased a user from the sync store");
    let erased = operator::Erased::from(&erased);
    if !erased.complete() {
        // stdout is the JSON report ("complete": false); a person reading along is told too.
        eprintln!("{}", erased.text());
    }
    let mut report = target.json();
    report.extend(erased.json());
    Ok(report.into())
}
