//! How the refusals of opening, importing, exporting and syncing a user database are reported:
//! each error's reason and metadata ([`Reasoned`]), chosen once here for every surface.
//!
//! The schema service sends these as they are, the sync service sends the same for an image it
//! refuses to store (issue 37: it validates what it stores), and the CLI reads the reason's name;
//! none of them chooses a reason of its own for these errors. Metadata keys are lowerCamel, as
//! `ErrorInfo.metadata` spells them; `detail` names the damage or the kind of hostile object in
//! snake_case.

use snug_container::Corruption;
use snug_reasons::{Reason, Reasoned, cli, container, rpc, schema};

use crate::{
    ExportError, Hostility, ImportError, Malformation, OpenError, ScrubError, SyncImageError,
    isolation::TokenCollision,
};

/// Whatever the cause, a service reports it with this message: the file is healthy.
const PROTECTED_MESSAGE: &str = "this Snug file is protected (SNUGENC1); unlock it with \
     snug.container.v1 first — the file is healthy";

/// What a caller who supplied no working secret is told.
const LOCKED_MESSAGE: &str = "this Snug file is protected and no supplied secret opened it; the \
     file is healthy — try the passphrase or the recovery key";

fn malformed(problem: Option<&Malformation>) -> Vec<(&'static str, String)> {
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
    vec![("detail", detail.to_owned())]
}

fn hostile(problem: &Hostility) -> Vec<(&'static str, String)> {
    let (detail, object) = match problem {
        Hostility::Trigger { name, .. } => ("trigger", name.clone()),
        Hostility::View { name } => ("view", name.clone()),
        Hostility::VirtualTable { name } => ("virtual_table", name.clone()),
        Hostility::ForeignIndex { name, .. } => ("foreign_index", name.clone()),
        Hostility::ForeignTable { name } => ("foreign_table", name.clone()),
        Hostility::ShapeMismatch { table, .. } => ("shape_mismatch", (*table).to_owned()),
    };
    vec![("detail", detail.to_owned()), ("object", object)]
}

fn schema_too_new(found: i64, supported: i64) -> Vec<(&'static str, String)> {
    vec![
        ("foundVersion", found.to_string()),
        ("supportedVersion", supported.to_string()),
    ]
}

fn token_collision(collision: &TokenCollision) -> Vec<(&'static str, String)> {
    vec![
        ("appId", collision.app_id.clone()),
        ("otherAppId", collision.other_app_id.clone()),
        ("token", collision.token.clone()),
    ]
}

fn limit(max: u64) -> Vec<(&'static str, String)> {
    vec![("limit", max.to_string())]
}

/// A container met by an import: a newer format is unsupported, a KDF setting out of policy is
/// a setting (§11.1), the rest is damage.
fn corrupt_container(corruption: &Corruption) -> &'static Reason {
    match corruption {
        Corruption::UnsupportedVersion(_) | Corruption::UnsupportedKdf(_) => {
            &container::UNSUPPORTED_FORMAT_VERSION
        }
        Corruption::IterationsOutOfRange { .. } => &container::ITERATIONS_OUT_OF_POLICY,
        Corruption::NotAContainer
        | Corruption::TruncatedHeader
        | Corruption::ImplausibleSlotCount(_)
        | Corruption::TruncatedBody
        | Corruption::HeaderChecksumMismatch { .. }
        | Corruption::ZeroIterations
        | Corruption::PayloadAuthenticationFailed => &schema::CORRUPT_CONTAINER,
    }
}

fn corrupt_container_metadata(corruption: &Corruption) -> Vec<(&'static str, String)> {
    match *corruption {
        Corruption::IterationsOutOfRange {
            iterations,
            min,
            max,
        } => vec![
            ("iterations", iterations.to_string()),
            ("minIterations", min.to_string()),
            ("maxIterations", max.to_string()),
        ],
        _ => vec![("detail", corruption.code().to_owned())],
    }
}

impl Reasoned for OpenError {
    fn reason(&self) -> &'static Reason {
        match self {
            OpenError::NotSqlite => &schema::NOT_SQLITE,
            OpenError::Protected => &schema::PROTECTED,
            OpenError::Malformed { .. } | OpenError::Unreadable(_) => &schema::MALFORMED,
            OpenError::NotAUserDatabase => &container::NOT_A_USER_DATABASE,
            OpenError::SchemaTooNew { .. } => &schema::SCHEMA_TOO_NEW,
            OpenError::HostileSchema { .. } => &schema::HOSTILE_SCHEMA,
            OpenError::AppTokenCollision { .. } => &schema::APP_TOKEN_COLLISION,
            OpenError::Io { .. } => &cli::IO,
            OpenError::Entropy(_) => &cli::ENTROPY_UNAVAILABLE,
            OpenError::Sqlite(_) => &cli::STORAGE,
        }
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            OpenError::Malformed { problem } => malformed(Some(problem)),
            OpenError::Unreadable(_) => malformed(None),
            OpenError::SchemaTooNew { found, supported } => schema_too_new(*found, *supported),
            OpenError::HostileSchema { problem } => hostile(problem),
            OpenError::AppTokenCollision { collision } => token_collision(collision),
            OpenError::NotSqlite
            | OpenError::Protected
            | OpenError::NotAUserDatabase
            | OpenError::Io { .. }
            | OpenError::Entropy(_)
            | OpenError::Sqlite(_) => Vec::new(),
        }
    }

    fn message(&self) -> String {
        match self {
            OpenError::Protected => PROTECTED_MESSAGE.to_owned(),
            _ => self.to_string(),
        }
    }
}

