//! PutImageDelta (issue 37 point 1): a delta is assembled from its base, validated and written
//! exactly as a whole image under must-match of the base, and what a delta request holds (the
//! delta or manifest, the base, the image or delta built) is held within the process's upload
//! budget.

use snug_delta::{Delta, Manifest};
use snug_rpc::budget::UploadBudget;

use super::validation::{Refused, assert_image_refused, bad_images, with_secret, writes};
use super::*;

on_every_backend!(
    a_delta_push_stores_the_image_it_assembles,
    a_delta_push_retried_with_its_key_is_replayed,
    a_delta_push_is_refused_as_its_image_or_its_base_is_and_stores_nothing,
    a_delta_declared_over_the_quotas_bound_is_refused_before_any_chunk,
    delta_requests_hold_their_base_and_image_within_the_upload_budget,
    concurrent_delta_requests_are_each_answered_in_turn,
);

async fn a_delta_push_stores_the_image_it_assembles(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let base = image(81, 256 * delta::PAGE as usize);
    let target = delta::edited(&base, "edited on device a");
    let r1 = put(&mut hub, "alice", must_not_exist(), &base)
        .await
        .expect("r1");
    // The client's flow: plan against its base, then send the pages the plan asks for.
    let manifest = Manifest::of(&target, delta::PAGE).expect("manifest");
    let (planned, layout) = delta::plan(&mut hub, "alice", &r1.revision, manifest.encode())
        .await
        .expect("plan");
    let layout =
        snug_delta::Layout::parse_plan(&layout, &delta::limits()).expect("the plan parses");
    let wire = Delta::build(layout, &target, None).encode();
    assert!(
        planned.literal_pages <= 2 && wire.len() < target.len() / 16,
        "an edit of one row sends its pages only: {} literal, {} bytes",
        planned.literal_pages,
        wire.len()
    );
    let response = delta::put(&mut hub, "alice", &r1.revision, wire, None)
        .await
        .expect("the delta push");
    assert!(!response.replayed);
    let r2 = response.revision.expect("revision");
    assert_eq!(r2.base.as_deref(), Some(r1.revision.as_str()));
    assert_eq!(
        (r2.sha256.as_str(), r2.size, r2.principal.as_str()),
        (
            sha256_hex(&target).as_str(),
            target.len() as u64,
            "device-a"
        )
    );
    let (info, bytes, _) = get(&mut hub, "alice", None).await.expect("get");
    assert_eq!((info, bytes), (r2.clone(), target.clone()));
    assert_eq!(
        writes(&mut hub, "alice").await,
        [
            (
                pb::Verdict::Accepted,
                String::new(),
                Some(r2.revision.clone())
            ),
            (
                pb::Verdict::Accepted,
                String::new(),
                Some(r1.revision.clone())
            ),
        ]
    );
    // Pushes that follow assemble in the buffers of the bases they replace: each revision is
    // its own image, byte for byte.
    let (mut current, mut revision) = (target, r2);
    for edit in [
        "edited again",
        "and again, longer than before",
        "a last time",
    ] {
        let next = delta::edited(&current, edit);
        let wire = Delta::build_compressed(
            snug_delta::plan(
                &Manifest::of(&next, delta::PAGE).expect("manifest"),
                &Manifest::of(&current, delta::PAGE)
                    .expect("manifest")
                    .source(),
            ),
            &next,
            &current,
        )
        .encode();
        let pushed = delta::put(&mut hub, "alice", &revision.revision, wire, None)
            .await
            .expect("a delta push");
        revision = pushed.revision.expect("revision");
        assert_eq!(revision.sha256, sha256_hex(&next), "{edit}");
        let (_, bytes, _) = get(&mut hub, "alice", None).await.expect("get");
        assert_eq!(bytes, next, "{edit}");
        current = next;
    }
}

