//! In-process tests of `snug.sync.v1`: a real server on loopback, a generated client, and a real
//! store — SQLite in a temporary directory, and PostgreSQL (a fresh schema per test) when
//! `SNUG_TEST_POSTGRES_URL` names a server.

use std::{io::Write as _, time::Duration};

use bytes::Bytes;
use sha2::{Digest as _, Sha256};
use snug_proto::sync::v1::{
    self as pb, precondition::Condition, sync_service_client::SyncServiceClient,
};
use snug_rpc::chunks::Chunked as _;
use snug_rpc::chunks::{CHUNK_SIZE, MAX_MESSAGE_SIZE, Part};
use tonic::{Code, transport::Channel};

use snug_revstore::PutError;

use super::*;

/// A running service with its client and a handle on the store behind it.
struct Hub {
    client: SyncServiceClient<Channel>,
    /// The client's channel, for calls made without the generated client.
    channel: Channel,
    store: AnyStore,
    config: SyncConfig,
    runtime: Runtime,
    // Keeps the embedded store's directory alive for the test's duration.
    _dir: tempfile::TempDir,
}

/// What a test tunes before the service starts: its configuration (whose fields `Deref` reaches,
/// so `|c| c.quota_bytes = …` reads as it always did) and its runtime.
struct Setup {
    config: SyncConfig,
    runtime: Runtime,
}

impl std::ops::Deref for Setup {
    type Target = SyncConfig;

    fn deref(&self) -> &SyncConfig {
        &self.config
    }
}

impl std::ops::DerefMut for Setup {
    fn deref_mut(&mut self) -> &mut SyncConfig {
        &mut self.config
    }
}

/// Starts the service over a fresh store of `backend`; `None` (the test is skipped, loudly) for
/// PostgreSQL without `SNUG_TEST_POSTGRES_URL`.
async fn start(backend: Backend, tune: impl FnOnce(&mut Setup)) -> Option<Hub> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = SyncConfig {
        // Tests that reclaim do it explicitly, at a moment they choose.
        reclaim_interval: Duration::ZERO,
        ..SyncConfig::default()
    };
    if backend == Backend::Postgres {
        let Ok(url) = std::env::var("SNUG_TEST_POSTGRES_URL") else {
            // Straight to the stderr handle: libtest captures `eprintln!` of passing tests, and a
            // skip must be visible in the run's output.
            let _ = writeln!(
                std::io::stderr(),
                "skipped (PostgreSQL): SNUG_TEST_POSTGRES_URL is not set"
            );
            return None;
        };
        config.store = Backend::Postgres;
        config.postgres_url = Some(PostgresUrl::new(url));
        config.postgres_schema = Some(unique_schema());
        config.postgres_pool_size = 4;
    }
    let mut setup = Setup {
        config,
        runtime: Runtime {
            dir: dir.path().join("sync"),
            ..Runtime::default()
        },
    };
    tune(&mut setup);
    let Setup { config, runtime } = setup;
    let store = open_store(&config, &runtime).await.expect("open the store");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (served_store, served_config, served_runtime) =
        (store.clone(), config.clone(), runtime.clone());
    tokio::spawn(async move {
        serve(
            &ServerConfig::for_tests(),
            &served_config,
            &served_runtime,
            served_store,
            listener,
            std::future::pending(),
        )
        .await
    });
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let client = SyncServiceClient::new(channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE);
    Some(Hub {
        client,
        channel,
        store,
        config,
        runtime,
        _dir: dir,
    })
}

fn unique_schema() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "sync_test_{}_{}_{}",
        std::process::id(),
        nanos,
        N.fetch_add(1, Ordering::SeqCst)
    )
}

fn caller(user: &str, principal: &str) -> Option<pb::Caller> {
    Some(pb::Caller {
        user_id: user.to_owned(),
        principal: principal.to_owned(),
        ..Default::default()
    })
}

fn must_not_exist() -> Option<Condition> {
    Some(Condition::MustNotExist(pb::MustNotExist {}))
}

fn must_match(revision: &str) -> Option<Condition> {
    Some(Condition::MustMatch(revision.to_owned()))
}

/// A valid user database (every write is validated), different per seed, of at most `len`
/// bytes or the smallest one there is ([`snug_test_support::userdb::filled`]), in the form the
/// service stores it (free space zeroed), so what a test sends is what it gets back.
fn image(seed: u64, len: usize) -> Bytes {
    stored(&snug_test_support::userdb::filled(len, seed))
}

/// `bytes`, a SQLite image, in the form the service stores it: its free space zeroed.
fn stored(bytes: &[u8]) -> Bytes {
    Bytes::from(snug_schema::scrub_free_space(bytes).expect("a walkable SQLite image"))
}

/// A copy of `image` with `sql` applied ([`snug_test_support::userdb::edited`]), in the form
/// the service stores it: an edit of a user's file, as a device makes one.
fn edit(image: &[u8], sql: &str) -> Bytes {
    stored(&snug_test_support::userdb::edited(image, sql))
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The gRPC code `snug-reasons` gives the sync reason `name`, which every status carrying it
/// must have.
#[track_caller]
fn reason_code(reason: &snug_reasons::Reason) -> Code {
    assert!(
        error_info::REASONS.find(reason.name).is_some(),
        "{reason} is no sync reason"
    );
    snug_rpc::status::code_of(reason)
}

/// Bytes that are no user database: for the refusals made before any validation.
fn noise(seed: u64, len: usize) -> Bytes {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    Bytes::from(out)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn reason(status: &Status) -> String {
    snug_rpc::status::reason_of(status).unwrap_or_default()
}

fn meta(status: &Status, key: &str) -> Option<String> {
    snug_rpc::status::metadata_of(status, key)
}

/// One PutImage call: what the header says and how the bytes are sent.
struct Put<'a> {
    user: &'a str,
    precondition: Option<Condition>,
    bytes: Bytes,
    declare_length: bool,
    idempotency_key: Option<&'a str>,
    /// The user's own quota, as the gateway sends it from the users directory.
    quota_bytes: Option<u64>,
}

impl<'a> Put<'a> {
    fn new(user: &'a str, precondition: Option<Condition>, bytes: Bytes) -> Self {
        Self {
            user,
            precondition,
            bytes,
            declare_length: true,
            idempotency_key: None,
            quota_bytes: None,
        }
    }

    fn header(&self) -> pb::PutImageRequest {
        pb::PutImageRequest::header(pb::PutImageHeader {
            caller: caller(self.user, "device-a"),
            precondition: Some(pb::Precondition {
                condition: self.precondition.clone(),
            }),
            idempotency_key: self.idempotency_key.map(str::to_owned),
            expected_length: self.declare_length.then_some(self.bytes.len() as u64),
            quota_bytes: self.quota_bytes,
        })
    }

    async fn send(self, hub: &mut Hub) -> Result<pb::PutImageResponse, Status> {
        let request = chunks::upload(self.header(), self.bytes.clone());
        hub.client
            .put_image(request)
            .await
            .map(Response::into_inner)
    }
}

async fn put(
    hub: &mut Hub,
    user: &str,
    precondition: Option<Condition>,
    bytes: &Bytes,
) -> Result<pb::RevisionInfo, Status> {
    let response = Put::new(user, precondition, bytes.clone())
        .send(hub)
        .await?;
    Ok(response.revision.expect("revision"))
}

/// Stores `bytes` for `user` through the store itself, past the service's validation: for the
/// suites about storage whose premise needs bytes no user database has (no page repeating).
async fn put_unvalidated(hub: &Hub, user: &str, bytes: &Bytes) -> String {
    use snug_revstore::{Precondition, Principal, PutRequest, RevStore as _, UserId};
    let request = PutRequest {
        user: UserId::new(user).expect("user id"),
        precondition: Precondition::MustNotExist,
        principal: Principal::new("test/direct").expect("principal"),
        idempotency_key: None,
        expected_length: Some(bytes.len() as u64),
        quota_bytes: None,
    };
    let body = futures::stream::iter([Ok(bytes.clone())]);
    let outcome = hub.store.put(request, body).await.expect("put");
    outcome.info.revision.to_string()
}

async fn provision(hub: &mut Hub, user: &str) -> bool {
    hub.client
        .provision_user(pb::ProvisionUserRequest {
            caller: caller(user, user),
        })
        .await
        .expect("provision")
        .into_inner()
        .created
}

/// Downloads an image; returns its metadata, the bytes and the size of every chunk message.
async fn get(
    hub: &mut Hub,
    user: &str,
    revision: Option<&str>,
) -> Result<(pb::RevisionInfo, Bytes, Vec<usize>), Status> {
    let mut stream = hub
        .client
        .get_image(pb::GetImageRequest {
            caller: caller(user, "device-b"),
            revision: revision.map(str::to_owned),
        })
        .await?
        .into_inner();
    let first = stream
        .message()
        .await?
        .and_then(pb::GetImageResponse::into_part);
    let Some(Part::Header(info)) = first else {
        panic!("the stream did not start with its result");
    };
    let mut bytes = Vec::new();
    let mut sizes = Vec::new();
    while let Some(message) = stream.message().await? {
        match message.into_part() {
            Some(Part::Chunk(chunk)) => {
                sizes.push(chunk.len());
                bytes.extend_from_slice(&chunk);
            }
            _ => panic!("the stream repeated its result"),
        }
    }
    Ok((info, Bytes::from(bytes), sizes))
}

async fn head(
    hub: &mut Hub,
    user: &str,
    revision: Option<&str>,
) -> Result<pb::RevisionInfo, Status> {
    let response = hub
        .client
        .head_image(pb::HeadImageRequest {
            caller: caller(user, user),
            revision: revision.map(str::to_owned),
        })
        .await?;
    Ok(response.into_inner().revision.expect("revision"))
}

/// Asserts that `user` has no image: HeadImage answers NOT_FOUND.
async fn assert_no_image(hub: &mut Hub, user: &str) {
    assert_refused(
        head(hub, user, None).await,
        Code::NotFound,
        &snug_reasons::sync::NOT_FOUND,
    );
}

async fn history(hub: &mut Hub, user: &str) -> Vec<pb::RevisionInfo> {
    hub.client
        .list_revisions(pb::ListRevisionsRequest {
            caller: caller(user, user),
            limit: 0,
        })
        .await
        .expect("list revisions")
        .into_inner()
        .revisions
}

async fn restore(
    hub: &mut Hub,
    user: &str,
    from: &str,
    precondition: Option<Condition>,
) -> Result<pb::RestoreRevisionResponse, Status> {
    hub.client
        .restore_revision(pb::RestoreRevisionRequest {
            caller: caller(user, "device-c"),
            from_revision: from.to_owned(),
            precondition: precondition.map(|condition| pb::Precondition {
                condition: Some(condition),
            }),
            idempotency_key: None,
        })
        .await
        .map(Response::into_inner)
}

#[track_caller]
fn assert_refused(
    result: Result<impl fmt::Debug, Status>,
    code: Code,
    expected: &snug_reasons::Reason,
) -> Status {
    let status = match result {
        Ok(value) => panic!("expected {expected}, got {value:?}"),
        Err(status) => status,
    };
    assert_eq!(
        (status.code(), reason(&status).as_str()),
        (code, expected.name),
        "{status:?}"
    );
    status
}

/// Instantiates every backend-generic case once per backend.
macro_rules! on_every_backend {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::Backend::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::Backend::Postgres).await;
                }
            )*
        }
    };
}

/// As `on_every_backend!`, in modules of their own, for the delta cases (issue 21).
macro_rules! on_every_backend_delta {
    ($($case:ident),* $(,)?) => {
        mod delta_sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::Backend::Sqlite).await;
                }
            )*
        }
        mod delta_postgres {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::Backend::Postgres).await;
                }
            )*
        }
    };
}

on_every_backend!(
    compare_and_swap_over_grpc,
    a_write_without_a_precondition_is_refused,
    quota_boundary_is_exact_whether_declared_or_not,
    an_over_quota_stream_is_refused_while_it_streams,
    get_returns_the_exact_bytes_and_digest,
    the_framed_client_reads_what_the_generated_client_reads,
    head_reports_the_current_revision_without_bytes,
    head_names_a_retained_revision_and_every_answer_carries_its_storage_version,
    history_lists_newest_first_and_restore_copies_forward,
    ledger_lists_served_and_refused_entries,
    denial_is_uniform,
    a_retry_with_the_same_idempotency_key_is_replayed,
    first_contact_provisions_the_user_record_only,
    malformed_uploads_are_refused_and_write_nothing,
    store_status_reports_the_backend,
    usage_and_erasure_of_one_user,
    admin_rpcs_refuse_a_bad_user_id,
    a_users_own_quota_replaces_the_configured_one,
);

