//! Delta sync over HTTP end to end (issue 21): `POST /userdb/revisions/{rev}/plan`,
//! `PUT /userdb/delta` and `POST /userdb/delta` against the in-process hub. A delta push lands
//! exactly as a whole one would (the same validation and compare-and-swap), races a whole push
//! with one winner, refuses a reclaimed, unknown or another user's base alike, and refuses every
//! hostile delta without storing anything. Every answer is also checked against the OpenAPI
//! document (`Http::send`).

use snug_delta::{Delta, Layout, Limits, Manifest, Run, Source, Sparse, page_ids};
use snug_e2e::{
    Answer, Http, Hub, OCTET, Options, Payload, assert_error, assert_stale_revision, bearer,
    etag_revision, get_userdb, put_userdb, userdb_with_filler,
};

const PAGE: u32 = 4096;

fn limits() -> Limits {
    Limits {
        max_length: 64 << 20,
    }
}

/// `image` with `sql` applied, in the form the hub stores.
fn edited(image: &[u8], sql: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("edited.snug");
    std::fs::write(&path, image).expect("write");
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.execute_batch(sql).expect("edit");
    drop(conn);
    snug_e2e::stored_form(&std::fs::read(&path).expect("read"))
}

fn first_image() -> Vec<u8> {
    userdb_with_filler(2 << 20).0
}

fn second_image(first: &[u8]) -> Vec<u8> {
    edited(
        first,
        "INSERT INTO snug_settings (key, value) VALUES ('delta:test', '\"one row\"')",
    )
}

async fn plan(http: &Http, token: &str, base: &str, manifest: Vec<u8>) -> Answer {
    http.send(
        "POST",
        &format!("/userdb/revisions/{base}/plan"),
        &[("authorization", &bearer(token)), OCTET],
        Payload::Whole(manifest),
    )
    .await
}

async fn put_delta(http: &Http, token: &str, base: &str, delta: Vec<u8>) -> Answer {
    http.send(
        "PUT",
        "/userdb/delta",
        &[
            ("authorization", &bearer(token)),
            OCTET,
            ("if-match", &format!("\"{base}\"")),
        ],
        Payload::Whole(delta),
    )
    .await
}

/// Pushes `delta` on `base`, which must land (204) as `image`, current byte for byte under the
/// revision the push answered; that revision.
async fn lands(http: &Http, token: &str, base: &str, delta: Vec<u8>, image: &[u8]) -> String {
    let landed = put_delta(http, token, base, delta).await;
    assert_eq!(
        landed.status,
        204,
        "{:?}",
        String::from_utf8_lossy(&landed.body)
    );
    let revision = etag_revision(&landed);
    let got = get_userdb(http, token).await;
    assert_eq!(etag_revision(&got), revision);
    assert_eq!(got.body, image, "the image landed byte for byte");
    revision
}

/// A pull's answer, which must be revision `revision`'s delta rebuilding `image` from `from`;
/// that delta.
fn rebuilds(pulled: &Answer, revision: &str, from: &[u8], image: &[u8]) -> Delta {
    assert_eq!(
        pulled.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&pulled.body)
    );
    assert_eq!(etag_revision(pulled), revision);
    let delta = Delta::parse(&pulled.body, &limits(), from.len() as u64).expect("parse");
    assert_eq!(delta.assemble(from).expect("assemble"), image);
    delta
}

async fn pull(http: &Http, token: &str, manifest: Vec<u8>) -> Answer {
    http.send(
        "POST",
        "/userdb/delta",
        &[("authorization", &bearer(token)), OCTET],
        Payload::Whole(manifest),
    )
    .await
}

/// The delta that turns `base` into `new`, as a client builds it from the hub's plan.
async fn delta_for(http: &Http, token: &str, base_revision: &str, new: &[u8]) -> Delta {
    let manifest = Manifest::of(new, PAGE).expect("manifest").encode();
    let planned = plan(http, token, base_revision, manifest).await;
    assert_eq!(
        planned.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&planned.body)
    );
    let layout = Layout::parse_plan(&planned.body, &limits()).expect("the plan parses");
    Delta::build(layout, new, None)
}

