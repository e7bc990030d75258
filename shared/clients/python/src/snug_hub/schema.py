"""The client of `snug.schema.v1.SchemaService`: the user database at storage version 6.

Inspect, migrate (ladder, self-heal, legacy credential wipe), export without secrets,
import-check and import, validate a sync image, and the hub-namespace operations and queries.
The service never writes back to the caller's file: results are new bytes, written to the sink
the caller names (a path is replaced atomically). Failures raise `snug_hub.errors` classes
(schema.proto's reason table): `SchemaTooNew`, `Protected`, `NotSqlite`, ...
"""

from __future__ import annotations

from collections.abc import Iterable

from snug_hub._channel import ServiceClient
from snug_hub._proto.snug.schema.v1 import schema_pb2 as pb
from snug_hub._proto.snug.schema.v1 import schema_pb2_grpc
from snug_hub._streams import Requests, Sink, Source, framed, read_chunks, receive, rpc, source_length
from snug_hub.container import secrets

#: One hub-namespace write for `SchemaClient.apply_operations`.
Operation = pb.Operation
#: One read for `SchemaClient.query`.
ReadQuery = pb.ReadQuery


class SchemaClient(ServiceClient):
    """Works on users' database files through a hub's schema service."""

    def _stub(self) -> schema_pb2_grpc.SchemaServiceStub:
        return schema_pb2_grpc.SchemaServiceStub(self.channel)

    def inspect(self, user_db: Source) -> pb.InspectUserDatabaseResponse:
        """Reports a plain user database without changing it: storage version, tables, health,
        and why an open or an import would refuse it."""
        header = pb.InspectUserDatabaseHeader(expected_length=source_length(user_db))
        requests = Requests(
            framed(
                pb.InspectUserDatabaseRequest(header=header),
                lambda piece: pb.InspectUserDatabaseRequest(chunk=piece),
                [user_db],
                self.chunk_size,
            )
        )
        with rpc(requests):
            response: pb.InspectUserDatabaseResponse = self._stub().InspectUserDatabase(
                requests, timeout=self.timeout
            )
        return response

    def migrate(self, user_db: Source, out: Sink) -> pb.MigrateUserDatabaseResult:
        """Brings a plain user database to storage version 6 and writes it to `out` (byte for
        byte as sent when it needed nothing: `unchanged`)."""
        header = pb.MigrateUserDatabaseHeader(expected_length=source_length(user_db))
        requests = Requests(
            framed(
                pb.MigrateUserDatabaseRequest(header=header),
                lambda piece: pb.MigrateUserDatabaseRequest(chunk=piece),
                [user_db],
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.MigrateUserDatabaseResult = receive(
                self._stub().MigrateUserDatabase(requests, timeout=self.timeout),
                out,
                lambda answer: answer.length,
            )
        return result

    def export(
        self, user_db: Source, out: Sink, *, include_secrets: bool = False
    ) -> pb.ExportUserDatabaseResult:
        """Exports a plain user database (§9.2) to `out`: migrated in the copy, unexported
        tables dropped, `snug_secrets` emptied unless `include_secrets`, VACUUMed."""
        header = pb.ExportUserDatabaseHeader(
            include_secrets=include_secrets, expected_length=source_length(user_db)
        )
        requests = Requests(
            framed(
                pb.ExportUserDatabaseRequest(header=header),
                lambda piece: pb.ExportUserDatabaseRequest(chunk=piece),
                [user_db],
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.ExportUserDatabaseResult = receive(
                self._stub().ExportUserDatabase(requests, timeout=self.timeout),
                out,
                lambda answer: answer.length,
            )
        return result

    def check_import(
        self,
        file: Source,
        *,
        passphrase: str | None = None,
        recovery_key: str | None = None,
        trusted_origin: bool = False,
    ) -> pb.CheckImportResponse:
        """Checks a file (plain, or SNUGENC1 opened with the secrets) as an import would and
        reports what the import would do, keeping nothing."""
        header = pb.CheckImportHeader(
            secrets=secrets(passphrase, recovery_key),
            trusted_origin=trusted_origin,
            expected_length=source_length(file),
        )
        requests = Requests(
            framed(
                pb.CheckImportRequest(header=header),
                lambda piece: pb.CheckImportRequest(chunk=piece),
                [file],
                self.chunk_size,
            )
        )
        with rpc(requests):
            response: pb.CheckImportResponse = self._stub().CheckImport(
                requests, timeout=self.timeout
            )
        return response

    def import_user_database(
        self,
        incoming: Source,
        out: Sink,
        *,
        current: Source | None = None,
        approvals: pb.LocalApprovals | None = None,
        passphrase: str | None = None,
        recovery_key: str | None = None,
        trusted_origin: bool = False,
    ) -> pb.ImportUserDatabaseResult:
        """Imports `incoming` as the user's new database and writes the reconciled file to
        `out`. What the hub holds is its `current` file or its `approvals` (at most one; with
        neither, nothing is approved). Lengths must be known up front: an unseekable file
        object is read into memory first."""
        if current is not None and approvals is not None:
            raise ValueError("give the current file or the approvals, not both")
        incoming_length = source_length(incoming)
        if incoming_length is None:
            incoming = b"".join(read_chunks(incoming, self.chunk_size))
            incoming_length = len(incoming)
        header = pb.ImportUserDatabaseHeader(
            incoming_length=incoming_length,
            secrets=secrets(passphrase, recovery_key),
            trusted_origin=trusted_origin,
        )
        sources: list[Source] = [incoming]
        if current is not None:
            current_length = source_length(current)
            if current_length is None:
                current = b"".join(read_chunks(current, self.chunk_size))
                current_length = len(current)
            header.current_file_length = current_length
            sources.append(current)
        elif approvals is not None:
            header.approvals.CopyFrom(approvals)
        requests = Requests(
            framed(
                pb.ImportUserDatabaseRequest(header=header),
                lambda piece: pb.ImportUserDatabaseRequest(chunk=piece),
                sources,
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.ImportUserDatabaseResult = receive(
                self._stub().ImportUserDatabase(requests, timeout=self.timeout),
                out,
                lambda answer: answer.length,
            )
        return result

    def validate_sync_image(self, image: Source) -> pb.ValidateSyncImageResponse:
        """Validates an image for a hub sync origin: a plain, secrets-free v6 user database.
        The answer lists the free-space ranges to zero and the SHA-256 of the stored form."""
        header = pb.ValidateSyncImageHeader(expected_length=source_length(image))
        requests = Requests(
            framed(
                pb.ValidateSyncImageRequest(header=header),
                lambda piece: pb.ValidateSyncImageRequest(chunk=piece),
                [image],
                self.chunk_size,
            )
        )
        with rpc(requests):
            response: pb.ValidateSyncImageResponse = self._stub().ValidateSyncImage(
                requests, timeout=self.timeout
            )
        return response

    def apply_operations(
        self, user_db: Source, out: Sink, operations: Iterable[pb.Operation]
    ) -> pb.ApplyOperationsResult:
        """Applies hub-namespace operations in order, all or nothing, and writes the new file
        to `out`; an error's metadata ``operation`` is the failing operation's index."""
        header = pb.ApplyOperationsHeader(
            operations=operations, expected_length=source_length(user_db)
        )
        requests = Requests(
            framed(
                pb.ApplyOperationsRequest(header=header),
                lambda piece: pb.ApplyOperationsRequest(chunk=piece),
                [user_db],
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.ApplyOperationsResult = receive(
                self._stub().ApplyOperations(requests, timeout=self.timeout),
                out,
                lambda answer: answer.length,
            )
        return result

    def query(self, user_db: Source, queries: Iterable[pb.ReadQuery]) -> pb.QueryResponse:
        """Runs read queries against a plain user database; answers in the order asked."""
        header = pb.QueryHeader(queries=queries, expected_length=source_length(user_db))
        requests = Requests(
            framed(
                pb.QueryRequest(header=header),
                lambda piece: pb.QueryRequest(chunk=piece),
                [user_db],
                self.chunk_size,
            )
        )
        with rpc(requests):
            response: pb.QueryResponse = self._stub().Query(requests, timeout=self.timeout)
        return response
