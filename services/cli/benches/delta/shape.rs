//! The delta benchmark's user database, shaped like a real one (issue 38), and its four edits.
//!
//! The reference sample (`sample-v6.export.snug`) is filled through the real tables: apps
//! installed and versions saved with `snug-schema`'s own calls (complete HTML of 20–200 KiB per
//! version, pinned and unpinned, never more unpinned than retention keeps, so no save prunes),
//! chat threads appended to message by message (0.2–8 KiB each), docs upserted, and app tables
//! whose rows run from a few hundred bytes to 15 KiB, so about a third overflow a 4 KiB page.
//! Sizes are drawn log-uniformly, as real text sizes spread, and every text comes from one
//! xorshift stream: hex, so it compresses about 2:1 (as HTML and prose do) and no two rows share
//! a run that either side could reuse. The build runs in memory through `UserDb` and is written
//! out once: the file is a live one (pages in the order the writes made them), not an export.
//!
//! The edits are made on that live file through the same calls an app or the hub makes, and
//! stay, each measured on top of the one before, as a user's next edits would be.

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, UNIX_EPOCH},
};

use snug_schema::{
    ChatRole, Clock, ContractSource, NewApp, NewChatMessage, SaveVersion, SteppingClock, UserDb,
};

/// How much of each kind the database holds. One table of numbers, so a change of shape is a
/// change of data.
struct Shape {
    /// Apps installed beside the sample's two.
    apps: usize,
    /// Size of one version's complete HTML.
    html: (usize, usize),
    /// Chat threads, and messages over them all.
    threads: usize,
    messages: usize,
    /// Size of one chat message.
    message: (usize, usize),
    /// Docs per app, and the size of one.
    docs_per_app: usize,
    doc: (usize, usize),
    /// Rows of each app's `notes` table, and the size of one row's body.
    notes_per_app: usize,
    note: (usize, usize),
    /// Rows of the sample's `equities` table (text keys, no rowid), and the size of a name.
    equities: usize,
    equity: (usize, usize),
    /// Short rows of the sample's `trades` and chess `moves` tables.
    trades: usize,
    moves: usize,
}

/// About 63 MiB once exported: under the 64 MiB cap with room for the edits.
const SHAPE: Shape = Shape {
    apps: 14,
    html: (20 << 10, 200 << 10),
    threads: 48,
    messages: 6_500,
    message: (200, 8 << 10),
    docs_per_app: 4,
    doc: (1 << 10, 30 << 10),
    notes_per_app: 590,
    note: (200, 15 << 10),
    equities: 1_500,
    equity: (200, 15 << 10),
    trades: 80_000,
    moves: 40_000,
};

/// The sample app whose tables the short rows go into.
const PORTFOLIO: &str = "app_a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c";

/// xorshift64 text: hex digits, so it compresses about 2:1 and never repeats.
pub(crate) struct Text(u64);

impl Text {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(crate) fn take(&mut self, len: usize) -> String {
        let mut out = String::with_capacity(len + 16);
        while out.len() < len {
            out.push_str(&format!("{:016x}", self.next()));
        }
        out.truncate(len);
        out
    }

    /// A size drawn log-uniformly from `lo..=hi`: as many rows of 200 B–2 KiB as of 2–20 KiB.
    fn size(&mut self, (lo, hi): (usize, usize)) -> usize {
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((lo as f64) * ((hi as f64) / (lo as f64)).powf(unit)) as usize
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Complete HTML of `len` bytes: a page of tags around the text.
    pub(crate) fn html(&mut self, title: &str, len: usize) -> String {
        let mut html = format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title>\
             <style>body{{font:14px system-ui}}.c{{padding:4px}}</style></head><body>"
        );
        while html.len() + 80 < len {
            let n = 40 + self.below(400);
            html.push_str(&format!("<div class=\"c\"><p>{}</p></div>\n", self.take(n)));
        }
        html.push_str("<script>/* app */</script></body></html>");
        html
    }
}

/// The clock every write reads: one second a reading from 2026-12-01, so a build is the same
/// file every time.
fn clock() -> Arc<dyn Clock> {
    Arc::new(SteppingClock::new(
        UNIX_EPOCH + Duration::from_secs(1_796_083_200),
        Duration::from_secs(1),
    ))
}

/// What the build made that the edits and the report name.
pub(crate) struct Built {
    /// The app whose next version the fourth edit saves: it has fewer unpinned versions than
    /// retention keeps, so the save adds one row and deletes none.
    pub(crate) app_id: String,
    /// Its `notes` table, in which the first edit updates one row.
    pub(crate) notes: String,
    /// A thread the third edit appends to.
    pub(crate) thread_id: String,
    /// Rows and bytes per kind, for the report.
    pub(crate) summary: String,
}

fn app_id(i: usize) -> String {
    format!("b0000000-0000-4000-8000-{i:012x}")
}

