"""Typed errors: one exception class per error reason Snug Hub documents.

Every failed gRPC call carries a `google.rpc.Status` in its `grpc-status-details-bin` trailer
whose `google.rpc.ErrorInfo` names a *reason* (`LOCKED`, `REVISION_MISMATCH`, ...) in a domain
(`snug.container`, ...); the protos' reason tables list them with their gRPC codes. Every failed
HTTP call answers JSON `{code, message, retryable}`. This module turns both into one exception
hierarchy, so callers switch on classes, never on message text:

    SnugError
      +- <category>Error, one per gRPC code (InvalidArgumentError, AbortedError, ...)
           +- <Reason>, one per documented reason (Locked, RevisionMismatch, TooLarge, ...)

A reason this version does not know (a newer hub may add reasons within v1) raises its gRPC
code's category class, with `.reason` set: README "Upgrading" promises clients can treat an
unknown reason by its code. A call that failed without an ErrorInfo (a deadline, a refused
connection) raises its code's category too.

Two reasons refine another where a caller's remedy is the same: `StaleRevision` is a
`RevisionMismatch` (both: start the read-modify-write again from `current_revision`), and
`QuotaExceeded` is a `TooLarge` (the HTTP gateway answers both as `USERDB_TOO_LARGE`).

The gateway's own refusals (`Unauthenticated`, `ServiceUnavailable`, ...) have no gRPC code:
their `CODE` is None and they sit under the category whose HTTP meaning they share.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import ClassVar

import grpc
from google.rpc import error_details_pb2, status_pb2

__all__ = [
    "SnugError",
    "ProtocolError",
    "DigestMismatch",
    "REASONS",
    "HTTP_CODES",
    "from_rpc_error",
    "from_http",
]


class SnugError(Exception):
    """Base class of every error this package raises for a refused or failed call.

    Attributes:
        message: The server's message, for people; never parse it.
        reason: The ErrorInfo reason (gRPC) or the JSON ``code`` (HTTP); None when the failure
            carried none (a deadline, an unreachable server).
        domain: The ErrorInfo domain, e.g. ``"snug.container"``; None over HTTP.
        metadata: The ErrorInfo metadata (e.g. ``currentRevision``); over HTTP, the 412's
            current revision as ``currentRevision``.
        code: The gRPC status code of a failed gRPC call; None over HTTP.
        http_status: The HTTP status of a failed HTTP call; None over gRPC.
        http_code: The JSON ``code`` of a failed HTTP call; None over gRPC.
        retryable: Whether the same request may succeed later unchanged (HTTP: the body's
            ``retryable``; gRPC: what the reason's class says).
        retry_after: HTTP ``Retry-After`` in seconds, when the answer had one.
    """

    #: The reason this class stands for; None for the base and category classes.
    REASON: ClassVar[str | None] = None
    #: The gRPC code the protos document for `REASON` (a category's own code); None for the
    #: gateway's own reasons, which no gRPC service sends.
    CODE: ClassVar[grpc.StatusCode | None] = None
    #: Whether an error of this class is retryable when the answer does not say.
    RETRYABLE: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        domain: str | None = None,
        metadata: Mapping[str, str] | None = None,
        code: grpc.StatusCode | None = None,
        http_status: int | None = None,
        http_code: str | None = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason if reason is not None else self.REASON
        self.domain = domain
        self.metadata: dict[str, str] = dict(metadata or {})
        self.code = code
        self.http_status = http_status
        self.http_code = http_code
        self.retryable = self.RETRYABLE if retryable is None else retryable
        self.retry_after = retry_after

    def __str__(self) -> str:
        label = self.reason or self.http_code
        if label is None and self.code is not None:
            label = self.code.name
        if label is None and self.http_status is not None:
            label = f"HTTP {self.http_status}"
        return f"{label}: {self.message}" if label else self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class ProtocolError(SnugError):
    """The server answered in a shape the API does not allow (a stream without its result
    message first, fewer or more bytes than announced): a broken server or a proxy in between."""


class DigestMismatch(ProtocolError):
    """A download's bytes do not match the SHA-256 the hub announced for them (``Repr-Digest``)."""


# --- categories: one per gRPC code -----------------------------------------------------------


class CancelledError(SnugError):
    """CANCELLED: the call was cancelled, e.g. it outlived the server's per-request deadline."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.CANCELLED


class UnknownError(SnugError):
    """UNKNOWN."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.UNKNOWN


class InvalidArgumentError(SnugError):
    """INVALID_ARGUMENT: the request or the bytes it carries are not acceptable."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceededError(SnugError):
    """DEADLINE_EXCEEDED: the caller's deadline passed."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.DEADLINE_EXCEEDED
    RETRYABLE = True


class NotFoundError(SnugError):
    """NOT_FOUND."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(SnugError):
    """ALREADY_EXISTS."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.ALREADY_EXISTS


class PermissionDeniedError(SnugError):
    """PERMISSION_DENIED."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(SnugError):
    """RESOURCE_EXHAUSTED: a size, quota or budget was exceeded."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPreconditionError(SnugError):
    """FAILED_PRECONDITION: the system is not in the state the call needs."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(SnugError):
    """ABORTED: restart the read-modify-write from the current state."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.ABORTED
    RETRYABLE = True


class OutOfRangeError(SnugError):
    """OUT_OF_RANGE."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.OUT_OF_RANGE


class UnimplementedError(SnugError):
    """UNIMPLEMENTED: the server (or this deployment) does not offer the call."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.UNIMPLEMENTED


class InternalError(SnugError):
    """INTERNAL: a bug or damaged storage on the server; its log has the details."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.INTERNAL


class UnavailableError(SnugError):
    """UNAVAILABLE: the server or something it needs is down or overloaded; retry later."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.UNAVAILABLE
    RETRYABLE = True


class DataLossError(SnugError):
    """DATA_LOSS."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.DATA_LOSS


class UnauthenticatedError(SnugError):
    """UNAUTHENTICATED: no valid credentials."""

    CODE: ClassVar[grpc.StatusCode | None] = grpc.StatusCode.UNAUTHENTICATED


# --- reasons of snug.container.v1 (and those other services share) ----------------------------


class Locked(FailedPreconditionError):
    """LOCKED: a healthy container that no supplied secret opened. The file is fine."""

    REASON = "LOCKED"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class Corrupt(InvalidArgumentError):
    """CORRUPT: a damaged container; `detail` names the damage."""

    REASON = "CORRUPT"
    CODE = grpc.StatusCode.INVALID_ARGUMENT

    @property
    def detail(self) -> str | None:
        """What is damaged (metadata ``detail``)."""
        return self.metadata.get("detail")


class UnsupportedFormatVersion(InvalidArgumentError):
    """UNSUPPORTED_FORMAT_VERSION: a container version or KDF newer than the server's build."""

    REASON = "UNSUPPORTED_FORMAT_VERSION"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class IterationsOutOfPolicy(InvalidArgumentError):
    """ITERATIONS_OUT_OF_POLICY: a healthy container whose PBKDF2 count is outside the range
    (metadata ``iterations``, ``minIterations``, ``maxIterations``); widen the request's
    ``iteration_policy`` to open it."""

    REASON = "ITERATIONS_OUT_OF_POLICY"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class NotAContainer(InvalidArgumentError):
    """NOT_A_CONTAINER: the bytes are not a SNUGENC1 container."""

    REASON = "NOT_A_CONTAINER"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class AlreadyProtected(InvalidArgumentError):
    """ALREADY_PROTECTED: Protect or Reseal was given a container as the plaintext."""

    REASON = "ALREADY_PROTECTED"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class NotAUserDatabase(InvalidArgumentError):
    """NOT_A_USER_DATABASE: the bytes are not a Snug user database."""

    REASON = "NOT_A_USER_DATABASE"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class NoPassphraseSlot(FailedPreconditionError):
    """NO_PASSPHRASE_SLOT: ChangePassphrase on a container without a passphrase slot."""

    REASON = "NO_PASSPHRASE_SLOT"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class NoRecoverySlot(FailedPreconditionError):
    """NO_RECOVERY_SLOT: RotateRecoveryKey on a container without a recovery slot."""

    REASON = "NO_RECOVERY_SLOT"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class CustodyNotAcknowledged(FailedPreconditionError):
    """CUSTODY_NOT_ACKNOWLEDGED: Protect without confirming the custody statement was shown."""

    REASON = "CUSTODY_NOT_ACKNOWLEDGED"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class WeakRecoveryKey(InvalidArgumentError):
    """WEAK_RECOVERY_KEY: a supplied new recovery key below full strength (27 symbols)."""

    REASON = "WEAK_RECOVERY_KEY"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class TooLarge(ResourceExhaustedError):
    """TOO_LARGE: a stream, a file, a write's result or a response exceeds its cap (metadata
    ``limit``); over HTTP, ``USERDB_TOO_LARGE`` (413), which the per-user quota gives too."""

    REASON = "TOO_LARGE"
    CODE = grpc.StatusCode.RESOURCE_EXHAUSTED


class InvalidArgument(InvalidArgumentError):
    """INVALID_ARGUMENT: a malformed request; metadata ``field`` names the field."""

    REASON = "INVALID_ARGUMENT"
    CODE = grpc.StatusCode.INVALID_ARGUMENT

    @property
    def field(self) -> str | None:
        """The offending field (metadata ``field``), ``(message)`` for an undecodable one."""
        return self.metadata.get("field")


class DeadlineExceeded(DeadlineExceededError):
    """DEADLINE_EXCEEDED: the call outlived its deadline (the client's ``grpc-timeout`` or the
    server's request timeout); the server stopped its work and kept nothing. Over HTTP the
    gateway answers ``SERVICE_UNAVAILABLE`` (503)."""

    REASON = "DEADLINE_EXCEEDED"
    CODE = grpc.StatusCode.DEADLINE_EXCEEDED
    RETRYABLE = True


class DdlTooLarge(ResourceExhaustedError):
    """DDL_TOO_LARGE: an ApplyDdl request holds more statements or more statement text than one
    call applies (metadata ``field``, ``limit``); nothing was read or written."""

    REASON = "DDL_TOO_LARGE"
    CODE = grpc.StatusCode.RESOURCE_EXHAUSTED


class Overloaded(UnavailableError):
    """OVERLOADED: too many jobs queued, or the server's concurrency limit shed the request
    (domain ``snug.rpc``); retry later."""

    REASON = "OVERLOADED"
    CODE = grpc.StatusCode.UNAVAILABLE
    RETRYABLE = True


class Internal(InternalError):
    """INTERNAL: a bug or a host failure; the message is generic and the cause is logged."""

    REASON = "INTERNAL"
    CODE = grpc.StatusCode.INTERNAL


# --- reasons of snug.schema.v1 ---------------------------------------------------------------


class NotSqlite(InvalidArgumentError):
    """NOT_SQLITE: the bytes are not a SQLite database (nor, where accepted, SNUGENC1)."""

    REASON = "NOT_SQLITE"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class Malformed(InvalidArgumentError):
    """MALFORMED: a damaged SQLite file; metadata ``detail`` names the damage."""

    REASON = "MALFORMED"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class HostileSchema(InvalidArgumentError):
    """HOSTILE_SCHEMA: triggers, views, virtual tables, foreign indexes or tables, wrong shapes."""

    REASON = "HOSTILE_SCHEMA"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class SchemaTooNew(FailedPreconditionError):
    """SCHEMA_TOO_NEW: stamped newer than the server understands (metadata ``foundVersion``,
    ``supportedVersion``); leave the file byte for byte as it is."""

    REASON = "SCHEMA_TOO_NEW"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class Protected(FailedPreconditionError):
    """PROTECTED: a SNUGENC1 file where a plain one is needed: unlock it first."""

    REASON = "PROTECTED"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class CorruptContainer(InvalidArgumentError):
    """CORRUPT_CONTAINER: CheckImport or ImportUserDatabase was given a damaged container."""

    REASON = "CORRUPT_CONTAINER"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class ContainerNotAccepted(InvalidArgumentError):
    """CONTAINER_NOT_ACCEPTED: a hub sync origin stores plaintext only (§11.3)."""

    REASON = "CONTAINER_NOT_ACCEPTED"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class SecretsPresent(InvalidArgumentError):
    """SECRETS_PRESENT: the image has rows in ``snug_secrets`` (metadata ``secretRows``)."""

    REASON = "SECRETS_PRESENT"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class AppNotFound(NotFoundError):
    """APP_NOT_FOUND: no app with that id (metadata ``appId``)."""

    REASON = "APP_NOT_FOUND"
    CODE = grpc.StatusCode.NOT_FOUND


class VersionNotFound(NotFoundError):
    """VERSION_NOT_FOUND: the app has no such (or a pruned) version."""

    REASON = "VERSION_NOT_FOUND"
    CODE = grpc.StatusCode.NOT_FOUND


class DocNotFound(NotFoundError):
    """DOC_NOT_FOUND: the app has no doc with that slug."""

    REASON = "DOC_NOT_FOUND"
    CODE = grpc.StatusCode.NOT_FOUND


class ThreadNotFound(NotFoundError):
    """THREAD_NOT_FOUND: no chat thread with that id."""

    REASON = "THREAD_NOT_FOUND"
    CODE = grpc.StatusCode.NOT_FOUND


class MessageNotFound(NotFoundError):
    """MESSAGE_NOT_FOUND: no chat message with that id."""

    REASON = "MESSAGE_NOT_FOUND"
    CODE = grpc.StatusCode.NOT_FOUND


class AppExists(AlreadyExistsError):
    """APP_EXISTS: InstallApp with an explicit app id that is taken."""

    REASON = "APP_EXISTS"
    CODE = grpc.StatusCode.ALREADY_EXISTS


class AppTokenCollision(InvalidArgumentError):
    """APP_TOKEN_COLLISION: two registered apps share an appDataToken (§8.2)."""

    REASON = "APP_TOKEN_COLLISION"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class VersionPinned(FailedPreconditionError):
    """VERSION_PINNED: DeleteAppVersion of a pinned version."""

    REASON = "VERSION_PINNED"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class VersionCurrent(FailedPreconditionError):
    """VERSION_CURRENT: DeleteAppVersion of the version the app runs."""

    REASON = "VERSION_CURRENT"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class NoFactoryVersion(FailedPreconditionError):
    """NO_FACTORY_VERSION: ResetToFactory of an app with no pinned version."""

    REASON = "NO_FACTORY_VERSION"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class InvalidContract(InvalidArgumentError):
    """INVALID_CONTRACT: a runtime contract that is not a JSON object."""

    REASON = "INVALID_CONTRACT"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class CorruptRow(InvalidArgumentError):
    """CORRUPT_ROW: the file holds a row no conforming hub writes."""

    REASON = "CORRUPT_ROW"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


# --- reasons of snug.materialize.v1 ----------------------------------------------------------


class InvalidName(InvalidArgumentError):
    """INVALID_NAME: an object name breaks the §8.2 rule; nothing written."""

    REASON = "INVALID_NAME"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class VirtualTable(InvalidArgumentError):
    """VIRTUAL_TABLE: a virtual table in a runtime or a statement; nothing written."""

    REASON = "VIRTUAL_TABLE"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class InvalidKvTable(InvalidArgumentError):
    """INVALID_KV_TABLE: ``snug_kv`` is not ``(key TEXT PRIMARY KEY, value TEXT)``."""

    REASON = "INVALID_KV_TABLE"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class ForbiddenStatement(InvalidArgumentError):
    """FORBIDDEN_STATEMENT: the sandbox refused a statement (ATTACH, a pragma, ...)."""

    REASON = "FORBIDDEN_STATEMENT"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class NotOneStatement(InvalidArgumentError):
    """NOT_ONE_STATEMENT: a statement entry is empty or holds more than one statement."""

    REASON = "NOT_ONE_STATEMENT"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class StatementFailed(InvalidArgumentError):
    """STATEMENT_FAILED: SQLite rejected or failed a statement (metadata ``statement``)."""

    REASON = "STATEMENT_FAILED"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class DdlFailed(InvalidArgumentError):
    """DDL_FAILED: SQLite rejected DDL: given, stored, or a runtime table at rest."""

    REASON = "DDL_FAILED"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class BudgetExceeded(ResourceExhaustedError):
    """BUDGET_EXCEEDED: a statement ran out of its virtual-machine step budget."""

    REASON = "BUDGET_EXCEEDED"
    CODE = grpc.StatusCode.RESOURCE_EXHAUSTED


class ResultTooLarge(ResourceExhaustedError):
    """RESULT_TOO_LARGE: a result exceeded its bounds with OVERFLOW_FAIL."""

    REASON = "RESULT_TOO_LARGE"
    CODE = grpc.StatusCode.RESOURCE_EXHAUSTED


class ReadOnly(InvalidArgumentError):
    """READ_ONLY: a read-only ExecuteSql whose statements would write."""

    REASON = "READ_ONLY"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class NameCollision(FailedPreconditionError):
    """NAME_COLLISION: a runtime table's natural name is taken in the user database."""

    REASON = "NAME_COLLISION"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class CorruptSchema(InvalidArgumentError):
    """CORRUPT_SCHEMA: the app's registered schema (``schema_json``) is unreadable."""

    REASON = "CORRUPT_SCHEMA"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class SchemaMismatch(InvalidArgumentError):
    """SCHEMA_MISMATCH: replaying the registered schema created other objects than it lists."""

    REASON = "SCHEMA_MISMATCH"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class ShapeMismatch(InvalidArgumentError):
    """SHAPE_MISMATCH: an at-rest table's columns differ from its registered DDL."""

    REASON = "SHAPE_MISMATCH"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


# --- reasons of snug.sync.v1 -----------------------------------------------------------------


class PreconditionRequired(FailedPreconditionError):
    """PRECONDITION_REQUIRED: a write without a precondition (HTTP 428)."""

    REASON = "PRECONDITION_REQUIRED"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class RevisionMismatch(AbortedError):
    """REVISION_MISMATCH: the write's precondition does not hold (HTTP 412). Start the
    read-modify-write again from `current_revision` (None when the user has no image)."""

    REASON = "REVISION_MISMATCH"
    CODE = grpc.StatusCode.ABORTED
    RETRYABLE = True

    @property
    def current_revision(self) -> str | None:
        """The user's current revision (metadata ``currentRevision``; HTTP: the 412's ETag)."""
        return self.metadata.get("currentRevision")


class StaleRevision(RevisionMismatch):
    """STALE_REVISION: the write was based on an earlier revision of this user (metadata
    ``baseRevision``); a `RevisionMismatch`, with the same remedy."""

    REASON = "STALE_REVISION"
    CODE = grpc.StatusCode.ABORTED

    @property
    def base_revision(self) -> str | None:
        """The stale revision the write named (metadata ``baseRevision``; gRPC only)."""
        return self.metadata.get("baseRevision")


class QuotaExceeded(TooLarge):
    """QUOTA_EXCEEDED: the image is larger than the per-user quota (metadata ``quotaBytes``)."""

    REASON = "QUOTA_EXCEEDED"
    CODE = grpc.StatusCode.RESOURCE_EXHAUSTED


class NotFound(NotFoundError):
    """NOT_FOUND: no such user, no image yet, a reclaimed or another user's revision."""

    REASON = "NOT_FOUND"
    CODE = grpc.StatusCode.NOT_FOUND


class IdempotencyKeyReused(FailedPreconditionError):
    """IDEMPOTENCY_KEY_REUSED: the idempotency key produced a different write."""

    REASON = "IDEMPOTENCY_KEY_REUSED"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class ImageConflict(InternalError):
    """IMAGE_CONFLICT: different bytes occupy a content address: stored data is damaged."""

    REASON = "IMAGE_CONFLICT"
    CODE = grpc.StatusCode.INTERNAL


class StorageUnavailable(UnavailableError):
    """STORAGE_UNAVAILABLE: the storage backend cannot be reached or failed; retry later."""

    REASON = "STORAGE_UNAVAILABLE"
    CODE = grpc.StatusCode.UNAVAILABLE
    RETRYABLE = True


class StorageCorrupt(DataLossError):
    """STORAGE_CORRUPT: stored bytes failed verification against their address."""

    REASON = "STORAGE_CORRUPT"
    CODE = grpc.StatusCode.DATA_LOSS


class StorageFull(ResourceExhaustedError):
    """STORAGE_FULL: the storage is out of space; an operator must make room."""

    REASON = "STORAGE_FULL"
    CODE = grpc.StatusCode.RESOURCE_EXHAUSTED


class PutsInFlight(UnavailableError):
    """PUTS_IN_FLIGHT: the user's unfinished uploads already hold the most bytes one user may
    stage; retry shortly (HTTP 503 with Retry-After)."""

    REASON = "PUTS_IN_FLIGHT"
    CODE = grpc.StatusCode.UNAVAILABLE
    RETRYABLE = True


class DeltaInvalid(InvalidArgumentError):
    """DELTA_INVALID: a delta manifest or delta that is malformed, overlaps, leaves a gap or
    reaches out of range; nothing was stored."""

    REASON = "DELTA_INVALID"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class DeltaPageMismatch(InvalidArgumentError):
    """DELTA_PAGE_MISMATCH: a literal page of a delta does not hash to its id; nothing was stored."""

    REASON = "DELTA_PAGE_MISMATCH"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class DeltaDigestMismatch(InvalidArgumentError):
    """DELTA_DIGEST_MISMATCH: the assembled image does not have the claimed SHA-256; send the
    whole file."""

    REASON = "DELTA_DIGEST_MISMATCH"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class DeltaBaseGone(FailedPreconditionError):
    """DELTA_BASE_GONE (HTTP 409): the delta's base is not a retained revision of this user;
    send the whole file."""

    REASON = "DELTA_BASE_GONE"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class UserErased(FailedPreconditionError):
    """USER_ERASED: ProvisionUser of a user id this store erased; an erased id is refused for
    good (its writes are NOT_FOUND, like an unknown user's)."""

    REASON = "USER_ERASED"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


# --- reasons of snug.admin.v1 ----------------------------------------------------------------


class UserNotFound(NotFoundError):
    """USER_NOT_FOUND: no user has this id or name."""

    REASON = "USER_NOT_FOUND"
    CODE = grpc.StatusCode.NOT_FOUND


class UserExists(AlreadyExistsError):
    """USER_EXISTS: a user already has this name."""

    REASON = "USER_EXISTS"
    CODE = grpc.StatusCode.ALREADY_EXISTS


class TokenNotFound(NotFoundError):
    """TOKEN_NOT_FOUND: no live hub token has this id."""

    REASON = "TOKEN_NOT_FOUND"
    CODE = grpc.StatusCode.NOT_FOUND


class DirectoryUnavailable(UnavailableError):
    """DIRECTORY_UNAVAILABLE: the users directory failed or cannot be reached; retry later."""

    REASON = "DIRECTORY_UNAVAILABLE"
    CODE = grpc.StatusCode.UNAVAILABLE
    RETRYABLE = True


# --- the HTTP gateway's own reasons (no gRPC code but for the two the admin API shares) -------


class Unauthenticated(UnauthenticatedError):
    """UNAUTHENTICATED (401): no valid bearer token or session; over gRPC (the admin API), no
    valid admin token."""

    REASON = "UNAUTHENTICATED"
    CODE = grpc.StatusCode.UNAUTHENTICATED


class CsrfRejected(PermissionDeniedError):
    """CSRF_REJECTED (403): a cookie-authenticated write without the matching x-snug-csrf."""

    REASON = "CSRF_REJECTED"
    CODE = None


class UnsupportedMediaType(InvalidArgumentError):
    """UNSUPPORTED_MEDIA_TYPE (415): a PUT /userdb body that is not application/octet-stream."""

    REASON = "UNSUPPORTED_MEDIA_TYPE"
    CODE = None


class UnsupportedContentEncoding(InvalidArgumentError):
    """UNSUPPORTED_CONTENT_ENCODING (415): a request body in a Content-Encoding the route does not
    take (only the delta routes take zstd; the answer's Accept-Encoding says which)."""

    REASON = "UNSUPPORTED_CONTENT_ENCODING"
    CODE = None


class MethodNotAllowed(UnimplementedError):
    """METHOD_NOT_ALLOWED (405): the route exists but not for this method."""

    REASON = "METHOD_NOT_ALLOWED"
    CODE = None


class ServiceUnavailable(UnavailableError):
    """SERVICE_UNAVAILABLE (503): a service the gateway needs did not answer within its
    deadline, or could not be reached; retry after `retry_after` seconds."""

    REASON = "SERVICE_UNAVAILABLE"
    CODE = grpc.StatusCode.UNAVAILABLE
    RETRYABLE = True


class MisdirectedRequest(PermissionDeniedError):
    """MISDIRECTED_REQUEST (421): with authentication off, a Host that is not a loopback name."""

    REASON = "MISDIRECTED_REQUEST"
    CODE = None


class BadRequest(InvalidArgumentError):
    """BAD_REQUEST (400): a malformed request the gateway refuses before any service sees it."""

    REASON = "BAD_REQUEST"
    CODE = None


class BodyEncodingInvalid(InvalidArgumentError):
    """BODY_ENCODING_INVALID (400): a Content-Encoding: zstd body that is not zstd, ends inside a
    frame, or asks for a window over 8 MiB; nothing was stored."""

    REASON = "BODY_ENCODING_INVALID"
    CODE = None


class BodyIncomplete(CancelledError):
    """BODY_INCOMPLETE (400): the request body stopped arriving or broke off; retry."""

    REASON = "BODY_INCOMPLETE"
    CODE: ClassVar[grpc.StatusCode | None] = None
    RETRYABLE = True


class BodyAborted(BodyIncomplete):
    """BODY_ABORTED: the upload stream failed before its end; nothing was written (HTTP:
    ``BODY_INCOMPLETE``)."""

    REASON = "BODY_ABORTED"
    CODE = grpc.StatusCode.CANCELLED


class UploadTooSlow(DeadlineExceededError):
    """UPLOAD_TOO_SLOW: an upload fell behind the minimum rate after its grace
    (``SNUG_UPLOAD_MIN_RATE_KIB``, ``SNUG_UPLOAD_GRACE``); it was cut off and nothing was kept.
    Over HTTP the gateway answers ``BODY_INCOMPLETE`` (400)."""

    REASON = "UPLOAD_TOO_SLOW"
    CODE = grpc.StatusCode.DEADLINE_EXCEEDED
    RETRYABLE = True


class ServiceTokenRefused(UnauthenticatedError):
    """SERVICE_TOKEN_REFUSED: the service requires the hub's service token
    (``SNUG_SERVICE_TOKEN``) and the call came without it, or with another; nothing was done.
    Pass ``service_token=`` to the client."""

    REASON = "SERVICE_TOKEN_REFUSED"
    CODE = grpc.StatusCode.UNAUTHENTICATED


class BadGateway(UnavailableError):
    """BAD_GATEWAY (502): a service answered with something the gateway cannot use."""

    REASON = "BAD_GATEWAY"
    CODE = None
    RETRYABLE = True


class RateLimited(ResourceExhaustedError):
    """RATE_LIMITED (429): this client address or user spent its rate limit's burst; retry after
    `retry_after` seconds."""

    REASON = "RATE_LIMITED"
    CODE = None
    RETRYABLE = True


class NotDeployed(UnimplementedError):
    """NOT_DEPLOYED (501): the route needs a service this deployment does not run."""

    REASON = "NOT_DEPLOYED"
    CODE = None


# --- lookups -----------------------------------------------------------------------------------


def _subclasses(cls: type[SnugError]) -> list[type[SnugError]]:
    found: list[type[SnugError]] = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_subclasses(sub))
    return found


