//! Interop vectors made by the reference implementation: every check in every `containers/*.json` must get its expected verdict here, and the deterministic ones must be reproduced byte for byte.
//!
//! The vectors live in the workspace's shared folder (`/work/shared/vectors/reference/containers`
//! beside the checkout), or wherever `SNUG_VECTORS_DIR` points. A missing folder fails the test:
//! a conformance suite that silently skips proves nothing.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::PathBuf;

use serde_json::Value;
use sha2::{Digest, Sha256};
use snug_container::{
    Corruption, FileKey, Limits, OpenError, Opening, Passphrase, RecoveryKey, SealMaterial,
    Secrets, SlotKind, change_passphrase, inspect, open, open_owned, seal_with,
};

/// The vectors use 1,000 iterations so that tests run fast; everything else is the default.
const VECTOR_LIMITS: Limits = Limits {
    min_iterations: 1_000,
    max_iterations: 10_000_000,
    max_plaintext: 67_108_864,
};

/// The reference's `containers/` folder; a missing folder fails the test.
fn vectors_dir() -> PathBuf {
    let dir = snug_test_support::vector("containers");
    assert!(
        dir.is_dir(),
        "the reference vectors are missing: {}",
        dir.display()
    );
    dir
}

struct Vector {
    name: String,
    json: Value,
    container: Vec<u8>,
}

fn vectors() -> Vec<Vector> {
    let dir = vectors_dir();
    let mut vectors: Vec<Vector> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .map(|path| {
            let json: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            let container = std::fs::read(path.with_extension("snug"))
                .unwrap_or_else(|err| panic!("{}: no .snug beside it: {err}", path.display()));
            Vector {
                name: path.file_stem().unwrap().to_string_lossy().into_owned(),
                json,
                container,
            }
        })
        .collect();
    vectors.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(
        vectors.len() >= 10,
        "expected the ten reference container vectors, found {}",
        vectors.len()
    );
    vectors
}

fn vector(name: &str) -> Vector {
    vectors()
        .into_iter()
        .find(|v| v.name.starts_with(name))
        .unwrap_or_else(|| panic!("no vector {name}"))
}