/// Writes the database to `path`.
pub(crate) fn build(path: &Path) -> Built {
    let sample = snug_e2e::userdb_vector("sample-v6.export.snug");
    let (mut db, _) = UserDb::from_bytes(&sample, clock()).expect("open sample");
    let mut text = Text::new(0x9e37_79b9_7f4a_7c15);
    let mut bytes = [0usize; 5];
    let mut counts = [0usize; 5];
    let mut count = |kind: usize, len: usize| {
        bytes[kind] += len;
        counts[kind] += 1;
    };
    for i in 0..SHAPE.apps {
        let id = app_id(i);
        let len = text.size(SHAPE.html);
        db.install_app(&NewApp {
            app_id: Some(id.clone()),
            display_name: format!("App {i}"),
            uses_db: true,
            html: text.html(&format!("app {i} v1"), len),
            ..NewApp::default()
        })
        .expect("install");
        count(0, len);
        // Pinned saves and unpinned ones interleaved; at most four unpinned, one under the
        // retention of five, so no save here or in the edit prunes a version.
        let (pinned, unpinned) = (i % 3, 2 + i % 3);
        for v in 0..pinned + unpinned {
            let len = text.size(SHAPE.html);
            let html = text.html(&format!("app {i} v{}", v + 2), len);
            let options = SaveVersion {
                note: Some(format!("save {v}")),
                pinned: !v.is_multiple_of(2) && v / 2 < pinned,
                contract: ContractSource::CopyForward,
            };
            db.save_app_version(&id, &html, &options).expect("save");
            count(0, len);
        }
        for d in 0..SHAPE.docs_per_app {
            let len = text.size(SHAPE.doc);
            let content = format!("# Doc {d}\n\n{}", text.take(len));
            db.upsert_doc(
                &id,
                &format!("doc-{d}"),
                Some(&format!("Doc {d}")),
                &content,
            )
            .expect("doc");
            count(1, len);
        }
    }
    // Threads get their messages in turn, as conversations interleave.
    for m in 0..SHAPE.messages {
        let t = m % SHAPE.threads;
        let len = text.size(SHAPE.message);
        let app = t.is_multiple_of(2).then(|| app_id(t / 2 % SHAPE.apps));
        db.append_chat_message(&NewChatMessage {
            thread_id: thread_id(t),
            app_id: app,
            title: Some(format!("Thread {t}")),
            role: if m.is_multiple_of(2) {
                ChatRole::User
            } else {
                ChatRole::Assistant
            },
            content: text.take(len),
            pinned: m < SHAPE.threads,
            meta: None,
        })
        .expect("message");
        count(2, len);
    }
    let tx = db.connection_mut().transaction().expect("tx");
    for i in 0..SHAPE.apps {
        let token = snug_schema::app_data_token(&app_id(i));
        let ddl = "CREATE TABLE notes (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, \
                   body TEXT, updated_at TEXT NOT NULL)";
        tx.execute_batch(&format!(
            "CREATE TABLE \"app_{token}__notes\" (id INTEGER PRIMARY KEY AUTOINCREMENT, \
             title TEXT NOT NULL, body TEXT, updated_at TEXT NOT NULL)"
        ))
        .expect("notes table");
        let schema =
            serde_json::json!({ "objects": [{ "type": "table", "name": "notes", "ddl": ddl }] });
        tx.execute(
            "INSERT INTO snug_app_schemas (app_id, token, schema_json, updated_at) \
             VALUES (?1, ?2, ?3, '2026-12-01T00:00:00.000Z')",
            (app_id(i), &token, schema.to_string()),
        )
        .expect("schema row");
        for r in 0..SHAPE.notes_per_app {
            let len = text.size(SHAPE.note);
            tx.execute(
                &format!(
                    "INSERT INTO \"app_{token}__notes\" (title, body, updated_at) \
                     VALUES (?1, ?2, '2026-12-01T00:00:00.000Z')"
                ),
                (format!("note {r}"), text.take(len)),
            )
            .expect("note");
            count(3, len);
        }
    }
    for i in 0..SHAPE.equities {
        let len = text.size(SHAPE.equity);
        tx.execute(
            &format!("INSERT INTO {PORTFOLIO}__equities (symbol, name) VALUES (?1, ?2)"),
            (format!("EQ{i:06}"), text.take(len)),
        )
        .expect("equity");
        count(3, len);
    }
    for i in 0..SHAPE.trades {
        tx.execute(
            &format!("INSERT INTO {PORTFOLIO}__trades (symbol, qty) VALUES (?1, ?2)"),
            (format!("S{:05}", i % 50_000), f64::from(i as u32 % 977)),
        )
        .expect("trade");
        count(4, 14);
    }
    for _ in 0..SHAPE.moves {
        tx.execute(
            "INSERT INTO app_x737461727465722d2d6368657373__moves (san) VALUES (?1)",
            [text.take(4)],
        )
        .expect("move");
        count(4, 4);
    }
    tx.commit().expect("commit");
    let image = db.to_bytes().expect("serialize");
    std::fs::write(path, &image).expect("write");
    let kinds = [
        "app versions (HTML)",
        "docs",
        "chat messages",
        "app rows of mixed size",
        "short app rows",
    ];
    let summary = kinds
        .iter()
        .zip(counts.iter().zip(bytes))
        .map(|(kind, (n, b))| format!("{n} {kind} ({:.1} MiB)", b as f64 / 1048576.0))
        .collect::<Vec<_>>()
        .join(", ");
    let edited = SHAPE.apps / 2;
    Built {
        app_id: app_id(edited),
        notes: format!(
            "app_{}__notes",
            snug_schema::app_data_token(&app_id(edited))
        ),
        thread_id: thread_id(SHAPE.threads / 2),
        summary,
    }
}

