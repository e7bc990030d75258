//! The user-database commands: check, migrate, export, init.
//!
//! Every command reads its input whole, works on an in-memory copy through `snug-schema`, and
//! writes its output atomically; an input file is never opened for writing, so a refused or
//! failed command leaves it byte-for-byte as it was (a newer file above all: it is the user's and
//! a newer Snug build may need it).

use std::{path::Path, sync::Arc};

use serde_json::json;
use snug_container::Limits;
use snug_schema::{
    ExportOptions, FileFormat, Inspection, OpenReport, STORAGE_VERSION, SystemClock, TableKind,
    UserDb, ddl,
};

use crate::{
    Outcome,
    container::header_json,
    failure::Failure,
    files, protected,
    secrets::{self, SecretArgs},
};

fn storage(err: impl std::fmt::Display) -> Failure {
    Failure::of(&snug_reasons::cli::STORAGE, format!("sqlite failed: {err}"))
}

fn not_sqlite(file: &Path) -> Failure {
    let mut failure = Failure::from(snug_schema::OpenError::NotSqlite);
    failure.message = format!(
        "{} is neither a SQLite user database nor a protected Snug file (by its leading bytes)",
        file.display()
    );
    failure
}

/// Whether an open would write nothing at all.
fn is_healthy(inspection: &Inspection) -> bool {
    inspection.migrate_from.is_none() && inspection.heal.is_empty() && !inspection.needs_meta_seed
}

/// What an open would do, as short clauses for people.
fn planned_changes(inspection: &Inspection) -> Vec<String> {
    let mut changes = Vec::new();
    if let Some(from) = inspection.migrate_from {
        changes.push(format!(
            "migrate storage version {from} → {STORAGE_VERSION}"
        ));
        // Tables the ladder drops (§8): their contents do not survive, so say so up front.
        for table in &inspection.tables {
            if table.name == ddl::DROPPED_APP_DATA_TABLE {
                changes.push(format!(
                    "drop the v1 blob table {} (its data does not survive)",
                    table.name
                ));
            } else if table.name == ddl::DROPPED_AUTH_SPECS_TABLE {
                changes.push(format!(
                    "drop {} (approvals must be given again)",
                    table.name
                ));
            }
        }
    }
    let heal = &inspection.heal;
    if !heal.missing_tables.is_empty() {
        changes.push(format!(
            "create missing tables {}",
            heal.missing_tables.join(", ")
        ));
    }
    if !heal.missing_columns.is_empty() {
        changes.push(format!(
            "restore missing columns {}",
            heal.missing_columns.join(", ")
        ));
    }
    if heal.missing_index {
        changes.push("rebuild the install-source index".to_owned());
    }
    if inspection.legacy_credentials > 0 {
        changes.push(format!(
            "wipe {} legacy credential(s) (auth:<app>:<field>)",
            inspection.legacy_credentials
        ));
    }
    if inspection.needs_meta_seed {
        changes.push("give the file a database id".to_owned());
    }
    changes
}

/// Describes what an open did, as short clauses for people.
fn done_changes(report: &OpenReport) -> Vec<String> {
    let mut changes = Vec::new();
    if report.advanced {
        changes.push(format!(
            "migrated storage version {} → {STORAGE_VERSION}",
            report.found_version
        ));
    }
    if !report.heal.tables.is_empty() {
        changes.push(format!("restored tables {}", report.heal.tables.join(", ")));
    }
    if !report.heal.columns.is_empty() {
        changes.push(format!(
            "restored columns {}",
            report.heal.columns.join(", ")
        ));
    }
    if report.heal.index {
        changes.push("rebuilt the install-source index".to_owned());
    }
    if report.credentials_wiped > 0 {
        changes.push(format!(
            "wiped {} legacy credential(s)",
            report.credentials_wiped
        ));
    }
    if report.seeded_meta {
        changes.push("gave the file a database id".to_owned());
    }
    changes
}

