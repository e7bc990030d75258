//! The Snug user database (spec §8–§10): one SQLite file per user, `user.snug`, at storage version 6.
//!
//! This crate owns the file's hub-namespace schema and everything that keeps it sound:
//!
//! - [`ddl`]: the 13 `CREATE TABLE IF NOT EXISTS` statements and the partial unique index, text
//!   identical to the reference's, each table with its [`TableClass`] (what leaves the machine
//!   in an export), and [`classify_table`] for every name a file may hold.
//! - The open pipeline ([`UserDb::open_path`], [`UserDb::open_dir`], [`UserDb::from_bytes`],
//!   [`UserDb::create_in_memory`], [`migrate_file`], [`migrate_bytes`]): defensive connection
//!   settings, refusal of newer files ([`OpenError::SchemaTooNew`], bytes untouched) and hostile
//!   schemas, the forward-only ladder 0→6, the self-heal (tables, migration-added columns and the
//!   index; never `snug_auth_specs`), the legacy credential wipe on version advance, and
//!   `snug_meta` seeding. A healthy current file is opened with zero bytes written.
//! - Hub-namespace operations as methods on [`UserDb`]: apps and versions (install, save with
//!   retention, revert, reset-to-factory, delete), docs, chat, settings/profile/sync/secrets,
//!   namespaced settings keys, and [`UserDb::delete_app`].
//! - [`export_file`] / [`export_bytes`]: default-deny by class, secrets stripped with no byte
//!   left in free pages; [`import`]: containers, caps, defensive open, `quick_check`, identity and
//!   hostility checks, migrate/heal/wipe, grant reconciliation, contract guard, re-confirm latch,
//!   measured against the replaced database or, with [`import_against`], an [`ImportBaseline`]
//!   of grants and contracts a hub keeps elsewhere.
//! - [`scrub_free_space`]: a page-level walk of a SQLite image that zeroes its free space
//!   (freeblocks, unallocated page areas, free-list pages, overflow tails) and nothing else, so
//!   no deleted record survives in what a hub stores; exports come out scrubbed.
//! - [`resolve_user_file`] / [`resolve_derived`]: the §10 read-and-adopt naming rule, with
//!   [`resolve_given`] deciding what a path a command was given stands for (read, write, backup), and
//!   [`app_data_token`] / [`app_rest_table_name`]: the §8.2 per-app namespace functions.
//!
//! Every fallible operation family has its own error enum with a stable
//! [`reason`](OpenError::reason) string for services and the CLI to map.
//!
//! ```
//! use std::sync::Arc;
//! use snug_schema::{ExportOptions, ImportOptions, NewApp, SaveVersion, SteppingClock, UserDb};
//!
//! let clock = Arc::new(SteppingClock::frozen_at_unix_ms(1_767_225_600_000));
//! let (mut db, report) = UserDb::create_in_memory(clock.clone()).unwrap();
//! assert!(report.seeded_meta);
//! let new = NewApp { display_name: "Notes".into(), html: "<p>v1</p>".into(), ..NewApp::default() };
//! let app = db.install_app(&new).unwrap();
//! db.save_app_version(&app.app_id, "<p>v2</p>", &SaveVersion::default()).unwrap();
//! db.set_secret("byok:anthropic", "sk-ant-example").unwrap();
//!
//! // A default export carries no secret, not even in free pages.
//! let (bytes, export) = snug_schema::export_bytes(&mut db, ExportOptions::default()).unwrap();
//! assert_eq!(export.secrets_removed, 1);
//! assert!(!bytes.windows(14).any(|w| w == b"sk-ant-example"));
//!
//! // Importing it re-arms the endpoint confirmation latch.
//! let (imported, _) = snug_schema::import(&bytes, Some(&db), &ImportOptions::default(), clock).unwrap();
//! assert!(imported.needs_endpoint_confirm().unwrap());
//! assert_eq!(imported.app(&app.app_id).unwrap().current_version, 2);
//! ```
//!
//! What this crate deliberately does not do:
//! - No network, no gRPC, no CLI: services and the `snug` binary wrap it.
//! - No per-app materialization: reading and writing `app_<token>__*` tables and
//!   `snug_app_schemas` is the materializer's job; this crate only names, classifies, exports
//!   and deletes them.
//! - No container cryptography: SNUGENC1 files are opened through `snug-container`, and sealing a
//!   saved or exported image is the caller's choice.
//! - No persistence policy: an in-memory [`UserDb`] is written where and when the caller says
//!   ([`UserDb::save_to`], or `snug_files::write_atomically` over [`UserDb::to_bytes`]); there is no debounce, no quarantine of corrupt
//!   files and no sync loop.
//! - No full validation of connection requirements or runtime contracts: import checks a
//!   requirement's structure ([`check_requirement`]) and compares contracts by canonical form;
//!   field-level lints belong to the connection and contract capabilities.
//! - It reads no clock of its own: times come from the [`Clock`] passed in.
//! - It never decides when to give up: a host that may stop waiting passes an [`Interrupt`]
//!   ([`UserDb::from_bytes_with`]) and sets it; nothing here is async or knows a deadline.
//!
//! # Design notes
//!
//! (Moved from ARCHITECTURE.md, which stays a map; the map's paragraph opens it.)
//!
//! The user database of §8–§10, one SQLite file per user: the v6 DDL (13 hub tables and the partial
//! unique index, text identical to the reference's, locked by a snapshot test), each table's export
//! class, the open pipeline (`UserDb::open_path`/`open_dir`/`from_bytes`/`create_in_memory`,
//! `migrate_bytes`, `migrate_file`, `inspect_bytes`/`inspect_path`), the hub-namespace operations as
//! `UserDb` methods (apps and versions with retention, docs, chat, settings/profile/sync/secrets,
//! `delete_app`), `export_file`/`export_bytes`, `import`/`import_check`, and the §10 naming rule.
//! `import_against` is the one import (reconciliation, contract guard, re-confirmation latch) every
//! path runs, measured against an `ImportBaseline`: the replaced database's approved grants and
//! contracts (`ImportBaseline::of`, what `import` and the pull use) or a hub's own
//! (`ImportBaseline::new`, for ImportUserDatabase).
//! One error enum per operation family, each with a stable `reason()`.
//! **Architecture Invariant:** the ladder is forward-only, and applied migrations never change; a
//! file stamped newer than 6 is refused with its bytes untouched (`SCHEMA_TOO_NEW`).
//! **Architecture Invariant:** a healthy current file is opened with zero bytes written; everything
//! an open changes (ladder, heal, legacy credential wipe, `snug_meta` seeding) runs in one transaction.
//! **Architecture Invariant:** export is default-deny by table class: a table whose class is not
//! exported (and every foreign table) is dropped, `snug_secrets` is emptied unless secrets are asked
//! for, and no stripped byte survives in free pages.
//! **Architecture Invariant:** untrusted files are opened defensively (`SQLITE_DBCONFIG_DEFENSIVE`,
//! `trusted_schema=OFF`, no extensions, `cell_size_check`, `quick_check` first); triggers, views,
//! virtual tables, foreign indexes and wrong table shapes are refused as hostile, never executed.
//! Beyond the reference: a missing migration-added column is restored by the heal; retention counts
//! rows, so at least five unpinned versions survive in every case.
//! No network, no gRPC and no container cryptography of its own (SNUGENC1 files are opened through
//! `snug-container`); it reads no clock except the `Clock` passed in.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod apps;
mod chat;
mod clock;
mod db;
pub mod ddl;
mod docs;
mod error;
mod export;
mod import;
mod interrupt;
mod isolation;
mod kv;
mod naming;
mod open;
mod reasoned;
mod scrub;
mod sync_image;
mod token;
mod wipe;

