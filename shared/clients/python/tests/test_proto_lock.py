"""The package's version against the protos' v1 promise: the lock of the v1 wire surface
(`proto.lock.json`) holds for the protos in the checkout and for the stubs the installed
package ships; a removed or changed entry fails, an addition does not (but must be recorded)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

import snug_hub
from support import PACKAGE_DIR, PROTO_DIR

REFRESH = f"python {PACKAGE_DIR / 'proto_lock.py'} --write"


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("proto_lock", PACKAGE_DIR / "proto_lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["proto_lock"] = module
    spec.loader.exec_module(module)
    return module


lock_tool = load_tool()


def test_the_protos_keep_every_locked_entry() -> None:
    broken = lock_tool.incompatibilities(
        lock_tool.read_lock(), lock_tool.surface(lock_tool.descriptors_from_protos(PROTO_DIR))
    )
    assert not broken, (
        "proto/ changed the v1 surface snug-hub-client 1.x ships (a breaking change needs a "
        "snug.*.v2 package beside v1, never an edit of the lock):\n" + "\n".join(broken)
    )


def test_the_installed_stubs_keep_every_locked_entry() -> None:
    broken = lock_tool.incompatibilities(
        lock_tool.read_lock(), lock_tool.surface(lock_tool.descriptors_from_package())
    )
    assert not broken, "the installed snug_hub stubs differ from the lock:\n" + "\n".join(broken)


def test_the_lock_records_every_entry_of_the_protos() -> None:
    added = lock_tool.additions(
        lock_tool.read_lock(), lock_tool.surface(lock_tool.descriptors_from_protos(PROTO_DIR))
    )
    assert not added, (
        "compatible additions to the v1 protos that proto.lock.json does not protect yet; "
        f"record them with `{REFRESH}` and raise the package's minor version:\n" + "\n".join(added)
    )


def edited_protos(tmp_path: Path, proto: str, old: str, new: str) -> Path:
    copy = tmp_path / "proto"
    shutil.copytree(PROTO_DIR, copy)
    path = copy / proto
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not once in {proto}"
    path.write_text(text.replace(old, new))
    return copy


@pytest.mark.parametrize(
    ("proto", "old", "new", "expected"),
    [
        (
            "snug/container/v1/container.proto",
            "optional string passphrase = 1;",
            "optional string passphrase = 7;",
            "snug.container.v1.Secrets field 1 (optional string passphrase) was removed",
        ),
        (
            "snug/sync/v1/sync.proto",
            "string must_match = 2;",
            "bytes must_match = 2;",
            "snug.sync.v1.Precondition field 2 changed: singular string must_match in oneof "
            "condition -> singular bytes must_match in oneof condition",
        ),
        (
            "snug/container/v1/container.proto",
            "FORMAT_UNKNOWN = 3;",
            "FORMAT_OTHER = 3;",
            "snug.container.v1.Format value 3 changed: FORMAT_UNKNOWN -> FORMAT_OTHER",
        ),
        (
            "snug/sync/v1/sync.proto",
            "rpc GetImage(GetImageRequest) returns (stream GetImageResponse);",
            "rpc GetImage(GetImageRequest) returns (GetImageResponse);",
            "snug.sync.v1.SyncService rpc GetImage changed",
        ),
        (
            "snug/schema/v1/schema.proto",
            "optional uint64 rows = 4;",
            "uint64 rows = 4;",
            "snug.schema.v1.TableSummary field 4 changed: optional uint64 rows -> singular uint64 rows",
        ),
    ],
)
def test_an_incompatible_change_is_caught(tmp_path: Path, proto: str, old: str, new: str, expected: str) -> None:
    changed = lock_tool.surface(lock_tool.descriptors_from_protos(edited_protos(tmp_path, proto, old, new)))
    broken = lock_tool.incompatibilities(lock_tool.read_lock(), changed)
    assert any(problem.startswith(expected) for problem in broken), broken
    # The script says so too, and refuses to record it.
    assert lock_tool.main(["--proto-dir", str(tmp_path / "proto"), "--write", "--lock", str(copy_lock(tmp_path))]) == 1


def copy_lock(tmp_path: Path) -> Path:
    lock = tmp_path / "proto.lock.json"
    shutil.copy(lock_tool.LOCK, lock)
    return lock


def test_an_addition_is_compatible_and_recorded_on_request(tmp_path: Path) -> None:
    protos = edited_protos(
        tmp_path,
        "snug/container/v1/container.proto",
        "optional string recovery_key = 2;\n}",
        "optional string recovery_key = 2;\n  // A hint.\n  optional string hint = 3;\n}",
    )
    grown = lock_tool.surface(lock_tool.descriptors_from_protos(protos))
    assert lock_tool.incompatibilities(lock_tool.read_lock(), grown) == []
    assert lock_tool.additions(lock_tool.read_lock(), grown) == [
        "snug.container.v1.Secrets field 3 (optional string hint)"
    ]
    lock = copy_lock(tmp_path)
    assert lock_tool.main(["--proto-dir", str(protos), "--lock", str(lock)]) == 1
    assert lock_tool.main(["--proto-dir", str(protos), "--lock", str(lock), "--write"]) == 0
    assert lock_tool.main(["--proto-dir", str(protos), "--lock", str(lock)]) == 0


def test_the_version_follows_the_v1_promise() -> None:
    # 1.x.y for the snug.*.v1 packages; a v2 package would be a 2.x client.
    assert re.fullmatch(r"1\.\d+\.\d+", snug_hub.__version__), snug_hub.__version__
    pyproject = (PACKAGE_DIR / "pyproject.toml").read_text()
    assert f'version = "{snug_hub.__version__}"' in pyproject, "the installed package is this source's"
    packages = {name.rsplit(".", 1)[0] for name in lock_tool.read_lock()["services"]}
    assert packages == {
        "snug.container.v1",
        "snug.schema.v1",
        "snug.materialize.v1",
        "snug.sync.v1",
        "snug.admin.v1",
    }
