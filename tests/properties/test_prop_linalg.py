"""Linear algebra on every target: matmul (1-d and n-d operands on either side, batch dims that
broadcast, zero-size contractions and results), vecdot (the contracted axis counted from the end
of both operands, the others broadcasting) and tensordot (axes as a count or as pairs of either
sign), with any two declared dtypes (the result is their promotion), strided / reversed / offset /
broadcast operands, and shapes that do not fit, which must raise as numpy does.

The references are the conformance suite's, applied to the operands as ember converts them to the
promoted dtype first.  Where the finite products of an element add up past the range of the
dtype they accumulate in, the order of the additions decides whether a partial sum overflows, so
such elements are not judged (test_prop_reductions.overflowing)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from campaign import (
    Drawn,
    Recorded,
    assert_matches,
    assert_unchanged,
    cases,
    dtypes_of,
    elsewhere,
    examples,
    raises_like,
    tensors,
)
from ember_conformance.references import REFERENCES
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_elementwise import promote
from test_prop_reductions import converted, finite, judged, overflowing

import ember_core as em

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's, on the special values

COVERED = ["matmul", "vecdot", "tensordot"]
SIDE = st.integers(0, 4)


def batches(data: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two batch shapes that broadcast together."""
    return data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, min_side=0, max_side=3),
                     label="batches").input_shapes


def matmul_shapes(data: Any) -> tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]:
    """1-d or n-d on either side; now and then a contraction that does not fit, or a 0-d operand."""
    m, k, n = (data.draw(SIDE, label=name) for name in "mkn")
    b1, b2 = batches(data)
    forms = [data.draw(st.sampled_from(["vector", "matrix"]), label=f"{name}_form") for name in ("x1", "x2")]
    wrong = data.draw(st.sampled_from([None, None, None, None, None, "size", "0-d"]), label="wrong")
    k2 = k + 1 if wrong == "size" else k
    s1 = (k,) if forms[0] == "vector" else (*b1, m, k)
    s2 = (k2,) if forms[1] == "vector" else (*b2, k2, n)
    return ((), s2, {}) if wrong == "0-d" else (s1, s2, {})


def vecdot_shapes(data: Any) -> tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]:
    """The contracted axis p-th from the end of both, of one size (or not, now and then)."""
    b1, b2 = batches(data)
    b1, b2 = (*b1, 1), (*b2, 1)
    p = data.draw(st.integers(1, min(len(b1), len(b2))), label="from_end")
    k = data.draw(SIDE, label="k")
    wrong = data.draw(st.sampled_from([None, None, None, None, "size"]), label="wrong")
    s1 = tuple(k if i == len(b1) - p else n for i, n in enumerate(b1))
    s2 = tuple(k + (wrong == "size") if i == len(b2) - p else n for i, n in enumerate(b2))
    ndim = max(len(s1), len(s2))
    return s1, s2, {"axis": data.draw(st.sampled_from([-p, ndim - p]), label="axis")}


def tensordot_shapes(data: Any) -> tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]:
    """axes=c (the last c of x1 with the first c of x2) or pairs of axes of either sign; now and
    then pairs whose sizes differ."""
    s1 = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3), label="x1_shape")
    c = data.draw(st.integers(0, len(s1)), label="contracted")
    extra = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3), label="x2_extra")
    if data.draw(st.booleans(), label="as_count") or not s1:
        return s1, (*s1[len(s1) - c:], *extra), {"axes": c}
    a1 = data.draw(st.permutations(range(len(s1))), label="x1_axes")[:c]
    ndim2 = c + len(extra)
    a2 = data.draw(st.permutations(range(ndim2)), label="x2_axes")[:c]
    sizes = iter(extra)
    s2 = [s1[a1[a2.index(j)]] if j in a2 else next(sizes) for j in range(ndim2)]
    if c and data.draw(st.integers(0, 4), label="wrong") == 0:
        s2[a2[0]] += 1
    signs = data.draw(st.lists(st.booleans(), min_size=2 * c, max_size=2 * c), label="negative")
    axes = ([a - len(s1) * signs[i] for i, a in enumerate(a1)], [a - ndim2 * signs[c + i] for i, a in enumerate(a2)])
    return s1, tuple(s2), {"axes": axes}


