//! The authorizer every app runtime connection carries: what app SQL, replayed DDL and this
//! crate's own statements may do.
//!
//! Isolation is physical first: a runtime database contains only its app's objects, so there is
//! nothing else to name. The authorizer keeps it that way by refusing every way out of the
//! database — ATTACH (which `VACUUM` and `VACUUM INTO` also go through), DETACH, virtual tables,
//! extension loading, `writable_schema` and any pragma not on an allowlist — and it runs with
//! SQLite's DEFENSIVE flag (no direct `sqlite_master` writes) and `SQLITE_LIMIT_ATTACHED = 0`
//! underneath it, so each layer alone already blocks the escape.
//!
//! Three modes, switched by this crate around its own work:
//! - [`Mode::App`] (the default whenever a caller holds the connection): app SQL.
//! - [`Mode::Replay`]: stored DDL from a user file being materialized — only `CREATE` of tables,
//!   indexes, triggers and views in `main`, because the file may be hostile.
//! - [`Mode::Internal`]: this crate's own statements (transactions, counter restore).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use serde::Serialize;
use snug_schema::is_valid_app_object_name;

/// Who is running SQL on a runtime connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Mode {
    /// App SQL: the sandbox proper.
    App = 0,
    /// DDL replayed from a stored schema.
    Replay = 1,
    /// This crate's own statements.
    Internal = 2,
}

impl Mode {
    fn from_u8(raw: u8) -> Mode {
        match raw {
            1 => Mode::Replay,
            2 => Mode::Internal,
            // Unknown values fall back to the strictest mode.
            _ => Mode::App,
        }
    }
}

/// Why the sandbox refused a statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Forbidden {
    /// `ATTACH` (also reached through `VACUUM` and `VACUUM INTO`).
    #[error("ATTACH is not allowed (VACUUM and VACUUM INTO attach internally)")]
    Attach,
    /// `DETACH`.
    #[error("DETACH is not allowed")]
    Detach,
    /// Creating or dropping a virtual table: module code chosen by the caller.
    #[error("virtual table {name:?} (module {module:?}) is not allowed")]
    VirtualTable {
        /// The table.
        name: String,
        /// The module.
        module: String,
    },
    /// A pragma that is not on the allowlist, or a read-only pragma given a value.
    #[error("PRAGMA {name} is not allowed")]
    Pragma {
        /// The pragma as SQLite reports it (unquoted).
        name: String,
    },
    /// A function that loads code or exposes pointers (`load_extension`, `fts3_tokenizer`).
    #[error("function {name}() is not allowed")]
    Function {
        /// The function.
        name: String,
    },
    /// `BEGIN`, `COMMIT`, `ROLLBACK`, `SAVEPOINT`, `RELEASE`: each call is one atomic unit, so
    /// transaction control belongs to this crate.
    #[error("transaction control is not allowed; each call runs as one transaction")]
    Transaction,
    /// Creating an object whose name breaks the §8.2 rule.
    #[error(
        "object name {name:?} is not allowed (§8.2: ^[A-Za-z][A-Za-z0-9_]{{0,40}}$, no snug_/sqlite_/app_ prefix)"
    )]
    InvalidName {
        /// The name.
        name: String,
    },
    /// A reference to a database other than `main` and `temp`.
    #[error("database {database:?} is not reachable")]
    OtherDatabase {
        /// The schema name.
        database: String,
    },
    /// Any other action the mode does not allow (replayed DDL may only create objects).
    #[error("{action} is not allowed here")]
    Statement {
        /// The action, as SQLite's authorizer names it.
        action: &'static str,
    },
}

/// Pragmas whose value is an argument (a table or index name), not a setting.
const PRAGMA_INTROSPECTION: &[&str] = &[
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "foreign_key_check",
    "integrity_check",
    "quick_check",
];

/// Pragmas an app may read and set: they change only its own session's semantics or its own
/// database's header fields.
const PRAGMA_SETTINGS: &[&str] = &[
    "user_version",
    "application_id",
    "foreign_keys",
    "defer_foreign_keys",
    "recursive_triggers",
    "case_sensitive_like",
    "legacy_alter_table",
    "automatic_index",
    "reverse_unordered_selects",
    "ignore_check_constraints",
    "analysis_limit",
    "optimize",
];

/// Pragmas an app may read but not set (`max_page_count` is the size cap; `page_size` and
/// `journal_mode` belong to the host).
const PRAGMA_READ_ONLY: &[&str] = &[
    "page_count",
    "page_size",
    "max_page_count",
    "freelist_count",
    "data_version",
    "schema_version",
    "encoding",
    "journal_mode",
    "auto_vacuum",
    "collation_list",
    "function_list",
    "module_list",
    "pragma_list",
    "database_list",
    "compile_options",
];

/// Functions never callable: they load code or hand out pointers.
const DENIED_FUNCTIONS: &[&str] = &[
    "load_extension",
    "fts3_tokenizer",
    "readfile",
    "writefile",
    "edit",
];

