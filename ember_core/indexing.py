"""``x[key]`` and ``x[key] = value``: integers, slices (any step), None, Ellipsis and boolean
scalars become views here; integer-tensor and boolean-mask indexing become gather/scatter, with
numpy's semantics."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember_core import dtypes as dt
from ember_core.autograd.grad_mode import no_grad
from ember_core.errors import DeviceError, IndexOutOfRangeError, ShapeError
from ember_core.tensor import Tensor
from ember_core.views import broadcast_shapes, broadcast_to, permute_dims, view_op


def _dims_indexed(k: Any) -> int:
    """How many of the tensor's dims a key entry indexes: a boolean mask covers its own ndim (0
    for a 0-d mask, which adds an axis instead); None, ... and bool scalars none."""
    if k is None or k is Ellipsis or isinstance(k, bool):
        return 0
    if isinstance(k, Tensor) and k.dtype is dt.bool_:
        return k.ndim
    return 1


def _expand_key(key: Any, ndim: int) -> list[Any]:
    key = list(key) if isinstance(key, tuple) else [key]
    ellipses = [i for i, k in enumerate(key) if k is Ellipsis]  # by identity: == on a tensor is elementwise
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    for k in key:
        if not (k is None or k is Ellipsis or isinstance(k, (slice, bool, Tensor)) or hasattr(k, "__index__")):
            raise IndexError(f"{k!r} is not a valid index: use ints, slices, None, ..., bools, or integer/boolean "
                             f"tensors")
    consumed = sum(_dims_indexed(k) for k in key)
    if consumed > ndim:
        raise IndexOutOfRangeError(f"too many indices: {consumed} for a {ndim}-d tensor")
    fill = [slice(None)] * (ndim - consumed)
    if ellipses:
        key[ellipses[0] : ellipses[0] + 1] = fill
    else:
        key += fill
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
    """Whether x[key] is a view: no tensors, lists or arrays, and a bool scalar only alone among
    slices, None and ...  (numpy indexes a bool like a 0-d mask, an advanced index: several of
    them, or one with integers, broadcast together, which a view cannot express in general)."""
    bools = ints = 0
    for k in key if isinstance(key, tuple) else (key,):
        if isinstance(k, bool):
            bools += 1
        elif hasattr(k, "__index__") and not isinstance(k, Tensor):
            ints += 1
        elif not (k is None or k is Ellipsis or isinstance(k, slice)):
            return False
    return not bools or (bools == 1 and not ints)


def getitem(x: Tensor, key: Any) -> Tensor:
    if key.__class__ is int or _is_basic(key):
        return basic_view(x, key)
    plan = _AdvancedIndex(x, key)
    gathered = _op("take")(plan.source(), plan.flat_index, axis=0)
    return plan.to_result_order(gathered.reshape(plan.broadcast_shape + plan.rest_shape))


def setitem(x: Tensor, key: Any, value: Any) -> None:
    from ember_core.creation import asarray, check_same_device, copy_into

    if isinstance(value, Tensor):
        check_same_device(x, value)  # (host data, lists and arrays, is converted instead)
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
    values = plan.to_index_order(values).reshape((plan.flat_index.size, *plan.rest_shape))
    target = plan.source()
    _op("index_put")(target, plan.flat_index, values, axis=0)
    if target._storage is not x._storage:  # the view had no flat layout: index_put worked on a copy
        moved = permute_dims(plan.view, plan.order)
        copy_into(moved, target.reshape(moved.shape))


class _AdvancedIndex:
    """numpy's advanced indexing, reduced to take/index_put along one flattened axis.

    Integer tensors (and Python ints, once any tensor is present) are broadcast together; a
    boolean mask becomes the integer tensors of its non-zero positions, and a 0-d one (or a bool
    scalar) a new axis of length 1 indexed by [0] when True, by [] when False.  The advanced dims
    of the basic view are moved to the front and flattened, so one gather or scatter serves every
    case.  As in numpy, the broadcast dims land where the advanced indices were when those were
    adjacent, and in front otherwise.
    """

    def __init__(self, x: Tensor, key: Any) -> None:
        items = tuple(_as_key_entry(k, x) for k in (key if isinstance(key, tuple) else (key,)))
        basic: list[Any] = []  # one entry per dim of the basic view
        indices, adv_dims = [], []  # the index tensors and the dims of the basic view they index
        dim = 0  # the dim of x the next entry indexes
        for k in _expand_key(items, x.ndim):
            for entry, index in _entries(k, x, dim):
                if index is not None:
                    adv_dims.append(len(basic))
                    indices.append(index)
                basic.append(entry)
            dim += _dims_indexed(k)
        view = basic_view(x, tuple(basic))
        self.view = view
        sizes = [view.shape[a] for a in adv_dims]
        try:
            self.broadcast_shape = broadcast_shapes(*(i.shape for i in indices))
        except ShapeError as exc:  # a bad key, as numpy and PyTorch have it: an IndexError
            raise IndexOutOfRangeError(f"the index arrays (bool scalars and masks among them) must broadcast "
                                       f"together: {exc}") from None
        flat = None
        for idx, n in zip(indices, sizes):  # numpy checks integer scalars even where the result is empty
            if idx.ndim:
                idx = _normalized(broadcast_to(idx, self.broadcast_shape), n)
            else:
                idx = broadcast_to(_normalized(idx, n), self.broadcast_shape)
            flat = idx if flat is None else flat * n + idx
        self.flat_index = flat.reshape(-1)
        self.flat_size = math.prod(sizes)  # of the advanced dims, flattened into one
        rest = [a for a in range(view.ndim) if a not in adv_dims]
        self.rest_shape = tuple(view.shape[a] for a in rest)
        self.order = adv_dims + rest
        # adjacent in the key as written: an ellipsis between them separates them even where it
        # stands for no dims (numpy)
        written = [i for i, k in enumerate(items) if not (k is None or k is Ellipsis or isinstance(k, slice))]
        adjacent = written == list(range(written[0], written[0] + len(written)))
        self.insert_at = adv_dims[0] if adjacent else 0
        nb = len(self.broadcast_shape)
        lead = self.rest_shape[: self.insert_at]
        self.result_shape = lead + self.broadcast_shape + self.rest_shape[self.insert_at :]
        self._to_result = (*range(nb, nb + len(lead)), *range(nb), *range(nb + len(lead), nb + len(self.rest_shape)))

    def source(self) -> Tensor:
        """The view with its advanced dims first and flattened (a copy when no view exists)."""
        moved = permute_dims(self.view, self.order)
        return moved.reshape((self.flat_size, *self.rest_shape))

    def to_result_order(self, t: Tensor) -> Tensor:
        return permute_dims(t, self._to_result)

    def to_index_order(self, t: Tensor) -> Tensor:
        inverse = tuple(self._to_result.index(i) for i in range(len(self._to_result)))
        return permute_dims(t, inverse)


def _as_key_entry(k: Any, x: Tensor) -> Any:
    """Lists and numpy arrays as tensors on x's device; an empty list indexes as int64 (numpy's
    rule: a sequence with no elements is an integer index, whatever dtype its array would get)."""
    from ember_core.creation import asarray

    if not isinstance(k, (list, np.ndarray)):
        return k
    t = asarray(k, device=x.device)
    return t.astype(dt.int64) if isinstance(k, list) and not t.size else t


def _entries(k: Any, x: Tensor, dim: int) -> list[tuple[Any, Tensor | None]]:
    """What an (expanded) key entry at dim ``dim`` of x stands for: (entry of the basic view,
    index tensor along that view dim or None) per view dim."""
    from ember_core.creation import arange

    if isinstance(k, bool) or (isinstance(k, Tensor) and k.dtype is dt.bool_ and k.ndim == 0):
        return [(None, arange(int(bool(k)), dtype=dt.int64, device=x.device))]
    if isinstance(k, Tensor) and k.dtype is dt.bool_:  # a mask over d dims: d integer index tensors
        covered = x.shape[dim : dim + k.ndim]
        if k.shape != covered:
            dims = f"dim {dim}" if k.ndim == 1 else f"dims {dim}..{dim + k.ndim - 1}"
            raise IndexOutOfRangeError(
                f"a boolean mask of shape {k.shape} does not match {dims} of the indexed tensor (shape {x.shape}): "
                f"those have shape {covered}, and a mask's shape must equal that of the dims it covers"
            )
        return [(slice(None), i) for i in _op("nonzero")(k)]
    if isinstance(k, Tensor) or (k is not None and not isinstance(k, slice)):
        return [(slice(None), _as_index_tensor(k, x))]
    return [(k, None)]


def _as_index_tensor(k: Any, x: Tensor) -> Tensor:
    from ember_core.creation import asarray

    if not isinstance(k, Tensor):
        return asarray(int(k.__index__()), dtype=dt.int64, device=x.device)
    if k.dtype.kind not in "iu":
        raise IndexError(f"index tensors must be integer or boolean, got {k.dtype.name}")
    if k.device is not x.device:
        raise DeviceError(f"the index is on {k.device}, the tensor on {x.device}; move one with .to_device()")
    return k.astype(dt.int64, copy=False)


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
