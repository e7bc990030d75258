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
