//! The services behind the gateway, reached only through their gRPC contracts, every call under a
//! deadline.
//!
//! Channels connect lazily and reconnect by themselves, so a service that is down when the
//! gateway starts, or restarts later, is picked up on the next request; meanwhile every call
//! fails within its deadline (`tokio::time::timeout` around the whole call, because a server that
//! accepts TCP and never answers would otherwise hold a request for as long as the client waits)
//! and the route answers 503.

use std::{
    collections::HashSet,
    sync::Mutex,
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use snug_proto::{
    materialize::v1::{
        self as materialize_pb, materialize_service_client::MaterializeServiceClient,
    },
    sync::v1::{self as sync_pb, sync_service_client::SyncServiceClient},
};
use snug_rpc::chunks::Chunked as _;
use snug_rpc::{
    chunks::{self, MAX_MESSAGE_SIZE},
    service_token::ServiceToken,
    trace_context::Traced,
};
use tonic::Code;

mod heads;

pub use heads::HEARTBEAT;
pub(crate) use heads::{Heard, Watching};

use crate::{
    config::ConfigError,
    error::ApiError,
    upload::{BodyWatch, Upload},
};

/// How long the quota read from the sync service is trusted before it is asked again.
const QUOTA_TTL: Duration = Duration::from_secs(60);

/// The materialization service's largest message (its 8 MiB header limit plus framing).
const MATERIALIZE_MAX_MESSAGE: usize = 8 * 1024 * 1024 + 64 * 1024;

/// A channel to a service whose calls are traced: each gets a client span, whose context goes
/// to the service as `traceparent` (nothing is sent while tracing is off). Underneath, either a
/// connection to a service's address or the services of this very process
/// ([`snug_rpc::server::LocalChannel`]); the generated clients and the proto contract are the
/// same over both.
pub type Channel = Traced<snug_rpc::server::LocalChannel>;

/// A channel to the services of this process (`snug-hub serve`).
pub fn local(services: snug_rpc::server::LocalChannel) -> Channel {
    Traced::new(services)
}

/// Opens a lazily connecting channel to `addr`, every call on it carrying `token` when given.
pub fn channel(
    addr: &str,
    connect_timeout: Duration,
    token: Option<&ServiceToken>,
) -> Result<Channel, ConfigError> {
    let endpoint = tonic::transport::Channel::from_shared(addr.to_owned())
        .map_err(|_| ConfigError::BadAddress(addr.to_owned()))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        // Windows large enough that a 64 MiB image streams without stalling on flow control (the
        // services' servers are configured the same way).
        .initial_stream_window_size(32 * 1024 * 1024)
        .initial_connection_window_size(64 * 1024 * 1024)
        // Frames as large as the 1 MiB chunks the services send: with h2's default 16 KiB a
        // 64 MiB download is 4,096 DATA frames, each parsed and copied into the decoder on its
        // own, and the services' servers already accept frames this large in the other direction.
        .max_frame_size(chunks::CHUNK_SIZE as u32)
        // A connection whose peer vanished without a FIN is noticed and replaced.
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10));
    let token = token.cloned();
    let channel = tower::ServiceExt::map_request(
        endpoint.connect_lazy(),
        move |mut request: http::Request<tonic::body::Body>| {
            if let Some(token) = &token {
                token.insert(&mut request);
            }
            request
        },
    );
    let channel = tower::ServiceExt::map_err(channel, |e| snug_rpc::server::ChannelError(e.into()));
    Ok(Traced::new(tower::util::BoxCloneSyncService::new(channel)))
}

/// The gRPC clients of the services the routes use.
#[derive(Debug)]
pub struct Backends {
    sync: SyncServiceClient<Channel>,
    /// Absent when the deployment runs no materialization service.
    materialize: Option<MaterializeServiceClient<Channel>>,
    sync_channel: Channel,
    deadline: Duration,
    /// Users this process has already provisioned (ProvisionUser is idempotent; this only saves
    /// the round trip).
    provisioned: Mutex<HashSet<String>>,
    quota: Mutex<Option<(Instant, u64)>>,
    /// The sync store's identity: fixed for the store's life, so read once.
    store_id: tokio::sync::OnceCell<String>,
    /// The users' heads, and one watch per user (`heads.rs`).
    heads: heads::Heads,
}

