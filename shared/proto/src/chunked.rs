//! The header-then-chunks shape every streaming message shares, as one trait.
//!
//! Each streaming request and response of `snug.*.v1` is a `oneof message { Header header = 1;
//! bytes chunk = 2; }` (or `Result result = 1`): one first message, then the payload in pieces.
//! [`Chunked`] names that shape once, so the stream helpers in `snug_rpc::chunks` build and read
//! every such message without a per-message closure. [`Part`] lives here, beside the trait, so
//! this crate needs nothing from the runtime.

use bytes::Bytes;

/// One message of a header-then-chunks stream, classified.
#[derive(Debug)]
pub enum Part<H> {
    /// The header (or result), which must come first and only once.
    Header(H),
    /// A piece of the payload.
    Chunk(Bytes),
}

/// A streaming message whose `oneof` is a header (or result) or a chunk of the payload.
pub trait Chunked: Sized {
    /// The first message's type: the request's header or the response's result.
    type Header;

    /// Returns the first message of a stream, carrying `header`.
    fn header(header: Self::Header) -> Self;

    /// Returns a message carrying one piece of the payload.
    fn chunk(chunk: Bytes) -> Self;

    /// Returns which of the two the message carries, or `None` when its `oneof` is unset.
    fn into_part(self) -> Option<Part<Self::Header>>;
}

/// Implements [`Chunked`] for messages given as `Message, oneof_module, FirstVariant, Header;`.
macro_rules! chunked {
    ($($message:ident, $module:ident, $first:ident, $header:ident;)*) => {$(
        impl Chunked for $message {
            type Header = $header;

            fn header(header: $header) -> Self {
                Self { message: Some($module::Message::$first(header)) }
            }

            fn chunk(chunk: Bytes) -> Self {
                Self { message: Some($module::Message::Chunk(chunk)) }
            }

            fn into_part(self) -> Option<Part<$header>> {
                self.message.map(|message| match message {
                    $module::Message::$first(header) => Part::Header(header),
                    $module::Message::Chunk(chunk) => Part::Chunk(chunk),
                })
            }
        }
    )*};
}

mod container {
    use super::*;
    use crate::container::v1::*;

    chunked! {
        ProtectRequest, protect_request, Header, ProtectHeader;
        ProtectResponse, protect_response, Result, ProtectResult;
        UnlockRequest, unlock_request, Header, UnlockHeader;
        UnlockResponse, unlock_response, Result, UnlockResult;
        ChangePassphraseRequest, change_passphrase_request, Header, ChangePassphraseHeader;
        ChangePassphraseResponse, change_passphrase_response, Result, ChangePassphraseResult;
        RotateRecoveryKeyRequest, rotate_recovery_key_request, Header, RotateRecoveryKeyHeader;
        RotateRecoveryKeyResponse, rotate_recovery_key_response, Result, RotateRecoveryKeyResult;
        RemoveProtectionRequest, remove_protection_request, Header, RemoveProtectionHeader;
        RemoveProtectionResponse, remove_protection_response, Result, RemoveProtectionResult;
        ResealRequest, reseal_request, Header, ResealHeader;
        ResealResponse, reseal_response, Result, ResealResult;
    }
}

mod schema {
    use super::*;
    use crate::schema::v1::*;

    chunked! {
        InspectUserDatabaseRequest, inspect_user_database_request, Header, InspectUserDatabaseHeader;
        MigrateUserDatabaseRequest, migrate_user_database_request, Header, MigrateUserDatabaseHeader;
        MigrateUserDatabaseResponse, migrate_user_database_response, Result, MigrateUserDatabaseResult;
        ExportUserDatabaseRequest, export_user_database_request, Header, ExportUserDatabaseHeader;
        ExportUserDatabaseResponse, export_user_database_response, Result, ExportUserDatabaseResult;
        CheckImportRequest, check_import_request, Header, CheckImportHeader;
        ImportUserDatabaseRequest, import_user_database_request, Header, ImportUserDatabaseHeader;
        ImportUserDatabaseResponse, import_user_database_response, Result, ImportUserDatabaseResult;
        ValidateSyncImageRequest, validate_sync_image_request, Header, ValidateSyncImageHeader;
        ApplyOperationsRequest, apply_operations_request, Header, ApplyOperationsHeader;
        ApplyOperationsResponse, apply_operations_response, Result, ApplyOperationsResult;
        QueryRequest, query_request, Header, QueryHeader;
    }
}

mod materialize {
    use super::*;
    use crate::materialize::v1::*;

    chunked! {
        MaterializeAppRequest, materialize_app_request, Header, UserDatabaseHeader;
        MaterializeAppResponse, materialize_app_response, Result, MaterializeAppResult;
        PersistAppRequest, persist_app_request, Header, PersistAppHeader;
        PersistAppResponse, persist_app_response, Result, PersistAppResult;
        ApplyDdlRequest, apply_ddl_request, Header, ApplyDdlHeader;
        ApplyDdlResponse, apply_ddl_response, Result, ApplyDdlResult;
        ExportAppRequest, export_app_request, Header, UserDatabaseHeader;
        ExportAppResponse, export_app_response, Result, ExportAppResult;
        ExecuteSqlRequest, execute_sql_request, Header, ExecuteSqlHeader;
        ExecuteSqlResponse, execute_sql_response, Result, ExecuteSqlResult;
        ListAppTablesRequest, list_app_tables_request, Header, UserDatabaseHeader;
    }
}

mod sync {
    use super::*;
    use crate::sync::v1::*;

    chunked! {
        GetImageResponse, get_image_response, Result, RevisionInfo;
        PutImageRequest, put_image_request, Header, PutImageHeader;
    }
}
