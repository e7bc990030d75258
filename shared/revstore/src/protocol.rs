//! The store's protocol, written once: the order of a put and of a restore, as one driver over the
//! few storage primitives every backend implements.
//!
//! A put follows Coven's publication order, and every backend follows it because none of them
//! spells it out: [`put`] and [`restore`] call the backend's [`Primitives`] in this order and
//! nothing else does.
//!
//! 1. [`Primitives::begin`]: in one durable step, load the user's [`Facts`], let the early
//!    decision ([`Intent::early`]) refuse a put that cannot succeed (the refusal is ledgered in the
//!    same step), or write the publication record that marks the put as in flight.
//! 2. Stream the body in ([`chunk::ingest`]: quota, SHA-256, chunking) into the backend's
//!    [`Primitives::Sink`]. A put derived from a base ([`put_held`], from [`read_base`] or an
//!    earlier [`Held`] image) hands the sink the chunks it holds unchanged from the base with
//!    their checked addresses.
//! 3. [`Primitives::publish`]: record the image in the publication record, then make the put's new
//!    objects durable, create-once (an occupied address must already hold the same bytes).
//! 4. [`Primitives::read_back`]: read every object the image needs back and check each chunk
//!    against its address ([`chunk::check`]); nothing moves the pointer before this holds.
//! 5. [`Primitives::commit`]: one transaction deletes the publication record (a put whose record
//!    reclamation took as an orphan may not land), loads the facts again, takes the decision
//!    ([`Proposal::decide`]: the pure rule of [`crate::cas`]), and on acceptance creates the image
//!    record create-once, swaps the pointer and appends the history and ledger rows
//!    ([`Proposal::accepted`] names the new revision).
//! 6. Whatever fails after step 1 goes to [`Primitives::abandon`], which marks the publication
//!    record abandoned and ledgers the refusal if it is one ([`PutError::is_ledgered`]), then to
//!    [`Primitives::discard`], which reclaims at once what the write staged (a compare-and-swap
//!    loser's whole image, say); only a crash leaves staged bytes to the orphan period.
//!
//! The early decision also admits the write against the user's limit on staged bytes
//! ([`cas::admit`]): every unfinished write holds its declared size (or the quota) in its
//! publication record until it lands or is reclaimed.
//!
//! A restore is the same from step 4 on, with the retained revision's image as the source
//! (copy-forward: the bytes are never touched, only a new revision names them).
//!
//! The primitives are deliberately small and say nothing about order: a backend is its storage
//! layout plus these steps, and the conformance suite checks each backend feeds the decisions the
//! right facts.
//!
//! The transactions of steps 1, 5 and 6 are written here too, once ([`begin_in`],
//! [`commit_in`], [`abandon_in`]), over one backend transaction's typed statements ([`WriteTx`],
//! as garage splits `IDb`/`ITx`): a backend opens its transaction (with its own locks and
//! durability), hands its statements to the function, and commits or rolls back as the function
//! says. What to read, what to decide and what to write, in which order, is never a backend's.

use std::{future::Future, io};

use bytes::Bytes;
use futures::Stream;

use crate::{
    cas::{self, Accepted, Facts},
    chunk::{self, ChunkSink, Ingested},
    config::{FaultPoint, Faults},
    error::{PutError, ReadError, StorageError},
    store::{BaseImage, Held, RevStore},
    types::{
        Digest, IdempotencyKey, Precondition, Principal, PutOutcome, PutRequest, RestoreRequest,
        Revision, RevisionInfo, Timestamp, UserId,
    },
    write_health::WriteHealth,
};

pub(crate) use cas::Decision;

/// Why a put whose publication record was taken from under it is refused (retryable): past the
/// orphan period, or by an erasure of its user ([`crate::erase`]).
pub(crate) const RECORD_GONE: &str =
    "the put's publication record is gone (past the orphan period, or its user was erased); retry";

/// What a put or restore asks for, before any byte is read.
#[derive(Clone, Debug)]
pub(crate) struct Intent {
    pub(crate) user: UserId,
    pub(crate) precondition: Precondition,
    pub(crate) key: Option<IdempotencyKey>,
    pub(crate) principal: Principal,
    /// The image the write publishes when it is known up front (a restore's source), so that
    /// reclamation protects it from the publication record on.
    pub(crate) image: Option<Digest>,
    /// The bytes the write may stage until it lands (its declared size, the quota when
    /// undeclared, nothing for a restore), recorded in its publication record.
    pub(crate) reserve: u64,
    /// The most bytes the user's unfinished writes may hold together.
    pub(crate) staged_limit: u64,
}

