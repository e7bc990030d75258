#!/usr/bin/env python3
"""The v1 wire surface the package promises, locked in `proto.lock.json`.

snug-hub-client 1.x ships stubs generated from the `snug.*.v1` protos, whose promise (README
"Upgrading") is that within v1 a change only adds. The lock records what the stubs offer: every
message's fields by number (name, type, label, oneof), every enum's values by number, every
service's RPCs (request, response, streaming). It is read from protoc's descriptors (grpcio-tools),
never from the .proto text.

    python proto_lock.py [--proto-dir DIR]      # check proto/ against the lock (exit 1 if broken)
    python proto_lock.py --write                 # record proto/ as the lock (after additions)

An entry of the lock that the protos remove or change is an incompatible change: it needs a
`v2` package beside `v1` (and a 2.x client), never an edit of the lock. Additions are
compatible; record them with `--write` (and raise the package's minor version) so they are
protected from then on. The package's tests run the same checks (tests/test_proto_lock.py).
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2

HERE = Path(__file__).resolve().parent
LOCK = HERE / "proto.lock.json"
REPO_PROTOS = HERE.parents[2] / "proto"

Surface = dict[str, Any]
_F = descriptor_pb2.FieldDescriptorProto


def descriptors_from_protos(proto_dir: Path) -> list[descriptor_pb2.FileDescriptorProto]:
    """Compiles every .proto under `proto_dir` with grpcio-tools' protoc and returns their
    descriptors (the imported well-known types left out)."""
    from grpc_tools import protoc

    sources = sorted(p.relative_to(proto_dir).as_posix() for p in proto_dir.rglob("*.proto"))
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    with tempfile.TemporaryDirectory() as out:
        descriptor_set = Path(out) / "protos.pb"
        args = [
            "grpc_tools.protoc",
            f"-I{proto_dir}",
            f"-I{well_known}",
            f"--descriptor_set_out={descriptor_set}",
            *sources,
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {proto_dir}")
        files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set.read_bytes())
    return list(files.file)


def descriptors_from_package() -> list[descriptor_pb2.FileDescriptorProto]:
    """Returns the descriptors of the stubs the installed snug_hub package ships."""
    from snug_hub import pb

    modules = [pb.container_pb2, pb.schema_pb2, pb.materialize_pb2, pb.sync_pb2, pb.admin_pb2]
    return [descriptor_pb2.FileDescriptorProto.FromString(m.DESCRIPTOR.serialized_pb) for m in modules]


def _field_type(field: descriptor_pb2.FieldDescriptorProto) -> str:
    if field.type in (_F.TYPE_MESSAGE, _F.TYPE_ENUM):
        return field.type_name.lstrip(".")
    return _F.Type.Name(field.type).removeprefix("TYPE_").lower()


def _label(field: descriptor_pb2.FieldDescriptorProto) -> str:
    if field.label == _F.LABEL_REPEATED:
        return "repeated"
    return "optional" if field.proto3_optional else "singular"


def surface(files: Iterable[descriptor_pb2.FileDescriptorProto]) -> Surface:
    """Returns the wire surface of `files`: messages, enums and services by full name."""
    messages: dict[str, Any] = {}
    enums: dict[str, Any] = {}
    services: dict[str, Any] = {}

    def add_enum(scope: str, enum: descriptor_pb2.EnumDescriptorProto) -> None:
        enums[f"{scope}.{enum.name}"] = {
            str(value.number): value.name for value in sorted(enum.value, key=lambda v: v.number)
        }

    def add_message(scope: str, message: descriptor_pb2.DescriptorProto) -> None:
        name = f"{scope}.{message.name}"
        fields = {}
        for field in sorted(message.field, key=lambda f: f.number):
            real_oneof = field.HasField("oneof_index") and not field.proto3_optional
            fields[str(field.number)] = {
                "name": field.name,
                "type": _field_type(field),
                "label": _label(field),
                "oneof": message.oneof_decl[field.oneof_index].name if real_oneof else None,
            }
        messages[name] = fields
        for nested in message.nested_type:
            add_message(name, nested)
        for enum in message.enum_type:
            add_enum(name, enum)

    for file in files:
        if not file.package.startswith("snug."):
            continue
        for message in file.message_type:
            add_message(file.package, message)
        for enum in file.enum_type:
            add_enum(file.package, enum)
        for service in file.service:
            services[f"{file.package}.{service.name}"] = {
                method.name: {
                    "request": method.input_type.lstrip("."),
                    "response": method.output_type.lstrip("."),
                    "client_streaming": method.client_streaming,
                    "server_streaming": method.server_streaming,
                }
                for method in service.method
            }
    return {
        "messages": dict(sorted(messages.items())),
        "enums": dict(sorted(enums.items())),
        "services": dict(sorted(services.items())),
    }


def incompatibilities(locked: Surface, current: Surface) -> list[str]:
    """Returns every locked entry that `current` removed or changed (empty: compatible)."""
    problems = []
    for kind, what in (("messages", "field"), ("enums", "value"), ("services", "rpc")):
        for name, entries in locked[kind].items():
            now = current[kind].get(name)
            if now is None:
                problems.append(f"{kind[:-1]} {name} was removed")
                continue
            for key, entry in entries.items():
                if key not in now:
                    problems.append(f"{name} {what} {key} ({_describe(entry)}) was removed")
                elif now[key] != entry:
                    problems.append(
                        f"{name} {what} {key} changed: {_describe(entry)} -> {_describe(now[key])}"
                    )
    return problems


def additions(locked: Surface, current: Surface) -> list[str]:
    """Returns every entry of `current` the lock does not record yet (compatible additions)."""
    added = []
    for kind, what in (("messages", "field"), ("enums", "value"), ("services", "rpc")):
        for name, entries in current[kind].items():
            before = locked[kind].get(name)
            if before is None:
                added.append(f"{kind[:-1]} {name}")
                continue
            for key, entry in entries.items():
                if key not in before:
                    added.append(f"{name} {what} {key} ({_describe(entry)})")
    return added


def _describe(entry: Any) -> str:
    if isinstance(entry, dict) and "type" in entry:
        oneof = f" in oneof {entry['oneof']}" if entry["oneof"] else ""
        return f"{entry['label']} {entry['type']} {entry['name']}{oneof}"
    if isinstance(entry, dict):
        arrow = (
            f"{'stream ' if entry['client_streaming'] else ''}{entry['request']} -> "
            f"{'stream ' if entry['server_streaming'] else ''}{entry['response']}"
        )
        return arrow
    return str(entry)


def read_lock(path: Path = LOCK) -> Surface:
    """Reads the lock file."""
    return dict(json.loads(path.read_text()))


def write_lock(current: Surface, path: Path = LOCK) -> None:
    """Writes `current` as the lock file, one field, value or RPC per line (reviewable diffs)."""
    kinds = []
    for kind, entries in current.items():
        blocks = []
        for name, members in entries.items():
            rows = ",\n".join(f"   {json.dumps(k)}: {json.dumps(v)}" for k, v in members.items())
            blocks.append(f"  {json.dumps(name)}: {{\n{rows}\n  }}" if rows else f"  {json.dumps(name)}: {{}}")
        kinds.append(f" {json.dumps(kind)}: {{\n" + ",\n".join(blocks) + "\n }")
    path.write_text("{\n" + ",\n".join(kinds) + "\n}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--proto-dir", type=Path, default=REPO_PROTOS)
    parser.add_argument("--lock", type=Path, default=LOCK)
    parser.add_argument("--write", action="store_true", help="record the protos as the lock")
    args = parser.parse_args(argv)
    current = surface(descriptors_from_protos(args.proto_dir))
    locked = read_lock(args.lock) if args.lock.exists() else None
    if locked is not None:
        broken = incompatibilities(locked, current)
        if broken:
            print("incompatible with the locked v1 surface (a breaking change needs a v2 package):")
            print("\n".join(f"  - {problem}" for problem in broken))
            return 1
    if args.write:
        write_lock(current, args.lock)
        print(f"wrote {args.lock}")
        return 0
    added = additions(locked, current) if locked is not None else ["(no lock yet)"]
    if added:
        print("compatible additions the lock does not record yet (run with --write):")
        print("\n".join(f"  - {entry}" for entry in added))
        return 1
    print(f"{args.proto_dir}: the locked v1 surface is intact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
