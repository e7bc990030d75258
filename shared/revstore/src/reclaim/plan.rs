//! The decisions of a reclamation pass and of an erasure, as pure functions: the facts a pass read
//! (plain data) in, what it releases, deletes and journals out.
//!
//! Like [`crate::cas`] for the commit, keeping every rule here is what makes the backends
//! reclaim the same things: a backend only reads facts and applies lists, and the driver
//! ([`super::run`], [`crate::erase::erase`]) calls one function here per step, in the order of
//! [`super`]'s module docs. The protective rules, each decided in one place:
//!
//! - a publication record goes when abandoned or past the orphan period ([`orphans`]);
//! - a retained revision stays while it is among the newest, current, within its grace period,
//!   leased or the base of a put in flight ([`revisions`], through
//!   [`crate::retention::reclaimable`]);
//! - an image stays while it is leased or a put in flight publishes it ([`images`]; an erasure
//!   ignores leases, [`erased_images`]);
//! - a chunk stays while a remaining image names it, a put in flight relies on it, or it was
//!   streamed in by a put within the orphan period ([`chunks`], [`erased_chunks`],
//!   [`staged_chunks`]);
//! - an object stays while it is registered or a put in flight names it; an unnamed listed one
//!   goes only past the orphan period, an orphan's own whatever its age ([`staged`],
//!   [`objects`], [`erased_objects`]);
//! - an object name is deleted (and journaled) once however many reasons doom it.
//!
//! Orders are kept as the facts came (or sorted, where an erasure sorts), so journals read the
//! same on every backend given the same facts.

use std::collections::{BTreeMap, HashSet};

use super::{ChunkRow, InFlight, Listed, Orphan, Place, Publication, Record, Retained, Taking};
use crate::{
    config::Retention,
    retention::{self, Candidate, Cutoffs},
    types::{Digest, ReclaimedKind, Timestamp},
};

#[cfg(test)]
mod tests;

/// One journal statement: `subjects` of `kind`, on behalf of `user` where they are one user's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) kind: ReclaimedKind,
    pub(crate) subjects: Vec<String>,
    pub(crate) user: Option<String>,
}

/// What one step takes, and the journal entries that record it, written before its statement.
#[derive(Clone, Debug)]
pub(crate) struct Doomed<T> {
    /// What goes, in the order the statement is given it.
    pub(crate) items: Vec<T>,
    pub(crate) journal: Vec<Entry>,
}

impl Doomed<Digest> {
    /// Digests journaled under `kind` (images, chunks), on no user's behalf.
    fn digests(kind: ReclaimedKind, items: Vec<Digest>) -> Self {
        let journal = journal_of(kind, items.iter().map(Digest::to_hex).collect(), None);
        Self { items, journal }
    }
}

impl Doomed<String> {
    /// Objects journaled as packs (their deletion follows the commit).
    pub(crate) fn objects(items: Vec<String>) -> Self {
        let journal = journal_of(ReclaimedKind::Pack, items.clone(), None);
        Self { items, journal }
    }
}

/// One entry, or none for no subjects (a journal statement of nothing writes nothing).
fn journal_of(kind: ReclaimedKind, subjects: Vec<String>, user: Option<&str>) -> Vec<Entry> {
    if subjects.is_empty() {
        return Vec::new();
    }
    vec![Entry {
        kind,
        subjects,
        user: user.map(str::to_owned),
    }]
}

/// Appends `name` to `names` unless it is there already.
fn push_once(names: &mut Vec<String>, seen: &mut HashSet<String>, name: &str) {
    if seen.insert(name.to_owned()) {
        names.push(name.to_owned());
    }
}

// Step 3: publication records and what their writes staged.

/// The records `taking` takes of those read for it: abandoned or started at or before the
/// cutoff for a pass; the one abandoned record with the id for a discard; every record of the
/// user for an erasure. The key is checked again, so a reader that read more changes nothing.
pub(crate) fn orphans(taking: Taking<'_>, publications: Vec<Publication>) -> Vec<Publication> {
    publications
        .into_iter()
        .filter(|p| match taking {
            Taking::Orphans(cutoff) => p.abandoned || p.started_at <= cutoff,
            Taking::Abandoned(id) => p.abandoned && p.record.id == id,
            Taking::User(user) => p.record.user == user,
        })
        .collect()
}

/// The orphans' records, each journaled as a publication of its user.
pub(crate) fn records(orphans: &[Orphan]) -> Doomed<Record> {
    Doomed {
        items: orphans.iter().map(|o| o.record.clone()).collect(),
        journal: orphans
            .iter()
            .flat_map(|o| {
                journal_of(
                    ReclaimedKind::Publication,
                    vec![o.record.id.clone()],
                    Some(&o.record.user),
                )
            })
            .collect(),
    }
}

