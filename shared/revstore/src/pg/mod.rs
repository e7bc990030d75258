//! `PgStore`: the store in PostgreSQL, for hubs that run several replicas (feature `postgres`).
//!
//! Everything lives in the database, chunk bytes included (`bytea`), so replicas are stateless and
//! any number of them can share one store. The compare-and-swap is a transaction that locks the
//! user's pointer row (`SELECT … FOR UPDATE`). Reclamation and commits are ordered by one advisory
//! lock per schema: every commit holds it shared while it checks that its chunks exist and swaps
//! the pointer; reclamation holds it exclusively while it decides and deletes.

use std::{collections::HashSet, io, sync::Arc};

use bytes::{Bytes, BytesMut};
use deadpool_postgres::Pool;
use futures::Stream;
use sha2::{Digest as _, Sha256};
use tokio_postgres::{GenericClient, Row};

mod inspect;
pub(crate) mod listen;
mod packs;
mod put;
mod reclaim;

use crate::{
    cas::Accepted,
    chunk::{Batch, ChunkSink, Ingested},
    config::StoreConfig,
    error::{OpenError, ProvisionError, PutError, ReadError, ReclaimError, StorageError},
    integrity, manifest, migrate,
    objects::Bucket as Objects,
    pack,
    protocol::{self, Primitives, ReadBack},
    store::{BaseImage, Held, ImageBody, ImageDownload, RevStore},
    types::{
        Digest, ErasureReport, IntegrityReport, JournalEntry, Principal, PutLedgerEntry,
        PutOutcome, PutRequest, ReclaimReport, ReclaimedKind, RestoreRequest, Revision,
        RevisionInfo, ServedEntry, StorageStats, StoreId, Timestamp, UsageReport, UserId, Verdict,
    },
};

pub use snug_pg::{PgConfig, PgTlsError};

/// Chunks fetched or inserted per statement.
const CHUNK_BATCH: usize = 256;

/// `store_meta.chunks_in` of a store whose chunk bytes are `bytea` rows.
const ROWS: &str = "postgres";

/// The PostgreSQL store.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.inner.schema)
            .finish_non_exhaustive()
    }
}

