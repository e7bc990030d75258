//! The HTTP gateway end to end, in one process (issue 6): every status of `/userdb`, header by
//! header; racing writers; cross-user isolation; sessions, CSRF and CORS; services that die or
//! hang; and the OpenAPI document against the router. Every answer is also checked against the
//! statuses the OpenAPI document lists for its operation (`Http::send`).

use std::time::{Duration, Instant};

use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use snug_e2e::{
    Answer, Http, Hub, OCTET, Options, Payload, assert_error, assert_stale_revision, bearer,
    etag_revision, get_userdb, push_unvalidated, put_userdb, user_id, userdb_vector,
    userdb_with_filler,
};
use snug_gateway::config::AuthMode;

/// A plain, secrets-free user database (the reference's default export of its sample), as
/// the hub stores it (free space zeroed), so that it is stored and served as sent.
fn image() -> Vec<u8> {
    snug_e2e::stored_form(&userdb_vector("sample-v6.export.snug"))
}

/// A different plain, secrets-free user database.
fn other_image() -> Vec<u8> {
    snug_e2e::stored_form(&userdb_vector("fresh-v6.export.snug"))
}

async fn hub() -> (Hub, Http) {
    let hub = Hub::start(Options::default()).await;
    let http = Http::new(hub.http);
    (hub, http)
}

#[tokio::test]
async fn get_before_the_first_push_is_404_json() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let answer = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &bearer(&token))],
            Payload::Empty,
        )
        .await;
    assert_error(&answer, 404, "NOT_FOUND");
    assert_eq!(answer.json()["retryable"], false);
    let head = http
        .send(
            "HEAD",
            "/userdb",
            &[("authorization", &bearer(&token))],
            Payload::Empty,
        )
        .await;
    assert_eq!(head.status, 404);
}

#[tokio::test]
async fn first_write_then_get_returns_the_exact_bytes_and_every_header() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let auth = bearer(&token);

    let bare = http
        .send(
            "PUT",
            "/userdb",
            &[("authorization", &auth), OCTET],
            Payload::Whole(image()),
        )
        .await;
    assert_error(&bare, 428, "PRECONDITION_REQUIRED");

    let created = put_userdb(&http, &token, ("if-none-match", "*"), image()).await;
    assert_eq!(created.status, 204);
    assert!(created.body.is_empty());
    let revision = etag_revision(&created);

    let got = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.body.as_ref(),
        image().as_slice(),
        "the bytes are never rewritten"
    );
    assert_eq!(got.header("etag"), format!("\"{revision}\""));
    assert_eq!(got.header("content-type"), "application/octet-stream");
    assert_eq!(got.header("x-content-type-options"), "nosniff");
    assert_eq!(got.header("cache-control"), "no-store");
    assert_eq!(got.header("content-length"), image().len().to_string());
    let digest = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(image()));
    assert_eq!(got.header("repr-digest"), format!("sha-256=:{digest}:"));

    let head = http
        .send(
            "HEAD",
            "/userdb",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    for name in [
        "etag",
        "repr-digest",
        "content-type",
        "x-content-type-options",
        "cache-control",
        "content-length",
    ] {
        assert_eq!(head.header(name), got.header(name), "{name}");
    }
}

#[tokio::test]
async fn a_kept_image_is_sent_from_sealed_memory_byte_for_byte() {
    // `snug-hub serve`'s layout: the gateway and the sync store in one process, so the store
    // seals the small image it keeps and the gateway sends it with sendfile.
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let created = put_userdb(&http, &token, ("if-none-match", "*"), image()).await;
    assert_eq!(created.status, 204);
    let zero_copy = || snug_rpc::metrics::global().http_zero_copy_bytes.get();
    // The first download reads the image from its pack and keeps it; later ones are sent from
    // what was kept.
    let mut sealed_sent = 0;
    for _ in 0..3 {
        let before = zero_copy();
        let got = get_userdb(&http, &token).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.body.as_ref(), image().as_slice());
        assert_eq!(got.header("content-length"), image().len().to_string());
        sealed_sent += zero_copy() - before;
    }
    // Other tests in this process may send sealed bytes meanwhile, never fewer.
    assert!(
        sealed_sent >= 2 * image().len() as u64,
        "{sealed_sent} bytes sent from sealed memory"
    );
}

#[tokio::test]
async fn a_large_image_is_kept_sealed_after_one_download_and_sent_byte_for_byte() {
    // Over the 256 KiB kept for every image, and over two 2 MiB read pieces: the first download
    // reads it from the packs and gathers it; once sealed (within the default budget of
    // `snug-hub serve`), a download goes out through sendfile whole.
    let (large, _) = userdb_with_filler(5 * 1024 * 1024);
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let created = put_userdb(&http, &token, ("if-none-match", "*"), large.clone()).await;
    assert_eq!(created.status, 204);
    let zero_copy = || snug_rpc::metrics::global().http_zero_copy_bytes.get();
    let mut whole_from_sealed = false;
    // The gathering finishes just after the first download's last piece: a few tries, bounded.
    for _ in 0..50 {
        let before = zero_copy();
        let got = get_userdb(&http, &token).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.header("content-length"), large.len().to_string());
        assert!(got.body.as_ref() == large.as_slice(), "the bytes put");
        if zero_copy() - before >= large.len() as u64 {
            whole_from_sealed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(whole_from_sealed, "no download was sent from sealed memory");
}

#[tokio::test]
async fn conditional_get_answers_304_for_the_current_revision_in_any_spelling() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let auth = bearer(&token);
    let revision = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), image()).await);
    for spelling in [
        format!("\"{revision}\""),
        revision.clone(),
        format!("W/\"{revision}\""),
        format!("\"x\", \"{revision}\""),
        "*".to_owned(),
    ] {
        let answer = http
            .send(
                "GET",
                "/userdb",
                &[("authorization", &auth), ("if-none-match", &spelling)],
                Payload::Empty,
            )
            .await;
        assert_eq!(answer.status, 304, "{spelling}");
        assert!(answer.body.is_empty());
        assert_eq!(answer.header("etag"), format!("\"{revision}\""));
    }
    let stale = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &auth), ("if-none-match", "\"r0-old\"")],
            Payload::Empty,
        )
        .await;
    assert_eq!(stale.status, 200);
    assert_eq!(stale.body.as_ref(), image().as_slice());
}