async fn compare_and_swap_over_grpc(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let (v1, v2, v3) = (image(1, 0), image(2, 0), image(3, 0));

    // No image yet: must-match anything is a mismatch that reports no current revision.
    let status = assert_refused(
        put(&mut hub, "alice", must_match("r1-0000000000000000"), &v1).await,
        Code::Aborted,
        &snug_reasons::sync::REVISION_MISMATCH,
    );
    assert_eq!(meta(&status, error_info::CURRENT_REVISION), None);

    let r1 = put(&mut hub, "alice", must_not_exist(), &v1)
        .await
        .expect("first write");
    assert_eq!(r1.sha256, sha256_hex(&v1));
    assert_eq!(r1.size, v1.len() as u64);
    assert_eq!(r1.base, None);

    // A second first write: mismatch, with the current revision to rebase on.
    let status = assert_refused(
        put(&mut hub, "alice", must_not_exist(), &v2).await,
        Code::Aborted,
        &snug_reasons::sync::REVISION_MISMATCH,
    );
    assert_eq!(
        meta(&status, error_info::CURRENT_REVISION),
        Some(r1.revision.clone())
    );

    let r2 = put(&mut hub, "alice", must_match(&r1.revision), &v2)
        .await
        .expect("second write");
    assert_ne!(r2.revision, r1.revision);
    assert_eq!(r2.base.as_deref(), Some(r1.revision.as_str()));

    // Built on r1, which is this user's earlier revision: stale, not a mismatch.
    let status = assert_refused(
        put(&mut hub, "alice", must_match(&r1.revision), &v3).await,
        Code::Aborted,
        &snug_reasons::sync::STALE_REVISION,
    );
    assert_eq!(
        meta(&status, error_info::CURRENT_REVISION),
        Some(r2.revision.clone())
    );
    assert_eq!(
        meta(&status, error_info::BASE_REVISION),
        Some(r1.revision.clone())
    );

    // A revision this user never had: a mismatch.
    let status = assert_refused(
        put(&mut hub, "alice", must_match("r9-0123456789abcdef"), &v3).await,
        Code::Aborted,
        &snug_reasons::sync::REVISION_MISMATCH,
    );
    assert_eq!(
        meta(&status, error_info::CURRENT_REVISION),
        Some(r2.revision.clone())
    );

    // None of the refusals moved the pointer.
    assert_eq!(
        head(&mut hub, "alice", None).await.expect("head").revision,
        r2.revision
    );
}

async fn a_write_without_a_precondition_is_refused(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    // A Precondition message with nothing chosen.
    assert_refused(
        put(&mut hub, "alice", None, &image(1, 100)).await,
        Code::FailedPrecondition,
        &snug_reasons::sync::PRECONDITION_REQUIRED,
    );
    // No Precondition message at all.
    let header = pb::PutImageRequest::header(pb::PutImageHeader {
        caller: caller("alice", "device-a"),
        precondition: None,
        idempotency_key: None,
        expected_length: None,
        quota_bytes: None,
    });
    let request = chunks::upload(header, image(1, 100));
    assert_refused(
        hub.client.put_image(request).await,
        Code::FailedPrecondition,
        &snug_reasons::sync::PRECONDITION_REQUIRED,
    );
    // Restore has the same rule.
    assert_refused(
        restore(&mut hub, "alice", "r1-0000000000000000", None).await,
        Code::FailedPrecondition,
        &snug_reasons::sync::PRECONDITION_REQUIRED,
    );
    assert_no_image(&mut hub, "alice").await;
}

async fn quota_boundary_is_exact_whether_declared_or_not(backend: Backend) {
    // An image is whole pages, so the quota is the length of the one accepted at it. Over two
    // chunks, so the refusal happens mid-stream rather than on the first message.
    let exact = image(8, 3 * CHUNK_SIZE);
    let quota = exact.len() as u64;
    assert!(quota > 2 * CHUNK_SIZE as u64, "{quota}");
    let Some(mut hub) = start(backend, |c| c.quota_bytes = quota).await else {
        return;
    };
    for (user, declare_length) in [("declared", true), ("undeclared", false)] {
        provision(&mut hub, user).await;
        // One byte over: refused on the length alone, before any validation could look.
        let over = Put {
            declare_length,
            ..Put::new(user, must_not_exist(), noise(7, quota as usize + 1))
        };
        let status = assert_refused(
            over.send(&mut hub).await,
            Code::ResourceExhausted,
            &snug_reasons::sync::QUOTA_EXCEEDED,
        );
        assert_eq!(
            meta(&status, error_info::QUOTA_BYTES),
            Some(quota.to_string())
        );
        // A valid image one page over is refused the same way.
        let over = Put {
            declare_length,
            ..Put::new(
                user,
                must_not_exist(),
                Bytes::from(snug_test_support::userdb::exactly(quota as usize + 4096, 9)),
            )
        };
        let status = assert_refused(
            over.send(&mut hub).await,
            Code::ResourceExhausted,
            &snug_reasons::sync::QUOTA_EXCEEDED,
        );
        assert_eq!(
            meta(&status, error_info::QUOTA_BYTES),
            Some(quota.to_string())
        );
        assert_refused(
            head(&mut hub, user, None).await,
            Code::NotFound,
            &snug_reasons::sync::NOT_FOUND,
        );

        let at = Put {
            declare_length,
            ..Put::new(user, must_not_exist(), exact.clone())
        };
        let accepted = at.send(&mut hub).await.expect("exactly at the quota");
        assert_eq!(accepted.revision.expect("revision").size, quota);
        let (_, bytes, _) = get(&mut hub, user, None).await.expect("get");
        assert_eq!(bytes, exact);
    }
}

async fn an_over_quota_stream_is_refused_while_it_streams(backend: Backend) {
    const QUOTA: u64 = CHUNK_SIZE as u64;
    let Some(mut hub) = start(backend, |c| c.quota_bytes = QUOTA).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    // Two chunks cross the quota and then the client never finishes: only a server that refuses
    // while streaming answers at all. The bytes are no database: the quota is judged before the
    // validation, which would refuse them too, but only after the whole image.
    let put = Put {
        declare_length: false,
        ..Put::new("alice", must_not_exist(), noise(1, 2 * CHUNK_SIZE))
    };
    let request = chunks::upload(put.header(), put.bytes.clone()).chain(futures::stream::pending());
    let answer = tokio::time::timeout(Duration::from_secs(30), hub.client.put_image(request))
        .await
        .expect("refused before the stream ended");
    assert_refused(
        answer,
        Code::ResourceExhausted,
        &snug_reasons::sync::QUOTA_EXCEEDED,
    );

    // A declared length over the quota is refused on the header alone: no chunk is ever sent.
    let declared = Put::new("alice", must_not_exist(), noise(2, QUOTA as usize + 1));
    let request =
        futures::stream::once(async move { declared.header() }).chain(futures::stream::pending());
    let answer = tokio::time::timeout(Duration::from_secs(30), hub.client.put_image(request))
        .await
        .expect("refused on the header");
    assert_refused(
        answer,
        Code::ResourceExhausted,
        &snug_reasons::sync::QUOTA_EXCEEDED,
    );
    assert_no_image(&mut hub, "alice").await;
}

async fn get_returns_the_exact_bytes_and_digest(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    // Not a multiple of the chunk size, so the last chunk is short.
    let first = image(1, 5 * CHUNK_SIZE / 2);
    assert_ne!(first.len() % CHUNK_SIZE, 0);
    let r1 = put(&mut hub, "alice", must_not_exist(), &first)
        .await
        .expect("put");
    let (info, bytes, sizes) = get(&mut hub, "alice", None).await.expect("get");
    assert_eq!(info, r1);
    assert_eq!(bytes, first);
    assert_eq!(info.sha256, sha256_hex(&bytes));
    assert_eq!(info.size, bytes.len() as u64);
    assert!(sizes.len() >= 3, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n <= CHUNK_SIZE), "{sizes:?}");

    // An earlier retained revision by name, after the image moved on.
    let second = image(2, 3000);
    put(&mut hub, "alice", must_match(&r1.revision), &second)
        .await
        .expect("put");
    let (info, bytes, _) = get(&mut hub, "alice", Some(&r1.revision))
        .await
        .expect("get r1");
    assert_eq!((info.revision, bytes), (r1.revision.clone(), first));
    let (_, bytes, _) = get(&mut hub, "alice", None).await.expect("get current");
    assert_eq!(bytes, second);

    // An empty image is no database (every write is validated): refused, and the image stays.
    let r2 = head(&mut hub, "alice", None).await.expect("head");
    assert_refused(
        put(&mut hub, "alice", must_match(&r2.revision), &Bytes::new()).await,
        reason_code(&snug_reasons::schema::NOT_SQLITE),
        &snug_reasons::schema::NOT_SQLITE,
    );
    let (info, bytes, _) = get(&mut hub, "alice", None).await.expect("get current");
    assert_eq!((info, bytes), (r2, second));
}

/// Downloads through `snug_rpc::framed::client` (as the gateway does): result and payload.
async fn framed_get(
    hub: &Hub,
    user: &str,
    revision: Option<&str>,
) -> Result<(pb::RevisionInfo, Vec<u8>), Status> {
    let request = tonic::Request::new(futures::stream::iter([pb::GetImageRequest {
        caller: caller(user, "device-b"),
        revision: revision.map(str::to_owned),
    }]));
    let (info, payload) = snug_rpc::framed::client::call::<pb::GetImageResponse, _, _>(
        hub.channel.clone(),
        pb::GET_IMAGE_PATH,
        request,
    )
    .await?;
    let mut bytes = Vec::new();
    payload.read_into(u64::MAX, info.size, &mut bytes).await?;
    Ok((info, bytes))
}

/// The framed answer, read over HTTP/2 by the framed client, is what the generated client reads,
/// at every size and for a refusal.
async fn the_framed_client_reads_what_the_generated_client_reads(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let mut base: Option<String> = None;
    // The smallest image, one under a chunk, one of exactly a chunk (no empty chunk after it)
    // and one whose last chunk is short.
    let images = [
        image(1, 0),
        image(3, 300_000),
        stored(&snug_test_support::userdb::exactly(CHUNK_SIZE, 4)),
        image(5, 3 * CHUNK_SIZE + 7),
    ];
    assert_eq!(images[2].len(), CHUNK_SIZE);
    assert_ne!(images[3].len() % CHUNK_SIZE, 0);
    for bytes in images {
        let len = bytes.len();
        let condition = match &base {
            None => must_not_exist(),
            Some(rev) => must_match(rev),
        };
        let info = put(&mut hub, "alice", condition, &bytes)
            .await
            .expect("put");
        let generated = get(&mut hub, "alice", None).await.expect("get");
        let framed = framed_get(&hub, "alice", None).await.expect("framed get");
        assert_eq!(framed.0, generated.0, "{len}");
        assert!(framed.1 == bytes.to_vec() && generated.1 == bytes, "{len}");
        base = Some(info.revision);
    }
    let generated = get(&mut hub, "nobody", None).await.expect_err("no image");
    let framed = framed_get(&hub, "nobody", None)
        .await
        .expect_err("no image");
    assert_eq!(
        (framed.code(), reason(&framed)),
        (generated.code(), reason(&generated))
    );
}

async fn head_reports_the_current_revision_without_bytes(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    assert_no_image(&mut hub, "alice").await;
    let bytes = image(1, 4096);
    let r1 = put(&mut hub, "alice", must_not_exist(), &bytes)
        .await
        .expect("put");
    let info = head(&mut hub, "alice", None).await.expect("head");
    assert_eq!(info, r1);
    assert_eq!(info.sha256, sha256_hex(&bytes));
    assert_eq!(info.principal, "device-a");
    assert!(info.retained);
    let accepted = info.accepted_at.expect("accepted_at");
    assert!(accepted.seconds > 1_700_000_000, "{accepted:?}");
    assert!((0..1_000_000_000).contains(&accepted.nanos), "{accepted:?}");
}

/// The reference's storage-version-1 user database without its credentials: a file an older
/// Snug wrote, which a hub accepts (an import would migrate it) and stores as it is.
fn legacy_v1() -> Bytes {
    let legacy = std::fs::read(snug_test_support::vector("userdb/legacy-v1.user.sqlite"))
        .expect("the legacy-v1 vector");
    edit(&legacy, "DELETE FROM snug_secrets; VACUUM;")
}

