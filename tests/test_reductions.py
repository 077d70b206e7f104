"""Reductions, scans, sorting, linear algebra and joining against numpy.

sum, prod, max, min, any, all, mean, var, std, argmax, argmin, cumulative_sum, cumulative_prod,
sort, argsort, matmul, tensordot, vecdot, concat, stack: random shapes (0-d, empty, up to 4-d),
every axis form (None, int, negative int, tuple, ()), keepdims, non-contiguous inputs, every dtype
the op declares.  References come from the exact stored input values (float64 / complex128, or
exact integers); accumulated error is judged against the size of the terms (``sum |x|``), not of
the result, because cancellation makes a small sum of large terms legitimately inexact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_elementwise import promote  # the expected-dtype rules, written once
from tolerances import COMPLEX_NAMES, FLOAT_NAMES, INT_NAMES, LAYOUTS, assert_close, eps, make_tensor, to_numpy

import ember_core as em
from ember_core.ops.registry import REGISTRY

ALL_NAMES = ("bool", *INT_NAMES, *FLOAT_NAMES, *COMPLEX_NAMES)
SETTINGS = settings(max_examples=8, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def declared(op: str) -> list[str]:
    names = {d.name for d in REGISTRY[op].dtypes}
    return [d for d in ALL_NAMES if d in names]


def kind(name: str) -> str:
    return "b" if name == "bool" else "u" if name == "uint8" else "i" if name.startswith("int") else \
        "c" if name.startswith("complex") else "f"


def quantize(values, dtype: str) -> np.ndarray:
    from tolerances import round_to

    with np.errstate(all="ignore"):
        if dtype == "bfloat16":
            return round_to(np.real(np.asarray(values)).astype(np.float64), "bfloat16").astype(np.float32)
        return np.asarray(values).astype(dtype)


def wide(x: np.ndarray, dtype: str) -> np.ndarray:
    k = kind(dtype)
    if k in "biu":
        return np.asarray(x).astype(object)  # exact Python ints
    return np.asarray(x).astype(np.complex128 if k == "c" else np.float64)


def wrap64(values) -> np.ndarray:
    arr = np.asarray(values, dtype=object)
    flat = [((int(v) + 2**63) % 2**64) - 2**63 for v in arr.reshape(-1)]
    return np.array(flat, dtype=np.int64).reshape(arr.shape)


def accumulate_dtype(dtype: str) -> str:
    return "int64" if kind(dtype) in "biu" else dtype


# ---- strategies -------------------------------------------------------------------------------

SHAPES = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)
LAYOUT = st.sampled_from(LAYOUTS)
FLOATS = st.one_of(st.floats(-1000, 1000), st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 1e-3, 1e3]))
SPECIAL = st.sampled_from([math.nan, math.inf, -math.inf, -0.0])


def values(dtype: str, shape, *, elements=FLOATS, special: bool = True, complex_bound: float = 100.0):
    k = kind(dtype)
    if k == "b":
        return hnp.arrays(np.bool_, shape)
    if k in "iu":
        return hnp.arrays(np.dtype(dtype), shape)
    if k == "c":
        part = st.floats(-complex_bound, complex_bound)
        return hnp.arrays(np.complex128, shape, elements=st.builds(complex, part, part)).map(
            lambda a: quantize(a, dtype))
    els = st.one_of(elements, SPECIAL) if special else elements
    return hnp.arrays(np.float64, shape, elements=els).map(lambda a: quantize(a, dtype))


@st.composite
def axes(draw, ndim: int, allow_tuple: bool = True):
    """None, an int (maybe negative), or a tuple of distinct axes (maybe empty, maybe negative)."""
    options = ["none"]
    if ndim:
        options.append("int")
    if allow_tuple:
        options.append("tuple")
    choice = draw(st.sampled_from(options))
    if choice == "none":
        return None
    if choice == "int":
        a = draw(st.integers(0, ndim - 1))
        return a - ndim if draw(st.booleans()) else a
    chosen = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim)) if ndim else []
    return tuple(a - ndim if draw(st.booleans()) else a for a in chosen)


def np_axis(axis):
    return tuple(axis) if isinstance(axis, (tuple, list)) else axis


def reduced_count(shape, axis) -> int:
    if axis is None:
        return math.prod(shape)
    axs = (axis,) if isinstance(axis, int) else axis
    return math.prod(shape[a] for a in axs)


# ---- sum, prod, max, min, any, all ---------------------------------------------------------------

REDUCTIONS = ["sum", "prod", "max", "min", "any", "all"]
# sum/prod of bool: not in the declared dtypes ("numeric"), but the reduction builder accepts it on
# purpose ("bool and integers accumulate in int64", ember_core/ops/families.py), as numpy does
REDUCTION_CASES = [(op, d) for op in REDUCTIONS for d in declared(op)] + [("sum", "bool"), ("prod", "bool")]


def reduction_reference(op: str, x: np.ndarray, dtype: str, axis, keepdims: bool):
    ax = np_axis(axis)
    if op in ("any", "all"):
        nz = np.asarray(x) != 0  # NaN is truthy
        return getattr(np, op)(nz, axis=ax, keepdims=keepdims)
    if kind(dtype) in "biu":
        w = np.asarray(x).astype(np.int64 if dtype != "bool" else np.bool_)
        if op in ("max", "min"):
            return getattr(np, op)(w, axis=ax, keepdims=keepdims)
        w = w.astype(object)
        r = np.sum(w, axis=ax, keepdims=keepdims) if op == "sum" else np.prod(w, axis=ax, keepdims=keepdims)
        if not isinstance(r, np.ndarray):
            r = np.array(r, dtype=object)
        return wrap64(r)
    with np.errstate(all="ignore"):
        return getattr(np, {"max": "max", "min": "min", "sum": "sum", "prod": "prod"}[op])(
            wide(x, dtype), axis=ax, keepdims=keepdims)


def reduction_tolerance(op: str, x: np.ndarray, dtype: str, axis, keepdims: bool):
    if kind(dtype) in "biu" or op in ("max", "min", "any", "all"):
        return {}
    n = reduced_count(np.shape(x), axis)
    e = eps(dtype)
    with np.errstate(all="ignore"):
        if op == "sum":  # error bounded by (a few + log n) ulps of sum |x|
            scale = np.sum(np.abs(wide(x, dtype)), axis=np_axis(axis), keepdims=keepdims)
            return {"atol": np.nan_to_num(4 * (2 + math.log2(n + 1)) * e * scale, posinf=0.0)}
    return {"rtol": (n + 4) * e}


@pytest.mark.parametrize(("op", "dtype"), REDUCTION_CASES)
@SETTINGS
@given(data=st.data())
def test_reduction_matches_numpy(op, dtype, data):
    shape = data.draw(SHAPES, label="shape")
    elements = st.floats(-2, 2) if op == "prod" else FLOATS
    x = data.draw(values(dtype, shape, elements=elements, complex_bound=2.0 if op == "prod" else 100.0), label="x")
    t = make_tensor(x, dtype, data.draw(LAYOUT, label="layout"))
    axis = data.draw(axes(len(shape)), label="axis")
    keepdims = data.draw(st.booleans(), label="keepdims")
    assume(op != "prod" or not _inf_meets_underflow(x, dtype, axis))
    fn = getattr(em, op)
    if op in ("max", "min") and _empty_reduced(shape, axis):
        with pytest.raises(em.ShapeError, match="empty"):
            fn(t, axis=axis, keepdims=keepdims)
        return
    out_dtype = "bool" if op in ("any", "all") else accumulate_dtype(dtype) if op in ("sum", "prod") else dtype
    expected = reduction_reference(op, x, dtype, axis, keepdims)
    got = fn(t, axis=axis, keepdims=keepdims)
    assert_close(got, expected, out_dtype, **reduction_tolerance(op, x, dtype, axis, keepdims))
    method = getattr(t, op)(axis=axis, keepdims=keepdims)
    assert_close(method, expected, out_dtype, **reduction_tolerance(op, x, dtype, axis, keepdims))


def _inf_meets_underflow(x: np.ndarray, dtype: str, axis) -> bool:
    """Whether some reduced slice holds an infinity and small factors whose product underflows: its
    product is then inf or nan depending on the order of the multiplications (numpy and PyTorch give
    either, by length), so no order is the reference."""
    if kind(dtype) not in "fc":
        return False
    with np.errstate(all="ignore"):
        w = np.abs(wide(x, dtype))
        small = np.where((w < 1) & (w > 0), np.log(w), 0.0)
        has_inf = np.any(np.isinf(w), axis=np_axis(axis))
        real = {"bfloat16": np.float32, "complex64": np.float32, "complex128": np.float64}.get(dtype, dtype)
        tiny = np.finfo(real).tiny
        return bool(np.any(has_inf & (np.sum(small, axis=np_axis(axis)) < math.log(tiny))))


def test_prod_of_inf_and_underflowing_factors_is_not_finite():
    """The case the campaign found (CI, ember-cpu nan, numpy inf): either is an IEEE answer for
    inf * 1e-68 ** 15, depending on the order; a finite product would be wrong."""
    x = np.full((2, 2, 4), 2.34100496e-68)
    x[0, 0, 0] = np.inf
    assert _inf_meets_underflow(x, "float64", None)
    got = float(to_numpy(em.prod(em.asarray(x))))
    assert np.isnan(got) or got == np.inf


def _empty_reduced(shape, axis) -> bool:
    """Whether a reduction over ``axis`` reduces zero elements somewhere (max/min: ShapeError)."""
    if axis is None:
        return math.prod(shape) == 0
    axs = (axis,) if isinstance(axis, int) else axis
    return any(shape[a] == 0 for a in axs)


@pytest.mark.parametrize("op", ["sum", "prod"])
@pytest.mark.parametrize(("src", "dst"), [("int8", "int8"), ("int32", "float64"), ("float32", "float64"),
                                           ("float16", "float32"), ("uint8", "int16"), ("bool", "int32"),
                                           ("float64", "complex128")])
def test_sum_prod_dtype_argument(op, src, dst):
    x = np.array([[1, 0, 3], [2, 5, 1]])
    t = em.asarray(x, dtype=src)
    stored = quantize(x, src)
    fn = np.sum if op == "sum" else np.prod
    assert_close(getattr(em, op)(t, axis=1, dtype=dst), fn(stored.astype(np.float64), axis=1), dst)


def test_integer_sums_accumulate_in_int64():
    x = em.full((300,), 100, dtype="int8")
    assert em.sum(x).dtype == "int64" and em.sum(x).item() == 30000
    u = em.full((3,), 255, dtype="uint8")
    assert em.sum(u).item() == 765 and em.prod(u).item() == 255**3
    b = em.asarray([True, True, False])
    assert em.sum(b).dtype == "int64" and em.sum(b).item() == 2 and em.prod(b).item() == 0


def test_empty_reductions_give_the_identity():
    e = em.zeros((0, 3))
    assert_close(em.sum(e, axis=0), np.zeros(3), "float32")
    assert_close(em.prod(e, axis=0), np.ones(3), "float32")
    assert_close(em.any(e, axis=0), np.zeros(3, bool), "bool")
    assert_close(em.all(e, axis=0), np.ones(3, bool), "bool")
    assert_close(em.sum(e), np.array(0.0), "float32")
    assert_close(em.sum(e, axis=1), np.zeros(0), "float32")
    assert_close(em.max(e, axis=1), np.zeros(0), "float32")  # nothing empty is reduced here


@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
def test_empty_max_min_argmax_are_shape_errors(op):
    for shape, axis in [((0,), None), ((0, 3), 0), ((2, 0), -1), ((2, 0), None)]:
        with pytest.raises(em.ShapeError):
            getattr(em, op)(em.zeros(shape), axis=axis)


def test_float32_sum_of_a_million_elements_is_as_accurate_as_numpy():
    rng = np.random.default_rng(0)
    for x in (rng.random(10**6, dtype=np.float32), np.full(10**6, 0.1, np.float32),
              (rng.standard_normal(10**6) * 1e3).astype(np.float32)):
        exact = math.fsum(x.astype(np.float64).tolist())
        ours = em.sum(em.asarray(x)).item()
        theirs = float(np.sum(x))
        ulp = float(np.spacing(np.float32(abs(exact))))
        assert abs(ours - exact) <= max(4 * abs(theirs - exact), 4 * ulp), (ours, theirs, exact)
    # along an axis of a non-contiguous view too
    x = np.full((1000, 1000), 0.1, np.float32)
    got = em.sum(em.asarray(x).mT, axis=1)
    assert_close(got, np.full(1000, math.fsum([float(np.float32(0.1))] * 1000)), "float32")


def test_nan_propagates_through_max_min_and_argmax_finds_the_first_nan():
    x = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, -1.0, 5.0, 0.0], [np.nan, 7.0, 7.0, 1.0]])
    for dtype in FLOAT_NAMES:
        t = em.asarray(x, dtype=dtype)
        assert_close(em.max(t, axis=1), np.max(x, axis=1), dtype)
        assert_close(em.min(t, axis=1), np.min(x, axis=1), dtype)
        assert_close(em.max(t, axis=0), np.max(x, axis=0), dtype)
        assert math.isnan(em.max(t).item()) and math.isnan(em.min(t).item())
        assert em.argmax(t, axis=1).tolist() == [1, 2, 0]
        assert em.argmin(t, axis=1).tolist() == [1, 1, 0]
        assert em.argmax(t).item() == 1 and em.argmin(t).item() == 1
        assert em.argmax(t.mT, axis=0).tolist() == [1, 2, 0]


def test_argmax_returns_the_first_of_ties():
    x = em.asarray([[3, 7, 7, 1, 7], [0, 0, 0, 0, 0]], dtype="int16")
    assert em.argmax(x, axis=1).tolist() == [1, 0]
    assert em.argmin(x, axis=1).tolist() == [3, 0]
    assert em.argmax(em.asarray([False, True, True])).item() == 1


# ---- argmax / argmin ----------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", declared("argmax"))
@SETTINGS
@given(data=st.data())
def test_arg_reduction_matches_numpy(op, dtype, data):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=5), label="shape")
    x = data.draw(values(dtype, shape, elements=st.sampled_from([0.0, 1.0, -1.0, 2.5, -0.0, 1e3])), label="x")
    t = make_tensor(x, dtype, data.draw(LAYOUT, label="layout"))
    axis = data.draw(axes(len(shape), allow_tuple=False), label="axis")
    keepdims = data.draw(st.booleans(), label="keepdims")
    ref = getattr(np, op)(wide(x, dtype) if kind(dtype) in "fc" else x, axis=axis, keepdims=keepdims)
    if axis is None and keepdims:
        ref = np.asarray(ref).reshape((1,) * len(shape))
    assert_close(getattr(em, op)(t, axis=axis, keepdims=keepdims), ref, "int64")
    assert_close(getattr(t, op)(axis=axis, keepdims=keepdims), ref, "int64")


# ---- mean, var, std ------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["mean", "var", "std"])
@pytest.mark.parametrize("dtype", declared("mean"))
@SETTINGS
@given(data=st.data())
def test_statistics_match_numpy(op, dtype, data):
    shape = data.draw(SHAPES, label="shape")
    x = data.draw(values(dtype, shape, elements=st.floats(-100, 100), special=False), label="x")
    t = make_tensor(x, dtype, data.draw(LAYOUT, label="layout"))
    axis = data.draw(axes(len(shape)), label="axis")
    keepdims = data.draw(st.booleans(), label="keepdims")
    kwargs = {"axis": axis, "keepdims": keepdims}
    np_kwargs = {"axis": np_axis(axis), "keepdims": keepdims}
    if op != "mean":
        correction = data.draw(st.sampled_from([0, 1, 0.5]), label="correction")
        kwargs["correction"] = correction
        np_kwargs["ddof"] = correction
    n = reduced_count(shape, axis)
    w = wide(x, dtype)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = getattr(np, op)(w, **np_kwargs)
            scale = np.max(np.abs(w), axis=np_axis(axis), keepdims=keepdims, initial=0.0)
    if op != "mean" and n - kwargs["correction"] <= 0:
        ref = np.full(np.shape(ref), np.nan)
    out_dtype = {"complex64": "float32", "complex128": "float64"}.get(dtype, dtype) if op != "mean" else dtype
    e = eps(dtype)
    # the error is absolute in the size of the terms: mean ~ n eps max|x|, var ~ n eps max|x|^2
    atol = (n + 4) * e * (scale if op != "var" else scale**2) * (4 if op == "std" else 1)
    if op == "std":  # sqrt near 0 magnifies an absolute error in var: sqrt(n eps) max|x|
        atol = np.sqrt((n + 4) * e) * scale * 2
    assert_close(getattr(em, op)(t, **kwargs), ref, out_dtype, rtol=(n + 8) * e, atol=atol)


@pytest.mark.parametrize("op", ["mean", "var", "std"])
@pytest.mark.parametrize("dtype", [d for d in ALL_NAMES if d not in declared("mean")])
def test_statistics_reject_non_floating(op, dtype):
    with pytest.raises(em.DTypeError):
        getattr(em, op)(em.ones((3,), dtype=dtype))


def test_var_of_large_offset_values_is_two_pass_accurate():
    x = np.array([1e4 + 1.0, 1e4 + 2.0, 1e4 + 3.0, 1e4 + 4.0], np.float32)
    assert_close(em.var(em.asarray(x)), np.var(x.astype(np.float64)), "float32", rtol=1e-5)
    assert_close(em.std(em.asarray(x), correction=1), np.std(x.astype(np.float64), ddof=1), "float32", rtol=1e-5)


@pytest.mark.parametrize(("op", "values"), [("mean", [65504.0, 65504.0]), ("var", [65504.0, 65504.0]),
                                            ("std", [0.0, 65504.0]), ("std", [-60000.0, 60000.0])])
def test_float16_statistics_compute_in_float32(op, values):
    """float16 (and bfloat16) statistics compute in float32 and round once: the sum of two float16
    maxima, whose mean is representable, and var's squares no longer overflow midway."""
    x = np.array(values, np.float16)
    assert_close(getattr(em, op)(em.asarray(x)), getattr(np, op)(x.astype(np.float64)), "float16")


