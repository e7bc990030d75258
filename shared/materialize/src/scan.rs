//! Reading and judging a runtime's schema before anything is written: every object name is
//! checked against the §8.2 rule, virtual tables are refused, and the registered schema
//! (`schema_json`) is computed.
//!
//! This is the fail-closed gate: [`scan`] reads only the runtime, so a refusal leaves the user
//! database — the app's previous rest state, the secrets, every other app — exactly as it was.

use std::collections::{HashMap, HashSet};

use rusqlite::Connection;
use serde::Serialize;
use snug_schema::is_valid_app_object_name;

use crate::namespace::is_kv;
use crate::schema_json::{AppSchema, ObjectKind, SchemaObject};
use crate::tables::{Column, Shape, TableFlags};

/// Why a runtime's schema cannot be written back (nothing was written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "refusal", rename_all = "snake_case")]
pub enum Refusal {
    /// An object name that breaks `^[A-Za-z][A-Za-z0-9_]{0,40}$` or carries a reserved prefix
    /// (`snug_`, `sqlite_`, `app_`, any case; only the table `snug_kv` is exempt).
    #[error("{kind} name {name:?} breaks the §8.2 object-name rule")]
    InvalidName {
        /// What the object is.
        kind: ObjectKind,
        /// The name.
        name: String,
    },
    /// A virtual table: it would need module code at every materialization.
    #[error("virtual table {name:?} cannot be persisted")]
    VirtualTable {
        /// The table.
        name: String,
    },
    /// `snug_kv` exists but is not the driver's key/value table
    /// `(key TEXT PRIMARY KEY, value TEXT)`, so it could not be re-created on materialization.
    #[error("snug_kv is not the driver's (key TEXT PRIMARY KEY, value TEXT) table")]
    KvTable,
    /// A `sqlite_master` row of a type SQLite does not define.
    #[error("unknown schema object type {kind:?} for {name:?}")]
    UnknownObject {
        /// The type found.
        kind: String,
        /// The name.
        name: String,
    },
}

impl Refusal {
    /// Returns the stable machine reason.
    pub fn reason(&self) -> &'static snug_reasons::Reason {
        match self {
            Refusal::InvalidName { .. } | Refusal::UnknownObject { .. } => {
                &snug_reasons::materialize::INVALID_NAME
            }
            Refusal::VirtualTable { .. } => &snug_reasons::materialize::VIRTUAL_TABLE,
            Refusal::KvTable => &snug_reasons::materialize::INVALID_KV_TABLE,
        }
    }
}

/// A table of the runtime, in creation order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuntimeTable {
    /// Its natural name.
    pub(crate) name: String,
    /// Its `sqlite_master.sql`, verbatim.
    pub(crate) sql: String,
    /// Its shape in the runtime.
    pub(crate) shape: Shape,
}

/// A judged runtime schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuntimeScan {
    /// Every table including `snug_kv`, in creation order.
    pub(crate) tables: Vec<RuntimeTable>,
    /// What `schema_json` must say: every object except `snug_kv`, and the counters.
    pub(crate) schema: AppSchema,
}

