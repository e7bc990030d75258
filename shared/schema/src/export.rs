//! Export (spec §9.2): a copy of the user database with every table whose class is not
//! exported removed — by default `snug_secrets` is emptied — and no secret byte left anywhere
//! in the file, free pages included.
//!
//! Default-deny by class: a table survives only when [`classify_table`] gives it a class whose
//! [`TableClass::exported`] says so. Foreign tables are dropped; `snug_secrets` itself stays
//! (empty) so the copy has the full v6 shape.
//!
//! From a file, the fast path is `VACUUM INTO` the output (only live records are copied, so the
//! source's free pages never travel), then in the output, with `secure_delete` on, the secrets
//! are deleted — which zeroes their cells and any freed overflow page in place. The output is
//! VACUUMed again only if the stripping freed whole pages. A source that needs migration or heal
//! is loaded into memory, brought to v6 there, stripped, and written with one `VACUUM INTO`.
//!
//! Every export then has its free space zeroed ([`scrub_free_space`](crate::scrub_free_space)): VACUUM copies live records
//! only, but page balancing leaves copies of live cells in freeblocks and unallocated areas, so
//! without the scrub a hub that zeroes the free space of what it stores would store bytes other
//! than the ones a client pushed, and the client's hash would not come back.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use rusqlite::Connection;
use serde::Serialize;

use crate::db::{UserDb, check_file_header, db_size, memory_connection, open_file_connection};
use crate::ddl::{MAX_USERDB_BYTES, TableClass, classify_table};
use crate::error::{ExportError, OpenError, SaveError};
use crate::open::{self, Trust};

/// What to include in an export.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportOptions {
    /// Keep `snug_secrets` (explicit opt-in; personal sync origins and backups only).
    pub include_secrets: bool,
}

/// What an export removed and produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExportReport {
    /// Size of the export in bytes.
    pub bytes: u64,
    /// `snug_secrets` rows removed.
    pub secrets_removed: usize,
    /// Tables dropped because their class is not exported (foreign tables).
    pub tables_dropped: Vec<String>,
    /// Whether the output was VACUUMed after stripping.
    pub vacuumed: bool,
    /// The source's storage version (an older source is migrated in the copy only).
    pub source_version: i64,
}

/// Lists tables whose class is not exported under `options`, except `snug_secrets`, which is
/// emptied rather than dropped.
fn tables_to_drop(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt =
        conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")?;
    let names = stmt
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(names
        .into_iter()
        .filter(|name| {
            let kind = classify_table(name);
            // SQLite-internal tables have no class but belong to the structure (AUTOINCREMENT
            // counters); they are never dropped.
            kind.class().is_none() && kind != crate::ddl::TableKind::SqliteInternal
        })
        .collect())
}

/// Strips `conn` in place for export. With `zero_in_place`, deletions run under
/// `secure_delete` so deleted cells are zeroed (used on an on-disk copy); returns
/// `(secrets_removed, tables_dropped)`.
fn strip(
    conn: &Connection,
    options: ExportOptions,
    zero_in_place: bool,
) -> rusqlite::Result<(usize, Vec<String>)> {
    if zero_in_place {
        conn.pragma_update(None, "secure_delete", "ON")?;
    }
    let tables = tables_to_drop(conn)?;
    let tx = conn.unchecked_transaction()?;
    for table in &tables {
        tx.execute_batch(&format!("DROP TABLE \"{}\"", table.replace('"', "\"\"")))?;
    }
    let secrets_removed = if TableClass::Secret.exported(options.include_secrets) {
        0
    } else {
        tx.execute("DELETE FROM snug_secrets", [])?
    };
    tx.commit()?;
    Ok((secrets_removed, tables))
}

fn freelist_count(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "freelist_count", |row| row.get(0))
}

