//! Tests of timestamp formatting and UUID shape.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, UNIX_EPOCH};

use expect_test::{Expect, expect};

use super::*;

#[track_caller]
fn check(unix_ms: u64, expect: Expect) {
    expect.assert_eq(&iso_timestamp(UNIX_EPOCH + Duration::from_millis(unix_ms)));
}

#[test]
fn timestamps_match_to_iso_string() {
    check(0, expect!["1970-01-01T00:00:00.000Z"]);
    check(1_767_225_600_000, expect!["2026-01-01T00:00:00.000Z"]);
    check(1_709_210_096_789, expect!["2024-02-29T12:34:56.789Z"]);
    check(951_782_400_000, expect!["2000-02-29T00:00:00.000Z"]);
    check(4_102_444_799_999, expect!["2099-12-31T23:59:59.999Z"]);
    check(253_402_300_799_000, expect!["9999-12-31T23:59:59.000Z"]);
}

#[test]
fn instants_before_the_epoch_clamp() {
    assert_eq!(
        iso_timestamp(UNIX_EPOCH - Duration::from_secs(5)),
        "1970-01-01T00:00:00.000Z"
    );
}

#[test]
fn stepping_clocks_step() {
    let clock = SteppingClock::new(UNIX_EPOCH, Duration::from_millis(1500));
    let readings: Vec<String> = (0..3).map(|_| clock.timestamp()).collect();
    assert_eq!(
        readings,
        [
            "1970-01-01T00:00:00.000Z",
            "1970-01-01T00:00:01.500Z",
            "1970-01-01T00:00:03.000Z"
        ]
    );
    let manual = ManualClock::new(UNIX_EPOCH);
    manual.set(UNIX_EPOCH + Duration::from_secs(60));
    assert_eq!(manual.timestamp(), "1970-01-01T00:01:00.000Z");
}

#[test]
fn uuids_are_version_4() {
    expect!["00000000-0000-4000-8000-000000000000"].assert_eq(&format_uuid_v4([0; 16]));
    expect!["ffffffff-ffff-4fff-bfff-ffffffffffff"].assert_eq(&format_uuid_v4([0xff; 16]));
    let a = uuid_v4().unwrap();
    let b = uuid_v4().unwrap();
    assert_ne!(a, b);
    assert!(crate::is_uuid_shaped(&a) && a.as_bytes()[14] == b'4' && a == a.to_lowercase());
}
