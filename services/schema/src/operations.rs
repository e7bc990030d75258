//! ApplyOperations and Query: hub-namespace writes and reads on an opened [`UserDb`].
//!
//! Each function handles one entry and returns its result or a [`Mapped`] error carrying the
//! entry's index. All-or-nothing needs no transaction here: the database is an in-memory copy of
//! the caller's bytes, and on the first error the copy is dropped unreturned.

use serde_json::Value;
use snug_proto::schema::v1::{
    self as pb, operation::Operation as Op, operation_result::Result as OpResult,
    query_result::Result as QueryAnswer, read_query::Query as Read,
};
use snug_schema::{
    AppMetaUpdate, ChatRole, ContractSource, DocSeed, KvTable, NewApp, NewChatMessage, SaveVersion,
    UserDb, encode_json,
};

use crate::{
    convert,
    status::{self, Mapped},
};

/// Parses a JSON text value from a request field.
fn json(text: &str, field: impl FnOnce() -> String) -> Result<Value, Mapped> {
    serde_json::from_str(text)
        .map_err(|err| Mapped::invalid_argument(field(), format!("not JSON text: {err}")))
}

/// Fails with APP_NOT_FOUND unless the app exists. Docs and the model preference are keyed by
/// app id without a foreign key; refusing an unknown app keeps orphan rows out of the file.
fn require_app(db: &UserDb, app_id: &str) -> Result<(), Mapped> {
    db.app(app_id).map(|_| ()).map_err(status::app_error)
}

fn done() -> pb::Done {
    pb::Done {}
}

/// Applies operation `index` and returns its result; an error names the index in metadata
/// `operation`.
pub(crate) fn apply(
    db: &mut UserDb,
    index: usize,
    operation: pb::Operation,
) -> Result<pb::OperationResult, Mapped> {
    let Some(op) = operation.operation else {
        return Err(Mapped::invalid_argument(
            format!("header.operations[{index}]"),
            "an operation with no kind set",
        )
        .with("operation", index.to_string()));
    };
    let field = |rest: &str| format!("header.operations[{index}].{rest}");
    match run(db, field, op) {
        Ok(result) => Ok(pb::OperationResult {
            result: Some(result),
        }),
        Err(mapped) => Err(mapped.with("operation", index.to_string())),
    }
}

/// The identifiers an operation names, by field: each is bounded before the operation runs.
fn op_identifiers(op: &Op) -> Vec<(&'static str, &str)> {
    let mut named = match op {
        Op::InstallApp(o) => o.app_id.iter().map(|id| ("app_id", id.as_str())).collect(),
        Op::SaveAppVersion(o) => vec![("app_id", o.app_id.as_str())],
        Op::RevertApp(o) => vec![("app_id", o.app_id.as_str())],
        Op::ResetToFactory(o) => vec![("app_id", o.app_id.as_str())],
        Op::DeleteAppVersion(o) => vec![("app_id", o.app_id.as_str())],
        Op::UpdateAppMeta(o) => vec![("app_id", o.app_id.as_str())],
        Op::DeleteApp(o) => vec![("app_id", o.app_id.as_str())],
        Op::SeedDocs(o) => vec![("app_id", o.app_id.as_str())],
        Op::UpsertDoc(o) => vec![("app_id", o.app_id.as_str()), ("slug", o.slug.as_str())],
        Op::DeleteDoc(o) => vec![("app_id", o.app_id.as_str()), ("slug", o.slug.as_str())],
        Op::AppendChatMessage(o) => vec![("thread_id", o.thread_id.as_str())],
        Op::PruneChatMessages(o) => vec![("thread_id", o.thread_id.as_str())],
        Op::DeleteChatThread(o) => vec![("thread_id", o.thread_id.as_str())],
        Op::SetSetting(o) => vec![("key", o.key.as_str())],
        Op::DeleteSetting(o) => vec![("key", o.key.as_str())],
        Op::SetProfile(o) => vec![("key", o.key.as_str())],
        Op::SetSyncConfig(o) => vec![("key", o.key.as_str())],
        Op::SetAppModel(o) => vec![("app_id", o.app_id.as_str())],
        Op::SetSecret(o) => vec![("key", o.key.as_str())],
        Op::DeleteSecret(o) => vec![("key", o.key.as_str())],
        Op::PinChatMessage(_) | Op::SetSidecarIdentityDirectory(_) => Vec::new(),
    };
    match op {
        Op::SeedDocs(o) => named.extend(o.seeds.iter().map(|d| ("seeds.slug", d.slug.as_str()))),
        Op::AppendChatMessage(o) => named.extend(o.app_id.iter().map(|id| ("app_id", id.as_str()))),
        _ => {}
    }
    named
}

