//! gRPC service `snug.admin.v1`: who may use the hub (users, hub tokens, quotas), what each user
//! holds in the sync store, and erasure — a thin adapter over `snug-users` and `snug.sync.v1`.
//!
//! [`Admin`] is the one implementation. The admin port serves it behind the admin token check
//! ([`services`]); `snug-hub users` calls the very same methods in-process, so the CLI and the API
//! cannot drift apart. Usage and erasure go to the sync service through its proto (GetUsage,
//! EraseUser), like everything the gateway asks of it; users live in the directory the gateway
//! reads on every request, so a change here holds on every gateway replica at its next request,
//! for browser sessions too (revoking a token ends the sessions made from it; disabling or
//! removing a user ends all of theirs: `snug-users`' rules).
//!
//! Removal with erasure runs in the order that survives a failure half-way: disable (no new
//! write can start), erase in the sync store, then remove the record. A failed erasure leaves a
//! disabled user, and running the removal again finishes it (EraseUser is idempotent).
//!
//! The admin token: the hub keeps only its SHA-256 (`SNUG_ADMIN_TOKEN_SHA256`, from a Secret), and
//! compares the SHA-256 of what a call presents with it in constant time. Without one configured,
//! every call is refused: an admin API that anyone on the admin network could call would be worse
//! than none.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod convert;
pub mod error_info;
mod status;
#[cfg(test)]
mod tests;

use std::{str::FromStr, time::Duration};

use snug_proto::{
    admin::v1::{self as pb, admin_service_server::AdminServiceServer},
    sync::v1::{self as sync_pb, sync_service_client::SyncServiceClient},
};
use snug_rpc::{bearer::TokenDigest, server::LocalChannel, trace_context::Traced};
use snug_users::{Directory, UserInfo, UserKey};
use tonic::{Request, Response, Status};

use crate::status::{directory_error, sync_error};

/// The trait [`Admin`] implements: what `snug-hub users` calls in-process.
pub use snug_proto::admin::v1::admin_service_server::AdminService;

/// The fully qualified gRPC service name.
pub const SERVICE_NAME: &str = "snug.admin.v1.AdminService";

/// The environment variable that holds the admin token's SHA-256, in hex.
pub const TOKEN_HASH_ENV: &str = "SNUG_ADMIN_TOKEN_SHA256";

/// The prefix of every admin token, so that secret scanners and people recognise one (and never
/// mistake it for a user's `snug_` token).
pub const TOKEN_PREFIX: &str = "snugadmin_";

/// A client of the sync service, over a socket or in-process.
pub type SyncClient = SyncServiceClient<Traced<LocalChannel>>;

/// The admin token's SHA-256: all the hub keeps of it.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(TokenDigest);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(<sha-256>)")
    }
}

/// Why an admin token hash was refused.
#[derive(Debug, thiserror::Error)]
#[error("SNUG_ADMIN_TOKEN_SHA256 must be 64 hex digits (the SHA-256 of the admin token)")]
pub struct BadTokenHash;

impl FromStr for AdminToken {
    type Err = BadTokenHash;

    fn from_str(text: &str) -> Result<Self, BadTokenHash> {
        let mut hash = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut hash).map_err(|_| BadTokenHash)?;
        Ok(Self(TokenDigest::from_bytes(hash)))
    }
}

impl AdminToken {
    /// Reads [`TOKEN_HASH_ENV`]: `Ok(None)` when unset or empty.
    pub fn from_process_env() -> Result<Option<Self>, BadTokenHash> {
        match std::env::var(TOKEN_HASH_ENV) {
            Ok(text) if !text.trim().is_empty() => text.parse().map(Some),
            _ => Ok(None),
        }
    }

    /// Makes a new admin token: its text (shown once) and the hub's record of it.
    pub fn generate() -> Result<(String, Self), getrandom::Error> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret)?;
        use base64::Engine as _;
        let token = format!(
            "{TOKEN_PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
        );
        let record = Self::of(&token);
        Ok((token, record))
    }

    /// The record of `token`.
    pub fn of(token: &str) -> Self {
        Self(TokenDigest::of(token))
    }

    /// The record in hex, as [`TOKEN_HASH_ENV`] holds it.
    pub fn hex(&self) -> String {
        hex::encode(self.0.as_bytes())
    }

    /// Whether `presented` is the admin token (constant time in the hash comparison).
    pub fn admits(&self, presented: &str) -> bool {
        self.0.admits(presented)
    }
}

/// The admin API: the users directory, and the sync service for usage and erasure.
#[derive(Debug, Clone)]
pub struct Admin {
    directory: Directory,
    sync: Option<SyncClient>,
    deadline: Duration,
}

impl Admin {
    /// The admin API over `directory`; `sync` answers usage and erasure (without it those calls
    /// are SERVICE_UNAVAILABLE), each call to it under `deadline`.
    pub fn new(directory: Directory, sync: Option<SyncClient>, deadline: Duration) -> Self {
        Self {
            directory,
            sync,
            deadline,
        }
    }

