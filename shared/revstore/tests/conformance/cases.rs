//! The cases of the conformance suite, generic over the backend.

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use futures::StreamExt;
use snug_revstore::{
    Digest, FaultPoint, IdempotencyKey, IntegrityProblem, Precondition, PutError, PutRequest,
    ReadError, ReclaimError, ReclaimedKind, RestoreRequest, Retention, RevStore, Revision, Verdict,
};

use crate::support::*;

fn rev(s: &str) -> Revision {
    Revision::new(s).expect("revision")
}

async fn provisioned<S, F, Fut>(
    open: F,
    tune: Tune,
    name: &str,
) -> Option<(Fixture<S>, snug_revstore::UserId)>
where
    S: RevStore,
    F: FnOnce(Tune) -> Fut,
    Fut: Future<Output = Option<Fixture<S>>>,
{
    let fx = open(tune).await?;
    let u = user(name);
    assert!(fx.store.provision_user(&u).await.expect("provision"));
    Some((fx, u))
}

pub(crate) async fn first_write_requires_must_not_exist<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    match put(
        &fx.store,
        &u,
        Precondition::MustMatch(rev("r1-0000000000000000")),
        b"x",
    )
    .await
    {
        Err(PutError::Conflict { current: None }) => {}
        other => panic!("expected Conflict without current, got {other:?}"),
    }
    let bytes = image(1, 10_000);
    let first = put_ok(&fx.store, &u, Precondition::MustNotExist, &bytes).await;
    assert!(!first.replayed);
    assert_eq!(first.info.digest, Digest::of(&bytes));
    assert_eq!(first.info.size, 10_000);
    assert_eq!(first.info.base, None);
    assert_eq!(fx.store.head(&u).await.expect("head"), first.info);
    let download = fx.store.get(&u, &who("device-b")).await.expect("get");
    assert_eq!(download.info, first.info);
    let got = download.body.read_to_vec().await.expect("body");
    assert_eq!(Digest::of(&got), first.info.digest);
    assert_eq!(got, bytes);
    assert_clean(&fx.store).await;
}

pub(crate) async fn must_not_exist_on_existing_reports_current<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &image(1, 3000))
        .await
        .info
        .revision;
    let err = put(&fx.store, &u, Precondition::MustNotExist, &image(2, 3000))
        .await
        .expect_err("must refuse");
    assert_eq!(err.reason(), "REVISION_MISMATCH");
    match err {
        PutError::Conflict { current } => assert_eq!(current, Some(r1.clone())),
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert_eq!(fx.store.head(&u).await.expect("head").revision, r1);
}

pub(crate) async fn stale_and_unknown_revisions_are_distinct<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let bob = user("bob");
    fx.store.provision_user(&bob).await.expect("provision bob");
    let bob_r1 = put_ok(&fx.store, &bob, Precondition::MustNotExist, &image(9, 2000))
        .await
        .info
        .revision;
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &image(1, 2000))
        .await
        .info
        .revision;
    let r2 = put_ok(
        &fx.store,
        &u,
        Precondition::MustMatch(r1.clone()),
        &image(2, 2000),
    )
    .await
    .info
    .revision;
    match put(
        &fx.store,
        &u,
        Precondition::MustMatch(r1.clone()),
        &image(3, 2000),
    )
    .await
    {
        Err(PutError::Stale { base, current }) => assert_eq!((base, current), (r1, r2.clone())),
        other => panic!("expected Stale, got {other:?}"),
    }
    // Another user's revision is as unknown to alice as one that never existed.
    for unknown in [bob_r1, rev("r7-ffffffffffffffff")] {
        let err = put(
            &fx.store,
            &u,
            Precondition::MustMatch(unknown),
            &image(4, 2000),
        )
        .await
        .expect_err("must refuse");
        assert_eq!(err.reason(), "REVISION_MISMATCH");
        assert_eq!(err.current(), Some(&r2));
    }
    assert_eq!(fx.store.head(&u).await.expect("head").revision, r2);
}

pub(crate) async fn revision_tokens_are_unique_and_etag_safe<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let mut seen = std::collections::HashSet::new();
    let mut pre = Precondition::MustNotExist;
    for i in 0..20u64 {
        let r = put_ok(&fx.store, &u, pre, &image(i % 3, 1500))
            .await
            .info
            .revision;
        let s = r.as_str();
        assert!(
            !s.contains('"') && !s.contains(' ') && !s.contains(','),
            "{s} is not ETag-safe"
        );
        assert_eq!(Revision::new(s).expect("parses back"), r);
        assert!(seen.insert(r.clone()), "revision {r} reused");
        pre = Precondition::MustMatch(r);
    }
}

pub(crate) async fn quota_boundary_is_exact_and_refused_early<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let tune = Tune {
        quota: 50_000,
        ..Tune::default()
    };
    let Some((fx, u)) = provisioned(open, tune, "alice").await else {
        return;
    };
    let exact = image(1, 50_000);
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &exact)
        .await
        .info
        .revision;
    // One byte over, followed by more pieces that must never be pulled.
    let over = image(2, 50_001);
    let pulled_after = Arc::new(AtomicBool::new(false));
    let flag = pulled_after.clone();
    let mut pieces: Vec<Bytes> = over.chunks(10_000).map(Bytes::copy_from_slice).collect();
    pieces.push(Bytes::from_static(b"sentinel"));
    let n = pieces.len();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let stream = futures::stream::iter(pieces).map(move |p| {
        if counter.fetch_add(1, Ordering::SeqCst) == n - 1 {
            flag.store(true, Ordering::SeqCst);
        }
        Ok(p)
    });
    let request = PutRequest {
        user: u.clone(),
        precondition: Precondition::MustMatch(r1.clone()),
        principal: who("device-a"),
        idempotency_key: None,
        expected_length: None,
        quota_bytes: None,
    };
    match fx.store.put(request, stream).await {
        Err(PutError::QuotaExceeded { quota: 50_000 }) => {}
        other => panic!("expected QuotaExceeded, got {other:?}"),
    }
    assert!(
        !pulled_after.load(Ordering::SeqCst),
        "the stream was read past the byte that crossed the quota"
    );
    assert_eq!(fx.store.head(&u).await.expect("head").revision, r1);
    let ledger = fx.store.put_ledger(&u, 10).await.expect("ledger");
    assert_eq!(
        ledger[0].verdict,
        Verdict::Refused {
            reason: "QUOTA_EXCEEDED".into()
        }
    );
    assert_eq!(fetch(&fx.store, &u).await, exact);
    assert_clean(&fx.store).await;
}

pub(crate) async fn body_failure_writes_nothing<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let pieces: Vec<std::io::Result<Bytes>> = vec![
        Ok(Bytes::from(image(1, 5000))),
        Err(std::io::Error::other("client went away")),
    ];
    let request = PutRequest {
        user: u.clone(),
        precondition: Precondition::MustNotExist,
        principal: who("device-a"),
        idempotency_key: None,
        expected_length: None,
        quota_bytes: None,
    };
    let err = fx
        .store
        .put(request, futures::stream::iter(pieces))
        .await
        .expect_err("must fail");
    assert_eq!(err.reason(), "BODY_ABORTED");
    assert!(matches!(fx.store.head(&u).await, Err(ReadError::NotFound)));
    assert!(
        fx.store
            .list_revisions(&u, 10)
            .await
            .expect("list")
            .is_empty()
    );
    // Nothing half-made is left behind for an orphan sweep: the publication record is gone.
    fx.clock.advance(Duration::from_secs(2 * 3600));
    assert_eq!(fx.store.reclaim().await.expect("reclaim").publications, 0);
}

pub(crate) async fn retry_of_the_same_put_is_idempotent<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let a = image(1, 4000);
    let first = put_ok(&fx.store, &u, Precondition::MustNotExist, &a).await;
    let again = put_ok(&fx.store, &u, Precondition::MustNotExist, &a).await;
    assert!(again.replayed);
    assert_eq!(again.info, first.info);
    let b = image(2, 4000);
    let second = put_ok(
        &fx.store,
        &u,
        Precondition::MustMatch(first.info.revision.clone()),
        &b,
    )
    .await;
    let retry = put_ok(
        &fx.store,
        &u,
        Precondition::MustMatch(first.info.revision.clone()),
        &b,
    )
    .await;
    assert!(retry.replayed);
    assert_eq!(retry.info.revision, second.info.revision);
    assert_eq!(
        fx.store.list_revisions(&u, 10).await.expect("list").len(),
        2
    );
    // Same base, different bytes: not a retry but a stale write.
    let err = put(
        &fx.store,
        &u,
        Precondition::MustMatch(first.info.revision.clone()),
        &image(3, 4000),
    )
    .await
    .expect_err("stale");
    assert_eq!(err.reason(), "STALE_REVISION");
}

pub(crate) async fn idempotency_key_replays_and_refuses_reuse<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &image(1, 3000))
        .await
        .info
        .revision;
    let key = IdempotencyKey::new("upload-42").expect("key");
    let keyed = |bytes: Vec<u8>, base: Revision| {
        let request = PutRequest {
            user: u.clone(),
            precondition: Precondition::MustMatch(base),
            principal: who("device-a"),
            idempotency_key: Some(key.clone()),
            expected_length: None,
            quota_bytes: None,
        };
        fx.store.put(request, body(&bytes))
    };
    let r2 = keyed(image(2, 3000), r1.clone())
        .await
        .expect("keyed put")
        .info
        .revision;
    let r3 = put_ok(
        &fx.store,
        &u,
        Precondition::MustMatch(r2.clone()),
        &image(3, 3000),
    )
    .await
    .info
    .revision;
    // The retry arrives after another write landed: the key still identifies it.
    let replay = keyed(image(2, 3000), r1.clone()).await.expect("replay");
    assert!(replay.replayed);
    assert_eq!(replay.info.revision, r2);
    match keyed(image(4, 3000), r1.clone()).await {
        Err(PutError::IdempotencyKeyReused { revision }) => assert_eq!(revision, r2),
        other => panic!("expected IdempotencyKeyReused, got {other:?}"),
    }
    assert_eq!(fx.store.head(&u).await.expect("head").revision, r3);
}

