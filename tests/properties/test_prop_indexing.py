"""``x[key]``, ``x[key] = value`` and the gradient of ``x[key]`` on every target, against numpy
exactly.  Keys mix integers (negative, sometimes out of range), slices (any bounds and step), None,
an Ellipsis, bool scalars, integer index arrays (lists or tensors; negative, repeated, broadcasting
against each other, adjacent or separated by slices, so that numpy moves their dims to the front)
and boolean masks (of the dims they cover; sometimes of a wrong shape, which numpy refuses with an
IndexError and so must ember).  Sources are drawn in every layout, broadcast views included.

Assignments: values broadcast to the indexed shape, or a Python scalar.  Where a key repeats an
element, one of the values written there must land, which one unspecified, as index_put documents
(and PyTorch; numpy's last write is one choice).

Gradients: sum(x[key] * w) differentiated for x, against numpy's scatter-add of w onto the positions
the key reads, also when x is a broadcast view of the leaf (each read position of the leaf then
collects every copy's share).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from campaign import (
    KIND,
    arrays,
    assert_matches,
    elements,
    elsewhere,
    examples,
    host,
    raises_like,
    shapes,
    target_params,
    tensors,
)
from hypothesis import given
from hypothesis import strategies as st

import ember_core as em
import ember_core.autograd as ag

COVERED = ["views.basic_view", "take", "index_put", "nonzero"]  # what x[key] and x[key] = v run on
ALL_DTYPES = [d.name for d in em.dtypes.ALL_DTYPES]
INDEX_DTYPES = ["int64", "int32", "uint8", "int8"]
FLOATS = ["float64", "float32", "float16"]


# ---- keys ----------------------------------------------------------------------------------------

@st.composite
def broadcastable(draw: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``shape``: some leading dims dropped, some set to 1."""
    lead = draw(st.integers(0, len(shape)))
    return tuple(1 if draw(st.integers(0, 3)) == 0 else n for n in shape[lead:])


KINDS = ["int", "slice", "slice", "none", "array", "array", "mask", "bool", "..."]
_WIDTH = {"int": 1, "slice": 1, "array": 1, "none": 0, "bool": 0, "...": 0}  # dims of x an entry indexes


@st.composite
def keys(draw: Any, shape: tuple[int, ...], device: str) -> tuple[Any, Any]:
    """(ember key, numpy key): see the module's docstring for what they hold.  The entries are
    drawn first, so that each knows the dim of x it indexes once the Ellipsis is expanded."""
    ndim = len(shape)
    kinds = draw(st.lists(st.sampled_from(KINDS), max_size=ndim + 1))
    kinds = [k for i, k in enumerate(kinds) if k != "..." or i == kinds.index("...")]  # one Ellipsis at most
    widths = [draw(st.integers(0, 2)) if k == "mask" else _WIDTH[k] for k in kinds]
    common = draw(shapes(max_dims=2, max_side=3), label="index arrays' shape")
    ours: list[Any] = []
    theirs: list[Any] = []
    dim = 0
    for i, (kind, width) in enumerate(zip(kinds, widths)):
        if kind == "...":
            dim = max(dim, ndim - sum(widths[i + 1:]))
        n = shape[dim] if dim < ndim else 1
        if kind == "int":
            entry = draw(st.integers(-n - 1, n))
        elif kind == "slice":
            bound = st.none() | st.integers(-n - 2, n + 2)
            entry = slice(draw(bound), draw(bound), draw(st.none() | st.sampled_from([1, 2, 3, -1, -2])))
        elif kind in ("none", "...", "bool"):
            entry = None if kind == "none" else Ellipsis if kind == "..." else draw(st.booleans())
        elif kind == "array":
            entry = _index_array(draw, n, common)
        else:
            entry = _mask(draw, list(shape[dim:dim + width]))
        if isinstance(entry, np.ndarray):  # an index tensor (or its list)
            as_list = draw(st.booleans()) and entry.ndim > 0
            ours.append(entry.tolist() if as_list else em.asarray(entry, device=device))
            theirs.append(entry.tolist() if as_list else entry)
        else:
            ours.append(entry), theirs.append(entry)
        dim += width
    if len(ours) == 1 and draw(st.booleans(), label="not a tuple"):
        return ours[0], theirs[0]
    return tuple(ours), tuple(theirs)


