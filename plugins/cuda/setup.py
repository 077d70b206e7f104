"""ember-cuda's build step: compiles ember-gpu's kernel sources with nvcc into one fatbin per source
(``ember_gpu.build.build_images``: SASS for sm_80 and sm_90 plus compute_90 PTX) in
``src/ember_cuda/kernels/`` (package data, not in git), and records there, in ``build.json``, the
ember ABI and kernel ABI they were built for (``ember_plugin_info`` reports them), and in
``manifest.toml`` the op x dtype pairs the built kernels serve (``ember_gpu.build.build_vendor_package``).  A machine
without nvcc fails here with how to install it.  Built from ember's repository, the core and
ember-gpu come from beside this directory when they are not installed.  Everything else lives
in pyproject.toml."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "src" / "ember_cuda" / "kernels"
REPOSITORY = HERE.parent.parent  # when built from ember's repository: the core and ember-gpu beside it


def _import_or_use_repository(module: str, where: Path) -> None:
    """The installed package, else this repository's copy (an isolated build environment has
    neither ember nor ember-gpu: they are not on PyPI)."""
    try:
        importlib.import_module(module)
    except ImportError:
        if not (where / module).is_dir():
            raise SystemExit(f"ember-cuda's build needs {module} (install ember and ember-gpu first, then build "
                             f"with --no-build-isolation)") from None
        sys.path.insert(0, str(where))


def build_kernels() -> None:
    _import_or_use_repository("ember_core", REPOSITORY)
    _import_or_use_repository("ember_gpu", REPOSITORY / "plugins" / "gpu" / "src")
    from ember_gpu.build import build_vendor_package

    build_vendor_package(KERNELS, "cuda", vendor_compiler="nvcc")


class BuildWithKernels(build_py):
    def run(self) -> None:
        build_kernels()
        super().run()


setup(cmdclass={"build_py": BuildWithKernels})
