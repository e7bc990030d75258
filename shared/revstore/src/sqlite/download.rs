//! The embedded store's downloads: a plan of the revision read under the writer lock with its
//! lease (the current revision's kept for the next download, `serve.rs`), its served-ledger
//! entry written before the first byte, and its bytes streamed from the packs and checked
//! against the image's manifest on the way out.

use std::sync::Arc;

use bytes::Bytes;
use rusqlite::{OptionalExtension, params};
use tokio::sync::mpsc;

use super::{INFO_COLUMNS, Inner, SqliteStore, info_row, packs, serve::Plan, spool::ServedRow};
use crate::{
    chunk,
    error::{ReadError, StorageError},
    store::{Guarded, ImageBody, ImageDownload, LeaseGuard},
    types::{Principal, Revision, UserId},
};

impl Inner {
    /// Reads a download's plan from the rows and takes its lease; a plan of the current revision
    /// is cached for the next download.
    pub(super) fn open_download(
        &self,
        user: &UserId,
        revision: Option<&Revision>,
    ) -> Result<(Arc<Plan>, LeaseGuard), ReadError> {
        // Under the writer lock, which reclamation also holds: either the revision was already
        // reclaimed (and is not found), or the lease taken here protects it from the next pass.
        let conn = self.writer();
        let row = match revision {
            None => conn
                .prepare_cached(&format!(
                    "SELECT {INFO_COLUMNS} FROM users u JOIN revisions r ON r.user_id = u.user_id AND r.seq = u.current_seq WHERE u.user_id = ?1"
                ))?
                .query_row([user.as_str()], info_row)
                .optional()?,
            Some(rev) => conn
                .prepare_cached(&format!("SELECT {INFO_COLUMNS} FROM revisions WHERE user_id = ?1 AND revision = ?2"))?
                .query_row(params![user.as_str(), rev.as_str()], info_row)
                .optional()?,
        };
        let info = match row {
            Some(info) if info.retained => info,
            _ => return Err(ReadError::NotFound),
        };
        let extents: Vec<u8> = conn
            .prepare_cached("SELECT extents FROM images WHERE digest = ?1")?
            .query_row([info.digest.as_bytes().as_slice()], |r| r.get(0))
            .optional()?
            .ok_or_else(|| StorageError::Corrupt {
                object: format!("image {}", info.digest),
            })?;
        let extents = packs::decode_extents(&extents).ok_or_else(|| StorageError::Corrupt {
            object: format!("image {}", info.digest),
        })?;
        let paths = Inner::pack_paths(&conn, extents.iter().map(|e| e.pack), &self.packs_dir)?;
        let files = packs::open_packs(&paths).map_err(StorageError::from)?;
        let lease = self.leases.take(info.digest);
        let plan = Arc::new(Plan::new(info, extents, files, revision.is_none()));
        if revision.is_none() {
            self.heads.insert(user.as_str(), plan.clone());
        }
        drop(conn);
        Ok((plan, lease))
    }
}

impl SqliteStore {
    pub(super) async fn download(
        &self,
        user: &UserId,
        revision: Option<&Revision>,
        // None: read for the origin's own use, not served, so not in the served ledger.
        principal: Option<&Principal>,
    ) -> Result<ImageDownload, ReadError> {
        let inner = &self.inner;
        let cached = match revision {
            None => inner.heads.hit(user.as_str(), &inner.leases),
            Some(_) => None,
        };
        let (plan, lease) = match cached {
            Some(hit) => hit,
            None => {
                let _permit = inner
                    .opens
                    .acquire()
                    .await
                    .map_err(StorageError::unavailable)?;
                let (user, revision) = (user.clone(), revision.cloned());
                self.blocking(move |inner| inner.open_download(&user, revision.as_ref()))
                    .await?
            }
        };
        // The entry is written before the first byte is handed out; when it cannot be, the
        // lease is released and nothing is served.
        let at = inner.now().unix_millis();
        plan.note_served(at);
        if let Some(principal) = principal {
            let (recorded, start_writer) = inner.served.push(&ServedRow {
                user: user.as_str().to_owned(),
                revision: plan.info.revision.as_str().to_owned(),
                at,
                principal: principal.as_str().to_owned(),
            })?;
            if start_writer {
                inner.start_served_writer();
            }
            recorded
                .await
                .map_err(|_| StorageError::unavailable("the served-ledger writer stopped"))??;
        }
        let info = plan.info.clone();
        let body = match plan.bytes() {
            Some(bytes) => ImageBody::new(Guarded::new(futures::stream::iter([Ok(bytes)]), lease)),
            None => self.read_plan(plan, lease)?,
        };
        Ok(ImageDownload { info, body })
    }