async fn a_delta_push_retried_with_its_key_is_replayed(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let base = image(82, 0);
    let target = delta::edited(&base, "retried");
    let r1 = put(&mut hub, "alice", must_not_exist(), &base)
        .await
        .expect("r1");
    let wire = delta::to(&base, &target).encode();
    let first = delta::put(
        &mut hub,
        "alice",
        &r1.revision,
        wire.clone(),
        Some("delta-7f3a"),
    )
    .await
    .expect("first");
    assert!(!first.replayed);
    // The response was lost; the retry names a base that is no longer current, and is still the
    // same write.
    let retry = delta::put(&mut hub, "alice", &r1.revision, wire, Some("delta-7f3a"))
        .await
        .expect("retry");
    assert!(retry.replayed);
    assert_eq!(retry.revision, first.revision);
    assert_eq!(history(&mut hub, "alice").await.len(), 2);
    // The same key for another image is refused, naming what the key produced.
    let r2 = first.revision.expect("revision").revision;
    let other = delta::edited(&target, "another edit");
    let status = assert_refused(
        delta::put(
            &mut hub,
            "alice",
            &r2,
            delta::to(&target, &other).encode(),
            Some("delta-7f3a"),
        )
        .await,
        Code::FailedPrecondition,
        &snug_reasons::sync::IDEMPOTENCY_KEY_REUSED,
    );
    assert_eq!(meta(&status, error_info::REVISION), Some(r2));
    assert_eq!(history(&mut hub, "alice").await.len(), 2);
}

async fn a_delta_push_is_refused_as_its_image_or_its_base_is_and_stores_nothing(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    provision(&mut hub, "bob").await;
    let first = image(83, 0);
    let second = delta::edited(&first, "second");
    let r1 = put(&mut hub, "alice", must_not_exist(), &first)
        .await
        .expect("r1");
    let r2 = put(&mut hub, "alice", must_match(&r1.revision), &second)
        .await
        .expect("r2");
    let bobs_image = image(84, 0);
    let bobs = put(&mut hub, "bob", must_not_exist(), &bobs_image)
        .await
        .expect("bob's");

    // Deltas that assemble, on the current base, into images the validation refuses: refused
    // as the whole image would be. (An empty image has no delta: a delta builds at least a page.)
    let bad: Vec<Refused> = bad_images()
        .into_iter()
        .filter(|refused| !refused.bytes.is_empty())
        .collect();
    for refused in &bad {
        let wire = delta::to(&second, &refused.bytes).encode();
        let pushed = delta::put(&mut hub, "alice", &r2.revision, wire, None).await;
        assert_image_refused(pushed, refused);
    }
    // A credential added to the current image, sent as the few pages it changed.
    let secret = with_secret(&second);
    let wire = delta::to(&second, &secret).encode();
    assert!(wire.len() < secret.len() / 4, "{} bytes", wire.len());
    let refused = delta::put(&mut hub, "alice", &r2.revision, wire, None).await;
    let status = assert_refused(
        refused,
        reason_code(&snug_reasons::schema::SECRETS_PRESENT),
        &snug_reasons::schema::SECRETS_PRESENT,
    );
    assert_eq!(meta(&status, "secretRows").as_deref(), Some("1"));

    // Bases that are not a retained revision of the caller's: gone, as for any delta.
    let third = delta::edited(&second, "third");
    for base in [bobs.revision.as_str(), "r9-0123456789abcdef"] {
        let wire = delta::to(&second, &third).encode();
        let refused = delta::put(&mut hub, "alice", base, wire, None).await;
        assert_refused(
            refused,
            Code::FailedPrecondition,
            &snug_reasons::sync::DELTA_BASE_GONE,
        );
    }
    // None of those reached the store: no revision, no ledger entry.
    assert_eq!(head(&mut hub, "alice", None).await.expect("head"), r2);
    assert_eq!(writes(&mut hub, "alice").await.len(), 2);

    // A valid delta on a base that is retained but no longer current: the write's must-match
    // refuses it as stale, as it would a whole image.
    let wire = delta::to(&first, &third).encode();
    let stale = delta::put(&mut hub, "alice", &r1.revision, wire, None).await;
    let status = assert_refused(stale, Code::Aborted, &snug_reasons::sync::STALE_REVISION);
    assert_eq!(
        (
            meta(&status, error_info::CURRENT_REVISION),
            meta(&status, error_info::BASE_REVISION)
        ),
        (Some(r2.revision.clone()), Some(r1.revision.clone()))
    );
    assert_eq!(head(&mut hub, "alice", None).await.expect("head"), r2);
    assert_eq!(history(&mut hub, "alice").await.len(), 2);
    // The store's refusal is ledgered, as every write the store judges is.
    assert_eq!(
        writes(&mut hub, "alice").await[0],
        (
            pb::Verdict::Refused,
            snug_reasons::sync::STALE_REVISION.name.to_owned(),
            None
        )
    );
    let (_, bytes, _) = get(&mut hub, "bob", None).await.expect("bob's image");
    assert_eq!(bytes, bobs_image);
}