def _index_array(draw: Any, n: int, common: tuple[int, ...]) -> np.ndarray:
    """Integer indices into a dim of n, of a shape broadcasting to ``common``; sometimes out of range."""
    index_dtype = draw(st.sampled_from(INDEX_DTYPES))
    low, high = (0 if index_dtype == "uint8" else -n, n - 1) if n else (-1, 0)  # (no index fits 0)
    values = np.array(draw(arrays(draw(broadcastable(common)), index_dtype, extremes=False, low=low, high=high)))
    if draw(st.integers(0, 7)) == 0:  # out of range (numpy: IndexError)
        values = values + n * (1 if values.size and values.max() >= 0 else 2)
    return values


def _mask(draw: Any, covered: list[int]) -> np.ndarray:
    """A boolean mask of the dims it covers; sometimes of a wrong shape (numpy: IndexError), but never
    an empty one (numpy takes an empty mask of any shape as an empty index list; PyTorch refuses it)."""
    if covered and draw(st.integers(0, 7)) == 0 and math.prod(covered[:-1]):
        covered[-1] += 1
    return np.array(draw(arrays(tuple(covered), "bool")), dtype=bool)


# ---- properties ----------------------------------------------------------------------------------

def source(data: Any, target: Any, **options: Any) -> tuple[str, tuple[int, ...], Any, np.ndarray]:
    """(dtype, shape, x, its values): the tensor a property indexes, of any dtype, in a drawn layout."""
    dtype = data.draw(st.sampled_from(ALL_DTYPES), label="dtype")
    shape = data.draw(shapes(), label="shape")
    x, values = data.draw(tensors(shape, dtype, target.device, **options), label="x")
    return dtype, shape, x, values


@pytest.mark.parametrize("target", target_params())
@examples(8)
@given(data=st.data())
def test_getitem(target, data):
    if elsewhere(data, target, "getitem"):
        return
    dtype, shape, x, values = source(data, target)
    key, np_key = data.draw(keys(shape, target.device), label="key")
    with target.active():
        outcome = raises_like(lambda: x[key], lambda: values[np_key])
    if outcome is not None:
        assert_matches(*outcome, dtype=dtype)


@pytest.mark.parametrize("target", target_params())
@examples(8)
@given(data=st.data())
def test_setitem(target, data):
    """x[key] = value, value a tensor broadcast to the indexed shape or a Python scalar."""
    if elsewhere(data, target, "setitem"):
        return
    dtype, shape, x, values = source(data, target, allow_broadcast=False)
    key, np_key = data.draw(keys(shape, target.device), label="key")
    try:
        indexed = values[np_key].shape
    except IndexError:
        indexed = ()
    if data.draw(st.booleans(), label="scalar value"):
        scalar = data.draw(elements(dtype, finite=True, extremes=False), label="value")
        value, np_value = (bool(scalar) if KIND[dtype] == "b" else scalar), scalar
    else:
        value, np_value = data.draw(tensors(data.draw(broadcastable(indexed), label="value shape"), dtype,
                                            target.device), label="value")
    expected = values.copy()

    def assign() -> np.ndarray:
        values[np_key]  # a key numpy's getitem refuses (its setitem lets a wrong mask shape pass on empty x)
        expected[np_key] = np_value
        return expected

    with target.active():
        outcome = raises_like(lambda: x.__setitem__(key, value), assign)
    if outcome is not None:
        got = host(x)
        _one_of_the_repeated(got, expected, np.arange(values.size).reshape(shape)[np_key], np_value, dtype)
        assert_matches(x, expected, dtype=dtype, what="x after the assignment")


