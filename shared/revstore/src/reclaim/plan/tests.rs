//! Table tests of the reclamation and erasure plans: each case is a step's facts in and its plan,
//! written as one line, out. Digests are written `#n` (all 32 bytes `n`), moments as seconds
//! before `NOW`, and journal entries as `kind(user)[subjects]` (`none` for none).

use std::time::Duration;

use super::*;
use crate::reclaim::Unreferenced;

const NOW: Timestamp = Timestamp::from_unix_millis(1_000_000_000);

/// Keep the newest 2, a minute's grace, an hour's orphan period.
fn retention() -> Retention {
    Retention {
        keep_newest: 2,
        grace: Duration::from_secs(60),
        orphan_after: Duration::from_secs(3600),
    }
}

fn cutoffs() -> Cutoffs {
    Cutoffs::at(NOW, &retention())
}

/// The moment `secs` seconds before `NOW`.
fn ago(secs: u64) -> Timestamp {
    NOW.minus(Duration::from_secs(secs))
}

fn d(n: u8) -> Digest {
    Digest::from_bytes([n; 32])
}

fn digests(ns: &[u8]) -> Vec<Digest> {
    ns.iter().copied().map(d).collect()
}

fn digest_set(ns: &[u8]) -> HashSet<Digest> {
    ns.iter().copied().map(d).collect()
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// `#n` for a digest made by [`d`], or its hex form as journaled.
fn label(hex: &str) -> String {
    match Digest::from_hex(hex) {
        Ok(digest) => format!("#{}", digest.as_bytes()[0]),
        Err(_) => hex.to_owned(),
    }
}

fn labels(digests: &[Digest]) -> String {
    let labels: Vec<String> = digests.iter().map(|d| label(&d.to_hex())).collect();
    labels.join(" ")
}

/// The entries, or `none`.
fn journal(entries: &[Entry]) -> String {
    if entries.is_empty() {
        return "none".to_owned();
    }
    let entries: Vec<String> = entries
        .iter()
        .map(|e| {
            let subjects: Vec<String> = e.subjects.iter().map(|s| label(s)).collect();
            let user = e
                .user
                .as_deref()
                .map_or(String::new(), |u| format!("({u})"));
            format!("{}{user}[{}]", e.kind.as_str(), subjects.join(" "))
        })
        .collect();
    entries.join("; ")
}

/// What the puts in flight name, written as literals.
#[derive(Clone, Copy)]
struct Flight {
    bases: &'static [(&'static str, &'static str)],
    images: &'static [u8],
    objects: &'static [&'static str],
    chunks: &'static [u8],
}

/// No put in flight.
const IDLE: Flight = Flight {
    bases: &[],
    images: &[],
    objects: &[],
    chunks: &[],
};

impl Flight {
    fn facts(self) -> InFlight {
        InFlight {
            bases: self
                .bases
                .iter()
                .map(|(u, r)| ((*u).to_owned(), (*r).to_owned()))
                .collect(),
            images: digest_set(self.images),
            objects: self.objects.iter().map(|o| (*o).to_owned()).collect(),
            chunks: digest_set(self.chunks),
        }
    }
}

