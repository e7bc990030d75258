//! [`UserDb`]: an opened, migrated and healed user database, on disk or in memory.
//!
//! Every constructor runs the same pipeline ([`crate::open`]). Writes go through one helper,
//! which is where a legacy `user.sqlite` is adopted as `user.snug` on the first write (§10).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use snug_files::{TempSibling, sync_parent_dir};

use crate::clock::Clock;
use crate::ddl::MAX_USERDB_BYTES;
use crate::error::{CapError, OpenError, Refusal, SaveError};
use crate::interrupt::Interrupt;
use crate::naming::resolve_user_file;
use crate::open::{self, Inspection, OpenReport, SQLITE_HEADER_LEN, Trust};

/// Where a [`UserDb`] lives and where its writes go.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Location {
    /// An in-memory image; the caller persists it with [`UserDb::to_bytes`] or [`UserDb::save_to`].
    Memory,
    /// A file written in place.
    File(PathBuf),
    /// A legacy file opened read-only; the first write creates `write` from it and continues
    /// there. The legacy file is never renamed, copied over, modified or deleted.
    Adopting { read: PathBuf, write: PathBuf },
}

/// An open user database at storage version 6.
///
/// The hub-namespace operations (apps, versions, docs, chat, key/value tables) are methods on
/// this type, spread over the modules that implement them. Crates that add their own writes
/// (the materializer) use [`UserDb::connection_mut`] after [`UserDb::ensure_writable`].
pub struct UserDb {
    conn: Connection,
    clock: Arc<dyn Clock>,
    location: Location,
    interrupt: Interrupt,
}

impl std::fmt::Debug for UserDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserDb")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

/// Flags for files the pipeline opens: no URI parsing, so a path is always a path.
fn file_flags(read_only: bool) -> OpenFlags {
    let access = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
    };
    access | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_EXRESCODE
}

/// Opens `path` with the defensive settings applied.
pub(crate) fn open_file_connection(path: &Path, read_only: bool) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(path, file_flags(read_only))?;
    open::configure(&conn)?;
    Ok(conn)
}

/// Reads the header of an existing file and checks it (magic, page size, whole pages).
pub(crate) fn check_file_header(path: &Path) -> Result<(), OpenError> {
    let io_err = |source| OpenError::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(io_err)?;
    let len = file.metadata().map_err(io_err)?.len();
    let mut header = Vec::with_capacity(SQLITE_HEADER_LEN);
    Read::by_ref(&mut file)
        .take(SQLITE_HEADER_LEN as u64)
        .read_to_end(&mut header)
        .map_err(io_err)?;
    if header.starts_with(snug_container::MAGIC) {
        return Err(OpenError::Protected);
    }
    open::check_header(&header, len)
        .map(|_| ())
        .map_err(OpenError::from)
}

/// Deserializes `bytes` into a fresh, defensively configured in-memory connection.
///
/// A WAL-mode header (format versions 2) is rewritten to rollback mode in the copy, because an
/// in-memory database has no WAL; the caller's bytes are not touched.
pub(crate) fn memory_connection(bytes: &[u8]) -> Result<Connection, Refusal> {
    deserialized(bytes, false)
}

/// [`memory_connection`] for reading only: SQLite reads the pages in place
/// (`mmap_size` over a read-only in-memory database) instead of copying each one it visits into
/// its page cache, which a check of every page of a large image would otherwise spend a tenth
/// of its time on.
pub(crate) fn reading_connection(bytes: &[u8]) -> Result<Connection, Refusal> {
    let conn = deserialized(bytes, true)?;
    conn.pragma_update(None, "mmap_size", bytes.len() as i64)?;
    Ok(conn)
}

fn deserialized(bytes: &[u8], read_only: bool) -> Result<Connection, Refusal> {
    let wal = open::check_header(bytes, bytes.len() as u64)?;
    let mut conn = Connection::open_in_memory()?;
    open::configure(&conn)?;
    let mut header = [0u8; SQLITE_HEADER_LEN];
    header.copy_from_slice(&bytes[..SQLITE_HEADER_LEN]);
    if wal {
        header[18] = 1;
        header[19] = 1;
    }
    let reader = (&header[..]).chain(&bytes[SQLITE_HEADER_LEN..]);
    conn.deserialize_read_exact(rusqlite::MAIN_DB, reader, bytes.len(), read_only)?;
    Ok(conn)
}

