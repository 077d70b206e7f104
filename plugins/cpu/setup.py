"""cffi_modules has no pyproject.toml spelling yet; everything else lives in pyproject.toml.

The C sources compile in parallel, one compiler process per core (``EMBER_CPU_BUILD_JOBS``
overrides), and an object newer than its source and every header of csrc/ is kept: a rebuild
in the same build directory (``pip install -e`` again) recompiles only what changed."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HEADERS = sorted((Path(__file__).resolve().parent / "src" / "ember_cpu" / "csrc").glob("*.h"))


def _jobs() -> int:
    return int(os.environ.get("EMBER_CPU_BUILD_JOBS") or len(os.sched_getaffinity(0)))


def _up_to_date(obj: str, src: str) -> bool:
    if not os.path.exists(obj):
        return False
    newest_input = max([os.path.getmtime(src), *(h.stat().st_mtime for h in HEADERS)])
    return os.path.getmtime(obj) > newest_input


class ParallelBuildExt(build_ext):
    """build_ext whose compiler runs the sources of one extension concurrently."""

    def build_extension(self, ext):
        compiler = self.compiler

        def compile_all(sources, output_dir=None, macros=None, include_dirs=None, debug=False,
                        extra_preargs=None, extra_postargs=None, depends=None):
            macros, objects, extra, pp_opts, build = compiler._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs)
            cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)
            todo = [obj for obj in objects if obj in build and (self.force or not _up_to_date(obj, build[obj][0]))]

            def compile_one(obj: str) -> None:
                src, ext_ = build[obj]
                compiler._compile(obj, src, ext_, cc_args, extra, pp_opts)

            with ThreadPoolExecutor(_jobs()) as pool:
                list(pool.map(compile_one, todo))  # list(): re-raises the first CompileError
            return objects

        compiler.compile = compile_all
        super().build_extension(ext)


setup(cffi_modules=["build_ffi.py:ffibuilder"], cmdclass={"build_ext": ParallelBuildExt})
