"""Builds snug-hub-client: generates the gRPC stubs from the protos with grpcio-tools.

Everything about the package is in pyproject.toml; this file only adds the code generation to
setuptools' build_py (wheels and editable installs) and puts the protos into an sdist.

Where the protos come from, first found wins:
  1. `proto/` beside this file: an sdist carries a copy there (see `Sdist`);
  2. `../../../proto`: the repository's own, when building from a checkout
     (`pip install shared/clients/python`).

The generated modules land in `snug_hub/_proto/snug/<capability>/v1/` (`*_pb2.py`, `*_pb2.pyi`,
`*_pb2_grpc.py`). protoc writes their cross-imports as `from snug.<capability>.v1 import ...`,
for a top-level package `snug` that this distribution does not own (PyPI has an unrelated
`snug`), so they are rewritten to `snug_hub._proto.snug....`, the one change made to protoc's
output; its message and service definitions are byte for byte what protoc emitted.
"""

from __future__ import annotations

import importlib.resources
import re
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
PACKAGE = "snug_hub"
GENERATED = "_proto"

# `from snug.container.v1 import container_pb2 as ...` at the start of a line, and the module
# name protoc gives the builder ('snug.container.v1.container_pb2'), which becomes the classes'
# __module__ (pickling and reprs need it to be importable).
_IMPORT = re.compile(r"^from snug\.", re.MULTILINE)
_MODULE_NAME = re.compile(r"'snug\.(\w+)\.v1\.(\w+_pb2)'")


def proto_dir() -> Path:
    """Returns the directory holding `snug/<capability>/v1/*.proto`."""
    checkout = HERE.parents[2] / "proto" if len(HERE.parents) > 2 else None
    for candidate in (HERE / "proto", checkout):
        if candidate is not None and (candidate / "snug").is_dir():
            return candidate
    raise SystemExit(
        "snug-hub-client: no protos found: expected proto/ beside setup.py (an sdist) or the "
        f"repository's proto/ at {checkout} (a checkout)"
    )


def generate(protos: Path, package_dir: Path) -> list[Path]:
    """Compiles every .proto under `protos` into `package_dir/_proto` and returns the files."""
    from grpc_tools import protoc

    out = package_dir / GENERATED
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    sources = sorted(p.relative_to(protos).as_posix() for p in protos.rglob("*.proto"))
    if not sources:
        raise SystemExit(f"snug-hub-client: no .proto files under {protos}")
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{protos}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"snug-hub-client: grpc_tools.protoc failed on {sources}")
    written = []
    for path in sorted(out.rglob("*")):
        if path.is_dir():
            init = path / "__init__.py"
            init.write_text('"""Generated from proto/ when snug-hub-client was built."""\n')
            written.append(init)
        elif path.suffix in (".py", ".pyi"):
            text = _MODULE_NAME.sub(rf"'{PACKAGE}.{GENERATED}.snug.\1.v1.\2'", path.read_text())
            path.write_text(_IMPORT.sub(f"from {PACKAGE}.{GENERATED}.snug.", text))
            written.append(path)
    (out / "__init__.py").write_text(
        '"""The gRPC stubs, generated from proto/ when snug-hub-client was built."""\n'
    )
    written.append(out / "__init__.py")
    return written


class BuildPy(build_py):
    """setuptools' build_py, then the stubs generated into the build (or, editable, the source)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            target = HERE / "src" / PACKAGE
        else:
            target = Path(self.build_lib) / PACKAGE
        generate(proto_dir(), target)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        # The wheel's RECORD lists what build_py reports; the stubs are made in run().
        generated = Path(self.build_lib) / PACKAGE / GENERATED
        extra = [str(p) for p in generated.rglob("*") if p.is_file()] if generated.is_dir() else []
        return [*super().get_outputs(include_bytecode), *extra]


class Sdist(sdist):
    """setuptools' sdist, with the repository's protos copied in as `proto/`."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        shutil.copytree(proto_dir(), Path(base_dir) / "proto", dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})
