"""The installed package passes `mypy --strict` (pinned, from PyPI) with the package's own
configuration: its code, the generated messages' .pyi files it relies on, and py.typed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import snug_hub
from support import PACKAGE_DIR


def test_the_installed_package_passes_mypy_strict(tmp_path: Path) -> None:
    installed = Path(snug_hub.__file__).parent
    assert (installed / "py.typed").is_file(), "the package is marked typed (PEP 561)"
    assert (installed / "_proto" / "snug" / "sync" / "v1" / "sync_pb2.pyi").is_file()
    # mypy checks files it is given, not an installed package in place: a copy of it.
    shutil.copytree(installed, tmp_path / "snug_hub", ignore=shutil.ignore_patterns("__pycache__"))
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(PACKAGE_DIR / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "snug_hub",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Success: no issues found" in checked.stdout, checked.stdout
