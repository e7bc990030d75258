//! In-process tests of `snug.materialize.v1`: a real server on loopback, a generated client, and
//! the shared reference user databases and runtimes.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use bytes::Bytes;
use snug_proto::materialize::v1::{
    self as pb, materialize_service_client::MaterializeServiceClient, sql_value::Value,
};
use snug_rpc::chunks;
use snug_rpc::chunks::Chunked as _;
use tonic::{Code, transport::Channel};

use super::*;

type Client = MaterializeServiceClient<Channel>;

const UUID_APP: &str = "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c";
const CHESS_APP: &str = "starter--chess";

fn vectors() -> PathBuf {
    snug_test_support::vectors_dir()
}

fn userdb(name: &str) -> Bytes {
    let path = vectors().join("userdb").join(name);
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn sample() -> Bytes {
    userdb("sample-v6.user.snug")
}

fn runtime_vector(app: &str) -> Bytes {
    let token = AppNamespace::new(app).token().to_owned();
    userdb(&format!("sample-v6.app-{token}.runtime.sqlite"))
}

async fn start(config: MaterializeConfig) -> Client {
    let channel = snug_rpc::server::on_loopback(|listener| async move {
        let (server_config, runtime) = (
            ServerConfig::for_tests(),
            snug_rpc::runtime::Runtime::default(),
        );
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
    MaterializeServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE)
}

async fn client() -> Client {
    start(MaterializeConfig::default()).await
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
    let info = snug_rpc::status::reason_of(status);
    assert!(info.is_some(), "no ErrorInfo on {status:?}");
}

/// Opens `bytes` in a scratch file for assertions.
fn sqlite(bytes: &[u8]) -> (tempfile::TempDir, rusqlite::Connection) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("check.sqlite");
    std::fs::write(&path, bytes).expect("write");
    let conn = rusqlite::Connection::open(&path).expect("open");
    (dir, conn)
}

/// Runs SQL against a copy of `bytes` and returns the changed image.
fn edited(bytes: &[u8], sql: &str) -> Bytes {
    let (dir, conn) = sqlite(bytes);
    conn.execute_batch(sql).expect("sql");
    drop(conn);
    Bytes::from(std::fs::read(dir.path().join("check.sqlite")).expect("read"))
}

/// One `PRAGMA table_info` row: name, type, not null, default, primary-key position.
type Column = (String, String, bool, Option<String>, i64);

/// A database's content and shape, independent of page layout: every `sqlite_master` row but
/// its root page, `PRAGMA table_info` of every table, and every table's rows in a stable order.
#[derive(Debug, PartialEq)]
struct Contents {
    master: Vec<(String, String, String, Option<String>)>,
    columns: BTreeMap<String, Vec<Column>>,
    rows: BTreeMap<String, Vec<Vec<rusqlite::types::Value>>>,
}

fn contents(bytes: &[u8]) -> Contents {
    let (_dir, conn) = sqlite(bytes);
    let mut master: Vec<(String, String, String, Option<String>)> = conn
        .prepare("SELECT type, name, tbl_name, sql FROM sqlite_master")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("master");
    master.sort();
    let tables: Vec<String> = master
        .iter()
        .filter(|(kind, ..)| kind == "table")
        .map(|(_, name, ..)| name.clone())
        .collect();
    let mut columns = BTreeMap::new();
    let mut rows = BTreeMap::new();
    for table in tables {
        let shape = conn
            .prepare(&format!("PRAGMA table_info(\"{table}\")"))
            .expect("prepare")
            .query_map([], |r| {
                Ok((
                    r.get(1)?,
                    r.get(2)?,
                    r.get::<_, i64>(3)? == 1,
                    r.get(4)?,
                    r.get(5)?,
                ))
            })
            .expect("query")
            .collect::<Result<Vec<_>, _>>()
            .expect("columns");
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM \"{table}\""))
            .expect("prepare");
        let n = stmt.column_count();
        let mut data: Vec<Vec<rusqlite::types::Value>> = stmt
            .query_map([], |r| (0..n).map(|i| r.get(i)).collect())
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        data.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        columns.insert(table.clone(), shape);
        rows.insert(table, data);
    }
    Contents {
        master,
        columns,
        rows,
    }
}

// --- one client helper per RPC ----------------------------------------------------------------

fn header(app_id: &str, len: usize) -> pb::UserDatabaseHeader {
    pb::UserDatabaseHeader {
        app_id: app_id.to_owned(),
        expected_length: Some(len as u64),
    }
}