async fn started(options: Options) -> (Hub, Http, String) {
    let hub = Hub::start(options).await;
    let http = Http::new(hub.http);
    let token = hub.add_user("alice");
    (hub, http, token)
}

#[tokio::test]
async fn a_delta_push_and_pull_move_only_the_changed_pages() {
    let (_hub, http, token) = started(Options::default()).await;
    let first = first_image();
    let r1 = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), first.clone()).await);
    let second = second_image(&first);

    let delta = delta_for(&http, &token, &r1, &second).await;
    let pages = second.len() / PAGE as usize;
    assert!(
        delta.layout.literal_count() * 20 < pages as u64,
        "{} of {pages} pages sent",
        delta.layout.literal_count()
    );
    let wire = delta.encode();
    assert!(wire.len() * 10 < second.len(), "{} bytes", wire.len());
    let r2 = lands(&http, &token, &r1, wire, &second).await;

    // Pull: a device holding the first image rebuilds the second from a few pages.
    let manifest = Manifest::of(&first, PAGE).expect("manifest").encode();
    let pulled = pull(&http, &token, manifest).await;
    rebuilds(&pulled, &r2, &first, &second);
    assert!(
        pulled.body.len() * 10 < second.len(),
        "{} bytes",
        pulled.body.len()
    );

    // A device whose file is r1 names it and sends no manifest at all.
    let by_base = |query: String| {
        let (http, token) = (&http, &token);
        async move {
            http.send(
                "POST",
                &format!("/userdb/delta{query}"),
                &[("authorization", &bearer(token)), OCTET],
                Payload::Whole(Vec::new()),
            )
            .await
        }
    };
    let pulled = by_base(format!("?base={r1}")).await;
    rebuilds(&pulled, &r2, &first, &second);
    assert!(
        pulled.body.len() * 20 < second.len(),
        "{} bytes",
        pulled.body.len()
    );
    assert_error(
        &by_base("?base=r9-0123456789abcdef".to_owned()).await,
        409,
        "DELTA_BASE_GONE",
    );
    assert_error(&by_base("?revision=1".to_owned()).await, 400, "BAD_REQUEST");
}

/// A row inserted early (into a table before the filler's) moves every later page (the export
/// VACUUMs) and so rewrites every page that names a moved one, the filler's overflow chains
/// first. Those pages travel as patches, a
/// few bytes each, both ways: in a push built from manifests with shapes, and in a pull that
/// says `Snug-Delta-Patches: 1` (or `2`, compressed pages too); a pull that does not say it gets
/// whole pages.
#[tokio::test]
async fn moved_pages_travel_as_patches_both_ways() {
    let (_hub, http, token) = started(Options::default()).await;
    let first = first_image();
    let r1 = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), first.clone()).await);
    let second = edited(
        &first,
        &format!(
            "INSERT INTO snug_profile (key, value) VALUES ('delta:early', '\"{}\"'); VACUUM;",
            "x".repeat(6_000)
        ),
    );
    assert_ne!(first.len(), second.len(), "the row adds pages");

    let theirs = Manifest::with_shapes(&first, PAGE).expect("manifest");
    let ours = Manifest::with_shapes(&second, PAGE).expect("manifest");
    let whole_pages = Delta::build(
        snug_delta::plan(&ours, &Source::ids(&theirs.ids)),
        &second,
        None,
    )
    .encode();
    let delta = Delta::build(snug_delta::plan(&ours, &theirs.source()), &second, None);
    assert!(
        delta.layout.patched_count() > 100,
        "{:?}",
        delta.layout.runs
    );
    let wire = delta.encode();
    assert!(
        wire.len() * 10 < whole_pages.len(),
        "patched {} bytes, whole pages {}",
        wire.len(),
        whole_pages.len()
    );
    let r2 = lands(&http, &token, &r1, wire, &second).await;

    let pull_from_r1 = |patches: Option<&'static str>| {
        let (http, token, r1) = (&http, &token, &r1);
        async move {
            let auth = bearer(token);
            let mut headers = vec![("authorization", auth.as_str()), OCTET];
            if let Some(value) = patches {
                headers.push(("snug-delta-patches", value));
            }
            http.send(
                "POST",
                &format!("/userdb/delta?base={r1}"),
                &headers,
                Payload::Whole(Vec::new()),
            )
            .await
        }
    };
    let mut sizes = Vec::new();
    for patches in [Some("1"), Some("0"), None, Some("2")] {
        let pulled = pull_from_r1(patches).await;
        let delta = rebuilds(&pulled, &r2, &first, &second);
        let asked = matches!(patches, Some("1" | "2"));
        assert_eq!(delta.layout.patched_count() > 0, asked, "{patches:?}");
        // Compressed pages only for a client that says it rebuilds them.
        assert!(patches == Some("2") || delta.layout.compressed_count() == 0);
        sizes.push(pulled.body.len());
    }
    assert!(sizes[0] * 10 < sizes[1], "pulled {sizes:?} bytes");
    assert!(sizes[3] <= sizes[0], "pulled {sizes:?} bytes");
    for bad in ["yes", "3"] {
        assert_error(&pull_from_r1(Some(bad)).await, 400, "BAD_REQUEST");
    }
}

