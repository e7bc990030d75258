//! The one place `snug.schema.v1` chooses a reason, and with it the gRPC code: `snug-schema`
//! errors to statuses.
//!
//! There is one exhaustive match per error enum of the domain crate, so a new variant does not
//! compile until someone picks its code, reason and metadata here. The matches produce a
//! [`Mapped`] rather than a `Status` so that ApplyOperations and Query can add the index of the
//! failing entry before the status is built.
//!
//! Failures of the host rather than of the file (SQLite I/O, the CSPRNG) are INTERNAL: logged
//! with their cause, reported with a generic message.

use snug_container::Corruption;
use snug_reasons::schema as reasons;
use snug_schema::{
    AppError, ChatError, DocError, ExportError, Hostility, ImportError, KvError, Malformation,
    OpenError, SaveError, ScrubError, TokenCollision,
};

use crate::reason::DOMAIN;

/// This service's ErrorInfo domain.
#[derive(Debug)]
pub enum SchemaDomain {}

impl snug_rpc::status::Domain for SchemaDomain {
    const DOMAIN: &'static str = DOMAIN;
}

/// A domain error with its code, reason and metadata chosen; becomes a `Status` via `From`.
pub type Mapped = snug_rpc::status::Mapped<SchemaDomain>;

fn schema_too_new(found: i64, supported: i64, message: String) -> Mapped {
    Mapped::new(
        &reasons::SCHEMA_TOO_NEW,
        message,
        [
            ("foundVersion", found.to_string()),
            ("supportedVersion", supported.to_string()),
        ],
    )
}

fn not_sqlite(message: String) -> Mapped {
    Mapped::new(&reasons::NOT_SQLITE, message, [])
}

fn not_a_user_database(message: String) -> Mapped {
    Mapped::new(&reasons::NOT_A_USER_DATABASE, message, [])
}

/// A damaged SQLite file; `detail` names the damage in snake_case.
fn malformed(problem: Option<&Malformation>, message: String) -> Mapped {
    let detail = match problem {
        Some(Malformation::TruncatedHeader { .. }) => "truncated_header",
        Some(Malformation::BadPageSize { .. }) => "bad_page_size",
        Some(Malformation::PartialPage { .. }) => "partial_page",
        Some(Malformation::UnsupportedFileFormat { .. }) => "unsupported_file_format",
        Some(Malformation::NegativeVersion { .. }) => "negative_version",
        Some(Malformation::QuickCheck { .. }) => "quick_check_failed",
        // SQLite itself reported the file corrupt or not a database.
        None => "unreadable",
    };
    Mapped::new(
        &reasons::MALFORMED,
        message,
        [("detail", detail.to_owned())],
    )
}

/// A hostile schema; `detail` names the kind of object and `object` the object.
fn hostile(problem: &Hostility, message: String) -> Mapped {
    let (detail, object) = match problem {
        Hostility::Trigger { name, .. } => ("trigger", name.clone()),
        Hostility::View { name } => ("view", name.clone()),
        Hostility::VirtualTable { name } => ("virtual_table", name.clone()),
        Hostility::ForeignIndex { name, .. } => ("foreign_index", name.clone()),
        Hostility::ForeignTable { name } => ("foreign_table", name.clone()),
        Hostility::ShapeMismatch { table, .. } => ("shape_mismatch", (*table).to_owned()),
    };
    Mapped::new(
        &reasons::HOSTILE_SCHEMA,
        message,
        [("detail", detail.to_owned()), ("object", object)],
    )
}

/// An image whose free space cannot be accounted for page by page: MALFORMED with detail
/// `free_space_unaccounted`, since zeroing by guesswork could destroy live records.
pub fn scrub_error(err: ScrubError) -> Mapped {
    let detail = match err {
        ScrubError::Header { .. } | ScrubError::Page { .. } => "free_space_unaccounted",
    };
    Mapped::new(
        &reasons::MALFORMED,
        err.to_string(),
        [("detail", detail.to_owned())],
    )
}

/// Maps a hub sync origin's refusal of an image (`snug_schema::validate_sync_image`): the same
/// reasons and metadata the sync service's writes refuse with.
pub fn sync_image_error(err: snug_schema::SyncImageError) -> Mapped {
    use snug_schema::SyncImageError as E;
    match err {
        E::ContainerNotAccepted => {
            Mapped::new(&reasons::CONTAINER_NOT_ACCEPTED, err.to_string(), [])
        }
        E::Open(err) => open_error(err),
        E::Import(err) => import_error(err),
        E::SecretsPresent { rows } => {
            let counted = rows.map_or_else(|| "unknown".to_owned(), |n| n.to_string());
            Mapped::new(
                &reasons::SECRETS_PRESENT,
                err.to_string(),
                [("secretRows", counted)],
            )
        }
        E::Scrub(err) => scrub_error(err),
        E::Stopped => Mapped::internal(&snug_schema::interrupted()),
    }
}

