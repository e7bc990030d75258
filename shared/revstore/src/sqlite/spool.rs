//! The served ledger's spool: each download's entry is appended to a file before the download's
//! first byte is handed out, and the entries are folded into the `served` table in bulk.
//!
//! Committing entries to SQLite as downloads opened them, even a few per transaction by group
//! commit, cost a transaction and two WAL pages per few downloads: at 32 concurrent downloads of a
//! 112 KiB image through the gateway, SQLite was a tenth of the hub's CPU, and the WAL took some 30
//! MB/s of writes and a checkpoint fsync every few hundred commits. Entries are written by one
//! writer on the blocking pool, everything queued meanwhile in one `write(2)`, while their
//! downloads wait. Not on the downloads' own threads: a write to a file can wait for the file
//! system's journal (behind another writer's fsync, say), and an async worker stalled there stalls
//! every request it runs. A write is as durable as the `synchronous=NORMAL` commit it replaces: in
//! the kernel's page cache when the call returns, so a crash of the process loses nothing, and
//! power loss may lose the last entries, as it may lose such a commit.
//!
//! Files: `served/<generation>.spool` (`.journal` as earlier versions named them, still folded),
//! records in the order their downloads opened. A fold seals
//! the current file (appends move on to the next generation), inserts the file's entries into
//! `served` and records its generation as folded in one durable transaction, then deletes the
//! file. A file at or below the folded generation (its deletion lost to a crash) is deleted
//! unread, so no entry is folded twice. Opening the store folds what an earlier process left.
//!
//! A record: the body's length (u32 LE), the first 8 bytes of the body's SHA-256, then the body:
//! `at` (i64 LE), then the user, the revision and the principal, each a u16 LE length and its
//! UTF-8 bytes. A torn or damaged record ends its file: records are only appended, and a failed
//! append is cut off again (or its file abandoned), so nothing whole follows one.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, Write as _},
    path::{Path, PathBuf},
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
};

use rusqlite::{Connection, params};
use sha2::{Digest as _, Sha256};
use tokio::sync::oneshot;

use super::durable;
use crate::error::StorageError;

/// Entries appended since the last fold after which a fold is started. Folds are also made by
/// every read of the ledger, every reclamation pass and every explicit checkpoint.
pub(super) const FOLD_ENTRIES: usize = 4096;

const EXTENSION: &str = "spool";

/// What earlier versions named these files: one such a process left is folded like any other.
const LEGACY_EXTENSION: &str = "journal";
/// Length and digest prefix.
const HEADER: usize = 4 + 8;
/// `at` and three length-prefixed fields of at most `u16::MAX` bytes.
const MAX_BODY: usize = 8 + 3 * (2 + u16::MAX as usize);

/// One served-ledger entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ServedRow {
    pub(super) user: String,
    pub(super) revision: String,
    pub(super) at: i64,
    pub(super) principal: String,
}

/// The spool of the served ledger (see the module docs).
#[derive(Debug)]
pub(super) struct ServedSpool {
    dir: PathBuf,
    /// Records waiting for the writer.
    queue: Mutex<Queue>,
    appender: Mutex<Appender>,
    /// Held by a fold from sealing the current file until every sealed file is folded, so folds
    /// (background, reader-made, at open) run one at a time and in generation order.
    folding: Mutex<()>,
    /// A background fold has been asked for and has not yet sealed the file.
    fold_asked: AtomicBool,
}

/// Once written (or refused), each record's download is told.
type Waiting = Vec<(Vec<u8>, oneshot::Sender<Result<(), StorageError>>)>;

#[derive(Debug, Default)]
struct Queue {
    records: Waiting,
    /// A writer is running and will take whatever is queued.
    writing: bool,
}

#[derive(Debug)]
struct Appender {
    /// The generation appends go to; its file is created by the first append.
    generation: u64,
    file: Option<File>,
    /// Bytes of whole records in `file`.
    len: u64,
    /// Entries appended since the last fold sealed the spool.
    unfolded: usize,
}

impl Appender {
    /// Moves appends on to the next generation; the current file, if any, is sealed.
    fn seal(&mut self) {
        if self.file.take().is_some() {
            self.generation += 1;
            self.len = 0;
        }
    }
}

