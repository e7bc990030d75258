//! Benchmarks materialization and write-back on an app with 16 MiB of rows, with the system
//! `sqlite3` measured in the same run as the peer.
//!
//! Prints, as medians of several runs:
//! - materializing the app vs `sqlite3 :memory:` running `ATTACH` + `CREATE TABLE` +
//!   `INSERT … SELECT` of the same tables + `CREATE INDEX` (the same work, from the same file;
//!   the peer's figure includes starting the process, which is also shown on its own);
//! - persisting an unchanged runtime: bytes written (`wchar` of `/proc/self/io`) and whether the
//!   file's SHA-256 changed, for a runtime this crate materialized (known unchanged) and for an
//!   image of it from elsewhere (compared table by table);
//! - persisting a runtime in which one small table changed, vs one in which the big table
//!   changed: only the changed table is rewritten.
//!
//! Run with `cargo bench -p snug-materialize --bench materialize`.

#![allow(clippy::unwrap_used, reason = "a benchmark aborts on any failure")]
#![allow(clippy::print_stdout, reason = "a benchmark prints its table")]

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use snug_materialize::{
    AppDatabase, AppSchema, ExecuteLimits, ObjectKind, apply_ddl, execute, materialize, persist,
};
use snug_schema::{NewApp, SystemClock, UserDb, app_data_token, app_rest_table_name};

const APP: &str = "0b5e6c1a-4f2d-4c3b-9a8e-7d6f5e4c3b2a";
const OTHER_APP: &str = "starter--notes";
const RUNS: usize = 9;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{} µs", d.as_micros())
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    }
}

/// Bytes this process has handed to `write(2)` and friends so far.
fn written_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|line| line.strip_prefix("wchar: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn sha256(path: &Path) -> String {
    Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Fills the app with about 16 MiB of rows in three tables plus `snug_kv`, through this
/// crate's own API, and gives a second app some data so the file is not just this app.
fn generate(db: &mut UserDb) {
    for (id, name) in [(APP, "Ledger"), (OTHER_APP, "Notes")] {
        db.install_app(&NewApp {
            app_id: Some(id.to_owned()),
            display_name: name.to_owned(),
            html: "<p>app</p>".repeat(100),
            ..NewApp::default()
        })
        .unwrap();
    }
    apply_ddl(
        db,
        APP,
        &[
            "CREATE TABLE snug_kv (key TEXT PRIMARY KEY, value TEXT)",
            "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, ts INTEGER NOT NULL, kind TEXT, payload TEXT)",
            "CREATE TABLE accounts (code TEXT PRIMARY KEY, name TEXT, balance REAL) WITHOUT ROWID",
            "CREATE TABLE tags (tag TEXT, weight INTEGER)",
            "CREATE INDEX idx_events_ts ON events (ts)",
            "CREATE VIEW v_kinds AS SELECT kind, count(*) AS n FROM events GROUP BY kind",
        ],
    )
    .unwrap();
    let unlimited = ExecuteLimits {
        max_steps: None,
        ..ExecuteLimits::default()
    };
    execute(
        db,
        APP,
        &[
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000) \
             INSERT INTO events (ts, kind, payload) \
             SELECT 1700000000 + i * 7, 'kind' || (i % 13), printf('%08d:%s', i, hex(randomblob(56))) FROM n",
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) \
             INSERT INTO accounts SELECT printf('AC%06d', i), 'account ' || i, i * 1.25 FROM n",
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) \
             INSERT INTO tags SELECT 'tag' || i, i FROM n",
            "INSERT INTO snug_kv VALUES ('theme', '\"dark\"')",
        ],
        &unlimited,
    )
    .unwrap();
    execute(
        db,
        OTHER_APP,
        &[
            "CREATE TABLE notes (body TEXT)".to_owned(),
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000) \
             INSERT INTO notes SELECT printf('note %d %s', i, hex(randomblob(64))) FROM n"
                .to_owned(),
        ],
        &unlimited,
    )
    .unwrap();
}

/// The peer's script: the same DDL, copy and index creation `materialize` performs.
fn peer_script(db: &UserDb, path: &Path) -> String {
    let schema_json: String = db
        .connection()
        .query_row(
            "SELECT schema_json FROM snug_app_schemas WHERE app_id = ?1",
            [APP],
            |row| row.get(0),
        )
        .unwrap();
    let schema = AppSchema::parse(&schema_json).unwrap();
    let token = app_data_token(APP);
    let mut script = format!("ATTACH '{}' AS u;\nBEGIN;\n", path.display());
    script.push_str("CREATE TABLE snug_kv (key TEXT PRIMARY KEY, value TEXT);\n");
    script.push_str(&format!(
        "INSERT INTO main.snug_kv SELECT * FROM u.{};\n",
        app_rest_table_name(&token, "snug_kv")
    ));
    for table in schema
        .objects
        .iter()
        .filter(|o| o.kind == ObjectKind::Table)
    {
        script.push_str(&format!("{};\n", table.ddl));
        script.push_str(&format!(
            "INSERT INTO main.{} SELECT * FROM u.{};\n",
            table.name,
            app_rest_table_name(&token, &table.name)
        ));
    }
    for object in schema
        .objects
        .iter()
        .filter(|o| o.kind != ObjectKind::Table)
    {
        script.push_str(&format!("{};\n", object.ddl));
    }
    script.push_str("COMMIT;\nDETACH u;\n");
    script
}

