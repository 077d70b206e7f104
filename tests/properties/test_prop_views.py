"""The view ops (views.toml) and chains of them, on every target, against numpy: shapes, values, and
memory.  Each input is drawn in a layout (strided, reversed, offset, broadcast) and mirrored by a
numpy array over a copy of its storage with the same strides, so that numpy decides view or copy
from the same layout ember sees.  After the values, distinct values are written through the result
(``r[...] = w``) on both sides and the two storages compared: a write through a view must show in
the base exactly where numpy's does, and a copy must leave it alone.

Parameters are drawn valid mostly and invalid sometimes (a wrong element count, a repeated or
out-of-range axis, a size-1 axis that is not); where numpy refuses, ember must refuse with an error
of the same category (``raises_like``).  Documented departures from numpy: a bool scalar in a key
makes a view in ember (numpy copies); on a 0-d tensor ember takes axis 0 or -1 as PyTorch does
(so no axis is drawn for 0-d squeezes and flips); ``em.flip`` returns a copy (the view is
``views.flip_view``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from campaign import KIND, assert_matches, cases, elsewhere, examples, host, ops_of, raises_like, shapes, tensors
from hypothesis import given
from hypothesis import strategies as st

import ember_core as em
from ember_core.errors import ShapeError

VIEWS = ops_of("view")
COVERED = VIEWS
CHAINED = [op for op in VIEWS if op != "views.as_strided"]  # as_strided addresses the storage, not its input
ALL_DTYPES = [d.name for d in em.dtypes.ALL_DTYPES]


@dataclass(frozen=True)
class Step:
    """One view op with its drawn parameters, as ember and numpy call it."""

    name: str
    ember: Callable[[Any], Any]
    numpy: Callable[[np.ndarray], np.ndarray]
    bool_key: bool = False  # a basic_view key with a bool scalar: a view in ember, a copy in numpy


# ---- parameters --------------------------------------------------------------------------------

def _rarely(data: Any, label: str) -> bool:
    """True about once in eight draws: the cue to draw an invalid parameter."""
    return data.draw(st.integers(0, 7), label=label) == 0


def _axis(data: Any, ndim: int, label: str) -> int:
    """An axis of ``ndim`` dims, either sign."""
    return data.draw(st.integers(-ndim, ndim - 1), label=label)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _reshape(data: Any, shape: tuple[int, ...], label: str) -> Step:
    n = math.prod(shape)
    if _rarely(data, f"{label} invalid"):
        new = list(data.draw(shapes(), label=f"{label} shape"))
    elif n == 0:
        new = list(data.draw(shapes(min_dims=1), label=f"{label} shape"))
        new[data.draw(st.integers(0, len(new) - 1), label=f"{label} zero at")] = 0
    else:
        new, rest = [], n
        while rest > 1 and len(new) < 4:
            new.append(data.draw(st.sampled_from(_divisors(rest)), label=f"{label} dim {len(new)}"))
            rest //= new[-1]
        new += [rest] * (rest > 1) + [1] * data.draw(st.integers(0, 2), label=f"{label} ones")
        new = data.draw(st.permutations(new), label=f"{label} order")
    if new and data.draw(st.booleans(), label=f"{label} -1"):
        new[data.draw(st.integers(0, len(new) - 1), label=f"{label} -1 at")] = -1
    copy = data.draw(st.sampled_from([None, None, True, False]), label=f"{label} copy")
    new = tuple(new)
    return Step(f"reshape({new}, copy={copy})", lambda t: em.reshape(t, new, copy=copy),
                lambda a: np.reshape(a, new, copy=copy))


def _permute_dims(data: Any, shape: tuple[int, ...], label: str) -> Step:
    ndim = len(shape)
    axes = [a - ndim * data.draw(st.booleans(), label=f"{label} sign {a}")
            for a in data.draw(st.permutations(range(ndim)), label=f"{label} axes")]
    if _rarely(data, f"{label} invalid"):
        axes.append(data.draw(st.integers(-ndim - 1, ndim), label=f"{label} extra"))  # repeated or out of range
    axes = tuple(axes)
    return Step(f"permute_dims({axes})", lambda t: em.permute_dims(t, axes), lambda a: np.permute_dims(a, axes))


def _broadcast_to(data: Any, shape: tuple[int, ...], label: str) -> Step:
    new = [data.draw(st.integers(0, 3), label=f"{label} dim {i}") if n == 1 else n for i, n in enumerate(shape)]
    new = list(data.draw(shapes(max_dims=2, max_side=3), label=f"{label} lead")) + new
    if new and _rarely(data, f"{label} invalid"):
        new[data.draw(st.integers(0, len(new) - 1), label=f"{label} wrong at")] += 2
    new = tuple(new)
    return Step(f"broadcast_to({new})", lambda t: em.broadcast_to(t, new), lambda a: np.broadcast_to(a, new))


def _squeeze(data: Any, shape: tuple[int, ...], label: str) -> Step:
    ndim = len(shape)
    ones = [i for i, n in enumerate(shape) if n == 1]
    if not ndim or data.draw(st.booleans(), label=f"{label} all"):
        axis: Any = None
    elif ones and not _rarely(data, f"{label} invalid"):
        picked = data.draw(st.lists(st.sampled_from(ones), min_size=1, unique=True), label=f"{label} axes")
        axis = tuple(a - ndim * data.draw(st.booleans(), label=f"{label} sign {a}") for a in picked)
        axis = axis[0] if len(axis) == 1 and data.draw(st.booleans(), label=f"{label} int") else axis
    else:
        axis = _axis(data, ndim, f"{label} axis")
    return Step(f"squeeze({axis})", lambda t: em.squeeze(t, axis), lambda a: np.squeeze(a, axis))


def _expand_dims(data: Any, shape: tuple[int, ...], label: str) -> Step:
    ndim = len(shape)
    axis = data.draw(st.integers(-ndim - 2, ndim + 1) if _rarely(data, f"{label} invalid") else
                     st.integers(-ndim - 1, ndim), label=f"{label} axis")
    return Step(f"expand_dims({axis})", lambda t: em.expand_dims(t, axis=axis), lambda a: np.expand_dims(a, axis))


def _flip_view(data: Any, shape: tuple[int, ...], label: str) -> Step:
    ndim = len(shape)
    axes = tuple(a - ndim * data.draw(st.booleans(), label=f"{label} sign {a}")
                 for a in data.draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim) if ndim else
                                    st.just([]), label=f"{label} axes"))
    reverse = tuple(slice(None, None, -1 if i in {a % ndim for a in axes} else 1) for i in range(ndim))
    return Step(f"flip_view({axes})", lambda t: em.ops.call("views.flip_view", t, axes), lambda a: a[(*reverse, ...)])


@st.composite
def basic_keys(draw: Any, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """x[key] keys of ints (either sign, sometimes out of range), slices (any bounds and step),
    None, at most one Ellipsis, and a bool scalar only among slices, None and ... (ember's views)."""
    ndim, key, dim = len(shape), [], 0
    ellipsis = draw(st.booleans())
    for _ in range(draw(st.integers(0, ndim + 1))):
        n = shape[dim] if dim < ndim else 1
        kind = draw(st.sampled_from(["int", "slice", "slice", "none"] + ["..."] * ellipsis))
        if kind == "int":
            key.append(draw(st.integers(-n - 1, n)))
        elif kind == "slice":
            bound = st.none() | st.integers(-n - 2, n + 2)
            key.append(slice(draw(bound), draw(bound), draw(st.none() | st.sampled_from([1, 2, 3, -1, -2]))))
        elif kind == "none":
            key.append(None)
        else:
            key.append(Ellipsis)
            ellipsis = False
        dim += kind in ("int", "slice")
    if not any(isinstance(k, int) for k in key) and draw(st.integers(0, 5)) == 0:
        key.insert(draw(st.integers(0, len(key))), draw(st.booleans()))
    return tuple(key)


def _basic_view(data: Any, shape: tuple[int, ...], label: str) -> Step:
    key = data.draw(basic_keys(shape), label=f"{label} key")
    return Step(f"[{key}]", lambda t: t[key], lambda a: a[_as_view(key)], any(isinstance(k, bool) for k in key))


def _as_view(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """numpy's key for the same view: one that selects a single element gives a numpy scalar (a
    copy) unless an Ellipsis is in it (a 0-d view, as ember's)."""
    return key if Ellipsis in key else (*key, Ellipsis)


STEPS = {"views.reshape": _reshape, "views.permute_dims": _permute_dims, "views.broadcast_to": _broadcast_to,
         "views.squeeze": _squeeze, "views.expand_dims": _expand_dims, "views.flip_view": _flip_view,
         "views.basic_view": _basic_view}


# ---- mirrors and writes ----------------------------------------------------------------------------

def _root(t: Any) -> Any:
    """The tensor that owns t's storage (contiguous from its start, as ``tensors`` makes them)."""
    return t if t._base is None else t._base


def mirror(t: Any) -> tuple[np.ndarray, np.ndarray]:
    """A copy of t's storage, and a numpy view of it with t's shape, strides and offset."""
    storage = np.array(host(_root(t))).reshape(-1)
    itemsize = storage.itemsize
    view = np.lib.stride_tricks.as_strided(storage[t._offset:], t.shape, tuple(s * itemsize for s in t._strides))
    return storage, view


def overlapping(t: Any) -> bool:
    """Whether two elements of t share a storage element (a write through it would be ambiguous)."""
    index = np.indices(t.shape).reshape(t.ndim, -1) if t.ndim else np.zeros((0, 1), dtype=int)
    return np.unique(np.asarray(t._strides, dtype=int) @ index).size < t.size


def written(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Distinct-looking values of every dtype to write through a result."""
    count = np.arange(math.prod(shape)).reshape(shape)
    kind = KIND[dtype]
    if kind == "b":
        return count % 3 == 0
    values = count % 97 + (0 if kind == "u" else -40)
    return values + 0.5j * values if kind == "c" else values


def check_writes_through(result: Any, base: Any, expected: np.ndarray, storage: np.ndarray, dtype: str,
                         write_numpy: Callable[[np.ndarray], None]) -> None:
    """Write through ``result`` (ember) and ``expected`` (numpy, by ``write_numpy``): the storages
    of ``base`` and of the mirror ``storage`` must then hold the same values."""
    values = written(result.shape, dtype)
    result[...] = em.asarray(values, dtype=dtype, device=result.device)
    write_numpy(values)
    assert_matches(_root(base).reshape(-1), storage, dtype=dtype, what="the storage after a write through the result")


# ---- properties --------------------------------------------------------------------------------------

def source(data: Any, target: Any, op: str, drawn_shapes: Any, **options: Any) -> tuple[str, tuple[int, ...], Any,
                                                                                      np.ndarray]:
    """(dtype, shape, x, its values): the tensor a property views, of any dtype, in a drawn layout."""
    dtype = data.draw(st.sampled_from(ALL_DTYPES), label="dtype")
    shape = data.draw(drawn_shapes, label="shape")
    x, values = data.draw(tensors(shape, dtype, target.device, **target.limits(op, dtype), **options), label="x")
    return dtype, shape, x, values


@pytest.mark.parametrize(("target", "op"), cases(CHAINED))
@examples(4)
@given(data=st.data())
def test_view_chain(target, op, data):
    """``op``, then up to two more view ops, against numpy: values, and writes through the result."""
    if elsewhere(data, target, op):
        return
    dtype, _, x, _ = source(data, target, op, shapes())
    storage, np_x = mirror(x)
    chain = [op, *data.draw(st.lists(st.sampled_from(CHAINED), max_size=2), label="then")]
    result, expected, bool_key = x, np_x, False
    with target.active():
        for i, name in enumerate(chain):
            step = STEPS[name](data, tuple(result.shape), f"{i}")
            outcome = raises_like(lambda: step.ember(result), lambda: step.numpy(expected))  # noqa: B023
            if outcome is None:
                return
            (result, expected), bool_key = outcome, bool_key or step.bool_key
        assert_matches(result, expected, dtype=dtype)
        if overlapping(result) or overlapping(x) or bool_key:
            return  # (ember's bool-key views: check_writes_through's numpy side would need the key)
        check_writes_through(result, x, expected, storage, dtype, lambda v: _write(storage, expected, v))


def _write(storage: np.ndarray, view: np.ndarray, values: np.ndarray) -> None:
    """Write through numpy's ``view`` when it is one of ``storage``: read-only ones (numpy's
    broadcast_to) too, through a writeable alias, since ember's views are all writeable."""
    if np.shares_memory(view, storage):
        offset = (view.__array_interface__["data"][0] - storage.__array_interface__["data"][0]) // storage.itemsize
        np.lib.stride_tricks.as_strided(storage[offset:], view.shape, view.strides)[...] = values


@pytest.mark.parametrize(("target", "op"), cases(["views.basic_view"]))
@examples(2)
@given(data=st.data())
def test_bool_key_views(target, op, data):
    """A bool scalar among slices, None and ... is a view in ember (numpy copies): writes through
    it land where ``x[key] = v`` puts them."""
    if elsewhere(data, target, op):
        return
    dtype, shape, x, _ = source(data, target, op, shapes(max_dims=3), allow_broadcast=False)
    key = data.draw(basic_keys(shape).filter(lambda k: any(isinstance(e, bool) for e in k)), label="key")
    storage, np_x = mirror(x)
    with target.active():
        outcome = raises_like(lambda: x[key], lambda: np_x[key])
        if outcome is None:
            return
        assert_matches(*outcome, dtype=dtype)
        check_writes_through(outcome[0], x, outcome[1], storage, dtype, lambda v: np_x.__setitem__(key, v))


@pytest.mark.parametrize(("target", "op"), cases(["views.flip_view"]))
@examples(1)
@given(data=st.data())
def test_flip(target, op, data):
    """em.flip: numpy's values, in a tensor of its own (writes to it leave x alone)."""
    if elsewhere(data, target, op):
        return
    dtype, shape, x, values = source(data, target, op, shapes(min_dims=1), allow_broadcast=False)
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1) |
                     st.lists(st.integers(0, len(shape) - 1), unique=True).map(tuple), label="axis")
    with target.active():
        got = em.flip(x, axis=axis)
        assert_matches(got, np.flip(values, axis), dtype=dtype)
        got[...] = em.asarray(written(got.shape, dtype), dtype=dtype, device=got.device)
    assert_matches(x, values, dtype=dtype, what="x after a write into its flip")


