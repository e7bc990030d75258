//! ImportUserDatabase over gRPC (issue 17 point 7): reconciliation, the contract guard and the
//! re-confirmation latch against the hub's current file or its approved grants, and typed
//! refusals naming the file at fault.

use super::*;

/// The sample's one connection, as stored there.
const BROKER_REQUIREMENT: &str = r#"{"slot":"broker","provider":{"name":"Example Broker"},"kind":"api_key","fields":[{"key":"api_key","label":"API key","type":"secret"}],"declaredApiHosts":["api.broker.example"]}"#;
const BROKER_HOSTS: &str = r#"["api.broker.example"]"#;
const APPROVED_AT: &str = "2026-03-03T00:00:00.000Z";

enum Baseline {
    Nothing,
    Current(Bytes),
    Approvals(pb::LocalApprovals),
}

async fn import(
    client: &mut Client,
    incoming: Bytes,
    baseline: Baseline,
    secrets: Option<snug_proto::container::v1::Secrets>,
) -> Result<(pb::CheckImportResponse, Bytes), Status> {
    use pb::import_user_database_header::Local;
    let incoming_length = incoming.len() as u64;
    let (local, payload) = match baseline {
        Baseline::Nothing => (None, incoming),
        Baseline::Current(current) => (
            Some(Local::CurrentFileLength(current.len() as u64)),
            Bytes::from([incoming.as_ref(), current.as_ref()].concat()),
        ),
        Baseline::Approvals(approvals) => (Some(Local::Approvals(approvals)), incoming),
    };
    upload_import(
        client,
        pb::ImportUserDatabaseHeader {
            incoming_length,
            local,
            secrets,
            trusted_origin: false,
        },
        payload,
    )
    .await
    .map(|(result, bytes)| (result.report.expect("a report"), bytes))
}

async fn upload_import(
    client: &mut Client,
    header: pb::ImportUserDatabaseHeader,
    payload: Bytes,
) -> Result<(pb::ImportUserDatabaseResult, Bytes), Status> {
    let header = pb::ImportUserDatabaseRequest::header(header);
    let request = chunks::upload(header, payload);
    let mut stream = client.import_user_database(request).await?.into_inner();
    let (result, bytes) = chunks::download(&mut stream, u64::MAX, |r| r.length).await?;
    assert_eq!(result.length, bytes.len() as u64);
    Ok((result, bytes))
}

/// The sample with a second, structurally unusable connection row and the latch turned off.
fn incoming_with_a_bad_connection() -> Bytes {
    edited(
        &userdb("sample-v6.user.snug"),
        &format!(
            "INSERT INTO snug_connections (app_id, slot, requirement_json, requirement_version, \
             provenance, status, allowed_hosts, created_at, updated_at) VALUES ('{SAMPLE_APP}', \
             'feed', '{{\"slot\":\"feed\",\"nope\":1}}', 1, 'inference', 'approved', '[]', 't', 't'); \
             INSERT OR REPLACE INTO snug_settings (key, value) VALUES ('needsEndpointConfirm', 'false');"
        ),
    )
}

/// The sample as a hub holds it once the user approved the broker connection.
fn current_with_the_broker_approved() -> Bytes {
    edited(
        &userdb("sample-v6.user.snug"),
        &format!(
            "UPDATE snug_connections SET status = 'approved', approved_at = '{APPROVED_AT}', \
             requirement_version = 2;"
        ),
    )
}