# ---- cumulative_sum, cumulative_prod -------------------------------------------------------------

@pytest.mark.parametrize("op", ["cumulative_sum", "cumulative_prod"])
@pytest.mark.parametrize("dtype", declared("cumulative_sum"))
@SETTINGS
@given(data=st.data())
def test_scan_matches_numpy(op, dtype, data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5), label="shape")
    x = data.draw(values(dtype, shape, elements=st.floats(-2, 2), complex_bound=2.0), label="x")
    t = make_tensor(x, dtype, data.draw(LAYOUT, label="layout"))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    if len(shape) == 1 and data.draw(st.booleans(), label="axis_none"):
        axis = None
    np_fn = np.cumsum if op == "cumulative_sum" else np.cumprod
    out = accumulate_dtype(dtype)
    if kind(dtype) in "biu":
        ref = wrap64(np_fn(np.asarray(x).astype(object), axis=0 if axis is None else axis))
        kwargs = {}
    else:
        w = wide(x, dtype)
        with np.errstate(all="ignore"):
            ref = np_fn(w, axis=0 if axis is None else axis)
            n = shape[0 if axis is None else axis]
            scale = np.cumsum(np.abs(w), axis=0 if axis is None else axis)
        kwargs = ({"atol": np.nan_to_num(4 * (n + 2) * eps(dtype) * scale, posinf=0.0)} if op == "cumulative_sum"
                  else {"rtol": (n + 4) * eps(dtype)})
    assert_close(getattr(em, op)(t, axis=axis), ref, out, **kwargs)