def vecdot_reference(x1: Any, x2: Any, *, axis: int) -> Any:
    """numpy's vecdot with ember's axis, counted from the end of both operands (numpy counts a
    positive axis in each operand); two 0-d operands have their one axis (PyTorch's rule)."""
    ndim = max(x1.ndim, x2.ndim)
    if ndim == 0 and axis in (0, -1):
        return REFERENCES["vecdot"](x1.reshape(1), x2.reshape(1))
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    return REFERENCES["vecdot"](x1, x2, axis=axis % ndim - ndim)


def term_by_term(reference: Any) -> Any:
    """``reference``, every product summed as IEEE arithmetic does: numpy's floating matmul and
    tensordot go through BLAS, which skips zero factors (0 * inf gives 0 there, not NaN), so
    floating operands go in as Python numbers (object arrays), integers as they are (wrapping), and
    empty ones too (numpy's object loops sum no products to None, not 0)."""
    def ref(x1: np.ndarray, x2: np.ndarray, **kwargs: Any) -> Any:
        if x1.dtype.kind not in "fc" or x1.size == 0 or x2.size == 0:
            return reference(x1, x2, **kwargs)
        return np.asarray(reference(x1.astype(object), x2.astype(object), **kwargs), dtype=np.result_type(x1, x2))

    return ref


SHAPES = {"matmul": matmul_shapes, "vecdot": vecdot_shapes, "tensordot": tensordot_shapes}
LINALG_REFERENCES = {op: term_by_term(ref) for op, ref in {**REFERENCES, "vecdot": vecdot_reference}.items()
                     if op in COVERED}


@pytest.mark.parametrize(("target", "op"), cases(COVERED))
@examples(4)
@given(data=st.data())
@example(data=Recorded("tensordot", dtype="int8", x2_dtype="float16", x1_shape=(), contracted=0, x2_extra=(2,),
                       as_count=False, x1=Drawn(0, "int8"), x2=Drawn([0.0, math.inf], "float16")))  # 0 * inf
@example(data=Recorded("vecdot", dtype="float16", x2_dtype="int16", batches=hnp.BroadcastableShapes(((), ()), ()),
                       from_end=1, k=2, wrong=None, axis=-1, x1=Drawn([6.0, -1.0], "float16"),
                       x2=Drawn([10920, 10920], "int16")))  # 6 * 10920 is past float16's largest, the sum is not
@example(data=Recorded("vecdot", dtype="float16", x2_dtype="int32", batches=hnp.BroadcastableShapes(((), ()), ()),
                       from_end=1, k=1, wrong=None, axis=-1, x1=Drawn([0.0], "float16"),
                       x2=Drawn([-2**31], "int32")))  # -inf in float16 (the operands convert first): 0 * -inf
def test_linalg(target, op, data):
    if elsewhere(data, target, op):
        return
    d1 = data.draw(st.sampled_from(dtypes_of(op)), label="dtype")
    d2 = data.draw(st.sampled_from([d1, *dtypes_of(op)]), label="x2_dtype")
    s1, s2, kwargs = SHAPES[op](data)
    compute = promote(d1, d2)
    # complex arithmetic with infinite parts: numpy's is not C99's (campaign.elements says why)
    bounded = {"finite": True} if compute.startswith("complex") else {}
    ta, a = data.draw(tensors(s1, d1, target.device, **{**bounded, **target.limits(op, d1)}), label="x1")
    tb, b = data.draw(tensors(s2, d2, target.device, **{**bounded, **target.limits(op, d2)}), label="x2")
    qa, qb = converted(a, compute), converted(b, compute)
    with target.active():
        outcome = raises_like(lambda: getattr(em, op)(ta, tb, **kwargs),
                              lambda: LINALG_REFERENCES[op](qa, qb, **kwargs))
    if outcome is not None:
        got, expected = outcome
        reference = LINALG_REFERENCES[op]  # (the conformance magnitude: the sum of |products|)
        totals = reference(finite(qa), finite(qb), **kwargs)
        assert_matches(got, judged(got, expected, overflowing(totals, compute)), dtype=compute,
                       magnitude=reference(np.abs(qa), np.abs(qb), **kwargs))
    assert_unchanged(ta, a, "first input")
    assert_unchanged(tb, b, "second input")
