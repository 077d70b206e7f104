"""Reductions, statistics, arg-reductions and scans on every target: any declared dtype and its
special values, strided / reversed / offset / broadcast inputs, 0-size and 1-size dimensions, every
axis form (None, an int of either sign, tuples of either sign including the empty one, and bad
ones, which must raise as numpy does), keepdims, ``dtype=`` and ``correction=``.  The references
are the conformance suite's (float64 / complex128, exact for integers and bool).

ember follows numpy except where it documents otherwise: a 0-d tensor has one axis, 0 (or -1),
as in PyTorch (numpy has none); sums, products and scans refuse ``dtype=bool`` (accumulating in
bool would be any() or all() under another name) and complex inputs with a real ``dtype=`` (the
Array API forbids dropping the imaginary part); a 0-d scan is 0-d, so it cannot hold
``include_initial``'s extra element."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest
from campaign import (
    KIND,
    Drawn,
    Recorded,
    assert_matches,
    assert_unchanged,
    cases,
    dtypes_of,
    elsewhere,
    examples,
    host,
    ops_of,
    raises_like,
    schema,
    shapes,
    tensors,
)
from ember_conformance.references import ACCUMULATING, REFERENCES, magnitude
from ember_conformance.samples.base import representable
from ember_conformance.tolerances import REAL_OF, TOLERANCES, eps
from hypothesis import example, given
from hypothesis import strategies as st

import ember_core as em
from ember_core.errors import DTypeError

REDUCTIONS = ops_of("reduction")  # sum, prod, max, min, any, all
STATISTICS = ["count_nonzero", "mean", "std", "var"]
ARG_REDUCTIONS = ops_of("arg_reduction")
SCANS = ops_of("scan")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's, on the special values

COVERED = REDUCTIONS + STATISTICS + ARG_REDUCTIONS + SCANS
WITH_DTYPE = {"sum", "prod", *SCANS}  # integers and bool accumulate in int64; dtype= is declared
ALL_DTYPES = [d.name for d in em.dtypes.ALL_DTYPES]

# products: of many factors from [-8, 8] overflow, and then only their infinities are compared; of
# huge and tiny factors (the dtype's extremes) over- or underflow midway or not depending on the
# order of multiplication and the precision of the running product, which the float64 reference,
# rounded once, does not model
DOMAINS = {op: {"low": -2.0, "high": 2.0, "extremes": False} for op in ("prod", "cumulative_prod")}


# ---- axes ------------------------------------------------------------------------------------------

@st.composite
def axes(draw: Any, ndim: int, *, tuples: bool = True, bad: bool = True, none: bool = True) -> Any:
    """An axis argument for an ``ndim``-d tensor: None, an int of either sign, a tuple of distinct
    axes of either sign (the empty tuple included), or now and then (if ``bad``) a bad one (out of
    range, repeated).  A 0-d tensor has axis 0 (-1)."""
    span = max(ndim, 1)
    forms = ["none"] * none + ["int", "int"] + ["tuple"] * tuples + ["bad"] * bad
    form = draw(st.sampled_from(forms))
    if form == "none":
        return None
    if form == "int":
        return draw(st.integers(-span, span - 1))
    if form == "tuple":
        chosen = draw(st.lists(st.integers(0, span - 1), unique=True, max_size=span))
        return tuple(a - span if draw(st.booleans()) else a for a in chosen)
    if tuples and ndim and draw(st.booleans()):
        a = draw(st.integers(0, ndim - 1))
        return (a, a - ndim)  # the same axis twice
    return draw(st.sampled_from([span, -span - 1]))


def one_tensor(data: Any, target: Any, op: str, shape: Any = None, **options: Any) -> tuple[str, Any, Any, Any]:
    """A property's usual first draws: one of the op's declared dtypes, a shape (from the strategy
    ``shape``, or shapes()), and the tensor x in a drawn layout, its values within ``options`` and
    the target's declared limits.  Returns (dtype, shape, tensor, exact values)."""
    dtype = data.draw(st.sampled_from(dtypes_of(op)), label="dtype")
    shape = data.draw(shapes() if shape is None else shape, label="shape")
    t, x = data.draw(tensors(shape, dtype, target.device, **{**options, **target.limits(op, dtype)}), label="x")
    return dtype, shape, t, x