/// Zeroes the free space of the export file at `path` in place, writing only the dirty ranges.
fn scrub_file(path: &Path) -> Result<(), ExportError> {
    let io = |source| ExportError::Io {
        path: path.to_owned(),
        source,
    };
    let image = std::fs::read(path).map_err(io)?;
    let dirty = crate::scrub::dirty_free_space(&image).map_err(ExportError::Scrub)?;
    if dirty.is_empty() {
        return Ok(());
    }
    drop(image);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io)?;
    for range in dirty {
        file.seek(SeekFrom::Start(range.start)).map_err(io)?;
        let zeros = vec![0u8; (range.end - range.start) as usize];
        file.write_all(&zeros).map_err(io)?;
    }
    file.sync_all().map_err(io)
}

fn save_error(err: SaveError) -> ExportError {
    match err {
        SaveError::Io { path, source } => ExportError::Io { path, source },
        SaveError::Sqlite(err) => ExportError::Sqlite(err),
    }
}

/// Exports the user database file `src` to the new file `dst`; `src` is only read.
///
/// `dst` must not exist. On any error `dst` is removed.
pub fn export_file(
    src: &Path,
    dst: &Path,
    options: ExportOptions,
) -> Result<ExportReport, ExportError> {
    check_file_header(src).map_err(ExportError::Source)?;
    if dst.exists() {
        return Err(ExportError::OutputExists {
            path: dst.to_owned(),
        });
    }
    let source = open_file_connection(src, true).map_err(|err| ExportError::Source(err.into()))?;
    let assessment =
        open::assess(&source, Trust::Own).map_err(|refusal| ExportError::Source(refusal.into()))?;
    let result = if assessment.needs_write {
        export_via_memory(src, dst, options)
    } else {
        export_fast(&source, dst, options)
    };
    match result {
        Ok(mut report) => {
            report.source_version = assessment.found;
            Ok(report)
        }
        Err(err) => {
            let _ = std::fs::remove_file(dst);
            Err(err)
        }
    }
}

fn export_fast(
    source: &Connection,
    dst: &Path,
    options: ExportOptions,
) -> Result<ExportReport, ExportError> {
    crate::db::vacuum_into(source, dst).map_err(save_error)?;
    let out = open_file_connection(dst, false)?;
    // The output is a new file that is deleted on any failure, so a rollback journal would only
    // cost writes (and would hold pre-deletion pages, secrets included, until deleted).
    out.pragma_update_and_check(None, "journal_mode", "OFF", |_| Ok(()))?;
    let (secrets_removed, tables_dropped) = strip(&out, options, true)?;
    let vacuumed = freelist_count(&out)? > 0;
    if vacuumed {
        out.execute_batch("VACUUM")?;
    }
    let bytes = db_size(&out)?;
    drop(out);
    if bytes > MAX_USERDB_BYTES {
        return Err(ExportError::TooLarge {
            size: bytes,
            max: MAX_USERDB_BYTES,
        });
    }
    scrub_file(dst)?;
    Ok(ExportReport {
        bytes,
        secrets_removed,
        tables_dropped,
        vacuumed,
        source_version: 0,
    })
}

fn export_via_memory(
    src: &Path,
    dst: &Path,
    options: ExportOptions,
) -> Result<ExportReport, ExportError> {
    let bytes = std::fs::read(src).map_err(|source| ExportError::Io {
        path: src.to_owned(),
        source,
    })?;
    let mut conn =
        memory_connection(&bytes).map_err(|refusal| ExportError::Source(refusal.into()))?;
    drop(bytes);
    // The copy gets a throwaway clock: any db_id it seeds is only in the export, and a file
    // without one gets one again wherever it is imported.
    open::run(&mut conn, &crate::clock::SystemClock, Trust::Own)
        .map_err(|refusal| ExportError::Source(refusal.into()))?;
    let (secrets_removed, tables_dropped) = strip(&conn, options, false)?;
    let size = db_size(&conn)?;
    if size > MAX_USERDB_BYTES {
        return Err(ExportError::TooLarge {
            size,
            max: MAX_USERDB_BYTES,
        });
    }
    crate::db::vacuum_into(&conn, dst).map_err(save_error)?;
    let out = open_file_connection(dst, true)?;
    let bytes = db_size(&out)?;
    drop(out);
    if bytes > MAX_USERDB_BYTES {
        return Err(ExportError::TooLarge {
            size: bytes,
            max: MAX_USERDB_BYTES,
        });
    }
    scrub_file(dst)?;
    Ok(ExportReport {
        bytes,
        secrets_removed,
        tables_dropped,
        vacuumed: true,
        source_version: 0,
    })
}