#[tokio::test]
async fn a_delta_push_racing_a_whole_push_one_wins_the_other_gets_412_with_the_winners_etag() {
    let (_hub, http, token) = started(Options::default()).await;
    let first = first_image();
    let r1 = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), first.clone()).await);
    let by_delta = second_image(&first);
    let whole = edited(
        &first,
        "INSERT INTO snug_settings (key, value) VALUES ('whole:test', '\"another row\"')",
    );
    let delta = delta_for(&http, &token, &r1, &by_delta).await.encode();
    let condition = format!("\"{r1}\"");
    let (a, b) = tokio::join!(
        put_delta(&http, &token, &r1, delta),
        put_userdb(&http, &token, ("if-match", &condition), whole.clone()),
    );
    let (winner, loser, landed) = match (a.status, b.status) {
        (204, 412) => (a, b, by_delta),
        (412, 204) => (b, a, whole),
        other => panic!("one must win and one lose: {other:?}"),
    };
    let current = etag_revision(&winner);
    assert_error(&loser, 412, loser.code().as_str());
    assert_stale_revision(&loser, &current);
    assert_eq!(get_userdb(&http, &token).await.body, landed);
}

#[tokio::test]
async fn a_reclaimed_unknown_or_foreign_base_is_delta_base_gone_and_the_whole_file_still_lands() {
    let (hub, http, token) = started(Options {
        keep_revisions: Some(1),
        ..Options::default()
    })
    .await;
    let bob = hub.add_user("bob");
    let first = first_image();
    let r1 = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), first.clone()).await);
    let second = second_image(&first);
    let delta = delta_for(&http, &token, &r1, &second).await.encode();
    let bobs = etag_revision(&put_userdb(&http, &bob, ("if-none-match", "*"), first.clone()).await);
    let r2 = etag_revision(
        &put_userdb(
            &http,
            &token,
            ("if-match", &format!("\"{r1}\"")),
            second.clone(),
        )
        .await,
    );
    use snug_revstore::RevStore as _;
    assert!(hub.store().reclaim().await.expect("reclaim").revisions >= 1);

    let manifest = Manifest::of(&second, PAGE).expect("manifest").encode();
    let mut messages = Vec::new();
    for base in [
        r1.as_str(),
        bobs.as_str(),
        "r9-0123456789abcdef",
        "not-a-revision",
    ] {
        let planned = plan(&http, &token, base, manifest.clone()).await;
        assert_error(&planned, 409, "DELTA_BASE_GONE");
        messages.push(planned.json()["message"].clone());
        let put = put_delta(&http, &token, base, delta.clone()).await;
        assert_error(&put, 409, "DELTA_BASE_GONE");
        assert_eq!(put.json()["message"], planned_message(&messages));
    }
    assert!(messages.windows(2).all(|w| w[0] == w[1]), "{messages:?}");
    // The client's answer to DELTA_BASE_GONE: the whole file, which lands as ever.
    let third = edited(
        &second,
        "DELETE FROM snug_settings WHERE key = 'delta:test'",
    );
    let landed = put_userdb(&http, &token, ("if-match", &format!("\"{r2}\"")), third).await;
    assert_eq!(landed.status, 204);
}