def test_scan_needs_an_axis_beyond_1d():
    with pytest.raises(em.ShapeError, match="axis is required"):
        em.cumulative_sum(em.ones((2, 3)))


def test_cumulative_sum_include_initial():
    x = em.asarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert_close(em.cumulative_sum(x, axis=1, include_initial=True),
                 np.array([[0, 1, 3, 6], [0, 4, 9, 15]], dtype=np.float64), "float32")


def test_cumulative_prod_include_initial_starts_at_one():
    x = em.asarray([2.0, 3.0, 4.0])
    assert_close(em.cumulative_prod(x, include_initial=True), np.array([1.0, 2.0, 6.0, 24.0]), "float32")


# ---- sort, argsort ----------------------------------------------------------------------------------

def descending_stable_argsort(x: np.ndarray, axis: int) -> np.ndarray:
    """Indices for a stable descending sort: larger first, ties in original order."""
    _, inverse = np.unique(x.reshape(-1), return_inverse=True)
    ranks = inverse.reshape(x.shape)
    return np.argsort(-ranks, axis=axis, kind="stable")


@pytest.mark.parametrize("dtype", declared("sort"))
@SETTINGS
@given(data=st.data())
def test_sort_and_argsort_match_numpy(dtype, data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=6), label="shape")
    # few distinct values: plenty of ties to check stability; NaN only ascending (its place is documented there)
    descending = data.draw(st.booleans(), label="descending")
    pool = [0.0, -0.0, 1.0, -1.0, 2.5, 1e3, -math.inf, math.inf] + ([] if descending else [math.nan])
    x = data.draw(values(dtype, shape, elements=st.sampled_from(pool), special=False), label="x")
    if kind(dtype) in "iu":
        x = (x % 4).astype(x.dtype)  # ties
    t = make_tensor(x, dtype, data.draw(LAYOUT, label="layout"))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    ref_values = wide(x, dtype) if kind(dtype) == "f" else np.asarray(x)
    if descending:
        idx = descending_stable_argsort(ref_values, axis)
    else:
        idx = np.argsort(ref_values, axis=axis, kind="stable")
    sorted_ref = np.take_along_axis(ref_values, idx, axis=axis)
    assert_close(em.argsort(t, axis=axis, descending=descending), idx, "int64")
    got = em.sort(t, axis=axis, descending=descending)
    assert_close(got, sorted_ref.astype(np.float64) if kind(dtype) == "f" else sorted_ref, dtype, check_zero_sign=True)


