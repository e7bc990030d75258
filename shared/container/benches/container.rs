//! Unlock, seal and peak-memory figures for a 64 MiB user file at 600,000 iterations, each set against its peer or its serial parts measured in the same run.
//!
//! Run with `cargo bench -p snug-container --bench container`. `SNUG_BENCH_RUNS` sets the number
//! of rounds (default 7); each round measures every figure once and the medians are reported.
//! The peer figures need `openssl` and `python3` with the `cryptography` package; a missing peer
//! is reported, not faked.
//!
//! The peak-memory figure comes from a child: this same binary, started with
//! `SNUG_BENCH_CHILD=unlock` and `SNUG_BENCH_FILE=<container>`, reads the file, opens it in
//! place and prints its `VmHWM`, so nothing the parent allocated is counted.
#![allow(clippy::unwrap_used, reason = "a benchmark aborts on any failure")]
#![allow(clippy::print_stdout, reason = "a benchmark prints its table")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use aes_gcm::{AeadInOut, Aes256Gcm, KeyInit, Nonce};
use snug_container::{
    DEFAULT_ITERATIONS, FileKey, Limits, Passphrase, RecoveryKey, SealMaterial, Secrets,
    derive_kek, inspect, open_owned, seal_owned, seal_with,
};

const PAYLOAD_LEN: usize = 64 << 20;
const PASSPHRASE: &str = "correct horse battery staple";
const UNLOCK_TARGET: f64 = 0.75;
const SEAL_TARGET: f64 = 0.65;
const MEMORY_TARGET: f64 = 3.0;

