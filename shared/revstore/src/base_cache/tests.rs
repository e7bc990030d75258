//! The base cache keeps the newest image per user, within its byte limit and maximum age.

use bytes::Bytes;

use super::*;
use crate::{Digest, ManualClock, Principal, RevisionInfo, StoreId};

const AGE: Duration = Duration::from_secs(600);

fn image(user: &str, seq: u64, len: usize) -> (UserId, BaseImage) {
    let revision = Revision::new(format!("r{seq}-00000000000000{seq:02x}")).expect("revision");
    let bytes = Bytes::from(vec![seq as u8; len]);
    let info = RevisionInfo {
        revision,
        digest: Digest::of(&bytes),
        size: len as u64,
        accepted_at: Timestamp::from_unix_millis(0),
        principal: Principal::new("device").expect("principal"),
        storage_version: None,
        base: None,
        restored_from: None,
        retained: true,
    };
    let chunks = bytes.chunks(1024).map(Digest::of).collect();
    let base = BaseImage {
        info,
        bytes,
        chunks,
        chunk_size: 1024,
        store: StoreId::new("store").expect("store id"),
    };
    (UserId::new(user).expect("user"), base)
}

fn cache(limit: u64) -> (BaseCache, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Timestamp::from_unix_millis(1_000_000)));
    (BaseCache::new(limit, AGE, clock.clone()), clock)
}

#[test]
fn a_user_has_one_entry_found_by_its_revision() {
    let (cache, _) = cache(1 << 20);
    let (alice, first) = image("alice", 1, 4096);
    let r1 = first.info.revision.clone();
    cache.keep(&alice, first);
    assert_eq!(cache.held_bytes(), 4096 + 4 * 32);
    assert!(cache.get(&alice, &r1).is_some());
    let (_, second) = image("alice", 2, 2048);
    let r2 = second.info.revision.clone();
    cache.keep(&alice, second);
    assert!(
        cache.get(&alice, &r1).is_none(),
        "replaced by the next write"
    );
    assert_eq!(cache.get(&alice, &r2).expect("kept").bytes().len(), 2048);
    assert_eq!(cache.held_bytes(), 2048 + 2 * 32);
    let bob = UserId::new("bob").expect("user");
    assert!(
        cache.get(&bob, &r2).is_none(),
        "another user's revision is not theirs"
    );
    cache.forget(&alice);
    assert!(cache.get(&alice, &r2).is_none());
    assert_eq!(cache.held_bytes(), 0);
}

#[test]
fn the_limit_drops_the_least_recently_used_and_never_holds_more() {
    let entry = 4096 + 4 * 32;
    let (cache, _) = cache(3 * entry);
    let users: Vec<(UserId, Revision)> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let (user, base) = image(u, i as u64 + 1, 4096);
            let revision = base.info.revision.clone();
            cache.keep(&user, base);
            (user, revision)
        })
        .collect();
    assert_eq!(cache.held_bytes(), 3 * entry);
    // `a` used since: `b` is the least recently used.
    assert!(cache.get(&users[0].0, &users[0].1).is_some());
    let (d, base) = image("d", 9, 4096);
    cache.keep(&d, base);
    assert_eq!(cache.held_bytes(), 3 * entry);
    assert!(cache.get(&users[1].0, &users[1].1).is_none());
    assert!(cache.get(&users[0].0, &users[0].1).is_some());
    assert!(cache.get(&users[2].0, &users[2].1).is_some());
    // An image over the limit is not kept, and the one it replaces goes too.
    let (_, huge) = image("a", 10, 4 * 4096);
    cache.keep(&users[0].0, huge);
    assert!(cache.get(&users[0].0, &users[0].1).is_none());
    assert_eq!(cache.held_bytes(), 2 * entry);
    // A limit of zero keeps nothing.
    let (none, _) = self::cache(0);
    let (e, base) = image("e", 11, 10);
    let revision = base.info.revision.clone();
    none.keep(&e, base);
    assert!(none.get(&e, &revision).is_none());
    assert_eq!(none.held_bytes(), 0);
}

#[test]
fn entries_older_than_their_maximum_age_are_dropped() {
    let (cache, clock) = cache(1 << 20);
    let (alice, base) = image("alice", 1, 4096);
    let revision = base.info.revision.clone();
    cache.keep(&alice, base);
    clock.advance(AGE);
    assert!(cache.get(&alice, &revision).is_some(), "at its age");
    clock.advance(Duration::from_millis(1));
    assert!(cache.get(&alice, &revision).is_none(), "past it");
    assert_eq!(cache.held_bytes(), 0);
    // Old entries also go when another is kept.
    let (bob, base) = image("bob", 2, 4096);
    cache.keep(&bob, base);
    clock.advance(AGE + Duration::from_millis(1));
    let (carol, base) = image("carol", 3, 4096);
    cache.keep(&carol, base);
    assert_eq!(cache.held_bytes(), 4096 + 4 * 32);
}