def test_sort_puts_nan_last_and_default_axis_is_last():
    x = np.array([[3.0, np.nan, -1.0, np.inf, -np.inf, 0.0], [np.nan, np.nan, 2.0, 1.0, 1.0, -5.0]])
    t = em.asarray(x, dtype="float32")
    assert_close(em.sort(t), np.sort(x, axis=-1), "float32")
    assert_close(em.argsort(t), np.argsort(x, axis=-1, kind="stable"), "int64")


def test_sort_descending_treats_nan_as_largest():
    """Documented in core.toml: NaN is the largest value (numpy's flip(sort(x)), PyTorch)."""
    x = em.asarray([3.0, math.nan, 1.0, 2.0])
    assert_close(em.sort(x, descending=True), np.array([math.nan, 3.0, 2.0, 1.0]), "float32")


def test_cumulative_sum_of_bool_counts_in_int64():
    out = em.cumulative_sum(em.asarray([True, False, True]))
    assert out.dtype == em.int64 and out.tolist() == [1, 1, 2]


def test_sort_rejects_complex():
    with pytest.raises(em.DTypeError):
        em.sort(em.ones((3,), dtype="complex64"))


# ---- matmul, tensordot, vecdot ------------------------------------------------------------------

@st.composite
def matmul_shapes(draw):
    m, k, n = (draw(st.integers(0, 5)) for _ in range(3))
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3)).input_shapes
    left = (k,) if draw(st.integers(0, 5)) == 0 else (*batch[0], m, k)
    right = (k,) if draw(st.integers(0, 5)) == 0 else (*batch[1], k, n)
    return left, right