/// Two registered apps that share a token; metadata names both app ids and the token.
fn token_collision(collision: &TokenCollision, message: String) -> Mapped {
    Mapped::new(
        &reasons::APP_TOKEN_COLLISION,
        message,
        [
            ("appId", collision.app_id.clone()),
            ("otherAppId", collision.other_app_id.clone()),
            ("token", collision.token.clone()),
        ],
    )
}

/// Maps a failed open, create or migration.
pub fn open_error(err: OpenError) -> Mapped {
    let message = err.to_string();
    match &err {
        OpenError::NotSqlite => not_sqlite(message),
        OpenError::Protected => Mapped::new(
            &reasons::PROTECTED,
            "this Snug file is protected (SNUGENC1); unlock it with snug.container.v1 first — \
             the file is healthy",
            [],
        ),
        OpenError::Malformed { problem } => malformed(Some(problem), message),
        OpenError::Unreadable(_) => malformed(None, message),
        OpenError::NotAUserDatabase => not_a_user_database(message),
        OpenError::SchemaTooNew { found, supported } => schema_too_new(*found, *supported, message),
        OpenError::HostileSchema { problem } => hostile(problem, message),
        OpenError::AppTokenCollision { collision } => token_collision(collision, message),
        OpenError::Io { .. } | OpenError::Entropy(_) | OpenError::Sqlite(_) => {
            Mapped::internal(&err)
        }
    }
}

/// Maps a container problem met by an import: newer formats are unsupported, the rest damage.
fn corrupt_container(corruption: &Corruption, message: String) -> Mapped {
    let reason = match corruption {
        Corruption::UnsupportedVersion(_) | Corruption::UnsupportedKdf(_) => {
            &reasons::UNSUPPORTED_FORMAT_VERSION
        }
        // A KDF setting, not damage (§11.1); the range it was judged by goes with it.
        &Corruption::IterationsOutOfRange {
            iterations,
            min,
            max,
        } => {
            return Mapped::new(
                &reasons::ITERATIONS_OUT_OF_POLICY,
                message,
                [
                    ("iterations", iterations.to_string()),
                    ("minIterations", min.to_string()),
                    ("maxIterations", max.to_string()),
                ],
            );
        }
        Corruption::NotAContainer
        | Corruption::TruncatedHeader
        | Corruption::ImplausibleSlotCount(_)
        | Corruption::TruncatedBody
        | Corruption::HeaderChecksumMismatch { .. }
        | Corruption::ZeroIterations
        | Corruption::PayloadAuthenticationFailed => &reasons::CORRUPT_CONTAINER,
    };
    Mapped::new(reason, message, [("detail", corruption.code().to_owned())])
}

/// Maps a refused import (and import check).
pub fn import_error(err: ImportError) -> Mapped {
    let message = err.to_string();
    match &err {
        ImportError::Locked => Mapped::new(
            &reasons::LOCKED,
            "this Snug file is protected and no supplied secret opened it; the file is healthy — \
             try the passphrase or the recovery key",
            [],
        ),
        ImportError::CorruptContainer(corruption) => corrupt_container(corruption, message),
        ImportError::TooLarge { max, .. } => Mapped::too_large(message, *max),
        ImportError::NotSqlite => not_sqlite(message),
        ImportError::Malformed { problem } => malformed(Some(problem), message),
        ImportError::Unreadable(_) => malformed(None, message),
        ImportError::NotAUserDatabase => not_a_user_database(message),
        ImportError::SchemaTooNew { found, supported } => {
            schema_too_new(*found, *supported, message)
        }
        ImportError::HostileSchema { problem } => hostile(problem, message),
        ImportError::AppTokenCollision { collision } => token_collision(collision, message),
        ImportError::Entropy(_) | ImportError::Sqlite(_) => Mapped::internal(&err),
    }
}

/// Maps a failed export.
pub fn export_error(err: ExportError) -> Mapped {
    match err {
        ExportError::Source(open) => open_error(open),
        ExportError::TooLarge { max, .. } => Mapped::too_large(err.to_string(), max),
        // The service exports to bytes; a path-related failure here is a bug.
        ExportError::OutputExists { .. }
        | ExportError::Io { .. }
        | ExportError::Sqlite(_)
        | ExportError::Scrub(_) => Mapped::internal(&err),
    }
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