/// The write-ahead log SQLite keeps beside the database file at `path`.
pub fn wal_path(path: &Path) -> PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// The length of the write-ahead log beside the database file at `path` ([`wal_path`]) when it
/// holds frames: another program has the file open in WAL mode with changes its bytes alone
/// lack. An empty or absent log is no one's change.
pub fn pending_log(path: &Path) -> std::io::Result<Option<u64>> {
    match std::fs::metadata(wal_path(path)) {
        Ok(meta) if meta.len() > 0 => Ok(Some(meta.len())),
        Ok(_) => Ok(None),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// The database file at `path` as SQLite reads it, the changes another program committed to its
/// write-ahead log included: a read-only connection, serialized. Writes nothing to the file.
pub fn read_through_sqlite(path: &Path) -> rusqlite::Result<Vec<u8>> {
    let mut conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    Ok(conn.serialize(rusqlite::MAIN_DB)?.to_vec())
}

/// Runs `PRAGMA quick_check` and refuses the file unless it says `ok`.
pub(crate) fn quick_check(conn: &Connection) -> Result<(), Refusal> {
    let first: String = conn.query_row("PRAGMA quick_check(1)", [], |row| row.get(0))?;
    if first == "ok" {
        Ok(())
    } else {
        Err(Refusal::Malformed(crate::error::Malformation::QuickCheck {
            first_problem: first,
        }))
    }
}

/// Returns `page_count * page_size`: the database size as SQLite will write it.
pub(crate) fn db_size(conn: &Connection) -> rusqlite::Result<u64> {
    let pages: i64 = conn.pragma_query_value(None, "page_count", |row| row.get(0))?;
    let page_size: i64 = conn.pragma_query_value(None, "page_size", |row| row.get(0))?;
    Ok(u64::try_from(pages.saturating_mul(page_size)).unwrap_or(0))
}

/// Fails a pending write that would take the database over [`MAX_USERDB_BYTES`]; the caller's
/// transaction is then dropped, which rolls it back.
pub(crate) fn check_cap(conn: &Connection) -> Result<(), CapError> {
    let size = db_size(conn)?;
    if size > MAX_USERDB_BYTES {
        return Err(CapError::TooLarge {
            size,
            max: MAX_USERDB_BYTES,
        });
    }
    Ok(())
}

fn io_as_sqlite(path: &Path, err: &std::io::Error) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
        Some(format!("{}: {err}", path.display())),
    )
}

/// Returns the UTF-8 text of `path` for `VACUUM INTO`, which takes a string.
fn path_text(path: &Path) -> std::io::Result<&str> {
    path.to_str()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "path is not UTF-8"))
}

/// Writes the database `conn` holds to `tmp` with `VACUUM INTO` (which syncs it as the source
/// connection's `synchronous` setting says, FULL by default).
pub(crate) fn vacuum_into(conn: &Connection, out: &Path) -> Result<(), SaveError> {
    let text = path_text(out).map_err(|source| SaveError::Io {
        path: out.to_owned(),
        source,
    })?;
    conn.execute("VACUUM INTO ?1", [text])?;
    Ok(())
}

impl UserDb {
    fn with(conn: Connection, clock: Arc<dyn Clock>, location: Location) -> Self {
        UserDb {
            conn,
            clock,
            location,
            interrupt: Interrupt::never(),
        }
    }

    /// Wraps an already-pipelined in-memory connection.
    pub(crate) fn from_connection(conn: Connection, clock: Arc<dyn Clock>) -> Self {
        UserDb::with(conn, clock, Location::Memory)
    }

    /// Creates a new, empty user database in memory (schema, `db_id`, `created_at`).
    pub fn create_in_memory(clock: Arc<dyn Clock>) -> Result<(UserDb, OpenReport), OpenError> {
        let mut conn = Connection::open_in_memory()?;
        open::configure(&conn)?;
        let report = open::run(&mut conn, clock.as_ref(), Trust::Own)?;
        Ok((UserDb::with(conn, clock, Location::Memory), report))
    }