fn secrets(json: &Value) -> Secrets {
    Secrets {
        passphrase: json
            .get("passphrase")
            .and_then(Value::as_str)
            .map(Passphrase::new),
        recovery_key: json
            .get("recoveryKey")
            .and_then(Value::as_str)
            .map(RecoveryKey::parse),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Renders an outcome the way the vectors state theirs.
fn verdict(result: Result<Vec<u8>, OpenError>) -> String {
    match result {
        Ok(plaintext) => format!("ok {}", sha256_hex(&plaintext)),
        Err(OpenError::Locked) => "locked".to_owned(),
        Err(OpenError::Corrupt(corruption)) => format!("corrupt {corruption}"),
        Err(err @ OpenError::TooLarge { .. }) => format!("too large {err}"),
    }
}

fn expected_verdict(check: &Value) -> String {
    match check["expected_status"].as_str().unwrap() {
        "ok" => format!("ok {}", check["plaintext_sha256"].as_str().unwrap()),
        "locked" => "locked".to_owned(),
        "corrupt" => format!("corrupt {}", check["reason"].as_str().unwrap()),
        other => panic!("unknown expected_status {other}"),
    }
}

#[test]
fn every_check_gets_its_expected_verdict() {
    let mut n_checks = 0;
    for vector in vectors() {
        let iterations =
            inspect(&vector.container, &VECTOR_LIMITS).map(|info| info.header.iterations);
        for check in vector.json["checks"].as_array().unwrap() {
            let label = format!("{} / {}", vector.name, check["label"]);
            let secrets = secrets(&check["secrets"]);
            let expected = expected_verdict(check);
            let got =
                verdict(open(&vector.container, &secrets, &VECTOR_LIMITS).map(|u| u.plaintext));
            assert_eq!(got, expected, "{label}");
            // The in-place path must agree; the 600k vector is checked once per secret only.
            if iterations.as_ref().is_ok_and(|&it| it <= 1_000) || iterations.is_err() {
                let owned = verdict(
                    open_owned(vector.container.clone(), &secrets, &VECTOR_LIMITS)
                        .map(|u| u.plaintext),
                );
                assert_eq!(owned, expected, "{label} (open_owned)");
                // So must an upload opened as it arrives, cut into uneven pieces.
                let mut opening = Opening::new(secrets.clone(), &VECTOR_LIMITS, None);
                let mut unlockers = Vec::new();
                for piece in vector.container.chunks(97) {
                    opening.push(piece);
                    unlockers.extend(opening.take_unlocker());
                }
                for unlocker in unlockers {
                    opening.set_decryptor(unlocker.unlock());
                }
                let incremental = verdict(opening.finish().map(|u| u.plaintext));
                assert_eq!(incremental, expected, "{label} (Opening)");
            }
            n_checks += 1;
        }
    }
    assert!(n_checks >= 25, "only {n_checks} checks ran");
}

#[test]
fn low_iteration_vectors_are_refused_under_default_limits() {
    for vector in vectors() {
        let Ok(info) = inspect(&vector.container, &VECTOR_LIMITS) else {
            // Damaged before the iteration count is reached: same verdict under any limits.
            for check in vector.json["checks"].as_array().unwrap() {
                let got = verdict(
                    open(
                        &vector.container,
                        &secrets(&check["secrets"]),
                        &Limits::default(),
                    )
                    .map(|u| u.plaintext),
                );
                assert_eq!(got, expected_verdict(check), "{}", vector.name);
            }
            continue;
        };
        let refused = Corruption::IterationsOutOfRange {
            iterations: info.header.iterations,
            min: 10_000,
            max: 10_000_000,
        };
        if info.header.iterations >= 10_000 {
            assert_eq!(
                inspect(&vector.container, &Limits::default()),
                Ok(info),
                "{}",
                vector.name
            );
            continue;
        }
        assert_eq!(
            inspect(&vector.container, &Limits::default()),
            Err(refused.clone()),
            "{}",
            vector.name
        );
        for check in vector.json["checks"].as_array().unwrap() {
            let result = open(
                &vector.container,
                &secrets(&check["secrets"]),
                &Limits::default(),
            );
            assert_eq!(
                result.unwrap_err(),
                OpenError::Corrupt(refused.clone()),
                "{}",
                vector.name
            );
        }
    }
}

#[test]
fn files_match_the_manifest_and_parse_to_its_layout() {
    let dir = vectors_dir();
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("../manifest.json")).unwrap()).unwrap();
    let mut n_layouts = 0;
    for entry in manifest["containers"].as_array().unwrap() {
        let file = &entry["file"];
        let bytes = std::fs::read(dir.join("..").join(file["file"].as_str().unwrap())).unwrap();
        assert_eq!(
            sha256_hex(&bytes),
            file["sha256"].as_str().unwrap(),
            "{}",
            entry["name"]
        );
        let Ok(info) = inspect(&bytes, &VECTOR_LIMITS) else {
            continue;
        };
        let layout = &entry["layout"];
        let rendered = |info: &snug_container::ContainerInfo| {
            let slots: Vec<String> = info
                .header
                .slots
                .iter()
                .enumerate()
                .map(|(idx, slot)| {
                    format!(
                        "{}:{}@{}",
                        slot.kind.to_byte(),
                        hex::encode(slot.iv),
                        info.wrapped_key_offset(idx)
                    )
                })
                .collect();
            format!(
                "v{} kdf{} it{} salt {} checksum {:08x} header {} slots {:?} iv {}@{} ct@{} len {}",
                info.header.version,
                info.header.kdf_id,
                info.header.iterations,
                hex::encode(info.header.salt),
                info.header.checksum,
                info.header_len,
                slots,
                hex::encode(info.payload_iv),
                info.payload_iv_offset(),
                info.ciphertext_offset(),
                info.plaintext_len + 16,
            )
        };
        let slots: Vec<String> = layout["slots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|slot| {
                format!(
                    "{}:{}@{}",
                    slot["kind"],
                    slot["iv_hex"].as_str().unwrap(),
                    slot["wrapped_at"]
                )
            })
            .collect();
        let expected = format!(
            "v{} kdf{} it{} salt {} checksum {} header {} slots {:?} iv {}@{} ct@{} len {}",
            layout["version"],
            layout["kdf_id"],
            layout["iterations"],
            layout["salt_hex"].as_str().unwrap(),
            layout["checksum_hex"].as_str().unwrap(),
            layout["header_len"],
            slots,
            layout["payload_iv_hex"].as_str().unwrap(),
            layout["payload_iv_at"],
            layout["ciphertext_at"],
            layout["ciphertext_len_incl_tag"],
        );
        assert_eq!(rendered(&info), expected, "{}", entry["name"]);
        n_layouts += 1;
    }
    assert!(n_layouts >= 6, "only {n_layouts} layouts compared");
}

