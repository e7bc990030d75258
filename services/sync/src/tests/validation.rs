//! The sync service owns a write (issue 37 point 1): PutImage refuses an image the validation
//! refuses, in the validation's own reason and metadata, and stores and ledgers nothing for it;
//! an image it accepts is stored with its free space zeroed.

use snug_test_support::userdb;

use super::*;

on_every_backend!(
    each_kind_of_bad_image_is_refused_with_its_reason_and_nothing_is_stored,
    free_space_that_holds_a_deleted_value_is_stored_zeroed,
);

/// One image the validation refuses, with the reason and the metadata the status must carry.
pub(super) struct Refused {
    pub(super) case: &'static str,
    pub(super) bytes: Bytes,
    pub(super) reason: &'static snug_reasons::Reason,
    pub(super) metadata: &'static [(&'static str, &'static str)],
}

/// Every kind of image a hub sync origin refuses, each made from a valid one where it can be, so
/// the one thing wrong with it is the thing the case names.
pub(super) fn bad_images() -> Vec<Refused> {
    let valid = image(61, 0);
    let page = 4096;
    let mut container = b"SNUGENC1\n".to_vec();
    container.extend_from_slice(&noise(62, 4 * page));
    vec![
        Refused {
            case: "no bytes at all",
            bytes: Bytes::new(),
            reason: &snug_reasons::schema::NOT_SQLITE,
            metadata: &[],
        },
        Refused {
            case: "bytes that are no database",
            bytes: noise(63, 8 * page),
            reason: &snug_reasons::schema::NOT_SQLITE,
            metadata: &[],
        },
        Refused {
            case: "a SNUGENC1 container",
            bytes: Bytes::from(container),
            reason: &snug_reasons::schema::CONTAINER_NOT_ACCEPTED,
            metadata: &[],
        },
        Refused {
            case: "a valid image cut inside a page",
            bytes: valid.slice(..valid.len() - 100),
            reason: &snug_reasons::schema::MALFORMED,
            metadata: &[("detail", "partial_page")],
        },
        Refused {
            case: "a SQLite database of someone else's tables",
            bytes: Bytes::from(userdb::edited(
                &[],
                "CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('a note');",
            )),
            reason: &snug_reasons::container::NOT_A_USER_DATABASE,
            metadata: &[],
        },
        Refused {
            case: "a user database with a view no hub writes",
            bytes: edit(
                &valid,
                "CREATE VIEW snug_peek AS SELECT * FROM snug_secrets;",
            ),
            reason: &snug_reasons::schema::HOSTILE_SCHEMA,
            metadata: &[("detail", "view"), ("object", "snug_peek")],
        },
        Refused {
            case: "a user database that carries a credential",
            bytes: with_secret(&valid),
            reason: &snug_reasons::schema::SECRETS_PRESENT,
            metadata: &[("secretRows", "1")],
        },
        Refused {
            case: "a user database at a storage version newer than this hub",
            bytes: Bytes::from(
                std::fs::read(snug_test_support::vector("userdb/future-v7.user.sqlite"))
                    .expect("the future-v7 vector"),
            ),
            reason: &snug_reasons::schema::SCHEMA_TOO_NEW,
            metadata: &[("foundVersion", "7"), ("supportedVersion", "6")],
        },
    ]
}

/// `image` with one credential in `snug_secrets`, as a user's own file holds it (an export
/// strips it).
pub(super) fn with_secret(image: &[u8]) -> Bytes {
    edit(
        image,
        "INSERT INTO snug_secrets (key, value) VALUES ('byok:anthropic', 'sk-ant-0123456789'); \
         VACUUM;",
    )
}

/// Asserts that `result` is the validation's refusal `refused` describes: its reason, the code
/// `snug-reasons` gives that reason, and its metadata.
#[track_caller]
pub(super) fn assert_image_refused(result: Result<impl fmt::Debug, Status>, refused: &Refused) {
    let code = reason_code(refused.reason);
    let status = assert_refused(result, code, refused.reason);
    for (key, value) in refused.metadata {
        assert_eq!(
            meta(&status, key).as_deref(),
            Some(*value),
            "{}: {key} of {status:?}",
            refused.case
        );
    }
}

/// The user's put ledger, newest first: each write's verdict, reason and revision.
pub(super) async fn writes(
    hub: &mut Hub,
    user: &str,
) -> Vec<(pb::Verdict, String, Option<String>)> {
    hub.client
        .list_ledger(pb::ListLedgerRequest {
            caller: caller(user, user),
            limit: 0,
        })
        .await
        .expect("ledger")
        .into_inner()
        .writes
        .iter()
        .map(|e| (e.verdict(), e.reason.clone(), e.revision.clone()))
        .collect()
}

