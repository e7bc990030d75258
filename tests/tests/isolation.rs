//! §8.2 isolation over HTTP: an image in which two registered apps share an `appDataToken`
//! (`A7F3…` beside `a7f3…`) is refused on `PUT /userdb`, and the per-app export of either app
//! from such an image (stored before the hub checked) is refused, never served.

use sha2::{Digest as _, Sha256};
use snug_e2e::{
    Http, Hub, Options, Payload, assert_error, bearer, push_unvalidated, put_userdb, user_id,
    userdb_vector,
};

const LOWER: &str = "a7f3b2c1-0d4e-4f5a-8b6c-9d0e1f2a3b4c";
const UPPER: &str = "A7F3B2C1-0D4E-4F5A-8B6C-9D0E1F2A3B4C";

/// The reference's default export with a twin of its sample app registered under the
/// upper-case id: the twin's token names the sample app's tables.
fn colliding_image() -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("twin.snug");
    std::fs::write(&path, userdb_vector("sample-v6.export.snug")).expect("write");
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.execute(
        "INSERT INTO snug_apps (app_id, display_name, uses_db, current_version, created_at, updated_at) \
         VALUES (?1, 'Twin', 1, 1, 't', 't')",
        [UPPER],
    )
    .expect("insert the twin");
    drop(conn);
    std::fs::read(&path).expect("read")
}

#[tokio::test]
async fn a_push_whose_apps_share_a_token_is_refused_and_nothing_is_stored() {
    let hub = Hub::start(Options::default()).await;
    let http = Http::new(hub.http);
    let token = hub.add_user("alice");
    let body = colliding_image();
    let digest = Sha256::digest(&body);

    let answer = put_userdb(&http, &token, ("if-none-match", "*"), body.clone()).await;
    assert_error(&answer, 400, "APP_TOKEN_COLLISION");
    let message = answer.json()["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains(LOWER) && message.contains(UPPER),
        "{message}"
    );
    assert_eq!(Sha256::digest(&body), digest);

    let stored = http
        .send(
            "GET",
            "/userdb",
            &[("authorization", &bearer(&token))],
            Payload::Empty,
        )
        .await;
    assert_eq!(stored.status, 404, "the refused image was not stored");
    // The same image without the twin is accepted, so the refusal is the twin's.
    let accepted = put_userdb(
        &http,
        &token,
        ("if-none-match", "*"),
        userdb_vector("sample-v6.export.snug"),
    )
    .await;
    assert_eq!(accepted.status, 204);
}

#[tokio::test]
async fn the_per_app_export_of_either_colliding_app_is_refused() {
    let hub = Hub::start(Options::default()).await;
    let http = Http::new(hub.http);
    let token = hub.add_user("alice");
    push_unvalidated(&hub, &user_id(&hub, "alice"), colliding_image()).await;
    let auth = bearer(&token);
    for app in [LOWER, UPPER] {
        let answer = http
            .send(
                "GET",
                &format!("/userdb/apps/{app}/export"),
                &[("authorization", &auth)],
                Payload::Empty,
            )
            .await;
        assert_error(&answer, 400, "APP_TOKEN_COLLISION");
        assert!(
            !answer.body.starts_with(b"SQLite format 3\0"),
            "no app data is served"
        );
    }
    // An app outside the pair is exported as before.
    let chess = http
        .send(
            "GET",
            "/userdb/apps/starter--chess/export",
            &[("authorization", &auth)],
            Payload::Empty,
        )
        .await;
    assert_eq!(chess.status, 200);
}
