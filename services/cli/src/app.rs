//! `snug app …`: one app's native tables (§8.2) in a user database — list, export, SQL, persist.
//!
//! Every command reads FILE whole and works on an in-memory copy through `snug-materialize`, so
//! FILE is never opened for writing. The commands that can write (`sql`, `persist`) replace FILE
//! atomically, and only when the app's data or schema actually changed: a read, a no-op write or
//! an unchanged runtime leaves FILE byte-for-byte as it was (even when the in-memory open would
//! have migrated it — a read never upgrades a user's file behind their back).
//!
//! A protected (SNUGENC1) FILE is opened with its secret, and a write is resealed into it
//! (`protected.rs`): same header, salt and slots, a fresh payload IV, so the passphrase and the
//! recovery key keep opening it and no new recovery key is ever drawn.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use clap::Subcommand;
use serde_json::json;
use snug_container::Limits;
use snug_materialize::{AppDatabase, AppNamespace, ExecuteLimits, SqlValue, StatementResult};
use snug_schema::{OpenReport, SystemClock, UserDb};

use crate::{
    Outcome,
    failure::Failure,
    files,
    protected::{self, Unsealed},
    secrets::SecretArgs,
};

#[derive(Debug, Subcommand)]
pub(crate) enum AppCommand {
    /// Lists every app's data tables: natural and at-rest names, row counts.
    List {
        /// The user database, plain or protected.
        file: PathBuf,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Writes one app as a standalone SQLite file with natural table names; FILE is only read.
    Export {
        /// The user database, plain or protected.
        file: PathBuf,
        /// The app's namespace (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// Where to write the app database.
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        replace: files::Replace,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Runs SQL statements (one per argument, all or nothing) against one app's tables in a
    /// sandbox; if they change the app, FILE is replaced atomically.
    Sql {
        /// The user database.
        file: PathBuf,
        /// The app's namespace (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// The statements, one per argument.
        #[arg(required = true, value_name = "SQL")]
        sql: Vec<String>,
        /// Refuse statements that would change the app (FILE is never written).
        #[arg(long)]
        read_only: bool,
        /// Rows shown per statement; the rest are left out and the result marked truncated.
        #[arg(long, default_value_t = snug_materialize::DEFAULT_MAX_ROWS)]
        max_rows: usize,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// Writes a runtime database (natural names) back into FILE as the app's tables; FILE is
    /// replaced atomically, and only if something changed.
    Persist {
        /// The user database.
        file: PathBuf,
        /// The app's namespace (`snug_apps.app_id`).
        #[arg(long)]
        app: String,
        /// The runtime database to write back.
        #[arg(long, value_name = "RUNTIME_DB")]
        from: PathBuf,
        #[command(flatten)]
        secrets: SecretArgs,
    },
    /// The app rows and their versions (`hubns/apps.rs`): install, save, versions, show, revert,
    /// reset, delete-version, meta, delete, model.
    #[command(flatten)]
    Namespace(crate::hubns::AppOps),
}

pub(crate) fn run(command: AppCommand, limits: &Limits) -> Result<Outcome, Failure> {
    match command {
        AppCommand::List { file, secrets } => list(&file, &secrets, limits),
        AppCommand::Export {
            file,
            app,
            out,
            replace,
            secrets,
        } => export(&file, &app, &out, replace, &secrets, limits),
        AppCommand::Sql {
            file,
            app,
            sql,
            read_only,
            max_rows,
            secrets,
        } => run_sql(&file, &app, &sql, read_only, max_rows, &secrets, limits),
        AppCommand::Persist {
            file,
            app,
            from,
            secrets,
        } => persist(&file, &app, &from, &secrets, limits),
        AppCommand::Namespace(command) => crate::hubns::run_app(command, limits),
    }
}

fn storage(err: impl std::fmt::Display) -> Failure {
    Failure::of(&snug_reasons::cli::STORAGE, format!("sqlite failed: {err}"))
}

/// A user database read from FILE and opened in memory.
struct Opened {
    db: UserDb,
    report: OpenReport,
    /// FILE as read: how an edit is written back (resealed when it is protected).
    file: Unsealed,
}

impl Opened {
    fn protected(&self) -> bool {
        self.file.is_protected()
    }
}

/// Reads FILE and opens it in memory; a protected file is unlocked with its secret.
fn open(file: &Path, secret_args: &SecretArgs, limits: &Limits) -> Result<Opened, Failure> {
    let mut file = protected::read(file, secret_args, limits)?;
    let plaintext = std::mem::take(&mut file.plaintext);
    let (db, report) = UserDb::from_bytes(&plaintext, Arc::new(SystemClock))?;
    Ok(Opened { db, report, file })
}

/// Replaces FILE with the database, atomically; a protected FILE is resealed with its own
/// header and slots, so its passphrase and recovery key keep opening it. A file the open
/// migrated is compacted first, so tables and credentials the migration dropped leave no bytes
/// in free pages (as `snug migrate`).
fn save(opened: &mut Opened, limits: &Limits) -> Result<u64, Failure> {
    if opened.report.advanced {
        opened
            .db
            .connection()
            .execute_batch("VACUUM")
            .map_err(storage)?;
    }
    let image = opened.db.to_bytes().map_err(storage)?;
    opened.file.write(image, limits)
}

/// `snug app list FILE`.
fn list(file: &Path, secret_args: &SecretArgs, limits: &Limits) -> Result<Outcome, Failure> {
    let opened = open(file, secret_args, limits)?;
    let listing = snug_materialize::list_apps_tables(&opened.db)?;
    let mut text = format!("{}: {} app(s)", file.display(), listing.apps.len());
    for app in &listing.apps {
        let uses_db = if app.uses_db { "uses_db" } else { "no data" };
        text.push_str(&format!(
            "\n  {} (token {}, {uses_db})",
            app.namespace, app.token
        ));
        for table in &app.tables {
            text.push_str(&format!(
                "\n    {:<24} {:>8} rows  ({})",
                table.name, table.rows, table.rest_name
            ));
        }
    }
    for orphan in &listing.orphaned {
        text.push_str(&format!("\n  orphaned (no app owns it): {orphan}"));
    }
    Ok(Outcome {
        text,
        json: json!({
            "ok": true,
            "file": file,
            "protected": opened.protected(),
            "apps": listing.apps,
            "orphaned": listing.orphaned,
        }),
    })
}

/// `snug app export FILE --app NS --out OUT`.
fn export(
    file: &Path,
    app: &str,
    out: &Path,
    replace: files::Replace,
    secret_args: &SecretArgs,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    files::check_output(file, out, replace)?;
    let opened = open(file, secret_args, limits)?;
    let image = snug_materialize::export_app(&opened.db, app)?;
    files::write(out, &image)?;
    if opened.protected() {
        eprintln!(
            "note: {} is not protected; it holds the app's data in the clear",
            out.display()
        );
    }
    let token = AppNamespace::new(app).token().to_owned();
    Ok(Outcome {
        text: format!(
            "Exported app {app} -> {} ({} bytes, natural table names)",
            out.display(),
            image.len()
        ),
        json: json!({
            "ok": true,
            "app": app,
            "token": token,
            "out": out,
            "length": image.len(),
            "was_protected": opened.protected(),
        }),
    })
}

/// `snug app sql FILE --app NS SQL…`.
#[allow(clippy::too_many_arguments, reason = "one per flag of the command")]
fn run_sql(
    file: &Path,
    app: &str,
    statements: &[String],
    read_only: bool,
    max_rows: usize,
    secret_args: &SecretArgs,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    let mut opened = open(file, secret_args, limits)?;
    let execute_limits = ExecuteLimits {
        max_rows,
        ..ExecuteLimits::default()
    };
    let report = snug_materialize::execute(&mut opened.db, app, statements, &execute_limits)?;
    // The statements ran on the in-memory copy; refusing here drops their writes unsaved.
    if report.persist.wrote && read_only {
        return Err(Failure::of(
            &snug_reasons::materialize::READ_ONLY,
            format!(
                "the statements would change app {app}, and --read-only was given; {} is unchanged",
                file.display()
            ),
        ));
    }
    let written = if report.persist.wrote {
        Some(save(&mut opened, limits)?)
    } else {
        None
    };
    if !report.unregistered_tables.is_empty() {
        // Reported, not repaired: a read leaves FILE byte-identical, and the next write registers them.
        eprintln!(
            "note: app {app} has tables at rest that its schema record does not list ({}); \
             they were read as they are, and a statement that changes the app registers them",
            report.unregistered_tables.join(", ")
        );
    }
    // Written: the file now holding it (`user.snug` after an adoption); else the file read.
    let file = match written {
        Some(_) => opened.file.source.write.as_path(),
        None => opened.file.source.read.as_path(),
    };
    let mut text = String::new();
    for (index, result) in report.results.iter().enumerate() {
        if index > 0 {
            text.push('\n');
        }
        text.push_str(&render(result));
    }
    match written {
        Some(length) => text.push_str(&format!(
            "\n{} updated ({length} bytes; tables written: {})",
            file.display(),
            report.persist.tables_written.join(", ")
        )),
        // A statement without result columns was meant to change something; say that it did not.
        None if report.results.iter().any(|r| r.columns.is_empty()) => {
            text.push_str(&format!(
                "\nnothing changed; {} not rewritten",
                file.display()
            ));
        }
        None => {}
    }
    Ok(Outcome {
        text,
        json: json!({
            "ok": true,
            "app": app,
            "results": report.results,
            "wrote": report.persist.wrote,
            "persist": report.persist,
            "unregistered_tables": report.unregistered_tables,
        }),
    })
}

/// One statement's result as an aligned text table.
fn render(result: &StatementResult) -> String {
    if result.columns.is_empty() {
        return match result.changes {
            Some(n) => format!("({n} row(s) changed)"),
            None => "(ok)".to_owned(),
        };
    }
    let cells: Vec<Vec<String>> = result
        .rows
        .iter()
        .map(|row| row.iter().map(cell).collect())
        .collect();
    let widths: Vec<usize> = (0..result.columns.len())
        .map(|i| {
            cells
                .iter()
                .map(|row| row[i].chars().count())
                .chain([result.columns[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |values: &[String]| {
        values
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:<w$}"))
            .collect::<Vec<_>>()
            .join(" | ")
            .trim_end()
            .to_owned()
    };
    let mut out = line(&result.columns);
    out.push('\n');
    out.push_str(
        &widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("-+-"),
    );
    for row in &cells {
        out.push('\n');
        out.push_str(&line(row));
    }
    out.push_str(&format!("\n({} row(s)", result.rows.len()));
    if result.truncated {
        out.push_str(", truncated: raise --max-rows to see more");
    }
    out.push(')');
    out
}

fn cell(value: &SqlValue) -> String {
    match value {
        SqlValue::Null => "NULL".to_owned(),
        SqlValue::Integer(i) => i.to_string(),
        SqlValue::Real(r) => r.to_string(),
        SqlValue::Text(t) => t.clone(),
        SqlValue::Blob(b) => format!("x'{}'", hex::encode(b)),
    }
}

/// `snug app persist FILE --app NS --from RUNTIME_DB`.
fn persist(
    file: &Path,
    app: &str,
    from: &Path,
    secret_args: &SecretArgs,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    if file.canonicalize().ok() == from.canonicalize().ok() && file.exists() {
        return Err(Failure::usage(
            "--from is FILE itself; give the runtime database the app wrote",
        ));
    }
    let mut opened = open(file, secret_args, limits)?;
    let runtime_bytes = files::read(from)?;
    let mut runtime = AppDatabase::from_bytes(app, &runtime_bytes)?;
    drop(runtime_bytes);
    let report = snug_materialize::persist(&mut opened.db, &mut runtime)?;
    drop(runtime);
    let written = if report.wrote {
        Some(save(&mut opened, limits)?)
    } else {
        None
    };
    // Written: the file now holding it (`user.snug` after an adoption); else the file read.
    let file = match written {
        Some(_) => opened.file.source.write.as_path(),
        None => opened.file.source.read.as_path(),
    };
    let text = match written {
        Some(length) => format!(
            "Persisted app {app} into {} ({length} bytes): written {}; unchanged {}; dropped {}",
            file.display(),
            list_or_none(&report.tables_written),
            list_or_none(&report.tables_unchanged),
            list_or_none(&report.tables_dropped),
        ),
        None => format!(
            "app {app} is unchanged; {} was not rewritten",
            file.display()
        ),
    };
    Ok(Outcome {
        text,
        json: json!({
            "ok": true,
            "app": app,
            "file": file,
            "unchanged": !report.wrote,
            "report": report,
        }),
    })
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