pub(crate) async fn history_lists_newest_first_and_restore_copies_forward<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let (a, b, c) = (image(1, 6000), image(2, 6000), image(3, 6000));
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &a)
        .await
        .info;
    fx.clock.advance(Duration::from_secs(1));
    let r2 = put_ok(
        &fx.store,
        &u,
        Precondition::MustMatch(r1.revision.clone()),
        &b,
    )
    .await
    .info;
    fx.clock.advance(Duration::from_secs(1));
    let r3 = put_ok(
        &fx.store,
        &u,
        Precondition::MustMatch(r2.revision.clone()),
        &c,
    )
    .await
    .info;
    let history = fx.store.list_revisions(&u, 10).await.expect("list");
    assert_eq!(history, vec![r3.clone(), r2.clone(), r1.clone()]);
    assert!(
        history[0].accepted_at > history[1].accepted_at
            && history[1].accepted_at > history[2].accepted_at
    );
    assert_eq!(history[1].base.as_ref(), Some(&r1.revision));
    assert_eq!(fx.store.list_revisions(&u, 1).await.expect("list").len(), 1);

    let restore = |from: Revision, precondition: Precondition| {
        fx.store.restore(RestoreRequest {
            user: u.clone(),
            from,
            precondition,
            principal: who("operator"),
            idempotency_key: None,
        })
    };
    let err = restore(
        r1.revision.clone(),
        Precondition::MustMatch(r2.revision.clone()),
    )
    .await
    .expect_err("stale restore");
    assert_eq!(err.reason(), "STALE_REVISION");
    let r4 = restore(
        r1.revision.clone(),
        Precondition::MustMatch(r3.revision.clone()),
    )
    .await
    .expect("restore")
    .info;
    assert_ne!(r4.revision, r1.revision);
    assert_eq!(r4.digest, r1.digest);
    assert_eq!(r4.restored_from.as_ref(), Some(&r1.revision));
    assert_eq!(r4.base.as_ref(), Some(&r3.revision));
    assert_eq!(r4.principal, who("operator"));
    assert_eq!(fetch(&fx.store, &u).await, a);
    let err = restore(
        rev("r99-0123456789abcdef"),
        Precondition::MustMatch(r4.revision.clone()),
    )
    .await
    .expect_err("unknown");
    assert_eq!(err.reason(), "NOT_FOUND");
    assert_eq!(
        fx.store.list_revisions(&u, 10).await.expect("list").len(),
        4
    );
    assert_clean(&fx.store).await;
}

pub(crate) async fn storage_version_is_recorded_at_acceptance_and_carried_by_restore<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let put_in = |bytes: Vec<u8>, precondition: Precondition, piece: usize| {
        let request = PutRequest {
            user: u.clone(),
            precondition,
            principal: who("device-a"),
            idempotency_key: None,
            expected_length: None,
            quota_bytes: None,
        };
        let store = &fx.store;
        async move { store.put(request, body_in(&bytes, piece)).await }
    };
    // A v6 image whose header arrives a few bytes at a time: the version is read across pieces.
    let v6 = stamped(6, 6000);
    let r1 = put_in(v6.clone(), Precondition::MustNotExist, 7)
        .await
        .expect("v6")
        .info;
    assert_eq!(r1.storage_version, Some(6), "in the put outcome");
    assert_eq!(fx.store.head(&u).await.expect("head"), r1, "in head");
    // The store records versions, it does not judge them: a v7 image is accepted and reported.
    let v7 = stamped(7, 3000);
    let r2 = put_in(v7, Precondition::MustMatch(r1.revision.clone()), 1000)
        .await
        .expect("v7")
        .info;
    assert_eq!(r2.storage_version, Some(7));
    // Bytes that are not a SQLite database, and a SQLite header cut short, have no version.
    let r3 = put_in(
        image(3, 5000),
        Precondition::MustMatch(r2.revision.clone()),
        1000,
    )
    .await
    .expect("opaque")
    .info;
    assert_eq!(r3.storage_version, None);
    let short = stamped(6, 100)[..99].to_vec();
    let r4 = put_in(short, Precondition::MustMatch(r3.revision.clone()), 1)
        .await
        .expect("short")
        .info;
    assert_eq!(r4.storage_version, None, "99 bytes are not a whole header");
    let whole = stamped(5, 100);
    let r5 = put_in(
        whole.clone(),
        Precondition::MustMatch(r4.revision.clone()),
        50,
    )
    .await
    .expect("exactly a header")
    .info;
    assert_eq!(r5.storage_version, Some(5), "exactly 100 bytes are enough");

    let listed: Vec<Option<u32>> = fx
        .store
        .list_revisions(&u, 10)
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.storage_version)
        .collect();
    assert_eq!(
        listed,
        [Some(5), None, None, Some(7), Some(6)],
        "in the listing"
    );
    let download = fx
        .store
        .get_revision(&u, &r1.revision, &who("device-b"))
        .await
        .expect("get r1");
    assert_eq!(download.info.storage_version, Some(6), "in a download");
    assert_eq!(download.body.read_to_vec().await.expect("bytes"), v6);

    // A retry of a landed put is answered with the recorded revision, version included.
    let replay = put_in(whole, Precondition::MustMatch(r4.revision.clone()), 100)
        .await
        .expect("replay");
    assert!(replay.replayed);
    assert_eq!(replay.info, r5);

    // A restore carries its source's version, whatever is current.
    let restore = |from: &Revision, base: &Revision| {
        fx.store.restore(RestoreRequest {
            user: u.clone(),
            from: from.clone(),
            precondition: Precondition::MustMatch(base.clone()),
            principal: who("operator"),
            idempotency_key: None,
        })
    };
    let r6 = restore(&r1.revision, &r5.revision)
        .await
        .expect("restore v6")
        .info;
    assert_eq!(
        (r6.storage_version, r6.restored_from.as_ref()),
        (Some(6), Some(&r1.revision))
    );
    let r7 = restore(&r3.revision, &r6.revision)
        .await
        .expect("restore opaque")
        .info;
    assert_eq!(r7.storage_version, None);
    let r8 = restore(&r2.revision, &r7.revision)
        .await
        .expect("restore v7")
        .info;
    assert_eq!(r8.storage_version, Some(7));
    assert_eq!(fx.store.head(&u).await.expect("head"), r8);
    assert_eq!(
        fx.store.list_revisions(&u, 3).await.expect("list"),
        vec![r8, r7, r6]
    );
    assert_clean(&fx.store).await;
}

pub(crate) async fn head_revision_describes_a_retained_revision<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &stamped(6, 4000))
        .await
        .info;
    fx.clock.advance(Duration::from_secs(1));
    let r2 = put_ok(
        &fx.store,
        &u,
        Precondition::MustMatch(r1.revision.clone()),
        &image(2, 4000),
    )
    .await
    .info;
    assert_eq!(
        fx.store.head_revision(&u, &r1.revision).await.expect("r1"),
        r1,
        "an older revision, as accepted"
    );
    assert_eq!(
        fx.store.head_revision(&u, &r2.revision).await.expect("r2"),
        fx.store.head(&u).await.expect("head"),
        "the current revision by name is head"
    );
    // Describing is not serving: the served ledger stays empty.
    assert!(
        fx.store
            .served_ledger(&u, 10)
            .await
            .expect("served")
            .is_empty()
    );
}

/// A delta round trip on the backend (issue 21): the new image is rebuilt from the base as
/// `read_revision` returns it plus the changed pages, put like any image, and served byte for
/// byte; a pull's delta from the base rebuilds it on the client's side.
pub(crate) async fn a_delta_round_trip_rebuilds_the_image_from_its_base<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    use snug_delta::{Delta, Limits, Manifest, page_ids, plan};
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    const PAGE: u32 = 1024;
    let first = stamped(6, 64 * PAGE as usize);
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &first)
        .await
        .info;
    // A page inserted early: every later page moves by one.
    let mut second = first[..3 * PAGE as usize].to_vec();
    second.extend_from_slice(&image(9, PAGE as usize));
    second.extend_from_slice(&first[3 * PAGE as usize..]);
    let manifest = Manifest::of(&second, PAGE).expect("manifest");
    let base = fx
        .store
        .read_revision(&u, &r1.revision)
        .await
        .expect("base")
        .body
        .read_to_vec()
        .await
        .expect("base bytes");
    let layout = plan(&manifest, &snug_delta::Source::ids(&page_ids(&base, PAGE)));
    assert_eq!(layout.literal_count(), 1);
    let wire = Delta::build(layout, &second, None).encode();
    let limits = Limits {
        max_length: 1 << 20,
    };
    let rebuilt = Delta::parse(&wire, &limits, base.len() as u64)
        .and_then(|delta| delta.assemble(&base))
        .expect("assemble");
    let r2 = put_ok(
        &fx.store,
        &u,
        Precondition::MustMatch(r1.revision.clone()),
        &rebuilt,
    )
    .await
    .info;
    assert_eq!(fetch(&fx.store, &u).await, second);
    assert_eq!(r2.digest.as_bytes(), &snug_delta::sha256(&second));
    assert_clean(&fx.store).await;
}

