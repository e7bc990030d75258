//! Materialization (the reference driver's `load`): a fresh runtime holding only one app's
//! objects under natural names, and the per-app export built on it.
//!
//! Order (so triggers never fire on the copy and indexes are built once, in bulk):
//! 1. `snug_kv` (if its rest table exists), then every registered table, in registry order;
//! 2. the rows, with one `INSERT … SELECT` per table from the user database's connection, to
//!    which the runtime is attached for the copy only;
//! 3. indexes, triggers and views, in registry order;
//! 4. AUTOINCREMENT counters (`UPDATE sqlite_sequence`, `INSERT` only when no row changed:
//!    the table has no unique constraint).
//!
//! Registered DDL comes from a file that may be hostile, so it is replayed under the sandbox's
//! replay mode (CREATE of tables, indexes, triggers and views only, one statement per entry),
//! and the set of objects the replay produced must equal the set the registry lists.

use std::collections::{BTreeSet, HashMap, HashSet};

use rusqlite::Connection;
use snug_schema::{SNUG_KV, UserDb, is_valid_app_object_name};

use crate::error::{MaterializeError, ReplayProblem};
use crate::namespace::{AppNamespace, SNUG_KV_DDL, is_kv, quote_ident};
use crate::run::{PrepareProblem, prepare_one};
use crate::runtime::AppDatabase;
use crate::sandbox::Mode;
use crate::scan::{Refusal, is_virtual};
use crate::schema_json::{AppSchema, ObjectKind, SchemaObject};
use crate::tables::{Shape, TableFlags, copy_rows, copy_rows_between};
use crate::userside::{
    RUNTIME_ALIAS, RestTable, app_uses_db, attach_runtime, detach_runtime, end_transaction,
    registration, rest_tables,
};

/// Materializes app `namespace` of `user_db` into a fresh runtime database.
///
/// The runtime holds only this app's objects, under natural names; hub tables and other apps'
/// tables are absent (not filtered), so app SQL has nothing else to name. The user database is
/// only read. A namespace whose token another registered app id also has is refused
/// ([`MaterializeError::AppTokenCollision`]): its at-rest tables are that app's too.
///
/// At-rest tables of the app that the registry does not list (a registry lost or written by a
/// faulty host) are recovered: re-created from their at-rest DDL and renamed to their natural
/// name by SQLite, so their rows survive the next write-back instead of being dropped by it.
/// They are named by [`AppDatabase::unregistered_tables`]; a persist of the unchanged runtime
/// still writes nothing, so a read leaves the file as it is.
pub fn materialize(user_db: &UserDb, namespace: &str) -> Result<AppDatabase, MaterializeError> {
    let ns = AppNamespace::new(namespace);
    if let Some(other_app_id) = user_db.other_app_with_token(namespace)? {
        return Err(MaterializeError::AppTokenCollision {
            namespace: namespace.to_owned(),
            other_app_id,
            token: ns.token().to_owned(),
        });
    }
    let user = user_db.connection();
    let mut runtime = AppDatabase::create(ns.clone(), user_db.interrupt())?;
    // A read-only user connection (a legacy file whose adoption is pending) cannot attach the
    // runtime writable, so its rows are copied one by one instead.
    let bulk = !user.is_readonly(rusqlite::MAIN_DB)?;
    let attached = if bulk {
        Some(attach_runtime(user, runtime.uri())?)
    } else {
        None
    };
    let loaded = (|| {
        // One read transaction: the registry and the rows are one snapshot.
        user.execute_batch("BEGIN")?;
        let loaded = load_tables(user, &runtime, &ns, bulk);
        end_transaction(user, loaded.is_ok())?;
        loaded
    })();
    if let Some(attached) = attached {
        detach_runtime(user, attached)?;
    }
    let loaded = loaded?;
    finish(&runtime, &loaded)?;
    runtime.finish_materialize(user_db, loaded.recovered)?;
    Ok(runtime)
}

