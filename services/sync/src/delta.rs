//! Delta sync (issue 21): PlanImageDelta, AssembleImageDelta and GetImageDelta over
//! `snug-delta`'s codec.
//!
//! A manifest is matched only against the caller's own revision it names (read with
//! `RevStore::read_revision`, which denies exactly as a download does), never against the
//! store's chunks, which are shared across users: no answer depends on another user's images.
//! A delta push is assembled and written by PutImageDelta (`write.rs`); the deprecated
//! AssembleImageDelta assembles and answers the image, storing nothing.
//! Pages are patched only for a client that says it rebuilds them: one whose manifest carries
//! shapes, or a pull with `accept_patches`.
//! Every request is bounded by the quota: the manifest or delta upload by what an image within
//! the quota can need, the page count by the quota, and the work by one pass over the base and
//! one over the image, which run as jobs of the service's pool (bounded, and stopped for a
//! caller that went away). What a request holds (the manifest or delta it sent, the base, the
//! revision read whole, the delta built) is admitted against the process's upload budget before
//! it is read or built, and held until the answer is sent (issue 36 point 7); together, a
//! request's admissions never ask for more than the whole budget ([`Held`]).

use std::time::Duration;

use bytes::Bytes;
use snug_delta::{Delta, Manifest, Source as Pages, page_size_of, plan};
use snug_proto::sync::v1 as pb;
use snug_revstore::{ReadError, RevStore as _, Revision, UserId};
use snug_rpc::{
    budget::{Admission, UploadBudget},
    chunks::{self, Chunked as _, ResponseStream},
};
use tonic::{Status, Streaming};

use crate::{SyncServer, convert, reason::DOMAIN, status, write::limits};

/// What the service reads from a delta header: the user's own quota (issue 20: set by the hub's
/// users directory) and the payload's declared length.
trait DeltaHeader {
    fn quota_bytes(&self) -> Option<u64>;
    fn expected_length(&self) -> Option<u64>;
}

macro_rules! delta_header {
    ($($header:ty),*) => {$(
        impl DeltaHeader for $header {
            fn quota_bytes(&self) -> Option<u64> {
                self.quota_bytes
            }

            fn expected_length(&self) -> Option<u64> {
                self.expected_length
            }
        }
    )*};
}

delta_header!(pb::PlanImageDeltaHeader, pb::GetImageDeltaHeader);

impl DeltaHeader for pb::AssembleImageDeltaHeader {
    fn quota_bytes(&self) -> Option<u64> {
        self.quota_bytes
    }

    fn expected_length(&self) -> Option<u64> {
        None
    }
}

/// The most bytes a manifest of an image within `quota` can take.
fn max_manifest_len(quota: u64) -> u64 {
    limits(quota).max_manifest_len()
}

/// The most bytes a delta for an image within `quota` can take.
fn max_delta_len(quota: u64) -> u64 {
    limits(quota).max_delta_len()
}

/// What one request holds against the process's upload budget: its admissions, and the
/// budget's units they hold.
///
/// The budget admits one upload larger than itself once that upload holds all of it, so none
/// is refused for ever (`snug_rpc::budget`). A delta request holds several things, each admitted
/// before it is read or built (the upload it sent, a base, the image or delta it builds); were
/// each admitted in full, a request whose things together exceed the budget would wait for room
/// it holds itself and be refused OVERLOADED on an idle server (a delta push of an image near
/// the quota, at the default budget of twice the quota). So each admission after the upload's
/// asks at most for what the whole budget has beside what the request holds, and for nothing
/// once it holds it all: alone, a request always proceeds; beside others, it waits for its share.
pub(crate) struct Held {
    admissions: Vec<Admission>,
    units: u64,
}

impl Held {
    /// What a request holds once its upload is in: `admission`, made for `bytes` (the upload's
    /// declared length, or its limit when it declared none, as `snug_rpc::chunks` admits it).
    pub(crate) fn upload(admission: Admission, bytes: u64, budget: &UploadBudget) -> Self {
        Self {
            admissions: vec![admission],
            units: units(bytes, budget),
        }
    }
}

/// The budget's unit: every admission is a whole number of them, and the smallest budget one.
fn unit() -> u64 {
    UploadBudget::new(1, Duration::ZERO).bytes()
}

/// The units an admission of `bytes` takes from `budget` (at least one, at most all of them),
/// as the budget counts them.
fn units(bytes: u64, budget: &UploadBudget) -> u64 {
    bytes.div_ceil(unit()).clamp(1, budget.bytes() / unit())
}

impl SyncServer {
    /// Receives a delta RPC's header and payload (a manifest or a delta) of at most
    /// `limit(quota)` bytes, the quota being the header's own or the configured one, admitted
    /// against the process's upload budget (its declared length, or the limit). Returns the
    /// quota with the upload, and what the request holds.
    async fn receive<M>(
        &self,
        stream: &mut Streaming<M>,
        limit: fn(u64) -> u64,
    ) -> Result<(M::Header, Vec<u8>, u64, Held), Status>
    where
        M: chunks::Chunked,
        M::Header: DeltaHeader,
    {
        let upload = chunks::receive_limited_by(
            stream,
            DOMAIN,
            |header| limit(self.quota(header.quota_bytes())),
            &self.upload_budget,
            |header| header.expected_length(),
        )
        .await?;
        let quota = self.quota(upload.header.quota_bytes());
        let admitted = upload.header.expected_length().unwrap_or(limit(quota));
        let held = Held::upload(upload.admission, admitted, &self.upload_budget);
        Ok((upload.header, upload.bytes, quota, held))
    }

