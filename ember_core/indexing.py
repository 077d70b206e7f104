"""``x[key]`` and ``x[key] = value``: integers, slices (any step), None, Ellipsis and boolean
scalars become views here; integer-tensor and boolean-mask indexing become gather/scatter."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_core import dtypes as dt
from ember_core.autograd.grad_mode import no_grad
from ember_core.errors import IndexOutOfRangeError
from ember_core.tensor import Tensor
from ember_core.views import broadcast_shapes, broadcast_to, permute_dims, view_op


def _expand_key(key: Any, ndim: int) -> list[Any]:
    key = list(key) if isinstance(key, tuple) else [key]
    ellipses = sum(k is Ellipsis for k in key)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    for k in key:
        if not (k is None or k is Ellipsis or isinstance(k, (slice, bool, Tensor)) or hasattr(k, "__index__")):
            raise IndexError(f"{k!r} is not a valid index: use ints, slices, None, ..., bools, or integer/boolean "
                             f"tensors")
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis and not isinstance(k, bool))
    if consumed > ndim:
        raise IndexOutOfRangeError(f"too many indices: {consumed} for a {ndim}-d tensor")
    if ellipses:
        i = key.index(Ellipsis)
        key[i : i + 1] = [slice(None)] * (ndim - consumed)
    else:
        key += [slice(None)] * (ndim - consumed)
    return key


@view_op
def basic_view(x: Tensor, key: Any) -> Tensor:
    if key.__class__ is int and x._shape:  # x[i], the commonest index: no walk over an expanded key
        n = x._shape[0]
        if not -n <= key < n:
            raise IndexOutOfRangeError(f"index {key} is out of range for dimension 0 of size {n}")
        return x._view(x._shape[1:], x._strides[1:], x._offset + key % n * x._strides[0])
    shape, strides, offset = [], [], x._offset
    dim = 0
    for k in _expand_key(key, x.ndim):
        if k is None or isinstance(k, bool):  # a bool scalar adds an axis of length 1 (True) or 0 (False)
            shape.append(0 if k is False else 1)
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
        k is None or k is Ellipsis or isinstance(k, (slice, bool))
        or (hasattr(k, "__index__") and not isinstance(k, Tensor))
        for k in items
    )


def getitem(x: Tensor, key: Any) -> Tensor:
    if key.__class__ is int or _is_basic(key):
        return basic_view(x, key)
    plan = _AdvancedIndex(x, key)
    gathered = _op("take")(plan.source(), plan.flat_index, axis=0)
    return plan.to_result_order(gathered.reshape(plan.broadcast_shape + plan.rest_shape))


def setitem(x: Tensor, key: Any, value: Any) -> None:
    from ember_core.creation import asarray, copy_into

    src = value if isinstance(value, Tensor) else asarray(value, dtype=x.dtype, device=x.device)
    if _is_basic(key):
        copy_into(basic_view(x, key), src)
        return
    from ember_core.autograd import storage_grad

    if storage_grad.needs_rebase(x, src):  # write without recording, then rebase x's history
        storage_grad.check_leaf(x)
        with no_grad():
            setitem(x, key, src)
            base = x if x._base is None else x._base
            n = storage_grad.extent(storage_grad.layout(x), storage_grad.layout(base))
            region = getitem(storage_grad.positions(storage_grad.layout(x), n, x.device), key)
        storage_grad.rebase(x, src, region)
        return
    plan = _AdvancedIndex(x, key)
    values = broadcast_to(src.astype(x.dtype, copy=False), plan.result_shape)
    values = plan.to_index_order(values).reshape((-1, *plan.rest_shape))
    target = plan.source()
    _op("index_put")(target, plan.flat_index, values, axis=0)
    if target._storage is not x._storage:  # the view had no flat layout: index_put worked on a copy
        moved = permute_dims(plan.view, plan.order)
        copy_into(moved, target.reshape(moved.shape))


class _AdvancedIndex:
    """numpy's advanced indexing, reduced to take/index_put along one flattened axis.

    Integer tensors (and Python ints, once any tensor is present) are broadcast together; boolean
    masks become the integer tensors of their non-zero positions.  The advanced dims of the basic
    view are moved to the front and flattened, so one gather or scatter serves every case.  As in
    numpy, the broadcast dims land where the advanced indices were when those were adjacent, and
    in front otherwise.
    """

    def __init__(self, x: Tensor, key: Any) -> None:
        from ember_core.creation import asarray

        items = list(key) if isinstance(key, tuple) else [key]
        items = [asarray(k, device=x.device) if isinstance(k, (list, np.ndarray)) else k for k in items]
        expanded: list[Any] = []
        for k in items:  # a boolean mask over d dims stands for d integer index tensors
            if isinstance(k, Tensor) and k.dtype is dt.bool_:
                if k.ndim == 0:
                    raise IndexError("0-d boolean indices are not supported; use x[None] or an if")
                expanded.extend(_op("nonzero")(k))
            else:
                expanded.append(k)
        basic, advanced, adv_dims = [], [], []
        for k in _expand_key(tuple(expanded), x.ndim):  # every entry keeps one dim of the view
            if isinstance(k, Tensor) or (isinstance(k, int) and not isinstance(k, bool)):
                adv_dims.append(len(basic))
                advanced.append(k)
                k = slice(None)
            basic.append(k)
        view = basic_view(x, tuple(basic))
        self.view = view
        indices = [_as_index_tensor(k, x) for k in advanced]
        sizes = [view.shape[a] for a in adv_dims]
        self.broadcast_shape = broadcast_shapes(*(i.shape for i in indices))
        flat = None
        for idx, n in zip(indices, sizes):
            idx = _normalized(broadcast_to(idx, self.broadcast_shape), n)
            flat = idx if flat is None else flat * n + idx
        self.flat_index = flat.reshape(-1)
        rest = [a for a in range(view.ndim) if a not in adv_dims]
        self.rest_shape = tuple(view.shape[a] for a in rest)
        self.order = adv_dims + rest
        adjacent = adv_dims == list(range(adv_dims[0], adv_dims[0] + len(adv_dims)))
        self.insert_at = adv_dims[0] if adjacent else 0
        nb = len(self.broadcast_shape)
        lead = self.rest_shape[: self.insert_at]
        self.result_shape = lead + self.broadcast_shape + self.rest_shape[self.insert_at :]
        self._to_result = (*range(nb, nb + len(lead)), *range(nb), *range(nb + len(lead), nb + len(self.rest_shape)))

    def source(self) -> Tensor:
        """The view with its advanced dims first and flattened (a copy when no view exists)."""
        moved = permute_dims(self.view, self.order)
        return moved.reshape((-1, *self.rest_shape)) if moved.ndim else moved.reshape(1)

    def to_result_order(self, t: Tensor) -> Tensor:
        return permute_dims(t, self._to_result)

    def to_index_order(self, t: Tensor) -> Tensor:
        inverse = tuple(self._to_result.index(i) for i in range(len(self._to_result)))
        return permute_dims(t, inverse)


def _as_index_tensor(k: Any, x: Tensor) -> Tensor:
    from ember_core.creation import asarray

    t = k if isinstance(k, Tensor) else asarray(int(k), device=x.device)
    if t.dtype.kind not in "iu":
        raise IndexError(f"index tensors must be integer or boolean, got {t.dtype.name}")
    if t.device is not x.device:
        from ember_core.errors import DeviceError

        raise DeviceError(f"the index is on {t.device}, the tensor on {x.device}; move one with .to_device()")
    return t.astype(dt.int64, copy=False)


def _normalized(idx: Tensor, n: int) -> Tensor:
    """idx with negatives wrapped, after checking every entry lies in [-n, n)."""
    if idx.size:
        low, high = idx.min().item(), idx.max().item()
        if low < -n or high >= n:
            bad = low if low < -n else high
            raise IndexOutOfRangeError(f"index {bad} is out of range for a dimension of size {n}")
        if low < 0:
            idx = _op("where")(idx < 0, idx + n, idx)
    return idx


def _op(name: str) -> Any:
    """A registry op (looked up late: the ops package imports this module's users)."""
    from ember_core.ops import ENTRIES

    return ENTRIES[name]