fn hex_array<const N: usize>(json: &Value, field: &str) -> [u8; N] {
    hex::decode(json[field].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap()
}

#[test]
fn c03_encoder_is_byte_exact() {
    let c03 = vector("c03");
    let json = &c03.json;
    let material = SealMaterial {
        salt: hex_array(json, "salt_hex"),
        file_key: FileKey::from_bytes(hex_array(json, "file_key_hex")),
        passphrase_slot_iv: hex_array(json, "passphrase_slot_iv_hex"),
        recovery_slot_iv: hex_array(json, "recovery_slot_iv_hex"),
        payload_iv: hex_array(json, "payload_iv_hex"),
    };
    let plaintext = hex::decode(json["plaintext_hex"].as_str().unwrap()).unwrap();
    let sealed = seal_with(
        &plaintext,
        &Passphrase::new(json["passphrase"].as_str().unwrap()),
        &RecoveryKey::parse(json["recoveryKey"].as_str().unwrap()),
        json["iterations"].as_u64().unwrap() as u32,
        &VECTOR_LIMITS,
        material,
    )
    .unwrap();
    assert_eq!(
        hex::encode(&sealed),
        json["container_hex"].as_str().unwrap()
    );
    assert_eq!(sealed, c03.container);
}

#[test]
fn c04_is_c03_after_a_passphrase_change() {
    let c03 = vector("c03");
    let c04 = vector("c04");
    let changed = change_passphrase(
        &c03.container,
        &Passphrase::new(c03.json["passphrase"].as_str().unwrap()),
        &Passphrase::new(c04.json["new_passphrase"].as_str().unwrap()),
        &VECTOR_LIMITS,
    )
    .unwrap();
    assert_eq!(changed, c04.container);
    let differing: Vec<usize> = (0..changed.len())
        .filter(|&i| changed[i] != c03.container[i])
        .collect();
    assert!(
        differing.iter().all(|i| (160..208).contains(i)),
        "{differing:?}"
    );
    assert!(
        differing.len() > 40,
        "the 48 wrapped bytes should almost all change"
    );
}

#[test]
fn one_slot_vector_reports_its_only_slot() {
    let n14 = vector("n14");
    let unlocked = open(
        &n14.container,
        &Secrets::passphrase(Passphrase::new("correct horse battery staple")),
        &VECTOR_LIMITS,
    )
    .unwrap();
    assert_eq!(
        (unlocked.opened_by, unlocked.slot_index),
        (SlotKind::Passphrase, 0)
    );
    let c03 = vector("c03");
    let by_recovery = open(
        &c03.container,
        &Secrets::recovery_key(RecoveryKey::parse("ABCDE-FGHJK-MNPQR-STVWX-YZ234-56")),
        &VECTOR_LIMITS,
    )
    .unwrap();
    assert_eq!(
        (by_recovery.opened_by, by_recovery.slot_index),
        (SlotKind::RecoveryKey, 1)
    );
}

#[test]
fn corruption_codes_are_stable() {
    let cases = [
        (
            Corruption::NotAContainer,
            "not_a_container",
            "not a Snug encrypted container",
        ),
        (
            Corruption::TruncatedHeader,
            "truncated_header",
            "truncated container header",
        ),
        (
            Corruption::UnsupportedVersion(2),
            "unsupported_version",
            "unsupported container version 2",
        ),
        (
            Corruption::UnsupportedKdf(2),
            "unsupported_kdf",
            "unsupported key-derivation function",
        ),
        (
            Corruption::ImplausibleSlotCount(0),
            "implausible_slot_count",
            "implausible slot count 0",
        ),
        (
            Corruption::TruncatedBody,
            "truncated_body",
            "truncated container body",
        ),
        (
            Corruption::HeaderChecksumMismatch {
                stored: 1,
                computed: 2,
            },
            "header_checksum_mismatch",
            "the container header is damaged (integrity check failed)",
        ),
        (
            Corruption::ZeroIterations,
            "zero_iterations",
            "the container header asks for zero key-derivation iterations",
        ),
        (
            Corruption::IterationsOutOfRange {
                iterations: 1,
                min: 2,
                max: 3,
            },
            "iterations_out_of_range",
            "the key-derivation iteration count 1 is outside the accepted range 2..=3 (a \
             setting, not damage)",
        ),
        (
            Corruption::PayloadAuthenticationFailed,
            "payload_authentication_failed",
            "the protected contents failed their integrity check",
        ),
    ];
    for (corruption, code, message) in cases {
        assert_eq!(
            (corruption.code(), corruption.to_string().as_str()),
            (code, message)
        );
        assert_eq!(
            corruption.is_unsupported(),
            matches!(
                corruption,
                Corruption::UnsupportedVersion(_) | Corruption::UnsupportedKdf(_)
            )
        );
    }
}