/// Who a call is for, as the sync service's `Caller`.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The user whose image it is.
    pub user_id: String,
    /// Who acts (recorded in the ledgers).
    pub principal: String,
    /// The user's own quota on their image, when the users directory sets one: sent with every
    /// write and delta so the sync service holds the user to it, and the bound of the gateway's
    /// own upload limits ([`Backends::quota_for`]). `None`: the sync service's configured quota.
    pub quota_bytes: Option<u64>,
    /// The client's address (trusted proxies applied), when the request came over a socket: the
    /// sync service holds one address's uploads to a share of its budget.
    pub client_address: Option<std::net::IpAddr>,
}

impl Caller {
    fn pb(&self) -> sync_pb::Caller {
        sync_pb::Caller {
            user_id: self.user_id.clone(),
            principal: self.principal.clone(),
            client_address: self
                .client_address
                .map(|a| a.to_string())
                .unwrap_or_default(),
        }
    }
}

/// What a delta pull's client rebuilds beyond copied and literal pages (`Snug-Delta-Patches`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patches {
    /// Nothing more.
    None,
    /// Patched pages.
    Patched,
    /// Patched pages, and compressed pages against a base its file is byte for byte.
    Compressed,
}

/// What a write requires of the user's current revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precondition {
    /// The first write: no image yet.
    MustNotExist,
    /// The current revision is exactly this one.
    MustMatch(String),
}

impl Precondition {
    fn pb(&self) -> sync_pb::Precondition {
        use sync_pb::precondition::Condition;
        sync_pb::Precondition {
            condition: Some(match self {
                Precondition::MustNotExist => Condition::MustNotExist(sync_pb::MustNotExist {}),
                Precondition::MustMatch(revision) => Condition::MustMatch(revision.clone()),
            }),
        }
    }
}

/// A download in progress: the revision, then its bytes.
pub type ImageBody = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

impl Backends {
    /// Clients over the given channels.
    pub fn new(sync: Channel, materialize: Option<Channel>, deadline: Duration) -> Self {
        let client = SyncServiceClient::new(sync.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE);
        Self {
            heads: heads::Heads::new(client.clone(), deadline),
            sync: client,
            materialize: materialize.map(|channel| {
                MaterializeServiceClient::new(channel)
                    .max_decoding_message_size(MATERIALIZE_MAX_MESSAGE)
                    .max_encoding_message_size(MATERIALIZE_MAX_MESSAGE)
            }),
            sync_channel: sync,
            deadline,
            provisioned: Mutex::new(HashSet::new()),
            quota: Mutex::new(None),
            store_id: tokio::sync::OnceCell::new(),
        }
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        // The service learns the deadline too (grpc-timeout), so it stops work nobody awaits.
        request.set_timeout(self.deadline);
        request
    }

    /// Runs `call` under the deadline, mapping a status through the error table and a missed
    /// deadline to 503.
    async fn within<T>(
        &self,
        call: impl Future<Output = Result<T, tonic::Status>>,
    ) -> Result<T, ApiError> {
        within(self.deadline, call).await
    }

    /// Makes sure the sync service knows the user (first contact provisions the record only; no
    /// image is created).
    pub async fn provision(&self, caller: &Caller) -> Result<(), ApiError> {
        if self.lock_provisioned().contains(&caller.user_id) {
            return Ok(());
        }
        let mut sync = self.sync.clone();
        let request = self.request(sync_pb::ProvisionUserRequest {
            caller: Some(caller.pb()),
        });
        self.within(sync.provision_user(request)).await?;
        self.lock_provisioned().insert(caller.user_id.clone());
        Ok(())
    }