#: The category class of each gRPC code.
CATEGORIES: Mapping[grpc.StatusCode, type[SnugError]] = {
    cls.CODE: cls
    for cls in SnugError.__subclasses__()
    if cls.CODE is not None and cls.REASON is None
}

#: The class of each reason a gRPC service documents, by ErrorInfo reason.
REASONS: Mapping[str, type[SnugError]] = {
    cls.REASON: cls
    for cls in _subclasses(SnugError)
    if cls.REASON is not None and cls.CODE is not None and "REASON" in cls.__dict__
}

#: The class of each JSON ``code`` the HTTP gateway answers with. Mostly the reason's own name;
#: the gateway keeps the reference server's words where it had one (``USERDB_TOO_LARGE``).
HTTP_CODES: Mapping[str, type[SnugError]] = {
    **{cls.REASON: cls for cls in _subclasses(SnugError) if cls.REASON is not None},
    "USERDB_TOO_LARGE": TooLarge,
}

# An HTTP status without a JSON code we know: the category google.rpc.Code's HTTP mapping gives.
_HTTP_STATUS_CATEGORIES: Mapping[int, type[SnugError]] = {
    400: InvalidArgumentError,
    401: UnauthenticatedError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: AbortedError,
    412: FailedPreconditionError,
    413: ResourceExhaustedError,
    429: ResourceExhaustedError,
    499: CancelledError,
    500: InternalError,
    501: UnimplementedError,
    502: UnavailableError,
    503: UnavailableError,
    504: DeadlineExceededError,
    507: ResourceExhaustedError,
}


