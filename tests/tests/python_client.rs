//! A client in another language (issue 7): Python code generated from `proto/` by grpcio-tools
//! (PyPI) at test time calls the container, schema and sync services running as separate
//! containers (snug-testcontainers), through their gRPC ports on 127.0.0.1 —
//! `tests/python/snug_client_test.py`. And what such a client reads: every field, RPC and enum
//! value of the protos has a comment (`tests/python/proto_docs.py`), and every error reason a
//! service can return is in its proto's reason table.
//!
//! Python comes from `SNUG_TEST_PYTHON`, else the CI virtualenv `${SNUG_K8S_VENV:-/var/tmp/snug-hub-venv}`
//! that `k8s/validate.sh` fills (grpcio-tools and googleapis-common-protos are pinned there).
//! Without grpcio-tools, or without Docker, the tests say so on stderr and pass, unless
//! `SNUG_REQUIRE_GRPCIO_TOOLS=1` / `SNUG_REQUIRE_DOCKER=1` (both set by `.ci/run`).

use std::{
    io::Write as _,
    path::{Path, PathBuf},
};

use snug_testcontainers::{HubImage, HubOptions, Service, SplitHub};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Says on the process's stderr (past the harness's capture) that a test skipped, and why.
fn skipped(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "{test} SKIPPED: {why}");
}

/// The Python that has grpcio-tools and the google.rpc messages, or `None` when it may be missing.
fn python(test: &str) -> Option<PathBuf> {
    snug_e2e::test_python(
        test,
        "grpc, grpc_tools.protoc, google.rpc.status_pb2, google.rpc.error_details_pb2",
        "grpcio-tools and googleapis-common-protos",
        "SNUG_REQUIRE_GRPCIO_TOOLS",
    )
}

/// Runs a script of tests/python to its end and fails with everything it printed unless it
/// exits 0 with its closing "N passed, 0 failed" line.
/// The scripts bound their own run time (faulthandler), so a hung call cannot hang the suite.
async fn run_script(python: &Path, script: &str, args: &[String]) -> String {
    let mut command = std::process::Command::new(python);
    command
        .arg(root().join("tests/python").join(script))
        .args(args);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the script's task")
        .unwrap_or_else(|err| panic!("cannot run {script}: {err}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let closing = stdout.lines().last().unwrap_or_default();
    assert!(
        output.status.success()
            && closing.ends_with(" passed, 0 failed")
            && !closing.starts_with("0 "),
        "{script} exited with {}:\n{stdout}\n{stderr}",
        output.status
    );
    stdout
}

#[test]
fn every_error_reason_a_service_returns_is_in_its_proto() {
    let services = [
        ("container", snug_container_service::error_info::REASONS),
        ("schema", snug_schema_service::error_info::REASONS),
        ("materialize", snug_materialize_service::error_info::REASONS),
        ("sync", snug_sync_service::error_info::REASONS),
    ];
    for (name, reasons) in services {
        let proto =
            std::fs::read_to_string(root().join(format!("proto/snug/{name}/v1/{name}.proto")))
                .expect("proto");
        assert!(
            proto.contains(&format!("domain \"snug.{name}\"")),
            "{name}.proto names its ErrorInfo domain"
        );
        for reason in reasons.reasons.iter().map(|r| r.name) {
            // A row of the proto's reason table: `// | REASON   | CODE | meaning |`.
            let row = proto.lines().any(|line| {
                line.strip_prefix("// |")
                    .and_then(|rest| rest.split('|').next())
                    .is_some_and(|cell| cell.trim() == reason)
            });
            assert!(row, "{name}.proto has no reason-table row for {reason}");
        }
        // The shared runtime's own refusals reach every service's clients too.
        let comments: Vec<&str> = proto
            .lines()
            .filter_map(|line| line.trim().strip_prefix("//"))
            .map(str::trim)
            .collect();
        let shed = format!(
            "reason {} in domain \"{}\"",
            snug_reasons::rpc::OVERLOADED.name,
            snug_rpc::limit::DOMAIN
        );
        assert!(
            comments.join(" ").contains(&shed),
            "{name}.proto does not document {shed}"
        );
    }
}

#[tokio::test]
async fn the_protos_document_every_field_rpc_and_enum_value() {
    let Some(python) = python("the_protos_document_every_field_rpc_and_enum_value") else {
        return;
    };
    let args = [
        "--proto-dir".to_owned(),
        root().join("proto").display().to_string(),
    ];
    run_script(&python, "proto_docs.py", &args).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_python_client_calls_the_container_schema_and_sync_containers() {
    let test = "a_generated_python_client_calls_the_container_schema_and_sync_containers";
    let Some(python) = python(test) else { return };
    if let Err(err) = snug_testcontainers::docker_available().await {
        let required = std::env::var("SNUG_REQUIRE_DOCKER").is_ok_and(|v| v == "1");
        assert!(!required, "SNUG_REQUIRE_DOCKER=1 but {err}");
        skipped(
            test,
            &format!("{err} (SNUG_REQUIRE_DOCKER=1 makes this a failure)"),
        );
        return;
    }
    let image = HubImage::resolve()
        .await
        .unwrap_or_else(|err| panic!("the hub image: {err}"));
    let hub = SplitHub::start(&image, HubOptions::default())
        .await
        .unwrap_or_else(|err| panic!("the split deployment: {err}"));
    let endpoint = |service| hub.grpc_addr(service).expect("a gRPC service").to_string();
    let args = [
        "--proto-dir".to_owned(),
        root().join("proto").display().to_string(),
        "--vectors".to_owned(),
        snug_e2e::vectors_dir().display().to_string(),
        "--container".to_owned(),
        endpoint(Service::Container),
        "--schema".to_owned(),
        endpoint(Service::Schema),
        "--sync".to_owned(),
        endpoint(Service::Sync),
        "--token".to_owned(),
        hub.service_token().to_owned(),
    ];
    let report = run_script(&python, "snug_client_test.py", &args).await;
    println!("{report}");
    for service in ["container:", "schema:", "sync:"] {
        assert!(
            report
                .lines()
                .any(|line| line.starts_with("ok   ") && line.contains(service)),
            "{report}"
        );
    }
}