async fn head_names_a_retained_revision_and_every_answer_carries_its_storage_version(
    backend: Backend,
) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let v6 = image(6, 200_000);
    let v1 = legacy_v1();
    let other = image(3, 0);
    let r1 = put(&mut hub, "alice", must_not_exist(), &v6)
        .await
        .expect("r1");
    let r2 = put(&mut hub, "alice", must_match(&r1.revision), &v1)
        .await
        .expect("r2");
    let r3 = put(&mut hub, "alice", must_match(&r2.revision), &other)
        .await
        .expect("r3");
    // Each revision carries the version its own bytes are stamped with, as it was stored.
    assert_eq!(
        [r1.storage_version, r2.storage_version, r3.storage_version],
        [Some(6), Some(1), Some(6)]
    );

    // Head of the current image, and of each retained revision by name.
    assert_eq!(head(&mut hub, "alice", None).await.expect("head"), r3);
    for expected in [&r1, &r2, &r3] {
        let named = head(&mut hub, "alice", Some(&expected.revision))
            .await
            .expect("head of a named revision");
        assert_eq!(&named, expected);
    }
    let listed: Vec<Option<u32>> = history(&mut hub, "alice")
        .await
        .into_iter()
        .map(|r| r.storage_version)
        .collect();
    assert_eq!(listed, [Some(6), Some(1), Some(6)]);
    let (info, bytes, _) = get(&mut hub, "alice", Some(&r1.revision))
        .await
        .expect("get r1");
    assert_eq!((info, bytes), (r1.clone(), v6.clone()));

    // A restore carries its source's version; it never reads the bytes again to find it.
    let restored = restore(&mut hub, "alice", &r2.revision, must_match(&r3.revision))
        .await
        .expect("restore")
        .revision
        .expect("revision");
    assert_eq!(restored.storage_version, Some(1));
    assert_eq!(
        head(&mut hub, "alice", None)
            .await
            .expect("head")
            .storage_version,
        Some(1)
    );

    // A head names no served download: the served ledger records only the get above.
    let ledger = hub
        .client
        .list_ledger(pb::ListLedgerRequest {
            caller: caller("alice", "alice"),
            limit: 0,
        })
        .await
        .expect("ledger")
        .into_inner();
    assert_eq!(
        ledger
            .served
            .iter()
            .map(|s| s.revision.as_str())
            .collect::<Vec<_>>(),
        [r1.revision.as_str()]
    );

    // A name that cannot be a revision is a malformed request, naming its field.
    let too_long = "r".repeat(129);
    for malformed in ["", "r1 x", "\"r1\"", too_long.as_str()] {
        let status = assert_refused(
            head(&mut hub, "alice", Some(malformed)).await,
            Code::InvalidArgument,
            &snug_reasons::sync::INVALID_ARGUMENT,
        );
        assert_eq!(meta(&status, "field").as_deref(), Some("revision"));
    }
}

async fn history_lists_newest_first_and_restore_copies_forward(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let images = [image(1, 3000), image(2, 3000), image(3, 3000)];
    let r1 = put(&mut hub, "alice", must_not_exist(), &images[0])
        .await
        .expect("r1");
    let r2 = put(&mut hub, "alice", must_match(&r1.revision), &images[1])
        .await
        .expect("r2");
    let r3 = put(&mut hub, "alice", must_match(&r2.revision), &images[2])
        .await
        .expect("r3");

    let listed: Vec<(String, Option<String>)> = history(&mut hub, "alice")
        .await
        .into_iter()
        .map(|r| (r.revision, r.base))
        .collect();
    assert_eq!(
        listed,
        [
            (r3.revision.clone(), Some(r2.revision.clone())),
            (r2.revision.clone(), Some(r1.revision.clone())),
            (r1.revision.clone(), None),
        ]
    );

    // Restore needs the current revision like any write: r2 is stale.
    assert_refused(
        restore(&mut hub, "alice", &r1.revision, must_match(&r2.revision)).await,
        Code::Aborted,
        &snug_reasons::sync::STALE_REVISION,
    );
    let restored = restore(&mut hub, "alice", &r1.revision, must_match(&r3.revision))
        .await
        .expect("restore");
    let r4 = restored.revision.expect("revision");
    assert!(!restored.replayed);
    assert_eq!(r4.restored_from.as_deref(), Some(r1.revision.as_str()));
    assert_eq!(r4.base.as_deref(), Some(r3.revision.as_str()));
    assert_eq!(r4.sha256, r1.sha256);
    assert_eq!(r4.principal, "device-c");
    let (info, bytes, _) = get(&mut hub, "alice", None).await.expect("get");
    assert_eq!(
        (info.revision, bytes),
        (r4.revision.clone(), images[0].clone())
    );

    let newest: Vec<String> = history(&mut hub, "alice")
        .await
        .into_iter()
        .map(|r| r.revision)
        .collect();
    assert_eq!(newest.len(), 4);
    assert_eq!(newest[0], r4.revision);
}

async fn ledger_lists_served_and_refused_entries(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let r1 = put(&mut hub, "alice", must_not_exist(), &image(1, 2000))
        .await
        .expect("put");
    assert_refused(
        put(&mut hub, "alice", must_not_exist(), &image(2, 2000)).await,
        Code::Aborted,
        &snug_reasons::sync::REVISION_MISMATCH,
    );
    get(&mut hub, "alice", None).await.expect("get");

    let ledger = hub
        .client
        .list_ledger(pb::ListLedgerRequest {
            caller: caller("alice", "alice"),
            limit: 0,
        })
        .await
        .expect("ledger")
        .into_inner();
    let served: Vec<(String, String)> = ledger
        .served
        .iter()
        .map(|e| (e.revision.clone(), e.principal.clone()))
        .collect();
    assert_eq!(served, [(r1.revision.clone(), "device-b".to_owned())]);
    assert!(ledger.served[0].served_at.is_some());

    // Newest first: the refusal, then the acceptance.
    let writes: Vec<(pb::Verdict, String, Option<String>, String)> = ledger
        .writes
        .iter()
        .map(|e| {
            (
                e.verdict(),
                e.reason.clone(),
                e.revision.clone(),
                e.principal.clone(),
            )
        })
        .collect();
    assert_eq!(
        writes,
        [
            (
                pb::Verdict::Refused,
                snug_reasons::sync::REVISION_MISMATCH.name.to_owned(),
                None,
                "device-a".to_owned()
            ),
            (
                pb::Verdict::Accepted,
                String::new(),
                Some(r1.revision.clone()),
                "device-a".to_owned()
            ),
        ]
    );

    // Another user's ledger shows none of it.
    provision(&mut hub, "bob").await;
    let other = hub
        .client
        .list_ledger(pb::ListLedgerRequest {
            caller: caller("bob", "bob"),
            limit: 10,
        })
        .await
        .expect("ledger")
        .into_inner();
    assert!(
        other.served.is_empty() && other.writes.is_empty(),
        "{other:?}"
    );
}

async fn denial_is_uniform(backend: Backend) {
    let Some(mut hub) = start(backend, |c| {
        c.keep_revisions = 1;
        c.grace = Duration::ZERO;
    })
    .await
    else {
        return;
    };
    provision(&mut hub, "alice").await;
    provision(&mut hub, "bob").await;
    let r1 = put(&mut hub, "alice", must_not_exist(), &image(1, 2000))
        .await
        .expect("r1");
    let r2 = put(&mut hub, "alice", must_match(&r1.revision), &image(2, 2000))
        .await
        .expect("r2");
    let bob = put(&mut hub, "bob", must_not_exist(), &image(3, 2000))
        .await
        .expect("bob");
    // Retention keeps only the newest revision: r1's bytes go.
    let report = hub.store.reclaim().await.expect("reclaim");
    assert!(report.revisions >= 1, "{report:?}");

    let denials = [
        (
            "unknown user, current image",
            get(&mut hub, "mallory", None).await.map(|_| ()),
        ),
        (
            "unknown user, head",
            head(&mut hub, "mallory", None).await.map(|_| ()),
        ),
        (
            "another user's revision",
            get(&mut hub, "alice", Some(&bob.revision))
                .await
                .map(|_| ()),
        ),
        (
            "head of another user's revision",
            head(&mut hub, "alice", Some(&bob.revision))
                .await
                .map(|_| ()),
        ),
        (
            "head of a reclaimed revision",
            head(&mut hub, "alice", Some(&r1.revision))
                .await
                .map(|_| ()),
        ),
        (
            "head of a revision that never existed",
            head(&mut hub, "alice", Some("r9-0123456789abcdef"))
                .await
                .map(|_| ()),
        ),
        (
            "head of a revision of an unknown user",
            head(&mut hub, "mallory", Some(&r2.revision))
                .await
                .map(|_| ()),
        ),
        (
            "a reclaimed revision",
            get(&mut hub, "alice", Some(&r1.revision)).await.map(|_| ()),
        ),
        (
            "restore from another user's revision",
            restore(&mut hub, "alice", &bob.revision, must_match(&r2.revision))
                .await
                .map(|_| ()),
        ),
        (
            "restore from a reclaimed revision",
            restore(&mut hub, "alice", &r1.revision, must_match(&r2.revision))
                .await
                .map(|_| ()),
        ),
        (
            "write for an unknown user",
            put(&mut hub, "mallory", must_not_exist(), &image(4, 10))
                .await
                .map(|_| ()),
        ),
    ];
    for (case, result) in denials {
        let status = result.expect_err(case);
        assert_eq!(
            (status.code(), reason(&status), status.message()),
            (
                Code::NotFound,
                snug_reasons::sync::NOT_FOUND.name.to_owned(),
                status::DENIED
            ),
            "{case}"
        );
        assert_eq!(meta(&status, error_info::CURRENT_REVISION), None, "{case}");
    }

    // The reclaimed revision stays in the history, so a write based on it is stale.
    let listed = history(&mut hub, "alice").await;
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1].revision, r1.revision);
    assert!(!listed[1].retained);
    assert_refused(
        put(&mut hub, "alice", must_match(&r1.revision), &image(5, 10)).await,
        Code::Aborted,
        &snug_reasons::sync::STALE_REVISION,
    );
    // An unknown user's history is as empty as a user's without images.
    assert!(history(&mut hub, "mallory").await.is_empty());
}

async fn a_retry_with_the_same_idempotency_key_is_replayed(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let bytes = image(1, 3 * CHUNK_SIZE / 2);
    let keyed = |bytes: &Bytes, precondition| Put {
        idempotency_key: Some("upload-7f3a"),
        ..Put::new("alice", precondition, bytes.clone())
    };
    let first = keyed(&bytes, must_not_exist())
        .send(&mut hub)
        .await
        .expect("first");
    assert!(!first.replayed);
    let r1 = first.revision.expect("revision");

    // The response was lost; the client retries the very same request.
    let retry = keyed(&bytes, must_not_exist())
        .send(&mut hub)
        .await
        .expect("retry");
    assert!(retry.replayed);
    assert_eq!(retry.revision.as_ref(), Some(&r1));

    // Even after another write landed, the key still names the write it produced.
    let r2 = put(&mut hub, "alice", must_match(&r1.revision), &image(2, 100))
        .await
        .expect("r2");
    let late = keyed(&bytes, must_not_exist())
        .send(&mut hub)
        .await
        .expect("late retry");
    assert!(late.replayed);
    assert_eq!(late.revision.map(|r| r.revision), Some(r1.revision.clone()));
    assert_eq!(
        head(&mut hub, "alice", None).await.expect("head").revision,
        r2.revision
    );

    // The same key for different bytes is refused, naming what the key produced.
    let status = assert_refused(
        keyed(&image(3, 100), must_match(&r2.revision))
            .send(&mut hub)
            .await,
        Code::FailedPrecondition,
        &snug_reasons::sync::IDEMPOTENCY_KEY_REUSED,
    );
    assert_eq!(
        meta(&status, error_info::REVISION),
        Some(r1.revision.clone())
    );
    assert_eq!(history(&mut hub, "alice").await.len(), 2);
}

