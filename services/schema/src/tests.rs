//! In-process tests of `snug.schema.v1`: a real server on loopback, a generated client, and the
//! shared reference user databases.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use bytes::Bytes;
use sha2::Digest as _;
use snug_proto::schema::v1::{
    self as pb, operation::Operation as Op, operation_result::Result as OpResult,
    query_result::Result as Answer, read_query::Query as Read,
    schema_service_client::SchemaServiceClient,
};
use snug_rpc::chunks::Chunked as _;
use snug_rpc::chunks::{self, CHUNK_SIZE};
use tonic::{Code, Status, transport::Channel};

use super::*;

mod free_space;
mod kdf_policy;

type Client = SchemaServiceClient<Channel>;

const PASSPHRASE: &str = "correct horse battery staple";
const SAMPLE_APP: &str = "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c";

fn vectors() -> PathBuf {
    snug_test_support::vectors_dir()
}

fn vector(name: &str) -> Bytes {
    let path = vectors().join(name);
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn userdb(name: &str) -> Bytes {
    vector(&format!("userdb/{name}"))
}

async fn start(config: SchemaConfig) -> Client {
    start_with(config, snug_rpc::runtime::Runtime::default()).await
}

/// [`start`], its uploads admitted against `runtime`'s budget.
async fn start_with(config: SchemaConfig, runtime: snug_rpc::runtime::Runtime) -> Client {
    let channel = snug_rpc::server::on_loopback(|listener| async move {
        let server_config = ServerConfig::for_tests();
        serve(
            &server_config,
            &config,
            &runtime,
            listener,
            std::future::pending(),
        )
        .await
    })
    .await
    .expect("start the service");
    SchemaServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE)
}

async fn client() -> Client {
    start(SchemaConfig::default()).await
}

fn reason(status: &Status) -> String {
    snug_rpc::status::reason_of(status).unwrap_or_default()
}

fn metadata(status: &Status, key: &str) -> Option<String> {
    snug_rpc::status::metadata_of(status, key)
}

#[track_caller]
fn assert_refused(status: &Status, code: Code, expected: &snug_reasons::Reason) {
    assert_eq!(
        (status.code(), reason(status).as_str()),
        (code, expected.name),
        "{}",
        status.message()
    );
}

/// Runs SQL against a copy of `bytes` on disk and returns the changed image.
fn edited(bytes: &[u8], sql: &str) -> Bytes {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("edit.sqlite");
    std::fs::write(&path, bytes).expect("write");
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.execute_batch(sql).expect("sql");
    drop(conn);
    Bytes::from(std::fs::read(&path).expect("read"))
}

/// Opens `bytes` read-only in a scratch file for assertions.
fn sqlite(bytes: &[u8]) -> (tempfile::TempDir, rusqlite::Connection) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("check.sqlite");
    std::fs::write(&path, bytes).expect("write");
    let conn = rusqlite::Connection::open(&path).expect("open");
    (dir, conn)
}

/// One `PRAGMA table_info` row: name, type, not null, default, primary-key position.
type Column = (String, String, bool, Option<String>, i64);

