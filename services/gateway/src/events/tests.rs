//! The frames of an event stream, and the `Last-Event-ID` a reconnecting client sends.

use super::*;

use sync_pb::watch_image_response::{Event, Gap, Heartbeat, NoImage};

const CAPS: Caps = Caps {
    max: 4,
    per_user: 2,
    per_address: 3,
};

fn admit(streams: &Streams) -> Admitted {
    streams
        .admit("alice", Some(IpAddr::from([127, 0, 0, 1])))
        .expect("admitted")
}

#[test]
fn streams_are_capped_per_user_per_address_and_in_all_until_they_end() {
    let streams = Streams::new(CAPS);
    let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
    let refused = |result: Result<Admitted, ApiError>| {
        let err = result.expect_err("refused");
        (err.status.as_u16(), err.code)
    };
    let alice_1 = streams.admit("alice", Some(a)).expect("1");
    let alice_2 = streams.admit("alice", Some(b)).expect("2");
    assert_eq!(
        refused(streams.admit("alice", Some(b))),
        (429, "RATE_LIMITED"),
        "per user"
    );
    let bob_1 = streams.admit("bob", Some(a)).expect("bob 1");
    let _carol = streams.admit("carol", Some(a)).expect("carol");
    assert_eq!(
        refused(streams.admit("dave", Some(a))),
        (429, "RATE_LIMITED"),
        "per address"
    );
    assert_eq!(
        refused(streams.admit("dave", Some(b))),
        (503, "OVERLOADED"),
        "in all"
    );
    // A stream that ends gives its place back, to anyone.
    drop(alice_1);
    let dave = streams.admit("dave", Some(b)).expect("dave");
    assert_eq!(refused(streams.admit("erin", Some(b))), (503, "OVERLOADED"));
    drop((alice_2, bob_1, dave));
    let open = lock(&streams.open);
    assert_eq!(
        (open.all, open.users.len(), open.addresses.len()),
        (1, 1, 1)
    );
}

fn event(event: Event) -> sync_pb::WatchImageResponse {
    sync_pb::WatchImageResponse { event: Some(event) }
}

#[test]
fn each_event_has_its_frame() {
    let info = sync_pb::RevisionInfo {
        revision: "r4-00000000000000ab".to_owned(),
        sha256: "ab".repeat(32),
        size: 4096,
        storage_version: Some(6),
        ..Default::default()
    };
    let cases = [
        (
            event(Event::Revision(info)),
            format!(
                "event: revision\nid: \"r4-00000000000000ab\"\ndata: {{\"revision\":\"r4-00000000000000ab\",\"sha256\":\"{}\",\"size\":4096,\"storageVersion\":6}}\n\n",
                "ab".repeat(32)
            ),
        ),
        (
            event(Event::NoImage(NoImage {})),
            "event: no-image\ndata: {}\n\n".to_owned(),
        ),
        (
            event(Event::Gap(Gap {})),
            "event: gap\ndata: {}\n\n".to_owned(),
        ),
        (
            event(Event::Heartbeat(Heartbeat {})),
            ": heartbeat\n\n".to_owned(),
        ),
    ];
    for (event, expected) in cases {
        assert_eq!(frame(&event), expected.as_bytes());
    }
}

#[test]
fn last_event_id_is_a_revision_quoted_or_not() {
    let with = |value: &str| {
        let mut headers = HeaderMap::new();
        headers.insert(
            "last-event-id",
            HeaderValue::from_str(value).expect("value"),
        );
        last_event_id(&headers)
    };
    assert_eq!(last_event_id(&HeaderMap::new()).expect("none"), None);
    assert_eq!(with("").expect("empty"), None);
    for value in ["\"r4-00ab\"", "r4-00ab", " \"r4-00ab\" "] {
        assert_eq!(with(value).expect(value).as_deref(), Some("r4-00ab"));
    }
    for bad in ["\"r4 00ab\"", "r4,r5", "\"", &"r".repeat(129)] {
        let err = with(bad).expect_err(bad);
        assert_eq!(
            (err.status.as_u16(), err.code),
            (400, "BAD_REQUEST"),
            "{bad}"
        );
    }
}

fn revision(seq: u64) -> sync_pb::RevisionInfo {
    sync_pb::RevisionInfo {
        revision: format!("r{seq}-{seq:016x}"),
        size: seq,
        ..Default::default()
    }
}

/// A read of a history holding revisions `seqs`, newest first as the store lists it.
fn read(seqs: &[u64]) -> Heard {
    Heard::History(Ok(std::sync::Arc::new(
        seqs.iter().rev().copied().map(revision).collect(),
    )))
}