    fn lock_provisioned(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.provisioned.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The per-user quota the sync service enforces, so an upload can be refused from its
    /// `Content-Length` before a byte is read.
    pub async fn quota(&self) -> Result<u64, ApiError> {
        if let Some((at, quota)) = *self.quota.lock().unwrap_or_else(|p| p.into_inner())
            && at.elapsed() < QUOTA_TTL
        {
            return Ok(quota);
        }
        Ok(self.store_status().await?.quota_bytes)
    }

    /// Asks the sync service for its store's status, keeping what it says of the quota and of
    /// the store's identity.
    async fn store_status(&self) -> Result<sync_pb::GetStoreStatusResponse, ApiError> {
        let mut sync = self.sync.clone();
        let status = self
            .within(sync.get_store_status(self.request(sync_pb::GetStoreStatusRequest {})))
            .await?
            .into_inner();
        *self.quota.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), status.quota_bytes));
        if !status.store_id.is_empty() {
            let _ = self.store_id.set(status.store_id.clone());
        }
        Ok(status)
    }

    /// The identity of `caller`'s origin on this hub ([`origin_id`]), stated on every answer
    /// about their image so a client keys its sync state by it.
    pub async fn origin_id(&self, caller: &Caller) -> Result<String, ApiError> {
        let store_id = match self.store_id.get() {
            Some(store_id) => store_id.clone(),
            None => {
                let status = self.store_status().await?;
                if status.store_id.is_empty() {
                    return Err(ApiError::from_reason(
                        &snug_reasons::gateway::BAD_GATEWAY,
                        "the sync service did not state its store's identity",
                    ));
                }
                status.store_id
            }
        };
        Ok(origin_id(&store_id, &caller.user_id))
    }

    /// The quota `caller`'s uploads are held to: their own ([`Caller::quota_bytes`]) or the
    /// sync service's configured one. The one choice behind every body limit of an upload, so
    /// the gateway never refuses what the service would accept, nor buffers what it would refuse.
    pub async fn quota_for(&self, caller: &Caller) -> Result<u64, ApiError> {
        match caller.quota_bytes {
            Some(quota) => Ok(quota),
            None => self.quota().await,
        }
    }

    /// The caller's current revision, or the retained `revision` named (HeadImage); `None` when
    /// there is no such image. The current one comes from the heads this gateway keeps
    /// (`heads.rs`) when they can be trusted.
    pub async fn head(
        &self,
        caller: &Caller,
        revision: Option<&str>,
    ) -> Result<Option<sync_pb::RevisionInfo>, ApiError> {
        let Some(revision) = revision else {
            return Ok(self.heads.head(caller).await?.map(|head| (*head).clone()));
        };
        head_image(&self.sync, self.deadline, caller, Some(revision)).await
    }

    /// Subscribes to the caller's history (`heads.rs`): one reader per user, whatever the number
    /// of their streams, and a heartbeat every [`HEARTBEAT`].
    pub(crate) fn watch(&self, caller: &Caller) -> Watching {
        self.heads.watch(caller)
    }

    /// Forgets the caller's kept head after a write of theirs returned (whatever it answered:
    /// a write that timed out may still have committed), so they read their own write here.
    fn wrote<T>(&self, caller: &Caller, result: Result<T, ApiError>) -> Result<T, ApiError> {
        self.heads.forget(&caller.user_id);
        result
    }

    /// Starts a download of the user's current image, or of the retained `revision` named: its
    /// revision and a body stream, or `None` when there is no such image. The deadline covers
    /// the wait for the first message; after that each chunk must arrive within the deadline, so
    /// a stalled service ends the body (the client sees a short response against
    /// `Content-Length`, never a silent success).
    pub async fn get(
        &self,
        caller: &Caller,
        revision: Option<&str>,
    ) -> Result<Option<(sync_pb::RevisionInfo, ImageBody)>, ApiError> {
        let request = sync_pb::GetImageRequest {
            caller: Some(caller.pb()),
            revision: revision.map(str::to_owned),
        };
        start_download(
            self.sync_channel.clone(),
            self.request(request),
            self.deadline,
        )
        .await
    }

    /// Writes the image `upload` streams as the caller's next revision, under `precondition`:
    /// PutImage, which validates it, zeroes its free space and stores it (the sync service owns
    /// the write; the gateway holds none of the bytes).
    pub async fn put(
        &self,
        caller: &Caller,
        precondition: &Precondition,
        mut upload: Upload,
    ) -> Result<sync_pb::RevisionInfo, ApiError> {
        let header = sync_pb::PutImageRequest::header(sync_pb::PutImageHeader {
            caller: Some(caller.pb()),
            precondition: Some(precondition.pb()),
            idempotency_key: None,
            expected_length: upload.declared().await?,
            quota_bytes: caller.quota_bytes,
        });
        let (body, watch) = upload.chunks();
        let mut sync = self.sync.clone();
        let request = tonic::Request::new(uploading(header, body));
        let response = self
            .upload(watch, async move { sync.put_image(request).await })
            .await;
        self.wrote(caller, response.and_then(|r| written(r.into_inner())))
    }

    /// Delta push, step 2 (issue 21): PutImageDelta assembles the image from the caller's
    /// retained revision `base` and the delta `upload` streams, validates and stores it under
    /// must-match of `base`; the image never leaves the sync service.
    pub async fn put_delta(
        &self,
        caller: &Caller,
        base: &str,
        mut upload: Upload,
    ) -> Result<sync_pb::RevisionInfo, ApiError> {
        let header = sync_pb::PutImageDeltaRequest::header(sync_pb::PutImageDeltaHeader {
            caller: Some(caller.pb()),
            base_revision: base.to_owned(),
            idempotency_key: None,
            expected_length: upload.declared().await?,
            quota_bytes: caller.quota_bytes,
        });
        let (body, watch) = upload.chunks();
        let mut sync = self.sync.clone();
        let request = tonic::Request::new(uploading(header, body));
        let response = self
            .upload(watch, async move { sync.put_image_delta(request).await })
            .await;
        self.wrote(caller, response.and_then(|r| written(r.into_inner())))
    }

    /// Delta push, step 1 (issue 21): the layout that builds the image the manifest `upload`
    /// names from the caller's retained revision `base`, with its length, streamed on.
    pub async fn plan_delta(
        &self,
        caller: &Caller,
        base: &str,
        mut upload: Upload,
    ) -> Result<(u64, ImageBody), ApiError> {
        let header = sync_pb::PlanImageDeltaRequest::header(sync_pb::PlanImageDeltaHeader {
            caller: Some(caller.pb()),
            base_revision: base.to_owned(),
            quota_bytes: caller.quota_bytes,
            expected_length: upload.declared().await?,
        });
        let (body, watch) = upload.chunks();
        let mut sync = self.sync.clone();
        let request = tonic::Request::new(uploading(header, body));
        let deadline = self.deadline;
        let (result, layout) = self
            .upload(watch, async move {
                let stream = sync.plan_image_delta(request).await?.into_inner();
                answered(stream, deadline).await
            })
            .await?;
        Ok((result.size, layout))
    }

    /// Delta pull: the delta that rebuilds the caller's current image from the file the manifest
    /// `upload` names (or, `base`, the caller's retained revision the file is), with the revision
    /// it rebuilds, patching pages only if the client rebuilds them (`patches`), streamed on;
    /// `None` when the user has no image.
    pub async fn get_delta(
        &self,
        caller: &Caller,
        base: Option<&str>,
        patches: Patches,
        mut upload: Upload,
    ) -> Result<Option<(sync_pb::GetImageDeltaResult, ImageBody)>, ApiError> {
        let header = sync_pb::GetImageDeltaRequest::header(sync_pb::GetImageDeltaHeader {
            caller: Some(caller.pb()),
            revision: None,
            base_revision: base.map(str::to_owned),
            quota_bytes: caller.quota_bytes,
            accept_patches: patches != Patches::None,
            accept_compressed: patches == Patches::Compressed,
            expected_length: upload.declared().await?,
        });
        let (body, watch) = upload.chunks();
        let mut sync = self.sync.clone();
        let request = tonic::Request::new(uploading(header, body));
        let deadline = self.deadline;
        let answer = self
            .upload(watch, async move {
                let stream = sync.get_image_delta(request).await?.into_inner();
                answered(stream, deadline).await
            })
            .await;
        match answer {
            Ok(answer) => Ok(Some(answer)),
            Err(err) if err.status == axum::http::StatusCode::NOT_FOUND => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Runs a call that streams a request body to a service: answered by the call, or by the
    /// body's failure (the call is dropped with it, so the service sees it cancelled and keeps
    /// nothing). The deadline starts when the body has arrived: sending is bounded by the upload
    /// idle timeout of each piece ([`crate::upload`]), not by the deadline of what follows.
    async fn upload<T>(
        &self,
        watch: BodyWatch,
        call: impl Future<Output = Result<T, tonic::Status>>,
    ) -> Result<T, ApiError> {
        let (mut failed, mut ended) = (watch.clone(), watch);
        let deadline = self.deadline;
        tokio::select! {
            biased;
            err = failed.failed() => Err(err),
            result = call => result.map_err(within_status),
            () = async move {
                ended.ended().await;
                tokio::time::sleep(deadline).await;
            } => Err(ApiError::unavailable(
                "a service the hub needs did not answer in time; retry shortly",
            )),
        }
    }

    /// Exports one app of the user's current image as a standalone database with natural names:
    /// the download from the sync service is piped chunk by chunk into the materialization
    /// service's ExportApp, and its answer is streamed on, so the gateway never holds either file.
    /// `None` when the user has no image.
    pub fn export_app(
        &self,
        caller: &Caller,
        app_id: &str,
    ) -> impl Future<Output = Result<Option<(materialize_pb::ExportAppResult, ImageBody)>, ApiError>>
    + Send
    + 'static {
        // Everything the call needs is cloned up front, so the future borrows nothing: a borrowed
        // `&self` held across this pipeline's awaits defeats the compiler's `Send` proof
        // (rust-lang/rust#102211).
        let materialize = self.materialize.clone();
        let sync = self.sync_channel.clone();
        let download = self.request(sync_pb::GetImageRequest {
            caller: Some(caller.pb()),
            revision: None,
        });
        let deadline = self.deadline;
        let app_id = app_id.to_owned();
        async move {
            let Some(mut materialize) = materialize else {
                return Err(ApiError::from_reason(
                    &snug_reasons::gateway::NOT_DEPLOYED,
                    "this hub runs no materialization service (SNUG_MATERIALIZE_ADDR), so it cannot export apps",
                ));
            };
            let Some((info, download)) = start_download(sync, download, deadline).await? else {
                return Ok(None);
            };
            // A download that breaks off must not look like a short upload (the service would
            // call it a malformed request): remember it, and answer 503 instead.
            let broken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let header =
                materialize_pb::ExportAppRequest::header(materialize_pb::UserDatabaseHeader {
                    app_id,
                    expected_length: Some(info.size),
                });
            let mut request = tonic::Request::new(export_upload(header, download, broken.clone()));
            request.set_timeout(deadline);
            let started = within(deadline, async move {
                let mut stream = materialize.export_app(request).await?.into_inner();
                let first = stream.message().await?;
                Ok((first, stream))
            })
            .await;
            if broken.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(ApiError::unavailable(
                    "the image download broke off; retry shortly",
                ));
            }
            let (first, stream) = started?;
            let result = match first {
                Some(materialize_pb::ExportAppResponse {
                    message: Some(materialize_pb::export_app_response::Message::Result(result)),
                }) => result,
                _ => {
                    return Err(ApiError::from_reason(
                        &snug_reasons::gateway::BAD_GATEWAY,
                        "the materialization service answered an export without its result",
                    ));
                }
            };
            Ok(Some((result, chunked_body(stream, deadline))))
        }
    }

    /// The user's revisions, newest first.
    pub async fn list_revisions(
        &self,
        caller: &Caller,
        limit: u32,
    ) -> Result<Vec<sync_pb::RevisionInfo>, ApiError> {
        list_revisions(&self.sync, self.deadline, caller, limit).await
    }

    /// Copies a retained revision forward as a new current revision.
    pub async fn restore(
        &self,
        caller: &Caller,
        from: &str,
        precondition: &Precondition,
    ) -> Result<sync_pb::RevisionInfo, ApiError> {
        let mut sync = self.sync.clone();
        let request = self.request(sync_pb::RestoreRevisionRequest {
            caller: Some(caller.pb()),
            from_revision: from.to_owned(),
            precondition: Some(precondition.pb()),
            idempotency_key: None,
        });
        let restored = self.within(sync.restore_revision(request)).await;
        self.wrote(caller, restored).and_then(|response| {
            response.into_inner().revision.ok_or_else(|| {
                ApiError::from_reason(
                    &snug_reasons::gateway::BAD_GATEWAY,
                    "the sync service restored without a revision",
                )
            })
        })
    }

    /// Whether each service answers its health check and the sync store answers its probe.
    pub async fn readiness(&self) -> Vec<(&'static str, Result<(), String>)> {
        use tonic_health::pb::{
            HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
        };
        let check = |channel: Channel, service: &'static str| {
            let deadline = self.deadline;
            async move {
                let mut client = HealthClient::new(channel);
                let mut request = tonic::Request::new(HealthCheckRequest {
                    service: service.to_owned(),
                });
                request.set_timeout(deadline);
                match tokio::time::timeout(deadline, client.check(request)).await {
                    Ok(Ok(response)) if response.get_ref().status() == ServingStatus::Serving => {
                        Ok(())
                    }
                    Ok(Ok(response)) => Err(response.get_ref().status().as_str_name().to_owned()),
                    Ok(Err(status)) => Err(format!("{:?}", status.code())),
                    Err(_) => Err("no answer within the deadline".to_owned()),
                }
            }
        };
        let mut sync = self.sync.clone();
        let store = async {
            match within(
                self.deadline,
                sync.get_store_status(self.request(sync_pb::GetStoreStatusRequest {})),
            )
            .await
            {
                Ok(response) if response.get_ref().health() == sync_pb::StoreHealth::Serving => {
                    Ok(())
                }
                Ok(response) => Err(response.get_ref().reason.clone()),
                Err(err) => Err(err.code.to_owned()),
            }
        };
        let (sync_health, store) = tokio::join!(
            check(self.sync_channel.clone(), "snug.sync.v1.SyncService"),
            store,
        );
        vec![("sync", sync_health), ("syncStore", store)]
    }
}

