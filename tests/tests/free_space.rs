//! Deleted credentials never survive on the hub (§9.2, §11.3, issue 17 point 6): an image whose
//! `snug_secrets` rows were deleted without VACUUM is stored with its free space zeroed, so no
//! byte of the credential is in the store's files or in any download, and `Repr-Digest`, the
//! ETag'd revision's hash and the replay check all refer to the stored bytes.

use std::path::Path;

use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use snug_e2e::{Http, Hub, Options, Payload, bearer, etag_revision, get_userdb, put_userdb};
use snug_test_support::files;

const CREDENTIAL: &[u8] = b"sk-ant-E2E-DELETED-CREDENTIAL-0xC0FFEE";
const LIVE_MARKER: &[u8] = b"a-live-setting-the-scan-must-find-0xBEEF";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The reference's default export, edited on disk without VACUUM: a live setting holding
/// `LIVE_MARKER`, and a credential stored and then deleted (its bytes left in free space).
fn image_with_deleted_credential() -> Vec<u8> {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("user.snug");
    std::fs::write(&path, snug_e2e::userdb_vector("sample-v6.export.snug")).expect("write");
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.execute_batch("PRAGMA secure_delete = OFF;")
        .expect("pragma");
    conn.execute(
        "INSERT OR REPLACE INTO snug_settings (key, value) VALUES ('theme', ?1)",
        [format!(
            "\"{}\"",
            std::str::from_utf8(LIVE_MARKER).expect("ascii")
        )],
    )
    .expect("setting");
    conn.execute(
        "INSERT INTO snug_secrets (key, value) VALUES ('byok:anthropic', ?1)",
        [std::str::from_utf8(CREDENTIAL).expect("ascii")],
    )
    .expect("secret");
    conn.execute("DELETE FROM snug_secrets", [])
        .expect("delete");
    drop(conn);
    let image = std::fs::read(&path).expect("read");
    assert!(contains(&image, CREDENTIAL), "the delete left the bytes");
    image
}

fn repr_digest(bytes: &[u8]) -> String {
    format!(
        "sha-256=:{}:",
        base64::engine::general_purpose::STANDARD.encode(Sha256::digest(bytes))
    )
}

#[tokio::test]
async fn a_credential_deleted_without_vacuum_is_neither_stored_nor_served() {
    let hub = Hub::start(Options::default()).await;
    let http = Http::new(hub.http);
    let token = hub.add_user("alice");
    let image = image_with_deleted_credential();

    let created = put_userdb(&http, &token, ("if-none-match", "*"), image.clone()).await;
    assert_eq!(
        created.status,
        204,
        "{:?}",
        String::from_utf8_lossy(&created.body)
    );
    let revision = etag_revision(&created);

    // Served: the current image and the revision download carry no byte of it, and the digest
    // is of what is served.
    let got = get_userdb(&http, &token).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body.len(), image.len(), "zeroed, not truncated");
    assert_ne!(
        got.body.as_ref(),
        image.as_slice(),
        "the free space was rewritten"
    );
    assert!(!contains(&got.body, CREDENTIAL));
    assert!(!contains(&got.body, b"E2E-DELETED"));
    assert!(contains(&got.body, LIVE_MARKER), "live content is served");
    assert_eq!(got.header("repr-digest"), repr_digest(&got.body));
    let by_revision = http
        .send(
            "GET",
            &format!("/userdb/revisions/{revision}"),
            &[("authorization", &bearer(&token))],
            Payload::Empty,
        )
        .await;
    assert_eq!(by_revision.status, 200);
    assert_eq!(by_revision.body, got.body);
    assert_eq!(by_revision.header("repr-digest"), repr_digest(&got.body));
    let listed = http
        .send(
            "GET",
            "/userdb/revisions",
            &[("authorization", &bearer(&token))],
            Payload::Empty,
        )
        .await;
    let sha = hex::encode(Sha256::digest(&got.body));
    assert!(
        listed.body.windows(sha.len()).any(|w| w == sha.as_bytes()),
        "the revision's recorded hash is the stored bytes': {}",
        String::from_utf8_lossy(&listed.body)
    );

    // Live content unchanged: the served image is the pushed one with zeroed free space.
    let dir = tempfile::tempdir().expect("dir");
    let (sent, served) = (dir.path().join("sent.db"), dir.path().join("served.db"));
    std::fs::write(&sent, &image).expect("write");
    std::fs::write(&served, &got.body).expect("write");
    assert_eq!(dump(&served), dump(&sent));

    // Stored: no file of the hub holds a byte of it, though the scan does see image bytes.
    let stored = files(hub.data_dir());
    assert!(
        stored.iter().any(|(_, bytes)| contains(bytes, LIVE_MARKER)),
        "the scan reads the store's files"
    );
    for (path, bytes) in &stored {
        assert!(!contains(bytes, CREDENTIAL), "{path} holds the credential");
        assert!(!contains(bytes, b"E2E-DELETED"), "{path} holds part of it");
    }

    // The replay check compares the stored bytes: the same push again is the same write.
    let again = put_userdb(&http, &token, ("if-none-match", "*"), image.clone()).await;
    assert_eq!(
        again.status,
        204,
        "{:?}",
        String::from_utf8_lossy(&again.body)
    );
    assert_eq!(
        etag_revision(&again),
        revision,
        "replayed, not a new revision"
    );
}

/// Every row of every table, sorted per table, and `integrity_check`.
fn dump(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).expect("open");
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .expect("check");
    assert_eq!(check, "ok");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("names");
    let mut out = Vec::new();
    for table in ["sqlite_master".to_owned()].into_iter().chain(tables) {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM \"{table}\""))
            .expect("select");
        let n = stmt.column_count();
        let mut rows: Vec<String> = stmt
            .query_map([], |row| {
                let values: Vec<rusqlite::types::Value> =
                    (0..n).map(|i| row.get(i)).collect::<Result<_, _>>()?;
                Ok(format!("{table}: {values:?}"))
            })
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("values");
        rows.sort();
        out.extend(rows);
    }
    out
}
