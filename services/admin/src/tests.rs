//! The admin API over a real users directory (SQLite) and a real sync service (the embedded
//! store, in-process), called through the admin port as an operator would.

use std::time::Duration;

use bytes::Bytes;
use snug_proto::Chunked as _;
use snug_proto::{
    admin::v1::{self as pb, admin_service_client::AdminServiceClient},
    sync::v1::{self as sync_pb, sync_service_client::SyncServiceClient},
};
use snug_rpc::{chunks, server::ServerConfig, trace_context::Traced};
use snug_sync_service::SyncConfig;
use snug_users::{Directory, DirectoryConfig};
use tonic::{Code, Request, Status, transport::Channel};
use tonic_types::StatusExt as _;

use super::*;

struct Port {
    directory: Directory,
    sync: SyncClient,
    client: AdminServiceClient<Channel>,
    token: String,
    _dir: tempfile::TempDir,
}

/// The admin port over a fresh directory and store; `configured` says whether the hub has an
/// admin token at all.
async fn start(configured: bool) -> Port {
    let dir = tempfile::tempdir().expect("tempdir");
    let directory = Directory::open(&DirectoryConfig::Sqlite {
        dir: dir.path().join("gateway"),
    })
    .await
    .expect("directory");
    let config = SyncConfig {
        reclaim_interval: Duration::ZERO,
        ..SyncConfig::default()
    };
    let runtime = snug_rpc::runtime::Runtime {
        dir: dir.path().join("sync"),
        ..Default::default()
    };
    let store = snug_sync_service::open_store(&config, &runtime)
        .await
        .expect("store");
    let services = snug_sync_service::services(store, &config, &runtime);
    let local = snug_rpc::server::local(&ServerConfig::for_tests(), services).await;
    let sync = SyncServiceClient::new(Traced::new(local));
    let admin = Admin::new(
        directory.clone(),
        Some(sync.clone()),
        Duration::from_secs(30),
    );
    let (token, record) = AdminToken::generate().expect("token");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let local = snug_rpc::server::local(
        &ServerConfig::for_tests(),
        super::services(admin, configured.then_some(record)),
    )
    .await;
    let router = snug_rpc::admin::router(Some(local));
    tokio::spawn(async move { axum::serve(listener, router).await });
    let client = AdminServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    Port {
        directory,
        sync,
        client,
        token,
        _dir: dir,
    }
}

impl Port {
    fn request<T>(&self, message: T) -> Request<T> {
        with_token(message, &self.token)
    }

    /// Whether the directory admits the hub token `token` (as every gateway would).
    async fn admits(&self, token: &str) -> bool {
        self.directory
            .authenticate_token(token)
            .await
            .expect("auth")
            .is_some()
    }
}

fn with_token<T>(message: T, token: &str) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("metadata"),
    );
    request
}

fn by_name(name: &str) -> Option<pb::UserRef> {
    Some(super::by_name(name))
}

fn reason(status: &Status) -> (String, String) {
    let info = status
        .get_error_details()
        .error_info()
        .cloned()
        .unwrap_or_else(|| panic!("no ErrorInfo on {status:?}"));
    (info.domain, info.reason)
}

#[track_caller]
fn assert_reason<T: std::fmt::Debug>(
    result: Result<T, Status>,
    code: Code,
    expected: &snug_reasons::Reason,
) {
    let status = result.expect_err("refused");
    assert_eq!(status.code(), code, "{status:?}");
    assert_eq!(
        reason(&status),
        ("snug.admin".to_owned(), expected.name.to_owned())
    );
}

