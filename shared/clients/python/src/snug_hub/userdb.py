"""The client of the hub's HTTP surface for a user's file: `/userdb` (§9.3).

`GET|HEAD|PUT /userdb` with strong ETags (the revision), `Repr-Digest` (the SHA-256) and
revision compare-and-swap, `GET /userdb/revisions`, `POST /userdb/revisions/{rev}/restore` and
`GET /userdb/apps/{appId}/export`, and `GET /userdb/events` (`watch`: the revisions as they are
committed), authenticated with a bearer token (`snug-hub users add`).
Standard library only (`http.client`).

Every refusal raises its `snug_hub.errors` class from the JSON body `{code, message,
retryable}`: 412 `RevisionMismatch` (or `StaleRevision`) with `current_revision`, 428
`PreconditionRequired`, 413 `TooLarge`, 401 `Unauthenticated`, 503 `ServiceUnavailable` /
`StorageUnavailable` / `Overloaded` with `retryable` and `retry_after`. An unreachable hub is an
`UnavailableError`, a timeout a `DeadlineExceededError`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import http.client
import json
import re
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from snug_hub._streams import CHUNK_SIZE, Requests, Sink, Source, open_sink, read_chunks, source_length
from snug_hub.errors import (
    DeadlineExceededError,
    DigestMismatch,
    NotFound,
    ProtocolError,
    RevisionMismatch,
    SnugError,
    UnavailableError,
    from_http,
)
from snug_hub.sync import Hashing

# The largest error body read: errors are small JSON documents.
_MAX_ERROR_BODY = 64 * 1024


@dataclass(frozen=True)
class ImageInfo:
    """A revision of the user's image as the headers describe it."""

    #: The revision: the strong ETag without its quotes. Opaque; never parse it.
    revision: str
    #: SHA-256 of the image bytes as stored and served, 64 lowercase hex digits
    #: (``Repr-Digest``); None when the answer had none.
    sha256: str | None
    #: The image's size in bytes (``Content-Length``); None when the answer had none.
    size: int | None
    #: The image's SQLite ``user_version`` as recorded (``Snug-Storage-Version``); None when
    #: unknown.
    storage_version: int | None


@dataclass(frozen=True)
class Image(ImageInfo):
    """A revision of the user's image with its bytes (checked against `sha256`)."""

    data: bytes = b""


@dataclass(frozen=True)
class Revision:
    """One entry of the user's revision history (``GET /userdb/revisions``)."""

    revision: str
    sha256: str
    size: int
    principal: str
    retained: bool
    accepted_at: str | None = None
    base: str | None = None
    restored_from: str | None = None
    storage_version: int | None = None

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Revision:
        """Reads the OpenAPI document's `Revision` object."""
        return cls(
            revision=str(value["revision"]),
            sha256=str(value["sha256"]),
            size=int(value["size"]),
            principal=str(value["principal"]),
            retained=bool(value["retained"]),
            accepted_at=value.get("acceptedAt"),
            base=value.get("base"),
            restored_from=value.get("restoredFrom"),
            storage_version=value.get("storageVersion"),
        )


@dataclass(frozen=True)
class WatchEvent:
    """One event of `UserDbClient.watch`."""

    #: ``"revision"`` (a revision, described by `info`), ``"no-image"`` (the user has no
    #: image: HEAD's 404) or ``"gap"`` (revisions may have been committed that were not listed;
    #: a ``"revision"`` event follows).
    kind: str
    #: For a ``"revision"``: what ``HEAD /userdb`` shows of it.
    info: ImageInfo | None = None