async fn materialize(
    client: &mut Client,
    user: Bytes,
    app_id: &str,
) -> Result<(pb::MaterializeAppResult, Bytes), Status> {
    let first = pb::MaterializeAppRequest::header(header(app_id, user.len()));
    let request = chunks::upload(first, user);
    let mut stream = client.materialize_app(request).await?.into_inner();
    let (result, bytes) = chunks::download(&mut stream, u64::MAX, |r| r.length).await?;
    assert_eq!(result.length, bytes.len() as u64);
    Ok((result, bytes))
}

async fn persist(
    client: &mut Client,
    user: Bytes,
    app_id: &str,
    runtime: Bytes,
) -> Result<(pb::PersistAppResult, Bytes), Status> {
    let first = pb::PersistAppRequest::header(pb::PersistAppHeader {
        app_id: app_id.to_owned(),
        user_db_length: user.len() as u64,
        runtime_length: runtime.len() as u64,
    });
    let payload = Bytes::from([user.as_ref(), runtime.as_ref()].concat());
    let request = chunks::upload(first, payload);
    let mut stream = client.persist_app(request).await?.into_inner();
    let (result, bytes) = chunks::download(&mut stream, u64::MAX, |r| r.length).await?;
    assert_eq!(result.length, bytes.len() as u64);
    Ok((result, bytes))
}

async fn apply_ddl(
    client: &mut Client,
    user: Bytes,
    app_id: &str,
    statements: &[&str],
) -> Result<(pb::ApplyDdlResult, Bytes), Status> {
    let first = pb::ApplyDdlRequest::header(pb::ApplyDdlHeader {
        app_id: app_id.to_owned(),
        statements: statements.iter().map(|s| (*s).to_owned()).collect(),
        expected_length: Some(user.len() as u64),
    });
    let request = chunks::upload(first, user);
    let mut stream = client.apply_ddl(request).await?.into_inner();
    let (result, bytes) = chunks::download(&mut stream, u64::MAX, |r| r.length).await?;
    assert_eq!(result.length, bytes.len() as u64);
    Ok((result, bytes))
}

async fn export(
    client: &mut Client,
    user: Bytes,
    app_id: &str,
) -> Result<(pb::ExportAppResult, Bytes), Status> {
    let first = pb::ExportAppRequest::header(header(app_id, user.len()));
    let request = chunks::upload(first, user);
    let mut stream = client.export_app(request).await?.into_inner();
    let (result, bytes) = chunks::download(&mut stream, u64::MAX, |r| r.length).await?;
    assert_eq!(result.length, bytes.len() as u64);
    Ok((result, bytes))
}

async fn execute_with(
    client: &mut Client,
    user: Bytes,
    app_id: &str,
    statements: &[&str],
    limits: Option<pb::ExecuteLimits>,
    read_only: bool,
) -> Result<(pb::ExecuteSqlResult, Bytes), Status> {
    let first = pb::ExecuteSqlRequest::header(pb::ExecuteSqlHeader {
        app_id: app_id.to_owned(),
        statements: statements.iter().map(|s| (*s).to_owned()).collect(),
        limits,
        read_only,
        expected_length: Some(user.len() as u64),
    });
    let request = chunks::upload(first, user);
    let mut stream = client.execute_sql(request).await?.into_inner();
    let (result, bytes) = chunks::download(&mut stream, u64::MAX, |r| r.length).await?;
    assert_eq!(result.length, bytes.len() as u64);
    Ok((result, bytes))
}

async fn execute(
    client: &mut Client,
    user: Bytes,
    app_id: &str,
    statements: &[&str],
) -> Result<(pb::ExecuteSqlResult, Bytes), Status> {
    execute_with(client, user, app_id, statements, None, false).await
}

async fn list(client: &mut Client, user: Bytes) -> Result<pb::ListAppTablesResponse, Status> {
    let first = pb::ListAppTablesRequest::header(header("", user.len()));
    let request = chunks::upload(first, user);
    Ok(client.list_app_tables(request).await?.into_inner())
}

// --- tests ------------------------------------------------------------------------------------

#[tokio::test]
async fn both_sample_apps_materialize_to_the_reference_runtimes() {
    let mut client = client().await;
    for (app, token) in [
        (UUID_APP, "a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c"),
        (CHESS_APP, "x737461727465722d2d6368657373"),
    ] {
        let (result, runtime) = materialize(&mut client, sample(), app).await.expect(app);
        assert_eq!(
            (result.app_id.as_str(), result.token.as_str()),
            (app, token)
        );
        assert!(!result.open.expect("open").wrote, "sample-v6 is current");
        assert_eq!(
            contents(&runtime),
            contents(&runtime_vector(app)),
            "{app}: content and shape differ from the reference runtime"
        );
        // The listed objects are the runtime's own catalogue, hub tables absent.
        let names: Vec<&str> = result.objects.iter().map(|o| o.name.as_str()).collect();
        assert!(
            names
                .iter()
                .all(|n| !n.starts_with("snug_") || *n == "snug_kv"),
            "{names:?}"
        );
        assert!(!names.is_empty());
    }
}

