"""The chunked streams, against an in-process gRPC server that records what it receives and
answers as told: uploads are a header then chunks of at most the chunk size (never one
message), downloads are reassembled into paths or file objects, and a broken answer or a
refusal never leaves a partial file and never escapes as a raw `grpc.RpcError`."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from snug_hub import ContainerClient, errors
from snug_hub.pb import container_pb2 as pb
from snug_hub.pb import container_pb2_grpc

PLAINTEXT = bytes(range(256)) * 4096 + b"tail"  # 1 MiB and 4 bytes: two full chunks at 512 KiB


class Recorder(container_pb2_grpc.ContainerServiceServicer):  # type: ignore[misc]
    """Unlock that records the request stream and answers with `answer`'s chunks."""

    def __init__(self) -> None:
        self.received: list[pb.UnlockRequest] = []
        self.announce: int | None = None  # the length the result claims (default: the truth)
        self.refuse_with: str | None = None
        self.lock = threading.Lock()

    def Unlock(self, requests: Iterator[pb.UnlockRequest], context: grpc.ServicerContext) -> Iterator[pb.UnlockResponse]:
        with self.lock:
            self.received = list(requests)
        if self.refuse_with is not None:
            status = status_pb2.Status(code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message="no")
            status.details.add().Pack(
                error_details_pb2.ErrorInfo(reason=self.refuse_with, domain="snug.container")
            )
            context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no secret opened it")
        body = b"".join(r.chunk for r in self.received)
        announced = len(body) if self.announce is None else self.announce
        yield pb.UnlockResponse(result=pb.UnlockResult(plaintext_length=announced))
        for start in range(0, len(body), 300_000):
            yield pb.UnlockResponse(chunk=body[start : start + 300_000])


@pytest.fixture
def served() -> Iterator[tuple[Recorder, ContainerClient]]:
    recorder = Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    container_pb2_grpc.add_ContainerServiceServicer_to_server(recorder, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    client = ContainerClient(f"127.0.0.1:{port}", timeout=30, chunk_size=512 * 1024)
    try:
        yield recorder, client
    finally:
        client.close()
        server.stop(grace=None)


def test_an_upload_is_a_header_then_bounded_chunks(served: tuple[Recorder, ContainerClient], tmp_path: Path) -> None:
    recorder, client = served
    source = tmp_path / "in.snug"
    source.write_bytes(PLAINTEXT)
    out = io.BytesIO()
    result = client.unlock(source, out, passphrase="p")
    kinds = [r.WhichOneof("message") for r in recorder.received]
    assert kinds == ["header", "chunk", "chunk", "chunk"], kinds
    assert [len(r.chunk) for r in recorder.received[1:]] == [512 * 1024, 512 * 1024, 4]
    header = recorder.received[0].header
    assert header.expected_length == len(PLAINTEXT) and header.secrets.passphrase == "p"
    assert not header.secrets.HasField("recovery_key")
    assert out.getvalue() == PLAINTEXT and result.plaintext_length == len(PLAINTEXT)


def test_a_download_into_a_path_replaces_it_whole(served: tuple[Recorder, ContainerClient], tmp_path: Path) -> None:
    _, client = served
    target = tmp_path / "out.snug"
    target.write_bytes(b"the old file")
    client.unlock(io.BytesIO(PLAINTEXT), target, recovery_key="k")
    assert target.read_bytes() == PLAINTEXT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.snug"], "no temporary file is left"


def test_an_answer_shorter_than_announced_leaves_the_path_as_it_was(
    served: tuple[Recorder, ContainerClient], tmp_path: Path
) -> None:
    recorder, client = served
    recorder.announce = len(PLAINTEXT) + 1
    target = tmp_path / "out.snug"
    target.write_bytes(b"the old file")
    with pytest.raises(errors.ProtocolError, match="of the"):
        client.unlock(PLAINTEXT, target, passphrase="p")
    assert target.read_bytes() == b"the old file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.snug"]


def test_a_refusal_is_its_typed_error_and_writes_nothing(
    served: tuple[Recorder, ContainerClient], tmp_path: Path
) -> None:
    recorder, client = served
    recorder.refuse_with = "LOCKED"
    target = tmp_path / "out.snug"
    with pytest.raises(errors.Locked) as refused:
        client.unlock(PLAINTEXT, target, passphrase="wrong")
    assert refused.value.domain == "snug.container"
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert isinstance(refused.value.__cause__, grpc.RpcError)
    assert not target.exists() and list(tmp_path.iterdir()) == []


class FailingFile(io.RawIOBase):
    """A file whose second read fails."""

    def __init__(self) -> None:
        self.reads = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        if self.reads > 1:
            raise OSError("the disk went away")
        return b"x" * min(size, 1000)


def test_a_source_that_fails_to_read_raises_its_own_error(served: tuple[Recorder, ContainerClient]) -> None:
    _, client = served
    with pytest.raises(OSError, match="the disk went away"):
        client.unlock(FailingFile(), io.BytesIO(), passphrase="p")


def test_an_unreachable_server_is_unavailable() -> None:
    with ContainerClient("127.0.0.1:1", timeout=5) as client:
        with pytest.raises(errors.UnavailableError) as refused:
            client.detect_format(b"SQLite format 3\x00")
    assert refused.value.retryable and refused.value.reason is None


def test_chunk_sizes_beyond_the_protocol_are_refused() -> None:
    with pytest.raises(ValueError):
        ContainerClient("127.0.0.1:1", chunk_size=2 * 1024 * 1024)