def matmul_reference(a, b, dtype):
    if kind(dtype) in "iu":
        with np.errstate(all="ignore"):
            return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(dtype)
    return np.matmul(wide(a, dtype), wide(b, dtype))


def matmul_atol(a, b, dtype):
    if kind(dtype) in "iu":
        return {}
    k = a.shape[-1]
    scale = np.matmul(np.abs(wide(a, dtype)), np.abs(wide(b, dtype)))
    return {"atol": 4 * (k + 2) * eps(dtype) * scale}


@pytest.mark.parametrize("dtype", declared("matmul"))
@SETTINGS
@given(data=st.data())
def test_matmul_matches_numpy(dtype, data):
    s1, s2 = data.draw(matmul_shapes(), label="shapes")
    elements = st.floats(-10, 10)
    a = data.draw(values(dtype, s1, elements=elements, special=False, complex_bound=10.0), label="a")
    b = data.draw(values(dtype, s2, elements=elements, special=False, complex_bound=10.0), label="b")
    ta = make_tensor(a, dtype, data.draw(LAYOUT, label="la"), seed=1)
    tb = make_tensor(b, dtype, data.draw(LAYOUT, label="lb"), seed=2)
    ref = matmul_reference(a, b, dtype)
    assert_close(em.matmul(ta, tb), ref, dtype, **matmul_atol(a, b, dtype))
    assert_close(ta @ tb, ref, dtype, **matmul_atol(a, b, dtype))