#[tokio::test]
async fn compare_and_swap_statuses() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");

    // If-Match before any image: 412 without ETag or revision.
    let early = put_userdb(
        &http,
        &token,
        ("if-match", "\"r1-0000000000000000\""),
        image(),
    )
    .await;
    assert_error(&early, 412, "REVISION_MISMATCH");
    assert_eq!(early.header("etag"), "");
    assert!(early.json().get("revision").is_none());

    let first = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), image()).await);

    // If-None-Match: * once an image exists: 412 with the current revision.
    let again = put_userdb(&http, &token, ("if-none-match", "*"), other_image()).await;
    assert_error(&again, 412, "REVISION_MISMATCH");
    assert_eq!(again.header("etag"), format!("\"{first}\""));
    assert_eq!(again.json()["revision"], first);
    assert_eq!(again.json()["retryable"], true);
    // …in its own words: no revision was named, an image exists, and which one to name.
    let message = again.json()["message"].as_str().unwrap_or("").to_owned();
    assert!(
        message.contains("already exists") && message.contains(&format!("If-Match: \"{first}\"")),
        "{message}"
    );

    // Matching If-Match, unquoted (the reference's clients send it bare): 204 and a new revision.
    let second_answer = put_userdb(&http, &token, ("if-match", &first), other_image()).await;
    assert_eq!(second_answer.status, 204);
    let second = etag_revision(&second_answer);
    assert_ne!(second, first);

    // The old revision is now stale: 412, the current one in ETag and body.
    let stale = put_userdb(
        &http,
        &token,
        ("if-match", &format!("\"{first}\"")),
        image(),
    )
    .await;
    assert_eq!(stale.status, 412);
    // Refused before its body was read: the connection ends, and the answer says so, so a
    // client does not reuse a connection the server has closed.
    assert_eq!(stale.header("connection"), "close");
    assert_eq!(
        second_answer.header("connection"),
        "",
        "an accepted upload keeps the connection"
    );
    assert_stale_revision(&stale, &second);

    // `If-Match: *` means "whatever is current" (RFC 9110) and a weak tag never matches.
    let star = put_userdb(&http, &token, ("if-match", "*"), image()).await;
    assert_eq!(star.status, 204);
    let third = etag_revision(&star);
    let weak = put_userdb(
        &http,
        &token,
        ("if-match", &format!("W/\"{third}\"")),
        image(),
    )
    .await;
    assert_eq!(weak.status, 412);
    assert_eq!(weak.header("etag"), format!("\"{third}\""));

    // The failed writes changed nothing.
    let got = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &bearer(&token))],
            Payload::Empty,
        )
        .await;
    assert_eq!(got.header("etag"), format!("\"{third}\""));
    assert_eq!(got.body.as_ref(), image().as_slice());
}

#[tokio::test]
async fn refused_bodies_each_have_their_own_code_and_store_nothing() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let auth = bearer(&token);

    let text = http
        .send(
            "PUT",
            "/userdb",
            &[
                ("authorization", &auth),
                ("content-type", "text/plain"),
                ("if-none-match", "*"),
            ],
            Payload::Whole(image()),
        )
        .await;
    assert_error(&text, 415, "UNSUPPORTED_MEDIA_TYPE");
    let none = http
        .send(
            "PUT",
            "/userdb",
            &[("authorization", &auth), ("if-none-match", "*")],
            Payload::Whole(image()),
        )
        .await;
    assert_error(&none, 415, "UNSUPPORTED_MEDIA_TYPE");

    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            b"definitely not a database, just some text".to_vec(),
            "NOT_SQLITE",
        ),
        (Vec::new(), "NOT_SQLITE"),
        (
            std::fs::read(
                snug_e2e::vectors_dir().join("containers/c03-deterministic-1000iter.snug"),
            )
            .expect("vector"),
            "CONTAINER_NOT_ACCEPTED",
        ),
        (userdb_vector("sample-v6.user.snug"), "SECRETS_PRESENT"),
        (userdb_vector("future-v7.user.sqlite"), "SCHEMA_TOO_NEW"),
        (
            userdb_vector("sample-v6.app-a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c.runtime.sqlite"),
            "NOT_A_USER_DATABASE",
        ),
    ];
    for (body, code) in cases {
        let answer = put_userdb(&http, &token, ("if-none-match", "*"), body).await;
        assert_error(&answer, 400, code);
    }
    // A truncated SQLite file: the right magic, damaged content.
    let mut truncated = image();
    truncated.truncate(4096 + 100);
    let answer = put_userdb(&http, &token, ("if-none-match", "*"), truncated).await;
    assert_eq!(answer.status, 400, "{}", answer.code());

    let missing = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_eq!(missing.status, 404, "no refused image was stored");
    // Leading bytes are checked before the precondition, as the reference does.
    let bare_text = http
        .send(
            "PUT",
            "/userdb",
            &[("authorization", &auth), OCTET],
            Payload::Whole(b"hello world, not sqlite".to_vec()),
        )
        .await;
    assert_error(&bare_text, 400, "NOT_SQLITE");
}

#[tokio::test]
async fn quota_boundary_from_content_length_and_while_streaming() {
    let quota = image().len() as u64;
    let hub = Hub::start(Options {
        quota_bytes: quota,
        ..Options::default()
    })
    .await;
    let http = Http::new(hub.http);
    let token = hub.add_user("alice");
    let auth = bearer(&token);

    // One byte over, declared: refused before the body is read.
    let mut over = image();
    over.push(0);
    let declared = put_userdb(&http, &token, ("if-none-match", "*"), over.clone()).await;
    assert_error(&declared, 413, "USERDB_TOO_LARGE");
    // One byte over, streamed without a length: refused while streaming.
    let streamed = http
        .send(
            "PUT",
            "/userdb",
            &[("authorization", &auth), OCTET, ("if-none-match", "*")],
            Payload::Streamed(over, 16 * 1024),
        )
        .await;
    assert_error(&streamed, 413, "USERDB_TOO_LARGE");
    // Exactly at the quota: accepted, streamed too.
    let exact = http
        .send(
            "PUT",
            "/userdb",
            &[("authorization", &auth), OCTET, ("if-none-match", "*")],
            Payload::Streamed(image(), 10_000),
        )
        .await;
    assert_eq!(exact.status, 204);
}

#[tokio::test]
async fn racing_writers_one_wins_the_other_gets_412_with_the_winners_etag() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let base = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), image()).await);
    for round in 0..3 {
        let base = if round == 0 {
            base.clone()
        } else {
            let got = http
                .send(
                    "HEAD",
                    "/userdb",
                    &[("authorization", &bearer(&token))],
                    Payload::Empty,
                )
                .await;
            etag_revision(&got)
        };
        let quoted = format!("\"{base}\"");
        let (a, b) = tokio::join!(
            put_userdb(&http, &token, ("if-match", &quoted), other_image()),
            put_userdb(&http, &token, ("if-match", &quoted), image()),
        );
        let (winner, loser) = match (a.status, b.status) {
            (204, 412) => (a, b),
            (412, 204) => (b, a),
            other => panic!("round {round}: expected one 204 and one 412, got {other:?}"),
        };
        assert_eq!(
            loser.header("etag"),
            winner.header("etag"),
            "the loser learns the winner's revision"
        );
        assert_eq!(loser.json()["revision"], etag_revision(&winner));
    }
}

