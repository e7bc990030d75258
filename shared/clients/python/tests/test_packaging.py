"""The package's pins: every requirement is pinned exactly (a fresh machine gets what was
tested), and CI's virtualenv (`k8s/validate.sh`), from which the package is installed without
an index, pins the same versions."""

from __future__ import annotations

import re
import tomllib

from support import PACKAGE_DIR, REPO


def pins() -> list[str]:
    project = tomllib.loads((PACKAGE_DIR / "pyproject.toml").read_text())
    return [
        *project["build-system"]["requires"],
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["test"],
    ]


def test_every_requirement_is_pinned() -> None:
    for requirement in pins():
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", requirement), requirement


def test_the_ci_virtualenv_pins_the_same_versions() -> None:
    script = (REPO / "k8s" / "validate.sh").read_text()
    variables = dict(re.findall(r"^([A-Z_]+_VERSION)=(\S+)$", script, flags=re.MULTILINE))
    installed = {}
    for line in re.findall(r'^requirements\+?="([^"]*)"$', script, flags=re.MULTILINE):
        for requirement in line.split():
            name, _, version = requirement.partition("==")
            installed[name.lower()] = re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], version)
    for requirement in pins():
        name, _, version = requirement.partition("==")
        assert installed.get(name.lower()) == version, (
            f"{requirement}: k8s/validate.sh installs {installed.get(name.lower())}"
        )
