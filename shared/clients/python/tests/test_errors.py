"""The exception classes against what the hub documents: the protos' reason tables (one class
per reason, with the table's gRPC code) and the reason registry's HTTP answers
(`shared/reasons/REASONS.md`); and the translation of failed calls into them."""

from __future__ import annotations

import re

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from snug_hub import errors
from support import PROTO_DIR, REPO

# A row of a proto's reason table: `// | REASON | CODE | meaning |`.
_ROW = re.compile(r"^// \| ([A-Z][A-Z0-9_]*) +\| ([A-Z_]+) +\|")


def proto_reason_tables() -> dict[str, dict[str, str]]:
    """Every proto's reason table: {domain: {reason: gRPC code name}}."""
    tables = {}
    for proto in sorted(PROTO_DIR.glob("snug/*/v1/*.proto")):
        text = proto.read_text()
        domain = re.search(r'domain "(snug\.\w+)"', text)
        assert domain, f"{proto} names no ErrorInfo domain"
        rows = dict(match.groups() for line in text.splitlines() if (match := _ROW.match(line)))
        assert rows, f"{proto} has no reason table"
        tables[domain.group(1)] = rows
    return tables


def camel(reason: str) -> str:
    return "".join(word.capitalize() for word in reason.split("_"))


def test_every_reason_the_protos_document_has_its_class_with_the_tables_code() -> None:
    tables = proto_reason_tables()
    assert set(tables) == {"snug.container", "snug.schema", "snug.materialize", "snug.sync", "snug.admin"}
    documented: dict[str, str] = {}
    for domain, rows in tables.items():
        for reason, code in rows.items():
            assert documented.setdefault(reason, code) == code, (
                f"{reason} has two codes across the protos: {documented[reason]}, {code} ({domain})"
            )
            cls = errors.REASONS.get(reason)
            assert cls is not None, f"no exception class for {reason} ({domain}.proto)"
            assert cls.__name__ == camel(reason), (cls.__name__, reason)
            assert cls.REASON == reason
            assert cls.CODE is not None and cls.CODE.name == code, (
                f"{cls.__name__}.CODE is {cls.CODE}, {domain}'s table says {code}"
            )
            category = errors.CATEGORIES[cls.CODE]
            assert issubclass(cls, category), f"{cls.__name__} is not a {category.__name__}"
    # And no class for a reason no proto documents: a removed reason leaves no stale class.
    assert set(errors.REASONS) == set(documented)


def test_the_shared_runtime_refusal_is_documented_and_typed() -> None:
    # "UNAVAILABLE with reason OVERLOADED in domain snug.rpc", in every proto.
    for proto in PROTO_DIR.glob("snug/*/v1/*.proto"):
        comments = " ".join(line.strip().lstrip("/").strip() for line in proto.read_text().splitlines())
        assert 'reason OVERLOADED in domain "snug.rpc"' in comments, proto
    assert errors.REASONS["OVERLOADED"] is errors.Overloaded
    assert errors.Overloaded.RETRYABLE


def registry_rows() -> list[tuple[str, str, str]]:
    """The (reason, gRPC, HTTP) cells of the hub's tables in REASONS.md (the CLI's, the restore
    library's and the hub's own operator-facing ones are not the hub's API)."""
    text = (REPO / "shared" / "reasons" / "REASONS.md").read_text()
    rows = []
    for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        title = section.splitlines()[0]
        if "CLI" in title or "Restore" in title or "snug.hub" in title:
            continue
        for line in section.splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if len(cells) >= 3 and cells[0].startswith("`"):
                rows.append((cells[0].strip("`"), cells[1], cells[2]))
    assert len(rows) > 80, "REASONS.md's tables not found"
    return rows


def test_every_json_code_the_gateway_answers_with_has_its_class() -> None:
    by_code: dict[str, set[str]] = {}
    for reason, _grpc, http in registry_rows():
        answer = re.match(r"(\d{3}) `([A-Z_]+)`", http)
        if answer:
            by_code.setdefault(answer.group(2), set()).add(reason)
    assert "USERDB_TOO_LARGE" in by_code and "SERVICE_UNAVAILABLE" in by_code
    for code, reasons in sorted(by_code.items()):
        cls = errors.HTTP_CODES.get(code)
        assert cls is not None, f"no exception class for the gateway's JSON code {code}"
        assert cls.REASON in reasons, f"{code} -> {cls.__name__}, not one of {sorted(reasons)}"


def test_every_class_is_of_a_registered_reason() -> None:
    """The other way round: a class names a reason of the registry, so a reason renamed or
    removed there leaves no class behind."""
    registered = {reason for reason, _grpc, _http in registry_rows()}
    classes, todo = [], [errors.SnugError]
    while todo:
        cls = todo.pop()
        classes.append(cls)
        todo.extend(cls.__subclasses__())
    named = [cls for cls in classes if cls.__dict__.get("REASON") is not None]
    assert len(named) > 80, "the exception classes were not found"
    for cls in named:
        assert cls.REASON in registered, f"{cls.__name__} names {cls.REASON}, which REASONS.md does not define"


