//! Import (spec §9.2, §12.4, §18.2): an untrusted file becomes a candidate user database.
//!
//! Order, each step refusing with a typed [`ImportError`] and nothing local changed:
//! 1. format by leading bytes — a SNUGENC1 container is opened with the supplied secrets
//!    (locked stays [`ImportError::Locked`], damage is [`ImportError::CorruptContainer`]);
//! 2. the cap on the PLAINTEXT (§11.2 rule 9);
//! 3. SQLite magic and header sanity, then a defensive in-memory open and `quick_check`;
//! 4. newer than v6 refused; no `snug_meta` refused; hostile schema refused (triggers, views,
//!    virtual tables, foreign indexes on hub tables, foreign tables, hub tables of another shape);
//! 5. migrate, heal, and wipe the legacy credential slice when the version advanced; then
//!    refuse two registered apps that share an `appDataToken` (§8.2);
//! 6. reconcile `snug_connections` against the local approved grants (§12.4);
//! 7. drop runtime contracts the local database does not already hold (§18.2), unless the file
//!    comes from the user's own trusted sync origin;
//! 8. re-arm `needsEndpointConfirm`: the file's endpoint settings are executable config.
//!
//! The result is an in-memory [`UserDb`]; the caller swaps it in and persists it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use rusqlite::{Connection, params};
use serde::Serialize;
use serde_json::Value;

use crate::clock::Clock;
use crate::db::{UserDb, memory_connection, quick_check};
use crate::ddl::MAX_USERDB_BYTES;
use crate::error::ImportError;
use crate::kv::{NEEDS_ENDPOINT_CONFIRM_KEY, canonical_json, encode_json};
use crate::open::{self, HealReport, Trust};

/// How to import.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOptions<'a> {
    /// Secrets for a SNUGENC1 container; without them a container is [`ImportError::Locked`].
    pub secrets: Option<&'a snug_container::Secrets>,
    /// The file comes from the user's own sync origin (pull or recovery restore): runtime
    /// contracts are kept as they are. Connection reconciliation still runs.
    pub trusted_origin: bool,
    /// What a container may ask for (iteration bounds). The plaintext cap is never above
    /// [`MAX_USERDB_BYTES`] whatever this says.
    pub container_limits: snug_container::Limits,
}

/// What an import did to the candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// Whether the file was a SNUGENC1 container.
    pub was_protected: bool,
    /// The storage version found.
    pub found_version: i64,
    /// Whether the ladder ran.
    pub advanced: bool,
    /// What the heal restored.
    pub healed: HealReport,
    /// Legacy credentials wiped.
    pub credentials_wiped: usize,
    /// Connection rows whose local approval was restored (identical requirement and hosts).
    pub restored_grants: usize,
    /// Connection rows landed as `declared` + `imported` with hosts re-derived.
    pub demoted_connections: usize,
    /// Connection rows dropped as structurally unusable.
    pub dropped_connections: Vec<DroppedConnection>,
    /// Runtime contracts set to NULL because the local database did not know them.
    pub dropped_runtime_contracts: Vec<DroppedContract>,
}

/// A connection row an import dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DroppedConnection {
    /// The app.
    pub app_id: String,
    /// The slot.
    pub slot: String,
    /// Why.
    pub reason: RequirementProblem,
}

/// A runtime contract an import cleared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DroppedContract {
    /// The app.
    pub app_id: String,
    /// The version whose contract was cleared.
    pub version: i64,
}

/// Why a connection requirement is structurally unusable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RequirementProblem {
    /// `requirement_json` is not JSON.
    #[error("requirement_json is not valid JSON")]
    NotJson,
    /// Not a JSON object.
    #[error("the requirement is not an object")]
    NotObject,
    /// A key the requirement schema does not have (the schema is strict).
    #[error("unknown key {key:?}")]
    UnknownKey {
        /// The key.
        key: String,
    },
    /// `slot` missing, malformed, or different from the row's slot.
    #[error("slot is missing, malformed or does not match the row")]
    BadSlot,
    /// `kind` missing or not one of the seven kinds.
    #[error("kind is missing or unknown")]
    BadKind,
    /// `provider.name` missing or not printable ASCII of at most 120 characters.
    #[error("provider is missing or malformed")]
    BadProvider,
    /// `declaredApiHosts` malformed, or absent without a `lanHost`.
    #[error("declaredApiHosts is missing or malformed")]
    BadHosts,
    /// `endpoints` is not an object of https URLs under the four known keys.
    #[error("endpoints are malformed")]
    BadEndpoints,
}

