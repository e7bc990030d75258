//! schemathesis (from PyPI) against the OpenAPI document the hub serves (issue 6): every
//! operation, once with a bearer token and once with no credentials, must never answer 5xx and
//! must answer only what the document promises (status codes, content types, headers, bodies).
//!
//! The whole hub runs in-process on 127.0.0.1; schemathesis runs as a child process from
//! `SNUG_TEST_PYTHON`, else the CI virtualenv `${SNUG_K8S_VENV:-/var/tmp/snug-hub-venv}` that
//! `k8s/validate.sh` fills (its `SCHEMATHESIS_VERSION` pins the version). Without one the test
//! says so on stderr and passes, unless `SNUG_REQUIRE_SCHEMATHESIS=1` (set by `.ci/run`), where a
//! missing schemathesis fails the run.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use snug_e2e::{Http, Hub, Options, Payload, userdb_vector};

/// A fixed seed: the same generated cases every run, so a failure reproduces (`--seed` in its
/// report) and a pass means the same thing each time.
const SEED: &str = "20260601";

/// Cases per operation and phase: one run takes about 35 s on 2 cores, the two runs in parallel.
const MAX_EXAMPLES: &str = "100";

/// The checks that fit this API. Left out: `positive_data_acceptance` (a schema-valid body is
/// still rarely a valid Snug database, and a well-formed but unknown revision is rightly 404 or
/// 412), and the stateful checks (`use_after_free`, `ensure_resource_availability`), which need
/// links the document does not declare.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
response_headers_conformance,response_schema_conformance,negative_data_rejection,\
missing_required_header,unsupported_method,allow_header_conformance,ignored_auth";

/// The Python that has schemathesis, or `None` (after saying why) when the test may skip.
fn schemathesis_python() -> Option<PathBuf> {
    snug_e2e::test_python(
        "schemathesis test",
        "schemathesis",
        "schemathesis",
        "SNUG_REQUIRE_SCHEMATHESIS",
    )
}

/// A hub with one user who has pushed an image, so the reads reach their 200 answers too.
struct Fixture {
    hub: Hub,
    token: String,
    revision: String,
}

async fn hub_with_an_image() -> Fixture {
    // An event stream lasts a second here: schemathesis reads every answer to its end.
    let hub = Hub::start(Options {
        events_stream_lifetime: Duration::from_secs(1),
        ..Options::default()
    })
    .await;
    let token = hub.add_user("alice");
    let http = Http::new(hub.http);
    let auth = format!("Bearer {token}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/octet-stream"),
        ("if-none-match", "*"),
    ];
    let pushed = http
        .send(
            "PUT",
            "/userdb",
            &headers,
            Payload::Whole(userdb_vector("sample-v6.export.snug")),
        )
        .await;
    assert_eq!(
        pushed.status,
        204,
        "{:?}",
        String::from_utf8_lossy(&pushed.body)
    );
    let revision = pushed.header("etag").trim_matches('"').to_owned();
    Fixture {
        hub,
        token,
        revision,
    }
}

/// schemathesis's configuration: besides what it generates, it sometimes sends values that name
/// what exists (the pushed revision, the sample's apps), so the revision, restore and export
/// routes are exercised past their 404s too.
fn config(revision: &str) -> String {
    format!(
        r#"[dictionaries.revisions]
values = ["{revision}"]

[dictionaries.etags]
values = ["\"{revision}\"", "{revision}", "*"]

[dictionaries.apps]
values = ["a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c", "starter--chess"]

[parameters]
"path.rev" = {{ dictionary = "revisions", probability = 0.5 }}
"path.appId" = {{ dictionary = "apps", probability = 0.5 }}
"header.If-Match" = {{ dictionary = "etags", probability = 0.3 }}
"header.If-None-Match" = {{ dictionary = "etags", probability = 0.3 }}
"#
    )
}

/// The number of operations the router serves, which schemathesis must all select and test.
fn operations() -> usize {
    snug_gateway::routes::ROUTES
        .iter()
        .map(|(_, methods)| methods.len())
        .sum()
}