struct Inner {
    pool: Pool,
    /// Where chunk bytes live when not in the `chunks` rows: the object store's pack objects.
    objects: Option<Objects>,
    config: StoreConfig,
    store_id: StoreId,
    chunk_size: usize,
    schema: Option<String>,
    /// The advisory lock that orders commits (shared) against reclamation (exclusive).
    lock_key: i64,
    write_health: crate::write_health::WriteHealth,
    /// The subscriptions to the users' commits, woken by the listener (`listen.rs`).
    revisions: Arc<crate::Revisions>,
    /// The channel every replica's commits notify on.
    channel: String,
    /// The listener's task, stopped with the store.
    listener: tokio::task::AbortHandle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl PgStore {
    /// Connects, creates the schema if needed and migrates the store's tables forward.
    ///
    /// Several replicas may call this at once: migrations run under an advisory lock.
    pub async fn connect(pg: PgConfig, config: StoreConfig) -> Result<Self, OpenError> {
        Self::connect_migrating(pg, None, config, migrate::POSTGRES).await
    }

    /// [`PgStore::connect`] for a store whose chunk bytes live in an S3-compatible bucket (pack
    /// objects) while PostgreSQL keeps everything else. A store keeps the bytes where it was
    /// created to keep them: opening it with another bucket, or a store with its bytes in rows
    /// with a bucket (or the reverse), is refused.
    pub async fn connect_with_objects(
        pg: PgConfig,
        bucket: Objects,
        config: StoreConfig,
    ) -> Result<Self, OpenError> {
        Self::connect_migrating(pg, Some(bucket), config, migrate::POSTGRES).await
    }

    /// [`PgStore::connect`], applying only the migrations of `known` (tests open a store as an
    /// earlier release left it).
    async fn connect_migrating(
        pg: PgConfig,
        objects: Option<Objects>,
        config: StoreConfig,
        known: &[migrate::Migration],
    ) -> Result<Self, OpenError> {
        // One connection rule for every store (snug-pg): a bad URL, TLS setting or schema name
        // is the database being unreachable as configured.
        let pool = snug_pg::pool(&pg).map_err(StorageError::unavailable)?;
        let key_source = format!("snug-revstore:{}", pg.schema.as_deref().unwrap_or(""));
        let digest = Sha256::digest(key_source.as_bytes());
        let lock_key = i64::from_le_bytes(
            <[u8; 8]>::try_from(&digest[..8]).map_err(StorageError::unavailable)?,
        );
        let mut client = pool.get().await.map_err(StorageError::from)?;
        if let Some(schema) = &pg.schema {
            // Concurrent CREATE SCHEMA IF NOT EXISTS can race on the catalog; the advisory lock
            // serialises replicas starting together.
            let tx = client.transaction().await.map_err(StorageError::from)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock_key])
                .await
                .map_err(StorageError::from)?;
            tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .await
                .map_err(StorageError::from)?;
            tx.commit().await.map_err(StorageError::from)?;
        }
        {
            let tx = client.transaction().await.map_err(StorageError::from)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock_key])
                .await
                .map_err(StorageError::from)?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS revstore_migrations (version BIGINT PRIMARY KEY, checksum TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            )
            .await
            .map_err(StorageError::from)?;
            let applied: Vec<(i64, String)> = tx
                .query("SELECT version, checksum FROM revstore_migrations", &[])
                .await
                .map_err(StorageError::from)?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            for m in migrate::plan(&applied, known)? {
                tx.batch_execute(m.sql).await.map_err(StorageError::from)?;
                tx.execute(
                    "INSERT INTO revstore_migrations (version, checksum) VALUES ($1, $2)",
                    &[&m.version, &migrate::checksum(m.sql)],
                )
                .await
                .map_err(StorageError::from)?;
            }
            tx.execute(
                "INSERT INTO store_meta (key, value) VALUES ('chunk_size', $1) ON CONFLICT (key) DO NOTHING",
                &[&config.chunk_size.to_string()],
            )
            .await
            .map_err(StorageError::from)?;
            // Replicas connecting at once race here; the first id stored is every replica's.
            tx.execute(
                "INSERT INTO store_meta (key, value) VALUES ('store_id', $1) ON CONFLICT (key) DO NOTHING",
                &[&StoreId::generate().map_err(StorageError::from)?.as_str()],
            )
            .await
            .map_err(StorageError::from)?;
            // Where the bytes live is fixed when the first image is stored; a store that already
            // holds images from before this key existed keeps them in rows.
            let wanted = objects.as_ref().map_or(ROWS, Objects::location);
            tx.execute(
                "INSERT INTO store_meta (key, value) SELECT 'chunks_in', CASE WHEN EXISTS (SELECT 1 FROM images) THEN $2 ELSE $1 END ON CONFLICT (key) DO NOTHING",
                &[&wanted, &ROWS],
            )
            .await
            .map_err(StorageError::from)?;
            let recorded: String = tx
                .query_one("SELECT value FROM store_meta WHERE key = 'chunks_in'", &[])
                .await
                .map_err(StorageError::from)?
                .get(0);
            if recorded != wanted {
                return Err(OpenError::BytesElsewhere {
                    recorded,
                    configured: wanted.to_owned(),
                });
            }
            tx.commit().await.map_err(StorageError::from)?;
        }
        let chunk_size: String = client
            .query_one("SELECT value FROM store_meta WHERE key = 'chunk_size'", &[])
            .await
            .map_err(StorageError::from)?
            .get(0);
        let chunk_size = chunk_size
            .parse::<usize>()
            .map_err(StorageError::unavailable)?;
        let store_id: String = client
            .query_one("SELECT value FROM store_meta WHERE key = 'store_id'", &[])
            .await
            .map_err(StorageError::from)?
            .get(0);
        let store_id = StoreId::new(store_id).map_err(StorageError::unavailable)?;
        drop(client);
        // Listening before the store answers anything: no subscriber can miss a commit made
        // after it subscribed. A session of its own, so a pooler in transaction mode (which
        // does not keep LISTEN) is no place for it.
        let revisions = crate::Revisions::new();
        let channel = listen::channel(pg.schema.as_deref());
        let listening = snug_pg::listen(&pg, &channel)
            .await
            .map_err(StorageError::unavailable)?;
        let listener = tokio::spawn(listen::run(
            pg.clone(),
            channel.clone(),
            revisions.clone(),
            listening,
        ))
        .abort_handle();
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                objects,
                write_health: crate::write_health::WriteHealth::new(config.clock.clone()),
                config,
                store_id,
                chunk_size,
                schema: pg.schema,
                lock_key,
                revisions,
                channel,
                listener,
            }),
        })
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StorageError> {
        Ok(self.inner.pool.get().await?)
    }

    fn now(&self) -> Timestamp {
        self.inner.config.clock.now()
    }

    /// Publication records of puts in flight (or crashed), for the crash test.
    #[doc(hidden)]
    pub async fn publications_in_flight(&self) -> Result<u64, StorageError> {
        let client = self.client().await?;
        let n: i64 = client
            .query_one("SELECT count(*) FROM publications", &[])
            .await?
            .get(0);
        Ok(n as u64)
    }

    /// Pack objects in the bucket that no pack row names, for the crash test.
    #[doc(hidden)]
    pub async fn unindexed_objects(&self) -> Result<Vec<String>, ReclaimError> {
        let listing = self.list_packs().await?;
        let client = self.client().await?;
        let indexed: HashSet<String> = client
            .query("SELECT name FROM packs", &[])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        Ok(listing
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| !indexed.contains(name))
            .collect())
    }

    /// Names of the tables in the store's schema, for the table-class completeness test.
    #[doc(hidden)]
    pub async fn table_names(&self) -> Result<Vec<String>, StorageError> {
        let client = self.client().await?;
        let rows = client
            .query("SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'", &[])
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

impl From<tokio_postgres::Error> for PutError {
    fn from(e: tokio_postgres::Error) -> Self {
        PutError::Storage(e.into())
    }
}

impl From<tokio_postgres::Error> for ReadError {
    fn from(e: tokio_postgres::Error) -> Self {
        ReadError::Storage(e.into())
    }
}

impl From<tokio_postgres::Error> for ReclaimError {
    fn from(e: tokio_postgres::Error) -> Self {
        ReclaimError::Storage(e.into())
    }
}

/// Takes the store's advisory lock shared for the rest of `tx`: what a put or a download
/// records under it (a lease, a publication's objects and chunks, a commit) is either seen by a
/// reclamation pass, which holds the lock exclusively, or made after the pass is done.
pub(crate) async fn lock_shared<C: GenericClient + Sync>(
    tx: &C,
    key: i64,
) -> Result<(), tokio_postgres::Error> {
    tx.execute("SELECT pg_advisory_xact_lock_shared($1)", &[&key])
        .await
        .map(|_| ())
}

fn corrupt(what: &str) -> StorageError {
    StorageError::Corrupt {
        object: what.to_owned(),
    }
}

fn digest_of(bytes: &[u8]) -> Result<Digest, StorageError> {
    Digest::from_slice(bytes).ok_or_else(|| corrupt("digest column"))
}

fn parse<T: std::str::FromStr>(s: &str) -> Result<T, StorageError> {
    s.parse().map_err(|_| corrupt("token column"))
}

fn parse_opt<T: std::str::FromStr>(s: Option<&str>) -> Result<Option<T>, StorageError> {
    s.map(parse).transpose()
}

const INFO_COLUMNS: &str = "revision, digest, size, accepted_at, principal, base, restored_from, retained, storage_version";

fn info_row(r: &Row) -> Result<RevisionInfo, StorageError> {
    Ok(RevisionInfo {
        revision: parse(r.get::<_, &str>(0))?,
        digest: digest_of(r.get::<_, &[u8]>(1))?,
        size: r.get::<_, i64>(2) as u64,
        accepted_at: Timestamp::from_unix_millis(r.get(3)),
        principal: parse(r.get::<_, &str>(4))?,
        storage_version: r
            .get::<_, Option<i64>>(8)
            .map(u32::try_from)
            .transpose()
            .map_err(|_| corrupt("storage_version column"))?,
        base: parse_opt(r.get::<_, Option<&str>>(5))?,
        restored_from: parse_opt(r.get::<_, Option<&str>>(6))?,
        retained: r.get(7),
    })
}

fn accepted_row(r: &Row) -> Result<Accepted, StorageError> {
    Ok(Accepted {
        revision: parse(r.get::<_, &str>(0))?,
        base: parse_opt(r.get::<_, Option<&str>>(1))?,
        digest: digest_of(r.get::<_, &[u8]>(2))?,
    })
}

async fn journal<C: GenericClient + Sync>(
    c: &C,
    at: Timestamp,
    kind: ReclaimedKind,
    subjects: &[String],
    user: Option<&str>,
) -> Result<(), StorageError> {
    if subjects.is_empty() {
        return Ok(());
    }
    c.execute(
        "INSERT INTO reclamations (at, kind, subject, user_id) SELECT $1, $2, s, $4 FROM unnest($3::text[]) AS s",
        &[&at.unix_millis(), &kind.as_str(), &subjects, &user],
    )
    .await?;
    Ok(())
}

/// The resolved manifest of the stored image `digest` (its chain of rows in one query,
/// `manifest.rs`); `None` when no such image is stored, a corruption error when its rows do not
/// resolve.
pub(crate) async fn resolved<C: GenericClient + Sync>(
    c: &C,
    digest: &Digest,
) -> Result<Option<manifest::Resolved>, StorageError> {
    let rows = c
        .query(
            "WITH RECURSIVE chain (n, digest, base, manifest) AS (
                 SELECT 0, digest, base, manifest FROM images WHERE digest = $1
                 UNION ALL
                 SELECT c.n + 1, i.digest, i.base, i.manifest FROM images i JOIN chain c ON i.digest = c.base
                 WHERE c.n <= $2
             )
             SELECT digest, base, manifest FROM chain ORDER BY n",
            &[&digest.as_bytes().as_slice(), &(manifest::MAX_CHAIN as i32)],
        )
        .await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let chain = rows
        .iter()
        .map(|r| {
            Ok((
                digest_of(r.get(0))?,
                manifest_row(r.get(1), r.get::<_, &[u8]>(2))?,
            ))
        })
        .collect::<Result<Vec<_>, StorageError>>()?;
    manifest::resolve(&chain)
        .map(Some)
        .ok_or_else(|| corrupt(&format!("image {digest}")))
}

