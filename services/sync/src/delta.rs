//! Delta sync (issue 21): PlanImageDelta, AssembleImageDelta and GetImageDelta over
//! `snug-delta`'s codec.
//!
//! A manifest is matched only against the caller's own revision it names (read with
//! `RevStore::read_revision`, which denies exactly as a download does), never against the
//! store's chunks, which are shared across users: no answer depends on another user's images.
//! Assembly stores nothing; the gateway writes the assembled image exactly as a whole one.
//! Pages are patched only for a client that says it rebuilds them: one whose manifest carries
//! shapes, or a pull with `accept_patches`.
//! Every request is bounded by the quota: the manifest or delta upload by what an image within
//! the quota can need, the page count by the quota, and the work by one pass over the base and
//! one over the image (hashing runs on the blocking pool).

use bytes::Bytes;
use snug_delta::{Delta, Limits, Manifest, Source as Pages, page_size_of, plan};
use snug_proto::sync::v1 as pb;
use snug_revstore::{ReadError, RevStore as _, Revision, UserId};
use snug_rpc::chunks::{self, Chunked as _, ResponseStream};
use tonic::{Status, Streaming};

use crate::{SyncServer, convert, reason::DOMAIN, status};

/// Per literal page, the delta carries its id; per run, 13 bytes (the header is 56, within the
/// 64 `max_delta_len` allows).
const DELTA_OVERHEAD_PER_PAGE: u64 = snug_delta::ID_LEN as u64 + 13;

/// The delta codec's bounds for an image within `quota`.
fn limits(quota: u64) -> Limits {
    Limits { max_length: quota }
}

/// The most bytes a manifest of an image within `quota` can take.
fn max_manifest_len(quota: u64) -> u64 {
    limits(quota).max_manifest_len()
}

/// The most bytes a delta for an image within `quota` can take: every page literal, each with
/// its id and its own run.
fn max_delta_len(quota: u64) -> u64 {
    let limits = limits(quota);
    64 + limits.max_length + limits.max_pages() * DELTA_OVERHEAD_PER_PAGE
}

/// The user's own quota a delta header may carry (issue 20: set by the hub's users directory).
trait QuotaOf {
    fn quota_bytes(&self) -> Option<u64>;
}

macro_rules! quota_of {
    ($($header:ty),*) => {$(
        impl QuotaOf for $header {
            fn quota_bytes(&self) -> Option<u64> {
                self.quota_bytes
            }
        }
    )*};
}

quota_of!(
    pb::PlanImageDeltaHeader,
    pb::AssembleImageDeltaHeader,
    pb::GetImageDeltaHeader
);

impl SyncServer {
    /// Receives a delta RPC's header and payload (a manifest or a delta) of at most
    /// `limit(quota)` bytes, the quota being the header's own or the configured one, admitted
    /// against the process's upload budget; the sizes are the codec's, so no header declares
    /// one. Returns the quota with the upload.
    async fn receive<M>(
        &self,
        stream: &mut Streaming<M>,
        limit: fn(u64) -> u64,
    ) -> Result<(chunks::Upload<M::Header>, u64), Status>
    where
        M: chunks::Chunked,
        M::Header: QuotaOf,
    {
        let upload = chunks::receive_limited_by(
            stream,
            DOMAIN,
            |header| limit(self.quota(header.quota_bytes())),
            &self.upload_budget,
            |_| None,
        )
        .await?;
        let quota = self.quota(upload.header.quota_bytes());
        Ok((upload, quota))
    }

    /// The base's bytes: a retained revision of the caller's own image, or DELTA_BASE_GONE.
    async fn base(
        &self,
        user: &UserId,
        base: Revision,
    ) -> Result<(pb::RevisionInfo, Bytes), Status> {
        let download = match self.store.read_revision(user, &base).await {
            Ok(download) => download,
            Err(ReadError::NotFound) => return Err(status::base_gone()),
            Err(ReadError::Storage(err)) => return Err(status::storage_error(err)),
        };
        let info = convert::revision_info(download.info);
        let bytes = download
            .body
            .read_to_vec()
            .await
            .map_err(status::storage_error)?;
        Ok((info, Bytes::from(bytes)))
    }

    pub(crate) async fn plan_image_delta(
        &self,
        mut stream: Streaming<pb::PlanImageDeltaRequest>,
    ) -> Result<ResponseStream<pb::PlanImageDeltaResponse>, Status> {
        let (upload, quota) = self.receive(&mut stream, max_manifest_len).await?;
        let limits = limits(quota);
        let caller = convert::caller(upload.header.caller, "header.caller")?;
        let base = convert::revision(upload.header.base_revision, "header.base_revision")?;
        let manifest = Manifest::parse(&upload.bytes, &limits)
            .map_err(|err| status::delta_error(err, quota))?;
        let (info, base) = self.base(&caller.user, base).await?;
        let layout = blocking(move || {
            let theirs = Manifest::describe(
                &base,
                manifest.geometry.page_size,
                manifest.shapes.is_some(),
            )?;
            Ok(plan(&manifest, &theirs.source()))
        })
        .await?
        .map_err(|err| status::delta_error(err, quota))?;
        let encoded = Bytes::from(layout.encode());
        let result = pb::PlanImageDeltaResult {
            base: Some(info),
            literal_pages: layout.literal_count(),
            size: encoded.len() as u64,
        };
        Ok(chunks::respond(
            pb::PlanImageDeltaResponse::header(result),
            encoded,
        ))
    }

