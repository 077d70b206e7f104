"""Elementwise kernels (unary, binary, where, copy/astype, full) on vulkan:0 against numpy
references computed in float64 from the exact stored inputs, in every memory layout, with
broadcasting, 0-d and zero-size tensors, special values and sizes beyond one dispatch's groups."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ember_conformance.samples.data import integer_edges
from ember_vulkan import catalog
from tolerances import LAYOUTS, assert_close, make_tensor, to_numpy

import ember_core as em
from ember_core.dtypes import float_to_integer

pytestmark = pytest.mark.usefixtures("shader_family")  # both elementwise walks: runs of 16 and of 1
RNG = np.random.default_rng(1234)
SPECIAL = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-6, -1e-6, 0.5, -0.5]
_NUMPY_NAMES = {"bitwise_invert": "invert", "bitwise_and": "bitwise_and", "asin": "arcsin", "acos": "arccos",
                "atan": "arctan", "asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh"}
_DOMAIN = {  # inputs inside the function's domain (plus SPECIAL, which probes the edges)
    "sqrt": (0, 9), "log": (0, 9), "log2": (0, 9), "log10": (0, 9), "log1p": (-0.99, 9), "acosh": (1, 9),
    "asin": (-1, 1), "acos": (-1, 1), "atanh": (-0.999, 0.999), "exp": (-80, 80), "expm1": (-20, 20),
    "sinh": (-80, 80), "cosh": (-80, 80), "tan": (-1.5, 1.5),
}


def _values(dtype: str, shape: tuple[int, ...], op: str = "") -> np.ndarray:
    if dtype == "bool":
        return RNG.integers(0, 2, shape).astype(bool)
    if dtype in catalog.INTS:
        return RNG.integers(-1000, 1000, shape).astype(dtype)
    lo, hi = _DOMAIN.get(op, (-4, 4))
    x = RNG.uniform(lo, hi, shape)
    flat = x.reshape(-1)
    flat[: min(len(SPECIAL), flat.size)] = SPECIAL[: flat.size]
    return x


def _as_float64(t: em.Tensor) -> np.ndarray:
    arr = to_numpy(t)
    return arr.astype(np.float64) if arr.dtype.kind == "f" else arr


def _unary_reference(op: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op == "sigmoid":
            return 1 / (1 + np.exp(-x))
        if op in ("erf", "erfc"):
            fn = getattr(math, op)
            return np.vectorize(lambda v: fn(v) if not np.isnan(v) else v)(x) if x.size else x
        if op == "reciprocal":
            return 1 / x
        if op == "signbit":
            return np.signbit(x)
        return getattr(np, _NUMPY_NAMES.get(op, op))(x)


def _binary_reference(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op in ("floor_divide", "remainder") and a.dtype.kind in "iu":  # integer x / 0 gives 0 (ember's rule)
            safe = np.where(b == 0, 1, b)
            return np.where(b == 0, 0, getattr(np, op)(a, safe))
        if op == "pow" and a.dtype.kind in "iu":  # negative exponents: ember-cpu's rule (numpy raises)
            return np.asarray(em.asarray(a, device="cpu") ** em.asarray(b, device="cpu"))
        return getattr(np, op)(a, b)


UNARY_CASES = [(op, d) for op, (dtypes, _) in catalog.UNARY.items() for d in dtypes]
BINARY_CASES = [(op, d) for op, (dtypes, _) in catalog.BINARY.items() for d in dtypes]


@pytest.mark.parametrize(("op", "dtype"), UNARY_CASES, ids=[f"{o}-{d}" for o, d in UNARY_CASES])
def test_unary(vk, op, dtype):
    result = dtype if catalog.UNARY[op][1] == "same" else "bool"
    for layout in ("contiguous", "transposed", "flipped", "strided"):
        x = make_tensor(_values(dtype, (7, 33), op), dtype, layout)
        assert x.device == vk
        assert_close(getattr(em, op)(x), _unary_reference(op, _as_float64(x)), result)


def _check_binary(op: str, a: em.Tensor, b: em.Tensor, result: str) -> None:
    x, y = _as_float64(a), _as_float64(b)
    atol = None
    if op == "logaddexp":  # cancellation near 0: an absolute error of a few ulp of the inputs
        with np.errstate(invalid="ignore"):
            atol = np.nan_to_num(8 * np.finfo(result).eps * np.maximum(np.abs(x), np.abs(y)), posinf=0.0)
    assert_close(getattr(em, op)(a, b), _binary_reference(op, x, y), result, atol=atol)


@pytest.mark.parametrize(("op", "dtype"), BINARY_CASES, ids=[f"{o}-{d}" for o, d in BINARY_CASES])
def test_binary_layouts_and_broadcasting(vk, op, dtype):
    result = dtype if catalog.BINARY[op][1] == "same" else "bool"
    for layout in LAYOUTS:
        a = make_tensor(_values(dtype, (6, 5, 9)), dtype, layout)
        _check_binary(op, a, make_tensor(_values(dtype, (6, 5, 9)), dtype, "flipped"), result)
    a = make_tensor(_values(dtype, (4, 1, 9)), dtype, "strided")  # broadcast on both sides
    _check_binary(op, a, make_tensor(_values(dtype, (3, 1)), dtype), result)
    scalar = make_tensor(_values(dtype, ()), dtype)  # 0-d with 0-d, and 0-d with n-d
    _check_binary(op, scalar, scalar, result)
    _check_binary(op, a, scalar, result)


def test_integer_division_edge_cases(vk):
    a = em.asarray([7, -7, 7, -7, 0, -(2**31), 5], dtype="int32")
    b = em.asarray([2, 2, -2, -2, 3, -1, 0], dtype="int32")
    assert em.floor_divide(a, b).tolist() == [3, -4, -4, 3, 0, -(2**31), 0]
    assert em.remainder(a, b).tolist() == [1, 1, -1, -1, 0, 0, 0]
    big = em.asarray([2**62, -(2**63)], dtype="int64")
    assert (big * 4).tolist() == [0, 0]  # wraps, as numpy
    assert em.abs(em.asarray([-(2**63)], dtype="int64")).tolist() == [-(2**63)]


def test_nan_semantics(vk):
    a = em.asarray([np.nan, 1.0, np.nan, -np.inf])
    b = em.asarray([1.0, np.nan, np.nan, np.inf])
    assert np.isnan(to_numpy(em.maximum(a, b))[:3]).all() and np.isnan(to_numpy(em.minimum(a, b))[:3]).all()
    assert em.not_equal(a, b).tolist() == [True, True, True, True]
    assert em.equal(a, a).tolist() == [False, True, False, True]
    assert em.less(a, b).tolist() == [False, False, False, True]


@pytest.mark.parametrize("src", catalog.DTYPES)
@pytest.mark.parametrize("dst", [*catalog.DTYPES, "float64", "int8", "uint8"])
def test_astype_every_pair(vk, src, dst):
    if src in catalog.FLOATS:
        values = np.array([0.0, -0.0, 1.5, -1.5, 2.5, -2.7, 1e10, -1e10, 65504, 7e4, np.nan, np.inf, -np.inf, 0.25])
    else:
        values = _values(src, (14,))
    for layout in ("contiguous", "flipped"):
        x = make_tensor(values, src, layout)
        ref = _as_float64(x)
        if dst in ("int32", "int64", "int8", "uint8") and src in catalog.FLOATS:  # truncate and saturate
            ref = float_to_integer(ref, dst)
        elif dst in ("int8", "uint8") and src != "bool":
            ref = ref.astype(np.int64).astype(dst)  # narrowing wraps
        elif dst == "bool":
            ref = ref != 0
        y = x.astype(dst)
        assert y.device == vk
        assert_close(y, ref.astype(np.float64) if dst.startswith("float") else ref, dst)


@pytest.mark.parametrize("src", catalog.FLOATS)
@pytest.mark.parametrize("dst", [*catalog.INTS, "int8", "int16", "uint8"])
def test_astype_float_to_integer_saturates(vk, src, dst):
    """NaN, +-inf and values just inside and just outside the range (shaders for int32 / int64,
    the host for the rest); asarray of the same numpy floats with an integer dtype converts on the
    host and must agree."""
    values = integer_edges(src, dst)
    want = float_to_integer(values, dst)
    for layout in ("contiguous", "flipped"):
        assert_close(make_tensor(values, src, layout).astype(dst), want, dst)
    assert_close(em.asarray(values.astype(src), dtype=dst), want, dst)


def test_copy_into_strided_views(vk):
    base = em.zeros((6, 8), dtype="float32")
    src = make_tensor(np.arange(12, dtype=np.float32).reshape(3, 4), "float32", "transposed")
    base[::2, 1::2] = src  # a strided destination written by the copy kernel
    expected = np.zeros((6, 8), np.float32)
    expected[::2, 1::2] = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert_close(base, expected, "float32")
    base[1, :] = em.asarray(7.0)  # broadcast source (stride 0) into a row
    expected[1, :] = 7.0
    assert_close(base, expected, "float32")


@pytest.mark.parametrize("dtype", catalog.DTYPES)
def test_full_and_where(vk, dtype):
    value = {"bool": True, "int32": -5, "int64": 2**40 + 3, "float16": 0.1, "float32": -1.25e-3}[dtype]
    t = em.full((3, 70), value, dtype=dtype)
    assert_close(t, np.full((3, 70), value, dtype=np.float64 if dtype.startswith("float") else dtype), dtype)
    cond = make_tensor(RNG.integers(0, 2, (4, 6)).astype(bool), "bool", "transposed")
    a = make_tensor(_values(dtype, (4, 6)), dtype, "flipped")
    b = make_tensor(_values(dtype, (6,)), dtype)
    assert_close(em.where(cond, a, b), np.where(to_numpy(cond), _as_float64(a), _as_float64(b)), dtype)


def test_zero_size_and_0d(vk):
    empty = em.zeros((0, 5), dtype="float32")
    assert (empty + empty).shape == (0, 5)
    assert em.exp(empty).shape == (0, 5)
    assert em.full((0,), 3, dtype="int32").shape == (0,)
    scalar = em.asarray(2.0)
    assert float(em.sqrt(scalar)) == pytest.approx(math.sqrt(2), rel=1e-6)
    assert_close(scalar * em.ones((2, 3)), np.full((2, 3), 2.0), "float32")


def test_beyond_one_dispatch(vk):
    """More elements than 65535 workgroups of 256 threads cover: the grid-stride loop."""
    n = 65535 * 256 + 1000
    x = em.arange(n, dtype="int32")
    y = x * 3 - 7
    got = np.asarray(y)
    assert got[0] == -7 and got[-1] == 3 * (n - 1) - 7
    assert (got[::9973] == 3 * np.arange(0, n, 9973) - 7).all()