/// The size and resolved manifest of the stored image `digest`, if there is one.
pub(crate) async fn stored_image<C: GenericClient + Sync>(
    c: &C,
    digest: &Digest,
) -> Result<Option<(u64, Vec<Digest>)>, StorageError> {
    let Some(row) = c
        .query_opt(
            "SELECT size FROM images WHERE digest = $1",
            &[&digest.as_bytes().as_slice()],
        )
        .await?
    else {
        return Ok(None);
    };
    let manifest = resolved(c, digest)
        .await?
        .ok_or_else(|| corrupt(&format!("image {digest}")))?;
    Ok(Some((row.get::<_, i64>(0) as u64, manifest.chunks)))
}

/// An `images` row's manifest columns.
fn manifest_row(base: Option<&[u8]>, body: &[u8]) -> Result<manifest::Row, StorageError> {
    Ok(manifest::Row {
        base: base.map(digest_of).transpose()?,
        body: body.to_vec(),
    })
}

/// The manifest row to insert for an image of `chunks` committed while `against` was the
/// user's current image (`manifest.rs`).
pub(crate) async fn manifest_to_store<C: GenericClient + Sync>(
    c: &C,
    chunks: &[Digest],
    against: Option<&Digest>,
) -> Result<manifest::Row, StorageError> {
    let against = match against {
        Some(d) => resolved(c, d).await?.map(|r| (*d, r)),
        None => None,
    };
    Ok(manifest::store(
        chunks,
        against.as_ref().map(|(d, r)| (d, r)),
    ))
}

