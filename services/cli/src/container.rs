//! The container commands: inspect, protect, unlock/unprotect, passwd, rotate-recovery-key.

use std::{io::Write as _, path::Path};

use serde_json::json;
use snug_container::{ContainerInfo, Format, Limits, RecoveryKey, SlotKind};

use crate::{
    Outcome,
    failure::Failure,
    files,
    secrets::{self, SecretArgs},
};

/// The custody rule of §11.3, stated before a file is protected, never after.
pub(crate) const CUSTODY_RULE: &str = "\
Protection keeps your file readable only with your passphrase or your recovery key.
Snug keeps no copy of either: there is no escrow and no reset. If you lose both,
the file cannot be opened by anyone, ever. Write the recovery key down and keep it
apart from the passphrase.";

fn format_name(format: Format) -> &'static str {
    match format {
        Format::Sqlite => "sqlite",
        Format::Container => "snugenc1",
        Format::Unknown => "unknown",
    }
}

fn slot_name(kind: SlotKind) -> String {
    match kind {
        SlotKind::Passphrase => "passphrase".to_owned(),
        SlotKind::RecoveryKey => "recovery-key".to_owned(),
        SlotKind::Unknown(byte) => format!("unknown-0x{byte:02x}"),
    }
}

pub(crate) fn header_json(info: &ContainerInfo) -> serde_json::Value {
    json!({
        "version": info.header.version,
        "kdf_id": info.header.kdf_id,
        "kdf": "pbkdf2-hmac-sha256",
        "iterations": info.header.iterations,
        "salt": hex::encode(info.header.salt),
        "slots": info.header.slots.iter().map(|s| json!({
            "kind": slot_name(s.kind),
            "iv": hex::encode(s.iv),
        })).collect::<Vec<_>>(),
        "header_checksum": format!("{:08x}", info.header.checksum),
        "header_length": info.header_len,
        "container_length": info.container_len,
        "plaintext_length": info.plaintext_len,
    })
}

/// `snug inspect FILE`.
pub(crate) fn inspect(file: &Path, limits: &Limits) -> Result<Outcome, Failure> {
    let bytes = files::read_user_file(file)?.1;
    let format = snug_container::detect(&bytes);
    match format {
        Format::Sqlite => {
            // The storage version comes from the schema crate's read-only inspection; a file it
            // cannot inspect is still reported by format, and `snug check` says why.
            let version = snug_schema::inspect_bytes(&bytes)
                .ok()
                .map(|i| i.storage_version);
            let text = match version {
                Some(version) => format!(
                    "{}: plain Snug user database (SQLite), storage version {version}",
                    file.display()
                ),
                None => format!(
                    "{}: plain SQLite file; `snug check` reports its health",
                    file.display()
                ),
            };
            Ok(Outcome {
                text,
                json: json!({
                    "ok": true,
                    "file": file,
                    "format": format_name(format),
                    "length": bytes.len(),
                    "storage_version": version,
                }),
            })
        }
        Format::Unknown => Err(Failure::of(
            &snug_reasons::cli::UNKNOWN_FORMAT,
            format!(
                "{} is neither a SQLite user database nor a protected Snug file (by its leading bytes)",
                file.display()
            ),
        )),
        Format::Container => {
            let info = snug_container::inspect(&bytes, limits)?;
            let slots: Vec<String> = info
                .header
                .slots
                .iter()
                .map(|s| slot_name(s.kind))
                .collect();
            let text = format!(
                "{}: protected Snug file (SNUGENC1 v{}), structurally sound\n  \
                 kdf: PBKDF2-HMAC-SHA256, {} iterations\n  slots: {}\n  \
                 protected contents: {} bytes",
                file.display(),
                info.header.version,
                info.header.iterations,
                slots.join(", "),
                info.plaintext_len,
            );
            let mut json = header_json(&info);
            json["ok"] = json!(true);
            json["file"] = json!(file);
            json["format"] = json!(format_name(format));
            Ok(Outcome { text, json })
        }
    }
}