def along(reference: Any, x: np.ndarray, axis: Any, **kwargs: Any) -> Any:
    """numpy's ``reference`` for ember's call along ``axis``: ember's 0-d tensor has one axis (as in
    PyTorch), numpy's none, so numpy sees that tensor's one element as a 1-d array."""
    if x.ndim == 0 and axis in (0, -1, (0,), (-1,)):
        return np.reshape(reference(x.reshape(1), axis=0, **kwargs), ())
    return reference(x, axis=axis, **kwargs)


def spread(op: str, x: np.ndarray, *, correction: float, **kwargs: Any) -> np.ndarray:
    """var or std: NaN where N - correction <= 0, as the Array API says (numpy divides by
    max(N - correction, 0) instead, giving inf)."""
    out = np.asarray(REFERENCES[op](x, correction=correction, **kwargs))
    return np.where(reduced_count(x, out) - correction > 0, out, np.nan)


REDUCTION_REFERENCES = {**REFERENCES, "var": partial(spread, "var"), "std": partial(spread, "std")}


def reduced_count(x: np.ndarray, result: np.ndarray) -> int:
    """How many elements went into each element of ``result``."""
    return x.size // result.size if result.size else 0


# ---- inputs, references, judging -------------------------------------------------------------------

def element_options(target: Any, op: str, dtype: str, requested: str | None) -> dict[str, Any]:
    """The drawn values' domain: DOMAINS, the target's declared limits, and finite values where
    ``dtype=`` makes them complex (numpy's complex arithmetic with infinite parts is not C99's:
    campaign.elements says why)."""
    finite = {"finite": True} if requested is not None and KIND[requested] == "c" else {}
    return {**DOMAINS.get(op, {}), **finite, **target.limits(op, dtype)}


def refused(source: str, requested: str | None) -> bool:
    """ember's rules for ``dtype=`` that numpy lacks (see the module docstring)."""
    return requested is not None and (requested == "bool" or (KIND[source] == "c" and KIND[requested] != "c"))


def converted(x: np.ndarray, requested: str | None) -> np.ndarray:
    """``x`` as ``astype(x, requested)`` stores it: what the op accumulates."""
    if requested is None:
        return x
    return representable(REFERENCES["astype"](x, requested), requested)


def product_rtol(dtype: str, factors: int) -> float | None:
    """A product of n factors is rounded n times (the table's rtol is for a few roundings)."""
    if dtype not in TOLERANCES or TOLERANCES[dtype].rtol == 0:
        return None
    return max(TOLERANCES[dtype].rtol, (factors + 2) * eps(dtype))


def spread_atol(op: str, dtype: str, count: int, correction: float) -> float | None:
    """var's squares below the accumulator's smallest subnormal flush to 0 (numpy's in that dtype
    too), each losing up to that much: var is then off by count * tiny / (count - correction) at
    most, and std by its square root (the table's atol is for one rounding)."""
    if op not in ("var", "std") or count - correction <= 0:
        return None
    tiny = float(np.finfo(accumulator(dtype)).smallest_subnormal)
    loss = 2 * count * tiny / (count - correction)
    return max(TOLERANCES[dtype].atol, loss if op == "var" else float(np.sqrt(loss)))


def result_dtype(op: str, dtype: str, requested: str | None) -> str:
    if op in WITH_DTYPE:
        return requested or ("int64" if KIND[dtype] in "biu" else dtype)
    return {"any": "bool", "all": "bool", "count_nonzero": "int64", "argmax": "int64", "argmin": "int64",
            "var": REAL_OF.get(dtype, dtype), "std": REAL_OF.get(dtype, dtype)}.get(op, dtype)


def error_scale(op: str, source: np.ndarray, **kwargs: Any) -> Any:
    """The conformance magnitude an accumulating op's error is judged against (None: the result's own)."""
    if op not in ACCUMULATING and op not in ("var", "std"):
        return None
    return along(lambda v, **kw: magnitude(op, (v,), kw), source, **kwargs)