/// Fetches chunks by digest, in the order given, verifying each against its address.
async fn fetch_chunks<C: GenericClient + Sync>(
    c: &C,
    wanted: &[Digest],
) -> Result<Vec<Bytes>, StorageError> {
    let keys: Vec<&[u8]> = wanted.iter().map(|d| d.as_bytes().as_slice()).collect();
    let rows = c
        .query(
            "SELECT hash, data FROM chunks WHERE hash = ANY($1)",
            &[&keys],
        )
        .await?;
    let mut found = std::collections::HashMap::with_capacity(rows.len());
    for r in &rows {
        let hash = digest_of(r.get::<_, &[u8]>(0))?;
        let data: &[u8] = r.get(1);
        if Digest::of(data) != hash {
            return Err(corrupt(&format!("chunk {hash}")));
        }
        found.insert(hash, Bytes::copy_from_slice(data));
    }
    wanted
        .iter()
        .map(|d| {
            found
                .get(d)
                .cloned()
                .ok_or_else(|| corrupt(&format!("chunk {d} (missing)")))
        })
        .collect()
}

impl PgStore {
    /// Reads every chunk back from the database and checks it against its address.
    async fn verify(&self, manifest: &[Digest]) -> Result<(), PutError> {
        let client = self.client().await?;
        let distinct: Vec<Digest> = manifest
            .iter()
            .copied()
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        for batch in distinct.chunks(CHUNK_BATCH) {
            fetch_chunks(&**client, batch).await?;
        }
        Ok(())
    }