impl Intent {
    fn of_put<P: Primitives>(store: &P, request: &PutRequest) -> Self {
        Self {
            user: request.user.clone(),
            precondition: request.precondition.clone(),
            key: request.idempotency_key.clone(),
            principal: request.principal.clone(),
            image: None,
            reserve: request.expected_length.unwrap_or(quota(store, request)),
            staged_limit: store.staged_limit(),
        }
    }

    /// The refusal of a write that cannot succeed whatever its bytes, or that the user's
    /// unfinished writes leave no room for; `facts` is `None` for a user the store has never seen.
    pub(crate) fn early(&self, facts: Option<&Facts>) -> Option<PutError> {
        match facts {
            None => Some(PutError::NotFound),
            Some(facts) => cas::early(&self.precondition, facts)
                .or_else(|| cas::admit(facts.staged, self.reserve, self.staged_limit)),
        }
    }

    /// The revision the writer builds on.
    pub(crate) fn base(&self) -> Option<&Revision> {
        self.precondition.base()
    }
}

/// What a commit makes current.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Image {
    pub(crate) digest: Digest,
    pub(crate) size: u64,
    pub(crate) storage_version: Option<u32>,
}

/// Where the image of a commit comes from.
#[derive(Debug)]
pub(crate) enum Source<S> {
    /// Streamed by this put: what [`Primitives::publish`] produced.
    Streamed(S),
    /// A retained revision's image (restore).
    Existing { restored_from: Revision },
}

/// What [`Primitives::read_back`] checks.
#[derive(Debug)]
pub(crate) enum ReadBack<'a, S> {
    /// Every chunk of a streamed put, wherever it is stored.
    Staged(&'a S),
    /// Every chunk of a stored image.
    Image(&'a Digest),
}

/// A write ready to commit.
#[derive(Debug)]
pub(crate) struct Proposal<S> {
    pub(crate) intent: Intent,
    pub(crate) image: Image,
    pub(crate) source: Source<S>,
}

impl<S> Proposal<S> {
    /// The decision, taken inside the commit transaction with the facts as they are there.
    pub(crate) fn decide(&self, facts: Option<&Facts>) -> Decision {
        match facts {
            None => Decision::Refuse(PutError::NotFound),
            Some(facts) => cas::decide(&self.intent.precondition, facts, &self.image.digest),
        }
    }

    /// The revision an accepted write becomes: the user's `seq`-th, accepted `at`.
    pub(crate) fn accepted(&self, seq: u64, at: Timestamp) -> Result<RevisionInfo, StorageError> {
        Ok(RevisionInfo {
            revision: Revision::generate(seq)?,
            digest: self.image.digest,
            size: self.image.size,
            accepted_at: at,
            principal: self.intent.principal.clone(),
            storage_version: self.image.storage_version,
            base: self.intent.base().cloned(),
            restored_from: self.restored_from().cloned(),
            retained: true,
        })
    }

    /// The revision a restore copies forward.
    pub(crate) fn restored_from(&self) -> Option<&Revision> {
        match &self.source {
            Source::Existing { restored_from } => Some(restored_from),
            Source::Streamed(_) => None,
        }
    }
}

/// Who a user is to a write, as its transaction reads the user's pointer row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UserRow {
    /// Never provisioned.
    Unknown,
    /// Erased (issue 36): the id is refused for good, like one never seen, and nothing about the
    /// attempt is ledgered (the ledger would name whoever tried, after the user's erasure).
    Erased,
    /// Provisioned; `current` is the sequence number of the current revision, if any.
    Known { current: Option<u64> },
}

/// One backend transaction as the protocol writes through it: typed statements and nothing else.
/// The backend chose the transaction's isolation, locks and durability when it opened it; each
/// statement may block (the embedded store's) or await (PostgreSQL's). The futures carry no
/// `Send` bound: the embedded and memory stores drive them on the thread holding their lock,
/// and PostgreSQL's are `Send` by what they hold, which a caller sees through the concrete type.
pub(crate) trait WriteTx {
    /// The backend's id of a publication record.
    type Publication: Send + Sync;
    /// A streamed put's objects, as the backend registers them in the image record.
    type Staged: Send + Sync;

