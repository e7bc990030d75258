//! PostgreSQL-specific checks; they run when `SNUG_TEST_POSTGRES_URL` names a server.

use std::collections::BTreeSet;

use super::*;
use crate::{migrate::RUNNER_TABLE, types::Precondition};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_table_has_exactly_one_declared_class() {
    let Ok(url) = std::env::var("SNUG_TEST_POSTGRES_URL") else {
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = format!("revstore_classes_{}", std::process::id());
    let pg = PgConfig {
        url,
        schema: Some(schema),
        pool_size: 2,
    };
    let store = PgStore::connect(pg.clone(), StoreConfig::default())
        .await
        .expect("connect");
    // A second connect (another replica starting) migrates nothing and succeeds, and is the
    // same store: the same identity (issue 35).
    let replica = PgStore::connect(pg, StoreConfig::default())
        .await
        .expect("reconnect");
    assert_eq!(replica.store_id(), store.store_id());
    assert_eq!(store.store_id().as_str().len(), 32);
    let actual: BTreeSet<String> = store
        .table_names()
        .await
        .expect("tables")
        .into_iter()
        .collect();
    let tables = migrate::declared_tables(migrate::POSTGRES).expect("migrations");
    for (table, class) in &tables {
        assert!(class.is_some(), "table {table} has no class");
    }
    let mut declared: BTreeSet<String> = tables.into_keys().collect();
    declared.insert(RUNNER_TABLE.0.to_owned());
    assert_eq!(actual, declared);
}

/// A SQLite header stamped with storage version `version`, then filler up to `len` bytes.
fn stamped(version: u32, len: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(version as u8))
        .collect();
    bytes[..16].copy_from_slice(b"SQLite format 3\0");
    bytes[60..64].copy_from_slice(&version.to_be_bytes());
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrating_from_schema_1_backfills_storage_versions_from_the_chunks() {
    let Ok(url) = std::env::var("SNUG_TEST_POSTGRES_URL") else {
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL is not set");
        return;
    };
    let id = format!(
        "{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    );
    let (now_schema, previous_schema) = (
        format!("revstore_mig_now_{id}"),
        format!("revstore_mig_prev_{id}"),
    );
    let pg = |schema: &str| PgConfig {
        url: url.clone(),
        schema: Some(schema.to_owned()),
        pool_size: 4,
    };
    let clock = Arc::new(crate::ManualClock::new(Timestamp::from_unix_millis(
        1_767_225_600_000,
    )));
    let config = StoreConfig {
        chunk_size: 1024,
        retention: crate::Retention {
            keep_newest: 4,
            grace: std::time::Duration::ZERO,
            orphan_after: std::time::Duration::from_secs(3600),
        },
        clock: clock.clone(),
        ..StoreConfig::default()
    };
    let user = UserId::new("alice").expect("user");
    let images = [
        stamped(5, 3000),
        stamped(7, 3000),
        b"not a database at all, but long enough to hold a header: ".repeat(4),
        stamped(4, 3000),
        stamped(6, 5000),
    ];

    // The history, written by this release.
    let store = PgStore::connect(pg(&now_schema), config.clone())
        .await
        .expect("connect");
    store.provision_user(&user).await.expect("provision");
    let mut revisions = Vec::new();
    let mut precondition = Precondition::MustNotExist;
    for bytes in &images {
        let request = PutRequest {
            user: user.clone(),
            precondition: precondition.clone(),
            principal: Principal::new("device").expect("principal"),
            idempotency_key: None,
            expected_length: None,
            quota_bytes: None,
        };
        let body = futures::stream::iter([Ok::<_, io::Error>(Bytes::from(bytes.clone()))]);
        let info = store.put(request, body).await.expect("put").info;
        precondition = Precondition::MustMatch(info.revision.clone());
        revisions.push(info);
        clock.advance(std::time::Duration::from_secs(1));
    }
    // Retention takes the first revision's bytes: its version can no longer be read.
    assert_eq!(store.reclaim().await.expect("reclaim").revisions, 1);
    // Damage a byte of the fourth image's user_version in its first chunk.
    let client = store.client().await.expect("client");
    let first = super::resolved(&**client, &revisions[3].digest)
        .await
        .expect("manifest")
        .expect("stored")
        .chunks[0];
    let damaged = client
        .execute(
            "UPDATE chunks SET data = overlay(data PLACING '\\xee'::bytea FROM 64 FOR 1)
             WHERE hash = $1",
            &[&first.as_bytes().as_slice()],
        )
        .await
        .expect("damage");
    assert_eq!(damaged, 1);
    // A release before migration 7 kept every manifest whole.
    let mut whole = Vec::new();
    for r in client
        .query("SELECT digest FROM images WHERE base IS NOT NULL", &[])
        .await
        .expect("images")
    {
        let digest = super::digest_of(r.get(0)).expect("digest");
        let resolved = super::resolved(&**client, &digest).await.expect("manifest");
        whole.push((
            digest,
            crate::chunk::encode_manifest(&resolved.expect("stored").chunks),
        ));
    }
    for (digest, manifest) in whole {
        client
            .execute(
                "UPDATE images SET base = NULL, manifest = $2 WHERE digest = $1",
                &[&digest.as_bytes().as_slice(), &manifest],
            )
            .await
            .expect("whole manifest");
    }

    // The same rows in a schema made by the previous release's migrations alone.
    let previous = PgStore::connect_migrating(
        pg(&previous_schema),
        None,
        config.clone(),
        &migrate::POSTGRES[..1],
    )
    .await
    .expect("schema 1");
    let old = previous.client().await.expect("client");
    let has_column: bool = old
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'revisions' AND column_name = 'storage_version')",
            &[&previous_schema],
        )
        .await
        .expect("columns")
        .get(0);
    assert!(!has_column, "schema 1 has no storage_version");
    // Users first without their pointers, which reference revisions not copied yet.
    old.execute(
        &format!("INSERT INTO users (user_id, created_at, last_seq) SELECT user_id, created_at, last_seq FROM {now_schema}.users"),
        &[],
    )
    .await
    .expect("users");
    let tables: Vec<String> = old
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE' AND table_name NOT IN ('users', 'revstore_migrations')",
            &[&previous_schema],
        )
        .await
        .expect("tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    for table in tables {
        let columns: Vec<String> = old
            .query(
                "SELECT column_name::text FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
                &[&previous_schema, &table],
            )
            .await
            .expect("columns")
            .iter()
            .map(|r| r.get(0))
            .collect();
        let columns = columns.join(", ");
        old.execute(
            &format!(
                "INSERT INTO {table} ({columns}) SELECT {columns} FROM {now_schema}.{} ON CONFLICT DO NOTHING",
                // Migration 6 renamed the put ledger's table.
                if table == "put_verdicts" { "put_ledger" } else { table.as_str() }
            ),
            &[],
        )
        .await
        .expect("copy rows");
    }
    old.execute(
        &format!("UPDATE users p SET current_seq = c.current_seq FROM {now_schema}.users c WHERE p.user_id = c.user_id"),
        &[],
    )
    .await
    .expect("pointers");
    drop((old, previous));

    let migrated = PgStore::connect(pg(&previous_schema), config)
        .await
        .expect("connect migrates");
    let listed: Vec<(Revision, Option<u32>, bool)> = migrated
        .list_revisions(&user, 10)
        .await
        .expect("list")
        .into_iter()
        .rev()
        .map(|r| (r.revision, r.storage_version, r.retained))
        .collect();
    let expected: Vec<(Revision, Option<u32>, bool)> = revisions
        .iter()
        .zip([None, Some(7), None, None, Some(6)])
        .zip([false, true, true, true, true])
        .map(|((r, version), retained)| (r.revision.clone(), version, retained))
        .collect();
    // Reclaimed bytes and a chunk that fails its address check stay unknown; the rest are read.
    assert_eq!(listed, expected);
    assert_eq!(
        migrated.head(&user).await.expect("head").storage_version,
        Some(6)
    );
    let client = migrated.client().await.expect("client");
    let applied: Vec<i64> = client
        .query(
            "SELECT version FROM revstore_migrations ORDER BY version",
            &[],
        )
        .await
        .expect("versions")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let every: Vec<i64> = crate::migrate::POSTGRES.iter().map(|m| m.version).collect();
    assert_eq!(applied, every);
    client
        .batch_execute(&format!(
            "DROP SCHEMA {now_schema} CASCADE; DROP SCHEMA {previous_schema} CASCADE"
        ))
        .await
        .expect("drop the test schemas");
}