#[tokio::test]
async fn another_users_image_looks_exactly_like_a_missing_one() {
    let (hub, http) = hub().await;
    let alice = hub.add_user("alice");
    let bob = hub.add_user("bob");
    let carol = hub.add_user("carol");
    let alice_rev =
        etag_revision(&put_userdb(&http, &alice, ("if-none-match", "*"), image()).await);

    let as_bob = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &bearer(&bob))],
            Payload::Empty,
        )
        .await;
    let as_carol = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &bearer(&carol))],
            Payload::Empty,
        )
        .await;
    assert_eq!(
        (as_bob.status, as_bob.body.clone()),
        (as_carol.status, as_carol.body.clone())
    );
    assert_eq!(as_bob.status, 404);
    // Each user's origin states an identity of its own (issue 35), the same on every answer
    // about that user's image and never another user's.
    let origin = |answer: &snug_e2e::Answer| answer.header("snug-origin").to_owned();
    assert_eq!(origin(&as_bob).len(), 32, "{:?}", as_bob.headers);
    assert_ne!(origin(&as_bob), origin(&as_carol));
    let as_alice = http
        .send(
            "HEAD",
            "/userdb",
            &[("authorization", &bearer(&alice))],
            Payload::Empty,
        )
        .await;
    assert_eq!(as_alice.status, 200);
    assert_eq!(origin(&as_alice).len(), 32);
    assert_ne!(origin(&as_alice), origin(&as_bob));
    let again = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &bearer(&bob))],
            Payload::Empty,
        )
        .await;
    assert_eq!(origin(&again), origin(&as_bob));
    // Another hub (another store) states another identity for a user of the same name.
    let (other_hub, other_http) = crate::hub().await;
    let bob_elsewhere = other_hub.add_user("bob");
    let elsewhere = other_http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &bearer(&bob_elsewhere))],
            Payload::Empty,
        )
        .await;
    assert_eq!(origin(&elsewhere).len(), 32);
    assert_ne!(origin(&elsewhere), origin(&as_bob));

    // Bob restoring Alice's revision is the same answer as restoring one that never existed.
    let restore = |rev: String| {
        let http = http.clone();
        let bob = bob.clone();
        async move {
            http.send(
                "POST",
                &format!("/userdb/revisions/{rev}/restore"),
                &[("authorization", &bearer(&bob)), ("if-none-match", "*")],
                Payload::Empty,
            )
            .await
        }
    };
    let theirs = restore(alice_rev.clone()).await;
    let bogus = restore("r9-0123456789abcdef".to_owned()).await;
    assert_eq!(theirs.status, 404);
    assert_eq!(
        (theirs.status, theirs.body.clone()),
        (bogus.status, bogus.body.clone())
    );
    let list = http
        .send(
            "GET",
            "/userdb/revisions",
            &[("authorization", &bearer(&bob))],
            Payload::Empty,
        )
        .await;
    assert_eq!(list.json()["revisions"], serde_json::json!([]));
    // Bob's first write is his own and leaves Alice's untouched.
    assert_eq!(
        put_userdb(&http, &bob, ("if-none-match", "*"), other_image())
            .await
            .status,
        204
    );
    let alice_now = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &bearer(&alice))],
            Payload::Empty,
        )
        .await;
    assert_eq!(alice_now.header("etag"), format!("\"{alice_rev}\""));
    assert_eq!(alice_now.body.as_ref(), image().as_slice());
}

#[tokio::test]
async fn revisions_list_and_restore_copy_forward() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let auth = bearer(&token);
    let first = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), image()).await);
    let second =
        etag_revision(&put_userdb(&http, &token, ("if-match", &first), other_image()).await);

    let list = http
        .send(
            "GET",
            "/userdb/revisions?limit=10",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_eq!(list.status, 200);
    let revisions = list.json()["revisions"].as_array().expect("array").clone();
    assert_eq!(revisions.len(), 2);
    assert_eq!(revisions[0]["revision"], second, "newest first");
    assert_eq!(revisions[1]["revision"], first);
    assert_eq!(revisions[0]["base"], first);
    assert_eq!(revisions[1]["sha256"], hex::encode(Sha256::digest(image())));
    assert!(
        revisions[0]["acceptedAt"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z') && t.len() == 24),
        "{}",
        revisions[0]["acceptedAt"]
    );
    let bad_limit = http
        .send(
            "GET",
            "/userdb/revisions?limit=0",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_error(&bad_limit, 400, "BAD_REQUEST");

    let path = format!("/userdb/revisions/{first}/restore");
    let bare = http
        .send("POST", &path, &[("authorization", &auth)], Payload::Empty)
        .await;
    assert_error(&bare, 428, "PRECONDITION_REQUIRED");
    let stale = http
        .send(
            "POST",
            &path,
            &[
                ("authorization", &auth),
                ("if-match", &format!("\"{first}\"")),
            ],
            Payload::Empty,
        )
        .await;
    assert_eq!(stale.status, 412);
    assert_eq!(stale.header("etag"), format!("\"{second}\""));
    let restored = http
        .send(
            "POST",
            &path,
            &[
                ("authorization", &auth),
                ("if-match", &format!("\"{second}\"")),
            ],
            Payload::Empty,
        )
        .await;
    assert_eq!(restored.status, 200);
    let third = etag_revision(&restored);
    assert_eq!(restored.json()["revision"]["restoredFrom"], first);
    assert_eq!(restored.json()["revision"]["revision"], third);
    let got = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_eq!(got.body.as_ref(), image().as_slice());
    assert_eq!(got.header("etag"), format!("\"{third}\""));
}

#[tokio::test]
async fn unauthenticated_requests_get_401_on_every_user_route() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let key_holder = snug_gateway::session::SessionKey::from_secret(
        "an e2e session secret of more than 32 chars",
    )
    .expect("key");
    let alice_id = hub.user_id("alice");
    // A live session's cookie, and copies of it changed every way but the record.
    let good = session_cookie(&http, &token).await;
    let sid = key_holder
        .verify(&good, 0)
        .expect("the hub's own cookie")
        .session_id;
    let expired = key_holder.sign(&alice_id, &sid, snug_gateway::session::now_ms() - 1);
    let forged =
        snug_gateway::session::SessionKey::from_secret("a different secret that is 32+ chars long")
            .expect("key")
            .sign(&alice_id, &sid, u64::MAX);
    let mut tampered = key_holder.sign(&alice_id, &sid, u64::MAX);
    tampered.insert(3, 'x');
    // Sealed with the hub's own key, but naming a session the directory never recorded (issue
    // 36 point 6): the seal alone admits no one.
    let unrecorded = snug_users::SessionId::parse("s0123456789abcdef0123456789abcdef").expect("id");
    let unrecorded = key_holder.sign(&alice_id, &unrecorded, u64::MAX);
    // The live session's id under another user's name.
    let bob_id = {
        hub.add_user("bob");
        hub.user_id("bob")
    };
    let renamed = key_holder.sign(&bob_id, &sid, u64::MAX);
    let credentials: Vec<Vec<(&str, String)>> = vec![
        vec![],
        vec![("authorization", "Bearer snug_nope".to_owned())],
        vec![("authorization", format!("Basic {token}"))],
        vec![("authorization", bearer(&token[..token.len() - 1]))],
        vec![("cookie", format!("snug_session={expired}"))],
        vec![("cookie", format!("snug_session={forged}"))],
        vec![("cookie", format!("snug_session={tampered}"))],
        vec![("cookie", format!("snug_session={unrecorded}"))],
        vec![("cookie", format!("snug_session={renamed}"))],
    ];
    for creds in &credentials {
        let headers: Vec<(&str, &str)> = creds.iter().map(|(k, v)| (*k, v.as_str())).collect();
        for (method, path) in [
            ("GET", "/userdb"),
            ("PUT", "/userdb"),
            ("GET", "/userdb/revisions"),
            ("GET", "/auth/me"),
            ("POST", "/userdb/revisions/r1-00/restore"),
        ] {
            let mut all = headers.clone();
            all.extend([
                OCTET,
                ("if-none-match", "*"),
                ("x-snug-csrf", "x"),
                ("cookie", "snug_csrf=x"),
            ]);
            let answer = http
                .send(
                    method,
                    path,
                    &all,
                    if method == "PUT" {
                        Payload::Whole(image())
                    } else {
                        Payload::Empty
                    },
                )
                .await;
            assert_error(&answer, 401, "UNAUTHENTICATED");
            assert!(answer.header("www-authenticate").starts_with("Bearer"));
        }
    }
    // A valid cookie does not rescue a bad bearer token.
    let mixed = http
        .send(
            "GET",
            "/userdb",
            &[
                ("authorization", "Bearer snug_nope"),
                ("cookie", &format!("snug_session={good}")),
            ],
            Payload::Empty,
        )
        .await;
    assert_eq!(mixed.status, 401);
    // The live session was not harmed by any of that.
    assert_eq!(me_with_cookie(&http, &good).await.status, 200);
    // A removed user's token and session stop working.
    hub.remove_user("alice");
    let removed = http
        .send(
            "GET",
            "/auth/me",
            &[("authorization", &bearer(&token))],
            Payload::Empty,
        )
        .await;
    assert_eq!(removed.status, 401);
    let removed_session = http
        .send(
            "GET",
            "/auth/me",
            &[("cookie", &format!("snug_session={good}"))],
            Payload::Empty,
        )
        .await;
    assert_eq!(removed_session.status, 401);
}

/// The `snug_session` cookie of a session `POST /auth/session` starts from `token`.
async fn session_cookie(http: &Http, token: &str) -> String {
    let started = http
        .send(
            "POST",
            "/auth/session",
            &[("authorization", &bearer(token))],
            Payload::Empty,
        )
        .await;
    assert_eq!(started.status, 200, "{:?}", started.body);
    started.cookie("snug_session")
}

/// `GET /auth/me` with only a session cookie.
async fn me_with_cookie(http: &Http, session: &str) -> Answer {
    http.send(
        "GET",
        "/auth/me",
        &[("cookie", &format!("snug_session={session}"))],
        Payload::Empty,
    )
    .await
}

/// Issue 36 point 6: a cookie saved before logout does not work after it, on any route; logout
/// ends that session only, and a logout by bearer ends the session whose cookie rides along.
#[tokio::test]
async fn a_cookie_saved_before_logout_is_refused_after_it() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let started = http
        .send(
            "POST",
            "/auth/session",
            &[("authorization", &bearer(&token))],
            Payload::Empty,
        )
        .await;
    let saved = started.cookie("snug_session");
    let csrf = started.cookie("snug_csrf");
    let other_tab = session_cookie(&http, &token).await;
    assert_eq!(me_with_cookie(&http, &saved).await.status, 200);
    let jar = format!("snug_session={saved}; snug_csrf={csrf}");
    let logout = http
        .send(
            "POST",
            "/auth/logout",
            &[("cookie", &jar), ("x-snug-csrf", &csrf)],
            Payload::Empty,
        )
        .await;
    assert_eq!(logout.status, 204);
    for (method, path) in [
        ("GET", "/auth/me"),
        ("GET", "/userdb"),
        ("GET", "/userdb/revisions"),
        ("POST", "/auth/logout"),
    ] {
        let answer = http
            .send(
                method,
                path,
                &[("cookie", &jar), ("x-snug-csrf", &csrf)],
                Payload::Empty,
            )
            .await;
        assert_error(&answer, 401, "UNAUTHENTICATED");
    }
    assert_eq!(
        me_with_cookie(&http, &other_tab).await.status,
        200,
        "another session of the same token lives on"
    );
    // A bearer logout ends the session whose cookie it carries.
    let bearer_logout = http
        .send(
            "POST",
            "/auth/logout",
            &[
                ("authorization", &bearer(&token)),
                ("cookie", &format!("snug_session={other_tab}")),
            ],
            Payload::Empty,
        )
        .await;
    assert_eq!(bearer_logout.status, 204);
    assert_error(
        &me_with_cookie(&http, &other_tab).await,
        401,
        "UNAUTHENTICATED",
    );
    assert_eq!(
        http.send(
            "GET",
            "/auth/me",
            &[("authorization", &bearer(&token))],
            Payload::Empty
        )
        .await
        .status,
        200,
        "the token itself is not logged out"
    );
}