/// Runs `call` under `deadline`; see [`Backends::within`].
async fn within<T>(
    deadline: Duration,
    call: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, ApiError> {
    match tokio::time::timeout(deadline, call).await {
        Ok(result) => result.map_err(within_status),
        Err(_) => Err(ApiError::unavailable(
            "a service the hub needs did not answer in time; retry shortly",
        )),
    }
}

/// HeadImage: the caller's current revision or the one named, `None` when there is no such image
/// (or no such user, or it is another user's: the same answer, by the sync service's uniform
/// denial).
async fn head_image(
    sync: &SyncServiceClient<Channel>,
    deadline: Duration,
    caller: &Caller,
    revision: Option<&str>,
) -> Result<Option<sync_pb::RevisionInfo>, ApiError> {
    let mut sync = sync.clone();
    let mut request = tonic::Request::new(sync_pb::HeadImageRequest {
        caller: Some(caller.pb()),
        revision: revision.map(str::to_owned),
    });
    request.set_timeout(deadline);
    match within(deadline, sync.head_image(request)).await {
        Ok(response) => Ok(response.into_inner().revision),
        Err(err) if err.status == axum::http::StatusCode::NOT_FOUND => Ok(None),
        Err(err) => Err(err),
    }
}

/// ListRevisions: the caller's revisions, newest first, at most `limit`.
async fn list_revisions(
    sync: &SyncServiceClient<Channel>,
    deadline: Duration,
    caller: &Caller,
    limit: u32,
) -> Result<Vec<sync_pb::RevisionInfo>, ApiError> {
    let mut sync = sync.clone();
    let mut request = tonic::Request::new(sync_pb::ListRevisionsRequest {
        caller: Some(caller.pb()),
        limit,
    });
    request.set_timeout(deadline);
    Ok(within(deadline, sync.list_revisions(request))
        .await?
        .into_inner()
        .revisions)
}

/// A service's refusal in HTTP words (the error table), noting a service that is unreachable.
fn within_status(status: tonic::Status) -> ApiError {
    if status.code() == Code::Unavailable && snug_rpc::status::reason_of(&status).is_none() {
        tracing::warn!(message = status.message(), "a service is unreachable");
    }
    ApiError::from_status(&status)
}

/// A header-then-chunks request stream: `header`, then each piece of `body` as a chunk.
fn uploading<M: snug_rpc::chunks::Chunked + Send + 'static>(
    header: M,
    body: impl Stream<Item = Bytes> + Send + 'static,
) -> impl Stream<Item = M> + Send + 'static {
    futures::stream::once(async move { header }).chain(body.map(M::chunk))
}