#[tokio::test]
async fn persisting_an_unchanged_runtime_returns_the_user_database_byte_for_byte() {
    let mut client = client().await;
    let user = sample();
    for app in [UUID_APP, CHESS_APP] {
        // The reference's runtime (produced elsewhere) and this service's own materialization.
        let (_, ours) = materialize(&mut client, user.clone(), app)
            .await
            .expect("materialize");
        for runtime in [runtime_vector(app), ours] {
            let (result, bytes) = persist(&mut client, user.clone(), app, runtime)
                .await
                .expect("persist");
            let report = result.report.expect("report");
            assert!(result.unchanged && !report.wrote, "{app}: {report:?}");
            assert!(report.tables_written.is_empty(), "{report:?}");
            assert_eq!(bytes, user, "{app}: the user database changed");
        }
    }
}

#[tokio::test]
async fn a_changed_runtime_persists_only_what_changed_and_round_trips() {
    let mut client = client().await;
    let user = sample();
    let (_, runtime) = materialize(&mut client, user.clone(), UUID_APP)
        .await
        .expect("materialize");
    let runtime = edited(&runtime, "INSERT INTO equities VALUES ('ZZZ', 'Zed Corp');");
    let (result, new_user) = persist(&mut client, user.clone(), UUID_APP, runtime.clone())
        .await
        .expect("persist");
    let report = result.report.expect("report");
    assert!(report.wrote && !result.unchanged);
    assert_eq!(report.tables_written, vec!["equities".to_owned()]);
    assert!(
        report.tables_unchanged.contains(&"trades".to_owned()),
        "{report:?}"
    );
    assert_ne!(new_user, user);
    // Materializing the result gives back the edited runtime, and the other app is untouched.
    let (_, again) = materialize(&mut client, new_user.clone(), UUID_APP)
        .await
        .expect("again");
    assert_eq!(contents(&again), contents(&runtime));
    let (_, chess) = materialize(&mut client, new_user, CHESS_APP)
        .await
        .expect("chess");
    assert_eq!(contents(&chess), contents(&runtime_vector(CHESS_APP)));
}