fn listed(list: &[&str], name: &str) -> bool {
    list.iter().any(|entry| entry.eq_ignore_ascii_case(name))
}

/// Returns whether SQL may never call function `name`.
pub(crate) fn denied_function(name: &str) -> bool {
    listed(DENIED_FUNCTIONS, name)
}

fn pragma_allowed(name: &str, value: Option<&str>) -> bool {
    listed(PRAGMA_INTROSPECTION, name)
        || listed(PRAGMA_SETTINGS, name)
        || (value.is_none() && listed(PRAGMA_READ_ONLY, name))
}

/// Returns whether `name` is one SQLite creates for itself (autoindexes, `sqlite_sequence`,
/// `sqlite_stat*`). Users cannot create such names, so letting them through is safe.
fn internal_name(name: &str) -> bool {
    name.get(..7)
        .is_some_and(|head| head.eq_ignore_ascii_case("sqlite_"))
}

fn creatable(name: &str) -> Result<(), Forbidden> {
    if internal_name(name) || is_valid_app_object_name(name) {
        Ok(())
    } else {
        Err(Forbidden::InvalidName {
            name: name.to_owned(),
        })
    }
}

/// Returns whether table `name` is SQLite's schema table, which CREATE statements write.
fn schema_table(name: &str) -> bool {
    [
        "sqlite_master",
        "sqlite_schema",
        "sqlite_temp_master",
        "sqlite_temp_schema",
    ]
    .iter()
    .any(|t| t.eq_ignore_ascii_case(name))
}

/// The authorizer's decision for one action. `Ok` allows it.
pub(crate) fn decide(mode: Mode, ctx: &AuthContext<'_>) -> Result<(), Forbidden> {
    if let Some(database) = ctx.database_name
        && !database.eq_ignore_ascii_case("main")
        && !database.eq_ignore_ascii_case("temp")
    {
        return Err(Forbidden::OtherDatabase {
            database: database.to_owned(),
        });
    }
    let statement = |action| Err(Forbidden::Statement { action });
    match (mode, ctx.action) {
        // Refused in every mode: these leave the database or run foreign code.
        (_, AuthAction::Attach { .. }) => Err(Forbidden::Attach),
        (_, AuthAction::Detach { .. }) => Err(Forbidden::Detach),
        (
            _,
            AuthAction::CreateVtable {
                table_name,
                module_name,
            }
            | AuthAction::DropVtable {
                table_name,
                module_name,
            },
        ) => Err(Forbidden::VirtualTable {
            name: table_name.to_owned(),
            module: module_name.to_owned(),
        }),
        (_, AuthAction::Function { function_name }) if listed(DENIED_FUNCTIONS, function_name) => {
            Err(Forbidden::Function {
                name: function_name.to_owned(),
            })
        }
        (_, AuthAction::Pragma { pragma_name, .. })
            if pragma_name.eq_ignore_ascii_case("writable_schema") =>
        {
            Err(Forbidden::Pragma {
                name: pragma_name.to_owned(),
            })
        }
        (Mode::Internal, _) => Ok(()),

        // Read-only actions are harmless in the remaining modes.
        (
            Mode::Replay | Mode::App,
            AuthAction::Select
            | AuthAction::Read { .. }
            | AuthAction::Recursive
            | AuthAction::Function { .. }
            | AuthAction::Reindex { .. },
        ) => Ok(()),

        // Replayed DDL may create objects in main (and SQLite's bookkeeping writes that
        // creation entails); the created set is checked against the stored list afterwards.
        (
            Mode::Replay,
            AuthAction::CreateTable { .. }
            | AuthAction::CreateIndex { .. }
            | AuthAction::CreateTrigger { .. }
            | AuthAction::CreateView { .. },
        ) => Ok(()),
        (
            Mode::Replay,
            AuthAction::Insert { table_name } | AuthAction::Update { table_name, .. },
        ) if schema_table(table_name) => Ok(()),
        (Mode::Replay, action) => statement(action_name(&action)),

        (Mode::App, AuthAction::CreateTable { table_name }) => creatable(table_name),
        (Mode::App, AuthAction::CreateIndex { index_name, .. }) => creatable(index_name),
        (Mode::App, AuthAction::CreateTrigger { trigger_name, .. }) => creatable(trigger_name),
        (Mode::App, AuthAction::CreateView { view_name }) => creatable(view_name),
        (
            Mode::App,
            AuthAction::CreateTempTable { .. }
            | AuthAction::CreateTempIndex { .. }
            | AuthAction::CreateTempTrigger { .. }
            | AuthAction::CreateTempView { .. }
            | AuthAction::DropTable { .. }
            | AuthAction::DropIndex { .. }
            | AuthAction::DropTrigger { .. }
            | AuthAction::DropView { .. }
            | AuthAction::DropTempTable { .. }
            | AuthAction::DropTempIndex { .. }
            | AuthAction::DropTempTrigger { .. }
            | AuthAction::DropTempView { .. }
            | AuthAction::Insert { .. }
            | AuthAction::Update { .. }
            | AuthAction::Delete { .. }
            | AuthAction::AlterTable { .. }
            | AuthAction::Analyze { .. },
        ) => Ok(()),
        (
            Mode::App,
            AuthAction::Pragma {
                pragma_name,
                pragma_value,
            },
        ) => {
            if pragma_allowed(pragma_name, pragma_value) {
                Ok(())
            } else {
                Err(Forbidden::Pragma {
                    name: pragma_name.to_owned(),
                })
            }
        }
        (Mode::App, AuthAction::Transaction { .. } | AuthAction::Savepoint { .. }) => {
            Err(Forbidden::Transaction)
        }
        (Mode::App, action) => statement(action_name(&action)),
    }
}