    /// The chunk digests, in order, of a streamed put's image.
    fn manifest(staged: &Self::Staged) -> &[Digest];

    /// The user's pointer row.
    fn user(&mut self, user: &UserId) -> impl Future<Output = Result<UserRow, StorageError>>;

    /// Announces, inside the commit's transaction, that the user's current revision is now
    /// `revision` ([`crate::revisions`]): a store whose replicas hear one another's commits
    /// through the database does it here, so the announcement exists exactly when the commit
    /// does. A store of one process announces after the commit instead
    /// ([`Primitives::committed`]).
    fn announce(
        &mut self,
        _user: &UserId,
        _revision: &Revision,
    ) -> impl Future<Output = Result<(), StorageError>> {
        async { Ok(()) }
    }

    /// Writes the user's pointer row, with no image; `false` when another transaction wrote it
    /// first.
    fn insert_user(
        &mut self,
        user: &UserId,
        at: Timestamp,
    ) -> impl Future<Output = Result<bool, StorageError>>;

    /// The user's revision with sequence number `seq`.
    fn revision_at(
        &mut self,
        user: &UserId,
        seq: u64,
    ) -> impl Future<Output = Result<Option<Accepted>, StorageError>>;

    /// Whether `revision` is one of the user's, retained or not.
    fn has_revision(
        &mut self,
        user: &UserId,
        revision: &Revision,
    ) -> impl Future<Output = Result<bool, StorageError>>;

