"""Helpers the package's tests share: where the repository's files and the reference vectors
are, and small SQLite readers."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

#: The repository checkout these tests belong to (tests/ is shared/clients/python/tests).
REPO = Path(__file__).resolve().parents[4]
#: The package's own directory (shared/clients/python).
PACKAGE_DIR = Path(__file__).resolve().parents[1]
PROTO_DIR = REPO / "proto"

# Short gateway deadlines, so a stopped service is noticed within seconds (as the Rust
# container suites configure theirs).
FAST_FAILING = {"SNUG_RPC_DEADLINE": "5s", "SNUG_RPC_CONNECT_TIMEOUT": "1s"}
# The all-in-one hub's per-user quota: small enough that a test can exceed it cheaply.
QUOTA_BYTES = 1024 * 1024


def vectors_dir() -> Path:
    """The reference implementation's vectors: `SNUG_VECTORS_DIR`, else
    `../shared/vectors/reference` beside the checkout. Missing vectors fail the tests."""
    configured = os.environ.get("SNUG_VECTORS_DIR")
    path = Path(configured) if configured else REPO.parent / "shared" / "vectors" / "reference"
    if not (path / "userdb").is_dir():
        pytest.fail(f"no reference vectors at {path} (set SNUG_VECTORS_DIR)")
    return path


def vector(*parts: str) -> bytes:
    """The bytes of one reference vector, e.g. ``vector("userdb", "fresh-v6.user.snug")``."""
    return vectors_dir().joinpath(*parts).read_bytes()


def user_version(path: Path) -> int:
    """PRAGMA user_version of a SQLite file, opened read-only."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


def table_shapes(path: Path) -> dict[str, list[str]]:
    """Every table's column names, as PRAGMA table_info lists them (DDL text differs between
    a migrated file and a fresh one where ALTER TABLE added columns)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {
            table: [column[1] for column in db.execute(f'PRAGMA table_info("{table}")')]
            for table in sorted(tables)
        }