/// What the orphans' writes staged that may go, once their records are gone.
#[derive(Clone, Debug, Default)]
pub(crate) struct Staged {
    /// Their objects that nothing registers and no put in flight names, each once: deleted
    /// after the commit whatever their age (their records said what they were).
    pub(crate) objects: Vec<String>,
    /// The chunk rows their writes created that no put in flight relies on, each once: they go
    /// unless an image names them ([`staged_chunks`]).
    pub(crate) chunks: Vec<Digest>,
    /// The earliest start among the orphans, from which an image could name one of `chunks`;
    /// `None` when there is no such chunk to ask about.
    pub(crate) since: Option<Timestamp>,
}

/// What the orphans' writes staged that may go: see [`Staged`].
pub(crate) fn staged(
    orphans: &[Orphan],
    in_flight: &InFlight,
    registered: &HashSet<String>,
) -> Staged {
    let mut objects = Vec::new();
    let mut seen = HashSet::new();
    for name in orphans.iter().flat_map(|o| &o.objects) {
        if !registered.contains(name) && !in_flight.objects.contains(name) {
            push_once(&mut objects, &mut seen, name);
        }
    }
    let mut chunks = Vec::new();
    let mut seen = HashSet::new();
    for chunk in orphans.iter().flat_map(|o| &o.chunks) {
        if !in_flight.chunks.contains(chunk) && seen.insert(*chunk) {
            chunks.push(*chunk);
        }
    }
    let since = if chunks.is_empty() {
        None
    } else {
        orphans.iter().map(|o| o.started_at).min()
    };
    Staged {
        objects,
        chunks,
        since,
    }
}

/// Of the staged chunk rows, those no image names ([`super::Pass::named_by_images`]).
pub(crate) fn staged_chunks(candidates: Vec<Digest>, named: &HashSet<Digest>) -> Doomed<Digest> {
    let dead = candidates
        .into_iter()
        .filter(|c| !named.contains(c))
        .collect();
    Doomed::digests(ReclaimedKind::Chunk, dead)
}

// Step 4: a pass.

/// The retained revisions the retention rule releases, a put in flight building on one
/// protecting it; journaled per user, users in order.
pub(crate) fn revisions(
    retained: Vec<Retained>,
    in_flight: &InFlight,
    retention: &Retention,
    cutoffs: &Cutoffs,
) -> Doomed<Retained> {
    let released: Vec<Retained> = retained
        .into_iter()
        .filter(|r| {
            let candidate = Candidate {
                base_in_flight: in_flight
                    .bases
                    .contains(&(r.user.clone(), r.revision.clone())),
                ..r.candidate
            };
            retention::reclaimable(&candidate, retention, cutoffs)
        })
        .collect();
    let mut by_user: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for r in &released {
        by_user.entry(&r.user).or_default().push(r.revision.clone());
    }
    let journal = by_user
        .into_iter()
        .flat_map(|(user, revisions)| journal_of(ReclaimedKind::Revision, revisions, Some(user)))
        .collect();
    Doomed {
        items: released,
        journal,
    }
}

/// The unreferenced images neither leased nor published by a put in flight.
pub(crate) fn images(unreferenced: &[super::Unreferenced], in_flight: &InFlight) -> Doomed<Digest> {
    let doomed = unreferenced
        .iter()
        .filter(|i| !i.leased && !in_flight.images.contains(&i.digest))
        .map(|i| i.digest)
        .collect();
    Doomed::digests(ReclaimedKind::Image, doomed)
}

/// Whether a put still streaming may rely on `row` without a record naming it: it streamed in
/// within the orphan period.
fn may_be_streaming(row: &ChunkRow, cutoffs: &Cutoffs) -> bool {
    row.streamed_at.is_some_and(|at| !cutoffs.orphaned(at))
}

/// The chunk rows no remaining image names and no put in flight relies on.
pub(crate) fn chunks(
    rows: &[ChunkRow],
    live: &HashSet<Digest>,
    in_flight: &InFlight,
    cutoffs: &Cutoffs,
) -> Doomed<Digest> {
    let dead = rows
        .iter()
        .filter(|row| {
            !may_be_streaming(row, cutoffs)
                && !live.contains(&row.digest)
                && !in_flight.chunks.contains(&row.digest)
        })
        .map(|row| row.digest)
        .collect();
    Doomed::digests(ReclaimedKind::Chunk, dead)
}

/// What [`objects`] decides on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ObjectFacts<'a> {
    /// Registered objects that hold no chunk (read after this pass's chunk rows went).
    pub(crate) empty: &'a [String],
    /// The orphans' objects nothing registers or names ([`Staged::objects`]).
    pub(crate) staged: &'a [String],
    /// Every registered object, `empty` among them.
    pub(crate) registered: &'a HashSet<String>,
    /// Every object at rest, listed before the pass began.
    pub(crate) listing: &'a [Listed],
    pub(crate) in_flight: &'a InFlight,
    pub(crate) cutoffs: &'a Cutoffs,
}

