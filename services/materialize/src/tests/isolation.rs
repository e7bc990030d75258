//! §8.2 isolation over `snug.materialize.v1`: in a user database where two registered apps share
//! an `appDataToken` (`A7F3…` beside `a7f3…`), every RPC that reads or writes app data refuses
//! either namespace with APP_TOKEN_COLLISION and returns no bytes.

use super::*;

fn upper_app() -> String {
    UUID_APP.to_ascii_uppercase()
}

/// The reference sample with a twin of its UUID app registered under the upper-case id.
fn colliding_sample() -> Bytes {
    edited(
        &sample(),
        &format!(
            "INSERT INTO snug_apps (app_id, display_name, uses_db, current_version, created_at, updated_at) \
             VALUES ('{}', 'Twin', 1, 1, 't', 't');",
            upper_app()
        ),
    )
}

#[track_caller]
fn assert_collision(status: &Status, app_id: &str, other: &str) {
    assert_refused(
        status,
        Code::InvalidArgument,
        &snug_reasons::materialize::APP_TOKEN_COLLISION,
    );
    assert_eq!(metadata(status, "appId").as_deref(), Some(app_id));
    assert_eq!(metadata(status, "otherAppId").as_deref(), Some(other));
    assert_eq!(
        metadata(status, "token").as_deref(),
        Some(AppNamespace::new(UUID_APP).token())
    );
}

#[tokio::test]
async fn every_rpc_refuses_either_namespace_of_a_shared_token() {
    let mut client = client().await;
    let user = colliding_sample();
    let upper = upper_app();
    for (app, other) in [(UUID_APP, upper.as_str()), (upper.as_str(), UUID_APP)] {
        let status = materialize(&mut client, user.clone(), app)
            .await
            .expect_err("materialize");
        assert_collision(&status, app, other);
        let status = export(&mut client, user.clone(), app)
            .await
            .expect_err("export");
        assert_collision(&status, app, other);
        let status = execute(&mut client, user.clone(), app, &["SELECT * FROM trades"])
            .await
            .expect_err("execute");
        assert_collision(&status, app, other);
        let status = apply_ddl(&mut client, user.clone(), app, &["DROP TABLE trades"])
            .await
            .expect_err("apply ddl");
        assert_collision(&status, app, other);
        let status = persist(&mut client, user.clone(), app, runtime_vector(UUID_APP))
            .await
            .expect_err("persist");
        assert_collision(&status, app, other);
    }
    // The other app of the file is outside the pair and still served.
    materialize(&mut client, user, CHESS_APP)
        .await
        .expect("chess");
}
