"""View computations: new shape/strides/offset over the same storage, validated here once for
every backend.  Nothing here touches memory except reshape of a non-viewable layout (a copy)."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from ember_core.autograd.grad_mode import MODE
from ember_core.errors import IndexOutOfRangeError, ShapeError
from ember_core.tensor import Tensor, contiguous_strides, span

RAW: dict[str, Callable[..., Tensor]] = {}  # the undecorated views, which the registry installs


def view_op(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """A view records its derivative (ember_core/ops/views.toml) when x requires grad; otherwise
    it is the plain layout computation."""
    name = fn.__name__
    RAW[name] = fn
    recorded: list[Callable[..., Tensor]] = []

    def view(x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if x._requires_grad and MODE.enabled:
            if not recorded:
                from ember_core.ops import ENTRIES

                recorded.append(ENTRIES[f"views.{name}"])
            return recorded[0](x, *args, **kwargs)
        return fn(x, *args, **kwargs)

    view.__name__ = view.__qualname__ = name
    view.__doc__ = fn.__doc__
    view.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    return view


def normalize_axis(axis: int, ndim: int, what: str = "axis", out_of_range: type[Exception] = ShapeError) -> int:
    """``axis`` as a non-negative index.  A 0-d tensor accepts axis 0 or -1, as PyTorch does (the
    Array API leaves it to the library): the ops treat it as one element along that axis."""
    if isinstance(axis, bool) or not hasattr(axis, "__index__"):
        raise TypeError(f"{what} must be an int, got {type(axis).__name__}")
    axis = axis.__index__()  # numpy's integers too
    n = max(ndim, 1)
    if not -n <= axis < n:
        raise out_of_range(f"{what} {axis} is out of range for a {ndim}-d tensor (valid: {-n}..{n - 1})")
    return axis % n


def normalize_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """None -> all axes; int or sequence -> sorted unique non-negative axes.  A 0-d tensor has no
    axes to act on: axis 0 or -1 is accepted and gives (), so a reduction of it is its value."""
    if axis is None:
        return tuple(range(ndim))
    if hasattr(axis, "__index__"):
        axes = (axis,)
    elif isinstance(axis, Sequence):
        axes = tuple(axis)
    else:
        raise TypeError(f"axis must be an int, a tuple of ints or None, got {type(axis).__name__}")
    out = tuple(sorted({normalize_axis(a, ndim) for a in axes}))
    if len(out) != len(axes):
        raise ShapeError(f"repeated axis in {axis!r}")
    return out if ndim else ()


def along_axis(x: Tensor, axis: int) -> tuple[Tensor, int]:
    """x and ``axis`` normalized, for an op that runs along one axis.  A 0-d x (axis 0 or -1) is
    given as its one-element 1-d view, so the op runs along a length-1 axis; the caller hands its
    result back with x's shape (0-d)."""
    axis = normalize_axis(axis, x.ndim)
    return (x.reshape((1,)) if x.ndim == 0 else x), axis


MAX_ELEMENTS = 2**63 - 1  # int64, the type of every size, stride and index the ABI and kernels use


def _ints(values: Any, what: str) -> tuple[int, ...]:
    try:
        return tuple(int(n.__index__()) for n in values)
    except (TypeError, AttributeError):
        raise TypeError(f"{what} is a sequence of ints, got {values!r}") from None


def check_extent(shape: tuple[int, ...]) -> None:
    """A shape whose element count (its non-zero dims multiplied: also the largest stride of its
    contiguous layout) is beyond int64 cannot be described to a kernel: refused here, before a
    native call would overflow."""
    if math.prod(max(n, 1) for n in shape) > MAX_ELEMENTS:
        raise ShapeError(f"shape {shape} is too large: its dims multiply past 2**63 - 1, the most elements an "
                         f"int64 index (every kernel's) can count")


def check_writable(t: Tensor, what: str = "the tensor written") -> None:
    """Writes go through a layout whose elements each own their memory.  A stride of 0 along a dim
    longer than 1 (a broadcast view) makes several elements one memory location: a write there
    would be decided by whichever store lands last (a race on a parallel device), so it is refused,
    as numpy's read-only broadcast views and PyTorch refuse it."""
    if not t._contig and any(s == 0 and n > 1 for n, s in zip(t._shape, t._strides)):
        raise ShapeError(f"{what} (shape {t._shape}, strides {t._strides}) is a broadcast view whose elements share "
                         f"memory, so it cannot be written; write into the tensor it was broadcast from, or into "
                         f"a copy (t.clone())")


def as_shape(shape: Any) -> tuple[int, ...]:
    out = _ints((shape,) if isinstance(shape, int) else shape, "a shape")
    if any(n < 0 for n in out):
        raise ShapeError(f"negative dimension in shape {out}")
    check_extent(out)
    return out


def broadcast_shapes(*shapes: Any) -> tuple[int, ...]:
    """The Array API's broadcast_shapes (an int stands for a 1-d shape, as in numpy)."""
    out = _broadcast_shapes(*(as_shape(s) for s in shapes))
    check_extent(out)
    return out