/// The identifiers a read names, by field.
fn read_identifiers(read: &Read) -> Vec<(&'static str, &str)> {
    match read {
        Read::GetApp(r) => vec![("app_id", r.app_id.as_str())],
        Read::ListAppVersions(r) => vec![("app_id", r.app_id.as_str())],
        Read::GetAppVersion(r) => vec![("app_id", r.app_id.as_str())],
        Read::GetDoc(r) => vec![("app_id", r.app_id.as_str()), ("slug", r.slug.as_str())],
        Read::ListDocs(r) => vec![("app_id", r.app_id.as_str())],
        Read::ListChatThreads(r) => r.app_id.iter().map(|id| ("app_id", id.as_str())).collect(),
        Read::ListChatMessages(r) => vec![("thread_id", r.thread_id.as_str())],
        Read::GetSetting(r) => vec![("key", r.key.as_str())],
        _ => Vec::new(),
    }
}

fn run(db: &mut UserDb, field: impl Fn(&str) -> String, op: Op) -> Result<OpResult, Mapped> {
    for (name, value) in op_identifiers(&op) {
        Mapped::identifier(field(name), value)?;
    }
    Ok(match op {
        Op::InstallApp(install) => {
            let new = NewApp {
                app_id: install.app_id,
                display_name: install.display_name,
                description: install.description,
                icon_emoji: install.icon_emoji,
                icon_color: install.icon_color,
                uses_db: install.uses_db,
                html: install.html,
                note: install.note,
                install_source: install.install_source,
            };
            let installed = db.install_app(&new).map_err(status::app_error)?;
            OpResult::InstallApp(pb::InstallAppResult {
                app_id: installed.app_id,
                created: installed.created,
            })
        }
        Op::SaveAppVersion(save) => {
            use pb::save_app_version::Contract;
            let contract = match save.contract {
                None => ContractSource::CopyForward,
                Some(Contract::CopyFromVersion(version)) => ContractSource::CopyFrom(version),
                // Text that is not JSON is as much "not a JSON object" as a JSON array is.
                Some(Contract::SetJson(text)) => match serde_json::from_str(&text) {
                    Ok(value) => ContractSource::Set(value),
                    Err(_) => {
                        return Err(status::app_error(snug_schema::AppError::InvalidContract));
                    }
                },
                Some(Contract::Clear(_)) => ContractSource::Clear,
            };
            let options = SaveVersion {
                note: save.note,
                pinned: save.pinned,
                contract,
            };
            let version = db
                .save_app_version(&save.app_id, &save.html, &options)
                .map_err(status::app_error)?;
            OpResult::SaveAppVersion(pb::NewVersion { version })
        }
        Op::RevertApp(revert) => {
            let version = db
                .revert_app(&revert.app_id, revert.to_version)
                .map_err(status::app_error)?;
            OpResult::RevertApp(pb::NewVersion { version })
        }
        Op::ResetToFactory(reset) => {
            let version = db
                .reset_to_factory(&reset.app_id)
                .map_err(status::app_error)?;
            OpResult::ResetToFactory(pb::NewVersion { version })
        }
        Op::DeleteAppVersion(delete) => {
            db.delete_app_version(&delete.app_id, delete.version)
                .map_err(status::app_error)?;
            OpResult::DeleteAppVersion(done())
        }
        Op::UpdateAppMeta(update) => {
            let change = AppMetaUpdate {
                display_name: update.display_name,
                description: update.description.map(|u| u.value),
                icon_emoji: update.icon_emoji.map(|u| u.value),
                icon_color: update.icon_color.map(|u| u.value),
                uses_db: update.uses_db,
            };
            let app = db
                .update_app_meta(&update.app_id, &change)
                .map_err(status::app_error)?;
            OpResult::UpdateAppMeta(convert::app(app))
        }
        Op::DeleteApp(delete) => {
            let deleted = db.delete_app(&delete.app_id).map_err(status::app_error)?;
            OpResult::DeleteApp(pb::DeleteAppResult {
                tables_dropped: deleted.tables_dropped,
                rows_deleted: deleted.rows_deleted as u64,
                secrets_deleted: deleted.secrets_deleted as u64,
                settings_deleted: deleted.settings_deleted as u64,
                sidecar_directory_wiped: deleted.sidecar_directory_wiped,
            })
        }
        Op::SeedDocs(seed) => {
            require_app(db, &seed.app_id)?;
            let seeds: Vec<DocSeed> = seed
                .seeds
                .into_iter()
                .map(|s| DocSeed {
                    slug: s.slug,
                    title: s.title,
                    content: s.content,
                })
                .collect();
            let inserted = db
                .seed_docs_absent_only(&seed.app_id, &seeds)
                .map_err(status::doc_error)?;
            OpResult::SeedDocs(pb::Count {
                count: inserted as u64,
            })
        }
        Op::UpsertDoc(upsert) => {
            require_app(db, &upsert.app_id)?;
            db.upsert_doc(
                &upsert.app_id,
                &upsert.slug,
                upsert.title.as_deref(),
                &upsert.content,
            )
            .map_err(status::doc_error)?;
            OpResult::UpsertDoc(done())
        }
        Op::DeleteDoc(delete) => {
            db.delete_doc(&delete.app_id, &delete.slug)
                .map_err(status::doc_error)?;
            OpResult::DeleteDoc(done())
        }
        Op::AppendChatMessage(append) => {
            let role = match pb::ChatRole::try_from(append.role) {
                Ok(pb::ChatRole::User) => ChatRole::User,
                Ok(pb::ChatRole::Assistant) => ChatRole::Assistant,
                Ok(pb::ChatRole::System) => ChatRole::System,
                Ok(pb::ChatRole::Unspecified) | Err(_) => {
                    return Err(Mapped::invalid_argument(
                        field("append_chat_message.role"),
                        "the role must be user, assistant or system",
                    ));
                }
            };
            let meta = match &append.meta_json {
                Some(text) => Some(json(text, || field("append_chat_message.meta_json"))?),
                None => None,
            };
            let message = NewChatMessage {
                thread_id: append.thread_id,
                app_id: append.app_id,
                title: append.title,
                role,
                content: append.content,
                pinned: append.pinned,
                meta,
            };
            let message_id = db
                .append_chat_message(&message)
                .map_err(status::chat_error)?;
            OpResult::AppendChatMessage(pb::NewMessage { message_id })
        }
        Op::PruneChatMessages(prune) => {
            let deleted = db
                .prune_chat_messages(&prune.thread_id, prune.keep_unpinned as usize)
                .map_err(status::chat_error)?;
            OpResult::PruneChatMessages(pb::Count {
                count: deleted as u64,
            })
        }
        Op::PinChatMessage(pin) => {
            db.pin_chat_message(pin.message_id, pin.pinned)
                .map_err(status::chat_error)?;
            OpResult::PinChatMessage(done())
        }
        Op::DeleteChatThread(delete) => {
            let deleted = db
                .delete_chat_thread(&delete.thread_id)
                .map_err(status::chat_error)?;
            OpResult::DeleteChatThread(pb::Count {
                count: deleted as u64,
            })
        }
        Op::SetSetting(set) => {
            let value = json(&set.value_json, || field("set_setting.value_json"))?;
            db.set_setting(&set.key, &value).map_err(status::kv_error)?;
            OpResult::SetSetting(done())
        }
        Op::DeleteSetting(delete) => {
            let existed = db.delete_setting(&delete.key).map_err(status::kv_error)?;
            OpResult::DeleteSetting(pb::Existed { existed })
        }
        Op::SetProfile(set) => {
            let value = json(&set.value_json, || field("set_profile.value_json"))?;
            db.set_profile(&set.key, &value).map_err(status::kv_error)?;
            OpResult::SetProfile(done())
        }
        Op::SetSyncConfig(set) => {
            let value = json(&set.value_json, || field("set_sync_config.value_json"))?;
            db.set_sync_config(&set.key, &value)
                .map_err(status::kv_error)?;
            OpResult::SetSyncConfig(done())
        }
        Op::SetAppModel(set) => {
            require_app(db, &set.app_id)?;
            db.set_app_model(&set.app_id, set.model.as_deref())
                .map_err(status::kv_error)?;
            OpResult::SetAppModel(done())
        }
        Op::SetSidecarIdentityDirectory(set) => {
            db.set_sidecar_identity_directory(&set.identities)
                .map_err(status::kv_error)?;
            OpResult::SetSidecarIdentityDirectory(done())
        }
        Op::SetSecret(set) => {
            db.set_secret(&set.key, &set.value)
                .map_err(status::kv_error)?;
            OpResult::SetSecret(done())
        }
        Op::DeleteSecret(delete) => {
            let existed = db.delete_secret(&delete.key).map_err(status::kv_error)?;
            OpResult::DeleteSecret(pb::Existed { existed })
        }
    })
}

