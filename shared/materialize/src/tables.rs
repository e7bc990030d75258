//! Table shapes and row copies shared by materialize and persist: column lists, rowid handling,
//! bulk `INSERT … SELECT`, and exact row-by-row comparison.

use std::collections::HashMap;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, params};

use crate::namespace::quote_ident;

/// One column as `pragma_table_xinfo` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Column {
    pub(crate) name: String,
    pub(crate) decl_type: String,
    pub(crate) not_null: bool,
    pub(crate) default: Option<String>,
    pub(crate) pk: i64,
    /// 0 ordinary, 1 hidden (virtual tables), 2 and 3 generated (virtual / stored).
    pub(crate) hidden: i64,
}

/// A table's shape: its columns and whether it is a WITHOUT ROWID or STRICT table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) columns: Vec<Column>,
    pub(crate) without_rowid: bool,
    pub(crate) strict: bool,
}

/// The WITHOUT ROWID and STRICT flags of every table of one schema, by exact name.
///
/// Read once per operation rather than once per table: `pragma_table_list` builds its answer
/// from every table of every attached schema, so a query per table cost the whole schema per
/// table, and materializing or persisting `n` tables cost `n²`.
#[derive(Debug)]
pub(crate) struct TableFlags {
    schema: String,
    flags: HashMap<String, (bool, bool)>,
}

impl TableFlags {
    /// Reads the flags of `schema`'s tables.
    pub(crate) fn read(conn: &Connection, schema: &str) -> rusqlite::Result<TableFlags> {
        let mut stmt =
            conn.prepare("SELECT name, wr, strict FROM pragma_table_list WHERE schema = ?1")?;
        let flags = stmt
            .query_map([schema], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    (row.get::<_, i64>(1)? != 0, row.get::<_, i64>(2)? != 0),
                ))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(TableFlags {
            schema: schema.to_owned(),
            flags,
        })
    }
}