#[test]
fn orphans_are_abandoned_or_past_the_orphan_period_or_the_scope_of_an_erasure() {
    /// (id, user, started seconds ago, abandoned)
    type Row = (&'static str, &'static str, u64, bool);
    const ROWS: &[Row] = &[
        ("1", "alice", 0, true),
        ("2", "alice", 3599, false),
        ("3", "alice", 3600, false),
        ("4", "bob", 7200, false),
        ("5", "bob", 10, false),
        ("6", "bob", 10, true),
    ];
    let cases: &[(&str, Taking<'_>, &str)] = &[
        (
            "a pass: abandoned at any age, or started at or before the cutoff",
            Taking::Orphans(cutoffs().orphaned_by),
            "1 3 4 6",
        ),
        (
            "a discard: the abandoned record with the id",
            Taking::Abandoned("6"),
            "6",
        ),
        (
            "a discard of a record not abandoned takes nothing",
            Taking::Abandoned("5"),
            "",
        ),
        (
            "a discard of a record not there takes nothing",
            Taking::Abandoned("9"),
            "",
        ),
        (
            "an erasure: every record of the user, whatever its age or state",
            Taking::User("bob"),
            "4 5 6",
        ),
    ];
    for (case, taking, expect) in cases {
        let publications = ROWS
            .iter()
            .map(|(id, user, secs, abandoned)| Publication {
                record: Record {
                    id: (*id).to_owned(),
                    user: (*user).to_owned(),
                },
                started_at: ago(*secs),
                abandoned: *abandoned,
                objects: Vec::new(),
            })
            .collect();
        let taken: Vec<String> = orphans(*taking, publications)
            .into_iter()
            .map(|p| p.record.id)
            .collect();
        assert_eq!(taken.join(" "), *expect, "{case}");
    }
}

fn orphan(id: &str, started: u64, objects: &[&str], chunks: &[u8]) -> Orphan {
    Orphan {
        record: Record {
            id: id.to_owned(),
            user: format!("user-{id}"),
        },
        started_at: ago(started),
        objects: strings(objects),
        chunks: digests(chunks),
    }
}

#[test]
fn each_orphan_record_is_journaled_as_its_users_publication() {
    let orphans = [orphan("7", 0, &[], &[]), orphan("9", 0, &[], &[])];
    let records = records(&orphans);
    let ids: Vec<&str> = records.items.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        format!("{ids:?} {}", journal(&records.journal)),
        r#"["7", "9"] publication(user-7)[7]; publication(user-9)[9]"#
    );
    assert_eq!(journal(&super::records(&[]).journal), "none");
}

#[test]
fn staged_objects_and_chunks_go_unless_registered_or_named_in_flight() {
    struct Case {
        case: &'static str,
        orphans: Vec<Orphan>,
        in_flight: Flight,
        registered: &'static [&'static str],
        expect: &'static str,
    }
    let cases = [
        Case {
            case: "an orphan's objects and chunks go, however young",
            orphans: vec![orphan("1", 0, &["p1"], &[1, 2])],
            in_flight: IDLE,
            registered: &[],
            expect: "objects=[p1] chunks=[#1 #2] since=0s",
        },
        Case {
            case: "an object a stored image registers stays",
            orphans: vec![orphan("1", 0, &["p1", "p2"], &[])],
            in_flight: IDLE,
            registered: &["p1"],
            expect: "objects=[p2] chunks=[] since=None",
        },
        Case {
            case: "an object a put in flight names stays",
            orphans: vec![orphan("1", 0, &["p1", "p2"], &[])],
            in_flight: Flight {
                objects: &["p2"],
                ..IDLE
            },
            registered: &[],
            expect: "objects=[p1] chunks=[] since=None",
        },
        Case {
            case: "a chunk a put in flight relies on stays; none left asks nothing",
            orphans: vec![orphan("1", 0, &[], &[1])],
            in_flight: Flight {
                chunks: &[1],
                ..IDLE
            },
            registered: &[],
            expect: "objects=[] chunks=[] since=None",
        },
        Case {
            case: "names and chunks two orphans share count once; since is the earliest start",
            orphans: vec![
                orphan("1", 100, &["p1", "p2"], &[3, 1]),
                orphan("2", 4000, &["p2", "p1"], &[1, 2]),
            ],
            in_flight: IDLE,
            registered: &[],
            expect: "objects=[p1 p2] chunks=[#3 #1 #2] since=4000s",
        },
        Case {
            case: "no orphan, nothing staged",
            orphans: vec![],
            in_flight: IDLE,
            registered: &[],
            expect: "objects=[] chunks=[] since=None",
        },
    ];
    for c in cases {
        let registered: HashSet<String> = strings(c.registered).into_iter().collect();
        let staged = staged(&c.orphans, &c.in_flight.facts(), &registered);
        let since = staged.since.map_or("None".to_owned(), |t| {
            format!("{}s", (NOW.unix_millis() - t.unix_millis()) / 1000)
        });
        let got = format!(
            "objects=[{}] chunks=[{}] since={since}",
            staged.objects.join(" "),
            labels(&staged.chunks)
        );
        assert_eq!(got, c.expect, "{}", c.case);
    }
}