/// Top-level keys of a connection requirement (§12.5).
const REQUIREMENT_KEYS: [&str; 14] = [
    "slot",
    "provider",
    "kind",
    "fields",
    "registration",
    "endpoints",
    "scopes",
    "pkce",
    "authorizeParams",
    "request",
    "userLayer",
    "lanHost",
    "declaredApiHosts",
    "testRequest",
];

/// The seven connection kinds (append-only).
const CONNECTION_KINDS: [&str; 7] = [
    "api_key",
    "bearer_token",
    "basic_auth",
    "oauth2_client_creds",
    "oauth2_auth_code",
    "linked_device",
    "none",
];

/// The OAuth endpoint keys whose hosts join the ceiling.
const ENDPOINT_KEYS: [&str; 4] = ["authorizeUrl", "tokenUrl", "refreshUrl", "revokeUrl"];

fn is_valid_slot(slot: &str) -> bool {
    let bytes = slot.as_bytes();
    (1..=40).contains(&bytes.len())
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// Returns `host` lowercased if it is a bare LDH hostname (`CONNECTION_HOST_RULE`, ≤ 253 chars).
///
/// Non-ASCII names are not IDNA-converted here; they are rejected, which can only narrow a
/// ceiling, never widen it.
pub fn normalize_host(host: &str) -> Option<String> {
    let host = host.to_ascii_lowercase();
    let label_ok = |label: &str| {
        let bytes = label.as_bytes();
        !bytes.is_empty()
            && bytes.len() <= 63
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
            && bytes[0] != b'-'
            && bytes[bytes.len() - 1] != b'-'
    };
    (!host.is_empty() && host.len() <= 253 && host.split('.').all(label_ok)).then_some(host)
}

/// Returns the normalized host of an `https://` URL with no userinfo, or `None`.
pub fn https_url_host(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return None;
    }
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        Some(_) => return None,
        None => authority,
    };
    normalize_host(host)
}

/// Derives a requirement's host ceiling: `declaredApiHosts` ∪ the hosts of the OAuth endpoints
/// (authorize, token, refresh, revoke) ∪ the embedded `userLayer`'s declared hosts and
/// endpoint hosts — normalized, unique, sorted (the output is compared byte-for-byte on import,
/// so its stability is load-bearing).
///
/// Parsed, and nothing else: `declaredApiHosts` entries that are bare LDH hostnames (lowercased)
/// and the four endpoint URLs when they are `https://` URLs without userinfo. Anything else is
/// skipped, which can only shrink the ceiling. `lanHost` contributes nothing.
pub fn derive_allowed_hosts(requirement: &Value) -> Vec<String> {
    let mut hosts = BTreeSet::new();
    let mut add_layer = |layer: &Value| {
        if let Some(declared) = layer.get("declaredApiHosts").and_then(Value::as_array) {
            hosts.extend(
                declared
                    .iter()
                    .filter_map(Value::as_str)
                    .filter_map(normalize_host),
            );
        }
        if let Some(endpoints) = layer.get("endpoints") {
            hosts.extend(
                ENDPOINT_KEYS
                    .iter()
                    .filter_map(|key| endpoints.get(key))
                    .filter_map(Value::as_str)
                    .filter_map(https_url_host),
            );
        }
    };
    add_layer(requirement);
    if let Some(user_layer) = requirement.get("userLayer") {
        add_layer(user_layer);
    }
    hosts.into_iter().collect()
}