    /// Streams a plan's bytes from its packs in two stages on the blocking pool: one thread reads
    /// the pieces, running ahead by up to two; another checks each against the image's manifest
    /// and hands it on, running ahead of the caller by up to two. Reading and hashing each cost
    /// about as much as the other for a warm pack, so on two cores the check costs little wall
    /// time. A small image's bytes are kept in its plan for the next download, and so is a large
    /// one's where it can be kept sealed ([`Plan::gather`]).
    ///
    /// Every piece is whole chunks, checked against the image's manifest before it is handed on
    /// (or kept): a byte damaged on disk ends the download with [`StorageError::Corrupt`] and
    /// never reaches the caller. Bytes kept in memory were checked this way when they were read.
    /// The manifest (32 bytes per chunk, 1/128 of a 4 KiB-chunked image) is read with each
    /// download rather than kept in the plan, where 256 cached plans of large images would hold
    /// up to 128 MiB of it.
    pub(super) fn read_plan(
        &self,
        plan: Arc<Plan>,
        lease: LeaseGuard,
    ) -> Result<ImageBody, ReadError> {
        let chunk_size = self.inner.chunk_size;
        let tasks = plan.read_tasks(chunk_size).map_err(StorageError::from)?;
        let whole = tasks.len() == 1;
        let (read_tx, read_rx) = std::sync::mpsc::sync_channel::<std::io::Result<Bytes>>(2);
        let reader = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            for task in tasks {
                // A closed channel: the checking stage ended (a failure, or a dropped download).
                if read_tx.send(task.read(&reader.pieces)).is_err() {
                    return;
                }
            }
        });
        let inner = self.inner.clone();
        let (tx, rx) = mpsc::channel::<Result<Bytes, StorageError>>(2);
        tokio::task::spawn_blocking(move || {
            let manifest = match inner.manifest(&plan.info.digest) {
                Ok(manifest) => manifest,
                Err(err) => {
                    let _ = tx.blocking_send(Err(err));
                    return;
                }
            };
            let mut unread = manifest.as_slice();
            let sealer = &inner.config.sealer;
            let mut gathering = plan.gather(sealer, || {
                inner.heads.make_room(&plan, inner.now().unix_millis())
            });
            for read in read_rx {
                let piece = read.map_err(StorageError::from).and_then(|bytes| {
                    let (named, rest) = unread
                        .split_at_checked(bytes.len().div_ceil(chunk_size))
                        .unwrap_or((unread, &[]));
                    unread = rest;
                    chunk::check_run(named, chunk_size, &bytes)?;
                    Ok(bytes)
                });
                if whole && let Ok(bytes) = &piece {
                    plan.keep(bytes, sealer);
                }
                // Gathered after it is handed on, so the download does not wait for the copy.
                let gathered = gathering.as_ref().and(piece.as_ref().ok()).cloned();
                let failed = piece.is_err();
                // A closed channel means the caller dropped the download.
                if tx.blocking_send(piece).is_err() || failed {
                    return;
                }
                if let (Some(gathering), Some(bytes)) = (&mut gathering, gathered) {
                    gathering.push(&bytes);
                }
            }
            if let Some(gathering) = gathering {
                gathering.finish();
            }
        });
        let pieces = Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|piece| (piece, rx))
        }));
        Ok(ImageBody::new(Guarded::new(pieces, lease)))
    }
}