fn planned_message(messages: &[serde_json::Value]) -> serde_json::Value {
    messages.last().cloned().unwrap_or_default()
}

#[tokio::test]
async fn hostile_deltas_are_refused_with_their_own_codes_and_store_nothing() {
    let (_hub, http, token) = started(Options::default()).await;
    let first = first_image();
    let r1 = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), first.clone()).await);
    let second = second_image(&first);
    let good = delta_for(&http, &token, &r1, &second).await;

    let mut lying_page = good.clone();
    let at = lying_page.literals.len() - 1;
    lying_page.literals[at] ^= 1;
    let mut lying_digest = good.clone();
    lying_digest.layout.digest[0] ^= 1;
    let mut duplicate = good.clone();
    duplicate.layout.runs.insert(
        1,
        Run::Copy {
            to: 0,
            from: 0,
            count: 1,
        },
    );
    let mut out_of_range = good.clone();
    out_of_range.layout.runs[0] = Run::Copy {
        to: 0,
        from: u32::MAX - 1,
        count: 1,
    };
    let mut over_quota = good.clone();
    over_quota.layout.geometry.length = (64 << 20) + 1;
    // A delta that assembles to something that is not a user database meets PUT /userdb's
    // checks, exactly as the whole file would.
    let not_sqlite = {
        let image = vec![0x5a; PAGE as usize];
        let manifest = Manifest::of(&image, PAGE).expect("manifest");
        Delta::build(
            snug_delta::plan(&manifest, &snug_delta::Source::ids(&page_ids(&first, PAGE))),
            &image,
            None,
        )
    };
    let cases = [
        (lying_page.encode(), 400, "DELTA_PAGE_MISMATCH"),
        (lying_digest.encode(), 400, "DELTA_DIGEST_MISMATCH"),
        (duplicate.encode(), 400, "DELTA_INVALID"),
        (out_of_range.encode(), 400, "DELTA_INVALID"),
        (over_quota.encode(), 413, "USERDB_TOO_LARGE"),
        (b"SDD1 not a delta".to_vec(), 400, "DELTA_INVALID"),
        (not_sqlite.encode(), 400, "NOT_SQLITE"),
    ];
    for (body, status, code) in cases {
        let refused = put_delta(&http, &token, &r1, body).await;
        assert_error(&refused, status, code);
    }
    // A manifest with one id too many; a body larger than any manifest within the quota.
    let mut long = Manifest::of(&second, PAGE).expect("manifest").encode();
    long.extend_from_slice(&[0; 8]);
    assert_error(&plan(&http, &token, &r1, long).await, 400, "DELTA_INVALID");
    let huge = vec![
        0;
        snug_delta::Limits {
            max_length: 64 << 20
        }
        .max_manifest_len() as usize
            + 1
    ];
    assert_error(
        &plan(&http, &token, &r1, huge).await,
        413,
        "USERDB_TOO_LARGE",
    );
    // No base: the first write sends the whole file.
    let bare = http
        .send(
            "PUT",
            "/userdb/delta",
            &[("authorization", &bearer(&token)), OCTET],
            Payload::Whole(good.encode()),
        )
        .await;
    assert_error(&bare, 428, "PRECONDITION_REQUIRED");
    let untyped = http
        .send(
            "PUT",
            "/userdb/delta",
            &[
                ("authorization", &bearer(&token)),
                ("if-match", &format!("\"{r1}\"")),
            ],
            Payload::Whole(good.encode()),
        )
        .await;
    assert_error(&untyped, 415, "UNSUPPORTED_MEDIA_TYPE");
    let anonymous = http
        .send(
            "POST",
            "/userdb/delta",
            &[OCTET],
            Payload::Whole(Vec::new()),
        )
        .await;
    assert_error(&anonymous, 401, "UNAUTHENTICATED");
    // Nothing was stored.
    let got = get_userdb(&http, &token).await;
    assert_eq!((etag_revision(&got), got.body.to_vec()), (r1, first));
}