/// `PRAGMA table_info` of every table, keyed by table name: the shape a file exposes, which is
/// what must match across implementations (DDL text differs where columns were ALTERed in).
fn table_shapes(bytes: &[u8]) -> BTreeMap<String, Vec<Column>> {
    let (_dir, conn) = sqlite(bytes);
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'snug_%' ORDER BY name")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("names");
    names
        .into_iter()
        .map(|name| {
            let columns = conn
                .prepare(&format!("PRAGMA table_info(\"{name}\")"))
                .expect("prepare")
                .query_map([], |row| {
                    Ok((
                        row.get(1)?,
                        row.get(2)?,
                        row.get::<_, i64>(3)? == 1,
                        row.get(4)?,
                        row.get(5)?,
                    ))
                })
                .expect("query")
                .collect::<Result<Vec<_>, _>>()
                .expect("columns");
            (name, columns)
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

// --- one client helper per RPC ----------------------------------------------------------------

async fn inspect(
    client: &mut Client,
    bytes: Bytes,
) -> Result<pb::InspectUserDatabaseResponse, Status> {
    let header = pb::InspectUserDatabaseRequest::header(pb::InspectUserDatabaseHeader {
        expected_length: Some(bytes.len() as u64),
    });
    let request = chunks::upload(header, bytes);
    Ok(client.inspect_user_database(request).await?.into_inner())
}

async fn migrate(
    client: &mut Client,
    bytes: Bytes,
) -> Result<(pb::MigrateUserDatabaseResult, Bytes), Status> {
    let header = pb::MigrateUserDatabaseRequest::header(pb::MigrateUserDatabaseHeader {
        expected_length: None,
    });
    let request = chunks::upload(header, bytes);
    let mut stream = client.migrate_user_database(request).await?.into_inner();
    let (result, bytes) = chunks::download(&mut stream, u64::MAX, |r| r.length).await?;
    assert_eq!(result.length, bytes.len() as u64);
    Ok((result, bytes))
}

async fn export(
    client: &mut Client,
    bytes: Bytes,
    include_secrets: bool,
) -> Result<(pb::ExportUserDatabaseResult, Bytes), Status> {
    let header = pb::ExportUserDatabaseRequest::header(pb::ExportUserDatabaseHeader {
        include_secrets,
        expected_length: Some(bytes.len() as u64),
    });
    let request = chunks::upload(header, bytes);
    let mut stream = client.export_user_database(request).await?.into_inner();
    let (result, bytes) = chunks::download(&mut stream, u64::MAX, |r| r.length).await?;
    assert_eq!(result.length, bytes.len() as u64);
    Ok((result, bytes))
}

fn secrets(passphrase: Option<&str>) -> Option<snug_proto::container::v1::Secrets> {
    Some(snug_proto::container::v1::Secrets {
        passphrase: passphrase.map(str::to_owned),
        recovery_key: None,
    })
}

async fn check_import(
    client: &mut Client,
    bytes: Bytes,
    secrets: Option<snug_proto::container::v1::Secrets>,
    trusted_origin: bool,
) -> Result<pb::CheckImportResponse, Status> {
    let header = pb::CheckImportRequest::header(pb::CheckImportHeader {
        secrets,
        trusted_origin,
        expected_length: None,
    });
    let request = chunks::upload(header, bytes);
    Ok(client.check_import(request).await?.into_inner())
}

async fn validate(
    client: &mut Client,
    bytes: Bytes,
) -> Result<pb::ValidateSyncImageResponse, Status> {
    let header = pb::ValidateSyncImageRequest::header(pb::ValidateSyncImageHeader {
        expected_length: Some(bytes.len() as u64),
    });
    let request = chunks::upload(header, bytes);
    Ok(client.validate_sync_image(request).await?.into_inner())
}

async fn apply(
    client: &mut Client,
    bytes: Bytes,
    operations: Vec<Op>,
) -> Result<(pb::ApplyOperationsResult, Bytes), Status> {
    let header = pb::ApplyOperationsRequest::header(pb::ApplyOperationsHeader {
        operations: operations
            .into_iter()
            .map(|op| pb::Operation {
                operation: Some(op),
            })
            .collect(),
        expected_length: None,
    });
    let request = chunks::upload(header, bytes);
    let mut stream = client.apply_operations(request).await?.into_inner();
    let (result, bytes) = chunks::download(&mut stream, u64::MAX, |r| r.length).await?;
    assert_eq!(result.length, bytes.len() as u64);
    Ok((result, bytes))
}

/// Applies one operation and returns its result and the new file.
async fn apply_one(
    client: &mut Client,
    bytes: Bytes,
    operation: Op,
) -> Result<(OpResult, Bytes), Status> {
    let (mut result, bytes) = apply(client, bytes, vec![operation]).await?;
    assert_eq!(result.results.len(), 1);
    Ok((result.results.remove(0).result.expect("a result"), bytes))
}

async fn query(
    client: &mut Client,
    bytes: Bytes,
    queries: Vec<Read>,
) -> Result<Vec<Answer>, Status> {
    let header = pb::QueryRequest::header(pb::QueryHeader {
        queries: queries
            .into_iter()
            .map(|q| pb::ReadQuery { query: Some(q) })
            .collect(),
        expected_length: None,
    });
    let request = chunks::upload(header, bytes);
    let response = client.query(request).await?.into_inner();
    Ok(response
        .results
        .into_iter()
        .map(|r| r.result.expect("a result"))
        .collect())
}

async fn query_one(client: &mut Client, bytes: Bytes, read: Read) -> Result<Answer, Status> {
    Ok(query(client, bytes, vec![read]).await?.remove(0))
}

// --- InspectUserDatabase ----------------------------------------------------------------------

#[tokio::test]
async fn inspect_reports_version_tables_classes_and_health_without_writing() {
    let mut client = client().await;

    let fresh = inspect(&mut client, userdb("fresh-v6.user.snug"))
        .await
        .expect("fresh");
    assert_eq!((fresh.storage_version, fresh.supported_version), (6, 6));
    assert_eq!(fresh.migrate_from, None);
    assert_eq!(fresh.heal, Some(pb::HealPlan::default()));
    assert_eq!((fresh.open_refusal, fresh.import_refusal), (None, None));
    assert_eq!(fresh.length, 114_688);
    let classes: BTreeMap<&str, pb::TableClass> = fresh
        .tables
        .iter()
        .filter(|t| t.kind() == pb::TableKind::Hub)
        .map(|t| (t.name.as_str(), t.table_class()))
        .collect();
    assert_eq!(classes.len(), 13, "{classes:?}");
    assert_eq!(classes["snug_secrets"], pb::TableClass::Secret);
    assert_eq!(classes["snug_settings"], pb::TableClass::Config);
    assert_eq!(classes["snug_sync"], pb::TableClass::SyncConfig);
    assert_eq!(classes["snug_meta"], pb::TableClass::HostInternal);
    assert_eq!(classes["snug_apps"], pb::TableClass::Portable);

    // Per-app data tables are recognised with their namespace token.
    let sample = inspect(&mut client, userdb("sample-v6.user.snug"))
        .await
        .expect("sample");
    let app_tables: Vec<_> = sample
        .tables
        .iter()
        .filter(|t| t.kind() == pb::TableKind::AppData)
        .map(|t| (t.app_token.as_str(), t.app_table.as_str(), t.table_class()))
        .collect();
    assert!(
        app_tables.contains(&(
            "a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c",
            "trades",
            pb::TableClass::Portable
        )),
        "{app_tables:?}"
    );
    let secrets = sample
        .tables
        .iter()
        .find(|t| t.name == "snug_secrets")
        .expect("secrets");
    assert_eq!(secrets.rows, Some(2));

    // The legacy file: the ladder would run from 1 and wipe one legacy credential.
    let legacy = inspect(&mut client, userdb("legacy-v1.user.sqlite"))
        .await
        .expect("legacy");
    assert_eq!(legacy.migrate_from, Some(1));
    assert_eq!(legacy.legacy_credentials, 1);
    assert!(legacy.open_refusal.is_none());

    // The broken stamp: version 6 with two tables missing, which a heal would restore.
    let broken = inspect(&mut client, userdb("broken-stamp-v6.user.sqlite"))
        .await
        .expect("broken");
    assert_eq!(broken.migrate_from, None);
    let mut missing = broken.heal.expect("heal").missing_tables;
    missing.sort();
    assert_eq!(missing, ["snug_app_docs", "snug_connections"]);

    // Newer than this build: reported, not an error.
    let future = inspect(&mut client, userdb("future-v7.user.sqlite"))
        .await
        .expect("future");
    assert_eq!(future.storage_version, 7);
    assert_eq!(
        future.open_refusal.expect("refused").reason,
        &snug_reasons::schema::SCHEMA_TOO_NEW
    );
    assert_eq!(
        future.import_refusal.expect("refused").reason,
        &snug_reasons::schema::SCHEMA_TOO_NEW
    );
}

// --- MigrateUserDatabase ----------------------------------------------------------------------

#[tokio::test]
async fn legacy_v1_migrates_to_the_reference_shapes_and_loses_its_legacy_credential() {
    let mut client = client().await;
    let (result, migrated) = migrate(&mut client, userdb("legacy-v1.user.sqlite"))
        .await
        .expect("migrate");
    let report = result.report.expect("report");
    assert_eq!(
        (report.found_version, report.advanced, report.wrote),
        (1, true, true)
    );
    assert_eq!(report.credentials_wiped, 1);
    assert!(!result.unchanged);
    assert_eq!(
        table_shapes(&migrated),
        table_shapes(&userdb("legacy-v1.migrated.user.snug"))
    );

    let (_dir, conn) = sqlite(&migrated);
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, 6);
    let keys: Vec<String> = conn
        .prepare("SELECT key FROM snug_secrets ORDER BY key")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("keys");
    assert_eq!(
        keys,
        [
            "auth:_flow:abc",
            "auth:_state_hmac",
            "auth:a1:slot1:api_key",
            "byok:anthropic"
        ]
    );
    // Compacted: the wiped value is in no page, free or live.
    assert!(!contains(&migrated, b"legacy-v3-credential"));
    assert!(contains(
        &userdb("legacy-v1.user.sqlite"),
        b"legacy-v3-credential"
    ));
}

#[tokio::test]
async fn the_broken_stamp_heals_and_a_healthy_file_comes_back_byte_for_byte() {
    let mut client = client().await;
    let (result, healed) = migrate(&mut client, userdb("broken-stamp-v6.user.sqlite"))
        .await
        .expect("heal");
    let report = result.report.expect("report");
    assert!(report.healed && !report.advanced);
    assert_eq!(report.credentials_wiped, 0);
    let mut tables = report.heal.expect("heal").tables;
    tables.sort();
    assert_eq!(tables, ["snug_app_docs", "snug_connections"]);
    assert_eq!(
        table_shapes(&healed),
        table_shapes(&userdb("broken-stamp-v6.migrated.user.snug"))
    );

    let sample = userdb("sample-v6.user.snug");
    let (result, same) = migrate(&mut client, sample.clone()).await.expect("healthy");
    assert!(result.unchanged);
    assert!(!result.report.expect("report").wrote);
    assert_eq!(same, sample);

    // The healed output is itself healthy now.
    let (result, _) = migrate(&mut client, healed).await.expect("again");
    assert!(result.unchanged);
}

#[tokio::test]
async fn a_newer_file_is_refused_with_its_versions_by_every_rpc_that_opens_it() {
    let mut client = client().await;
    let future = userdb("future-v7.user.sqlite");
    let mut statuses = vec![
        migrate(&mut client, future.clone())
            .await
            .expect_err("migrate"),
        export(&mut client, future.clone(), false)
            .await
            .expect_err("export"),
        check_import(&mut client, future.clone(), None, false)
            .await
            .expect_err("check"),
        validate(&mut client, future.clone())
            .await
            .expect_err("validate"),
        query_one(&mut client, future.clone(), Read::ListApps(pb::ListApps {}))
            .await
            .expect_err("query"),
    ];
    statuses.push(
        apply_one(
            &mut client,
            future.clone(),
            Op::DeleteSetting(pb::DeleteSetting { key: "x".into() }),
        )
        .await
        .expect_err("apply"),
    );
    for status in statuses {
        assert_refused(
            &status,
            Code::FailedPrecondition,
            &snug_reasons::schema::SCHEMA_TOO_NEW,
        );
        assert_eq!(metadata(&status, "foundVersion").as_deref(), Some("7"));
        assert_eq!(metadata(&status, "supportedVersion").as_deref(), Some("6"));
    }
}

#[tokio::test]
async fn foreign_and_damaged_files_get_typed_reasons() {
    let mut client = client().await;
    let container = vector("containers/c01-reference-random-600k.snug");
    let status = migrate(&mut client, container)
        .await
        .expect_err("container");
    assert_refused(
        &status,
        Code::FailedPrecondition,
        &snug_reasons::schema::PROTECTED,
    );

    let status = migrate(
        &mut client,
        Bytes::from_static(b"PK\x03\x04 not a database"),
    )
    .await
    .expect_err("garbage");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::NOT_SQLITE,
    );

    // A SQLite header cut short of a whole page.
    let sample = userdb("sample-v6.user.snug");
    let status = migrate(&mut client, sample.slice(..sample.len() - 100))
        .await
        .expect_err("partial page");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::MALFORMED,
    );
    assert_eq!(metadata(&status, "detail").as_deref(), Some("partial_page"));

    // A SQLite database without any hub table.
    let foreign = edited(
        &[],
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('x');",
    );
    let status = migrate(&mut client, foreign).await.expect_err("not snug");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::NOT_A_USER_DATABASE,
    );

    // A trigger on a hub table would run on the host's own writes.
    let hostile = edited(
        &sample,
        "CREATE TRIGGER leak AFTER INSERT ON snug_settings BEGIN SELECT 1; END;",
    );
    let status = migrate(&mut client, hostile).await.expect_err("hostile");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::HOSTILE_SCHEMA,
    );
    assert_eq!(metadata(&status, "detail").as_deref(), Some("trigger"));
    assert_eq!(metadata(&status, "object").as_deref(), Some("leak"));
}

