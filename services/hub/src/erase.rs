//! `snug-hub sync usage --user ID` and `snug-hub sync erase --user ID`: one user's usage of the
//! sync store and their erasure (issue 20, points 5 and 6), for an operator, against a running
//! sync service (`--addr`, its GetUsage and EraseUser RPCs) or a store opened here (as
//! `snug-hub sync check` does), with the same JSON on stdout either way.
//!
//! Erasing here erases the user's images, history and ledger principals in the sync store only;
//! removing the user from the gateway's users directory is `snug-hub users remove` (or the admin
//! API), which names this command for `--erase`.

use anyhow::Context as _;
use snug_proto::sync::v1::{self as pb, sync_service_client::SyncServiceClient};
use snug_revstore::{RevStore as _, UserId};
use snug_sync_service::SyncConfig;

/// `snug-hub sync usage` and `snug-hub sync erase`.
#[derive(Debug, clap::Args)]
pub(crate) struct UserArgs {
    /// The user's id in the sync store (as the gateway keys their image).
    #[arg(long = "user")]
    user: String,
    /// Ask the sync service at this gRPC address (e.g. http://127.0.0.1:50051) instead of
    /// opening the store here; use it while a hub has the store open.
    #[arg(long)]
    addr: Option<String>,
}

impl UserArgs {
    fn user(&self) -> anyhow::Result<UserId> {
        UserId::new(self.user.clone()).context("--user is not a user id")
    }

    async fn client(addr: &str) -> anyhow::Result<SyncServiceClient<tonic::transport::Channel>> {
        SyncServiceClient::connect(addr.to_owned())
            .await
            .with_context(|| format!("cannot reach the sync service at {addr}"))
    }
}

async fn open(sync: &SyncConfig) -> anyhow::Result<snug_revstore::AnyStore> {
    snug_sync_service::open_store(sync)
        .await
        .context("cannot open the sync store (while a hub has it open, use --addr)")
}

/// Prints the user's usage as one JSON object.
pub(crate) async fn usage(args: UserArgs, sync: &SyncConfig) -> anyhow::Result<()> {
    let user = args.user()?;
    let usage = match &args.addr {
        Some(addr) => UserArgs::client(addr)
            .await?
            .get_usage(pb::GetUsageRequest {
                user_id: user.to_string(),
            })
            .await
            .context("GetUsage was refused")?
            .into_inner(),
        None => snug_sync_service::usage_response(open(sync).await?.usage(&user).await?),
    };
    println!(
        "{}",
        serde_json::json!({
            "user": user.as_str(),
            "currentBytes": usage.current_bytes,
            "historyBytes": usage.history_bytes,
            "revisions": usage.revisions,
            "retainedRevisions": usage.retained_revisions,
        })
    );
    Ok(())
}

/// Erases the user and prints what was deleted as one JSON object.
pub(crate) async fn erase(args: UserArgs, sync: &SyncConfig) -> anyhow::Result<()> {
    let user = args.user()?;
    let report = match &args.addr {
        Some(addr) => UserArgs::client(addr)
            .await?
            .erase_user(pb::EraseUserRequest {
                user_id: user.to_string(),
            })
            .await
            .context("EraseUser was refused")?
            .into_inner(),
        None => snug_sync_service::erasure_response(open(sync).await?.erase(&user).await?),
    };
    println!(
        "{}",
        serde_json::json!({
            "user": user.as_str(),
            "revisions": report.revisions,
            "publications": report.publications,
            "images": report.images,
            "chunks": report.chunks,
            "bytes": report.bytes,
            "packs": report.packs,
            "packsWiped": report.packs_wiped,
            "ledgerRowsScrubbed": report.ledger_rows_scrubbed,
        })
    );
    Ok(())
}
