//! Delta sync against rsync and the whole file, measured in the same run (issue 21).
//!
//! A realistic user database of about 60 MiB (the reference sample's apps filled: trades of
//! small rows, equities of medium rows, a key-value table of 40 KB values, chess moves, chat
//! messages), exported as `snug sync push` sends it. Three edits, each exported again: a small
//! row inserted into the first app table (it fits that table's last page), a row larger than a
//! page inserted there (after the export's VACUUM every later page moves, and every page that
//! names a moved page changes: overflow chains, interior pages), and one chat message updated in
//! place. For each: the bytes a delta push and a delta pull move (body
//! bytes both ways, through `snug_restore::HubOrigin`, the client `snug sync` uses), against
//! `rsync --stats --no-whole-file` moving the new file onto the old one (Debian's rsync; total
//! bytes sent and received) and against the whole-file PUT and GET; and the wall time of the
//! delta push against the whole-file PUT on loopback (medians of alternating rounds), with the
//! process's CPU time during each (the client and the in-process hub together).
//!
//! Run: `cargo bench -p snug-cli --bench delta` (the hub runs in this process on loopback).

use std::{
    io::Write as _,
    path::Path,
    process::Command,
    sync::Arc,
    time::{Duration, Instant},
};

use snug_e2e::{Hub, Options};
use snug_restore::{HubOrigin, LocalCopy, Origin, Pushed, Selector};

const QUOTA: u64 = 64 << 20;
const ROUNDS: usize = 3;

/// xorshift64 text: incompressible enough that no side gains from compression.
struct Text(u64);

impl Text {
    fn take(&mut self, len: usize) -> String {
        let mut out = String::with_capacity(len + 16);
        while out.len() < len {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            out.push_str(&format!("{:016x}", self.0));
        }
        out.truncate(len);
        out
    }
}

fn build(path: &Path) {
    std::fs::write(path, snug_e2e::userdb_vector("sample-v6.export.snug")).expect("write");
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; BEGIN")
        .expect("pragmas");
    let mut text = Text(0x9e37_79b9_7f4a_7c15);
    let app = "app_a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c";
    for i in 0..200_000 {
        conn.execute(
            &format!("INSERT INTO {app}__trades (symbol, qty) VALUES (?1, ?2)"),
            (format!("S{:05}", i % 50_000), f64::from(i % 977)),
        )
        .expect("trade");
    }
    for i in 0..55_000 {
        conn.execute(
            &format!("INSERT INTO {app}__equities (symbol, name) VALUES (?1, ?2)"),
            (format!("EQ{i:06}"), text.take(200)),
        )
        .expect("equity");
    }
    for i in 0..380 {
        conn.execute(
            &format!("INSERT INTO {app}__snug_kv (key, value) VALUES (?1, ?2)"),
            (format!("doc:{i}"), format!("\"{}\"", text.take(40_000))),
        )
        .expect("kv");
    }
    for _ in 0..250_000 {
        conn.execute(
            "INSERT INTO app_x737461727465722d2d6368657373__moves (san) VALUES (?1)",
            [text.take(4)],
        )
        .expect("move");
    }
    for i in 0..13_000 {
        conn.execute(
            "INSERT INTO snug_chat_messages (thread_id, role, content, created_at) VALUES (?1, 'user', ?2, '2026-12-01T00:00:00Z')",
            (format!("t{}", i % 40), text.take(1_500)),
        )
        .expect("message");
    }
    conn.execute_batch("COMMIT").expect("commit");
}

fn export(path: &Path) -> Vec<u8> {
    let plaintext = std::fs::read(path).expect("read");
    snug_restore::push_image(&plaintext, false, Arc::new(snug_schema::SystemClock))
        .expect("export")
        .bytes
}

fn edit(path: &Path, sql: &str) -> Vec<u8> {
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.execute_batch(sql).expect("edit");
    drop(conn);
    export(path)
}