    pub(crate) async fn assemble_image_delta(
        &self,
        mut stream: Streaming<pb::AssembleImageDeltaRequest>,
    ) -> Result<ResponseStream<pb::AssembleImageDeltaResponse>, Status> {
        let (upload, quota) = self.receive(&mut stream, max_delta_len).await?;
        let limits = limits(quota);
        let caller = convert::caller(upload.header.caller, "header.caller")?;
        let base = convert::revision(upload.header.base_revision, "header.base_revision")?;
        let (_, base) = self.base(&caller.user, base).await?;
        let image = blocking(move || {
            Delta::parse(&upload.bytes, &limits, base.len() as u64).and_then(|delta| {
                delta
                    .assemble(&base)
                    .map(|image| (delta.layout.digest, image))
            })
        })
        .await?;
        let (digest, image) = image.map_err(|err| status::delta_error(err, quota))?;
        tracing::info!(user = %caller.user, size = image.len(), "assembled an image from a delta");
        let result = pb::AssembleImageDeltaResult {
            size: image.len() as u64,
            sha256: Bytes::copy_from_slice(&digest),
        };
        Ok(chunks::respond(
            pb::AssembleImageDeltaResponse::header(result),
            Bytes::from(image),
        ))
    }

    pub(crate) async fn get_image_delta(
        &self,
        mut stream: Streaming<pb::GetImageDeltaRequest>,
    ) -> Result<ResponseStream<pb::GetImageDeltaResponse>, Status> {
        let (upload, quota) = self.receive(&mut stream, max_manifest_len).await?;
        let limits = limits(quota);
        let caller = convert::caller(upload.header.caller, "header.caller")?;
        let revision = upload
            .header
            .revision
            .map(|token| convert::revision(token, "header.revision"))
            .transpose()?;
        let base = upload
            .header
            .base_revision
            .map(|token| convert::revision(token, "header.base_revision"))
            .transpose()?;
        let patches = upload.header.accept_patches;
        // The client's pages: named in its manifest, or its file is a revision the origin keeps.
        let source = match base {
            None => Source::Manifest(
                Manifest::parse(&upload.bytes, &limits)
                    .map_err(|err| status::delta_error(err, quota))?,
            ),
            Some(_) if !upload.bytes.is_empty() => {
                return Err(snug_rpc::status::invalid_argument(
                    DOMAIN,
                    "header.base_revision",
                    "a pull names its base revision or sends its manifest, not both",
                ));
            }
            Some(base) => Source::Base(self.base(&caller.user, base).await?.1),
        };
        let download = match &revision {
            None => self.store.get(&caller.user, &caller.principal).await,
            Some(revision) => {
                self.store
                    .get_revision(&caller.user, revision, &caller.principal)
                    .await
            }
        }
        .map_err(status::read_error)?;
        let info = convert::revision_info(download.info);
        let target = download
            .body
            .read_to_vec()
            .await
            .map_err(status::storage_error)?;
        let delta = blocking(move || {
            // The revision's pages are named at the client's page size (or, against a base, the
            // revision's own), so the client's file is the source whatever its own length.
            let delta = match &source {
                Source::Manifest(theirs) => {
                    let page_size = theirs.geometry.page_size;
                    let ours = Manifest::describe(&target, page_size, theirs.shapes.is_some())?;
                    Delta::build(plan(&ours, &theirs.source()), &target, None)
                }
                Source::Base(base) => {
                    let page_size = page_size_of(&target);
                    let (ours, theirs) = (
                        Manifest::describe(&target, page_size, patches)?,
                        Manifest::describe(base, page_size, patches)?,
                    );
                    let bytes = patches.then_some(&base[..]);
                    let layout = plan(
                        &ours,
                        &Pages {
                            bytes,
                            ..theirs.source()
                        },
                    );
                    Delta::build(layout, &target, bytes)
                }
            };
            Ok(delta.encode())
        })
        .await?
        .map_err(|err| status::delta_error(err, quota))?;
        let result = pb::GetImageDeltaResult {
            revision: Some(info),
            size: delta.len() as u64,
        };
        Ok(chunks::respond(
            pb::GetImageDeltaResponse::header(result),
            Bytes::from(delta),
        ))
    }
}

/// What a pull's delta is made against.
enum Source {
    /// The pages the client's manifest names.
    Manifest(Manifest),
    /// The origin's own copy of the revision the client's file is.
    Base(Bytes),
}

/// Runs CPU work (hashing up to a quota's worth of pages) off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| snug_rpc::status::internal(DOMAIN, &err))
}