async fn first_contact_provisions_the_user_record_only(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    // Before provisioning, a write is denied like any unknown user's.
    assert_refused(
        put(&mut hub, "alice", must_not_exist(), &image(1, 10)).await,
        Code::NotFound,
        &snug_reasons::sync::NOT_FOUND,
    );
    assert!(
        provision(&mut hub, "alice").await,
        "first contact creates the record"
    );
    assert!(
        !provision(&mut hub, "alice").await,
        "a second contact creates nothing"
    );
    // No empty image was made: there is nothing to download and the first write is accepted.
    assert_refused(
        get(&mut hub, "alice", None).await,
        Code::NotFound,
        &snug_reasons::sync::NOT_FOUND,
    );
    assert!(history(&mut hub, "alice").await.is_empty());
    put(&mut hub, "alice", must_not_exist(), &image(1, 10))
        .await
        .expect("first write");
}

async fn malformed_uploads_are_refused_and_write_nothing(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let bytes = image(1, 3000);
    let header = Put::new("alice", must_not_exist(), bytes.clone()).header();
    let chunk = || pb::PutImageRequest::chunk(bytes.clone());
    let streams: Vec<(&str, Vec<pb::PutImageRequest>, &str)> = vec![
        (
            "a chunk before the header",
            vec![chunk(), header.clone()],
            "header",
        ),
        ("no message at all", vec![], "header"),
        (
            "a message with no field",
            vec![pb::PutImageRequest { message: None }],
            "message",
        ),
        (
            "the header twice",
            vec![header.clone(), chunk(), header.clone()],
            "header",
        ),
        (
            "a chunk over 1 MiB",
            vec![
                header.clone(),
                pb::PutImageRequest::chunk(noise(2, CHUNK_SIZE + 1)),
            ],
            "chunk",
        ),
        (
            "fewer bytes than declared",
            vec![header.clone()],
            "header.expected_length",
        ),
        (
            "more bytes than declared",
            vec![header.clone(), chunk(), chunk()],
            "header.expected_length",
        ),
    ];
    for (case, messages, field) in streams {
        let status = assert_refused(
            hub.client.put_image(futures::stream::iter(messages)).await,
            Code::InvalidArgument,
            &snug_reasons::sync::INVALID_ARGUMENT,
        );
        assert_eq!(meta(&status, "field").as_deref(), Some(field), "{case}");
    }
    let bad_callers = [
        ("", "device-a", "header.caller.user_id"),
        ("alice", "", "header.caller.principal"),
        ("al\nice", "device-a", "header.caller.user_id"),
    ];
    for (user, principal, field) in bad_callers {
        let mut header = header.clone();
        if let Some(pb::put_image_request::Message::Header(h)) = &mut header.message {
            h.caller = caller(user, principal);
        }
        let status = assert_refused(
            hub.client
                .put_image(futures::stream::iter([header, chunk()]))
                .await,
            Code::InvalidArgument,
            &snug_reasons::sync::INVALID_ARGUMENT,
        );
        assert_eq!(meta(&status, "field").as_deref(), Some(field));
    }
    let status = assert_refused(
        put(&mut hub, "alice", must_match("not a \"token\""), &bytes).await,
        Code::InvalidArgument,
        &snug_reasons::sync::INVALID_ARGUMENT,
    );
    assert_eq!(
        meta(&status, "field").as_deref(),
        Some("header.precondition.must_match")
    );
    // Nothing above was written.
    assert_no_image(&mut hub, "alice").await;
    put(&mut hub, "alice", must_not_exist(), &bytes)
        .await
        .expect("a well-formed first write");
}

async fn store_status_reports_the_backend(backend: Backend) {
    let Some(mut hub) = start(backend, |c| {
        c.quota_bytes = 12345;
        c.keep_revisions = 3;
    })
    .await
    else {
        return;
    };
    let status = hub
        .client
        .get_store_status(pb::GetStoreStatusRequest {})
        .await
        .expect("status")
        .into_inner();
    let expected = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    assert_eq!(status.backend, expected);
    assert_eq!(status.health(), pb::StoreHealth::Serving);
    assert_eq!(status.reason, "");
    assert_eq!((status.quota_bytes, status.keep_revisions), (12345, 3));
    assert_eq!(hub.config.quota_bytes, 12345);
}

#[tokio::test]
async fn vanished_pack_files_are_storage_unavailable_not_a_short_image() {
    let Some(mut hub) = start(Backend::Sqlite, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    put(
        &mut hub,
        "alice",
        must_not_exist(),
        &image(1, 3 * CHUNK_SIZE),
    )
    .await
    .expect("put");
    // An operator (or a failing disk) removes the pack files under the running store.
    let packs = hub.runtime.dir.join("packs");
    std::fs::remove_dir_all(&packs).expect("remove packs");
    std::fs::create_dir_all(&packs).expect("recreate packs dir");
    let status = assert_refused(
        get(&mut hub, "alice", None).await,
        Code::Unavailable,
        &snug_reasons::sync::STORAGE_UNAVAILABLE,
    );
    // The cause (a path) is logged, not sent.
    assert!(!status.message().contains("packs"), "{status:?}");
}

#[test]
fn every_store_refusal_keeps_the_store_reason_and_gets_its_code() {
    use snug_revstore::{ReadError, Revision, StorageError};
    let rev = |s: &str| Revision::new(s).expect("revision");
    let put_cases: Vec<(PutError, Code)> = vec![
        (PutError::PreconditionRequired, Code::FailedPrecondition),
        (PutError::NotFound, Code::NotFound),
        (PutError::Conflict { current: None }, Code::Aborted),
        (
            PutError::Conflict {
                current: Some(rev("r2-aa")),
            },
            Code::Aborted,
        ),
        (
            PutError::Stale {
                base: rev("r1-aa"),
                current: rev("r2-bb"),
            },
            Code::Aborted,
        ),
        (
            PutError::QuotaExceeded { quota: 10 },
            Code::ResourceExhausted,
        ),
        (
            PutError::ImageConflict {
                identity: "image 00".to_owned(),
            },
            Code::Internal,
        ),
        (
            PutError::IdempotencyKeyReused {
                revision: rev("r1-aa"),
            },
            Code::FailedPrecondition,
        ),
        (
            PutError::BodyAborted(std::io::Error::other("reset")),
            Code::Cancelled,
        ),
        (
            PutError::PutsInFlight {
                staged: 300,
                limit: 400,
            },
            Code::Unavailable,
        ),
        (
            PutError::Storage(StorageError::Unavailable(Box::new(std::io::Error::other(
                "down",
            )))),
            Code::Unavailable,
        ),
        (
            PutError::Storage(StorageError::Corrupt {
                object: "chunk 00".to_owned(),
            }),
            Code::DataLoss,
        ),
    ];
    for (err, code) in put_cases {
        let expected_reason = err.reason();
        let current = err.current().map(ToString::to_string);
        let status = status::put_error(err);
        assert_eq!(
            (status.code(), reason(&status).as_str()),
            (code, expected_reason.name)
        );
        assert!(
            error_info::REASONS.find(expected_reason.name).is_some(),
            "{expected_reason} is not in ALL"
        );
        assert_eq!(meta(&status, error_info::CURRENT_REVISION), current);
    }
    let read_cases = [
        (ReadError::NotFound, Code::NotFound),
        (
            ReadError::Storage(StorageError::Corrupt {
                object: "pack 1".to_owned(),
            }),
            Code::DataLoss,
        ),
    ];
    for (err, code) in read_cases {
        let expected_reason = err.reason();
        let status = status::read_error(err);
        assert_eq!(
            (status.code(), reason(&status).as_str()),
            (code, expected_reason.name)
        );
    }
    // The same denial text for reads and writes.
    assert_eq!(
        status::read_error(ReadError::NotFound).message(),
        status::DENIED
    );
    assert_eq!(
        status::put_error(PutError::NotFound).message(),
        status::DENIED
    );
}

#[test]
fn a_full_store_is_resource_exhausted_storage_full_and_keeps_its_cause_out() {
    use snug_revstore::{ReadError, StorageError};
    let full = || {
        StorageError::from(std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            "/var/lib/snug/sync/packs/x.tmp: No space left on device",
        ))
    };
    for status in [
        status::put_error(PutError::Storage(full())),
        status::read_error(ReadError::Storage(full())),
        status::storage_error(full()),
    ] {
        assert_eq!(
            (status.code(), reason(&status).as_str()),
            (
                Code::ResourceExhausted,
                snug_reasons::sync::STORAGE_FULL.name
            )
        );
        // The cause (a path, an errno) is logged under alert="STORAGE_FULL", not sent.
        assert!(!status.message().contains("/var/lib"), "{status:?}");
        assert!(!status.message().contains("No space"), "{status:?}");
    }
}

#[test]
fn reasons_are_upper_snake_unique_and_short() {
    let mut seen = std::collections::HashSet::new();
    for reason in error_info::REASONS.reasons.iter().map(|r| r.name) {
        assert!(!reason.is_empty() && reason.len() <= 63, "{reason}");
        assert!(
            reason.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
            "{reason}"
        );
        assert!(seen.insert(reason), "duplicate {reason}");
    }
}

#[test]
fn every_reason_is_in_the_reference_table_and_the_proto() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let reference =
        std::fs::read_to_string(root.join("shared/reasons/REASONS.md")).expect("REASONS.md");
    let proto =
        std::fs::read_to_string(root.join("proto/snug/sync/v1/sync.proto")).expect("sync.proto");
    let table = reference
        .split("Sync reasons (domain `snug.sync`)")
        .nth(1)
        .expect("REASONS.md has the sync reason table");
    for reason in error_info::REASONS.reasons.iter().map(|r| r.name) {
        assert!(
            table.contains(&format!("| `{reason}` |")),
            "REASONS.md lacks `{reason}`"
        );
        assert!(
            proto.contains(&format!("// | {reason} ")),
            "sync.proto's table lacks {reason}"
        );
    }
}

#[test]
fn the_defaults_need_no_configuration() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        sync: SyncConfig,
    }
    let cli = <Cli as clap::Parser>::try_parse_from(["snug-hub"]).expect("parse");
    let config = cli.sync;
    assert_eq!(config.store, Backend::Sqlite);
    assert_eq!(config.quota_bytes, 67_108_864);
    assert_eq!(config.keep_revisions, 5);
    assert_eq!(config.grace, Duration::from_secs(24 * 60 * 60));
    assert_eq!(config.reclaim_interval, Duration::from_secs(600));
    let store = config.store_config(&Runtime::default());
    assert_eq!(store.quota_bytes, 67_108_864);
    assert_eq!(store.retention.keep_newest, 5);

    let cli = <Cli as clap::Parser>::try_parse_from([
        "snug-hub",
        "--store",
        "postgres",
        "--sync-quota-bytes",
        "1000",
        "--sync-grace",
        "7d",
    ])
    .expect("parse");
    assert_eq!(cli.sync.store, Backend::Postgres);
    assert_eq!(cli.sync.quota_bytes, 1000);
    assert_eq!(cli.sync.grace, Duration::from_secs(7 * 24 * 60 * 60));
    // The connection string is never a flag.
    assert!(
        <Cli as clap::Parser>::try_parse_from(["snug-hub", "--postgres-url", "postgresql://x"])
            .is_err()
    );
    assert!(
        <Cli as clap::Parser>::try_parse_from(["snug-hub", "--sync-keep-revisions", "0"]).is_err()
    );
}

#[test]
fn the_postgres_url_is_never_printed() {
    let config = SyncConfig {
        postgres_url: Some(PostgresUrl::new("postgresql://hub:hunter2@db/hub")),
        ..SyncConfig::default()
    };
    let printed = format!("{config:?}");
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(printed.contains("<redacted>"), "{printed}");
}

#[tokio::test]
async fn postgres_without_a_url_is_a_startup_error_naming_the_variable() {
    let config = SyncConfig {
        store: Backend::Postgres,
        postgres_url: None,
        ..SyncConfig::default()
    };
    let err = open_store(&config, &Runtime::default())
        .await
        .expect_err("no url");
    assert!(matches!(err, OpenStoreError::MissingPostgresUrl), "{err:?}");
    assert!(err.to_string().contains(POSTGRES_URL_ENV), "{err}");
}

/// Flips one byte at `at` of the only pack file of a fresh embedded store: with one image of
/// distinct chunks, the pack holds the image's bytes in order.
fn damage_only_pack(hub: &Hub, at: u64) {
    use std::os::unix::fs::FileExt as _;
    let packs: Vec<_> = std::fs::read_dir(hub.runtime.dir.join("packs"))
        .expect("packs")
        .map(|e| e.expect("entry").path())
        .collect();
    let [pack] = packs.as_slice() else {
        panic!("one pack expected: {packs:?}");
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(pack)
        .expect("open the pack");
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).expect("read");
    file.write_all_at(&[byte[0] ^ 0x01], at).expect("write");
}