def _error_info(call: grpc.Call) -> error_details_pb2.ErrorInfo | None:
    for key, value in call.trailing_metadata() or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return info
    return None


def from_rpc_error(error: grpc.RpcError) -> SnugError:
    """Returns the typed error for a failed gRPC call: its reason's class, else (an unknown
    reason, or none) its code's category class."""
    if not isinstance(error, grpc.Call):
        return UnknownError(str(error), code=grpc.StatusCode.UNKNOWN)
    code = error.code()
    message = error.details() or ""
    category = CATEGORIES.get(code, UnknownError)
    info = _error_info(error)
    if info is None:
        return category(message, code=code)
    cls = REASONS.get(info.reason, category)
    return cls(
        message,
        reason=info.reason,
        domain=info.domain,
        metadata=dict(info.metadata),
        code=code,
    )


def from_http(
    status: int,
    body: bytes,
    *,
    etag: str | None = None,
    retry_after: str | None = None,
) -> SnugError:
    """Returns the typed error for a failed HTTP call from its status, JSON body
    ``{code, message, retryable[, revision]}`` and ``ETag`` / ``Retry-After`` headers."""
    try:
        parsed = json.loads(body) if body else {}
    except ValueError:
        parsed = {}
    fields = parsed if isinstance(parsed, dict) else {}
    code = fields.get("code") if isinstance(fields.get("code"), str) else None
    message = fields.get("message") if isinstance(fields.get("message"), str) else ""
    retryable = fields.get("retryable") if isinstance(fields.get("retryable"), bool) else None
    metadata: dict[str, str] = {}
    revision = fields.get("revision")
    if isinstance(revision, str):
        metadata["currentRevision"] = revision
    elif status == 412 and etag:
        metadata["currentRevision"] = etag.strip().strip('"')
    cls = HTTP_CODES.get(code) if code else None
    if cls is None:
        cls = _HTTP_STATUS_CATEGORIES.get(status, SnugError)
    return cls(
        message or f"HTTP {status}",
        reason=code,
        metadata=metadata,
        http_status=status,
        http_code=code,
        retryable=retryable,
        retry_after=_seconds(retry_after),
    )


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(int(value.strip()))
    except ValueError:
        return None