#[test]
fn a_staged_chunk_an_image_names_stays() {
    let cases: &[(&str, &[u8], &[u8], &str)] = &[
        ("none named: all go", &[1, 2], &[], "[#1 #2] chunk[#1 #2]"),
        ("a named one stays", &[1, 2], &[2], "[#1] chunk[#1]"),
        ("all named: nothing journaled", &[1], &[1], "[] none"),
    ];
    for (case, candidates, named, expect) in cases {
        let dead = staged_chunks(digests(candidates), &digest_set(named));
        let got = format!("[{}] {}", labels(&dead.items), journal(&dead.journal));
        assert_eq!(got, *expect, "{case}");
    }
}

/// A retained revision `revision` of `user`, with `newer` newer ones, superseded `secs` ago.
fn retained(user: &str, revision: &str, newer: u64, secs: u64) -> Retained {
    Retained {
        user: user.to_owned(),
        seq: 0,
        revision: revision.to_owned(),
        candidate: Candidate {
            newer,
            superseded_at: Some(ago(secs)),
            ..Candidate::default()
        },
    }
}

#[test]
fn revisions_go_by_the_retention_rule_unless_a_put_in_flight_builds_on_them() {
    struct Case {
        case: &'static str,
        retained: Vec<Retained>,
        in_flight: Flight,
        expect: &'static str,
    }
    let old = || retained("alice", "r1", 5, 600);
    let cases = [
        Case {
            case: "old, superseded, unprotected: released and journaled",
            retained: vec![old()],
            in_flight: IDLE,
            expect: "[alice/r1] revision(alice)[r1]",
        },
        Case {
            case: "the base of a put in flight keeps its revision",
            retained: vec![old()],
            in_flight: Flight {
                bases: &[("alice", "r1")],
                ..IDLE
            },
            expect: "[] none",
        },
        Case {
            case: "a base is a user's: another user's put on the same token protects nothing",
            retained: vec![old()],
            in_flight: Flight {
                bases: &[("bob", "r1")],
                ..IDLE
            },
            expect: "[alice/r1] revision(alice)[r1]",
        },
        Case {
            case: "leased, current, within grace or among the newest: kept",
            retained: vec![
                Retained {
                    candidate: Candidate {
                        leased: true,
                        ..old().candidate
                    },
                    ..old()
                },
                Retained {
                    candidate: Candidate {
                        current: true,
                        ..old().candidate
                    },
                    ..old()
                },
                retained("alice", "r2", 5, 59),
                retained("alice", "r3", 1, 600),
            ],
            in_flight: IDLE,
            expect: "[] none",
        },
        Case {
            case: "journaled one entry per user, users in order, revisions as read",
            retained: vec![
                retained("carol", "c2", 3, 600),
                retained("alice", "a1", 4, 600),
                retained("carol", "c1", 4, 600),
            ],
            in_flight: IDLE,
            expect: "[carol/c2 alice/a1 carol/c1] revision(alice)[a1]; revision(carol)[c2 c1]",
        },
    ];
    for c in cases {
        let released = revisions(c.retained, &c.in_flight.facts(), &retention(), &cutoffs());
        let items: Vec<String> = released
            .items
            .iter()
            .map(|r| format!("{}/{}", r.user, r.revision))
            .collect();
        let got = format!("[{}] {}", items.join(" "), journal(&released.journal));
        assert_eq!(got, c.expect, "{}", c.case);
    }
}

#[test]
fn an_unreferenced_image_in_flight_or_leased_stays() {
    struct Case {
        case: &'static str,
        /// (digest, leased)
        unreferenced: &'static [(u8, bool)],
        in_flight: Flight,
        expect: &'static str,
    }
    let cases = [
        Case {
            case: "unleased and not in flight: goes",
            unreferenced: &[(1, false), (2, false)],
            in_flight: IDLE,
            expect: "[#1 #2] image[#1 #2]",
        },
        Case {
            case: "leased: stays",
            unreferenced: &[(1, true), (2, false)],
            in_flight: IDLE,
            expect: "[#2] image[#2]",
        },
        Case {
            case: "published by a put in flight: stays",
            unreferenced: &[(1, false), (2, false)],
            in_flight: Flight {
                images: &[1],
                ..IDLE
            },
            expect: "[#2] image[#2]",
        },
        Case {
            case: "none: nothing journaled",
            unreferenced: &[],
            in_flight: IDLE,
            expect: "[] none",
        },
    ];
    for c in cases {
        let doomed = images(&unreferenced(c.unreferenced), &c.in_flight.facts());
        let got = format!("[{}] {}", labels(&doomed.items), journal(&doomed.journal));
        assert_eq!(got, c.expect, "{}", c.case);
    }
}