// --- ExportUserDatabase -----------------------------------------------------------------------

#[tokio::test]
async fn export_strips_secrets_by_default_and_keeps_them_only_when_asked() {
    let mut client = client().await;
    let sample = userdb("sample-v6.user.snug");
    assert!(contains(&sample, b"sk-ant-TEST-SECRET-DO-NOT-USE"));

    let (result, stripped) = export(&mut client, sample.clone(), false)
        .await
        .expect("export");
    assert_eq!(result.secrets_removed, 2);
    assert_eq!(result.source.expect("source").found_version, 6);
    assert!(!contains(&stripped, b"sk-ant-TEST-SECRET-DO-NOT-USE"));
    assert!(!contains(&stripped, b"v4-slot-credential"));
    assert_eq!(
        table_shapes(&stripped),
        table_shapes(&userdb("sample-v6.export.snug"))
    );

    let (result, kept) = export(&mut client, sample, true)
        .await
        .expect("export with secrets");
    assert_eq!(result.secrets_removed, 0);
    assert!(contains(&kept, b"sk-ant-TEST-SECRET-DO-NOT-USE"));

    // An old source is migrated in the copy: the legacy credential is wiped there too.
    let (result, exported) = export(&mut client, userdb("legacy-v1.user.sqlite"), true)
        .await
        .expect("legacy export");
    assert!(result.source.expect("source").advanced);
    assert!(!contains(&exported, b"legacy-v3-credential"));
    assert!(contains(&exported, b"v4-shape-credential"));
}

// --- CheckImport ------------------------------------------------------------------------------

#[tokio::test]
async fn check_import_reports_reconciliation_and_keeps_nothing() {
    let mut client = client().await;
    let sample = userdb("sample-v6.user.snug");
    let report = check_import(&mut client, sample.clone(), None, false)
        .await
        .expect("check");
    assert!(!report.was_protected);
    assert_eq!((report.found_version, report.advanced), (6, false));
    // No local database: the declared connection lands demoted, and both contracts are unknown.
    assert_eq!((report.restored_grants, report.demoted_connections), (0, 1));
    let dropped: Vec<_> = report
        .dropped_runtime_contracts
        .iter()
        .map(|c| (c.app_id.as_str(), c.version))
        .collect();
    assert_eq!(dropped, [(SAMPLE_APP, 8), (SAMPLE_APP, 9)]);

    // The user's own origin keeps its contracts.
    let report = check_import(&mut client, sample, None, true)
        .await
        .expect("trusted");
    assert!(report.dropped_runtime_contracts.is_empty());

    let legacy = check_import(&mut client, userdb("legacy-v1.user.sqlite"), None, false)
        .await
        .expect("legacy");
    assert!(legacy.advanced);
    assert_eq!(legacy.credentials_wiped, 1);

    // A structurally unusable requirement is dropped, with the reason.
    let bad = edited(
        &userdb("sample-v6.user.snug"),
        "UPDATE snug_connections SET requirement_json = '{\"slot\":\"broker\",\"nope\":1}';",
    );
    let report = check_import(&mut client, bad, None, false)
        .await
        .expect("bad requirement");
    let dropped = &report.dropped_connections;
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(
        (dropped[0].slot.as_str(), dropped[0].problem()),
        ("broker", pb::RequirementProblem::UnknownKey)
    );
    assert_eq!(dropped[0].key, "nope");
}

#[tokio::test]
async fn check_import_opens_containers_with_their_secret_and_keeps_locked_files_locked() {
    let mut client = client().await;
    let container = vector("containers/c01-reference-random-600k.snug");
    let report = check_import(
        &mut client,
        container.clone(),
        secrets(Some(PASSPHRASE)),
        false,
    )
    .await
    .expect("unlocked");
    assert!(report.was_protected);
    assert_eq!(report.found_version, 6);

    for secrets in [secrets(Some("wrong")), secrets(None), None] {
        let status = check_import(&mut client, container.clone(), secrets, false)
            .await
            .expect_err("locked");
        assert_refused(
            &status,
            Code::FailedPrecondition,
            &snug_reasons::schema::LOCKED,
        );
    }

    let damaged = vector("containers/n01-flipped-iterations.snug");
    let status = check_import(&mut client, damaged, secrets(Some(PASSPHRASE)), false)
        .await
        .expect_err("damaged");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::CORRUPT_CONTAINER,
    );
    assert_eq!(
        metadata(&status, "detail").as_deref(),
        Some("header_checksum_mismatch")
    );

    // A newer version byte under a valid checksum is a newer format; under the old checksum it
    // is damage (§11.2 rule 6).
    let mut damaged = container.to_vec();
    damaged[9] = 2;
    let newer = snug_container::with_valid_checksum(&damaged);
    let status = check_import(
        &mut client,
        Bytes::from(newer),
        secrets(Some(PASSPHRASE)),
        false,
    )
    .await
    .expect_err("newer container");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::UNSUPPORTED_FORMAT_VERSION,
    );
    let status = check_import(
        &mut client,
        Bytes::from(damaged),
        secrets(Some(PASSPHRASE)),
        false,
    )
    .await
    .expect_err("damaged container");
    assert_eq!(
        metadata(&status, "detail").as_deref(),
        Some("header_checksum_mismatch")
    );

    let status = check_import(&mut client, Bytes::from_static(b"garbage"), None, false)
        .await
        .expect_err("garbage");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::NOT_SQLITE,
    );

    let status = check_import(
        &mut client,
        edited(&[], "CREATE TABLE notes (id INTEGER PRIMARY KEY);"),
        None,
        false,
    )
    .await
    .expect_err("not snug");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::NOT_A_USER_DATABASE,
    );
}

// --- ValidateSyncImage ------------------------------------------------------------------------

#[tokio::test]
async fn validate_sync_image_accepts_a_default_export_as_sent() {
    let mut client = client().await;
    let export = userdb("sample-v6.export.snug");
    let response = validate(&mut client, export.clone()).await.expect("valid");
    assert_eq!(response.storage_version, 6);
    assert_eq!(response.length, export.len() as u64);
    // The hash is of the bytes to be stored: the reference's export with its free space zeroed
    // (free_space::validate_sync_image_names_the_free_space_to_zero checks the content).
    let stored = snug_schema::scrub_free_space(&export).expect("walkable");
    assert_eq!(
        hex::encode(&response.sha256),
        hex::encode(sha2::Sha256::digest(&stored))
    );
    validate(&mut client, userdb("fresh-v6.export.snug"))
        .await
        .expect("fresh export");
    // An older image an import would take is stored as sent; the client migrates on pull.
    let legacy = edited(
        &userdb("legacy-v1.user.sqlite"),
        "DELETE FROM snug_secrets;",
    );
    let response = validate(&mut client, legacy.clone())
        .await
        .expect("older image");
    assert_eq!(response.storage_version, 1);
    assert_eq!(response.length, legacy.len() as u64);
}