impl Reasoned for ImportError {
    fn reason(&self) -> &'static Reason {
        match self {
            ImportError::Locked => &container::LOCKED,
            ImportError::CorruptContainer(corruption) => corrupt_container(corruption),
            ImportError::TooLarge { .. } => &rpc::TOO_LARGE,
            ImportError::NotSqlite => &schema::NOT_SQLITE,
            ImportError::Malformed { .. } | ImportError::Unreadable(_) => &schema::MALFORMED,
            ImportError::NotAUserDatabase => &container::NOT_A_USER_DATABASE,
            ImportError::SchemaTooNew { .. } => &schema::SCHEMA_TOO_NEW,
            ImportError::HostileSchema { .. } => &schema::HOSTILE_SCHEMA,
            ImportError::AppTokenCollision { .. } => &schema::APP_TOKEN_COLLISION,
            ImportError::Entropy(_) => &cli::ENTROPY_UNAVAILABLE,
            ImportError::Sqlite(_) => &cli::STORAGE,
        }
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            ImportError::CorruptContainer(corruption) => corrupt_container_metadata(corruption),
            ImportError::TooLarge { max, .. } => limit(*max),
            ImportError::Malformed { problem } => malformed(Some(problem)),
            ImportError::Unreadable(_) => malformed(None),
            ImportError::SchemaTooNew { found, supported } => schema_too_new(*found, *supported),
            ImportError::HostileSchema { problem } => hostile(problem),
            ImportError::AppTokenCollision { collision } => token_collision(collision),
            ImportError::Locked
            | ImportError::NotSqlite
            | ImportError::NotAUserDatabase
            | ImportError::Entropy(_)
            | ImportError::Sqlite(_) => Vec::new(),
        }
    }

    fn message(&self) -> String {
        match self {
            ImportError::Locked => LOCKED_MESSAGE.to_owned(),
            _ => self.to_string(),
        }
    }
}

impl Reasoned for ExportError {
    fn reason(&self) -> &'static Reason {
        match self {
            ExportError::Source(err) => err.reason(),
            ExportError::TooLarge { .. } => &rpc::TOO_LARGE,
            ExportError::OutputExists { .. } => &cli::OUTPUT_EXISTS,
            ExportError::Io { .. } => &cli::IO,
            ExportError::Sqlite(_) | ExportError::Scrub(_) => &cli::STORAGE,
        }
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            ExportError::Source(err) => err.metadata(),
            ExportError::TooLarge { max, .. } => limit(*max),
            ExportError::OutputExists { .. }
            | ExportError::Io { .. }
            | ExportError::Sqlite(_)
            | ExportError::Scrub(_) => Vec::new(),
        }
    }

    fn message(&self) -> String {
        match self {
            ExportError::Source(err) => err.message(),
            _ => self.to_string(),
        }
    }
}

/// An image whose free space cannot be accounted for page by page is malformed: zeroing by
/// guesswork could destroy live records.
impl Reasoned for ScrubError {
    fn reason(&self) -> &'static Reason {
        &schema::MALFORMED
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        vec![("detail", "free_space_unaccounted".to_owned())]
    }
}

impl Reasoned for SyncImageError {
    fn reason(&self) -> &'static Reason {
        match self {
            SyncImageError::ContainerNotAccepted => &schema::CONTAINER_NOT_ACCEPTED,
            SyncImageError::Open(err) => err.reason(),
            SyncImageError::Import(err) => err.reason(),
            SyncImageError::SecretsPresent { .. } => &schema::SECRETS_PRESENT,
            SyncImageError::Scrub(err) => err.reason(),
            SyncImageError::Stopped => &rpc::DEADLINE_EXCEEDED,
        }
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            SyncImageError::Open(err) => err.metadata(),
            SyncImageError::Import(err) => err.metadata(),
            SyncImageError::Scrub(err) => err.metadata(),
            SyncImageError::SecretsPresent { rows } => vec![(
                "secretRows",
                rows.map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
            )],
            SyncImageError::ContainerNotAccepted | SyncImageError::Stopped => Vec::new(),
        }
    }

    fn message(&self) -> String {
        match self {
            SyncImageError::Open(err) => err.message(),
            SyncImageError::Import(err) => err.message(),
            _ => self.to_string(),
        }
    }
}
