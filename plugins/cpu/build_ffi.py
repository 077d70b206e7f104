"""cffi build script for ember-cpu's kernel library (API mode, compiled when the plugin is built).

Sources: every ``src/ember_cpu/csrc/*.c`` plus the files ``codegen.py`` generates from
``src/ember_cpu/kernels.toml``.  ``ember.h`` comes from ``$EMBER_INCLUDE``, else the installed core
(``ember_core.get_include()``), else this repository's ``ember_core/include`` (so that an isolated
build from the source tree needs nothing but PyPI).  OpenBLAS comes from ``scipy_openblas32``,
whose shared library the module finds next to itself at run time.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path

import cffi
import scipy_openblas32

HERE = Path(__file__).resolve().parent
CSRC = HERE / "src" / "ember_cpu" / "csrc"
sys.path.insert(0, str(HERE))
import codegen  # noqa: E402  (lives beside this file; not an installed module)


def _cdef_from_header(path: Path) -> str:
    """A header's declarations as cffi's cdef accepts them: integer #defines kept, other
    preprocessor lines and comments dropped."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    lines = []
    for line in text.splitlines():
        if line.startswith("#"):
            if re.match(r"#define\s+\w+\s+-?\d+\s*$", line):
                lines.append(line)
            continue
        lines.append(line)
    return "\n".join(lines)


def _ember_include() -> str:
    if os.environ.get("EMBER_INCLUDE"):
        return os.environ["EMBER_INCLUDE"]
    try:
        import ember_core

        return ember_core.get_include()
    except ImportError:
        in_tree = HERE.parent.parent / "ember_core" / "include"
        if (in_tree / "ember.h").is_file():
            return str(in_tree)
    raise SystemExit("ember-cpu: cannot find ember.h; install ember first or set EMBER_INCLUDE to its directory")


def _use_libmvec() -> bool:
    """glibc's vector maths (libmvec, glibc >= 2.35 on x86_64) lets gcc vectorise exp/log/tanh...:
    ~15x for float32 exp.  EMBER_CPU_LIBMVEC=0 turns it off."""
    libc, version = platform.libc_ver()
    if platform.machine() != "x86_64" or libc != "glibc" or os.environ.get("EMBER_CPU_LIBMVEC") == "0":
        return False
    return tuple(int(v) for v in version.split(".")[:2]) >= (2, 35)


def _compile_args() -> list[str]:
    """Tuned for the building machine: the plugin is built where it runs (set EMBER_CPU_CFLAGS
    to build portable binaries instead)."""
    flags = os.environ.get("EMBER_CPU_CFLAGS", "-O3 -march=native")
    return [*flags.split(), "-fopenmp", "-std=gnu11", "-fno-strict-aliasing", "-fno-math-errno"]


codegen.generate(CSRC)

ffibuilder = cffi.FFI()
ffibuilder.cdef(
    "\n".join(
        _cdef_from_header(p)
        for p in (Path(_ember_include()) / "ember.h", CSRC / "ember_cpu_ops.h", CSRC / "ember_cpu.h")
    )
)
_blas_lib = scipy_openblas32.get_lib_dir()
ffibuilder.set_source(
    "ember_cpu._native",
    '#include "ember_cpu.h"',
    sources=[str(p.relative_to(HERE)) for p in sorted(CSRC.glob("*.c"))],
    include_dirs=[str(CSRC), _ember_include(), scipy_openblas32.get_include_dir()],
    libraries=[scipy_openblas32.get_library(), *(["mvec"] if _use_libmvec() else [])],
    define_macros=[("EMBER_CPU_LIBMVEC", "1")] if _use_libmvec() else [],
    library_dirs=[_blas_lib],
    # No rpath: ember_cpu/__init__.py loads scipy-openblas32's library by its installed path first,
    # and the dynamic loader then resolves the dependency by soname (paths baked in at build time
    # would point into pip's temporary build environment).
    extra_compile_args=_compile_args(),
    extra_link_args=["-fopenmp"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
