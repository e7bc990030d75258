//! An upload held open across its user's erasure (issue 36 point 3): the erasure answers, the
//! upload finishes after it, and it is refused as an unknown user's write, so nothing of the
//! erased user comes back into the store, on the embedded store and on PostgreSQL alike.

use super::*;

on_every_backend!(an_upload_held_open_across_the_erasure_brings_nothing_back);

async fn an_upload_held_open_across_the_erasure_brings_nothing_back(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let first = image(91, 1 << 20);
    put(&mut hub, "alice", must_not_exist(), &first)
        .await
        .expect("r1");
    let next = edit(
        &first,
        "UPDATE snug_settings SET value = '\"edited\"' WHERE key = 'test:seed';",
    );
    // The write starts (header and the first half of the image) before the erasure. It asks
    // for no image to exist, which is true once the erasure is done: only the erasure's
    // tombstone can refuse it then.
    let held = Put::new("alice", must_not_exist(), next.clone());
    let (sender, requests) = futures::channel::mpsc::unbounded();
    sender.unbounded_send(held.header()).expect("header");
    let half = next.len() / 2;
    for piece in next[..half].chunks(CHUNK_SIZE) {
        sender
            .unbounded_send(pb::PutImageRequest::chunk(Bytes::copy_from_slice(piece)))
            .expect("chunk");
    }
    let mut client = hub.client.clone();
    let call = tokio::spawn(async move { client.put_image(requests).await });
    // Until the service has read what was sent: the upload is in flight at the erasure.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!call.is_finished(), "the upload is still open");

    let report = erase_user(&mut hub, "alice").await.expect("erase");
    assert_eq!(report.revisions, 1, "{report:?}");
    // A gateway that (re)provisions the user it authenticated before the erasure is refused:
    // the id is never used again.
    let provisioned = hub
        .client
        .provision_user(pb::ProvisionUserRequest {
            caller: caller("alice", "alice"),
        })
        .await;
    assert_refused(
        provisioned,
        Code::FailedPrecondition,
        &snug_reasons::sync::USER_ERASED,
    );

    // The rest arrives after the erasure has answered.
    for piece in next[half..].chunks(CHUNK_SIZE) {
        sender
            .unbounded_send(pb::PutImageRequest::chunk(Bytes::copy_from_slice(piece)))
            .expect("chunk");
    }
    drop(sender);
    assert_refused(
        call.await.expect("task"),
        Code::NotFound,
        &snug_reasons::sync::NOT_FOUND,
    );
    assert_no_image(&mut hub, "alice").await;
    assert_eq!(
        get_usage(&mut hub, "alice").await.expect("usage"),
        pb::GetUsageResponse::default()
    );
    // Nothing of hers is left for a check to find: no image at all.
    let checked = check_store(&mut hub).await;
    let last = checked.last().expect("a message");
    assert_eq!(last.images_checked, 0, "{checked:?}");
    assert!(checked.iter().all(|m| m.problems.is_empty()), "{checked:?}");
}