    /// Opens the user's own database image (a pulled copy, an unlocked container's plaintext)
    /// in memory: header check, `quick_check`, migrate, heal, wipe and seed.
    ///
    /// Foreign tables are kept (and never exported). For files from elsewhere use
    /// [`import`](crate::import), which also reconciles grants and contracts.
    pub fn from_bytes(
        bytes: &[u8],
        clock: Arc<dyn Clock>,
    ) -> Result<(UserDb, OpenReport), OpenError> {
        UserDb::from_bytes_with(bytes, clock, &Interrupt::never())
    }

    /// [`UserDb::from_bytes`] for a caller that may stop waiting: every statement on the
    /// database — the open's own checks and migrations, and whatever runs on it afterwards,
    /// here and in the crates built on it — stops once `interrupt` fires (see [`Interrupt`]).
    pub fn from_bytes_with(
        bytes: &[u8],
        clock: Arc<dyn Clock>,
        interrupt: &Interrupt,
    ) -> Result<(UserDb, OpenReport), OpenError> {
        if bytes.starts_with(snug_container::MAGIC) {
            return Err(OpenError::Protected);
        }
        let mut conn = memory_connection(bytes)?;
        interrupt.install(&mut conn)?;
        quick_check(&conn)?;
        let report = open::run(&mut conn, clock.as_ref(), Trust::Own)?;
        let mut db = UserDb::with(conn, clock, Location::Memory);
        db.interrupt = interrupt.clone();
        Ok((db, report))
    }

    /// Opens the database file at `path` in place, creating it if it does not exist.
    ///
    /// A healthy current file is only read: the open writes zero bytes. A file that needs the
    /// ladder, a heal or a `db_id` is changed in one transaction. An existing file that is empty
    /// or not SQLite is refused (never replaced by a fresh database), as is a SNUGENC1 container
    /// ([`OpenError::Protected`]).
    pub fn open_path(
        path: &Path,
        clock: Arc<dyn Clock>,
    ) -> Result<(UserDb, OpenReport), OpenError> {
        let existed = path.exists();
        if existed {
            check_file_header(path)?;
        }
        let opened = open_file_connection(path, false)
            .map_err(OpenError::from)
            .and_then(|mut conn| {
                let report = open::run(&mut conn, clock.as_ref(), Trust::Own)?;
                Ok((conn, report))
            });
        match opened {
            Ok((conn, report)) => Ok((
                UserDb::with(conn, clock, Location::File(path.to_owned())),
                report,
            )),
            Err(err) => {
                // SQLite creates the file on open; a new file whose initialisation failed would
                // otherwise stay behind empty, and an empty file is refused as damage next time.
                if !existed {
                    let _ = std::fs::remove_file(path);
                }
                Err(err)
            }
        }
    }

    /// Opens the user file in `dir` under the §10 naming rule: `user.snug` if it exists, else a
    /// legacy `user.sqlite` (read, and adopted as `user.snug` on the first write), else a new
    /// `user.snug`.
    pub fn open_dir(dir: &Path, clock: Arc<dyn Clock>) -> Result<(UserDb, OpenReport), OpenError> {
        let user_file = resolve_user_file(dir);
        let Some(read) = user_file.read.filter(|read| *read != user_file.write) else {
            return UserDb::open_path(&user_file.write, clock);
        };
        check_file_header(&read)?;
        let conn = open_file_connection(&read, true)?;
        let assessment = open::assess(&conn, Trust::Own)?;
        let mut db = UserDb::with(
            conn,
            clock,
            Location::Adopting {
                read,
                write: user_file.write,
            },
        );
        if !assessment.needs_write {
            return Ok((db, open::OpenReport::untouched(assessment.found)));
        }
        db.ensure_writable()?;
        let report = open::run(&mut db.conn, db.clock.as_ref(), Trust::Own)?;
        Ok((db, report))
    }