    /// The user's newest revision written with idempotency key `key`.
    fn keyed(
        &mut self,
        user: &UserId,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<Accepted>, StorageError>>;

    /// What the user's revision `revision` records.
    fn revision_info(
        &mut self,
        user: &UserId,
        revision: &Revision,
    ) -> impl Future<Output = Result<Option<RevisionInfo>, StorageError>>;

    /// The bytes the user's unfinished writes hold against their limit.
    fn staged_bytes(&mut self, user: &UserId) -> impl Future<Output = Result<u64, StorageError>>;

    /// Writes the publication record of a write that begins at `at`.
    fn insert_publication(
        &mut self,
        intent: &Intent,
        at: Timestamp,
    ) -> impl Future<Output = Result<Self::Publication, StorageError>>;

    /// Deletes a publication record; `false` when it is gone already (taken by a pass).
    fn delete_publication(
        &mut self,
        publication: &Self::Publication,
    ) -> impl Future<Output = Result<bool, StorageError>>;

    /// Marks a publication record abandoned at `at` (its write will not land).
    fn abandon_publication(
        &mut self,
        publication: &Self::Publication,
        at: Timestamp,
    ) -> impl Future<Output = Result<(), StorageError>>;

    /// The size and manifest of the stored image `digest`, if there is one.
    fn stored_image(
        &mut self,
        digest: &Digest,
    ) -> impl Future<Output = Result<Option<(u64, Vec<Digest>)>, StorageError>>;

    /// Records a streamed put's image, not stored before, with where its chunks are. `against`
    /// is the user's current image, which a backend may keep the new manifest against
    /// (`manifest.rs`).
    fn insert_image(
        &mut self,
        image: &Image,
        staged: &Self::Staged,
        against: Option<&Digest>,
        at: Timestamp,
    ) -> impl Future<Output = Result<(), PutError>>;

    /// For a streamed put whose image is already stored: registers the chunks it wrote afresh
    /// in place of damaged stored ones, moving the index and every image that holds them to the
    /// fresh copies (issue 36 point 8). Nothing to do for a put that found no damage.
    fn heal_stored(
        &mut self,
        staged: &Self::Staged,
        at: Timestamp,
    ) -> impl Future<Output = Result<(), PutError>>;

    /// The sequence number of the user's last revision (0 before the first).
    fn last_seq(&mut self, user: &UserId) -> impl Future<Output = Result<u64, StorageError>>;

    /// Appends a revision to the user's history.
    fn append_revision(
        &mut self,
        user: &UserId,
        seq: u64,
        info: &RevisionInfo,
        key: Option<&IdempotencyKey>,
    ) -> impl Future<Output = Result<(), StorageError>>;

    /// Makes the revision `seq` the user's current one.
    fn set_current(
        &mut self,
        user: &UserId,
        seq: u64,
    ) -> impl Future<Output = Result<(), StorageError>>;

    /// Appends a verdict to the put ledger.
    fn record_verdict(
        &mut self,
        user: &UserId,
        principal: &Principal,
        at: Timestamp,
        verdict: Result<&Revision, &PutError>,
    ) -> impl Future<Output = Result<(), StorageError>>;
}

/// What the compare-and-swap decision needs, read in `tx`; `None` for a user the store has
/// never seen or has erased.
pub(crate) async fn load_facts<T: WriteTx>(
    tx: &mut T,
    intent: &Intent,
) -> Result<Option<Facts>, StorageError> {
    let UserRow::Known { current } = tx.user(&intent.user).await? else {
        return Ok(None);
    };
    let current = match current {
        Some(seq) => tx.revision_at(&intent.user, seq).await?,
        None => None,
    };
    let base_known = match intent.base() {
        Some(base) => tx.has_revision(&intent.user, base).await?,
        None => false,
    };
    let keyed = match &intent.key {
        Some(key) => tx.keyed(&intent.user, key).await?,
        None => None,
    };
    Ok(Some(Facts {
        current,
        base_known,
        keyed,
        staged: 0,
    }))
}

/// First contact in `tx`: the user's pointer row, with no image (a hub never creates an image
/// that could clobber the client's copy); `true` when this call created it. An erased id is
/// refused for good.
pub(crate) async fn provision_in<T: WriteTx>(
    tx: &mut T,
    user: &UserId,
    now: Timestamp,
) -> Result<bool, crate::error::ProvisionError> {
    match tx.user(user).await? {
        UserRow::Erased => Err(crate::error::ProvisionError::Erased),
        UserRow::Known { .. } => Ok(false),
        UserRow::Unknown => Ok(tx.insert_user(user, now).await?),
    }
}

/// How [`begin_in`] ended; either way its transaction commits.
#[derive(Debug)]
pub(crate) enum Begun<P> {
    /// The publication record is written: the write is in flight.
    Published(P),
    /// The write is refused before a byte is read (the refusal is ledgered in the same
    /// transaction where it is ledgered at all).
    Refused(PutError),
}

/// Step 1 in `tx`: load the facts, refuse what cannot succeed (ledgered), or write the
/// publication record. An `Err` rolls the transaction back.
pub(crate) async fn begin_in<T: WriteTx>(
    tx: &mut T,
    intent: &Intent,
    now: Timestamp,
) -> Result<Begun<T::Publication>, StorageError> {
    if tx.user(&intent.user).await? == UserRow::Erased {
        return Ok(Begun::Refused(PutError::NotFound));
    }
    let mut facts = load_facts(tx, intent).await?;
    if let Some(facts) = facts.as_mut() {
        facts.staged = tx.staged_bytes(&intent.user).await?;
    }
    if let Some(err) = intent.early(facts.as_ref()) {
        tx.record_verdict(&intent.user, &intent.principal, now, Err(&err))
            .await?;
        return Ok(Begun::Refused(err));
    }
    Ok(Begun::Published(tx.insert_publication(intent, now).await?))
}

/// Step 5 in `tx`, the commit: the publication record goes (a write whose record a pass took may
/// not land), the facts are read again and decided on, and an accepted write's image is
/// recorded create-once (an occupied address must hold the same image), the user's next
/// revision appended, the pointer moved and the verdict ledgered. `Ok` commits (a replay too:
/// its verdict is ledgered); a refusal is an `Err` and rolls back, and [`abandon_in`] ledgers it.
pub(crate) async fn commit_in<T: WriteTx>(
    tx: &mut T,
    publication: &T::Publication,
    proposal: &Proposal<T::Staged>,
    now: Timestamp,
) -> Result<PutOutcome, PutError> {
    let intent = &proposal.intent;
    let user = &intent.user;
    if !tx.delete_publication(publication).await? {
        return Err(StorageError::unavailable(RECORD_GONE).into());
    }
    if tx.user(user).await? == UserRow::Erased {
        // Erased while its bytes streamed in: the pass took the record; this is its backstop.
        return Err(StorageError::unavailable(RECORD_GONE).into());
    }
    let facts = load_facts(tx, intent).await?;
    let digest = proposal.image.digest;
    match (proposal.decide(facts.as_ref()), &proposal.source) {
        (Decision::Refuse(err), _) => return Err(err),
        (Decision::Replay(revision), _) => {
            let info =
                tx.revision_info(user, &revision)
                    .await?
                    .ok_or_else(|| StorageError::Corrupt {
                        object: format!("revision {revision}"),
                    })?;
            tx.record_verdict(user, &intent.principal, now, Ok(&revision))
                .await?;
            return Ok(PutOutcome {
                info,
                replayed: true,
            });
        }
        (Decision::Accept, Source::Streamed(staged)) => match tx.stored_image(&digest).await? {
            Some((size, manifest)) => {
                if size != proposal.image.size || manifest != T::manifest(staged) {
                    return Err(crate::error::image_conflict(&digest));
                }
                tx.heal_stored(staged, now).await?;
            }
            None => {
                let against = facts.as_ref().and_then(|f| f.current.as_ref());
                tx.insert_image(&proposal.image, staged, against.map(|c| &c.digest), now)
                    .await?
            }
        },
        (Decision::Accept, Source::Existing { .. }) => {
            if tx.stored_image(&digest).await?.is_none() {
                return Err(PutError::NotFound);
            }
        }
    }
    let seq = tx.last_seq(user).await? + 1;
    let info = proposal.accepted(seq, now)?;
    tx.append_revision(user, seq, &info, intent.key.as_ref())
        .await?;
    tx.set_current(user, seq).await?;
    tx.announce(user, &info.revision).await?;
    tx.record_verdict(user, &intent.principal, now, Ok(&info.revision))
        .await?;
    Ok(PutOutcome {
        info,
        replayed: false,
    })
}

/// Step 6 in `tx`: marks the publication record of a write that will not land abandoned, and
/// ledgers its refusal if it is one ([`PutError::is_ledgered`]).
pub(crate) async fn abandon_in<T: WriteTx>(
    tx: &mut T,
    publication: &T::Publication,
    intent: &Intent,
    err: &PutError,
    now: Timestamp,
) -> Result<(), StorageError> {
    tx.abandon_publication(publication, now).await?;
    ledger_refusal_in(tx, intent, err, now).await
}

/// Ledgers a refusal in `tx` where it is ledgered at all: not a storage failure, and nothing for
/// an erased user.
pub(crate) async fn ledger_refusal_in<T: WriteTx>(
    tx: &mut T,
    intent: &Intent,
    err: &PutError,
    now: Timestamp,
) -> Result<(), StorageError> {
    if err.is_ledgered() && tx.user(&intent.user).await? != UserRow::Erased {
        tx.record_verdict(&intent.user, &intent.principal, now, Err(err))
            .await?;
    }
    Ok(())
}

/// The storage steps of one backend. Each is one durable step of its own; the order is
/// [`put`]'s and [`restore`]'s.
pub(crate) trait Primitives: Send + Sync {
    /// A durable publication record.
    type Publication: Send + Sync;
    /// Where the chunks of a put go as they stream in.
    type Sink: ChunkSink + Send;
    /// A put's objects once durable: what read-back and commit need to know about them.
    type Staged: Send + Sync;

