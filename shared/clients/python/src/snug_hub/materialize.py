"""The client of `snug.materialize.v1.MaterializeService`: each app's data as native tables.

Materialize one app's runtime database out of the user database, persist it back, apply DDL,
export one app, run sandboxed SQL, and list every app's tables. The user database travels up in
chunks and new bytes come back into the sink the caller names. Failures raise `snug_hub.errors`
classes (materialize.proto's reason table): `AppNotFound`, `ForbiddenStatement`, ...
"""

from __future__ import annotations

from collections.abc import Iterable

from snug_hub._channel import ServiceClient
from snug_hub._proto.snug.materialize.v1 import materialize_pb2 as pb
from snug_hub._proto.snug.materialize.v1 import materialize_pb2_grpc
from snug_hub._streams import (
    Requests,
    Sink,
    Source,
    drain,
    framed,
    head,
    read_chunks,
    receive,
    rpc,
    source_length,
)

#: Bounds on what ExecuteSql returns (rows, bytes, step budget).
ExecuteLimits = pb.ExecuteLimits


class MaterializeClient(ServiceClient):
    """Moves one app's data between a user database and its runtime through a hub's
    materialization service."""

    def _stub(self) -> materialize_pb2_grpc.MaterializeServiceStub:
        return materialize_pb2_grpc.MaterializeServiceStub(self.channel)

    def _header(self, app_id: str, user_db: Source) -> pb.UserDatabaseHeader:
        return pb.UserDatabaseHeader(app_id=app_id, expected_length=source_length(user_db))

    def materialize_app(
        self, user_db: Source, out: Sink, *, app_id: str
    ) -> pb.MaterializeAppResult:
        """Writes app `app_id`'s runtime database (its objects under their natural names) to
        `out`."""
        requests = Requests(
            framed(
                pb.MaterializeAppRequest(header=self._header(app_id, user_db)),
                lambda piece: pb.MaterializeAppRequest(chunk=piece),
                [user_db],
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.MaterializeAppResult = receive(
                self._stub().MaterializeApp(requests, timeout=self.timeout),
                out,
                lambda answer: answer.length,
            )
        return result

    def persist_app(
        self, user_db: Source, runtime: Source, out: Sink, *, app_id: str
    ) -> pb.PersistAppResult:
        """Writes `runtime` back into the user database as app `app_id`'s tables and writes the
        new user database to `out` (the caller's own bytes when nothing changed). Lengths must
        be known up front: an unseekable file object is read into memory first."""
        user_db_length = source_length(user_db)
        if user_db_length is None:
            user_db = b"".join(read_chunks(user_db, self.chunk_size))
            user_db_length = len(user_db)
        runtime_length = source_length(runtime)
        if runtime_length is None:
            runtime = b"".join(read_chunks(runtime, self.chunk_size))
            runtime_length = len(runtime)
        header = pb.PersistAppHeader(
            app_id=app_id, user_db_length=user_db_length, runtime_length=runtime_length
        )
        requests = Requests(
            framed(
                pb.PersistAppRequest(header=header),
                lambda piece: pb.PersistAppRequest(chunk=piece),
                [user_db, runtime],
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.PersistAppResult = receive(
                self._stub().PersistApp(requests, timeout=self.timeout),
                out,
                lambda answer: answer.length,
            )
        return result

    def apply_ddl(
        self, user_db: Source, out: Sink, *, app_id: str, statements: Iterable[str]
    ) -> pb.ApplyDdlResult:
        """Applies DDL statements to app `app_id`'s tables, recording them in its migration
        trail, and writes the new user database to `out`."""
        header = pb.ApplyDdlHeader(
            app_id=app_id, statements=statements, expected_length=source_length(user_db)
        )
        requests = Requests(
            framed(
                pb.ApplyDdlRequest(header=header),
                lambda piece: pb.ApplyDdlRequest(chunk=piece),
                [user_db],
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.ApplyDdlResult = receive(
                self._stub().ApplyDdl(requests, timeout=self.timeout),
                out,
                lambda answer: answer.length,
            )
        return result

    def export_app(self, user_db: Source, out: Sink, *, app_id: str) -> pb.ExportAppResult:
        """Writes app `app_id` as a standalone database (§8.2 per-app export) to `out`; the
        result names the file (`<token>.snug`)."""
        requests = Requests(
            framed(
                pb.ExportAppRequest(header=self._header(app_id, user_db)),
                lambda piece: pb.ExportAppRequest(chunk=piece),
                [user_db],
                self.chunk_size,
            )
        )
        with rpc(requests):
            result: pb.ExportAppResult = receive(
                self._stub().ExportApp(requests, timeout=self.timeout),
                out,
                lambda answer: answer.length,
            )
        return result

    def execute_sql(
        self,
        user_db: Source,
        *,
        app_id: str,
        statements: Iterable[str],
        out: Sink | None = None,
        limits: pb.ExecuteLimits | None = None,
        read_only: bool = False,
    ) -> pb.ExecuteSqlResult:
        """Runs SQL against app `app_id`'s tables in the sandbox and returns each statement's
        rows. When the statements changed the user database (`user_db_changed`), the new file
        goes to `out` (None: it is dropped); otherwise `out` is left untouched."""
        header = pb.ExecuteSqlHeader(
            app_id=app_id,
            statements=statements,
            limits=limits,
            read_only=read_only,
            expected_length=source_length(user_db),
        )
        requests = Requests(
            framed(
                pb.ExecuteSqlRequest(header=header),
                lambda piece: pb.ExecuteSqlRequest(chunk=piece),
                [user_db],
                self.chunk_size,
            )
        )
        with rpc(requests):
            responses = self._stub().ExecuteSql(requests, timeout=self.timeout)
            result: pb.ExecuteSqlResult = head(responses)
            drain(responses, out if result.user_db_changed else None, result.length)
        return result

    def list_app_tables(self, user_db: Source) -> pb.ListAppTablesResponse:
        """Lists every app's tables, natural and at-rest names with row counts."""
        requests = Requests(
            framed(
                pb.ListAppTablesRequest(header=self._header("", user_db)),
                lambda piece: pb.ListAppTablesRequest(chunk=piece),
                [user_db],
                self.chunk_size,
            )
        )
        with rpc(requests):
            response: pb.ListAppTablesResponse = self._stub().ListAppTables(
                requests, timeout=self.timeout
            )
        return response
