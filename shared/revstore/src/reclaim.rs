//! The reclamation pass, written once: the order in which every backend lists, reads facts,
//! decides, journals, commits and deletes, as one driver ([`run`]) over the primitives each
//! backend implements.
//!
//! Like [`crate::protocol`] for puts, the order is the part that makes reclamation safe, so no
//! backend spells it out; and like [`crate::cas`] for the commit, every decision is a pure
//! function of facts ([`plan`]), so no backend takes one either. Each step reads its facts
//! through [`Pass`], asks [`plan`] what goes, then journals and applies exactly that:
//!
//! 1. [`Reclaimer::list`]: the objects at rest (pack files, pack objects), complete or nothing
//!    ([`ReclaimError::IncompleteListing`], [`ReclaimError::UnreadableCandidate`]). It comes
//!    before any publication record is read: a put names each object in its record before the
//!    object appears, so an object listed here that belongs to a put in flight is named by a
//!    record read below.
//! 2. [`Reclaimer::begin`]: the pass, exclusive against commits and new leases (a transaction,
//!    a lock), so the facts it reads cannot change under its decisions.
//! 3. Publication records marked abandoned (a write that failed) or older than the orphan period
//!    ([`Cutoffs::orphaned`]: a crash's) go ([`plan::orphans`]), and with them what their writes
//!    staged that nothing else names ([`plan::staged`]: objects, chunk rows); the rest are the
//!    puts in flight, and what they name ([`InFlight`]: bases, images, objects, and the stored
//!    chunks a put reuses from the moment it publishes) is protected from here on. [`discard`]
//!    is this step alone, for one abandoned record, run as soon as a write fails.
//! 4. Retained revisions the retention rule releases ([`plan::revisions`]), then images no
//!    retained revision, lease or put in flight refers to ([`plan::images`]), then chunks no
//!    remaining image names ([`plan::chunks`]), then registered objects left holding no chunk
//!    and listed objects nothing registers or names once they are older than the orphan period
//!    ([`plan::objects`]). Every decision is journaled in the pass before the deletion it
//!    records.
//! 5. [`Pass::commit`]; then every byte range an erasure recorded and could not wipe yet is
//!    wiped ([`finish_wipes`]: a range goes from the record only once it is zeroed), and only
//!    then does [`Pass::delete_objects`] delete the objects, so a crash in between leaves
//!    unregistered objects the next pass takes, never a row that names a deleted object. The
//!    pass stays exclusive until the deletions are done: objects are named by their content,
//!    and a put that wrote (or found) an object of the same name in between would lose it.
//!
//! Why facts are read step by step rather than all at once: later facts are what the earlier
//! deletions, applied in the same transaction, leave. An image is unreferenced only once the
//! revisions naming it are released; a chunk is live only while an image that is still there
//! names it; an object is empty only once its chunk rows are gone; and the puts in flight are
//! the records left after the orphans' are deleted. Reading them up front would decide on a store
//! the pass is about to change, so each step reads, plans and applies before the next reads.
//!
//! What stays in the backends is storage: how each fact is read (SQL, memory), how each
//! statement is written, and how an object is deleted or wiped.

use std::{
    collections::{BTreeMap, HashSet},
    future::Future,
};

use crate::{
    config::{FaultPoint, Faults, Retention},
    error::{ReclaimError, StorageError},
    manifest,
    retention::{Candidate, Cutoffs},
    types::{Digest, ReclaimReport, ReclaimedKind, Timestamp},
};

pub(crate) mod plan;

use plan::Entry;

/// An object at rest, as listed.
#[derive(Clone, Debug)]
pub(crate) struct Listed {
    pub(crate) name: String,
    /// When it was written (its modification time).
    pub(crate) written: Timestamp,
}

/// A publication record, as a pass sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) id: String,
    pub(crate) user: String,
}

/// A publication record as read, before the pass decides whether to take it
/// ([`plan::orphans`]).
#[derive(Clone, Debug)]
pub(crate) struct Publication {
    pub(crate) record: Record,
    /// When its write started.
    pub(crate) started_at: Timestamp,
    /// Whether its write is known not to land (it failed, or was refused at its commit).
    pub(crate) abandoned: bool,
    /// The objects the record names (pack files, pack objects).
    pub(crate) objects: Vec<String>,
}