/// `snug check FILE`: a read-only report.
pub(crate) fn check(given: &Path, limits: &Limits) -> Result<Outcome, Failure> {
    let (user_file, bytes) = files::read_user_file(given)?;
    let file = user_file.read.as_path();
    match snug_schema::detect_format(&bytes) {
        FileFormat::Unknown => Err(not_sqlite(file)),
        FileFormat::Protected => {
            // The database inside cannot be checked without the secret; the container can.
            let info = snug_container::inspect(&bytes, limits)?;
            let text = format!(
                "{}: protected Snug file (SNUGENC1 v{}); the container is structurally sound\n  \
                 kdf: PBKDF2-HMAC-SHA256, {} iterations; protected contents: {} bytes\n  \
                 the database inside needs the passphrase or recovery key: run `snug unlock` and \
                 check the result",
                file.display(),
                info.header.version,
                info.header.iterations,
                info.plaintext_len,
            );
            Ok(Outcome {
                text,
                json: json!({
                    "ok": true,
                    "file": file,
                    "format": "snugenc1",
                    "protected": true,
                    "container": header_json(&info),
                }),
            })
        }
        FileFormat::Sqlite => {
            let inspection = snug_schema::inspect_bytes(&bytes)?;
            if inspection.open_refusal.is_some() {
                // The inspection names the refusal; the open itself (in memory, nothing written)
                // gives the typed error and so the exit code.
                return match UserDb::from_bytes(&bytes, Arc::new(SystemClock)) {
                    Err(err) => Err(err.into()),
                    Ok(_) => Err(Failure::of(
                        &snug_reasons::rpc::INTERNAL,
                        "the inspection predicted a refusal the open did not make",
                    )),
                };
            }
            if let Some(collision) = inspection.token_collisions.first() {
                return Err(snug_schema::OpenError::AppTokenCollision {
                    collision: collision.clone(),
                }
                .into());
            }
            Ok(check_report(file, bytes.len() as u64, &inspection))
        }
    }
}

fn check_report(file: &Path, length: u64, inspection: &Inspection) -> Outcome {
    let healthy = is_healthy(inspection);
    let count =
        |kind: fn(&TableKind) -> bool| inspection.tables.iter().filter(|t| kind(&t.kind)).count();
    let hub = count(|k| matches!(k, TableKind::Hub { .. }));
    let app_data = count(|k| matches!(k, TableKind::AppData { .. }));
    let foreign = count(|k| matches!(k, TableKind::Foreign));
    let mut text = format!(
        "{}: Snug user database, storage version {} (this build supports {})\n  \
         tables: {hub} hub, {app_data} app data, {foreign} other",
        file.display(),
        inspection.storage_version,
        inspection.supported_version,
    );
    if healthy {
        text.push_str("\n  healthy: opening it writes nothing");
    } else {
        text.push_str("\n  an open would (this check wrote nothing):");
        for change in planned_changes(inspection) {
            text.push_str(&format!("\n    - {change}"));
        }
        text.push_str(&format!(
            "\n  `snug migrate {} --out NEW` writes the result to a new file",
            file.display()
        ));
    }
    if let Some(refusal) = &inspection.import_refusal {
        text.push_str(&format!(
            "\n  note: another hub would refuse to import it ({}): {}",
            refusal.reason, refusal.message
        ));
    }
    if length > snug_schema::MAX_USERDB_BYTES {
        text.push_str(&format!(
            "\n  note: {length} bytes is over the {}-byte cap; an import would refuse it",
            snug_schema::MAX_USERDB_BYTES
        ));
    }
    Outcome {
        text,
        json: json!({
            "ok": true,
            "file": file,
            "format": "sqlite",
            "length": length,
            "healthy": healthy,
            "planned_changes": planned_changes(inspection),
            "inspection": inspection,
        }),
    }
}

/// Where `snug migrate` writes.
pub(crate) enum MigrateTo<'a> {
    /// `--out OUT`: a new file; the input is only read.
    Out(&'a Path, files::Replace),
    /// `--in-place`: the input itself (a legacy file is adopted as `user.snug`).
    InPlace,
}

