//! A link of 100 Mbit/s each way with 20 ms of round trip between the client and the hub, for
//! issue 38's wall-time target (`SNUG_BENCH_LINK=1`): a relay in a process of its own, on
//! loopback.
//!
//! Issue 38 asks for `tc netem` in a network namespace. This machine's kernel has no netem
//! (`CONFIG_NET_SCH_NETEM is not set` in `/proc/config.gz`, and no `fq` to delay by departure
//! time either), so the link is made in user space: each direction of each connection is read
//! as it arrives, given its place on a 100 Mbit/s wire (a chunk leaves when the wire is free and
//! takes its length at that rate) and delivered 10 ms after it left. The buffer is unbounded, so
//! the sender is never held back by the relay; what it does not model is TCP's own slow start
//! over the delay, which on loopback (64 KiB segments, a first window of 640 KiB) costs at most a
//! round trip or two. The relay is its own process so its copying counts against neither the
//! client's CPU nor the hub's.

use std::{
    io::{Read as _, Write as _},
    net::{Shutdown, TcpListener, TcpStream},
    sync::mpsc,
    time::{Duration, Instant},
};

/// Set in the relay's environment (to the hub's address): relay instead of benchmarking.
pub(crate) const CHILD: &str = "SNUG_BENCH_DELTA_LINK";

/// Bits per second each way.
const RATE: f64 = 100e6;
/// One way; the round trip is twice this.
const DELAY: Duration = Duration::from_millis(10);
/// The largest chunk read at once: 1.3 ms of the wire, so delivery is smooth at that grain.
const CHUNK: usize = 16 << 10;

/// Relays to the hub when this process is the relay child, returning once its stdin closes;
/// `false` when this process is the benchmark.
pub(crate) fn serve_if_child() -> bool {
    let Some(hub) = std::env::var_os(CHILD) else {
        return false;
    };
    let hub = hub.into_string().expect("hub address");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    println!("http://{}", listener.local_addr().expect("addr"));
    std::io::stdout().flush().expect("flush");
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(&hub) else {
                continue;
            };
            for (from, to) in [
                (client.try_clone(), server.try_clone()),
                (server.try_clone(), client.try_clone()),
            ] {
                let (Ok(from), Ok(to)) = (from, to) else {
                    continue;
                };
                std::thread::spawn(move || pump(from, to));
            }
        }
    });
    // The parent closes stdin when it is done (or dies).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    true
}

/// Carries one direction of a connection over the emulated wire, until its sender closes.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    let _ = to.set_nodelay(true);
    let (wire, arrivals) = mpsc::channel::<(Instant, Vec<u8>)>();
    let deliver = std::thread::spawn(move || {
        for (at, bytes) in arrivals {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            if to.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
    let mut buffer = vec![0u8; CHUNK];
    let mut free = Instant::now();
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        free = free.max(Instant::now()) + Duration::from_secs_f64(n as f64 * 8.0 / RATE);
        if wire.send((free + DELAY, buffer[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(wire);
    let _ = deliver.join();
}