def _broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """broadcast_shapes of shapes already valid (those of tensors): the ops' inner form."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, n in enumerate(shape, ndim - len(shape)):
            if n != out[i]:
                if out[i] == 1:
                    out[i] = n
                elif n != 1:
                    raise ShapeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast: "
                                     f"dimension {i - ndim} is {out[i]} in one and {n} in another")
    return tuple(out)


def _broadcast_strides(old_shape: tuple[int, ...], old_strides: tuple[int, ...],
                       shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides that read a layout as ``shape``: 0 along new and size-1 dims."""
    if len(shape) < len(old_shape):
        raise ShapeError(f"cannot broadcast shape {old_shape} to fewer dimensions {shape}")
    lead = len(shape) - len(old_shape)
    strides = [0] * lead
    for i, (n, s) in enumerate(zip(old_shape, old_strides)):
        target = shape[lead + i]
        if n == target:
            strides.append(s)
        elif n == 1:
            strides.append(0)
        else:
            raise ShapeError(f"cannot broadcast shape {old_shape} to {shape}: dimension {i} is {n}, not 1 or {target}")
    return tuple(strides)


_cached_broadcast_strides = lru_cache(maxsize=4096)(_broadcast_strides)


@view_op
def broadcast_to(x: Tensor, /, shape: Any) -> Tensor:
    shape = as_shape(shape)
    if shape == x._shape:
        return x
    return x._view(shape, _broadcast_strides(x._shape, x._strides, shape), x._offset)


def expand_to(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Internal broadcast_to for a shape the caller computed with broadcast_shapes (so already
    valid): outside autograd, with the strides cached per layout.  The ops' hot paths use it."""
    if x._shape == shape:
        return x
    return x._view(shape, _cached_broadcast_strides(x._shape, x._strides, shape), x._offset)


@view_op
def permute_dims(x: Tensor, /, axes: Any) -> Tensor:
    given = tuple(axes)
    axes = tuple(normalize_axis(a, x.ndim) for a in given)
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"permute_dims of a {x.ndim}-d tensor needs a permutation of its axes "
                         f"{tuple(range(x.ndim))}, got {given}")
    return x._view(tuple(x._shape[a] for a in axes), tuple(x._strides[a] for a in axes), x._offset)


def swapaxes(x: Tensor, a: int, b: int) -> Tensor:
    axes = list(range(x.ndim))
    a, b = normalize_axis(a, x.ndim), normalize_axis(b, x.ndim)
    if axes:  # a 0-d x swaps its axis 0 with itself
        axes[a], axes[b] = axes[b], axes[a]
    return permute_dims(x, axes)