/// Runs CheckStore to its end; returns every message.
async fn check_store(hub: &mut Hub) -> Vec<pb::CheckStoreResponse> {
    let mut stream = hub
        .client
        .check_store(pb::CheckStoreRequest {})
        .await
        .expect("CheckStore")
        .into_inner();
    let mut messages = Vec::new();
    while let Some(message) = stream.message().await.expect("a progress message") {
        messages.push(message);
    }
    assert!(
        messages.last().is_some_and(|m| m.done),
        "the stream ends with done: {messages:?}"
    );
    messages
}

/// Issue 23, point 3: damage in the first piece of a download is refused before the header (the
/// gateway can still answer with an error), damage further in ends the stream after the sound
/// bytes before it, and CheckStore names the damaged chunk.
#[tokio::test]
async fn damaged_bytes_are_never_served_and_check_store_reports_them() {
    let Some(mut hub) = start(Backend::Sqlite, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    // Noise, stored past the validation: the pack then holds the image's bytes in order, so an
    // offset in the image is the same offset in the pack (a user database repeats pages).
    let bytes = noise(7, 5 * CHUNK_SIZE);
    let chunk_size = hub.config.store_config(&hub.runtime).chunk_size as usize;
    let distinct: std::collections::HashSet<&[u8]> = bytes.chunks(chunk_size).collect();
    assert_eq!(
        distinct.len(),
        bytes.len().div_ceil(chunk_size),
        "the premise: no chunk of the image repeats"
    );
    let stored = put_unvalidated(&hub, "alice", &bytes).await;
    let sound = check_store(&mut hub).await;
    let last = sound.last().expect("a message");
    assert_eq!(
        (last.images_checked, last.bytes_checked),
        (1, bytes.len() as u64)
    );
    assert!(sound.iter().all(|m| m.problems.is_empty()), "{sound:?}");

    // Damage in the last MiB: the header and the sound pieces before it arrive, then the status.
    let late = 4 * CHUNK_SIZE as u64 + 1234;
    damage_only_pack(&hub, late);
    let mut stream = hub
        .client
        .get_image(pb::GetImageRequest {
            caller: caller("alice", "device-b"),
            revision: Some(stored.clone()),
        })
        .await
        .expect("the download starts")
        .into_inner();
    let mut received = Vec::new();
    let status = loop {
        match stream.message().await {
            Ok(Some(message)) => {
                if let Some(Part::Chunk(chunk)) = message.into_part() {
                    received.extend_from_slice(&chunk);
                }
            }
            Ok(None) => panic!("a damaged image was served whole"),
            Err(status) => break status,
        }
    };
    assert_refused(
        Err::<(), _>(status),
        Code::DataLoss,
        &snug_reasons::sync::STORAGE_CORRUPT,
    );
    assert!(
        received.len() as u64 <= late,
        "{} bytes passed the damage",
        received.len()
    );
    assert_eq!(received[..], bytes[..received.len()]);

    // Damage in the first bytes: refused before any header, so no download starts at all.
    damage_only_pack(&hub, 100);
    let refused = hub
        .client
        .get_image(pb::GetImageRequest {
            caller: caller("alice", "device-b"),
            revision: None,
        })
        .await
        .map(|_| "a download that started");
    assert_refused(
        refused,
        Code::DataLoss,
        &snug_reasons::sync::STORAGE_CORRUPT,
    );

    let report = check_store(&mut hub).await;
    let problems: Vec<&pb::IntegrityProblem> = report.iter().flat_map(|m| &m.problems).collect();
    let chunk_of = |at: usize| {
        let start = at / hub.config.store_config(&hub.runtime).chunk_size as usize
            * hub.config.store_config(&hub.runtime).chunk_size as usize;
        let end =
            (start + hub.config.store_config(&hub.runtime).chunk_size as usize).min(bytes.len());
        hex::encode(Sha256::digest(&bytes[start..end]))
    };
    let mut named: Vec<(i32, String)> =
        problems.iter().map(|p| (p.kind, p.chunk.clone())).collect();
    named.sort();
    let mut expected = vec![
        (
            pb::IntegrityProblemKind::ChunkMismatch as i32,
            chunk_of(100),
        ),
        (
            pb::IntegrityProblemKind::ChunkMismatch as i32,
            chunk_of(late as usize),
        ),
    ];
    expected.sort();
    assert_eq!(named, expected);
    assert_eq!(report.last().expect("last").images_checked, 1);
}

/// Delta sync (issue 21): the RPCs, one helper each.
mod delta {
    use snug_delta::{Delta, Manifest, PageId};

    use super::*;

    pub(super) const PAGE: u32 = 4096;

    pub(super) async fn collect<M: snug_rpc::chunks::Chunked>(
        mut stream: Streaming<M>,
    ) -> Result<(M::Header, Vec<u8>), Status> {
        let (header, bytes) = chunks::download(&mut stream, 1 << 30, |_| 0).await?;
        Ok((header, bytes.to_vec()))
    }

    pub(super) async fn plan(
        hub: &mut Hub,
        user: &str,
        base: &str,
        manifest: Vec<u8>,
    ) -> Result<(pb::PlanImageDeltaResult, Vec<u8>), Status> {
        let header = pb::PlanImageDeltaRequest::header(pb::PlanImageDeltaHeader {
            expected_length: None,
            caller: caller(user, "device-a"),
            base_revision: base.to_owned(),
            quota_bytes: None,
        });
        let stream = hub
            .client
            .plan_image_delta(chunks::upload(header, Bytes::from(manifest)))
            .await?
            .into_inner();
        collect(stream).await
    }

    /// The deprecated AssembleImageDelta: the image the delta builds, stored nowhere.
    #[allow(
        deprecated,
        reason = "AssembleImageDelta stays served for older gateways; its tests stay too"
    )]
    pub(super) async fn assemble(
        hub: &mut Hub,
        user: &str,
        base: &str,
        delta: Vec<u8>,
    ) -> Result<(pb::AssembleImageDeltaResult, Vec<u8>), Status> {
        let header = pb::AssembleImageDeltaRequest::header(pb::AssembleImageDeltaHeader {
            caller: caller(user, "device-a"),
            base_revision: base.to_owned(),
            quota_bytes: None,
        });
        let stream = hub
            .client
            .assemble_image_delta(chunks::upload(header, Bytes::from(delta)))
            .await?
            .into_inner();
        collect(stream).await
    }

    /// PutImageDelta, its length declared.
    pub(super) async fn put(
        hub: &mut Hub,
        user: &str,
        base: &str,
        delta: Vec<u8>,
        idempotency_key: Option<&str>,
    ) -> Result<pb::PutImageResponse, Status> {
        let header = pb::PutImageDeltaRequest::header(pb::PutImageDeltaHeader {
            caller: caller(user, "device-a"),
            base_revision: base.to_owned(),
            idempotency_key: idempotency_key.map(str::to_owned),
            expected_length: Some(delta.len() as u64),
            quota_bytes: None,
        });
        hub.client
            .put_image_delta(chunks::upload(header, Bytes::from(delta)))
            .await
            .map(Response::into_inner)
    }

    pub(super) async fn pull(
        hub: &mut Hub,
        user: &str,
        revision: Option<&str>,
        manifest: Vec<u8>,
    ) -> Result<(pb::GetImageDeltaResult, Vec<u8>), Status> {
        pull_from(hub, user, revision, None, manifest).await
    }

    pub(super) async fn pull_from(
        hub: &mut Hub,
        user: &str,
        revision: Option<&str>,
        base: Option<&str>,
        manifest: Vec<u8>,
    ) -> Result<(pb::GetImageDeltaResult, Vec<u8>), Status> {
        pull_with(hub, user, revision, base, (false, false), manifest).await
    }

    pub(super) async fn pull_with(
        hub: &mut Hub,
        user: &str,
        revision: Option<&str>,
        base: Option<&str>,
        (accept_patches, accept_compressed): (bool, bool),
        manifest: Vec<u8>,
    ) -> Result<(pb::GetImageDeltaResult, Vec<u8>), Status> {
        let header = pb::GetImageDeltaRequest::header(pb::GetImageDeltaHeader {
            expected_length: None,
            caller: caller(user, "device-b"),
            revision: revision.map(str::to_owned),
            base_revision: base.map(str::to_owned),
            quota_bytes: None,
            accept_patches,
            accept_compressed,
        });
        let stream = hub
            .client
            .get_image_delta(chunks::upload(header, Bytes::from(manifest)))
            .await?
            .into_inner();
        collect(stream).await
    }

    /// Alice's current image, `revision` (`target`), pulled against `base` (`source`) with
    /// `accept`: the delta, checked to rebuild it, and its wire form.
    pub(super) async fn pull_rebuilding(
        hub: &mut Hub,
        base: &str,
        accept: (bool, bool),
        source: &[u8],
        revision: &pb::RevisionInfo,
        target: &[u8],
    ) -> (Delta, Vec<u8>) {
        let (result, wire) = pull_with(hub, "alice", None, Some(base), accept, Vec::new())
            .await
            .expect("pull");
        assert_eq!(result.revision.as_ref(), Some(revision));
        let delta = Delta::parse(&wire, &limits(), source.len() as u64).expect("parse");
        assert_eq!(delta.assemble(source).expect("assemble"), target);
        (delta, wire)
    }

    /// Plans `new` against `base` and sends the delta the plan asks for to the deprecated
    /// AssembleImageDelta.
    pub(super) async fn push_delta(
        hub: &mut Hub,
        user: &str,
        base: &str,
        new: &[u8],
    ) -> Result<(pb::AssembleImageDeltaResult, Vec<u8>), Status> {
        let manifest = Manifest::of(new, PAGE).expect("manifest");
        let (_, layout) = plan(hub, user, base, manifest.encode()).await?;
        let layout = snug_delta::Layout::parse_plan(&layout, &limits()).expect("the plan parses");
        let delta = Delta::build(layout, new, None);
        assemble(hub, user, base, delta.encode()).await
    }

    pub(super) fn limits() -> snug_delta::Limits {
        snug_delta::Limits {
            max_length: snug_revstore::DEFAULT_QUOTA_BYTES,
        }
    }

    pub(super) fn id(page: &[u8]) -> PageId {
        PageId::of(page)
    }

    /// The delta that builds `target` from `base` as a client makes it from a plan: the pages
    /// the base has are copied, the rest sent.
    pub(super) fn to(base: &[u8], target: &[u8]) -> Delta {
        let manifest = Manifest::of(target, PAGE).expect("manifest");
        let layout = snug_delta::plan(
            &manifest,
            &snug_delta::Source::ids(&snug_delta::page_ids(base, PAGE)),
        );
        Delta::build(layout, target, None)
    }

    /// The pages of `target` that `base` does not have, by id.
    pub(super) fn changed_pages(base: &[u8], target: &[u8]) -> usize {
        let ids: std::collections::HashSet<PageId> =
            snug_delta::page_ids(base, PAGE).into_iter().collect();
        snug_delta::page_ids(target, PAGE)
            .iter()
            .filter(|id| !ids.contains(id))
            .count()
    }

    /// `base` with its seed setting's value replaced: an edit of one row, which changes the
    /// page it is on and the database header's.
    pub(super) fn edited(base: &[u8], value: &str) -> Bytes {
        edit(
            base,
            &format!("UPDATE snug_settings SET value = '\"{value}\"' WHERE key = 'test:seed';"),
        )
    }

    /// The overflow pages the long setting of [`moved`] takes.
    pub(super) const CHAIN: usize = 24;

    /// A user database whose settings hold a value spanning a chain of [`CHAIN`] overflow
    /// pages, and the same database with a long profile row added, both VACUUMed as an export
    /// is. The profile is copied before the settings, so its new overflow page moves every
    /// later page by one: each overflow page of the chain, which names its successor, and the
    /// settings page that names the chain's first, change by those four bytes only.
    pub(super) fn moved() -> (Bytes, Bytes) {
        let long = hex::encode(noise(91, CHAIN * PAGE as usize / 2 - 64));
        let first = edit(
            &image(91, 0),
            &format!(
                "INSERT INTO snug_settings (key, value) VALUES ('test:long', '\"{long}\"'); VACUUM;"
            ),
        );
        let early = hex::encode(noise(92, 2500));
        let second = edit(
            &first,
            &format!(
                "INSERT INTO snug_profile (key, value) VALUES ('test:early', '\"{early}\"'); \
                 VACUUM;"
            ),
        );
        (first, second)
    }
}

