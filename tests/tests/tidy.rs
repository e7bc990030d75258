//! Workspace invariants, checked as tests (rust-analyzer's tidy): the crate graph, file headers,
//! the container reasons in the reference, ARCHITECTURE.md staying a map, and the environment tables.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Every workspace package's name and the names of its normal (non-dev) dependencies, direct and
/// transitive.
fn dependency_closure() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(root())
        .output()
        .expect("cargo metadata");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    let names: BTreeMap<String, String> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            (
                p["id"].as_str().expect("id").to_owned(),
                p["name"].as_str().expect("name").to_owned(),
            )
        })
        .collect();
    let mut direct: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for node in metadata["resolve"]["nodes"].as_array().expect("nodes") {
        let id = node["id"].as_str().expect("id").to_owned();
        let deps = node["deps"]
            .as_array()
            .expect("deps")
            .iter()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .expect("kinds")
                    .iter()
                    .any(|k| k["kind"].is_null())
            })
            .map(|d| d["pkg"].as_str().expect("pkg").to_owned())
            .collect();
        direct.insert(id, deps);
    }
    let members: Vec<String> = metadata["workspace_members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m.as_str().expect("member").to_owned())
        .collect();
    members
        .iter()
        .map(|member| {
            let mut seen = BTreeSet::new();
            let mut stack = vec![member.clone()];
            while let Some(id) = stack.pop() {
                for dep in direct.get(&id).into_iter().flatten() {
                    if seen.insert(dep.clone()) {
                        stack.push(dep.clone());
                    }
                }
            }
            (
                names[member].clone(),
                seen.into_iter().map(|id| names[&id].clone()).collect(),
            )
        })
        .collect()
}