/// Keeps `base` as the user's entry, then replaces it with the next image and recycles it, as a
/// delta push does; answers the address of the recycled buffer.
fn push_over(cache: &BaseCache, user: &UserId, seq: u64, len: usize) -> *const u8 {
    let (_, base) = image(user.as_str(), seq, len);
    let revision = base.info.revision.clone();
    cache.keep(user, base);
    let base = cache.get(user, &revision).expect("kept");
    let address = base.bytes().as_ptr();
    let (_, next) = image(user.as_str(), seq + 1, len);
    cache.keep(user, next);
    cache.recycle(user, base);
    address
}

#[test]
fn a_replaced_base_is_the_buffer_the_next_image_is_assembled_in() {
    let entry = 4096 + 4 * 32;
    let (cache, _) = cache(2 * entry + 4096);
    let alice = UserId::new("alice").expect("user");
    let address = push_over(&cache, &alice, 1, 4096);
    assert_eq!(cache.held_bytes(), entry + 4096, "the spare counts");
    // A buffer for another length than it fits is new, and the spare stays.
    assert!(cache.buffer(1024).capacity() < 4096);
    assert!(cache.buffer(8192).capacity() >= 8192);
    assert_eq!(cache.held_bytes(), entry + 4096);
    let buffer = cache.buffer(4000);
    assert_eq!(buffer.as_ptr(), address, "the same memory, not a copy");
    assert!(buffer.is_empty() && buffer.capacity() >= 4000);
    assert_eq!(cache.held_bytes(), entry, "taken out of the cache");
    let another = cache.buffer(4000);
    assert_ne!(another.as_ptr(), address, "taken once");
}

#[test]
fn a_base_still_held_elsewhere_is_not_recycled() {
    let (cache, _) = cache(1 << 20);
    let (alice, base) = image("alice", 1, 4096);
    let revision = base.info.revision.clone();
    cache.keep(&alice, base);
    let base = cache.get(&alice, &revision).expect("kept");
    let reader = base.clone();
    cache.recycle(&alice, base);
    assert_eq!(cache.held_bytes(), 4096 + 4 * 32, "still the user's entry");
    assert!(cache.get(&alice, &revision).is_some());
    drop(reader);
    // Its bytes shared by another view are not its own to give either.
    let (_, next) = image("alice", 2, 4096);
    cache.keep(&alice, next);
    let (bob, other) = image("bob", 3, 4096);
    let view = other.bytes.slice(..);
    cache.recycle(&bob, Arc::new(other));
    assert_eq!(cache.held_bytes(), 4096 + 4 * 32, "no spare");
    drop(view);
}

#[test]
fn the_spare_goes_first_for_a_base_and_with_its_user_or_its_age() {
    let entry = 4096 + 4 * 32;
    let (cache, clock) = cache(2 * entry);
    let alice = UserId::new("alice").expect("user");
    push_over(&cache, &alice, 1, 4096);
    assert_eq!(cache.held_bytes(), entry + 4096);
    // Bob's base needs the room: the spare goes, alice's base stays.
    let (bob, base) = image("bob", 5, 4096);
    let bobs = base.info.revision.clone();
    cache.keep(&bob, base);
    assert_eq!(cache.held_bytes(), 2 * entry);
    assert!(cache.get(&bob, &bobs).is_some());
    // No room beside the two bases: not kept.
    let (_, old) = image("bob", 6, 4096);
    cache.recycle(&bob, Arc::new(old));
    assert_eq!(cache.held_bytes(), 2 * entry);
    // Erasing the user whose bytes it holds drops it.
    cache.forget(&bob);
    let (_, old) = image("bob", 7, 4096);
    cache.recycle(&bob, Arc::new(old));
    assert_eq!(cache.held_bytes(), entry + 4096);
    cache.forget(&bob);
    assert_eq!(cache.held_bytes(), entry);
    // Past the maximum age it is not handed out.
    let (_, old) = image("bob", 8, 4096);
    cache.recycle(&bob, Arc::new(old));
    clock.advance(AGE + Duration::from_millis(1));
    let buffer = cache.buffer(4096);
    assert_eq!(cache.held_bytes(), entry);
    assert!(buffer.capacity() >= 4096);
}
