//! Table tests of the compare-and-swap rule.

use super::*;

fn rev(s: &str) -> Revision {
    Revision::new(s).expect("valid revision")
}

fn accepted(r: &str, base: Option<&str>, byte: u8) -> Accepted {
    Accepted {
        revision: rev(r),
        base: base.map(rev),
        digest: Digest::from_bytes([byte; 32]),
    }
}

#[track_caller]
fn check(precondition: Precondition, facts: Facts, digest: u8, expect: &str) {
    let early = early(&precondition, &facts).map(|e| e.reason().name);
    let decided = match decide(&precondition, &facts, &Digest::from_bytes([digest; 32])) {
        Decision::Accept => "Accept".to_owned(),
        Decision::Replay(r) => format!("Replay({r})"),
        Decision::Refuse(e) => format!("Refuse({})", e.reason()),
    };
    assert_eq!(format!("early={early:?} final={decided}"), expect);
}

#[test]
fn first_write_on_empty_user_is_accepted() {
    check(
        Precondition::MustNotExist,
        Facts::default(),
        1,
        "early=None final=Accept",
    );
}

#[test]
fn must_not_exist_on_existing_is_a_mismatch_reporting_current() {
    let facts = Facts {
        current: Some(accepted("r2-a", Some("r1-a"), 2)),
        ..Facts::default()
    };
    check(
        Precondition::MustNotExist,
        facts.clone(),
        9,
        "early=Some(\"REVISION_MISMATCH\") final=Refuse(REVISION_MISMATCH)",
    );
    match decide(
        &Precondition::MustNotExist,
        &facts,
        &Digest::from_bytes([9; 32]),
    ) {
        Decision::Refuse(PutError::Conflict { current }) => assert_eq!(current, Some(rev("r2-a"))),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn must_match_current_is_accepted() {
    let facts = Facts {
        current: Some(accepted("r1-a", None, 1)),
        ..Facts::default()
    };
    check(
        Precondition::MustMatch(rev("r1-a")),
        facts,
        2,
        "early=None final=Accept",
    );
}

#[test]
fn must_match_earlier_revision_is_stale() {
    let facts = Facts {
        current: Some(accepted("r3-a", Some("r2-a"), 3)),
        base_known: true,
        ..Facts::default()
    };
    check(
        Precondition::MustMatch(rev("r1-a")),
        facts,
        4,
        "early=Some(\"STALE_REVISION\") final=Refuse(STALE_REVISION)",
    );
}

#[test]
fn must_match_unknown_revision_is_a_mismatch() {
    let facts = Facts {
        current: Some(accepted("r3-a", Some("r2-a"), 3)),
        ..Facts::default()
    };
    check(
        Precondition::MustMatch(rev("r9-zz")),
        facts,
        4,
        "early=Some(\"REVISION_MISMATCH\") final=Refuse(REVISION_MISMATCH)",
    );
    check(
        Precondition::MustMatch(rev("r9-zz")),
        Facts::default(),
        4,
        "early=Some(\"REVISION_MISMATCH\") final=Refuse(REVISION_MISMATCH)",
    );
}

#[test]
fn retry_of_landed_write_replays() {
    let facts = Facts {
        current: Some(accepted("r2-a", Some("r1-a"), 7)),
        base_known: true,
        ..Facts::default()
    };
    check(
        Precondition::MustMatch(rev("r1-a")),
        facts.clone(),
        7,
        "early=None final=Replay(r2-a)",
    );
    // Same base, other bytes: a real conflict, found only after the digest is known.
    check(
        Precondition::MustMatch(rev("r1-a")),
        facts,
        8,
        "early=None final=Refuse(STALE_REVISION)",
    );
    let first = Facts {
        current: Some(accepted("r1-a", None, 7)),
        ..Facts::default()
    };
    check(
        Precondition::MustNotExist,
        first,
        7,
        "early=None final=Replay(r1-a)",
    );
}

#[test]
fn idempotency_key_replays_or_is_refused_when_reused() {
    let keyed = Facts {
        current: Some(accepted("r5-a", Some("r4-a"), 5)),
        base_known: true,
        keyed: Some(accepted("r3-a", Some("r2-a"), 3)),
        staged: 0,
    };
    check(
        Precondition::MustMatch(rev("r2-a")),
        keyed.clone(),
        3,
        "early=None final=Replay(r3-a)",
    );
    check(
        Precondition::MustMatch(rev("r2-a")),
        keyed,
        4,
        "early=None final=Refuse(IDEMPOTENCY_KEY_REUSED)",
    );
}

#[test]
fn a_put_is_admitted_while_the_users_staged_bytes_stay_within_the_limit() {
    let cases = [
        // (staged, reserve, limit, admitted)
        (0, 100, 400, true),
        (300, 100, 400, true),
        (301, 100, 400, false),
        // Nothing staged: even a put larger than the limit may start.
        (0, 900, 400, true),
        // A restore stages nothing, but is not admitted past a limit already exceeded.
        (500, 0, 400, false),
    ];
    for (staged, reserve, limit, admitted) in cases {
        let refusal = admit(staged, reserve, limit);
        assert_eq!(
            refusal.is_none(),
            admitted,
            "staged {staged} + {reserve} within {limit}: {refusal:?}"
        );
        if let Some(err) = refusal {
            assert_eq!(err.reason(), "PUTS_IN_FLIGHT");
        }
    }
}
