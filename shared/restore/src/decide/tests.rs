//! The push decision, case by case: one row per situation a push can meet.

use expect_test::{Expect, expect};

use super::*;

/// A head whose SHA-256 is the hex digit `sha` repeated (what a content hash of the same digit
/// equals).
fn head(revision: &str, sha: char) -> SnapshotInfo {
    let byte = u8::from_str_radix(&format!("{sha}{sha}"), 16).expect("hex digit");
    SnapshotInfo {
        revision: revision.to_owned(),
        sha256: [byte; 32],
        size: 1,
        storage_version: Some(6),
    }
}

fn content(digit: char) -> String {
    digit.to_string().repeat(64)
}

fn synced(revision: &str, digit: char) -> OriginState {
    OriginState {
        address: "origin".to_owned(),
        revision: revision.to_owned(),
        sha256: content(digit),
        content_hash: content(digit),
        synced_at: String::new(),
    }
}

/// `now`: the file's content digit (and its image's); `synced`: (revision, content digit) of its
/// record; `head`: (revision, content digit) of the origin's head; `flags`: `f` force, `r`
/// restore.
#[track_caller]
fn check(
    now: char,
    synced_at: Option<(&str, char)>,
    head_at: Option<(&str, char)>,
    flags: &str,
    expect: Expect,
) {
    check_image(now, now, synced_at, head_at, flags, expect);
}

/// [`check`] with the digit of the image the push would send apart from the content's: the sync
/// copy's bytes depend on the file's history, not only on its content (issue 38).
#[track_caller]
fn check_image(
    now: char,
    image: char,
    synced_at: Option<(&str, char)>,
    head_at: Option<(&str, char)>,
    flags: &str,
    expect: Expect,
) {
    let (content_hash, image_sha256) = (content(now), content(image));
    let synced = synced_at.map(|(r, d)| synced(r, d));
    let head = head_at.map(|(r, d)| head(r, d));
    let plan = push(&PushFacts {
        content_hash: &content_hash,
        image_sha256: &image_sha256,
        synced: synced.as_ref(),
        head: head.as_ref(),
        force: flags.contains('f'),
        restore: flags.contains('r'),
    });
    expect.assert_eq(&format!("{plan:?}"));
}

#[test]
fn an_origin_without_a_copy_takes_the_first_one() {
    check(
        'a',
        None,
        None,
        "",
        expect![[r#"Push { base: None, kind: First { lost: None } }"#]],
    );
    // The origin lost what the file synced as (erased, reset): the file is the copy left.
    check(
        'a',
        Some(("r3-x", 'a')),
        None,
        "",
        expect![[r#"Push { base: None, kind: First { lost: Some("r3-x") } }"#]],
    );
}

#[test]
fn unchanged_only_where_the_origin_confirms_the_revision() {
    check(
        'a',
        Some(("r1-x", 'a')),
        Some(("r1-x", 'a')),
        "",
        expect![[r#"Unchanged { revision: "r1-x" }"#]],
    );
    // The same revision token at another origin is no evidence: this record is not that origin's,
    // and with none the file has never synced there.
    check(
        'a',
        None,
        Some(("r1-x", 'b')),
        "",
        expect![[r#"Refuse(Diverged { head: "r1-x", synced: None })"#]],
    );
    check(
        'a',
        Some(("r1-x", 'a')),
        Some(("r1-x", 'a')),
        "f",
        expect![[r#"Unchanged { revision: "r1-x" }"#]],
    );
}

#[test]
fn a_changed_file_moves_the_origin_forward_from_where_it_left_it() {
    check(
        'b',
        Some(("r1-x", 'a')),
        Some(("r1-x", 'a')),
        "",
        expect![[r#"Push { base: Some("r1-x"), kind: Forward }"#]],
    );
    check(
        'b',
        Some(("r1-x", 'a')),
        Some(("r1-x", 'a')),
        "r",
        expect![[r#"Push { base: Some("r1-x"), kind: Forward }"#]],
    );
}

#[test]
fn what_the_origin_already_holds_is_not_sent_again() {
    check(
        'b',
        None,
        Some(("r2-y", 'b')),
        "",
        expect![[r#"AlreadyAtOrigin { revision: "r2-y" }"#]],
    );
    check(
        'b',
        Some(("r1-x", 'a')),
        Some(("r2-y", 'b')),
        "f",
        expect![[r#"AlreadyAtOrigin { revision: "r2-y" }"#]],
    );
}

#[test]
fn a_file_behind_the_origin_is_refused_unless_restored_or_forced() {
    check(
        'a',
        Some(("r4-x", 'a')),
        Some(("r6-y", 'c')),
        "",
        expect![[r#"Refuse(Behind { synced: "r4-x", head: "r6-y" })"#]],
    );
    check(
        'a',
        Some(("r4-x", 'a')),
        Some(("r6-y", 'c')),
        "r",
        expect![[
            r#"Push { base: Some("r6-y"), kind: Restore { from: "r4-x", superseded: "r6-y" } }"#
        ]],
    );
    check(
        'a',
        Some(("r4-x", 'a')),
        Some(("r6-y", 'c')),
        "f",
        expect![[r#"Push { base: Some("r6-y"), kind: Overwrite { overwritten: "r6-y" } }"#]],
    );
}

#[test]
fn both_changed_is_a_divergence_that_only_force_overrides() {
    check(
        'b',
        Some(("r1-x", 'a')),
        Some(("r2-y", 'c')),
        "",
        expect![[r#"Refuse(Diverged { head: "r2-y", synced: Some("r1-x") })"#]],
    );
    // A changed file holds no revision to restore.
    check(
        'b',
        Some(("r1-x", 'a')),
        Some(("r2-y", 'c')),
        "r",
        expect![[r#"Refuse(Diverged { head: "r2-y", synced: Some("r1-x") })"#]],
    );
    check(
        'b',
        Some(("r1-x", 'a')),
        Some(("r2-y", 'c')),
        "f",
        expect![[r#"Push { base: Some("r2-y"), kind: Overwrite { overwritten: "r2-y" } }"#]],
    );
    check(
        'b',
        None,
        Some(("r2-y", 'c')),
        "f",
        expect![[r#"Push { base: Some("r2-y"), kind: Overwrite { overwritten: "r2-y" } }"#]],
    );
}

#[test]
fn the_origin_already_holds_the_image_or_the_export_of_the_content() {
    // The file's content is 'b' and the image a push would send 'c'; the origin moved from
    // 'a' (where the file synced) to a head of this digit.
    for (head, expect) in [
        // The bytes this push would send (a push whose answer was lost).
        ('c', expect![[r#"AlreadyAtOrigin { revision: "r2-y" }"#]]),
        // The export of this content, as a release before issue 38 pushed it.
        ('b', expect![[r#"AlreadyAtOrigin { revision: "r2-y" }"#]]),
        // Neither: the origin moved on and the file changed too.
        (
            'd',
            expect![[r#"Refuse(Diverged { head: "r2-y", synced: Some("r1-x") })"#]],
        ),
    ] {
        check_image(
            'b',
            'c',
            Some(("r1-x", 'a')),
            Some(("r2-y", head)),
            "",
            expect,
        );
    }
}