/// Issue 36 point 6: revoking the token a session came from ends that session, and only the
/// sessions of that token.
#[tokio::test]
async fn revoking_the_token_a_session_came_from_ends_the_session() {
    let (hub, http) = hub().await;
    hub.add_user("alice");
    let (first, first_id) = hub.issue_token("alice");
    let (second, _) = hub.issue_token("alice");
    let from_first = session_cookie(&http, &first).await;
    let from_second = session_cookie(&http, &second).await;
    assert_eq!(me_with_cookie(&http, &from_first).await.status, 200);
    hub.revoke_token(&first_id);
    assert_error(
        &me_with_cookie(&http, &from_first).await,
        401,
        "UNAUTHENTICATED",
    );
    assert_eq!(me_with_cookie(&http, &from_second).await.status, 200);
    // The revoked token starts no session either.
    let again = http
        .send(
            "POST",
            "/auth/session",
            &[("authorization", &bearer(&first))],
            Payload::Empty,
        )
        .await;
    assert_error(&again, 401, "UNAUTHENTICATED");
}

/// Issue 36 point 6: disabling a user ends every session of theirs for good (enabling them again
/// brings none back), and so does removing them.
#[tokio::test]
async fn disabling_or_removing_a_user_ends_every_session() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let sessions = [
        session_cookie(&http, &token).await,
        session_cookie(&http, &token).await,
    ];
    hub.disable_user("alice");
    for session in &sessions {
        assert_error(
            &me_with_cookie(&http, session).await,
            401,
            "UNAUTHENTICATED",
        );
    }
    hub.enable_user("alice");
    for session in &sessions {
        assert_error(
            &me_with_cookie(&http, session).await,
            401,
            "UNAUTHENTICATED",
        );
    }
    let fresh = session_cookie(&http, &token).await;
    assert_eq!(me_with_cookie(&http, &fresh).await.status, 200);
    hub.remove_user("alice");
    assert_error(&me_with_cookie(&http, &fresh).await, 401, "UNAUTHENTICATED");
}