/// The revision a write produced, or the service's mistake of answering without one.
fn written(response: sync_pb::PutImageResponse) -> Result<sync_pb::RevisionInfo, ApiError> {
    response.revision.ok_or_else(|| {
        ApiError::from_reason(
            &snug_reasons::gateway::BAD_GATEWAY,
            "the sync service accepted an image without a revision",
        )
    })
}

/// A result-then-chunks answer: waits for the result (the first message), then passes the
/// chunks on as a body, each within `idle`; a stream that breaks off ends the body with an
/// error (the client sees it short of its `Content-Length`, never a silent success).
async fn answered<M>(
    mut stream: tonic::Streaming<M>,
    idle: Duration,
) -> Result<(M::Header, ImageBody), tonic::Status>
where
    M: snug_rpc::chunks::Chunked + Send + 'static,
{
    let result = match stream.message().await?.and_then(M::into_part) {
        Some(snug_rpc::chunks::Part::Header(result)) => result,
        _ => {
            return Err(tonic::Status::internal(
                "the answer did not start with its result",
            ));
        }
    };
    Ok((result, chunked_body(stream, idle)))
}

/// The chunks after a result, as a body; each must arrive within `idle`.
fn chunked_body<M>(stream: tonic::Streaming<M>, idle: Duration) -> ImageBody
where
    M: snug_rpc::chunks::Chunked + Send + 'static,
{
    Box::pin(futures::stream::unfold(
        Some(stream),
        move |state| async move {
            let mut stream = state?;
            let failure = match tokio::time::timeout(idle, stream.message()).await {
                Ok(Ok(Some(message))) => match message.into_part() {
                    Some(snug_rpc::chunks::Part::Chunk(chunk)) => {
                        return Some((Ok(chunk), Some(stream)));
                    }
                    _ => "the answer repeated its result",
                },
                Ok(Ok(None)) => return None,
                Ok(Err(status)) => {
                    tracing::warn!(code = ?status.code(), reason = ?snug_rpc::status::reason_of(&status), "an answer failed mid-stream");
                    "the answer failed mid-stream"
                }
                Err(_) => "the answer stalled past the deadline",
            };
            Some((Err(std::io::Error::other(failure)), None))
        },
    ))
}