def accumulator(dtype: str) -> str:
    """The dtype sums of ``dtype`` accumulate in: float32 for float16 and bfloat16 (as numpy's mean
    and PyTorch's reductions do), else the (real) dtype itself."""
    return "float32" if dtype in ("float16", "bfloat16") else REAL_OF.get(dtype, dtype)


def finite(values: np.ndarray) -> np.ndarray:
    """|values|, with the non-finite ones as 0."""
    with np.errstate(all="ignore"):
        return np.where(np.isfinite(values), np.abs(values), 0.0)


def overflowing(total: Any, dtype: str) -> Any:
    """Where finite terms whose magnitudes add up to ``total`` can overflow the accumulator of
    ``dtype`` midway: added in another order (numpy's in that dtype, a backend's tree), they
    overflow or not, so the float64 reference defines no value there."""
    if KIND[dtype] not in "fc":
        return False
    return np.asarray(total) > float(np.finfo(accumulator(dtype)).max)


def judged(got: Any, expected: Any, undefined: Any) -> np.ndarray:
    """``expected``, with ember's own values where the reference defines none."""
    return np.where(undefined, host(got).astype(np.asarray(expected).dtype), expected)


def call_op(t: Any, op: str, method: bool, **kwargs: Any) -> Any:
    """The op through the namespace, or through its Tensor method."""
    return getattr(t, op)(**kwargs) if method else getattr(em, op)(t, **kwargs)



# ---- properties ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("target", "op"), cases(REDUCTIONS + STATISTICS))
@examples(4)
@given(data=st.data())
@example(data=Recorded("mean", dtype="float16", shape=(1, 2), x=Drawn([[65504.0, 65504.0]], "float16"), axis=None,
                       keepdims=False, method=False))
@example(data=Recorded("var", dtype="float16", shape=(2,), x=Drawn([65504.0, 65504.0], "float16"), axis=None,
                       keepdims=False, correction=0, method=False))
@example(data=Recorded("std", dtype="float16", shape=(2,), x=Drawn([0.0, 65504.0], "float16"), axis=None,
                       keepdims=False, correction=0, method=False))
@example(data=Recorded("var", dtype="float16", shape=(2,), x=Drawn([0.0, 1.0], "float16"), axis=None, keepdims=False,
                       correction=2, method=False))  # N - correction <= 0: NaN (the Array API), not numpy's inf
@example(data=Recorded("std", dtype="bfloat16", shape=(2,), x=Drawn([0.0, 2.0**-126], "bfloat16"), axis=None,
                       keepdims=False, correction=0, method=False))  # the squares underflow float32
