//! App materialization (spec §8.2): each app's data lives as native tables
//! `app_<token>__<name>` inside the user database; this crate moves it between there and a
//! runtime database that holds only that app's objects under natural names.
//!
//! - [`materialize`]: user database → fresh [`AppDatabase`] (tables, rows, then indexes,
//!   triggers, views, AUTOINCREMENT counters); [`export_app`]: the same, serialized — a
//!   standalone SQLite file with natural names, for any namespace shape.
//! - [`persist`]: [`AppDatabase`] → user database in one `BEGIN IMMEDIATE` transaction; at-rest
//!   names made only by SQLite's `ALTER TABLE … RENAME`; verbatim DDL and counters in
//!   `snug_app_schemas` (the reference's `schema_json` format, [`AppSchema`]); `uses_db`; the
//!   64 MiB cap. An unchanged runtime writes nothing, and only changed tables are rewritten.
//! - [`apply_ddl`]: statements applied atomically, persisted, and audited in
//!   `snug_app_migrations`; at most [`MAX_DDL_STATEMENTS`] statements and [`MAX_DDL_BYTES`] of
//!   text per call, in work linear in the statements.
//! - [`execute`] / [`AppDatabase::execute`]: sandboxed SQL with typed, bounded results
//!   ([`ExecuteLimits`], [`SqlValue`]) for hubs in other languages; writes persist. Over a
//!   bound a result is truncated and flagged by default ([`Overflow::Truncate`]); the
//!   reference's error is [`Overflow::Fail`].
//! - [`list_apps_tables`]: every app's token, `uses_db` and at-rest tables.
//!
//! The token and name rules are `snug-schema`'s ([`snug_schema::app_data_token`],
//! [`snug_schema::is_valid_app_object_name`]); [`AppNamespace`] pairs a namespace with its token.
//!
//! **Architecture invariants.**
//! - Names are validated before any interpolation; a runtime with an invalid name, a virtual
//!   table or a foreign `snug_kv` is refused before the user database is touched (fail closed:
//!   prior rest state, secrets and other apps untouched).
//! - Isolation is physical: a runtime contains only its app's objects. Its connection never
//!   attaches anything (sandbox + `SQLITE_LIMIT_ATTACHED = 0`); bulk copies run on the *user*
//!   database's connection, to which the runtime is attached for one operation.
//! - Stored DDL is replayed verbatim under a replay-only sandbox and must produce exactly the
//!   registered objects; DDL text is never rewritten.
//!
//! Every operation family has its own error enum with a stable `reason()`.
//!
//! Work on a user database opened with an interrupt ([`snug_schema::UserDb::from_bytes_with`])
//! stops when it fires: the runtime materialized from it inherits it, every statement on either
//! connection is stopped by SQLite's progress handler, and the loops over statements, stored
//! objects and tables check it between steps (statements too short for the handler). The call
//! then fails with SQLite's `SQLITE_INTERRUPT` inside its error, and writes nothing.
//!
//! What this crate deliberately does not do:
//! - No gRPC, sockets or CLI: the `snug.materialize.v1` service and `snug app …` wrap it.
//! - No file I/O: user databases come in as [`snug_schema::UserDb`] and runtimes as bytes or
//!   [`AppDatabase`]s; callers write outputs.
//! - No sync state: the push-state sidecar is `snug-restore`'s (`snug_restore::push_state`).
//! - No concurrency control beyond SQLite's locks: a runtime materialized twice and persisted
//!   twice is last-writer-wins per table, as in the reference.
//!
//! # Design notes
//!
//! (Moved from ARCHITECTURE.md, which stays a map; the map's paragraph opens it.)
//!
//! Per-app native tables (§8.2): an app's data lives in the user database as `app_<token>__<name>`
//! tables; this crate moves it between there and a runtime database (`AppDatabase`, in memory)
//! holding only that app's objects under natural names.
//! `materialize`/`export_app` build the runtime: a fresh database, the user database's connection
//! ATTACHes it for one operation and copies the rows with `INSERT … SELECT` (bulk, no row-by-row
//! round trips), the registered DDL (`snug_app_schemas.schema_json`, the reference's format) is
//! replayed verbatim in creation order — tables, rows, then indexes, triggers and views, so triggers
//! do not fire on the copy — and AUTOINCREMENT counters are restored.
//! `persist` writes a runtime back in one `BEGIN IMMEDIATE` transaction: SQLite's `ALTER TABLE …
//! RENAME` of the natural DDL makes the at-rest name (statement text is never edited; the rename
//! runs on a scratch database holding only that table, so each costs the same however large the
//! user database's schema), `schema_json` records the verbatim DDL and counters, `uses_db` flips, and the
//! 64 MiB cap is checked with an overflow rolled back whole.
//! Unchanged detection: a runtime this crate materialized knows whether anything ran on it since
//! (SQLite's change and schema counters), so persisting it untouched compares nothing and writes
//! nothing; any other runtime is compared table by table (shape, then content), and only tables
//! whose shape or content differ are rewritten.
//! `apply_ddl` runs statements atomically and appends them to `snug_app_migrations` with
//! consecutive sequence numbers; `execute` runs app SQL with typed, bounded results; writes persist.
//! **Architecture Invariant:** names are validated against `^[A-Za-z][A-Za-z0-9_]{0,40}$` (no
//! `snug_`/`sqlite_`/`app_` prefix in any case, `snug_kv` exempt) before any interpolation; a
//! runtime that breaks the rule is refused whole before the user database is touched (fail closed:
//! the prior rest state, the secrets and every other app untouched).
//! **Architecture Invariant:** isolation is physical, not filtered: a runtime contains only its
//! app's objects, so app SQL cannot name hub tables or other apps' tables by either name.
//! **Architecture Invariant:** the sandbox (an authorizer on every runtime connection, plus
//! `SQLITE_LIMIT_ATTACHED = 0`) refuses ATTACH/DETACH, `writable_schema` and every pragma off its
//! allowlist, `load_extension`, transaction control, virtual tables and any database but `main`/
//! `temp`; each statement has a virtual-machine step budget; stored DDL is replayed under a
//! stricter replay-only mode that may only create the registered objects.
//! No gRPC, no files, no sync loop.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod ddl;
mod error;
mod execute;
mod list;
mod materialize;
mod namespace;
mod persist;
mod run;
mod runtime;
mod sandbox;
mod scan;
mod schema_json;
mod tables;
mod userside;

#[cfg(test)]
mod test_support;

pub use ddl::{DdlReport, MAX_DDL_BYTES, MAX_DDL_STATEMENTS, apply_ddl, check_ddl_bounds};
pub use error::{
    DdlError, ExecuteError, ListError, LoadError, MaterializeError, PersistError, ReplayProblem,
    StatementProblem,
};
pub use execute::{
    DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, DEFAULT_MAX_STEPS, ExecuteLimits, ExecuteReport, Overflow,
    SqlValue, StatementResult, execute,
};
pub use list::{AppTable, AppTables, AppsTables, list_apps_tables};
pub use materialize::{export_app, materialize};
pub use namespace::{AppNamespace, SNUG_KV_DDL};
pub use persist::{PersistReport, RegistryChange, persist};
pub use runtime::AppDatabase;
pub use sandbox::Forbidden;
pub use scan::Refusal;
pub use schema_json::{AppSchema, ObjectKind, SchemaJsonProblem, SchemaObject};