/// Unreferenced images from (digest, leased) pairs.
fn unreferenced(images: &[(u8, bool)]) -> Vec<Unreferenced> {
    images
        .iter()
        .map(|(n, leased)| Unreferenced {
            digest: d(*n),
            leased: *leased,
        })
        .collect()
}

#[test]
fn a_chunk_named_by_a_live_image_reused_in_flight_or_streaming_stays() {
    struct Case {
        case: &'static str,
        /// (digest, streamed seconds ago: `None` for a row a commit wrote)
        rows: &'static [(u8, Option<u64>)],
        live: &'static [u8],
        in_flight: Flight,
        expect: &'static str,
    }
    let cases = [
        Case {
            case: "no image names it and no put relies on it: goes",
            rows: &[(1, None), (2, None)],
            live: &[],
            in_flight: IDLE,
            expect: "[#1 #2] chunk[#1 #2]",
        },
        Case {
            case: "named by a live image: stays",
            rows: &[(1, None), (2, None)],
            live: &[2],
            in_flight: IDLE,
            expect: "[#1] chunk[#1]",
        },
        Case {
            case: "reused by a put in flight: stays",
            rows: &[(1, None), (2, None)],
            live: &[],
            in_flight: Flight {
                chunks: &[1],
                ..IDLE
            },
            expect: "[#2] chunk[#2]",
        },
        Case {
            case: "streamed in within the orphan period: stays; at or past it: goes",
            rows: &[(1, Some(3599)), (2, Some(3600)), (3, Some(7200))],
            live: &[],
            in_flight: IDLE,
            expect: "[#2 #3] chunk[#2 #3]",
        },
        Case {
            case: "streamed in long ago but named: stays",
            rows: &[(1, Some(7200))],
            live: &[1],
            in_flight: IDLE,
            expect: "[] none",
        },
    ];
    for c in cases {
        let rows: Vec<ChunkRow> = c
            .rows
            .iter()
            .map(|(n, streamed)| ChunkRow {
                digest: d(*n),
                streamed_at: streamed.map(ago),
            })
            .collect();
        let dead = chunks(&rows, &digest_set(c.live), &c.in_flight.facts(), &cutoffs());
        let got = format!("[{}] {}", labels(&dead.items), journal(&dead.journal));
        assert_eq!(got, c.expect, "{}", c.case);
    }
}

