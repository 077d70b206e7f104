"""ember.h for native builds: the header files, and its declarations as cffi's ``cdef`` accepts them."""

from __future__ import annotations

import re
from pathlib import Path

INCLUDE = Path(__file__).resolve().parent.parent / "include"


def kit_header() -> Path:
    """``ember_kit.h``: strided iteration and dtype helpers for C kernels (includes ember.h)."""
    return INCLUDE / "ember_kit.h"


def cdef_text(header: str | Path = INCLUDE / "ember.h") -> str:
    """A header's declarations for ``cffi.FFI.cdef``: integer ``#define``s kept (cffi exposes them as
    ``lib.EMBER_ABI_MAJOR``...), other preprocessor lines and comments dropped."""
    text = re.sub(r"/\*.*?\*/", "", Path(header).read_text(), flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    kept = [line for line in text.splitlines()
            if not line.startswith("#") or re.match(r"#define\s+\w+\s+-?\d+\s*$", line)]
    return "\n".join(kept)
