//! Delta sync on a user database shaped like a real one, against rsync and the whole file, in
//! one run (issue 38; the baseline its work is judged against).
//!
//! The database (`delta/shape.rs`): about 63 MiB of apps with versions of complete HTML (pinned
//! and unpinned), chat threads, docs and app tables whose rows overflow pages. Four edits are
//! made on the live file in turn and each exported as `snug sync push` sends it
//! (`snug_restore::push_image`): one row updated in place, a few short rows inserted early in a
//! table, one chat message appended, one new app version of 100 KiB HTML. For each, measured in
//! body bytes each way through `snug_restore::HubOrigin` (the client `snug sync` uses):
//!
//! - a delta push as the CLI makes it (the base's page ids kept) and one that first learns the
//!   base's pages from a summary (a sparse manifest) of its own;
//! - a delta pull by a file that is the base revision, and by one that is no revision (it learns
//!   the revision's pages from a summary and sends its own sparse against them);
//! - the whole-file PUT and GET, and `rsync --stats --no-whole-file` moving the new export onto
//!   the old one (total bytes sent and received);
//! - against issue 38's targets: every edit but the new version ≤ 64 KiB each way (stretch
//!   16 KiB) and ≤ 0.05× rsync; the new version ≤ 1.2× its HTML row compressed by `zstd -3`;
//!   a sync that knew nothing of the hub's pages ≤ 0.5× rsync.
//!
//! Then the page identity of each new export against the old one (same page number, anywhere,
//! and what the delta plan makes of it), and the delta push against the whole PUT: wall time and
//! CPU, medians over alternating rounds, the hub's CPU apart from the client's (the hub runs in
//! a child process, `delta/hub.rs`), against the target of hub CPU ≤ 0.6× the whole PUT's.
//!
//! Last, 120 pushes of small edits (`delta/repeated.rs`): what they move and what the hub's
//! store grows by, against the bytes of the pages they changed (target ≤ 2× each).
//!
//! With `SNUG_BENCH_LINK=1` the client reaches the hub over an emulated link of 100 Mbit/s and
//! 20 ms round trip (`delta/link.rs`, which says why it is not `tc netem`), for the target of a
//! delta push's wall time ≤ 0.1× the whole PUT's there.
//!
//! Run (the hub runs on loopback; nothing leaves the machine):
//! `CARGO_PROFILE_BENCH_LTO=off CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 nice -n 15 cargo bench -p snug-cli --bench delta`.
//! The two profile settings keep the build to minutes on a small shared machine (the release
//! profile's fat LTO serves the shipped binaries); they make the hub a little slower than the
//! release build, the same for every row.

#[path = "delta/hub.rs"]
mod hub;
#[path = "delta/link.rs"]
mod link;
#[path = "delta/repeated.rs"]
mod repeated;
#[path = "delta/shape.rs"]
mod shape;

