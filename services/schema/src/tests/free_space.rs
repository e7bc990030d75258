//! ValidateSyncImage and free space (§9.2, §11.3): the response names the ranges to zero and
//! hashes the image with them zeroed, so a credential deleted without VACUUM is never stored.

use super::*;

const CREDENTIAL: &[u8] = b"sk-ant-DELETED-BUT-NOT-VACUUMED-4242";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The reference's export with a credential stored, then deleted without VACUUM.
fn deleted_credential_image() -> Bytes {
    let image = edited(
        &userdb("sample-v6.export.snug"),
        &format!(
            "PRAGMA secure_delete = OFF; \
             INSERT INTO snug_secrets (key, value) VALUES ('byok:anthropic', '{}'); \
             DELETE FROM snug_secrets;",
            std::str::from_utf8(CREDENTIAL).expect("ascii")
        ),
    );
    assert!(contains(&image, CREDENTIAL), "the delete left the bytes");
    image
}

/// What the caller stores: `image` with the response's ranges zeroed.
fn stored(image: &[u8], response: &pb::ValidateSyncImageResponse) -> Vec<u8> {
    let mut out = image.to_vec();
    for range in &response.free_space {
        out[range.offset as usize..(range.offset + range.length) as usize].fill(0);
    }
    out
}

fn rows(bytes: &[u8]) -> Vec<String> {
    let (_dir, conn) = sqlite(bytes);
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .expect("integrity_check");
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
        let mut these: Vec<String> = stmt
            .query_map([], |row| {
                let values: Vec<rusqlite::types::Value> =
                    (0..n).map(|i| row.get(i)).collect::<Result<_, _>>()?;
                Ok(format!("{table}: {values:?}"))
            })
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("values");
        these.sort();
        out.extend(these);
    }
    out
}

#[tokio::test]
async fn validate_sync_image_names_the_free_space_to_zero() {
    let mut client = client().await;
    let image = deleted_credential_image();
    let before = sha2::Sha256::digest(&image);
    let response = validate(&mut client, image.clone())
        .await
        .expect("accepted: no row in snug_secrets");
    assert_eq!(
        sha2::Sha256::digest(&image),
        before,
        "the input is only read"
    );
    assert!(!response.free_space.is_empty());
    let stored = stored(&image, &response);
    assert!(!contains(&stored, CREDENTIAL), "no byte of the credential");
    assert!(!contains(&stored, b"DELETED-BUT-NOT"));
    assert_eq!(
        hex::encode(&response.sha256),
        hex::encode(sha2::Sha256::digest(&stored)),
        "the hash is of the bytes to store"
    );
    assert_eq!(rows(&stored), rows(&image), "live content unchanged");
    // What is stored validates again with nothing left to zero and the same hash.
    let again = validate(&mut client, Bytes::from(stored.clone()))
        .await
        .expect("stored image");
    assert!(again.free_space.is_empty());
    assert_eq!(again.sha256, response.sha256);
}

#[tokio::test]
async fn the_reference_exports_are_accepted_with_their_content_unchanged() {
    let mut client = client().await;
    for name in ["sample-v6.export.snug", "fresh-v6.export.snug"] {
        let export = userdb(name);
        let response = validate(&mut client, export.clone()).await.expect(name);
        let stored = stored(&export, &response);
        assert_eq!(rows(&stored), rows(&export), "{name}");
        assert_eq!(
            stored,
            snug_schema::scrub_free_space(&export).expect("walkable"),
            "{name}: the ranges are exactly the domain scrub"
        );
    }
}

#[tokio::test]
async fn pages_past_the_declared_size_are_refused() {
    let mut client = client().await;
    // SQLite reads only the pages the header declares, so bytes appended past them are no live
    // content and nothing a walk can vouch for: refused, not stored.
    let mut image = userdb("sample-v6.export.snug").to_vec();
    let mut page = vec![0u8; 4096];
    page[..CREDENTIAL.len()].copy_from_slice(CREDENTIAL);
    image.extend_from_slice(&page);
    let status = validate(&mut client, Bytes::from(image))
        .await
        .expect_err("trailing page");
    assert_refused(
        &status,
        Code::InvalidArgument,
        &snug_reasons::schema::MALFORMED,
    );
    assert_eq!(
        metadata(&status, "detail").as_deref(),
        Some("free_space_unaccounted"),
        "{}",
        status.message()
    );
}