/// Runs schemathesis against the hub's served document and fails with its report on any finding.
async fn run_schemathesis(python: &Path, fixture: &Fixture, authenticated: bool, label: &str) {
    let hub = &fixture.hub;
    // schemathesis and hypothesis write their databases and reports in the working directory;
    // the output goes to files there too, so no pipe can fill up while the child runs.
    let work = tempfile::tempdir().expect("tempdir");
    let out_path = work.path().join("stdout.txt");
    let err_path = work.path().join("stderr.txt");
    let config_path = work.path().join("schemathesis.toml");
    std::fs::write(&config_path, config(&fixture.revision)).expect("config");
    // The document as served, saved to a file: schemathesis leaves out the operation that served
    // the document when it loads one from a URL, and `GET /openapi.json` is an operation too.
    let served = Http::new(hub.http)
        .send("GET", "/openapi.json", &[], Payload::Empty)
        .await;
    assert_eq!(served.status, 200);
    let document_path = work.path().join("openapi.json");
    std::fs::write(&document_path, &served.body).expect("document");
    let mut command = std::process::Command::new(python);
    command
        .args([
            "-c",
            "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())",
        ])
        .arg("--config-file")
        .arg(&config_path)
        .args(["--no-color", "run"])
        .arg(&document_path)
        .args(["--url", &hub.url()])
        .args(["--checks", CHECKS])
        .args(["--max-examples", MAX_EXAMPLES, "--seed", SEED])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args([
            "--workers",
            "2",
            "--request-timeout",
            "30",
            "--generation-database",
            "none",
        ])
        .args([
            "--suppress-health-check",
            "all",
            "--output-truncate",
            "false",
        ])
        .current_dir(work.path())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"));
    if authenticated {
        command.args([
            "--header",
            &format!("Authorization: Bearer {}", fixture.token),
        ]);
    }
    let started = Instant::now();
    let mut child = command.spawn().expect("schemathesis started");
    // Polled, not waited on: the hub answering schemathesis runs on this same runtime.
    let status = loop {
        if let Some(status) = child.try_wait().expect("schemathesis status") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(600) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "schemathesis ({label}) ran for over 10 minutes:\n{}",
                std::fs::read_to_string(&out_path).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let stdout = std::fs::read_to_string(&out_path).expect("stdout");
    let stderr = std::fs::read_to_string(&err_path).expect("stderr");
    let report =
        format!("--- schemathesis ({label}) stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
    assert!(
        status.success(),
        "schemathesis ({label}) found problems ({status}):\n{report}"
    );
    // A run that tested nothing would pass too: every operation must have been selected and tested.
    let n = operations();
    assert!(
        stdout.contains(&format!("Selected: {n}/{n}")),
        "not every operation selected:\n{report}"
    );
    assert!(
        stdout.contains(&format!("Tested: {n}\n")),
        "not every operation tested:\n{report}"
    );
    let _ = writeln!(
        std::io::stderr(),
        "schemathesis ({label}): passed in {:.0?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_with_a_bearer_token_finds_nothing() {
    let Some(python) = schemathesis_python() else {
        return;
    };
    let fixture = hub_with_an_image().await;
    run_schemathesis(&python, &fixture, true, "bearer token").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_without_credentials_finds_nothing() {
    let Some(python) = schemathesis_python() else {
        return;
    };
    let fixture = hub_with_an_image().await;
    run_schemathesis(&python, &fixture, false, "no credentials").await;
}

/// What schemathesis never generates: a path segment that does not percent-decode to UTF-8. Each
/// route with a path parameter still answers with this API's JSON error, not axum's plain text.
#[tokio::test]
async fn undecodable_path_segments_are_typed_errors() {
    let fixture = hub_with_an_image().await;
    let http = Http::new(fixture.hub.http);
    let auth = format!("Bearer {}", fixture.token);
    for (method, path, status, code) in [
        ("GET", "/userdb/apps/%FF/export", 400, "INVALID_ARGUMENT"),
        ("GET", "/userdb/revisions/%FF", 404, "NOT_FOUND"),
        ("HEAD", "/userdb/revisions/%FF", 404, ""),
        ("POST", "/userdb/revisions/%FF/restore", 404, "NOT_FOUND"),
    ] {
        let answer = http
            .send(
                method,
                path,
                &[("authorization", &auth), ("if-none-match", "*")],
                Payload::Empty,
            )
            .await;
        assert_eq!(
            answer.status,
            status,
            "{method} {path}: {:?}",
            String::from_utf8_lossy(&answer.body)
        );
        assert_eq!(
            answer.header("content-type"),
            "application/json",
            "{method} {path}"
        );
        if method != "HEAD" {
            assert_eq!(answer.code(), code, "{method} {path}");
        }
    }
}