#[tokio::test]
async fn a_pull_before_the_first_push_is_404() {
    let (_hub, http, token) = started(Options::default()).await;
    let manifest = Manifest::of(&first_image(), PAGE)
        .expect("manifest")
        .encode();
    assert_error(&pull(&http, &token, manifest).await, 404, "NOT_FOUND");
}

/// Delta bodies travel zstd-compressed both ways (issue 38): a push sent
/// `Content-Encoding: zstd` lands as the same delta sent as it is would, a pull that accepts
/// `zstd` gets its delta compressed, and every delta answer says the route takes `zstd`
/// (RFC 7694). A coding a route does not take is 415 naming the ones it does, a body that does
/// not decode is `BODY_ENCODING_INVALID`, and neither stores anything.
#[tokio::test]
async fn delta_bodies_travel_zstd_both_ways_and_nothing_else_is_taken_coded() {
    let (_hub, http, token) = started(Options::default()).await;
    let first = first_image();
    let r1 = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), first.clone()).await);
    let second = second_image(&first);
    let wire = delta_for(&http, &token, &r1, &second).await.encode();
    let coded = zstd::bulk::compress(&wire, 3).expect("compress");
    let send_coded = |method: &'static str, path: &'static str, coding: &'static str, body| {
        let (http, token) = (&http, &token);
        let if_match = format!("\"{r1}\"");
        async move {
            http.send(
                method,
                path,
                &[
                    ("authorization", &bearer(token)),
                    OCTET,
                    ("if-match", &if_match),
                    ("content-encoding", coding),
                ],
                Payload::Streamed(body, 1000),
            )
            .await
        }
    };
    let unchanged = |revision: String| {
        let (http, token) = (&http, &token);
        async move {
            assert_eq!(etag_revision(&get_userdb(http, token).await), revision);
        }
    };

    // Refused before anything is stored: another coding, a coded whole image, a body that does
    // not decode (cut off; not zstd at all).
    let refused = send_coded("PUT", "/userdb/delta", "gzip", coded.clone()).await;
    assert_error(&refused, 415, "UNSUPPORTED_CONTENT_ENCODING");
    assert_eq!(refused.header("accept-encoding"), "zstd");
    let whole = zstd::bulk::compress(&second, 3).expect("compress");
    let refused = send_coded("PUT", "/userdb", "zstd", whole).await;
    assert_error(&refused, 415, "UNSUPPORTED_CONTENT_ENCODING");
    assert_eq!(refused.header("accept-encoding"), "identity");
    let cut = coded[..coded.len() - 3].to_vec();
    assert_error(
        &send_coded("PUT", "/userdb/delta", "zstd", cut).await,
        400,
        "BODY_ENCODING_INVALID",
    );
    assert_error(
        &send_coded("PUT", "/userdb/delta", "zstd", wire.clone()).await,
        400,
        "BODY_ENCODING_INVALID",
    );
    // 64 MiB of zeros in a few KiB: decoded a chunk at a time, and no delta.
    let bomb = zstd::bulk::compress(&vec![0u8; 64 << 20], 19).expect("bomb");
    let refused = send_coded("PUT", "/userdb/delta", "zstd", bomb).await;
    assert_eq!(refused.status, 400, "{:?}", refused.body);
    unchanged(r1.clone()).await;

    // The coded push lands as the delta would.
    let landed = send_coded("PUT", "/userdb/delta", "zstd", coded.clone()).await;
    assert_eq!(landed.status, 204, "{:?}", landed.body);
    assert_eq!(landed.header("accept-encoding"), "zstd");
    let r2 = etag_revision(&landed);
    let got = get_userdb(&http, &token).await;
    assert_eq!(etag_revision(&got), r2);
    assert_eq!(got.body, second, "the image landed byte for byte");

    // A pull that accepts zstd gets it, with no length (it streams); one that does not, as is.
    let pull_from_r1 = |accept: Option<&'static str>| {
        let (http, token) = (&http, &token);
        let path = format!("/userdb/delta?base={r1}");
        async move {
            let authorization = bearer(token);
            let mut headers = vec![("authorization", authorization.as_str()), OCTET];
            headers.extend(accept.map(|a| ("accept-encoding", a)));
            http.send("POST", &path, &headers, Payload::Empty).await
        }
    };
    let pulled = pull_from_r1(Some("gzip, zstd")).await;
    assert_eq!(pulled.status, 200, "{:?}", pulled.body);
    assert_eq!(pulled.header("content-encoding"), "zstd");
    assert_eq!(pulled.header("accept-encoding"), "zstd");
    assert!(pulled.headers.get("content-length").is_none());
    let decoded = zstd::decode_all(&pulled.body[..]).expect("a zstd answer");
    let plain = pull_from_r1(None).await;
    assert!(plain.headers.get("content-encoding").is_none());
    assert_eq!(decoded, plain.body, "the same delta, coded");
    assert!(
        pulled.body.len() < plain.body.len(),
        "{} {}",
        pulled.body.len(),
        plain.body.len()
    );
    let unaccepted = pull_from_r1(Some("zstd;q=0, gzip")).await;
    assert!(unaccepted.headers.get("content-encoding").is_none());
    let decoded = Answer {
        body: decoded.into(),
        ..pulled
    };
    rebuilds(&decoded, &r2, &first, &second);
}

