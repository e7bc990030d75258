"""The gRPC channel the service clients share, and their common base."""

from __future__ import annotations

from types import TracebackType
from typing import TypeVar

import grpc

from snug_hub._streams import CHUNK_SIZE

#: A header or a unary answer of the schema and materialize services may hold 8 MiB (an app's
#: HTML travels in a header); the protos ask clients to allow 8 MiB + 64 KiB.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024 + 64 * 1024

CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)


def connect(target: str, credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    """Opens a channel to `target` (``host:port``) with the message limits Snug Hub's protos
    ask for: plaintext, or TLS with `credentials` (``grpc.ssl_channel_credentials()``)."""
    if credentials is None:
        return grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
    return grpc.secure_channel(target, credentials, options=CHANNEL_OPTIONS)


C = TypeVar("C", bound="ServiceClient")


class ServiceClient:
    """What every service client shares: its channel (opened from a target, or the caller's),
    a default per-call deadline, and the chunk size of uploads."""

    def __init__(
        self,
        target: str | grpc.Channel,
        *,
        timeout: float | None = None,
        chunk_size: int = CHUNK_SIZE,
    ) -> None:
        """Args:
        target: ``host:port`` to open a plaintext channel to (see `connect`), or a channel
            the caller opened and keeps ownership of.
        timeout: Seconds each call may take, or None for no deadline.
        chunk_size: Bytes per uploaded chunk message, at most 1 MiB.
        """
        if not 0 < chunk_size <= CHUNK_SIZE:
            raise ValueError(f"chunk_size must be 1..{CHUNK_SIZE}, not {chunk_size}")
        if isinstance(target, str):
            self.channel = connect(target)
            self._owns_channel = True
        else:
            self.channel = target
            self._owns_channel = False
        self.timeout = timeout
        self.chunk_size = chunk_size

    def close(self) -> None:
        """Closes the channel if this client opened it."""
        if self._owns_channel:
            self.channel.close()

    def __enter__(self: C) -> C:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