#[tokio::test]
async fn hostile_runtime_names_fail_closed() {
    let mut client = client().await;
    let user = sample();
    let (_, runtime) = materialize(&mut client, user.clone(), CHESS_APP)
        .await
        .expect("materialize");
    let long = format!("CREATE TABLE t{} (x);", "a".repeat(41));
    let cases = [
        ("quote", r#"CREATE TABLE "we""ird" (x);"#),
        ("reserved snug_", "CREATE TABLE snug_apps (x);"),
        ("reserved app_", "CREATE TABLE APP_evil (x);"),
        // SQLite itself refuses to create `sqlite_` names, so the mixed-case `snug_` stands in.
        ("reserved Snug_", "CREATE TABLE Snug_notes (x);"),
        ("42 characters", long.as_str()),
        ("unicode", r#"CREATE TABLE "tablé" (x);"#),
        ("index name", "CREATE INDEX \"bad idx\" ON moves (san);"),
    ];
    for (name, sql) in cases {
        let hostile = edited(&runtime, sql);
        let status = persist(&mut client, user.clone(), CHESS_APP, hostile)
            .await
            .expect_err(name);
        assert_refused(
            &status,
            Code::InvalidArgument,
            &snug_reasons::materialize::INVALID_NAME,
        );
        assert!(metadata(&status, "object").is_some(), "{name}");
    }
    // After every refusal the caller still holds its untouched file, and it still materializes.
    let (_, chess) = materialize(&mut client, user, CHESS_APP)
        .await
        .expect("chess");
    assert_eq!(contents(&chess), contents(&runtime_vector(CHESS_APP)));
}

#[tokio::test]
async fn execute_sql_sandbox_refuses_escapes_and_cannot_see_outside_the_app() {
    let mut client = client().await;
    let user = sample();
    for (sql, expected) in [
        (
            "ATTACH DATABASE ':memory:' AS other",
            &snug_reasons::materialize::FORBIDDEN_STATEMENT,
        ),
        (
            "PRAGMA writable_schema = 1",
            &snug_reasons::materialize::FORBIDDEN_STATEMENT,
        ),
        (
            "SELECT load_extension('libevil')",
            &snug_reasons::materialize::FORBIDDEN_STATEMENT,
        ),
        ("BEGIN", &snug_reasons::materialize::FORBIDDEN_STATEMENT),
        (
            "SELECT 1; SELECT 2",
            &snug_reasons::materialize::NOT_ONE_STATEMENT,
        ),
        (
            "SELECT * FROM snug_apps",
            &snug_reasons::materialize::STATEMENT_FAILED,
        ),
        (
            "SELECT * FROM app_x737461727465722d2d6368657373__moves",
            &snug_reasons::materialize::STATEMENT_FAILED,
        ),
        (
            "SELECT * FROM moves",
            &snug_reasons::materialize::STATEMENT_FAILED,
        ),
        (
            "CREATE TABLE snug_evil (x)",
            &snug_reasons::materialize::INVALID_NAME,
        ),
    ] {
        let status = execute(&mut client, user.clone(), UUID_APP, &["SELECT 1", sql])
            .await
            .expect_err(sql);
        assert_refused(&status, Code::InvalidArgument, expected);
        assert_eq!(
            metadata(&status, "statement").as_deref(),
            Some("1"),
            "{sql}"
        );
    }
}

#[tokio::test]
async fn execute_sql_returns_typed_bounded_results_and_persists_writes() {
    let mut client = client().await;
    let user = sample();
    let (result, bytes) = execute(
        &mut client,
        user.clone(),
        UUID_APP,
        &["SELECT NULL, 7, 2.5, 'text', x'00ff'"],
    )
    .await
    .expect("select");
    assert!(
        !result.user_db_changed && bytes.is_empty(),
        "a read writes nothing"
    );
    let row = &result.results[0].rows[0].values;
    let values: Vec<Option<Value>> = row.iter().map(|v| v.value.clone()).collect();
    assert_eq!(
        values,
        vec![
            Some(Value::Null(pb::SqlNull {})),
            Some(Value::Integer(7)),
            Some(Value::Real(2.5)),
            Some(Value::Text("text".to_owned())),
            Some(Value::Blob(Bytes::from_static(&[0, 0xff]))),
        ]
    );

    let many = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50) \
                SELECT i FROM n";
    let truncate = pb::ExecuteLimits {
        max_rows: Some(3),
        ..Default::default()
    };
    let (result, _) = execute_with(
        &mut client,
        user.clone(),
        UUID_APP,
        &[many],
        Some(truncate),
        false,
    )
    .await
    .expect("truncated");
    assert_eq!(
        (result.results[0].rows.len(), result.results[0].truncated),
        (3, true)
    );
    let fail = pb::ExecuteLimits {
        max_rows: Some(3),
        overflow: pb::Overflow::Fail.into(),
        ..Default::default()
    };
    let status = execute_with(
        &mut client,
        user.clone(),
        UUID_APP,
        &[many],
        Some(fail),
        false,
    )
    .await
    .expect_err("fail");
    assert_refused(
        &status,
        Code::ResourceExhausted,
        &snug_reasons::materialize::RESULT_TOO_LARGE,
    );
    let too_many_steps = pb::ExecuteLimits {
        max_steps: Some(u64::MAX),
        ..Default::default()
    };
    let status = execute_with(
        &mut client,
        user.clone(),
        UUID_APP,
        &["SELECT 1"],
        Some(too_many_steps),
        false,
    )
    .await
    .expect_err("steps");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::materialize::INVALID_ARGUMENT,
    );
    let tiny_budget = pb::ExecuteLimits {
        max_steps: Some(10_000),
        ..Default::default()
    };
    let endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) \
                   SELECT count(*) FROM n";
    let status = execute_with(
        &mut client,
        user.clone(),
        UUID_APP,
        &[endless],
        Some(tiny_budget),
        false,
    )
    .await
    .expect_err("budget");
    assert_refused(
        &status,
        Code::ResourceExhausted,
        &snug_reasons::materialize::BUDGET_EXCEEDED,
    );

    let insert = "INSERT INTO trades (symbol, qty) VALUES ('NEW', 1)";
    let status = execute_with(&mut client, user.clone(), UUID_APP, &[insert], None, true)
        .await
        .expect_err("read-only");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::materialize::READ_ONLY,
    );

    let (result, new_user) = execute(&mut client, user.clone(), UUID_APP, &[insert])
        .await
        .expect("insert");
    assert!(result.user_db_changed && result.report.as_ref().expect("report").wrote);
    assert_eq!(result.results[0].changes, Some(1));
    let (result, _) = execute(
        &mut client,
        new_user,
        UUID_APP,
        &["SELECT qty FROM trades WHERE symbol = 'NEW'"],
    )
    .await
    .expect("read back");
    assert_eq!(result.results[0].rows.len(), 1);
}