/// What happens to objects: registrations dropped in the pass, objects deleted after it.
#[derive(Clone, Debug)]
pub(crate) struct Objects {
    pub(crate) unregister: Vec<String>,
    pub(crate) delete: Doomed<String>,
}

/// The empty objects no put in flight names (unregistered now), the orphans' objects, and the
/// listed objects nothing registers or names once past the orphan period
/// ([`crate::retention::unnamed_object_reclaimable`]); each name once.
pub(crate) fn objects(facts: &ObjectFacts<'_>) -> Objects {
    let in_flight = &facts.in_flight.objects;
    let unregister: Vec<String> = facts
        .empty
        .iter()
        .filter(|name| !in_flight.contains(*name))
        .cloned()
        .collect();
    let mut delete = Vec::new();
    let mut seen = HashSet::new();
    for name in unregister.iter().chain(facts.staged) {
        push_once(&mut delete, &mut seen, name);
    }
    for listed in facts.listing {
        let named = facts.registered.contains(&listed.name) || in_flight.contains(&listed.name);
        // An empty object unregistered above is doomed already; `seen` keeps it once.
        if retention::unnamed_object_reclaimable(listed.written, named, facts.cutoffs) {
            push_once(&mut delete, &mut seen, &listed.name);
        }
    }
    Objects {
        unregister,
        delete: Doomed::objects(delete),
    }
}

// Erasure ([`crate::erase`]): a pass scoped to one user that ignores retention and leases.

/// The user's history rows, journaled as the user's revisions (every row goes, retained or
/// not).
pub(crate) fn erased_revisions(user: &str, history: &[(String, Digest)]) -> Vec<Entry> {
    let tokens = history.iter().map(|(token, _)| token.clone()).collect();
    journal_of(ReclaimedKind::Revision, tokens, Some(user))
}

/// The images only the user's history named (unreferenced once it went) that no put in flight
/// publishes, leased or not, sorted.
pub(crate) fn erased_images(
    history: &[(String, Digest)],
    unreferenced: &[super::Unreferenced],
    in_flight: &InFlight,
) -> Doomed<Digest> {
    let theirs: HashSet<&Digest> = history.iter().map(|(_, digest)| digest).collect();
    let mut images: Vec<Digest> = unreferenced
        .iter()
        .map(|i| i.digest)
        .filter(|d| theirs.contains(d) && !in_flight.images.contains(d))
        .collect();
    images.sort();
    Doomed::digests(ReclaimedKind::Image, images)
}

/// The chunks the erased images named that no remaining image names and no put in flight
/// relies on, sorted.
pub(crate) fn erased_chunks(
    named: &HashSet<Digest>,
    live: &HashSet<Digest>,
    in_flight: &InFlight,
) -> Doomed<Digest> {
    let mut dead: Vec<Digest> = named
        .iter()
        .filter(|c| !live.contains(c) && !in_flight.chunks.contains(c))
        .copied()
        .collect();
    dead.sort();
    Doomed::digests(ReclaimedKind::Chunk, dead)
}

/// What happens to objects in an erasure, and to the bytes of the erased chunks in them.
#[derive(Clone, Debug)]
pub(crate) struct ErasedObjects {
    pub(crate) unregister: Vec<String>,
    pub(crate) delete: Doomed<String>,
    /// The erased chunks' byte ranges in objects that stay, to overwrite with zeros.
    pub(crate) wipes: BTreeMap<String, Vec<(u64, u32)>>,
    /// The erased chunks' bytes, wherever they were stored.
    pub(crate) bytes: u64,
}

/// Of the objects left empty, those that held the erased chunks (emptying others is a pass's
/// business) and no put in flight names, then the orphans' objects; every other object that
/// held an erased chunk keeps its name and has the chunk's range wiped.
pub(crate) fn erased_objects(
    places: &[Place],
    empty: &[String],
    staged: &[String],
    in_flight: &InFlight,
) -> ErasedObjects {
    let held: HashSet<&str> = places
        .iter()
        .filter_map(|p| p.object.as_ref().map(|(name, _)| name.as_str()))
        .collect();
    let unregister: Vec<String> = empty
        .iter()
        .filter(|name| held.contains(name.as_str()) && !in_flight.objects.contains(*name))
        .cloned()
        .collect();
    let mut delete = Vec::new();
    let mut seen = HashSet::new();
    for name in unregister.iter().chain(staged) {
        push_once(&mut delete, &mut seen, name);
    }
    let mut wipes: BTreeMap<String, Vec<(u64, u32)>> = BTreeMap::new();
    for place in places {
        if let Some((name, offset)) = &place.object
            && !seen.contains(name)
        {
            wipes
                .entry(name.clone())
                .or_default()
                .push((*offset, place.len));
        }
    }
    ErasedObjects {
        unregister,
        delete: Doomed::objects(delete),
        wipes,
        bytes: places.iter().map(|p| u64::from(p.len)).sum(),
    }
}