def test_matmul_promotes_and_rejects_bool():
    a = em.asarray([[1, 2], [3, 4]], dtype="int8")
    b = em.asarray([[1.5], [2.0]], dtype="float32")
    assert_close(a @ b, np.array([[5.5], [12.5]]), "float32")
    assert_close(em.asarray([1, 2], dtype="int32") @ em.asarray([[1], [1]], dtype="int8"), np.array([3]), "int32")
    with pytest.raises(em.DTypeError):
        em.ones((2, 2), dtype="bool") @ em.ones((2, 2), dtype="bool")


def test_large_float32_matmul_is_accurate():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 300)).astype(np.float32)
    b = rng.standard_normal((300, 50)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    got = em.asarray(a) @ em.asarray(b)
    assert_close(got, ref, "float32", atol=4 * 302 * eps("float32") * (np.abs(a) @ np.abs(b)))
    assert_close(em.asarray(a.T.copy()).mT @ em.asarray(b), ref, "float32",
                 atol=4 * 302 * eps("float32") * (np.abs(a) @ np.abs(b)))


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "int32"])
@SETTINGS
@given(data=st.data())
def test_tensordot_matches_numpy(dtype, data):
    shape1 = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4), label="shape1")
    count = data.draw(st.integers(0, len(shape1)), label="count")
    free2 = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=4), label="free2")
    shape2 = shape1[len(shape1) - count:] + free2
    a = data.draw(values(dtype, shape1, elements=st.floats(-4, 4), special=False, complex_bound=4.0), label="a")
    b = data.draw(values(dtype, shape2, elements=st.floats(-4, 4), special=False, complex_bound=4.0), label="b")
    if kind(dtype) in "iu":
        a, b = a % 7, b % 7
    ta, tb = make_tensor(a, dtype, data.draw(LAYOUT, label="la")), make_tensor(b, dtype)
    if data.draw(st.booleans(), label="explicit"):
        axes_ = (list(range(len(shape1) - count, len(shape1))), list(range(count)))
        got = em.tensordot(ta, tb, axes=axes_)
    else:
        got = em.tensordot(ta, tb, axes=count)
    ref = np.tensordot(wide(a, dtype) if kind(dtype) in "fc" else a.astype(np.int64), wide(b, dtype)
                       if kind(dtype) in "fc" else b.astype(np.int64), axes=count)
    k = math.prod(shape1[len(shape1) - count:])
    assert_close(got, ref, dtype, rtol=(k + 4) * 64 * eps("float64" if kind(dtype) in "iu" else dtype),
                 atol=(k + 4) * 16 * 16 * (eps(dtype) if kind(dtype) in "fc" else 0))


