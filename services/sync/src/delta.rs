//! Delta sync (issue 21): PlanImageDelta, AssembleImageDelta and GetImageDelta over
//! `snug-delta`'s codec.
//!
//! A manifest is matched only against the caller's own revision it names (read with
//! `RevStore::read_revision`, which denies exactly as a download does), never against the
//! store's chunks, which are shared across users: no answer depends on another user's images.
//! A sparse manifest (`snug_delta::Sparse`) asks PlanImageDelta for the base's own manifest
//! sparse against it, so a client that knew nothing of the base learns it for a few KiB and
//! plans itself; with a base, GetImageDelta takes one as the client's file (that revision but
//! for the groups named in full).
//! A delta push is assembled and written by PutImageDelta (`write.rs`); the deprecated
//! AssembleImageDelta assembles and answers the image, storing nothing. A push's base is the
//! image this replica wrote last for the user when it is that revision (the `BaseCache`: the
//! bytes the store took, under the addresses it committed), else read with
//! `RevStore::read_base`, which keeps the addresses its chunks were checked against; either way
//! the write stores only what the base lacks (issue 38 point 3: `RevStore::put_held`).
//! Pages are patched only for a client that says it rebuilds them: one whose manifest carries
//! shapes, or a pull with `accept_patches`; compressed against the base's pages only for a pull
//! with `accept_compressed` too, against a base, and then only against pages the client's file
//! holds as the base's (all, with an empty manifest; those its sparse manifest names by the
//! base's hashes or ids otherwise).
//! Every request is bounded by the quota: the manifest or delta upload by what an image within
//! the quota can need, the page count by the quota, and the work by one pass over the base and
//! one over the image, which run as jobs of the service's pool (bounded, and stopped for a
//! caller that went away).
//!
//! What a request holds is admitted against the process's upload budget, within the caller's
//! share of it, once and before its upload is read (issue 36 point 7): the upload, the base, the
//! revision it reads and what it builds (a delta: at most `Limits::max_delta_len` of the
//! revision; an image: the length a delta's first bytes declare). Admitted piecemeal, requests
//! that each held part and waited for the rest would wait on each other until every one was
//! refused. The sizes are known before any byte is read: a base and a revision from the store,
//! an image from [`Delta::geometry`]. Once built, the request keeps only what it still holds
//! (`Admission::shrink_to`: a push, the image and its base, which the write derives from) until
//! the answer is sent or the write is done.

use std::sync::Arc;

use bytes::Bytes;
use snug_delta::{Delta, Manifest, Source as Pages, Sparse, page_size_of, plan};
use snug_proto::sync::v1 as pb;
use snug_revstore::{BaseImage, ImageDownload, ReadError, RevStore as _, Revision, RevisionInfo};
use snug_rpc::{
    budget::Admission,
    chunks::{self, Chunked, Opened, ResponseStream},
};
use tonic::{Status, Streaming};

use crate::{SyncServer, convert, error_info::DOMAIN, status, write::limits};

/// What the service reads from a delta header: whose request it is, the user's own quota (issue
/// 20: set by the hub's users directory) and the payload's declared length.
pub(crate) trait DeltaHeader {
    fn caller(&self) -> Option<pb::Caller>;
    fn quota_bytes(&self) -> Option<u64>;
    fn expected_length(&self) -> Option<u64>;
}

macro_rules! delta_header {
    ($($header:ty),*) => {$(
        impl DeltaHeader for $header {
            fn caller(&self) -> Option<pb::Caller> {
                self.caller.clone()
            }

            fn quota_bytes(&self) -> Option<u64> {
                self.quota_bytes
            }

            fn expected_length(&self) -> Option<u64> {
                self.expected_length
            }
        }
    )*};
}

delta_header!(
    pb::PlanImageDeltaHeader,
    pb::GetImageDeltaHeader,
    pb::PutImageDeltaHeader
);