class UserDbClient:
    """A user's file on a hub, over HTTP with a bearer token."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float | None = 60.0,
        ssl_context: ssl.SSLContext | None = None,
        chunk_size: int = CHUNK_SIZE,
    ) -> None:
        """Args:
        base_url: The hub's HTTP base, e.g. ``http://127.0.0.1:8080`` or
            ``https://hub.example/api`` (the routes go below its path).
        token: The user's bearer token; None sends no credentials.
        timeout: Seconds each socket operation may take, or None for no limit.
        ssl_context: For https: the context to verify the hub with (default: the system's).
        chunk_size: Bytes per read and write while streaming.
        """
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) base URL: {base_url!r}")
        self.base_url = base_url
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._ssl_context = ssl_context
        self.chunk_size = chunk_size

    # --- reads -------------------------------------------------------------------------------

    def head(self, revision: str | None = None) -> ImageInfo:
        """Returns the current revision (or retained `revision`) without the bytes.
        No image yet raises `NotFound`."""
        with self._exchange("HEAD", self._image_path(revision)) as response:
            if response.status == 404:
                # A HEAD answer has no body to say so.
                raise NotFound("no image", http_status=404, http_code="NOT_FOUND")
            self._check(response)
            return _image_info(response)

    def get(self, revision: str | None = None) -> Image:
        """Downloads the current image (or retained `revision`) into memory; the bytes are
        checked against ``Repr-Digest``. No image yet raises `NotFound`."""
        with self._exchange("GET", self._image_path(revision)) as response:
            self._check(response)
            info = _image_info(response)
            data = _read(response)
            _verify(info, len(data), hashlib.sha256(data).hexdigest())
            return Image(
                revision=info.revision,
                sha256=info.sha256,
                size=info.size,
                storage_version=info.storage_version,
                data=data,
            )

    def download(self, out: Sink, revision: str | None = None) -> ImageInfo:
        """Streams the current image (or retained `revision`) into `out`, checked against
        ``Repr-Digest`` before a path `out` is replaced (`DigestMismatch` otherwise)."""
        with self._exchange("GET", self._image_path(revision)) as response:
            self._check(response)
            info = _image_info(response)
            with open_sink(out) as sink:
                hashing = Hashing(sink)
                received = self._copy(response, hashing)
                _verify(info, received, hashing.hexdigest())
            return info

    def revisions(self, limit: int | None = None) -> list[Revision]:
        """Returns the user's revisions, newest first (at most `limit`, 1..1000)."""
        path = "/userdb/revisions" + (f"?limit={int(limit)}" if limit is not None else "")
        with self._exchange("GET", path) as response:
            self._check(response)
            body = json.loads(_read(response))
        return [Revision.from_json(entry) for entry in body["revisions"]]

    def export_app(self, app_id: str, out: Sink) -> str:
        """Streams one app of the current image as a standalone database (§8.2) into `out`;
        returns the file name the hub gives it (``<token>.snug``)."""
        path = f"/userdb/apps/{quote(app_id, safe='')}/export"
        with self._exchange("GET", path) as response:
            self._check(response)
            expected = _int_header(response, "Content-Length")
            with open_sink(out) as sink:
                received = self._copy(response, sink)
                if expected is not None and received != expected:
                    raise ProtocolError(f"the export ended after {received} of {expected} bytes")
            match = re.search(r'filename="([^"]*)"', response.getheader("Content-Disposition") or "")
            return match.group(1) if match else f"{app_id}.snug"

    # --- writes ------------------------------------------------------------------------------

    def put(self, image: Source, *, if_match: str | None = None, create: bool = False) -> str:
        """Writes a new image and returns its revision. Name the revision the write is based
        on (`if_match`) or, for the user's first image, `create=True`; with neither the hub
        answers 428 `PreconditionRequired`. A precondition that does not hold raises
        `RevisionMismatch` with `current_revision`."""
        headers = {"Content-Type": "application/octet-stream", **_precondition(if_match, create)}
        length = source_length(image)
        with self._exchange("PUT", "/userdb", headers=headers, body=image, length=length) as response:
            self._check(response)
            return _revision(response)

    def update(self, change: Callable[[bytes | None], bytes], *, attempts: int = 5) -> str:
        """Runs a compare-and-swap loop: reads the current image (None when there is none),
        writes ``change(current)`` based on it, and starts again from the new current image
        when another writer got there first, up to `attempts` times. Returns the revision
        written; the last `RevisionMismatch` when every attempt lost the race.

        `change` may run several times and must not have effects beyond its result.
        """
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        for attempt in range(attempts):
            try:
                current: Image | None = self.get()
            except NotFound:
                current = None
            new = change(None if current is None else current.data)
            try:
                if current is None:
                    return self.put(new, create=True)
                return self.put(new, if_match=current.revision)
            except RevisionMismatch:
                if attempt + 1 == attempts:
                    raise
        raise AssertionError("unreachable")

    def restore(
        self, revision: str, *, if_match: str | None = None, create: bool = False
    ) -> Revision:
        """Makes retained `revision` current again by copying its bytes forward as a new
        revision, under the same preconditions as `put`; returns the new revision."""
        path = f"/userdb/revisions/{quote(revision, safe='')}/restore"
        headers = _precondition(if_match, create)
        with self._exchange("POST", path, headers=headers, body=b"", length=0) as response:
            self._check(response)
            body = json.loads(_read(response))
        return Revision.from_json(body["revision"])

    def watch(self, *, last_event_id: str | None = None, reconnect: bool = True) -> Iterator[WatchEvent]:
        """Yields the user's revisions as they are committed (``GET /userdb/events``), for as
        long as the caller iterates: first the current one (or ``"no-image"``), then each one
        committed after it through any replica, oldest first. With `last_event_id` (a revision
        seen last) it begins after that one. When the hub ends the stream (its lifetime, a
        restart) it reconnects after the hub's ``retry`` hint, resuming after the last revision
        yielded, so none is missed; with ``reconnect=False`` it returns instead. A refusal
        raises its typed `SnugError` (``Unauthenticated``, ``RateLimited``, ``Overloaded``...).
        The socket timeout must exceed the hub's 15 s heartbeat."""
        last = last_event_id
        while True:
            headers = {"Accept": "text/event-stream"}
            if last is not None:
                headers["Last-Event-ID"] = f'"{last}"'
            retry = 2.0
            with self._exchange("GET", "/userdb/events", headers=headers) as response:
                self._check(response)
                for kind, data in _events(response):
                    if kind == "retry":
                        retry = int(data) / 1000 if data.isdigit() else retry
                    elif kind == "revision":
                        info = _event_info(data)
                        last = info.revision
                        yield WatchEvent("revision", info)
                    elif kind in ("no-image", "gap"):
                        yield WatchEvent(kind)
                    elif kind == "error":
                        err = from_http(503, data.encode())
                        if not reconnect or err.retryable is False:
                            raise err
                        break
            if not reconnect:
                return
            time.sleep(retry)

    # --- plumbing ----------------------------------------------------------------------------

    def _image_path(self, revision: str | None) -> str:
        return "/userdb" if revision is None else f"/userdb/revisions/{quote(revision, safe='')}"

    def _connection(self) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(
                self._host,
                self._port,
                timeout=self.timeout,
                context=self._ssl_context,
                blocksize=self.chunk_size,
            )
        return http.client.HTTPConnection(
            self._host, self._port, timeout=self.timeout, blocksize=self.chunk_size
        )

    def _exchange(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        body: Source | None = None,
        length: int | None = None,
    ) -> _Exchange:
        sent = {"Accept": "application/json, application/octet-stream", **(headers or {})}
        if self.token is not None:
            sent["Authorization"] = f"Bearer {self.token}"
        chunks: Requests[bytes] | None = None
        if body is not None:
            chunks = Requests(read_chunks(body, self.chunk_size))
            if length is not None:
                sent["Content-Length"] = str(length)
        return _Exchange(self._connection(), method, self._prefix + path, sent, chunks, length)

    def _check(self, response: http.client.HTTPResponse) -> None:
        if response.status < 400:
            return
        body = _read(response, _MAX_ERROR_BODY)
        raise from_http(
            response.status,
            body,
            etag=response.getheader("ETag"),
            retry_after=response.getheader("Retry-After"),
        )

    def _copy(self, response: http.client.HTTPResponse, sink: Any) -> int:
        received = 0
        while True:
            piece = _read(response, self.chunk_size)
            if not piece:
                return received
            sink.write(piece)
            received += len(piece)


class _Exchange:
    """One request on its own connection, as a context manager yielding the response; socket
    failures become `UnavailableError` (unreachable) or `DeadlineExceededError` (timed out),
    while a failure to read the request body's source is raised as itself."""

    def __init__(
        self,
        connection: http.client.HTTPConnection,
        method: str,
        path: str,
        headers: dict[str, str],
        body: Requests[bytes] | None,
        length: int | None,
    ) -> None:
        self._connection = connection
        self._method = method
        self._path = path
        self._headers = headers
        self._body = body
        self._length = length

    def __enter__(self) -> http.client.HTTPResponse:
        where = f"{self._connection.host}:{self._connection.port}"
        try:
            try:
                self._connection.request(
                    self._method,
                    self._path,
                    body=self._body,
                    headers=self._headers,
                    encode_chunked=self._body is not None and self._length is None,
                )
            except (BrokenPipeError, ConnectionResetError):
                # The hub may refuse an upload before reading all of it (413 on a declared
                # length over the quota) and close: its answer is still there to read.
                if self._body is not None and self._body.error is not None:
                    raise
            return self._connection.getresponse()
        except OSError as err:
            self._connection.close()
            if self._body is not None and self._body.error is not None:
                raise self._body.error from None
            raise _network_error(err, where) from err
        except http.client.HTTPException as err:
            self._connection.close()
            raise ProtocolError(f"{where}: {err!r}") from err

    def __exit__(self, *exc: object) -> None:
        self._connection.close()


def _events(response: http.client.HTTPResponse) -> Iterator[tuple[str, str]]:
    """The (event, data) of each block of an event stream until it ends; a ``retry:`` hint is
    ``("retry", milliseconds)``, comments (heartbeats) are skipped."""
    kind, data = "message", ""
    while True:
        try:
            raw = response.readline()
        except TimeoutError as err:
            raise DeadlineExceededError(f"the event stream went silent: {err}") from err
        except OSError as err:
            raise _network_error(err, "the event stream") from err
        if not raw:
            return
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data or kind != "message":
                yield kind, data
            kind, data = "message", ""
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            kind = value
        elif field == "data":
            data = value if not data else f"{data}\n{value}"
        elif field == "retry":
            kind, data = "retry", value


def _event_info(data: str) -> ImageInfo:
    """A ``revision`` event's data: what HEAD shows of the revision."""
    try:
        fields = json.loads(data)
        return ImageInfo(
            revision=str(fields["revision"]),
            sha256=fields.get("sha256"),
            size=fields.get("size"),
            storage_version=fields.get("storageVersion"),
        )
    except (ValueError, KeyError, TypeError) as err:
        raise ProtocolError(f"a revision event the hub should not send: {data!r}") from err


def _read(response: http.client.HTTPResponse, size: int = -1) -> bytes:
    """Reads (part of) an answer's body; a connection that breaks or times out meanwhile is a
    typed error, as it is while the request is sent."""
    try:
        return response.read(size) if size >= 0 else response.read()
    except TimeoutError as err:
        raise DeadlineExceededError(f"the hub stopped sending its answer: {err}") from err
    except OSError as err:
        raise UnavailableError(f"the connection to the hub broke: {err}") from err
    except http.client.HTTPException as err:
        raise ProtocolError(f"the answer broke off: {err!r}") from err


def _network_error(err: OSError, where: str) -> SnugError:
    if isinstance(err, TimeoutError):
        return DeadlineExceededError(f"{where} did not answer in time: {err}")
    return UnavailableError(f"cannot reach {where}: {err}")


def _precondition(if_match: str | None, create: bool) -> dict[str, str]:
    if if_match is not None and create:
        raise ValueError("a write is based on a revision (if_match) or is the first (create), not both")
    if create:
        return {"If-None-Match": "*"}
    if if_match is not None:
        return {"If-Match": f'"{if_match}"'}
    return {}


def _revision(response: http.client.HTTPResponse) -> str:
    etag = response.getheader("ETag")
    if not etag:
        raise ProtocolError(f"a {response.status} answer without an ETag")
    _read(response)
    return etag.strip().strip('"')


def _int_header(response: http.client.HTTPResponse, name: str) -> int | None:
    value = response.getheader(name)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _image_info(response: http.client.HTTPResponse) -> ImageInfo:
    etag = response.getheader("ETag")
    if not etag:
        raise ProtocolError("an image answer without an ETag")
    return ImageInfo(
        revision=etag.strip().strip('"'),
        sha256=_repr_digest(response.getheader("Repr-Digest")),
        size=_int_header(response, "Content-Length"),
        storage_version=_int_header(response, "Snug-Storage-Version"),
    )


def _repr_digest(value: str | None) -> str | None:
    """The SHA-256 of an RFC 9530 ``Repr-Digest`` (``sha-256=:<base64>:``), as hex."""
    for item in (value or "").split(","):
        algorithm, _, encoded = item.strip().partition("=")
        if algorithm.strip().lower() == "sha-256" and encoded.startswith(":") and encoded.endswith(":"):
            try:
                return base64.b64decode(encoded[1:-1], validate=True).hex()
            except (binascii.Error, ValueError):
                return None
    return None


def _verify(info: ImageInfo, received: int, sha256: str) -> None:
    if info.size is not None and received != info.size:
        raise ProtocolError(f"revision {info.revision}: {received} of {info.size} bytes arrived")
    if info.sha256 is not None and sha256 != info.sha256:
        raise DigestMismatch(
            f"revision {info.revision}: the bytes received hash to {sha256}, not the "
            f"{info.sha256} announced"
        )
