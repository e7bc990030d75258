//! WatchImage (issue 40 point 2) through the service: a caller hears its own commits as they
//! land, resumes after the last it saw, is told of a gap it cannot be shown, hears heartbeats,
//! and never another user's events; WatchCommits hears every user's commits and erasures after
//! a first reset.

use std::time::Duration;

use pb::watch_image_response::Event;
use tonic::Streaming;

use super::*;

on_every_backend!(
    a_watch_hears_each_commit_and_resumes_after_the_last_it_saw,
    a_watch_is_told_of_what_it_cannot_be_shown_and_beats_when_idle,
    a_watch_of_every_user_hears_each_commit_and_erasure_by_user_id,
);

async fn watch(
    hub: &mut Hub,
    user: &str,
    after: Option<&str>,
    heartbeat_seconds: u32,
) -> Result<Streaming<pb::WatchImageResponse>, Status> {
    hub.client
        .watch_image(pb::WatchImageRequest {
            caller: caller(user, user),
            after_revision: after.map(str::to_owned),
            heartbeat_seconds,
        })
        .await
        .map(tonic::Response::into_inner)
}

/// The next event within `within`, `None` when none came.
async fn next(stream: &mut Streaming<pb::WatchImageResponse>, within: Duration) -> Option<Event> {
    match tokio::time::timeout(within, stream.message()).await {
        Ok(message) => Some(
            message
                .expect("the stream")
                .expect("an event")
                .event
                .expect("an event set"),
        ),
        Err(_) => None,
    }
}

const SOON: Duration = Duration::from_secs(10);
const QUIET: Duration = Duration::from_millis(300);

fn revision_of(event: Option<Event>) -> String {
    match event {
        Some(Event::Revision(info)) => info.revision,
        other => panic!("expected a revision, got {other:?}"),
    }
}

async fn a_watch_hears_each_commit_and_resumes_after_the_last_it_saw(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    provision(&mut hub, "bob").await;
    let mut alices = watch(&mut hub, "alice", None, 0).await.expect("watch");
    let mut bobs = watch(&mut hub, "bob", None, 0).await.expect("watch");
    assert!(matches!(
        next(&mut alices, SOON).await,
        Some(Event::NoImage(_))
    ));
    assert!(matches!(
        next(&mut bobs, SOON).await,
        Some(Event::NoImage(_))
    ));

    let r1 = put(&mut hub, "alice", must_not_exist(), &image(1, 0))
        .await
        .expect("r1");
    let heard = next(&mut alices, SOON).await;
    assert!(
        matches!(&heard, Some(Event::Revision(info)) if *info == r1),
        "the revision as HeadImage shows it: {heard:?}"
    );
    assert_eq!(next(&mut bobs, QUIET).await, None, "not bob's");
    let r2 = put(&mut hub, "alice", must_match(&r1.revision), &image(2, 0))
        .await
        .expect("r2");
    let r3 = put(&mut hub, "alice", must_match(&r2.revision), &image(3, 0))
        .await
        .expect("r3");
    // However the commits were woken on, each is heard, in order.
    let mut heard = Vec::new();
    while heard.len() < 2 {
        heard.push(revision_of(next(&mut alices, SOON).await));
    }
    assert_eq!(heard, [r2.revision.clone(), r3.revision.clone()]);
    drop(alices);

    // A caller that saw r1 and reconnects hears what followed it, then what comes.
    let mut resumed = watch(&mut hub, "alice", Some(&r1.revision), 0)
        .await
        .expect("resume");
    assert_eq!(revision_of(next(&mut resumed, SOON).await), r2.revision);
    assert_eq!(revision_of(next(&mut resumed, SOON).await), r3.revision);
    assert_eq!(next(&mut resumed, QUIET).await, None);
    let r4 = put(&mut hub, "alice", must_match(&r3.revision), &image(4, 0))
        .await
        .expect("r4");
    assert_eq!(revision_of(next(&mut resumed, SOON).await), r4.revision);
    // Bob's stream heard nothing of it all, and resuming from alice's revision is a gap to him:
    // her revisions are not his to be shown.
    assert_eq!(next(&mut bobs, QUIET).await, None);
    let mut bob_resumed = watch(&mut hub, "bob", Some(&r1.revision), 0)
        .await
        .expect("resume");
    assert!(matches!(
        next(&mut bob_resumed, SOON).await,
        Some(Event::NoImage(_))
    ));
}