impl DeltaHeader for pb::AssembleImageDeltaHeader {
    fn caller(&self) -> Option<pb::Caller> {
        self.caller.clone()
    }

    fn quota_bytes(&self) -> Option<u64> {
        self.quota_bytes
    }

    fn expected_length(&self) -> Option<u64> {
        None
    }
}

/// A delta push's header: the base it names.
pub(crate) trait PushHeader: DeltaHeader {
    fn base_revision(&self) -> String;
}

macro_rules! push_header {
    ($($header:ty),*) => {$(
        impl PushHeader for $header {
            fn base_revision(&self) -> String {
                self.base_revision.clone()
            }
        }
    )*};
}

push_header!(pb::PutImageDeltaHeader, pb::AssembleImageDeltaHeader);

/// The most bytes a manifest of an image within `quota` can take.
fn max_manifest_len(quota: u64) -> u64 {
    limits(quota).max_manifest_len()
}

/// The most bytes a delta for an image within `quota` can take.
fn max_delta_len(quota: u64) -> u64 {
    limits(quota).max_delta_len()
}

/// A delta push received and assembled against its base: the image PutImageDelta writes and
/// AssembleImageDelta answers.
pub(crate) struct Pushed<H> {
    pub(crate) header: H,
    pub(crate) caller: convert::Caller,
    pub(crate) base_revision: Revision,
    /// The image the delta builds.
    pub(crate) image: Vec<u8>,
    /// The base it was built from, as the store read it or this replica wrote it.
    pub(crate) base: Arc<BaseImage>,
    /// The SHA-256 the delta declares for it, which assembly checked.
    pub(crate) digest: [u8; 32],
    /// The image's and the base's share of the budget (the delta's is given back).
    pub(crate) admission: Admission,
}