/// `snug migrate IN --out OUT` and `snug migrate FILE --in-place`: the file brought to storage
/// version 6. A protected input is opened with its secret and the result resealed in its own
/// container (§11.2 rule 5: the same header, salt and slots, a fresh payload IV), so its
/// passphrase and recovery key open the output too; nothing here draws a new salt or recovery
/// key. A file already current is copied byte-identical to OUT, and in place left untouched.
pub(crate) fn migrate(
    given: &Path,
    to: MigrateTo<'_>,
    secret_args: &SecretArgs,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    if let MigrateTo::Out(out, replace) = &to {
        files::check_output(given, out, *replace)?;
    }
    let unsealed = protected::read(given, secret_args, limits)?;
    let (mut db, report) = UserDb::from_bytes(&unsealed.plaintext, Arc::new(SystemClock))?;
    db.check_app_isolation()?;
    let image = if report.wrote {
        // VACUUM rebuilds the image from live records, so the dropped v1 blob table and wiped
        // credentials leave no bytes in free pages of the output.
        db.connection().execute_batch("VACUUM").map_err(storage)?;
        Some(db.to_bytes().map_err(storage)?)
    } else {
        None
    };
    drop(db);
    let (file, length) = match (&to, image) {
        (MigrateTo::Out(out, _), Some(image)) => {
            let bytes = unsealed.seal(image, limits)?;
            files::write(out, &bytes)?;
            (out.to_path_buf(), Some(bytes.len() as u64))
        }
        (MigrateTo::Out(out, _), None) => {
            let bytes = unsealed.as_read();
            files::write(out, bytes)?;
            (out.to_path_buf(), Some(bytes.len() as u64))
        }
        (MigrateTo::InPlace, Some(image)) => {
            let length = unsealed.write(image, limits)?;
            (unsealed.source.write.clone(), Some(length))
        }
        (MigrateTo::InPlace, None) => (unsealed.source.read.clone(), None),
    };
    let input = unsealed.source.read.as_path();
    let changes = done_changes(&report);
    let sealed = if unsealed.is_protected() {
        " (resealed: its passphrase and recovery key open it)"
    } else {
        ""
    };
    let text = match (&to, changes.is_empty()) {
        (MigrateTo::Out(..), true) => format!(
            "{} is healthy at storage version {STORAGE_VERSION}; {} is an identical copy",
            input.display(),
            file.display()
        ),
        (MigrateTo::Out(..), false) => format!(
            "Migrated {} -> {}{sealed}: {}",
            input.display(),
            file.display(),
            changes.join("; ")
        ),
        (MigrateTo::InPlace, true) => format!(
            "{} is healthy at storage version {STORAGE_VERSION}; nothing was written",
            file.display()
        ),
        (MigrateTo::InPlace, false) => format!(
            "Migrated {} in place{sealed}: {}",
            file.display(),
            changes.join("; ")
        ),
    };
    let mut json = json!({
        "ok": true,
        "protected": unsealed.is_protected(),
        "length": length,
        "unchanged": !report.wrote,
        "report": report,
    });
    let key = match to {
        MigrateTo::Out(..) => "out",
        MigrateTo::InPlace => "file",
    };
    json[key] = json!(file);
    Ok(Outcome { text, json })
}

/// `snug export IN --out OUT [--include-secrets]`: the §9.2 export; IN may be protected.
pub(crate) fn export(
    input: &Path,
    out: &Path,
    include_secrets: bool,
    secret_args: &SecretArgs,
    replace: files::Replace,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    files::check_output(input, out, replace)?;
    let (user_file, bytes) = files::read_user_file(input)?;
    let input = user_file.read.as_path();
    let (plaintext, was_protected) = match snug_schema::detect_format(&bytes) {
        FileFormat::Sqlite => (bytes, false),
        FileFormat::Unknown => return Err(not_sqlite(input)),
        FileFormat::Protected => {
            // Structure first, so damage is reported before anyone is asked for a secret.
            snug_container::inspect(&bytes, limits)?;
            let secrets = secrets::opening_secrets(secret_args)?;
            let unlocked = snug_container::open_owned(bytes, &secrets, limits)?;
            (unlocked.plaintext, true)
        }
    };
    let (mut db, source) = UserDb::from_bytes(&plaintext, Arc::new(SystemClock))?;
    drop(plaintext);
    let (image, report) = snug_schema::export_bytes(&mut db, ExportOptions { include_secrets })?;
    files::write(out, &image)?;
    if was_protected {
        eprintln!(
            "note: {} is not protected; run `snug protect` on it before it leaves this machine",
            out.display()
        );
    }
    let secrets_clause = if include_secrets {
        "credentials kept (--include-secrets)".to_owned()
    } else {
        format!("{} credential(s) stripped", report.secrets_removed)
    };
    Ok(Outcome {
        text: format!(
            "Exported {} -> {} ({} bytes, {secrets_clause})",
            input.display(),
            out.display(),
            image.len()
        ),
        json: json!({
            "ok": true,
            "out": out,
            "length": image.len(),
            "include_secrets": include_secrets,
            "was_protected": was_protected,
            "secrets_removed": report.secrets_removed,
            "tables_dropped": report.tables_dropped,
            "source": source,
        }),
    })
}

/// `snug init OUT`: a new, empty user database at storage version 6.
pub(crate) fn init(out: &Path, replace: files::Replace) -> Result<Outcome, Failure> {
    files::check_new_output(out, replace)?;
    let (mut db, _) = UserDb::create_in_memory(Arc::new(SystemClock))?;
    let db_id = db.db_id().map_err(storage)?.unwrap_or_default();
    let image = db.to_bytes().map_err(storage)?;
    files::write(out, &image)?;
    Ok(Outcome {
        text: format!(
            "Created {}: a new Snug user database at storage version {STORAGE_VERSION} (id {db_id})",
            out.display()
        ),
        json: json!({
            "ok": true,
            "out": out,
            "length": image.len(),
            "storage_version": STORAGE_VERSION,
            "db_id": db_id,
        }),
    })
}