/// A publication record a pass takes (abandoned, or past the orphan period), and what its write
/// staged that may have nothing else naming it.
#[derive(Clone, Debug)]
pub(crate) struct Orphan {
    pub(crate) record: Record,
    /// When its write started.
    pub(crate) started_at: Timestamp,
    /// The objects the record names (pack files, pack objects).
    pub(crate) objects: Vec<String>,
    /// The chunk rows its write created ([`Pass::created_chunks`]).
    pub(crate) chunks: Vec<Digest>,
}

/// Which publication records a pass takes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Taking<'a> {
    /// Every abandoned record, and every record started at or before the cutoff (a crash's).
    Orphans(Timestamp),
    /// The one abandoned record with this id (a write that just failed).
    Abandoned(&'a str),
    /// Every record of this user, whatever its age or state: an erasure ([`crate::erase`]).
    User(&'a str),
}

impl<'a> Taking<'a> {
    /// The records to read for it, by key alone; which of them are taken is [`plan::orphans`]'s.
    pub(crate) fn scope(self) -> Scope<'a> {
        match self {
            Taking::Orphans(_) => Scope::Every,
            Taking::Abandoned(id) => Scope::Record(id),
            Taking::User(user) => Scope::User(user),
        }
    }
}

/// Which publication records [`Pass::publications`] reads: a key, never a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope<'a> {
    /// Every record.
    Every,
    /// The record with this id, if any.
    Record(&'a str),
    /// The records of this user.
    User(&'a str),
}

/// What the puts in flight name, and so protect.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    /// (user, revision) pairs the puts build on.
    pub(crate) bases: HashSet<(String, String)>,
    /// Images the puts publish.
    pub(crate) images: HashSet<Digest>,
    /// Objects the puts write.
    pub(crate) objects: HashSet<String>,
    /// Stored chunks the puts reuse (recorded when each publishes) or stage as their bytes
    /// stream in, which their images will name once they commit.
    pub(crate) chunks: HashSet<Digest>,
}

/// A retained revision past the newest `keep_newest`, with the facts the retention rule weighs
/// except `base_in_flight`, which the plan fills from [`InFlight`].
#[derive(Clone, Debug)]
pub(crate) struct Retained {
    pub(crate) user: String,
    /// Its place in the user's history (the backend's key for it).
    pub(crate) seq: i64,
    pub(crate) revision: String,
    pub(crate) candidate: Candidate,
}

/// Where a chunk is stored: its length, and the object and offset holding it where chunks live
/// in objects (pack files, pack objects); `None` where the chunk row holds the bytes itself.
#[derive(Clone, Debug)]
pub(crate) struct Place {
    pub(crate) len: u32,
    pub(crate) object: Option<(String, u64)>,
}

/// An image no retained revision refers to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unreferenced {
    pub(crate) digest: Digest,
    pub(crate) leased: bool,
}

/// A chunk row, and how it came to be written.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChunkRow {
    pub(crate) digest: Digest,
    /// When a put wrote the row as its bytes streamed in, before any record could name it, so
    /// that a put still streaming may rely on it (PostgreSQL keeping the bytes in rows).
    /// `None` where rows are written by commits, which wait for the pass (pack files, pack
    /// objects), or where a put's record names every row it stages (memory, through
    /// [`InFlight::chunks`]).
    pub(crate) streamed_at: Option<Timestamp>,
}

/// A backend's side of a pass outside its transaction.
pub(crate) trait Reclaimer {
    /// A pass serves reclamation ([`Pass`]) and erasure ([`Erasing`]) alike.
    type Pass<'a>: Erasing
    where
        Self: 'a;

    /// The test hooks of this store ([`FaultPoint`]).
    fn faults(&self) -> &Faults;

    /// Every object at rest, or an error and nothing.
    fn list(&self) -> impl Future<Output = Result<Vec<Listed>, ReclaimError>>;

    /// Starts the pass: exclusive against commits and new leases until it commits or drops.
    /// `taking` says what it is for; a pass that takes only what a failed write staged deletes
    /// no image, so caches of images can stay.
    fn begin(
        &self,
        taking: Taking<'_>,
    ) -> impl Future<Output = Result<Self::Pass<'_>, StorageError>>;
}

