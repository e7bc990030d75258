//! Forward-only migrations of the store's own tables, and the table-class declarations.
//!
//! Migrations are data (`migrations/{sqlite,postgres}/NNNN_name.sql`, compiled in). The runner
//! records each applied migration with a checksum of its text, refuses a store whose applied
//! migrations are newer than this binary or differ from its copies, and applies the rest in
//! order. There are no down migrations: a release that needs to undo a change ships a new one.

use sha2::{Digest as _, Sha256};

use crate::error::OpenError;

/// One migration step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Migration {
    pub(crate) version: i64,
    pub(crate) sql: &'static str,
}

/// The embedded store's migrations.
pub(crate) const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        sql: include_str!("../migrations/sqlite/0001_init.sql"),
    },
    Migration {
        version: STORAGE_VERSION,
        sql: include_str!("../migrations/sqlite/0002_storage_version.sql"),
    },
    Migration {
        version: 3,
        sql: include_str!("../migrations/sqlite/0003_served_journal.sql"),
    },
    Migration {
        version: 4,
        sql: include_str!("../migrations/sqlite/0004_abandoned_puts.sql"),
    },
    Migration {
        version: 5,
        sql: include_str!("../migrations/sqlite/0005_erasures.sql"),
    },
    Migration {
        version: 6,
        sql: include_str!("../migrations/sqlite/0006_served_spool.sql"),
    },
    Migration {
        version: 7,
        sql: include_str!("../migrations/sqlite/0007_manifest_bases.sql"),
    },
];

/// The PostgreSQL store's migrations.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        sql: include_str!("../migrations/postgres/0001_init.sql"),
    },
    Migration {
        version: STORAGE_VERSION,
        sql: include_str!("../migrations/postgres/0002_storage_version.sql"),
    },
    Migration {
        version: 3,
        sql: include_str!("../migrations/postgres/0003_pack_objects.sql"),
    },
    Migration {
        version: 4,
        sql: include_str!("../migrations/postgres/0004_publication_chunks.sql"),
    },
    Migration {
        version: 5,
        sql: include_str!("../migrations/postgres/0005_abandoned_puts.sql"),
    },
    Migration {
        version: 6,
        sql: include_str!("../migrations/postgres/0006_erasures.sql"),
    },
    Migration {
        version: 7,
        sql: include_str!("../migrations/postgres/0007_manifest_bases.sql"),
    },
];

/// The migration that adds `revisions.storage_version`. PostgreSQL backfills it in the
/// migration's own SQL; the embedded store's image bytes live in pack files SQL cannot read, so
/// its runner backfills the column in code, in the transaction that applies this version.
pub(crate) const STORAGE_VERSION: i64 = 2;

// The class declarations are read only by the completeness tests.
#[cfg_attr(not(test), allow(dead_code))]
/// The runner's own table, declared here because no migration creates it.
pub(crate) const RUNNER_TABLE: (&str, TableClass) =
    ("revstore_migrations", TableClass::Bookkeeping);

#[cfg_attr(not(test), allow(dead_code))]
/// The storage class of a table (the Stem discipline: every table has exactly one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TableClass {
    /// The data of record; never rebuilt, deleted only by journaled reclamation.
    Record,
    /// Append-only audit rows.
    Ledger,
    /// Transient state of work in progress.
    Bookkeeping,
}

/// Hex SHA-256 of a migration's text.
pub(crate) fn checksum(sql: &str) -> String {
    hex::encode(Sha256::digest(sql.as_bytes()))
}

/// Decides which migrations to apply, given the `(version, checksum)` rows already applied.
pub(crate) fn plan<'a>(
    applied: &[(i64, String)],
    known: &'a [Migration],
) -> Result<Vec<&'a Migration>, OpenError> {
    let supported = known.iter().map(|m| m.version).max().unwrap_or(0);
    if let Some(found) = applied.iter().map(|(v, _)| *v).max()
        && found > supported
    {
        return Err(OpenError::SchemaTooNew { found, supported });
    }
    let mut todo = Vec::new();
    for m in known {
        match applied.iter().find(|(v, _)| *v == m.version) {
            Some((_, sum)) if *sum != checksum(m.sql) => {
                return Err(OpenError::MigrationChanged { version: m.version });
            }
            Some(_) => {}
            None => todo.push(m),
        }
    }
    Ok(todo)
}

#[cfg_attr(not(test), allow(dead_code))]
/// Reads the `-- class: X` declaration that precedes each `CREATE TABLE` in migration text.
///
/// A `CREATE TABLE` without a class line since the previous one yields `None` for its class, which
/// the completeness test reports.
pub(crate) fn declared_classes(sql: &str) -> Vec<(String, Option<TableClass>)> {
    let mut pending = None;
    let mut out = Vec::new();
    for line in sql.lines().map(str::trim) {
        if let Some(class) = line.strip_prefix("-- class:") {
            pending = match class.trim() {
                "record" => Some(TableClass::Record),
                "ledger" => Some(TableClass::Ledger),
                "bookkeeping" => Some(TableClass::Bookkeeping),
                _ => None,
            };
        } else if let Some(rest) = line.strip_prefix("CREATE TABLE ") {
            let name = rest
                .trim_start_matches("IF NOT EXISTS ")
                .split([' ', '('])
                .next()
                .unwrap_or("");
            out.push((name.to_owned(), pending.take()));
        }
    }
    out
}

#[cfg_attr(not(test), allow(dead_code))]
/// The tables `migrations` leave, with their declared classes: every `CREATE TABLE` in order,
/// with `ALTER TABLE a RENAME TO b` carrying a's class to b. A table created twice, or a rename
/// of a table that does not exist, is an error naming it.
pub(crate) fn declared_tables(
    migrations: &[Migration],
) -> Result<std::collections::BTreeMap<String, Option<TableClass>>, String> {
    let mut tables = std::collections::BTreeMap::new();
    for m in migrations {
        for (table, class) in declared_classes(m.sql) {
            if tables.insert(table.clone(), class).is_some() {
                return Err(format!("table {table} declared twice"));
            }
        }
        for line in m.sql.lines().map(str::trim) {
            let Some(rest) = line.strip_prefix("ALTER TABLE ") else {
                continue;
            };
            if let Some((from, to)) = rest.trim_end_matches(';').split_once(" RENAME TO ") {
                let class = tables
                    .remove(from.trim())
                    .ok_or_else(|| format!("rename of {from}, which no migration created"))?;
                tables.insert(to.trim().to_owned(), class);
            }
        }
    }
    Ok(tables)
}

#[cfg(test)]
mod tests;