impl SyncServer {
    /// Waits for a delta RPC's header; its payload (a manifest or a delta) may hold at most
    /// `limit(quota)` bytes, the quota being the header's own or the configured one. Returns
    /// the quota and the caller with the upload, not admitted yet.
    async fn open<'a, M>(
        &self,
        stream: &'a mut Streaming<M>,
        limit: fn(u64) -> u64,
    ) -> Result<(M::Header, Opened<'a, M>, u64, convert::Caller), Status>
    where
        M: Chunked,
        M::Header: DeltaHeader,
    {
        let (header, opened) = Opened::open(
            stream,
            DOMAIN,
            |header: &M::Header| limit(self.quota(header.quota_bytes())),
            &self.upload_budget,
            |header| header.expected_length(),
            snug_rpc::status::too_large,
        )
        .await?;
        let quota = self.quota(header.quota_bytes());
        let caller = convert::caller(header.caller(), "header.caller")?;
        Ok((header, opened, quota, caller))
    }

    /// A retained revision of the caller's own image, opened to be read as a base, or
    /// DELTA_BASE_GONE.
    async fn open_base(
        &self,
        caller: &convert::Caller,
        base: &Revision,
    ) -> Result<ImageDownload, Status> {
        self.store
            .read_revision(&caller.user, base)
            .await
            .map_err(base_unread)
    }

    /// A retained revision of the caller's own image, without its bytes (what
    /// [`SyncServer::open_base`] would open), or DELTA_BASE_GONE.
    async fn head_base(
        &self,
        caller: &convert::Caller,
        base: &Revision,
    ) -> Result<RevisionInfo, Status> {
        self.store
            .head_revision(&caller.user, base)
            .await
            .map_err(base_unread)
    }

    /// Receives a delta push and assembles its image: learns its base's size, the image's length
    /// from the delta's first bytes, admits the delta, the base and the image at once, then
    /// reads the delta and the base and builds the image on the service's pool.
    pub(crate) async fn receive_push<M>(
        &self,
        mut stream: Streaming<M>,
    ) -> Result<Pushed<M::Header>, Status>
    where
        M: Chunked,
        M::Header: PushHeader,
    {
        let (header, mut opened, quota, caller) = self.open(&mut stream, max_delta_len).await?;
        let limits = limits(quota);
        let base_revision = convert::revision(header.base_revision(), "header.base_revision")?;
        let base_size = self.head_base(&caller, &base_revision).await?.size;
        let prefix = opened.peek(Delta::GEOMETRY_PREFIX).await?;
        let geometry =
            Delta::geometry(prefix, &limits).map_err(|err| status::delta_error(err, quota))?;
        let receiver = opened
            .admit(&caller.owners, base_size.saturating_add(geometry.length))
            .await?;
        let (delta, mut admission) = receiver.into_bytes().await?;
        let kept = self.bases.get(&caller.user, &base_revision);
        let source = if kept.is_some() { "kept" } else { "read" };
        let base = match kept {
            Some(base) => base,
            // Gone if reclaimed since its head was read.
            None => Arc::new(
                self.store
                    .read_base(&caller.user, &base_revision)
                    .await
                    .map_err(base_unread)?,
            ),
        };
        snug_rpc::metrics::global()
            .sync_delta_bases
            .get_or_create(&snug_rpc::metrics::BaseLabels { source })
            .inc();
        let bases = self.bases.clone();
        let built = self
            .pool
            .run(move |_| {
                let built =
                    Delta::parse(&delta, &limits, base.bytes().len() as u64).and_then(|delta| {
                        let buffer = bases.buffer(delta.layout.geometry.length as usize);
                        Ok((
                            delta.layout.digest,
                            delta.assemble_into(base.bytes(), buffer)?,
                        ))
                    });
                (built, base)
            })
            .await?;
        let ((digest, image), base) = match built {
            (Ok(built), base) => (built, base),
            (Err(err), _) => return Err(status::delta_error(err, quota)),
        };
        admission.shrink_to((image.len() + base.bytes().len()) as u64);
        tracing::info!(user = %caller.user, size = image.len(), "assembled an image from a delta");
        Ok(Pushed {
            header,
            caller,
            base_revision,
            image,
            base,
            digest,
            admission,
        })
    }

    pub(crate) async fn plan_image_delta(
        &self,
        mut stream: Streaming<pb::PlanImageDeltaRequest>,
    ) -> Result<ResponseStream<pb::PlanImageDeltaResponse>, Status> {
        let (header, opened, quota, caller) = self.open(&mut stream, max_manifest_len).await?;
        let limits = limits(quota);
        let base = convert::revision(header.base_revision, "header.base_revision")?;
        let base = self.open_base(&caller, &base).await?;
        // The manifest, the base and the answer: a plan has at most a run (13 bytes) for each
        // page the manifest names (an id of 8 bytes or more each), so under twice the manifest;
        // the base's own manifest, sparse against a summary, at most the manifest bound of the
        // base's length.
        let beside = base
            .info
            .size
            .saturating_add(opened.bound().saturating_mul(2))
            .saturating_add(
                snug_delta::Limits {
                    max_length: base.info.size,
                }
                .max_manifest_len(),
            );
        let receiver = opened.admit(&caller.owners, beside).await?;
        let (manifest, mut admission) = receiver.into_bytes().await?;
        let manifest =
            Asked::parse(&manifest, &limits).map_err(|err| status::delta_error(err, quota))?;
        let info = convert::revision_info(base.info);
        let base = read_whole(base.body).await?;
        let (encoded, pages) = self
            .pool
            .run(move |_| {
                let (page_size, shapes) = manifest.asks();
                let theirs = Manifest::describe(&base, page_size, shapes)?;
                Ok(match manifest {
                    // The client plans itself once it knows the base's pages: the groups its
                    // summary does not name rightly are sent in full.
                    Asked::Sparse(summary) => {
                        let answer = Sparse::against(&theirs, &summary);
                        (answer.encode(), answer.pages_in_full())
                    }
                    Asked::Whole(manifest) => {
                        let layout = plan(&manifest, &theirs.source());
                        (layout.encode(), layout.literal_count())
                    }
                })
            })
            .await?
            .map_err(|err| status::delta_error(err, quota))?;
        let encoded = Bytes::from(encoded);
        admission.shrink_to(encoded.len() as u64);
        let result = pb::PlanImageDeltaResult {
            base: Some(info),
            literal_pages: pages,
            size: encoded.len() as u64,
        };
        Ok(holding(
            chunks::respond(pb::PlanImageDeltaResponse::header(result), encoded),
            admission,
        ))
    }

    pub(crate) async fn assemble_image_delta(
        &self,
        stream: Streaming<pb::AssembleImageDeltaRequest>,
    ) -> Result<ResponseStream<pb::AssembleImageDeltaResponse>, Status> {
        let mut pushed = self.receive_push(stream).await?;
        // Only the image is answered: the base goes now.
        drop(pushed.base);
        pushed.admission.shrink_to(pushed.image.len() as u64);
        let result = pb::AssembleImageDeltaResult {
            size: pushed.image.len() as u64,
            sha256: Bytes::copy_from_slice(&pushed.digest),
        };
        Ok(holding(
            chunks::respond(
                pb::AssembleImageDeltaResponse::header(result),
                Bytes::from(pushed.image),
            ),
            pushed.admission,
        ))
    }

    pub(crate) async fn get_image_delta(
        &self,
        mut stream: Streaming<pb::GetImageDeltaRequest>,
    ) -> Result<ResponseStream<pb::GetImageDeltaResponse>, Status> {
        let (header, opened, quota, caller) = self.open(&mut stream, max_manifest_len).await?;
        let limits = limits(quota);
        let revision = header
            .revision
            .map(|token| convert::revision(token, "header.revision"))
            .transpose()?;
        let base = header
            .base_revision
            .map(|token| convert::revision(token, "header.base_revision"))
            .transpose()?;
        let patches = header.accept_patches;
        let compressed = patches && header.accept_compressed;
        // What the request will hold, known before its manifest is read: the base, the revision
        // (its size from the store, which records nothing until it is served) and the delta.
        let base = match &base {
            Some(base) => Some(self.open_base(&caller, base).await?),
            None => None,
        };
        let target = match &revision {
            None => self.store.head(&caller.user).await,
            Some(revision) => self.store.head_revision(&caller.user, revision).await,
        }
        .map_err(status::read_error)?;
        let beside = base
            .as_ref()
            .map_or(0, |base| base.info.size)
            .saturating_add(target.size)
            .saturating_add(crate::write::limits(target.size).max_delta_len());
        let receiver = opened.admit(&caller.owners, beside).await?;
        let (manifest, mut admission) = receiver.into_bytes().await?;
        // The client's pages: named in its manifest, or its file is a revision the origin keeps,
        // or that revision but for the groups its sparse manifest names in full.
        let source = match base {
            None => Source::Manifest(
                Manifest::parse(&manifest, &limits)
                    .map_err(|err| status::delta_error(err, quota))?,
            ),
            Some(base) if manifest.is_empty() => {
                Source::Base(Bytes::from(read_whole(base.body).await?))
            }
            Some(base) => {
                let sparse = Sparse::parse(&manifest, &limits)
                    .map_err(|err| status::delta_error(err, quota))?;
                Source::Sparse(sparse, Bytes::from(read_whole(base.body).await?))
            }
        };
        // The revision the head named, so what is served is what was admitted.
        let download = self
            .store
            .get_revision(&caller.user, &target.revision, &caller.principal)
            .await
            .map_err(status::read_error)?;
        let info = convert::revision_info(download.info);
        let target = read_whole(download.body).await?;
        let delta = self
            .pool
            .run(move |_| {
                // The revision's pages are named at the client's page size (or, against a base, the
                // revision's own), so the client's file is the source whatever its own length.
                // With `held` (the base, and which of the client's pages are its bytes), literal
                // pages are compressed against those.
                let against_manifest = |theirs: &Manifest,
                                        held: Option<(&[u8], &[bool])>|
                 -> Result<Delta, snug_delta::DeltaError> {
                    let page_size = theirs.geometry.page_size;
                    let ours = Manifest::describe(&target, page_size, theirs.shapes.is_some())?;
                    let layout = plan(&ours, &theirs.source());
                    Ok(match held {
                        Some((base, held)) => {
                            Delta::build_compressed_held(layout, &target, base, held)
                        }
                        None => Delta::build(layout, &target, None),
                    })
                };
                let delta = match &source {
                    Source::Manifest(theirs) => against_manifest(theirs, None)?,
                    Source::Sparse(sparse, base) => {
                        let known =
                            Manifest::describe(base, sparse.geometry.page_size, sparse.shaped)?;
                        let theirs = sparse.expand(&known)?;
                        // The client's pages with the base's ids are the base's bytes.
                        let held: Vec<bool> = (0..theirs.ids.len())
                            .map(|p| known.ids.get(p) == Some(&theirs.ids[p]))
                            .collect();
                        against_manifest(&theirs, compressed.then_some((&base[..], &held[..])))?
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
                        match compressed {
                            true => Delta::build_compressed(layout, &target, base),
                            false => Delta::build(layout, &target, bytes),
                        }
                    }
                };
                Ok(delta.encode())
            })
            .await?
            .map_err(|err| status::delta_error(err, quota))?;
        // The delta is held until it is sent; the base and the revision are gone.
        admission.shrink_to(delta.len() as u64);
        let result = pb::GetImageDeltaResult {
            revision: Some(info),
            size: delta.len() as u64,
        };
        Ok(holding(
            chunks::respond(
                pb::GetImageDeltaResponse::header(result),
                Bytes::from(delta),
            ),
            admission,
        ))
    }
}