/// The share of free pages past which a sync copy is VACUUMed after all: below it a small edit
/// keeps the copy's page numbers (a VACUUM renumbers every page after the first freed one, and
/// every page naming a moved one changes with it); above it the copy would carry more zeroed
/// pages than a renumbering costs once.
pub const SYNC_COPY_MAX_FREE_SHARE: f64 = 0.25;

/// The sync copy of an open user database (§9.3, issue 38): what a push sends an origin, with the
/// live file's page numbers kept, so a small edit changes few pages of it.
///
/// Stripped as an export is (secrets emptied unless `options` keeps them, foreign tables dropped),
/// with `secure_delete` on so the deleted cells and freed pages are zeroed where they lie, then
/// every range of free space zeroed, so no byte of a deleted row, secret or not, travels. It is
/// VACUUMed only when more than [`SYNC_COPY_MAX_FREE_SHARE`] of its pages are free. The result
/// is a valid SQLite file a hub accepts as it is: its validation finds no free space to zero.
pub fn sync_copy_bytes(
    db: &mut UserDb,
    options: ExportOptions,
) -> Result<(Vec<u8>, ExportReport), ExportError> {
    copy_bytes(db, options, Layout::Kept)
}

/// Exports an open user database to bytes (plaintext; sealing for a protected file is the
/// caller's choice, and a sealed export must not be labelled `application/x-sqlite3`).
///
/// The image is copied into a scratch in-memory database, stripped and VACUUMed there: the
/// serialized image carries the source's free pages, which may hold old secret bytes, and
/// VACUUM rebuilds the file from live records only. The result has its free space zeroed.
pub fn export_bytes(
    db: &mut UserDb,
    options: ExportOptions,
) -> Result<(Vec<u8>, ExportReport), ExportError> {
    copy_bytes(db, options, Layout::Compacted)
}

/// How a copy's pages are laid out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// VACUUMed: live records only, renumbered from the first page (an export).
    Compacted,
    /// The source's page numbers, VACUUMed only past [`SYNC_COPY_MAX_FREE_SHARE`] free (a sync
    /// copy); deletions run under `secure_delete` so they leave zeros where they were.
    Kept,
}

/// The stripped copy of `db` in `layout`, with its free space zeroed.
fn copy_bytes(
    db: &mut UserDb,
    options: ExportOptions,
    layout: Layout,
) -> Result<(Vec<u8>, ExportReport), ExportError> {
    let image = db.to_bytes()?;
    let source_version = open::user_version(db.connection())?;
    let mut conn = memory_connection(&image)
        .map_err(|refusal| ExportError::Source(OpenError::from(refusal)))?;
    drop(image);
    // The copy's VACUUM is the longest step of an export: it stops with the database's own work.
    db.interrupt().install(&mut conn)?;
    let (secrets_removed, tables_dropped) = strip(&conn, options, layout == Layout::Kept)?;
    let vacuumed = match layout {
        Layout::Compacted => true,
        Layout::Kept => {
            let pages: i64 = conn.pragma_query_value(None, "page_count", |row| row.get(0))?;
            freelist_count(&conn)? as f64 > pages as f64 * SYNC_COPY_MAX_FREE_SHARE
        }
    };
    if vacuumed {
        conn.execute_batch("VACUUM")?;
    }
    let mut bytes = conn.serialize(rusqlite::MAIN_DB)?.to_vec();
    crate::scrub::scrub_free_space_in_place(&mut bytes).map_err(ExportError::Scrub)?;
    let size = bytes.len() as u64;
    if size > MAX_USERDB_BYTES {
        return Err(ExportError::TooLarge {
            size,
            max: MAX_USERDB_BYTES,
        });
    }
    Ok((
        bytes,
        ExportReport {
            bytes: size,
            secrets_removed,
            tables_dropped,
            vacuumed,
            source_version,
        },
    ))
}

#[cfg(test)]
mod tests;