/// A client that knows nothing of the hub's pages learns them for kilobytes (issue 38): a
/// summary sent to a revision's plan route is answered with that revision's manifest sparse
/// against it, which expands to the revision's whole manifest; a pull then names the revision
/// and sends its file sparse against it. A sparse manifest whose hashes are not the revision's
/// is refused, not guessed at.
#[tokio::test]
async fn a_summary_learns_a_revisions_pages_for_kilobytes_both_ways() {
    let (_hub, http, token) = started(Options::default()).await;
    // 8 MiB: 32 groups of 64 pages, of which the edit touches two or three.
    let first = userdb_with_filler(8 << 20).0;
    let r1 = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), first.clone()).await);
    let second = second_image(&first);
    let shaped = |image: &[u8]| Manifest::with_shapes(image, PAGE).expect("manifest");
    let (mine, theirs) = (shaped(&second), shaped(&first));
    let pages = u64::from(mine.geometry.pages());

    // Push: the client holds `second` and learns r1's pages from a summary of its own.
    let summary = Sparse::summary(&mine, 64).encode();
    assert!(summary.len() * 200 < second.len(), "{}", summary.len());
    let answered = plan(&http, &token, &r1, summary).await;
    assert_eq!(answered.status, 200, "{:?}", answered.body);
    let sparse = Sparse::parse(&answered.body, &limits()).expect("a sparse manifest");
    assert!(
        sparse.pages_in_full() * 8 < pages,
        "{} of {pages}",
        sparse.pages_in_full()
    );
    assert!(answered.body.len() * 5 < theirs.encode().len());
    assert_eq!(sparse.expand(&mine).expect("expands"), theirs);
    let layout = snug_delta::plan(&mine, &theirs.source());
    let r2 = lands(
        &http,
        &token,
        &r1,
        Delta::build(layout, &second, None).encode(),
        &second,
    )
    .await;

    // Pull: a device holding `first` as no revision it knows learns r2's pages, then names r2
    // and sends its file sparse against them.
    let answered = plan(&http, &token, &r2, Sparse::summary(&theirs, 64).encode()).await;
    let learnt = Sparse::parse(&answered.body, &limits())
        .expect("a sparse manifest")
        .expand(&theirs)
        .expect("expands");
    assert_eq!(learnt, mine);
    let sparse = Sparse::against(&theirs, &Sparse::summary(&learnt, 64)).encode();
    assert!(sparse.len() * 5 < theirs.encode().len(), "{}", sparse.len());
    let pull_from_r2 = |body: Vec<u8>| {
        let (http, token) = (&http, &token);
        let path = format!("/userdb/delta?base={r2}");
        async move {
            http.send(
                "POST",
                &path,
                &[
                    ("authorization", &bearer(token)),
                    OCTET,
                    ("snug-delta-patches", "1"),
                ],
                Payload::Whole(body),
            )
            .await
        }
    };
    let pulled = pull_from_r2(sparse).await;
    rebuilds(&pulled, &r2, &first, &second);
    assert!(
        pulled.body.len() * 20 < second.len(),
        "{}",
        pulled.body.len()
    );

    // Hashes that are not r2's (the summary of another image, against r2): refused.
    let other = shaped(&edited(
        &first,
        "INSERT INTO snug_settings (key, value) VALUES ('x', '1')",
    ));
    let lying = Sparse::summary(&other, 64).encode();
    assert_error(&pull_from_r2(lying).await, 400, "DELTA_INVALID");
    // With a base, a plain manifest is not the file: refused.
    assert_error(&pull_from_r2(theirs.encode()).await, 400, "DELTA_INVALID");
    // A summary against a base that is gone, like any plan.
    assert_error(
        &plan(
            &http,
            &token,
            "r9-0123456789abcdef",
            Sparse::summary(&mine, 64).encode(),
        )
        .await,
        409,
        "DELTA_BASE_GONE",
    );
}