async fn a_delta_declared_over_the_quotas_bound_is_refused_before_any_chunk(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let base = image(85, 0);
    let r1 = put(&mut hub, "alice", must_not_exist(), &base)
        .await
        .expect("r1");
    // The most a delta for an image within the quota can take (every page literal), and one
    // byte more: refused on the header, while the client never sends a chunk. The bound is the
    // delta's, not the image's: TOO_LARGE, as for an over-long manifest.
    let bound = snug_delta::Limits {
        max_length: hub.config.quota_bytes,
    }
    .max_delta_len();
    let header = pb::PutImageDeltaRequest::header(pb::PutImageDeltaHeader {
        caller: caller("alice", "device-a"),
        base_revision: r1.revision.clone(),
        idempotency_key: None,
        expected_length: Some(bound + 1),
        quota_bytes: None,
    });
    let request = futures::stream::once(async move { header }).chain(futures::stream::pending());
    let answer = tokio::time::timeout(Duration::from_secs(30), hub.client.put_image_delta(request))
        .await
        .expect("refused on the header");
    let status = assert_refused(
        answer,
        reason_code(&snug_reasons::rpc::TOO_LARGE),
        &snug_reasons::rpc::TOO_LARGE,
    );
    assert_eq!(meta(&status, "limit"), Some(bound.to_string()));

    // A short delta whose image is over the quota: QUOTA_EXCEEDED on the image's length, before
    // anything is assembled.
    let mut over = delta::to(&base, &delta::edited(&base, "over"));
    over.layout.geometry.length = hub.config.quota_bytes + 1;
    let refused = delta::put(&mut hub, "alice", &r1.revision, over.encode(), None).await;
    let status = assert_refused(
        refused,
        Code::ResourceExhausted,
        &snug_reasons::sync::QUOTA_EXCEEDED,
    );
    assert_eq!(
        meta(&status, error_info::QUOTA_BYTES),
        Some(hub.config.quota_bytes.to_string())
    );
    assert_eq!(head(&mut hub, "alice", None).await.expect("head"), r1);
    assert_eq!(history(&mut hub, "alice").await.len(), 1);
}

/// The budget's unit (`snug_rpc::budget`): every admission is a whole number of them.
const UNIT: u64 = 64 * 1024;

/// Pulls the current image as a delta against `base`, the empty manifest declared (so it is
/// admitted as one unit, not as the longest manifest the quota allows).
async fn pull_against(
    hub: &mut Hub,
    base: &str,
) -> Result<(pb::GetImageDeltaResult, Vec<u8>), Status> {
    let header = pb::GetImageDeltaRequest::header(pb::GetImageDeltaHeader {
        caller: caller("alice", "device-b"),
        revision: None,
        base_revision: Some(base.to_owned()),
        quota_bytes: None,
        accept_patches: false,
        accept_compressed: false,
        expected_length: Some(0),
    });
    let stream = hub
        .client
        .get_image_delta(chunks::upload(header, Bytes::new()))
        .await?
        .into_inner();
    delta::collect(stream).await
}