    async fn manifest_of(
        &self,
        digest: &Digest,
    ) -> Result<Option<(u64, Vec<Digest>)>, StorageError> {
        let client = self.client().await?;
        stored_image(&**client, digest).await
    }

    async fn download(
        &self,
        user: &UserId,
        revision: Option<&Revision>,
        // None: read for the origin's own use, not served, so not in the served ledger.
        principal: Option<&Principal>,
    ) -> Result<ImageDownload, ReadError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // The lease is inserted under the advisory lock (shared), so a reclamation pass either
        // ran before (and the revision is not found) or runs after and sees the lease.
        lock_shared(&*tx, self.inner.lock_key).await?;
        let row = match revision {
            None => {
                tx.query_opt(
                    &format!("SELECT {INFO_COLUMNS} FROM users u JOIN revisions r ON r.user_id = u.user_id AND r.seq = u.current_seq WHERE u.user_id = $1"),
                    &[&user.as_str()],
                )
                .await?
            }
            Some(rev) => {
                tx.query_opt(&format!("SELECT {INFO_COLUMNS} FROM revisions WHERE user_id = $1 AND revision = $2"), &[&user.as_str(), &rev.as_str()])
                    .await?
            }
        };
        let info = match row.map(|r| info_row(&r)).transpose()? {
            Some(info) if info.retained => info,
            _ => return Err(ReadError::NotFound),
        };
        let expires = now.plus(self.inner.config.lease_ttl).unix_millis();
        let lease: i64 = tx
            .query_one(
                "INSERT INTO leases (digest, expires_at) VALUES ($1, $2) RETURNING id",
                &[&info.digest.as_bytes().as_slice(), &expires],
            )
            .await?
            .get(0);
        if let Some(principal) = principal {
            tx.execute(
                "INSERT INTO served (user_id, revision, at, principal) VALUES ($1, $2, $3, $4)",
                &[
                    &user.as_str(),
                    &info.revision.as_str(),
                    &now.unix_millis(),
                    &principal.as_str(),
                ],
            )
            .await?;
        }
        tx.commit().await?;
        drop(client);
        let lease = PgLease {
            pool: Some(self.inner.pool.clone()),
            id: lease,
        };
        if self.inner.objects.is_some() {
            let body = self.pack_body(&info.digest, Some(lease)).await?;
            return Ok(ImageDownload { info, body });
        }
        let (_, manifest) = self
            .manifest_of(&info.digest)
            .await?
            .ok_or_else(|| corrupt(&format!("image {}", info.digest)))?;
        let batches: Vec<Vec<Digest>> = manifest
            .chunks(CHUNK_BATCH)
            .map(<[Digest]>::to_vec)
            .collect();
        let pool = self.inner.pool.clone();
        let body = futures::stream::unfold(
            (batches.into_iter(), Some(lease), pool),
            |(mut batches, mut lease, pool)| async move {
                match batches.next() {
                    Some(batch) => {
                        let piece = async {
                            let client = pool.get().await?;
                            let chunks = fetch_chunks(&**client, &batch).await?;
                            let mut out =
                                BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
                            for c in chunks {
                                out.extend_from_slice(&c);
                            }
                            Ok::<_, StorageError>(out.freeze())
                        }
                        .await;
                        Some((piece, (batches, lease, pool)))
                    }
                    None => {
                        // Read to the end: release the lease before reporting the end, so a caller
                        // that reclaims next finds the image unprotected.
                        if let Some(l) = lease.as_mut() {
                            l.release().await;
                        }
                        None
                    }
                }
            },
        );
        Ok(ImageDownload {
            info,
            body: ImageBody::new(Box::pin(body)),
        })
    }
}

