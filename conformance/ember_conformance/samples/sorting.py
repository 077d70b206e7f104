"""Sorting (stable, descending, NaN last ascending and first descending), searchsorted, unique."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_conformance.samples.base import Arr, Sample, rng_for, specials, typical
from ember_conformance.tolerances import FLOATS
from ember_core.errors import ShapeError


def _with_ties(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    x = typical(rng, shape, dtype, -3, 3)
    return np.round(x * 2) / 2 if dtype in FLOATS else x  # half steps: plenty of equal keys


def sort(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    x = _with_ties(rng, (3, 4, 5), dtype)

    def s(name: str, values: np.ndarray = x, layout: str = "contiguous", **kw: Any) -> Sample:
        return Sample(name, (Arr(values, dtype, layout),), kw)

    out = [s("last-axis"), s("axis-0", axis=0), s("axis-1-descending", axis=1, descending=True),
           s("descending", descending=True), s("transposed", layout="transposed", axis=-1),
           s("strided-axis-0", layout="strided", axis=0), s("zero-size", x[:0]),
           s("long", _with_ties(rng, (1031,), dtype)), s("long-descending", _with_ties(rng, (1031,), dtype),
                                                        descending=True)]
    if dtype in FLOATS:
        ext = np.concatenate([specials(dtype), specials(dtype)[::-1]])
        out += [s("extremes", ext), s("extremes-descending", ext, descending=True)]
    if level == 1:
        out.append(Sample("error-axis-out-of-range", (Arr(x, dtype),), {"axis": 3}, error=ShapeError))
    return out


def searchsorted(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    x1 = np.sort(_with_ties(rng, (12,), dtype))
    x2 = _with_ties(rng, (3, 4), dtype)
    shuffled = rng.permutation(x1)
    sorter = np.argsort(shuffled, kind="stable").astype(np.int64)
    out = [Sample("left", (Arr(x1, dtype), Arr(x2, dtype))),
           Sample("right", (Arr(x1, dtype), Arr(x2, dtype, "transposed")), {"side": "right"}),
           Sample("sorter", (Arr(shuffled, dtype), Arr(x2, dtype)), {"sorter": Arr(sorter, "int64")}),
           Sample("empty-x1", (Arr(x1[:0], dtype), Arr(x2, dtype))),
           Sample("0-d-x2", (Arr(x1, dtype), Arr(x2[0, 0], dtype)))]
    if level == 1:
        out.append(Sample("error-2-d-x1", (Arr(x2, dtype), Arr(x2, dtype)), error=ShapeError))
    return out


def unique(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    x = _with_ties(rng, (4, 5), dtype)
    out = [Sample("2-d", (Arr(x, dtype),)), Sample("strided", (Arr(x, dtype, "strided"),)),
           Sample("zero-size", (Arr(x[:0], dtype),)), Sample("0-d", (Arr(x[0, 0], dtype),))]
    if dtype in FLOATS:
        out.append(Sample("extremes", (Arr(np.concatenate([specials(dtype), specials(dtype)]), dtype),)))
    return out