    /// The chunk size of this store (fixed when it was created).
    fn chunk_size(&self) -> usize;

    /// Tells this process's subscribers that a commit moved the user's current revision; a
    /// store whose commits announce themselves in their transaction ([`WriteTx::announce`])
    /// has nothing to do here.
    fn committed(&self, _user: &UserId) {}

    /// The chunk addresses, in order, of a stored image (`None`: no such image).
    fn manifest(
        &self,
        image: &Digest,
    ) -> impl Future<Output = Result<Option<Vec<Digest>>, StorageError>> + Send;

    /// The per-user quota on one image.
    fn quota(&self) -> u64;

    /// The most bytes one user's unfinished writes may hold together.
    fn staged_limit(&self) -> u64;

    /// The test hooks of this store ([`FaultPoint`]).
    fn faults(&self) -> &Faults;

    /// Where the outcome of every write goes ([`crate::write_health`]).
    fn write_health(&self) -> &WriteHealth;

    /// Loads the facts, refuses with [`Intent::early`] (ledgering the refusal), or writes the
    /// publication record.
    fn begin(
        &self,
        intent: &Intent,
    ) -> impl Future<Output = Result<Self::Publication, PutError>> + Send;

    /// A sink for the put's chunks.
    fn sink(&self, publication: &Self::Publication) -> Self::Sink;