#[tokio::test]
async fn apply_ddl_is_audited_with_consecutive_sequence_numbers() {
    let mut client = client().await;
    let user = sample();
    let (first, user1) = apply_ddl(
        &mut client,
        user.clone(),
        CHESS_APP,
        &[
            "CREATE TABLE games (id INTEGER PRIMARY KEY AUTOINCREMENT, result TEXT) STRICT",
            "CREATE INDEX games_result ON games (result)",
        ],
    )
    .await
    .expect("ddl");
    assert_eq!(first.applied, 2);
    assert_eq!(first.seqs.len(), 2);
    assert_eq!(first.seqs[1], first.seqs[0] + 1);
    assert_eq!(
        first.report.as_ref().expect("report").migrations_appended,
        2
    );
    let (second, user2) = apply_ddl(
        &mut client,
        user1,
        CHESS_APP,
        &["ALTER TABLE games ADD COLUMN plies INTEGER"],
    )
    .await
    .expect("ddl 2");
    assert_eq!(second.seqs, vec![first.seqs[1] + 1]);
    let (_conn_dir, conn) = sqlite(&user2);
    let audit: Vec<(i64, String)> = conn
        .prepare("SELECT seq, ddl FROM snug_app_migrations WHERE app_id = ?1 ORDER BY seq")
        .expect("prepare")
        .query_map([CHESS_APP], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(
        audit.last().map(|(seq, ddl)| (*seq, ddl.as_str())),
        Some((second.seqs[0], "ALTER TABLE games ADD COLUMN plies INTEGER"))
    );
    // All or nothing: a failing statement after a good one leaves no trace and returns nothing.
    let status = apply_ddl(
        &mut client,
        user2,
        CHESS_APP,
        &["CREATE TABLE ok (x)", "CREATE TABLE (broken"],
    )
    .await
    .expect_err("broken");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::materialize::DDL_FAILED,
    );
    assert_eq!(metadata(&status, "statement").as_deref(), Some("1"));
    let status = apply_ddl(&mut client, user, CHESS_APP, &[])
        .await
        .expect_err("empty");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::materialize::INVALID_ARGUMENT,
    );
}

/// Issue 23, point 4: a list over the bounds of one call is refused, typed, as soon as the header
/// is in — the client never sends the user database here, and the answer still comes.
#[tokio::test]
async fn apply_ddl_over_its_bounds_is_refused_before_the_payload_is_read() {
    let mut client = client().await;
    let too_many = vec!["SELECT 1".to_owned(); snug_materialize::MAX_DDL_STATEMENTS + 1];
    let too_long = vec![format!(
        "SELECT '{}'",
        "x".repeat(snug_materialize::MAX_DDL_BYTES)
    )];
    for (statements, limit) in [
        (too_many, snug_materialize::MAX_DDL_STATEMENTS),
        (too_long, snug_materialize::MAX_DDL_BYTES),
    ] {
        let header = pb::ApplyDdlRequest::header(pb::ApplyDdlHeader {
            app_id: CHESS_APP.to_owned(),
            statements,
            expected_length: Some(sample().len() as u64),
        });
        // The header, then a stream that never ends: only a refusal made before the payload
        // is read can answer.
        let request =
            futures::StreamExt::chain(futures::stream::iter([header]), futures::stream::pending());
        let status = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            client.apply_ddl(request),
        )
        .await
        .expect("answered without the payload")
        .expect_err("over the bounds");
        assert_refused(
            &status,
            Code::ResourceExhausted,
            &snug_reasons::materialize::DDL_TOO_LARGE,
        );
        assert_eq!(metadata(&status, "limit"), Some(limit.to_string()));
        assert_eq!(
            metadata(&status, "field").as_deref(),
            Some("header.statements")
        );
    }
}

#[tokio::test]
async fn export_app_gives_a_standalone_file_for_either_namespace_shape() {
    let mut client = client().await;
    for app in [UUID_APP, CHESS_APP] {
        let (result, bytes) = export(&mut client, sample(), app).await.expect(app);
        assert_eq!(result.file_name, format!("{}.snug", result.token));
        assert!(bytes.starts_with(b"SQLite format 3\0"));
        assert_eq!(contents(&bytes), contents(&runtime_vector(app)), "{app}");
    }
}

