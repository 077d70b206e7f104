"""Reductions over every axis (and axis sets), argmax/argmin, and matmul on vulkan:0 against
numpy float64 references, including strided inputs, keepdims, empty rows, rows long enough for
the multi-pass reductions, and batched / broadcast / transposed matmul operands.  Every test runs
on both shader families: the barrier-free ones CPU devices (lavapipe) get and the workgroup ones GPUs
get, so CI on lavapipe checks both."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from ember_vulkan import catalog, kernels, runtime
from tolerances import assert_close, eps, make_tensor, to_numpy

import ember_core as em

RNG = np.random.default_rng(99)


pytestmark = pytest.mark.usefixtures("shader_family")


def _values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "bool":
        return RNG.random(shape) < 0.7
    if dtype in catalog.INTS:
        return RNG.integers(-9, 10, shape).astype(dtype)
    return RNG.uniform(-1, 1, shape)


def _f64(t: em.Tensor) -> np.ndarray:
    arr = to_numpy(t)
    return arr.astype(np.float64) if arr.dtype.kind == "f" else arr


def _reference(op: str, x: np.ndarray, axis: tuple[int, ...]) -> np.ndarray:
    if op in ("sum", "prod") and x.dtype.kind in "bi":
        x = x.astype(np.int64)
    return getattr(np, op)(x, axis=axis)


def _sum_atol(op: str, x: np.ndarray, axis: tuple[int, ...], dtype: str) -> float | None:
    """Long float sums round at every partial step: allow a few ulp of the magnitude summed."""
    if op != "sum" or dtype not in (*catalog.FLOATS, *catalog.WIDE):
        return None
    count = max(1, int(np.prod([x.shape[a] for a in axis])))
    return 4 * eps(dtype) * np.sqrt(count) * float(np.abs(x).max(initial=0))


CASES = [(op, d) for op, (dtypes, _) in catalog.REDUCE.items() for d in dtypes]


@pytest.mark.parametrize(("op", "dtype"), CASES, ids=[f"{o}-{d}" for o, d in CASES])
def test_reductions_on_every_axis(vk, op, dtype):
    result_of = {"same": None, "bool": "bool"}[catalog.REDUCE[op][1]]
    shape = (4, 5, 6)
    x = make_tensor(_values(dtype, shape), dtype, "permuted")
    ref_in = _f64(x)
    axes_sets = [None, *[(a,) for a in range(3)], (0, 2), (1, 2), (0, 1)]
    for axis in axes_sets:
        axis_t = tuple(range(3)) if axis is None else axis
        got = getattr(em, op)(x, axis=axis)
        result = result_of or ("int64" if op in ("sum", "prod") and dtype in ("bool", *catalog.INTS) else dtype)
        assert_close(got, _reference(op, ref_in, axis_t), result, atol=_sum_atol(op, ref_in, axis_t, dtype))
    kept = getattr(em, op)(x, axis=1, keepdims=True)
    assert kept.shape == (4, 1, 6)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "int32"])
def test_long_rows_take_two_passes(vk, dtype):
    values = _values(dtype, (3, 70001))
    x = make_tensor(values, dtype, "transposed")
    ref = _f64(x)
    for axis in (1, None):
        axis_t = (0, 1) if axis is None else (axis,)
        result = dtype if dtype in catalog.FLOATS else "int64"
        assert_close(em.sum(x, axis=axis), ref.astype(np.int64 if dtype in catalog.INTS else np.float64).sum(axis=axis),
                     result, atol=_sum_atol("sum", ref, axis_t, dtype))
        assert_close(em.max(x, axis=axis), ref.max(axis=axis), dtype)
    flags = em.asarray(np.zeros(100000, bool))
    assert not bool(em.any(flags)) and bool(em.all(em.logical_not(flags)))


def test_reduction_edge_cases(vk):
    empty = em.zeros((3, 0), dtype="float32")
    assert em.sum(empty, axis=1).tolist() == [0.0, 0.0, 0.0]
    assert em.prod(empty, axis=1).tolist() == [1.0, 1.0, 1.0]
    assert em.any(empty, axis=1).tolist() == [False] * 3 and em.all(empty, axis=1).tolist() == [True] * 3
    assert float(em.sum(em.asarray(3.5))) == 3.5  # 0-d
    x = em.asarray([1.0, np.nan, 3.0])
    assert np.isnan(float(em.max(x))) and np.isnan(float(em.min(x)))
    assert em.sum(em.zeros((0,), dtype="int32")).tolist() == 0


@pytest.mark.parametrize("dtype", catalog.DTYPES)
def test_argmax_argmin(vk, dtype):
    x = make_tensor(_values(dtype, (5, 300)), dtype, "transposed")  # (300, 5) view, non-contiguous rows
    ref = to_numpy(x)
    for axis in (0, 1, None):
        assert_close(em.argmax(x, axis=axis), np.argmax(ref, axis=axis), "int64")
        assert_close(em.argmin(x, axis=axis), np.argmin(ref, axis=axis), "int64")
    if dtype in catalog.FLOATS:  # first NaN wins; ties go to the first index
        y = em.asarray([1.0, 3.0, np.nan, 3.0, np.nan], dtype=dtype)
        assert int(em.argmax(y)) == 2 and int(em.argmin(y)) == 2
        z = em.asarray([2.0, 3.0, 3.0, 0.0, 0.0], dtype=dtype)
        assert int(em.argmax(z)) == 1 and int(em.argmin(z)) == 3


MATMUL_SHAPES = [
    ((5, 7), (7, 3)),
    ((64, 64), (64, 64)),
    ((130, 17), (17, 70)),
    ((3, 33, 65), (3, 65, 66)),
    ((2, 1, 9, 4), (3, 4, 5)),  # batch broadcasting
    ((7,), (7, 4)),
    ((6, 7), (7,)),
    ((4, 0), (0, 3)),  # K = 0 gives zeros
    ((0, 4), (4, 3)),
]


@pytest.mark.parametrize("dtype", catalog.MATMUL_DTYPES)
@pytest.mark.parametrize(("sa", "sb"), MATMUL_SHAPES, ids=[f"{a}x{b}" for a, b in MATMUL_SHAPES])
def test_matmul(vk, dtype, sa, sb):
    for la, lb in (("contiguous", "contiguous"), ("transposed", "strided"), ("flipped", "permuted")):
        a, b = make_tensor(_values(dtype, sa), dtype, la), make_tensor(_values(dtype, sb), dtype, lb)
        x, y = _f64(a), _f64(b)
        k = sa[-1]
        atol = None
        if dtype in catalog.FLOATS:  # K products summed in float32: error grows with K
            atol = 2 * k * eps("float32") + (eps(dtype) if dtype == "float16" else 0)
        assert_close(a @ b, np.matmul(x, y), dtype, atol=atol)


def test_matmul_large(vk):
    a = make_tensor(RNG.uniform(-1, 1, (300, 257)), "float32")
    b = make_tensor(RNG.uniform(-1, 1, (257, 190)), "float32", "transposed")
    assert_close(a @ b, _f64(a) @ _f64(b), "float32", atol=2 * 257 * eps("float32"))


def test_reductions_keep_batch_order(vk):
    """sum then matmul then sum in one batch, read once: no hazard between dependent dispatches."""
    for shape in itertools.islice(itertools.product((1, 3), (2, 65)), 4):
        x = make_tensor(_values("float32", shape), "float32")
        total = em.sum((x @ x.mT) * 2.0)
        ref = _f64(x)
        assert_close(total, np.sum((ref @ ref.T) * 2.0), "float32", atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("length", [37, 5000, 70001])
def test_sum_and_prod_accumulate_in_float64_when_asked(vk, dtype, length):
    """dtype=float64 casts on the device and reduces in double (the float64 variants): serial passes on CPU
    devices, the shared-memory tree (one or two passes) on GPUs; no fallback (the vk fixture forbids it)."""
    x = make_tensor(_values(dtype, (3, length)), dtype, "transposed")
    ref = _f64(x)
    got = em.sum(x, axis=1, dtype="float64")
    assert got.device == vk
    assert_close(got, ref.sum(axis=1), "float64", atol=1e-12 * length)
    short = x[:, :8] * 0.5 + 1  # products of a few values near 1
    assert_close(em.prod(short, axis=1, dtype="float64"), _f64(short).prod(axis=1), "float64")


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_matmul_with_a_longer_k_than_a_loop_may_run_on_llvmpipe(vk, dtype):
    """CPU devices run K in slices (llvmpipe ends an invocation's loops after 65535 iterations: K = 70000
    gave the sum of 65533 products), each slice's product added into out."""
    k = 70001
    a = make_tensor(_values(dtype, (2, k)), dtype, "transposed")
    b = make_tensor(_values(dtype, (k, 3)), dtype)
    atol = 1e-6 * k if dtype in catalog.FLOATS else None  # float32 sums of 70001 products of [-1, 1] values
    assert_close(a @ b, _f64(a) @ _f64(b), dtype, atol=atol)


def test_argmax_past_the_loop_limit_is_declined_not_wrong(vk, monkeypatch):
    """On CPU devices, rows so long that an invocation would loop past llvmpipe's limit go to the next
    provider (shown with the limit lowered: 2 x 256 elements per invocation); GPUs have no such limit."""
    monkeypatch.setattr(kernels, "LOOP_LIMIT", 2)
    values = _values("float32", (3, 600))
    em.reset_fallback_report()
    with em.fallback_policy("allow"):
        got = em.argmax(make_tensor(values, "float32"), axis=1)
        short = em.argmax(make_tensor(values[:, :500], "float32"), axis=1)
    np.testing.assert_array_equal(to_numpy(got), values.astype(np.float32).argmax(axis=1))
    np.testing.assert_array_equal(to_numpy(short), values[:, :500].astype(np.float32).argmax(axis=1))
    declined = [1] if runtime.device(vk.index).is_cpu else []
    assert [e["calls"] for e in em.fallback_report() if e["op"] == "argmax"] == declined
