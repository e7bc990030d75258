"""snug-hub-client: Snug Hub's gRPC services and `/userdb` HTTP API from Python.

- `ContainerClient`, `SchemaClient`, `MaterializeClient`, `SyncClient`: one per `snug.*.v1`
  gRPC service; `HubClient` holds all four on one channel (a hub serving every service on one
  port). Files go up and come down in 1 MiB chunks, from and to paths or binary file objects.
- `UserDbClient`: the user's file over HTTP (`/userdb`), with revisions, restore, per-app
  export and a compare-and-swap loop (`UserDbClient.update`).
- `snug_hub.errors`: one exception class per documented error reason (`Locked`, `Corrupt`,
  `RevisionMismatch`, `TooLarge`, ...), raised by every client instead of raw gRPC or HTTP
  errors.
- `snug_hub.pb`: the generated messages and stubs (from `proto/`, when the package was built).
- `snug_hub.testcontainers`: the hub's image in Docker for test suites (needs the
  `testcontainers` extra).

The version follows the protos' `v1` promise: 1.x.y talks to every hub serving `snug.*.v1`.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import grpc

from snug_hub._channel import connect
from snug_hub.container import ContainerClient
from snug_hub.errors import SnugError
from snug_hub.materialize import MaterializeClient
from snug_hub.schema import SchemaClient
from snug_hub.sync import Caller, SyncClient
from snug_hub.userdb import Image, ImageInfo, Revision, UserDbClient, WatchEvent

try:
    __version__ = version("snug-hub-client")
except PackageNotFoundError:  # imported from a source tree, not installed
    __version__ = "0+unknown"

__all__ = [
    "Caller",
    "ContainerClient",
    "HubClient",
    "Image",
    "ImageInfo",
    "MaterializeClient",
    "Revision",
    "SchemaClient",
    "SnugError",
    "SyncClient",
    "UserDbClient",
    "WatchEvent",
    "__version__",
    "connect",
]


class HubClient:
    """Every service client of a hub that serves them all on one gRPC port
    (``snug-hub serve``), sharing one channel."""

    def __init__(
        self,
        target: str | grpc.Channel,
        *,
        timeout: float | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        service_token: str | None = None,
    ) -> None:
        """Args:
        target: ``host:port``, or a channel the caller opened and keeps ownership of.
        timeout: Seconds each call may take, or None for no deadline.
        credentials: TLS credentials for a ``host:port`` target; None for plaintext.
        service_token: The hub's service token (``SNUG_SERVICE_TOKEN``), presented on every
            call to a ``host:port`` target whose services require one.
        """
        self._owns_channel = isinstance(target, str)
        self.channel = (
            connect(target, credentials, service_token=service_token)
            if isinstance(target, str)
            else target
        )
        self.container = ContainerClient(self.channel, timeout=timeout)
        self.schema = SchemaClient(self.channel, timeout=timeout)
        self.materialize = MaterializeClient(self.channel, timeout=timeout)
        self.sync = SyncClient(self.channel, timeout=timeout)

    def close(self) -> None:
        """Closes the channel if this client opened it."""
        if self._owns_channel:
            self.channel.close()

    def __enter__(self) -> HubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
