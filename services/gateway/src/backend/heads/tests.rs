//! What a gateway keeps of its users' heads: trusted only while live, never a fill that raced a
//! commit or a reset, forgotten by a commit, a write or a reset, and bounded.

use super::*;

fn shared() -> Shared {
    Shared {
        state: Mutex::default(),
        beat: watch::Sender::new(()),
    }
}

fn head(seq: u64) -> Option<Arc<sync_pb::RevisionInfo>> {
    Some(Arc::new(sync_pb::RevisionInfo {
        revision: format!("r{seq}-{seq:016x}"),
        ..Default::default()
    }))
}

/// Fills `user`'s head with `read`, as a poll that found nothing kept does.
fn fill(shared: &Shared, user: &str, read: Option<Arc<sync_pb::RevisionInfo>>) {
    match shared.kept(user) {
        Kept::Fill(Some(fill)) => shared.filled(user, fill, read),
        other => panic!("expected a fill, got {other:?}"),
    }
}

#[test]
fn nothing_is_kept_until_the_feed_is_live() {
    let shared = shared();
    assert_eq!(shared.kept("alice"), Kept::Fill(None));
    shared.reset(true);
    fill(&shared, "alice", head(1));
    assert_eq!(shared.kept("alice"), Kept::Head(head(1)));
    // The user with no image is kept as such.
    fill(&shared, "bob", None);
    assert_eq!(shared.kept("bob"), Kept::Head(None));
    // Commits may go unheard: nothing is trusted, and what was kept is forgotten.
    shared.reset(false);
    assert_eq!(shared.kept("alice"), Kept::Fill(None));
    shared.reset(true);
    assert!(matches!(shared.kept("alice"), Kept::Fill(Some(_))));
}

#[test]
fn a_commit_or_a_write_forgets_the_users_head_and_no_one_elses() {
    let shared = shared();
    shared.reset(true);
    fill(&shared, "alice", head(1));
    fill(&shared, "bob", head(7));
    shared.committed("alice");
    assert!(matches!(shared.kept("alice"), Kept::Fill(Some(_))));
    assert_eq!(shared.kept("bob"), Kept::Head(head(7)));
    shared.forget("bob");
    assert!(matches!(shared.kept("bob"), Kept::Fill(Some(_))));
}

#[test]
fn a_fill_that_raced_a_commit_or_a_reset_is_not_kept() {
    let shared = shared();
    shared.reset(true);
    for race in [
        (|s: &Shared| s.committed("alice")) as fn(&Shared),
        |s| s.forget("alice"),
        |s| s.reset(true),
    ] {
        let Kept::Fill(Some(first)) = shared.kept("alice") else {
            panic!("a fill");
        };
        // The read began before the commit was heard: it may be the revision before.
        race(&shared);
        shared.filled("alice", first, head(1));
        assert!(
            matches!(shared.kept("alice"), Kept::Fill(Some(_))),
            "a raced fill is not trusted"
        );
        shared.forget("alice");
    }
    // Two fills at once: the later one's slot is the one kept.
    let Kept::Fill(Some(first)) = shared.kept("alice") else {
        panic!("a fill");
    };
    shared.committed("alice");
    let Kept::Fill(Some(second)) = shared.kept("alice") else {
        panic!("a fill");
    };
    shared.filled("alice", first, head(1));
    shared.filled("alice", second, head(2));
    assert_eq!(shared.kept("alice"), Kept::Head(head(2)));
}

#[test]
fn the_kept_heads_stay_within_capacity() {
    let shared = shared();
    shared.reset(true);
    for n in 0..CAPACITY + 10 {
        fill(&shared, &format!("user{n}"), head(n as u64));
    }
    assert!(lock(&shared.state).heads.len() <= CAPACITY);
}

#[tokio::test]
async fn a_subscriber_is_answered_only_from_a_read_that_began_after_it_joined() {
    let (history, _) = watch::channel(Snapshot {
        read: 1,
        history: Ok(Arc::new(vec![])),
    });
    let beat = watch::Sender::new(());
    let mut watching = Watching {
        history: history.subscribe(),
        want: 2,
        beat: beat.subscribe(),
    };
    history.send_replace(Snapshot {
        read: 1,
        history: Ok(Arc::new(vec![sync_pb::RevisionInfo::default()])),
    });
    let early = tokio::time::timeout(Duration::from_millis(50), watching.next()).await;
    assert!(early.is_err(), "a read older than the subscription");
    history.send_replace(Snapshot {
        read: 2,
        history: Ok(Arc::new(vec![])),
    });
    match watching.next().await {
        Heard::History(Ok(history)) => assert!(history.is_empty()),
        other => panic!("{other:?}"),
    }
    beat.send_replace(());
    assert!(matches!(watching.next().await, Heard::Heartbeat));
}