fn entries(db: &UserDb, table: KvTable) -> Result<pb::EntryList, Mapped> {
    let entries = db.kv_entries(table).map_err(status::kv_error)?;
    Ok(pb::EntryList {
        entries: entries
            .into_iter()
            .map(|(key, value)| pb::Entry {
                key,
                value_json: encode_json(&value),
            })
            .collect(),
    })
}

/// Answers query `index`; an error names the index in metadata `query`.
pub(crate) fn answer(
    db: &UserDb,
    index: usize,
    query: pb::ReadQuery,
) -> Result<pb::QueryResult, Mapped> {
    let result = match query.query {
        Some(read) => read_identifiers(&read)
            .into_iter()
            .try_for_each(|(name, value)| {
                Mapped::identifier(format!("header.queries[{index}].{name}"), value)
            })
            .and_then(|()| read_one(db, read)),
        None => Err(Mapped::invalid_argument(
            format!("header.queries[{index}]"),
            "a query with no kind set",
        )),
    };
    match result {
        Ok(result) => Ok(pb::QueryResult {
            result: Some(result),
        }),
        Err(mapped) => Err(mapped.with("query", index.to_string())),
    }
}

fn read_one(db: &UserDb, read: Read) -> Result<QueryAnswer, Mapped> {
    Ok(match read {
        Read::ListApps(_) => QueryAnswer::ListApps(pb::AppList {
            apps: db
                .apps()
                .map_err(status::app_error)?
                .into_iter()
                .map(convert::app)
                .collect(),
        }),
        Read::GetApp(get) => QueryAnswer::GetApp(convert::app(
            db.app(&get.app_id).map_err(status::app_error)?,
        )),
        Read::ListAppVersions(list) => QueryAnswer::ListAppVersions(pb::VersionList {
            versions: db
                .app_versions(&list.app_id)
                .map_err(status::app_error)?
                .into_iter()
                .map(convert::version_summary)
                .collect(),
        }),
        Read::GetAppVersion(get) => {
            let version = match get.version {
                Some(version) => db.app_version(&get.app_id, version),
                None => db.current_app_version(&get.app_id),
            }
            .map_err(status::app_error)?;
            QueryAnswer::GetAppVersion(convert::app_version(version))
        }
        Read::GetDoc(get) => QueryAnswer::GetDoc(convert::doc(
            db.doc(&get.app_id, &get.slug).map_err(status::doc_error)?,
        )),
        Read::ListDocs(list) => QueryAnswer::ListDocs(pb::DocList {
            docs: db
                .docs(&list.app_id)
                .map_err(status::doc_error)?
                .into_iter()
                .map(convert::doc)
                .collect(),
        }),
        Read::ListChatThreads(list) => QueryAnswer::ListChatThreads(pb::ChatThreadList {
            threads: db
                .chat_threads(list.app_id.as_deref())
                .map_err(status::chat_error)?
                .into_iter()
                .map(convert::chat_thread)
                .collect(),
        }),
        Read::ListChatMessages(list) => {
            let after = list.after_id.unwrap_or(i64::MIN);
            let mut page: Vec<pb::ChatMessage> = db
                .chat_messages(&list.thread_id)
                .map_err(status::chat_error)?
                .into_iter()
                .filter(|m| m.id > after)
                .map(convert::chat_message)
                .collect();
            let limit = match list.limit {
                0 => usize::MAX,
                n => n as usize,
            };
            let more = page.len() > limit;
            page.truncate(limit);
            QueryAnswer::ListChatMessages(pb::ChatMessageList {
                messages: page,
                more,
            })
        }
        Read::GetSetting(get) => QueryAnswer::GetSetting(pb::SettingValue {
            value_json: db
                .setting(&get.key)
                .map_err(status::kv_error)?
                .map(|value| encode_json(&value)),
        }),
        Read::ListSettings(_) => QueryAnswer::ListSettings(entries(db, KvTable::Settings)?),
        Read::ListProfile(_) => QueryAnswer::ListProfile(entries(db, KvTable::Profile)?),
        Read::ListSyncConfig(_) => QueryAnswer::ListSyncConfig(entries(db, KvTable::Sync)?),
        Read::ListSecretKeys(_) => QueryAnswer::ListSecretKeys(pb::KeyList {
            keys: db.secret_keys().map_err(status::kv_error)?,
        }),
    })
}