#[test]
fn an_object_in_flight_or_registered_stays_and_an_unnamed_one_goes_past_the_orphan_period() {
    struct Case {
        case: &'static str,
        empty: &'static [&'static str],
        staged: &'static [&'static str],
        registered: &'static [&'static str],
        /// (name, written seconds ago)
        listing: &'static [(&'static str, u64)],
        in_flight: Flight,
        expect: &'static str,
    }
    let case = |case, expect| Case {
        case,
        empty: &[],
        staged: &[],
        registered: &[],
        listing: &[],
        in_flight: IDLE,
        expect,
    };
    let cases = [
        Case {
            empty: &["e1", "e2"],
            registered: &["e1", "e2", "full"],
            listing: &[("e1", 0), ("e2", 0), ("full", 9000)],
            ..case(
                "empty objects are unregistered and go, however young; a full one stays",
                "unregister=[e1 e2] delete=[e1 e2] pack[e1 e2]",
            )
        },
        Case {
            empty: &["e1", "e2"],
            registered: &["e1", "e2"],
            in_flight: Flight {
                objects: &["e2"],
                ..IDLE
            },
            ..case(
                "an empty object a put in flight names stays registered",
                "unregister=[e1] delete=[e1] pack[e1]",
            )
        },
        Case {
            listing: &[("young", 3599), ("due", 3600), ("old", 9000)],
            ..case(
                "an unnamed listed object goes only at or past the orphan period",
                "unregister=[] delete=[due old] pack[due old]",
            )
        },
        Case {
            registered: &["kept"],
            listing: &[("kept", 9000), ("flying", 9000)],
            in_flight: Flight {
                objects: &["flying"],
                ..IDLE
            },
            ..case(
                "a listed object registered or named in flight stays, however old",
                "unregister=[] delete=[] none",
            )
        },
        Case {
            staged: &["o1", "o2"],
            listing: &[("o1", 0)],
            ..case(
                "an orphan's objects go whatever their age, listed or not",
                "unregister=[] delete=[o1 o2] pack[o1 o2]",
            )
        },
        Case {
            empty: &["e1"],
            staged: &["e1", "o1"],
            registered: &["e1"],
            listing: &[("e1", 9000), ("o1", 9000), ("u1", 9000)],
            ..case(
                "a name doomed for several reasons is deleted and journaled once",
                "unregister=[e1] delete=[e1 o1 u1] pack[e1 o1 u1]",
            )
        },
        case("nothing: nothing journaled", "unregister=[] delete=[] none"),
    ];
    for c in cases {
        let registered: HashSet<String> = strings(c.registered).into_iter().collect();
        let listing: Vec<Listed> = c
            .listing
            .iter()
            .map(|(name, secs)| Listed {
                name: (*name).to_owned(),
                written: ago(*secs),
            })
            .collect();
        let objects = objects(&ObjectFacts {
            empty: &strings(c.empty),
            staged: &strings(c.staged),
            registered: &registered,
            listing: &listing,
            in_flight: &c.in_flight.facts(),
            cutoffs: &cutoffs(),
        });
        let got = format!(
            "unregister=[{}] delete=[{}] {}",
            objects.unregister.join(" "),
            objects.delete.items.join(" "),
            journal(&objects.delete.journal)
        );
        assert_eq!(got, c.expect, "{}", c.case);
    }
}

#[test]
fn an_erasure_journals_every_history_row_as_the_users_revision() {
    let history = [("r1".to_owned(), d(1)), ("r2".to_owned(), d(1))];
    assert_eq!(
        journal(&erased_revisions("alice", &history)),
        "revision(alice)[r1 r2]"
    );
    assert_eq!(journal(&erased_revisions("alice", &[])), "none");
}

#[test]
fn an_erasure_takes_the_users_images_leased_or_not_unless_in_flight() {
    struct Case {
        case: &'static str,
        /// The images of the user's history rows.
        theirs: &'static [u8],
        /// (digest, leased), once the user's history is gone.
        unreferenced: &'static [(u8, bool)],
        in_flight: Flight,
        expect: &'static str,
    }
    let cases = [
        Case {
            case: "the user's unreferenced images go, leased or not, sorted",
            theirs: &[3, 1],
            unreferenced: &[(3, true), (1, false)],
            in_flight: IDLE,
            expect: "[#1 #3] image[#1 #3]",
        },
        Case {
            case: "an image another user still refers to is not unreferenced: stays",
            theirs: &[1, 2],
            unreferenced: &[(1, false)],
            in_flight: IDLE,
            expect: "[#1] image[#1]",
        },
        Case {
            case: "an unreferenced image that was never the user's is a pass's business",
            theirs: &[1],
            unreferenced: &[(1, false), (9, false)],
            in_flight: IDLE,
            expect: "[#1] image[#1]",
        },
        Case {
            case: "an image another put in flight publishes stays",
            theirs: &[1, 2],
            unreferenced: &[(1, false), (2, false)],
            in_flight: Flight {
                images: &[2],
                ..IDLE
            },
            expect: "[#1] image[#1]",
        },
    ];
    for c in cases {
        let history: Vec<(String, Digest)> =
            c.theirs.iter().map(|n| (format!("r{n}"), d(*n))).collect();
        let doomed = erased_images(
            &history,
            &unreferenced(c.unreferenced),
            &c.in_flight.facts(),
        );
        let got = format!("[{}] {}", labels(&doomed.items), journal(&doomed.journal));
        assert_eq!(got, c.expect, "{}", c.case);
    }
}

