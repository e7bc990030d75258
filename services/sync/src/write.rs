//! The one place a revision is written (issue 37): PutImage and PutImageDelta end in
//! [`SyncServer::write`], which validates the image, zeroes its free space and stores it.
//!
//! Validation is `snug_schema::validate_sync_image`, run in this process rather than asked of
//! the schema service: the image then crosses one process boundary (the caller's upload), is
//! held once, and no caller can store bytes that skipped the check. The verdict runs on this
//! service's [`BlockingPool`](snug_rpc::blocking::BlockingPool), so a burst queues for a bounded
//! time and a caller that goes away stops its job. The verdict names the free space that still
//! holds bytes (a credential deleted without VACUUM stays there); it is zeroed in the buffer the
//! upload arrived in, and the revision's SHA-256 is of the bytes so stored, which the store
//! computes again and the verdict must agree with. A delta push's image is stored derived from
//! its base (`RevStore::put_held`): the store then hashes and stores only the chunks the base
//! lacks, and the revision is the one a whole PUT of the same bytes makes. Every image written
//! is kept as its user's entry in the `BaseCache`, the base of the delta push that follows.
//!
//! What is held, and admitted against the process's upload budget before it is read, within
//! the caller's share of it: a whole image (its declared length, or the quota when it declares
//! none); for a delta, the delta, the base and the assembled image, at once (`delta.rs`). Every
//! refusal before the store (over the quota, a malformed upload, an image the validation
//! refuses) stores nothing and is logged, not ledgered, as the proto says.

use bytes::Bytes;
use snug_delta::Limits;
use snug_proto::sync::v1 as pb;
use snug_revstore::{BaseImage, Digest, IdempotencyKey, Precondition, PutRequest, RevStore as _};
use snug_rpc::chunks;
use tonic::{Status, Streaming};

use crate::{SyncServer, convert, error_info::DOMAIN, status};

/// Who writes what, on which condition: everything of a write but its bytes.
pub(crate) struct Intent {
    pub(crate) caller: convert::Caller,
    pub(crate) precondition: Precondition,
    pub(crate) idempotency_key: Option<IdempotencyKey>,
    /// The user's own quota, when the request carried one.
    pub(crate) quota_bytes: Option<u64>,
}

impl SyncServer {
    /// PutImage: receives the image whole (bounded by the quota, refused before any chunk when
    /// its declared length is over it), then [`SyncServer::write`]s it.
    pub(crate) async fn put_image(
        &self,
        mut stream: Streaming<pb::PutImageRequest>,
    ) -> Result<pb::PutImageResponse, Status> {
        // Admitted within the user's and the address's shares of the budget: neither one user's
        // uploads nor one address's can hold it all.
        let (header, receiver) = chunks::Receiver::start_for(
            &mut stream,
            DOMAIN,
            |header: &pb::PutImageHeader| self.quota(header.quota_bytes),
            &self.upload_budget,
            |header| header.expected_length,
            |_, quota| status::quota_exceeded(quota),
            |header| {
                header
                    .caller
                    .as_ref()
                    .map(convert::owners)
                    .unwrap_or_default()
            },
        )
        .await?;
        let receiver = receiver.naming_length("header.expected_length");
        let intent = Intent {
            caller: convert::caller(header.caller, "header.caller")?,
            precondition: convert::precondition(header.precondition, "header.precondition")?,
            idempotency_key: convert::idempotency_key(
                header.idempotency_key,
                "header.idempotency_key",
            )?,
            quota_bytes: header.quota_bytes,
        };
        let (image, _admission) = receiver.into_bytes().await?;
        self.write(intent, image, None).await
    }

