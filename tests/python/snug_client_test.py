#!/usr/bin/env python3
# A Snug Hub client in another language: Python code generated from proto/ with grpcio-tools at
# test time (into a temporary directory, never committed), calling the container, schema and sync
# services of a running hub over their gRPC ports.
#
#   snug_client_test.py --proto-dir proto --vectors ../shared/vectors/reference \
#       --container 127.0.0.1:P1 --schema 127.0.0.1:P2 --sync 127.0.0.1:P3
#
# Errors are read the way any gRPC client in any language reads them: the google.rpc.Status in the
# `grpc-status-details-bin` trailer, whose ErrorInfo carries the reason (never the message text).
# Prints one line per check and a closing "N passed, N failed" line; exits 1 if any check failed.
# tests/tests/python_client.rs runs it against the containers snug-testcontainers starts.

import argparse
import faulthandler
import hashlib
import importlib.resources
import os
import sys
import tempfile
import traceback
import uuid

import grpc
from grpc_tools import protoc

CHUNK = 1024 * 1024
# The lowest PBKDF2 count the services accept by default: the test is about the wire, not the KDF.
ITERATIONS = 10_000


def generate(proto_dir, out_dir):
    """Compiles every .proto under proto_dir into Python modules in out_dir and imports them."""
    protos = sorted(
        os.path.relpath(os.path.join(root, name), proto_dir)
        for root, _, names in os.walk(proto_dir)
        for name in names
        if name.endswith(".proto")
    )
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    args = ["grpc_tools.protoc", f"-I{proto_dir}", f"-I{well_known}",
            f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", *protos]
    if protoc.main(args) != 0:
        raise SystemExit(f"grpc_tools.protoc failed on {protos}")
    sys.path.insert(0, out_dir)
    return protos


def chunks(data):
    for start in range(0, len(data), CHUNK):
        yield data[start:start + CHUNK]


def error_info(error):
    """The (code, ErrorInfo) of a failed call, from the grpc-status-details-bin trailer."""
    from google.rpc import error_details_pb2, status_pb2

    trailers = dict(error.trailing_metadata() or ())
    raw = trailers.get("grpc-status-details-bin")
    assert raw is not None, f"no grpc-status-details-bin trailer on {error.code()}: {error.details()}"
    status = status_pb2.Status.FromString(raw)
    assert status.code == error.code().value[0], (status.code, error.code())
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return error.code(), info
    raise AssertionError(f"no ErrorInfo among {[d.type_url for d in status.details]}")


def expect_error(call, code, domain, reason):
    try:
        call()
    except grpc.RpcError as error:
        got_code, info = error_info(error)
        assert got_code == code, f"{got_code} ({info.reason}), expected {code}"
        assert (info.domain, info.reason) == (domain, reason), f"{info.domain}/{info.reason}: {error.details()}"
        return info
    raise AssertionError(f"expected {domain}/{reason}, the call succeeded")


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def run(self, name, check):
        try:
            check()
        except Exception:  # a failed check is reported and the others still run
            self.failed += 1
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
        else:
            self.passed += 1
            print(f"ok   {name}", flush=True)


def container_checks(checks, channel, plain):
    from snug.container.v1 import container_pb2 as pb, container_pb2_grpc

    stub = container_pb2_grpc.ContainerServiceStub(channel)
    protected = {}

    def detect():
        for leading, expected in [(plain[:16], pb.FORMAT_SQLITE), (b"SNUGENC1\n\x01", pb.FORMAT_SNUGENC1),
                                  (b"PK\x03\x04 a zip", pb.FORMAT_UNKNOWN)]:
            got = stub.DetectFormat(pb.DetectFormatRequest(leading_bytes=leading)).format
            assert got == expected, (leading, pb.Format.Name(got))

    def protect():
        def requests():
            yield pb.ProtectRequest(header=pb.ProtectHeader(
                passphrase="correct horse battery staple", iterations=ITERATIONS,
                custody_rule_acknowledged=True, expected_length=len(plain)))
            for piece in chunks(plain):
                yield pb.ProtectRequest(chunk=piece)
        responses = stub.Protect(requests())
        first = next(responses)
        assert first.WhichOneof("message") == "result", first
        body = b"".join(r.chunk for r in responses)
        assert len(body) == first.result.container_length and body.startswith(b"SNUGENC1\n"), len(body)
        assert len(first.result.recovery_key.replace("-", "")) == 27, first.result.recovery_key
        protected.update(container=body, recovery_key=first.result.recovery_key)

    def inspect():
        info = stub.InspectContainer(pb.InspectContainerRequest(chunk=c) for c in chunks(protected["container"]))
        assert (info.version, info.kdf_id, info.iterations) == (1, 1, ITERATIONS), info
        assert [s.kind for s in info.slots] == [pb.SLOT_KIND_PASSPHRASE, pb.SLOT_KIND_RECOVERY_KEY], info.slots
        assert info.plaintext_length == len(plain)

    def unlock(secrets):
        def requests():
            yield pb.UnlockRequest(header=pb.UnlockHeader(secrets=secrets))
            for piece in chunks(protected["container"]):
                yield pb.UnlockRequest(chunk=piece)
        responses = stub.Unlock(requests())
        first = next(responses)
        assert first.WhichOneof("message") == "result", first
        return first.result, b"".join(r.chunk for r in responses)

    def unlock_with_the_passphrase():
        result, plaintext = unlock(pb.Secrets(passphrase="correct horse battery staple"))
        assert result.opened_by == pb.SLOT_KIND_PASSPHRASE and result.plaintext_format == pb.FORMAT_SQLITE
        assert plaintext == plain, "the plaintext comes back byte for byte"

    def unlock_with_the_recovery_key():
        # Any case, separators ignored.
        key = protected["recovery_key"].replace("-", "").lower()
        result, plaintext = unlock(pb.Secrets(recovery_key=key))
        assert result.opened_by == pb.SLOT_KIND_RECOVERY_KEY and plaintext == plain

    def a_wrong_passphrase_is_locked():
        info = expect_error(lambda: unlock(pb.Secrets(passphrase="wrong")),
                            grpc.StatusCode.FAILED_PRECONDITION, "snug.container", "LOCKED")
        assert "wrong" not in info.metadata.values(), "a secret never comes back"

    checks.run("container: DetectFormat tells SQLite, SNUGENC1 and unknown bytes apart", detect)
    checks.run("container: Protect returns a recovery key and a SNUGENC1 container", protect)
    if not protected:
        return
    checks.run("container: InspectContainer reads the header without a secret", inspect)
    checks.run("container: Unlock with the passphrase returns the plaintext", unlock_with_the_passphrase)
    checks.run("container: Unlock with the recovery key returns the plaintext", unlock_with_the_recovery_key)
    checks.run("container: a wrong passphrase is FAILED_PRECONDITION / LOCKED", a_wrong_passphrase_is_locked)


def schema_checks(checks, channel, export, with_secrets, container_vector):
    from snug.schema.v1 import schema_pb2 as pb, schema_pb2_grpc

    stub = schema_pb2_grpc.SchemaServiceStub(channel)

    def validate(image):
        def requests():
            yield pb.ValidateSyncImageRequest(header=pb.ValidateSyncImageHeader(expected_length=len(image)))
            for piece in chunks(image):
                yield pb.ValidateSyncImageRequest(chunk=piece)
        return stub.ValidateSyncImage(requests())

    def a_secrets_free_export_is_valid():
        answer = validate(export)
        assert (answer.storage_version, answer.length) == (6, len(export)), answer
        # The hash is of the image as it is to be stored: its listed free space zeroed.
        stored = bytearray(export)
        for free in answer.free_space:
            stored[free.offset:free.offset + free.length] = bytes(free.length)
        assert answer.free_space, "the reference's export holds non-zero free space"
        assert answer.sha256 == hashlib.sha256(bytes(stored)).digest()

    def an_image_with_secrets_is_refused():
        info = expect_error(lambda: validate(with_secrets), grpc.StatusCode.INVALID_ARGUMENT,
                            "snug.schema", "SECRETS_PRESENT")
        assert int(info.metadata["secretRows"]) > 0, info.metadata

    def a_container_is_refused():
        expect_error(lambda: validate(container_vector), grpc.StatusCode.INVALID_ARGUMENT,
                     "snug.schema", "CONTAINER_NOT_ACCEPTED")

    def inspect():
        def requests():
            yield pb.InspectUserDatabaseRequest(header=pb.InspectUserDatabaseHeader(expected_length=len(with_secrets)))
            for piece in chunks(with_secrets):
                yield pb.InspectUserDatabaseRequest(chunk=piece)
        answer = stub.InspectUserDatabase(requests())
        assert (answer.storage_version, answer.supported_version, answer.length) == (6, 6, len(with_secrets)), answer
        names = {table.name: table for table in answer.tables}
        assert "snug_secrets" in names and "snug_apps" in names, sorted(names)
        assert not answer.HasField("open_refusal"), answer.open_refusal

    checks.run("schema: ValidateSyncImage accepts a secrets-free v6 export, its free space to be zeroed", a_secrets_free_export_is_valid)
    checks.run("schema: ValidateSyncImage refuses secrets with SECRETS_PRESENT", an_image_with_secrets_is_refused)
    checks.run("schema: ValidateSyncImage refuses a SNUGENC1 file with CONTAINER_NOT_ACCEPTED", a_container_is_refused)
    checks.run("schema: InspectUserDatabase reports version, tables and health", inspect)


def sync_checks(checks, channel, first, second):
    from snug.sync.v1 import sync_pb2 as pb, sync_pb2_grpc

    stub = sync_pb2_grpc.SyncServiceStub(channel)
    caller = pb.Caller(user_id=f"py-{uuid.uuid4().hex}", principal="python-client")
    revisions = {}

    def put(image, precondition):
        def requests():
            yield pb.PutImageRequest(header=pb.PutImageHeader(
                caller=caller, precondition=precondition, expected_length=len(image)))
            for piece in chunks(image):
                yield pb.PutImageRequest(chunk=piece)
        return stub.PutImage(requests())

    def get():
        responses = stub.GetImage(pb.GetImageRequest(caller=caller))
        head = next(responses)
        assert head.WhichOneof("message") == "result", head
        return head.result, b"".join(r.chunk for r in responses)

    def provision():
        assert stub.ProvisionUser(pb.ProvisionUserRequest(caller=caller)).created
        assert not stub.ProvisionUser(pb.ProvisionUserRequest(caller=caller)).created, "idempotent"

    def zeroed_only(sent, stored):
        """Whether `stored` is `sent` with some bytes zeroed: the sync service zeroes an image's
        SQLite free space (a deleted record) and changes nothing else."""
        return len(sent) == len(stored) and all(s == b or s == 0 for b, s in zip(sent, stored))

    def first_put_and_get():
        answer = put(first, pb.Precondition(must_not_exist=pb.MustNotExist()))
        assert not answer.replayed and answer.revision.size == len(first), answer
        revisions["first"] = answer.revision.revision
        info, body = get()
        assert info.revision == revisions["first"] and zeroed_only(first, body)
        assert hashlib.sha256(body).hexdigest() == answer.revision.sha256, "the digest is of the stored bytes"
        assert stub.HeadImage(pb.HeadImageRequest(caller=caller)).revision.revision == revisions["first"]

    def second_put():
        answer = put(second, pb.Precondition(must_match=revisions["first"]))
        assert answer.revision.base == revisions["first"], answer
        revisions["second"] = answer.revision.revision
        info, body = get()
        assert info.revision == revisions["second"] and zeroed_only(second, body)
        revisions["second_stored"] = body

    def a_stale_revision_conflicts():
        info = expect_error(lambda: put(first, pb.Precondition(must_match=revisions["first"])),
                            grpc.StatusCode.ABORTED, "snug.sync", "STALE_REVISION")
        assert info.metadata["currentRevision"] == revisions["second"], info.metadata
        assert info.metadata["baseRevision"] == revisions["first"], info.metadata
        info = expect_error(lambda: put(first, pb.Precondition(must_not_exist=pb.MustNotExist())),
                            grpc.StatusCode.ABORTED, "snug.sync", "REVISION_MISMATCH")
        assert info.metadata["currentRevision"] == revisions["second"], info.metadata
        assert get()[1] == revisions["second_stored"], "a refused write changes nothing"

    def a_write_without_a_precondition_is_refused():
        expect_error(lambda: put(first, pb.Precondition()), grpc.StatusCode.FAILED_PRECONDITION,
                     "snug.sync", "PRECONDITION_REQUIRED")

    def an_unknown_user_is_not_found():
        stranger = pb.Caller(user_id=f"py-{uuid.uuid4().hex}", principal="python-client")
        expect_error(lambda: next(stub.GetImage(pb.GetImageRequest(caller=stranger))),
                     grpc.StatusCode.NOT_FOUND, "snug.sync", "NOT_FOUND")

    checks.run("sync: ProvisionUser creates the user once", provision)
    checks.run("sync: PutImage must-not-exist, then GetImage and HeadImage", first_put_and_get)
    if "first" not in revisions:
        return
    checks.run("sync: PutImage must-match the current revision", second_put)
    if "second" not in revisions:
        return
    checks.run("sync: a stale or mismatched revision is ABORTED with the current revision", a_stale_revision_conflicts)
    checks.run("sync: a write without a precondition is PRECONDITION_REQUIRED", a_write_without_a_precondition_is_refused)
    checks.run("sync: an unknown user is NOT_FOUND", an_unknown_user_is_not_found)


class Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
             grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call: the hub's service token, which its
    services require of every call but health checks."""

    def __init__(self, token):
        self.metadata = ("authorization", f"Bearer {token}")

    def _with_token(self, details):
        metadata = list(details.metadata or ()) + [self.metadata]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._with_token(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._with_token(details), requests)


def token_checks(checks, channel):
    """Without the service token, a call is refused before it is decoded."""
    from snug.sync.v1 import sync_pb2 as pb, sync_pb2_grpc

    stub = sync_pb2_grpc.SyncServiceStub(channel)

    def refused():
        expect_error(lambda: stub.GetUsage(pb.GetUsageRequest(user_id="nobody")),
                     grpc.StatusCode.UNAUTHENTICATED, "snug.rpc", "SERVICE_TOKEN_REFUSED")

    checks.run("sync: a call without the service token is refused SERVICE_TOKEN_REFUSED", refused)


def main():
    # A hung call must not hang the suite: dump every thread's stack and exit after 300 s.
    faulthandler.dump_traceback_later(300, exit=True)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--proto-dir", required=True)
    parser.add_argument("--vectors", required=True, help="the shared reference vectors directory")
    parser.add_argument("--container", required=True, help="HOST:PORT of snug.container.v1")
    parser.add_argument("--schema", required=True, help="HOST:PORT of snug.schema.v1")
    parser.add_argument("--sync", required=True, help="HOST:PORT of snug.sync.v1")
    parser.add_argument("--token", required=True, help="the hub's service token")
    args = parser.parse_args()

    def vector(*path):
        with open(os.path.join(args.vectors, *path), "rb") as f:
            return f.read()

    export = vector("userdb", "sample-v6.export.snug")
    other = vector("userdb", "fresh-v6.export.snug")
    with_secrets = vector("userdb", "sample-v6.user.snug")
    container_vector = vector("containers", "c03-deterministic-1000iter.snug")

    checks = Checks()
    # Headers and unary answers of the schema service may be 8 MiB (schema.proto).
    options = [("grpc.max_receive_message_length", 9 * 1024 * 1024),
               ("grpc.max_send_message_length", 9 * 1024 * 1024)]
    with tempfile.TemporaryDirectory(prefix="snug-python-client-") as out:
        protos = generate(args.proto_dir, out)
        print(f"generated a client for {', '.join(protos)}", flush=True)
        bearer = Bearer(args.token)
        with grpc.insecure_channel(args.sync, options) as channel:
            token_checks(checks, channel)
        with grpc.insecure_channel(args.container, options) as channel:
            container_checks(checks, grpc.intercept_channel(channel, bearer), export)
        with grpc.insecure_channel(args.schema, options) as channel:
            schema_checks(checks, grpc.intercept_channel(channel, bearer), export, with_secrets,
                          container_vector)
        with grpc.insecure_channel(args.sync, options) as channel:
            sync_checks(checks, grpc.intercept_channel(channel, bearer), export, other)
    print(f"{checks.passed} passed, {checks.failed} failed", flush=True)
    return 1 if checks.failed or not checks.passed else 0


if __name__ == "__main__":
    sys.exit(main())
