//! `snug import IN --into FILE`: a file becomes the user's database (§9.2, §12.4, §18.2) through
//! `snug_schema::import_against`, the import a pull and the schema service's
//! ImportUserDatabase run too: measured against FILE's approved grants and runtime contracts,
//! unusable connections dropped, unknown contracts cleared, endpoint re-confirmation re-armed.
//!
//! IN is only read. FILE is replaced atomically, and only once the import succeeded: a refused
//! import leaves both files byte-for-byte as they were. A protected FILE is refused with
//! `PROTECTED`, as every `snug` command that writes a user file refuses one; a protected IN is
//! opened with its secret and lands plain.

use std::{path::Path, sync::Arc};

use serde_json::json;
use snug_container::Limits;
use snug_schema::{FileFormat, ImportBaseline, ImportOptions, SystemClock, UserDb};

use crate::{
    Outcome,
    failure::Failure,
    files,
    secrets::{self, SecretArgs},
};

fn storage(err: impl std::fmt::Display) -> Failure {
    Failure::of(&snug_reasons::cli::STORAGE, format!("sqlite failed: {err}"))
}

/// FILE's baseline: its approved grants and contracts, or nothing when FILE does not exist yet.
fn baseline(into: &Path) -> Result<(ImportBaseline, bool), Failure> {
    let bytes = match std::fs::read(into) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Ok((ImportBaseline::default(), false));
        }
        Err(err) => return Err(Failure::io("read", into, err)),
    };
    match snug_schema::detect_format(&bytes) {
        FileFormat::Sqlite => {}
        FileFormat::Protected => {
            return Err(Failure::of(
                &snug_reasons::schema::PROTECTED,
                format!(
                    "{} is protected (SNUGENC1) and `snug import` does not write protected files; \
                     `snug unlock` it, import into the plain copy, then `snug protect` that",
                    into.display()
                ),
            ));
        }
        FileFormat::Unknown => {
            let mut failure = Failure::from(snug_schema::OpenError::NotSqlite);
            failure.message = format!(
                "--into {} is neither a SQLite user database nor a protected Snug file; \
                 nothing was replaced",
                into.display()
            );
            return Err(failure);
        }
    }
    let (db, _) = UserDb::from_bytes(&bytes, Arc::new(SystemClock)).map_err(|err| {
        let mut failure = Failure::from(err);
        failure.message = format!("--into {}: {}", into.display(), failure.message);
        failure
    })?;
    Ok((ImportBaseline::of(&db)?, true))
}

/// `snug import IN --into FILE [--trusted-origin]`.
pub(crate) fn import(
    input: &Path,
    into: &Path,
    trusted_origin: bool,
    secret_args: &SecretArgs,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    // FILE is meant to be replaced, and a protected FILE is refused below with PROTECTED, so the
    // only refusal left here is --into naming IN itself.
    let replace = files::Replace {
        force: true,
        replace_protected: true,
    };
    files::check_output(input, into, replace).map_err(|_| {
        Failure::usage(format!(
            "--into {} is IN itself; import a file into another one",
            into.display()
        ))
    })?;
    let bytes = files::read(input)?;
    let secrets = if snug_schema::detect_format(&bytes) == FileFormat::Protected {
        // Structure first, so damage is reported before anyone is asked for a secret.
        snug_container::inspect(&bytes, limits)?;
        Some(secrets::opening_secrets(secret_args)?)
    } else {
        None
    };
    let (baseline, replaces) = baseline(into)?;
    let options = ImportOptions {
        secrets: secrets.as_ref(),
        trusted_origin,
        container_limits: *limits,
    };
    let (mut db, report) =
        snug_schema::import_against(&bytes, &baseline, &options, Arc::new(SystemClock)).map_err(
            |err| {
                let mut failure = Failure::from(err);
                failure.message = format!("{}: {}", input.display(), failure.message);
                failure
            },
        )?;
    drop(bytes);
    if report.advanced {
        // As `snug migrate`: the v1 blob table and wiped credentials leave no bytes behind.
        db.connection().execute_batch("VACUUM").map_err(storage)?;
    }
    let image = db.to_bytes().map_err(storage)?;
    if image.len() as u64 > snug_schema::MAX_USERDB_BYTES {
        return Err(Failure::of(
            &snug_reasons::rpc::TOO_LARGE,
            format!(
                "the imported database is {} bytes, over the {}-byte cap; {} is unchanged",
                image.len(),
                snug_schema::MAX_USERDB_BYTES,
                into.display()
            ),
        ));
    }
    files::write(into, &image)?;

    let mut text = format!(
        "Imported {} -> {} ({} bytes{})",
        input.display(),
        into.display(),
        image.len(),
        if replaces { ", replaced" } else { ", created" }
    );
    text.push_str(&format!(
        "\n  connections: {} grant(s) restored, {} left to approve again, {} dropped",
        report.restored_grants,
        report.demoted_connections,
        report.dropped_connections.len()
    ));
    for dropped in &report.dropped_connections {
        text.push_str(&format!(
            "\n    dropped {} {}: {}",
            dropped.app_id, dropped.slot, dropped.reason
        ));
    }
    for dropped in &report.dropped_runtime_contracts {
        text.push_str(&format!(
            "\n  runtime contract cleared: {} v{} (unknown here)",
            dropped.app_id, dropped.version
        ));
    }
    text.push_str("\n  endpoint settings need confirming again before agent turns run");
    Ok(Outcome {
        text,
        json: json!({
            "ok": true,
            "into": into,
            "length": image.len(),
            "replaced": replaces,
            "trusted_origin": trusted_origin,
            "report": report,
        }),
    })
}
