//! The download has its name (Part II §10, issue 17 point 11): every image the hub offers for
//! download, the current one and a named revision, by GET and HEAD, is
//! `attachment; filename="snug-user.snug"`.

use snug_e2e::{Http, Hub, Options, Payload, bearer, etag_revision, put_userdb, userdb_vector};

const DOWNLOAD_NAME: &str = "attachment; filename=\"snug-user.snug\"";

#[tokio::test]
async fn the_current_image_and_every_named_revision_download_as_snug_user_snug() {
    let hub = Hub::start(Options::default()).await;
    let http = Http::new(hub.http);
    let token = hub.add_user("alice");
    let auth = bearer(&token);
    let first = etag_revision(
        &put_userdb(
            &http,
            &token,
            ("if-none-match", "*"),
            userdb_vector("sample-v6.export.snug"),
        )
        .await,
    );
    let second = etag_revision(
        &put_userdb(
            &http,
            &token,
            ("if-match", &first),
            userdb_vector("fresh-v6.export.snug"),
        )
        .await,
    );

    // The older revision is named whatever it is: the name is the artifact's, not the revision's.
    let paths = [
        "/userdb".to_owned(),
        format!("/userdb/revisions/{first}"),
        format!("/userdb/revisions/{second}"),
    ];
    for path in &paths {
        for method in ["GET", "HEAD"] {
            let answer = http
                .send(method, path, &[("authorization", &auth)], Payload::Empty)
                .await;
            assert_eq!(answer.status, 200, "{method} {path}");
            assert_eq!(
                answer.header("content-disposition"),
                DOWNLOAD_NAME,
                "{method} {path}"
            );
        }
    }
}

#[tokio::test]
async fn the_openapi_document_lists_the_download_name_on_every_image_response() {
    let document: serde_json::Value =
        serde_json::from_str(snug_gateway::routes::OPENAPI).expect("the document is JSON");
    let named = &document["components"]["headers"]["DownloadName"]["description"];
    assert!(
        named.as_str().is_some_and(|d| d.contains("snug-user.snug")),
        "{named}"
    );
    for path in ["/userdb", "/userdb/revisions/{rev}"] {
        for method in ["get", "head"] {
            let header = &document["paths"][path][method]["responses"]["200"]["headers"]["Content-Disposition"];
            assert_eq!(
                header["$ref"], "#/components/headers/DownloadName",
                "{method} {path}"
            );
        }
    }
}