    /// The users directory.
    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// The user `user` names, with tokens and identities.
    async fn find(&self, user: Option<pb::UserRef>) -> Result<UserInfo, Status> {
        let by = user
            .and_then(|user| user.by)
            .ok_or_else(|| status::invalid("user", "name the user by id or name"))?;
        let (field, key) = match &by {
            pb::user_ref::By::Id(id) => ("user.id", UserKey::Id(id)),
            pb::user_ref::By::Name(name) => ("user.name", UserKey::Name(name)),
        };
        self.lookup(field, key).await
    }

    /// The user `text` names, by name or by id ([`UserKey::NameOrId`]): how every `snug-hub`
    /// command that names a user finds them, so the operator's commands share one rule.
    pub async fn resolve(&self, text: &str) -> Result<UserInfo, Status> {
        self.lookup("user", UserKey::NameOrId(text)).await
    }

    async fn lookup(&self, field: &str, key: UserKey<'_>) -> Result<UserInfo, Status> {
        let (UserKey::Id(wanted) | UserKey::Name(wanted) | UserKey::NameOrId(wanted)) = key;
        snug_rpc::status::identifier(error_info::DOMAIN, field, wanted)?;
        self.directory.find(key).await.map_err(directory_error)
    }

    fn sync(&self) -> Result<SyncClient, Status> {
        self.sync.clone().ok_or_else(|| {
            status::service_unavailable(
                "no sync service is configured here: usage and erasure need one",
            )
        })
    }

    /// Calls the sync service under the deadline.
    async fn call_sync<T>(
        &self,
        call: impl std::future::Future<Output = Result<Response<T>, Status>>,
    ) -> Result<T, Status> {
        call_sync(self.deadline, call).await
    }

    async fn usage(&self, user_id: &str) -> Result<pb::Usage, Status> {
        let mut sync = self.sync()?;
        let request = sync_pb::GetUsageRequest {
            user_id: user_id.to_owned(),
        };
        let usage = self.call_sync(sync.get_usage(request)).await?;
        Ok(convert::usage(usage))
    }

    async fn with_usage(&self, info: UserInfo, include: bool) -> Result<pb::User, Status> {
        let usage = if include {
            Some(self.usage(&info.user.id).await?)
        } else {
            None
        };
        Ok(convert::user(info, usage))
    }

    /// Looks `name` up again after a change, for the response.
    async fn reread(&self, name: &str) -> Result<pb::User, Status> {
        let info = self.find(Some(by_name(name))).await?;
        Ok(convert::user(info, None))
    }
}

/// Calls the sync service under `deadline` and passes its refusals on as the admin API does: a
/// refusal with a reason as it came, a sync service that does not answer as
/// `SERVICE_UNAVAILABLE`. `snug-hub sync usage|erase` calls the store through this too.
pub async fn call_sync<T>(
    deadline: Duration,
    call: impl std::future::Future<Output = Result<Response<T>, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(deadline, call).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err(sync_error(status)),
        Err(_) => Err(status::service_unavailable(
            "the sync service did not answer within the deadline",
        )),
    }
}

fn by_name(name: &str) -> pb::UserRef {
    pb::UserRef {
        by: Some(pb::user_ref::By::Name(name.to_owned())),
    }
}

#[tonic::async_trait]
impl AdminService for Admin {
    async fn list_users(
        &self,
        request: Request<pb::ListUsersRequest>,
    ) -> Result<Response<pb::ListUsersResponse>, Status> {
        let include = request.into_inner().include_usage;
        let mut users = Vec::new();
        for info in self.directory.list().await.map_err(directory_error)? {
            users.push(self.with_usage(info, include).await?);
        }
        Ok(Response::new(pb::ListUsersResponse { users }))
    }

    async fn get_user(
        &self,
        request: Request<pb::GetUserRequest>,
    ) -> Result<Response<pb::GetUserResponse>, Status> {
        let request = request.into_inner();
        let info = self.find(request.user).await?;
        let user = self.with_usage(info, request.include_usage).await?;
        Ok(Response::new(pb::GetUserResponse { user: Some(user) }))
    }

    async fn add_user(
        &self,
        request: Request<pb::AddUserRequest>,
    ) -> Result<Response<pb::AddUserResponse>, Status> {
        let name = request.into_inner().name;
        let (user, token) = self
            .directory
            .add_user(&name)
            .await
            .map_err(directory_error)?;
        tracing::info!(user = %user.id, "admin: user added");
        let user = self.reread(&user.name).await?;
        Ok(Response::new(pb::AddUserResponse {
            user: Some(user),
            token: token.token,
        }))
    }

    async fn set_user_disabled(
        &self,
        request: Request<pb::SetUserDisabledRequest>,
    ) -> Result<Response<pb::SetUserDisabledResponse>, Status> {
        let request = request.into_inner();
        let info = self.find(request.user).await?;
        let name = &info.user.name;
        let result = if request.disabled {
            self.directory.disable(name).await
        } else {
            self.directory.enable(name).await
        };
        result.map_err(directory_error)?;
        tracing::info!(user = %info.user.id, disabled = request.disabled, "admin: user disabled flag set");
        let user = self.reread(name).await?;
        Ok(Response::new(pb::SetUserDisabledResponse {
            user: Some(user),
        }))
    }