/// Returns app `namespace` as a standalone SQLite database image with natural names: the
/// per-app export (materialize + serialize), for any namespace shape.
pub fn export_app(user_db: &UserDb, namespace: &str) -> Result<Vec<u8>, MaterializeError> {
    let mut runtime = materialize(user_db, namespace)?;
    Ok(runtime.to_bytes()?)
}

/// What step 1 and 2 produced, for step 3 and 4.
struct Loaded {
    schema: AppSchema,
    kv: bool,
    recovered: Vec<String>,
}

fn replay_problem(kind: ObjectKind, name: &str, problem: ReplayProblem) -> MaterializeError {
    MaterializeError::Replay {
        kind,
        name: name.to_owned(),
        problem,
    }
}

/// Replays one stored statement under the sandbox's replay mode.
fn replay(
    runtime: &AppDatabase,
    kind: ObjectKind,
    name: &str,
    ddl: &str,
) -> Result<(), MaterializeError> {
    // Each replayed statement is short, too short for SQLite's progress handler: a long list
    // is stopped here, between statements.
    runtime.interrupt().check()?;
    let _replay = runtime.enter(Mode::Replay);
    let mut stmt = prepare_one(runtime.conn(), runtime.sandbox(), ddl).map_err(|problem| {
        let problem = match problem {
            PrepareProblem::NotOneStatement => ReplayProblem::NotOneStatement,
            PrepareProblem::Forbidden(forbidden) => ReplayProblem::Forbidden(forbidden),
            PrepareProblem::Failed(err) => ReplayProblem::Failed(err),
        };
        replay_problem(kind, name, problem)
    })?;
    stmt.execute([]).map_err(|err| {
        let problem = match runtime.sandbox().take_refusal() {
            Some(forbidden) => ReplayProblem::Forbidden(forbidden),
            None => ReplayProblem::Failed(err),
        };
        replay_problem(kind, name, problem)
    })?;
    Ok(())
}

/// Checks the registry before any of it runs: names, kinds, no virtual tables.
fn check_registry(ns: &AppNamespace, schema: &AppSchema) -> Result<(), MaterializeError> {
    for object in &schema.objects {
        let refusal = if is_kv(&object.name) || !is_valid_app_object_name(&object.name) {
            Some(Refusal::InvalidName {
                kind: object.kind,
                name: object.name.clone(),
            })
        } else if object.kind == ObjectKind::Table && is_virtual(&object.ddl, 1) {
            Some(Refusal::VirtualTable {
                name: object.name.clone(),
            })
        } else {
            None
        };
        if let Some(refusal) = refusal {
            return Err(MaterializeError::StoredObjectRefused {
                namespace: ns.as_str().to_owned(),
                refusal,
            });
        }
    }
    Ok(())
}