/// rsync moving `new` onto a copy of `old`: (bytes sent + received, literal data).
fn rsync(rsync: &Path, dir: &Path, old: &[u8], new: &[u8]) -> (u64, u64) {
    let src = dir.join("src");
    let dst = dir.join("dst");
    std::fs::create_dir_all(&src).expect("src");
    std::fs::create_dir_all(&dst).expect("dst");
    std::fs::write(src.join("user.snug"), new).expect("new");
    std::fs::write(dst.join("user.snug"), old).expect("old");
    let out = Command::new(rsync)
        .args(["--stats", "--no-whole-file", "-I"])
        .arg(src.join("user.snug"))
        .arg(dst.join("user.snug"))
        .output()
        .expect("rsync");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(dst.join("user.snug")).expect("read"), new);
    let stats = String::from_utf8_lossy(&out.stdout);
    let number = |label: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(label))
            .map(|v| v.trim().split(' ').next().unwrap_or("0").replace(',', ""))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("rsync --stats has no {label:?}: {stats}"))
    };
    (
        number("Total bytes sent:") + number("Total bytes received:"),
        number("Literal data:"),
    )
}

/// The CPU time (user and system) this process has used: the client and the in-process hub
/// together, so a change on the hub's side shows as the difference between two runs, the
/// client's share being the same. From `/proc/self/stat` (clock ticks of 10 ms).
fn cpu_now() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..]
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    Duration::from_millis(ticks * 10)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// A push as `snug sync push` makes it: with the base's page ids it kept when it last synced
/// (`pages`), or without (the plan round first, as after a sync that kept none).
/// Returns the new revision, the push's wall time and the process's CPU time during it.
fn push_with(
    origin: &HubOrigin,
    bytes: &[u8],
    base: &str,
    pages: Option<&snug_delta::Manifest>,
) -> (String, Duration, Duration) {
    let (started, cpu) = (Instant::now(), cpu_now());
    let pushed = origin
        .push_from(bytes, Some(base), pages, None)
        .expect("push");
    let (took, cpu) = (started.elapsed(), cpu_now() - cpu);
    match pushed {
        Pushed::Accepted { revision } => (revision, took, cpu),
        Pushed::Conflict { current } => panic!("conflict with {current:?}"),
    }
}

fn push(origin: &HubOrigin, bytes: &[u8], base: &str) -> (String, Duration, Duration) {
    push_with(origin, bytes, base, None)
}

fn kib(n: u64) -> String {
    format!("{:.1} KiB", n as f64 / 1024.0)
}