/// Every connection row of a file: slot, status, approved_at, imported.
fn connection_rows(bytes: &[u8]) -> Vec<(String, String, Option<String>, i64)> {
    let (_dir, conn) = sqlite(bytes);
    conn.prepare("SELECT slot, status, approved_at, imported FROM snug_connections ORDER BY slot")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

fn setting(bytes: &[u8], key: &str) -> Option<String> {
    let (_dir, conn) = sqlite(bytes);
    conn.query_row(
        "SELECT value FROM snug_settings WHERE key = ?1",
        [key],
        |r| r.get(0),
    )
    .ok()
}

fn contracts_kept(bytes: &[u8]) -> i64 {
    let (_dir, conn) = sqlite(bytes);
    conn.query_row(
        "SELECT count(*) FROM snug_app_versions WHERE runtime_contract_json IS NOT NULL",
        [],
        |r| r.get(0),
    )
    .expect("count")
}

#[tokio::test]
async fn import_against_the_current_file_restores_its_grant_and_reports_the_dropped_connection() {
    let mut client = client().await;
    let (report, file) = import(
        &mut client,
        incoming_with_a_bad_connection(),
        Baseline::Current(current_with_the_broker_approved()),
        None,
    )
    .await
    .expect("import");
    let dropped: Vec<_> = report
        .dropped_connections
        .iter()
        .map(|d| {
            (
                d.app_id.as_str(),
                d.slot.as_str(),
                d.problem(),
                d.key.as_str(),
            )
        })
        .collect();
    assert_eq!(
        dropped,
        [(
            SAMPLE_APP,
            "feed",
            pb::RequirementProblem::UnknownKey,
            "nope"
        )]
    );
    assert_eq!((report.restored_grants, report.demoted_connections), (1, 0));
    assert!(
        report.dropped_runtime_contracts.is_empty(),
        "the current file holds both contracts"
    );
    assert!(file.starts_with(b"SQLite format 3\0"));
    assert_eq!(
        connection_rows(&file),
        [(
            "broker".to_owned(),
            "approved".to_owned(),
            Some(APPROVED_AT.to_owned()),
            0
        )]
    );
    assert_eq!(contracts_kept(&file), 2);
    assert_eq!(
        setting(&file, "needsEndpointConfirm").as_deref(),
        Some("true"),
        "the latch is re-armed whatever the file said"
    );

    // With nothing held, nothing is restored and no contract is known.
    let (report, file) = import(
        &mut client,
        incoming_with_a_bad_connection(),
        Baseline::Nothing,
        None,
    )
    .await
    .expect("import");
    assert_eq!((report.restored_grants, report.demoted_connections), (0, 1));
    assert_eq!(report.dropped_connections.len(), 1);
    let dropped: Vec<_> = report
        .dropped_runtime_contracts
        .iter()
        .map(|c| (c.app_id.as_str(), c.version))
        .collect();
    assert_eq!(dropped, [(SAMPLE_APP, 8), (SAMPLE_APP, 9)]);
    assert_eq!(contracts_kept(&file), 0);
    assert_eq!(
        connection_rows(&file),
        [("broker".to_owned(), "declared".to_owned(), None, 1)]
    );
}

#[tokio::test]
async fn import_against_approved_grants_matches_the_import_against_their_file() {
    let mut client = client().await;
    let (_dir, conn) = sqlite(&userdb("sample-v6.user.snug"));
    let contracts: Vec<String> = conn
        .prepare("SELECT runtime_contract_json FROM snug_app_versions WHERE runtime_contract_json IS NOT NULL")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("contracts");
    assert_eq!(contracts.len(), 2);
    let approvals = pb::LocalApprovals {
        grants: vec![pb::ApprovedGrant {
            app_id: SAMPLE_APP.to_owned(),
            slot: "broker".to_owned(),
            requirement_json: BROKER_REQUIREMENT.to_owned(),
            allowed_hosts: BROKER_HOSTS.to_owned(),
            approved_at: Some(APPROVED_AT.to_owned()),
            requirement_version: 2,
        }],
        runtime_contracts_json: contracts,
    };
    let (by_grants, by_grants_file) = import(
        &mut client,
        incoming_with_a_bad_connection(),
        Baseline::Approvals(approvals.clone()),
        None,
    )
    .await
    .expect("import");
    let (by_file, by_file_file) = import(
        &mut client,
        incoming_with_a_bad_connection(),
        Baseline::Current(current_with_the_broker_approved()),
        None,
    )
    .await
    .expect("import");
    assert_eq!(by_grants, by_file);
    assert_eq!(
        connection_rows(&by_grants_file),
        connection_rows(&by_file_file)
    );
    assert_eq!(by_grants.restored_grants, 1);

    // A grant whose hosts differ by one byte restores nothing.
    let mut wider = approvals;
    wider.grants[0].allowed_hosts = r#"["api.broker.example" ]"#.to_owned();
    let (report, _) = import(
        &mut client,
        incoming_with_a_bad_connection(),
        Baseline::Approvals(wider),
        None,
    )
    .await
    .expect("import");
    assert_eq!((report.restored_grants, report.demoted_connections), (0, 1));
}

#[tokio::test]
async fn import_refusals_are_typed_and_name_the_file_at_fault() {
    let mut client = client().await;
    let sample = userdb("sample-v6.user.snug");
    let cases = [
        (
            Bytes::from_static(b"not a database at all"),
            Code::InvalidArgument,
            &snug_reasons::schema::NOT_SQLITE,
        ),
        (
            edited(
                &sample,
                "CREATE TRIGGER spy AFTER INSERT ON snug_settings BEGIN SELECT 1; END;",
            ),
            Code::InvalidArgument,
            &snug_reasons::schema::HOSTILE_SCHEMA,
        ),
        (
            edited(&sample, "PRAGMA user_version = 7;"),
            Code::FailedPrecondition,
            &snug_reasons::schema::SCHEMA_TOO_NEW,
        ),
        (
            vector("containers/c01-reference-random-600k.snug"),
            Code::FailedPrecondition,
            &snug_reasons::schema::LOCKED,
        ),
    ];
    for (bad, code, expected) in cases {
        for baseline in [Baseline::Nothing, Baseline::Current(sample.clone())] {
            let status = import(&mut client, bad.clone(), baseline, None)
                .await
                .expect_err(expected.name);
            assert_refused(&status, code, expected);
            assert_eq!(metadata(&status, "file").as_deref(), Some("incoming"));
        }
        // The same bytes as the hub's current file: refused under the open's reason, named.
        if expected != &snug_reasons::schema::LOCKED {
            let status = import(&mut client, sample.clone(), Baseline::Current(bad), None)
                .await
                .expect_err(expected.name);
            assert_refused(&status, code, expected);
            assert_eq!(metadata(&status, "file").as_deref(), Some("current"));
        }
    }
    let too_new = edited(&sample, "PRAGMA user_version = 7;");
    let status = import(&mut client, too_new, Baseline::Nothing, None)
        .await
        .expect_err("too new");
    assert_eq!(metadata(&status, "foundVersion").as_deref(), Some("7"));

    // A protected current file needs unlocking first.
    let status = import(
        &mut client,
        sample.clone(),
        Baseline::Current(vector("containers/c01-reference-random-600k.snug")),
        None,
    )
    .await
    .expect_err("protected current");
    assert_refused(
        &status,
        Code::FailedPrecondition,
        &snug_reasons::schema::PROTECTED,
    );
}

#[tokio::test]
async fn malformed_import_requests_are_invalid_arguments_with_their_field() {
    let mut client = client().await;
    let sample = userdb("sample-v6.user.snug");
    let grant = pb::ApprovedGrant {
        app_id: SAMPLE_APP.to_owned(),
        slot: "broker".to_owned(),
        requirement_json: BROKER_REQUIREMENT.to_owned(),
        allowed_hosts: BROKER_HOSTS.to_owned(),
        approved_at: None,
        requirement_version: 1,
    };
    let cases = [
        (
            pb::LocalApprovals {
                grants: vec![grant.clone(), grant.clone()],
                runtime_contracts_json: vec![],
            },
            "header.approvals.grants[1]",
        ),
        (
            pb::LocalApprovals {
                grants: vec![pb::ApprovedGrant {
                    slot: String::new(),
                    ..grant.clone()
                }],
                runtime_contracts_json: vec![],
            },
            "header.approvals.grants[0]",
        ),
        (
            pb::LocalApprovals {
                grants: vec![grant],
                runtime_contracts_json: vec!["{}".to_owned(), "{not json".to_owned()],
            },
            "header.approvals.runtime_contracts_json[1]",
        ),
    ];
    for (approvals, field) in cases {
        let status = import(
            &mut client,
            sample.clone(),
            Baseline::Approvals(approvals),
            None,
        )
        .await
        .expect_err(field);
        assert_refused(
            &status,
            Code::InvalidArgument,
            &snug_reasons::schema::INVALID_ARGUMENT,
        );
        assert_eq!(metadata(&status, "field").as_deref(), Some(field));
    }

    // Lengths that do not add up to what arrived.
    use pb::import_user_database_header::Local;
    for (incoming_length, local, field) in [
        (sample.len() as u64 + 1, None, "header.incoming_length"),
        (
            sample.len() as u64,
            Some(Local::CurrentFileLength(10)),
            "header.current_file_length",
        ),
    ] {
        let status = upload_import(
            &mut client,
            pb::ImportUserDatabaseHeader {
                incoming_length,
                local,
                secrets: None,
                trusted_origin: false,
            },
            sample.clone(),
        )
        .await
        .expect_err(field);
        assert_refused(
            &status,
            Code::InvalidArgument,
            &snug_reasons::schema::INVALID_ARGUMENT,
        );
        assert_eq!(metadata(&status, "field").as_deref(), Some(field));
    }

    // Declared lengths over their caps are refused before any chunk is read.
    let status = upload_import(
        &mut client,
        pb::ImportUserDatabaseHeader {
            incoming_length: u64::MAX,
            local: Some(Local::CurrentFileLength(u64::MAX)),
            secrets: None,
            trusted_origin: false,
        },
        Bytes::new(),
    )
    .await
    .expect_err("over the cap");
    assert_refused(
        &status,
        Code::ResourceExhausted,
        &snug_reasons::schema::TOO_LARGE,
    );
}

#[tokio::test]
async fn a_protected_incoming_file_is_imported_with_its_secret() {
    let mut client = client().await;
    let (report, file) = import(
        &mut client,
        vector("containers/c01-reference-random-600k.snug"),
        Baseline::Nothing,
        secrets(Some(PASSPHRASE)),
    )
    .await
    .expect("import");
    assert!(report.was_protected);
    assert!(
        file.starts_with(b"SQLite format 3\0"),
        "the result is plain"
    );
    assert_eq!(
        setting(&file, "needsEndpointConfirm").as_deref(),
        Some("true")
    );
}