/// Issue 38 point 4 on PostgreSQL (`manifest::tests::small_edits_store_small_manifests`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_edits_store_small_manifests() {
    let Ok(url) = std::env::var("SNUG_TEST_POSTGRES_URL") else {
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL is not set");
        return;
    };
    let pg = PgConfig {
        url,
        schema: Some(format!("revstore_small_edits_{}", std::process::id())),
        pool_size: 2,
    };
    let config = crate::manifest::tests::config_for_small_edits();
    let chunk = config.chunk_size as usize;
    let store = PgStore::connect(pg, config).await.expect("connect");
    let manifest_bytes = async || -> i64 {
        store
            .client()
            .await
            .expect("client")
            .query_one("SELECT sum(length(manifest))::bigint FROM images", &[])
            .await
            .expect("sum")
            .get(0)
    };
    crate::manifest::tests::small_edits_store_small_manifests(&store, chunk, manifest_bytes).await;
}

/// Issue 40 point 3: a commit through one replica wakes the subscribers on every replica (the
/// commit's `pg_notify`), and a replica whose listening connection is lost listens again and
/// wakes its subscribers to read the store, so a commit made meanwhile is not missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_wakes_subscribers_on_every_replica_and_a_lost_listener_resyncs() {
    let Ok(url) = std::env::var("SNUG_TEST_POSTGRES_URL") else {
        eprintln!("skipped: SNUG_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = format!("revstore_events_{}", std::process::id());
    let pg = PgConfig {
        url,
        schema: Some(schema.clone()),
        pool_size: 2,
    };
    let a = PgStore::connect(pg.clone(), StoreConfig::default())
        .await
        .expect("connect a");
    let b = PgStore::connect(pg.clone(), StoreConfig::default())
        .await
        .expect("connect b");
    // Another hub's store in the same database hears none of it.
    let other = PgStore::connect(
        PgConfig {
            schema: Some(format!("{schema}_other")),
            ..pg.clone()
        },
        StoreConfig::default(),
    )
    .await
    .expect("connect other");
    let user = UserId::new("alice").expect("user");
    a.provision_user(&user).await.expect("provision");
    let woken = async |subscription: &mut crate::Subscription, within: u64| {
        tokio::time::timeout(
            std::time::Duration::from_millis(within),
            subscription.changed(),
        )
        .await
        .is_ok()
    };
    let (mut on_a, mut on_b, mut on_other) = (
        a.revisions().subscribe(&user),
        b.revisions().subscribe(&user),
        other.revisions().subscribe(&user),
    );
    assert!(!woken(&mut on_b, 300).await, "nothing committed yet");
    let put = async |store: &PgStore, precondition: Precondition, seed: u8| {
        let request = PutRequest {
            user: user.clone(),
            precondition,
            principal: Principal::new("device").expect("principal"),
            idempotency_key: None,
            expected_length: None,
            quota_bytes: None,
        };
        let body = futures::stream::iter([Ok::<_, io::Error>(Bytes::from(stamped(
            6,
            9000 + seed as usize,
        )))]);
        store.put(request, body).await
    };
    let r1 = put(&a, Precondition::MustNotExist, 1)
        .await
        .expect("put")
        .info;
    assert!(woken(&mut on_a, 10_000).await, "the committing replica");
    assert!(woken(&mut on_b, 10_000).await, "another replica");
    assert_eq!(b.head(&user).await.expect("head"), r1);
    assert!(!woken(&mut on_other, 300).await, "another hub's store");

    // B's listening connection is cut: it listens again and wakes its subscribers, whatever
    // was committed while it was gone.
    let listening = a
        .client()
        .await
        .expect("client")
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&listen::channel(Some(&schema))],
        )
        .await
        .expect("terminate");
    assert_eq!(
        listening, 2,
        "one listening session per replica of this store"
    );
    let r2 = put(&a, Precondition::MustMatch(r1.revision.clone()), 2)
        .await
        .expect("put")
        .info;
    assert!(woken(&mut on_b, 10_000).await, "resynced after the loss");
    assert_eq!(b.head(&user).await.expect("head"), r2);
    // And it hears commits again.
    while woken(&mut on_b, 500).await {}
    let r3 = put(&b, Precondition::MustMatch(r2.revision.clone()), 3)
        .await
        .expect("put")
        .info;
    assert!(woken(&mut on_b, 10_000).await, "listening again");
    assert_eq!(a.head(&user).await.expect("head"), r3);
}
