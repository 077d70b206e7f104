"""The kernel ABI on the Python side: cffi types read from csrc/abi.h's cdef block, so the op
layer packs exactly the structs the kernels read (the header is the one source of truth)."""

from __future__ import annotations

import re
from pathlib import Path

import cffi

HEADER = Path(__file__).resolve().parent / "csrc" / "abi.h"


def cdef_block(text: str) -> str:
    """The text between ``EG_CDEF_BEGIN`` and ``EG_CDEF_END`` of abi.h."""
    found = re.search(r"EG_CDEF_BEGIN \*/(.*?)/\* EG_CDEF_END", text, flags=re.S)
    if found is None:
        raise ValueError(f"{HEADER} has no EG_CDEF_BEGIN ... EG_CDEF_END block")
    return found.group(1)


ffi = cffi.FFI()
ffi.cdef(cdef_block(HEADER.read_text()))
_constants = ffi.dlopen(None)  # integer #defines of a cdef are read through a library object
ABI_VERSION: int = _constants.EG_ABI_VERSION
MAX_DIMS: int = _constants.EG_MAX_DIMS
BLOCK: int = _constants.EG_BLOCK
INDEX32_MAX: int = _constants.EG_INDEX32_MAX