def test_each_class_is_retryable_where_the_gateway_says_so() -> None:
    for reason, _grpc, http in registry_rows():
        if not re.match(r"\d{3} `", http):
            continue  # answered by its gRPC code: no retryable flag of its own
        cls = errors.REASONS.get(reason) or errors.HTTP_CODES.get(reason)
        if cls is None or cls.REASON != reason:
            continue  # a gateway reason whose JSON code is another's (GATEWAY_OVERLOADED)
        assert cls.RETRYABLE == http.endswith("retryable"), (reason, http)


class FailedCall(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """A failed call as grpc raises it, with a google.rpc.Status trailer when given one."""

    def __init__(self, code: grpc.StatusCode, details: str, info: error_details_pb2.ErrorInfo | None) -> None:
        self._code = code
        self._details = details
        self._trailers: tuple[tuple[str, bytes | str], ...] = ()
        if info is not None:
            status = status_pb2.Status(code=code.value[0], message=details)
            status.details.add().Pack(info)
            self._trailers = (("grpc-status-details-bin", status.SerializeToString()),)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, bytes | str], ...]:
        return self._trailers

    def initial_metadata(self) -> tuple[()]:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: object) -> bool:
        return False


def info(reason: str, domain: str, **metadata: str) -> error_details_pb2.ErrorInfo:
    return error_details_pb2.ErrorInfo(reason=reason, domain=domain, metadata=metadata)


def test_a_failed_call_becomes_its_reasons_class() -> None:
    error = errors.from_rpc_error(
        FailedCall(grpc.StatusCode.FAILED_PRECONDITION, "locked", info("LOCKED", "snug.container"))
    )
    assert type(error) is errors.Locked
    assert (error.reason, error.domain, error.code) == ("LOCKED", "snug.container", grpc.StatusCode.FAILED_PRECONDITION)
    assert isinstance(error, errors.FailedPreconditionError) and not error.retryable

    stale = errors.from_rpc_error(
        FailedCall(
            grpc.StatusCode.ABORTED,
            "stale",
            info("STALE_REVISION", "snug.sync", currentRevision="r3-x", baseRevision="r1-y"),
        )
    )
    assert isinstance(stale, errors.StaleRevision) and isinstance(stale, errors.RevisionMismatch)
    assert (stale.current_revision, stale.base_revision, stale.retryable) == ("r3-x", "r1-y", True)


def test_an_unknown_reason_is_treated_by_its_code() -> None:
    error = errors.from_rpc_error(
        FailedCall(grpc.StatusCode.RESOURCE_EXHAUSTED, "new", info("SOMETHING_NEWER", "snug.sync", limit="9"))
    )
    assert type(error) is errors.ResourceExhaustedError
    assert (error.reason, error.metadata) == ("SOMETHING_NEWER", {"limit": "9"})


def test_a_failure_without_error_info_is_its_codes_category() -> None:
    error = errors.from_rpc_error(FailedCall(grpc.StatusCode.UNAVAILABLE, "connection refused", None))
    assert type(error) is errors.UnavailableError
    assert error.reason is None and error.retryable
    assert str(error) == "UNAVAILABLE: connection refused"


@pytest.mark.parametrize(
    ("status", "body", "headers", "expected", "attributes"),
    [
        (
            412,
            b'{"code":"REVISION_MISMATCH","message":"stale","retryable":true,"revision":"r2-a"}',
            {"etag": '"r2-a"'},
            errors.RevisionMismatch,
            {"current_revision": "r2-a", "retryable": True, "http_status": 412},
        ),
        (
            412,
            b'{"code":"STALE_REVISION","message":"stale","retryable":true}',
            {"etag": '"r5-b"'},
            errors.StaleRevision,
            {"current_revision": "r5-b"},
        ),
        (
            413,
            b'{"code":"USERDB_TOO_LARGE","message":"over","retryable":false}',
            {},
            errors.TooLarge,
            {"http_code": "USERDB_TOO_LARGE", "retryable": False},
        ),
        (
            503,
            b'{"code":"SERVICE_UNAVAILABLE","message":"down","retryable":true}',
            {"retry_after": "2"},
            errors.ServiceUnavailable,
            {"retry_after": 2.0, "retryable": True, "code": None},
        ),
        (
            428,
            b'{"code":"PRECONDITION_REQUIRED","message":"say which","retryable":false}',
            {},
            errors.PreconditionRequired,
            {},
        ),
        (401, b'{"code":"UNAUTHENTICATED","message":"no","retryable":false}', {}, errors.Unauthenticated, {}),
        (418, b'{"code":"TEAPOT","message":"?","retryable":false}', {}, errors.SnugError, {"reason": "TEAPOT"}),
        (502, b"<html>proxy error</html>", {}, errors.UnavailableError, {"http_code": None}),
    ],
)
def test_an_http_refusal_becomes_its_class(
    status: int, body: bytes, headers: dict[str, str], expected: type[errors.SnugError], attributes: dict[str, object]
) -> None:
    error = errors.from_http(status, body, **headers)
    assert type(error) is expected
    for name, value in attributes.items():
        assert getattr(error, name) == value, name


def test_client_side_errors_are_snug_errors() -> None:
    assert issubclass(errors.DigestMismatch, errors.ProtocolError)
    assert issubclass(errors.ProtocolError, errors.SnugError)
    assert not errors.ProtocolError.REASON
