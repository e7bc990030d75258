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

/// Implements [`Chunked`] for messages given as `package::Message, oneof_module, FirstVariant,
/// Header;` (the package's `v1` module holds all four).
macro_rules! chunked {
    ($($package:ident :: $message:ident, $module:ident, $first:ident, $header:ident;)*) => {$(
        impl Chunked for crate::$package::v1::$message {
            type Header = crate::$package::v1::$header;

            fn header(header: Self::Header) -> Self {
                use crate::$package::v1::$module::Message;
                Self { message: Some(Message::$first(header)) }
            }

            fn chunk(chunk: Bytes) -> Self {
                use crate::$package::v1::$module::Message;
                Self { message: Some(Message::Chunk(chunk)) }
            }

            fn into_part(self) -> Option<Part<Self::Header>> {
                use crate::$package::v1::$module::Message;
                self.message.map(|message| match message {
                    Message::$first(header) => Part::Header(header),
                    Message::Chunk(chunk) => Part::Chunk(chunk),
                })
            }
        }
    )*};
}

chunked! {
    container::ProtectRequest, protect_request, Header, ProtectHeader;
    container::ProtectResponse, protect_response, Result, ProtectResult;
    container::UnlockRequest, unlock_request, Header, UnlockHeader;
    container::UnlockResponse, unlock_response, Result, UnlockResult;
    container::ChangePassphraseRequest, change_passphrase_request, Header, ChangePassphraseHeader;
    container::ChangePassphraseResponse, change_passphrase_response, Result, ChangePassphraseResult;
    container::RotateRecoveryKeyRequest, rotate_recovery_key_request, Header, RotateRecoveryKeyHeader;
    container::RotateRecoveryKeyResponse, rotate_recovery_key_response, Result, RotateRecoveryKeyResult;
    container::RemoveProtectionRequest, remove_protection_request, Header, RemoveProtectionHeader;
    container::RemoveProtectionResponse, remove_protection_response, Result, RemoveProtectionResult;
    container::ResealRequest, reseal_request, Header, ResealHeader;
    container::ResealResponse, reseal_response, Result, ResealResult;
    schema::InspectUserDatabaseRequest, inspect_user_database_request, Header, InspectUserDatabaseHeader;
    schema::MigrateUserDatabaseRequest, migrate_user_database_request, Header, MigrateUserDatabaseHeader;
    schema::MigrateUserDatabaseResponse, migrate_user_database_response, Result, MigrateUserDatabaseResult;
    schema::ExportUserDatabaseRequest, export_user_database_request, Header, ExportUserDatabaseHeader;
    schema::ExportUserDatabaseResponse, export_user_database_response, Result, ExportUserDatabaseResult;
    schema::CheckImportRequest, check_import_request, Header, CheckImportHeader;
    schema::ImportUserDatabaseRequest, import_user_database_request, Header, ImportUserDatabaseHeader;
    schema::ImportUserDatabaseResponse, import_user_database_response, Result, ImportUserDatabaseResult;
    schema::ValidateSyncImageRequest, validate_sync_image_request, Header, ValidateSyncImageHeader;
    schema::ApplyOperationsRequest, apply_operations_request, Header, ApplyOperationsHeader;
    schema::ApplyOperationsResponse, apply_operations_response, Result, ApplyOperationsResult;
    schema::QueryRequest, query_request, Header, QueryHeader;
    materialize::MaterializeAppRequest, materialize_app_request, Header, UserDatabaseHeader;
    materialize::MaterializeAppResponse, materialize_app_response, Result, MaterializeAppResult;
    materialize::PersistAppRequest, persist_app_request, Header, PersistAppHeader;
    materialize::PersistAppResponse, persist_app_response, Result, PersistAppResult;
    materialize::ApplyDdlRequest, apply_ddl_request, Header, ApplyDdlHeader;
    materialize::ApplyDdlResponse, apply_ddl_response, Result, ApplyDdlResult;
    materialize::ExportAppRequest, export_app_request, Header, UserDatabaseHeader;
    materialize::ExportAppResponse, export_app_response, Result, ExportAppResult;
    materialize::ExecuteSqlRequest, execute_sql_request, Header, ExecuteSqlHeader;
    materialize::ExecuteSqlResponse, execute_sql_response, Result, ExecuteSqlResult;
    materialize::ListAppTablesRequest, list_app_tables_request, Header, UserDatabaseHeader;
    sync::GetImageResponse, get_image_response, Result, RevisionInfo;
    sync::PutImageRequest, put_image_request, Header, PutImageHeader;
    sync::PlanImageDeltaRequest, plan_image_delta_request, Header, PlanImageDeltaHeader;
    sync::PlanImageDeltaResponse, plan_image_delta_response, Result, PlanImageDeltaResult;
    sync::PutImageDeltaRequest, put_image_delta_request, Header, PutImageDeltaHeader;
    sync::AssembleImageDeltaRequest, assemble_image_delta_request, Header, AssembleImageDeltaHeader;
    sync::AssembleImageDeltaResponse, assemble_image_delta_response, Result, AssembleImageDeltaResult;
    sync::GetImageDeltaRequest, get_image_delta_request, Header, GetImageDeltaHeader;
    sync::GetImageDeltaResponse, get_image_delta_response, Result, GetImageDeltaResult;
}