    /// Takes the ingest's outcome and, if it succeeded, records the image in the publication
    /// record and makes the new objects durable, create-once.
    fn publish(
        &self,
        publication: &Self::Publication,
        sink: Self::Sink,
        ingested: Result<Ingested, PutError>,
    ) -> impl Future<Output = Result<(Ingested, Self::Staged), PutError>> + Send;

    /// Reads the objects back and checks every chunk against its address.
    fn read_back(
        &self,
        what: ReadBack<'_, Self::Staged>,
    ) -> impl Future<Output = Result<(), PutError>> + Send;

    /// The commit transaction (step 5 of the module docs).
    fn commit(
        &self,
        publication: &Self::Publication,
        proposal: Proposal<Self::Staged>,
    ) -> impl Future<Output = Result<PutOutcome, PutError>> + Send;

    /// Marks the publication record of a write that stopped before it landed as abandoned,
    /// ledgering the refusal if it is one. Failing to is logged, not returned: the record then
    /// goes as an orphan once the orphan period has passed.
    fn abandon(
        &self,
        publication: &Self::Publication,
        intent: &Intent,
        err: &PutError,
    ) -> impl Future<Output = ()> + Send;

    /// Reclaims at once what an abandoned write staged: its record, and the objects and chunk
    /// rows nothing else names ([`crate::reclaim::discard`]). Failing to is logged: the next
    /// reclamation pass takes an abandoned record whatever its age.
    fn discard(&self, publication: &Self::Publication) -> impl Future<Output = ()> + Send;

    /// One of the user's revisions, if the store still has it.
    fn revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> impl Future<Output = Result<Option<RevisionInfo>, StorageError>> + Send;

    /// Ledgers a refusal that happened before any publication record existed.
    fn ledger_refusal(
        &self,
        intent: &Intent,
        err: &PutError,
    ) -> impl Future<Output = Result<(), StorageError>> + Send;
}

/// The quota this put is held to: the caller's per-user override, or the store's default. The
/// one place the choice is made, so the early reservation and the streaming check agree.
fn quota<P: Primitives>(store: &P, request: &PutRequest) -> u64 {
    request.quota_bytes.unwrap_or_else(|| store.quota())
}

/// Streams a new image in and, if the precondition holds, makes it the user's current revision.
pub(crate) async fn put<P, B>(
    store: &P,
    request: PutRequest,
    body: B,
) -> Result<PutOutcome, PutError>
where
    P: Primitives,
    B: Stream<Item = io::Result<Bytes>> + Send,
{
    let user = request.user.clone();
    let result = put_steps(store, request, body, None, None).await;
    announce(store, &user, &result);
    store.write_health().record(&result);
    result
}

/// Reads a retained revision whole as the base of a derived put: its bytes, checked against
/// its chunks' addresses as they are read (as every download's are), and those addresses.
pub(crate) async fn read_base<P: Primitives + RevStore>(
    store: &P,
    user: &UserId,
    revision: &Revision,
) -> Result<BaseImage, ReadError> {
    let download = store.read_revision(user, revision).await?;
    let bytes = download.body.read_to_vec().await?;
    // An image row never changes once written: these are the addresses the read checked
    // the bytes against.
    let chunks = store
        .manifest(&download.info.digest)
        .await?
        .ok_or_else(|| StorageError::Corrupt {
            object: format!("image {}", download.info.digest),
        })?;
    let chunk_size = store.chunk_size();
    if chunks.len() != bytes.len().div_ceil(chunk_size) {
        return Err(StorageError::Corrupt {
            object: format!("image {}", download.info.digest),
        }
        .into());
    }
    Ok(BaseImage {
        info: download.info,
        bytes: Bytes::from(bytes),
        chunks,
        chunk_size,
        store: store.store_id().clone(),
    })
}

/// [`put`] of `image` held whole, derived from a base when `derived` names one: the chunks it
/// holds unchanged from a base this store read reach the sink with their checked addresses, and
/// the image's SHA-256 is the caller's digest ([`chunk::ingest`]). Answers the image as the base
/// of the next derived put: the bytes this put stored, under the addresses it committed (none
/// when they cannot be read back: the put has landed all the same).
pub(crate) async fn put_held<P: Primitives + RevStore>(
    store: &P,
    request: PutRequest,
    image: Bytes,
    derived: Option<(&BaseImage, Digest)>,
) -> Result<Held, PutError> {
    let base = derived.and_then(|(base, _)| base.usable_by(store.store_id(), store.chunk_size()));
    let body = futures::stream::iter([Ok(image.clone())]);
    let user = request.user.clone();
    let result = put_steps(store, request, body, base, derived.map(|(_, d)| d)).await;
    announce(store, &user, &result);
    store.write_health().record(&result);
    let outcome = result?;
    if outcome.replayed {
        return Ok(Held {
            outcome,
            image: None,
        });
    }
    // The revision has landed: a failure to read its addresses back costs the next push its
    // kept base, never this put its answer.
    let chunk_size = store.chunk_size();
    let chunks = match store.manifest(&outcome.info.digest).await {
        Ok(Some(chunks)) if chunks.len() == image.len().div_ceil(chunk_size) => Some(chunks),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(error = %e, image = %outcome.info.digest, "could not read a landed image's addresses back; it is not kept as a base");
            None
        }
    };
    let image = chunks.map(|chunks| BaseImage {
        info: outcome.info.clone(),
        bytes: image,
        chunks,
        chunk_size,
        store: store.store_id().clone(),
    });
    Ok(Held { outcome, image })
}