#[tokio::test]
async fn validate_sync_image_refuses_what_a_hub_origin_must_not_store() {
    let mut client = client().await;
    #[rustfmt::skip]
    let cases: Vec<(&str, Bytes, Code, &snug_reasons::Reason)> = vec![
        ("container", vector("containers/c01-reference-random-600k.snug"), Code::InvalidArgument, &snug_reasons::schema::CONTAINER_NOT_ACCEPTED),
        ("secrets", userdb("sample-v6.user.snug"), Code::InvalidArgument, &snug_reasons::schema::SECRETS_PRESENT),
        ("export with secrets", userdb("sample-v6.export-with-secrets.snug"), Code::InvalidArgument, &snug_reasons::schema::SECRETS_PRESENT),
        ("newer", userdb("future-v7.user.sqlite"), Code::FailedPrecondition, &snug_reasons::schema::SCHEMA_TOO_NEW),
        ("not snug", edited(&[], "CREATE TABLE notes (id INTEGER PRIMARY KEY);"), Code::InvalidArgument, &snug_reasons::schema::NOT_A_USER_DATABASE),
        ("garbage", Bytes::from_static(b"{\"not\": \"sqlite\"}"), Code::InvalidArgument, &snug_reasons::schema::NOT_SQLITE),
        ("empty", Bytes::new(), Code::InvalidArgument, &snug_reasons::schema::NOT_SQLITE),
        ("truncated", userdb("sample-v6.export.snug").slice(..4096 + 10), Code::InvalidArgument, &snug_reasons::schema::MALFORMED),
        (
            "foreign table",
            edited(&userdb("sample-v6.export.snug"), "CREATE TABLE tracking (id INTEGER);"),
            Code::InvalidArgument,
            &snug_reasons::schema::HOSTILE_SCHEMA,
        ),
    ];
    for (name, bytes, code, expected) in cases {
        let status = validate(&mut client, bytes).await.expect_err(name);
        assert_eq!(
            (status.code(), reason(&status).as_str()),
            (code, expected.name),
            "{name}: {}",
            status.message()
        );
    }
    let status = validate(&mut client, userdb("sample-v6.user.snug"))
        .await
        .expect_err("secrets");
    assert_eq!(metadata(&status, "secretRows").as_deref(), Some("2"));
}

// --- ApplyOperations and Query ----------------------------------------------------------------

fn install(app_id: &str, html: &str) -> Op {
    Op::InstallApp(pb::InstallApp {
        app_id: Some(app_id.to_owned()),
        display_name: "Notes".to_owned(),
        html: html.to_owned(),
        install_source: Some(format!("starter:{app_id}")),
        ..Default::default()
    })
}

fn save(app_id: &str, html: &str) -> Op {
    Op::SaveAppVersion(pb::SaveAppVersion {
        app_id: app_id.to_owned(),
        html: html.to_owned(),
        ..Default::default()
    })
}

fn version_of(result: &OpResult) -> i64 {
    match result {
        OpResult::SaveAppVersion(v) | OpResult::RevertApp(v) | OpResult::ResetToFactory(v) => {
            v.version
        }
        other => panic!("not a version result: {other:?}"),
    }
}

#[tokio::test]
async fn apps_and_versions_install_save_prune_revert_reset_and_delete() {
    let mut client = client().await;
    let fresh = userdb("fresh-v6.user.snug");
    let mut ops = vec![install("notes", "<p>v1</p>")];
    ops.extend((2..=8).map(|v| save("notes", &format!("<p>v{v}</p>"))));
    // Installing the same source again finds the app instead of installing a copy.
    ops.push(Op::InstallApp(pb::InstallApp {
        app_id: Some("notes-again".to_owned()),
        display_name: "Notes again".to_owned(),
        html: "<p>other</p>".to_owned(),
        install_source: Some("starter:notes".to_owned()),
        ..Default::default()
    }));
    ops.push(Op::InstallApp(pb::InstallApp {
        display_name: "Fresh id".to_owned(),
        html: "<p>x</p>".to_owned(),
        ..Default::default()
    }));
    let (result, file) = apply(&mut client, fresh, ops).await.expect("apply");
    let results: Vec<OpResult> = result
        .results
        .into_iter()
        .map(|r| r.result.expect("result"))
        .collect();
    assert_eq!(
        results[0],
        OpResult::InstallApp(pb::InstallAppResult {
            app_id: "notes".into(),
            created: true
        })
    );
    assert_eq!(
        results[1..8].iter().map(version_of).collect::<Vec<_>>(),
        (2..=8).collect::<Vec<_>>()
    );
    assert_eq!(
        results[8],
        OpResult::InstallApp(pb::InstallAppResult {
            app_id: "notes".into(),
            created: false
        })
    );
    let OpResult::InstallApp(generated) = &results[9] else {
        panic!("install")
    };
    assert!(
        generated.created && generated.app_id.len() == 36,
        "{generated:?}"
    );

    // Retention: the pinned factory version plus the five newest unpinned ones.
    let Answer::ListAppVersions(list) = query_one(
        &mut client,
        file.clone(),
        Read::ListAppVersions(pb::ListAppVersions {
            app_id: "notes".into(),
        }),
    )
    .await
    .expect("versions") else {
        panic!("versions")
    };
    let versions: Vec<(i64, bool)> = list
        .versions
        .iter()
        .map(|v| (v.version, v.pinned))
        .collect();
    assert_eq!(
        versions,
        [
            (8, false),
            (7, false),
            (6, false),
            (5, false),
            (4, false),
            (1, true)
        ]
    );

    let (revert, file) = apply_one(
        &mut client,
        file,
        Op::RevertApp(pb::RevertApp {
            app_id: "notes".into(),
            to_version: 5,
        }),
    )
    .await
    .expect("revert");
    assert_eq!(version_of(&revert), 9);
    let (reset, file) = apply_one(
        &mut client,
        file,
        Op::ResetToFactory(pb::ResetToFactory {
            app_id: "notes".into(),
        }),
    )
    .await
    .expect("reset");
    assert_eq!(version_of(&reset), 10);
    let answers = query(
        &mut client,
        file.clone(),
        vec![
            Read::GetAppVersion(pb::GetAppVersion {
                app_id: "notes".into(),
                version: Some(9),
            }),
            Read::GetAppVersion(pb::GetAppVersion {
                app_id: "notes".into(),
                version: None,
            }),
            Read::GetApp(pb::GetApp {
                app_id: "notes".into(),
            }),
        ],
    )
    .await
    .expect("read back");
    let [
        Answer::GetAppVersion(reverted),
        Answer::GetAppVersion(current),
        Answer::GetApp(app),
    ] = &answers[..]
    else {
        panic!("{answers:?}")
    };
    assert_eq!(
        (reverted.html.as_str(), reverted.note.as_deref()),
        ("<p>v5</p>", Some("revert to v5"))
    );
    assert_eq!((current.version, current.html.as_str()), (10, "<p>v1</p>"));
    assert_eq!(app.current_version, 10);

    // Deleting a pinned or the current version is refused; an old unpinned one goes.
    let status = apply_one(
        &mut client,
        file.clone(),
        Op::DeleteAppVersion(pb::DeleteAppVersion {
            app_id: "notes".into(),
            version: 1,
        }),
    )
    .await
    .expect_err("pinned");
    assert_refused(
        &status,
        Code::FailedPrecondition,
        &snug_reasons::schema::VERSION_PINNED,
    );
    let status = apply_one(
        &mut client,
        file.clone(),
        Op::DeleteAppVersion(pb::DeleteAppVersion {
            app_id: "notes".into(),
            version: 10,
        }),
    )
    .await
    .expect_err("current");
    assert_refused(
        &status,
        Code::FailedPrecondition,
        &snug_reasons::schema::VERSION_CURRENT,
    );
    let status = apply_one(
        &mut client,
        file.clone(),
        Op::DeleteAppVersion(pb::DeleteAppVersion {
            app_id: "notes".into(),
            version: 2,
        }),
    )
    .await
    .expect_err("pruned");
    assert_refused(
        &status,
        Code::NotFound,
        &snug_reasons::schema::VERSION_NOT_FOUND,
    );
    assert_eq!(metadata(&status, "version").as_deref(), Some("2"));
    let (_, file) = apply_one(
        &mut client,
        file,
        Op::DeleteAppVersion(pb::DeleteAppVersion {
            app_id: "notes".into(),
            version: 6,
        }),
    )
    .await
    .expect("delete version");

    let (updated, file) = apply_one(
        &mut client,
        file,
        Op::UpdateAppMeta(pb::UpdateAppMeta {
            app_id: "notes".into(),
            display_name: Some("Journal".into()),
            icon_emoji: Some(pb::TextUpdate {
                value: Some("📓".into()),
            }),
            ..Default::default()
        }),
    )
    .await
    .expect("update");
    let OpResult::UpdateAppMeta(app) = updated else {
        panic!("update")
    };
    assert_eq!(
        (app.display_name.as_str(), app.icon_emoji.as_deref()),
        ("Journal", Some("📓"))
    );

    // An explicit id that is taken (no install source to find the app by).
    let taken = Op::InstallApp(pb::InstallApp {
        app_id: Some("notes".to_owned()),
        display_name: "Duplicate".to_owned(),
        html: "<p>dup</p>".to_owned(),
        ..Default::default()
    });
    let status = apply_one(&mut client, file.clone(), taken)
        .await
        .expect_err("taken id");
    assert_refused(
        &status,
        Code::AlreadyExists,
        &snug_reasons::schema::APP_EXISTS,
    );

    let (deleted, file) = apply_one(
        &mut client,
        file,
        Op::DeleteApp(pb::DeleteApp {
            app_id: "notes".into(),
        }),
    )
    .await
    .expect("delete app");
    let OpResult::DeleteApp(deleted) = deleted else {
        panic!("delete")
    };
    // Versions 1, 7, 8, 9 and 10 (retention pruned 2–5, version 6 was deleted) and the app row.
    assert_eq!(deleted.rows_deleted, 6, "{deleted:?}");
    let status = query_one(
        &mut client,
        file,
        Read::GetApp(pb::GetApp {
            app_id: "notes".into(),
        }),
    )
    .await
    .expect_err("gone");
    assert_refused(
        &status,
        Code::NotFound,
        &snug_reasons::schema::APP_NOT_FOUND,
    );
    assert_eq!(metadata(&status, "query").as_deref(), Some("0"));
}