#[tokio::test]
async fn sessions_need_csrf_for_writes_and_bearer_tokens_do_not() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");

    let started = http
        .send(
            "POST",
            "/auth/session",
            &[("authorization", &bearer(&token)), ("host", "hub.example")],
            Payload::Empty,
        )
        .await;
    assert_eq!(started.status, 200);
    let set = started.set_cookies();
    let session = set
        .iter()
        .find(|c| c.0 == "snug_session")
        .expect("session cookie");
    let csrf = set
        .iter()
        .find(|c| c.0 == "snug_csrf")
        .expect("csrf cookie");
    assert!(
        session.2.contains("HttpOnly")
            && session.2.contains("SameSite=Lax")
            && session.2.contains("Path=/")
            && session.2.contains("Max-Age=604800"),
        "{}",
        session.2
    );
    assert!(
        session.2.contains("Secure"),
        "a non-loopback host gets Secure: {}",
        session.2
    );
    assert!(
        !csrf.2.contains("HttpOnly"),
        "the page must read the CSRF cookie"
    );
    assert_eq!(started.json()["csrfToken"], csrf.1);
    assert_eq!(csrf.1.len(), 64);
    let on_loopback = http
        .send(
            "POST",
            "/auth/session",
            &[("authorization", &bearer(&token))],
            Payload::Empty,
        )
        .await;
    assert!(
        on_loopback
            .set_cookies()
            .iter()
            .all(|c| !c.2.contains("Secure")),
        "plain http on loopback: no Secure"
    );
    let no_bearer = http
        .send(
            "POST",
            "/auth/session",
            &[("cookie", &format!("snug_session={}", session.1))],
            Payload::Empty,
        )
        .await;
    assert_error(&no_bearer, 401, "UNAUTHENTICATED");

    let cookie = format!("snug_session={}; snug_csrf={}", session.1, csrf.1);
    let me = http
        .send("GET", "/auth/me", &[("cookie", &cookie)], Payload::Empty)
        .await;
    assert_eq!(me.json()["via"], "session");
    assert_eq!(me.json()["name"], "alice");
    let read = http
        .send("GET", "/userdb", &[("cookie", &cookie)], Payload::Empty)
        .await;
    assert_eq!(read.status, 404, "reads need no CSRF header");

    let write = |headers: Vec<(&'static str, String)>| {
        let http = http.clone();
        async move {
            let mut all: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            all.extend([OCTET, ("if-none-match", "*")]);
            http.send("PUT", "/userdb", &all, Payload::Whole(image()))
                .await
        }
    };
    let missing = write(vec![("cookie", cookie.clone())]).await;
    assert_error(&missing, 403, "CSRF_REJECTED");
    let wrong = write(vec![
        ("cookie", cookie.clone()),
        ("x-snug-csrf", "0".repeat(64)),
    ])
    .await;
    assert_error(&wrong, 403, "CSRF_REJECTED");
    let no_cookie = write(vec![
        ("cookie", format!("snug_session={}", session.1)),
        ("x-snug-csrf", csrf.1.clone()),
    ])
    .await;
    assert_error(&no_cookie, 403, "CSRF_REJECTED");
    // The reference's older clients sent x-csrf-token: not accepted.
    let old_name = write(vec![
        ("cookie", cookie.clone()),
        ("x-csrf-token", csrf.1.clone()),
    ])
    .await;
    assert_error(&old_name, 403, "CSRF_REJECTED");
    let ok = write(vec![
        ("cookie", cookie.clone()),
        ("x-snug-csrf", csrf.1.clone()),
    ])
    .await;
    assert_eq!(ok.status, 204);
    // Bearer writes are exempt.
    let rev = etag_revision(&ok);
    assert_eq!(
        put_userdb(&http, &token, ("if-match", &rev), other_image())
            .await
            .status,
        204
    );

    let logout_no_csrf = http
        .send(
            "POST",
            "/auth/logout",
            &[("cookie", &cookie)],
            Payload::Empty,
        )
        .await;
    assert_error(&logout_no_csrf, 403, "CSRF_REJECTED");
    let logout = http
        .send(
            "POST",
            "/auth/logout",
            &[("cookie", &cookie), ("x-snug-csrf", &csrf.1)],
            Payload::Empty,
        )
        .await;
    assert_eq!(logout.status, 204);
    assert!(
        logout
            .set_cookies()
            .iter()
            .all(|c| c.1.is_empty() && c.2.contains("Max-Age=0"))
    );
}

#[tokio::test]
async fn cors_is_fail_closed() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let auth = bearer(&token);
    etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), image()).await);

    let allowed = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &auth), ("origin", "https://app.example")],
            Payload::Empty,
        )
        .await;
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        "https://app.example"
    );
    assert_eq!(allowed.header("access-control-allow-credentials"), "true");
    let exposed = allowed
        .header("access-control-expose-headers")
        .to_ascii_lowercase();
    assert!(
        exposed.contains("etag")
            && exposed.contains("repr-digest")
            && exposed.contains("snug-storage-version"),
        "{exposed}"
    );
    assert!(allowed.header("vary").contains("Origin"));
    // Even an error is readable by an allowed origin.
    let unauth = http
        .send(
            "GET",
            "/userdb",
            &[("origin", "https://app.example")],
            Payload::Empty,
        )
        .await;
    assert_eq!(unauth.status, 401);
    assert_eq!(
        unauth.header("access-control-allow-origin"),
        "https://app.example"
    );

    let preflight = http
        .send(
            "OPTIONS",
            "/userdb",
            &[
                ("origin", "https://app.example"),
                ("access-control-request-method", "PUT"),
                (
                    "access-control-request-headers",
                    "if-match, x-snug-csrf, content-type",
                ),
            ],
            Payload::Empty,
        )
        .await;
    assert!(preflight.status == 204 || preflight.status == 200);
    assert_eq!(
        preflight.header("access-control-allow-origin"),
        "https://app.example"
    );
    assert_eq!(preflight.header("access-control-allow-credentials"), "true");
    let allow_headers = preflight
        .header("access-control-allow-headers")
        .to_ascii_lowercase();
    for needed in ["if-match", "if-none-match", "x-snug-csrf", "content-type"] {
        assert!(
            allow_headers.contains(needed),
            "{needed} in {allow_headers}"
        );
    }
    assert!(
        preflight
            .header("access-control-allow-methods")
            .contains("PUT")
    );

    for origin in [
        "https://evil.example",
        "https://app.example.evil.example",
        "http://app.example",
        "null",
    ] {
        let answer = http
            .send(
                "GET",
                "/userdb",
                &[("authorization", &auth), ("origin", origin)],
                Payload::Empty,
            )
            .await;
        let preflight = http
            .send(
                "OPTIONS",
                "/userdb",
                &[("origin", origin), ("access-control-request-method", "PUT")],
                Payload::Empty,
            )
            .await;
        for response in [&answer, &preflight] {
            let cors: Vec<_> = response
                .headers
                .keys()
                .filter(|k| k.as_str().starts_with("access-control-"))
                .collect();
            assert!(cors.is_empty(), "{origin}: {cors:?}");
        }
        assert_eq!(
            answer.status, 200,
            "CORS does not change what a non-browser client gets"
        );
    }
}

