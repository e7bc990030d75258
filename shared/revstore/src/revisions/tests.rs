//! A subscriber wakes for its own user's commits and resyncs only, once per burst, and the map
//! keeps no entry for a user nobody subscribes to.

use std::time::Duration;

use super::*;

fn user(name: &str) -> UserId {
    UserId::new(name).expect("user")
}

/// Whether the subscription wakes within a short wait.
async fn wakes(subscription: &mut Subscription) -> bool {
    tokio::time::timeout(Duration::from_millis(50), subscription.changed())
        .await
        .is_ok()
}

#[tokio::test]
async fn a_subscriber_wakes_for_its_users_commits_once_per_burst() {
    let revisions = Revisions::new();
    let (alice, bob) = (user("alice"), user("bob"));
    let mut watching = revisions.subscribe(&alice);
    assert!(!wakes(&mut watching).await, "nothing committed yet");
    revisions.announce(&bob);
    assert!(!wakes(&mut watching).await, "another user's commit");
    for _ in 0..3 {
        revisions.announce(&alice);
    }
    assert!(wakes(&mut watching).await, "a commit");
    assert!(!wakes(&mut watching).await, "three commits, one wake-up");
    revisions.resync();
    assert!(wakes(&mut watching).await, "a resync wakes everyone");
    assert!(!wakes(&mut watching).await);
}

#[tokio::test]
async fn a_commit_wakes_a_subscriber_already_waiting() {
    let revisions = Revisions::new();
    let alice = user("alice");
    let mut watching = revisions.subscribe(&alice);
    let waiting = tokio::spawn(async move {
        watching.changed().await;
    });
    tokio::task::yield_now().await;
    revisions.announce(&alice);
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken")
        .expect("joined");
}

#[tokio::test]
async fn a_users_entry_goes_with_their_last_subscription() {
    let revisions = Revisions::new();
    let alice = user("alice");
    let first = revisions.subscribe(&alice);
    let mut second = revisions.subscribe(&alice);
    assert_eq!(revisions.subscribers(), 2);
    drop(first);
    assert_eq!(revisions.subscribers(), 1);
    revisions.announce(&alice);
    assert!(
        wakes(&mut second).await,
        "the other subscription still hears"
    );
    drop(second);
    assert_eq!(revisions.subscribers(), 0);
    assert!(revisions.users().is_empty(), "no entry left behind");
    // A commit for a user nobody watches costs a map lookup, and makes no entry.
    revisions.announce(&alice);
    assert!(revisions.users().is_empty());
}

/// The next change heard by `all`, within a short wait.
async fn heard(all: &mut AllChanges) -> Option<Change> {
    tokio::time::timeout(Duration::from_millis(50), all.next())
        .await
        .ok()
}

#[tokio::test]
async fn a_subscriber_of_all_hears_every_user_after_a_first_reset() {
    let revisions = Revisions::new();
    let mut all = revisions.watch_all();
    assert_eq!(heard(&mut all).await, Some(Change::Reset { live: true }));
    assert_eq!(heard(&mut all).await, None, "nothing committed yet");
    revisions.announce(&user("alice"));
    revisions.announce(&user("bob"));
    assert_eq!(heard(&mut all).await, Some(Change::User(user("alice"))));
    assert_eq!(heard(&mut all).await, Some(Change::User(user("bob"))));
    assert_eq!(heard(&mut all).await, None);
}

#[tokio::test]
async fn a_lost_listener_resets_subscribers_of_all_until_it_listens_again() {
    let revisions = Revisions::new();
    let mut all = revisions.watch_all();
    assert_eq!(heard(&mut all).await, Some(Change::Reset { live: true }));
    revisions.lost();
    assert_eq!(heard(&mut all).await, Some(Change::Reset { live: false }));
    revisions.resync();
    assert_eq!(heard(&mut all).await, Some(Change::Reset { live: true }));
    // A subscriber that begins while lost hears so first.
    revisions.lost();
    let mut late = revisions.watch_all();
    assert_eq!(heard(&mut late).await, Some(Change::Reset { live: false }));
}

#[tokio::test]
async fn a_subscriber_of_all_that_falls_behind_is_reset_not_misled() {
    let revisions = Revisions::new();
    let mut all = revisions.watch_all();
    assert_eq!(heard(&mut all).await, Some(Change::Reset { live: true }));
    for n in 0..(ALL_BACKLOG + 10) {
        revisions.announce(&user(&format!("user{n}")));
    }
    assert_eq!(heard(&mut all).await, Some(Change::Reset { live: true }));
    assert_eq!(
        heard(&mut all).await,
        None,
        "what it missed is forgotten, not replayed"
    );
    revisions.announce(&user("alice"));
    assert_eq!(heard(&mut all).await, Some(Change::User(user("alice"))));
}
