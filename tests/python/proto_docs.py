#!/usr/bin/env python3
# Checks that proto/ documents itself for clients in other languages: every service, RPC, enum,
# enum value (but the *_UNSPECIFIED zero) and field has a comment, read from the descriptors
# grpcio-tools' protoc produces with source info. A oneof member may instead be documented by its
# oneof's comment together with its message type's own (the operation lists of schema.proto).
#
#   proto_docs.py --proto-dir proto
#
# Prints each undocumented element as file:line and its full name, then a closing
# "N passed, N failed" line; exits 1 if any element is undocumented.
# tests/tests/python_client.rs runs it (the error reasons are checked there, against the code).

import argparse
import faulthandler
import importlib.resources
import os
import sys
import tempfile

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

# Field numbers of the descriptor messages, for SourceCodeInfo paths (descriptor.proto).
FILE_MESSAGE, FILE_ENUM, FILE_SERVICE = 4, 5, 6
MESSAGE_FIELD, MESSAGE_NESTED, MESSAGE_ENUM, MESSAGE_ONEOF = 2, 3, 4, 8
ENUM_VALUE = 2
SERVICE_METHOD = 2


def descriptors(proto_dir):
    protos = sorted(
        os.path.relpath(os.path.join(root, name), proto_dir)
        for root, _, names in os.walk(proto_dir)
        for name in names
        if name.endswith(".proto")
    )
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory(prefix="snug-proto-docs-") as out:
        path = os.path.join(out, "descriptors.pb")
        args = ["grpc_tools.protoc", f"-I{proto_dir}", f"-I{well_known}", "--include_source_info",
                f"--descriptor_set_out={path}", *protos]
        if protoc.main(args) != 0:
            raise SystemExit(f"grpc_tools.protoc failed on {protos}")
        with open(path, "rb") as f:
            return protos, descriptor_pb2.FileDescriptorSet.FromString(f.read())


def commented(loc):
    return loc is not None and bool(loc.leading_comments.strip() or loc.trailing_comments.strip())


def elements(file):
    """Yields (path, full name, what documents it instead) for every element of one file that
    needs a comment; the alternative is a list of paths in this file and type names that must
    all be commented, or None."""
    package = file.package

    def enum(path, prefix, e):
        name = f"{prefix}.{e.name}"
        yield path, name, None
        for i, value in enumerate(e.value):
            if value.number != 0:
                yield path + [ENUM_VALUE, i], f"{name}.{value.name}", None

    def message(path, prefix, m):
        name = f"{prefix}.{m.name}"
        # A message's own comment is optional: FooRequest/FooResponse are named by their RPC.
        for i, field in enumerate(m.field):
            instead = None
            if field.HasField("oneof_index") and field.type_name:
                instead = [path + [MESSAGE_ONEOF, field.oneof_index], field.type_name.lstrip(".")]
            yield path + [MESSAGE_FIELD, i], f"{name}.{field.name}", instead
        for i, nested in enumerate(m.nested_type):
            if not nested.options.map_entry:
                yield from message(path + [MESSAGE_NESTED, i], name, nested)
        for i, e in enumerate(m.enum_type):
            yield from enum(path + [MESSAGE_ENUM, i], name, e)

    for i, m in enumerate(file.message_type):
        yield from message([FILE_MESSAGE, i], package, m)
    for i, e in enumerate(file.enum_type):
        yield from enum([FILE_ENUM, i], package, e)
    for i, service in enumerate(file.service):
        name = f"{package}.{service.name}"
        yield [FILE_SERVICE, i], name, None
        for j, method in enumerate(service.method):
            yield [FILE_SERVICE, i, SERVICE_METHOD, j], f"{name}.{method.name}", None


def documented_types(fds):
    """The full names of every message and enum that has a comment of its own."""
    names = set()
    for file in fds.file:
        comments = {tuple(loc.path): loc for loc in file.source_code_info.location}

        def walk(path, prefix, m):
            name = f"{prefix}.{m.name}"
            if commented(comments.get(tuple(path))):
                names.add(name)
            for i, nested in enumerate(m.nested_type):
                walk(path + [MESSAGE_NESTED, i], name, nested)
            for i, e in enumerate(m.enum_type):
                if commented(comments.get(tuple(path + [MESSAGE_ENUM, i]))):
                    names.add(f"{name}.{e.name}")

        for i, m in enumerate(file.message_type):
            walk([FILE_MESSAGE, i], file.package, m)
        for i, e in enumerate(file.enum_type):
            if commented(comments.get((FILE_ENUM, i))):
                names.add(f"{file.package}.{e.name}")
    return names


def main():
    # A hung call must not hang the suite: dump every thread's stack and exit after 120 s.
    faulthandler.dump_traceback_later(120, exit=True)
    parser = argparse.ArgumentParser()
    parser.add_argument("--proto-dir", required=True)
    args = parser.parse_args()
    protos, fds = descriptors(args.proto_dir)
    types = documented_types(fds)
    passed = failed = 0
    for file in fds.file:
        if file.name not in protos:
            continue  # google/protobuf/*: not ours
        comments = {tuple(loc.path): loc for loc in file.source_code_info.location}
        for path, name, instead in elements(file):
            loc = comments.get(tuple(path))
            if commented(loc) or (instead is not None and commented(comments.get(tuple(instead[0]))) and instead[1] in types):
                passed += 1
            else:
                failed += 1
                line = loc.span[0] + 1 if loc is not None else "?"
                print(f"{file.name}:{line}: {name} has no comment")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
