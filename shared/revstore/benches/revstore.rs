//! Benchmark of the embedded store against its physical peers, measured in the same run.
//!
//! - durable put of a 64 MiB image vs write + fsync + rename + directory fsync of the same bytes
//! - get of that image vs reading the file
//! - storage of 10 revisions of a 64 MiB database with 1% of its pages changed each vs one image
//! - put and get throughput of 100 KiB images with 32 concurrent clients
//!
//! Run with `cargo bench -p snug-revstore --bench revstore` (append `-- get`, `-- storage` or
//! `-- throughput` for one section). Figures are medians of a few rounds; the machines are noisy,
//! so the ratios matter more than the absolute times, and the load average is printed before and
//! after. How get is compared with reading the file is described at [`get_vs_read`].

use std::{
    fs::File,
    os::unix::fs::FileExt,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures::StreamExt;
use snug_revstore::{
    Precondition, Principal, PutRequest, RevStore, SqliteStore, StoreConfig, UserId,
};

mod common;

use common::{median, ms, random_bytes, stream_of};

const MIB: usize = 1 << 20;
const IMAGE: usize = 64 * MIB;
const PAGE: usize = 4096;
const ROUNDS: usize = 5;

fn dir_size(path: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(path)
        .expect("read dir")
        .map_while(Result::ok)
    {
        let meta = entry.metadata().expect("metadata");
        total += if meta.is_dir() {
            dir_size(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// Lets the disk drain: flushes everything dirty and waits a moment.
fn quiesce() {
    let _ = std::process::Command::new("sync").status();
    std::thread::sleep(Duration::from_millis(300));
}

fn user(s: &str) -> UserId {
    UserId::new(s).expect("user")
}

fn principal() -> Principal {
    Principal::new("bench").expect("principal")
}

async fn put(
    store: &SqliteStore,
    u: &UserId,
    precondition: Precondition,
    bytes: &Bytes,
) -> snug_revstore::Revision {
    let request = PutRequest {
        user: u.clone(),
        precondition,
        principal: principal(),
        idempotency_key: None,
        expected_length: None,
        quota_bytes: None,
    };
    store
        .put(request, stream_of(bytes))
        .await
        .expect("put")
        .info
        .revision
}

async fn durable_put_and_get(work: &Path) {
    let dir = work.join("store-put");
    let store = SqliteStore::open(&dir, StoreConfig::default()).expect("open");
    let peer_dir = work.join("peer");
    std::fs::create_dir_all(&peer_dir).expect("peer dir");
    let mut ours = Vec::new();
    let mut peers = Vec::new();
    let mut last = None;
    for round in 0..ROUNDS {
        // Fresh bytes each round: a repeated image would deduplicate to nothing.
        let bytes = Bytes::from(random_bytes(round as u64 + 1, IMAGE));
        let u = user(&format!("put-{round}"));
        store.provision_user(&u).await.expect("provision");
        // Each timed write starts from a quiet disk, and the two take turns going first: on these
        // VMs a write right after another 64 MiB write is throttled to the disk's sustained rate,
        // which would otherwise penalise whichever side runs second.
        let peer_path = peer_dir.join(format!("user-{round}.snug"));
        let mut r = None;
        for side in [round % 2, 1 - round % 2] {
            quiesce();
            let t = Instant::now();
            if side == 0 {
                r = Some(put(&store, &u, Precondition::MustNotExist, &bytes).await);
                ours.push(t.elapsed());
            } else {
                // A fresh name each round: replacing the previous round's file would free 64 MiB,
                // and with the file system's online discard that stalls whichever writer is next.
                snug_files::write_atomically(&peer_path, &bytes).expect("peer write");
                peers.push(t.elapsed());
            }
        }
        last = Some((u, r.expect("our put ran")));
    }
    let (ours, peers) = (median(ours), median(peers));
    println!(
        "durable put 64 MiB: revstore {:.1} ms, write+fsync+rename+dir fsync {:.1} ms, ratio {:.2}x (target <= 1.5x)",
        ms(ours),
        ms(peers),
        ours.as_secs_f64() / peers.as_secs_f64()
    );

    let (u, _) = last.expect("a put");
    get_vs_read(
        &store,
        &u,
        &peer_dir.join(format!("user-{}.snug", ROUNDS - 1)),
    )
    .await;
}

/// Get of the 64 MiB image vs reading the same bytes from a plain file, like with like:
///
/// - streamed (the target): our stream's pieces are consumed one by one and dropped, as a server
///   forwarding them to a socket would; the file is read with `read_exact_at` in pieces of the
///   same size ([`PIECE`]) into one reused buffer, the cheapest way to stream a file.
/// - into memory (reported, no target): both end as one `Vec` of the whole image, ours by
///   concatenating the pieces into a `Vec` reserved to the image's size, the file's with
///   `std::fs::read` (which also reserves the file's size).
///
/// Each round times both sides back to back, the side going first alternating, after one
/// unrecorded warm-up round; the figures are medians of [`GET_ROUNDS`] rounds with the spread
/// (min..max) beside them, because other builds share these two cores.
async fn get_vs_read(store: &SqliteStore, u: &UserId, peer_file: &Path) {
    const GET_ROUNDS: usize = 15;
    // The size of the store's download pieces (`DOWNLOAD_PIECE` in src/sqlite/packs.rs).
    const PIECE: usize = 2 * MIB;
    let mut streamed = (Vec::new(), Vec::new());
    let mut whole = (Vec::new(), Vec::new());
    let mut buf = vec![0u8; PIECE];
    for round in 0..=GET_ROUNDS {
        let mut times = [Duration::ZERO; 4];
        for side in [round % 2, 1 - round % 2] {
            if side == 0 {
                let t = Instant::now();
                let mut body = store.get(u, &principal()).await.expect("get").body;
                let mut n = 0;
                while let Some(piece) = body.next().await {
                    n += piece.expect("piece").len();
                }
                assert_eq!(n, IMAGE);
                times[0] = t.elapsed();
                let t = Instant::now();
                let download = store.get(u, &principal()).await.expect("get");
                let mut out = Vec::with_capacity(download.info.size as usize);
                let mut body = download.body;
                while let Some(piece) = body.next().await {
                    out.extend_from_slice(&piece.expect("piece"));
                }
                assert_eq!(out.len(), IMAGE);
                times[2] = t.elapsed();
            } else {
                let t = Instant::now();
                let f = File::open(peer_file).expect("open peer");
                let mut at = 0;
                while at < IMAGE {
                    let k = PIECE.min(IMAGE - at);
                    f.read_exact_at(&mut buf[..k], at as u64).expect("read");
                    at += k;
                }
                times[1] = t.elapsed();
                let t = Instant::now();
                let out = std::fs::read(peer_file).expect("read peer");
                assert_eq!(out.len(), IMAGE);
                times[3] = t.elapsed();
            }
        }
        if round > 0 {
            streamed.0.push(times[0]);
            streamed.1.push(times[1]);
            whole.0.push(times[2]);
            whole.1.push(times[3]);
        }
    }
    let spread = |v: &[Duration]| {
        let (lo, hi) = (v.iter().min(), v.iter().max());
        format!(
            "{:.1}..{:.1}",
            ms(*lo.expect("rounds")),
            ms(*hi.expect("rounds"))
        )
    };
    for (what, (ours, peers), target) in [
        ("get 64 MiB", streamed, " (target <= 1.5x)"),
        ("  into one Vec", whole, ""),
    ] {
        let (s_ours, s_peers) = (spread(&ours), spread(&peers));
        let (ours, peers) = (median(ours), median(peers));
        println!(
            "{what}: revstore {:.1} ms [{s_ours}], reading the file {:.1} ms [{s_peers}], ratio {:.2}x{target}",
            ms(ours),
            ms(peers),
            ours.as_secs_f64() / peers.as_secs_f64()
        );
    }
}

async fn storage_of_revisions(work: &Path) {
    let dir = work.join("store-revisions");
    let store = SqliteStore::open(&dir, StoreConfig::default()).expect("open");
    let u = user("revisions");
    store.provision_user(&u).await.expect("provision");
    let mut db = random_bytes(42, IMAGE);
    let pages = IMAGE / PAGE;
    let changed = pages / 100;
    let mut rng = 0x1234_5678_9abc_def1u64;
    let mut precondition = Precondition::MustNotExist;
    let t = Instant::now();
    for _ in 0..10 {
        let r = put(&store, &u, precondition, &Bytes::from(db.clone())).await;
        precondition = Precondition::MustMatch(r);
        // 1% of the pages, chosen at random (the worst case for sharing: no two in one run),
        // rewritten with new content.
        for _ in 0..changed {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            let page = (rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % pages as u64) as usize;
            let fresh = random_bytes(rng, PAGE);
            db[page * PAGE..(page + 1) * PAGE].copy_from_slice(&fresh);
        }
    }
    let elapsed = t.elapsed();
    store.checkpoint().expect("checkpoint");
    let stats = store.stats().await.expect("stats");
    let on_disk = dir_size(&dir);
    println!(
        "storage, 10 revisions of a 64 MiB DB, {changed} of {pages} pages changed each: {:.1} MiB on disk (packs {:.1} MiB + metadata {:.1} MiB), vs one image 64.0 MiB, ratio {:.3}x (target <= 1.3x); 10 puts took {:.0} ms",
        on_disk as f64 / MIB as f64,
        dir_size(&dir.join("packs")) as f64 / MIB as f64,
        (on_disk - dir_size(&dir.join("packs"))) as f64 / MIB as f64,
        on_disk as f64 / IMAGE as f64,
        ms(elapsed)
    );
    println!(
        "  chunk index: {} chunks, {:.1} MiB of distinct chunk bytes",
        stats.chunks,
        stats.chunk_bytes as f64 / MIB as f64
    );
}

async fn throughput(work: &Path) {
    const CLIENTS: usize = 32;
    const PUTS_PER_CLIENT: usize = 20;
    const GETS_PER_CLIENT: usize = 100;
    const SIZE: usize = 100 * 1024;
    let dir = work.join("store-throughput");
    let store = Arc::new(SqliteStore::open(&dir, StoreConfig::default()).expect("open"));
    let images: Vec<Vec<Bytes>> = (0..CLIENTS)
        .map(|c| {
            (0..PUTS_PER_CLIENT)
                .map(|i| Bytes::from(random_bytes((c * 1000 + i) as u64 + 7, SIZE)))
                .collect()
        })
        .collect();
    for c in 0..CLIENTS {
        store
            .provision_user(&user(&format!("client-{c}")))
            .await
            .expect("provision");
    }
    let t = Instant::now();
    let mut tasks = Vec::new();
    for (c, mine) in images.into_iter().enumerate() {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let u = user(&format!("client-{c}"));
            let mut precondition = Precondition::MustNotExist;
            for bytes in &mine {
                let r = put(&store, &u, precondition, bytes).await;
                precondition = Precondition::MustMatch(r);
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
    let puts = t.elapsed();
    let t = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let u = user(&format!("client-{c}"));
            for _ in 0..GETS_PER_CLIENT {
                let bytes = store
                    .get(&u, &principal())
                    .await
                    .expect("get")
                    .body
                    .read_to_vec()
                    .await
                    .expect("body");
                assert_eq!(bytes.len(), SIZE);
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
    let gets = t.elapsed();
    println!(
        "throughput, 100 KiB images, {CLIENTS} concurrent clients: put {:.0} ops/s ({} durable puts in {:.0} ms), get {:.0} ops/s ({} gets in {:.0} ms)",
        (CLIENTS * PUTS_PER_CLIENT) as f64 / puts.as_secs_f64(),
        CLIENTS * PUTS_PER_CLIENT,
        ms(puts),
        (CLIENTS * GETS_PER_CLIENT) as f64 / gets.as_secs_f64(),
        CLIENTS * GETS_PER_CLIENT,
        ms(gets)
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and then a quick pass is
    // not worth 64 MiB images, so only a real benchmark run measures.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let work = tempfile::Builder::new()
        .prefix("revstore-bench")
        .tempdir_in(
            std::env::var_os("SNUG_BENCH_DIR").unwrap_or_else(|| std::env::temp_dir().into()),
        )
        .expect("work dir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // Arguments other than flags pick sections by name (`-- get` runs only the put and get one).
    let picked: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let run =
        |section: &str| picked.is_empty() || picked.iter().any(|p| section.contains(p.as_str()));
    print_load("before");
    rt.block_on(async {
        if run("put get") {
            durable_put_and_get(work.path()).await;
        }
        if run("storage") {
            storage_of_revisions(work.path()).await;
        }
        if run("throughput") {
            throughput(work.path()).await;
        }
    });
    print_load("after");
}

/// Prints the load average, so a reader can tell a noisy run from a regression.
fn print_load(when: &str) {
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average {when}: {}", load.trim());
    }
}