async fn a_delta_push_and_pull_round_trip(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let first = image(71, 32 * delta::PAGE as usize);
    let r1 = put(&mut hub, "alice", must_not_exist(), &first)
        .await
        .expect("first");
    // An edit of one row: its page and the header's change, the rest are the base's.
    let second = delta::edited(&first, "changed on device a");
    let changed = delta::changed_pages(&first, &second);
    assert!((1..=2).contains(&changed), "{changed} pages changed");
    let manifest = snug_delta::Manifest::of(&second, delta::PAGE).expect("manifest");
    let (planned, _) = delta::plan(&mut hub, "alice", &r1.revision, manifest.encode())
        .await
        .expect("plan");
    assert_eq!(
        planned.literal_pages, changed as u64,
        "only the changed pages are asked for"
    );
    assert_eq!(planned.base.expect("base").revision, r1.revision);
    // The deprecated AssembleImageDelta answers the image and stores nothing.
    let (result, assembled) = delta::push_delta(&mut hub, "alice", &r1.revision, &second)
        .await
        .expect("assemble");
    assert_eq!(assembled, second.to_vec());
    assert_eq!(hex::encode(&result.sha256), sha256_hex(&second));
    assert_eq!(head(&mut hub, "alice", None).await.expect("head"), r1);
    // PutImageDelta stores the image the same delta builds.
    let r2 = delta::put(
        &mut hub,
        "alice",
        &r1.revision,
        delta::to(&first, &second).encode(),
        None,
    )
    .await
    .expect("second")
    .revision
    .expect("revision");
    assert_eq!(r2.sha256, sha256_hex(&second));

    // Pull: a device holding the first image downloads the second as a delta.
    let theirs = snug_delta::Manifest::of(&first, delta::PAGE).expect("manifest");
    let (result, wire) = delta::pull(&mut hub, "alice", None, theirs.encode())
        .await
        .expect("pull");
    assert_eq!(result.revision.expect("revision"), r2);
    let bound = (changed + 1) * delta::PAGE as usize;
    assert!(wire.len() < bound, "{} bytes", wire.len());
    let delta =
        snug_delta::Delta::parse(&wire, &delta::limits(), first.len() as u64).expect("parse");
    assert_eq!(delta.assemble(&first).expect("assemble"), second.to_vec());
    // Against a base the origin keeps, no manifest travels at all.
    let (_, wire) = delta::pull_from(&mut hub, "alice", None, Some(&r1.revision), Vec::new())
        .await
        .expect("pull from a base");
    assert!(wire.len() < bound, "{} bytes", wire.len());
    let delta =
        snug_delta::Delta::parse(&wire, &delta::limits(), first.len() as u64).expect("parse");
    assert_eq!(delta.assemble(&first).expect("assemble"), second.to_vec());
    // With a base, a manifest is the file sparse against it (issue 38): a whole one is not.
    let both = delta::pull_from(&mut hub, "alice", None, Some(&r1.revision), theirs.encode()).await;
    assert_refused(
        both,
        Code::InvalidArgument,
        &snug_reasons::sync::DELTA_INVALID,
    );
    let gone = delta::pull_from(
        &mut hub,
        "alice",
        None,
        Some("r9-0123456789abcdef"),
        Vec::new(),
    )
    .await;
    assert_refused(
        gone,
        Code::FailedPrecondition,
        &snug_reasons::sync::DELTA_BASE_GONE,
    );
    // The pull is a download: it is in the served ledger, the base reads are not.
    let ledger = hub
        .client
        .list_ledger(pb::ListLedgerRequest {
            caller: caller("alice", "alice"),
            limit: 10,
        })
        .await
        .expect("ledger")
        .into_inner();
    let served: Vec<_> = ledger.served.iter().map(|e| e.revision.clone()).collect();
    assert_eq!(served, vec![r2.revision.clone(); 2]);
}

/// A delta push's image is stored derived from its base (issue 38 point 3), and still validated
/// as a whole PUT's is: an image carrying credentials is refused, and an image the validation
/// zeroes free space in is stored as a whole PUT of it stores it.
async fn a_delta_push_is_validated_and_stored_as_a_whole_put(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    provision(&mut hub, "bob").await;
    let first = image(73, 32 * delta::PAGE as usize);
    let r1 = put(&mut hub, "alice", must_not_exist(), &first)
        .await
        .expect("first");
    // Credentials in an image the base mostly is: refused, as a whole PUT of it is.
    let secret = Bytes::from(snug_test_support::userdb::edited(
        &first,
        "INSERT INTO snug_secrets (key, value) VALUES ('token', 'hunter2');",
    ));
    let refused = delta::put(
        &mut hub,
        "alice",
        &r1.revision,
        delta::to(&first, &secret).encode(),
        None,
    )
    .await;
    let secrets = &snug_reasons::schema::SECRETS_PRESENT;
    assert_refused(refused, reason_code(secrets), secrets);
    let whole = put(&mut hub, "bob", must_not_exist(), &secret).await;
    assert_refused(whole, reason_code(secrets), secrets);
    assert_eq!(head(&mut hub, "alice", None).await.expect("head"), r1);
    // A row deleted without VACUUM leaves its bytes in free space, which the write zeroes: the
    // revision is the whole PUT's of the same bytes.
    let deleted = Bytes::from(snug_test_support::userdb::edited(
        &first,
        "DELETE FROM snug_settings;",
    ));
    let r2 = delta::put(
        &mut hub,
        "alice",
        &r1.revision,
        delta::to(&first, &deleted).encode(),
        None,
    )
    .await
    .expect("delta push")
    .revision
    .expect("revision");
    let by_whole = put(&mut hub, "bob", must_not_exist(), &deleted)
        .await
        .expect("whole PUT");
    assert_eq!(r2.sha256, by_whole.sha256);
    assert_eq!(r2.size, by_whole.size);
    assert_eq!(r2.sha256, sha256_hex(&stored(&deleted)));
}

async fn delta_refusals_are_typed_and_store_nothing(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    provision(&mut hub, "bob").await;
    let first = image(72, 0);
    let r1 = put(&mut hub, "alice", must_not_exist(), &first)
        .await
        .expect("first");
    let bobs = put(&mut hub, "bob", must_not_exist(), &image(73, 0))
        .await
        .expect("bob's");
    let new = delta::edited(&first, "new");
    let manifest = snug_delta::Manifest::of(&new, delta::PAGE).expect("manifest");
    let good = delta::to(&first, &new);
    assert!(good.layout.literal_count() >= 1);

    // Another user's revision, an unknown one and a malformed one as a base.
    for base in [bobs.revision.as_str(), "r9-0123456789abcdef"] {
        let refused = delta::plan(&mut hub, "alice", base, manifest.encode()).await;
        assert_refused(
            refused,
            Code::FailedPrecondition,
            &snug_reasons::sync::DELTA_BASE_GONE,
        );
        let refused = delta::assemble(&mut hub, "alice", base, good.encode()).await;
        assert_refused(
            refused,
            Code::FailedPrecondition,
            &snug_reasons::sync::DELTA_BASE_GONE,
        );
        let refused = delta::put(&mut hub, "alice", base, good.encode(), None).await;
        assert_refused(
            refused,
            Code::FailedPrecondition,
            &snug_reasons::sync::DELTA_BASE_GONE,
        );
    }
    let refused = delta::plan(&mut hub, "alice", "not a revision", manifest.encode()).await;
    assert_refused(
        refused,
        Code::InvalidArgument,
        &snug_reasons::rpc::INVALID_ARGUMENT,
    );

    // Hostile deltas: a literal page that does not hash to its id, a claimed SHA-256 the bytes
    // do not have, runs that overlap or reach past the base, a page count over the quota.
    let source_pages = (first.len() / delta::PAGE as usize) as u32;
    let mut lying_page = good.clone();
    let at = lying_page.literals.len() - 1;
    lying_page.literals[at] ^= 1;
    let mut lying_digest = good.clone();
    lying_digest.layout.digest[0] ^= 1;
    let mut out_of_range = good.clone();
    out_of_range.layout.runs[0] = snug_delta::Run::Copy {
        to: 0,
        from: source_pages - 1,
        count: 2,
    };
    let mut duplicate = good.clone();
    duplicate.layout.runs.insert(
        1,
        snug_delta::Run::Copy {
            to: 1,
            from: 0,
            count: 1,
        },
    );
    let mut over_quota = good.clone();
    over_quota.layout.geometry.length = snug_revstore::DEFAULT_QUOTA_BYTES + 1;
    let mut cases = vec![
        (
            lying_page.encode(),
            Code::InvalidArgument,
            &snug_reasons::sync::DELTA_PAGE_MISMATCH,
        ),
        (
            lying_digest.encode(),
            Code::InvalidArgument,
            &snug_reasons::sync::DELTA_DIGEST_MISMATCH,
        ),
        (
            out_of_range.encode(),
            Code::InvalidArgument,
            &snug_reasons::sync::DELTA_INVALID,
        ),
        (
            duplicate.encode(),
            Code::InvalidArgument,
            &snug_reasons::sync::DELTA_INVALID,
        ),
        (
            over_quota.encode(),
            Code::ResourceExhausted,
            &snug_reasons::sync::QUOTA_EXCEEDED,
        ),
        (
            b"SDD1".to_vec(),
            Code::InvalidArgument,
            &snug_reasons::sync::DELTA_INVALID,
        ),
    ];
    // A delta made against other bytes than the base (here one page shorter): as good as a
    // base that is gone.
    cases.push((
        delta::to(&first[..first.len() - delta::PAGE as usize], &new).encode(),
        Code::FailedPrecondition,
        &snug_reasons::sync::DELTA_BASE_GONE,
    ));
    // Each refused alike by the deprecated AssembleImageDelta and by PutImageDelta.
    for (wire, code, expected) in cases {
        let refused = delta::assemble(&mut hub, "alice", &r1.revision, wire.clone()).await;
        assert_refused(refused, code, expected);
        let refused = delta::put(&mut hub, "alice", &r1.revision, wire, None).await;
        assert_refused(refused, code, expected);
    }
    // A manifest with one id too few, and one whose page count is over the quota.
    let mut short = manifest.encode();
    short.truncate(short.len() - 8);
    let refused = delta::plan(&mut hub, "alice", &r1.revision, short).await;
    assert_refused(
        refused,
        Code::InvalidArgument,
        &snug_reasons::sync::DELTA_INVALID,
    );
    let mut huge = manifest.clone();
    huge.geometry.length = snug_revstore::DEFAULT_QUOTA_BYTES + 1;
    let refused = delta::pull(&mut hub, "alice", None, huge.encode()).await;
    assert_refused(
        refused,
        Code::ResourceExhausted,
        &snug_reasons::sync::QUOTA_EXCEEDED,
    );
    // A manifest upload longer than any manifest within the quota is refused as it streams.
    let too_long = vec![0; delta::limits().max_manifest_len() as usize + 1];
    let refused = delta::plan(&mut hub, "alice", &r1.revision, too_long).await;
    assert_refused(
        refused,
        Code::ResourceExhausted,
        &snug_reasons::rpc::TOO_LARGE,
    );
    // Nothing was stored or ledgered: the image is r1, and bob's is his.
    assert_eq!(head(&mut hub, "alice", None).await.expect("head"), r1);
    assert_eq!(history(&mut hub, "alice").await.len(), 1);
    let ledger = hub
        .client
        .list_ledger(pb::ListLedgerRequest {
            caller: caller("alice", "alice"),
            limit: 0,
        })
        .await
        .expect("ledger")
        .into_inner();
    assert_eq!(ledger.writes.len(), 1, "{:?}", ledger.writes);
    // The pull of another user's revision is the uniform denial.
    let refused = delta::pull(&mut hub, "alice", Some(&bobs.revision), manifest.encode()).await;
    assert_refused(refused, Code::NotFound, &snug_reasons::sync::NOT_FOUND);
}