#[tokio::test]
async fn every_call_needs_the_admin_token() {
    let mut port = start(true).await;
    let (user, user_token) = port.directory.add_user("alice").await.expect("add");
    let cases: [(&str, Option<String>); 5] = [
        ("no authorization", None),
        (
            "a wrong admin token",
            Some("Bearer snugadmin_wrong".to_owned()),
        ),
        (
            "a user's hub token",
            Some(format!("Bearer {}", user_token.token)),
        ),
        (
            "the hash instead of the token",
            Some(format!("Bearer {}", AdminToken::of(&port.token).hex())),
        ),
        ("not a bearer", Some(port.token.clone())),
    ];
    for (case, authorization) in cases {
        let mut request = Request::new(pb::ListUsersRequest::default());
        if let Some(value) = authorization {
            request
                .metadata_mut()
                .insert("authorization", value.parse().expect("metadata"));
        }
        let status = port.client.list_users(request).await.expect_err(case);
        assert_eq!(status.code(), Code::Unauthenticated, "{case}");
        assert_eq!(reason(&status).1, "UNAUTHENTICATED", "{case}");
    }
    // Refused calls changed nothing; the admin token itself is admitted.
    let request = port.request(pb::RemoveUserRequest {
        user: by_name("alice"),
        erase: false,
    });
    port.client.remove_user(request).await.expect("remove");
    assert!(
        port.directory
            .user_by_id(&user.id)
            .await
            .expect("read")
            .is_none()
    );
}

/// Issue 36 point 6: every admin call that shuts a credential or a user out ends the browser
/// sessions made from it, as the gateway reads them: revoke-token, disable (for good: enabling
/// again revives none), remove, and remove with erasure.
#[tokio::test]
async fn admin_calls_that_shut_a_user_out_end_their_sessions() {
    let mut port = start(true).await;
    let hour = Duration::from_secs(3600);
    let now = 1_700_000_000_000;
    for name in ["alice", "bob", "carol"] {
        port.directory.add_user(name).await.expect("add");
    }
    let issue = async |port: &mut Port, name: &str| {
        let issued = port
            .client
            .issue_token(port.request(pb::IssueTokenRequest {
                user: by_name(name),
            }))
            .await
            .expect("issue")
            .into_inner();
        let session = port
            .directory
            .start_token_session(&issued.token, now, hour)
            .await
            .expect("start")
            .expect("session");
        (issued, session.id)
    };
    let live = async |port: &Port, id: &snug_users::SessionId| {
        port.directory
            .session(id, now)
            .await
            .expect("lookup")
            .is_some()
    };

    let (revoked, of_revoked) = issue(&mut port, "alice").await;
    let (_, of_kept) = issue(&mut port, "alice").await;
    port.client
        .revoke_token(port.request(pb::RevokeTokenRequest {
            token_id: revoked.token_id,
        }))
        .await
        .expect("revoke");
    assert!(!live(&port, &of_revoked).await, "revoke-token");
    assert!(live(&port, &of_kept).await, "the other token's session");

    for disabled in [true, false] {
        port.client
            .set_user_disabled(port.request(pb::SetUserDisabledRequest {
                user: by_name("alice"),
                disabled,
            }))
            .await
            .expect("set disabled");
        assert!(!live(&port, &of_kept).await, "disabled: {disabled}");
    }

    let (_, of_bob) = issue(&mut port, "bob").await;
    let (_, of_carol) = issue(&mut port, "carol").await;
    for (name, erase) in [("bob", false), ("carol", true)] {
        port.client
            .remove_user(port.request(pb::RemoveUserRequest {
                user: by_name(name),
                erase,
            }))
            .await
            .expect("remove");
    }
    assert!(!live(&port, &of_bob).await, "remove");
    assert!(!live(&port, &of_carol).await, "remove with erasure");
}

#[tokio::test]
async fn without_a_configured_admin_token_nothing_is_admitted() {
    let mut port = start(false).await;
    let request = port.request(pb::ListUsersRequest::default());
    assert_reason(
        port.client.list_users(request).await,
        Code::Unauthenticated,
        &snug_reasons::admin::UNAUTHENTICATED,
    );
}

