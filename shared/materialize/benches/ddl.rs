//! Benchmarks `apply_ddl` as the number of statements grows (issue 23, point 4): one call of
//! `n` statements on an in-memory user database, for three shapes of migration — `n` tables,
//! `n` indexes on one table, and `n` seed rows — and the ratio of each time to the time of the
//! smallest `n`, beside the ratio of the counts. Linear work keeps the two ratios close; the
//! quadratic write-back this crate once had (an `ALTER TABLE … RENAME` per new table in the user
//! database, each re-reading its whole schema) made 800 tables take seconds.
//!
//! Run with `cargo bench -p snug-materialize --bench ddl` (`-- 5000` adds a size).

#![allow(clippy::unwrap_used, reason = "a benchmark aborts on any failure")]
#![allow(clippy::print_stdout, reason = "a benchmark prints its table")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use snug_materialize::apply_ddl;
use snug_schema::{NewApp, SystemClock, UserDb};

const APP: &str = "0b5e6c1a-4f2d-4c3b-9a8e-7d6f5e4c3b2a";

fn fresh() -> UserDb {
    let (mut db, _) = UserDb::create_in_memory(Arc::new(SystemClock)).unwrap();
    db.install_app(&NewApp {
        app_id: Some(APP.to_owned()),
        display_name: "Bench".to_owned(),
        html: "<p>app</p>".to_owned(),
        ..NewApp::default()
    })
    .unwrap();
    db
}

/// `n` statements of one shape.
fn statements(shape: &str, n: usize) -> Vec<String> {
    match shape {
        "tables" => (0..n)
            .map(|i| {
                format!("CREATE TABLE t{i} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, v REAL)")
            })
            .collect(),
        "indexes" => std::iter::once(
            "CREATE TABLE items (id INTEGER PRIMARY KEY, a TEXT, b TEXT, c INTEGER)".to_owned(),
        )
        .chain((1..n).map(|i| format!("CREATE INDEX ix{i} ON items (a, c, b)")))
        .collect(),
        _ => std::iter::once("CREATE TABLE seed (id INTEGER PRIMARY KEY, label TEXT)".to_owned())
            .chain((1..n).map(|i| format!("INSERT INTO seed (label) VALUES ('row {i}')")))
            .collect(),
    }
}

fn time(shape: &str, n: usize) -> Duration {
    let statements = statements(shape, n);
    let mut db = fresh();
    let started = Instant::now();
    let report = apply_ddl(&mut db, APP, &statements).unwrap();
    let elapsed = started.elapsed();
    assert_eq!(report.applied, n);
    elapsed
}

fn main() {
    let mut sizes = vec![100, 200, 400, 800];
    sizes.extend(
        std::env::args()
            .skip(1)
            .filter_map(|arg| arg.parse::<usize>().ok()),
    );
    println!(
        "apply_ddl, one call of n statements (in memory; ratios against n = {})",
        sizes[0]
    );
    println!(
        "{:>8} {:>6} {:>12} {:>10} {:>10}",
        "shape", "n", "time", "n ratio", "t ratio"
    );
    for shape in ["tables", "indexes", "seed rows"] {
        let base = time(shape, sizes[0]);
        for &n in &sizes {
            let t = if n == sizes[0] { base } else { time(shape, n) };
            println!(
                "{shape:>8} {n:>6} {:>9.1} ms {:>10.1} {:>10.1}",
                t.as_secs_f64() * 1e3,
                n as f64 / sizes[0] as f64,
                t.as_secs_f64() / base.as_secs_f64()
            );
        }
    }
}