/// Why a scan failed.
#[derive(Debug)]
pub(crate) enum ScanError {
    Refused(Refusal),
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for ScanError {
    fn from(err: rusqlite::Error) -> Self {
        ScanError::Sqlite(err)
    }
}

fn is_internal(name: &str) -> bool {
    name.get(..7)
        .is_some_and(|head| head.eq_ignore_ascii_case("sqlite_"))
}

/// Returns whether a `sqlite_master` table row is a virtual table. SQLite writes their text as
/// `CREATE VIRTUAL TABLE …` and gives them no root page; either sign suffices.
pub(crate) fn is_virtual(sql: &str, rootpage: i64) -> bool {
    rootpage == 0
        || sql
            .trim_start()
            .get(..20)
            .is_some_and(|head| head.eq_ignore_ascii_case("CREATE VIRTUAL TABLE"))
}

/// The only shape `snug_kv` may have.
fn is_kv_shape(shape: &Shape) -> bool {
    let expected = [
        Column {
            name: "key".into(),
            decl_type: "TEXT".into(),
            not_null: false,
            default: None,
            pk: 1,
            hidden: 0,
        },
        Column {
            name: "value".into(),
            decl_type: "TEXT".into(),
            not_null: false,
            default: None,
            pk: 0,
            hidden: 0,
        },
    ];
    shape.columns == expected && !shape.without_rowid && !shape.strict
}

/// Reads `conn`'s main schema in creation order and judges it.
pub(crate) fn scan(conn: &Connection) -> Result<RuntimeScan, ScanError> {
    let rows: Vec<(String, String, i64, String)> = {
        let mut stmt = conn.prepare(
            "SELECT type, name, rootpage, sql FROM main.sqlite_master \
             WHERE sql IS NOT NULL ORDER BY rowid",
        )?;
        stmt.query_map([], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })?
        .collect::<rusqlite::Result<_>>()?
    };
    let flags = TableFlags::read(conn, "main")?;
    let mut tables = Vec::new();
    let mut objects = Vec::new();
    for (kind_text, name, rootpage, sql) in rows {
        // SQLite's own tables (sqlite_sequence, sqlite_stat*) are not app objects; users
        // cannot create such names.
        if is_internal(&name) {
            continue;
        }
        let refuse = |refusal| Err(ScanError::Refused(refusal));
        let Some(kind) = ObjectKind::parse(&kind_text) else {
            return refuse(Refusal::UnknownObject {
                kind: kind_text,
                name,
            });
        };
        if kind == ObjectKind::Table && is_virtual(&sql, rootpage) {
            return refuse(Refusal::VirtualTable { name });
        }
        let kv = is_kv(&name);
        if (kv && kind != ObjectKind::Table) || (!kv && !is_valid_app_object_name(&name)) {
            return refuse(Refusal::InvalidName { kind, name });
        }
        if kind == ObjectKind::Table {
            let shape = Shape::read(conn, &flags, &name)?
                .ok_or_else(|| ScanError::Sqlite(rusqlite::Error::QueryReturnedNoRows))?;
            if kv && !is_kv_shape(&shape) {
                return refuse(Refusal::KvTable);
            }
            tables.push(RuntimeTable {
                name: name.clone(),
                sql: sql.clone(),
                shape,
            });
        }
        if !kv {
            objects.push(SchemaObject {
                kind,
                name,
                ddl: sql,
            });
        }
    }
    let sequences = read_sequences(conn, &objects)?;
    Ok(RuntimeScan {
        tables,
        schema: AppSchema { objects, sequences },
    })
}

/// Reads the AUTOINCREMENT counters of registered tables, in `sqlite_sequence` order.
///
/// `sqlite_sequence` has no unique constraint and app SQL may write it; a repeated name keeps
/// its first position and its last value (what assigning keys of a JS object does), and
/// non-integer counters are ignored because SQLite itself would read them as 0.
fn read_sequences(
    conn: &Connection,
    objects: &[SchemaObject],
) -> rusqlite::Result<Vec<(String, i64)>> {
    let exists: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence')",
        [],
        |row| row.get(0),
    )?;
    if !exists {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare("SELECT name, seq FROM main.sqlite_sequence ORDER BY rowid")?;
    let rows = stmt.query_map([], |row| {
        Ok((
            row.get::<_, rusqlite::types::Value>(0)?,
            row.get::<_, rusqlite::types::Value>(1)?,
        ))
    })?;
    let tables: HashSet<&str> = objects
        .iter()
        .filter(|o| o.kind == ObjectKind::Table)
        .map(|o| o.name.as_str())
        .collect();
    let mut sequences: Vec<(String, i64)> = Vec::new();
    let mut position: HashMap<String, usize> = HashMap::new();
    for row in rows {
        let (rusqlite::types::Value::Text(name), rusqlite::types::Value::Integer(seq)) = row?
        else {
            continue;
        };
        if !tables.contains(name.as_str()) {
            continue;
        }
        match position.get(&name) {
            Some(&at) => sequences[at].1 = seq,
            None => {
                position.insert(name.clone(), sequences.len());
                sequences.push((name, seq));
            }
        }
    }
    Ok(sequences)
}