#[test]
fn an_erasure_takes_the_chunks_only_its_images_named() {
    struct Case {
        case: &'static str,
        /// The chunks the erased images named.
        named: &'static [u8],
        live: &'static [u8],
        in_flight: Flight,
        expect: &'static str,
    }
    let cases = [
        Case {
            case: "named by no remaining image: go, sorted",
            named: &[3, 1, 2],
            live: &[],
            in_flight: IDLE,
            expect: "[#1 #2 #3] chunk[#1 #2 #3]",
        },
        Case {
            case: "named by a remaining image: stays",
            named: &[1, 2],
            live: &[2],
            in_flight: IDLE,
            expect: "[#1] chunk[#1]",
        },
        Case {
            case: "relied on by a put in flight: stays",
            named: &[1, 2],
            live: &[],
            in_flight: Flight {
                chunks: &[1],
                ..IDLE
            },
            expect: "[#2] chunk[#2]",
        },
    ];
    for c in cases {
        let dead = erased_chunks(
            &digest_set(c.named),
            &digest_set(c.live),
            &c.in_flight.facts(),
        );
        let got = format!("[{}] {}", labels(&dead.items), journal(&dead.journal));
        assert_eq!(got, c.expect, "{}", c.case);
    }
}

#[test]
fn an_erasure_deletes_the_objects_it_emptied_and_wipes_its_chunks_in_the_rest() {
    struct Case {
        case: &'static str,
        /// (object, offset, len) of each erased chunk; no object: the row held the bytes.
        places: &'static [(Option<&'static str>, u64, u32)],
        empty: &'static [&'static str],
        staged: &'static [&'static str],
        in_flight: Flight,
        expect: &'static str,
    }
    let cases = [
        Case {
            case: "an object left empty goes; one still holding named chunks has the ranges wiped",
            places: &[(Some("a"), 0, 10), (Some("b"), 5, 7), (Some("b"), 20, 3)],
            empty: &["a"],
            staged: &[],
            in_flight: IDLE,
            expect: "unregister=[a] delete=[a] pack[a] wipes={\"b\": [(5, 7), (20, 3)]} bytes=20",
        },
        Case {
            case: "an empty object that held none of the erased chunks is a pass's business",
            places: &[(Some("a"), 0, 10)],
            empty: &["a", "other"],
            staged: &[],
            in_flight: IDLE,
            expect: "unregister=[a] delete=[a] pack[a] wipes={} bytes=10",
        },
        Case {
            case: "an emptied object a put in flight names stays, and is wiped",
            places: &[(Some("a"), 0, 10)],
            empty: &["a"],
            staged: &[],
            in_flight: Flight {
                objects: &["a"],
                ..IDLE
            },
            expect: "unregister=[] delete=[] none wipes={\"a\": [(0, 10)]} bytes=10",
        },
        Case {
            case: "the user's orphans' objects go too, each once, and are not wiped",
            places: &[(Some("a"), 0, 10), (Some("o"), 0, 4)],
            empty: &["a"],
            staged: &["a", "o"],
            in_flight: IDLE,
            expect: "unregister=[a] delete=[a o] pack[a o] wipes={} bytes=14",
        },
        Case {
            case: "bytes kept in rows are counted and have no object to wipe",
            places: &[(None, 0, 8), (None, 0, 9)],
            empty: &[],
            staged: &[],
            in_flight: IDLE,
            expect: "unregister=[] delete=[] none wipes={} bytes=17",
        },
    ];
    for c in cases {
        let places: Vec<Place> = c
            .places
            .iter()
            .map(|(object, offset, len)| Place {
                len: *len,
                object: object.map(|o| (o.to_owned(), *offset)),
            })
            .collect();
        let objects = erased_objects(
            &places,
            &strings(c.empty),
            &strings(c.staged),
            &c.in_flight.facts(),
        );
        let got = format!(
            "unregister=[{}] delete=[{}] {} wipes={:?} bytes={}",
            objects.unregister.join(" "),
            objects.delete.items.join(" "),
            journal(&objects.delete.journal),
            objects.wipes,
            objects.bytes,
        );
        assert_eq!(got, c.expect, "{}", c.case);
    }
}
