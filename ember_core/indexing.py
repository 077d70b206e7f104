"""``x[key]`` and ``x[key] = value``: integers, slices (any step), None, Ellipsis and boolean
scalars become views here; integer-tensor and boolean-mask indexing become gather/scatter."""

from __future__ import annotations

from typing import Any

from ember_core.errors import IndexOutOfRangeError, ShapeError
from ember_core.tensor import Tensor


def _expand_key(key: Any, ndim: int) -> list[Any]:
    key = list(key) if isinstance(key, tuple) else [key]
    ellipses = sum(k is Ellipsis for k in key)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    if consumed > ndim:
        raise IndexOutOfRangeError(f"too many indices: {consumed} for a {ndim}-d tensor")
    if ellipses:
        i = key.index(Ellipsis)
        key[i : i + 1] = [slice(None)] * (ndim - consumed)
    else:
        key += [slice(None)] * (ndim - consumed)
    return key


def basic_view(x: Tensor, key: Any) -> Tensor:
    shape, strides, offset = [], [], x._offset
    dim = 0
    for k in _expand_key(key, x.ndim):
        if k is None:
            shape.append(1)
            strides.append(0)
            continue
        n, s = x._shape[dim], x._strides[dim]
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            length = len(range(start, stop, step))
            if length:
                offset += start * s
            shape.append(length)
            strides.append(s * step)
        else:
            i = int(k.__index__())
            if not -n <= i < n:
                raise IndexOutOfRangeError(f"index {i} is out of range for dimension {dim} of size {n}")
            offset += (i % n) * s
        dim += 1
    return x._view(tuple(shape), tuple(strides), offset)


def _is_basic(key: Any) -> bool:
    items = key if isinstance(key, tuple) else (key,)
    return all(
        k is None or k is Ellipsis or isinstance(k, slice) or (hasattr(k, "__index__") and not isinstance(k, (Tensor, bool)))
        for k in items
    )


def getitem(x: Tensor, key: Any) -> Tensor:
    if _is_basic(key):
        return basic_view(x, key)
    raise ShapeError("integer-tensor and boolean-mask indexing arrive with the take/put primitives; "
                     "use integer, slice, None and Ellipsis indices for now")


def setitem(x: Tensor, key: Any, value: Any) -> None:
    from ember_core.creation import asarray, copy_into

    target = getitem(x, key)
    src = value if isinstance(value, Tensor) else asarray(value, dtype=x.dtype, device=x.device)
    copy_into(target, src)