async fn frames(body: impl Stream<Item = Result<Bytes, std::convert::Infallible>>) -> Vec<String> {
    body.map(|f| String::from_utf8(f.expect("infallible").to_vec()).expect("utf-8"))
        .collect()
        .await
}

#[tokio::test]
async fn each_read_is_sent_as_what_brings_the_client_up_to_it() {
    let streams = Streams::new(CAPS);
    let heard = futures::stream::iter([
        read(&[1, 2]),
        Heard::Heartbeat,
        read(&[1, 2]),
        read(&[1, 2, 3, 4]),
        read(&[]),
    ]);
    let text = frames(streams.body(
        heard,
        Sent::Revision(revision(1).revision),
        Duration::from_secs(60),
        std::future::pending(),
        admit(&streams),
    ))
    .await;
    let kinds: Vec<&str> = text
        .iter()
        .map(|t| t.split(['\n', ':']).nth(1).unwrap_or("").trim())
        .collect();
    assert_eq!(
        kinds,
        [
            "2000",
            "revision",
            "heartbeat",
            "revision",
            "revision",
            "no-image",
            "error"
        ],
        "{text:?}"
    );
    assert!(text[1].contains(&revision(2).revision), "{text:?}");
    assert!(text[3].contains(&revision(3).revision), "{text:?}");
    assert!(text[4].contains(&revision(4).revision), "{text:?}");
}

#[tokio::test]
async fn a_stream_ends_with_an_error_frame_when_a_read_fails_or_the_gateway_closes() {
    let streams = Streams::new(CAPS);
    let heard = futures::stream::iter([
        read(&[]),
        Heard::History(Err(ApiError::unavailable("gone"))),
        read(&[1]),
    ]);
    let text = frames(streams.body(
        heard,
        Sent::Nothing,
        Duration::from_secs(60),
        std::future::pending(),
        admit(&streams),
    ))
    .await;
    assert_eq!(text.len(), 3, "{text:?}");
    assert_eq!(text[0], "retry: 2000\n\n");
    assert_eq!(text[1], "event: no-image\ndata: {}\n\n");
    assert!(
        text[2].starts_with("event: error\ndata: ") && text[2].contains("\"retryable\":true"),
        "{text:?}"
    );

    // A stream that would go on for ever ends at close.
    let body = streams.body(
        futures::stream::pending(),
        Sent::Nothing,
        Duration::from_secs(60),
        std::future::pending(),
        admit(&streams),
    );
    streams.close();
    let text = frames(body).await;
    assert_eq!(text.len(), 2, "{text:?}");
    assert!(text[1].contains("SERVICE_UNAVAILABLE"), "{text:?}");

    // And at the end of its lifetime.
    let streams = Streams::new(CAPS);
    let started = std::time::Instant::now();
    let text = frames(streams.body(
        futures::stream::pending(),
        Sent::Nothing,
        Duration::from_millis(200),
        std::future::pending(),
        admit(&streams),
    ))
    .await;
    assert_eq!(text.len(), 2);
    assert!(started.elapsed() >= Duration::from_millis(200));

    // And when its credential is revoked, with the refusal.
    let streams = Streams::new(CAPS);
    let text = frames(streams.body(
        futures::stream::pending(),
        Sent::Nothing,
        Duration::from_secs(60),
        async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            ApiError::from_reason(&snug_reasons::gateway::UNAUTHENTICATED, "revoked")
        },
        admit(&streams),
    ))
    .await;
    assert_eq!(text.len(), 2, "{text:?}");
    assert!(
        text[1].contains("UNAUTHENTICATED") && text[1].contains("\"retryable\":false"),
        "{text:?}"
    );
}

#[test]
fn a_wait_is_read_from_prefer_and_capped() {
    let wait = |values: &[&str]| {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append("prefer", HeaderValue::from_str(value).expect("value"));
        }
        preferred_wait(&headers).map(|d| d.as_secs())
    };
    assert_eq!(wait(&[]), None);
    assert_eq!(wait(&["wait=10"]), Some(10));
    assert_eq!(wait(&["respond-async, wait=5"]), Some(5));
    assert_eq!(wait(&["return=minimal", "Wait = 7"]), Some(7));
    assert_eq!(wait(&["wait=3600"]), Some(MAX_WAIT_SECONDS), "capped");
    for no in [&["wait=soon"][..], &["wait"], &["waiting=5"], &["wait=-1"]] {
        assert_eq!(wait(no), None, "{no:?}");
    }
}
