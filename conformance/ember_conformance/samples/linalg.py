"""matmul (2-d, batched, broadcast batches, vector cases, empty dimensions, every layout),
vecdot, tensordot and conv2d."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_conformance.samples.base import Arr, Sample, rng_for, typical
from ember_core.errors import ShapeError

_LOW, _HIGH = -3.0, 3.0


def _pair(rng: np.random.Generator, dtype: str, name: str, s1: tuple[int, ...], s2: tuple[int, ...],
          l1: str = "contiguous", l2: str = "contiguous", **kw: Any) -> Sample:
    return Sample(name, (Arr(typical(rng, s1, dtype, _LOW, _HIGH), dtype, l1),
                         Arr(typical(rng, s2, dtype, _LOW, _HIGH), dtype, l2)), kw)


def matmul(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    cases = [("2-d", (3, 4), (4, 5)), ("batched", (2, 3, 4), (2, 4, 5)), ("broadcast-batch", (2, 1, 3, 4), (5, 4, 2)),
             ("vector-matrix", (4,), (4, 5)), ("matrix-vector", (3, 4), (4,)), ("vector-vector", (4,), (4,)),
             ("k-zero", (3, 0), (0, 5)), ("m-zero", (0, 4), (4, 5)), ("larger", (33, 65), (65, 17)),
             ("row-times-column", (1, 64), (64, 1))]
    out = [_pair(rng, dtype, name, s1, s2) for name, s1, s2 in cases]
    out += [_pair(rng, dtype, "transposed-a", (5, 4), (4, 6), "transposed"),
            _pair(rng, dtype, "transposed-b", (5, 4), (4, 6), "contiguous", "transposed"),
            _pair(rng, dtype, "strided-flipped", (3, 4), (4, 5), "strided", "flipped"),
            _pair(rng, dtype, "offset-batched", (2, 3, 4), (2, 4, 2), "offset", "strided")]
    if level == 1:
        for sample in (_pair(rng, dtype, "error-inner-dims", (3, 4), (5, 2)),
                       _pair(rng, dtype, "error-0-d", (), (3,))):
            sample.error = ShapeError
            out.append(sample)
    return out


def vecdot(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    out = [_pair(rng, dtype, "last-axis", (3, 4), (3, 4)), _pair(rng, dtype, "broadcast", (2, 3, 4), (4,)),
           _pair(rng, dtype, "axis-0", (4, 3), (4, 3), axis=0), _pair(rng, dtype, "strided", (3, 4), (3, 4), "strided")]
    if level == 1:
        bad = _pair(rng, dtype, "error-mismatch", (3, 4), (3, 5))
        bad.error = ShapeError
        out.append(bad)
    return out


def tensordot(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    return [_pair(rng, dtype, "axes-2", (3, 4, 5), (4, 5, 2)), _pair(rng, dtype, "axes-1", (3, 4), (4, 5), axes=1),
            _pair(rng, dtype, "axes-lists", (4, 3), (2, 4), axes=([0], [1])),
            _pair(rng, dtype, "outer", (2,), (3,), axes=0)]


def conv2d(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)

    def s(name: str, x: tuple[int, ...], w: tuple[int, ...], bias: bool = True, **kw: Any) -> Sample:
        args: tuple[Any, ...] = (Arr(typical(rng, x, dtype, _LOW, _HIGH), dtype),
                                 Arr(typical(rng, w, dtype, _LOW, _HIGH), dtype))
        if bias:
            args += (Arr(typical(rng, (w[0],), dtype, _LOW, _HIGH), dtype),)
        return Sample(name, args, kw)

    out = [s("basic", (2, 3, 7, 7), (4, 3, 3, 3)), s("no-bias", (1, 2, 5, 6), (3, 2, 2, 3), bias=False),
           s("stride-padding-dilation", (2, 3, 9, 8), (4, 3, 3, 3), stride=2, padding=1, dilation=2),
           s("groups", (2, 4, 6, 6), (6, 2, 3, 3), groups=2), s("pointwise", (2, 5, 4, 4), (3, 5, 1, 1)),
           s("depthwise", (2, 3, 7, 18), (6, 1, 3, 3), groups=3, stride=(1, 2), padding=1)]
    if level == 1:
        bad = s("error-channels", (1, 3, 5, 5), (2, 4, 3, 3))
        bad.error = (ShapeError, ValueError)  # type: ignore[assignment]
        out.append(bad)
    return out