def test_tensordot_with_permuted_axes():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5, 3))
    got = em.tensordot(em.asarray(a, dtype="float64"), em.asarray(b, dtype="float64"), axes=([1, 2], [2, 0]))
    assert_close(got, np.tensordot(a, b, axes=([1, 2], [2, 0])), "float64")


def test_vecdot_default_axis():
    a = em.asarray([[1.0, 2.0], [3.0, 4.0]])
    assert_close(em.vecdot(a, a), np.array([5.0, 25.0]), "float32")


def test_vecdot_keeps_the_promoted_integer_dtype():
    a = em.asarray([1, 2, 3], dtype="int16")
    assert_close(em.vecdot(a, a, axis=-1), np.array(14), "int16")


def test_float16_vecdot_multiplies_in_float32():
    """6 * 10920 = 65520 rounds to inf in float16; the sum 54600 does not (as in numpy and matmul)."""
    a, b = np.array([6.0, -1.0], np.float16), np.array([10920, 10920], np.int16)
    got = em.vecdot(em.asarray(a), em.asarray(b))
    assert_close(got, np.vecdot(a.astype(np.float64), b.astype(np.float64)), "float16")
    assert_close(got, em.matmul(em.asarray(a), em.asarray(b, dtype="float16")), "float16")
    # the operands are still converted to float16 first: int32's minimum is -inf there, and 0 * -inf NaN
    assert np.isnan(to_numpy(em.vecdot(em.asarray(np.zeros(1, np.float16)), em.asarray(np.array([-2**31], np.int32)))))


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@SETTINGS
@given(data=st.data())
def test_vecdot_matches_numpy(dtype, data):
    s1, s2 = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3, min_side=1,
                                                         max_side=4), label="shapes").input_shapes
    n = data.draw(st.integers(1, 5), label="n")
    s1, s2 = (*s1[:-1], n), (*s2[:-1], n)
    a = data.draw(values(dtype, s1, elements=st.floats(-4, 4), special=False, complex_bound=4.0), label="a")
    b = data.draw(values(dtype, s2, elements=st.floats(-4, 4), special=False, complex_bound=4.0), label="b")
    ta, tb = make_tensor(a, dtype, data.draw(LAYOUT, label="la")), make_tensor(b, dtype)
    ref = np.sum(np.conj(a.astype(np.complex128)) * b.astype(np.complex128), axis=-1)
    ref = ref if kind(dtype) == "c" else ref.real
    # error in the size of the terms: n eps sum |a| |b| (here |a|, |b| <= 4 * sqrt(2))
    assert_close(em.vecdot(ta, tb, axis=-1), ref, dtype, atol=4 * (n + 2) * eps(dtype) * 32 * n)


# ---- concat, stack ----------------------------------------------------------------------------------