impl ServedSpool {
    /// Opens the spool in `dir` and folds what an earlier process left in it.
    pub(super) fn open(dir: PathBuf, writer: &Mutex<Connection>) -> Result<Self, StorageError> {
        fs::create_dir_all(&dir)?;
        adopt_legacy(&dir)?;
        let folded = folded_through(&lock(writer))?;
        let last = generations(&dir)?.last().copied().unwrap_or(0);
        let spool = Self {
            dir,
            queue: Mutex::default(),
            appender: Mutex::new(Appender {
                generation: last.max(folded) + 1,
                file: None,
                len: 0,
                unfolded: 0,
            }),
            folding: Mutex::new(()),
            fold_asked: AtomicBool::new(false),
        };
        spool.fold(writer)?;
        Ok(spool)
    }

    fn appender(&self) -> MutexGuard<'_, Appender> {
        // Every mutation leaves the appender describing its file: a poisoned one is still whole.
        self.appender.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn path(&self, generation: u64) -> PathBuf {
        self.dir.join(format!("{generation:020}.{EXTENSION}"))
    }

    /// Queues `row`; the receiver answers once it is written (or could not be). When no writer
    /// is running, the caller must start one with [`ServedSpool::write_queued`] on a thread that
    /// may block (the second value says so).
    pub(super) fn push(
        &self,
        row: &ServedRow,
    ) -> Result<(oneshot::Receiver<Result<(), StorageError>>, bool), StorageError> {
        let record = encode(row)?;
        let (tx, rx) = oneshot::channel();
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        queue.records.push((record, tx));
        let start = !queue.writing;
        queue.writing = true;
        Ok((rx, start))
    }

    /// Writes queued records, each batch in one write, until none are left. Blocks on file I/O.
    /// Calls `fold_due` once [`FOLD_ENTRIES`] entries wait to be folded (at once, not when the
    /// queue runs dry: under a steady load it may never).
    pub(super) fn write_queued(&self, fold_due: impl Fn()) {
        loop {
            let batch = {
                let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                if queue.records.is_empty() {
                    queue.writing = false;
                    return;
                }
                std::mem::take(&mut queue.records)
            };
            let bytes: Vec<u8> = batch
                .iter()
                .flat_map(|(record, _)| record)
                .copied()
                .collect();
            let written = self.append(&bytes, batch.len());
            let failure = written.as_ref().err().map(ToString::to_string);
            for (_, done) in batch {
                // A download that went away meanwhile needs no answer.
                let _ = done.send(match &failure {
                    None => Ok(()),
                    Some(message) => Err(StorageError::unavailable(message.clone())),
                });
            }
            if written.unwrap_or(false) {
                fold_due();
            }
        }
    }

    /// Appends `records` (`entries` whole records). `Ok(true)` asks for a fold.
    fn append(&self, records: &[u8], entries: usize) -> Result<bool, StorageError> {
        let mut appender = self.appender();
        if appender.file.is_none() {
            let path = self.path(appender.generation);
            match OpenOptions::new().append(true).create_new(true).open(&path) {
                Ok(file) => appender.file = Some(file),
                Err(err) => {
                    // The next append tries a name no file can have taken yet.
                    appender.generation += 1;
                    return Err(unwritable(&err));
                }
            }
        }
        let whole = appender.len;
        let written = match appender.file.as_mut() {
            Some(file) => file
                .write_all(records)
                // Whole records only: cut a partial one off again.
                .map_err(|err| (err, file.set_len(whole).is_ok())),
            None => {
                return Err(StorageError::unavailable(
                    "the served-ledger spool is not open",
                ));
            }
        };
        if let Err((err, cut)) = written {
            if !cut {
                // A fold stops at the tear; appends go on in a new file.
                appender.seal();
            }
            return Err(unwritable(&err));
        }
        appender.len += records.len() as u64;
        appender.unfolded += entries;
        Ok(appender.unfolded >= FOLD_ENTRIES && !self.fold_asked.swap(true, Ordering::AcqRel))
    }