impl Shape {
    /// Reads the shape of table `table` in the schema `flags` were read from; `None` if there is
    /// no such table.
    pub(crate) fn read(
        conn: &Connection,
        flags: &TableFlags,
        table: &str,
    ) -> rusqlite::Result<Option<Shape>> {
        let schema = flags.schema.as_str();
        let mut stmt = conn.prepare(
            "SELECT name, type, \"notnull\", dflt_value, pk, hidden \
             FROM pragma_table_xinfo(?1, ?2) ORDER BY cid",
        )?;
        let columns = stmt
            .query_map(params![table, schema], |row| {
                Ok(Column {
                    name: row.get(0)?,
                    decl_type: row.get(1)?,
                    not_null: row.get::<_, i64>(2)? != 0,
                    default: row.get(3)?,
                    pk: row.get(4)?,
                    hidden: row.get(5)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        if columns.is_empty() {
            return Ok(None);
        }
        let (without_rowid, strict) = *flags
            .flags
            .get(table)
            .ok_or(rusqlite::Error::QueryReturnedNoRows)?;
        Ok(Some(Shape {
            columns,
            without_rowid,
            strict,
        }))
    }

    /// Returns the columns a copy carries: every column except generated (and hidden) ones,
    /// which SQLite computes itself (`table_xinfo` hidden == 0).
    pub(crate) fn stored_columns(&self) -> impl Iterator<Item = &Column> {
        self.columns.iter().filter(|c| c.hidden == 0)
    }

    /// Returns the name under which the rowid of a rowid table can be selected and inserted, if
    /// one of its three aliases is not shadowed by a column. Copies carry the rowid so that
    /// apps that use it (`SELECT rowid, …`) see the same values after a round trip, which the
    /// reference does not guarantee for tables without an INTEGER PRIMARY KEY.
    pub(crate) fn rowid_alias(&self) -> Option<&'static str> {
        if self.without_rowid {
            return None;
        }
        ["rowid", "oid", "_rowid_"].into_iter().find(|alias| {
            !self
                .columns
                .iter()
                .any(|c| c.name.eq_ignore_ascii_case(alias))
        })
    }

    /// Returns the quoted column list of a copy: the rowid alias (if any) then the stored columns.
    pub(crate) fn copy_list(&self) -> String {
        let mut parts: Vec<String> = Vec::with_capacity(self.columns.len() + 1);
        if let Some(alias) = self.rowid_alias() {
            parts.push(alias.to_owned());
        }
        parts.extend(self.stored_columns().map(|c| quote_ident(&c.name)));
        parts.join(", ")
    }

    /// Returns an ORDER BY clause that lists rows in key order, or `None` when no key can be
    /// named (a rowid table whose three rowid aliases are all shadowed by columns).
    pub(crate) fn key_order(&self) -> Option<String> {
        if self.without_rowid {
            let mut keys: Vec<&Column> = self.columns.iter().filter(|c| c.pk > 0).collect();
            keys.sort_by_key(|c| c.pk);
            let keys: Vec<String> = keys.iter().map(|c| quote_ident(&c.name)).collect();
            (!keys.is_empty()).then(|| keys.join(", "))
        } else {
            self.rowid_alias().map(str::to_owned)
        }
    }

    /// Returns whether rows copied from `self` fit `other` column for column.
    pub(crate) fn copy_compatible(&self, other: &Shape) -> bool {
        let mine: Vec<&str> = self.stored_columns().map(|c| c.name.as_str()).collect();
        let theirs: Vec<&str> = other.stored_columns().map(|c| c.name.as_str()).collect();
        mine == theirs && self.without_rowid == other.without_rowid
    }
}

/// Copies every row of `from_schema.from_table` into the empty `to_schema.to_table` with one
/// `INSERT … SELECT` (both schemas on the same connection). Returns the rows copied.
///
/// An empty source runs no `INSERT`: into an AUTOINCREMENT table one reads `sqlite_sequence`
/// row by row (it has no index) even when it copies nothing, so a write-back of `n` new, empty
/// AUTOINCREMENT tables would cost `n²`; and a copy of no rows writes nothing.
pub(crate) fn copy_rows(
    conn: &Connection,
    shape: &Shape,
    (from_schema, from_table): (&str, &str),
    (to_schema, to_table): (&str, &str),
) -> rusqlite::Result<usize> {
    let empty: bool = conn.query_row(
        &format!(
            "SELECT NOT EXISTS (SELECT 1 FROM {}.{})",
            quote_ident(from_schema),
            quote_ident(from_table)
        ),
        [],
        |row| row.get(0),
    )?;
    if empty {
        return Ok(0);
    }
    let list = shape.copy_list();
    let sql = format!(
        "INSERT INTO {}.{} ({list}) SELECT {list} FROM {}.{}",
        quote_ident(to_schema),
        quote_ident(to_table),
        quote_ident(from_schema),
        quote_ident(from_table),
    );
    conn.execute(&sql, [])
}

/// Copies every row of `main.from_table` on `from` into `main.to_table` on `to`, one row at a
/// time. Used only when the two databases cannot be attached to one connection.
pub(crate) fn copy_rows_between(
    from: &Connection,
    to: &Connection,
    shape: &Shape,
    from_table: &str,
    to_table: &str,
) -> rusqlite::Result<usize> {
    let list = shape.copy_list();
    let n_columns = shape.stored_columns().count() + usize::from(shape.rowid_alias().is_some());
    let placeholders = vec!["?"; n_columns].join(", ");
    let mut select = from.prepare(&format!(
        "SELECT {list} FROM main.{}",
        quote_ident(from_table)
    ))?;
    let mut insert = to.prepare(&format!(
        "INSERT INTO main.{} ({list}) VALUES ({placeholders})",
        quote_ident(to_table)
    ))?;
    let mut rows = select.query([])?;
    let mut copied = 0;
    while let Some(row) = rows.next()? {
        for idx in 0..n_columns {
            insert.raw_bind_parameter(idx + 1, ToSqlOutput::Borrowed(row.get_ref(idx)?))?;
        }
        insert.raw_execute()?;
        copied += 1;
    }
    Ok(copied)
}

/// Returns whether two values are identical: same storage class and same bytes. Reals compare
/// by bit pattern, so no change (not even -0.0 vs 0.0) is ever taken for "unchanged".
fn same_value(a: ValueRef<'_>, b: ValueRef<'_>) -> bool {
    match (a, b) {
        (ValueRef::Null, ValueRef::Null) => true,
        (ValueRef::Integer(x), ValueRef::Integer(y)) => x == y,
        (ValueRef::Real(x), ValueRef::Real(y)) => x.to_bits() == y.to_bits(),
        (ValueRef::Text(x), ValueRef::Text(y)) | (ValueRef::Blob(x), ValueRef::Blob(y)) => x == y,
        _ => false,
    }
}

/// Returns whether `a_schema.a_table` and `b_schema.b_table` (same shape) hold exactly the same
/// rows, rowids included, by walking both in key order in lockstep. Stops at the first
/// difference. Returns `false` when no key order can be named: rewriting is always safe.
pub(crate) fn same_rows(
    conn: &Connection,
    shape: &Shape,
    (a_schema, a_table): (&str, &str),
    (b_schema, b_table): (&str, &str),
) -> rusqlite::Result<bool> {
    let Some(order) = shape.key_order() else {
        return Ok(false);
    };
    let list = shape.copy_list();
    let n_columns = shape.stored_columns().count() + usize::from(shape.rowid_alias().is_some());
    let query = |schema: &str, table: &str| {
        format!(
            "SELECT {list} FROM {}.{} ORDER BY {order}",
            quote_ident(schema),
            quote_ident(table)
        )
    };
    let mut a_stmt = conn.prepare(&query(a_schema, a_table))?;
    let mut b_stmt = conn.prepare(&query(b_schema, b_table))?;
    let mut a_rows = a_stmt.query([])?;
    let mut b_rows = b_stmt.query([])?;
    loop {
        match (a_rows.next()?, b_rows.next()?) {
            (None, None) => return Ok(true),
            (Some(a), Some(b)) => {
                for idx in 0..n_columns {
                    if !same_value(a.get_ref(idx)?, b.get_ref(idx)?) {
                        return Ok(false);
                    }
                }
            }
            _ => return Ok(false),
        }
    }
}
