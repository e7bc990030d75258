//! A gRPC upload held to the process's pace (issue 36 point 2): a PutImage that drips after its
//! first bytes is cut off as UPLOAD_TOO_SLOW once it falls behind, its share of the upload
//! budget given back, nothing stored; one that keeps the pace lands.

use snug_rpc::{budget::UploadBudget, pace::Pace};

use super::*;

on_every_backend!(a_dripping_put_is_cut_off_and_gives_its_share_back);

async fn a_dripping_put_is_cut_off_and_gives_its_share_back(backend: Backend) {
    let budget = UploadBudget::new(64 << 20, Duration::from_secs(1)).paced(Pace {
        grace: Duration::from_millis(500),
        min_rate: 256 * 1024,
    });
    let Some(mut hub) = start(backend, |c| c.runtime.upload_budget = budget.clone()).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    let bytes = image(97, 1 << 20);
    let held = Put::new("alice", must_not_exist(), bytes.clone());
    let (sender, requests) = futures::channel::mpsc::unbounded();
    sender.unbounded_send(held.header()).expect("header");
    sender
        .unbounded_send(pb::PutImageRequest::chunk(bytes.slice(..4096)))
        .expect("first bytes");
    let mut client = hub.client.clone();
    let started = std::time::Instant::now();
    let call = tokio::spawn(async move { client.put_image(requests).await });
    // A page now and then: far behind 256 KiB/s once the grace is over.
    let mut sent = 4096;
    while !call.is_finished() && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if sent < bytes.len() {
            let _ =
                sender.unbounded_send(pb::PutImageRequest::chunk(bytes.slice(sent..sent + 4096)));
            sent += 4096;
        }
    }
    let status = assert_refused(
        call.await.expect("task"),
        Code::DeadlineExceeded,
        &snug_reasons::rpc::UPLOAD_TOO_SLOW,
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "cut off {:?} after it began",
        started.elapsed()
    );
    assert!(
        status.message().contains("256 KiB/s"),
        "{}",
        status.message()
    );
    assert_eq!(
        budget.available(),
        budget.bytes(),
        "its share was given back"
    );
    assert_no_image(&mut hub, "alice").await;
    // The same image sent at once lands.
    put(&mut hub, "alice", must_not_exist(), &bytes)
        .await
        .expect("a put that keeps the pace");
}