async fn a_watch_is_told_of_what_it_cannot_be_shown_and_beats_when_idle(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let r1 = put(&mut hub, "alice", must_not_exist(), &image(1, 0))
        .await
        .expect("r1");
    // An unknown revision to resume from: a gap, then the current one.
    let mut stream = watch(&mut hub, "alice", Some("r9-00000000000000ff"), 1)
        .await
        .expect("watch");
    assert!(matches!(next(&mut stream, SOON).await, Some(Event::Gap(_))));
    assert_eq!(revision_of(next(&mut stream, SOON).await), r1.revision);
    // Idle: a heartbeat a second.
    for _ in 0..2 {
        assert!(matches!(
            next(&mut stream, Duration::from_secs(5)).await,
            Some(Event::Heartbeat(_))
        ));
    }
    // Erased: no image, announced as a commit is (a heartbeat reads nothing).
    erase_user(&mut hub, "alice").await.expect("erase");
    let mut event = next(&mut stream, Duration::from_secs(5)).await;
    while matches!(event, Some(Event::Heartbeat(_))) {
        event = next(&mut stream, Duration::from_secs(5)).await;
    }
    assert!(matches!(event, Some(Event::NoImage(_))), "{event:?}");

    // Bad input is refused before any event, with the field named.
    for (after, beat, field) in [
        (Some("not a revision!"), 0, "after_revision"),
        (None, 301, "heartbeat_seconds"),
    ] {
        let err = watch(&mut hub, "alice", after, beat)
            .await
            .expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{field}");
        assert_eq!(reason(&err), "INVALID_ARGUMENT", "{field}");
        assert_eq!(meta(&err, "field").as_deref(), Some(field));
    }
}

async fn a_watch_of_every_user_hears_each_commit_and_erasure_by_user_id(backend: Backend) {
    use pb::watch_commits_response::Event as C;
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    let mut all = hub
        .client
        .watch_commits(pb::WatchCommitsRequest {
            heartbeat_seconds: 1,
        })
        .await
        .expect("watch")
        .into_inner();
    let mut next = async || -> C {
        // Heartbeats say only that the stream lives.
        loop {
            let message = tokio::time::timeout(SOON, all.message())
                .await
                .expect("in time")
                .expect("the stream")
                .expect("an event");
            match message.event.expect("an event set") {
                C::Heartbeat(_) => continue,
                event => return event,
            }
        }
    };
    assert_eq!(
        next().await,
        C::Reset(pb::watch_commits_response::Reset { live: true })
    );
    provision(&mut hub, "alice").await;
    provision(&mut hub, "bob").await;
    let r1 = put(&mut hub, "alice", must_not_exist(), &image(1, 0))
        .await
        .expect("r1");
    put(&mut hub, "bob", must_not_exist(), &image(2, 0))
        .await
        .expect("bob's");
    put(&mut hub, "alice", must_match(&r1.revision), &image(3, 0))
        .await
        .expect("r2");
    erase_user(&mut hub, "bob").await.expect("erase");
    let mut heard = Vec::new();
    while heard.len() < 4 {
        match next().await {
            C::Committed(user) => heard.push(user),
            other => panic!("expected a commit, got {other:?}"),
        }
    }
    assert_eq!(heard, ["alice", "bob", "alice", "bob"]);

    let err = hub
        .client
        .watch_commits(pb::WatchCommitsRequest {
            heartbeat_seconds: 301,
        })
        .await
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(meta(&err, "field").as_deref(), Some("heartbeat_seconds"));
}