#[tokio::test]
async fn a_dead_service_gives_503_with_retry_after_and_the_hub_recovers() {
    let mut hub = Hub::start(Options {
        deadline: Duration::from_secs(2),
        // Stopping the services must be seen by the gateway: they are reached over gRPC.
        in_process: false,
        ..Options::default()
    })
    .await;
    let http = Http::new(hub.http);
    let token = hub.add_user("alice");
    let auth = bearer(&token);
    let rev = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), image()).await);

    hub.stop_services().await;
    let started = Instant::now();
    for (method, payload) in [
        ("GET", Payload::Empty),
        ("PUT", Payload::Whole(other_image())),
    ] {
        let answer = http
            .send(
                method,
                "/userdb",
                &[("authorization", &auth), OCTET, ("if-match", &rev)],
                payload,
            )
            .await;
        assert_error(&answer, 503, "SERVICE_UNAVAILABLE");
        assert_eq!(answer.header("retry-after"), "1");
        assert_eq!(answer.json()["retryable"], true);
    }
    let ready = http.send("GET", "/readyz", &[], Payload::Empty).await;
    assert_eq!(ready.status, 503);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "no hang: {:?}",
        started.elapsed()
    );
    let live = http.send("GET", "/healthz", &[], Payload::Empty).await;
    assert_eq!(live.status, 200, "the gateway itself is alive");

    hub.restart_services().await;
    let mut recovered = None;
    for _ in 0..100 {
        let answer = http
            .send(
                "GET",
                "/userdb",
                &[("authorization", &auth)],
                Payload::Empty,
            )
            .await;
        if answer.status == 200 {
            recovered = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = recovered.expect("the hub recovers when the service returns");
    assert_eq!(answer.header("etag"), format!("\"{rev}\""));
    assert_eq!(
        http.send("GET", "/readyz", &[], Payload::Empty)
            .await
            .status,
        200
    );
}

/// Starts a gateway (auth off) whose services are at `addr`.
async fn gateway_pointing_at(addr: std::net::SocketAddr, deadline: Duration) -> Http {
    let config = snug_gateway::config::GatewayConfig {
        rpc_deadline: deadline,
        rpc_connect_timeout: Duration::from_millis(300),
        ..snug_gateway::config::GatewayConfig::for_tests()
    };
    let dir = std::env::temp_dir().join("snug-e2e-unused-gateway-dir");
    let url = format!("http://{addr}");
    // No store in this gateway's process: nothing is sealed for it.
    let state = snug_gateway::build(
        &config,
        dir,
        snug_gateway::Addresses::all(&url),
        snug_gateway::Runtime::new(snug_files::sealed::Sealer::disabled()),
    )
    .await
    .expect("gateway");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let http = Http::new(listener.local_addr().expect("addr"));
    tokio::spawn(snug_gateway::serve(state, listener, std::future::pending()));
    http
}

#[tokio::test]
async fn a_closed_port_gives_503_at_once() {
    // Bind then drop: a port nothing listens on.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let http = gateway_pointing_at(addr, Duration::from_secs(5)).await;
    let started = Instant::now();
    let answer = http.send("GET", "/userdb", &[], Payload::Empty).await;
    assert_error(&answer, 503, "SERVICE_UNAVAILABLE");
    assert_eq!(answer.header("retry-after"), "1");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_service_that_never_answers_gives_503_within_the_deadline() {
    // Accepts connections and reads nothing: no HTTP/2 handshake, no answer, ever.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = silent.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let deadline = Duration::from_millis(700);
    let http = gateway_pointing_at(addr, deadline).await;
    let started = Instant::now();
    let get = http.send("GET", "/userdb", &[], Payload::Empty).await;
    assert_error(&get, 503, "SERVICE_UNAVAILABLE");
    let put = http
        .send(
            "PUT",
            "/userdb",
            &[OCTET, ("if-none-match", "*")],
            Payload::Whole(image()),
        )
        .await;
    assert_error(&put, 503, "SERVICE_UNAVAILABLE");
    assert_eq!(put.header("retry-after"), "1");
    let elapsed = started.elapsed();
    assert!(elapsed >= deadline && elapsed < deadline * 6, "{elapsed:?}");
}

#[tokio::test]
async fn auth_off_serves_the_local_user_on_loopback_names_only() {
    let hub = Hub::start(Options {
        auth: AuthMode::Off,
        origins: vec![],
        ..Options::default()
    })
    .await;
    let http = Http::new(hub.http);
    let created = http
        .send(
            "PUT",
            "/userdb",
            &[OCTET, ("if-none-match", "*")],
            Payload::Whole(image()),
        )
        .await;
    assert_eq!(created.status, 204);
    let me = http.send("GET", "/auth/me", &[], Payload::Empty).await;
    assert_eq!(me.json()["userId"], "local");
    assert_eq!(
        http.send(
            "GET",
            "/userdb",
            &[("host", "localhost:8080")],
            Payload::Empty
        )
        .await
        .status,
        200
    );
    // DNS rebinding: a page on evil.example resolved to 127.0.0.1 still sends its own Host.
    let rebound = http
        .send(
            "GET",
            "/userdb",
            &[("host", "evil.example")],
            Payload::Empty,
        )
        .await;
    assert_error(&rebound, 421, "MISDIRECTED_REQUEST");
    let session = http
        .send("POST", "/auth/session", &[], Payload::Empty)
        .await;
    assert_error(&session, 404, "NOT_FOUND");
}

#[tokio::test]
async fn unknown_routes_and_methods_are_json_errors() {
    let (_hub, http) = hub().await;
    let missing = http.send("GET", "/nope", &[], Payload::Empty).await;
    assert_error(&missing, 404, "NOT_FOUND");
    let method = http.send("DELETE", "/userdb", &[], Payload::Empty).await;
    assert_error(&method, 405, "METHOD_NOT_ALLOWED");
    let health = http.send("GET", "/healthz", &[], Payload::Empty).await;
    assert_eq!(health.json()["status"], "ok");
    let ready = http.send("GET", "/readyz", &[], Payload::Empty).await;
    assert_eq!(ready.status, 200);
    assert_eq!(ready.json()["services"]["syncStore"], "SERVING");
}

#[tokio::test]
async fn the_openapi_document_describes_exactly_the_routes() {
    let (_hub, http) = hub().await;
    let served = http.send("GET", "/openapi.json", &[], Payload::Empty).await;
    assert_eq!(served.status, 200);
    let doc = served.json();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented: Vec<(String, String)> = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            documented.push((path.clone(), method.clone()));
            let responses = operation["responses"].as_object().expect("responses");
            assert!(!responses.is_empty(), "{method} {path}");
            for (status, response) in responses {
                assert!(status.parse::<u16>().is_ok(), "{method} {path} {status}");
                assert!(
                    response["description"].is_string(),
                    "{method} {path} {status}"
                );
            }
        }
    }
    let mut routed: Vec<(String, String)> = snug_gateway::routes::ROUTES
        .iter()
        .flat_map(|(path, methods)| {
            methods
                .iter()
                .map(move |m| ((*path).to_owned(), (*m).to_owned()))
        })
        .collect();
    documented.sort();
    routed.sort();
    assert_eq!(
        documented, routed,
        "every route documented, every documented operation routed"
    );
    // Every documented operation is reachable: it answers something other than the router's
    // "no such route" or "method not allowed".
    for (path, method) in &routed {
        let concrete = path
            .replace("{rev}", "r1-0000000000000000")
            .replace("{appId}", "some-app");
        let answer = http
            .send(&method.to_ascii_uppercase(), &concrete, &[], Payload::Empty)
            .await;
        assert_ne!(answer.status, 405, "{method} {path}");
        if answer.status == 404 && method != "head" {
            assert_ne!(answer.json()["message"], "no such route", "{method} {path}");
        }
    }
}