/// A put derived from its base (issue 38 point 3) stores the revision a put of the same bytes
/// stores: each chunk is taken from the base only where it is that chunk byte for byte (a
/// changed chunk, a chunk of the base at another place, a last chunk that grew), and a chunk it
/// reuses from elsewhere is still checked (a damaged one written afresh).
pub(crate) async fn a_put_derived_from_its_base_stores_what_a_put_stores<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, alice)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let bob = user("bob");
    fx.store.provision_user(&bob).await.expect("provision bob");
    let chunk = CHUNK as usize;
    // The base ends in a short chunk.
    let first = image(61, 12 * chunk + 300);
    let r1 = put_ok(&fx.store, &alice, Precondition::MustNotExist, &first)
        .await
        .info;
    // Bob holds a chunk alice's next image takes, damaged before she pushes it.
    let bobs = image(62, 4 * chunk);
    put_ok(&fx.store, &bob, Precondition::MustNotExist, &bobs).await;
    let base = fx
        .store
        .read_base(&alice, &r1.revision)
        .await
        .expect("base");
    assert_eq!(base.info, r1);
    assert_eq!(base.bytes()[..], first[..]);
    (fx.damage)(Digest::of(&bobs[chunk..2 * chunk])).await;
    let mut second = first.clone();
    second[3 * chunk + 5] ^= 0x55;
    second.copy_within(chunk..2 * chunk, 7 * chunk);
    second[9 * chunk..10 * chunk].copy_from_slice(&bobs[chunk..2 * chunk]);
    second.extend_from_slice(&image(63, chunk));
    let request = || PutRequest {
        user: alice.clone(),
        precondition: Precondition::MustMatch(r1.revision.clone()),
        principal: who("device-a"),
        idempotency_key: None,
        expected_length: Some(second.len() as u64),
        quota_bytes: None,
    };
    let held = fx
        .store
        .put_held(
            request(),
            Bytes::from(second.clone()),
            Some((&base, Digest::of(&second))),
        )
        .await
        .expect("derived put");
    let r2 = held.outcome.info;
    // The put answers its image as the next base: its bytes, and the addresses a read of it
    // would check them against.
    let kept = held.image.expect("the image as a base");
    let reread = fx
        .store
        .read_base(&alice, &r2.revision)
        .await
        .expect("base");
    assert_eq!(kept.info, reread.info);
    assert_eq!(kept.bytes()[..], reread.bytes()[..]);
    assert_eq!(format!("{kept:?}"), format!("{reread:?}"));
    // A retry is a replay: the store took no bytes, so it answers no image.
    let again = fx
        .store
        .put_held(request(), Bytes::from(second.clone()), None)
        .await
        .expect("replay");
    assert!(again.outcome.replayed && again.image.is_none(), "{again:?}");
    assert_eq!(r2.digest, Digest::of(&second));
    assert_eq!(r2.size, second.len() as u64);
    assert_eq!(fetch(&fx.store, &alice).await, second);
    assert_eq!(fetch(&fx.store, &bob).await, bobs);
    // A put of the same bytes lands on the same image: the same chunks, in the same order.
    let carol = user("carol");
    fx.store
        .provision_user(&carol)
        .await
        .expect("provision carol");
    let r3 = put_ok(&fx.store, &carol, Precondition::MustNotExist, &second)
        .await
        .info;
    assert_eq!(r3.digest, r2.digest);
    assert_clean(&fx.store).await;
}

/// The base of a delta (issue 21): the user's own retained revision, its bytes as accepted, and
/// no served-ledger entry, since none of it is served as such.
pub(crate) async fn read_revision_reads_a_base_without_serving_it<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let first = stamped(6, 9000);
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &first)
        .await
        .info;
    let r2 = put_ok(
        &fx.store,
        &u,
        Precondition::MustMatch(r1.revision.clone()),
        &image(2, 5000),
    )
    .await
    .info;
    let base = fx
        .store
        .read_revision(&u, &r1.revision)
        .await
        .expect("base");
    assert_eq!(base.info, r1);
    assert_eq!(base.body.read_to_vec().await.expect("bytes"), first);
    let current = fx
        .store
        .read_revision(&u, &r2.revision)
        .await
        .expect("current");
    assert_eq!(current.info, r2);
    drop(current);
    assert!(
        fx.store
            .served_ledger(&u, 10)
            .await
            .expect("served")
            .is_empty()
    );
    assert_clean(&fx.store).await;
}

pub(crate) async fn uniform_denial<S: RevStore, Fut: Future<Output = Option<Fixture<S>>>>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let tune = Tune {
        retention: Retention {
            keep_newest: 1,
            grace: Duration::ZERO,
            orphan_after: Duration::from_secs(3600),
        },
        ..Tune::default()
    };
    let Some((fx, alice)) = provisioned(open, tune, "alice").await else {
        return;
    };
    let bob = user("bob");
    fx.store.provision_user(&bob).await.expect("provision");
    let r1 = put_ok(
        &fx.store,
        &alice,
        Precondition::MustNotExist,
        &image(1, 3000),
    )
    .await
    .info
    .revision;
    let r2 = put_ok(
        &fx.store,
        &alice,
        Precondition::MustMatch(r1.clone()),
        &image(2, 3000),
    )
    .await
    .info
    .revision;
    fx.clock.advance(Duration::from_secs(1));
    assert_eq!(
        fx.store.reclaim().await.expect("reclaim").revisions,
        1,
        "r1 is reclaimed"
    );
    let viewer = who("device-b");
    let denials: Vec<ReadError> = vec![
        fx.store
            .get(&user("nobody"), &viewer)
            .await
            .expect_err("unknown user"),
        fx.store.get(&bob, &viewer).await.expect_err("no image yet"),
        fx.store
            .get_revision(&alice, &r1, &viewer)
            .await
            .expect_err("reclaimed"),
        fx.store
            .get_revision(&bob, &r2, &viewer)
            .await
            .expect_err("someone else's"),
        fx.store
            .get_revision(&user("nobody"), &r2, &viewer)
            .await
            .expect_err("unknown user, real revision"),
        fx.store
            .head_revision(&alice, &r1)
            .await
            .expect_err("head of a reclaimed revision"),
        fx.store
            .head_revision(&bob, &r2)
            .await
            .expect_err("head of someone else's revision"),
        fx.store
            .head_revision(&user("nobody"), &r2)
            .await
            .expect_err("head of a real revision, unknown user"),
        fx.store
            .head_revision(&alice, &rev("r9-0123456789abcdef"))
            .await
            .expect_err("head of a revision that never existed"),
        // A delta's base (issue 21) is denied exactly as a download is.
        fx.store
            .read_revision(&alice, &r1)
            .await
            .expect_err("base: reclaimed"),
        fx.store
            .read_revision(&bob, &r2)
            .await
            .expect_err("base: someone else's"),
        fx.store
            .read_revision(&user("nobody"), &r2)
            .await
            .expect_err("base: unknown user"),
        fx.store.head(&bob).await.expect_err("head, no image"),
        fx.store
            .head(&user("nobody"))
            .await
            .expect_err("head, unknown user"),
    ];
    for d in &denials {
        assert!(matches!(d, ReadError::NotFound), "{d:?}");
        assert_eq!(
            (d.to_string(), d.reason().name),
            (denials[0].to_string(), "NOT_FOUND")
        );
    }
    let restore_other = fx
        .store
        .restore(RestoreRequest {
            user: bob.clone(),
            from: r2.clone(),
            precondition: Precondition::MustNotExist,
            principal: who("bob"),
            idempotency_key: None,
        })
        .await
        .expect_err("restore of someone else's revision");
    let restore_reclaimed = fx
        .store
        .restore(RestoreRequest {
            user: alice.clone(),
            from: r1.clone(),
            precondition: Precondition::MustMatch(r2.clone()),
            principal: who("alice"),
            idempotency_key: None,
        })
        .await
        .expect_err("restore of a reclaimed revision");
    let put_unknown = put(&fx.store, &user("nobody"), Precondition::MustNotExist, b"x")
        .await
        .expect_err("unprovisioned");
    for e in [&restore_other, &restore_reclaimed, &put_unknown] {
        assert!(matches!(e, PutError::NotFound), "{e:?}");
        assert_eq!(e.to_string(), denials[0].to_string());
    }
}

pub(crate) async fn first_contact_provisions_only<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    assert!(
        !fx.store.provision_user(&u).await.expect("again"),
        "provisioning twice reports an existing user"
    );
    assert!(matches!(fx.store.head(&u).await, Err(ReadError::NotFound)));
    assert!(
        fx.store
            .list_revisions(&u, 10)
            .await
            .expect("list")
            .is_empty()
    );
    assert_eq!(fx.store.stats().await.expect("stats").images, 0);
    assert_eq!(
        fx.store
            .check_integrity()
            .await
            .expect("check")
            .images_checked,
        0
    );
}

async fn chain<S: RevStore>(
    store: &S,
    u: &snug_revstore::UserId,
    clock: &snug_revstore::ManualClock,
    n: u64,
) -> Vec<Revision> {
    let mut revs: Vec<Revision> = Vec::new();
    for i in 0..n {
        let pre = revs
            .last()
            .cloned()
            .map_or(Precondition::MustNotExist, Precondition::MustMatch);
        revs.push(
            put_ok(store, u, pre, &image(100 + i, 5000))
                .await
                .info
                .revision,
        );
        clock.advance(Duration::from_secs(1));
    }
    revs
}

