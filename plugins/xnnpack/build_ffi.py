"""cffi build script for ember-xnnpack's native layer (API mode, compiled when the plugin is built).

Links Debian's XNNPACK and pthreadpool (``apt-get install -y libxnnpack-dev libpthreadpool-dev``,
the 2022 create -> setup -> run API).  A build without them stops here with that command, instead
of a compiler error deep in the log.  ``ember.h`` comes from ``$EMBER_INCLUDE``, else the installed
core, else this repository's ``ember_core/include``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import cffi

HERE = Path(__file__).resolve().parent
CSRC = HERE / "src" / "ember_xnnpack" / "csrc"
SYSTEM_PACKAGES = "libxnnpack-dev libpthreadpool-dev"
LIBRARIES = ["XNNPACK", "pthreadpool"]


def _compiler() -> str:
    cc = os.environ.get("CC", "cc").split()[0]
    if shutil.which(cc) is None:
        raise SystemExit(f"ember-xnnpack: no C compiler ({cc!r}) found; apt-get install -y gcc")
    return cc


def _require_system_packages() -> None:
    """XNNPACK's header (which includes pthreadpool's) must preprocess and both libraries must be
    linkable; otherwise name the Debian packages that provide them."""
    cc = _compiler()
    header = subprocess.run([cc, "-E", "-x", "c", "-", "-o", os.devnull], input="#include <xnnpack.h>\n",
                            capture_output=True, text=True)
    missing = [] if header.returncode == 0 else ["xnnpack.h / pthreadpool.h"]
    for lib in LIBRARIES:
        found = subprocess.run([cc, f"-print-file-name=lib{lib}.so"], capture_output=True, text=True).stdout.strip()
        if not os.path.isabs(found):
            missing.append(f"lib{lib}.so")
    if missing:
        raise SystemExit(f"ember-xnnpack needs XNNPACK and pthreadpool from Debian ({', '.join(missing)} not found): "
                         f"apt-get install -y {SYSTEM_PACKAGES}")


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
    raise SystemExit("ember-xnnpack: cannot find ember.h; install ember first or set EMBER_INCLUDE to its directory")


def _cdef() -> str:
    """The plugin header's declarations and integer #defines, plus ember.h's ABI version."""
    abi = [line for line in (Path(_ember_include()) / "ember.h").read_text().splitlines()
           if re.match(r"#define\s+EMBER_ABI_(MAJOR|MINOR)\s+\d+\s*$", line)]
    text = re.sub(r"/\*.*?\*/", "", (CSRC / "ember_xnnpack.h").read_text(), flags=re.S)
    lines = [line for line in text.splitlines()
             if not line.startswith("#") or re.match(r"#define\s+\w+\s+-?\d+\s*$", line)]
    return "\n".join(abi + lines)


_require_system_packages()
ffibuilder = cffi.FFI()
ffibuilder.cdef(_cdef())
ffibuilder.set_source(
    "ember_xnnpack._native",
    '#include "ember.h"\n#include "ember_xnnpack.h"\n',
    sources=[str(p.relative_to(HERE)) for p in sorted(CSRC.glob("*.c"))],
    include_dirs=[str(CSRC), _ember_include()],
    libraries=LIBRARIES,
    # Built where it runs, like ember-cpu (EMBER_XNNPACK_CFLAGS overrides, e.g. for portable wheels).
    # OpenMP: ops that must share the cores with ember-cpu run on its (libgomp's) thread team.
    extra_compile_args=[*os.environ.get("EMBER_XNNPACK_CFLAGS", "-O3 -march=native").split(), "-std=gnu11", "-fopenmp"],
    extra_link_args=["-fopenmp"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
