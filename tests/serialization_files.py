"""Helpers for the serialization tests: exact sample tensors and their bits, reading and rewriting a
safetensors file's header."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import ember_core as em
from ember_core import transfer


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


RAW = {"bfloat16": np.uint16}


def raw_values(t: em.Tensor) -> np.ndarray:
    """The exact bits of t (bfloat16 as uint16)."""
    return transfer.to_numpy_raw(t)


def sample(dtype: em.DType, shape: tuple[int, ...] = (3, 5)) -> em.Tensor:
    """Random bits of every kind (NaN payloads and subnormals included for floats), uploaded raw."""
    bits = np.random.default_rng(7).integers(0, 256, size=math.prod(shape) * dtype.itemsize, dtype=np.uint8)
    if dtype is em.bool_:
        bits %= 2
    return transfer.upload(bits.view(RAW.get(dtype.name, dtype.numpy)).reshape(shape), dtype, em.as_device("cpu"))
