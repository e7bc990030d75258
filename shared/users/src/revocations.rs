//! Changes that take access away, heard as they commit, so that a cache of credentials (a
//! gateway's) can be flushed by them instead of reading the directory on every request.
//!
//! What counts as one: a token deleted, a user updated (disabled, given another quota) or
//! deleted, a session deleted (logout, disabling, pruning). [`Revocations`] is what a cache
//! watches: a generation that grows with each such change, and whether every change is heard
//! (`live`); a cache trusts an entry only while `live` and at the generation it was read at.
//!
//! - This process's own changes count at once ([`Hearing::revoked`], called by the directory's
//!   revoking operations after they commit).
//! - PostgreSQL: triggers on the three tables `pg_notify` the directory's channel (one per
//!   schema) in the revoking transaction, whoever runs it (another replica, `snug-hub users`, an
//!   operator's SQL); each process listens on one connection (`snug_pg::follow`). While that
//!   connection is lost, changes go unheard: not `live`; listening again is a change.
//! - SQLite: a thread asks the file's `PRAGMA data_version` every [`SQLITE_EVERY`] on a connection
//!   of its own. It changes whenever another connection commits (this process's writer, a
//!   `snug-hub users` command), so every write counts, not only revocations: more flushes, never
//!   a missed one. A change made by another process is honoured within [`SQLITE_EVERY`].

use std::{
    path::PathBuf,
    sync::{Arc, Weak},
    time::Duration,
};

use tokio::sync::watch;

/// How often the SQLite file is asked whether another connection committed.
pub const SQLITE_EVERY: Duration = Duration::from_millis(100);

/// What a cache of credentials watches ([`crate::Directory::revocations`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revocations {
    /// Grows with every change that may take access away.
    pub generation: u64,
    /// Whether every such change is heard now.
    pub live: bool,
}

/// One directory's hearing of its revocations; it stops with the last clone of the directory.
#[derive(Debug)]
pub(crate) struct Hearing {
    sender: Arc<watch::Sender<Revocations>>,
    /// Dropped with the directory: ends what hears on its behalf.
    _alive: watch::Sender<()>,
}

impl Hearing {
    fn new() -> (
        Arc<Self>,
        Weak<watch::Sender<Revocations>>,
        watch::Receiver<()>,
    ) {
        let sender = Arc::new(watch::Sender::new(Revocations {
            generation: 0,
            live: true,
        }));
        let (alive, stopped) = watch::channel(());
        let weak = Arc::downgrade(&sender);
        let hearing = Arc::new(Self {
            sender,
            _alive: alive,
        });
        (hearing, weak, stopped)
    }

    /// What a cache watches.
    pub(crate) fn watch(&self) -> watch::Receiver<Revocations> {
        self.sender.subscribe()
    }

    /// A change that may take access away committed.
    pub(crate) fn revoked(&self) {
        bump(&self.sender, true);
    }

    /// Hears the SQLite file at `path` from a thread of its own, from its state now.
    pub(crate) fn sqlite(path: PathBuf) -> Arc<Self> {
        let (hearing, sender, stopped) = Self::new();
        let conn = data_version_connection(&path);
        let seen = conn.as_ref().and_then(|c| data_version(c).ok());
        let spawned = std::thread::Builder::new()
            .name("snug-users-revocations".to_owned())
            .spawn(move || watch_sqlite(&path, conn, seen, &sender, &stopped));
        if let Err(err) = spawned {
            // Without the thread nothing tells a cache of another process's changes.
            tracing::error!(error = %err, "cannot start hearing the users directory's changes");
            hearing.sender.send_modify(|r| r.live = false);
        }
        hearing
    }

    /// Hears the PostgreSQL channel `channel` on `listening`, from a task of its own.
    pub(crate) fn postgres(
        pg: snug_pg::PgConfig,
        channel: String,
        listening: snug_pg::Listening,
    ) -> Arc<Self> {
        let (hearing, sender, mut stopped) = Self::new();
        tokio::spawn(async move {
            let follow = snug_pg::follow(pg, channel, listening, |heard| {
                let Some(sender) = sender.upgrade() else {
                    return;
                };
                match heard {
                    snug_pg::Heard::Notification(_) | snug_pg::Heard::Listening => {
                        bump(&sender, true);
                    }
                    snug_pg::Heard::Lost(err) => {
                        tracing::warn!(error = %err, "lost the connection that hears the users directory's changes; credentials are read on every request until it is back");
                        sender.send_modify(|r| r.live = false);
                    }
                }
            });
            tokio::select! {
                () = follow => {}
                _ = stopped.changed() => {}
            }
        });
        hearing
    }
}

fn bump(sender: &watch::Sender<Revocations>, live: bool) {
    sender.send_modify(|r| {
        r.generation = r.generation.wrapping_add(1);
        r.live = live;
    });
}

/// Asks the file every [`SQLITE_EVERY`] until the directory goes.
fn watch_sqlite(
    path: &std::path::Path,
    mut conn: Option<rusqlite::Connection>,
    mut seen: Option<i64>,
    sender: &Weak<watch::Sender<Revocations>>,
    stopped: &watch::Receiver<()>,
) {
    loop {
        std::thread::sleep(SQLITE_EVERY);
        let (Some(sender), Ok(false)) = (sender.upgrade(), stopped.has_changed()) else {
            return;
        };
        if conn.is_none() {
            conn = data_version_connection(path);
        }
        match conn.as_ref().map(data_version) {
            Some(Ok(version)) => {
                if seen != Some(version) || !sender.borrow().live {
                    bump(&sender, true);
                }
                seen = Some(version);
            }
            // A file that cannot be read now: nothing is trusted until it can.
            Some(Err(err)) => {
                tracing::warn!(error = %err, "cannot ask the users directory whether it changed");
                conn = None;
                seen = None;
                sender.send_modify(|r| r.live = false);
            }
            None => {
                seen = None;
                sender.send_modify(|r| r.live = false);
            }
        }
    }
}

/// A connection of the watcher's own: `data_version` counts the commits of the others.
fn data_version_connection(path: &std::path::Path) -> Option<rusqlite::Connection> {
    rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()
}

fn data_version(conn: &rusqlite::Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA data_version", [], |row| row.get(0))
}

/// The directory's channel: one per schema.
pub(crate) fn channel(schema: Option<&str>) -> String {
    use sha2::{Digest as _, Sha256};
    let digest = Sha256::digest(format!("snug-users:{}", schema.unwrap_or("")));
    format!("snug_users_{}", hex::encode(&digest[..8]))
}

/// The triggers that notify `channel` of every revoking change, (re)created in the directory's
/// schema.
pub(crate) fn pg_triggers(channel: &str) -> String {
    let mut sql = format!(
        "CREATE OR REPLACE FUNCTION hub_revoked() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN PERFORM pg_notify('{channel}', ''); RETURN NULL; END $$;\n"
    );
    for (table, events) in [
        ("hub_tokens", "DELETE"),
        ("hub_users", "UPDATE OR DELETE"),
        ("hub_sessions", "DELETE"),
    ] {
        // Row triggers: notifications with one payload in one transaction are delivered once.
        sql.push_str(&format!(
            "DROP TRIGGER IF EXISTS {table}_revoked ON {table};\n\
             CREATE TRIGGER {table}_revoked AFTER {events} ON {table} \
             FOR EACH ROW EXECUTE FUNCTION hub_revoked();\n"
        ));
    }
    sql
}