#[tokio::test]
async fn users_tokens_and_quotas_through_the_admin_port() {
    let mut port = start(true).await;
    let added = port
        .client
        .add_user(port.request(pb::AddUserRequest {
            name: "alice".to_owned(),
        }))
        .await
        .expect("add")
        .into_inner();
    let alice = added.user.expect("user");
    assert_eq!(alice.tokens.len(), 1);
    assert!(!alice.disabled);
    let first = port
        .directory
        .authenticate_token(&added.token)
        .await
        .expect("auth")
        .expect("the first token admits alice");
    assert_eq!(first.user.id, alice.id);

    // Refusals, each typed.
    assert_reason(
        port.client
            .add_user(port.request(pb::AddUserRequest {
                name: "alice".to_owned(),
            }))
            .await,
        Code::AlreadyExists,
        &snug_reasons::admin::USER_EXISTS,
    );
    for bad in ["", "a\u{7}b", &"x".repeat(65)] {
        assert_reason(
            port.client
                .add_user(port.request(pb::AddUserRequest {
                    name: bad.to_owned(),
                }))
                .await,
            Code::InvalidArgument,
            &snug_reasons::admin::INVALID_ARGUMENT,
        );
    }
    assert_reason(
        port.client
            .get_user(port.request(pb::GetUserRequest {
                user: by_name("nobody"),
                include_usage: false,
            }))
            .await,
        Code::NotFound,
        &snug_reasons::admin::USER_NOT_FOUND,
    );
    assert_reason(
        port.client
            .get_user(port.request(pb::GetUserRequest::default()))
            .await,
        Code::InvalidArgument,
        &snug_reasons::admin::INVALID_ARGUMENT,
    );

    // A second token, then the first revoked: only the second admits alice.
    let issued = port
        .client
        .issue_token(port.request(pb::IssueTokenRequest {
            user: Some(pb::UserRef {
                by: Some(pb::user_ref::By::Id(alice.id.clone())),
            }),
        }))
        .await
        .expect("issue")
        .into_inner();
    let first_id = alice.tokens[0].id.clone();
    let revoked = port
        .client
        .revoke_token(port.request(pb::RevokeTokenRequest {
            token_id: first_id.clone(),
        }))
        .await
        .expect("revoke")
        .into_inner();
    let tokens: Vec<String> = revoked
        .user
        .expect("user")
        .tokens
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(tokens, std::slice::from_ref(&issued.token_id));
    assert!(!port.admits(&added.token).await);
    assert!(port.admits(&issued.token).await);
    assert_reason(
        port.client
            .revoke_token(port.request(pb::RevokeTokenRequest { token_id: first_id }))
            .await,
        Code::NotFound,
        &snug_reasons::admin::TOKEN_NOT_FOUND,
    );

    // Quota set and cleared.
    let set = port
        .client
        .set_quota(port.request(pb::SetQuotaRequest {
            user: by_name("alice"),
            quota_bytes: Some(1 << 20),
        }))
        .await
        .expect("quota")
        .into_inner();
    assert_eq!(set.user.expect("user").quota_bytes, Some(1 << 20));
    let cleared = port
        .client
        .set_quota(port.request(pb::SetQuotaRequest {
            user: by_name("alice"),
            quota_bytes: None,
        }))
        .await
        .expect("quota")
        .into_inner();
    assert_eq!(cleared.user.expect("user").quota_bytes, None);

    // Disabled: the token is refused exactly as an unknown one; enabled again, admitted.
    for disabled in [true, false] {
        port.client
            .set_user_disabled(port.request(pb::SetUserDisabledRequest {
                user: by_name("alice"),
                disabled,
            }))
            .await
            .expect("set disabled");
        assert_eq!(port.admits(&issued.token).await, !disabled);
    }

    let listed = port
        .client
        .list_users(port.request(pb::ListUsersRequest::default()))
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed.users.len(), 1);
    assert!(listed.users[0].usage.is_none());
}

