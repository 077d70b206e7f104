"""ember-rocm's build step: compiles ember-gpu's kernel sources with hipcc into one code-object
bundle per source (``ember_gpu.build.build_images``: gfx908, gfx90a, gfx940 and gfx1030, or the
comma-separated list in $EMBER_ROCM_ARCHS) in ``src/ember_rocm/kernels/`` (package data, not in
git), with the same ``build.json`` and ``manifest.toml`` as ember-cuda's build
(``ember_gpu.build.write_build_files``).  A machine without hipcc fails here with the packages to
install.  Everything else lives in pyproject.toml."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "src" / "ember_rocm" / "kernels"
REPOSITORY = HERE.parent.parent  # when built from ember's repository: the core and ember-gpu beside it


def build_kernels() -> None:
    for module, where in (("ember_core", REPOSITORY), ("ember_gpu", REPOSITORY / "plugins" / "gpu" / "src")):
        if (where / module).is_dir():
            sys.path.append(str(where))  # after the installed packages: used only when those are missing
    try:
        from ember_gpu.build import build_vendor_package
    except ImportError as exc:
        raise SystemExit(f"ember-rocm's build needs ember and ember-gpu ({exc}): install them first, then build "
                         f"with --no-build-isolation") from None
    archs = [arch for arch in os.environ.get("EMBER_ROCM_ARCHS", "").split(",") if arch]
    build_vendor_package(KERNELS, "rocm", vendor_compiler="hipcc", archs=archs or None)


class BuildWithKernels(build_py):
    def run(self) -> None:
        build_kernels()
        super().run()


setup(cmdclass={"build_py": BuildWithKernels})