fn run_sqlite3(script: &str) -> Duration {
    let started = Instant::now();
    let mut child = Command::new("sqlite3")
        .arg(":memory:")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("the system sqlite3 CLI");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), script.as_bytes()).unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    started.elapsed()
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("user.snug");
    let clock = Arc::new(SystemClock);
    {
        let (mut db, _) = UserDb::open_path(&path, clock.clone()).unwrap();
        generate(&mut db);
    }
    let (mut db, _) = UserDb::open_path(&path, clock).unwrap();
    let mut runtime = materialize(&db, APP).unwrap();
    let app_bytes = runtime.to_bytes().unwrap().len();
    let rows: i64 = runtime
        .connection()
        .query_row(
            "SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM accounts) + (SELECT count(*) FROM tags)",
            [],
            |row| row.get(0),
        )
        .unwrap();
    println!(
        "user file {:.1} MiB; app {APP}: {:.1} MiB materialized, {rows} rows, 4 tables, 1 index, 1 view",
        std::fs::metadata(&path).unwrap().len() as f64 / 1048576.0,
        app_bytes as f64 / 1048576.0
    );
    let version = Command::new("sqlite3")
        .arg("--version")
        .output()
        .unwrap()
        .stdout;
    println!(
        "peer: system sqlite3 {} (bundled here: {})",
        String::from_utf8_lossy(&version)
            .split_whitespace()
            .next()
            .unwrap_or("?"),
        rusqlite::version()
    );

    // Materialize vs the peer, interleaved so both see the same machine state.
    let script = peer_script(&db, &path);
    let (mut ours, mut theirs, mut startup) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let started = Instant::now();
        let runtime = materialize(&db, APP).unwrap();
        ours.push(started.elapsed());
        drop(runtime);
        theirs.push(run_sqlite3(&script));
        startup.push(run_sqlite3("SELECT 1;"));
    }
    let (ours, theirs, startup) = (median(ours), median(theirs), median(startup));
    println!();
    println!("| operation (median of {RUNS}) | snug-materialize | sqlite3 CLI peer | ratio |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| materialize 16 MiB app (ATTACH + INSERT … SELECT + index) | {} | {} (of which process start {}) | {:.2}× |",
        ms(ours),
        ms(theirs),
        ms(startup),
        ours.as_secs_f64() / theirs.as_secs_f64()
    );
    println!(
        "| same, peer without process start | {} | {} | {:.2}× |",
        ms(ours),
        ms(theirs.saturating_sub(startup)),
        ours.as_secs_f64() / theirs.saturating_sub(startup).as_secs_f64()
    );

    // Persisting an unchanged runtime.
    let hash = sha256(&path);
    let mut known = Vec::new();
    let mut compared = Vec::new();
    let (mut known_written, mut compared_written) = (0, 0);
    for _ in 0..RUNS {
        let mut fresh = materialize(&db, APP).unwrap();
        let before = written_bytes();
        let started = Instant::now();
        let report = persist(&mut db, &mut fresh).unwrap();
        known.push(started.elapsed());
        known_written += written_bytes() - before;
        assert!(!report.wrote);

        let image = fresh.to_bytes().unwrap();
        let mut foreign = AppDatabase::from_bytes(APP, &image).unwrap();
        let before = written_bytes();
        let started = Instant::now();
        let report = persist(&mut db, &mut foreign).unwrap();
        compared.push(started.elapsed());
        compared_written += written_bytes() - before;
        assert!(!report.wrote);
    }
    let unchanged_hash = if sha256(&path) == hash {
        "unchanged"
    } else {
        "CHANGED"
    };
    println!(
        "| persist unchanged runtime, materialized here (known clean) | {} , {} bytes written, file hash {unchanged_hash} | — | — |",
        ms(median(known)),
        known_written
    );
    println!(
        "| persist unchanged runtime image from elsewhere (compared table by table) | {} , {} bytes written, file hash {unchanged_hash} | — | — |",
        ms(median(compared)),
        compared_written
    );

    // Only what changed is rewritten.
    for (label, statement) in [
        (
            "one row of the 200-row table",
            "UPDATE tags SET weight = weight + 1 WHERE tag = 'tag7'",
        ),
        (
            "one row of the 100,000-row table",
            "UPDATE events SET kind = 'edited' WHERE id = 7",
        ),
    ] {
        let mut runtime = materialize(&db, APP).unwrap();
        runtime
            .execute(&[statement], &ExecuteLimits::default())
            .unwrap();
        let before = written_bytes();
        let started = Instant::now();
        let report = persist(&mut db, &mut runtime).unwrap();
        let elapsed = started.elapsed();
        println!(
            "| persist after changing {label} | {} , {} bytes written, rewrote {:?} | — | — |",
            ms(elapsed),
            written_bytes() - before,
            report.tables_written
        );
    }
}