/// Steps 1 and 2, inside the user connection's read transaction.
fn load_tables(
    user: &Connection,
    runtime: &AppDatabase,
    ns: &AppNamespace,
    bulk: bool,
) -> Result<Loaded, MaterializeError> {
    if app_uses_db(user, ns)?.is_none() {
        return Err(MaterializeError::AppNotFound {
            namespace: ns.as_str().to_owned(),
        });
    }
    let schema = match registration(user, ns)? {
        Some(row) => AppSchema::parse(&row.schema_json).map_err(|problem| {
            MaterializeError::CorruptSchema {
                namespace: ns.as_str().to_owned(),
                problem,
            }
        })?,
        None => AppSchema::default(),
    };
    check_registry(ns, &schema)?;
    let rest = rest_tables(user, ns)?;
    // By name as SQLite compares names (ASCII case-insensitively); the first of equals wins, as
    // a search in creation order would find it.
    let mut rest_by_name: HashMap<String, &RestTable> = HashMap::new();
    for table in &rest {
        rest_by_name
            .entry(table.natural.to_ascii_lowercase())
            .or_insert(table);
    }
    let find_rest = |natural: &str| rest_by_name.get(&natural.to_ascii_lowercase()).copied();
    let kv_rest = rest.iter().find(|r| r.natural == SNUG_KV);
    let registered: HashSet<String> = schema
        .objects
        .iter()
        .map(|o| o.name.to_ascii_lowercase())
        .collect();
    let listed = |natural: &str| registered.contains(&natural.to_ascii_lowercase());
    let orphans: Vec<&RestTable> = rest
        .iter()
        .filter(|r| {
            !is_kv(&r.natural) && is_valid_app_object_name(&r.natural) && !listed(&r.natural)
        })
        .collect();

    // Step 1: tables, in one runtime transaction.
    let mut copies: Vec<(String, &RestTable)> = Vec::new();
    {
        let _internal = runtime.enter(Mode::Internal);
        runtime.conn().execute_batch("BEGIN")?;
    }
    let created = (|| {
        if let Some(kv) = kv_rest {
            replay(runtime, ObjectKind::Table, SNUG_KV, SNUG_KV_DDL)?;
            copies.push((SNUG_KV.to_owned(), kv));
        }
        for table in schema
            .objects
            .iter()
            .filter(|o| o.kind == ObjectKind::Table)
        {
            replay(runtime, ObjectKind::Table, &table.name, &table.ddl)?;
            if let Some(rest_table) = find_rest(&table.name) {
                copies.push((table.name.clone(), rest_table));
            }
        }
        for orphan in &orphans {
            recover(runtime, orphan)?;
            copies.push((orphan.natural.clone(), orphan));
        }
        // A stored text that creates another table than its entry names is caught before any
        // row is copied.
        let recovered: Vec<String> = orphans.iter().map(|o| o.natural.clone()).collect();
        check_objects(
            runtime.conn(),
            &schema,
            kv_rest.is_some(),
            &recovered,
            Some(ObjectKind::Table),
        )
    })();
    {
        let _internal = runtime.enter(Mode::Internal);
        end_transaction(runtime.conn(), created.is_ok())?;
    }
    created?;

    // Step 2: rows. The runtime's shape decides the column list; the at-rest table must match it.
    let mut shapes = Vec::with_capacity(copies.len());
    let runtime_flags = {
        let _internal = runtime.enter(Mode::Internal);
        TableFlags::read(runtime.conn(), "main")?
    };
    let rest_flags = TableFlags::read(user, "main")?;
    for (natural, rest_table) in &copies {
        let shape = {
            let _internal = runtime.enter(Mode::Internal);
            Shape::read(runtime.conn(), &runtime_flags, natural)?
        };
        let rest_shape = Shape::read(user, &rest_flags, &rest_table.name)?;
        match (shape, rest_shape) {
            (Some(shape), Some(rest_shape)) if shape.copy_compatible(&rest_shape) => {
                shapes.push(shape);
            }
            _ => {
                return Err(MaterializeError::RestTableMismatch {
                    rest_table: rest_table.name.clone(),
                });
            }
        }
    }
    if bulk {
        for ((natural, rest_table), shape) in copies.iter().zip(&shapes) {
            runtime.interrupt().check()?;
            copy_rows(
                user,
                shape,
                ("main", &rest_table.name),
                (RUNTIME_ALIAS, natural),
            )?;
        }
    } else {
        let _internal = runtime.enter(Mode::Internal);
        runtime.conn().execute_batch("BEGIN")?;
        let copied = copies
            .iter()
            .zip(&shapes)
            .try_for_each(|((natural, rest_table), shape)| {
                copy_rows_between(user, runtime.conn(), shape, &rest_table.name, natural)
                    .map(|_| ())
            });
        end_transaction(runtime.conn(), copied.is_ok())?;
        copied?;
    }
    Ok(Loaded {
        schema,
        kv: kv_rest.is_some(),
        recovered: orphans.iter().map(|o| o.natural.clone()).collect(),
    })
}