def _one_of_the_repeated(got: np.ndarray, expected: np.ndarray, written_at: np.ndarray, value: Any,
                         dtype: str) -> None:
    """Where the key repeats an element, index_put documents that one of the values written there
    lands, which one unspecified (numpy's last write is one choice): ``expected`` takes ember's
    there when it is one of them."""
    at = written_at.reshape(-1)
    written = np.broadcast_to(value, written_at.shape).reshape(-1)
    flat_got, flat_expected = got.reshape(-1), expected.reshape(-1)
    positions, counts = np.unique(at, return_counts=True)
    for position in positions[counts > 1]:
        if np.isin(flat_got[position], written[at == position]) or (
                KIND[dtype] in "fc" and np.isnan(flat_got[position]) and np.isnan(written[at == position]).any()):
            flat_expected[position] = flat_got[position]


@pytest.mark.parametrize("target", target_params())
@examples(4)
@given(data=st.data())
def test_getitem_gradient(target, data):
    """d sum(x[key] * w) / d leaf, where x is the leaf or a broadcast view of it."""
    if elsewhere(data, target, "getitem gradient"):
        return
    dtype = data.draw(st.sampled_from(FLOATS), label="dtype")
    shape = data.draw(shapes(), label="shape")
    broadcast = data.draw(st.booleans(), label="broadcast")
    leaf_shape = tuple(1 if broadcast and data.draw(st.booleans(), label=f"broadcast dim {i}") else n
                       for i, n in enumerate(shape))
    leaf, _ = data.draw(tensors(leaf_shape, dtype, target.device, allow_broadcast=False, finite=True,
                                extremes=False), label="x")
    key, np_key = data.draw(keys(shape, target.device), label="key")
    read = np.broadcast_to(np.arange(leaf.size).reshape(leaf_shape), shape)
    try:
        reads = read[np_key]
    except IndexError:
        return  # (test_getitem holds the refusal)
    w = data.draw(arrays(reads.shape, dtype, finite=True, extremes=False), label="w")
    expected, scale = np.zeros(leaf.size), np.zeros(leaf.size)
    np.add.at(expected, reads.reshape(-1), w.reshape(-1))
    np.add.at(scale, reads.reshape(-1), np.abs(w).reshape(-1))
    with target.active():
        leaf.requires_grad = True
        x = em.broadcast_to(leaf, shape) if broadcast else leaf
        (grad,) = ag.grad(em.sum(x[key] * em.asarray(w, dtype=dtype, device=target.device)), [leaf])
    assert_matches(grad, expected.reshape(leaf_shape), dtype=dtype, magnitude=scale.reshape(leaf_shape),
                   what="the gradient")


@pytest.mark.parametrize("target", target_params())
@examples(1)
@given(data=st.data())
def test_write_into_overlapping_view(target, data):
    """A view whose elements share memory (a broadcast) cannot be written through: numpy's are
    read-only, PyTorch refuses, and which write would win is a race on a parallel device."""
    if elsewhere(data, target, "overlapping write"):
        return
    dtype = data.draw(st.sampled_from(ALL_DTYPES), label="dtype")
    shape = data.draw(shapes(min_dims=1, min_side=2, max_side=3), label="shape")
    x, values = data.draw(tensors((1, *shape[1:]), dtype, target.device, allow_broadcast=False), label="x")
    np_view = np.broadcast_to(values, shape)
    new, np_new = data.draw(tensors(shape, dtype, target.device), label="value")

    def write() -> None:
        np_view[...] = np_new

    with target.active():
        raises_like(lambda: em.broadcast_to(x, shape).__setitem__(Ellipsis, new), write)
    assert_matches(x, values, dtype=dtype, what="x after a refused write")
