"""Composite ops written in ember ops, so that every backend that runs the primitives runs these.
A function here is named after its op and takes the op's parameters."""

from __future__ import annotations

import math
from typing import Any

from ember_core import dtypes as dt
from ember_core.errors import DeviceError, DTypeError, ShapeError


def _ops() -> Any:
    from ember_core.ops import namespace

    return namespace


def _require_floating(name: str, x: Any) -> None:
    if x.dtype.kind not in "fc":
        raise DTypeError(f"{name} needs a floating dtype, got {x.dtype.name}; convert with .astype(ember_core.float32)")


def _count(x: Any, axis: Any) -> int:
    from ember_core.views import normalize_axes

    return math.prod(x.shape[a] for a in normalize_axes(axis, x.ndim))


_HALVES = (dt.float16, dt.bfloat16)


def _widened(x: Any) -> Any:
    """x as the statistics compute it: float16 and bfloat16 in float32, as their sums accumulate
    (and as numpy's mean and PyTorch's statistics do), so that a sum of values near float16's
    largest, var's squares or vecdot's products do not overflow before the result is rounded once
    (_rounded)."""
    return _ops().astype(x, dt.float32) if x.dtype in _HALVES else x


def _rounded(out: Any, dtype: Any) -> Any:
    return _ops().astype(out, dtype) if dtype in _HALVES else out


def _mean(x: Any, axis: Any, keepdims: bool) -> Any:
    n = _count(x, axis)
    return _ops().sum(x, axis=axis, keepdims=keepdims) / (n if n else float("nan"))


def _variance(x: Any, axis: Any, correction: float, keepdims: bool) -> Any:
    ops = _ops()
    centered = x - _mean(x, axis, keepdims=True)
    squares = ops.real(centered * ops.conj(centered)) if x.dtype.kind == "c" else centered * centered
    dof = _count(x, axis) - correction
    return ops.sum(squares, axis=axis, keepdims=keepdims) / (dof if dof > 0 else float("nan"))


