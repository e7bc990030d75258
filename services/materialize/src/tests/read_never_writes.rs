//! ExecuteSql never writes on a read: with the app's schema record lost (its tables still at
//! rest), a SELECT returns no user database, even with `read_only`, and names the unregistered
//! tables; only statements that write return a new user database, registering them.

use super::*;

fn unregistered_sample() -> Bytes {
    edited(
        &sample(),
        &format!("DELETE FROM snug_app_schemas WHERE app_id = '{UUID_APP}';"),
    )
}

#[tokio::test]
async fn a_select_returns_no_user_database_and_names_the_unregistered_tables() {
    let mut client = client().await;
    let user = unregistered_sample();
    for read_only in [false, true] {
        let (result, bytes) = execute_with(
            &mut client,
            user.clone(),
            UUID_APP,
            &["SELECT count(*) FROM trades"],
            None,
            read_only,
        )
        .await
        .unwrap_or_else(|status| panic!("read_only {read_only}: {status:?}"));
        assert!(!result.user_db_changed, "read_only {read_only}");
        assert!(bytes.is_empty());
        assert!(!result.report.expect("report").wrote);
        assert_eq!(result.unregistered_tables, ["trades", "equities"]);
    }
}

#[tokio::test]
async fn a_write_returns_the_user_database_with_the_tables_registered() {
    let mut client = client().await;
    let (result, bytes) = execute(
        &mut client,
        unregistered_sample(),
        UUID_APP,
        &["INSERT INTO trades (symbol, qty) VALUES ('NEW', 1)"],
    )
    .await
    .expect("execute");
    assert!(result.user_db_changed);
    assert!(result.unregistered_tables.is_empty());
    let (_dir, conn) = sqlite(&bytes);
    let registered: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM snug_app_schemas WHERE app_id = ?1)",
            [UUID_APP],
            |row| row.get(0),
        )
        .expect("query");
    assert!(registered);
}
