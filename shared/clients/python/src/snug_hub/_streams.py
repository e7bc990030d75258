"""Files in and out in chunks: the sources and sinks every client method takes, and the
header-then-chunks message streams of the streaming RPCs.

Every streaming RPC of Snug Hub sends one header message, then the bytes as `chunk` messages of
at most 1 MiB; answers come back as one `result` message, then chunks. Nothing here holds a
whole file unless the caller passed one as bytes: sources are read a chunk at a time as gRPC
asks for the next message, and sinks are written as chunks arrive. A path sink is written to a
temporary sibling and renamed over the path only once the whole answer arrived and matched its
announced length, so a failed call never leaves a partial file where the caller expects one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar, Union

import grpc

from snug_hub.errors import ProtocolError, from_rpc_error

#: The largest chunk the protos allow in one message (1 MiB).
CHUNK_SIZE = 1024 * 1024


class Readable(Protocol):
    """A binary file object to read from."""

    def read(self, size: int = ..., /) -> bytes: ...


class Writable(Protocol):
    """A binary file object to write to."""

    def write(self, data: bytes, /) -> object: ...


#: Bytes to send: the bytes themselves, a path to a file, or a binary file object (read from its
#: current position to its end).
Source = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]", Readable]
#: Where to put bytes that come back: a path (written atomically) or a binary file object.
Sink = Union[str, "os.PathLike[str]", Writable]

R = TypeVar("R")
Req = TypeVar("Req")
R_co = TypeVar("R_co", covariant=True)


def source_length(source: Source) -> int | None:
    """Returns how many bytes `source` holds from where it stands, when that can be known
    without reading it (bytes, a path, a seekable file)."""
    if isinstance(source, (bytes, bytearray)):
        return len(source)
    if isinstance(source, memoryview):
        return source.nbytes
    if isinstance(source, (str, os.PathLike)):
        return os.stat(source).st_size
    seekable = getattr(source, "seekable", None)
    if callable(seekable) and seekable():
        file: IO[bytes] = source  # type: ignore[assignment]
        here = file.tell()
        end = file.seek(0, os.SEEK_END)
        file.seek(here)
        return end - here
    return None


def read_chunks(source: Source, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """Yields `source` in pieces of at most `chunk_size` bytes, reading a file as it goes."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source).cast("B")
        for start in range(0, len(view), chunk_size):
            yield bytes(view[start : start + chunk_size])
        return
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as file:
            yield from _read_file(file, chunk_size)
        return
    yield from _read_file(source, chunk_size)


def _read_file(file: Readable, chunk_size: int) -> Iterator[bytes]:
    while True:
        piece = file.read(chunk_size)
        if not piece:
            return
        yield piece


@contextlib.contextmanager
def open_sink(sink: Sink) -> Iterator[Writable]:
    """Yields a writable for `sink`. A path is written to a temporary sibling that replaces it
    (fsynced) only when the block ends without an exception; a file object is used as it is."""
    if not isinstance(sink, (str, os.PathLike)):
        yield sink
        return
    target = Path(sink)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):
        directory = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def framed(
    first: Req,
    chunk: Callable[[bytes], Req],
    sources: Iterable[Source],
    chunk_size: int = CHUNK_SIZE,
) -> Iterator[Req]:
    """Yields `first` (the header), then every source's bytes, in order, as chunk messages."""
    yield first
    for source in sources:
        for piece in read_chunks(source, chunk_size):
            yield chunk(piece)


class Requests(Iterator[Req]):
    """A client-streaming call's request messages. gRPC reads them on its own thread; a failure
    to read a source is kept here (gRPC would otherwise only cancel the call) so that `rpc()`
    raises it in place of the call's error."""

    def __init__(self, messages: Iterator[Req]) -> None:
        self.error: BaseException | None = None
        self._messages = messages

    def __iter__(self) -> Requests[Req]:
        return self

    def __next__(self) -> Req:
        try:
            return next(self._messages)
        except StopIteration:
            raise
        except BaseException as err:
            self.error = err
            raise


@contextlib.contextmanager
def rpc(requests: Requests[Any] | None = None) -> Iterator[None]:
    """Turns a failed gRPC call inside the block into its typed `SnugError` (the request
    stream's own read error, when that is what failed the call)."""
    try:
        yield
    except grpc.RpcError as err:
        if requests is not None and requests.error is not None:
            raise requests.error from None
        raise from_rpc_error(err) from err


class Framed(Protocol[R_co]):
    """A streamed answer's message: a `result` first, then `chunk`s (the protos' `message`
    oneof)."""

    @property
    def result(self) -> R_co: ...

    @property
    def chunk(self) -> bytes: ...

    def WhichOneof(self, oneof_group: Any, /) -> Any: ...


def head(responses: Iterator[Framed[R]]) -> R:
    """Returns the `result` message that must open a header-then-chunks answer."""
    try:
        first = next(responses)
    except StopIteration:
        raise ProtocolError("the answer ended before its result message") from None
    if first.WhichOneof("message") != "result":
        _cancel(responses)
        raise ProtocolError("the answer did not start with its result message")
    return first.result


def drain(responses: Iterator[Framed[Any]], sink: Sink | None, expected: int) -> None:
    """Writes the chunks that follow the result to `sink` (None: reads and drops them), which
    must receive exactly the `expected` bytes the result announced."""
    received = 0
    try:
        with open_sink(sink) if sink is not None else contextlib.nullcontext(None) as out:
            for message in responses:
                if message.WhichOneof("message") != "chunk":
                    raise ProtocolError("a second result message in the answer")
                received += len(message.chunk)
                if received > expected:
                    raise ProtocolError(f"the answer holds more than the {expected} bytes announced")
                if out is not None:
                    out.write(message.chunk)
            if received != expected:
                raise ProtocolError(
                    f"the answer ended after {received} of the {expected} bytes announced"
                )
    except (ProtocolError, OSError):
        _cancel(responses)
        raise


def receive(responses: Iterator[Framed[R]], sink: Sink, length: Callable[[R], int]) -> R:
    """Reads a header-then-chunks answer: returns its `result` and writes the chunks that
    follow to `sink`, which must receive exactly `length(result)` bytes."""
    result = head(responses)
    drain(responses, sink, length(result))
    return result


def _cancel(responses: object) -> None:
    cancel = getattr(responses, "cancel", None)
    if callable(cancel):
        cancel()