/// `snug protect IN --out OUT`.
pub(crate) fn protect(
    input: &Path,
    out: &Path,
    iterations: u32,
    passphrase_file: Option<&Path>,
    replace: files::Replace,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    files::check_output(input, out, replace)?;
    let plaintext = files::read_user_file(input)?.1;
    snug_container::check_plaintext(&plaintext)
        .map_err(|err| Failure::of(err.reason(), format!("{}: {err}", input.display())))?;
    // The custody rule comes first, before any secret is asked for or any byte is written.
    eprintln!("{CUSTODY_RULE}\n");
    let passphrase = secrets::new_passphrase(
        passphrase_file,
        secrets::ENV_PASSPHRASE,
        "--passphrase-file",
    )?;
    let recovery_key = RecoveryKey::generate();
    // Sealed where it lies: no second buffer of the file's size, no fresh pages to fault in.
    let container =
        snug_container::seal_owned(plaintext, &passphrase, &recovery_key, iterations, limits)?;
    files::write(out, &container)?;
    Ok(Outcome {
        text: format!(
            "Protected {} -> {}\n\nRecovery key (shown once; write it down now):\n\n    {}\n",
            input.display(),
            out.display(),
            recovery_key.grouped()
        ),
        json: json!({
            "ok": true,
            "out": out,
            "recovery_key": recovery_key.grouped(),
            "container_length": container.len(),
            "iterations": iterations,
            "custody": CUSTODY_RULE,
        }),
    })
}

