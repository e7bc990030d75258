//! Erasure and usage of one user, written once: [`erase`] as one driver over the reclamation
//! primitives every backend implements ([`crate::reclaim::Pass`] and [`Erasing`]), with its
//! decisions in [`plan`] beside a pass's, and [`usage`] over the reads of the integrity check
//! ([`crate::integrity::Inspect`]).
//!
//! # Erasure (issue 20, point 6)
//!
//! An erasure is a reclamation pass scoped to one user that ignores retention. In one pass,
//! exclusive against commits and new leases like every pass, and in this order:
//!
//! 1. Every publication record of the user ([`Taking::User`]), whatever its age, goes with what
//!    its write staged ([`reclaim::take_orphans`]): a put of that user still streaming is refused
//!    when it next touches its record (it publishes into a record that is gone, or commits
//!    without one: `UNAVAILABLE`, retryable), and nothing it wrote stays; a retry, or a write that
//!    begins after the pass, meets the tombstone (step 2) and is refused. So a put racing an
//!    erasure either landed before the pass began (and is erased with the rest) or is refused.
//! 2. Every history row of the user, retained or not, is journaled (its revision token, with
//!    the opaque user id, as reclamation journals released revisions) and deleted, and the
//!    user's pointer cleared. The user record itself stays as the id's tombstone (step 6).
//! 3. The images only that user's revisions named (no other user's revision names them, and no
//!    other user's put in flight publishes them) are journaled and deleted, leased or not: a
//!    download of the erased image already under way may finish from what it holds open, or end
//!    with an error, but none starts after.
//! 4. The chunks those images named that no remaining image names and no put in flight relies
//!    on are journaled and deleted; a pack file or pack object left holding no chunk is
//!    journaled and deleted whole after the commit, as in a pass. A pack that also holds chunks
//!    another image still names cannot go: the deleted chunks' byte ranges in it are recorded in
//!    the pass ([`Erasing::record_wipes`]) and, after the commit, overwritten with zeros
//!    ([`Pass::wipe`]; the object keeps its name and length, and no byte any image names moves),
//!    each object's record dropped only once its ranges are zeroed. A wipe that fails stays
//!    recorded, is retried by the next erasure and by every reclamation pass, is listed by the
//!    integrity check, and leaves the report incomplete ([`ErasureReport::wipes_pending`]) until
//!    it is done (issue 36). Pack names are the content addresses of the chunk lists they were
//!    written with, and a put writes only chunks the index lacks, so no later put can name (and
//!    so find) a wiped pack, however late its wipe.
//! 5. The personal fields of the user's ledger rows are scrubbed: the principal (who wrote or
//!    was served, which names a person, a device or a token) of every put-ledger and
//!    served-ledger row becomes [`ERASED`]. The rows stay, with their opaque user id, time,
//!    verdict, reason and revision token: the count and outcome of writes is the audit the
//!    ledgers exist for, and none of it says who the user is.
//! 6. The user record becomes the id's tombstone, and every row that stays (the tombstone, the
//!    ledger rows, the journal entries) is renamed from the id to its [`pseudonym`]
//!    ([`Pass::mark_erased`], issue 36), so no file the store keeps holds the id. The id is
//!    refused for good (a backend's user lookup finds the tombstone under the pseudonym; first
//!    contact: `USER_ERASED`; every write: not found, not ledgered), so a write authenticated
//!    before the erasure and finishing after it cannot bring the bytes back under an id no
//!    users directory names; the ledger reads of the id still find its rows. Forgetting who the
//!    id belonged to is the directory's part. A tombstone an earlier release kept under the id
//!    in clear is renamed by the next reclamation pass ([`Pass::tombstones_in_clear`]).
//!
//! The journal entries an erasure writes hold nothing personal: revision tokens (random) and
//! publication ids with the pseudonym, chunk digests, image digests and pack names. Erasing a user with nothing left reports zeros.
//!
//! What "gone" means per backend: the memory store forgets; the embedded store deletes rows with
//! SQLite's `secure_delete` on (freed cells and pages are zeroed, so deleted rows do not linger
//! in free space) and checkpoints the WAL with TRUNCATE after the erasure, so no WAL frame keeps
//! an old page; PostgreSQL deletes rows (the server reclaims dead tuples at its next VACUUM, a
//! database-wide concern outside the store, see the crate docs).

use std::collections::HashSet;

use crate::{
    error::{ReadError, ReclaimError, StorageError},
    integrity::{Inspect, Record},
    reclaim::{
        self, Erasing, Pass, Reclaimer, Taking, finish_wipes, plan, take_orphans, write_journal,
    },
    store::RevStore,
    types::{Digest, ErasureReport, RevisionInfo, Timestamp, UsageReport, UserId},
};

/// The principal an erasure leaves in the user's ledger rows.
pub(crate) const ERASED: &str = "erased";

/// The tables whose rows of an erased user stay, renamed to the [`pseudonym`] (beside the
/// tombstone in `users`): the ledgers and the reclamation journal.
pub(crate) const KEPT_UNDER_PSEUDONYM: [&str; 3] = ["put_ledger", "served", "reclamations"];

/// What a tombstone kept under the id in clear is not: its [`pseudonym`], matched by
/// SQL `LIKE` and length.
pub(crate) const PSEUDONYM_LIKE: (&str, usize) = ("erased-%", 7 + 64);

/// The name an erased user's rows keep (module docs, step 6): `erased-` and the hex SHA-256 of
/// the id, domain-separated. Whoever knows the id can find its tombstone and its ledger rows;
/// the store's files hold no byte of the id itself.
pub(crate) fn pseudonym(user: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::new()
        .chain_update(b"snug erased user\n")
        .chain_update(user.as_bytes())
        .finalize();
    format!("erased-{}", hex::encode(digest))
}