/// Re-creates an unregistered at-rest table in the runtime under its natural name: its at-rest
/// DDL replayed verbatim, then renamed by SQLite (a pure name swap, never a text edit).
fn recover(runtime: &AppDatabase, orphan: &RestTable) -> Result<(), MaterializeError> {
    replay(runtime, ObjectKind::Table, &orphan.name, &orphan.sql)?;
    let _internal = runtime.enter(Mode::Internal);
    let conn = runtime.conn();
    let legacy: i64 = conn.pragma_query_value(None, "legacy_alter_table", |row| row.get(0))?;
    conn.pragma_update(None, "legacy_alter_table", "ON")?;
    let renamed = conn.execute_batch(&format!(
        "ALTER TABLE main.{} RENAME TO {}",
        quote_ident(&orphan.name),
        quote_ident(&orphan.natural)
    ));
    conn.pragma_update(None, "legacy_alter_table", legacy)?;
    renamed
        .map_err(|err| replay_problem(ObjectKind::Table, &orphan.name, ReplayProblem::Failed(err)))
}

/// Steps 3 and 4, and the final check that the runtime holds exactly what the registry lists.
fn finish(runtime: &AppDatabase, loaded: &Loaded) -> Result<(), MaterializeError> {
    {
        let _internal = runtime.enter(Mode::Internal);
        runtime.conn().execute_batch("BEGIN")?;
    }
    let done = (|| {
        for object in loaded
            .schema
            .objects
            .iter()
            .filter(|o| o.kind != ObjectKind::Table)
        {
            replay(runtime, object.kind, &object.name, &object.ddl)?;
        }
        restore_sequences(runtime, &loaded.schema)?;
        check_objects(
            runtime.conn(),
            &loaded.schema,
            loaded.kv,
            &loaded.recovered,
            None,
        )
    })();
    let _internal = runtime.enter(Mode::Internal);
    end_transaction(runtime.conn(), done.is_ok())?;
    done
}

fn restore_sequences(runtime: &AppDatabase, schema: &AppSchema) -> Result<(), MaterializeError> {
    let _internal = runtime.enter(Mode::Internal);
    let conn = runtime.conn();
    let has_sequence_table: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence')",
        [],
        |row| row.get(0),
    )?;
    if !has_sequence_table {
        return Ok(());
    }
    let tables: HashSet<&str> = schema
        .objects
        .iter()
        .filter(|o| o.kind == ObjectKind::Table)
        .map(|o| o.name.as_str())
        .collect();
    for (table, seq) in &schema.sequences {
        if !tables.contains(table.as_str()) {
            continue;
        }
        let updated = conn.execute(
            "UPDATE main.sqlite_sequence SET seq = ?2 WHERE name = ?1",
            rusqlite::params![table, seq],
        )?;
        if updated == 0 {
            conn.execute(
                "INSERT INTO main.sqlite_sequence (name, seq) VALUES (?1, ?2)",
                rusqlite::params![table, seq],
            )?;
        }
    }
    Ok(())
}

/// Checks that replay produced exactly the registered objects (plus `snug_kv` and recovered
/// tables), or only their tables when `only` says so: a stored DDL text naming another object
/// than its entry is caught here.
fn check_objects(
    conn: &Connection,
    schema: &AppSchema,
    kv: bool,
    recovered: &[String],
    only: Option<ObjectKind>,
) -> Result<(), MaterializeError> {
    let wanted = |kind: ObjectKind| only.is_none_or(|only| only == kind);
    let mut expected: BTreeSet<(ObjectKind, String)> = schema
        .objects
        .iter()
        .filter(|o| wanted(o.kind))
        .map(|SchemaObject { kind, name, .. }| (*kind, name.clone()))
        .collect();
    if kv {
        expected.insert((ObjectKind::Table, SNUG_KV.to_owned()));
    }
    for name in recovered {
        expected.insert((ObjectKind::Table, name.clone()));
    }
    let mut found = BTreeSet::new();
    let mut stmt =
        conn.prepare("SELECT type, name FROM main.sqlite_master WHERE sql IS NOT NULL")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let (kind, name): (String, String) = (row.get(0)?, row.get(1)?);
        let internal = name
            .get(..7)
            .is_some_and(|head| head.eq_ignore_ascii_case("sqlite_"));
        match ObjectKind::parse(&kind) {
            Some(kind) if !internal && wanted(kind) => {
                found.insert((kind, name));
            }
            _ => {}
        }
    }
    if found != expected {
        return Err(MaterializeError::SchemaMismatch {
            expected: expected.into_iter().collect(),
            found: found.into_iter().collect(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