/// `snug unlock IN --out OUT` and `snug unprotect IN --out OUT`: the plaintext to OUT.
pub(crate) fn unlock(
    input: &Path,
    out: &Path,
    secret_args: &SecretArgs,
    replace: files::Replace,
    limits: &Limits,
    verb: &str,
) -> Result<Outcome, Failure> {
    files::check_output(input, out, replace)?;
    let container = files::read_user_file(input)?.1;
    // Structure first, so a damaged file is reported as damaged before anyone is asked for a secret.
    snug_container::inspect(&container, limits)?;
    let secrets = secrets::opening_secrets(secret_args)?;
    let unlocked = snug_container::open_owned(container, &secrets, limits)?;
    files::write(out, &unlocked.plaintext)?;
    Ok(Outcome {
        text: format!(
            "{} {} -> {} ({} bytes, opened by the {})",
            capitalized(verb),
            input.display(),
            out.display(),
            unlocked.plaintext.len(),
            slot_name(unlocked.opened_by).replace('-', " ")
        ),
        json: json!({
            "ok": true,
            "out": out,
            "opened_by": slot_name(unlocked.opened_by),
            "plaintext_length": unlocked.plaintext.len(),
        }),
    })
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// `snug passwd FILE`: new passphrase, same payload, recovery key unchanged; replaced atomically.
pub(crate) fn passwd(
    file: &Path,
    secret_args: &SecretArgs,
    new_passphrase_file: Option<&Path>,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    let container = files::read(file)?;
    snug_container::inspect(&container, limits)?;
    let current = secrets::current_passphrase(secret_args)?;
    let new = secrets::new_passphrase(
        new_passphrase_file,
        secrets::ENV_NEW_PASSPHRASE,
        "--new-passphrase-file",
    )?;
    let changed = snug_container::change_passphrase(&container, &current, &new, limits)?;
    files::write(file, &changed)?;
    Ok(Outcome {
        text: format!(
            "Changed the passphrase of {}; the recovery key still opens it",
            file.display()
        ),
        json: json!({ "ok": true, "file": file, "container_length": changed.len() }),
    })
}

/// `snug passwd FILE --upgrade-kdf`: the same secrets at another PBKDF2 iteration count, with a
/// fresh salt; replaced atomically.
///
/// The count and the salt are in the header every slot is bound to, so every slot is
/// re-derived and each needs its own secret: the passphrase and the recovery key.
pub(crate) fn upgrade_kdf(
    file: &Path,
    secret_args: &SecretArgs,
    iterations: u32,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    let container = files::read(file)?;
    let before = snug_container::inspect(&container, limits)?;
    eprintln!(
        "note: a new KDF setting re-derives every slot, so it needs both the passphrase and the \
         recovery key"
    );
    let (passphrase, recovery_key) = secrets::both_secrets(secret_args)?;
    // The file was opened under `limits`; the new count must be one a default reader accepts
    // too, or the rewrite would leave a file that still needs the flags.
    let write_limits = Limits {
        min_iterations: Limits::default().min_iterations,
        max_iterations: Limits::default().max_iterations,
        ..*limits
    };
    if write_limits.min_iterations > iterations || iterations > write_limits.max_iterations {
        return Err(Failure::usage(format!(
            "--iterations {iterations} is outside the range {}..={} every Snug build opens by \
             default",
            write_limits.min_iterations, write_limits.max_iterations
        )));
    }
    let rewritten = snug_container::change_iterations(
        &container,
        &passphrase,
        &recovery_key,
        iterations,
        &Limits {
            min_iterations: limits.min_iterations.min(iterations),
            max_iterations: limits.max_iterations.max(iterations),
            ..*limits
        },
    )?;
    files::write(file, &rewritten)?;
    Ok(Outcome {
        text: format!(
            "Rewrote {} at {iterations} PBKDF2 iterations (was {}), every slot re-derived with a \
             fresh salt; the passphrase and the recovery key are unchanged and both open it",
            file.display(),
            before.header.iterations
        ),
        json: json!({
            "ok": true,
            "file": file,
            "iterations": iterations,
            "previous_iterations": before.header.iterations,
            "container_length": rewritten.len(),
        }),
    })
}

/// `snug rotate-recovery-key FILE [--new-recovery-key-file PATH]`: a new recovery key (generated
/// and printed once, or the full-strength one the user chose); replaced atomically.
pub(crate) fn rotate_recovery_key(
    file: &Path,
    secret_args: &SecretArgs,
    chosen: Option<&Path>,
    limits: &Limits,
    json: bool,
) -> Result<Outcome, Failure> {
    let container = files::read(file)?;
    snug_container::inspect(&container, limits)?;
    let chosen = match chosen {
        None => None,
        Some(path) => Some(RecoveryKey::parse(&secrets::read_secret_file(path)?)),
    };
    let secrets = secrets::opening_secrets(secret_args)?;
    let Some(chosen) = chosen else {
        return rotate_to_generated(file, &container, &secrets, limits, json);
    };
    let rotated = snug_container::rotate_recovery_key_to(&container, &secrets, &chosen, limits)?;
    files::write(file, &rotated)?;
    Ok(Outcome {
        text: format!(
            "Replaced the recovery key of {} with the one in the file given; the old recovery key \
             no longer opens it",
            file.display()
        ),
        json: json!({
            "ok": true,
            "file": file,
            "recovery_key_supplied": true,
            "container_length": rotated.len(),
        }),
    })
}

fn rotate_to_generated(
    file: &Path,
    container: &[u8],
    secrets: &snug_container::Secrets,
    limits: &Limits,
    json: bool,
) -> Result<Outcome, Failure> {
    let (rotated, recovery_key) = snug_container::rotate_recovery_key(container, secrets, limits)?;
    // The new key is shown before the file changes: if the write then fails, the old key still
    // opens the unchanged file, so at no moment is the user left without a working key.
    if !json {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(
            stdout,
            "New recovery key (shown once; write it down now):\n\n    {}\n",
            recovery_key.grouped()
        );
        let _ = stdout.flush();
    }
    if let Err(failure) = files::write(file, &rotated) {
        return Err(Failure::new(
            failure.exit,
            failure.reason,
            format!(
                "{}; the file is unchanged and the key printed above is NOT in effect — the old \
                 recovery key still opens it",
                failure.message
            ),
        ));
    }
    Ok(Outcome {
        text: format!(
            "Replaced the recovery key of {}; the old recovery key no longer opens it",
            file.display()
        ),
        json: json!({
            "ok": true,
            "file": file,
            "recovery_key": recovery_key.grouped(),
            "recovery_key_supplied": false,
            "container_length": rotated.len(),
        }),
    })
}