/// The ExportApp request stream: the header, then the download's chunks. A download that breaks
/// off ends the stream and sets `broken`.
///
/// A hand-written `Stream` rather than combinators: an `async` block awaiting a boxed `dyn Stream`
/// inside a closure trips the compiler's higher-ranked `Send` inference (rust-lang/rust#102211).
fn export_upload(
    header: materialize_pb::ExportAppRequest,
    download: ImageBody,
    broken: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> ExportUpload {
    ExportUpload {
        header: Some(header),
        download,
        broken,
        done: false,
    }
}

struct ExportUpload {
    header: Option<materialize_pb::ExportAppRequest>,
    download: ImageBody,
    broken: std::sync::Arc<std::sync::atomic::AtomicBool>,
    done: bool,
}

impl Stream for ExportUpload {
    type Item = materialize_pb::ExportAppRequest;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if let Some(header) = self.header.take() {
            return Poll::Ready(Some(header));
        }
        if self.done {
            return Poll::Ready(None);
        }
        match self.download.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                Poll::Ready(Some(materialize_pb::ExportAppRequest::chunk(chunk)))
            }
            Poll::Ready(Some(Err(_))) => {
                self.broken
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A download's bytes as a body; each piece must arrive within `idle`, and a failure ends the
/// body with an error (the client sees a response short of its `Content-Length`).
fn download_body(
    payload: impl futures::Stream<Item = Result<bytes::Bytes, tonic::Status>> + Send + Unpin + 'static,
    idle: Duration,
) -> ImageBody {
    Box::pin(futures::stream::unfold(
        Some(payload),
        move |state| async move {
            let mut payload = state?;
            let failure = match tokio::time::timeout(idle, payload.next()).await {
                Ok(Some(Ok(piece))) => return Some((Ok(piece), Some(payload))),
                Ok(None) => return None,
                Ok(Some(Err(status))) => {
                    tracing::warn!(code = ?status.code(), reason = ?snug_rpc::status::reason_of(&status), "a download failed mid-stream");
                    "the download failed mid-stream"
                }
                Err(_) => "the download stalled past the deadline",
            };
            Some((Err(std::io::Error::other(failure)), None))
        },
    ))
}

/// Starts a download: waits (under the deadline) for the first message, which must be the
/// revision; `None` when the user has no image. The chunks' bytes are read as framed
/// (`snug_rpc::framed::client`): slices of what the sync service sent, not copies.
async fn start_download(
    sync: Channel,
    request: tonic::Request<sync_pb::GetImageRequest>,
    deadline: Duration,
) -> Result<Option<(sync_pb::RevisionInfo, ImageBody)>, ApiError> {
    let started = within(
        deadline,
        snug_rpc::framed::client::call::<sync_pb::GetImageResponse, _, _>(
            sync,
            sync_pb::GET_IMAGE_PATH,
            request.map(|m| futures::stream::iter([m])),
        ),
    )
    .await;
    match started {
        Ok((info, payload)) => Ok(Some((info, download_body(payload, deadline)))),
        Err(err) if err.status == axum::http::StatusCode::NOT_FOUND => Ok(None),
        Err(err) => Err(err),
    }
}

/// The identity of one user's origin on the hub whose sync store is `store_id` (issue 35): 32
/// hex digits of SHA-256 over both, so it names the store and the user without revealing the
/// user's internal id, and differs between two hubs, two stores behind one address, and two
/// users of one hub. Revision tokens repeat across origins; this does not.
pub fn origin_id(store_id: &str, user_id: &str) -> String {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    hasher.update(b"snug-origin-v1\0");
    hasher.update(store_id.as_bytes());
    hasher.update(b"\0");
    hasher.update(user_id.as_bytes());
    hex_lower(&hasher.finalize()[..16])
}

/// Lowercase hex, as the sync service spells a SHA-256.
fn hex_lower(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
