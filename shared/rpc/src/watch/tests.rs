//! What a watch sends from what it sent last and the history it reads: a table of cases.

use super::*;

fn info(seq: u64) -> pb::RevisionInfo {
    pb::RevisionInfo {
        revision: rev(seq),
        size: seq,
        ..Default::default()
    }
}

fn rev(seq: u64) -> String {
    format!("r{seq}-{seq:016x}")
}

/// The history holding revisions `seqs`, newest first as the store lists it.
fn history(seqs: &[u64]) -> Vec<pb::RevisionInfo> {
    seqs.iter().rev().copied().map(info).collect()
}

/// The events as seqs (`0` for no image, `u64::MAX` for a gap).
fn seqs(events: &[Event]) -> Vec<u64> {
    events
        .iter()
        .map(|e| match e {
            Event::Revision(info) => info.size,
            Event::NoImage => 0,
            Event::Gap => u64::MAX,
        })
        .collect()
}

/// A case: its name, what was sent last, the revisions listed, the events expected, what has
/// been sent after them.
type Case<'a> = (&'a str, Sent, &'a [u64], &'a [u64], Sent);

#[test]
fn a_watch_sends_what_follows_what_it_sent() {
    const GAP: u64 = u64::MAX;
    let cases: &[Case<'_>] = &[
        (
            "first read, no image",
            Sent::Nothing,
            &[],
            &[0],
            Sent::NoImage,
        ),
        (
            "first read, the current one only",
            Sent::Nothing,
            &[1, 2, 3],
            &[3],
            Sent::Revision(rev(3)),
        ),
        ("still no image", Sent::NoImage, &[], &[], Sent::NoImage),
        (
            "the first image",
            Sent::NoImage,
            &[1],
            &[1],
            Sent::Revision(rev(1)),
        ),
        (
            "nothing new",
            Sent::Revision(rev(3)),
            &[1, 2, 3],
            &[],
            Sent::Revision(rev(3)),
        ),
        (
            "every commit since, oldest first",
            Sent::Revision(rev(1)),
            &[1, 2, 3, 4],
            &[2, 3, 4],
            Sent::Revision(rev(4)),
        ),
        ("erased", Sent::Revision(rev(3)), &[], &[0], Sent::NoImage),
        (
            "not in the page: a gap, then the current one",
            Sent::Revision(rev(9)),
            &[1, 2, 3],
            &[GAP, 3],
            Sent::Revision(rev(3)),
        ),
    ];
    for (case, sent, listed, expected, after) in cases {
        let (events, now) = catch_up(sent, &history(listed));
        assert_eq!(seqs(&events), *expected, "{case}");
        assert_eq!(&now, after, "{case}");
    }
}

#[test]
fn a_caller_resuming_from_further_back_than_a_page_is_told_of_a_gap() {
    let all: Vec<u64> = (1..=200).collect();
    let page = &history(&all)[..PAGE];
    let (events, now) = catch_up(&Sent::Revision(rev(100)), page);
    assert_eq!(seqs(&events), [u64::MAX, 200]);
    assert_eq!(now, Sent::Revision(rev(200)));
    // Within the page, every one.
    let (events, _) = catch_up(&Sent::Revision(rev(150)), page);
    assert_eq!(seqs(&events), (151..=200).collect::<Vec<_>>());
}
