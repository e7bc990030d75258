//! ImportUserDatabase: receives the incoming file (and the hub's current file, when that is the
//! baseline), builds the [`ImportBaseline`] the request names, and hands both to
//! `snug_schema::import_against`, the import the Rust library's pull runs too.

use std::{collections::HashSet, sync::Arc};

use snug_proto::schema::v1::{self as pb, import_user_database_header::Local};
use snug_rpc::{
    budget::{Admission, UploadBudget},
    chunks::Receiver,
};
use snug_schema::{
    ApprovedGrant, Clock, ImportBaseline, ImportOptions, ImportReport, MAX_USERDB_BYTES, UserDb,
};
use tonic::{Status, Streaming};

use crate::{
    compacted_image, container_limits, error_info, secrets,
    status::{self, Mapped},
};

/// The largest incoming file: a container may exceed the plaintext cap by its own overhead.
fn incoming_limit() -> u64 {
    container_limits().max_container_len()
}

/// Receives the header and both files' bytes. The lengths are checked against their caps before
/// any chunk is read, and against what arrived once the stream ends.
pub(crate) async fn receive(
    stream: &mut Streaming<pb::ImportUserDatabaseRequest>,
    budget: &UploadBudget,
) -> Result<(pb::ImportUserDatabaseHeader, Vec<u8>, Admission), Status> {
    let limit = incoming_limit() + MAX_USERDB_BYTES;
    let (header, mut receiver) = Receiver::start(
        stream,
        error_info::DOMAIN,
        limit, // The two lengths are checked below under their own names; the upload cap still holds.
        budget,
        |_| None,
    )
    .await?;
    if header.incoming_length > incoming_limit() {
        return Err(snug_rpc::status::too_large(
            error_info::DOMAIN,
            incoming_limit(),
        ));
    }
    let current_length = current_length(&header);
    if current_length > MAX_USERDB_BYTES {
        return Err(snug_rpc::status::too_large(
            error_info::DOMAIN,
            MAX_USERDB_BYTES,
        ));
    }
    let total = header.incoming_length + current_length;
    let mut bytes = Vec::with_capacity(total as usize);
    while let Some(chunk) = receiver.next_chunk().await? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 > total {
            break;
        }
    }
    if bytes.len() as u64 != total {
        let field = match header.local {
            Some(Local::CurrentFileLength(_)) => "header.current_file_length",
            _ => "header.incoming_length",
        };
        return Err(Mapped::invalid_argument(
            field,
            format!(
                "the header declared {total} bytes (the incoming file, then the current one) \
                 but {} arrived",
                bytes.len()
            ),
        )
        .into());
    }
    Ok((header, bytes, receiver.into_admission()))
}

fn current_length(header: &pb::ImportUserDatabaseHeader) -> u64 {
    match header.local {
        Some(Local::CurrentFileLength(length)) => length,
        Some(Local::Approvals(_)) | None => 0,
    }
}

/// A baseline from the grants and contracts a hub sent instead of its file.
fn given_baseline(approvals: pb::LocalApprovals) -> Result<ImportBaseline, Mapped> {
    let mut keys = HashSet::new();
    let mut grants = Vec::with_capacity(approvals.grants.len());
    for (index, grant) in approvals.grants.into_iter().enumerate() {
        let field = || format!("header.approvals.grants[{index}]");
        if grant.app_id.is_empty() || grant.slot.is_empty() {
            return Err(Mapped::invalid_argument(
                field(),
                "a grant needs its app_id and slot",
            ));
        }
        if !keys.insert((grant.app_id.clone(), grant.slot.clone())) {
            return Err(Mapped::invalid_argument(
                field(),
                format!(
                    "a second grant for app {} slot {}; a database holds one per pair",
                    grant.app_id, grant.slot
                ),
            ));
        }
        grants.push(ApprovedGrant {
            app_id: grant.app_id,
            slot: grant.slot,
            requirement_json: grant.requirement_json,
            allowed_hosts: grant.allowed_hosts,
            approved_at: grant.approved_at,
            requirement_version: grant.requirement_version,
        });
    }
    let contracts = approvals
        .runtime_contracts_json
        .iter()
        .enumerate()
        .map(|(index, raw)| {
            serde_json::from_str::<serde_json::Value>(raw).map_err(|_| {
                Mapped::invalid_argument(
                    format!("header.approvals.runtime_contracts_json[{index}]"),
                    "a runtime contract the hub holds must be JSON text",
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ImportBaseline::new(grants, contracts))
}

/// Imports the incoming file against the baseline the header names and returns the report and
/// the reconciled image (compacted when its version advanced, as a migration's is).
pub(crate) fn run(
    header: pb::ImportUserDatabaseHeader,
    bytes: Vec<u8>,
    clock: Arc<dyn Clock>,
) -> Result<(ImportReport, Vec<u8>), Mapped> {
    // `receive` checked that the lengths add up to what arrived.
    let (incoming, current) = usize::try_from(header.incoming_length)
        .ok()
        .and_then(|at| bytes.split_at_checked(at))
        .ok_or_else(|| {
            Mapped::invalid_argument(
                "header.incoming_length",
                "the incoming file is longer than what arrived",
            )
        })?;
    let baseline = match header.local {
        None => ImportBaseline::default(),
        Some(Local::CurrentFileLength(_)) => {
            let (db, _) = UserDb::from_bytes(current, clock.clone())
                .map_err(|err| status::refused(err).with("file", "current".to_owned()))?;
            ImportBaseline::of(&db)
                .map_err(|err| status::refused(err).with("file", "current".to_owned()))?
        }
        Some(Local::Approvals(approvals)) => given_baseline(approvals)?,
    };
    let secrets = secrets(header.secrets);
    let options = ImportOptions {
        secrets: Some(&secrets),
        trusted_origin: header.trusted_origin,
        container_limits: container_limits(),
    };
    let (mut db, report) = snug_schema::import_against(incoming, &baseline, &options, clock)
        .map_err(|err| status::refused(err).with("file", "incoming".to_owned()))?;
    drop(bytes);
    let image = if report.advanced {
        compacted_image(&mut db)?
    } else {
        db.to_bytes().map_err(|err| Mapped::internal(&err))?
    };
    if image.len() as u64 > MAX_USERDB_BYTES {
        return Err(Mapped::too_large(
            format!(
                "the reconciled database is {} bytes, over the {MAX_USERDB_BYTES}-byte cap",
                image.len()
            ),
            MAX_USERDB_BYTES,
        ));
    }
    Ok((report, image))
}