fn main() {
    let Some(rsync_bin) = ["/usr/bin/rsync", "/bin/rsync"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
    else {
        eprintln!(
            "rsync is not installed (apt-get install -y rsync); the benchmark needs it as its peer"
        );
        std::process::exit(1);
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("user.snug");
    let started = Instant::now();
    build(&file);
    let base = export(&file);
    // A small row into the first app table: it fits the table's last page, nothing moves.
    let small = edit(
        &file,
        "INSERT INTO app_a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c__trades (symbol, qty) VALUES ('NEW01', 1)",
    );
    // A row larger than a page into the same table: it grows by two pages, and the export's
    // VACUUM moves every page after it (and rewrites every page that names a moved one).
    let inserted = edit(
        &file,
        "INSERT INTO app_a7f3b2c10d4e4f5a8b6c9d0e1f2a3b4c__trades (symbol, qty) VALUES ('NEW02' || hex(randomblob(3000)), 1)",
    );
    // The inserts stay: the update is measured on top of them, as the next edit a user makes.
    let updated = edit(
        &file,
        "UPDATE snug_chat_messages SET content = upper(content) WHERE id = 5000",
    );
    eprintln!(
        "images: {} bytes, then {}, {} and {} bytes (built in {:.1?})",
        base.len(),
        small.len(),
        inserted.len(),
        updated.len(),
        started.elapsed()
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let hub = runtime.block_on(Hub::start(Options {
        auth: snug_gateway::config::AuthMode::Off,
        origins: vec![],
        quota_bytes: QUOTA,
        deadline: Duration::from_secs(120),
        ..Options::default()
    }));
    let url = hub.url();
    let whole = || HubOrigin::new(&url, None).whole_files_only();
    let delta = || HubOrigin::new(&url, None);
    let Pushed::Accepted {
        revision: mut current,
    } = whole().push(&base, None).expect("first")
    else {
        panic!("first push");
    };

    println!(
        "| edit | direction | delta (body bytes) | rsync --stats (sent+received) | whole file | delta / rsync |"
    );
    println!("|---|---|---|---|---|---|");
    let mut timings = Vec::new();
    for (name, old, new) in [
        ("1 small row inserted early (fits its page)", &base, &small),
        (
            "1 large row inserted early (pages shift)",
            &small,
            &inserted,
        ),
        ("1 row updated in place", &inserted, &updated),
    ] {
        let old_pages = snug_delta::Manifest::with_shapes(old, snug_delta::page_size_of(old))
            .expect("manifest");
        // Push by difference (as the CLI does, with the base's page ids), then by whole file,
        // alternating, each from `old` as the current revision.
        let (mut delta_times, mut whole_times) = (Vec::new(), Vec::new());
        let (mut delta_cpu, mut whole_cpu) = (Vec::new(), Vec::new());
        let mut push_bytes = 0;
        for round in 0..ROUNDS {
            for by_delta in [round % 2 == 0, round % 2 != 0] {
                let origin = if by_delta { delta() } else { whole() };
                let pages = by_delta.then_some(&old_pages);
                let (revision, took, cpu) = push_with(&origin, new, &current, pages);
                let traffic = origin.traffic();
                assert_eq!(traffic.delta, by_delta, "{traffic:?}");
                if by_delta {
                    delta_times.push(took);
                    delta_cpu.push(cpu);
                    push_bytes = traffic.sent + traffic.received;
                } else {
                    whole_times.push(took);
                    whole_cpu.push(cpu);
                }
                // Back to `old` as the current revision for the next measurement.
                current = push(&whole(), old, &revision).0;
            }
        }
        // Without the base's page ids: the plan round sends the new image's manifest first.
        let planned = delta();
        let (revision, ..) = push(&planned, new, &current);
        let planned_bytes = planned.traffic().sent + planned.traffic().received;
        current = push(&whole(), old, &revision).0;
        let old_revision = current.clone();
        current = push(&whole(), new, &current).0;
        // Pull: a device holding `old` fetches `new`, naming the revision its file is (the
        // CLI's case), and, for a file that is no revision, sending its manifest.
        let mut pull_bytes = Vec::new();
        for revision in [Some(old_revision.as_str()), None] {
            let origin = delta();
            let snapshot = origin.describe(&Selector::Current).expect("describe");
            let mut sink = Vec::new();
            let local = LocalCopy {
                bytes: old,
                revision,
            };
            origin
                .download_from(&snapshot, Some(local), &mut sink)
                .expect("pull");
            assert_eq!(&sink, new);
            let traffic = origin.traffic();
            assert!(traffic.delta, "{traffic:?}");
            pull_bytes.push(traffic.sent + traffic.received);
        }
        let (rsync_bytes, literal) = rsync(rsync_bin, dir.path(), old, new);
        for (direction, bytes) in [
            ("push (page ids kept)", push_bytes),
            ("push (plan round)", planned_bytes),
            ("pull (file is a revision)", pull_bytes[0]),
            ("pull (manifest)", pull_bytes[1]),
        ] {
            println!(
                "| {name} | {direction} | {} | {} (literal {}) | {} | {:.2} |",
                kib(bytes),
                kib(rsync_bytes),
                kib(literal),
                kib(new.len() as u64),
                bytes as f64 / rsync_bytes as f64
            );
        }
        timings.push((
            name,
            median(delta_times),
            median(whole_times),
            median(delta_cpu),
            median(whole_cpu),
        ));
    }
    println!();
    println!(
        "| edit | delta push | whole-file PUT | delta / whole | CPU, delta push | CPU, whole PUT |"
    );
    println!("|---|---|---|---|---|---|");
    for (name, by_delta, by_whole, cpu_delta, cpu_whole) in timings {
        println!(
            "| {name} | {by_delta:.2?} | {by_whole:.2?} | {:.2} | {cpu_delta:.2?} | {cpu_whole:.2?} |",
            by_delta.as_secs_f64() / by_whole.as_secs_f64()
        );
    }
    std::io::stdout().flush().expect("flush");
}