    /// Performs a pending §10 adoption: copies the legacy file's database to the canonical name
    /// (atomically, never overwriting an existing canonical file) and continues there.
    ///
    /// Every write method calls this first; call it yourself before writing through
    /// [`UserDb::connection_mut`].
    pub fn ensure_writable(&mut self) -> Result<(), OpenError> {
        let Location::Adopting { read, write } = &self.location else {
            return Ok(());
        };
        let (read, write) = (read.clone(), write.clone());
        let io_err = |path: &Path| {
            let path = path.to_owned();
            move |source| OpenError::Io { path, source }
        };
        let tmp = TempSibling::create(&write).map_err(io_err(&write))?;
        vacuum_into(&self.conn, tmp.path()).map_err(|err| match err {
            SaveError::Io { path, source } => OpenError::Io { path, source },
            SaveError::Sqlite(err) => OpenError::Sqlite(err),
        })?;
        // A hard link publishes the complete file under the canonical name and fails if that
        // name exists, so a canonical file created meanwhile is never clobbered. The temporary
        // name is removed when `tmp` drops.
        std::fs::hard_link(tmp.path(), &write).map_err(io_err(&write))?;
        sync_parent_dir(&write).map_err(io_err(&write))?;
        self.conn = open_file_connection(&write, false)?;
        self.location = Location::File(write);
        debug_assert!(read.exists(), "the legacy file is left in place");
        Ok(())
    }

    /// Returns the connection, for reads by other crates.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Returns the connection for writes by other crates (the materializer). Call
    /// [`UserDb::ensure_writable`] first so a pending adoption happens before the write.
    pub fn connection_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// Returns the interrupt the database was opened with ([`UserDb::from_bytes_with`]), for work
    /// built on it that runs loops or opens connections of its own.
    pub fn interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    /// Returns the clock this database stamps times with.
    pub fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    /// Returns the file writes go to (`None` in memory).
    pub fn path(&self) -> Option<&Path> {
        match &self.location {
            Location::Memory => None,
            Location::File(path) | Location::Adopting { write: path, .. } => Some(path),
        }
    }

    /// Returns the legacy file this database was read from while its adoption is pending.
    pub fn pending_adoption(&self) -> Option<&Path> {
        match &self.location {
            Location::Adopting { read, .. } => Some(read),
            _ => None,
        }
    }

    /// Returns `page_count * page_size`.
    pub fn size_bytes(&self) -> rusqlite::Result<u64> {
        db_size(&self.conn)
    }

    /// Returns the database image as bytes (including free pages; see
    /// [`export_bytes`](crate::export_bytes) for a compacted, secret-stripped copy).
    pub fn to_bytes(&mut self) -> rusqlite::Result<Vec<u8>> {
        Ok(self.conn.serialize(rusqlite::MAIN_DB)?.to_vec())
    }

    /// Writes a compacted copy of the database to `path`, atomically replacing what is there
    /// (temp file, `VACUUM INTO`, rename, directory sync). Secrets are kept: this is persistence,
    /// not export.
    pub fn save_to(&self, path: &Path) -> Result<(), SaveError> {
        let io_err = |source| SaveError::Io {
            path: path.to_owned(),
            source,
        };
        let tmp = TempSibling::create(path).map_err(io_err)?;
        vacuum_into(&self.conn, tmp.path())?;
        std::fs::rename(tmp.path(), path).map_err(io_err)?;
        tmp.disarm();
        sync_parent_dir(path).map_err(io_err)
    }

    /// Reports version, tables, and what a heal would do, without writing.
    pub fn inspect(&self) -> rusqlite::Result<Inspection> {
        open::inspect(&self.conn)
    }

    /// Begins an immediate write transaction, adopting a legacy file first if that is pending.
    pub(crate) fn write_tx(&mut self) -> rusqlite::Result<Transaction<'_>> {
        if let Some(read) = self.pending_adoption().map(Path::to_owned) {
            self.ensure_writable().map_err(|err| match err {
                OpenError::Sqlite(err) | OpenError::Unreadable(err) => err,
                OpenError::Io { path, source } => io_as_sqlite(&path, &source),
                other => io_as_sqlite(&read, &std::io::Error::other(other.to_string())),
            })?;
        }
        self.conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
    }

    pub(crate) fn now(&self) -> String {
        self.clock.timestamp()
    }
}

/// Inspects a user database image without writing (the `snug check` report).
pub fn inspect_bytes(bytes: &[u8]) -> Result<Inspection, OpenError> {
    if bytes.starts_with(snug_container::MAGIC) {
        return Err(OpenError::Protected);
    }
    let conn = reading_connection(bytes)?;
    quick_check(&conn)?;
    Ok(open::inspect(&conn)?)
}