#[tokio::test]
async fn contracts_copy_forward_set_clear_and_refuse_non_objects() {
    let mut client = client().await;
    let sample = userdb("sample-v6.user.snug");
    let set = |contract| {
        Op::SaveAppVersion(pb::SaveAppVersion {
            app_id: SAMPLE_APP.into(),
            html: "<p>next</p>".into(),
            contract: Some(contract),
            ..Default::default()
        })
    };
    use pb::save_app_version::Contract;
    let (_, file) = apply(
        &mut client,
        sample.clone(),
        vec![
            save(SAMPLE_APP, "<p>10</p>"),
            set(Contract::Clear(true)),
            set(Contract::SetJson("{\"a\": [true], \"b\": 1}".into())),
            set(Contract::CopyFromVersion(1)),
        ],
    )
    .await
    .expect("apply");
    let answers = query(
        &mut client,
        file,
        (10..=13)
            .map(|v| {
                Read::GetAppVersion(pb::GetAppVersion {
                    app_id: SAMPLE_APP.into(),
                    version: Some(v),
                })
            })
            .collect(),
    )
    .await
    .expect("versions");
    let contracts: Vec<Option<String>> = answers
        .into_iter()
        .map(|a| match a {
            Answer::GetAppVersion(v) => v.runtime_contract_json,
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(contracts[0].is_some(), "copied forward from v9");
    assert_eq!(contracts[1], None);
    assert_eq!(contracts[2].as_deref(), Some("{\"a\":[true],\"b\":1}"));
    assert_eq!(contracts[3], None, "v1 has no contract");

    for text in ["[1]", "not json"] {
        let status = apply_one(
            &mut client,
            sample.clone(),
            set(Contract::SetJson(text.into())),
        )
        .await
        .expect_err("not an object");
        assert_refused(
            &status,
            Code::InvalidArgument,
            &snug_reasons::schema::INVALID_CONTRACT,
        );
    }
}

#[tokio::test]
async fn docs_chat_and_key_values_round_trip_through_operations_and_queries() {
    let mut client = client().await;
    let sample = userdb("sample-v6.user.snug");
    let seed = |slug: &str, content: &str| pb::DocSeed {
        slug: slug.into(),
        title: None,
        content: content.into(),
    };
    let message = |content: &str, pinned: bool| {
        Op::AppendChatMessage(pb::AppendChatMessage {
            thread_id: "thread-2".into(),
            app_id: Some(SAMPLE_APP.into()),
            title: Some("Second".into()),
            role: pb::ChatRole::User.into(),
            content: content.into(),
            pinned,
            meta_json: Some("{\"tokens\": 3}".into()),
        })
    };
    let mut ops = vec![
        // "lessons" exists and is left alone; "plan" is new.
        Op::SeedDocs(pb::SeedDocs {
            app_id: SAMPLE_APP.into(),
            seeds: vec![seed("lessons", "overwritten?"), seed("plan", "# Plan")],
        }),
        Op::UpsertDoc(pb::UpsertDoc {
            app_id: SAMPLE_APP.into(),
            slug: "vision".into(),
            title: Some("Vision".into()),
            content: "new".into(),
        }),
        Op::DeleteDoc(pb::DeleteDoc {
            app_id: SAMPLE_APP.into(),
            slug: "plan".into(),
        }),
    ];
    ops.extend((0..8).map(|i| message(&format!("m{i}"), i == 0)));
    ops.extend([
        Op::PruneChatMessages(pb::PruneChatMessages {
            thread_id: "thread-2".into(),
            keep_unpinned: 3,
        }),
        Op::SetSetting(pb::SetSetting {
            key: "mode".into(),
            value_json: "\"local\"".into(),
        }),
        Op::DeleteSetting(pb::DeleteSetting {
            key: "provider".into(),
        }),
        Op::DeleteSetting(pb::DeleteSetting {
            key: "never-set".into(),
        }),
        Op::SetProfile(pb::SetProfile {
            key: "name".into(),
            value_json: "{\"first\": \"Ada\"}".into(),
        }),
        Op::SetSyncConfig(pb::SetSyncConfig {
            key: "origin".into(),
            value_json: "\"hub\"".into(),
        }),
        Op::SetAppModel(pb::SetAppModel {
            app_id: SAMPLE_APP.into(),
            model: None,
        }),
        Op::SetSidecarIdentityDirectory(pb::SetSidecarIdentityDirectory {
            identities: vec!["alice@example".into()],
        }),
        Op::SetSecret(pb::SetSecret {
            key: "byok:openai".into(),
            value: "sk-openai-x".into(),
        }),
        Op::DeleteSecret(pb::DeleteSecret {
            key: "byok:anthropic".into(),
        }),
    ]);
    let (result, file) = apply(&mut client, sample, ops).await.expect("apply");
    let results: Vec<OpResult> = result
        .results
        .into_iter()
        .map(|r| r.result.expect("result"))
        .collect();
    assert_eq!(results[0], OpResult::SeedDocs(pb::Count { count: 1 }));
    assert_eq!(
        results[11],
        OpResult::PruneChatMessages(pb::Count { count: 4 })
    );
    assert_eq!(
        results[13],
        OpResult::DeleteSetting(pb::Existed { existed: true })
    );
    assert_eq!(
        results[14],
        OpResult::DeleteSetting(pb::Existed { existed: false })
    );
    assert_eq!(
        results[20],
        OpResult::DeleteSecret(pb::Existed { existed: true })
    );
    assert!(
        !contains(&file, b"sk-ant-TEST-SECRET-DO-NOT-USE"),
        "a deleted secret is zeroed in place"
    );

    let answers = query(
        &mut client,
        file.clone(),
        vec![
            Read::ListDocs(pb::ListDocs {
                app_id: SAMPLE_APP.into(),
            }),
            Read::GetDoc(pb::GetDoc {
                app_id: SAMPLE_APP.into(),
                slug: "vision".into(),
            }),
            Read::ListChatThreads(pb::ListChatThreads {
                app_id: Some(SAMPLE_APP.into()),
            }),
            Read::ListChatMessages(pb::ListChatMessages {
                thread_id: "thread-2".into(),
                after_id: None,
                limit: 0,
            }),
            Read::GetSetting(pb::GetSetting { key: "mode".into() }),
            Read::GetSetting(pb::GetSetting {
                key: "provider".into(),
            }),
            Read::ListSettings(pb::ListSettings {}),
            Read::ListProfile(pb::ListProfile {}),
            Read::ListSyncConfig(pb::ListSyncConfig {}),
            Read::ListSecretKeys(pb::ListSecretKeys {}),
        ],
    )
    .await
    .expect("query");
    let [
        Answer::ListDocs(docs),
        Answer::GetDoc(vision),
        Answer::ListChatThreads(threads),
        Answer::ListChatMessages(messages),
        Answer::GetSetting(mode),
        Answer::GetSetting(provider),
        Answer::ListSettings(settings),
        Answer::ListProfile(profile),
        Answer::ListSyncConfig(sync),
        Answer::ListSecretKeys(secrets),
    ] = &answers[..]
    else {
        panic!("{answers:?}")
    };
    let slugs: Vec<&str> = docs.docs.iter().map(|d| d.slug.as_str()).collect();
    assert_eq!(slugs, ["lessons", "vision"]);
    assert_ne!(docs.docs[0].content, "overwritten?");
    assert_eq!(
        (vision.title.as_deref(), vision.content.as_str()),
        (Some("Vision"), "new")
    );
    assert!(
        threads
            .threads
            .iter()
            .any(|t| t.thread_id == "thread-2" && t.title.as_deref() == Some("Second"))
    );
    // The pinned first message survives the prune with the three newest.
    let kept: Vec<(&str, bool)> = messages
        .messages
        .iter()
        .map(|m| (m.content.as_str(), m.pinned))
        .collect();
    assert_eq!(
        kept,
        [("m0", true), ("m5", false), ("m6", false), ("m7", false)]
    );
    assert_eq!(messages.messages[0].role(), pb::ChatRole::User);
    assert_eq!(
        messages.messages[0].meta_json.as_deref(),
        Some("{\"tokens\":3}")
    );
    assert!(!messages.more);
    assert_eq!(mode.value_json.as_deref(), Some("\"local\""));
    assert_eq!(provider.value_json, None);
    let settings: BTreeMap<&str, &str> = settings
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value_json.as_str()))
        .collect();
    assert_eq!(
        settings.get("sidecarIdentityDirectory"),
        Some(&"[\"alice@example\"]")
    );
    assert!(
        !settings.contains_key(&*format!("appModel:{SAMPLE_APP}")),
        "{settings:?}"
    );
    assert!(
        profile
            .entries
            .iter()
            .any(|e| e.key == "name" && e.value_json == "{\"first\":\"Ada\"}")
    );
    assert!(
        sync.entries
            .iter()
            .any(|e| e.key == "origin" && e.value_json == "\"hub\"")
    );
    assert!(secrets.keys.contains(&"byok:openai".to_owned()));
    assert!(!secrets.keys.contains(&"byok:anthropic".to_owned()));

    // Paging through a thread: two at a time, resuming after the last id.
    let mut after_id = None;
    let mut seen = Vec::new();
    loop {
        let Answer::ListChatMessages(page) = query_one(
            &mut client,
            file.clone(),
            Read::ListChatMessages(pb::ListChatMessages {
                thread_id: "thread-2".into(),
                after_id,
                limit: 2,
            }),
        )
        .await
        .expect("page") else {
            panic!("page")
        };
        assert!(page.messages.len() <= 2);
        seen.extend(page.messages.iter().map(|m| m.content.clone()));
        after_id = page.messages.last().map(|m| m.id);
        if !page.more {
            break;
        }
    }
    assert_eq!(seen, ["m0", "m5", "m6", "m7"]);

    // Pin and delete by id; unknown ids and threads are not found.
    let first_id = messages.messages[1].id;
    let (_, file) = apply_one(
        &mut client,
        file,
        Op::PinChatMessage(pb::PinChatMessage {
            message_id: first_id,
            pinned: true,
        }),
    )
    .await
    .expect("pin");
    let status = apply_one(
        &mut client,
        file.clone(),
        Op::PinChatMessage(pb::PinChatMessage {
            message_id: 999_999,
            pinned: true,
        }),
    )
    .await
    .expect_err("unknown message");
    assert_refused(
        &status,
        Code::NotFound,
        &snug_reasons::schema::MESSAGE_NOT_FOUND,
    );
    assert_eq!(metadata(&status, "messageId").as_deref(), Some("999999"));
    let (deleted, file) = apply_one(
        &mut client,
        file,
        Op::DeleteChatThread(pb::DeleteChatThread {
            thread_id: "thread-2".into(),
        }),
    )
    .await
    .expect("delete thread");
    assert_eq!(deleted, OpResult::DeleteChatThread(pb::Count { count: 4 }));
    let status = query_one(
        &mut client,
        file,
        Read::ListChatMessages(pb::ListChatMessages {
            thread_id: "thread-2".into(),
            after_id: None,
            limit: 0,
        }),
    )
    .await
    .expect_err("deleted thread");
    assert_refused(
        &status,
        Code::NotFound,
        &snug_reasons::schema::THREAD_NOT_FOUND,
    );
}