/// A backend's side of a pass inside its transaction: typed fact readers and statements, and no
/// decision (those are [`plan`]'s). Grouped by the step of the module docs that uses them; the
/// statements apply exactly the lists they are given. Dropping a pass without [`Pass::commit`]
/// changes nothing.
pub(crate) trait Pass {
    // Step 3: publication records.

    /// The publication records of `scope`, as they are (abandoned or not, whatever their age).
    fn publications(
        &mut self,
        scope: Scope<'_>,
    ) -> impl Future<Output = Result<Vec<Publication>, StorageError>>;
    /// The chunk rows the write of `record` created as its bytes streamed in (only where chunk
    /// rows are written then: PostgreSQL without an object store, and memory); read before the
    /// record goes.
    fn created_chunks(
        &mut self,
        record: &Record,
    ) -> impl Future<Output = Result<Vec<Digest>, StorageError>>;
    fn delete_records(
        &mut self,
        records: &[Record],
    ) -> impl Future<Output = Result<(), StorageError>>;
    /// What the remaining publication records name, and every chunk row a put still streaming
    /// relies on.
    fn in_flight(&mut self) -> impl Future<Output = Result<InFlight, StorageError>>;
    /// Of `chunks` (rows an orphan's write created at or after `since`), those an image names:
    /// one committed by another write that found them stored.
    fn named_by_images(
        &mut self,
        chunks: &[Digest],
        since: Timestamp,
    ) -> impl Future<Output = Result<HashSet<Digest>, StorageError>>;

    // Step 4: revisions and images.