#[tokio::test]
async fn per_app_export_has_natural_names_and_nothing_else() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let auth = bearer(&token);
    let path = "/userdb/apps/a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c/export";
    let before = http
        .send("GET", path, &[("authorization", &auth)], Payload::Empty)
        .await;
    assert_error(&before, 404, "NOT_FOUND");
    put_userdb(&http, &token, ("if-none-match", "*"), image()).await;

    let export = http
        .send("GET", path, &[("authorization", &auth)], Payload::Empty)
        .await;
    assert_eq!(
        export.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&export.body)
    );
    assert!(export.body.starts_with(b"SQLite format 3\0"));
    assert_eq!(export.header("content-type"), "application/octet-stream");
    assert_eq!(
        export.header("content-disposition"),
        "attachment; filename=\"a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c.snug\""
    );
    assert_eq!(
        export.header("content-length"),
        export.body.len().to_string()
    );
    // Natural names inside; no hub table, no at-rest name.
    let text = String::from_utf8_lossy(&export.body);
    assert!(
        text.contains("CREATE TABLE") && text.contains("trades"),
        "the app's tables are there"
    );
    assert!(
        !text.contains("snug_secrets") && !text.contains("app_a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c__"),
        "only natural names"
    );

    // A non-UUID namespace, percent-encoded in the path.
    let chess = http
        .send(
            "GET",
            "/userdb/apps/starter--chess/export",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_eq!(chess.status, 200);
    assert_eq!(
        chess.header("content-disposition"),
        "attachment; filename=\"x737461727465722d2d6368657373.snug\""
    );

    let missing = http
        .send(
            "GET",
            "/userdb/apps/no-such-app/export",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_error(&missing, 404, "APP_NOT_FOUND");
    // Another user sees no image at all, whatever the app.
    let bob = hub.add_user("bob");
    let theirs = http
        .send(
            "GET",
            path,
            &[("authorization", &bearer(&bob))],
            Payload::Empty,
        )
        .await;
    assert_error(&theirs, 404, "NOT_FOUND");
}

/// An app id of 4,340 characters is refused at the edge, in-process and over loopback gRPC as a
/// split deployment calls the services: 400 `INVALID_ARGUMENT` (identifiers are at most 256
/// bytes; the split gateway used to answer 500, its gRPC client refusing trailers over 16 KiB),
/// echoing none of it; one of 256 bytes is as unknown as any other, 404 `APP_NOT_FOUND`.
#[tokio::test]
async fn a_huge_app_id_is_refused_in_both_layouts() {
    for in_process in [true, false] {
        let hub = Hub::start(Options {
            in_process,
            ..Options::default()
        })
        .await;
        let http = Http::new(hub.http);
        let token = hub.add_user("alice");
        put_userdb(&http, &token, ("if-none-match", "*"), image()).await;
        let export = |id: String| {
            let http = &http;
            let token = &token;
            async move {
                http.send(
                    "GET",
                    &format!("/userdb/apps/{id}/export"),
                    &[("authorization", &bearer(token))],
                    Payload::Empty,
                )
                .await
            }
        };
        let huge = export("x".repeat(4340)).await;
        assert_error(&huge, 400, "INVALID_ARGUMENT");
        assert!(
            huge.body.len() < 512 && !String::from_utf8_lossy(&huge.body).contains("xxxx"),
            "in process: {in_process}, the answer echoes the id: {:?}",
            String::from_utf8_lossy(&huge.body)
        );
        assert_error(&export("x".repeat(256)).await, 404, "APP_NOT_FOUND");
    }
}

/// A SQLite header stamped with storage version `version`, padded to a page.
fn stamped(version: u32) -> Vec<u8> {
    let mut bytes = vec![0u8; 4096];
    bytes[..16].copy_from_slice(b"SQLite format 3\0");
    bytes[60..64].copy_from_slice(&version.to_be_bytes());
    bytes
}

#[tokio::test]
async fn image_responses_carry_the_storage_version_beside_etag_and_digest() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let auth = bearer(&token);
    let revision = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), image()).await);
    let digest = format!(
        "sha-256=:{}:",
        base64::engine::general_purpose::STANDARD.encode(Sha256::digest(image()))
    );

    let got = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.header("snug-storage-version"),
        "6",
        "the sample is a v6 user database"
    );
    assert_eq!(got.header("etag"), format!("\"{revision}\""));
    assert_eq!(got.header("repr-digest"), digest);
    assert_eq!(got.header("content-length"), image().len().to_string());
    let head = http
        .send(
            "HEAD",
            "/userdb",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    for name in [
        "snug-storage-version",
        "etag",
        "repr-digest",
        "content-length",
    ] {
        assert_eq!(head.header(name), got.header(name), "{name}");
    }
    for method in ["GET", "HEAD"] {
        let unchanged = http
            .send(
                method,
                "/userdb",
                &[
                    ("authorization", &auth),
                    ("if-none-match", &format!("\"{revision}\"")),
                ],
                Payload::Empty,
            )
            .await;
        assert_eq!(unchanged.status, 304, "{method}");
        assert!(unchanged.body.is_empty());
        assert_eq!(
            unchanged.header("etag"),
            format!("\"{revision}\""),
            "{method}"
        );
        assert_eq!(
            unchanged.header("snug-storage-version"),
            "6",
            "{method}: a 304 says it too"
        );
    }

    let list = http
        .send(
            "GET",
            "/userdb/revisions",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_eq!(list.json()["revisions"][0]["storageVersion"], 6);
    let restored = http
        .send(
            "POST",
            &format!("/userdb/revisions/{revision}/restore"),
            &[("authorization", &auth), ("if-match", &revision)],
            Payload::Empty,
        )
        .await;
    assert_eq!(restored.status, 200);
    assert_eq!(
        restored.json()["revision"]["storageVersion"],
        6,
        "a restore carries its source's version"
    );
    assert_eq!(restored.json()["revision"]["restoredFrom"], revision);
}

#[tokio::test]
async fn the_storage_version_is_reported_as_recorded_and_absent_when_unknown() {
    let (hub, http) = hub().await;
    let seven = hub.add_user("seven");
    let opaque = hub.add_user("opaque");
    // Neither could be pushed through the gateway (a v7 file is SCHEMA_TOO_NEW, the other is not
    // SQLite); the store records whatever the sync service accepted, without judging it.
    let seven_rev = push_unvalidated(&hub, &user_id(&hub, "seven"), stamped(7)).await;
    let opaque_rev = push_unvalidated(
        &hub,
        &user_id(&hub, "opaque"),
        b"no SQLite header here".to_vec(),
    )
    .await;

    for path in [
        "/userdb".to_owned(),
        format!("/userdb/revisions/{seven_rev}"),
    ] {
        for method in ["GET", "HEAD"] {
            let answer = http
                .send(
                    method,
                    &path,
                    &[("authorization", &bearer(&seven))],
                    Payload::Empty,
                )
                .await;
            assert_eq!(answer.status, 200, "{method} {path}");
            assert_eq!(
                answer.header("snug-storage-version"),
                "7",
                "{method} {path}: reported before any download"
            );
        }
    }
    let list = http
        .send(
            "GET",
            "/userdb/revisions",
            &[("authorization", &bearer(&seven))],
            Payload::Empty,
        )
        .await;
    assert_eq!(list.json()["revisions"][0]["storageVersion"], 7);

    for path in [
        "/userdb".to_owned(),
        format!("/userdb/revisions/{opaque_rev}"),
    ] {
        for method in ["GET", "HEAD"] {
            let answer = http
                .send(
                    method,
                    &path,
                    &[("authorization", &bearer(&opaque))],
                    Payload::Empty,
                )
                .await;
            assert_eq!(answer.status, 200, "{method} {path}");
            assert!(
                answer.headers.get("snug-storage-version").is_none(),
                "{method} {path}: unknown, so absent"
            );
            assert_eq!(answer.header("etag"), format!("\"{opaque_rev}\""));
        }
    }
    let list = http
        .send(
            "GET",
            "/userdb/revisions",
            &[("authorization", &bearer(&opaque))],
            Payload::Empty,
        )
        .await;
    let entry = &list.json()["revisions"][0];
    assert!(
        entry
            .get("storageVersion")
            .is_some_and(serde_json::Value::is_null),
        "null, not missing: {entry}"
    );
}

#[tokio::test]
async fn a_named_revision_is_served_with_the_same_headers_as_the_current_image() {
    let (hub, http) = hub().await;
    let token = hub.add_user("alice");
    let auth = bearer(&token);
    let first = etag_revision(&put_userdb(&http, &token, ("if-none-match", "*"), image()).await);
    let second =
        etag_revision(&put_userdb(&http, &token, ("if-match", &first), other_image()).await);
    let current = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_eq!(current.body.as_ref(), other_image().as_slice());

    // The older revision, by name, although a newer one is current.
    let path = format!("/userdb/revisions/{first}");
    let old = http
        .send("GET", &path, &[("authorization", &auth)], Payload::Empty)
        .await;
    assert_eq!(old.status, 200);
    assert_eq!(
        old.body.as_ref(),
        image().as_slice(),
        "the pushed bytes, unchanged"
    );
    let digest = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(&old.body));
    assert_eq!(
        old.header("repr-digest"),
        format!("sha-256=:{digest}:"),
        "the body hashes to its Repr-Digest"
    );
    assert_eq!(
        old.header("etag"),
        format!("\"{first}\""),
        "the ETag is the named revision"
    );
    assert_eq!(old.header("content-length"), image().len().to_string());
    assert_eq!(old.header("snug-storage-version"), "6");
    // Exactly the headers GET /userdb sends, with that revision's values.
    let named_current = http
        .send(
            "GET",
            &format!("/userdb/revisions/{second}"),
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_eq!(named_current.body, current.body);
    for name in [
        "etag",
        "repr-digest",
        "content-type",
        "x-content-type-options",
        "cache-control",
        "content-length",
        "snug-storage-version",
    ] {
        assert_eq!(named_current.header(name), current.header(name), "{name}");
        assert!(!old.header(name).is_empty(), "{name}");
    }

    let head = http
        .send("HEAD", &path, &[("authorization", &auth)], Payload::Empty)
        .await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    for name in [
        "etag",
        "repr-digest",
        "content-type",
        "x-content-type-options",
        "cache-control",
        "content-length",
        "snug-storage-version",
    ] {
        assert_eq!(head.header(name), old.header(name), "{name}");
    }

    // If-None-Match is compared with the named revision, not the current one.
    for method in ["GET", "HEAD"] {
        let unchanged = http
            .send(
                method,
                &path,
                &[
                    ("authorization", &auth),
                    ("if-none-match", &format!("\"{first}\"")),
                ],
                Payload::Empty,
            )
            .await;
        assert_eq!(unchanged.status, 304, "{method}");
        assert!(unchanged.body.is_empty());
        assert_eq!(unchanged.header("etag"), format!("\"{first}\""));
        assert_eq!(unchanged.header("snug-storage-version"), "6");
        let other = http
            .send(
                method,
                &path,
                &[("authorization", &auth), ("if-none-match", &second)],
                Payload::Empty,
            )
            .await;
        assert_eq!(
            other.status, 200,
            "{method}: the current revision does not match an older one"
        );
    }
    let refetch = http
        .send(
            "GET",
            &path,
            &[("authorization", &auth), ("if-none-match", &second)],
            Payload::Empty,
        )
        .await;
    assert_eq!(refetch.body.as_ref(), image().as_slice());

    // Unauthenticated: 401, as on every user route.
    for method in ["GET", "HEAD"] {
        let anonymous = http.send(method, &path, &[], Payload::Empty).await;
        assert_eq!(anonymous.status, 401, "{method}");
    }
}

#[tokio::test]
async fn a_named_revision_the_caller_cannot_have_is_one_uniform_404() {
    let (hub, http) = hub().await;
    let alice = hub.add_user("alice");
    let bob = hub.add_user("bob");
    let alice_rev =
        etag_revision(&put_userdb(&http, &alice, ("if-none-match", "*"), image()).await);
    let bob_auth = bearer(&bob);

    // Before Bob has any image, then after.
    let mut bodies = Vec::new();
    for round in 0..2 {
        if round == 1 {
            assert_eq!(
                put_userdb(&http, &bob, ("if-none-match", "*"), other_image())
                    .await
                    .status,
                204
            );
        }
        let long = "r".repeat(129);
        let probes = [
            alice_rev.clone(),                // another user's revision
            "r9-0123456789abcdef".to_owned(), // never existed
            "not%20a%20revision".to_owned(),  // decodes to a space: cannot be a revision
            "%FF%FE".to_owned(),              // does not decode to UTF-8 at all
            "a%2Fb".to_owned(),               // an encoded slash
            "r1..%22x%22".to_owned(),         // a quote
            long,                             // one character too long
        ];
        for probe in &probes {
            let path = format!("/userdb/revisions/{probe}");
            let get = http
                .send(
                    "GET",
                    &path,
                    &[("authorization", &bob_auth)],
                    Payload::Empty,
                )
                .await;
            assert_error(&get, 404, "NOT_FOUND");
            assert_eq!(get.json()["retryable"], false);
            assert!(
                get.headers.get("etag").is_none()
                    && get.headers.get("snug-storage-version").is_none(),
                "{probe}: nothing leaks"
            );
            bodies.push((probe.clone(), get.body.clone()));
            let head = http
                .send(
                    "HEAD",
                    &path,
                    &[("authorization", &bob_auth)],
                    Payload::Empty,
                )
                .await;
            assert_eq!(head.status, 404, "HEAD {probe}");
            assert!(head.body.is_empty());
            let conditional = http
                .send(
                    "GET",
                    &path,
                    &[("authorization", &bob_auth), ("if-none-match", "*")],
                    Payload::Empty,
                )
                .await;
            assert_eq!(
                conditional.status, 404,
                "If-None-Match does not turn a denial into a 304: {probe}"
            );
        }
    }
    let (_, first) = &bodies[0];
    for (probe, body) in &bodies {
        assert_eq!(
            body, first,
            "{probe} answers exactly like another user's revision"
        );
    }
    // Alice's own revision is still hers.
    let own = http
        .send(
            "GET",
            &format!("/userdb/revisions/{alice_rev}"),
            &[("authorization", &bearer(&alice))],
            Payload::Empty,
        )
        .await;
    assert_eq!(own.status, 200);
    assert_eq!(own.body.as_ref(), image().as_slice());
}