    async fn set_quota(
        &self,
        request: Request<pb::SetQuotaRequest>,
    ) -> Result<Response<pb::SetQuotaResponse>, Status> {
        let request = request.into_inner();
        let info = self.find(request.user).await?;
        self.directory
            .set_quota(&info.user.name, request.quota_bytes)
            .await
            .map_err(directory_error)?;
        tracing::info!(user = %info.user.id, quota = ?request.quota_bytes, "admin: quota set");
        let user = self.reread(&info.user.name).await?;
        Ok(Response::new(pb::SetQuotaResponse { user: Some(user) }))
    }

    async fn issue_token(
        &self,
        request: Request<pb::IssueTokenRequest>,
    ) -> Result<Response<pb::IssueTokenResponse>, Status> {
        let info = self.find(request.into_inner().user).await?;
        let token = self
            .directory
            .issue_token(&info.user.name)
            .await
            .map_err(directory_error)?;
        tracing::info!(user = %info.user.id, token = %token.id, "admin: token issued");
        Ok(Response::new(pb::IssueTokenResponse {
            token: token.token,
            token_id: token.id,
        }))
    }

    async fn revoke_token(
        &self,
        request: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        let token_id = request.into_inner().token_id;
        snug_rpc::status::identifier(error_info::DOMAIN, "token_id", &token_id)?;
        let user_name = self
            .directory
            .revoke_token(&token_id)
            .await
            .map_err(directory_error)?;
        tracing::info!(token = %token_id, "admin: token revoked");
        let user = self.reread(&user_name).await?;
        Ok(Response::new(pb::RevokeTokenResponse { user: Some(user) }))
    }

    async fn get_usage(
        &self,
        request: Request<pb::GetUsageRequest>,
    ) -> Result<Response<pb::GetUsageResponse>, Status> {
        let info = self.find(request.into_inner().user).await?;
        let usage = self.usage(&info.user.id).await?;
        Ok(Response::new(pb::GetUsageResponse { usage: Some(usage) }))
    }

    async fn remove_user(
        &self,
        request: Request<pb::RemoveUserRequest>,
    ) -> Result<Response<pb::RemoveUserResponse>, Status> {
        let request = request.into_inner();
        let info = self.find(request.user).await?;
        let before = convert::user(info.clone(), None);
        let erasure = if request.erase {
            // Disabled first: from here no request of theirs is admitted, so no write can land
            // after the erasure has passed it.
            self.directory
                .disable(&info.user.name)
                .await
                .map_err(directory_error)?;
            let mut sync = self.sync()?;
            let request = sync_pb::EraseUserRequest {
                user_id: info.user.id.clone(),
            };
            let report = self.call_sync(sync.erase_user(request)).await?;
            tracing::info!(
                user = %info.user.id,
                revisions = report.revisions,
                chunks = report.chunks,
                bytes = report.bytes,
                ledger_rows = report.ledger_rows_scrubbed,
                "admin: user erased from the sync store"
            );
            Some(convert::erasure(report))
        } else {
            None
        };
        self.directory
            .remove_user(&info.user.name)
            .await
            .map_err(directory_error)?;
        tracing::info!(user = %info.user.id, erased = request.erase, "admin: user removed");
        Ok(Response::new(pb::RemoveUserResponse {
            user: Some(before),
            erasure,
        }))
    }
}

/// The admin token check of every call on the admin port, before the call is decoded.
#[derive(Debug, Clone)]
pub struct CheckToken<S> {
    inner: S,
    token: Option<AdminToken>,
}

impl<S> CheckToken<S> {
    fn refusal<B>(&self, request: &http::Request<B>) -> Option<Status> {
        let Some(token) = &self.token else {
            return Some(status::unauthenticated(
                "no admin token is configured on this hub (SNUG_ADMIN_TOKEN_SHA256)",
            ));
        };
        let presented = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(snug_rpc::bearer::token);
        match presented {
            Some(presented) if token.admits(presented) => None,
            _ => Some(status::unauthenticated(
                "the call needs `authorization: Bearer <admin token>`",
            )),
        }
    }
}

impl<S> tower::Service<http::Request<tonic::body::Body>> for CheckToken<S>
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        >,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        match self.refusal(&request) {
            Some(status) => Box::pin(std::future::ready(Ok(status.into_http()))),
            None => Box::pin(self.inner.call(request)),
        }
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for CheckToken<S> {
    const NAME: &'static str = S::NAME;
}

/// The admin service as the admin port serves it: behind the admin token check, with the
/// runtime's message limits.
pub fn service(admin: Admin, token: Option<AdminToken>) -> CheckToken<AdminServiceServer<Admin>> {
    CheckToken {
        inner: snug_rpc::with_message_limits!(AdminServiceServer::new(admin)),
        token,
    }
}

/// The admin service as a server hosts it ([`snug_rpc::server::local`] for the admin port).
pub fn services(admin: Admin, token: Option<AdminToken>) -> snug_rpc::server::Services {
    snug_rpc::server::Services::default().with(service(admin, token), &[])
}
