"""Helpers for the serialization tests: read and rewrite a safetensors file's header."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def read_header(path: Path) -> tuple[dict[str, Any], bytes]:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def rewrite_header(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``edit`` to the parsed header (its ember structure parsed too, under "structure") and write back."""
    header, data = read_header(path)
    meta = header.get("__metadata__", {})
    if "ember.structure" in meta:
        header["structure"] = json.loads(meta["ember.structure"])
    edit(header)
    if "structure" in header:
        meta["ember.structure"] = json.dumps(header.pop("structure"))
    write_raw(path, json.dumps(header).encode(), data)


def write_raw(path: Path, header: bytes, data: bytes) -> None:
    path.write_bytes(len(header).to_bytes(8, "little") + header + data)