def mean(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    _require_floating("mean", x)
    return _rounded(_mean(_widened(x), axis, keepdims), x.dtype)


def var(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> Any:
    _require_floating("var", x)
    return _rounded(_variance(_widened(x), axis, correction, keepdims), x.dtype)


def std(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> Any:
    _require_floating("std", x)
    ops = _ops()
    v = _variance(_widened(x), axis, correction, keepdims)
    # sqrt's derivative at a zero variance is inf, times the zero derivative of the variance: NaN.
    # As in PyTorch, the gradient there is 0: sqrt never sees the zeros (nor differentiates them)
    flat = ops.equal(v, 0.0)
    return _rounded(ops.where(flat, 0.0, ops.sqrt(ops.where(flat, 1.0, v))), x.dtype)


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


def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    """The contracted axis counts from the end of both operands and has one size in both: the
    Array API broadcasts the other axes only.  Two 0-d operands take axis 0 or -1 (PyTorch's rule)."""
    from ember_core.autograd.formulas import conj
    from ember_core.views import normalize_axis

    x1, x2 = _tensor_arg("vecdot", x1), _tensor_arg("vecdot", x2)
    ndim = max(x1.ndim, x2.ndim)
    from_end = normalize_axis(axis, ndim) - ndim
    if ndim and -from_end > min(x1.ndim, x2.ndim):
        raise ShapeError(f"vecdot: axis {axis}, counted from the end, must be an axis of both x1 {x1.shape} and "
                         f"x2 {x2.shape}")
    if ndim and x1.shape[from_end] != x2.shape[from_end]:
        raise ShapeError(f"vecdot: the contracted axis {axis} has size {x1.shape[from_end]} in x1 and "
                         f"{x2.shape[from_end]} in x2; it must have one size in both (it is not broadcast)")
    result = dt.result_type(x1, x2)
    if result in _HALVES:  # converted to the result dtype first (int32's minimum is -inf in float16)
        x1, x2 = (_widened(_ops().astype(x, result)) for x in (x1, x2))
    return _rounded(_ops().sum(conj(x1) * x2, axis=from_end, dtype=dt.result_type(x1, x2)), result)


def _contracted(x: Any, axes: Any) -> tuple[Any, list[int]]:
    """x and its contracted axes, normalized (a 0-d x contracts its one element along axis 0 or -1)."""
    from ember_core.views import along_axis

    pairs = [along_axis(x, a) for a in axes]
    return (pairs[0][0] if pairs else x), [a for _, a in pairs]


def tensordot(x1: Any, x2: Any, /, *, axes: Any = 2) -> Any:
    if isinstance(axes, int):
        if axes < 0 or axes > min(x1.ndim, x2.ndim):
            raise ShapeError(f"tensordot: axes={axes} must be in [0, {min(x1.ndim, x2.ndim)}]")
        a1, a2 = list(range(x1.ndim - axes, x1.ndim)), list(range(axes))
    else:
        x1, a1 = _contracted(x1, axes[0])
        x2, a2 = _contracted(x2, axes[1])
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

    arrays = _tensor_list("concat", arrays)
    if not arrays:
        raise ShapeError("concat needs at least one tensor")
    if axis is None:
        arrays, axis = [a.reshape(-1) for a in arrays], 0
    first = arrays[0]
    if first.ndim == 0:
        raise ShapeError("concat joins tensors along an axis, and a 0-d tensor has none; use stack, or axis=None")
    axis = normalize_axis(axis, first.ndim)
    for a in arrays[1:]:
        if a.ndim != first.ndim or any(n != m for i, (n, m) in enumerate(zip(a.shape, first.shape)) if i != axis):
            raise ShapeError(f"concat along axis {axis}: shapes {first.shape} and {a.shape} differ elsewhere")
        if a.device is not first.device:
            raise DeviceError(f"concat: tensors on {first.device} and {a.device}; move them to one device first")
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

    arrays = _tensor_list("stack", arrays)
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


# ---- manipulation and set functions ----
# Array API 2023.12: tril, triu, repeat, roll, tile, unstack, meshgrid and the four unique_*
# functions, written in ember ops and views only.  meshgrid takes ``*arrays``, which a TOML
# signature cannot express, so it is not declared in the registry and is exported by
# ember_core/__init__.py directly.

from typing import NamedTuple  # noqa: E402  (this section is appended to the module)


class UniqueAllResult(NamedTuple):
    values: Any
    indices: Any
    inverse_indices: Any
    counts: Any


class UniqueCountsResult(NamedTuple):
    values: Any
    counts: Any


class UniqueInverseResult(NamedTuple):
    values: Any
    inverse_indices: Any


def _tensor_arg(name: str, x: Any) -> Any:
    from ember_core.tensor import Tensor

    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: x must be an ember tensor, got {type(x).__name__}; wrap data with "
                        f"ember_core.asarray(...)")
    return x


def _tensor_list(name: str, arrays: Any) -> list[Any]:
    """The arrays of concat and stack: a list or tuple of tensors (a str is a sequence too, of str)."""
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(f"{name}: arrays must be a list or tuple of ember tensors, got {type(arrays).__name__}")
    return [_tensor_arg(name, a) for a in arrays]


def _int_arg(name: str, what: str, value: Any) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name}: {what} must be an int, got {type(value).__name__}")
    return int(value.__index__())


def _fresh(out: Any, x: Any) -> Any:
    """out, copied when it still aliases x's memory (these functions always return new tensors)."""
    return _ops().copy(out) if out._storage is x._storage else out


def _triangle(name: str, x: Any, k: Any, lower: bool) -> Any:
    from ember_core.creation import arange, zeros

    x = _tensor_arg(name, x)
    k = _int_arg(name, "k", k)
    if x.ndim < 2:
        raise ShapeError(f"{name} needs a tensor of at least 2 dimensions (..., M, N), got shape {x.shape}")
    m, n = x.shape[-2:]
    k = min(max(k, -m), n)  # same mask, and a k of any size stays a small int64 scalar
    offset = arange(n, device=x.device).reshape((1, n)) - arange(m, device=x.device).reshape((m, 1))
    keep = offset <= k if lower else offset >= k
    return _ops().where(keep, x, zeros((), dtype=x.dtype, device=x.device))


def tril(x: Any, /, *, k: int = 0) -> Any:
    return _triangle("tril", x, k, lower=True)


def triu(x: Any, /, *, k: int = 0) -> Any:
    return _triangle("triu", x, k, lower=False)


def repeat(x: Any, repeats: Any, /, *, axis: Any = None) -> Any:
    from ember_core.creation import arange, asarray
    from ember_core.tensor import Tensor
    from ember_core.views import broadcast_to, expand_dims, normalize_axis

    ops = _ops()
    x = _tensor_arg("repeat", x)
    source = x
    if axis is None:
        x, axis = x.reshape(-1), 0
    elif x.ndim == 0:
        raise ShapeError("repeat along an axis of a 0-d tensor would make it 1-d; pass axis=None (repeats the "
                         "flattened x) or reshape x to (1,)")
    else:
        axis = normalize_axis(axis, x.ndim)
    n = x.shape[axis]
    if isinstance(repeats, (list, tuple)):
        repeats = asarray(repeats, dtype=dt.int64, device=x.device)
    if isinstance(repeats, Tensor):
        if repeats.dtype.kind not in "iu":
            raise DTypeError(f"repeat: repeats must be an integer tensor, got {repeats.dtype.name}")
        if repeats.ndim > 1 or (repeats.ndim == 1 and repeats.shape[0] not in (1, n)):
            raise ShapeError(f"repeat: repeats of shape {repeats.shape} do not fit axis {axis} of size {n} "
                             f"(expected shape ({n},), (1,) or ())")
        if repeats.device is not x.device:
            from ember_core.errors import DeviceError

            raise DeviceError(f"repeat: repeats are on {repeats.device}, x on {x.device}")
        if repeats.ndim == 1 and repeats.shape[0] == n and n != 1:
            counts = repeats.astype(dt.int64, copy=False)
            if n and ops.min(counts).item() < 0:
                raise ShapeError("repeat: repeats must be non-negative")
            ends = ops.cumulative_sum(counts)
            total = int(ends[-1].item()) if n else 0
            index = ops.searchsorted(ends, arange(total, device=x.device), side="right")
            return _fresh(ops.take(x, index, axis=axis), source)
        repeats = repeats.reshape(-1)[0].item()
    r = _int_arg("repeat", "repeats", repeats)
    if r < 0:
        raise ShapeError(f"repeat: repeats must be non-negative, got {r}")
    spread = broadcast_to(expand_dims(x, axis=axis + 1), (*x.shape[: axis + 1], r, *x.shape[axis + 1:]))
    out = spread.reshape((*x.shape[:axis], n * r, *x.shape[axis + 1:]))
    return _fresh(out, source)


def roll(x: Any, /, shift: Any, *, axis: Any = None) -> Any:
    from ember_core.views import along_axis

    ops = _ops()
    x = _tensor_arg("roll", x)
    shift_is_tuple = isinstance(shift, (tuple, list))
    shifts = tuple(_int_arg("roll", "shift", s) for s in (shift if shift_is_tuple else (shift,)))
    if axis is None:
        if shift_is_tuple:
            raise ShapeError(f"roll: a tuple shift {shift} needs a tuple axis of the same length, got axis=None")
        return roll(x.reshape(-1), shifts[0], axis=0).reshape(x.shape)
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    if shift_is_tuple and len(shifts) != len(axes):
        raise ShapeError(f"roll: shift {shift} and axis {axis} must have the same length")
    if not shift_is_tuple:
        shifts = shifts * len(axes)
    total: dict[int, int] = {}
    out = x
    for a, s in zip(axes, shifts):  # numpy's rule: shifts along a repeated axis add up
        out, a = along_axis(x, _int_arg("roll", "axis", a))  # a 0-d x rolls its one element
        total[a] = total.get(a, 0) + s
    for a, s in total.items():
        n = out.shape[a]
        s = s % n if n else 0
        if s:
            lead = (slice(None),) * a
            out = ops.concat([out[(*lead, slice(n - s, None))], out[(*lead, slice(0, n - s))]], axis=a)
    return _fresh(out.reshape(x.shape), x)


def tile(x: Any, repetitions: Any, /) -> Any:
    from ember_core.views import broadcast_to

    x = _tensor_arg("tile", x)
    reps = tuple(repetitions) if isinstance(repetitions, (tuple, list)) else (repetitions,)
    reps = tuple(_int_arg("tile", "repetitions", r) for r in reps)
    if any(r < 0 for r in reps):
        raise ShapeError(f"tile: repetitions must be non-negative, got {reps}")
    d = max(len(reps), x.ndim)
    reps = (1,) * (d - len(reps)) + reps
    shape = (1,) * (d - x.ndim) + x.shape
    interleaved = x.reshape(tuple(v for s in shape for v in (1, s)))
    big = broadcast_to(interleaved, tuple(v for r, s in zip(reps, shape) for v in (r, s)))
    return _fresh(big.reshape(tuple(r * s for r, s in zip(reps, shape))), x)


def unstack(x: Any, /, *, axis: int = 0) -> tuple[Any, ...]:
    from ember_core.views import along_axis

    x = _tensor_arg("unstack", x)
    view, axis = along_axis(x, _int_arg("unstack", "axis", axis))  # a 0-d x: a 1-tuple of itself
    lead = (slice(None),) * axis
    return tuple(view[(*lead, i)] for i in range(view.shape[axis]))


def meshgrid(*arrays: Any, indexing: str = "xy") -> list[Any]:
    """meshgrid(*arrays, indexing='xy') -> list of tensors

    Coordinate grids from 1-d tensors of one dtype and device: with ``indexing='xy'`` (Cartesian)
    the first two output dimensions are swapped relative to ``'ij'`` (matrix indexing).  Each
    result is a new contiguous tensor (not a broadcast view)."""
    from ember_core.errors import DeviceError
    from ember_core.views import broadcast_to

    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    arrays = tuple(_tensor_arg("meshgrid", a) for a in arrays)
    if not arrays:
        return []
    for a in arrays:
        if a.ndim != 1:
            raise ShapeError(f"meshgrid needs 1-d tensors, got shapes {[b.shape for b in arrays]}")
        if a.dtype is not arrays[0].dtype:
            raise DTypeError(f"meshgrid needs tensors of one dtype, got {sorted({b.dtype.name for b in arrays})}")
        if a.device is not arrays[0].device:
            raise DeviceError(f"meshgrid: tensors on {arrays[0].device} and {a.device}")
    dims = list(range(len(arrays)))
    if indexing == "xy" and len(arrays) > 1:
        dims[0], dims[1] = 1, 0
    shape = [0] * len(arrays)
    for a, d in zip(arrays, dims):
        shape[d] = a.shape[0]
    out = []
    for a, d in zip(arrays, dims):
        view = a.reshape(tuple(a.shape[0] if i == d else 1 for i in range(len(arrays))))
        out.append(_ops().copy(broadcast_to(view, tuple(shape))))
    return out


def _unique(name: str, x: Any) -> tuple[Any, ...]:
    """(values, first indices, inverse indices, counts) of the flattened x, values in sorted order.

    Equal values are found by sorting (stably, so each run starts at its first occurrence) and
    comparing neighbours with ``!=``; NaN != NaN, so every NaN is a distinct value with count 1,
    placed after the numbers as sort places it.  -0.0 and 0.0 compare equal and are one value (the
    one that occurs first).  Complex values sort lexicographically (real part, then imaginary)."""
    from ember_core.creation import empty, full, ones

    ops = _ops()
    x = _tensor_arg(name, x)
    flat = x.reshape(-1)
    n, device = flat.shape[0], x.device
    if n == 0:
        index = empty((0,), dtype=dt.int64, device=device)
        return empty((0,), dtype=x.dtype, device=device), index, empty(x.shape, dtype=dt.int64, device=device), index
    if x.dtype.kind == "c":  # two stable passes: by imaginary part, then by real part
        by_imag = ops.argsort(ops.imag(flat), stable=True)
        order = ops.take(by_imag, ops.argsort(ops.take(ops.real(flat), by_imag), stable=True))
    else:
        order = ops.argsort(flat, stable=True)
    ordered = ops.take(flat, order)
    new = ops.concat([ones((1,), dtype=dt.bool_, device=device), ordered[1:] != ordered[:-1]])
    (starts,) = ops.nonzero(new)
    values = ops.take(ordered, starts)
    group = ops.cumulative_sum(new.astype(dt.int64)) - 1
    inverse = empty((n,), dtype=dt.int64, device=device)
    ops.index_put(inverse, order, group)
    ends = ops.concat([starts[1:], full((1,), n, dtype=dt.int64, device=device)])
    return values, ops.take(order, starts), inverse.reshape(x.shape), ends - starts


def unique_all(x: Any, /) -> UniqueAllResult:
    return UniqueAllResult(*_unique("unique_all", x))


def unique_counts(x: Any, /) -> UniqueCountsResult:
    values, _, _, counts = _unique("unique_counts", x)
    return UniqueCountsResult(values, counts)


def unique_inverse(x: Any, /) -> UniqueInverseResult:
    values, _, inverse, _ = _unique("unique_inverse", x)
    return UniqueInverseResult(values, inverse)


def unique_values(x: Any, /) -> Any:
    return _unique("unique_values", x)[0]