/// Inspects a user database file read-only; the file is not written.
pub fn inspect_path(path: &Path) -> Result<Inspection, OpenError> {
    check_file_header(path)?;
    let conn = open_file_connection(path, true)?;
    Ok(open::inspect(&conn)?)
}

/// Opens an image in memory, runs the pipeline and returns the resulting image and report.
/// Two registered apps that share a token refuse the file ([`OpenError::AppTokenCollision`]).
pub fn migrate_bytes(
    bytes: &[u8],
    clock: Arc<dyn Clock>,
) -> Result<(Vec<u8>, OpenReport), OpenError> {
    let (mut db, report) = UserDb::from_bytes(bytes, clock)?;
    db.check_app_isolation()?;
    let bytes = db.to_bytes()?;
    Ok((bytes, report))
}

/// Migrates the database at `src` into a new file `dst`; `src` is only read.
///
/// The source is loaded into memory straight from the file, migrated and healed there, and
/// written compacted with `VACUUM INTO`, so free pages (dropped v1 blobs, wiped legacy
/// credentials) never reach `dst`. `dst` must not exist. Two registered apps that share a token
/// refuse the file ([`OpenError::AppTokenCollision`]).
pub fn migrate_file(
    src: &Path,
    dst: &Path,
    clock: Arc<dyn Clock>,
) -> Result<OpenReport, OpenError> {
    check_file_header(src)?;
    if dst.exists() {
        return Err(OpenError::Io {
            path: dst.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "output exists"),
        });
    }
    let io_err = |source| OpenError::Io {
        path: src.to_owned(),
        source,
    };
    let mut file = File::open(src).map_err(io_err)?;
    let len = usize::try_from(file.metadata().map_err(io_err)?.len()).unwrap_or(usize::MAX);
    let mut header = [0u8; SQLITE_HEADER_LEN];
    file.read_exact(&mut header).map_err(io_err)?;
    if open::check_header(&header, len as u64)? {
        header[18] = 1;
        header[19] = 1;
    }
    let mut conn = Connection::open_in_memory()?;
    open::configure(&conn)?;
    conn.deserialize_read_exact(rusqlite::MAIN_DB, (&header[..]).chain(file), len, false)?;
    // The source may be anyone's file: nothing in it is trusted before quick_check says ok.
    quick_check(&conn)?;
    let report = open::run(&mut conn, clock.as_ref(), Trust::Own)?;
    if let Some(collision) = crate::isolation::token_collisions(&conn)?
        .into_iter()
        .next()
    {
        return Err(OpenError::AppTokenCollision { collision });
    }
    // VACUUM INTO a temp sibling, then fsync and rename: `dst` appears whole or not at all.
    let dst_err = |source| OpenError::Io {
        path: dst.to_owned(),
        source,
    };
    let tmp = TempSibling::create(dst).map_err(dst_err)?;
    vacuum_into(&conn, tmp.path()).map_err(|err| match err {
        SaveError::Io { path, source } => OpenError::Io { path, source },
        SaveError::Sqlite(err) => OpenError::Sqlite(err),
    })?;
    File::open(tmp.path())
        .and_then(|f| f.sync_all())
        .map_err(dst_err)?;
    std::fs::rename(tmp.path(), dst).map_err(dst_err)?;
    tmp.disarm();
    sync_parent_dir(dst).map_err(dst_err)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    /// The workspace builds SQLite with `SQLITE_TEMP_STORE=3` (`.cargo/config.toml`): temporary
    /// files live in memory, so nothing needs a writable temporary directory (the image has
    /// none). Fails if the flag is lost, e.g. overridden by a `LIBSQLITE3_FLAGS` of the caller's.
    #[test]
    fn sqlite_keeps_temporary_files_in_memory() {
        let conn = rusqlite::Connection::open_in_memory().expect("open");
        let options: Vec<String> = conn
            .prepare("PRAGMA compile_options")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("options");
        assert!(
            options.iter().any(|o| o == "TEMP_STORE=3"),
            "compiled with {options:?}"
        );
    }
}
