//! §8.2 isolation over `snug.schema.v1`: a file in which two registered apps share an
//! `appDataToken` is refused by ValidateSyncImage, CheckImport and MigrateUserDatabase, and
//! InstallApp refuses an app id whose token another app holds.

use super::*;

/// The sample app's id with its letters upper-cased: the same token as `SAMPLE_APP`.
fn upper_sample_app() -> String {
    SAMPLE_APP.to_ascii_uppercase()
}

/// The reference's default export with a second app registered under the upper-case id.
fn colliding_export() -> Bytes {
    edited(
        &userdb("sample-v6.export.snug"),
        &format!(
            "INSERT INTO snug_apps (app_id, display_name, uses_db, current_version, created_at, updated_at) \
             VALUES ('{}', 'Twin', 1, 1, 't', 't');",
            upper_sample_app()
        ),
    )
}

#[track_caller]
fn assert_collision(status: &Status) {
    assert_refused(
        status,
        Code::InvalidArgument,
        &snug_reasons::schema::APP_TOKEN_COLLISION,
    );
    let mut ids = [metadata(status, "appId"), metadata(status, "otherAppId")];
    ids.sort();
    assert_eq!(
        ids,
        [Some(upper_sample_app()), Some(SAMPLE_APP.to_owned())],
        "{}",
        status.message()
    );
    assert_eq!(
        metadata(status, "token").as_deref(),
        Some(snug_schema::app_data_token(SAMPLE_APP).as_str())
    );
}

#[tokio::test]
async fn a_file_with_two_apps_of_one_token_is_refused_where_it_enters() {
    let mut client = client().await;
    let bytes = colliding_export();
    let digest = sha2::Sha256::digest(&bytes);
    // Without the twin the same file is accepted everywhere, so the refusal is the twin's.
    validate(&mut client, userdb("sample-v6.export.snug"))
        .await
        .expect("the reference export");

    assert_collision(
        &validate(&mut client, bytes.clone())
            .await
            .expect_err("validate"),
    );
    assert_collision(
        &check_import(&mut client, bytes.clone(), None, false)
            .await
            .expect_err("check import"),
    );
    assert_collision(
        &migrate(&mut client, bytes.clone())
            .await
            .expect_err("migrate"),
    );
    let inspection = inspect(&mut client, bytes.clone()).await.expect("inspect");
    let refusal = inspection.import_refusal.expect("import refusal");
    assert_eq!(refusal.reason, &snug_reasons::schema::APP_TOKEN_COLLISION);
    assert_eq!(
        sha2::Sha256::digest(&bytes),
        digest,
        "the input is unchanged"
    );
}

#[tokio::test]
async fn install_app_refuses_an_id_whose_token_another_app_holds() {
    let mut client = client().await;
    let status = apply(
        &mut client,
        userdb("sample-v6.export.snug"),
        vec![install(&upper_sample_app(), "<p>twin</p>")],
    )
    .await
    .expect_err("install");
    assert_collision(&status);
    assert_eq!(metadata(&status, "operation").as_deref(), Some("0"));
}