/// A structural check of a connection requirement against the §12.5 envelope: a strict object
/// with a valid `slot` equal to the row's, one of the seven kinds, a printable-ASCII provider
/// name, well-formed hosts and endpoints. The field-level lints of §12.8 belong to the
/// connection capability; this check only decides whether a row is usable at all.
pub fn check_requirement(requirement: &Value, row_slot: &str) -> Result<(), RequirementProblem> {
    let object = requirement
        .as_object()
        .ok_or(RequirementProblem::NotObject)?;
    if let Some(key) = object
        .keys()
        .find(|key| !REQUIREMENT_KEYS.contains(&key.as_str()))
    {
        return Err(RequirementProblem::UnknownKey { key: key.clone() });
    }
    match object.get("slot").and_then(Value::as_str) {
        Some(slot) if is_valid_slot(slot) && slot == row_slot => {}
        _ => return Err(RequirementProblem::BadSlot),
    }
    if !object
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|kind| CONNECTION_KINDS.contains(&kind))
    {
        return Err(RequirementProblem::BadKind);
    }
    let provider_ok = object
        .get("provider")
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .is_some_and(|name| {
            (1..=120).contains(&name.len()) && name.bytes().all(|b| (0x20..=0x7e).contains(&b))
        });
    if !provider_ok {
        return Err(RequirementProblem::BadProvider);
    }
    match object.get("declaredApiHosts") {
        None if object.contains_key("lanHost") => {}
        Some(Value::Array(hosts))
            if (1..=32).contains(&hosts.len())
                && hosts
                    .iter()
                    .all(|h| h.as_str().and_then(normalize_host).is_some()) => {}
        _ => return Err(RequirementProblem::BadHosts),
    }
    if let Some(endpoints) = object.get("endpoints") {
        let ok = endpoints.as_object().is_some_and(|map| {
            map.iter().all(|(key, url)| {
                ENDPOINT_KEYS.contains(&key.as_str())
                    && url.as_str().and_then(https_url_host).is_some()
            })
        });
        if !ok {
            return Err(RequirementProblem::BadEndpoints);
        }
    }
    Ok(())
}

/// One approved grant of the database an import replaces: a `snug_connections` row with status
/// `approved`, as the import compares the incoming file's rows against it (§12.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovedGrant {
    /// The app.
    pub app_id: String,
    /// The slot.
    pub slot: String,
    /// The requirement the user approved, as stored (compared byte for byte).
    pub requirement_json: String,
    /// The host ceiling the user approved, as stored (compared byte for byte).
    pub allowed_hosts: String,
    /// When the user approved it; restored with the grant.
    pub approved_at: Option<String>,
    /// The requirement version approved; restored with the grant.
    pub requirement_version: i64,
}

/// What an import measures the incoming file against: the approved grants and the runtime
/// contracts of the database it replaces. Built from that database ([`ImportBaseline::of`]) or,
/// for a hub that keeps grants outside a file, from its grants and contracts
/// ([`ImportBaseline::new`]). The default is the strictest: nothing approved, no contract known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportBaseline {
    grants: HashMap<(String, String), ApprovedGrant>,
    known_contracts: HashSet<String>,
}

