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

#[tokio::test]
async fn a_stream_ends_with_an_error_frame_when_the_service_fails_or_the_gateway_closes() {
    let streams = Streams::new(CAPS);
    let events = futures::stream::iter([
        Ok(event(Event::NoImage(NoImage {}))),
        Err(tonic::Status::unavailable("gone")),
        Ok(event(Event::Gap(Gap {}))),
    ]);
    let frames: Vec<Bytes> = streams
        .body(events, Duration::from_secs(60), admit(&streams))
        .map(|frame| frame.expect("infallible"))
        .collect()
        .await;
    let text: Vec<String> = frames
        .iter()
        .map(|f| String::from_utf8(f.to_vec()).expect("utf-8"))
        .collect();
    assert_eq!(text.len(), 3, "{text:?}");
    assert_eq!(text[0], "retry: 2000\n\n");
    assert_eq!(text[1], "event: no-image\ndata: {}\n\n");
    assert!(
        text[2].starts_with("event: error\ndata: ") && text[2].contains("\"retryable\":true"),
        "{text:?}"
    );

    // A stream that would go on for ever ends at close.
    let pending = futures::stream::pending();
    let body = streams.body(pending, Duration::from_secs(60), admit(&streams));
    streams.close();
    let text: Vec<String> = body
        .map(|f| String::from_utf8(f.expect("infallible").to_vec()).expect("utf-8"))
        .collect()
        .await;
    assert_eq!(text.len(), 2, "{text:?}");
    assert!(text[1].contains("SERVICE_UNAVAILABLE"), "{text:?}");

    // And at the end of its lifetime.
    let streams = Streams::new(CAPS);
    let started = std::time::Instant::now();
    let text: Vec<Bytes> = streams
        .body(
            futures::stream::pending(),
            Duration::from_millis(200),
            admit(&streams),
        )
        .map(|f| f.expect("infallible"))
        .collect()
        .await;
    assert_eq!(text.len(), 2);
    assert!(started.elapsed() >= Duration::from_millis(200));
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
