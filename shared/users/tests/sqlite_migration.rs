//! A `users.db` written by an earlier release (schema version 1) opens and migrates forward with
//! its users and tokens intact (and its tokens start sessions); a file newer than this build is
//! refused and left alone.

use rusqlite::{Connection, params};
use sha2::{Digest as _, Sha256};
use snug_users::{Directory, DirectoryConfig, USERS_FILE, UsersError};

/// The schema text of version 1, as the gateway of earlier releases applied it.
const OLD_SCHEMA_V1: &str = "
-- class: record — who may use the hub; written only by `snug-hub users`.
CREATE TABLE users (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
) STRICT;
-- class: record — credentials, as SHA-256 of the token; deleted with their user.
CREATE TABLE tokens (
    hash       BLOB PRIMARY KEY CHECK (length(hash) = 32),
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX tokens_by_user ON tokens(user_id);
";

/// Writes a v1 file as the old code did: one user with two tokens, one user with none.
fn v1_file(dir: &std::path::Path, tokens: &[&str]) {
    std::fs::create_dir_all(dir).expect("dir");
    let conn = Connection::open(dir.join(USERS_FILE)).expect("open");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("wal");
    conn.execute_batch(OLD_SCHEMA_V1).expect("schema");
    conn.pragma_update(None, "user_version", 1)
        .expect("version");
    conn.execute(
        "INSERT INTO users (id, name, created_at) VALUES ('u0123', 'old-alice', 1700000000000), ('u4567', 'old-bob', 1700000000001)",
        [],
    )
    .expect("users");
    for token in tokens {
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        conn.execute(
            "INSERT INTO tokens (hash, user_id, created_at) VALUES (?1, 'u0123', 1700000000002)",
            params![&hash[..]],
        )
        .expect("token");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_file_migrates_forward_with_its_users_and_tokens() {
    let root = tempfile::tempdir().expect("dir");
    let dir = root.path().join("gateway");
    let tokens = ["snug_old-token-one", "snug_old-token-two"];
    v1_file(&dir, &tokens);
    let config = DirectoryConfig::Sqlite { dir: dir.clone() };
    let directory = Directory::open(&config).await.expect("open and migrate");
    for token in tokens {
        let found = directory
            .authenticate_token(token)
            .await
            .expect("lookup")
            .expect("an old token still works");
        assert_eq!(found.user.id, "u0123");
        assert_eq!(found.user.name, "old-alice");
        assert!(!found.user.disabled);
        assert_eq!(found.user.quota_bytes, None);
        let hash = Sha256::digest(token.as_bytes());
        assert_eq!(
            found.token_id,
            hex::encode(&hash[..4]),
            "short id from the hash"
        );
    }
    let listed = directory.list().await.expect("list");
    assert_eq!(
        listed
            .iter()
            .map(|u| (u.user.name.as_str(), u.tokens.len()))
            .collect::<Vec<_>>(),
        [("old-alice", 2), ("old-bob", 0)]
    );
    // An old token is revocable by its short id, and the new columns work.
    let first = listed[0].tokens[0].id.clone();
    directory.revoke_token(&first).await.expect("revoke");
    assert_eq!(directory.list().await.expect("list")[0].tokens.len(), 1);
    directory.disable("old-bob").await.expect("disable");
    directory
        .set_quota("old-alice", Some(1 << 20))
        .await
        .expect("quota");
    drop(directory);
    // Reopening a migrated file migrates nothing.
    let directory = Directory::open(&config).await.expect("reopen");
    assert_eq!(
        directory.list().await.expect("list")[0].user.quota_bytes,
        Some(1 << 20)
    );
    // An old token starts a session, which its revocation ends.
    let mut old_token = None;
    for token in tokens {
        if directory
            .authenticate_token(token)
            .await
            .expect("lookup")
            .is_some()
        {
            old_token = Some(token);
        }
    }
    let old_token = old_token.expect("one old token is left");
    let session = directory
        .start_token_session(old_token, 1, std::time::Duration::from_secs(60))
        .await
        .expect("start")
        .expect("an old token starts a session");
    assert!(
        directory
            .session(&session.id, 2)
            .await
            .expect("lookup")
            .is_some()
    );
    let second = directory.list().await.expect("list")[0].tokens[0]
        .id
        .clone();
    directory.revoke_token(&second).await.expect("revoke");
    assert!(
        directory
            .session(&session.id, 2)
            .await
            .expect("lookup")
            .is_none()
    );
    drop(directory);
    let conn = Connection::open(dir.join(USERS_FILE)).expect("open");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_newer_than_this_build_is_refused_untouched() {
    let root = tempfile::tempdir().expect("dir");
    let dir = root.path().join("gateway");
    v1_file(&dir, &[]);
    let conn = Connection::open(dir.join(USERS_FILE)).expect("open");
    conn.pragma_update(None, "user_version", 7)
        .expect("version");
    drop(conn);
    let err = Directory::open(&DirectoryConfig::Sqlite { dir: dir.clone() })
        .await
        .expect_err("too new");
    assert!(matches!(err, UsersError::TooNew(7)), "{err:?}");
    let conn = Connection::open(dir.join(USERS_FILE)).expect("open");
    let columns: i64 = conn
        .query_row("SELECT count(*) FROM pragma_table_info('users')", [], |r| {
            r.get(0)
        })
        .expect("columns");
    assert_eq!(columns, 3, "nothing was migrated");
}