@pytest.mark.parametrize(("target", "op"), cases(["views.as_strided"]))
@examples(3)
@given(data=st.data())
def test_as_strided(target, op, data):
    """views.as_strided (offsets and strides in elements of the storage) against numpy's as_strided
    over the same storage; any layout reaching outside the storage is refused (a ShapeError).  An
    empty view reaches nothing, so its offset need only be >= 0 (x[..., ::-1] of an empty x has one
    past its empty storage)."""
    if elsewhere(data, target, op):
        return
    dtype, _, x, _ = source(data, target, op, shapes(min_dims=1), allow_broadcast=False)
    storage, _ = mirror(x)
    shape = data.draw(shapes(max_dims=3), label="view shape")
    strides = tuple(data.draw(st.lists(st.integers(-3, 3), min_size=len(shape), max_size=len(shape)), label="strides"))
    offset = data.draw(st.integers(-1, storage.size + 1), label="offset")
    reached = [offset + sum(min(0, s * (n - 1)) for s, n in zip(strides, shape)),
               offset + sum(max(0, s * (n - 1)) for s, n in zip(strides, shape))]
    with target.active():
        if (math.prod(shape) and (reached[0] < 0 or reached[1] >= storage.size)) or offset < 0:
            with pytest.raises(ShapeError):
                em.ops.call("views.as_strided", x, shape, strides, offset)
            return
        got = em.ops.call("views.as_strided", x, shape, strides, offset)
        expected = np.lib.stride_tricks.as_strided(storage[min(offset, storage.size):], shape,
                                                   tuple(s * storage.itemsize for s in strides))
        assert_matches(got, expected, dtype=dtype)
        if not overlapping(got):
            check_writes_through(got, x, expected, storage, dtype, lambda v: expected.__setitem__(Ellipsis, v))