fn main() {
    if std::env::var("SNUG_BENCH_CHILD").as_deref() == Ok("unlock") {
        child_unlock();
        return;
    }
    let runs: usize = std::env::var("SNUG_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(7);
    let limits = Limits::default();

    let plaintext = pseudo_random(PAYLOAD_LEN);
    let mut file_key_bytes = [0u8; 32];
    getrandom::fill(&mut file_key_bytes).unwrap();
    let material = || {
        let mut material = SealMaterial::generate();
        material.file_key = FileKey::from_bytes(file_key_bytes);
        material
    };
    let passphrase = Passphrase::new(PASSPHRASE);
    let recovery_key = RecoveryKey::generate();
    let container = seal_with(
        &plaintext,
        &passphrase,
        &recovery_key,
        DEFAULT_ITERATIONS,
        &limits,
        material(),
    )
    .unwrap();
    let info = inspect(&container, &limits).unwrap();
    let path = std::env::temp_dir().join(format!("snug-bench-{}.snug", std::process::id()));
    std::fs::write(&path, &container).unwrap();
    let secrets = Secrets::passphrase(passphrase.clone());
    let cipher = Aes256Gcm::new((&file_key_bytes).into());
    let mut buffer = plaintext.clone();

    println!(
        "snug-container bench: {} MiB payload, {} iterations, median of {runs} rounds",
        PAYLOAD_LEN >> 20,
        DEFAULT_ITERATIONS
    );
    println!(
        "available parallelism: {}; load average before: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );

    // Every round measures every figure once, so that load from other processes on this shared
    // machine falls on all figures alike instead of on whichever ran during a burst.
    let mut figures: [Vec<Duration>; 10] = Default::default();
    let mut peer_errors = Vec::new();
    for round in 0..=runs {
        let mut samples = [Duration::ZERO; 10];
        // (a) Unlock from memory (the container already in a Vec) and from a file.
        samples[UNLOCK_MEMORY] = timed_with(
            || container.clone(),
            |copy| open_owned(copy, &secrets, &limits).unwrap(),
        );
        samples[UNLOCK_FILE] = timed_with(
            || (),
            |()| open_owned(std::fs::read(&path).unwrap(), &secrets, &limits).unwrap(),
        );
        // The parts: one PBKDF2 and one in-place encryption of the payload.
        samples[KDF] = timed_with(
            || (),
            |()| derive_kek(PASSPHRASE.as_bytes(), &info.header.salt, DEFAULT_ITERATIONS),
        );
        samples[ENCRYPT] = timed_with(
            || (),
            |()| {
                cipher
                    .encrypt_inout_detached(
                        &Nonce::from([7u8; 12]),
                        b"aad",
                        buffer.as_mut_slice().into(),
                    )
                    .unwrap()
            },
        );
        // The borrowed seal's output is a fresh container: its encryption writes into pages
        // that have never been touched, and faulting them in is part of what that seal costs.
        samples[ENCRYPT_FRESH] = timed_with(
            || (),
            |()| {
                let mut out = vec![0u8; plaintext.len()];
                let buf = aes_gcm::aead::inout::InOutBuf::new(&plaintext, &mut out).unwrap();
                let tag = cipher
                    .encrypt_inout_detached(&Nonce::from([7u8; 12]), b"aad", buf)
                    .unwrap();
                (out, tag)
            },
        );
        // (b) The peer: OpenSSL's PBKDF2 and Python cryptography's AES-GCM on the same bytes.
        match (
            openssl_kdf(&info.header.salt),
            python_decrypt(&path, &info, &file_key_bytes),
        ) {
            (Ok(openssl), Ok(python)) => {
                samples[OPENSSL] = openssl;
                samples[PYTHON_DECRYPT] = python.decrypt;
                samples[PYTHON_DECRYPT_INTO] = python.decrypt_into;
            }
            (openssl, python) => {
                peer_errors.extend(openssl.err());
                peer_errors.extend(python.err());
            }
        }
        // (c) Seal with both slots, from a borrowed plaintext and in place.
        samples[SEAL] = timed_with(material, |material| {
            seal_with(
                &plaintext,
                &passphrase,
                &recovery_key,
                DEFAULT_ITERATIONS,
                &limits,
                material,
            )
            .unwrap()
        });
        samples[SEAL_OWNED] = timed_with(
            || plaintext.clone(),
            |copy| {
                seal_owned(
                    copy,
                    &passphrase,
                    &recovery_key,
                    DEFAULT_ITERATIONS,
                    &limits,
                )
                .unwrap()
            },
        );
        // Round 0 warms caches, the allocator and the peers' imports; it is not counted.
        if round > 0 {
            for (figure, sample) in figures.iter_mut().zip(samples) {
                figure.push(sample);
            }
        }
    }
    let [
        unlock_memory,
        unlock_file,
        kdf,
        encrypt,
        openssl,
        python_decrypt,
        python_decrypt_into,
        seal,
        seal_in_place,
        encrypt_fresh,
    ] = figures.map(median);
    let serial_seal = kdf * 2 + encrypt;
    let serial_seal_fresh = kdf * 2 + encrypt_fresh;

    // (d) Peak memory of one unlock in a fresh process.
    let peak = child_peak(&path);
    std::fs::remove_file(&path).ok();

    println!("load average after: {}", load_average());
    println!();
    println!("| figure | measured | reference | ratio | target | verdict |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| PBKDF2-HMAC-SHA256 600k, in-process | {} | | | | |",
        ms(kdf)
    );
    println!(
        "| AES-256-GCM encrypt 64 MiB in place, in-process | {} | | | | |",
        ms(encrypt)
    );
    println!(
        "| AES-256-GCM encrypt 64 MiB into a fresh buffer, in-process | {} | | | | |",
        ms(encrypt_fresh)
    );
    if peer_errors.is_empty() {
        println!(
            "| peer: `openssl kdf` PBKDF2 600k (whole command) | {} | | | | |",
            ms(openssl)
        );
        println!(
            "| peer: Python cryptography `AESGCM.decrypt` 64 MiB | {} | | | | |",
            ms(python_decrypt)
        );
        println!(
            "| peer: Python cryptography `AESGCM.decrypt_into` 64 MiB | {} | | | | |",
            ms(python_decrypt_into)
        );
        let peer = openssl + python_decrypt;
        row(
            "(a) unlock from memory (open_owned) vs peer sum",
            unlock_memory,
            peer,
            UNLOCK_TARGET,
        );
        row(
            "(a) unlock from file (read + open_owned) vs peer sum",
            unlock_file,
            peer,
            UNLOCK_TARGET,
        );
        row(
            "(a) unlock from memory vs peer sum with decrypt_into",
            unlock_memory,
            openssl + python_decrypt_into,
            UNLOCK_TARGET,
        );
    } else {
        println!(
            "| (a) unlock from memory (open_owned) | {} | peer unavailable | | | |",
            ms(unlock_memory)
        );
        println!(
            "| (a) unlock from file (read + open_owned) | {} | peer unavailable | | | |",
            ms(unlock_file)
        );
        println!("peer unavailable: {}", peer_errors[0]);
    }
    row(
        "(c) seal_owned (in place), two slots, vs 2 x PBKDF2 + encrypt in place",
        seal_in_place,
        serial_seal,
        SEAL_TARGET,
    );
    row(
        "(c) seal (borrowed, fresh container), two slots, vs 2 x PBKDF2 + encrypt into a fresh buffer",
        seal,
        serial_seal_fresh,
        SEAL_TARGET,
    );
    match peak {
        Ok(peak_bytes) => {
            let ratio = peak_bytes as f64 / PAYLOAD_LEN as f64;
            println!(
                "| (d) peak memory (VmHWM) of one unlock from file | {:.1} MiB | payload {} MiB | {ratio:.2} | <= {MEMORY_TARGET:.2} | {} |",
                peak_bytes as f64 / f64::from(1 << 20),
                PAYLOAD_LEN >> 20,
                verdict(ratio <= MEMORY_TARGET)
            );
        }
        Err(err) => println!("| (d) peak memory | unavailable: {err} | | | | |"),
    }
}

const UNLOCK_MEMORY: usize = 0;
const UNLOCK_FILE: usize = 1;
const KDF: usize = 2;
const ENCRYPT: usize = 3;
const OPENSSL: usize = 4;
const PYTHON_DECRYPT: usize = 5;
const PYTHON_DECRYPT_INTO: usize = 6;
const SEAL: usize = 7;
const SEAL_OWNED: usize = 8;
const ENCRYPT_FRESH: usize = 9;

/// Times `measure` on the output of the untimed `prepare`; what `measure` returns is dropped
/// after the clock stops.
fn timed_with<T, R>(prepare: impl FnOnce() -> T, measure: impl FnOnce(T) -> R) -> Duration {
    let input = prepare();
    let started = Instant::now();
    let output = std::hint::black_box(measure(input));
    let elapsed = started.elapsed();
    drop(output);
    elapsed
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn row(label: &str, measured: Duration, reference: Duration, target: f64) {
    let ratio = measured.as_secs_f64() / reference.as_secs_f64();
    println!(
        "| {label} | {} | {} | {ratio:.2} | <= {target:.2} | {} |",
        ms(measured),
        ms(reference),
        verdict(ratio <= target)
    );
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// Incompressible filler, cheaper to make than CSPRNG output (xorshift64*).
fn pseudo_random(len: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut bytes = Vec::with_capacity(len);
    while bytes.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        bytes.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// Times the whole `openssl kdf` command, as a user or a script would run it, and checks that it
/// derives the same key.
fn openssl_kdf(salt: &[u8; 16]) -> Result<Duration, String> {
    let expected: Vec<String> = derive_kek(PASSPHRASE.as_bytes(), salt, DEFAULT_ITERATIONS)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    let started = Instant::now();
    let output = Command::new("openssl")
        .args(["kdf", "-keylen", "32", "-kdfopt", "digest:SHA256"])
        .args(["-kdfopt", &format!("pass:{PASSPHRASE}")])
        .args(["-kdfopt", &format!("hexsalt:{}", hex(salt))])
        .args(["-kdfopt", &format!("iter:{DEFAULT_ITERATIONS}"), "PBKDF2"])
        .output()
        .map_err(|err| format!("openssl: {err}"))?;
    let elapsed = started.elapsed();
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let derived = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if derived != expected.join(":") {
        return Err(format!(
            "openssl derived {derived}, expected {}",
            expected.join(":")
        ));
    }
    Ok(elapsed)
}

struct PythonFigures {
    decrypt: Duration,
    decrypt_into: Duration,
}

/// Times only the decryption inside Python: the file is read and the key set up first, and each
/// figure is the median of three decryptions in the one interpreter.
fn python_decrypt(
    path: &Path,
    info: &snug_container::ContainerInfo,
    key: &[u8; 32],
) -> Result<PythonFigures, String> {
    const SCRIPT: &str = r#"
import sys, time, statistics
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
path, key, iv, header_len, start, runs, expected_len = sys.argv[1:8]
data = open(path, "rb").read()
aad = data[:int(header_len)]
ct = memoryview(data)[int(start):]
aead = AESGCM(bytes.fromhex(key))
iv = bytes.fromhex(iv)
def timed(fn):
    samples = []
    for _ in range(int(runs)):
        t = time.perf_counter(); fn(); samples.append(time.perf_counter() - t)
    return statistics.median(samples)
assert len(aead.decrypt(iv, ct, aad)) == int(expected_len)
print("decrypt", timed(lambda: aead.decrypt(iv, ct, aad)))
out = bytearray(len(ct) - 16)
print("decrypt_into", timed(lambda: aead.decrypt_into(iv, ct, aad, out)))
"#;
    let output = Command::new("python3")
        .arg("-c")
        .arg(SCRIPT)
        .arg(path)
        .arg(hex(key))
        .arg(hex(&info.payload_iv))
        .arg(info.header_len.to_string())
        .arg(info.ciphertext_offset().to_string())
        .arg("3")
        .arg(info.plaintext_len.to_string())
        .output()
        .map_err(|err| format!("python3: {err}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let figure = |name: &str| {
        stdout.lines().find_map(|line| {
            let (label, seconds) = line.split_once(' ')?;
            (label == name)
                .then(|| seconds.trim().parse::<f64>().ok())
                .flatten()
                .map(Duration::from_secs_f64)
        })
    };
    Ok(PythonFigures {
        decrypt: figure("decrypt").ok_or("no decrypt figure")?,
        decrypt_into: figure("decrypt_into").ok_or("no decrypt_into figure")?,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn child_peak(path: &PathBuf) -> Result<u64, String> {
    let exe = std::env::current_exe().map_err(|err| err.to_string())?;
    let output = Command::new(exe)
        .env("SNUG_BENCH_CHILD", "unlock")
        .env("SNUG_BENCH_FILE", path)
        .output()
        .map_err(|err| err.to_string())?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("peak_bytes ")?.trim().parse().ok())
        .ok_or_else(|| "the child printed no peak".to_owned())
}

/// The child: one unlock from a file, then the high-water mark of resident memory.
fn child_unlock() {
    let path = std::env::var_os("SNUG_BENCH_FILE").unwrap();
    let container = std::fs::read(path).unwrap();
    let unlocked = open_owned(
        container,
        &Secrets::passphrase(Passphrase::new(PASSPHRASE)),
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(unlocked.plaintext.len(), PAYLOAD_LEN);
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    println!("peak_bytes {}", kib * 1024);
}
