//! `AnyStore`: one type over every backend, for services that choose the backend at run time.

use std::io;

use bytes::Bytes;
use futures::Stream;

use crate::{
    MemStore, SqliteStore,
    error::{ProvisionError, PutError, ReadError, ReclaimError, StorageError},
    store::{BaseImage, Held, ImageDownload, RevStore},
    types::{
        Digest, ErasureReport, IntegrityReport, JournalEntry, Principal, PutLedgerEntry,
        PutOutcome, PutRequest, ReclaimReport, RestoreRequest, Revision, RevisionInfo, ServedEntry,
        StorageStats, StoreId, UsageReport, UserId,
    },
};

/// Any backend, chosen at run time (by configuration) rather than by a type parameter.
#[derive(Clone, Debug)]
pub enum AnyStore {
    /// In memory.
    Memory(MemStore),
    /// Embedded SQLite plus pack files.
    Sqlite(SqliteStore),
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(crate::PgStore),
}

macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            AnyStore::Memory($s) => $e,
            AnyStore::Sqlite($s) => $e,
            #[cfg(feature = "postgres")]
            AnyStore::Postgres($s) => $e,
        }
    };
}

impl RevStore for AnyStore {
    fn backend(&self) -> &'static str {
        each!(self, s => s.backend())
    }

    fn store_id(&self) -> &StoreId {
        each!(self, s => s.store_id())
    }

    async fn health(&self) -> Result<(), StorageError> {
        each!(self, s => s.health().await)
    }

    fn revisions(&self) -> &std::sync::Arc<crate::Revisions> {
        each!(self, s => s.revisions())
    }

    async fn provision_user(&self, user: &UserId) -> Result<bool, ProvisionError> {
        each!(self, s => s.provision_user(user).await)
    }

    async fn put<B>(&self, request: PutRequest, body: B) -> Result<PutOutcome, PutError>
    where
        B: Stream<Item = io::Result<Bytes>> + Send,
    {
        each!(self, s => s.put(request, body).await)
    }

    async fn read_base(&self, user: &UserId, revision: &Revision) -> Result<BaseImage, ReadError> {
        each!(self, s => s.read_base(user, revision).await)
    }

    async fn put_held(
        &self,
        request: PutRequest,
        image: Bytes,
        derived: Option<(&BaseImage, Digest)>,
    ) -> Result<Held, PutError> {
        each!(self, s => s.put_held(request, image, derived).await)
    }

    async fn restore(&self, request: RestoreRequest) -> Result<PutOutcome, PutError> {
        each!(self, s => s.restore(request).await)
    }

    async fn head(&self, user: &UserId) -> Result<RevisionInfo, ReadError> {
        each!(self, s => s.head(user).await)
    }

    async fn head_revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<RevisionInfo, ReadError> {
        each!(self, s => s.head_revision(user, revision).await)
    }

    async fn get(&self, user: &UserId, principal: &Principal) -> Result<ImageDownload, ReadError> {
        each!(self, s => s.get(user, principal).await)
    }

    async fn get_revision(
        &self,
        user: &UserId,
        revision: &Revision,
        principal: &Principal,
    ) -> Result<ImageDownload, ReadError> {
        each!(self, s => s.get_revision(user, revision, principal).await)
    }

    async fn read_revision(
        &self,
        user: &UserId,
        revision: &Revision,
    ) -> Result<ImageDownload, ReadError> {
        each!(self, s => s.read_revision(user, revision).await)
    }

    async fn list_revisions(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<RevisionInfo>, StorageError> {
        each!(self, s => s.list_revisions(user, limit).await)
    }

    async fn served_ledger(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<ServedEntry>, StorageError> {
        each!(self, s => s.served_ledger(user, limit).await)
    }

    async fn put_ledger(
        &self,
        user: &UserId,
        limit: usize,
    ) -> Result<Vec<PutLedgerEntry>, StorageError> {
        each!(self, s => s.put_ledger(user, limit).await)
    }

    async fn reclaim(&self) -> Result<ReclaimReport, ReclaimError> {
        each!(self, s => s.reclaim().await)
    }

    async fn usage(&self, user: &UserId) -> Result<UsageReport, StorageError> {
        each!(self, s => s.usage(user).await)
    }

    async fn erase(&self, user: &UserId) -> Result<ErasureReport, ReclaimError> {
        each!(self, s => s.erase(user).await)
    }

    async fn journal(&self, limit: usize) -> Result<Vec<JournalEntry>, StorageError> {
        each!(self, s => s.journal(limit).await)
    }

    async fn stats(&self) -> Result<StorageStats, StorageError> {
        each!(self, s => s.stats().await)
    }

    async fn check_integrity_watched(
        &self,
        progress: &tokio::sync::watch::Sender<IntegrityReport>,
    ) -> Result<IntegrityReport, StorageError> {
        each!(self, s => s.check_integrity_watched(progress).await)
    }
}