/// Waits (briefly) until everything the calls held is given back: a pull's share goes when its
/// response stream is dropped, just after the client read its end.
async fn assert_budget_returned(budget: &UploadBudget, case: &str) {
    for _ in 0..100 {
        if budget.available() == budget.bytes() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{case}: {} of {} bytes still held",
        budget.bytes() - budget.available(),
        budget.bytes()
    );
}

/// The units one admission of `bytes` takes.
fn units(bytes: u64) -> u64 {
    bytes.div_ceil(UNIT)
}

/// What a delta push and a pull against a base of `base` (to `target`, the push sending `wire`)
/// are admitted for, at once, in units: the push its delta, the base and the image it builds;
/// the pull its (empty) manifest, the base, the revision and the largest delta of it.
fn delta_units(base: &[u8], target: &[u8], wire: &[u8]) -> (u64, u64) {
    let push = wire.len() + base.len() + target.len();
    let largest_delta = snug_delta::Limits {
        max_length: target.len() as u64,
    }
    .max_delta_len();
    let pull = (base.len() + target.len()) as u64 + largest_delta;
    (units(push as u64), units(pull))
}

/// A delta push holds 4 units at once (its delta, the base and the image: `MIN_LEN` is 1.75
/// units), a pull against a base 6 (the base, the revision, and the largest delta of it). Beside
/// another upload that leaves it exactly that much of an 8-unit budget, each is answered; with
/// one unit less, each waits and is refused OVERLOADED, storing nothing. A service that held
/// the base, the image or the revision outside the budget would be answered with one unit less
/// too. Alone, a request bigger than the whole budget still proceeds: it never waits for room
/// it holds itself.
async fn delta_requests_hold_their_base_and_image_within_the_upload_budget(backend: Backend) {
    assert_eq!(UploadBudget::new(1, Duration::ZERO).bytes(), UNIT);
    let base = image(86, 0);
    let target = delta::edited(&base, "budgeted");
    assert_eq!(
        (base.len() as u64).div_ceil(UNIT),
        2,
        "the base is two units"
    );
    assert_eq!(target.len(), base.len());
    let wire = delta::to(&base, &target).encode();
    assert!(wire.len() as u64 <= UNIT, "the delta is one unit");
    let (push, pull) = delta_units(&base, &target, &wire);
    assert_eq!((push, pull), (4, 6));
    // (budget units, units another upload holds, push answered, pull answered)
    let cases = [
        (8, 8 - pull, true, true),
        (8, 8 - push, true, false),
        (8, 8 - push + 1, false, false),
        (2, 0, true, true),
    ];
    for (budget_units, others, push_ok, pull_ok) in cases {
        let case = format!("{others} of {budget_units} units held by another upload");
        let Some(mut hub) = start(backend, |c| {
            c.runtime.upload_budget =
                UploadBudget::new(budget_units * UNIT, Duration::from_millis(200));
        })
        .await
        else {
            return;
        };
        let budget = hub.runtime.upload_budget.clone();
        provision(&mut hub, "alice").await;
        let r1 = put(&mut hub, "alice", must_not_exist(), &base)
            .await
            .expect("a whole image");
        // The other upload, admitted against the service's own budget (the config shares it).
        let other = match others {
            0 => None,
            n => Some(
                budget
                    .admit(n * UNIT)
                    .await
                    .expect("room for the other upload"),
            ),
        };
        let pushed = delta::put(&mut hub, "alice", &r1.revision, wire.clone(), None).await;
        let current = if push_ok {
            let r2 = pushed.expect(&case).revision.expect("revision");
            assert_eq!(r2.sha256, sha256_hex(&target), "{case}");
            r2
        } else {
            assert_refused(pushed, Code::Unavailable, &snug_reasons::rpc::OVERLOADED);
            assert_eq!(
                head(&mut hub, "alice", None).await.expect("head"),
                r1,
                "{case}"
            );
            put(&mut hub, "alice", must_match(&r1.revision), &target)
                .await
                .expect("the whole image instead")
        };
        let pulled = pull_against(&mut hub, &r1.revision).await;
        if pull_ok {
            let (result, wire) = pulled.expect(&case);
            assert_eq!(result.revision, Some(current), "{case}");
            let delta = Delta::parse(&wire, &delta::limits(), base.len() as u64).expect("parse");
            assert_eq!(delta.assemble(&base).expect("assemble"), target.to_vec());
        } else {
            assert_refused(pulled, Code::Unavailable, &snug_reasons::rpc::OVERLOADED);
        }
        drop(other);
        assert_budget_returned(&budget, &case).await;
    }
}

