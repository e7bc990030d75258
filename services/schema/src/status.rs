//! The one place `snug.schema.v1` chooses a reason, and with it the gRPC code: `snug-schema`
//! errors to statuses.
//!
//! The refusals of opening, importing, exporting and syncing a user database state their reason
//! and metadata themselves (`snug_reasons::Reasoned`, in the domain crate), since the sync
//! service and the CLI report them too: [`refused`] sends them as they are. The rest have one
//! exhaustive match per error enum here, so a new variant does not compile until someone picks
//! its code, reason and metadata. The mappings produce a
//! [`Mapped`] rather than a `Status` so that ApplyOperations and Query can add the index of the
//! failing entry before the status is built.
//!
//! Failures of the host rather than of the file (SQLite I/O, the CSPRNG) are INTERNAL: logged
//! with their cause, reported with a generic message.

use snug_reasons::{Reasoned, schema as reasons};
use snug_schema::{AppError, ChatError, DocError, KvError, SaveError};

use crate::error_info::DOMAIN;

/// This service's ErrorInfo domain.
#[derive(Debug)]
pub enum SchemaDomain {}

impl snug_rpc::status::Domain for SchemaDomain {
    const DOMAIN: &'static str = DOMAIN;
}

/// A domain error with its code, reason and metadata chosen; becomes a `Status` via `From`.
pub type Mapped = snug_rpc::status::Mapped<SchemaDomain>;

/// Maps a refusal of opening, importing, exporting or syncing a user database: the reason and
/// metadata its domain error states (`snug_schema`'s `reasoned.rs`), the same on every surface.
pub fn refused(err: impl Reasoned) -> Mapped {
    Mapped::refused(&err)
}

/// Maps a failed save. The service never saves to a path, so every cause is internal.
pub fn save_error(err: SaveError) -> Mapped {
    match err {
        SaveError::Io { .. } | SaveError::Sqlite(_) => Mapped::internal(&err),
    }
}

/// Maps a failed app or app-version operation.
pub fn app_error(err: AppError) -> Mapped {
    let message = err.to_string();
    match &err {
        AppError::AppNotFound { app_id } => Mapped::new(
            &reasons::APP_NOT_FOUND,
            message,
            [("appId", app_id.clone())],
        ),
        AppError::VersionNotFound { app_id, version } => Mapped::new(
            &reasons::VERSION_NOT_FOUND,
            message,
            [("appId", app_id.clone()), ("version", version.to_string())],
        ),
        AppError::VersionPinned { app_id, version } => Mapped::new(
            &reasons::VERSION_PINNED,
            message,
            [("appId", app_id.clone()), ("version", version.to_string())],
        ),
        AppError::VersionCurrent { app_id, version } => Mapped::new(
            &reasons::VERSION_CURRENT,
            message,
            [("appId", app_id.clone()), ("version", version.to_string())],
        ),
        AppError::NoFactoryVersion { app_id } => Mapped::new(
            &reasons::NO_FACTORY_VERSION,
            message,
            [("appId", app_id.clone())],
        ),
        AppError::AppExists { app_id } => {
            Mapped::new(&reasons::APP_EXISTS, message, [("appId", app_id.clone())])
        }
        AppError::AppTokenCollision {
            app_id,
            other_app_id,
        } => Mapped::new(
            &reasons::APP_TOKEN_COLLISION,
            message,
            [
                ("appId", app_id.clone()),
                ("otherAppId", other_app_id.clone()),
                ("token", snug_schema::app_data_token(app_id)),
            ],
        ),
        AppError::InvalidContract => Mapped::new(&reasons::INVALID_CONTRACT, message, []),
        AppError::TooLarge { max, .. } => Mapped::too_large(message, *max),
        AppError::Entropy(_) | AppError::Sqlite(_) => Mapped::internal(&err),
    }
}

/// Maps a failed chat operation.
pub fn chat_error(err: ChatError) -> Mapped {
    let message = err.to_string();
    match &err {
        ChatError::ThreadNotFound { thread_id } => Mapped::new(
            &reasons::THREAD_NOT_FOUND,
            message,
            [("threadId", thread_id.clone())],
        ),
        ChatError::MessageNotFound { id } => Mapped::new(
            &reasons::MESSAGE_NOT_FOUND,
            message,
            [("messageId", id.to_string())],
        ),
        ChatError::UnknownRole { id, .. } => Mapped::new(
            &reasons::CORRUPT_ROW,
            message,
            [
                ("table", "snug_chat_messages".to_owned()),
                ("key", id.to_string()),
            ],
        ),
        ChatError::TooLarge { max, .. } => Mapped::too_large(message, *max),
        ChatError::Sqlite(_) => Mapped::internal(&err),
    }
}

/// Maps a failed doc operation.
pub fn doc_error(err: DocError) -> Mapped {
    let message = err.to_string();
    match &err {
        DocError::DocNotFound { app_id, slug } => Mapped::new(
            &reasons::DOC_NOT_FOUND,
            message,
            [("appId", app_id.clone()), ("slug", slug.clone())],
        ),
        DocError::TooLarge { max, .. } => Mapped::too_large(message, *max),
        DocError::Sqlite(_) => Mapped::internal(&err),
    }
}

/// Maps a failed key/value operation (settings, profile, sync config, secrets).
pub fn kv_error(err: KvError) -> Mapped {
    let message = err.to_string();
    match &err {
        KvError::NotJson { table, key } | KvError::UnexpectedType { table, key } => Mapped::new(
            &reasons::CORRUPT_ROW,
            message,
            [("table", (*table).to_owned()), ("key", key.clone())],
        ),
        KvError::TooLarge { max, .. } => Mapped::too_large(message, *max),
        KvError::Sqlite(_) => Mapped::internal(&err),
    }
}
