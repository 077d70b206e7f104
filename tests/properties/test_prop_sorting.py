"""Sorting, searching, unique and nonzero on every target: any declared dtype and its special
values (NaN sorts as the largest value; -0.0 and 0.0 are one value), strided / reversed / offset /
broadcast inputs, 0-size and 1-size dimensions, every axis of either sign (and bad ones, which
must raise as numpy does), both directions.  Few distinct values are drawn, so ties are common:
a stable order must be exactly the reference's, and an unstable one must still sort.  The
references are the conformance suite's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from campaign import (
    Drawn,
    Recorded,
    arrays,
    assert_matches,
    assert_unchanged,
    cases,
    dtypes_of,
    elsewhere,
    examples,
    host,
    layouts,
    ops_of,
    place,
    raises_like,
    shapes,
    tensors,
)
from ember_conformance.references import REFERENCES
from hypothesis import example, given
from hypothesis import strategies as st
from test_prop_reductions import along, axes, one_tensor

import ember_core as em

SORTS = ops_of("sort")
UNIQUE = ["unique_all", "unique_counts", "unique_inverse", "unique_values"]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's, on the special values

COVERED = [*SORTS, "searchsorted", *UNIQUE, "nonzero"]

FEW = {"low": -2.0, "high": 2.0}  # few distinct values: ties


@pytest.mark.parametrize(("target", "op"), cases(SORTS))
@examples(4)
@given(data=st.data())
@example(data=Recorded("sort", dtype="int64", shape=(2,), x=Drawn([0, -2**63], "int64"), axis=0, descending=True,
                       stable=False))  # (the reference negated int64's minimum)
@example(data=Recorded("argsort", dtype="int64", shape=(2,), x=Drawn([0, -2**63], "int64"), axis=0, descending=True,
                       stable=False))
def test_sort(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype, shape, t, x = one_tensor(data, target, op, **FEW)
    axis = data.draw(axes(len(shape), tuples=False, none=False), label="axis")
    descending = data.draw(st.booleans(), label="descending")
    stable = data.draw(st.booleans(), label="stable")
    with target.active():
        outcome = raises_like(lambda: getattr(em, op)(t, axis=axis, descending=descending, stable=stable),
                              lambda: along(REFERENCES[op], x, axis, descending=descending))
    if outcome is not None:
        got, expected = outcome
        if op == "argsort" and not stable:
            check_sorting_order(got, x, axis, expected)
        else:
            assert_matches(got, expected, dtype="int64" if op == "argsort" else dtype)
    assert_unchanged(t, x)


def check_sorting_order(got: Any, x: np.ndarray, axis: int, stable_order: np.ndarray) -> None:
    """``got`` sorts ``x`` along ``axis``, ties in any order: along the axis it is a permutation,
    and it gathers the values the stable order gathers."""
    assert got.dtype.name == "int64" and got.shape == stable_order.shape, f"{got.dtype} {got.shape}"
    if x.ndim == 0:  # ember's 0-d tensor has one axis
        x, axis, stable_order = x.reshape(1), 0, stable_order.reshape(1)
    order = host(got).reshape(x.shape)
    assert np.array_equal(np.sort(order, axis=axis), np.sort(stable_order, axis=axis)), f"not a permutation: {order}"
    gathered, wanted = (np.take_along_axis(x, o, axis=axis) for o in (order, stable_order))
    assert np.array_equal(gathered, wanted, equal_nan=x.dtype.kind in "fc"), f"does not sort: {gathered} != {wanted}"


@st.composite
def sorted_tensors(draw: Any, n: int, dtype: str, device: str, **element_options: Any) -> tuple[Any, np.ndarray]:
    """A 1-d tensor of ``n`` sorted values (NaN last), in a drawn layout."""
    values = np.sort(draw(arrays((n,), dtype, **element_options), label="values"))
    layout = draw(layouts(1, allow_broadcast=False), label="layout")
    return place(values, dtype, layout, device), values


@pytest.mark.parametrize(("target", "op"), cases(["searchsorted"]))
@examples(4)
@given(data=st.data())
def test_searchsorted(target, op, data):
    """Into a sorted x1, or an unsorted one with the ``sorter`` that sorts it."""
    if elsewhere(data, target, op):
        return
    dtype = data.draw(st.sampled_from(dtypes_of(op)), label="dtype")
    n = data.draw(st.integers(0, 8), label="n")
    options = {**FEW, **target.limits(op, dtype)}
    by_sorter = data.draw(st.booleans(), label="sorter")
    t1, x1 = data.draw((tensors((n,), dtype, target.device, **options) if by_sorter
                        else sorted_tensors(n, dtype, target.device, **options)), label="x1")
    t2, x2 = data.draw(tensors(data.draw(shapes(max_dims=3), label="shape"), dtype, target.device, **options),
                       label="x2")
    side = data.draw(st.sampled_from(["left", "right"]), label="side")
    order = REFERENCES["argsort"](x1) if by_sorter else None
    sorter = None if order is None else em.asarray(order, device=target.device)
    with target.active():
        got = em.searchsorted(t1, t2, side=side, sorter=sorter)
    assert_matches(got, REFERENCES[op](x1, x2, side=side, sorter=order), dtype="int64")
    assert_unchanged(t1, x1, "first input")
    assert_unchanged(t2, x2, "second input")


@pytest.mark.parametrize(("target", "op"), cases(UNIQUE))
@examples(4)
@given(data=st.data())
def test_unique(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype, _, t, x = one_tensor(data, target, op, **FEW)
    with target.active():
        got = getattr(em, op)(t)
    expected = REFERENCES[op](x)
    if op == "unique_values":
        got, expected = (got,), (expected,)
    assert isinstance(got, tuple) and len(got) == len(expected), f"{op} returned {type(got).__name__}"
    names = getattr(got, "_fields", ("values",))
    for name, part, want in zip(names, got, expected):
        assert_matches(part, want, dtype=dtype if name == "values" else "int64", what=name)
    assert_unchanged(t, x)


@pytest.mark.parametrize(("target", "op"), cases(["nonzero"]))
@examples(4)
@given(data=st.data())
def test_nonzero(target, op, data):
    if elsewhere(data, target, op):
        return
    _, _, t, x = one_tensor(data, target, op, **FEW)
    with target.active():
        outcome = raises_like(lambda: em.nonzero(t), lambda: REFERENCES[op](x))
    if outcome is not None:
        got, expected = outcome
        assert isinstance(got, tuple) and len(got) == len(expected), f"nonzero returned {len(got)} tensors"
        for axis, (part, want) in enumerate(zip(got, expected)):
            assert_matches(part, want, dtype="int64", what=f"indices along axis {axis}")
    assert_unchanged(t, x)