#[tokio::test]
async fn operations_are_all_or_nothing_and_name_the_failing_one() {
    let mut client = client().await;
    let fresh = userdb("fresh-v6.user.snug");
    let status = apply(
        &mut client,
        fresh.clone(),
        vec![
            install("notes", "<p>v1</p>"),
            Op::SetSetting(pb::SetSetting {
                key: "mode".into(),
                value_json: "\"byok\"".into(),
            }),
            Op::DeleteApp(pb::DeleteApp {
                app_id: "missing".into(),
            }),
        ],
    )
    .await
    .expect_err("third fails");
    assert_refused(
        &status,
        Code::NotFound,
        &snug_reasons::schema::APP_NOT_FOUND,
    );
    assert_eq!(metadata(&status, "operation").as_deref(), Some("2"));
    assert_eq!(metadata(&status, "appId").as_deref(), Some("missing"));

    // Operations on an app's docs and model need the app.
    for op in [
        Op::UpsertDoc(pb::UpsertDoc {
            app_id: "missing".into(),
            slug: "a".into(),
            title: None,
            content: "x".into(),
        }),
        Op::SeedDocs(pb::SeedDocs {
            app_id: "missing".into(),
            seeds: vec![],
        }),
        Op::SetAppModel(pb::SetAppModel {
            app_id: "missing".into(),
            model: Some("m".into()),
        }),
        save("missing", "<p>x</p>"),
        Op::ResetToFactory(pb::ResetToFactory {
            app_id: "missing".into(),
        }),
    ] {
        let status = apply_one(&mut client, fresh.clone(), op)
            .await
            .expect_err("unknown app");
        assert_refused(
            &status,
            Code::NotFound,
            &snug_reasons::schema::APP_NOT_FOUND,
        );
    }
    let status = query_one(
        &mut client,
        userdb("sample-v6.user.snug"),
        Read::GetDoc(pb::GetDoc {
            app_id: SAMPLE_APP.into(),
            slug: "nope".into(),
        }),
    )
    .await
    .expect_err("doc");
    assert_refused(
        &status,
        Code::NotFound,
        &snug_reasons::schema::DOC_NOT_FOUND,
    );
    let status = apply_one(
        &mut client,
        fresh.clone(),
        Op::PruneChatMessages(pb::PruneChatMessages {
            thread_id: "nope".into(),
            keep_unpinned: 1,
        }),
    )
    .await
    .expect_err("thread");
    assert_refused(
        &status,
        Code::NotFound,
        &snug_reasons::schema::THREAD_NOT_FOUND,
    );

    // A factory version is a pinned one; an app whose pins were cleared has none.
    let unpinned = edited(
        &userdb("sample-v6.user.snug"),
        "UPDATE snug_app_versions SET pinned = 0;",
    );
    let status = apply_one(
        &mut client,
        unpinned,
        Op::ResetToFactory(pb::ResetToFactory {
            app_id: SAMPLE_APP.into(),
        }),
    )
    .await
    .expect_err("no factory");
    assert_refused(
        &status,
        Code::FailedPrecondition,
        &snug_reasons::schema::NO_FACTORY_VERSION,
    );
}