fn thread_id(t: usize) -> String {
    format!("thr-{t:04}")
}

/// One of issue 38's edits: its name, and what it does to the live database (returning the new
/// HTML row for the edit that saves one, whose compressed size is that edit's target).
pub(crate) struct Edit {
    pub(crate) name: &'static str,
    pub(crate) apply: fn(&mut UserDb, &Built, &mut Text) -> (String, Option<String>),
}

/// The four edits, in the order they are made.
pub(crate) const EDITS: [Edit; 4] = [
    Edit {
        name: "1 row updated in place",
        apply: update_in_place,
    },
    Edit {
        name: "8 short rows inserted early in a table",
        apply: short_rows_early,
    },
    Edit {
        name: "1 chat message appended",
        apply: chat_appended,
    },
    Edit {
        name: "1 new app version (100 KiB HTML)",
        apply: new_version,
    },
];

/// A note of about 1.5 KiB in the middle of an app's table gets a new body of the same length
/// (an edit saved by the app): the row keeps its size and its page.
fn update_in_place(db: &mut UserDb, built: &Built, text: &mut Text) -> (String, Option<String>) {
    let conn = db.connection();
    let (id, len): (i64, i64) = conn
        .query_row(
            &format!(
                "SELECT id, length(body) FROM \"{}\" WHERE id > ?1 \
                 ORDER BY abs(length(body) - 1500), id LIMIT 1",
                built.notes
            ),
            [SHAPE.notes_per_app as i64 / 2],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("a note");
    conn.execute(
        &format!(
            "UPDATE \"{}\" SET body = ?1, updated_at = '2026-12-02T00:00:00.000Z' WHERE id = ?2",
            built.notes
        ),
        (text.take(len as usize), id),
    )
    .expect("update");
    (format!("{} row {id}, {len} B", built.notes), None)
}

/// Eight rows of 40–120 bytes whose keys sort before every other, into the portfolio's
/// `equities` (the first app table with rows of mixed size): its first leaf splits.
fn short_rows_early(db: &mut UserDb, _: &Built, text: &mut Text) -> (String, Option<String>) {
    let tx = db.connection_mut().transaction().expect("tx");
    for i in 0..8 {
        let len = 40 + text.below(80);
        tx.execute(
            &format!("INSERT INTO {PORTFOLIO}__equities (symbol, name) VALUES (?1, ?2)"),
            (format!("A{i:04}"), text.take(len)),
        )
        .expect("short row");
    }
    tx.commit().expect("commit");
    (format!("{PORTFOLIO}__equities, keys A0000–A0007"), None)
}

/// One message of 1.5 KiB appended to a thread (its thread's `updated_at` moves too).
fn chat_appended(db: &mut UserDb, built: &Built, text: &mut Text) -> (String, Option<String>) {
    db.append_chat_message(&NewChatMessage {
        thread_id: built.thread_id.clone(),
        app_id: None,
        title: None,
        role: ChatRole::User,
        content: text.take(1_536),
        pinned: false,
        meta: None,
    })
    .expect("append");
    (format!("thread {}, 1536 B", built.thread_id), None)
}

/// A new unpinned version of 100 KiB complete HTML, saved as the app builder saves one.
fn new_version(db: &mut UserDb, built: &Built, text: &mut Text) -> (String, Option<String>) {
    let html = text.html("the new version", 100 << 10);
    let version = db
        .save_app_version(&built.app_id, &html, &SaveVersion::default())
        .expect("save");
    (
        format!("app {} v{version}, {} B", built.app_id, html.len()),
        Some(html),
    )
}

/// Makes `edit` on the live file at `path`, as the app or hub writing it would.
pub(crate) fn apply(
    path: &Path,
    built: &Built,
    edit: &Edit,
    text: &mut Text,
) -> (String, Option<String>) {
    let (mut db, _) = UserDb::open_path(path, clock()).expect("open live file");
    (edit.apply)(&mut db, built, text)
}
