//! `snug sync push`: the decision with the origin's head in hand (`snug_restore::decide::push`),
//! then the push it names, and the sync state recorded.

use super::*;

/// How `snug sync push` was asked to push.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PushOptions {
    pub(super) force: bool,
    pub(super) restore: bool,
    pub(super) include_secrets: bool,
    pub(super) plaintext_to_origin: bool,
}

/// Reads FILE (a protected one with its secret, through `protected::read`) and returns what a push
/// sends: the export, plain, secrets stripped unless the origin takes them and the user asked,
/// and for a protected FILE what reseals it in FILE's own container.
fn export_for_push(
    file: &Path,
    include_secrets: bool,
    args: &SecretArgs,
    limits: &Limits,
) -> Result<(snug_restore::PushImage, Option<Resealable>), Failure> {
    let unsealed = protected::read(file, args, limits)?;
    let plaintext = zeroize::Zeroizing::new(unsealed.plaintext);
    let image =
        snug_restore::push_image(&plaintext, include_secrets, clock()).map_err(
            |err| match err {
                snug_restore::GateError::Open(err) => Failure::from(err),
                snug_restore::GateError::Export(err) => Failure::from(err),
            },
        )?;
    Ok((image, unsealed.seal))
}

/// `snug sync push FILE --origin O`.
pub(super) fn push(
    file: &Path,
    origin: &dyn Origin,
    options: PushOptions,
    args: &SecretArgs,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    let PushOptions {
        force,
        restore,
        include_secrets,
        plaintext_to_origin,
    } = options;
    if include_secrets && !origin.is_personal() {
        return Err(Failure::usage(
            "--include-secrets is for directory origins: a hub origin holds the secrets-stripped copy only (§11.3)",
        ));
    }
    if plaintext_to_origin && !origin.is_personal() {
        return Err(Failure::usage(
            "--plaintext-to-origin is for directory origins: a hub origin always holds the secrets-stripped plaintext (§11.3)",
        ));
    }
    // Bytes read past a write-ahead log that holds changes are not the file SQLite sees.
    snug_restore::refuse_in_use(file).map_err(|err| restore_failure(&origin.name(), err))?;
    let (
        snug_restore::PushImage {
            bytes: image,
            sha256: image_sha256,
            content_hash: hash,
        },
        sealed,
    ) = export_for_push(file, include_secrets, args, limits)?;
    // A personal origin receives a protected file as it is protected (§11.3): the push image
    // resealed in FILE's own container, header and slots unchanged and a fresh payload IV, so
    // both secrets open it there. A hub holds the secrets-stripped plaintext, and a personal
    // origin plaintext only when asked. The gate's hash stays the plaintext content's, so a
    // reseal (a new IV every time) is never mistaken for a change.
    let was_protected = sealed.is_some();
    let (image, protected) = match sealed {
        Some(sealed) if origin.is_personal() && !plaintext_to_origin => {
            (sealed.reseal(image, limits)?, true)
        }
        _ => (image, false),
    };
    let plaintext_to_origin = was_protected && !protected && origin.is_personal();
    let plaintext_note = if plaintext_to_origin {
        "; sent in plaintext (--plaintext-to-origin): the copy at the origin is not protected"
    } else if protected {
        "; protected: resealed in the file's own container, so its passphrase and recovery key open it there"
    } else {
        ""
    };
    // A legacy backup has no sync state (§10): it is compared with the origin afresh every
    // time, like a file that never synced, and nothing is recorded for it.
    let backup = snug_schema::resolve_given(file).standing == snug_schema::Standing::Backup;
    let mut state = push_state::load(file).map_err(state_failure)?;
    let name = origin.name();
    let (head, identity) = confirm(origin)?;
    let adopted = state.adopt(&identity, &name, head.as_ref());
    let synced = state.at(&identity).cloned();
    let plan = decide::push(&PushFacts {
        content_hash: &hash,
        image_sha256: &image_sha256,
        synced: synced.as_ref(),
        head: head.as_ref(),
        force,
        restore,
    });
    let (base, kind) = match plan {
        PushPlan::Unchanged { revision } => {
            if adopted && !backup {
                push_state::save(file, &state).map_err(state_failure)?;
            }
            return Ok(Outcome {
                text: format!(
                    "{} is unchanged since it last synced with {name} as revision {revision}, \
                     which {name} confirms is its current one; nothing pushed",
                    file.display()
                ),
                json: json!({ "ok": true, "pushed": false, "reason": "UNCHANGED", "revision": revision, "origin": identity.as_str() }),
            });
        }
        PushPlan::AlreadyAtOrigin { revision } => {
            // The origin already holds exactly these bytes (pushed from elsewhere, or a push
            // whose answer was lost): adopt its revision instead of writing it again.
            if !backup {
                let sha256 = head
                    .as_ref()
                    .map(SnapshotInfo::sha256_hex)
                    .unwrap_or_default();
                record(&mut state, &identity, &name, &revision, &sha256, &hash);
                push_state::save(file, &state).map_err(state_failure)?;
            }
            return Ok(Outcome {
                text: format!(
                    "{name} already holds this file as revision {revision}; nothing pushed"
                ),
                json: json!({ "ok": true, "pushed": false, "reason": "ALREADY_AT_ORIGIN", "revision": revision, "origin": identity.as_str() }),
            });
        }
        PushPlan::Refuse(Refusal::Behind { synced, head }) => {
            return Err(diverged(format!(
                "{} holds revision {synced} of {name}, which has moved on to {head}; nothing \
                 was pushed: pull to bring the file up to date, or push --restore to make this \
                 revision's content the new head (a copy; {head} stays in the origin's history)",
                file.display()
            )));
        }
        PushPlan::Refuse(Refusal::Diverged { head, synced }) => {
            let since = synced.map_or("this file never synced with it".to_owned(), |r| {
                format!("this file last synced as revision {r}")
            });
            return Err(diverged(format!(
                "{name} moved to revision {head} ({since}) and {} changed too; nothing was \
                 pushed: pull --keep-both to get the origin's copy beside the file, or push \
                 --force to overwrite the origin ({head} stays in its history)",
                file.display()
            )));
        }
        PushPlan::Push { base, kind } => (base, kind),
    };
    // A directory keeps no history: the head a forced push overwrites is kept there first.
    let preserved = match (&kind, &head) {
        (PushKind::Overwrite { .. }, Some(head)) if !origin.keeps_history() => origin
            .preserve(head)
            .map_err(|err| origin_failure(&name, &err))?,
        _ => None,
    };
    // The manifest of the base as this device last synced it lets a hub take only the changed
    // pages without first hearing every page of the new image (issue 21). They must be the
    // pages of this origin's copy of the base: its recorded SHA-256 says so.
    let base_pages = match (&base, &head) {
        (Some(base), Some(head)) if !backup => {
            push_state::load_pages(file, &identity, base, &head.sha256_hex())
        }
        _ => None,
    };
    // And its bytes as this device kept them, when they are exactly those pages (issue 38). A
    // file protected here keeps no plaintext copy beside it, whatever the origin receives.
    let base_image = base_pages
        .as_ref()
        .filter(|_| !was_protected && origin.syncs_by_difference())
        .and_then(|pages| push_state::load_base(file, pages));
    let synced = base_pages.as_ref().map(|pages| SyncedBase {
        pages,
        image: base_image.as_deref(),
    });
    // The new image's manifest, kept for the next push, is made once and serves this push too.
    let pages = (!backup && !protected)
        .then(|| snug_delta::Manifest::with_shapes(&image, snug_delta::page_size_of(&image)).ok())
        .flatten();
    // A restore is done by the origin where it still keeps the revision the file holds: its
    // copy-forward is that revision's bytes exactly, and nothing travels. An origin that no
    // longer has it (a directory keeps only its head) is sent the file.
    let restored_at_origin = match (&kind, &base) {
        (PushKind::Restore { from, .. }, Some(base)) => {
            match origin.describe(&Selector::Revision(from.clone())) {
                Ok(kept) => Some((
                    origin
                        .restore(&kept, base)
                        .map_err(|err| origin_failure(&name, &err))?,
                    kept.sha256_hex(),
                )),
                Err(OriginError::UnknownRevision { .. }) => None,
                Err(err) => return Err(origin_failure(&name, &err)),
            }
        }
        _ => None,
    };
    let in_place = restored_at_origin.is_some();
    let (pushed, sha256) = match restored_at_origin {
        Some(restored) => restored,
        None => (
            origin
                .push_from(&image, base.as_deref(), synced, pages.as_ref())
                .map_err(|err| origin_failure(&name, &err))?,
            hex::encode(snug_delta::sha256(&image)),
        ),
    };
    let revision = match pushed {
        Pushed::Accepted { revision } => revision,
        Pushed::Conflict { current } => {
            return Err(diverged(format!(
                "{name} changed while pushing (now {}); nothing was overwritten — pull, or push \
                 --force",
                current.as_deref().unwrap_or("no image")
            )));
        }
    };
    let note = if backup {
        "; it is the backup beside user.snug, so no sync state was recorded for it"
    } else {
        record(&mut state, &identity, &name, &revision, &sha256, &hash);
        push_state::save(file, &state).map_err(state_failure)?;
        if let Some(pages) = &pages
            && sha256 == hex::encode(pages.digest)
        {
            // A cache: a push that cannot record it has still landed. Only the pages of the
            // bytes the origin now holds are recorded (a restore at the origin holds others).
            let saved = push_state::save_manifest(file, &identity, &revision, pages).is_ok();
            if !saved || was_protected {
                push_state::forget_base(file);
            } else if origin.syncs_by_difference() {
                let _ = push_state::save_base(file, &image);
            }
        } else {
            push_state::forget_base(file);
        }
        ""
    };
    let traffic = origin.traffic();
    let sent = if in_place {
        "copied forward at the origin, no bytes sent".to_owned()
    } else if traffic.delta {
        format!(
            "{} bytes sent by difference, of {}",
            traffic.sent,
            image.len()
        )
    } else {
        format!("{} bytes", image.len())
    };
    let (what, kind_json) = match &kind {
        PushKind::Forward => (String::new(), json!("forward")),
        PushKind::First { lost: None } => (String::new(), json!("first")),
        PushKind::First { lost: Some(lost) } => (
            format!(
                "; {name} held no copy (it had revision {lost} when this file last synced), so \
                 this is its first again"
            ),
            json!("first"),
        ),
        PushKind::Overwrite { overwritten } => (
            match &preserved {
                Some(path) => {
                    format!("; overwrote revision {overwritten} (--force), kept first at {path}")
                }
                None => format!(
                    "; overwrote revision {overwritten} (--force), which stays in the origin's \
                     history (snug sync restore --revision {overwritten} brings it back)"
                ),
            },
            json!("overwrite"),
        ),
        PushKind::Restore { from, superseded } => (
            format!(
                "; restored revision {from}'s content as the new head, a copy-forward: \
                 {superseded} stays in the origin's history"
            ),
            json!("restore"),
        ),
    };
    let overwritten = match &kind {
        PushKind::Overwrite { overwritten } => Some(overwritten.clone()),
        _ => None,
    };
    let restored_from = match &kind {
        PushKind::Restore { from, .. } => Some(from.clone()),
        _ => None,
    };
    Ok(Outcome {
        text: format!(
            "Pushed {} to {name} as revision {revision} ({sent}){what}{plaintext_note}{note}",
            file.display(),
        ),
        json: json!({
            "ok": true,
            "pushed": true,
            "revision": revision,
            "base": base,
            "kind": kind_json,
            "overwrote": overwritten,
            "preserved": preserved,
            "restoredFrom": restored_from,
            "origin": identity.as_str(),
            "length": image.len(),
            "sha256": image_sha256,
            "forced": force && overwritten.is_some(),
            "recorded": !backup,
            "protected": protected,
            "plaintextToOrigin": plaintext_to_origin,
            "transfer": transfer(origin),
        }),
    })
}

/// Records in `state` that the file, whose gate hash is `content_hash`, is now `revision` at
/// the origin `identity`, whose record of that revision's bytes is `sha256`.
fn record(
    state: &mut SyncState,
    identity: &OriginId,
    address: &str,
    revision: &str,
    sha256: &str,
    content_hash: &str,
) {
    state.record(
        identity,
        OriginState {
            address: address.to_owned(),
            revision: revision.to_owned(),
            sha256: sha256.to_owned(),
            content_hash: content_hash.to_owned(),
            synced_at: SystemClock.timestamp(),
        },
    );
}