#[tokio::test]
async fn list_app_tables_names_both_apps_with_natural_and_rest_names() {
    let mut client = client().await;
    let listing = list(&mut client, sample()).await.expect("list");
    let apps: BTreeMap<&str, Vec<(&str, &str)>> = listing
        .apps
        .iter()
        .map(|app| {
            (
                app.app_id.as_str(),
                app.tables
                    .iter()
                    .map(|t| (t.name.as_str(), t.rest_name.as_str()))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        apps.get(CHESS_APP),
        Some(&vec![("moves", "app_x737461727465722d2d6368657373__moves")])
    );
    assert_eq!(apps.get(UUID_APP).map(Vec::len), Some(3));
    assert!(listing.orphaned.is_empty());
}

#[tokio::test]
async fn bad_inputs_are_refused_with_their_reasons() {
    let mut client = client().await;

    // Headerless: the first message is a chunk.
    let request = futures::stream::iter(vec![pb::MaterializeAppRequest::chunk(
        Bytes::from_static(b"SQLite"),
    )]);
    let status = client
        .materialize_app(request)
        .await
        .expect_err("headerless");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::materialize::INVALID_ARGUMENT,
    );
    assert_eq!(metadata(&status, "field").as_deref(), Some("header"));

    // Oversize, declared: refused before any chunk.
    let request = futures::stream::iter(vec![pb::MaterializeAppRequest::header(
        pb::UserDatabaseHeader {
            app_id: UUID_APP.to_owned(),
            expected_length: Some(MAX_USERDB_BYTES + 1),
        },
    )]);
    let status = client.materialize_app(request).await.expect_err("oversize");
    assert_refused(
        &status,
        Code::ResourceExhausted,
        &snug_reasons::materialize::TOO_LARGE,
    );

    // A persist whose runtime part alone is over the cap.
    use pb::persist_app_request::Message as PersistMessage;
    let request = futures::stream::iter(vec![pb::PersistAppRequest {
        message: Some(PersistMessage::Header(pb::PersistAppHeader {
            app_id: UUID_APP.to_owned(),
            user_db_length: 4096,
            runtime_length: MAX_USERDB_BYTES + 1,
        })),
    }]);
    let status = client
        .persist_app(request)
        .await
        .expect_err("oversize runtime");
    assert_refused(
        &status,
        Code::ResourceExhausted,
        &snug_reasons::materialize::TOO_LARGE,
    );

    let status = materialize(&mut client, sample(), "no-such-app")
        .await
        .expect_err("unknown");
    assert_refused(
        &status,
        Code::NotFound,
        &snug_reasons::materialize::APP_NOT_FOUND,
    );
    assert_eq!(metadata(&status, "appId").as_deref(), Some("no-such-app"));
    // An app id of 10 KB is refused at the edge (issue 23, point 5): INVALID_ARGUMENT naming the
    // field, repeating none of it (not the client's RESOURCE_EXHAUSTED for trailers over 16 KiB).
    let huge = "a".repeat(10_000);
    let status = materialize(&mut client, sample(), &huge)
        .await
        .expect_err("refused");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::materialize::INVALID_ARGUMENT,
    );
    assert_eq!(metadata(&status, "field").as_deref(), Some("header.app_id"));
    assert!(!status.message().contains("aaaa"), "{}", status.message());
    // At the bound it is an ordinary unknown id, echoed as the status bounds every echo.
    let at_bound = "a".repeat(snug_rpc::status::MAX_IDENTIFIER_BYTES);
    let status = materialize(&mut client, sample(), &at_bound)
        .await
        .expect_err("unknown");
    assert_refused(
        &status,
        Code::NotFound,
        &snug_reasons::materialize::APP_NOT_FOUND,
    );
    assert!(status.message().len() <= snug_rpc::status::MAX_MESSAGE_CHARS + 32);
    let status = export(&mut client, sample(), "no-such-app")
        .await
        .expect_err("unknown");
    assert_refused(
        &status,
        Code::NotFound,
        &snug_reasons::materialize::APP_NOT_FOUND,
    );
    let status = persist(
        &mut client,
        sample(),
        "no-such-app",
        runtime_vector(CHESS_APP),
    )
    .await
    .expect_err("unknown");
    assert_refused(
        &status,
        Code::NotFound,
        &snug_reasons::materialize::APP_NOT_FOUND,
    );

    let status = materialize(&mut client, sample(), "")
        .await
        .expect_err("no app id");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::materialize::INVALID_ARGUMENT,
    );

    let garbage = Bytes::from_static(b"PK\x03\x04 not a database at all, not even close");
    let status = materialize(&mut client, garbage.clone(), UUID_APP)
        .await
        .expect_err("garbage");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::materialize::NOT_SQLITE,
    );
    assert_eq!(metadata(&status, "part").as_deref(), Some("user_db"));
    let status = persist(&mut client, sample(), UUID_APP, garbage)
        .await
        .expect_err("garbage runtime");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::materialize::NOT_SQLITE,
    );
    assert_eq!(metadata(&status, "part").as_deref(), Some("runtime"));

    let future = userdb("future-v7.user.sqlite");
    let status = list(&mut client, future).await.expect_err("newer");
    assert_refused(
        &status,
        Code::FailedPrecondition,
        &snug_reasons::materialize::SCHEMA_TOO_NEW,
    );

    let status = execute(&mut client, sample(), UUID_APP, &[])
        .await
        .expect_err("no statements");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::materialize::INVALID_ARGUMENT,
    );
}