/// A coded delta is admitted for what it holds (issue 36's budget, issue 38's coding): the size
/// its zstd frame declares is told to the sync service as a plain body's `Content-Length` is,
/// so while another user's stalled upload holds part of a small upload budget it lands, where
/// one whose frame declares no size, admitted for the largest delta the quota allows (the whole
/// budget), waits and is refused. Nothing is stored by the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coded_delta_is_admitted_for_the_size_its_frame_declares() {
    use tokio::io::AsyncWriteExt as _;

    let (hub, http, token) = started(Options {
        upload_budget: Some(snug_rpc::budget::UploadBudget::new(
            24 << 20,
            std::time::Duration::from_millis(300),
        )),
        ..Options::default()
    })
    .await;
    let first = first_image();
    let r1 = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), first.clone()).await);
    let second = second_image(&first);
    let wire = delta_for(&http, &token, &r1, &second).await.encode();
    assert!(limits().max_delta_len() > 24 << 20);
    let send = |body: Vec<u8>| {
        let (http, token) = (&http, &token);
        let if_match = format!("\"{r1}\"");
        async move {
            http.send(
                "PUT",
                "/userdb/delta",
                &[
                    ("authorization", &bearer(token)),
                    OCTET,
                    ("if-match", &if_match),
                    ("content-encoding", "zstd"),
                ],
                Payload::Whole(body),
            )
            .await
        }
    };
    // Bob's upload declares 4 MiB, sends 64 KiB and stalls, holding its share.
    let bob = hub.add_user("bob");
    let mut stalled = tokio::net::TcpStream::connect(hub.http)
        .await
        .expect("connect");
    let head = format!(
        "PUT /userdb HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {bob}\r\n\
         content-type: application/octet-stream\r\nif-none-match: *\r\n\
         content-length: {}\r\n\r\n",
        hub.http,
        4 << 20
    );
    stalled.write_all(head.as_bytes()).await.expect("head");
    stalled
        .write_all(&first[..64 << 10])
        .await
        .expect("some bytes");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let mut unsized_frame = zstd::stream::Encoder::new(Vec::new(), 3).expect("encoder");
    unsized_frame.include_contentsize(false).expect("no size");
    std::io::Write::write_all(&mut unsized_frame, &wire).expect("write");
    let refused = send(unsized_frame.finish().expect("finish")).await;
    assert_eq!(refused.status, 503, "{:?}", refused.body);
    assert_eq!(etag_revision(&get_userdb(&http, &token).await), r1);
    let landed = send(zstd::bulk::compress(&wire, 3).expect("compress")).await;
    assert_eq!(landed.status, 204, "{:?}", landed.body);
    assert_eq!(get_userdb(&http, &token).await.body, second);
    drop(stalled);
}