/// What a plan is asked for: a layout for a whole manifest, or the base's pages for a summary.
enum Asked {
    Whole(Manifest),
    Sparse(Sparse),
}

impl Asked {
    fn parse(bytes: &[u8], limits: &snug_delta::Limits) -> Result<Self, snug_delta::DeltaError> {
        if Sparse::is_sparse(bytes) {
            Sparse::parse(bytes, limits).map(Self::Sparse)
        } else {
            Manifest::parse(bytes, limits).map(Self::Whole)
        }
    }

    /// The page size and whether shapes are asked for: the base is named the same way.
    fn asks(&self) -> (u32, bool) {
        match self {
            Self::Whole(m) => (m.geometry.page_size, m.shapes.is_some()),
            Self::Sparse(s) => (s.geometry.page_size, s.shaped),
        }
    }
}

/// A base that cannot be read: one that is not the caller's retained revision is gone (an
/// unknown, reclaimed or other user's revision alike), anything else the store's error.
fn base_unread(err: ReadError) -> Status {
    match err {
        ReadError::NotFound => status::base_gone(),
        ReadError::Storage(err) => status::storage_error(err),
    }
}

/// A download's bytes, whole: what a delta is matched against or built from.
async fn read_whole(body: snug_revstore::ImageBody) -> Result<Vec<u8>, Status> {
    body.read_to_vec().await.map_err(status::storage_error)
}

/// What a pull's delta is made against.
enum Source {
    /// The pages the client's manifest names.
    Manifest(Manifest),
    /// The pages of the origin's copy of a revision, but where the client's sparse manifest
    /// names them in full.
    Sparse(Sparse, Bytes),
    /// The origin's own copy of the revision the client's file is.
    Base(Bytes),
}

/// `stream` holding the request's `admission` until it ends or is dropped (the client took the
/// answer or went away).
fn holding<M: Send + 'static>(
    stream: ResponseStream<M>,
    admission: Admission,
) -> ResponseStream<M> {
    use futures::StreamExt as _;
    Box::pin(stream.map(move |message| {
        let _held = &admission;
        message
    }))
}
