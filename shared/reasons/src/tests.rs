//! The registry checked against itself and against the documents that repeat it: the protos'
//! reason tables, the OpenAPI document's error codes and ARCHITECTURE.md's tables.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::{ALL, CliExit, DOMAINS, Domain, Reason, container, find, materialize, schema, sync};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn is_reason_word(word: &str) -> bool {
    !word.is_empty() && word.chars().all(|c| c.is_ascii_uppercase() || c == '_')
}

/// The `(reason, gRPC code)` rows of a proto's table (`// | REASON | CODE | meaning |`).
fn proto_rows(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("// |"))
        .filter_map(|rest| {
            let mut cells = rest.split('|').map(str::trim);
            let reason = cells.next()?;
            let code = cells.next()?;
            is_reason_word(reason).then(|| (reason.to_owned(), code.to_owned()))
        })
        .collect()
}

fn domain_rows(domain: &Domain) -> Vec<(String, String)> {
    domain
        .reasons
        .iter()
        .map(|r| {
            let code = r.grpc.map_or("-", |c| c.name());
            (r.name.to_owned(), code.to_owned())
        })
        .collect()
}

#[track_caller]
fn check_proto(path: &str, domain: &Domain) {
    let rows = proto_rows(&read(path));
    assert!(rows.len() >= 10, "{path}: the table was parsed: {rows:?}");
    assert_eq!(
        rows,
        domain_rows(domain),
        "{path}'s reason table and the registry's {} differ",
        domain.name
    );
}

#[test]
fn each_protos_table_is_its_domain_in_order_with_the_same_codes() {
    check_proto(
        "proto/snug/container/v1/container.proto",
        &container::DOMAIN,
    );
    check_proto("proto/snug/schema/v1/schema.proto", &schema::DOMAIN);
    check_proto(
        "proto/snug/materialize/v1/materialize.proto",
        &materialize::DOMAIN,
    );
    check_proto("proto/snug/sync/v1/sync.proto", &sync::DOMAIN);
}

#[test]
fn names_are_unique_across_every_domain_and_well_formed() {
    let mut seen = BTreeSet::new();
    for reason in ALL {
        assert!(seen.insert(reason.name), "{} is defined twice", reason.name);
        assert!(
            reason.name.len() <= 63 && is_reason_word(reason.name),
            "{} is not UPPER_SNAKE of at most 63 characters",
            reason.name
        );
        assert!(!reason.summary.is_empty(), "{} has no summary", reason.name);
    }
}

#[test]
fn every_domain_lists_defined_reasons_once_and_every_reason_has_a_domain() {
    let mut listed = BTreeSet::new();
    for domain in DOMAINS {
        let mut seen = BTreeSet::new();
        for reason in domain.reasons {
            assert!(
                seen.insert(reason.name),
                "{} twice in {}",
                reason.name,
                domain.name
            );
            assert_eq!(
                find(reason.name),
                Some(*reason),
                "{}'s {} is not the one definition in ALL",
                domain.name,
                reason.name
            );
            listed.insert(reason.name);
        }
    }
    let defined: BTreeSet<_> = ALL.iter().map(|r| r.name).collect();
    assert_eq!(listed, defined, "reasons no domain lists");
}

#[test]
fn service_reasons_have_a_grpc_code_and_the_others_none() {
    for domain in DOMAINS {
        let service = !matches!(domain.name, "snug.gateway" | "snug.cli");
        for reason in domain.reasons {
            assert_eq!(
                reason.grpc.is_some(),
                service,
                "{} in {}",
                reason.name,
                domain.name
            );
        }
    }
}

#[test]
fn http_answers_are_errors_and_every_503_is_retryable() {
    for reason in ALL {
        let Some(http) = reason.http else { continue };
        assert!((400..600).contains(&http.status), "{}", reason.name);
        assert!(is_reason_word(http.code), "{}", reason.name);
        // 503 is the "try again shortly" answer (with Retry-After).
        if http.status == 503 {
            assert!(http.retryable, "{}", reason.name);
        }
    }
}

#[test]
fn cli_exits_are_possible_ones() {
    for reason in ALL {
        if let CliExit::ByCause(exits) = reason.exit {
            assert!(
                exits.len() >= 2,
                "{}: a single cause is Always",
                reason.name
            );
        }
    }
}

#[test]
fn every_error_code_the_openapi_document_names_is_a_gateway_code() {
    let text = read("services/gateway/openapi.json");
    let codes: BTreeSet<&str> = ALL.iter().filter_map(|r| r.http).map(|h| h.code).collect();
    let mut named = BTreeSet::new();
    for word in text.split('`').skip(1).step_by(2) {
        if word.len() > 2 && is_reason_word(word) {
            named.insert(word);
        }
    }
    assert!(named.len() >= 20, "the codes were found: {named:?}");
    let unknown: Vec<_> = named.difference(&codes).collect();
    assert!(
        unknown.is_empty(),
        "openapi.json names codes the gateway never sends: {unknown:?}"
    );
}

#[test]
fn architecture_md_gives_each_reason_its_grpc_code() {
    let text = read("ARCHITECTURE.md");
    let mut n_rows = 0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let mut cells = rest.split('|').map(str::trim);
        let (Some(name), Some(code)) = (cells.next(), cells.next()) else {
            continue;
        };
        let name = name.trim_end_matches('`');
        let Some(reason) = find(name) else { continue };
        if reason.grpc.is_none() {
            continue;
        }
        n_rows += 1;
        assert_eq!(
            Some(code),
            reason.grpc.map(|c| c.name()),
            "ARCHITECTURE.md's row for {name}"
        );
    }
    assert!(n_rows >= 60, "the tables were parsed: {n_rows} rows");
}

#[test]
fn names_are_the_names_of_their_reasons() {
    const N: usize = sync::DOMAIN.reasons.len();
    const NAMES: [&str; N] = crate::names::<N>(sync::DOMAIN.reasons);
    let expected: Vec<&str> = sync::DOMAIN
        .reasons
        .iter()
        .map(|r: &&Reason| r.name)
        .collect();
    assert_eq!(NAMES.to_vec(), expected);
}