async fn push(sync: &mut SyncClient, user: &str, bytes: Bytes) {
    let caller = Some(sync_pb::Caller {
        user_id: user.to_owned(),
        principal: format!("{user}/test"),
        ..Default::default()
    });
    sync.provision_user(sync_pb::ProvisionUserRequest {
        caller: caller.clone(),
    })
    .await
    .expect("provision");
    let header = sync_pb::PutImageRequest::header(sync_pb::PutImageHeader {
        caller,
        precondition: Some(sync_pb::Precondition {
            condition: Some(sync_pb::precondition::Condition::MustNotExist(
                sync_pb::MustNotExist {},
            )),
        }),
        idempotency_key: None,
        expected_length: Some(bytes.len() as u64),
        quota_bytes: None,
    });
    sync.put_image(chunks::upload(header, bytes))
        .await
        .expect("put");
}

#[tokio::test]
async fn usage_is_reported_and_removal_with_erase_empties_the_store_of_the_user() {
    let mut port = start(true).await;
    let (alice, _) = port.directory.add_user("alice").await.expect("add");
    // A valid user database: the sync service stores nothing else.
    let image = snug_test_support::userdb::filled(0, 1);
    push(&mut port.sync, &alice.id, Bytes::from(image.clone())).await;

    let usage = port
        .client
        .get_usage(port.request(pb::GetUsageRequest {
            user: by_name("alice"),
        }))
        .await
        .expect("usage")
        .into_inner()
        .usage
        .expect("usage");
    assert_eq!(usage.current_bytes, image.len() as u64);
    assert_eq!(usage.revisions, 1);
    let listed = port
        .client
        .list_users(port.request(pb::ListUsersRequest {
            include_usage: true,
        }))
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed.users[0].usage, Some(usage));

    let removed = port
        .client
        .remove_user(port.request(pb::RemoveUserRequest {
            user: by_name("alice"),
            erase: true,
        }))
        .await
        .expect("remove")
        .into_inner();
    let erasure = removed.erasure.expect("erasure report");
    assert_eq!(erasure.revisions, 1);
    assert!(erasure.bytes > 0, "{erasure:?}");
    assert_eq!(removed.user.expect("user").name, "alice");
    assert_reason(
        port.client
            .get_usage(port.request(pb::GetUsageRequest {
                user: by_name("alice"),
            }))
            .await,
        Code::NotFound,
        &snug_reasons::admin::USER_NOT_FOUND,
    );
    let left = port
        .sync
        .get_usage(sync_pb::GetUsageRequest {
            user_id: alice.id.clone(),
        })
        .await
        .expect("usage")
        .into_inner();
    assert_eq!((left.current_bytes, left.revisions), (0, 0));
}

#[tokio::test]
async fn usage_and_erasure_without_a_sync_service_are_unavailable_and_remove_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let directory = Directory::open(&DirectoryConfig::Sqlite {
        dir: dir.path().to_owned(),
    })
    .await
    .expect("directory");
    directory.add_user("alice").await.expect("add");
    let admin = Admin::new(directory.clone(), None, Duration::from_secs(5));
    let status = admin
        .remove_user(Request::new(pb::RemoveUserRequest {
            user: by_name("alice"),
            erase: true,
        }))
        .await
        .expect_err("no sync service");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(reason(&status).1, "SERVICE_UNAVAILABLE");
    // Disabled (the erasure's first step), not removed: running the removal again finishes it.
    let users = directory.list().await.expect("list");
    assert_eq!(users.len(), 1);
    assert!(users[0].user.disabled);
}

#[test]
fn the_token_record_is_the_sha256_and_parses_from_hex() {
    let (token, record) = AdminToken::generate().expect("token");
    assert!(token.starts_with(TOKEN_PREFIX));
    let parsed: AdminToken = record.hex().parse().expect("hex");
    assert_eq!(parsed, record);
    assert!(parsed.admits(&token));
    assert!(!parsed.admits(&format!("{token}x")));
    for bad in ["", "zz", &"0".repeat(63), &"0".repeat(66)] {
        assert!(bad.parse::<AdminToken>().is_err(), "{bad:?}");
    }
}

#[test]
fn every_reason_of_the_domain_has_a_grpc_code() {
    for name in error_info::REASONS.reasons.iter().map(|r| r.name) {
        assert!(
            snug_reasons::find(name).and_then(|r| r.grpc).is_some(),
            "{name}"
        );
    }
}
