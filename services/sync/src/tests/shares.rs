//! The shares of the upload budget (issue 36 point 2): one client address's uploads, whoever's
//! they are, hold at most half of the budget, as one user's do; a request over its share waits
//! aside for its address's earlier uploads, while others get in, and is refused OVERLOADED,
//! storing nothing, when they outlast the budget's wait.

use snug_rpc::budget::UploadBudget;

use super::*;

on_every_backend!(one_address_holds_at_most_half_of_the_upload_budget);

/// A first PutImage header for `user`, from `address`, declaring `len` bytes.
fn header_from(user: &str, address: &str, len: usize) -> pb::PutImageRequest {
    pb::PutImageRequest::header(pb::PutImageHeader {
        caller: Some(pb::Caller {
            user_id: user.to_owned(),
            principal: format!("{user}/device"),
            client_address: address.to_owned(),
        }),
        precondition: Some(pb::Precondition {
            condition: must_not_exist(),
        }),
        expected_length: Some(len as u64),
        ..Default::default()
    })
}

async fn put_from(hub: &mut Hub, user: &str, address: &str, bytes: &Bytes) -> Result<(), Status> {
    let request = chunks::upload(header_from(user, address, bytes.len()), bytes.clone());
    hub.client.put_image(request).await.map(drop)
}

async fn one_address_holds_at_most_half_of_the_upload_budget(backend: Backend) {
    let budget = UploadBudget::new(1 << 20, Duration::from_secs(2));
    let Some(mut hub) = start(backend, |c| c.runtime.upload_budget = budget.clone()).await else {
        return;
    };
    for user in ["alice", "bob", "carol"] {
        provision(&mut hub, user).await;
    }
    let (shared, other) = ("192.0.2.7", "2001:db8:0:1::5");
    // Alice's upload from the shared address holds more than half, and stays open.
    let large = image(98, 640 << 10);
    let (sender, requests) = futures::channel::mpsc::unbounded();
    sender
        .unbounded_send(header_from("alice", shared, large.len()))
        .expect("header");
    let mut client = hub.client.clone();
    let held = tokio::spawn(async move { client.put_image(requests).await });
    while budget.available() == budget.bytes() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Bob from the same address waits while alice's upload holds the address's share; when it
    // outlasts the budget's wait, bob is refused, and nothing is stored.
    let small = image(99, 64 << 10);
    let started = std::time::Instant::now();
    let status = assert_refused(
        put_from(&mut hub, "bob", shared, &small).await,
        Code::Unavailable,
        &snug_reasons::rpc::OVERLOADED,
    );
    assert!(started.elapsed() >= Duration::from_secs(2), "it waited");
    assert!(
        status.message().contains("client address"),
        "{}",
        status.message()
    );
    assert_no_image(&mut hub, "bob").await;
    // Carol from another address (an IPv6 /64 of its own) gets in at once, and bob, waiting
    // again, gets in as soon as alice's upload is in.
    put_from(&mut hub, "carol", other, &small)
        .await
        .expect("another address's upload");
    let waiting = tokio::spawn({
        let mut hub_client = hub.client.clone();
        let request = chunks::upload(header_from("bob", shared, small.len()), small.clone());
        async move { hub_client.put_image(request).await.map(drop) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "bob waits his turn");
    for piece in large.chunks(256 << 10) {
        sender
            .unbounded_send(pb::PutImageRequest::chunk(Bytes::copy_from_slice(piece)))
            .expect("chunk");
    }
    drop(sender);
    held.await.expect("task").expect("alice's upload");
    waiting
        .await
        .expect("task")
        .expect("bob, once the address's earlier upload is in");
}
