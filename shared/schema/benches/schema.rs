//! Benchmarks on a realistic 64 MiB user database, with the system `sqlite3` measured in the same run.
//!
//! Prints: the healthy-open check (time and bytes written), export against
//! `sqlite3 FILE "VACUUM INTO 'x'"`, and migration of a 64 MiB v1 file against the same
//! VACUUM INTO of that file. Run with `cargo bench -p snug-schema --bench schema`.

#![allow(clippy::unwrap_used, reason = "a benchmark aborts on any failure")]
#![allow(clippy::print_stdout, reason = "a benchmark prints its table")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use sha2::{Digest, Sha256};
use snug_schema::{
    ExportOptions, MAX_USERDB_BYTES, SystemClock, UserDb, app_data_token, app_rest_table_name,
    export_file, migrate_file,
};

/// Deterministic filler text so files are reproducible and not trivially compressible.
struct Text(u64);

impl Text {
    fn words(&mut self, n_bytes: usize) -> String {
        const WORDS: [&str; 16] = [
            "<div>", "class", "function", "const", "return", "snug", "render", "table", "</div>",
            "value", "items", "=>", "await", "style", "grid", "span",
        ];
        let mut out = String::with_capacity(n_bytes + 16);
        while out.len() < n_bytes {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            out.push_str(WORDS[(self.0 % 16) as usize]);
            out.push_str(&format!("{} ", self.0 % 1000));
        }
        out
    }
}

const N_APPS: usize = 48;
const VERSIONS_PER_APP: i64 = 6;
const HTML_BYTES: usize = 184 * 1024;

