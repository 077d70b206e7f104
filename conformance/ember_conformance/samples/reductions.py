"""Reductions (every axis, keepdims, empty, 0-d, long), arg-reductions (ties, NaN) and scans."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_conformance.samples.base import Arr, Sample, rng_for, specials, typical
from ember_conformance.tolerances import FLOATS
from ember_core.errors import ShapeError

_NO_IDENTITY = frozenset({"max", "min"})  # an empty reduction is an error, not a value
_NEAR_ONE = frozenset({"prod", "cumulative_prod"})  # keep products of many terms finite


def _values(op: str, dtype: str, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    if op in _NEAR_ONE and dtype not in ("bool",) and dtype[0] not in "iu":
        return typical(rng, shape, dtype, 0.8, 1.25)
    if op in _NEAR_ONE:
        return typical(rng, shape, dtype, -2, 2)
    if op in ("any", "all", "count_nonzero"):  # zeros decide these: plant some
        v = typical(rng, shape, dtype)
        return np.where(rng.random(shape) < 0.3, np.zeros((), v.dtype), v)
    return typical(rng, shape, dtype)


def reduction(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    op = schema.name
    rng = rng_for(op, dtype)
    x = _values(op, dtype, rng, (3, 4, 5))

    def s(name: str, layout: str = "contiguous", values: np.ndarray = x, **kw: Any) -> Sample:
        return Sample(name, (Arr(values, dtype, layout),), kw)

    out = [
        s("all-axes"), s("axis-0", axis=0), s("axis-1", axis=1), s("axis-minus-1", axis=-1),
        s("axes-0-2", axis=(0, 2)), s("axis-1-keepdims", axis=1, keepdims=True), s("all-keepdims", keepdims=True),
        s("transposed-axis-0", "transposed", axis=0), s("strided-axes-0-1", "strided", axis=(0, 1)),
        s("flipped-all", "flipped"), s("0-d", values=x[0, 0, 0]),
        s("long", values=_values(op, dtype, rng, (257,) if op in _NEAR_ONE else (2053,))),
        s("empty-result", values=_values(op, dtype, rng, (0, 4)), axis=1),
    ]
    if op not in _NO_IDENTITY:
        out.append(s("empty-reduced", values=_values(op, dtype, rng, (0, 4)), axis=0))
    if op in ("var", "std"):
        out.append(s("correction-1", axis=1, correction=1))
    if dtype in FLOATS and op not in ("var", "std"):
        out.append(s("extremes", values=specials(dtype)))
    if level == 1:
        if op in ("sum", "prod") and dtype == "float32":
            out.append(s("dtype-float64", axis=0, dtype="float64"))
        out.append(s("error-axis-out-of-range", axis=3))
        if op in _NO_IDENTITY:
            out.append(Sample("error-empty", (Arr(x[:0], dtype),), {"axis": 0}, error=ShapeError))
    for sample in out:
        if sample.name.startswith("error-axis"):
            sample.error = ShapeError
    return out


def arg_reduction(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    x = typical(rng, (3, 4, 5), dtype, -2, 2)  # few distinct values: ties must resolve to the first
    if dtype in FLOATS:
        x = np.round(x)

    def s(name: str, values: np.ndarray = x, layout: str = "contiguous", **kw: Any) -> Sample:
        return Sample(name, (Arr(values, dtype, layout),), kw)

    out = [s("all-axes"), s("axis-0", axis=0), s("axis-1", axis=1), s("axis-minus-1-keepdims", axis=-1, keepdims=True),
           s("transposed-axis-1", layout="transposed", axis=1), s("strided-axis-2", layout="strided", axis=2),
           s("0-d", x[0, 0, 0]), s("long", typical(rng, (2053,), dtype))]
    if dtype in FLOATS:
        out.append(s("extremes", specials(dtype)))
    if level == 1:
        out.append(Sample("error-empty", (Arr(x[:0], dtype),), {"axis": 0}, error=ShapeError))
    return out


def scan(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    op = schema.name
    rng = rng_for(op, dtype)
    x = _values(op, dtype, rng, (3, 4, 5))

    def s(name: str, values: np.ndarray = x, layout: str = "contiguous", **kw: Any) -> Sample:
        return Sample(name, (Arr(values, dtype, layout),), kw)

    out = [s("axis-0", axis=0), s("axis-1", axis=1), s("axis-minus-1", axis=-1), s("1-d", x[0, 0]),
           s("include-initial", axis=1, include_initial=True), s("transposed-axis-0", layout="transposed", axis=0),
           s("strided-axis-2", layout="strided", axis=2), s("zero-size", x[:0], axis=0),
           s("long", _values(op, dtype, rng, (257,) if op in _NEAR_ONE else (1031,)))]
    if dtype in FLOATS:
        out.append(s("extremes", specials(dtype)))
    if level == 1:
        out.append(Sample("error-2-d-without-axis", (Arr(x[0], dtype),), error=ShapeError))
    return out
