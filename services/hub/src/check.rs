//! `snug-hub sync check`: the sync store's integrity check for an operator, against a running
//! sync service (`--sync-addr`, its CheckStore RPC) or a store opened here (a restored backup, a
//! stopped hub), with the same output either way.
//!
//! Progress goes to stderr once a second; each problem is one line on stdout as it is found
//! (`CHUNK_MISMATCH chunk=…`), or, with `--json`, one JSON object at the end. Exit status: 0 when
//! the store is sound, 2 when the check found problems, 1 when it could not run. Opening a store
//! here is opening it as `snug-hub serve sync` would (the embedded store's lock, its `tmp/`
//! emptied, a pending migration applied); the check itself only reads.

use std::process::ExitCode;

use anyhow::Context as _;
use futures::StreamExt as _;
use snug_proto::sync::v1::{self as pb, sync_service_client::SyncServiceClient};
use snug_rpc::runtime::Runtime;
use snug_sync_service::{SyncConfig, SyncServer};

/// Exit status of a check that found problems.
const PROBLEMS_FOUND: u8 = 2;

/// `snug-hub sync check`: the sync service's address, or none to open the store here, and
/// whether the report is one JSON object (both global options).
#[derive(Debug)]
pub(crate) struct CheckArgs {
    pub(crate) addr: Option<String>,
    /// What the sync service at `addr` requires of its callers.
    pub(crate) token: Option<snug_rpc::service_token::ServiceToken>,
    pub(crate) json: bool,
}

/// The report as it grows: what the check has found so far.
#[derive(Default)]
struct Seen {
    images: u64,
    bytes: u64,
    problems: Vec<pb::IntegrityProblem>,
    omitted: u64,
}

impl Seen {
    /// Takes one progress message; prints its problems unless the report is printed as JSON.
    fn take(&mut self, message: pb::CheckStoreResponse, json: bool) {
        self.images = message.images_checked;
        self.bytes = message.bytes_checked;
        self.omitted = message.problems_omitted;
        for problem in message.problems {
            if !json {
                println!("{}", line(&problem));
            }
            self.problems.push(problem);
        }
        eprintln!(
            "checked {} images, {} MiB; {} problems",
            self.images,
            self.bytes >> 20,
            self.problems.len() as u64 + self.omitted
        );
    }

    fn finish(self, json: bool) -> ExitCode {
        if json {
            let problems: Vec<serde_json::Value> = self
                .problems
                .iter()
                .map(|p| {
                    serde_json::json!({
                        "kind": kind_name(p.kind()),
                        "user": (!p.user.is_empty()).then_some(&p.user),
                        "image": (!p.image.is_empty()).then_some(&p.image),
                        "chunk": (!p.chunk.is_empty()).then_some(&p.chunk),
                    })
                })
                .collect();
            println!(
                "{}",
                serde_json::json!({
                    "imagesChecked": self.images,
                    "bytesChecked": self.bytes,
                    "problems": problems,
                    "problemsOmitted": self.omitted,
                })
            );
        }
        if self.problems.is_empty() && self.omitted == 0 {
            eprintln!("the store is sound");
            ExitCode::SUCCESS
        } else {
            ExitCode::from(PROBLEMS_FOUND)
        }
    }
}

/// One problem as a line: its kind, then what it names.
fn line(problem: &pb::IntegrityProblem) -> String {
    let mut out = kind_name(problem.kind()).to_owned();
    for (name, value) in [
        ("user", &problem.user),
        ("image", &problem.image),
        ("chunk", &problem.chunk),
    ] {
        if !value.is_empty() {
            out.push_str(&format!(" {name}={value}"));
        }
    }
    out
}

fn kind_name(kind: pb::IntegrityProblemKind) -> &'static str {
    kind.as_str_name()
        .strip_prefix("INTEGRITY_PROBLEM_KIND_")
        .unwrap_or("UNSPECIFIED")
}

/// Runs the check and reports it.
pub(crate) async fn run(
    args: CheckArgs,
    sync: &SyncConfig,
    runtime: &Runtime,
) -> anyhow::Result<ExitCode> {
    let mut seen = Seen::default();
    match &args.addr {
        Some(addr) => {
            let channel = snug_gateway::backend::channel(
                addr,
                std::time::Duration::from_secs(5),
                args.token.as_ref(),
            )
            .with_context(|| format!("{addr:?} is not a service address"))?;
            let mut client = SyncServiceClient::new(channel);
            let mut stream = client
                .check_store(pb::CheckStoreRequest {})
                .await
                .context("CheckStore was refused")?
                .into_inner();
            while let Some(message) = stream.message().await.context("the check failed")? {
                seen.take(message, args.json);
            }
        }
        None => {
            let store = snug_sync_service::open_store(sync, runtime).await.context(
                "cannot open the sync store (while a hub has it open, pass --sync-addr)",
            )?;
            // The service's own stream, without the network: the same messages either way.
            let mut stream = std::pin::pin!(SyncServer::new(store, sync, runtime).check_stream());
            while let Some(message) = stream.next().await {
                seen.take(message.context("the check failed")?, args.json);
            }
        }
    }
    Ok(seen.finish(args.json))
}
