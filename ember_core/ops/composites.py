"""Composite ops written in ember ops, so that every backend that runs the primitives runs these.
A function here is named after its op and takes the op's parameters."""

from __future__ import annotations

import math
from typing import Any

from ember_core import dtypes as dt
from ember_core.errors import DTypeError, ShapeError


def _ops() -> Any:
    from ember_core.ops import namespace

    return namespace


def _require_floating(name: str, x: Any) -> None:
    if x.dtype.kind not in "fc":
        raise DTypeError(f"{name} needs a floating dtype, got {x.dtype.name}; convert with .astype(ember_core.float32)")


def _count(x: Any, axis: Any) -> int:
    from ember_core.views import normalize_axes

    return math.prod(x.shape[a] for a in normalize_axes(axis, x.ndim))


def mean(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    _require_floating("mean", x)
    n = _count(x, axis)
    return _ops().sum(x, axis=axis, keepdims=keepdims) / (n if n else float("nan"))


def var(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> Any:
    _require_floating("var", x)
    ops = _ops()
    centered = x - mean(x, axis=axis, keepdims=True)
    squares = ops.real(centered * ops.conj(centered)) if x.dtype.kind == "c" else centered * centered
    dof = _count(x, axis) - correction
    return ops.sum(squares, axis=axis, keepdims=keepdims) / (dof if dof > 0 else float("nan"))


def std(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> Any:
    return _ops().sqrt(var(x, axis=axis, correction=correction, keepdims=keepdims))


def clip(x: Any, /, min: Any = None, max: Any = None) -> Any:
    ops = _ops()
    if x.dtype.kind not in "iuf":
        raise DTypeError(f"clip needs a real dtype, got {x.dtype.name}")
    out = x
    if min is not None:
        out = ops.maximum(out, min)
    if max is not None:
        out = ops.minimum(out, max)
    return ops.astype(out, x.dtype) if out.dtype is not x.dtype else (ops.copy(out) if out is x else out)


def tensordot(x1: Any, x2: Any, /, *, axes: Any = 2) -> Any:
    from ember_core.views import normalize_axis

    if isinstance(axes, int):
        if axes < 0 or axes > min(x1.ndim, x2.ndim):
            raise ShapeError(f"tensordot: axes={axes} must be in [0, {min(x1.ndim, x2.ndim)}]")
        a1, a2 = list(range(x1.ndim - axes, x1.ndim)), list(range(axes))
    else:
        a1 = [normalize_axis(a, x1.ndim) for a in axes[0]]
        a2 = [normalize_axis(a, x2.ndim) for a in axes[1]]
    if len(a1) != len(a2) or any(x1.shape[i] != x2.shape[j] for i, j in zip(a1, a2)):
        raise ShapeError(f"tensordot: contracted dims of {x1.shape} {a1} and {x2.shape} {a2} differ")
    free1 = [i for i in range(x1.ndim) if i not in a1]
    free2 = [i for i in range(x2.ndim) if i not in a2]
    k = math.prod(x1.shape[i] for i in a1)
    left = x1.permute_dims(free1 + a1).reshape((math.prod(x1.shape[i] for i in free1), k))
    right = x2.permute_dims(a2 + free2).reshape((k, math.prod(x2.shape[i] for i in free2)))
    out = left @ right
    return out.reshape(tuple(x1.shape[i] for i in free1) + tuple(x2.shape[i] for i in free2))


def concat(arrays: Any, /, *, axis: Any = 0) -> Any:
    from ember_core.creation import copy_into, empty
    from ember_core.views import normalize_axis

    arrays = list(arrays)
    if not arrays:
        raise ShapeError("concat needs at least one tensor")
    if axis is None:
        arrays, axis = [a.reshape(-1) for a in arrays], 0
    first = arrays[0]
    axis = normalize_axis(axis, first.ndim)
    for a in arrays[1:]:
        if a.ndim != first.ndim or any(n != m for i, (n, m) in enumerate(zip(a.shape, first.shape)) if i != axis):
            raise ShapeError(f"concat along axis {axis}: shapes {first.shape} and {a.shape} differ elsewhere")
        if a.device is not first.device:
            raise ShapeError(f"concat: tensors on {first.device} and {a.device}")
    dtype = dt.result_type(*arrays)
    shape = list(first.shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    out = empty(tuple(shape), dtype=dtype, device=first.device)
    start = 0
    for a in arrays:
        index = (slice(None),) * axis + (slice(start, start + a.shape[axis]),)
        copy_into(out[index], a)
        start += a.shape[axis]
    return out


def stack(arrays: Any, /, *, axis: int = 0) -> Any:
    from ember_core.views import expand_dims, normalize_axis

    arrays = list(arrays)
    if not arrays:
        raise ShapeError("stack needs at least one tensor")
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ShapeError(f"stack needs equal shapes, got {sorted({a.shape for a in arrays})}")
    axis = normalize_axis(axis, arrays[0].ndim + 1)
    return concat([expand_dims(a, axis=axis) for a in arrays], axis=axis)


def bernoulli(p: Any, /, shape: Any = None, *, device: Any = None, generator: Any = None) -> Any:
    ops = _ops()
    from ember_core.tensor import Tensor

    if isinstance(p, Tensor):
        shape = p.shape if shape is None else shape
        device = p.device if device is None else device
        dtype = p.dtype if p.dtype.kind == "f" else dt.default_float
    else:
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"bernoulli: p must be in [0, 1], got {p!r}")
        shape, dtype = (() if shape is None else shape), dt.default_float
    return ops.less(ops.random_uniform(shape, dtype=dtype, device=device, generator=generator), p)


def permutation(x: Any, /, *, device: Any = None, generator: Any = None) -> Any:
    ops = _ops()
    from ember_core.tensor import Tensor

    n = x.shape[0] if isinstance(x, Tensor) else int(x)
    device = x.device if isinstance(x, Tensor) and device is None else device
    keys = ops.random_integers((n,), 0, 2**62, device=device, generator=generator)
    order = ops.argsort(keys)
    return ops.take(x, order, axis=0) if isinstance(x, Tensor) else order