    /// Retained revisions with at least `keep_newest` newer ones: a bound on what is read, as
    /// no other can qualify ([`crate::retention::reclaimable`] decides on each).
    fn retained(
        &mut self,
        keep_newest: u64,
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<Retained>, StorageError>>;
    /// Marks the revisions not retained (their history rows stay).
    fn release(
        &mut self,
        revisions: &[Retained],
        now: Timestamp,
    ) -> impl Future<Output = Result<(), StorageError>>;
    /// The images no retained revision refers to, each with whether a live lease holds it.
    fn unreferenced_images(
        &mut self,
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<Unreferenced>, StorageError>>;
    /// The stored manifest row of `image` (`manifest.rs`), if the image is stored.
    fn manifest_row(
        &mut self,
        image: &Digest,
    ) -> impl Future<Output = Result<Option<manifest::Row>, StorageError>>;
    /// The images whose manifest rows are kept against `image`, with their rows.
    fn kept_against(
        &mut self,
        image: &Digest,
    ) -> impl Future<Output = Result<Vec<(Digest, manifest::Row)>, StorageError>>;
    /// Replaces the manifest row of the stored image `image`.
    fn set_manifest_row(
        &mut self,
        image: &Digest,
        row: &manifest::Row,
    ) -> impl Future<Output = Result<(), StorageError>>;
    /// Deletes the image record of `image` (see [`delete_images`]).
    fn delete_image(&mut self, image: &Digest) -> impl Future<Output = Result<(), StorageError>>;

    // Step 4: chunks.

    /// Every chunk row.
    fn chunk_rows(&mut self) -> impl Future<Output = Result<Vec<ChunkRow>, StorageError>>;
    /// The chunks the remaining images name.
    fn live_chunks(&mut self) -> impl Future<Output = Result<HashSet<Digest>, StorageError>>;
    fn delete_chunks(
        &mut self,
        chunks: &[Digest],
    ) -> impl Future<Output = Result<(), StorageError>>;

    // Step 4: objects.

    /// Every registered object.
    fn registered_objects(&mut self)
    -> impl Future<Output = Result<HashSet<String>, StorageError>>;
    /// Registered objects that hold no chunk any more.
    fn empty_objects(&mut self) -> impl Future<Output = Result<Vec<String>, StorageError>>;
    /// Drops the registration of objects (the objects themselves go after the commit).
    fn unregister_objects(
        &mut self,
        names: &[String],
    ) -> impl Future<Output = Result<(), StorageError>>;

    // Tombstones (a pass renames an earlier release's; an erasure writes its own).

    /// The ids of tombstones still kept under the id in clear (written by an earlier release),
    /// which every pass renames to their pseudonym.
    fn tombstones_in_clear(&mut self) -> impl Future<Output = Result<Vec<String>, StorageError>>;
    /// Marks the user erased at `at` and renames every row of the user that stays (the record,
    /// now its tombstone; ledger rows; journal entries) to `pseudonym` (erasure, step 6); a user
    /// lookup of the id then finds the tombstone. Idempotent, and renames an earlier release's
    /// tombstone kept under the id.
    fn mark_erased(
        &mut self,
        user: &str,
        pseudonym: &str,
        at: Timestamp,
    ) -> impl Future<Output = Result<(), StorageError>>;

    // The journal, the commit, and what follows it (step 5).

    /// Appends to the reclamation journal.
    fn journal(
        &mut self,
        at: Timestamp,
        kind: ReclaimedKind,
        subjects: &[String],
        user: Option<&str>,
    ) -> impl Future<Output = Result<(), StorageError>>;
    /// Every range still to wipe, by object: this pass's and those earlier ones left.
    fn pending_wipes(
        &mut self,
    ) -> impl Future<Output = Result<BTreeMap<String, Vec<(u64, u32)>>, StorageError>>;
    /// Makes the pass durable; `chunks_deleted` says whether any chunk row went. The pass stays
    /// exclusive until [`Pass::delete_objects`].
    fn commit(&mut self, chunks_deleted: bool) -> impl Future<Output = Result<(), StorageError>>;
    /// Overwrites `ranges` of `object` with zeros, after [`Pass::commit`] and before
    /// [`Pass::delete_objects`]; an object that no longer exists has nothing left to wipe.
    /// Backends with no objects have nothing to wipe.
    fn wipe(
        &mut self,
        object: &str,
        ranges: &[(u64, u32)],
    ) -> impl Future<Output = Result<(), StorageError>>;
    /// Forgets the recorded ranges of `object`, once wiped (after [`Pass::commit`]).
    fn wiped(&mut self, object: &str) -> impl Future<Output = Result<(), StorageError>>;
    /// Deletes the objects the committed pass journaled, then ends the pass. Still exclusive:
    /// object names are content addresses, and a put may not name (and so reuse) an object
    /// until its deletion is done. A deletion that fails leaves an object the next pass finds
    /// unregistered.
    fn delete_objects(self, names: &[String]) -> impl Future<Output = Result<(), ReclaimError>>;
}

/// The readers and statements only an erasure uses ([`crate::erase`]), apart so that what a
/// reclamation pass relies on stays the smaller [`Pass`].
pub(crate) trait Erasing: Pass {
    /// The image of every history row of `user`, retained or not, with its revision token.
    fn history(
        &mut self,
        user: &str,
    ) -> impl Future<Output = Result<Vec<(String, Digest)>, StorageError>>;
    /// Deletes every history row of `user` and clears its pointer; the user's record stays, as
    /// a user with no image.
    fn delete_history(&mut self, user: &str) -> impl Future<Output = Result<(), StorageError>>;
    /// The distinct chunks the images name (before the images go).
    fn named_chunks(
        &mut self,
        images: &[Digest],
    ) -> impl Future<Output = Result<HashSet<Digest>, StorageError>>;
    /// Where each of `chunks` is stored (before the rows go).
    fn places(
        &mut self,
        chunks: &[Digest],
    ) -> impl Future<Output = Result<Vec<Place>, StorageError>>;
    /// Replaces the principal of every put-ledger and served-ledger row of `user` with
    /// [`crate::erase::ERASED`]; returns how many rows changed.
    fn scrub_ledgers(&mut self, user: &str) -> impl Future<Output = Result<u64, StorageError>>;
    /// Records byte ranges of deleted chunks to overwrite with zeros in objects that stay (they
    /// hold other chunks still named), in the pass's transaction, so that they are wiped even if
    /// the wipe after the commit fails or the process dies.
    fn record_wipes(
        &mut self,
        ranges: &BTreeMap<String, Vec<(u64, u32)>>,
        at: Timestamp,
    ) -> impl Future<Output = Result<(), StorageError>>;
}

/// How the wipes after a commit went: ranges overwritten, and ranges left for a later pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Wipes {
    pub(crate) wiped: u64,
    pub(crate) pending: u64,
}

/// Wipes every pending range, one object at a time, after the pass's commit; an object whose
/// wipe fails keeps its ranges recorded, for the next erasure or pass (issue 36: a failed wipe
/// is never forgotten).
pub(crate) async fn finish_wipes<P: Pass>(
    pass: &mut P,
    faults: &Faults,
    pending: &BTreeMap<String, Vec<(u64, u32)>>,
) -> Wipes {
    let mut wipes = Wipes::default();
    for (object, ranges) in pending {
        let wiped = if faults.wipe_fails() {
            Err(StorageError::unavailable("the wipe was made to fail"))
        } else {
            match pass.wipe(object, ranges).await {
                Ok(()) => pass.wiped(object).await,
                Err(err) => Err(err),
            }
        };
        match wiped {
            Ok(()) => wipes.wiped += ranges.len() as u64,
            Err(err) => {
                tracing::warn!(object, reason = err.reason().name, error = %err, "could not wipe an erased chunk's bytes; the next reclamation pass retries");
                wipes.pending += ranges.len() as u64;
            }
        }
    }
    wipes
}

/// Writes journal entries, in order, before the statement they record.
pub(crate) async fn write_journal<P: Pass>(
    pass: &mut P,
    at: Timestamp,
    entries: &[Entry],
) -> Result<(), StorageError> {
    for entry in entries {
        pass.journal(at, entry.kind, &entry.subjects, entry.user.as_deref())
            .await?;
    }
    Ok(())
}

/// One reclamation pass at `now` under `retention`, in the order of the module docs.
pub(crate) async fn run<R: Reclaimer>(
    store: &R,
    retention: &Retention,
    now: Timestamp,
) -> Result<ReclaimReport, ReclaimError> {
    let cutoffs = Cutoffs::at(now, retention);
    let mut report = ReclaimReport::default();
    let listing = store.list().await?;
    let taking = Taking::Orphans(cutoffs.orphaned_by);
    let mut pass = store.begin(taking).await?;

    let orphans = orphans(&mut pass, taking).await?;
    let taken = take_orphans(&mut pass, &orphans, now).await?;
    report.publications = orphans.len() as u64;
    report.chunks = taken.chunks;
    let in_flight = taken.in_flight;

    let retained = pass.retained(retention.keep_newest as u64, now).await?;
    let released = plan::revisions(retained, &in_flight, retention, &cutoffs);
    write_journal(&mut pass, now, &released.journal).await?;
    pass.release(&released.items, now).await?;
    report.revisions = released.items.len() as u64;

    // Read after the release: the released revisions refer to their images no more.
    let unreferenced = pass.unreferenced_images(now).await?;
    let images = plan::images(&unreferenced, &in_flight);
    write_journal(&mut pass, now, &images.journal).await?;
    delete_images(&mut pass, &images.items).await?;
    report.images = images.items.len() as u64;

    // Read after the images went: their chunks are live no more.
    let rows = pass.chunk_rows().await?;
    let live = pass.live_chunks().await?;
    let chunks = plan::chunks(&rows, &live, &in_flight, &cutoffs);
    write_journal(&mut pass, now, &chunks.journal).await?;
    pass.delete_chunks(&chunks.items).await?;
    report.chunks += chunks.items.len() as u64;

    // Read after the chunk rows went: the objects that held only them are empty now. Which
    // objects are registered is read before the empty ones are unregistered; the plan dooms
    // those whichever way, so the order changes nothing.
    let empty = pass.empty_objects().await?;
    let registered = pass.registered_objects().await?;
    let objects = plan::objects(&plan::ObjectFacts {
        empty: &empty,
        staged: &taken.objects,
        registered: &registered,
        listing: &listing,
        in_flight: &in_flight,
        cutoffs: &cutoffs,
    });
    pass.unregister_objects(&objects.unregister).await?;
    write_journal(&mut pass, now, &objects.delete.journal).await?;
    report.packs = objects.delete.items.len() as u64;
    // An earlier release's tombstones, kept under the id in clear, take their pseudonym.
    for user in pass.tombstones_in_clear().await? {
        pass.mark_erased(&user, &crate::erase::pseudonym(&user), now)
            .await?;
    }
    let pending = pass.pending_wipes().await?;

    pass.commit(report.chunks > 0).await?;
    // An earlier erasure's wipes that failed, retried while the pass is still exclusive.
    let wipes = finish_wipes(&mut pass, store.faults(), &pending).await;
    report.ranges_wiped = wipes.wiped;
    report.wipes_pending = wipes.pending;
    store.faults().reached(FaultPoint::BeforeObjectDeletion);
    pass.delete_objects(&objects.delete.items).await?;
    Ok(report)
}

/// Reclaims at once what the abandoned write of publication record `id` staged: the record,
/// the objects it names that no stored image registers and no other record names, and the chunk
/// rows its write created that nothing else names. The same order as a pass (journal, commit,
/// then delete objects), over the one record; nothing when the record is not (or no longer)
/// there marked abandoned.
pub(crate) async fn discard<R: Reclaimer>(
    store: &R,
    id: &str,
    now: Timestamp,
) -> Result<ReclaimReport, ReclaimError> {
    let taking = Taking::Abandoned(id);
    let mut pass = store.begin(taking).await?;
    let orphans = orphans(&mut pass, taking).await?;
    if orphans.is_empty() {
        // Dropping the pass changes nothing.
        return Ok(ReclaimReport::default());
    }
    let taken = take_orphans(&mut pass, &orphans, now).await?;
    let objects = plan::Doomed::objects(taken.objects);
    write_journal(&mut pass, now, &objects.journal).await?;
    pass.commit(taken.chunks > 0).await?;
    pass.delete_objects(&objects.items).await?;
    Ok(ReclaimReport {
        publications: orphans.len() as u64,
        chunks: taken.chunks,
        packs: objects.items.len() as u64,
        ..ReclaimReport::default()
    })
}

/// The publication records a pass takes for `taking` ([`plan::orphans`]), each with the chunk
/// rows its write created.
pub(crate) async fn orphans<P: Pass>(
    pass: &mut P,
    taking: Taking<'_>,
) -> Result<Vec<Orphan>, StorageError> {
    let publications = pass.publications(taking.scope()).await?;
    let mut orphans = Vec::new();
    for publication in plan::orphans(taking, publications) {
        let chunks = pass.created_chunks(&publication.record).await?;
        orphans.push(Orphan {
            record: publication.record,
            started_at: publication.started_at,
            objects: publication.objects,
            chunks,
        });
    }
    Ok(orphans)
}

/// What taking orphans did.
pub(crate) struct Taken {
    /// What the remaining records name.
    pub(crate) in_flight: InFlight,
    /// The orphans' objects that nothing registers or names any more, to delete after the
    /// commit (journaled by the caller with the rest of its objects).
    pub(crate) objects: Vec<String>,
    /// Chunk rows deleted.
    pub(crate) chunks: u64,
}

/// Journals and deletes the orphans' records, then journals and deletes the chunk rows their
/// writes created that nothing else names, and picks out their objects that nothing registers
/// or names ([`plan::staged`]).
pub(crate) async fn take_orphans<P: Pass>(
    pass: &mut P,
    orphans: &[Orphan],
    now: Timestamp,
) -> Result<Taken, ReclaimError> {
    let records = plan::records(orphans);
    write_journal(pass, now, &records.journal).await?;
    pass.delete_records(&records.items).await?;
    // Read once the orphans' records are gone: what the others name is what stays protected.
    let in_flight = pass.in_flight().await?;
    let registered = pass.registered_objects().await?;
    let staged = plan::staged(orphans, &in_flight, &registered);
    let mut chunks = 0;
    if let Some(since) = staged.since {
        let named = pass.named_by_images(&staged.chunks, since).await?;
        let dead = plan::staged_chunks(staged.chunks, &named);
        write_journal(pass, now, &dead.journal).await?;
        pass.delete_chunks(&dead.items).await?;
        chunks = dead.items.len() as u64;
    }
    Ok(Taken {
        in_flight,
        objects: staged.objects,
        chunks,
    })
}

/// Deletes the records of `images`, each after the images kept against it are rebased
/// (`manifest.rs`), so no stored image ever stands on a row that is gone. Each step leaves the
/// rows consistent, so a pass broken off between them loses nothing.
pub(crate) async fn delete_images<P: Pass>(
    pass: &mut P,
    images: &[Digest],
) -> Result<(), StorageError> {
    for image in images {
        let Some(parent) = pass.manifest_row(image).await? else {
            continue;
        };
        for (child, row) in pass.kept_against(image).await? {
            let rebased =
                manifest::rebase(image, &parent, &row).ok_or_else(|| StorageError::Corrupt {
                    object: format!("image {child}"),
                })?;
            pass.set_manifest_row(&child, &rebased).await?;
        }
        pass.delete_image(image).await?;
    }
    Ok(())
}
