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


class _ServiceToken(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds ``authorization: Bearer <token>`` to every call: the hub's service token
    (``SNUG_SERVICE_TOKEN``), which a hub's services, given one, require of every call but
    health checks. Works on plaintext and TLS channels alike."""

    def __init__(self, token: str) -> None:
        self._metadata = ("authorization", f"Bearer {token}")

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = [*(details.metadata or ()), self._metadata]
        return details._replace(metadata=metadata)  # type: ignore[attr-defined, no-any-return]

    def intercept_unary_unary(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, requests):  # type: ignore[no-untyped-def]
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):  # type: ignore[no-untyped-def]
        return continuation(self._details(details), requests)


def connect(
    target: str,
    credentials: grpc.ChannelCredentials | None = None,
    *,
    service_token: str | None = None,
) -> grpc.Channel:
    """Opens a channel to `target` (``host:port``) with the message limits Snug Hub's protos
    ask for: plaintext, or TLS with `credentials` (``grpc.ssl_channel_credentials()``); with
    `service_token`, every call presents the hub's service token (``SNUG_SERVICE_TOKEN``)."""
    if credentials is None:
        channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
    else:
        channel = grpc.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
    if service_token is None:
        return channel
    return grpc.intercept_channel(channel, _ServiceToken(service_token))


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
        service_token: str | None = None,
    ) -> None:
        """Args:
        target: ``host:port`` to open a plaintext channel to (see `connect`), or a channel
            the caller opened and keeps ownership of.
        timeout: Seconds each call may take, or None for no deadline.
        chunk_size: Bytes per uploaded chunk message, at most 1 MiB.
        service_token: The hub's service token (``SNUG_SERVICE_TOKEN``), for a ``host:port``
            target whose services require one.
        """
        if not 0 < chunk_size <= CHUNK_SIZE:
            raise ValueError(f"chunk_size must be 1..{CHUNK_SIZE}, not {chunk_size}")
        if isinstance(target, str):
            self.channel = connect(target, service_token=service_token)
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