def test_reduction(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype = data.draw(st.sampled_from(dtypes_of(op)), label="dtype")
    requested = data.draw(st.none() | st.sampled_from(ALL_DTYPES), label="requested") if op in WITH_DTYPE else None
    shape = data.draw(shapes(), label="shape")
    t, x = data.draw(tensors(shape, dtype, target.device, **element_options(target, op, dtype, requested)), label="x")
    # (a refused dtype= is drawn with valid axes: which of two errors ember reports first is its own choice)
    kwargs = {"axis": data.draw(axes(len(shape), bad=not refused(dtype, requested)), label="axis"),
              "keepdims": data.draw(st.booleans(), label="keepdims")}
    if op in ("var", "std"):
        kwargs["correction"] = data.draw(st.sampled_from([0, 1, 0.5, 2]), label="correction")
    if requested is not None:
        kwargs["dtype"] = requested
    method = op in schema(op).methods and data.draw(st.booleans(), label="method")
    with target.active():
        if refused(dtype, requested):
            with pytest.raises(DTypeError):
                call_op(t, op, method, **kwargs)
            return
        source = converted(x, requested)
        outcome = raises_like(lambda: call_op(t, op, method, **kwargs),
                              lambda: along(REDUCTION_REFERENCES[op], source, **kwargs))
    if outcome is not None:
        got, expected = outcome
        out = result_dtype(op, dtype, requested)
        if op in ("sum", "mean", "var", "std"):  # the squares of var: (x - mean)^2 <= 4 max |x|^2
            terms = finite(source) if op in ("sum", "mean") else 4 * finite(source) ** 2
            expected = judged(got, expected, overflowing(
                along(REFERENCES["sum"], terms, kwargs["axis"], keepdims=kwargs["keepdims"]), out))
        count = reduced_count(source, np.asarray(expected))
        assert_matches(got, expected, dtype=out, magnitude=error_scale(op, source, **kwargs),
                       rtol=product_rtol(out, count) if op == "prod" else None,
                       atol=spread_atol(op, out, count, kwargs.get("correction", 0)))
    assert_unchanged(t, x)


@pytest.mark.parametrize(("target", "op"), cases(ARG_REDUCTIONS))
@examples(4)
@given(data=st.data())
def test_arg_reduction(target, op, data):
    """The first extremum, or the first NaN where there is one; few distinct values, so ties are common."""
    if elsewhere(data, target, op):
        return
    dtype, shape, t, x = one_tensor(data, target, op, low=-2, high=2)
    kwargs = {"axis": data.draw(axes(len(shape), tuples=False), label="axis"),
              "keepdims": data.draw(st.booleans(), label="keepdims")}
    method = data.draw(st.booleans(), label="method")
    with target.active():
        outcome = raises_like(lambda: call_op(t, op, method, **kwargs), lambda: along(REFERENCES[op], x, **kwargs))
    if outcome is not None:
        assert_matches(*outcome, dtype=result_dtype(op, dtype, None))
    assert_unchanged(t, x)


def scan_reference(op: str, x: np.ndarray, *, axis: Any, include_initial: bool) -> np.ndarray:
    if x.ndim == 0 and include_initial:
        raise ValueError("a 0-d scan is 0-d: it has no room for the initial value")
    if x.ndim == 0 and axis is None:  # a 1-d scan needs no axis, and ember's 0-d tensor has one
        axis = 0
    return along(REFERENCES[op], x, axis, include_initial=include_initial)


@pytest.mark.parametrize(("target", "op"), cases(SCANS))
@examples(4)
@given(data=st.data())
def test_scan(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype = data.draw(st.sampled_from(dtypes_of(op)), label="dtype")
    requested = data.draw(st.none() | st.sampled_from(ALL_DTYPES), label="requested")
    shape = data.draw(shapes(max_dims=3, max_side=6), label="shape")
    t, x = data.draw(tensors(shape, dtype, target.device, **element_options(target, op, dtype, requested)), label="x")
    valid = not refused(dtype, requested)  # (None is a bad axis beyond 1-d)
    axis = data.draw(axes(len(shape), tuples=False, bad=valid, none=valid or len(shape) < 2), label="axis")
    include_initial = data.draw(st.booleans(), label="include_initial")
    kwargs = {"axis": axis, "include_initial": include_initial, "dtype": requested}
    with target.active():
        if refused(dtype, requested):
            with pytest.raises(DTypeError):
                getattr(em, op)(t, **kwargs)
            return
        source = converted(x, requested)
        outcome = raises_like(lambda: getattr(em, op)(t, **kwargs),
                              lambda: scan_reference(op, source, axis=axis, include_initial=include_initial))
    if outcome is not None:
        got, expected = outcome
        out = result_dtype(op, dtype, requested)
        if op == "cumulative_sum":
            totals = scan_reference(op, finite(source), axis=axis, include_initial=include_initial)
            expected = judged(got, expected, overflowing(totals, out))
        length = source.shape[axis or 0] if source.ndim else 1
        scale = scan_reference(op, np.abs(source), axis=axis, include_initial=include_initial) \
            if op in ACCUMULATING else None  # (the conformance magnitude)
        assert_matches(got, expected, dtype=out, magnitude=scale,
                       rtol=product_rtol(out, length) if op == "cumulative_prod" else None)
    assert_unchanged(t, x)