/// Fills a v6 user database to just under 64 MiB: apps with big HTML versions, chat threads,
/// docs, per-app data tables, settings and secrets.
fn generate_v6(path: &Path) {
    let (mut db, _) = UserDb::open_path(path, Arc::new(SystemClock)).unwrap();
    let mut text = Text(0x9e37_79b9_7f4a_7c15);
    let conn = db.connection_mut();
    let tx = conn.transaction().unwrap();
    for app in 0..N_APPS {
        let app_id = format!("{:08x}-0000-4000-8000-{:012x}", app, app);
        tx.execute(
            "INSERT INTO snug_apps VALUES (?1, ?2, 'an app', '📈', '#0a7', 1, ?3, 't', 't', NULL)",
            params![app_id, format!("App {app}"), VERSIONS_PER_APP],
        )
        .unwrap();
        for version in 1..=VERSIONS_PER_APP {
            tx.execute(
                "INSERT INTO snug_app_versions VALUES (?1, ?2, ?3, NULL, 't', ?4, ?5)",
                params![
                    app_id,
                    version,
                    text.words(HTML_BYTES),
                    i64::from(version == 1),
                    (version > 3).then_some(r#"{"overview":"an app","maxOutputTokens":1024}"#)
                ],
            )
            .unwrap();
        }
        for slug in ["vision", "plan", "lessons"] {
            tx.execute(
                "INSERT INTO snug_app_docs VALUES (?1, ?2, NULL, ?3, 't')",
                params![app_id, slug, text.words(2048)],
            )
            .unwrap();
        }
        let thread = format!("app:{app_id}");
        tx.execute(
            "INSERT INTO snug_chat_threads VALUES (?1, ?2, 'chat', 't', 't')",
            params![thread, app_id],
        )
        .unwrap();
        for n in 0..100 {
            tx.execute(
                "INSERT INTO snug_chat_messages (thread_id, role, content, created_at, pinned) VALUES (?1, ?2, ?3, 't', ?4)",
                params![thread, if n % 2 == 0 { "user" } else { "assistant" }, text.words(1200), i64::from(n < 2)],
            )
            .unwrap();
        }
        tx.execute(
            "INSERT INTO snug_secrets VALUES (?1, 'sk-live-credential-value')",
            [format!("auth:{app_id}:api:key")],
        )
        .unwrap();
        tx.execute(
            "INSERT INTO snug_settings VALUES (?1, '\"model-x\"')",
            [format!("appModel:{app_id}")],
        )
        .unwrap();
        if app % 4 == 0 {
            let table = app_rest_table_name(&app_data_token(&app_id), "items");
            tx.execute_batch(&format!("CREATE TABLE \"{table}\" (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, qty REAL)"))
                .unwrap();
            let mut stmt = tx
                .prepare(&format!(
                    "INSERT INTO \"{table}\" (name, qty) VALUES (?1, ?2)"
                ))
                .unwrap();
            for n in 0..2500 {
                stmt.execute(params![text.words(120), n as f64 * 1.5])
                    .unwrap();
            }
        }
    }
    tx.execute(
        "INSERT INTO snug_secrets VALUES ('byok:anthropic', 'sk-ant-bench-secret')",
        [],
    )
    .unwrap();
    tx.commit().unwrap();
}

/// The exact v1 DDL (reference `userdb-v2.test.ts`).
const V1_DDL: &str = "
CREATE TABLE snug_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE snug_profile (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE snug_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE snug_secrets (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE snug_apps (app_id TEXT PRIMARY KEY, display_name TEXT NOT NULL, description TEXT,
        icon_emoji TEXT, icon_color TEXT, uses_db INTEGER NOT NULL DEFAULT 0, current_version INTEGER NOT NULL,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE snug_app_versions (app_id TEXT NOT NULL, version INTEGER NOT NULL, html TEXT NOT NULL,
        note TEXT, created_at TEXT NOT NULL, PRIMARY KEY (app_id, version));
CREATE TABLE snug_chat_threads (thread_id TEXT PRIMARY KEY, app_id TEXT, title TEXT,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE snug_chat_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, thread_id TEXT NOT NULL,
        role TEXT NOT NULL, content TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE snug_app_data (namespace TEXT PRIMARY KEY, bytes BLOB NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE snug_sync (key TEXT PRIMARY KEY, value TEXT NOT NULL);
";

/// Fills a storage-version-1 file to just under 64 MiB, app data as v1 blobs.
fn generate_v1(path: &Path) {
    let mut conn = Connection::open(path).unwrap();
    conn.execute_batch(V1_DDL).unwrap();
    let mut text = Text(0x2545_f491_4f6c_dd1d);
    let tx = conn.transaction().unwrap();
    tx.execute_batch("INSERT INTO snug_meta VALUES ('db_id', 'bench'), ('created_at', '2025-01-01T00:00:00.000Z')")
        .unwrap();
    for app in 0..N_APPS {
        let app_id = format!("a{app}");
        tx.execute(
            "INSERT INTO snug_apps VALUES (?1, 'App', NULL, NULL, NULL, 1, 6, 't', 't')",
            [&app_id],
        )
        .unwrap();
        for version in 1..=6 {
            tx.execute(
                "INSERT INTO snug_app_versions VALUES (?1, ?2, ?3, NULL, 't')",
                params![app_id, version, text.words(HTML_BYTES)],
            )
            .unwrap();
        }
        let thread = format!("app:{app_id}");
        tx.execute(
            "INSERT INTO snug_chat_threads VALUES (?1, ?2, 'chat', 't', 't')",
            params![thread, app_id],
        )
        .unwrap();
        for _ in 0..60 {
            tx.execute(
                "INSERT INTO snug_chat_messages (thread_id, role, content, created_at) VALUES (?1, 'user', ?2, 't')",
                params![thread, text.words(1000)],
            )
            .unwrap();
        }
        tx.execute(
            "INSERT INTO snug_app_data VALUES (?1, ?2, 't')",
            params![app_id, text.words(160 * 1024).into_bytes()],
        )
        .unwrap();
        tx.execute(
            "INSERT INTO snug_secrets VALUES (?1, 'legacy')",
            [format!("auth:{app_id}:api_key")],
        )
        .unwrap();
        tx.execute(
            "INSERT INTO snug_secrets VALUES (?1, 'slot')",
            [format!("auth:{app_id}:s:api_key")],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    conn.pragma_update(None, "user_version", 1).unwrap();
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Bytes this process has passed to write(2) so far (Linux `/proc/self/io` `wchar`).
fn written_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|line| line.strip_prefix("wchar: "))
        .and_then(|n| n.trim().parse().ok())
}

fn sha(path: &Path) -> Vec<u8> {
    Sha256::digest(std::fs::read(path).unwrap()).to_vec()
}

fn sqlite3_available() -> bool {
    Command::new("sqlite3")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Times `sqlite3 SRC "VACUUM INTO 'OUT'"` as a process, output removed between runs.
fn time_sqlite3_vacuum_into(src: &Path, out: &Path, runs: usize) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let _ = std::fs::remove_file(out);
                let start = Instant::now();
                let status = Command::new("sqlite3")
                    .arg(src)
                    .arg(format!("VACUUM INTO '{}'", out.display()))
                    .status()
                    .unwrap();
                let elapsed = start.elapsed();
                assert!(status.success());
                elapsed
            })
            .collect(),
    )
}

fn time_runs(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    median((0..runs).map(|_| f()).collect())
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("user.snug");
    let start = Instant::now();
    generate_v6(&path);
    let size = std::fs::metadata(&path).unwrap().len();
    println!(
        "generated v6 user DB: {:.1} MiB in {:.1} s",
        size as f64 / 1048576.0,
        start.elapsed().as_secs_f64()
    );
    assert!(
        size <= MAX_USERDB_BYTES,
        "the bench DB must be under the cap"
    );
    let have_sqlite3 = sqlite3_available();
    let vacuum_out = dir.path().join("vacuum-into.snug");

    // 1. Healthy open: the whole open_path (connection, defensive settings, assessment).
    let _ = UserDb::open_path(&path, Arc::new(SystemClock)).unwrap();
    let before_hash = sha(&path);
    let written_before = written_bytes();
    let mut wrote_flag = false;
    let open_time = time_runs(51, || {
        let start = Instant::now();
        let (db, report) = UserDb::open_path(&path, Arc::new(SystemClock)).unwrap();
        let elapsed = start.elapsed();
        wrote_flag |= report.wrote;
        drop(db);
        elapsed
    });
    let written = written_bytes()
        .zip(written_before)
        .map(|(after, before)| after - before);
    let unchanged = sha(&path) == before_hash;
    let journal = dir.path().join("user.snug-journal").exists();
    println!(
        "healthy open (open_path incl. connection + heal check): median {:.3} ms over 51 runs (target <= 2 ms)",
        ms(open_time)
    );
    println!(
        "healthy open bytes written: {} (write(2) bytes over 51 opens: {}; file sha256 unchanged: {unchanged}; journal left: {journal})",
        if wrote_flag || !unchanged {
            "NONZERO"
        } else {
            "0"
        },
        written.map_or("n/a".to_owned(), |n| n.to_string()),
    );
    if have_sqlite3 {
        let cli = time_runs(11, || {
            let start = Instant::now();
            let out = Command::new("sqlite3")
                .arg(&path)
                .arg("SELECT count(*) FROM sqlite_master")
                .output()
                .unwrap();
            assert!(out.status.success());
            start.elapsed()
        });
        println!(
            "  for scale: sqlite3 process reading sqlite_master: median {:.3} ms",
            ms(cli)
        );
    }

    // 2. Export against VACUUM INTO of the same file.
    let export_out = dir.path().join("export.snug");
    let export_time = time_runs(5, || {
        let _ = std::fs::remove_file(&export_out);
        let start = Instant::now();
        export_file(&path, &export_out, ExportOptions::default()).unwrap();
        start.elapsed()
    });
    let exported = std::fs::read(&export_out).unwrap();
    let leaked = exported
        .windows(24)
        .any(|w| w == b"sk-live-credential-value");
    println!(
        "export_file (default, secrets stripped): median {:.1} ms; secret bytes in output: {leaked}",
        ms(export_time)
    );
    if have_sqlite3 {
        let vacuum = time_sqlite3_vacuum_into(&path, &vacuum_out, 5);
        println!(
            "sqlite3 FILE \"VACUUM INTO 'x'\": median {:.1} ms",
            ms(vacuum)
        );
        println!(
            "export ratio: {:.2}x (target <= 1.3x)",
            export_time.as_secs_f64() / vacuum.as_secs_f64()
        );
    }

    // 3. Migration of a 64 MiB v1 file against VACUUM INTO of that file.
    let v1 = dir.path().join("user.sqlite");
    generate_v1(&v1);
    let v1_size = std::fs::metadata(&v1).unwrap().len();
    println!(
        "generated v1 user DB: {:.1} MiB",
        v1_size as f64 / 1048576.0
    );
    let migrated = dir.path().join("migrated.snug");
    let mut report = None;
    let migrate_time = time_runs(5, || {
        let _ = std::fs::remove_file(&migrated);
        let start = Instant::now();
        report = Some(migrate_file(&v1, &migrated, Arc::new(SystemClock)).unwrap());
        start.elapsed()
    });
    let report = report.unwrap();
    println!(
        "migrate_file v1 -> v6 (src untouched, output compacted): median {:.1} ms; found {}, wiped {}, output {:.1} MiB",
        ms(migrate_time),
        report.found_version,
        report.credentials_wiped,
        std::fs::metadata(&migrated).unwrap().len() as f64 / 1048576.0
    );
    let in_place = dir.path().join("in-place.snug");
    let in_place_time = time_runs(3, || {
        std::fs::copy(&v1, &in_place).unwrap();
        let start = Instant::now();
        let (_db, report) = UserDb::open_path(&in_place, Arc::new(SystemClock)).unwrap();
        assert!(report.advanced);
        start.elapsed()
    });
    println!(
        "open_path migrating a v1 file in place: median {:.1} ms",
        ms(in_place_time)
    );
    if have_sqlite3 {
        let vacuum = time_sqlite3_vacuum_into(&v1, &vacuum_out, 5);
        println!(
            "sqlite3 V1FILE \"VACUUM INTO 'x'\": median {:.1} ms",
            ms(vacuum)
        );
        println!(
            "migration ratio: {:.2}x (target <= 1.5x)",
            migrate_time.as_secs_f64() / vacuum.as_secs_f64()
        );
        println!(
            "in-place migration ratio: {:.2}x",
            in_place_time.as_secs_f64() / vacuum.as_secs_f64()
        );
    } else {
        println!("sqlite3 not found: ratios not measured");
    }
}