    /// Folds every entry appended before this call into `served`, returning how many were
    /// folded. Blocks on file and SQLite I/O.
    pub(super) fn fold(&self, writer: &Mutex<Connection>) -> Result<usize, StorageError> {
        let _folding = self.folding.lock().unwrap_or_else(|p| p.into_inner());
        let current = {
            let mut appender = self.appender();
            appender.seal();
            appender.unfolded = 0;
            appender.generation
        };
        self.fold_asked.store(false, Ordering::Release);
        let mut folded = 0;
        for generation in generations(&self.dir)? {
            if generation < current {
                folded += self.fold_file(generation, writer)?;
            }
        }
        Ok(folded)
    }

    fn fold_file(
        &self,
        generation: u64,
        writer: &Mutex<Connection>,
    ) -> Result<usize, StorageError> {
        let path = self.path(generation);
        let bytes = fs::read(&path)?;
        let (rows, whole) = decode(&bytes);
        if whole < bytes.len() {
            tracing::warn!(
                file = %path.display(),
                entries = rows.len(),
                ignored_bytes = bytes.len() - whole,
                "the served-ledger spool ends in a torn or damaged record; the entries before it are kept"
            );
        }
        let folded = {
            let mut conn = lock(writer);
            if generation <= folded_through(&conn)? {
                0
            } else {
                durable(&mut conn, |tx| {
                    let mut insert = tx.prepare_cached(
                        "INSERT INTO served (user_id, revision, at, principal) VALUES (?1, ?2, ?3, ?4)",
                    )?;
                    for row in &rows {
                        insert.execute(params![row.user, row.revision, row.at, row.principal])?;
                    }
                    tx.execute(
                        "UPDATE served_spool SET folded_through = ?1 WHERE id = 1",
                        [generation as i64],
                    )?;
                    Ok::<_, rusqlite::Error>(rows.len())
                })?
            }
        };
        match fs::remove_file(&path) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err.into()),
            _ => Ok(folded),
        }
    }

    /// Makes appends to the current file fail from now on, as a full disk would (tests only).
    #[cfg(test)]
    pub(super) fn break_appends(&self) -> io::Result<()> {
        let mut appender = self.appender();
        let path = self.path(appender.generation);
        if appender.file.is_none() {
            File::create_new(&path)?;
        }
        appender.file = Some(File::open(&path)?);
        Ok(())
    }

    /// The entries on disk that are not yet folded, in order (tests only).
    #[cfg(test)]
    pub(super) fn unfolded_on_disk(&self) -> io::Result<Vec<ServedRow>> {
        let mut rows = Vec::new();
        for generation in generations(&self.dir)? {
            rows.extend(decode(&fs::read(self.path(generation))?).0);
        }
        Ok(rows)
    }
}

fn lock(writer: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    writer.lock().unwrap_or_else(|p| p.into_inner())
}

fn unwritable(err: &io::Error) -> StorageError {
    StorageError::unavailable(format!("the served ledger could not be written: {err}"))
}

fn folded_through(conn: &Connection) -> Result<u64, StorageError> {
    let folded: i64 = conn.query_row(
        "SELECT folded_through FROM served_spool WHERE id = 1",
        [],
        |r| r.get(0),
    )?;
    Ok(u64::try_from(folded).unwrap_or(0))
}

/// The generation a file named `name` holds, if it is a spool file named with `extension`.
fn generation_of(name: &str, extension: &str) -> Option<u64> {
    name.strip_suffix(extension)?
        .strip_suffix('.')?
        .parse::<u64>()
        .ok()
}

/// Renames the files an earlier version left under their old name (`<generation>.journal`) to
/// this one's, so they are folded like any other; a rename is atomic, so a crash midway leaves
/// each file under one name or the other.
fn adopt_legacy(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Some(generation) = name
            .to_str()
            .and_then(|n| generation_of(n, LEGACY_EXTENSION))
        {
            fs::rename(
                entry.path(),
                dir.join(format!("{generation:020}.{EXTENSION}")),
            )?;
        }
    }
    Ok(())
}

/// The generations of the spool files in `dir`, ascending. Other files are not the spool's.
fn generations(dir: &Path) -> io::Result<Vec<u64>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let generation = name.to_str().and_then(|n| generation_of(n, EXTENSION));
        found.extend(generation);
    }
    found.sort_unstable();
    Ok(found)
}