fn action_name(action: &AuthAction<'_>) -> &'static str {
    match action {
        AuthAction::CreateTempIndex { .. } => "CREATE TEMP INDEX",
        AuthAction::CreateTempTable { .. } => "CREATE TEMP TABLE",
        AuthAction::CreateTempTrigger { .. } => "CREATE TEMP TRIGGER",
        AuthAction::CreateTempView { .. } => "CREATE TEMP VIEW",
        AuthAction::Delete { .. } => "DELETE",
        AuthAction::DropIndex { .. } | AuthAction::DropTempIndex { .. } => "DROP INDEX",
        AuthAction::DropTable { .. } | AuthAction::DropTempTable { .. } => "DROP TABLE",
        AuthAction::DropTrigger { .. } | AuthAction::DropTempTrigger { .. } => "DROP TRIGGER",
        AuthAction::DropView { .. } | AuthAction::DropTempView { .. } => "DROP VIEW",
        AuthAction::Insert { .. } => "INSERT",
        AuthAction::Update { .. } => "UPDATE",
        AuthAction::Pragma { .. } => "PRAGMA",
        AuthAction::Transaction { .. } => "transaction control",
        AuthAction::Savepoint { .. } => "SAVEPOINT",
        AuthAction::AlterTable { .. } => "ALTER TABLE",
        AuthAction::Analyze { .. } => "ANALYZE",
        _ => "this statement",
    }
}

#[derive(Debug, Default)]
struct State {
    mode: AtomicU8,
    refused: Mutex<Option<Forbidden>>,
    /// Whether the statement being prepared in app mode writes rows itself (INSERT, UPDATE or
    /// DELETE at top level, not SQLite's schema bookkeeping): only those report `changes`.
    row_write: AtomicBool,
}

/// The authorizer's shared state: the current mode and the first refusal since the last clear.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sandbox {
    state: Arc<State>,
}

impl Sandbox {
    /// Installs the authorizer on `conn`. The mode starts as [`Mode::App`].
    pub(crate) fn install(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        let state = Arc::clone(&self.state);
        conn.authorizer(Some(move |ctx: AuthContext<'_>| {
            let mode = Mode::from_u8(state.mode.load(Ordering::SeqCst));
            if mode == Mode::App
                && ctx.accessor.is_none()
                && let AuthAction::Insert { table_name }
                | AuthAction::Update { table_name, .. }
                | AuthAction::Delete { table_name } = ctx.action
                && !schema_table(table_name)
            {
                state.row_write.store(true, Ordering::SeqCst);
            }
            match decide(mode, &ctx) {
                Ok(()) => Authorization::Allow,
                Err(forbidden) => {
                    let mut refused = state
                        .refused
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    refused.get_or_insert(forbidden);
                    Authorization::Deny
                }
            }
        }))
    }

    /// Switches to `mode` until the guard is dropped.
    pub(crate) fn enter(&self, mode: Mode) -> ModeGuard {
        let previous = self.state.mode.swap(mode as u8, Ordering::SeqCst);
        ModeGuard {
            state: Arc::clone(&self.state),
            previous,
        }
    }

    /// Forgets any earlier refusal and row-write mark (call before preparing a statement).
    pub(crate) fn clear(&self) {
        self.state.row_write.store(false, Ordering::SeqCst);
        *self
            .state
            .refused
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }

    /// Returns whether the statement prepared since the last [`Sandbox::clear`] writes rows.
    pub(crate) fn take_row_write(&self) -> bool {
        self.state.row_write.swap(false, Ordering::SeqCst)
    }

    /// Returns the first refusal since the last [`Sandbox::clear`].
    pub(crate) fn take_refusal(&self) -> Option<Forbidden> {
        self.state
            .refused
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }
}

/// Restores the previous sandbox mode when dropped.
#[derive(Debug)]
pub(crate) struct ModeGuard {
    state: Arc<State>,
    previous: u8,
}

impl Drop for ModeGuard {
    fn drop(&mut self) {
        self.state.mode.store(self.previous, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests;