fn retained(history: &[snug_revstore::RevisionInfo]) -> Vec<bool> {
    // Oldest first, for readable assertions.
    history.iter().rev().map(|r| r.retained).collect()
}

pub(crate) async fn reclaim_keeps_newest_and_grace_and_journals<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let revs = chain(&fx.store, &u, &fx.clock, 5).await;
    // Within the grace period nothing goes.
    let report = fx.store.reclaim().await.expect("reclaim");
    assert_eq!(report.revisions, 0);
    fx.clock.advance(Duration::from_secs(120));
    let report = fx.store.reclaim().await.expect("reclaim");
    assert_eq!(report.revisions, 3);
    assert_eq!(report.images, 3);
    // Unreferenced chunks go at the latest once they are older than the orphan period (a backend
    // that cannot tell them from a streaming put's chunks waits that long).
    fx.clock.advance(Duration::from_secs(2 * 3600));
    let later = fx.store.reclaim().await.expect("reclaim");
    assert_eq!(later.revisions, 0);
    let chunks = report.chunks + later.chunks;
    assert!(chunks > 0);
    let history = fx.store.list_revisions(&u, 10).await.expect("list");
    assert_eq!(retained(&history), vec![false, false, false, true, true]);
    let journal = fx.store.journal(1000).await.expect("journal");
    let journaled: std::collections::HashSet<String> = journal
        .iter()
        .filter(|j| j.kind == ReclaimedKind::Revision)
        .map(|j| j.subject.clone())
        .collect();
    assert_eq!(journaled, revs[..3].iter().map(|r| r.to_string()).collect());
    assert_eq!(
        journal
            .iter()
            .filter(|j| j.kind == ReclaimedKind::Chunk)
            .count() as u64,
        chunks
    );
    // A put based on a reclaimed revision is stale, not unknown.
    let err = put(
        &fx.store,
        &u,
        Precondition::MustMatch(revs[0].clone()),
        b"x",
    )
    .await
    .expect_err("stale");
    assert_eq!(err.reason(), "STALE_REVISION");
    assert_eq!(
        fx.store.reclaim().await.expect("again"),
        Default::default(),
        "a second pass finds nothing"
    );
    assert_clean(&fx.store).await;
}

pub(crate) async fn reclaim_never_takes_the_current_image<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let tune = Tune {
        retention: Retention {
            keep_newest: 0,
            grace: Duration::ZERO,
            orphan_after: Duration::from_secs(3600),
        },
        ..Tune::default()
    };
    let Some((fx, u)) = provisioned(open, tune, "alice").await else {
        return;
    };
    let revs = chain(&fx.store, &u, &fx.clock, 3).await;
    fx.clock.advance(Duration::from_secs(3600 * 24 * 365));
    fx.store.reclaim().await.expect("reclaim");
    let history = fx.store.list_revisions(&u, 10).await.expect("list");
    assert_eq!(retained(&history), vec![false, false, true]);
    assert_eq!(fx.store.head(&u).await.expect("head").revision, revs[2]);
    assert_eq!(fetch(&fx.store, &u).await, image(102, 5000));
    assert_clean(&fx.store).await;
}

pub(crate) async fn reclaim_spares_the_base_of_a_put_in_flight<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let tune = Tune {
        retention: Retention {
            keep_newest: 0,
            grace: Duration::from_secs(60),
            orphan_after: Duration::from_secs(3600),
        },
        ..Tune::default()
    };
    let Some((fx, u)) = provisioned(open, tune, "alice").await else {
        return;
    };
    let store = Arc::new(fx.store);
    let revs = chain(&*store, &u, &fx.clock, 2).await;
    // A put based on r2 starts and stalls halfway through its body.
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let first_half = Bytes::from(image(7, 3000));
    let stalled = futures::stream::once(async move {
        let _ = started_tx.send(());
        Ok(first_half)
    })
    .chain(futures::stream::once(async move {
        let _ = release_rx.await;
        Ok(Bytes::from(image(8, 3000)))
    }));
    let request = PutRequest {
        user: u.clone(),
        precondition: Precondition::MustMatch(revs[1].clone()),
        principal: who("slow-device"),
        idempotency_key: None,
        expected_length: None,
        quota_bytes: None,
    };
    let in_flight = {
        let store = store.clone();
        tokio::spawn(async move { store.put(request, stalled).await })
    };
    started_rx.await.expect("put started");
    // Meanwhile another device lands r3, so r2 is no longer current, and time passes the grace.
    let r3 = put_ok(
        &*store,
        &u,
        Precondition::MustMatch(revs[1].clone()),
        &image(9, 3000),
    )
    .await
    .info
    .revision;
    fx.clock.advance(Duration::from_secs(600));
    store.reclaim().await.expect("reclaim");
    let history = store.list_revisions(&u, 10).await.expect("list");
    assert_eq!(
        retained(&history),
        vec![false, true, true],
        "r2 is the base of a put in flight"
    );
    release_tx.send(()).expect("release");
    match in_flight.await.expect("join") {
        Err(PutError::Stale { base, current }) => {
            assert_eq!((base, current), (revs[1].clone(), r3))
        }
        other => panic!("expected Stale, got {other:?}"),
    }
    store.reclaim().await.expect("reclaim");
    let history = store.list_revisions(&u, 10).await.expect("list");
    assert_eq!(
        retained(&history),
        vec![false, false, true],
        "with the put gone, r2 goes too"
    );
    assert_clean(&*store).await;
}

/// A pass that runs while a put is past read-back but not yet committed must leave every chunk
/// the put staged, including chunks it shares with a revision the pass releases: the put's
/// image has no record yet, so only its publication record protects them.
pub(crate) async fn reclaim_between_read_back_and_commit_spares_the_put<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let tune = Tune {
        retention: Retention {
            keep_newest: 1,
            grace: Duration::ZERO,
            orphan_after: Duration::from_secs(3600),
        },
        ..Tune::default()
    };
    let Some((fx, u)) = provisioned(open, tune, "alice").await else {
        return;
    };
    let store = Arc::new(fx.store);
    let revs = chain(&*store, &u, &fx.clock, 2).await;
    // Past the orphan period: the stored chunks are old, so no backend keeps them for their age.
    fx.clock.advance(Duration::from_secs(2 * 3600));
    // r1's bytes with its last chunk changed: four of its five chunks are shared with r1.
    let mut bytes = image(100, 5000);
    bytes[4500] ^= 0xff;
    let (report_tx, report_rx) = std::sync::mpsc::channel();
    {
        let store = store.clone();
        let runtime = tokio::runtime::Handle::current();
        fx.faults.once(FaultPoint::BeforeCommit, move || {
            let report = std::thread::spawn(move || runtime.block_on(store.reclaim()))
                .join()
                .expect("the pass's thread");
            report_tx.send(report).expect("report");
        });
    }
    let outcome = put_ok(
        &*store,
        &u,
        Precondition::MustMatch(revs[1].clone()),
        &bytes,
    )
    .await;
    let report = report_rx
        .try_recv()
        .expect("the pass ran between read-back and commit")
        .expect("reclaim");
    assert_eq!(report.revisions, 1, "r1 is released: {report:?}");
    assert_eq!(report.images, 1, "r1's image goes: {report:?}");
    assert_eq!(
        store.head(&u).await.expect("head").revision,
        outcome.info.revision
    );
    assert_eq!(
        fetch(&*store, &u).await,
        bytes,
        "every chunk of the put is there"
    );
    assert_clean(&*store).await;
}

/// Objects are named by their content, so a put of bytes a pass is deleting names the same
/// object. A put that reaches the store while the pass deletes must write the object anew after
/// the deletion, never find the doomed one and commit a revision whose bytes are then gone.
pub(crate) async fn a_put_never_lands_on_an_object_a_pass_deletes<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let tune = Tune {
        retention: Retention {
            keep_newest: 1,
            grace: Duration::ZERO,
            orphan_after: Duration::from_secs(3600),
        },
        ..Tune::default()
    };
    let Some((fx, u)) = provisioned(open, tune, "alice").await else {
        return;
    };
    let store = Arc::new(fx.store);
    let revs = chain(&*store, &u, &fx.clock, 2).await;
    // r1's bytes again, as r3: whatever the pass deletes of r1, the put needs all of it.
    let bytes = image(100, 5000);
    let (put_tx, put_rx) = std::sync::mpsc::channel();
    {
        let store = store.clone();
        let u = u.clone();
        let base = revs[1].clone();
        let bytes = bytes.clone();
        let runtime = tokio::runtime::Handle::current();
        fx.faults.once(FaultPoint::BeforeObjectDeletion, move || {
            let landing = runtime.spawn(async move {
                put(&*store, &u, Precondition::MustMatch(base), &bytes).await
            });
            put_tx.send(landing).expect("the put's handle");
            // Long enough for an unhindered put of 5 KB to reach its commit.
            std::thread::sleep(Duration::from_millis(500));
        });
    }
    let report = store.reclaim().await.expect("reclaim");
    assert_eq!(report.revisions, 1, "r1 is released: {report:?}");
    let landing = put_rx.try_recv().expect("the pass reached its deletions");
    let outcome = landing.await.expect("join").expect("the put lands");
    assert_eq!(
        store.head(&u).await.expect("head").revision,
        outcome.info.revision
    );
    assert_eq!(
        fetch(&*store, &u).await,
        bytes,
        "r3's bytes survive the pass"
    );
    assert_clean(&*store).await;
    // And a later pass, with r2 released, keeps them too.
    fx.clock.advance(Duration::from_secs(1));
    store.reclaim().await.expect("reclaim");
    assert_eq!(fetch(&*store, &u).await, bytes);
    assert_clean(&*store).await;
}