use std::{
    collections::HashSet,
    io::Write as _,
    path::Path,
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use snug_delta::Manifest;
use snug_restore::{HubOrigin, LocalCopy, Origin, Pushed, Selector, SyncedBase, Traffic};

/// Rounds of (delta push, whole PUT), alternating which goes first.
const ROUNDS: usize = 5;

/// Issue 38's byte targets for an edit other than a new version.
const EACH_WAY: u64 = 64 << 10;
const EACH_WAY_STRETCH: u64 = 16 << 10;
const OF_RSYNC: f64 = 0.05;
/// A sync that knew nothing of the hub's pages (a push without the base's page ids, a pull by a
/// file that is no revision): at most this times rsync (issue 38 point 2).
const FALLBACK_OF_RSYNC: f64 = 0.5;
/// The new version: at most this times its HTML row compressed by `zstd -3`.
const OF_ZSTD: f64 = 1.2;
/// Repeated small edits: bytes moved, and the store's growth, at most this times the bytes of the
/// pages they changed (issue 38 point 4).
const OF_CHANGED: f64 = 2.0;
/// Hub CPU per delta push, at most this times the whole PUT's.
const OF_WHOLE_CPU: f64 = 0.6;
/// On the slow link, a delta push's wall time at most this times the whole PUT's.
const OF_WHOLE_WALL: f64 = 0.1;

fn export(path: &Path) -> Vec<u8> {
    let plaintext = std::fs::read(path).expect("read");
    snug_restore::push_image(&plaintext, false, Arc::new(snug_schema::SystemClock))
        .expect("export")
        .bytes
}

fn manifest(image: &[u8]) -> Manifest {
    Manifest::with_shapes(image, snug_delta::page_size_of(image)).expect("manifest")
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

/// The size of `data` compressed by `zstd -3`, as the zstd command line makes it.
fn zstd3(zstd: &Path, data: &[u8]) -> u64 {
    let mut child = Command::new(zstd)
        .args(["-3", "-c", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("zstd");
    let mut stdin = child.stdin.take().expect("stdin");
    let data = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data).expect("zstd stdin"));
    let out = child.wait_with_output().expect("zstd");
    writer.join().expect("writer");
    assert!(out.status.success());
    out.stdout.len() as u64
}

/// How the pages of `new` stand against those of `old` (both of `page` bytes a page).
struct Identity {
    old_pages: usize,
    new_pages: usize,
    /// Byte-identical to the page of the same number in `old`.
    same_number: usize,
    /// Byte-identical to some page of `old`.
    anywhere: usize,
    /// The delta plan's literal and patched pages (the rest are copied from the base).
    literal: u64,
    patched: u64,
}

fn identity(old: &[u8], new: &[u8]) -> Identity {
    let page = snug_delta::page_size_of(new) as usize;
    let old_set: HashSet<&[u8]> = old.chunks(page).collect();
    let same_number = new
        .chunks(page)
        .zip(old.chunks(page))
        .filter(|(a, b)| a == b)
        .count();
    let anywhere = new.chunks(page).filter(|p| old_set.contains(p)).count();
    let layout = snug_delta::plan(&manifest(new), &manifest(old).source());
    Identity {
        old_pages: old.len().div_ceil(page),
        new_pages: new.len().div_ceil(page),
        same_number,
        anywhere,
        literal: layout.literal_count(),
        patched: layout.patched_count(),
    }
}

/// Point 4's table: what repeated small pushes moved and stored, against the pages changed.
fn print_repeated(r: &repeated::Repeated) {
    let changed = r.changed_bytes();
    println!(
        "## Repeated small edits: {} pushes ({} by difference) of a note updated or a chat message appended, on a {:.1} MiB database",
        r.pushes,
        r.by_delta,
        r.image_len as f64 / 1048576.0
    );
    println!();
    println!(
        "Pages changed, summed over the pushes: {} ({}).",
        r.changed_pages,
        kib(changed)
    );
    println!();
    println!("| measure | bytes | / changed pages' bytes | target |");
    println!("|---|---|---|---|");
    let row = |what: &str, bytes: u64| {
        let ratio = bytes as f64 / changed.max(1) as f64;
        let met = if ratio <= OF_CHANGED { "met" } else { "missed" };
        println!(
            "| {what} | {} | {ratio:.2} | ≤ {OF_CHANGED}×: {met} |",
            kib(bytes)
        );
    };
    row("moved (body bytes up + down)", r.sent + r.received);
    row("store growth on disk", r.store.1.saturating_sub(r.store.0));
    println!();
    println!(
        "Store on disk: {} before, {} after.",
        kib(r.store.0),
        kib(r.store.1)
    );
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// One push's cost: wall time, the client's CPU and the hub's.
#[derive(Default)]
struct Cost {
    wall: Vec<Duration>,
    client: Vec<Duration>,
    hub: Vec<Duration>,
}

impl Cost {
    fn medians(self) -> [Duration; 3] {
        [median(self.wall), median(self.client), median(self.hub)]
    }
}

/// Pushes `bytes` on `base` through `origin` (with the base's page ids and bytes when `synced`
/// is given, as the CLI keeps them), adding its cost to `cost`; returns the new revision.
fn push(
    hub: &hub::Spawned,
    origin: &HubOrigin,
    bytes: &[u8],
    base: &str,
    synced: Option<SyncedBase<'_>>,
    cost: &mut Cost,
) -> String {
    let (started, client, served) = (Instant::now(), hub::client_cpu(), hub.cpu());
    let pushed = origin
        .push_from(bytes, Some(base), synced, None)
        .expect("push");
    cost.wall.push(started.elapsed());
    cost.client.push(hub::client_cpu() - client);
    cost.hub.push(hub.cpu() - served);
    match pushed {
        Pushed::Accepted { revision } => revision,
        Pushed::Conflict { current } => panic!("conflict with {current:?}"),
    }
}

fn kib(n: u64) -> String {
    format!("{:.1} KiB", n as f64 / 1024.0)
}

/// One transfer's row of the bytes table.
struct Moved {
    what: &'static str,
    traffic: Traffic,
}

/// Whether a transfer meets the edit's byte target, said as the table prints it; a `fallback`
/// (a sync that first learns the hub's pages) is held to its own target against rsync too.
fn verdict(moved: &Traffic, rsync_bytes: u64, zstd: Option<u64>, fallback: bool) -> String {
    let way = moved.sent.max(moved.received);
    let of_rsync = (moved.sent + moved.received) as f64 / rsync_bytes as f64;
    let met = |met: bool| if met { "met" } else { "missed" };
    match (zstd, fallback) {
        (Some(zstd), false) => {
            let ratio = way as f64 / zstd as f64;
            format!("{ratio:.2}× zstd: {}", met(ratio <= OF_ZSTD))
        }
        (Some(zstd), true) => {
            let ratio = way as f64 / zstd as f64;
            format!(
                "{ratio:.2}× zstd: {}; ≤ {FALLBACK_OF_RSYNC}× rsync: {}",
                met(ratio <= OF_ZSTD),
                met(of_rsync <= FALLBACK_OF_RSYNC)
            )
        }
        // A sync that first learns the hub's pages is held to its own target.
        (None, true) => format!(
            "≤ {FALLBACK_OF_RSYNC}× rsync: {}",
            met(of_rsync <= FALLBACK_OF_RSYNC)
        ),
        (None, false) => match (
            way <= EACH_WAY_STRETCH,
            way <= EACH_WAY,
            of_rsync <= OF_RSYNC,
        ) {
            (true, _, true) => "met (stretch too)".to_owned(),
            (false, true, true) => "met".to_owned(),
            (_, true, false) => format!("≤ {}: met; ≤ {OF_RSYNC}× rsync: missed", kib(EACH_WAY)),
            _ => "missed".to_owned(),
        },
    }
}

fn main() {
    if hub::serve_if_child() || link::serve_if_child() {
        return;
    }
    // The wall-time target is on a slow link: this run's wall times are on one when asked.
    let on_link = std::env::var_os("SNUG_BENCH_LINK").is_some_and(|v| v == "1");
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
    let zstd_bin = Path::new("/usr/bin/zstd");
    assert!(
        zstd_bin.exists(),
        "zstd is not installed (apt-get install -y zstd)"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("user.snug");
    let started = Instant::now();
    let built = shape::build(&file);
    let live = std::fs::metadata(&file).expect("live").len();
    let mut images = vec![export(&file)];
    let mut text = shape::Text::new(0x2545_f491_4f6c_dd1d);
    let mut edits = Vec::new();
    for edit in &shape::EDITS {
        let (what, html) = shape::apply(&file, &built, edit, &mut text);
        images.push(export(&file));
        edits.push((edit.name, what, html));
    }
    println!("Database: {}.", built.summary);
    println!(
        "Live file {:.1} MiB; exports {} bytes, then {} (built and exported in {:.1?}).",
        live as f64 / 1048576.0,
        images[0].len(),
        images[1..]
            .iter()
            .map(|i| i.len().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        started.elapsed()
    );
    println!();

    let store = dir.path().join("hub-store");
    let hub = hub::Spawned::start(hub::CHILD, store.to_str().expect("a UTF-8 path"));
    let relay = on_link.then(|| {
        let address = hub.url.strip_prefix("http://").expect("http");
        hub::Spawned::start(link::CHILD, address)
    });
    let url = relay.as_ref().map_or(&hub.url, |relay| &relay.url).clone();
    let whole = || HubOrigin::new(&url, None).whole_files_only();
    let delta = || HubOrigin::new(&url, None);
    let Pushed::Accepted {
        revision: mut current,
    } = whole().push(&images[0], None).expect("first")
    else {
        panic!("first push");
    };

    let mut bytes_rows = Vec::new();
    let mut identities = Vec::new();
    let mut costs = Vec::new();
    for (i, (name, what, html)) in edits.iter().enumerate() {
        let (old, new) = (&images[i], &images[i + 1]);
        eprintln!("measuring: {name} ({what})");
        let (old_pages, new_pages) = (manifest(old), manifest(new));
        let kept = |pages, image| {
            Some(SyncedBase {
                pages,
                image: Some(image),
            })
        };
        // The current revision is `old` here. Each measured push goes from it, and a delta push
        // of `old` (not measured) brings it back for the next.
        let (mut delta_cost, mut whole_cost, mut resets) =
            (Cost::default(), Cost::default(), Cost::default());
        let (mut pushed, mut whole_put) = (None, None);
        for round in 0..ROUNDS {
            for by_delta in [round.is_multiple_of(2), !round.is_multiple_of(2)] {
                let origin = if by_delta { delta() } else { whole() };
                let (pages, cost) = if by_delta {
                    (kept(&old_pages, old), &mut delta_cost)
                } else {
                    (None, &mut whole_cost)
                };
                let revision = push(&hub, &origin, new, &current, pages, cost);
                let traffic = origin.traffic();
                assert_eq!(traffic.delta, by_delta, "{traffic:?}");
                *(if by_delta {
                    &mut pushed
                } else {
                    &mut whole_put
                }) = Some(traffic);
                let back = delta();
                current = push(
                    &hub,
                    &back,
                    old,
                    &revision,
                    kept(&new_pages, new),
                    &mut resets,
                );
                assert!(back.traffic().delta, "{:?}", back.traffic());
            }
        }
        // Without the base's page ids: the push first learns them from a summary.
        let planned = delta();
        let revision = push(&hub, &planned, new, &current, None, &mut resets);
        current = push(
            &hub,
            &delta(),
            old,
            &revision,
            kept(&new_pages, new),
            &mut resets,
        );
        let old_revision = current.clone();
        current = push(
            &hub,
            &delta(),
            new,
            &current,
            kept(&old_pages, old),
            &mut resets,
        );
        // Pull: a device holding `old` fetches `new`, naming the revision its file is (the
        // CLI's case), and, for a file that is no revision, learning the revision's pages.
        let snapshot = delta().describe(&Selector::Current).expect("describe");
        let mut pulls = Vec::new();
        for revision in [Some(old_revision.as_str()), None] {
            let origin = delta();
            let mut sink = Vec::new();
            // As the CLI makes it: the file's recorded pages, which are its own.
            let local = LocalCopy {
                bytes: old,
                revision,
                synced: revision.map(|revision| (revision, &old_pages)),
            };
            origin
                .download_from(&snapshot, Some(local), &mut sink)
                .expect("pull");
            assert_eq!(&sink, new);
            assert!(origin.traffic().delta, "{:?}", origin.traffic());
            pulls.push(origin.traffic());
        }
        let got = whole();
        let mut sink = Vec::new();
        got.download(&snapshot, &mut sink).expect("get");
        assert_eq!(&sink, new);
        let (rsync_bytes, literal) = rsync(rsync_bin, dir.path(), old, new);
        let zstd = html.as_ref().map(|html| zstd3(zstd_bin, html.as_bytes()));
        let moved = [
            Moved {
                what: "delta push (page ids kept)",
                traffic: pushed.expect("a delta push"),
            },
            Moved {
                what: "delta push (summary round)",
                traffic: planned.traffic(),
            },
            Moved {
                what: "delta pull (file is a revision)",
                traffic: pulls[0],
            },
            Moved {
                what: "delta pull (no revision)",
                traffic: pulls[1],
            },
            Moved {
                what: "whole PUT",
                traffic: whole_put.expect("a whole PUT"),
            },
            Moved {
                what: "whole GET",
                traffic: got.traffic(),
            },
        ];
        bytes_rows.push((
            *name,
            moved,
            rsync_bytes,
            literal,
            zstd,
            html.as_ref().map(String::len),
        ));
        identities.push((*name, identity(old, new)));
        costs.push((*name, delta_cost.medians(), whole_cost.medians()));
        // The run ends each edit with `new` current, the next edit's `old`.
    }
    eprintln!("measuring: {} pushes of small edits", repeated::PUSHES);
    let last = images.last().expect("an image").clone();
    let repeated = repeated::run(
        &file,
        &built,
        &mut text,
        (&url, &store),
        (last, current),
        export,
    );
    drop(relay);
    drop(hub);

    println!("## Bytes per edit (body bytes; rsync: total bytes sent + received)");
    println!();
    println!("| edit | transfer | up | down | up + down | / rsync | target |");
    println!("|---|---|---|---|---|---|---|");
    for (name, moved, rsync_bytes, literal, zstd, _) in &bytes_rows {
        for Moved { what, traffic } in moved {
            let total = traffic.sent + traffic.received;
            let target = if what.starts_with("delta") {
                verdict(
                    traffic,
                    *rsync_bytes,
                    *zstd,
                    what.ends_with("(summary round)") || what.ends_with("(no revision)"),
                )
            } else {
                String::new()
            };
            println!(
                "| {name} | {what} | {} | {} | {} | {:.3} | {target} |",
                kib(traffic.sent),
                kib(traffic.received),
                kib(total),
                total as f64 / *rsync_bytes as f64,
            );
        }
        println!(
            "| {name} | rsync --stats --no-whole-file | | | {} (literal {}) | 1.000 | |",
            kib(*rsync_bytes),
            kib(*literal)
        );
    }
    println!();
    println!(
        "Targets: every edit but the new version ≤ {} each way (stretch {}) and ≤ {OF_RSYNC}× \
         rsync (up + down); the new version ≤ {OF_ZSTD}× its HTML row compressed by zstd -3, \
         each way; a sync that first learns the hub's pages (summary round, no revision) ≤ {FALLBACK_OF_RSYNC}× rsync.",
        kib(EACH_WAY),
        kib(EACH_WAY_STRETCH)
    );
    for (name, _, _, _, zstd, html) in &bytes_rows {
        if let (Some(zstd), Some(html)) = (zstd, html) {
            println!(
                "{name}: the HTML row is {} bytes, {} by zstd -3 ({:.2}:1); the target is {}.",
                html,
                zstd,
                *html as f64 / *zstd as f64,
                kib((*zstd as f64 * OF_ZSTD) as u64)
            );
        }
    }
    println!();
    println!("## Page identity of each new export against the one before");
    println!();
    println!(
        "| edit | pages (old → new) | identical at the same number | identical somewhere in the old | differ from the same number | in no old page | delta plan: literal, patched |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (name, id) in &identities {
        let percent = |n: usize| 100.0 * n as f64 / id.new_pages as f64;
        println!(
            "| {name} | {} → {} | {} ({:.1} %) | {} ({:.1} %) | {} | {} | {}, {} |",
            id.old_pages,
            id.new_pages,
            id.same_number,
            percent(id.same_number),
            id.anywhere,
            percent(id.anywhere),
            id.new_pages - id.same_number,
            id.new_pages - id.anywhere,
            id.literal,
            id.patched
        );
    }
    println!();
    let on = if on_link {
        "a link of 100 Mbit/s each way, 20 ms round trip (SNUG_BENCH_LINK=1)"
    } else {
        "loopback"
    };
    println!(
        "## Delta push against the whole PUT on {on} (medians of {ROUNDS} alternating rounds; CPU in 10 ms ticks)"
    );
    println!();
    println!(
        "| edit | wall, delta | wall, whole | wall delta / whole | hub CPU, delta | hub CPU, whole | hub CPU delta / whole | client CPU, delta | client CPU, whole |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, [wall_d, client_d, hub_d], [wall_w, client_w, hub_w]) in costs {
        let ratio = hub_d.as_secs_f64() / hub_w.as_secs_f64();
        let met = if ratio <= OF_WHOLE_CPU {
            "met"
        } else {
            "missed"
        };
        let wall = wall_d.as_secs_f64() / wall_w.as_secs_f64();
        // The wall-time target is set for the slow link only; on loopback the ratio is shown bare.
        let wall_met = match (on_link, wall <= OF_WHOLE_WALL) {
            (false, _) => "",
            (true, true) => " (met)",
            (true, false) => " (missed)",
        };
        println!(
            "| {name} | {wall_d:.2?} | {wall_w:.2?} | {wall:.2}{wall_met} | {hub_d:.2?} | {hub_w:.2?} | {ratio:.2} ({met}) | {client_d:.2?} | {client_w:.2?} |"
        );
    }
    println!();
    println!(
        "Targets: hub CPU per delta push ≤ {OF_WHOLE_CPU}× the whole PUT's; on a link of \
         100 Mbit/s with 20 ms RTT, a delta push's wall time ≤ {OF_WHOLE_WALL}× the whole PUT's."
    );
    println!();
    print_repeated(&repeated);
    std::io::stdout().flush().expect("flush");
}