impl ImportBaseline {
    /// The baseline of a database the import replaces: its rows with status `approved`, and the
    /// canonical form of every runtime contract it stores (unparseable ones are known to nobody).
    pub fn of(local: &UserDb) -> Result<Self, ImportError> {
        let conn = local.connection();
        let mut stmt = conn.prepare(
            "SELECT app_id, slot, requirement_json, allowed_hosts, approved_at, requirement_version \
             FROM snug_connections WHERE status = 'approved'",
        )?;
        let grants = stmt
            .query_map([], |row| {
                Ok(ApprovedGrant {
                    app_id: row.get(0)?,
                    slot: row.get(1)?,
                    requirement_json: row.get(2)?,
                    allowed_hosts: row.get(3)?,
                    approved_at: row.get(4)?,
                    requirement_version: row.get(5)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut stmt = conn.prepare(
            "SELECT runtime_contract_json FROM snug_app_versions WHERE runtime_contract_json IS NOT NULL",
        )?;
        let contracts = stmt
            .query_map([], |row| row.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?
            .into_iter()
            .filter_map(|raw| serde_json::from_str::<Value>(&raw).ok());
        Ok(Self::new(grants, contracts))
    }

    /// A baseline from a hub's approved grants and the runtime contracts it holds. Grants are
    /// keyed by `(app_id, slot)`; of two with one key, the later is kept, as a database holds
    /// one row per key (a caller that must refuse duplicates checks them first).
    pub fn new(
        grants: impl IntoIterator<Item = ApprovedGrant>,
        runtime_contracts: impl IntoIterator<Item = Value>,
    ) -> Self {
        Self {
            grants: grants
                .into_iter()
                .map(|grant| ((grant.app_id.clone(), grant.slot.clone()), grant))
                .collect(),
            known_contracts: runtime_contracts
                .into_iter()
                .map(|contract| canonical_json(&contract))
                .collect(),
        }
    }

    /// How many approved grants the baseline holds.
    pub fn grant_count(&self) -> usize {
        self.grants.len()
    }
}

struct Reconciled {
    restored: usize,
    demoted: usize,
    dropped: Vec<DroppedConnection>,
}

/// Reconciles the candidate's connection rows against the local approved grants (§12.4).
fn reconcile_connections(
    tx: &Connection,
    local: &HashMap<(String, String), ApprovedGrant>,
    now: &str,
) -> rusqlite::Result<Reconciled> {
    let rows: Vec<(String, String, String, String, String)> = {
        let mut stmt = tx.prepare(
            "SELECT app_id, slot, requirement_json, allowed_hosts, status FROM snug_connections",
        )?;
        stmt.query_map([], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?
    };
    let mut reconciled = Reconciled {
        restored: 0,
        demoted: 0,
        dropped: Vec::new(),
    };
    for (app_id, slot, requirement_json, allowed_hosts, status) in rows {
        let parsed = serde_json::from_str::<Value>(&requirement_json)
            .map_err(|_| RequirementProblem::NotJson)
            .and_then(|requirement| check_requirement(&requirement, &slot).map(|()| requirement));
        let requirement = match parsed {
            Ok(requirement) => requirement,
            Err(reason) => {
                tx.execute(
                    "DELETE FROM snug_connections WHERE app_id = ?1 AND slot = ?2",
                    params![app_id, slot],
                )?;
                reconciled.dropped.push(DroppedConnection {
                    app_id,
                    slot,
                    reason,
                });
                continue;
            }
        };
        // A revocation tombstone survives as it is: it only ever narrows.
        if status == "revoked" {
            continue;
        }
        let key = (app_id, slot);
        match local.get(&key) {
            Some(grant)
                if grant.requirement_json == requirement_json
                    && grant.allowed_hosts == allowed_hosts =>
            {
                tx.execute(
                    "UPDATE snug_connections SET status = 'approved', approved_at = ?3, requirement_version = ?4, \
                     pending_requirement_json = NULL WHERE app_id = ?1 AND slot = ?2",
                    params![key.0, key.1, grant.approved_at, grant.requirement_version],
                )?;
                reconciled.restored += 1;
            }
            _ => {
                let hosts = encode_json(&Value::Array(
                    derive_allowed_hosts(&requirement)
                        .into_iter()
                        .map(Value::String)
                        .collect(),
                ));
                tx.execute(
                    "UPDATE snug_connections SET status = 'declared', approved_at = NULL, imported = 1, \
                     pending_requirement_json = NULL, allowed_hosts = ?3, updated_at = ?4 \
                     WHERE app_id = ?1 AND slot = ?2",
                    params![key.0, key.1, hosts, now],
                )?;
                reconciled.demoted += 1;
            }
        }
    }
    Ok(reconciled)
}

/// Clears every runtime contract whose canonical form the local database does not hold.
fn drop_unknown_contracts(
    tx: &Connection,
    known: &HashSet<String>,
) -> rusqlite::Result<Vec<DroppedContract>> {
    let rows: Vec<(String, i64, String)> = {
        let mut stmt = tx.prepare(
            "SELECT app_id, version, runtime_contract_json FROM snug_app_versions \
             WHERE runtime_contract_json IS NOT NULL ORDER BY app_id, version",
        )?;
        stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?
    };
    let mut dropped = Vec::new();
    for (app_id, version, raw) in rows {
        let known_here = serde_json::from_str::<Value>(&raw)
            .is_ok_and(|value| known.contains(&canonical_json(&value)));
        if !known_here {
            tx.execute(
                "UPDATE snug_app_versions SET runtime_contract_json = NULL WHERE app_id = ?1 AND version = ?2",
                params![app_id, version],
            )?;
            dropped.push(DroppedContract { app_id, version });
        }
    }
    Ok(dropped)
}

/// Unwraps a container if the bytes are one; returns the plaintext and whether it was protected.
fn plaintext<'b>(
    bytes: &'b [u8],
    options: &ImportOptions<'_>,
) -> Result<(std::borrow::Cow<'b, [u8]>, bool), ImportError> {
    match snug_container::detect(bytes) {
        snug_container::Format::Sqlite => Ok((std::borrow::Cow::Borrowed(bytes), false)),
        snug_container::Format::Container => {
            let no_secrets = snug_container::Secrets::default();
            let limits = snug_container::Limits {
                max_plaintext: options.container_limits.max_plaintext.min(MAX_USERDB_BYTES),
                ..options.container_limits
            };
            match snug_container::open(bytes, options.secrets.unwrap_or(&no_secrets), &limits) {
                Ok(unlocked) => Ok((std::borrow::Cow::Owned(unlocked.plaintext), true)),
                Err(snug_container::OpenError::Locked) => Err(ImportError::Locked),
                Err(snug_container::OpenError::Corrupt(corruption)) => {
                    Err(ImportError::CorruptContainer(corruption))
                }
                Err(snug_container::OpenError::TooLarge { plaintext_len, max }) => {
                    Err(ImportError::TooLarge {
                        size: plaintext_len,
                        max,
                    })
                }
            }
        }
        snug_container::Format::Unknown => Err(ImportError::NotSqlite),
    }
}

/// Imports `bytes` as a candidate user database.
///
/// `local` is the database being replaced, if any: its approved grants are the only ones an
/// import can restore, and its runtime contracts the only ones an untrusted import keeps.
pub fn import(
    bytes: &[u8],
    local: Option<&UserDb>,
    options: &ImportOptions<'_>,
    clock: Arc<dyn Clock>,
) -> Result<(UserDb, ImportReport), ImportError> {
    let baseline = match local {
        Some(local) => ImportBaseline::of(local)?,
        None => ImportBaseline::default(),
    };
    import_against(bytes, &baseline, options, clock)
}

/// Imports `bytes` as a candidate user database measured against `baseline`: the one import
/// every path runs (a pull, `snug import`, and `snug.schema.v1` ImportUserDatabase for hubs in
/// other languages), whatever holds the grants it compares with.
pub fn import_against(
    bytes: &[u8],
    baseline: &ImportBaseline,
    options: &ImportOptions<'_>,
    clock: Arc<dyn Clock>,
) -> Result<(UserDb, ImportReport), ImportError> {
    let (plain, was_protected) = plaintext(bytes, options)?;
    let size = plain.len() as u64;
    if size > MAX_USERDB_BYTES {
        return Err(ImportError::TooLarge {
            size,
            max: MAX_USERDB_BYTES,
        });
    }
    let mut conn = memory_connection(&plain)?;
    drop(plain);
    quick_check(&conn)?;
    let report = open::run(&mut conn, clock.as_ref(), Trust::Foreign)?;
    // After the ladder, so a file of any version is judged on its v6 registry.
    if let Some(collision) = crate::isolation::token_collisions(&conn)?
        .into_iter()
        .next()
    {
        return Err(ImportError::AppTokenCollision { collision });
    }

    let now = clock.timestamp();
    let tx = conn.transaction()?;
    let reconciled = reconcile_connections(&tx, &baseline.grants, &now)?;
    let dropped_runtime_contracts = if options.trusted_origin {
        Vec::new()
    } else {
        drop_unknown_contracts(&tx, &baseline.known_contracts)?
    };
    tx.execute(
        "INSERT OR REPLACE INTO snug_settings (key, value) VALUES (?1, ?2)",
        params![NEEDS_ENDPOINT_CONFIRM_KEY, encode_json(&Value::Bool(true))],
    )?;
    tx.commit()?;
    let import_report = ImportReport {
        was_protected,
        found_version: report.found_version,
        advanced: report.advanced,
        healed: report.heal,
        credentials_wiped: report.credentials_wiped,
        restored_grants: reconciled.restored,
        demoted_connections: reconciled.demoted,
        dropped_connections: reconciled.dropped,
        dropped_runtime_contracts,
    };
    Ok((UserDb::from_connection(conn, clock), import_report))
}

/// Checks `bytes` as an import would (everything up to and including migrate and heal, on a
/// scratch copy) without a local database; the bytes and any local state are untouched.
pub fn import_check(
    bytes: &[u8],
    options: &ImportOptions<'_>,
    clock: Arc<dyn Clock>,
) -> Result<ImportReport, ImportError> {
    import(bytes, None, options, clock).map(|(_, report)| report)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod baseline_tests;