def _infer_shape(shape: tuple[int, ...], numel: int, old: tuple[int, ...]) -> tuple[int, ...]:
    unknown = [i for i, n in enumerate(shape) if n == -1]
    if len(unknown) > 1 or any(n < -1 for n in shape):
        raise ShapeError(f"invalid shape {shape}: at most one -1, no other negatives")
    if unknown:
        known = math.prod(n for n in shape if n != -1)
        if known == 0 or numel % known:
            raise ShapeError(f"cannot reshape {old} ({numel} elements) into {shape}")
        shape = tuple(numel // known if n == -1 else n for n in shape)
    if math.prod(shape) != numel:
        raise ShapeError(f"cannot reshape {old} ({numel} elements) into {shape} ({math.prod(shape)} elements)")
    check_extent(shape)  # (a size-0 shape may hold any other dims)
    return shape


@lru_cache(maxsize=4096)
def _contiguous_layout(old_shape: tuple[int, ...], asked: tuple[Any, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    shape = _infer_shape(tuple(int(n) for n in asked), math.prod(old_shape), old_shape)
    return shape, contiguous_strides(shape)


@view_op
def reshape(x: Tensor, shape: Any, *, copy: bool | None = None) -> Tensor:
    if x._contig and copy is None and shape.__class__ is tuple:  # the common call: a cached layout
        new_shape, strides = _contiguous_layout(x._shape, shape)
        return x._view(new_shape, strides, x._offset)
    shape = _infer_shape(tuple(int(n) for n in ((shape,) if isinstance(shape, int) else shape)), x._numel, x._shape)
    if copy is True:
        return reshape(x.contiguous() if not x._contig else _copy(x), shape)
    if x._contig:
        return x._view(shape, contiguous_strides(shape), x._offset)
    strides = _split_view_strides(x, shape)
    if strides is not None:
        return x._view(shape, strides, x._offset)
    if copy is False:
        raise ShapeError(f"reshape of this {x._shape} layout to {shape} needs a copy, and copy=False forbids one")
    return reshape(x.contiguous(), shape)


def _copy(x: Tensor) -> Tensor:
    from ember_core.ops import call

    return call("copy", x)


def _split_view_strides(x: Tensor, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides for a view when each run of new dims maps onto a contiguous run of old dims."""
    old = [(n, s) for n, s in zip(x._shape, x._strides) if n != 1]
    new = [n for n in shape if n != 1]
    strides_for_new: list[int] = []
    i = j = 0
    while i < len(old) and j < len(new):
        # grow groups on both sides until their element counts match
        oi, nj = i, j
        osize, nsize = old[i][0], new[j]
        while osize != nsize:
            if osize < nsize:
                i += 1
                if i >= len(old):
                    return None
                osize *= old[i][0]
            else:
                j += 1
                if j >= len(new):
                    return None
                nsize *= new[j]
        for k in range(oi, i):  # the old group must be one contiguous block
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        stride = old[i][1]
        group = []
        for k in range(j, nj - 1, -1):
            group.append(stride)
            stride *= new[k]
        strides_for_new.extend(reversed(group))
        i += 1
        j += 1
    if i != len(old) or j != len(new):
        return None
    it = iter(strides_for_new)
    return tuple(0 if n == 1 else next(it) for n in shape)


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    start, end = normalize_axis(start_dim, x.ndim), normalize_axis(end_dim, x.ndim)
    if x.ndim == 0:  # PyTorch's rule: a 0-d tensor flattens to one element
        return reshape(x, (1,))
    if start > end:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    shape = (*x._shape[:start], math.prod(x._shape[start : end + 1]), *x._shape[end + 1 :])
    return reshape(x, shape)


@view_op
def squeeze(x: Tensor, /, axis: Any) -> Tensor:
    """Drops the size-1 axes named by ``axis``; None (an extension of the standard, which requires
    an axis) drops every size-1 axis."""
    axes = tuple(i for i, n in enumerate(x._shape) if n == 1) if axis is None else normalize_axes(axis, x.ndim)
    for a in axes:
        if x._shape[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of shape {x._shape}: its size is {x._shape[a]}, not 1")
    keep = [i for i in range(x.ndim) if i not in axes]
    return x._view(tuple(x._shape[i] for i in keep), tuple(x._strides[i] for i in keep), x._offset)


@view_op
def expand_dims(x: Tensor, /, *, axis: int = 0) -> Tensor:
    """An axis outside [-N-1, N] raises IndexError, as the Array API asks."""
    axis = normalize_axis(axis, x.ndim + 1, out_of_range=IndexOutOfRangeError)
    shape = (*x._shape[:axis], 1, *x._shape[axis:])
    strides = (*x._strides[:axis], 0, *x._strides[axis:])
    return x._view(shape, strides, x._offset)


def moveaxis(x: Tensor, source: Any, destination: Any, /) -> Tensor:
    src = [normalize_axis(a, x.ndim) for a in ((source,) if isinstance(source, int) else source)]
    dst = [normalize_axis(a, x.ndim) for a in ((destination,) if isinstance(destination, int) else destination)]
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"moveaxis: source {source} and destination {destination} must be unique and equally long")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_dims(x, order[: x.ndim])  # a 0-d x moves its axis 0 onto itself: no axes


@view_op
def flip_view(x: Tensor, axes: tuple[int, ...]) -> Tensor:
    strides, offset = list(x._strides), x._offset
    for a in axes:
        if x._shape[a] > 0:
            offset += (x._shape[a] - 1) * strides[a]
        strides[a] = -strides[a]
    return x._view(x._shape, tuple(strides), offset)


@view_op
def as_strided(x: Tensor, shape: Any, strides: Any, offset: int) -> Tensor:
    """Any layout over x's storage (strides in elements, ``offset`` from the storage's start, not
    from x's): the windows of convolution and pooling, autograd's restride.  Checked whole, since
    a kernel trusts a view's layout: ints, sizes >= 0, and every element it reaches inside the
    storage."""
    shape, strides = as_shape(shape), _ints(strides, "strides")
    offset = _ints((offset,), "offset")[0]
    elements = x._storage.nbytes // x.itemsize
    if len(strides) != len(shape):
        raise ShapeError(f"as_strided: {len(strides)} strides for the {len(shape)} dims of shape {shape}")
    lo, hi = span(shape, strides, offset)
    # (an empty view reaches nothing: its offset may lie past an empty storage, as x[..., ::-1] of an
    # empty x starts at its last column)
    if not 0 <= offset <= MAX_ELEMENTS or any(abs(s) > MAX_ELEMENTS for s in strides) or (
            math.prod(shape) and (lo < 0 or hi >= elements)):
        raise ShapeError(f"as_strided: shape {shape}, strides {strides} and offset {offset} reach elements "
                         f"{lo}..{hi}, outside the storage's 0..{elements - 1}")
    return x._view(shape, strides, offset)


def coalesce(shape: tuple[int, ...], *stride_sets: tuple[int, ...]) -> tuple[list[int], list[list[int]]]:
    """For backends: the fewest dims that walk the same elements of every operand.  Size-1 dims
    are dropped and dim i merges into dim i+1 wherever every operand steps over dim i+1 exactly
    once per step of dim i.  Returns (shape, one stride list per operand)."""
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in stride_sets]
    for i, n in enumerate(shape):
        if n == 1:
            continue
        if out_shape and all(st[-1] == s[i] * n for st, s in zip(out_strides, stride_sets)):
            out_shape[-1] *= n
            for st, s in zip(out_strides, stride_sets):
                st[-1] = s[i]
            continue
        out_shape.append(n)
        for st, s in zip(out_strides, stride_sets):
            st.append(s[i])
    return out_shape, out_strides