/// Eight delta requests at once, of eight users, on a budget with room for one of them: each
/// waits its turn and is answered, none is refused (issue 36 point 7: requests that each held
/// part of what they needed and waited for the rest were all refused OVERLOADED but one).
async fn concurrent_delta_requests_are_each_answered_in_turn(backend: Backend) {
    let base = image(87, 0);
    let target = delta::edited(&base, "concurrent");
    let wire = delta::to(&base, &target).encode();
    let (push, pull) = delta_units(&base, &target, &wire);
    let Some(mut hub) = start(backend, |c| {
        c.runtime.upload_budget = UploadBudget::new(push.max(pull) * UNIT, Duration::from_secs(20));
    })
    .await
    else {
        return;
    };
    let mut revisions = Vec::new();
    for i in 0..8 {
        let user = format!("user-{i}");
        provision(&mut hub, &user).await;
        let r1 = put(&mut hub, &user, must_not_exist(), &base)
            .await
            .expect("r1");
        let r2 = put(&mut hub, &user, must_match(&r1.revision), &target)
            .await
            .expect("r2");
        revisions.push((user, r1.revision, r2.revision));
    }
    let budget = hub.runtime.upload_budget.clone();
    // Pulls against r1 and plans on it, interleaved, each on the service's one channel.
    let manifest = Bytes::from(
        Manifest::of(&target, delta::PAGE)
            .expect("manifest")
            .encode(),
    );
    let requests = revisions.iter().enumerate().map(|(i, (user, r1, _))| {
        let (mut client, r1) = (hub.client.clone(), r1.clone());
        let manifest = manifest.clone();
        async move {
            if i % 2 == 0 {
                let header = pb::GetImageDeltaRequest::header(pb::GetImageDeltaHeader {
                    caller: caller(user, "device-b"),
                    revision: None,
                    base_revision: Some(r1),
                    quota_bytes: None,
                    accept_patches: false,
                    accept_compressed: false,
                    expected_length: Some(0),
                });
                let stream = client
                    .get_image_delta(chunks::upload(header, Bytes::new()))
                    .await?
                    .into_inner();
                let (result, wire) = delta::collect(stream).await?;
                Ok((result.revision.map(|r| r.revision), wire))
            } else {
                let header = pb::PlanImageDeltaRequest::header(pb::PlanImageDeltaHeader {
                    expected_length: Some(manifest.len() as u64),
                    caller: caller(user, "device-a"),
                    base_revision: r1,
                    quota_bytes: None,
                });
                let stream = client
                    .plan_image_delta(chunks::upload(header, manifest))
                    .await?
                    .into_inner();
                let (result, layout) = delta::collect(stream).await?;
                Ok::<_, Status>((result.base.map(|r| r.revision), layout))
            }
        }
    });
    let answers = futures::future::join_all(requests).await;
    for (i, (answer, (_, r1, r2))) in answers.into_iter().zip(&revisions).enumerate() {
        let (revision, wire) = answer.unwrap_or_else(|status| panic!("request {i}: {status:?}"));
        if i % 2 == 0 {
            assert_eq!(revision.as_ref(), Some(r2), "pull {i}");
            let delta = Delta::parse(&wire, &delta::limits(), base.len() as u64).expect("parse");
            assert_eq!(delta.assemble(&base).expect("assemble"), target.to_vec());
        } else {
            assert_eq!(revision.as_ref(), Some(r1), "plan {i}");
            snug_delta::Layout::parse_plan(&wire, &delta::limits()).expect("a plan");
        }
    }
    assert_budget_returned(&budget, "after the burst").await;
}
