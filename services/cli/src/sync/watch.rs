//! `snug sync watch FILE`: FILE kept up to date with its origin as revisions appear (issue 40
//! point 5).
//!
//! Each new revision is pulled exactly as `snug sync pull` pulls it, with every rule of a pull:
//! never over FILE's unpushed changes (without `--push` that is exit 6, divergence surfaced and
//! nothing overwritten), a newer storage version refused, FILE replaced atomically. With
//! `--push`, FILE's own changes are pushed as `snug sync push` pushes them, once FILE has stayed
//! unchanged for the debounce; a pull that finds FILE changed pushes instead, and when both
//! changed the push says so (exit 6).
//!
//! A thread of its own listens to the origin ([`Origin::wait_for_change`]: a hub's event stream,
//! one connection held open; a directory asked once a second) with a second `Origin` opened from
//! the same address, and wakes the main thread, which also looks at FILE's length and time of
//! change twice a second. The listener resumes after the revision the main thread last saw
//! there. An interruption (Ctrl-C) stops the process between steps or inside one; every install
//! is an atomic replace and the sync lock is released by the system, so FILE stays whole.

use std::{
    path::Path,
    sync::mpsc,
    time::{Duration, Instant, SystemTime},
};

use snug_container::Limits;
use snug_restore::{Origin, OriginError};

use crate::{
    Outcome,
    failure::{Exit, Failure},
    secrets::SecretArgs,
};

use super::{PushOptions, origin_failure, pull, push};

/// How often FILE is looked at, with `--push`.
const LOOK: Duration = Duration::from_millis(500);
/// How long one wait for the origin lasts before the listener asks again.
const WAIT: Duration = Duration::from_secs(240);

/// What the listener tells the main thread.
type Heard = Result<(), OriginError>;

/// How a watch runs.
pub(super) struct Watching {
    /// Also push FILE's own changes.
    pub(super) push_too: bool,
    /// How long FILE must stay unchanged before it is pushed.
    pub(super) debounce: Duration,
    /// Say each step as one JSON object per line.
    pub(super) json: bool,
}

/// Pulls each new revision into `file` (and with `push_too` pushes FILE's changes) until
/// interrupted or refused, saying each step as it happens; `listener` is a second handle on
/// the same origin, for the thread that listens to it.
pub(super) fn watch(
    file: &Path,
    origin: &dyn Origin,
    listener: Box<dyn Origin + Send>,
    watching: Watching,
    secrets: &SecretArgs,
    limits: &Limits,
) -> Result<Outcome, Failure> {
    let Watching {
        push_too,
        debounce,
        json,
    } = watching;
    let say = |outcome: &Outcome| {
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        let _ = if json {
            writeln!(stdout, "{}", outcome.json)
        } else {
            writeln!(stdout, "{}", outcome.text)
        };
        let _ = stdout.flush();
    };
    let (heard_tx, heard_rx) = mpsc::sync_channel::<Heard>(1);
    let (resume_tx, resume_rx) = mpsc::channel::<Option<String>>();
    // The listener lives as long as the process: it ends with it.
    std::thread::spawn(move || listen(listener.as_ref(), &resume_rx, &heard_tx));

    // First FILE is brought to the origin's head, as a pull (or, with --push, a push of its
    // own changes) would.
    let mut head = step(file, origin, push_too, secrets, limits, &say)?;
    let _ = resume_tx.send(head.clone());
    let mut seen = fingerprint(file);
    let mut changed_at: Option<Instant> = None;
    loop {
        let tick = if push_too { LOOK } else { WAIT };
        match heard_rx.recv_timeout(tick) {
            Ok(Ok(())) => {
                head = step(file, origin, push_too, secrets, limits, &say)?;
                seen = fingerprint(file);
                changed_at = None;
                let _ = resume_tx.send(head.clone());
            }
            Ok(Err(err)) => return Err(origin_failure(&origin.name(), &err)),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Failure::new(
                    Exit::Other,
                    &snug_reasons::restore::SYNC_NETWORK,
                    "stopped listening to the origin",
                ));
            }
        }
        if !push_too {
            continue;
        }
        let now = fingerprint(file);
        if now != seen {
            seen = now;
            changed_at = Some(Instant::now());
        }
        if changed_at.is_some_and(|at| at.elapsed() >= debounce) {
            changed_at = None;
            let pushed = push(file, origin, PushOptions::default(), secrets, limits)?;
            say(&pushed);
            head = revision_of(&pushed).or(head);
            seen = fingerprint(file);
        }
    }
}

/// One pull (with `push_too`, a push when FILE has changes the origin lacks); the revision FILE
/// is at afterwards, as the step said.
fn step(
    file: &Path,
    origin: &dyn Origin,
    push_too: bool,
    secrets: &SecretArgs,
    limits: &Limits,
    say: &dyn Fn(&Outcome),
) -> Result<Option<String>, Failure> {
    let options = snug_restore::Options {
        force: false,
        only_if_absent: false,
        keep_both: false,
    };
    let outcome = match pull(
        file,
        origin,
        &snug_restore::Selector::Current,
        options,
        secrets,
        limits,
    ) {
        Ok(outcome) => outcome,
        // FILE has changes the origin lacks: sent, as `snug sync push` sends them (which
        // refuses in turn when the origin changed too).
        Err(failure) if push_too && failure.exit == Exit::Diverged => {
            push(file, origin, PushOptions::default(), secrets, limits)?
        }
        // Nothing at the origin yet: a push starts it, and without --push there is nothing
        // to do but wait.
        Err(failure) if origin_is_empty(&failure) => {
            if push_too && file.exists() {
                push(file, origin, PushOptions::default(), secrets, limits)?
            } else {
                return Ok(None);
            }
        }
        Err(failure) => return Err(failure),
    };
    say(&outcome);
    Ok(revision_of(&outcome))
}

/// Whether a pull failed because the origin holds no copy yet.
fn origin_is_empty(failure: &Failure) -> bool {
    failure.reason.name == snug_reasons::restore::SYNC_ORIGIN_EMPTY.name
}

/// The revision a pull or push outcome names.
fn revision_of(outcome: &Outcome) -> Option<String> {
    outcome.json["revision"].as_str().map(str::to_owned)
}

/// FILE's length and time of last change: what says it was written to.
fn fingerprint(file: &Path) -> Option<(u64, SystemTime)> {
    let meta = std::fs::metadata(file).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

/// Waits for the origin to move past each revision the main thread sends, telling it when it
/// did; ends when the main thread is gone or the origin fails.
fn listen(
    origin: &dyn Origin,
    resume: &mpsc::Receiver<Option<String>>,
    heard: &mpsc::SyncSender<Heard>,
) {
    while let Ok(mut current) = resume.recv() {
        // Only the newest revision the main thread knows matters.
        while let Ok(newer) = resume.try_recv() {
            current = newer;
        }
        loop {
            match origin.wait_for_change(current.as_deref(), WAIT) {
                Ok(true) => {
                    if heard.send(Ok(())).is_err() {
                        return;
                    }
                    break;
                }
                Ok(false) => {}
                Err(err) => {
                    let _ = heard.send(Err(err));
                    return;
                }
            }
        }
    }
}