/// Pages are matched only against the caller's own revisions: a page that only another user's
/// image holds is asked for like any page the origin does not have.
async fn a_plan_reveals_nothing_about_other_users_pages(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    provision(&mut hub, "bob").await;
    let alices = image(75, 0);
    let r1 = put(&mut hub, "alice", must_not_exist(), &alices)
        .await
        .expect("alice");
    let bobs = image(76, 0);
    put(&mut hub, "bob", must_not_exist(), &bobs)
        .await
        .expect("bob");
    // A page of bob's image that alice's does not hold.
    let page = delta::PAGE as usize;
    let alices_ids: Vec<snug_delta::PageId> = snug_delta::page_ids(&alices, delta::PAGE);
    let bobs_page = bobs
        .chunks(page)
        .find(|p| !alices_ids.contains(&delta::id(p)))
        .expect("bob's image has a page of its own");
    // Alice's new image holds that page of bob's and one page nobody has: both are asked for.
    // (A plan only names pages; the image it is for is never validated.)
    let mut new = alices.to_vec();
    new.extend_from_slice(&noise(77, page));
    new.extend_from_slice(bobs_page);
    assert_eq!(delta::id(&new[new.len() - page..]), delta::id(bobs_page));
    let manifest = snug_delta::Manifest::of(&new, delta::PAGE).expect("manifest");
    let (planned, _) = delta::plan(&mut hub, "alice", &r1.revision, manifest.encode())
        .await
        .expect("plan");
    assert_eq!(planned.literal_pages, 2);
}

/// Pages that only name moved pages (every page after an early insert here) are patched, in
/// both directions, and only for a client that says it rebuilds patches: a pull without
/// `accept_patches`, or a plan for a manifest without shapes, has whole pages only.
async fn moved_pages_are_patched_for_clients_that_ask(backend: Backend) {
    use snug_delta::{Delta, Manifest};

    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let (first, second) = delta::moved();
    let changed = delta::changed_pages(&first, &second);
    assert!(changed > delta::CHAIN, "{changed} pages changed");
    let r1 = put(&mut hub, "alice", must_not_exist(), &first)
        .await
        .expect("first");
    let limits = delta::limits();

    // Push: a plan for a manifest with shapes asks for the three pages the new row is on (the
    // profile's table and index pages, and its overflow page) and patches every other changed
    // page: the chain's, and the pages that name moved ones (the settings page, the header's).
    let shaped = snug_delta::Manifest::with_shapes(&second, delta::PAGE).expect("manifest");
    let (planned, layout) = delta::plan(&mut hub, "alice", &r1.revision, shaped.encode())
        .await
        .expect("plan");
    let layout = snug_delta::Layout::parse_plan(&layout, &limits).expect("the plan parses");
    assert_eq!(
        (planned.literal_pages, layout.patched_count()),
        (3, changed as u64 - 3),
        "{:?}",
        layout.runs
    );
    // A client that kept r1's bytes builds with them (patches by their bytes, literal pages
    // compressed against r1's where that pays): PutImageDelta takes it like any delta.
    let compressed = Delta::build_compressed(layout.clone(), &second, &first);
    let wire = Delta::build(layout, &second, None).encode();
    assert!(
        wire.len() < 4 * delta::PAGE as usize,
        "{} bytes for {changed} changed pages",
        wire.len()
    );
    let (_, assembled) = delta::assemble(&mut hub, "alice", &r1.revision, wire.clone())
        .await
        .expect("assemble");
    assert_eq!(assembled, second.to_vec());
    let (planned, _) = delta::plan(
        &mut hub,
        "alice",
        &r1.revision,
        snug_delta::Manifest::of(&second, delta::PAGE)
            .expect("manifest")
            .encode(),
    )
    .await
    .expect("plan");
    assert_eq!(
        planned.literal_pages, changed as u64,
        "no shapes, no patches"
    );
    // The compressed delta is what PutImageDelta stores.
    let r2 = delta::put(&mut hub, "alice", &r1.revision, compressed.encode(), None)
        .await
        .expect("second")
        .revision
        .expect("revision");
    assert_eq!(r2.sha256, sha256_hex(&second));

    // Pull against r1: patched only when asked, compressed only when asked too.
    let mut sizes = Vec::new();
    for accept in [(true, true), (true, false), (false, true), (false, false)] {
        let (delta, wire) =
            delta::pull_rebuilding(&mut hub, &r1.revision, accept, &first, &r2, &second).await;
        assert!(
            accept == (true, true) || delta.layout.compressed_count() == 0,
            "{accept:?}: {:?}",
            delta.layout.runs
        );
        sizes.push(wire.len());
        let accept_patches = accept.0;
        let patched = delta.layout.patched_count();
        if accept_patches {
            // At least every changed page but the new row's three, the header's among them.
            assert!(patched >= changed as u64 - 3, "{:?}", delta.layout.runs);
            assert!(
                wire.len() < 4 * delta::PAGE as usize,
                "{} bytes",
                wire.len()
            );
        } else {
            assert_eq!(patched, 0, "{:?}", delta.layout.runs);
        }
    }
    assert!(
        sizes[0] <= sizes[1],
        "compressed {} bytes, patched {}",
        sizes[0],
        sizes[1]
    );
    // Against a manifest, only one with shapes is patched.
    for theirs in [
        Manifest::with_shapes(&first, delta::PAGE).expect("manifest"),
        Manifest::of(&first, delta::PAGE).expect("manifest"),
    ] {
        let shapes = theirs.shapes.is_some();
        let (_, wire) =
            delta::pull_with(&mut hub, "alice", None, None, (true, true), theirs.encode())
                .await
                .expect("pull");
        let delta = Delta::parse(&wire, &limits, first.len() as u64).expect("parse");
        assert_eq!(delta.assemble(&first).expect("assemble"), second.to_vec());
        assert_eq!(delta.layout.patched_count() > 0, shapes);
        assert_eq!(
            delta.layout.compressed_count(),
            0,
            "no base, no compressed pages"
        );
    }
}

/// A summary (every group by hash) is answered with the base's own manifest sparse against it,
/// which the client expands to the base's whole manifest; a pull with a base and its file sparse
/// against that base rebuilds the wanted revision. Hashes that are not the base's are refused.
async fn a_summary_learns_the_bases_pages_and_a_sparse_pull_rebuilds(backend: Backend) {
    use snug_delta::{Delta, Manifest, Sparse};

    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let first = image(81, 0);
    let second = delta::edited(&first, "summarized");
    let r1 = put(&mut hub, "alice", must_not_exist(), &first)
        .await
        .expect("first");
    let shaped = |image: &[u8]| Manifest::with_shapes(image, delta::PAGE).expect("manifest");
    let (ours, theirs) = (shaped(&second), shaped(&first));
    let limits = delta::limits();

    let summary = Sparse::summary(&ours, 4).encode();
    let (planned, answer) = delta::plan(&mut hub, "alice", &r1.revision, summary)
        .await
        .expect("plan");
    let answer = Sparse::parse(&answer, &limits).expect("a sparse manifest");
    assert_eq!(planned.literal_pages, answer.pages_in_full());
    assert!(
        answer.pages_in_full() > 0 && answer.pages_in_full() < u64::from(ours.geometry.pages()),
        "{} of {} pages",
        answer.pages_in_full(),
        ours.geometry.pages()
    );
    assert_eq!(answer.expand(&ours).expect("expands"), theirs);
    let layout = snug_delta::plan(&ours, &theirs.source());
    let r2 = delta::put(
        &mut hub,
        "alice",
        &r1.revision,
        Delta::build(layout, &second, None).encode(),
        None,
    )
    .await
    .expect("put")
    .revision
    .expect("the new revision")
    .revision;

    // A device holding `first`, as no revision it names, pulls r2 by its file sparse against it.
    let sparse = Sparse::against(&theirs, &Sparse::summary(&ours, 4));
    let (pulled, wire) = delta::pull_with(
        &mut hub,
        "alice",
        None,
        Some(&r2),
        (true, true),
        sparse.encode(),
    )
    .await
    .expect("pull");
    assert_eq!(pulled.revision.expect("revision").revision, r2);
    let delta = Delta::parse(&wire, &limits, first.len() as u64).expect("parse");
    assert_eq!(delta.assemble(&first).expect("assemble"), second.to_vec());

    // Hashes that are not r2's, and a plain manifest beside a base: refused.
    for manifest in [Sparse::summary(&theirs, 4).encode(), theirs.encode()] {
        let refused =
            delta::pull_with(&mut hub, "alice", None, Some(&r2), (true, false), manifest).await;
        assert_refused(
            refused,
            Code::InvalidArgument,
            &snug_reasons::sync::DELTA_INVALID,
        );
    }
}

/// Eight short rows whose keys sort first split a leaf of a table kept in place (no VACUUM, as
/// a push sends it): a push built with the base's bytes sends the split's pages as frames
/// against the base's own pages and is stored like any delta, and a pull against the base that
/// rebuilds compressed pages gets the same, a fraction of the pull without.
async fn split_pages_travel_compressed_for_clients_that_ask(backend: Backend) {
    use snug_delta::{Delta, Manifest};

    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let rows: String = (0..300u64)
        .map(|i| {
            let value = hex::encode(noise(100 + i, 100 + (i as usize * 37) % 1_500));
            format!("INSERT INTO snug_settings (key, value) VALUES ('k{i:04}', '\"{value}\"');")
        })
        .collect();
    let first = edit(&image(95, 0), &rows);
    let shorts: String = (0..8)
        .map(|i| format!("INSERT INTO snug_settings (key, value) VALUES ('a{i:04}', '\"s\"');"))
        .collect();
    let second = edit(&first, &shorts);
    let r1 = put(&mut hub, "alice", must_not_exist(), &first)
        .await
        .expect("first");
    let layout = snug_delta::plan(
        &Manifest::of(&second, delta::PAGE).expect("manifest"),
        &snug_delta::Source::ids(&snug_delta::page_ids(&first, delta::PAGE)),
    );
    let pushed = Delta::build_compressed(layout, &second, &first);
    assert!(
        pushed.layout.compressed_count() >= 1,
        "{:?}",
        pushed.layout.runs
    );
    let r2 = delta::put(&mut hub, "alice", &r1.revision, pushed.encode(), None)
        .await
        .expect("second")
        .revision
        .expect("revision");
    assert_eq!(r2.sha256, sha256_hex(&second));
    let mut sizes = Vec::new();
    for accept in [(true, true), (true, false)] {
        let (delta, wire) =
            delta::pull_rebuilding(&mut hub, &r1.revision, accept, &first, &r2, &second).await;
        assert_eq!(delta.layout.compressed_count() > 0, accept.1, "{accept:?}");
        sizes.push(wire.len());
    }
    assert!(sizes[0] * 2 < sizes[1], "compressed {sizes:?} bytes");
}

on_every_backend_delta!(
    split_pages_travel_compressed_for_clients_that_ask,
    moved_pages_are_patched_for_clients_that_ask,
    a_delta_push_and_pull_round_trip,
    a_delta_push_is_validated_and_stored_as_a_whole_put,
    delta_refusals_are_typed_and_store_nothing,
    a_plan_reveals_nothing_about_other_users_pages,
    a_summary_learns_the_bases_pages_and_a_sparse_pull_rebuilds,
);