#[tokio::test]
async fn a_full_pool_refuses_as_overloaded() {
    let config = MaterializeConfig {
        materialize_concurrency: Some(1),
        materialize_queue_timeout: Duration::ZERO,
    };
    let pool = BlockingPool::new(
        1,
        config.materialize_queue_timeout,
        error_info::DOMAIN,
        "app-database jobs",
    );
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let pool = Arc::new(pool);
    let busy = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.run(move |_| {
                let _ = started_tx.send(());
                let _ = release_rx.recv();
            })
            .await
        })
    };
    tokio::task::spawn_blocking(move || started_rx.recv())
        .await
        .expect("join")
        .expect("started");
    let status = pool.run(|_| ()).await.expect_err("overloaded");
    assert_refused(
        &status,
        Code::Unavailable,
        &snug_reasons::materialize::OVERLOADED,
    );
    let _ = release_tx.send(());
    busy.await.expect("join").expect("busy job");
}

/// Minutes of SQLite work in one statement (a count to ten billion, no step budget in ApplyDdl):
/// a job that is not stopped outlives every bound of the tests below.
const LONG_STATEMENT: &str = "SELECT count(*) FROM (WITH RECURSIVE c(x) AS \
     (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000000) SELECT x FROM c)";

/// A server with one job slot whose pool the test watches, on loopback, with `request_timeout`.
async fn start_watched(request_timeout: Duration) -> (Client, MaterializeServer) {
    let server = MaterializeServer::new(
        &MaterializeConfig {
            materialize_concurrency: Some(1),
            ..MaterializeConfig::default()
        },
        &snug_rpc::runtime::Runtime::default(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server_config = ServerConfig {
        request_timeout,
        ..ServerConfig::for_tests()
    };
    let services = Services::default().with(service(server.clone()), &[]);
    tokio::spawn(async move {
        snug_rpc::server::serve(&server_config, listener, services, std::future::pending()).await
    });
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let client = MaterializeServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE);
    (client, server)
}

/// Waits (a generous bound: the point is that it happens, not how fast) until the pool's stats
/// satisfy `done`, and returns them.
async fn pool_until(
    server: &MaterializeServer,
    what: &str,
    done: impl Fn(snug_rpc::blocking::PoolStats) -> bool,
) -> snug_rpc::blocking::PoolStats {
    let waited = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let stats = server.pool.stats();
            if done(stats) {
                return stats;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    waited.unwrap_or_else(|_| panic!("{what}: {:?}", server.pool.stats()))
}

/// An ApplyDdl request of `statements`, optionally with a client deadline (`grpc-timeout`).
fn ddl_request(
    statements: &[&str],
    timeout: Option<Duration>,
) -> tonic::Request<impl futures::Stream<Item = pb::ApplyDdlRequest> + Send + 'static> {
    let user = sample();
    let first = pb::ApplyDdlRequest::header(pb::ApplyDdlHeader {
        app_id: CHESS_APP.to_owned(),
        statements: statements.iter().map(|s| (*s).to_owned()).collect(),
        expected_length: Some(user.len() as u64),
    });
    let mut request = tonic::Request::new(chunks::upload(first, user));
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    request
}

/// How many ApplyDdl calls the process's metrics hold with this code and reason.
fn ddl_calls(code: &str, reason: &str) -> f64 {
    let text = snug_rpc::metrics::global().encode();
    let prefix = format!(
        r#"snug_grpc_server_requests_total{{method="snug.materialize.v1.MaterializeService/ApplyDdl",code="{code}",reason="{reason}"}}"#
    );
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Issue 23, point 4: an ApplyDdl whose deadline passes — the server's request timeout, then
/// the client's `grpc-timeout` — stops its work: the job sees its caller gone, ends, and frees
/// the only slot, and the next request is served. The server's own deadline is answered typed,
/// DEADLINE_EXCEEDED with reason DEADLINE_EXCEEDED, and both are counted so.
#[tokio::test]
async fn a_call_past_its_deadline_stops_its_job_and_frees_the_slot() {
    for (round, server_timeout, client_timeout) in [
        ("the server's request timeout", Duration::from_secs(1), None),
        (
            "the client's grpc-timeout",
            Duration::from_secs(60),
            Some(Duration::from_millis(500)),
        ),
    ] {
        let (mut client, server) = start_watched(server_timeout).await;
        let counted = ddl_calls("DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED");
        let status = client
            .apply_ddl(ddl_request(&[LONG_STATEMENT], client_timeout))
            .await
            .expect_err("past its deadline");
        if client_timeout.is_none() {
            assert_refused(
                &status,
                Code::DeadlineExceeded,
                &snug_reasons::materialize::DEADLINE_EXCEEDED,
            );
        } else {
            // tonic's client keeps the deadline it sends too, and reports its own expiry as
            // CANCELLED "Timeout expired"; what the server did is checked below.
            assert!(
                matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled),
                "{round}: {status:?}"
            );
        }
        let stats = pool_until(&server, round, |stats| stats.running == 0).await;
        assert_eq!(stats.stopped, 1, "{round}: the job saw its caller go");
        // A counter is fed when the call's end is seen, a moment after the answer.
        tokio::time::timeout(Duration::from_secs(30), async {
            while ddl_calls("DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED") < counted + 1.0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{round}: counted as DEADLINE_EXCEEDED"));
        let (served, _) = apply_ddl(&mut client, sample(), CHESS_APP, &["CREATE TABLE t (x)"])
            .await
            .unwrap_or_else(|status| panic!("{round}: the next request is served: {status:?}"));
        assert_eq!(served.applied, 1);
    }
}

/// Issue 23, points 4 and 6: a client that drops its ApplyDdl while the job runs frees the
/// slot the same way, and the call is counted as CANCELLED.
#[tokio::test]
async fn a_cancelled_call_stops_its_job_and_frees_the_slot() {
    let (client, server) = start_watched(Duration::from_secs(60)).await;
    let counted = ddl_calls("CANCELLED", "");
    let call = tokio::spawn({
        let mut client = client.clone();
        async move { client.apply_ddl(ddl_request(&[LONG_STATEMENT], None)).await }
    });
    pool_until(&server, "the job started", |stats| stats.running == 1).await;
    call.abort();
    let stats = pool_until(&server, "the slot is free", |stats| stats.running == 0).await;
    assert_eq!(stats.stopped, 1, "the job saw its caller go");
    tokio::time::timeout(Duration::from_secs(30), async {
        while ddl_calls("CANCELLED", "") < counted + 1.0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("counted as CANCELLED");
}

#[test]
fn every_reason_is_documented_in_the_reference_and_the_proto() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let reference =
        std::fs::read_to_string(root.join("shared/reasons/REASONS.md")).expect("REASONS.md");
    let proto = std::fs::read_to_string(root.join("proto/snug/materialize/v1/materialize.proto"))
        .expect("proto");
    let section = reference
        .split("Materialize reasons (domain `snug.materialize`)")
        .nth(1)
        .expect("REASONS.md has a materialize reason table");
    // The table: the first run of `|` lines after the heading.
    let table: String = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .collect::<Vec<_>>()
        .join("\n");
    let mut seen = std::collections::BTreeSet::new();
    for reason in error_info::REASONS.reasons.iter().map(|r| r.name) {
        assert!(seen.insert(reason), "{reason} is listed twice");
        assert!(
            reason.len() <= 63 && reason.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'),
            "{reason} is not UPPER_SNAKE"
        );
        assert!(
            table.contains(&format!("| `{reason}` |")),
            "{reason} missing from REASONS.md"
        );
        assert!(
            proto.contains(&format!("// | {reason} ")),
            "{reason} missing from materialize.proto"
        );
    }
}

#[test]
fn mapped_reasons_are_the_domain_crates_own() {
    // The status table must say the same word as the library's `reason()`, which the CLI prints.
    let err = snug_materialize::MaterializeError::AppNotFound {
        namespace: "x".to_owned(),
    };
    let library = err.reason();
    assert_eq!(status::materialize_error(err).reason(), library);
    let err = snug_materialize::PersistError::NameCollision {
        name: "t".to_owned(),
    };
    let library = err.reason();
    assert_eq!(status::persist_error(err).reason(), library);
    let err = snug_materialize::PersistError::TooLarge { size: 2, max: 1 };
    let library = err.reason();
    assert_eq!(status::persist_error(err).reason(), library);
    let err = snug_materialize::LoadError::NotSqlite;
    let library = err.reason();
    assert_eq!(status::load_error(err).reason(), library);
    for reason in [
        snug_materialize::ExecuteError::Statement {
            index: 0,
            problem: snug_materialize::StatementProblem::Forbidden(
                snug_materialize::Forbidden::Attach,
            ),
        },
        snug_materialize::ExecuteError::Statement {
            index: 0,
            problem: snug_materialize::StatementProblem::BudgetExceeded { max_steps: 1 },
        },
        snug_materialize::ExecuteError::Statement {
            index: 0,
            problem: snug_materialize::StatementProblem::NotOneStatement,
        },
    ] {
        let library = reason.reason();
        assert_eq!(status::execute_error(reason).reason(), library);
    }
}

mod isolation;

mod read_never_writes;