pub(crate) async fn reclaim_spares_a_leased_download<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let tune = Tune {
        retention: Retention {
            keep_newest: 0,
            grace: Duration::ZERO,
            orphan_after: Duration::from_secs(3600),
        },
        ..Tune::default()
    };
    let Some((fx, u)) = provisioned(open, tune, "alice").await else {
        return;
    };
    let revs = chain(&fx.store, &u, &fx.clock, 2).await;
    let download = fx
        .store
        .get_revision(&u, &revs[0], &who("device-b"))
        .await
        .expect("get r1");
    fx.store.reclaim().await.expect("reclaim");
    let history = fx.store.list_revisions(&u, 10).await.expect("list");
    assert_eq!(
        retained(&history),
        vec![true, true],
        "r1 is being downloaded"
    );
    assert_eq!(
        download.body.read_to_vec().await.expect("body"),
        image(100, 5000)
    );
    fx.store.reclaim().await.expect("reclaim");
    let history = fx.store.list_revisions(&u, 10).await.expect("list");
    assert_eq!(
        retained(&history),
        vec![false, true],
        "the finished download no longer holds r1"
    );
    assert_clean(&fx.store).await;
}

pub(crate) async fn reclaim_refuses_on_incomplete_listing<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let tune = Tune {
        retention: Retention {
            keep_newest: 0,
            grace: Duration::ZERO,
            orphan_after: Duration::ZERO,
        },
        ..Tune::default()
    };
    let Some((fx, u)) = provisioned(open, tune, "alice").await else {
        return;
    };
    chain(&fx.store, &u, &fx.clock, 3).await;
    let before = fx.store.stats().await.expect("stats");
    fx.faults.set_incomplete_listing(true);
    match fx.store.reclaim().await {
        Err(e @ ReclaimError::IncompleteListing) => assert_eq!(e.reason(), "LISTING_INCOMPLETE"),
        other => panic!("expected IncompleteListing, got {other:?}"),
    }
    assert_eq!(
        fx.store.stats().await.expect("stats"),
        before,
        "nothing reclaimed"
    );
    assert!(
        fx.store.journal(10).await.expect("journal").is_empty(),
        "nothing journaled"
    );
    assert!(
        fx.store
            .list_revisions(&u, 10)
            .await
            .expect("list")
            .iter()
            .all(|r| r.retained)
    );
    fx.faults.set_incomplete_listing(false);
    assert_eq!(fx.store.reclaim().await.expect("reclaim").revisions, 2);
}

pub(crate) async fn orphans_are_reclaimed_after_grace<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &image(1, 4000))
        .await
        .info
        .revision;
    // A put that is abandoned mid-stream without any cleanup running (its future is dropped, as
    // when a process dies): its publication record stays behind.
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let never_ending = futures::stream::once(async move {
        let _ = started_tx.send(());
        Ok(Bytes::from(image(2, 4000)))
    })
    .chain(futures::stream::pending());
    let request = PutRequest {
        user: u.clone(),
        precondition: Precondition::MustMatch(r1.clone()),
        principal: who("device-a"),
        idempotency_key: None,
        expected_length: None,
        quota_bytes: None,
    };
    let store = Arc::new(fx.store);
    let task = {
        let store = store.clone();
        tokio::spawn(async move { store.put(request, never_ending).await })
    };
    started_rx.await.expect("started");
    tokio::time::sleep(Duration::from_millis(50)).await;
    task.abort();
    let _ = task.await;
    assert_eq!(
        store.reclaim().await.expect("reclaim").publications,
        0,
        "not an orphan within the grace period"
    );
    fx.clock.advance(Duration::from_secs(2 * 3600));
    let report = store.reclaim().await.expect("reclaim");
    assert_eq!(report.publications, 1);
    assert!(
        store
            .journal(100)
            .await
            .expect("journal")
            .iter()
            .any(|j| j.kind == ReclaimedKind::Publication)
    );
    assert_eq!(store.head(&u).await.expect("head").revision, r1);
    assert_clean(&*store).await;
}

pub(crate) async fn chunks_are_deduplicated_across_revisions<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let chunk = CHUNK as usize;
    let mut bytes = image(1, 64 * chunk);
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &bytes)
        .await
        .info
        .revision;
    let s1 = fx.store.stats().await.expect("stats");
    assert_eq!((s1.chunks, s1.chunk_bytes), (64, 64 * chunk as u64));
    // Change one byte in one "page": one new chunk.
    bytes[10 * chunk + 5] ^= 0xff;
    let r2 = put_ok(&fx.store, &u, Precondition::MustMatch(r1), &bytes)
        .await
        .info
        .revision;
    let s2 = fx.store.stats().await.expect("stats");
    assert_eq!(
        (s2.images, s2.chunks, s2.chunk_bytes),
        (2, 65, 65 * chunk as u64)
    );
    // A second user with the same bytes adds an image row at most, and no chunks.
    let bob = user("bob");
    fx.store.provision_user(&bob).await.expect("provision");
    put_ok(&fx.store, &bob, Precondition::MustNotExist, &bytes).await;
    assert_eq!(fx.store.stats().await.expect("stats").chunks, 65);
    // Repeated content inside one image is stored once.
    let zeros = vec![0u8; 16 * chunk];
    put_ok(&fx.store, &u, Precondition::MustMatch(r2), &zeros).await;
    assert_eq!(fx.store.stats().await.expect("stats").chunks, 66);
    assert_eq!(fetch(&fx.store, &u).await, zeros);
    assert_clean(&fx.store).await;
}

pub(crate) async fn ledgers_record_served_and_verdicts<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &image(1, 2000))
        .await
        .info
        .revision;
    fx.clock.advance(Duration::from_secs(5));
    let _ = put(&fx.store, &u, Precondition::MustNotExist, &image(2, 2000))
        .await
        .expect_err("conflict");
    fx.clock.advance(Duration::from_secs(5));
    let download = fx.store.get(&u, &who("laptop")).await.expect("get");
    drop(download);
    let served = fx.store.served_ledger(&u, 10).await.expect("served");
    assert_eq!(served.len(), 1);
    assert_eq!(
        (
            served[0].revision.clone(),
            served[0].principal.clone(),
            served[0].at
        ),
        (r1.clone(), who("laptop"), T0.plus(Duration::from_secs(10)))
    );
    let verdicts = fx.store.put_ledger(&u, 10).await.expect("verdicts");
    assert_eq!(verdicts.len(), 2);
    assert_eq!(
        verdicts[0].verdict,
        Verdict::Refused {
            reason: "REVISION_MISMATCH".into()
        }
    );
    assert_eq!(verdicts[0].revision, None);
    assert_eq!(verdicts[1].verdict, Verdict::Accepted);
    assert_eq!(
        (
            verdicts[1].revision.clone(),
            verdicts[1].principal.clone(),
            verdicts[1].at
        ),
        (Some(r1), who("device-a"), T0)
    );
    assert!(
        fx.store
            .served_ledger(&user("bob"), 10)
            .await
            .expect("served")
            .is_empty()
    );
}

/// A stored chunk with one byte changed on disk (in a row, in an object) is never served: every
/// download of an image holding it, current or named, ends in `STORAGE_CORRUPT` having handed on
/// at most the bytes before the damaged chunk, and the integrity check names it (issue 23, point 3).
pub(crate) async fn a_damaged_chunk_is_never_served<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let chunk = CHUNK as usize;
    let bytes = image(41, 64 * chunk);
    let first = put_ok(&fx.store, &u, Precondition::MustNotExist, &bytes).await;
    let at = 37 * chunk;
    let damaged = Digest::of(&bytes[at..at + chunk]);
    (fx.damage)(damaged).await;
    for revision in [None, Some(&first.info.revision)] {
        let handed_on = assert_refuses_damage(&fx.store, &u, revision, &bytes).await;
        assert!(
            handed_on <= at,
            "{handed_on} bytes handed on, past the damaged chunk at {at}"
        );
    }
    let report = fx.store.check_integrity().await.expect("integrity check");
    assert!(
        report
            .problems
            .contains(&snug_revstore::IntegrityProblem::ChunkMismatch { chunk: damaged }),
        "{:?}",
        report.problems
    );
}