async fn get_usage(hub: &mut Hub, user: &str) -> Result<pb::GetUsageResponse, Status> {
    hub.client
        .get_usage(pb::GetUsageRequest {
            user_id: user.to_owned(),
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn erase_user(hub: &mut Hub, user: &str) -> Result<pb::EraseUserResponse, Status> {
    hub.client
        .erase_user(pb::EraseUserRequest {
            user_id: user.to_owned(),
        })
        .await
        .map(tonic::Response::into_inner)
}

/// GetUsage and EraseUser (issue 20, points 5 and 6) over gRPC: usage of the current image and
/// of the history, an erasure that reports what it deleted and leaves another user's image whole,
/// zeros on a second erasure and for an unknown user, and a fresh first write afterwards.
async fn usage_and_erasure_of_one_user(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    provision(&mut hub, "bob").await;
    // Each image is an edit of the one before (a row on one page, and the header's page): the
    // store's chunks are its pages, most of them shared.
    let page = hub.config.store_config(&hub.runtime).chunk_size as usize;
    let v1 = image(31, 0);
    let v2 = edit(
        &v1,
        "UPDATE snug_settings SET value = '\"second\"' WHERE key = 'test:seed';",
    );
    let theirs = edit(
        &v2,
        "UPDATE snug_settings SET value = '\"bob\"' WHERE key = 'test:seed';",
    );
    let pages = |images: &[&Bytes]| -> std::collections::HashSet<Vec<u8>> {
        images
            .iter()
            .flat_map(|image| image.chunks(page).map(<[u8]>::to_vec))
            .collect()
    };
    let only_history = pages(&[&v1]).difference(&pages(&[&v2])).count();
    let only_alice = pages(&[&v1, &v2]).difference(&pages(&[&theirs])).count();
    // The premises: the history holds pages the current image does not, and bob's image shares
    // all but a few of alice's.
    assert!(only_history >= 1, "{only_history}");
    assert!(
        only_alice > only_history && only_alice < v1.len() / page / 4,
        "{only_alice}"
    );
    let r1 = put(&mut hub, "alice", must_not_exist(), &v1)
        .await
        .expect("r1");
    put(&mut hub, "alice", must_match(&r1.revision), &v2)
        .await
        .expect("r2");
    put(&mut hub, "bob", must_not_exist(), &theirs)
        .await
        .expect("bob");

    let usage = get_usage(&mut hub, "alice").await.expect("usage");
    assert_eq!(
        usage,
        pb::GetUsageResponse {
            current_bytes: v2.len() as u64,
            history_bytes: (only_history * page) as u64,
            revisions: 2,
            retained_revisions: 2,
        }
    );
    let report = erase_user(&mut hub, "alice").await.expect("erase");
    assert_eq!(report.revisions, 2, "{report:?}");
    assert_eq!(
        report.chunks, only_alice as u64,
        "the pages only alice had: {report:?}"
    );
    assert_eq!(report.bytes, (only_alice * page) as u64, "{report:?}");
    assert_eq!(report.ledger_rows_scrubbed, 2, "{report:?}");
    assert_no_image(&mut hub, "alice").await;
    assert_eq!(
        get_usage(&mut hub, "alice").await.expect("usage"),
        pb::GetUsageResponse::default()
    );
    assert_eq!(
        get_usage(&mut hub, "nobody").await.expect("usage"),
        pb::GetUsageResponse::default()
    );
    assert_eq!(
        erase_user(&mut hub, "alice").await.expect("again"),
        pb::EraseUserResponse::default()
    );
    let (_, bytes, _) = get(&mut hub, "bob", None).await.expect("bob's image");
    assert_eq!(bytes, theirs);
    // The erased id is refused for good (issue 36): its writes like an unknown user's, its first
    // contact with USER_ERASED.
    assert_refused(
        put(&mut hub, "alice", must_not_exist(), &v1).await,
        Code::NotFound,
        &snug_reasons::sync::NOT_FOUND,
    );
    let provisioned = hub
        .client
        .provision_user(pb::ProvisionUserRequest {
            caller: caller("alice", "alice"),
        })
        .await;
    assert_refused(
        provisioned,
        Code::FailedPrecondition,
        &snug_reasons::sync::USER_ERASED,
    );
}

/// The admin-side RPCs name a bare user id: an empty, over-long or control-character one is
/// INVALID_ARGUMENT naming `user_id`, and the store is not asked.
async fn admin_rpcs_refuse_a_bad_user_id(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    for bad in [String::new(), "u".repeat(257), "a\nb".to_owned()] {
        for status in [
            get_usage(&mut hub, &bad).await.map(|_| ()),
            erase_user(&mut hub, &bad).await.map(|_| ()),
        ] {
            let status = assert_refused(
                status,
                Code::InvalidArgument,
                &snug_reasons::sync::INVALID_ARGUMENT,
            );
            assert_eq!(
                meta(&status, "field").as_deref(),
                Some("user_id"),
                "{bad:?}"
            );
        }
    }
    // At the limit is a user id like any other.
    assert_eq!(
        get_usage(&mut hub, &"u".repeat(256)).await.expect("usage"),
        pb::GetUsageResponse::default()
    );
}

/// A PutImage header may carry the user's own quota (from the hub's users directory): it
/// replaces the configured one in both directions, for a declared length and for the bytes as
/// they stream, and QUOTA_EXCEEDED names it. The delta RPCs take it the same way.
async fn a_users_own_quota_replaces_the_configured_one(backend: Backend) {
    // The user's own quota is the length of a valid image accepted at it (an image is whole
    // pages); the configured one is well under it.
    let exact = image(43, 300_000);
    let higher = exact.len() as u64;
    let configured = higher / 3;
    let Some(mut hub) = start(backend, |c| c.quota_bytes = configured).await else {
        return;
    };
    for (user, declare_length) in [("declared", true), ("undeclared", false)] {
        provision(&mut hub, user).await;
        // Under the configured quota and over the user's: refused on the length, where the
        // configured quota would have let the bytes through to the validation.
        let lower = Put {
            declare_length,
            quota_bytes: Some(1000),
            ..Put::new(user, must_not_exist(), noise(41, 1001))
        };
        let status = assert_refused(
            lower.send(&mut hub).await,
            Code::ResourceExhausted,
            &snug_reasons::sync::QUOTA_EXCEEDED,
        );
        assert_eq!(
            meta(&status, error_info::QUOTA_BYTES).as_deref(),
            Some("1000")
        );
        let over = Put {
            declare_length,
            quota_bytes: Some(higher),
            ..Put::new(user, must_not_exist(), noise(42, higher as usize + 1))
        };
        let status = assert_refused(
            over.send(&mut hub).await,
            Code::ResourceExhausted,
            &snug_reasons::sync::QUOTA_EXCEEDED,
        );
        assert_eq!(
            meta(&status, error_info::QUOTA_BYTES),
            Some(higher.to_string())
        );
        let at = Put {
            declare_length,
            quota_bytes: Some(higher),
            ..Put::new(user, must_not_exist(), exact.clone())
        };
        let accepted = at.send(&mut hub).await.expect("within the user's quota");
        assert_eq!(accepted.revision.expect("revision").size, higher);
    }

    // A delta plan for an image over the configured quota but within the user's.
    provision(&mut hub, "delta").await;
    let first = image(44, 0);
    assert!(first.len() as u64 > configured);
    let r1 = Put {
        quota_bytes: Some(1 << 20),
        ..Put::new("delta", must_not_exist(), first.clone())
    }
    .send(&mut hub)
    .await
    .expect("first")
    .revision
    .expect("revision");
    // A plan only names pages: the image it is for is one page longer.
    let mut second = first.to_vec();
    second.extend_from_slice(&noise(45, delta::PAGE as usize));
    let manifest = snug_delta::Manifest::of(&second, delta::PAGE).expect("manifest");
    assert_refused(
        delta::plan(&mut hub, "delta", &r1.revision, manifest.encode()).await,
        Code::ResourceExhausted,
        &snug_reasons::sync::QUOTA_EXCEEDED,
    );
    let header = pb::PlanImageDeltaRequest::header(pb::PlanImageDeltaHeader {
        expected_length: None,
        caller: caller("delta", "device-a"),
        base_revision: r1.revision.clone(),
        quota_bytes: Some(1 << 20),
    });
    let stream = hub
        .client
        .plan_image_delta(chunks::upload(header, Bytes::from(manifest.encode())))
        .await
        .expect("planned within the user's quota")
        .into_inner();
    let (planned, _) = delta::collect(stream).await.expect("plan");
    assert_eq!(planned.literal_pages, 1);
}

/// Issue 20, point 6, on the store `snug-hub serve` opens (the embedded store, through this
/// service): after EraseUser no byte of the user's image is left in any file of the store's
/// directory (the WAL included), while another user's image that shared pages with it in one
/// pack file reads back whole and passes CheckStore.
#[tokio::test]
async fn erasure_leaves_no_byte_in_the_embedded_stores_files() {
    let Some(mut hub) = start(Backend::Sqlite, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    provision(&mut hub, "bob").await;
    let page = hub.config.store_config(&hub.runtime).chunk_size as usize;
    // Bob's image is an edit of alice's (a few rows rewritten): it shares most of her pages.
    let mine = image(51, 1024 * page);
    let shared = edit(
        &mine,
        "UPDATE snug_settings SET value = '\"bob\"' \
         WHERE key IN ('test:seed', 'filler:3', 'filler:30', 'filler:60');",
    );
    put(&mut hub, "alice", must_not_exist(), &mine)
        .await
        .expect("alice");
    put(&mut hub, "bob", must_not_exist(), &shared)
        .await
        .expect("bob");
    let _ = get(&mut hub, "alice", None)
        .await
        .expect("alice's download");
    let dir = hub.runtime.dir.clone();
    // The pages only alice's image holds (its ledger principals are the conformance suite's).
    let bobs: std::collections::HashSet<&[u8]> = shared.chunks(page).collect();
    let needles: Vec<&[u8]> = mine
        .chunks(page)
        .filter(|page| !bobs.contains(page))
        .collect();
    assert!(
        needles.len() >= 3 && needles.len() < mine.len() / page / 4,
        "{} of alice's pages are hers only",
        needles.len()
    );
    let scan = |dir: &std::path::Path| -> Vec<String> {
        let mut found = Vec::new();
        let mut dirs = vec![dir.to_owned()];
        while let Some(d) = dirs.pop() {
            for entry in std::fs::read_dir(&d).expect("read_dir") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let bytes = std::fs::read(&path).unwrap_or_default();
                for (i, needle) in needles.iter().enumerate() {
                    if bytes.windows(needle.len()).any(|w| w == *needle) {
                        found.push(format!("needle {i} in {}", path.display()));
                    }
                }
            }
        }
        found
    };
    // The scan can fail: before the erasure it finds alice's pages.
    let before = scan(&dir);
    assert!(
        (0..needles.len()).all(|i| before
            .iter()
            .any(|f| f.starts_with(&format!("needle {i} in")))),
        "{before:?}"
    );
    let report = erase_user(&mut hub, "alice").await.expect("erase");
    assert_eq!(
        report.packs_wiped, 1,
        "alice's pack holds bob's pages too: {report:?}"
    );
    let after = scan(&dir);
    assert!(
        after.is_empty(),
        "erased bytes left in the files: {after:?}"
    );
    let (_, bytes, _) = get(&mut hub, "bob", None).await.expect("bob");
    assert_eq!(bytes, shared);
    let checked = check_store(&mut hub).await;
    let last = checked.last().expect("a last message");
    assert!(last.done && last.problems.is_empty(), "{checked:?}");
}

mod erasure_race;
mod pace;
mod put_delta;
mod shares;
mod validation;
mod watch;

/// Issue 38 point 3: a delta push against the revision this replica just wrote is assembled from
/// the bytes it wrote (`SNUG_SYNC_BASE_CACHE_BYTES`), not read and hashed again. So damage to
/// the stored base since it was written is not met by the push, which stores the true bytes'
/// new chunks and names the base's stored ones, as a push between two integrity checks always
/// has; CheckStore names the damage. With the cache off the push reads its base, meets the
/// damage and is refused, as before. `snug_sync_delta_bases_total{source="kept"}` counts the first.
#[tokio::test]
async fn a_delta_push_is_built_from_the_base_this_replica_wrote() {
    for cached in [true, false] {
        let Some(mut hub) = start(Backend::Sqlite, |setup| {
            if !cached {
                setup.config.base_cache_bytes = 0;
            }
        })
        .await
        else {
            return;
        };
        provision(&mut hub, "alice").await;
        let first = image(71, 32 * delta::PAGE as usize);
        let r1 = put(&mut hub, "alice", must_not_exist(), &first)
            .await
            .expect("first");
        let second = delta::edited(&first, "changed on device a");
        // The pack's last chunk, far from the header and the edited row: one the delta copies.
        let pack = std::fs::read_dir(hub.runtime.dir.join("packs"))
            .expect("packs")
            .map(|e| e.expect("entry").metadata().expect("metadata").len())
            .sum::<u64>();
        damage_only_pack(&hub, pack - delta::PAGE as u64 / 2);
        let kept = || {
            snug_rpc::metrics::global()
                .sync_delta_bases
                .get_or_create(&snug_rpc::metrics::BaseLabels { source: "kept" })
                .get()
        };
        let before = kept();
        let pushed = delta::put(
            &mut hub,
            "alice",
            &r1.revision,
            delta::to(&first, &second).encode(),
            None,
        )
        .await;
        if cached {
            let r2 = pushed
                .expect("built from the bytes written")
                .revision
                .expect("revision");
            assert_eq!(r2.sha256, sha256_hex(&second));
            // Other tests share the process's metrics: this push counts at least once.
            assert!(kept() > before, "a kept base is counted");
        } else {
            assert_refused(pushed, Code::DataLoss, &snug_reasons::sync::STORAGE_CORRUPT);
        }
        let report = check_store(&mut hub).await;
        assert!(
            report.iter().any(|m| !m.problems.is_empty()),
            "cached: {cached}: {report:?}"
        );
    }
}
