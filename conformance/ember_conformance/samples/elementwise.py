"""Elementwise samples: every layout, broadcasting, 0-d and zero-size tensors, Python scalars on
either side, long tensors (vector loops and their tails), extreme values, integer inputs to ops
that compute in float, and the error inputs the core must reject."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_conformance.layouts import LAYOUTS
from ember_conformance.samples.base import Arr, Sample, rng_for, specials, typical
from ember_conformance.tolerances import FLOATS
from ember_core.errors import DeviceError, DTypeError, ShapeError

# where ordinary inputs come from, per op (outside it an op's values are NaN or inf: those are
# covered by the extreme-value samples)
UNARY_DOMAIN = {
    "acos": (-0.99, 0.99), "asin": (-0.99, 0.99), "atanh": (-0.99, 0.99), "acosh": (1.0, 10.0),
    "log": (0.01, 100.0), "log2": (0.01, 100.0), "log10": (0.01, 100.0), "sqrt": (0.0, 100.0),
    "log1p": (-0.9, 10.0), "tan": (-1.5, 1.5), "reciprocal": (0.1, 10.0), "exp": (-10.0, 10.0),
    "expm1": (-10.0, 10.0), "cosh": (-10.0, 10.0), "sinh": (-10.0, 10.0), "square": (-11.0, 11.0),
}
BINARY_DOMAIN = {
    "pow": ((0.1, 3.0), (-3.0, 3.0)), "bitwise_left_shift": ((0.0, 20.0), (0.0, 2.0)),
    "bitwise_right_shift": ((-20.0, 20.0), (0.0, 3.0)), "multiply": ((-11.0, 11.0), (-11.0, 11.0)),
}
INTEGER_BINARY_DOMAIN = {"pow": ((-3.0, 3.0), (0.0, 3.0))}
NONZERO_DIVISOR = frozenset({"divide", "floor_divide", "remainder"})


def _scalar(values: np.ndarray, dtype: str) -> Any:
    """A Python scalar of the dtype's kind, taken from the sample's values."""
    value = values.reshape(-1)[0].item()
    return {"bool": bool, "complex64": complex, "complex128": complex}.get(dtype, int if dtype[0] in "iu" else float)(
        value)


def _domains(op: str, dtype: str) -> tuple[tuple[float, float], tuple[float, float]]:
    if dtype[0] in "iu" and op in INTEGER_BINARY_DOMAIN:
        return INTEGER_BINARY_DOMAIN[op]
    return BINARY_DOMAIN.get(op, ((-5.0, 5.0), (-5.0, 5.0)))


def _rejected_dtype(schema: Any) -> str | None:
    """A dtype the op must refuse with DTypeError (after integer inputs are cast to float)."""
    accepted = {d.name for d in schema.dtypes}
    for name in ("complex64", "float32", "bool", "int32"):
        compute = "float32" if schema.int_to_float and name in ("bool", "int32") else name
        if compute not in accepted:
            return name
    return None


def unary(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    op = schema.name
    low, high = UNARY_DOMAIN.get(op, (-5.0, 5.0))
    rng = rng_for(op, dtype)

    def values(shape: tuple[int, ...], name: str = dtype) -> np.ndarray:
        return typical(rng, shape, name, low, high)

    out = [Sample(layout, (Arr(values((4, 6)), dtype, layout),)) for layout in LAYOUTS]
    out += [
        Sample("0-d", (Arr(values(()), dtype),)),
        Sample("zero-size", (Arr(values((0, 3)), dtype),)),
        Sample("long", (Arr(values((1031,)), dtype),)),
        Sample("3-d-strided", (Arr(values((3, 4, 5)), dtype, "strided"),)),
    ]
    if dtype in FLOATS:
        out.append(Sample("extremes", (Arr(specials(dtype), dtype),)))
    if level == 1:
        if schema.int_to_float:
            out.append(Sample("int32-input", (Arr(values((4, 6), "int32"), "int32"),)))
        bad = _rejected_dtype(schema)
        if bad:
            out.append(Sample(f"error-{bad}", (Arr(typical(rng, (3,), bad), bad),), error=DTypeError))
    return out


def binary(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    op = schema.name
    (lo1, hi1), (lo2, hi2) = _domains(op, dtype)
    rng = rng_for(op, dtype)

    def first(shape: tuple[int, ...], name: str = dtype) -> np.ndarray:
        return typical(rng, shape, name, lo1, hi1)

    def second(shape: tuple[int, ...], name: str = dtype) -> np.ndarray:
        v = typical(rng, shape, name, lo2, hi2)
        if op in NONZERO_DIVISOR and name[0] in "iu":
            v = np.where(v == 0, np.asarray(3, dtype=v.dtype), v)
        return v

    def pair(name: str, s1: tuple[int, ...], s2: tuple[int, ...], l1: str = "contiguous",
             l2: str = "contiguous") -> Sample:
        return Sample(name, (Arr(first(s1), dtype, l1), Arr(second(s2), dtype, l2)))

    out = [
        pair("same-shape", (4, 6), (4, 6)),
        pair("broadcast", (3, 1, 6), (4, 6)),
        pair("broadcast-both", (4, 1), (1, 5)),
        pair("0-d", (), ()),
        pair("0-d-and-tensor", (), (4, 6)),
        pair("zero-size", (0, 6), (1, 6)),
        pair("transposed-strided", (4, 6), (4, 6), "transposed", "strided"),
        pair("flipped-offset", (4, 6), (4, 6), "flipped", "offset"),
        pair("long", (1031,), (1031,)),
        Sample("scalar-right", (Arr(first((4, 6)), dtype), _scalar(second((1,)), dtype))),
        Sample("scalar-left", (_scalar(first((1,)), dtype), Arr(second((4, 6)), dtype))),
    ]
    if dtype in FLOATS:
        s = specials(dtype)
        grid1, grid2 = np.repeat(s, len(s)), np.tile(s, len(s))
        out.append(Sample("extremes", (Arr(grid1.reshape(len(s), -1), dtype), Arr(grid2.reshape(len(s), -1), dtype))))
    if level == 1:
        if schema.int_to_float:
            out.append(Sample("int32-inputs", (Arr(first((4, 6), "int32"), "int32"),
                                               Arr(second((4, 6), "int32"), "int32"))))
        out.append(Sample("error-shape-mismatch", (Arr(first((4, 6)), dtype), Arr(second((5,)), dtype)),
                          error=ShapeError))
        bad = _rejected_dtype(schema)
        if bad:
            out.append(Sample(f"error-{bad}", (Arr(typical(rng, (3,), bad), bad), Arr(typical(rng, (3,), bad), bad)),
                              error=DTypeError))
        if device != "cpu":
            out.append(Sample("error-mixed-devices", (Arr(first((3,)), dtype), Arr(second((3,)), dtype, "on-cpu")),
                              error=DeviceError))
    return out