@SETTINGS
@given(data=st.data())
def test_concat_matches_numpy(data):
    base = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=4), label="base")
    axis = data.draw(st.integers(-len(base), len(base) - 1), label="axis")
    count = data.draw(st.integers(1, 4), label="count")
    dtypes = [data.draw(st.sampled_from(ALL_NAMES), label=f"dtype{i}") for i in range(count)]
    arrays, tensors = [], []
    for i, d in enumerate(dtypes):
        shape = list(base)
        shape[axis] = data.draw(st.integers(0, 3), label=f"len{i}")
        x = data.draw(values(d, tuple(shape), elements=st.sampled_from([0.0, 1.5, -2.0, 100.0]), special=False,
                             complex_bound=4.0), label=f"x{i}")
        if kind(d) in "iu":
            x = (x % 50).astype(x.dtype)
        arrays.append(x)
        tensors.append(make_tensor(x, d, data.draw(LAYOUT, label=f"layout{i}"), seed=i))
    out = dtypes[0]
    for d in dtypes[1:]:
        out = promote(out, d)
    parts = [np.asarray(a).astype(np.complex128) for a in arrays]
    if kind(out) != "c":
        parts = [p.real for p in parts]
    assert_close(em.concat(tensors, axis=axis), np.concatenate(parts, axis=axis), out, rtol=0, atol=0)
    flat = np.concatenate([p.reshape(-1) for p in parts])
    assert_close(em.concat(tuple(tensors), axis=None), flat, out, rtol=0, atol=0)


@SETTINGS
@given(data=st.data())
def test_stack_matches_numpy(data):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4), label="shape")
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)), label="axis")
    dtype = data.draw(st.sampled_from(ALL_NAMES), label="dtype")
    count = data.draw(st.integers(1, 4), label="count")
    arrays = [data.draw(values(dtype, shape, special=False, complex_bound=4.0), label=f"x{i}") for i in range(count)]
    tensors = [make_tensor(a, dtype, data.draw(LAYOUT, label=f"layout{i}")) for i, a in enumerate(arrays)]
    ref = np.stack([wide(a, dtype) if kind(dtype) in "fc" else a for a in arrays], axis=axis)
    assert_close(em.stack(tensors, axis=axis), ref, dtype, rtol=0, atol=0)


def test_concat_and_stack_shape_errors():
    with pytest.raises(em.ShapeError):
        em.concat([em.ones((2, 3)), em.ones((2, 4))], axis=0)
    with pytest.raises(em.ShapeError):
        em.concat([em.ones((2, 3)), em.ones((3,))])
    with pytest.raises(em.ShapeError):
        em.concat([])
    with pytest.raises(em.ShapeError):
        em.stack([em.ones((2,)), em.ones((3,))])
    with pytest.raises(em.ShapeError):
        em.concat([em.ones((2,))], axis=1)


def test_results_do_not_alias_inputs():
    x = em.asarray([[3.0, 1.0], [2.0, 4.0]])
    outs = [em.sum(x, axis=()), em.sort(x), em.concat([x]), em.stack([x])[0], em.cumulative_sum(x, axis=0)]
    before = [to_numpy(o).copy() for o in outs]
    x.numpy()[...] = -7.0
    for o, b in zip(outs, before):
        assert np.array_equal(to_numpy(o), b)


def test_axes_may_be_numpy_integers_and_other_values_are_type_errors():
    """An axis is anything with __index__ (numpy's integers, as numpy and PyTorch take them); a float
    or a set is a TypeError that says what an axis is (a set raised "not iterable" from inside)."""
    arr = np.arange(6.0).reshape(2, 3)
    x = em.asarray(arr)
    np.testing.assert_array_equal(to_numpy(em.sum(x, axis=np.int64(0))), arr.sum(axis=0))
    np.testing.assert_array_equal(to_numpy(em.max(x, axis=[np.int32(-1)])), arr.max(axis=-1))
    np.testing.assert_array_equal(to_numpy(em.argmax(x, axis=np.int64(1))), arr.argmax(axis=1))
    for bad in (1.5, {0}):
        with pytest.raises(TypeError, match="axis must be an int, a tuple of ints or None"):
            em.sum(x, axis=bad)
    em.sum(x, axis=1)  # a cached plan for axis 1 must not serve True or 1.0, which equal 1 as keys
    for bad in (True, (True,), 1.0, (1.0,)):
        with pytest.raises(TypeError, match="axis must be an int"):
            em.sum(x, axis=bad)
