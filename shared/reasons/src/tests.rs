//! The registry checked against itself and against the documents that repeat it: the protos'
//! reason tables, the OpenAPI document's error codes, and the generated REASONS.md.

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
    check_proto("proto/snug/admin/v1/admin.proto", &crate::admin::DOMAIN);
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
    let is_service = |domain: &Domain| {
        !matches!(
            domain.name,
            "snug.gateway" | "snug.cli" | "snug.restore" | "snug.hub"
        )
    };
    // The restore domain also lists service reasons it passes on (LOCKED, SCHEMA_TOO_NEW).
    let sent_by_a_service: BTreeSet<&str> = DOMAINS
        .iter()
        .filter(|domain| is_service(domain))
        .flat_map(|domain| domain.reasons.iter().map(|r| r.name))
        .collect();
    for domain in DOMAINS {
        let service = is_service(domain);
        for reason in domain.reasons {
            if !service && sent_by_a_service.contains(reason.name) {
                continue;
            }
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

/// The heading of a domain's table in `REASONS.md` (the services' tests find their tables by it).
fn heading(domain: &Domain) -> String {
    match domain.name {
        "snug.gateway" => "The gateway's own reasons (`snug.gateway`)".to_owned(),
        "snug.cli" => "The CLI's own codes (`snug.cli`)".to_owned(),
        "snug.hub" => "The hub's own, for its operator (`snug.hub`)".to_owned(),
        name => {
            let short = name.trim_start_matches("snug.");
            let mut title = short.to_owned();
            title[..1].make_ascii_uppercase();
            format!("{title} reasons (domain `{name}`)")
        }
    }
}

/// `REASONS.md`, the reference table of every reason, as this registry defines it.
fn reference() -> String {
    let mut text = String::from(
        "# Reasons\n\n\
         Generated from `snug-reasons` (`shared/reasons/src`) by its tests; do not edit: change the\n\
         registry and run `UPDATE_EXPECT=1 cargo test -p snug-reasons`. HTTP `by code` means the\n\
         gateway answers a status with this reason by its gRPC code; CLI `—` means the CLI never\n\
         reports it.\n",
    );
    for domain in DOMAINS {
        text.push_str(&format!(
            "\n## {}\n\n| reason | gRPC | HTTP | CLI exit | meaning |\n|---|---|---|---|---|\n",
            heading(domain)
        ));
        for reason in domain.reasons {
            let grpc = reason.grpc.map_or("—", |code| code.name());
            let http = match reason.http {
                None => "by code".to_owned(),
                Some(http) => format!(
                    "{} `{}`{}",
                    http.status,
                    http.code,
                    if http.retryable { ", retryable" } else { "" }
                ),
            };
            let exit = match reason.exit {
                CliExit::Never => "—".to_owned(),
                CliExit::Always(exit) => (exit as u8).to_string(),
                CliExit::ByCause(exits) => exits
                    .iter()
                    .map(|exit| (*exit as u8).to_string())
                    .collect::<Vec<_>>()
                    .join(" or "),
            };
            text.push_str(&format!(
                "| `{}` | {grpc} | {http} | {exit} | {} |\n",
                reason.name,
                reason.summary.replace('|', "\\|")
            ));
        }
    }
    text
}

#[test]
fn the_reference_table_is_current() {
    expect_test::expect_file!["../REASONS.md"].assert_eq(&reference());
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

/// `snug-hub users` gives exit statuses only to reasons its API can send.
#[test]
fn the_users_exits_are_of_admin_reasons() {
    for (reason, exit) in crate::admin::USERS_EXIT {
        assert!(
            crate::admin::DOMAIN
                .reasons
                .iter()
                .any(|r| r.name == reason.name),
            "{} is not a reason of snug.admin",
            reason.name
        );
        assert_eq!(crate::admin::users_exit(reason.name), *exit);
    }
    assert_eq!(crate::admin::users_exit("DIRECTORY_UNAVAILABLE"), 1);
    assert_eq!(crate::admin::users_exit(""), 1);
}
