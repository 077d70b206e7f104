"""Data movement and creation: copy, astype, full, where, take, index_put, nonzero, and the
manipulation composites (concat, stack, tril/triu, repeat, roll, tile, unstack, clip)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_conformance.layouts import LAYOUTS
from ember_conformance.samples.base import Arr, Sample, representable, rng_for, specials, typical
from ember_conformance.tolerances import COMPLEXES, FLOATS
from ember_core.dtypes import finfo
from ember_core.errors import DTypeError, IndexOutOfRangeError, ShapeError

ALL = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64",
       "complex64", "complex128")


def _one(rng: np.random.Generator, dtype: str, shape: tuple[int, ...], layout: str = "contiguous") -> Arr:
    return Arr(typical(rng, shape, dtype), dtype, layout)


def copy(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    out = [Sample(layout, (_one(rng, dtype, (4, 6), layout),)) for layout in LAYOUTS]
    out += [Sample("0-d", (_one(rng, dtype, ()),)), Sample("zero-size", (_one(rng, dtype, (0, 3)),)),
            Sample("long", (_one(rng, dtype, (4099,)),)),
            Sample("3-d-strided", (_one(rng, dtype, (3, 4, 5), "strided"),))]
    if dtype in FLOATS:
        out.append(Sample("extremes", (Arr(specials(dtype), dtype),)))
    return out


def integer_edges(src: str, target: str) -> np.ndarray:
    """Values of the real floating dtype ``src`` (as it rounds them) on both sides of the integer
    dtype ``target``'s range, with NaN, +-inf, -0.0 and halves: where ember's saturating
    conversion (ember_core.dtypes.float_to_integer) differs from C's and numpy's undefined one."""
    info = np.iinfo(target)
    limits = finfo(src)
    eps, biggest = float(limits.eps), float(limits.max)
    top, low = float(info.max) + 1.0, float(info.min)  # top: the first value beyond the range
    values = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.75, -2.75, biggest, -biggest,
              top * (1 - eps / 2), top, top * (1 + eps), float(info.max), info.max + 0.5,
              low, low - 0.5, low - 1.0, low * (1 + eps), low * (1 - eps / 2)]
    return representable(np.array(values), src)


def astype(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    """Every conversion from ``dtype``, with values every target holds (0..100, some fractions);
    from real floating dtypes also the extremes into floats and bool, and the edges of every
    integer range (NaN, infinities, just inside and just outside)."""
    rng = rng_for(schema.name, dtype)
    if dtype == "bool":
        x = rng.random((4, 6)) < 0.5
    elif dtype[0] in "iu":
        x = rng.integers(0, 100, (4, 6)).astype(dtype)
    else:
        x = typical(rng, (4, 6), dtype, 0.0, 100.0)
        x = np.round(x * 4) / 4
    out = []
    for target in ALL:
        if dtype in COMPLEXES and target not in COMPLEXES:
            continue  # complex to real is refused (DTypeError), as the Array API asks
        out.append(Sample(f"to-{target}", (Arr(x, dtype, "transposed"), target)))
        if dtype in FLOATS and target not in COMPLEXES:  # integers: long enough for vector loops and tails
            edges = specials(dtype) if target in (*FLOATS, "bool") else np.resize(integer_edges(dtype, target), 67)
            out.append(Sample(f"extremes-to-{target}", (Arr(edges, dtype), target)))
    return out


def full(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    value = typical(rng, (1,), dtype)[0].item()
    if dtype in COMPLEXES:
        value = complex(value)
    kw = {"dtype": dtype, "device": device}
    out = [Sample("2-d", ((3, 4), value), kw), Sample("0-d", ((), value), kw), Sample("zero-size", ((0, 4), value), kw),
           Sample("long", ((4099,), value), kw)]
    if dtype in FLOATS:
        out += [Sample(f"value-{name}", ((5,), v), kw) for name, v in
                (("nan", float("nan")), ("inf", float("inf")), ("minus-zero", -0.0))]
    if level == 1:
        out.append(Sample("error-float-into-int", ((3,), 1.5), {"dtype": "int32", "device": device}, error=DTypeError))
    return out


def where(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    cond = Arr(rng.random((4, 6)) < 0.5, "bool")
    scalar = typical(rng, (1,), dtype)[0].item()
    out = [Sample("same-shape", (cond, _one(rng, dtype, (4, 6)), _one(rng, dtype, (4, 6)))),
           Sample("broadcast", (Arr(rng.random((6,)) < 0.5, "bool"), _one(rng, dtype, (4, 6)),
                                _one(rng, dtype, (4, 1)))),
           Sample("scalar-other", (cond, _one(rng, dtype, (4, 6)), scalar)),
           Sample("layouts", (Arr(cond.values, "bool", "strided"), _one(rng, dtype, (4, 6), "transposed"),
                              _one(rng, dtype, (4, 6), "flipped"))),
           Sample("zero-size", (Arr(cond.values[:0], "bool"), _one(rng, dtype, (0, 6)), _one(rng, dtype, (0, 6))))]
    if level == 1:
        out.append(Sample("error-float-condition", (_one(rng, "float32", (3,)), _one(rng, dtype, (3,)),
                                                    _one(rng, dtype, (3,))), error=DTypeError))
    return out


def take(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    x = _one(rng, dtype, (4, 5))

    def idx(values: list[int], name: str = "int64") -> Arr:
        return Arr(np.array(values, dtype=name), name)

    out = [Sample("axis-0", (x, idx([0, -1, 2, 2])), {"axis": 0}),
           Sample("axis-1", (x, idx([4, 0])), {"axis": 1}),
           Sample("1-d", (_one(rng, dtype, (7,)), idx([6, 0, -7, 3]))),
           Sample("empty-indices", (x, idx([])), {"axis": 1}),
           Sample("strided-x", (_one(rng, dtype, (4, 5), "strided"), idx([3, 1])), {"axis": 0}),
           Sample("int32-indices", (x, idx([1, 2], "int32")), {"axis": 1})]
    if level == 1:
        out += [Sample("error-out-of-range", (x, idx([0, 4])), {"axis": 0}, error=IndexOutOfRangeError),
                Sample("error-negative-out-of-range", (x, idx([-6])), {"axis": 1}, error=IndexOutOfRangeError),
                Sample("error-float-indices", (x, Arr(np.array([0.0, 1.0]), "float32")), {"axis": 0}, error=DTypeError),
                Sample("error-2-d-indices", (x, Arr(np.zeros((2, 2), np.int64), "int64")), {"axis": 0},
                       error=ShapeError)]
    return out


def index_put(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)

    def idx(values: list[int]) -> Arr:
        return Arr(np.array(values, dtype=np.int64), "int64")

    out = [Sample("axis-0", (_one(rng, dtype, (5, 3)), idx([0, 2, -1]), _one(rng, dtype, (3, 3)))),
           Sample("axis-1", (_one(rng, dtype, (3, 5)), idx([4, 0]), _one(rng, dtype, (3, 2))), {"axis": 1}),
           Sample("broadcast-values", (_one(rng, dtype, (5, 3)), idx([1, 3]), _one(rng, dtype, (3,)))),
           Sample("scalar-value", (_one(rng, dtype, (5, 3)), idx([1, 3]), typical(rng, (1,), dtype)[0].item())),
           Sample("strided-x", (_one(rng, dtype, (5, 3), "strided"), idx([0, 4]), _one(rng, dtype, (2, 3)))),
           Sample("empty-indices", (_one(rng, dtype, (5, 3)), idx([]), _one(rng, dtype, (0, 3))))]
    if dtype != "bool":
        repeated = (_one(rng, dtype, (5, 3)), idx([1, 1, 3, 1]), _one(rng, dtype, (4, 3)))
        out.append(Sample("accumulate-repeated", repeated, {"accumulate": True}))
    if level == 1:
        out.append(Sample("error-out-of-range", (_one(rng, dtype, (5, 3)), idx([5]), _one(rng, dtype, (1, 3))),
                          error=IndexOutOfRangeError))
    return out


def nonzero(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)

    def sparse(shape: tuple[int, ...], layout: str = "contiguous") -> Arr:
        v = typical(rng, shape, dtype)
        return Arr(np.where(rng.random(shape) < 0.5, np.zeros((), v.dtype), v), dtype, layout)

    out = [Sample("2-d", (sparse((4, 5)),)), Sample("1-d", (sparse((9,)),)), Sample("3-d", (sparse((2, 3, 4)),)),
           Sample("transposed", (sparse((4, 5), "transposed"),)), Sample("strided", (sparse((4, 5), "strided"),)),
           Sample("all-zero", (Arr(np.zeros((3, 3), typical(rng, (1,), dtype).dtype), dtype),)),
           Sample("zero-size", (sparse((0, 3)),))]
    if level == 1:
        out.append(Sample("error-0-d", (sparse(()),), error=ShapeError))
    return out


def concat(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    out = [Sample("axis-0", ([_one(rng, dtype, (2, 3)), _one(rng, dtype, (4, 3), "strided")],)),
           Sample("axis-1", ([_one(rng, dtype, (3, 2)), _one(rng, dtype, (3, 1)),
                              _one(rng, dtype, (3, 4), "transposed")],),
                  {"axis": 1}),
           Sample("axis-none", ([_one(rng, dtype, (2, 3)), _one(rng, dtype, (5,))],), {"axis": None}),
           Sample("with-empty", ([_one(rng, dtype, (0, 3)), _one(rng, dtype, (2, 3))],)),
           Sample("single", ([_one(rng, dtype, (2, 3), "flipped")],), {"axis": -1})]
    if level == 1:
        out.append(Sample("error-shapes", ([_one(rng, dtype, (2, 3)), _one(rng, dtype, (2, 4))],), error=ShapeError))
    return out


def stack(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    arrays = [_one(rng, dtype, (3, 4)), _one(rng, dtype, (3, 4), "transposed"), _one(rng, dtype, (3, 4), "strided")]
    out = [Sample(f"axis-{axis}", (arrays,), {"axis": axis}) for axis in (0, 1, -1)]
    if level == 1:
        out.append(Sample("error-shapes", ([_one(rng, dtype, (2, 3)), _one(rng, dtype, (3, 2))],), error=ShapeError))
    return out


def triangle(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    return [Sample("k-0", (_one(rng, dtype, (4, 5)),)), Sample("k-1", (_one(rng, dtype, (4, 5)),), {"k": 1}),
            Sample("k-minus-2", (_one(rng, dtype, (5, 4), "transposed"),), {"k": -2}),
            Sample("batched", (_one(rng, dtype, (2, 3, 4), "strided"),))]


def repeat(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    return [Sample("flat", (_one(rng, dtype, (3, 4)), 2)),
            Sample("axis-0", (_one(rng, dtype, (3, 4), "transposed"), 3), {"axis": 0}),
            Sample("per-element", (_one(rng, dtype, (3, 4)), Arr(np.array([1, 0, 2, 3]), "int64")), {"axis": 1})]


def roll(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    return [Sample("flat", (_one(rng, dtype, (3, 4)), 2)),
            Sample("axis-1", (_one(rng, dtype, (3, 4), "strided"), -1), {"axis": 1}),
            Sample("two-axes", (_one(rng, dtype, (3, 4)), (1, 2)), {"axis": (0, 1)})]


def tile(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    return [Sample("shorter", (_one(rng, dtype, (2, 3)), (2,))), Sample("same", (_one(rng, dtype, (2, 3)), (2, 2))),
            Sample("longer", (_one(rng, dtype, (2, 3), "transposed"), (2, 1, 3)))]


def unstack(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    return [Sample("axis-0", (_one(rng, dtype, (3, 4)),)), Sample("axis-1", (_one(rng, dtype, (3, 4), "strided"),),
                                                                  {"axis": 1})]


def clip(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    lo, hi = (-1, 2) if dtype[0] in "iu" else (-1.5, 2.0)
    if dtype == "uint8":
        lo, hi = 1, 3
    out = [Sample("scalars", (_one(rng, dtype, (4, 6)),), {"min": lo, "max": hi}),
           Sample("min-only", (_one(rng, dtype, (4, 6), "transposed"),), {"min": lo}),
           Sample("max-only", (_one(rng, dtype, (4, 6), "strided"),), {"max": hi}),
           Sample("tensor-bounds", (_one(rng, dtype, (4, 6)),),
                  {"min": Arr(np.full((6,), lo, dtype=np.float64 if dtype in FLOATS else dtype), dtype),
                   "max": Arr(np.full((4, 1), hi, dtype=np.float64 if dtype in FLOATS else dtype), dtype)})]
    if dtype in FLOATS:
        out.append(Sample("extremes", (Arr(specials(dtype), dtype),), {"min": lo, "max": hi}))
    return out
