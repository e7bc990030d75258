//! The service token of a split hub, through the real `snug-hub` binary (issue 36 point 9): a
//! sync service started with `SNUG_SERVICE_TOKEN` refuses every call without it but health
//! checks, the gateway and the operator commands given it are served, and a gateway given
//! another is told apart from a user's refused credential (500, not 401) and stores nothing.

use std::{path::Path, time::Duration};

use snug_e2e::{Http, Payload, userdb_vector};
use snug_proto::sync::v1::{self as pb, sync_service_client::SyncServiceClient};
use tonic::{Code, transport::Channel};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

mod support;

use support::{Process, run, text};

const TOKEN: &str = "6f1c0e3b9a7d4e2f8c5b1a0d9e8f7a6b5c4d3e2f1a0b9c8d";
const OCTET: (&str, &str) = ("content-type", "application/octet-stream");

fn env(data: &Path, token: &str) -> Vec<(&'static str, String)> {
    vec![
        ("SNUG_LOG_FORMAT", "json".to_owned()),
        ("SNUG_LISTEN", "127.0.0.1:0".to_owned()),
        ("SNUG_HTTP_LISTEN", "127.0.0.1:0".to_owned()),
        ("SNUG_SHUTDOWN_GRACE", "2s".to_owned()),
        ("SNUG_DATA_DIR", data.display().to_string()),
        ("SNUG_SERVICE_TOKEN", token.to_owned()),
    ]
}

/// A gateway in front of the sync service at `sync`, presenting `token`.
async fn gateway(data: &Path, sync: &str, token: &str) -> (Process, Http) {
    let mut env = env(data, token);
    env.push(("SNUG_SYNC_ADDR", format!("http://{sync}")));
    let mut process = Process::spawn("gateway", &["serve", "gateway"], &env);
    let http = process
        .logged("HTTP gateway listening", "addr")
        .await
        .parse()
        .expect("HTTP address");
    (process, Http::new(http))
}

/// GetUsage of a user no one stored, presenting `authorization` when given.
async fn usage(channel: &Channel, authorization: Option<&str>) -> Result<(), tonic::Status> {
    let value: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>> =
        authorization.map(|v| v.parse().expect("metadata"));
    let mut client = SyncServiceClient::with_interceptor(
        channel.clone(),
        move |mut request: tonic::Request<()>| {
            if let Some(value) = &value {
                request
                    .metadata_mut()
                    .insert("authorization", value.clone());
            }
            Ok(request)
        },
    );
    client
        .get_usage(pb::GetUsageRequest {
            user_id: "nobody".to_owned(),
        })
        .await
        .map(drop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_hub_requires_its_service_token_of_every_caller_but_health() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path();
    let mut sync = Process::spawn("sync", &["serve", "sync"], &env(data, TOKEN));
    let grpc = sync.logged("gRPC server listening", "addr").await;
    let channel = Channel::from_shared(format!("http://{grpc}"))
        .expect("address")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");

    // Anyone who reaches the port: refused before anything is done, whatever they present.
    for (presented, case) in [
        (None, "no credential"),
        (Some("Bearer not-the-token"), "another token"),
        (Some(TOKEN), "the token without its scheme"),
    ] {
        let refused = usage(&channel, presented).await.expect_err(case);
        assert_eq!(refused.code(), Code::Unauthenticated, "{case}: {refused:?}");
        assert_eq!(
            snug_rpc::status::reason_of(&refused).as_deref(),
            Some("SERVICE_TOKEN_REFUSED"),
            "{case}"
        );
    }
    // Health needs none: a kubelet's probe sends no metadata.
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: "snug.sync.v1.SyncService".to_owned(),
        })
        .await
        .expect("health")
        .into_inner();
    assert_eq!(health.status(), ServingStatus::Serving);
    // With it, the call is served (an unknown user's usage is its own answer).
    match usage(&channel, Some(&format!("Bearer {TOKEN}"))).await {
        Ok(()) => {}
        Err(status) => assert_ne!(status.code(), Code::Unauthenticated, "{status:?}"),
    }

    // The gateway presents it on every call.
    let (mut good, http) = gateway(data, &grpc, TOKEN).await;
    let image = userdb_vector("fresh-v6.export.snug");
    let put = http
        .send(
            "PUT",
            "/userdb",
            &[OCTET, ("if-none-match", "*")],
            Payload::Whole(image.clone()),
        )
        .await;
    assert_eq!(put.status, 204, "{:?}", text(&put.body));
    let etag = put.headers["etag"].clone();

    // A gateway configured with another token is a misconfigured hub, not a refused user.
    let other = "0".repeat(40);
    let (mut bad, misconfigured) = gateway(data, &grpc, &other).await;
    let refused = misconfigured
        .send(
            "PUT",
            "/userdb",
            &[OCTET, ("if-match", etag.to_str().expect("etag"))],
            Payload::Whole(image.clone()),
        )
        .await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (500, "INTERNAL"),
        "{:?}",
        text(&refused.body)
    );
    let head = http.send("HEAD", "/userdb", &[], Payload::Empty).await;
    assert_eq!(head.headers["etag"], etag, "nothing was stored");

    // The operator's commands present it too (global option or environment).
    let addr = format!("http://{grpc}");
    let without = run(&["sync", "check", "--sync-addr", &addr], &[]);
    assert!(!without.status.success(), "{}", text(&without.stderr));
    assert!(
        text(&without.stderr).contains("SNUG_SERVICE_TOKEN"),
        "the refusal says what is missing: {}",
        text(&without.stderr)
    );
    let with = run(
        &["sync", "check", "--sync-addr", &addr, "--json"],
        &[("SNUG_SERVICE_TOKEN", TOKEN)],
    );
    assert!(with.status.success(), "{}", text(&with.stderr));
    let report: serde_json::Value = serde_json::from_slice(&with.stdout).expect("json");
    assert_eq!(report["imagesChecked"], 1, "{report}");
    let flag = run(
        &[
            "sync",
            "check",
            "--json",
            "--sync-addr",
            &addr,
            "--service-token",
            TOKEN,
        ],
        &[],
    );
    assert!(flag.status.success(), "{}", text(&flag.stderr));

    // A token too short to be one is refused at start, naming the variable.
    let weak = run(&["serve", "sync"], &[("SNUG_SERVICE_TOKEN", "secret")]);
    assert_eq!(weak.status.code(), Some(2), "{}", text(&weak.stderr));
    assert!(text(&weak.stderr).contains("SNUG_SERVICE_TOKEN"));
    assert!(
        !text(&weak.stderr).contains("secret"),
        "a refused token is not echoed: {}",
        text(&weak.stderr)
    );

    for process in [&mut bad, &mut good, &mut sync] {
        let lines = process.terminate().await;
        assert!(
            !lines.iter().any(|line| line.contains(TOKEN)),
            "the token reaches no log line"
        );
    }
}