#[test]
fn domain_crates_and_the_cli_stay_free_of_rpc_and_http() {
    let closure = dependency_closure();
    let domain = [
        "snug-container",
        "snug-schema",
        "snug-materialize",
        "snug-revstore",
        "snug-restore",
    ];
    // Libraries the gateway may link, held to the domain crates' rule: no RPC, no HTTP.
    let gateway_libraries = ["snug-users", "snug-pg"];
    let rpc = ["tonic", "prost", "axum", "hyper", "snug-proto", "snug-rpc"];
    // An HTTP client too, except in snug-restore, whose hub origin is one (checked below).
    let rpc_and_http = [rpc.as_slice(), &["ureq", "reqwest"]].concat();
    let mut violations = Vec::new();
    for (package, deps) in &closure {
        let forbidden: &[&str] = if package == "snug-restore" {
            &rpc
        } else if domain.contains(&package.as_str())
            || gateway_libraries.contains(&package.as_str())
            // snug-identity is sans-IO too: the gateway fetches what it verifies.
            || package == "snug-identity"
        {
            &rpc_and_http
        } else if package == "snug-cli" {
            &["tonic", "prost", "snug-proto", "snug-rpc"]
        } else if package == "snug-gateway" {
            // The gateway reaches the capabilities only through their gRPC contracts; the users
            // directory (snug-users) is its own, not a capability's.
            &domain
        } else {
            &[]
        };
        for name in forbidden {
            if deps.contains(*name) {
                violations.push(format!("{package} depends on {name}"));
            }
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
    assert!(
        closure.contains_key("snug-container"),
        "the check sees the workspace"
    );
    assert!(
        closure.contains_key("snug-gateway"),
        "the check sees the gateway"
    );
    assert!(
        closure["snug-gateway"].contains("snug-users"),
        "the check sees the gateway's users directory"
    );
}

/// `snug-test-support` is a dev-dependency only: no shipped crate links it. `snug-e2e`, the test
/// library, may depend on it normally because nothing ships `snug-e2e` either.
#[test]
fn the_test_support_crate_is_a_dev_dependency_only() {
    let closure = dependency_closure();
    let test_only = ["snug-test-support", "snug-e2e"];
    let linked: Vec<&String> = closure
        .iter()
        .filter(|(package, deps)| {
            !test_only.contains(&package.as_str())
                && test_only.iter().any(|name| deps.contains(*name))
        })
        .map(|(package, _)| package)
        .collect();
    assert!(
        linked.is_empty(),
        "normal dependencies on test crates: {linked:?}"
    );
    assert!(
        closure["snug-e2e"].contains("snug-test-support"),
        "the check sees the test-support crate"
    );
}

#[test]
fn the_restore_crate_talks_http_only_in_its_optional_hub_origin() {
    // The HTTP client is behind the `hub` feature, so the pure library builds without it.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root())
        .output()
        .expect("cargo metadata");
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    let restore = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == "snug-restore")
        .expect("snug-restore");
    for dependency in restore["dependencies"].as_array().expect("dependencies") {
        if dependency["name"] == "ureq" {
            assert_eq!(dependency["optional"], true, "ureq is optional");
        }
    }
    assert!(
        restore["features"]["hub"]
            .as_array()
            .expect("a hub feature")
            .iter()
            .any(|f| f == "dep:ureq"),
        "the hub feature enables ureq"
    );
    // And only the hub origin's module (with its tests) uses it; nothing opens a socket itself.
    let src = root().join("shared/restore/src");
    let mut violations = Vec::new();
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).expect("read");
        let relative = file.strip_prefix(&src).expect("below src");
        let hub = relative.starts_with("origin/hub") || relative == Path::new("origin/hub.rs");
        for word in ["ureq", "std::net", "TcpStream"] {
            if text.contains(word) && !(hub && word == "ureq") {
                violations.push(format!("{} uses {word}", relative.display()));
            }
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn the_container_crate_is_sans_io() {
    // No clock, sockets or files: bytes in, values out (rustls, quinn-proto).
    let forbidden = ["std::fs", "std::net", "SystemTime", "Instant::now", "tokio"];
    let mut violations = Vec::new();
    for file in rust_files(&root().join("shared/container/src")) {
        let text = std::fs::read_to_string(&file).expect("read");
        for word in forbidden {
            if text.contains(word) && !file.ends_with("tests.rs") {
                violations.push(format!("{} uses {word}", file.display()));
            }
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !matches!(name, "target" | "corpus" | "artifacts" | "gen") {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_rust_file_opens_with_a_doc_line() {
    let mut missing = Vec::new();
    for top in ["shared", "services", "tests"] {
        for file in rust_files(&root().join(top)) {
            let text = std::fs::read_to_string(&file).expect("read");
            if !text.starts_with("//!") {
                missing.push(
                    file.strip_prefix(root())
                        .unwrap_or(&file)
                        .display()
                        .to_string(),
                );
            }
        }
    }
    assert!(
        missing.is_empty(),
        "files without a leading //! line: {missing:#?}"
    );
}

/// The lines of `text` that break the one-parser rule: a second duration parser defined, or a
/// clap argument whose field is a `Duration` with a parser other than `parse_duration`.
fn duration_offenders(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut offenders = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.contains("fn parse_")
            && line.contains("duration")
            && !line.contains("pub fn parse_duration(")
        {
            offenders.push(i + 1);
        }
        let field = line.trim_start();
        let is_duration_field = field.starts_with("pub")
            && (field.ends_with(": Duration,")
                || field.ends_with(": std::time::Duration,")
                || field.ends_with(": Option<Duration>,"));
        if !is_duration_field {
            continue;
        }
        // The field's attributes and doc lines, up to the field before it.
        let attributes: Vec<&str> = lines[..i]
            .iter()
            .rev()
            .take_while(|l| {
                let l = l.trim_start();
                let ends_field = l.starts_with("pub") && l.ends_with(',');
                !(ends_field || l.ends_with('{'))
            })
            .copied()
            .collect();
        let attributes = attributes.join("\n");
        if attributes.contains("#[arg(") && !attributes.contains("parse_duration") {
            offenders.push(i + 1);
        }
    }
    offenders
}

/// One parser for every duration flag and variable (issue 35): each `Duration` a clap argument
/// takes is read by `snug_rpc::server::parse_duration`, so every one accepts the same units and
/// refuses with the same message; no other duration parser exists.
#[test]
fn every_duration_flag_is_read_by_the_one_parser() {
    let sample = "struct C {\n    /// a\n    #[arg(long, value_parser = parse_duration)]\n    pub a: Duration,\n    #[arg(long,\n        value_parser = humantime)]\n    pub b: Duration,\n    pub c: Duration,\n}\nfn parse_long_duration() {}\n";
    assert_eq!(duration_offenders(sample), [7, 10], "the check itself");
    let mut offenders = Vec::new();
    for top in ["shared", "services"] {
        for file in rust_files(&root().join(top)) {
            let text = std::fs::read_to_string(&file).expect("read");
            for line in duration_offenders(&text) {
                offenders.push(format!(
                    "{}:{line}",
                    file.strip_prefix(root()).unwrap_or(&file).display()
                ));
            }
        }
    }
    assert!(offenders.is_empty(), "{offenders:#?}");
}

#[test]
fn every_container_reason_is_documented_in_the_reference() {
    let reference =
        std::fs::read_to_string(root().join("shared/reasons/REASONS.md")).expect("REASONS.md");
    let proto = std::fs::read_to_string(root().join("proto/snug/container/v1/container.proto"))
        .expect("proto");
    let table = reference
        .split("Container reasons (domain `snug.container`)")
        .nth(1)
        .expect("REASONS.md has the container table");
    let table = table.split("\n#").next().unwrap_or(table);
    for reason in snug_reasons::container::DOMAIN
        .reasons
        .iter()
        .map(|r| r.name)
    {
        assert!(
            table.contains(&format!("| `{reason}` |")),
            "REASONS.md's container table lacks `{reason}`"
        );
        assert!(proto.contains(reason), "container.proto lacks {reason}");
    }
}

/// The `SNUG_*` variables the code reads or sets, by file: every string literal `"SNUG_…"` (one
/// inside another string, `\"SNUG_…\"`, is text, not a variable).
fn environment_in_code() -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    for top in ["services", "shared", "tests"] {
        for file in rust_files(&root().join(top)) {
            let text = std::fs::read_to_string(&file).expect("read");
            for (at, _) in text.match_indices("\"SNUG_") {
                let name: String = text[at + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                let closed = text[at + 1 + name.len()..].starts_with('"');
                // `SNUG_SECRETS` is a hostile table name in a schema test, not a variable.
                let variable = name.len() > "SNUG_".len() && name != "SNUG_SECRETS";
                if closed && variable && !text[..at].ends_with('\\') {
                    found.push((file.clone(), name));
                }
            }
        }
    }
    found
}

/// The variables a table in `file`'s module docs documents: every backticked `SNUG_…` in the
/// first cell of a `//! | … |` row.
fn environment_table(file: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(file)).expect("read");
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(row) = line.strip_prefix("//! | ") else {
            continue;
        };
        let first = row.split(" | ").next().unwrap_or("");
        for part in first.split('`').skip(1).step_by(2) {
            if part.starts_with("SNUG_") {
                names.insert(part.to_owned());
            }
        }
    }
    names
}

/// Every `SNUG_*` variable is documented: the hub's in `snug-hub`'s table, the CLI's in `snug`'s,
/// the tests' and benches' in `snug-e2e`'s; and no table names a variable nothing reads.
#[test]
fn every_environment_variable_is_in_its_table() {
    let hub = environment_table("services/hub/src/main.rs");
    let cli = environment_table("services/cli/src/main.rs");
    let tests = environment_table("tests/src/lib.rs");
    assert!(
        hub.len() > 30 && !cli.is_empty() && !tests.is_empty(),
        "tables not found"
    );
    let in_code = environment_in_code();
    let is_test_code = |path: &Path| {
        let text = path.to_string_lossy();
        text.contains("/tests/")
            || text.contains("/benches/")
            || text.ends_with("tests.rs")
            || text.ends_with("test_support.rs")
            || text.contains("/shared/testcontainers/")
            || text.contains("/shared/test-support/")
            || text.contains(&root().join("tests").to_string_lossy().into_owned())
    };
    let mut undocumented = Vec::new();
    for (file, name) in &in_code {
        let relative = file
            .strip_prefix(root())
            .unwrap_or(file)
            .display()
            .to_string();
        let table = if is_test_code(file) {
            None
        } else if relative.starts_with("services/cli/") {
            Some(("services/cli/src/main.rs", &cli))
        } else {
            Some(("services/hub/src/main.rs", &hub))
        };
        let documented = match table {
            Some((_, table)) => table.contains(name),
            None => hub.contains(name) || cli.contains(name) || tests.contains(name),
        };
        if !documented {
            let where_ = table.map_or("a table", |(path, _)| path);
            undocumented.push(format!("{name} ({relative}) is not in {where_}"));
        }
    }
    undocumented.sort();
    undocumented.dedup();
    assert!(undocumented.is_empty(), "{undocumented:#?}");

    let read: BTreeSet<&str> = in_code.iter().map(|(_, name)| name.as_str()).collect();
    let stale: Vec<_> = hub
        .iter()
        .chain(&cli)
        .chain(&tests)
        .filter(|name| !read.contains(name.as_str()))
        .collect();
    assert!(stale.is_empty(), "documented but never read: {stale:?}");
}

/// ARCHITECTURE.md stays a map a newcomer reads in one sitting: every crate of the workspace
/// and every entry point is on it, each crate's section is a short paragraph and its invariants
/// (mechanisms belong in the module docs), no section is empty, and none is cut short.
#[test]
fn architecture_md_stays_a_map() {
    let architecture =
        std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    // A paragraph cut short to fit is not a map: each says what it says in whole sentences.
    assert!(
        !architecture.contains("(Continued"),
        "ARCHITECTURE.md has a paragraph cut off with \"(Continued\": say less, in whole sentences"
    );
    // The sections, by heading, with their non-blank lines.
    let mut sections: Vec<(&str, usize)> = Vec::new();
    for line in architecture.lines() {
        if line.starts_with("## ") || line.starts_with("### ") {
            sections.push((line, 0));
        } else if let Some(section) = sections.last_mut().filter(|_| !line.trim().is_empty()) {
            section.1 += 1;
        }
    }
    // A section is empty when it has no text and no subsections.
    let empty: Vec<_> = sections
        .iter()
        .enumerate()
        .filter(|(i, (heading, lines))| {
            let parent = heading.starts_with("## ")
                && sections
                    .get(i + 1)
                    .is_some_and(|(next, _)| next.starts_with("### "));
            *lines == 0 && !parent
        })
        .map(|(_, (heading, _))| heading)
        .collect();
    assert!(empty.is_empty(), "sections with nothing in them: {empty:?}");
    let long: Vec<_> = sections
        .iter()
        .filter(|(heading, lines)| heading.starts_with("### `") && *lines > 15)
        .collect();
    assert!(
        long.is_empty(),
        "crate sections over 15 lines (move mechanisms to module docs): {long:?}"
    );

    // Every workspace crate has its section, or (a binary's crate) its entry point.
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("workspace members");
    let entry_points = architecture
        .split("## Entry points")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("an Entry points section");
    let mut missing = Vec::new();
    for member in members
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|m| !m.ends_with("/fuzz"))
    {
        let heading = format!("### `{member}`");
        let main = format!("`{member}/src/main.rs`");
        if !architecture.contains(&heading) && !entry_points.contains(&main) {
            missing.push(member.to_owned());
        }
    }
    // Every binary and every service's `serve()` is an entry point.
    for service in std::fs::read_dir(root().join("services")).expect("services") {
        let dir = service.expect("entry").path();
        let crate_dir = dir.strip_prefix(root()).expect("in the workspace");
        let lib = dir.join("src/lib.rs");
        let serves = std::fs::read_to_string(&lib).is_ok_and(|l| l.contains("pub async fn serve("));
        let point = if dir.join("src/main.rs").exists() {
            format!("`{}/src/main.rs`", crate_dir.display())
        } else if serves {
            format!("`{}/src/lib.rs`", crate_dir.display())
        } else {
            continue;
        };
        if !entry_points.contains(&point) {
            missing.push(point);
        }
    }
    assert!(missing.is_empty(), "not on the map: {missing:?}");
}

/// The modules of `crate_dir/src` (its top-level files but `lib.rs`) and which of them each one
/// names outside its tests (`crate::module`, or `module` inside a `use crate::{…}` list).
fn module_graph(crate_dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let dir = root().join(crate_dir).join("src");
    let mut sources = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("src") {
        let path = entry.expect("entry").path();
        let Some(name) = path.file_stem().and_then(|n| n.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main" {
            let text = std::fs::read_to_string(&path).expect("read");
            let code = text.split("#[cfg(test)]").next().unwrap_or("").to_owned();
            let code: String = code
                .lines()
                .map(|line| line.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            sources.insert(name.to_owned(), code);
        }
    }
    let names: BTreeSet<String> = sources.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (module, code) in &sources {
        let mut uses = BTreeSet::new();
        for other in &names {
            let listed = code.split("use crate::{").skip(1).any(|rest| {
                let list = rest.split("};").next().unwrap_or("");
                list.split(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                    .any(|word| word == other)
            });
            if other != module && (code.contains(&format!("crate::{other}")) || listed) {
                uses.insert(other.clone());
            }
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// The gateway's modules form layers (error at the bottom, routes and observe on top): none
/// imports another that imports it back, directly or through others.
#[test]
fn the_gateway_modules_import_each_other_without_a_cycle() {
    let graph = module_graph("services/gateway");
    assert!(graph.contains_key("error") && graph.contains_key("routes"));
    fn reaches(
        graph: &BTreeMap<String, BTreeSet<String>>,
        from: &str,
        to: &str,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        graph[from]
            .iter()
            .any(|next| next == to || (seen.insert(next.clone()) && reaches(graph, next, to, seen)))
    }
    let cycles: Vec<&String> = graph
        .keys()
        .filter(|module| reaches(&graph, module, module, &mut BTreeSet::new()))
        .collect();
    assert!(
        cycles.is_empty(),
        "modules on an import cycle: {cycles:?} in {graph:#?}"
    );
}