async fn each_kind_of_bad_image_is_refused_with_its_reason_and_nothing_is_stored(backend: Backend) {
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    provision(&mut hub, "bob").await;
    let r1 = put(&mut hub, "alice", must_not_exist(), &image(60, 0))
        .await
        .expect("alice's first image");
    let cases = bad_images();
    // The metadata of every reason is looked at: a case whose status lost it fails.
    assert!(cases.iter().filter(|c| !c.metadata.is_empty()).count() >= 4);
    for refused in &cases {
        // As the first write of a user without an image, and as the next write of one with.
        let first = Put::new("bob", must_not_exist(), refused.bytes.clone())
            .send(&mut hub)
            .await;
        assert_image_refused(first, refused);
        let next = Put::new("alice", must_match(&r1.revision), refused.bytes.clone())
            .send(&mut hub)
            .await;
        assert_image_refused(next, refused);
        // An upload that declares no length is judged the same.
        let undeclared = Put {
            declare_length: false,
            ..Put::new("alice", must_match(&r1.revision), refused.bytes.clone())
        }
        .send(&mut hub)
        .await;
        assert_image_refused(undeclared, refused);
    }
    // Nothing was stored or ledgered: bob has no image, alice's is still r1, and her ledger holds
    // its acceptance only.
    assert_no_image(&mut hub, "bob").await;
    assert!(history(&mut hub, "bob").await.is_empty());
    assert!(writes(&mut hub, "bob").await.is_empty());
    assert_eq!(head(&mut hub, "alice", None).await.expect("head"), r1);
    assert_eq!(history(&mut hub, "alice").await.len(), 1);
    assert_eq!(
        writes(&mut hub, "alice").await,
        [(
            pb::Verdict::Accepted,
            String::new(),
            Some(r1.revision.clone())
        )]
    );
    // The refusals held nothing back: a valid image is the next write.
    let r2 = put(&mut hub, "alice", must_match(&r1.revision), &image(64, 0))
        .await
        .expect("a valid image after the refusals");
    assert_eq!(r2.base.as_deref(), Some(r1.revision.as_str()));
}

async fn free_space_that_holds_a_deleted_value_is_stored_zeroed(backend: Backend) {
    const CANARY: &[u8] = b"CANARY-deleted-without-vacuum-";
    let Some(mut hub) = start(backend, |_| {}).await else {
        return;
    };
    provision(&mut hub, "alice").await;
    // Longer than a page, so the value leaves bytes both in its leaf's free space and on a freed
    // overflow page.
    let value = String::from_utf8(CANARY.repeat(200)).expect("ascii");
    let sent = Bytes::from(userdb::edited(
        &image(65, 0),
        &format!(
            "PRAGMA secure_delete = OFF; \
             INSERT INTO snug_settings (key, value) VALUES ('test:canary', '\"{value}\"'); \
             DELETE FROM snug_settings WHERE key = 'test:canary';"
        ),
    ));
    // The premise: the image as sent holds the deleted value.
    assert!(
        contains(&sent, CANARY),
        "the deleted value is in the free space"
    );

    let r1 = put(&mut hub, "alice", must_not_exist(), &sent)
        .await
        .expect("an image with dirty free space is accepted");
    assert_ne!(
        r1.sha256,
        sha256_hex(&sent),
        "the revision is of other bytes"
    );
    assert_eq!(r1.size, sent.len() as u64, "zeroing keeps the length");
    let (info, stored, _) = get(&mut hub, "alice", None).await.expect("get");
    assert_eq!(info, r1);
    assert!(!contains(&stored, CANARY), "the deleted value was stored");
    assert_eq!(sha256_hex(&stored), r1.sha256);
    // Only the free space changed: the stored image is the one sent with it zeroed.
    assert_eq!(stored, snug_schema::scrub_free_space(&sent).expect("scrub"));
    // The store never held the value: no file of the embedded store has it.
    if backend == Backend::Sqlite {
        let found: Vec<String> = snug_test_support::files(&hub.runtime.dir)
            .into_iter()
            .filter(|(_, bytes)| contains(bytes, CANARY))
            .map(|(path, _)| path)
            .collect();
        assert!(found.is_empty(), "the deleted value is in {found:?}");
    }
}