/// Erases `user` in one pass at `now`, in the order of the module docs: each step reads its
/// facts once the step before has applied its deletions (the images the user's history named are
/// unreferenced once it is gone, and so on), asks [`plan`] what goes, then journals and applies.
pub(crate) async fn erase<R: Reclaimer>(
    store: &R,
    user: &UserId,
    now: Timestamp,
) -> Result<ErasureReport, ReclaimError> {
    let user = user.as_str();
    let taking = Taking::User(user);
    let mut report = ErasureReport::default();
    let mut pass = store.begin(taking).await?;

    let orphans = reclaim::orphans(&mut pass, taking).await?;
    let taken = take_orphans(&mut pass, &orphans, now).await?;
    report.publications = orphans.len() as u64;
    report.chunks = taken.chunks;
    let in_flight = taken.in_flight;

    let history = pass.history(user).await?;
    write_journal(&mut pass, now, &plan::erased_revisions(user, &history)).await?;
    pass.delete_history(user).await?;
    report.revisions = history.len() as u64;

    let unreferenced = pass.unreferenced_images(now).await?;
    let images = plan::erased_images(&history, &unreferenced, &in_flight);
    // Read before the images go, which is when their manifests go too.
    let named = pass.named_chunks(&images.items).await?;
    write_journal(&mut pass, now, &images.journal).await?;
    crate::reclaim::delete_images(&mut pass, &images.items).await?;
    report.images = images.items.len() as u64;

    let live = pass.live_chunks().await?;
    let chunks = plan::erased_chunks(&named, &live, &in_flight);
    // Read before the chunk rows go, which is when their places go too.
    let places = pass.places(&chunks.items).await?;
    write_journal(&mut pass, now, &chunks.journal).await?;
    pass.delete_chunks(&chunks.items).await?;
    report.chunks += chunks.items.len() as u64;

    let empty = pass.empty_objects().await?;
    let objects = plan::erased_objects(&places, &empty, &taken.objects, &in_flight);
    report.bytes = objects.bytes;
    pass.unregister_objects(&objects.unregister).await?;
    write_journal(&mut pass, now, &objects.delete.journal).await?;
    report.packs = objects.delete.items.len() as u64;
    report.packs_wiped = objects.wipes.len() as u64;
    pass.record_wipes(&objects.wipes, now).await?;

    report.ledger_rows_scrubbed = pass.scrub_ledgers(user).await?;
    pass.mark_erased(user, &pseudonym(user), now).await?;
    let pending = pass.pending_wipes().await?;

    pass.commit(report.chunks > 0).await?;
    let wipes = finish_wipes(&mut pass, store.faults(), &pending).await;
    report.ranges_wiped = wipes.wiped;
    report.wipes_pending = wipes.pending;
    pass.delete_objects(&objects.delete.items).await?;
    Ok(report)
}

/// `user`'s history (every row) and current revision, read through the store's own listing: what
/// [`usage`] counts, for a backend that keeps no copy of them at hand.
pub(crate) async fn holdings<S: RevStore>(
    store: &S,
    user: &UserId,
) -> Result<(Vec<RevisionInfo>, Option<RevisionInfo>), StorageError> {
    let history = store.list_revisions(user, i64::MAX as usize).await?;
    let current = match store.head(user).await {
        Ok(info) => Some(info),
        Err(ReadError::NotFound) => None,
        Err(ReadError::Storage(e)) => return Err(e),
    };
    Ok((history, current))
}

/// What `user`'s images take ([`UsageReport`]), from the user's history (`history`, every row,
/// and `current`, the current revision's image) and the manifests the store holds. Chunk `i` of
/// an image is `chunk_size` bytes except the last, which holds the rest.
pub(crate) async fn usage<I: Inspect>(
    store: &I,
    history: &[RevisionInfo],
    current: Option<&RevisionInfo>,
    chunk_size: usize,
) -> Result<UsageReport, StorageError> {
    let mut report = UsageReport {
        current_bytes: current.map_or(0, |c| c.size),
        revisions: history.len() as u64,
        retained_revisions: history.iter().filter(|r| r.retained).count() as u64,
        ..UsageReport::default()
    };
    let current_chunks: HashSet<Digest> = match current {
        Some(c) => sized_chunks(store, &c.digest, chunk_size)
            .await?
            .into_iter()
            .map(|(d, _)| d)
            .collect(),
        None => HashSet::new(),
    };
    let earlier: HashSet<Digest> = history
        .iter()
        .filter(|r| r.retained && Some(&r.digest) != current.map(|c| &c.digest))
        .map(|r| r.digest)
        .collect();
    let mut counted: HashSet<Digest> = HashSet::new();
    for image in earlier {
        for (chunk, len) in sized_chunks(store, &image, chunk_size).await? {
            if !current_chunks.contains(&chunk) && counted.insert(chunk) {
                report.history_bytes += len;
            }
        }
    }
    Ok(report)
}

/// The chunks of an image with their lengths; none when the store has no readable record of it
/// (the integrity check's business, not usage's).
async fn sized_chunks<I: Inspect>(
    store: &I,
    image: &Digest,
    chunk_size: usize,
) -> Result<Vec<(Digest, u64)>, StorageError> {
    let Record::Image(image) = store.image(image).await? else {
        return Ok(Vec::new());
    };
    let chunk_size = chunk_size as u64;
    Ok(image
        .manifest
        .into_iter()
        .enumerate()
        .map(|(i, chunk)| {
            let start = i as u64 * chunk_size;
            (chunk, image.size.saturating_sub(start).min(chunk_size))
        })
        .collect())
}