/// A download lease row; deleted when the download ends, or by a spawned task if it is dropped
/// early. A lease that is never deleted (a crashed replica) expires after `lease_ttl`.
pub(crate) struct PgLease {
    pool: Option<Pool>,
    id: i64,
}

impl PgLease {
    async fn release(&mut self) {
        if let Some(pool) = self.pool.take()
            && let Ok(client) = pool.get().await
        {
            let _ = client
                .execute("DELETE FROM leases WHERE id = $1", &[&self.id])
                .await;
        }
    }
}

impl Drop for PgLease {
    fn drop(&mut self) {
        if let (Some(pool), Ok(handle)) = (self.pool.take(), tokio::runtime::Handle::try_current())
        {
            let id = self.id;
            handle.spawn(async move {
                if let Ok(client) = pool.get().await {
                    let _ = client
                        .execute("DELETE FROM leases WHERE id = $1", &[&id])
                        .await;
                }
            });
        }
    }
}

impl RevStore for PgStore {
    fn store_id(&self) -> &StoreId {
        &self.inner.store_id
    }

    fn revisions(&self) -> &Arc<crate::Revisions> {
        &self.inner.revisions
    }

    fn backend(&self) -> &'static str {
        if self.inner.objects.is_some() {
            "postgres+objects"
        } else {
            "postgres"
        }
    }

    async fn health(&self) -> Result<(), StorageError> {
        self.client().await?.query_one("SELECT 1", &[]).await?;
        if let Some(objects) = &self.inner.objects {
            objects.health().await?;
        }
        self.inner.write_health.verdict()
    }

    async fn provision_user(&self, user: &UserId) -> Result<bool, ProvisionError> {
        self.provision(user).await
    }

    async fn put<B>(&self, request: PutRequest, body: B) -> Result<PutOutcome, PutError>
    where
        B: Stream<Item = io::Result<Bytes>> + Send,
    {
        protocol::put(self, request, body).await
    }

    async fn read_base(&self, user: &UserId, revision: &Revision) -> Result<BaseImage, ReadError> {
        protocol::read_base(self, user, revision).await
    }

    async fn put_held(
        &self,
        request: PutRequest,
        image: Bytes,
        derived: Option<(&BaseImage, Digest)>,
    ) -> Result<Held, PutError> {
        protocol::put_held(self, request, image, derived).await
    }

    async fn restore(&self, request: RestoreRequest) -> Result<PutOutcome, PutError> {
        protocol::restore(self, request).await
    }

    async fn head(&self, user: &UserId) -> Result<RevisionInfo, ReadError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!("SELECT {INFO_COLUMNS} FROM users u JOIN revisions r ON r.user_id = u.user_id AND r.seq = u.current_seq WHERE u.user_id = $1"),
                &[&user.as_str()],
            )
            .await?;
        row.map(|r| info_row(&r))
            .transpose()?
            .ok_or(ReadError::NotFound)
    }

    async fn head_revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<RevisionInfo, ReadError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {INFO_COLUMNS} FROM revisions WHERE user_id = $1 AND revision = $2"
                ),
                &[&user.as_str(), &revision.as_str()],
            )
            .await?;
        row.map(|r| info_row(&r))
            .transpose()?
            .filter(|info| info.retained)
            .ok_or(ReadError::NotFound)
    }

    async fn get(&self, user: &UserId, principal: &Principal) -> Result<ImageDownload, ReadError> {
        self.download(user, None, Some(principal)).await
    }

    async fn get_revision(
        &self,
        user: &UserId,
        revision: &Revision,
        principal: &Principal,
    ) -> Result<ImageDownload, ReadError> {
        self.download(user, Some(revision), Some(principal)).await
    }

    async fn read_revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<ImageDownload, ReadError> {
        self.download(user, Some(revision), None).await
    }

    async fn list_revisions(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<RevisionInfo>, StorageError> {
        let client = self.client().await?;
        client
            .query(&format!("SELECT {INFO_COLUMNS} FROM revisions WHERE user_id = $1 ORDER BY seq DESC LIMIT $2"), &[&user.as_str(), &(limit as i64)])
            .await?
            .iter()
            .map(info_row)
            .collect()
    }

    async fn served_ledger(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<ServedEntry>, StorageError> {
        let client = self.client().await?;
        client
            .query("SELECT revision, at, principal FROM served WHERE user_id IN ($1, $3) ORDER BY id DESC LIMIT $2", &[&user.as_str(), &(limit as i64), &crate::erase::pseudonym(user.as_str())])
            .await?
            .iter()
            .map(|r| {
                Ok(ServedEntry { revision: parse(r.get::<_, &str>(0))?, at: Timestamp::from_unix_millis(r.get(1)), principal: parse(r.get::<_, &str>(2))? })
            })
            .collect()
    }

    async fn put_ledger(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<PutLedgerEntry>, StorageError> {
        let client = self.client().await?;
        client
            .query(
                "SELECT verdict, reason, revision, at, principal FROM put_ledger WHERE user_id IN ($1, $3) ORDER BY id DESC LIMIT $2",
                &[&user.as_str(), &(limit as i64), &crate::erase::pseudonym(user.as_str())],
            )
            .await?
            .iter()
            .map(|r| {
                let verdict: &str = r.get(0);
                Ok(PutLedgerEntry {
                    verdict: if verdict == "accepted" {
                        Verdict::Accepted
                    } else {
                        Verdict::Refused { reason: r.get::<_, Option<String>>(1).unwrap_or_default() }
                    },
                    revision: parse_opt(r.get::<_, Option<&str>>(2))?,
                    at: Timestamp::from_unix_millis(r.get(3)),
                    principal: parse(r.get::<_, &str>(4))?,
                })
            })
            .collect()
    }

    async fn reclaim(&self) -> Result<ReclaimReport, ReclaimError> {
        crate::reclaim::run(self, &self.inner.config.retention, self.now()).await
    }

    async fn usage(&self, user: &UserId) -> Result<UsageReport, StorageError> {
        let (history, current) = crate::erase::holdings(self, user).await?;
        crate::erase::usage(
            self,
            &history,
            current.as_ref(),
            Primitives::chunk_size(self),
        )
        .await
    }

    async fn erase(&self, user: &UserId) -> Result<ErasureReport, ReclaimError> {
        let erased = crate::erase::erase(self, user, self.now()).await?;
        // Every replica's subscribers of the user learn they have no image now. The erasure
        // stands whatever happens to the notification; a lost one is made good when a listener
        // resyncs.
        let notified = async {
            self.client()
                .await?
                .execute(
                    "SELECT pg_notify($1, $2)",
                    &[&self.inner.channel, &listen::payload_erased(user)],
                )
                .await?;
            Ok::<_, StorageError>(())
        };
        if let Err(err) = notified.await {
            tracing::warn!(error = %err, "could not tell the replicas' subscribers of an erasure");
        }
        Ok(erased)
    }

    async fn journal(&self, limit: usize) -> Result<Vec<JournalEntry>, StorageError> {
        let client = self.client().await?;
        client
            .query(
                "SELECT at, kind, subject, user_id FROM reclamations ORDER BY id DESC LIMIT $1",
                &[&(limit as i64)],
            )
            .await?
            .iter()
            .map(|r| {
                Ok(JournalEntry {
                    at: Timestamp::from_unix_millis(r.get(0)),
                    kind: ReclaimedKind::parse(r.get(1)).ok_or_else(|| corrupt("journal kind"))?,
                    subject: r.get(2),
                    user: parse_opt(r.get::<_, Option<&str>>(3))?,
                })
            })
            .collect()
    }

    async fn stats(&self) -> Result<StorageStats, StorageError> {
        let client = self.client().await?;
        let r = client
            .query_one("SELECT (SELECT count(*) FROM images), (SELECT count(*) FROM chunks), (SELECT coalesce(sum(coalesce(len, length(data))), 0)::bigint FROM chunks)", &[])
            .await?;
        Ok(StorageStats {
            images: r.get::<_, i64>(0) as u64,
            chunks: r.get::<_, i64>(1) as u64,
            chunk_bytes: r.get::<_, i64>(2) as u64,
        })
    }

    async fn check_integrity_watched(
        &self,
        progress: &tokio::sync::watch::Sender<IntegrityReport>,
    ) -> Result<IntegrityReport, StorageError> {
        integrity::check(self, progress).await
    }
}

#[cfg(test)]
mod tests;