/// A put that brings the bytes of a damaged chunk writes them afresh and heals every image that
/// holds the chunk (issue 36 point 8): the chunks a put shares with what the store holds are
/// checked against their addresses before the pointer moves, not only the ones it writes, and a
/// damaged one is stored again from the put's own bytes instead of being reused. (A pack object
/// overwritten out of band at the same size passed a check of its size alone, and the new
/// revision was unreadable.)
pub(crate) async fn a_put_reusing_a_damaged_chunk_writes_it_afresh<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, alice)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let bob = user("bob");
    fx.store.provision_user(&bob).await.expect("provision bob");
    let chunk = CHUNK as usize;
    // Two revisions of alice's, both holding the chunk that will be damaged.
    let first = image(42, 16 * chunk);
    let r1 = put_ok(&fx.store, &alice, Precondition::MustNotExist, &first)
        .await
        .info
        .revision;
    let mut second = first.clone();
    second[12 * chunk + 7] ^= 0xff;
    put_ok(
        &fx.store,
        &alice,
        Precondition::MustMatch(r1.clone()),
        &second,
    )
    .await;
    let at = 5 * chunk;
    let damaged = Digest::of(&first[at..at + chunk]);
    (fx.damage)(damaged).await;
    let (_, served) = drain(&fx.store, &alice, None).await;
    assert!(served.is_err(), "the damage is real: {served:?}");
    // Bob's image shares alice's first eight chunks, the damaged one among them: it lands, and
    // reads back whole.
    let mut bobs = first[..8 * chunk].to_vec();
    bobs.extend_from_slice(&image(43, 8 * chunk));
    put_ok(&fx.store, &bob, Precondition::MustNotExist, &bobs).await;
    assert_eq!(fetch(&fx.store, &bob).await, bobs);
    // Alice's revisions read whole again, and the store holds no damage.
    assert_eq!(fetch(&fx.store, &alice).await, second);
    let (old, served) = drain(&fx.store, &alice, Some(&r1)).await;
    assert!(served.is_ok(), "{served:?}");
    assert_eq!(old, first);
    assert_clean(&fx.store).await;
    // The same when the put's whole image is one the store already holds: carol pushes alice's
    // current image after another of its chunks is damaged.
    let carol = user("carol");
    fx.store
        .provision_user(&carol)
        .await
        .expect("provision carol");
    (fx.damage)(Digest::of(&second[2 * chunk..3 * chunk])).await;
    put_ok(&fx.store, &carol, Precondition::MustNotExist, &second).await;
    for holder in [&carol, &alice] {
        assert_eq!(fetch(&fx.store, holder).await, second);
    }
    assert_clean(&fx.store).await;
}

/// A put that does not land leaves nothing behind (issue 23, point 2): a compare-and-swap loser
/// past its read-back, and a put whose body breaks off, have their bytes reclaimed as soon as they
/// fail, not after the orphan period; only the winners' bytes stay at rest.
pub(crate) async fn a_put_that_does_not_land_leaves_nothing_behind<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let chunk = CHUNK as usize;
    let (a, b, c) = (
        image(51, 20 * chunk),
        image(52, 20 * chunk),
        image(53, 20 * chunk),
    );
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &a)
        .await
        .info
        .revision;
    let store = Arc::new(fx.store);
    let (landed_tx, landed_rx) = std::sync::mpsc::channel();
    {
        let (store, u, r1, b) = (store.clone(), u.clone(), r1.clone(), b.clone());
        let runtime = tokio::runtime::Handle::current();
        fx.faults.once(FaultPoint::BeforeCommit, move || {
            let landed = std::thread::spawn(move || {
                runtime.block_on(put(&*store, &u, Precondition::MustMatch(r1), &b))
            })
            .join()
            .expect("the winner's thread");
            landed_tx.send(landed).expect("send");
        });
    }
    // c's put has written and read back its bytes when b lands on the same base.
    match put(&*store, &u, Precondition::MustMatch(r1.clone()), &c).await {
        Err(PutError::Stale { .. }) => {}
        other => panic!("expected the loser to be stale, got {other:?}"),
    }
    let winner = landed_rx
        .try_recv()
        .expect("b landed between c's read-back and commit")
        .expect("b's put");
    let winners = 40 * chunk as u64;
    assert_eq!((fx.at_rest)().await, winners, "only a's and b's bytes stay");
    let journal = store.journal(100).await.expect("journal");
    assert!(
        journal.iter().any(|e| e.kind == ReclaimedKind::Publication
            && e.user.as_ref().map(|u| u.as_str()) == Some("alice")),
        "the loser's record is journaled: {journal:?}"
    );

    // A body that breaks off after ten chunks.
    let mut pieces: Vec<std::io::Result<Bytes>> = c[..10 * chunk]
        .chunks(chunk)
        .map(|p| Ok(Bytes::copy_from_slice(p)))
        .collect();
    pieces.push(Err(std::io::Error::other("the connection dropped")));
    let request = PutRequest {
        user: u.clone(),
        precondition: Precondition::MustMatch(winner.info.revision.clone()),
        principal: who("device-a"),
        idempotency_key: None,
        expected_length: Some(c.len() as u64),
        quota_bytes: None,
    };
    match store.put(request, futures::stream::iter(pieces)).await {
        Err(PutError::BodyAborted(_)) => {}
        other => panic!("expected BODY_ABORTED, got {other:?}"),
    }
    assert_eq!(
        (fx.at_rest)().await,
        winners,
        "nothing of the broken put stays"
    );
    assert_eq!(fetch(&*store, &u).await, b);
    assert_clean(&*store).await;
}

/// The bytes one user's unfinished puts hold are bounded (issue 23, point 2): each holds its
/// declared length, or the quota, until it lands or its bytes are reclaimed; a put beyond the
/// limit is refused PUTS_IN_FLIGHT before any byte is read, and admitted again once they land.
pub(crate) async fn a_users_unfinished_puts_are_limited<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let chunk = CHUNK as usize;
    let len = 10 * chunk;
    let tune = Tune {
        staged_limit: Some(3 * len as u64),
        ..Tune::default()
    };
    let Some((fx, u)) = provisioned(open, tune, "alice").await else {
        return;
    };
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &image(60, len))
        .await
        .info
        .revision;
    let store = Arc::new(fx.store);
    // Three puts that stall after their first chunk, each declaring its length.
    let mut stalled = Vec::new();
    for seed in 61..64u64 {
        let bytes = image(seed, len);
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let (resume_tx, resume_rx) = tokio::sync::oneshot::channel::<()>();
        let first = Bytes::copy_from_slice(&bytes[..chunk]);
        let rest = Bytes::copy_from_slice(&bytes[chunk..]);
        let body = futures::stream::once(async move {
            let _ = started_tx.send(());
            Ok::<_, std::io::Error>(first)
        })
        .chain(futures::stream::once(async move {
            let _ = resume_rx.await;
            Ok(rest)
        }));
        let request = PutRequest {
            user: u.clone(),
            precondition: Precondition::MustMatch(r1.clone()),
            principal: who("device-a"),
            idempotency_key: None,
            expected_length: Some(len as u64),
            quota_bytes: None,
        };
        let store = store.clone();
        let task = tokio::spawn(async move { store.put(request, body).await });
        started_rx.await.expect("the put began and reads its body");
        stalled.push((task, resume_tx));
    }
    let refused = put(
        &*store,
        &u,
        Precondition::MustMatch(r1.clone()),
        &image(64, len),
    )
    .await;
    match refused {
        Err(PutError::PutsInFlight { staged, limit }) => {
            assert_eq!((staged, limit), (3 * len as u64, 3 * len as u64));
        }
        other => panic!("expected PUTS_IN_FLIGHT, got {other:?}"),
    }
    let ledger = store.put_ledger(&u, 1).await.expect("ledger");
    assert_eq!(
        ledger[0].verdict,
        Verdict::Refused {
            reason: "PUTS_IN_FLIGHT".into()
        }
    );
    // Let them finish: one lands, two lose to it and are reclaimed; the user may write again.
    let mut landed = None;
    for (task, resume) in stalled {
        let _ = resume.send(());
        if let Ok(outcome) = task.await.expect("the put's task") {
            landed = Some(outcome.info.revision);
        }
    }
    let current = landed.expect("one of them landed");
    put_ok(
        &*store,
        &u,
        Precondition::MustMatch(current),
        &image(65, len),
    )
    .await;
    assert_clean(&*store).await;
}

pub(crate) async fn health_reports_the_backend<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some(fx) = open(Tune::default()).await else {
        return;
    };
    fx.store.health().await.expect("healthy");
    assert!(["memory", "sqlite", "postgres", "postgres+objects"].contains(&fx.store.backend()));
}

/// Writes `bytes` as `u`'s next image, by `principal`.
async fn put_as<S: RevStore>(
    store: &S,
    u: &snug_revstore::UserId,
    principal: &str,
    precondition: Precondition,
    bytes: &[u8],
    quota_bytes: Option<u64>,
) -> Result<snug_revstore::PutOutcome, PutError> {
    let request = PutRequest {
        user: u.clone(),
        precondition,
        principal: who(principal),
        idempotency_key: None,
        expected_length: Some(bytes.len() as u64),
        quota_bytes,
    };
    store.put(request, body(bytes)).await
}

