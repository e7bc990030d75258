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
