"""The kernels that make values without inputs: full (the fill kernels, given the value's bytes in
the dtype's storage form) and random_uniform / random_normal / random_integers (the Philox4x32-10
stream of ember-cpu's random.c at the (seed, offset) the core passes; the core advances the
generator).  Their outputs are contiguous: one flat launch each."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from ember_core import dtypes
from ember_core.random import blocks_for
from ember_gpu import abi
from ember_gpu.ops import FLAT_VARIANTS, Entry, OpLayer, kernel_names

RANDOM_PARAMETERS = {"uniform": ("low", "high"), "normal": ("mean", "std"), "integers": ("low", "high")}


def _flat_kinds(layer: OpLayer, prefix: str) -> dict[str, tuple[str, ...]]:
    """key -> its two flat kernels, for the keys of ``<prefix>_<key>_<variant>`` built in both."""
    return {key: kernel_names(f"{prefix}_{key}", FLAT_VARIANTS) for key, built in layer.variants(prefix).items()
            if built.issuperset(FLAT_VARIANTS)}


def bfloat16_bits(value: float) -> int:
    """value rounded once to bfloat16 (nearest even), as ember-cpu converts a double: through the
    float rounded to odd (csrc/eg_half.h), so that the second rounding cannot round twice."""
    with np.errstate(over="ignore"):
        single = np.float32(value)
    bits = int(single.view(np.uint32))
    if math.isfinite(single) and float(single) != value and not bits & 1:
        bits += -1 if abs(float(single)) > abs(value) else 1
    if bits & 0x7FFFFFFF > 0x7F800000:
        return (bits >> 16) | 0x40  # a quiet NaN
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


def fill_words(dtype: dtypes.DType, value: Any) -> tuple[int, int]:
    """eg_fill_args.value: one element of ``dtype`` holding ``value`` as ember-cpu's full stores it
    (integers and bool from int(value), real floats from float(value) rounded once, complex from
    complex(value))."""
    if dtype.kind == "b":
        data = bytes([int(value) != 0])
    elif dtype.kind in "iu":
        data = int(value).to_bytes(dtype.itemsize, "little", signed=dtype.kind == "i")
    else:
        value = complex(value) if dtype.kind == "c" else complex(value).real
        if dtype.numpy is None:  # bfloat16
            data = bfloat16_bits(value).to_bytes(2, "little")
        else:
            with np.errstate(over="ignore"):  # beyond the dtype's range: infinity, as ember-cpu stores it
                data = np.array(value, dtype.numpy).tobytes()
    return struct.unpack("<2Q", data.ljust(16, b"\0"))


def _flat_launch(layer: OpLayer, names: dict[str, tuple[str, ...]], out: Any) -> tuple[Any, int, Any]:
    """(device ops, out's checked first address, the flat32 or flat64 kernel of out's dtype)."""
    ops = layer.device_ops(out)
    return ops, layer.flat_output(ops, out), layer.kernel(ops, names[out._dtype.name][out._numel > abi.INDEX32_MAX])


def _full(layer: OpLayer, names: dict[str, tuple[str, ...]]) -> Any:
    def full(out: Any, *, value: Any) -> None:
        n = out._numel
        if not n:
            return
        ops, address, kernel = _flat_launch(layer, names, out)
        vector = max(1, 16 // out._dtype.itemsize)
        kernel(ops.grid(-(-n // vector)), (abi.BLOCK, 1, 1),
               {"out": address, "n": n, "value": fill_words(out._dtype, value)})

    return full


def _signed64(value: int) -> int:
    """An int64 field holding ``value`` in [-2**63, 2**64) (the kernels read the bound as unsigned)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _random(layer: OpLayer, kind: str, names: dict[str, tuple[str, ...]]) -> Any:
    first, second = RANDOM_PARAMETERS[kind]

    def random(out: Any, *, seed: int, offset: int, **parameters: Any) -> None:
        n = out._numel
        if not n:
            return
        ops, address, kernel = _flat_launch(layer, names, out)
        a, b = parameters[first], parameters[second]
        args = {"out": address, "n": n, "seed": seed, "offset": offset}
        if kind == "integers":
            args |= {"ilow": _signed64(int(a)), "ihigh": _signed64(int(b))}
        else:
            args |= {"a": float(a), "b": float(b)}
        kernel(ops.grid(blocks_for(kind, out._dtype.itemsize, n)), (abi.BLOCK, 1, 1), args)

    random.__name__ = f"random_{kind}"
    return random


def kernels(layer: OpLayer) -> dict[str, Entry]:
    table: dict[str, Entry] = {}
    fill = _flat_kinds(layer, "eg_fill")
    if fill:
        table["full"] = _full(layer, fill), frozenset(fill)
    by_kind: dict[str, dict[str, tuple[str, ...]]] = {}
    for key, names in _flat_kinds(layer, "eg_random").items():
        kind, dtype = key.split("_", 1)
        by_kind.setdefault(kind, {})[dtype] = names
    for kind, names in by_kind.items():
        table[f"random_{kind}"] = _random(layer, kind, names), frozenset(names)
    return table
