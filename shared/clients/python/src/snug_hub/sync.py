"""The client of `snug.sync.v1.SyncService`: users' revisions with compare-and-swap.

The sync service trusts the `Caller` every request names: it is meant for a hub's own gateway
(one written in Python, for instance), never for end users, who reach their file through the
HTTP gateway (`snug_hub.userdb`). Writes name exactly one precondition: `create=True` (the
user's first image) or `if_match=<revision>`. A refused precondition raises `RevisionMismatch`
(or its refinement `StaleRevision`) carrying `current_revision`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from snug_hub._channel import ServiceClient
from snug_hub._proto.snug.sync.v1 import sync_pb2 as pb
from snug_hub._proto.snug.sync.v1 import sync_pb2_grpc
from snug_hub._streams import (
    Requests,
    Sink,
    Source,
    Writable,
    drain,
    framed,
    head,
    open_sink,
    rpc,
    source_length,
)
from snug_hub.errors import DigestMismatch

#: Who a request concerns and who acts: ``Caller(user_id="...", principal="...")``.
Caller = pb.Caller


def precondition(if_match: str | None = None, create: bool = False) -> pb.Precondition:
    """Returns the write precondition: must-match `if_match`, or must-not-exist with
    `create`; neither gives an empty one, which the service refuses (PRECONDITION_REQUIRED)."""
    if if_match is not None and create:
        raise ValueError("a write is based on a revision (if_match) or is the first (create), not both")
    if create:
        return pb.Precondition(must_not_exist=pb.MustNotExist())
    if if_match is not None:
        return pb.Precondition(must_match=if_match)
    return pb.Precondition()


class SyncClient(ServiceClient):
    """Reads and writes users' revisions through a hub's sync service."""

    def _stub(self) -> sync_pb2_grpc.SyncServiceStub:
        return sync_pb2_grpc.SyncServiceStub(self.channel)

    def provision_user(self, caller: pb.Caller) -> bool:
        """Records the user (idempotent); returns whether this call created the record."""
        with rpc():
            response: pb.ProvisionUserResponse = self._stub().ProvisionUser(
                pb.ProvisionUserRequest(caller=caller), timeout=self.timeout
            )
        return response.created

    def head(self, caller: pb.Caller, revision: str | None = None) -> pb.RevisionInfo:
        """Returns the current revision's metadata (or that of retained `revision`), without
        the bytes. No image, an unknown user and a foreign revision are all `NotFound`."""
        request = pb.HeadImageRequest(caller=caller, revision=revision)
        with rpc():
            response: pb.HeadImageResponse = self._stub().HeadImage(request, timeout=self.timeout)
        return response.revision

    def get(self, caller: pb.Caller, out: Sink, revision: str | None = None) -> pb.RevisionInfo:
        """Downloads the current image (or retained `revision`) into `out` and returns its
        metadata; the bytes are checked against the revision's SHA-256 before a path `out` is
        replaced (`DigestMismatch` otherwise)."""
        request = pb.GetImageRequest(caller=caller, revision=revision)
        with rpc(), open_sink(out) as sink:
            responses = self._stub().GetImage(request, timeout=self.timeout)
            info: pb.RevisionInfo = head(responses)
            hashing = Hashing(sink)
            drain(responses, hashing, info.size)
            if hashing.hexdigest() != info.sha256:
                raise DigestMismatch(
                    f"revision {info.revision}: the bytes received hash to {hashing.hexdigest()}, "
                    f"not the {info.sha256} announced"
                )
        return info

    def put(
        self,
        caller: pb.Caller,
        image: Source,
        *,
        if_match: str | None = None,
        create: bool = False,
        idempotency_key: str | None = None,
    ) -> pb.PutImageResponse:
        """Writes a new image under its precondition; the new revision is durable when this
        returns (`replayed` when it was a retry of a write that already landed)."""
        header = pb.PutImageHeader(
            caller=caller,
            precondition=precondition(if_match, create),
            idempotency_key=idempotency_key,
            expected_length=source_length(image),
        )
        requests = Requests(
            framed(
                pb.PutImageRequest(header=header),
                lambda piece: pb.PutImageRequest(chunk=piece),
                [image],
                self.chunk_size,
            )
        )
        with rpc(requests):
            response: pb.PutImageResponse = self._stub().PutImage(requests, timeout=self.timeout)
        return response

    def list_revisions(self, caller: pb.Caller, limit: int = 0) -> list[pb.RevisionInfo]:
        """Returns the user's revisions, newest first (`retained` false once reclaimed);
        `limit` 0 means 100."""
        request = pb.ListRevisionsRequest(caller=caller, limit=limit)
        with rpc():
            response: pb.ListRevisionsResponse = self._stub().ListRevisions(
                request, timeout=self.timeout
            )
        return list(response.revisions)

    def watch(
        self,
        caller: pb.Caller,
        *,
        after_revision: str | None = None,
        heartbeat_seconds: int = 0,
    ) -> Iterator[pb.WatchImageResponse]:
        """Yields the user's revisions as they are committed (WatchImage), for as long as the
        caller iterates: first the current one (``event == "revision"``) or ``no_image``,
        then each revision committed after it, oldest first, through any replica. With
        `after_revision` (the last one seen) it begins after that one instead; ``gap`` says
        revisions may have been committed that are not listed (a ``revision`` follows). A
        ``heartbeat`` every `heartbeat_seconds` (0: 15) shows the stream is alive. Closing the
        generator ends the call; a failure raises its typed `SnugError`."""
        request = pb.WatchImageRequest(
            caller=caller, after_revision=after_revision, heartbeat_seconds=heartbeat_seconds
        )
        # No deadline: the stream lasts as long as it is read.
        responses = self._stub().WatchImage(request)
        try:
            with rpc():
                yield from responses
        finally:
            responses.cancel()

    def restore(
        self,
        caller: pb.Caller,
        from_revision: str,
        *,
        if_match: str | None = None,
        create: bool = False,
        idempotency_key: str | None = None,
    ) -> pb.RestoreRevisionResponse:
        """Copies a retained revision's bytes forward as a new revision, under its own
        precondition (history is never rewritten)."""
        request = pb.RestoreRevisionRequest(
            caller=caller,
            from_revision=from_revision,
            precondition=precondition(if_match, create),
            idempotency_key=idempotency_key,
        )
        with rpc():
            response: pb.RestoreRevisionResponse = self._stub().RestoreRevision(
                request, timeout=self.timeout
            )
        return response

    def list_ledger(self, caller: pb.Caller, limit: int = 0) -> pb.ListLedgerResponse:
        """Returns the user's served and write ledgers, newest first."""
        request = pb.ListLedgerRequest(caller=caller, limit=limit)
        with rpc():
            response: pb.ListLedgerResponse = self._stub().ListLedger(request, timeout=self.timeout)
        return response

    def store_status(self) -> pb.GetStoreStatusResponse:
        """Returns the storage backend, whether it answers, the quota and the retention."""
        with rpc():
            response: pb.GetStoreStatusResponse = self._stub().GetStoreStatus(
                pb.GetStoreStatusRequest(), timeout=self.timeout
            )
        return response


class Hashing:
    """A sink that passes bytes on to another and hashes them (SHA-256) on the way."""

    def __init__(self, sink: Writable) -> None:
        self._sink = sink
        self._digest = hashlib.sha256()

    def write(self, data: bytes) -> object:
        self._digest.update(data)
        return self._sink.write(data)

    def hexdigest(self) -> str:
        """The SHA-256 of everything written so far, as 64 lowercase hex digits."""
        return self._digest.hexdigest()