fn encode(row: &ServedRow) -> Result<Vec<u8>, StorageError> {
    let fields = [&row.user, &row.revision, &row.principal];
    let mut body = Vec::with_capacity(8 + fields.iter().map(|f| 2 + f.len()).sum::<usize>());
    body.extend_from_slice(&row.at.to_le_bytes());
    for field in fields {
        let len = u16::try_from(field.len()).map_err(|_| {
            StorageError::unavailable("a served-ledger field is longer than 65,535 bytes")
        })?;
        body.extend_from_slice(&len.to_le_bytes());
        body.extend_from_slice(field.as_bytes());
    }
    let mut record = Vec::with_capacity(HEADER + body.len());
    record.extend_from_slice(&(body.len() as u32).to_le_bytes());
    record.extend_from_slice(&Sha256::digest(&body)[..8]);
    record.extend_from_slice(&body);
    Ok(record)
}

/// The whole records at the start of `bytes`, and how many bytes they take.
fn decode(bytes: &[u8]) -> (Vec<ServedRow>, usize) {
    let mut rows = Vec::new();
    let mut at = 0;
    while let Some((row, len)) = decode_one(&bytes[at..]) {
        rows.push(row);
        at += len;
    }
    (rows, at)
}

fn decode_one(bytes: &[u8]) -> Option<(ServedRow, usize)> {
    let (header, rest) = bytes.split_first_chunk::<HEADER>()?;
    let (len, digest) = header.split_first_chunk::<4>()?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_BODY {
        return None;
    }
    let body = rest.get(..len)?;
    if Sha256::digest(body)[..8] != digest[..] {
        return None;
    }
    let (at, mut fields) = body.split_first_chunk::<8>()?;
    let mut next = || -> Option<String> {
        let (len, rest) = fields.split_first_chunk::<2>()?;
        let len = u16::from_le_bytes(*len) as usize;
        let field = std::str::from_utf8(rest.get(..len)?).ok()?.to_owned();
        fields = &rest[len..];
        Some(field)
    };
    let row = ServedRow {
        at: i64::from_le_bytes(*at),
        user: next()?,
        revision: next()?,
        principal: next()?,
    };
    fields.is_empty().then_some((row, HEADER + len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn row() -> impl Strategy<Value = ServedRow> {
        ("\\PC{0,40}", "[0-9a-f]{0,64}", any::<i64>(), "\\PC{0,80}").prop_map(
            |(user, revision, at, principal)| ServedRow {
                user,
                revision,
                at,
                principal,
            },
        )
    }

    fn spool_of(rows: &[ServedRow]) -> Vec<u8> {
        rows.iter()
            .flat_map(|r| encode(r).expect("encode"))
            .collect()
    }

    proptest! {
        /// Whatever a crash or a bad sector leaves of a journal, reading it gives a prefix of
        /// what was appended: never an entry that was not, never a panic.
        #[test]
        fn any_cut_or_damage_reads_as_a_prefix(
            rows in proptest::collection::vec(row(), 0..12),
            cut in any::<prop::sample::Index>(),
            flip in any::<Option<(prop::sample::Index, u8)>>(),
        ) {
            let mut bytes = spool_of(&rows);
            let (whole, end) = decode(&bytes);
            prop_assert_eq!(&whole, &rows);
            prop_assert_eq!(end, bytes.len());
            if let Some((at, mask)) = flip && !bytes.is_empty() {
                let at = at.index(bytes.len());
                bytes[at] ^= mask.max(1);
            }
            let len = cut.index(bytes.len() + 1);
            bytes.truncate(len);
            let (read, end) = decode(&bytes);
            prop_assert!(end <= bytes.len());
            prop_assert!(read.len() <= rows.len());
            prop_assert_eq!(&read[..], &rows[..read.len()]);
        }
    }

    #[test]
    fn an_oversized_field_is_refused_before_anything_is_written() {
        let row = ServedRow {
            user: "u".into(),
            revision: "r".into(),
            at: 0,
            principal: "p".repeat(70_000),
        };
        assert!(encode(&row).is_err());
    }
}