/// Issue 20, point 6: erasing a user leaves no byte of their images (nor the principals of
/// their ledger rows) anywhere in the store, as the store's actual storage shows (files with the
/// WAL checkpointed, table rows, bucket objects); another user's image that shared chunks with
/// theirs (in the same pack, where packs exist) is intact, verifies, and reads back byte for
/// byte; usage reports both before and after; a second erasure reports zeros.
pub(crate) async fn erasure_leaves_no_byte_of_the_user_and_spares_a_sharer<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, alice)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let bob = user("bob");
    fx.store.provision_user(&bob).await.expect("provision bob");
    let chunk = CHUNK as usize;
    // r1: twelve chunks; r2 keeps its first six and replaces the rest; bob's image is r2's first
    // six (stored in alice's first pack) and six of his own.
    let a1 = image(901, 12 * chunk);
    let mut a2 = a1[..6 * chunk].to_vec();
    a2.extend_from_slice(&image(902, 6 * chunk));
    let mut b = a2[..6 * chunk].to_vec();
    b.extend_from_slice(&image(903, 6 * chunk));
    let principal = "alice-phone-5c1d9e";
    let r1 = put_as(
        &fx.store,
        &alice,
        principal,
        Precondition::MustNotExist,
        &a1,
        None,
    )
    .await
    .expect("r1");
    put_as(
        &fx.store,
        &alice,
        principal,
        Precondition::MustMatch(r1.info.revision.clone()),
        &a2,
        None,
    )
    .await
    .expect("r2");
    let _ = fx
        .store
        .get(&alice, &who(principal))
        .await
        .expect("get")
        .body
        .read_to_vec()
        .await
        .expect("read");
    put_as(
        &fx.store,
        &bob,
        "bob-laptop",
        Precondition::MustNotExist,
        &b,
        None,
    )
    .await
    .expect("bob's image");

    let usage = fx.store.usage(&alice).await.expect("usage");
    assert_eq!(
        usage,
        snug_revstore::UsageReport {
            current_bytes: a2.len() as u64,
            history_bytes: 6 * chunk as u64,
            revisions: 2,
            retained_revisions: 2,
        }
    );
    assert_eq!(
        fx.store.usage(&user("nobody")).await.expect("usage"),
        snug_revstore::UsageReport::default()
    );

    // Every chunk only alice's images hold, her principal and her id (the tombstone and the
    // ledger rows keep a pseudonym of it).
    let theirs: Vec<Vec<u8>> = a1[6 * chunk..]
        .chunks(chunk)
        .chain(a2[6 * chunk..].chunks(chunk))
        .map(<[u8]>::to_vec)
        .chain([
            principal.as_bytes().to_vec(),
            alice.as_str().as_bytes().to_vec(),
        ])
        .collect();
    let before = (fx.scan)(theirs.clone()).await;
    assert!(
        (0..theirs.len()).all(|i| before
            .iter()
            .any(|f| f.starts_with(&format!("needle {i} in")))),
        "the scan finds each needle before the erasure: {before:?}"
    );

    let report = fx.store.erase(&alice).await.expect("erase");
    assert_eq!(report.revisions, 2, "{report:?}");
    assert_eq!(report.images, 2, "{report:?}");
    assert_eq!(report.chunks, 12, "{report:?}");
    assert_eq!(report.bytes, 12 * chunk as u64, "{report:?}");
    assert_eq!(
        report.ledger_rows_scrubbed, 3,
        "two writes, one download: {report:?}"
    );
    assert!(report.packs_wiped <= 1, "{report:?}");

    let after = (fx.scan)(theirs).await;
    assert!(after.is_empty(), "erased bytes left at rest: {after:?}");
    assert!(matches!(
        fx.store.head(&alice).await,
        Err(ReadError::NotFound)
    ));
    assert!(
        fx.store
            .list_revisions(&alice, 100)
            .await
            .expect("list")
            .is_empty()
    );
    assert_eq!(
        fx.store.usage(&alice).await.expect("usage"),
        snug_revstore::UsageReport::default()
    );
    let writes = fx.store.put_ledger(&alice, 100).await.expect("ledger");
    assert_eq!(writes.len(), 2, "the rows stay: {writes:?}");
    assert!(writes.iter().all(|w| w.principal.as_str() == "erased"));
    let served = fx.store.served_ledger(&alice, 100).await.expect("ledger");
    assert!(served.iter().all(|s| s.principal.as_str() == "erased"));
    let journal = fx.store.journal(1000).await.expect("journal");
    assert!(
        journal
            .iter()
            .any(|e| e.kind == ReclaimedKind::Revision && e.subject == r1.info.revision.as_str()),
        "each deletion is journaled: {journal:?}"
    );

    assert_eq!(fetch(&fx.store, &bob).await, b, "bob's image is intact");
    assert_clean(&fx.store).await;
    assert!(report.complete(), "{report:?}");
    assert_eq!(
        fx.store.erase(&alice).await.expect("erase again"),
        snug_revstore::ErasureReport::default()
    );
    // The erased id is a tombstone (issue 36): refused at first contact, and its writes are
    // refused like an unknown user's, unledgered, with nothing stored.
    assert!(matches!(
        fx.store.provision_user(&alice).await,
        Err(snug_revstore::ProvisionError::Erased)
    ));
    let fresh = image(904, 3 * chunk);
    assert!(matches!(
        put(&fx.store, &alice, Precondition::MustNotExist, &fresh).await,
        Err(PutError::NotFound)
    ));
    assert_eq!(
        fx.store
            .put_ledger(&alice, 100)
            .await
            .expect("ledger")
            .len(),
        2,
        "no row names whoever tried after the erasure"
    );
    assert!(matches!(
        fx.store.head(&alice).await,
        Err(ReadError::NotFound)
    ));
    assert!((fx.scan)(vec![fresh[..chunk].to_vec()]).await.is_empty());
    assert_eq!(fetch(&fx.store, &bob).await, b);
}

/// Issue 36, point 4: a wipe of erased bytes that fails is not forgotten. The erasure reports it
/// incomplete, the integrity check lists it, the erased bytes are still found at rest, and the
/// next reclamation pass wipes them (as a second erasure would), after which nothing of them is
/// found and the check is clean. Backends that keep no objects have nothing to wipe.
pub(crate) async fn a_failed_wipe_is_retried_until_done<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, alice)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let bob = user("bob");
    fx.store.provision_user(&bob).await.expect("provision bob");
    let chunk = CHUNK as usize;
    // Alice's twelve chunks go in one pack; bob's image names six of them, so the pack stays
    // and only alice's other six are wiped in it.
    let a = image(931, 12 * chunk);
    let mut b = a[..6 * chunk].to_vec();
    b.extend_from_slice(&image(932, 6 * chunk));
    put_ok(&fx.store, &alice, Precondition::MustNotExist, &a).await;
    put_ok(&fx.store, &bob, Precondition::MustNotExist, &b).await;
    let theirs: Vec<Vec<u8>> = a[6 * chunk..].chunks(chunk).map(<[u8]>::to_vec).collect();

    fx.faults.fail_wipes(u32::MAX);
    let report = fx.store.erase(&alice).await.expect("erase");
    let wipes = report.packs_wiped > 0;
    assert_eq!(report.complete(), !wipes, "{report:?}");
    if wipes {
        assert_eq!(report.wipes_pending, 6, "{report:?}");
        assert!(
            !(fx.scan)(theirs.clone()).await.is_empty(),
            "the failed wipe left them"
        );
        let check = fx.store.check_integrity().await.expect("check");
        assert!(
            check
                .problems
                .iter()
                .any(|p| matches!(p, IntegrityProblem::UnfinishedWipe { ranges: 6, .. })),
            "{check:?}"
        );
        // Still failing: a pass keeps them pending.
        let pass = fx.store.reclaim().await.expect("reclaim");
        assert_eq!((pass.ranges_wiped, pass.wipes_pending), (0, 6), "{pass:?}");
    }
    fx.faults.fail_wipes(0);
    let pass = fx.store.reclaim().await.expect("reclaim");
    assert_eq!(pass.wipes_pending, 0, "{pass:?}");
    assert_eq!(pass.ranges_wiped, if wipes { 6 } else { 0 }, "{pass:?}");
    assert!((fx.scan)(theirs).await.is_empty(), "wiped at last");
    assert_eq!(fetch(&fx.store, &bob).await, b, "bob's image is intact");
    assert_clean(&fx.store).await;
}

/// A put racing an erasure of its user: one that has streamed and read back its bytes when the
/// erasure runs is refused (retryable), leaves nothing at rest, and its retry (must-match or
/// must-not-exist alike) is refused by the erased id's tombstone: nothing lands (issue 36).
pub(crate) async fn a_put_racing_an_erasure_is_refused_and_leaves_nothing<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let chunk = CHUNK as usize;
    let first = image(911, 8 * chunk);
    let r1 = put_ok(&fx.store, &u, Precondition::MustNotExist, &first)
        .await
        .info
        .revision;
    let store = Arc::new(fx.store);
    let (erased_tx, erased_rx) = std::sync::mpsc::channel();
    {
        let (store, u) = (store.clone(), u.clone());
        let runtime = tokio::runtime::Handle::current();
        fx.faults.once(FaultPoint::BeforeCommit, move || {
            let report = std::thread::spawn(move || runtime.block_on(store.erase(&u)))
                .join()
                .expect("the erasure's thread");
            erased_tx.send(report).expect("send");
        });
    }
    let second = image(912, 8 * chunk);
    match put(&*store, &u, Precondition::MustMatch(r1.clone()), &second).await {
        Err(PutError::Storage(e)) => {
            assert_eq!(e.reason(), &snug_reasons::sync::STORAGE_UNAVAILABLE, "{e}");
        }
        other => panic!("expected the racing put to be refused, got {other:?}"),
    }
    let report = erased_rx
        .try_recv()
        .expect("the erasure ran between read-back and commit")
        .expect("erase");
    assert_eq!(report.revisions, 1, "{report:?}");
    assert_eq!(
        report.publications, 1,
        "the racing put's record: {report:?}"
    );
    assert_eq!((fx.at_rest)().await, 0, "nothing of either image stays");
    // Its retry, and any other write, meets the tombstone (issue 36): nothing comes back.
    for precondition in [Precondition::MustMatch(r1), Precondition::MustNotExist] {
        match put(&*store, &u, precondition, &second).await {
            Err(PutError::NotFound) => {}
            other => panic!("expected the erased user's write refused, got {other:?}"),
        }
    }
    assert_eq!((fx.at_rest)().await, 0, "nothing came back");
    assert_clean(&*store).await;
}