/// A write that committed (not a replay, which commits nothing) is announced once.
fn announce<P: Primitives>(store: &P, user: &UserId, result: &Result<PutOutcome, PutError>) {
    if result.as_ref().is_ok_and(|outcome| !outcome.replayed) {
        store.committed(user);
    }
}

async fn put_steps<P, B>(
    store: &P,
    request: PutRequest,
    body: B,
    base: Option<&BaseImage>,
    digest: Option<Digest>,
) -> Result<PutOutcome, PutError>
where
    P: Primitives,
    B: Stream<Item = io::Result<Bytes>> + Send,
{
    let intent = Intent::of_put(store, &request);
    let publication = store.begin(&intent).await?;
    let result = async {
        let mut sink = store.sink(&publication);
        let quota = quota(store, &request);
        let ingested =
            chunk::ingest(body, quota, store.chunk_size(), base, digest, &mut sink).await;
        let (ingested, staged) = store.publish(&publication, sink, ingested).await?;
        store.read_back(ReadBack::Staged(&staged)).await?;
        let proposal = Proposal {
            intent: intent.clone(),
            image: Image {
                digest: ingested.digest,
                size: ingested.size,
                storage_version: ingested.storage_version,
            },
            source: Source::Streamed(staged),
        };
        store.faults().reached(FaultPoint::BeforeCommit);
        store.commit(&publication, proposal).await
    }
    .await;
    if let Err(err) = &result {
        // The bytes of a put known not to land go now; only a crash leaves them to the orphan
        // period.
        store.abandon(&publication, &intent, err).await;
        store.discard(&publication).await;
    }
    result
}

/// Copies a retained revision's bytes forward as a new revision.
pub(crate) async fn restore<P: Primitives>(
    store: &P,
    request: RestoreRequest,
) -> Result<PutOutcome, PutError> {
    let user = request.user.clone();
    let result = restore_steps(store, request).await;
    announce(store, &user, &result);
    store.write_health().record(&result);
    result
}

async fn restore_steps<P: Primitives>(
    store: &P,
    request: RestoreRequest,
) -> Result<PutOutcome, PutError> {
    let mut intent = Intent {
        user: request.user,
        precondition: request.precondition,
        key: request.idempotency_key,
        principal: request.principal,
        image: None,
        // A restore stages no new bytes: its image is stored already.
        reserve: 0,
        staged_limit: store.staged_limit(),
    };
    let source = store.revision(&intent.user, &request.from).await?;
    let Some(source) = source.filter(|s| s.retained) else {
        store.ledger_refusal(&intent, &PutError::NotFound).await?;
        return Err(PutError::NotFound);
    };
    intent.image = Some(source.digest);
    let publication = store.begin(&intent).await?;
    let result = async {
        store.read_back(ReadBack::Image(&source.digest)).await?;
        let proposal = Proposal {
            intent: intent.clone(),
            image: Image {
                digest: source.digest,
                size: source.size,
                storage_version: source.storage_version,
            },
            source: Source::Existing {
                restored_from: request.from,
            },
        };
        store.faults().reached(FaultPoint::BeforeCommit);
        store.commit(&publication, proposal).await
    }
    .await;
    if let Err(err) = &result {
        store.abandon(&publication, &intent, err).await;
        store.discard(&publication).await;
    }
    result
}