#[cfg(test)]
mod test_support;

pub use apps::{
    App, AppMetaUpdate, AppVersion, ContractSource, DeletedApp, Installed, NewApp, SaveVersion,
    VersionSummary, is_app_setting_key,
};
pub use chat::{ChatMessage, ChatRole, ChatThread, NewChatMessage};
pub use clock::{
    Clock, ManualClock, SteppingClock, SystemClock, format_uuid_v4, iso_timestamp, uuid_v4,
};
pub use db::{
    UserDb, inspect_bytes, inspect_path, migrate_bytes, migrate_file, pending_log,
    read_through_sqlite, wal_path,
};
pub use ddl::{
    Column, MAX_USERDB_BYTES, STORAGE_VERSION, TABLES, TableClass, TableDef, TableKind,
    VERSIONS_RETAINED, classify_table,
};
pub use docs::{ADVISORY_DOC_SLUGS, BUILD_PROMPT_SLUG, Doc, DocSeed, starter_doc_seeds};
pub use error::{
    AppError, ChatError, DocError, ExportError, Hostility, ImportError, KvError, Malformation,
    OpenError, SaveError, ShapeProblem,
};
pub use export::{
    ExportOptions, ExportReport, SYNC_COPY_MAX_FREE_SHARE, export_bytes, export_file,
    sync_copy_bytes,
};
pub use import::{
    ApprovedGrant, DroppedConnection, DroppedContract, ImportBaseline, ImportOptions, ImportReport,
    RequirementProblem, check_requirement, derive_allowed_hosts, https_url_host, import,
    import_against, import_check, normalize_host,
};
pub use interrupt::{Interrupt, PROGRESS_STEPS, interrupted, is_interrupted};
pub use isolation::TokenCollision;
pub use kv::{
    KvTable, NEEDS_ENDPOINT_CONFIRM_KEY, SIDECAR_HOST, SIDECAR_IDENTITY_DIRECTORY_KEY,
    app_model_key, canonical_json, encode_json,
};
pub use naming::{
    EXPORT_FILE, FileFormat, GivenFile, LEGACY_USER_FILE, LEGACY_USER_FILE_EXTENSION,
    SYNC_SIDECAR_SUFFIX, Standing, USER_FILE, USER_FILE_EXTENSION, UserFile, detect_format,
    has_user_file_extension, resolve_derived, resolve_given, resolve_user_file,
};
pub use open::{
    HealPlan, HealReport, Inspection, OpenReport, RefusalSummary, SQLITE_MAGIC, SchemaObject,
    TableSummary, schema_objects,
};
pub use scrub::{
    ScrubError, ScrubReport, dirty_free_space, scrub_free_space, scrub_free_space_in_place,
};
pub use sync_image::{
    SyncImage, SyncImageError, validate_sync_image, validate_sync_image_digested, zero_free_space,
};
pub use token::{
    MAX_APP_OBJECT_NAME_LEN, SNUG_KV, app_data_token, app_rest_table_name, app_rest_table_prefix,
    is_uuid_shaped, is_valid_app_object_name, is_valid_token, parse_rest_table_name,
};
pub use wipe::{is_app_credential_key, is_legacy_credential_key};