#[tokio::test]
async fn malformed_operations_and_queries_are_invalid_arguments_with_their_field() {
    let mut client = client().await;
    let fresh = userdb("fresh-v6.user.snug");
    let cases = vec![
        (
            Op::SetSetting(pb::SetSetting {
                key: "mode".into(),
                value_json: "byok".into(),
            }),
            "header.operations[0].set_setting.value_json",
        ),
        (
            Op::SetProfile(pb::SetProfile {
                key: "k".into(),
                value_json: String::new(),
            }),
            "header.operations[0].set_profile.value_json",
        ),
        (
            Op::SetSyncConfig(pb::SetSyncConfig {
                key: "k".into(),
                value_json: "{".into(),
            }),
            "header.operations[0].set_sync_config.value_json",
        ),
        (
            Op::AppendChatMessage(pb::AppendChatMessage {
                thread_id: "t".into(),
                content: "hi".into(),
                ..Default::default()
            }),
            "header.operations[0].append_chat_message.role",
        ),
        (
            Op::AppendChatMessage(pb::AppendChatMessage {
                thread_id: "t".into(),
                role: pb::ChatRole::Assistant.into(),
                meta_json: Some("nope".into()),
                ..Default::default()
            }),
            "header.operations[0].append_chat_message.meta_json",
        ),
    ];
    for (op, field) in cases {
        let status = apply_one(&mut client, fresh.clone(), op)
            .await
            .expect_err(field);
        assert_refused(
            &status,
            Code::InvalidArgument,
            &snug_reasons::schema::INVALID_ARGUMENT,
        );
        assert_eq!(metadata(&status, "field").as_deref(), Some(field));
        assert_eq!(metadata(&status, "operation").as_deref(), Some("0"));
    }

    let status = apply(&mut client, fresh.clone(), vec![])
        .await
        .expect_err("no operations");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::INVALID_ARGUMENT,
    );
    assert_eq!(
        metadata(&status, "field").as_deref(),
        Some("header.operations")
    );
    let status = query(&mut client, fresh.clone(), vec![])
        .await
        .expect_err("no queries");
    assert_eq!(
        metadata(&status, "field").as_deref(),
        Some("header.queries")
    );

    // An entry with no kind set.
    let header = pb::ApplyOperationsRequest::header(pb::ApplyOperationsHeader {
        operations: vec![pb::Operation { operation: None }],
        expected_length: None,
    });
    let request = chunks::upload(header, fresh.clone());
    let status = client
        .apply_operations(request)
        .await
        .expect_err("empty operation");
    assert_eq!(
        metadata(&status, "field").as_deref(),
        Some("header.operations[0]")
    );

    // A stored setting that is not JSON is the file's fault, reported as such.
    let bad_row = edited(
        &fresh,
        "INSERT INTO snug_settings (key, value) VALUES ('mode', 'not json');",
    );
    let status = query_one(
        &mut client,
        bad_row,
        Read::GetSetting(pb::GetSetting { key: "mode".into() }),
    )
    .await
    .expect_err("corrupt row");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::CORRUPT_ROW,
    );
    assert_eq!(metadata(&status, "key").as_deref(), Some("mode"));
}

#[tokio::test]
async fn answers_over_the_response_limit_are_too_large_not_a_transport_error() {
    let mut client = client().await;
    // 5 MiB of HTML fits one header; two copies of it do not fit one response.
    let html = "x".repeat(5 * 1024 * 1024);
    let (_, file) = apply_one(
        &mut client,
        userdb("fresh-v6.user.snug"),
        install("big", &html),
    )
    .await
    .expect("install");
    let get = || {
        Read::GetAppVersion(pb::GetAppVersion {
            app_id: "big".into(),
            version: Some(1),
        })
    };
    let one = query(&mut client, file.clone(), vec![get()])
        .await
        .expect("one fits");
    assert!(matches!(&one[0], Answer::GetAppVersion(v) if v.html.len() == html.len()));
    let status = query(&mut client, file, vec![get(), get()])
        .await
        .expect_err("two do not");
    assert_refused(
        &status,
        Code::ResourceExhausted,
        &snug_reasons::schema::TOO_LARGE,
    );
}

// --- streams ----------------------------------------------------------------------------------

#[tokio::test]
async fn oversize_uploads_are_refused_with_resource_exhausted() {
    let mut client = client().await;
    // Declared too large: refused after the header, before any chunk.
    let header = pb::MigrateUserDatabaseRequest::header(pb::MigrateUserDatabaseHeader {
        expected_length: Some(MAX_USERDB_BYTES + 1),
    });
    let status = client
        .migrate_user_database(futures::stream::iter([header]))
        .await
        .expect_err("declared");
    assert_refused(
        &status,
        Code::ResourceExhausted,
        &snug_reasons::schema::TOO_LARGE,
    );
    assert_eq!(
        metadata(&status, "limit"),
        Some(MAX_USERDB_BYTES.to_string())
    );

    // Undeclared: cut off as soon as the stream crosses the cap.
    let mut big = snug_schema::SQLITE_MAGIC.to_vec();
    big.resize(MAX_USERDB_BYTES as usize + CHUNK_SIZE, 0);
    let status = validate(&mut client, Bytes::from(big))
        .await
        .expect_err("streamed");
    assert_refused(
        &status,
        Code::ResourceExhausted,
        &snug_reasons::schema::TOO_LARGE,
    );
}

#[tokio::test]
async fn malformed_streams_are_invalid_arguments() {
    let mut client = client().await;
    let chunk = pb::InspectUserDatabaseRequest::chunk(Bytes::from_static(b"SQLite format 3\0"));
    let status = client
        .inspect_user_database(futures::stream::iter([chunk]))
        .await
        .expect_err("headerless");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::INVALID_ARGUMENT,
    );
    assert_eq!(metadata(&status, "field").as_deref(), Some("header"));

    let status = client
        .inspect_user_database(futures::stream::iter(
            Vec::<pb::InspectUserDatabaseRequest>::new(),
        ))
        .await
        .expect_err("empty");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::INVALID_ARGUMENT,
    );

    let status = client
        .inspect_user_database(futures::stream::iter([pb::InspectUserDatabaseRequest {
            message: None,
        }]))
        .await
        .expect_err("empty message");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::INVALID_ARGUMENT,
    );

    // A second header.
    let header = || {
        pb::InspectUserDatabaseRequest::header(pb::InspectUserDatabaseHeader {
            expected_length: None,
        })
    };
    let status = client
        .inspect_user_database(futures::stream::iter([header(), header()]))
        .await
        .expect_err("two headers");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::INVALID_ARGUMENT,
    );

    // A declared length the chunks do not match.
    let fresh = userdb("fresh-v6.user.snug");
    let header = pb::InspectUserDatabaseRequest::header(pb::InspectUserDatabaseHeader {
        expected_length: Some(fresh.len() as u64 + 1),
    });
    let request = chunks::upload(header, fresh);
    let status = client
        .inspect_user_database(request)
        .await
        .expect_err("length mismatch");
    assert_eq!(
        metadata(&status, "field").as_deref(),
        Some("expected_length")
    );
}