/// A put may carry the user's own quota, which replaces the store's in both directions and is
/// enforced exactly as the default is: at the byte that crosses it.
pub(crate) async fn a_per_user_quota_replaces_the_default<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let tune = Tune {
        quota: 10_000,
        ..Tune::default()
    };
    let Some((fx, u)) = provisioned(open, tune, "alice").await else {
        return;
    };
    let cases: [(Option<u64>, usize, Option<u64>); 5] = [
        // (the user's quota, image size, the quota it is refused under)
        (None, 10_001, Some(10_000)),
        (Some(5_000), 5_001, Some(5_000)),
        (Some(5_000), 5_000, None),
        (Some(30_000), 30_001, Some(30_000)),
        (Some(30_000), 30_000, None),
    ];
    for (i, (quota, size, refused)) in cases.into_iter().enumerate() {
        let bytes = image(920 + i as u64, size);
        let current = fx.store.head(&u).await.ok().map(|h| h.revision);
        let precondition = current.map_or(Precondition::MustNotExist, Precondition::MustMatch);
        let outcome = put_as(&fx.store, &u, "device-a", precondition, &bytes, quota).await;
        match (refused, outcome) {
            (Some(limit), Err(PutError::QuotaExceeded { quota })) => {
                assert_eq!(quota, limit, "case {i}")
            }
            (None, Ok(o)) => assert_eq!(o.info.size, size as u64, "case {i}"),
            (want, got) => panic!("case {i}: expected refusal under {want:?}, got {got:?}"),
        }
    }
    assert_eq!(fx.store.head(&u).await.expect("head").size, 30_000);
}

/// Puts `bytes` on top of the last revision of `history` and records it.
async fn push_onto<S: RevStore>(
    fx: &Fixture<S>,
    u: &snug_revstore::UserId,
    bytes: &[u8],
    history: &mut Vec<(Revision, Vec<u8>)>,
) {
    let pre = history.last().map_or(Precondition::MustNotExist, |(r, _)| {
        Precondition::MustMatch(r.clone())
    });
    let revision = put_ok(&fx.store, u, pre, bytes).await.info.revision;
    history.push((revision, bytes.to_vec()));
    fx.clock.advance(Duration::from_secs(1));
}

/// Every revision of `history` downloads as its bytes.
async fn reads_back<S: RevStore>(
    store: &S,
    u: &snug_revstore::UserId,
    history: &[(Revision, Vec<u8>)],
) {
    for (revision, want) in history {
        let (got, end) = drain(store, u, Some(revision)).await;
        end.expect("read");
        assert!(got == *want, "revision {revision} reads back");
    }
}

/// Issue 38 point 4: a history of small edits (each revision's manifest may be kept against the
/// one before) reads back byte for byte through reclamation of its older revisions, also of
/// images between a kept one and its base, passes the integrity check, and erases to nothing.
pub(crate) async fn a_history_of_small_edits_reads_back_through_reclamation<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, u)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let chunk = CHUNK as usize;
    let edit = |bytes: &mut Vec<u8>, i: usize| {
        match i % 4 {
            // Grows by a chunk and a part.
            1 => bytes.extend_from_slice(&image(50 + i as u64, chunk + 100)),
            // Shrinks by one.
            3 => bytes.truncate(bytes.len() - chunk - 50),
            _ => {}
        }
        let page = (i * 7) % (bytes.len() / chunk);
        bytes[page * chunk + 3] ^= 0x5a;
        bytes[17] = i as u8;
    };
    let mut bytes = image(7, 64 * chunk);
    let mut history = Vec::new();
    for i in 0..6 {
        push_onto(&fx, &u, &bytes, &mut history).await;
        edit(&mut bytes, i);
    }
    reads_back(&fx.store, &u, &history).await;
    // The first image current again, then more edits on top of it: the images between it and
    // the newest go while both stay.
    let (first, newest) = (history[0].clone(), history[5].clone());
    let restored = fx
        .store
        .restore(RestoreRequest {
            user: u.clone(),
            from: first.0.clone(),
            precondition: Precondition::MustMatch(newest.0.clone()),
            principal: who("device-a"),
            idempotency_key: None,
        })
        .await
        .expect("restore")
        .info
        .revision;
    fx.clock.advance(Duration::from_secs(120));
    let report = fx.store.reclaim().await.expect("reclaim");
    assert_eq!(report.images, 4, "{report:?}");
    let kept = [newest, (restored, first.1)];
    reads_back(&fx.store, &u, &kept).await;
    assert_clean(&fx.store).await;
    let [_, restored] = kept;
    bytes = restored.1.clone();
    history = vec![restored];
    for i in 6..14 {
        edit(&mut bytes, i);
        push_onto(&fx, &u, &bytes, &mut history).await;
    }
    reads_back(&fx.store, &u, &history).await;
    fx.clock.advance(Duration::from_secs(120));
    fx.store.reclaim().await.expect("reclaim");
    reads_back(&fx.store, &u, &history[history.len() - 2..]).await;
    assert_clean(&fx.store).await;
    fx.store.erase(&u).await.expect("erase");
    fx.clock.advance(Duration::from_secs(2 * 3600));
    fx.store.reclaim().await.expect("reclaim");
    let stats = fx.store.stats().await.expect("stats");
    assert_eq!((stats.images, stats.chunks), (0, 0), "{stats:?}");
    assert_clean(&fx.store).await;
}

/// Whether `subscription` wakes within `within`.
async fn woken(subscription: &mut snug_revstore::Subscription, within: Duration) -> bool {
    tokio::time::timeout(within, subscription.changed())
        .await
        .is_ok()
}

/// Issue 40: every commit of a user's revisions (a put, a delta push's put, a restore) and
/// their erasure wakes that user's subscribers, once it has landed; nothing else does (another
/// user's commit, a refused write, a replay), and a subscriber that was not waiting learns of
/// commits in between when it next waits.
pub(crate) async fn a_commit_wakes_its_users_subscribers<
    S: RevStore,
    Fut: Future<Output = Option<Fixture<S>>>,
>(
    open: impl FnOnce(Tune) -> Fut,
) {
    let Some((fx, alice)) = provisioned(open, Tune::default(), "alice").await else {
        return;
    };
    let (landed, quiet) = (Duration::from_secs(10), Duration::from_millis(300));
    let bob = user("bob");
    fx.store.provision_user(&bob).await.expect("provision");
    let mut watching = fx.store.revisions().subscribe(&alice);
    assert_eq!(watching.user(), &alice);
    let mut bobs = fx.store.revisions().subscribe(&bob);
    assert!(!woken(&mut watching, quiet).await, "nothing committed yet");

    let r1 = put_ok(
        &fx.store,
        &alice,
        Precondition::MustNotExist,
        &image(1, 6000),
    )
    .await
    .info;
    // The commit has landed by the time the subscriber is woken: the head it reads is new.
    assert!(woken(&mut watching, landed).await, "a put");
    assert_eq!(fx.store.head(&alice).await.expect("head"), r1);
    assert!(!woken(&mut bobs, quiet).await, "another user's commit");

    let refused = put(
        &fx.store,
        &alice,
        Precondition::MustNotExist,
        &image(2, 6000),
    )
    .await;
    assert!(
        matches!(refused, Err(PutError::Conflict { .. })),
        "{refused:?}"
    );
    assert!(!woken(&mut watching, quiet).await, "a refused write");

    let r2 = put_ok(
        &fx.store,
        &alice,
        Precondition::MustMatch(r1.revision.clone()),
        &image(3, 6000),
    )
    .await
    .info;
    let restored = fx
        .store
        .restore(RestoreRequest {
            user: alice.clone(),
            from: r1.revision.clone(),
            precondition: Precondition::MustMatch(r2.revision.clone()),
            principal: who("operator"),
            idempotency_key: None,
        })
        .await
        .expect("restore")
        .info;
    // Two commits while the subscriber was busy: one wake-up, and the store holds both.
    assert!(woken(&mut watching, landed).await, "a put and a restore");
    assert_eq!(fx.store.head(&alice).await.expect("head"), restored);
    let history = fx.store.list_revisions(&alice, 10).await.expect("history");
    assert_eq!(history.len(), 3);
    while woken(&mut watching, quiet).await {}

    // A retried put with its key is a replay, not a commit.
    let keyed = |precondition: Precondition, bytes: Vec<u8>| {
        let request = PutRequest {
            user: alice.clone(),
            precondition,
            principal: who("device-a"),
            idempotency_key: Some(IdempotencyKey::new("push-7").expect("key")),
            expected_length: Some(bytes.len() as u64),
            quota_bytes: None,
        };
        fx.store.put(request, body(&bytes))
    };
    let first = keyed(
        Precondition::MustMatch(restored.revision.clone()),
        image(4, 6000),
    )
    .await
    .expect("keyed put");
    assert!(woken(&mut watching, landed).await, "the keyed put");
    let again = keyed(
        Precondition::MustMatch(restored.revision.clone()),
        image(4, 6000),
    )
    .await
    .expect("replayed");
    assert!(again.replayed && again.info == first.info);
    assert!(!woken(&mut watching, quiet).await, "a replay");
    // An erasure is announced too: the user has no image now.
    fx.store.erase(&alice).await.expect("erase");
    assert!(woken(&mut watching, landed).await, "an erasure");
    assert!(!woken(&mut bobs, quiet).await, "not bob's");
    drop(bobs);
    drop(watching);
    assert_eq!(fx.store.revisions().subscribers(), 0);
}