    /// PutImageDelta: receives the delta, assembles the image from the caller's base (which
    /// the write must also find current) and [`SyncServer::write`]s it; the image never leaves.
    pub(crate) async fn put_image_delta(
        &self,
        stream: Streaming<pb::PutImageDeltaRequest>,
    ) -> Result<pb::PutImageResponse, Status> {
        let pushed = self.receive_push(stream).await?;
        let intent = Intent {
            caller: pushed.caller,
            precondition: Precondition::MustMatch(pushed.base_revision),
            idempotency_key: convert::idempotency_key(
                pushed.header.idempotency_key,
                "header.idempotency_key",
            )?,
            quota_bytes: pushed.header.quota_bytes,
        };
        let _admission = pushed.admission;
        let user = intent.caller.user.clone();
        let built = Built {
            base: &pushed.base,
            sha256: pushed.digest,
        };
        let written = self.write(intent, pushed.image, Some(built)).await;
        // The write kept the new image as the user's base: the old one's buffer can take the
        // next push's image.
        self.bases.recycle(&user, pushed.base);
        written
    }

    /// Validates `image`, zeroes its free space and stores it under `intent`, derived from its
    /// base when it was `built` from one.
    pub(crate) async fn write(
        &self,
        intent: Intent,
        mut image: Vec<u8>,
        built: Option<Built<'_>>,
    ) -> Result<pb::PutImageResponse, Status> {
        let clock = self.clock.clone();
        let sha256 = built.as_ref().map(|built| built.sha256);
        let (verdict, image) = self
            .pool
            .run(move |cancel| {
                let verdict =
                    snug_schema::validate_sync_image_digested(&image, sha256, clock, &|| {
                        !cancel.is_cancelled()
                    });
                if let Ok(verdict) = &verdict {
                    snug_schema::zero_free_space(&mut image, &verdict.free_space);
                }
                (verdict, image)
            })
            .await?;
        let verdict = verdict.map_err(|err| {
            tracing::info!(user = %intent.caller.user, reason = snug_reasons::Reasoned::reason(&err).name, "refused an image");
            status::image_refused(err)
        })?;
        if !verdict.free_space.is_empty() {
            tracing::info!(
                user = %intent.caller.user,
                ranges = verdict.free_space.len(),
                "zeroed free space that still held bytes"
            );
        }
        let user = intent.caller.user.clone();
        let length = image.len() as u64;
        let request = PutRequest {
            user: intent.caller.user,
            precondition: intent.precondition,
            principal: intent.caller.principal,
            idempotency_key: intent.idempotency_key,
            expected_length: Some(length),
            quota_bytes: intent.quota_bytes,
        };
        let image = Bytes::from(image);
        let digest = Digest::from_bytes(verdict.sha256);
        let derived = built.map(|built| (built.base, digest));
        let held = self
            .store
            .put_held(request, image, derived)
            .await
            .map_err(status::put_error)?;
        let outcome = held.outcome;
        if outcome.info.digest != digest {
            // The store hashed other bytes than the verdict did: a bug, never a revision to trust.
            return Err(snug_rpc::status::internal(
                DOMAIN,
                &std::io::Error::other(format!(
                    "the stored revision {} hashes to {:?}, the validated image to {:?}",
                    outcome.info.revision,
                    outcome.info.digest,
                    Digest::from_bytes(verdict.sha256),
                )),
            ));
        }
        if let Some(image) = held.image {
            self.bases.keep(&user, image);
            self.note_base_cache();
        }
        tracing::info!(
            user = %user,
            revision = %outcome.info.revision,
            size = outcome.info.size,
            replayed = outcome.replayed,
            "accepted an image"
        );
        Ok(pb::PutImageResponse {
            revision: Some(convert::revision_info(outcome.info)),
            replayed: outcome.replayed,
        })
    }
}

/// What a delta push's image was built from: its base, and the SHA-256 its assembly verified.
pub(crate) struct Built<'a> {
    pub(crate) base: &'a BaseImage,
    pub(crate) sha256: [u8; 32],
}

/// The delta codec's bounds for an image within `quota`.
pub(crate) fn limits(quota: u64) -> Limits {
    Limits { max_length: quota }
}