#[tokio::test]
async fn a_burst_beyond_the_job_pool_is_refused_as_overloaded() {
    let config = SchemaConfig {
        schema_concurrency: Some(1),
        schema_queue_timeout: Duration::from_millis(1),
    };
    // Each check is admitted for its whole limit (an import declares its two lengths in fields of
    // its own): a budget for all six keeps the burst at the job pool, which this test is about.
    let runtime = snug_rpc::runtime::Runtime::default().with_budget(
        snug_rpc::budget::UploadBudget::new(2 << 30, Duration::from_secs(5)),
    );
    let client = start_with(config, runtime).await;
    // Each check derives a 600,000-iteration key, so one job holds the only slot far longer than
    // the 1 ms queue timeout: most of the burst must be shed with a typed, retryable reason.
    let container = vector("containers/c01-reference-random-600k.snug");
    let results =
        futures::future::join_all(
            (0..6).map(|_| {
                let mut client = client.clone();
                let container = container.clone();
                async move {
                    check_import(&mut client, container, secrets(Some(PASSPHRASE)), false).await
                }
            }),
        )
        .await;
    let overloaded = results
        .iter()
        .filter(|r| matches!(r, Err(s) if s.code() == Code::Unavailable && reason(s) == &snug_reasons::schema::OVERLOADED))
        .count();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert!(ok >= 1, "at least one check runs");
    assert!(overloaded >= 1, "the burst is shed");
    assert_eq!(ok + overloaded, 6);
}

/// The upload budget (`snug_rpc::budget`): an upload that does not fit beside the ones in flight
/// waits, then is refused UNAVAILABLE/OVERLOADED before a byte of it is read; once the held
/// upload ends, the same upload is served.
#[tokio::test]
async fn an_upload_beyond_the_budget_is_refused_as_overloaded_until_room_comes_back() {
    let runtime = snug_rpc::runtime::Runtime::default().with_budget(
        snug_rpc::budget::UploadBudget::new(1 << 20, Duration::from_millis(200)),
    );
    let mut client = start_with(SchemaConfig::default(), runtime).await;
    let image = userdb("sample-v6.export.snug");
    // A ValidateSyncImage that declares 1 MiB and then sends nothing holds the whole budget.
    let (held_tx, held_rx) = futures::channel::mpsc::unbounded();
    held_tx
        .unbounded_send(pb::ValidateSyncImageRequest::header(
            pb::ValidateSyncImageHeader {
                expected_length: Some(1 << 20),
            },
        ))
        .expect("header");
    let held = tokio::spawn({
        let mut client = client.clone();
        async move { client.validate_sync_image(held_rx).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = validate(&mut client, image.clone())
        .await
        .expect_err("no room beside the held upload");
    assert_eq!(refused.code(), Code::Unavailable);
    assert_eq!(reason(&refused), "OVERLOADED");
    // The held upload goes away (its client hung up); its share comes back.
    drop(held_tx);
    let _ = held.await;
    let verdict = validate(&mut client, image.clone())
        .await
        .expect("room again");
    assert_eq!(verdict.length, image.len() as u64);
}

// --- the reason table -------------------------------------------------------------------------

#[test]
fn reasons_are_upper_snake_unique_and_short() {
    let mut seen = std::collections::HashSet::new();
    for reason in error_info::REASONS.reasons.iter().map(|r| r.name) {
        assert!(reason.len() <= 63, "{reason}");
        assert!(
            reason.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
            "{reason}"
        );
        assert!(seen.insert(reason), "duplicate {reason}");
    }
}

#[test]
fn every_reason_is_documented_in_the_reference_and_the_proto() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let reference =
        std::fs::read_to_string(root.join("shared/reasons/REASONS.md")).expect("REASONS.md");
    let proto =
        std::fs::read_to_string(root.join("proto/snug/schema/v1/schema.proto")).expect("proto");
    // The schema table is the section after its heading, so a reason documented only for the
    // container service does not count.
    let section = reference
        .split_once("Schema reasons (domain `snug.schema`)")
        .map(|(_, rest)| rest)
        .expect("REASONS.md has a schema reason table");
    let section = section.split("\n#").next().unwrap_or(section);
    for reason in error_info::REASONS.reasons.iter().map(|r| r.name) {
        assert!(
            section.contains(&format!("| `{reason}` |")),
            "REASONS.md's schema table lacks `{reason}`"
        );
        assert!(
            proto.contains(&format!("// | {reason} ")),
            "schema.proto's reason table lacks {reason}"
        );
    }
}

#[test]
fn mapped_statuses_carry_the_domain_and_their_reason() {
    let status = Status::from(status::refused(snug_schema::OpenError::SchemaTooNew {
        found: 9,
        supported: 6,
    }));
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(reason(&status), &snug_reasons::schema::SCHEMA_TOO_NEW);
    assert_eq!(metadata(&status, "foundVersion").as_deref(), Some("9"));
    use tonic_types::StatusExt as _;
    assert_eq!(
        status.get_details_error_info().expect("info").domain,
        error_info::DOMAIN
    );
}

mod import;
mod isolation;

/// Issue 23, point 5: every identifier an operation or a query names is bounded at the edge: one
/// over 256 bytes (or holding a control character) is INVALID_ARGUMENT naming its field, and the
/// status repeats none of it; at 256 bytes it is an ordinary unknown id.
#[tokio::test]
async fn identifiers_over_the_bound_are_refused_without_echo() {
    let mut client = client().await;
    let sample = userdb("sample-v6.user.snug");
    let huge = "a".repeat(10_000);
    let refused: Vec<Status> = vec![
        query_one(
            &mut client,
            sample.clone(),
            Read::GetApp(pb::GetApp {
                app_id: huge.clone(),
            }),
        )
        .await
        .expect_err("refused"),
        query_one(
            &mut client,
            sample.clone(),
            Read::GetSetting(pb::GetSetting { key: huge.clone() }),
        )
        .await
        .expect_err("refused"),
        apply_one(
            &mut client,
            sample.clone(),
            Op::UpsertDoc(pb::UpsertDoc {
                app_id: SAMPLE_APP.into(),
                slug: huge.clone(),
                ..Default::default()
            }),
        )
        .await
        .expect_err("refused"),
        apply_one(
            &mut client,
            sample.clone(),
            Op::DeleteChatThread(pb::DeleteChatThread {
                thread_id: "line\nbreak".into(),
            }),
        )
        .await
        .expect_err("refused"),
    ];
    let fields = [
        "header.queries[0].app_id",
        "header.queries[0].key",
        "header.operations[0].slug",
        "header.operations[0].thread_id",
    ];
    for (status, field) in refused.iter().zip(fields) {
        assert_refused(
            status,
            Code::InvalidArgument,
            &snug_reasons::schema::INVALID_ARGUMENT,
        );
        assert_eq!(metadata(status, "field").as_deref(), Some(field));
        assert!(!status.message().contains("aaaa"), "{}", status.message());
        assert!(status.metadata().as_ref().len() < 4096);
    }
    let at_the_bound = query_one(
        &mut client,
        sample,
        Read::GetApp(pb::GetApp {
            app_id: "a".repeat(256),
        }),
    )
    .await
    .expect_err("unknown");
    assert_refused(
        &at_the_bound,
        Code::NotFound,
        &snug_reasons::schema::APP_NOT_FOUND,
    );
}