    /// Admits `bytes` more for a request that holds `held`, within the whole budget ([`Held`]);
    /// OVERLOADED when no room comes within the budget's wait.
    pub(crate) async fn hold(&self, held: &mut Held, bytes: u64) -> Result<(), Status> {
        let left = (self.upload_budget.bytes() / unit()).saturating_sub(held.units);
        if left == 0 {
            return Ok(());
        }
        let units = units(bytes, &self.upload_budget).min(left);
        held.admissions.push(self.admit(units * unit()).await?);
        held.units += units;
        Ok(())
    }

    /// The base's bytes: a retained revision of the caller's own image, or DELTA_BASE_GONE;
    /// admitted against the upload budget into `held` before they are read.
    pub(crate) async fn base(
        &self,
        user: &UserId,
        base: Revision,
        held: &mut Held,
    ) -> Result<(pb::RevisionInfo, Bytes), Status> {
        let download = match self.store.read_revision(user, &base).await {
            Ok(download) => download,
            Err(ReadError::NotFound) => return Err(status::base_gone()),
            Err(ReadError::Storage(err)) => return Err(status::storage_error(err)),
        };
        self.hold(held, download.info.size).await?;
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
        let (header, manifest, quota, mut held) =
            self.receive(&mut stream, max_manifest_len).await?;
        let limits = limits(quota);
        let caller = convert::caller(header.caller, "header.caller")?;
        let base = convert::revision(header.base_revision, "header.base_revision")?;
        let manifest =
            Manifest::parse(&manifest, &limits).map_err(|err| status::delta_error(err, quota))?;
        let (info, base) = self.base(&caller.user, base, &mut held).await?;
        let layout = self
            .pool
            .run(move |_| {
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
        let (header, delta, quota, mut held) = self.receive(&mut stream, max_delta_len).await?;
        let limits = limits(quota);
        let caller = convert::caller(header.caller, "header.caller")?;
        let base = convert::revision(header.base_revision, "header.base_revision")?;
        let (_, base) = self.base(&caller.user, base, &mut held).await?;
        // The assembled image is held until it is sent: admitted at the base's size plus the
        // delta's, which bound it (a literal page arrives in the delta, a copy comes from the base).
        self.hold(&mut held, base.len() as u64 + delta.len() as u64)
            .await?;
        let image = self
            .pool
            .run(move |_| {
                Delta::parse(&delta, &limits, base.len() as u64).and_then(|delta| {
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
        Ok(holding(
            chunks::respond(
                pb::AssembleImageDeltaResponse::header(result),
                Bytes::from(image),
            ),
            held,
        ))
    }

    pub(crate) async fn get_image_delta(
        &self,
        mut stream: Streaming<pb::GetImageDeltaRequest>,
    ) -> Result<ResponseStream<pb::GetImageDeltaResponse>, Status> {
        // The manifest, and then the base, the revision and the delta, each admitted before it is
        // read or built.
        let (header, manifest, quota, mut held) =
            self.receive(&mut stream, max_manifest_len).await?;
        let limits = limits(quota);
        let caller = convert::caller(header.caller, "header.caller")?;
        let revision = header
            .revision
            .map(|token| convert::revision(token, "header.revision"))
            .transpose()?;
        let base = header
            .base_revision
            .map(|token| convert::revision(token, "header.base_revision"))
            .transpose()?;
        let patches = header.accept_patches;
        // The client's pages: named in its manifest, or its file is a revision the origin keeps.
        let source = match base {
            None => Source::Manifest(
                Manifest::parse(&manifest, &limits)
                    .map_err(|err| status::delta_error(err, quota))?,
            ),
            Some(_) if !manifest.is_empty() => {
                return Err(snug_rpc::status::invalid_argument(
                    DOMAIN,
                    "header.base_revision",
                    "a pull names its base revision or sends its manifest, not both",
                ));
            }
            Some(base) => {
                let (_, bytes) = self.base(&caller.user, base, &mut held).await?;
                Source::Base(bytes)
            }
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
        self.hold(&mut held, download.info.size).await?;
        let info = convert::revision_info(download.info);
        let target = download
            .body
            .read_to_vec()
            .await
            .map_err(status::storage_error)?;
        let delta = self
            .pool
            .run(move |_| {
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
        // The delta is held until it is sent; the base and the revision are let go as it is.
        self.hold(&mut held, delta.len() as u64).await?;
        let result = pb::GetImageDeltaResult {
            revision: Some(info),
            size: delta.len() as u64,
        };
        Ok(holding(
            chunks::respond(
                pb::GetImageDeltaResponse::header(result),
                Bytes::from(delta),
            ),
            held,
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

/// `stream` holding what the request `held` until it ends or is dropped (the client took the
/// answer or went away).
fn holding<M: Send + 'static>(stream: ResponseStream<M>, held: Held) -> ResponseStream<M> {
    use futures::StreamExt as _;
    Box::pin(stream.map(move |message| {
        let _held = &held.admissions;
        message
    }))
}
