"""The hubs the container suites share, started with `snug_hub.testcontainers` once per
session.

The tests exercise the *installed* package (`pip install shared/clients/python`), never the
source tree: its stubs exist only in a build. The container suites need a Docker Engine and the
hub's image (`SNUG_HUB_IMAGE`, default `snug-hub:dev`); without Docker they skip, unless
`SNUG_REQUIRE_DOCKER=1`, which makes that a failure (CI sets it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from snug_hub.testcontainers import SnugHub, SplitHub
from support import FAST_FAILING, QUOTA_BYTES


def _docker_problem() -> str | None:
    try:
        import docker

        docker.from_env().ping()
    except Exception as err:  # any failure to reach the Engine means "no Docker"
        return f"no Docker Engine: {err}"
    return None


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """Skips (or, with SNUG_REQUIRE_DOCKER=1, fails) a container test without Docker."""
    problem = _docker_problem()
    if problem is None:
        return
    if os.environ.get("SNUG_REQUIRE_DOCKER") == "1":
        pytest.fail(f"SNUG_REQUIRE_DOCKER=1 but {problem}")
    pytest.skip(f"{problem} (SNUG_REQUIRE_DOCKER=1 makes this a failure)")


@pytest.fixture(scope="session")
def hub(docker_engine: None) -> Iterator[SnugHub]:
    """`snug-hub serve` in one container, with a 1 MiB quota."""
    with SnugHub(env={"SNUG_SYNC_QUOTA_BYTES": str(QUOTA_BYTES)}) as started:
        yield started


@pytest.fixture(scope="session")
def split(docker_engine: None) -> Iterator[SplitHub]:
    """The five roles in five containers on a network of their own."""
    with SplitHub(env=FAST_FAILING) as started:
        yield started
