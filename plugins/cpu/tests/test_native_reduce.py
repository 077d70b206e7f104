"""ember_cpu_reduce, ember_cpu_arg_reduce and ember_cpu_scan against numpy (float64 references)."""

from __future__ import annotations

import numpy as np
import pytest
from native_util import check, desc, lib

SUM, PROD, MAX, MIN, ANY, ALL = (
    lib.EMBER_CPU_REDUCE_SUM,
    lib.EMBER_CPU_REDUCE_PROD,
    lib.EMBER_CPU_REDUCE_MAX,
    lib.EMBER_CPU_REDUCE_MIN,
    lib.EMBER_CPU_REDUCE_ANY,
    lib.EMBER_CPU_REDUCE_ALL,
)
NP_OPS = {SUM: np.sum, PROD: np.prod, MAX: np.max, MIN: np.min, ANY: np.any, ALL: np.all}
BF16 = "bfloat16"  # stands for a uint16 array of bfloat16 bits
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8]
FLOATS = [np.float16, BF16, np.float32, np.float64]
COMPLEX = [np.complex64, np.complex128]
NUMERIC = INTS + FLOATS + COMPLEX
REAL = [np.bool_, *INTS, *FLOATS]
# relative tolerance of a result rounded to the dtype (float64 reference)
RTOL = {np.float16: 4e-3, BF16: 2e-2, np.float32: 2e-5, np.float64: 1e-12, np.complex64: 2e-5, np.complex128: 1e-12}

rng = np.random.default_rng(1234)


# ---- bfloat16 and dtype plumbing -------------------------------------------------------------


def to_bf16(a):
    """float array -> uint16 bfloat16 bits (round to nearest even, NaN kept)."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(a, np.float32))
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), r)


def from_bf16(b):
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


def code(dt):
    return lib.EMBER_BFLOAT16 if dt is BF16 else None


def storage(dt):
    return np.dtype(np.uint16) if dt is BF16 else np.dtype(dt)


def values(dt):
    """Storage array -> float values (bfloat16 decoded)."""
    return (lambda a: from_bf16(a)) if dt is BF16 else (lambda a: a)


def make(dt, shape, low=-3, high=3):
    """Random array of dtype dt (bfloat16: uint16 bits)."""
    if dt is np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(np.dtype(storage(dt)), np.integer) and dt is not BF16:
        info = np.iinfo(dt)
        return rng.integers(max(low, info.min), min(high, info.max) + 1, size=shape).astype(dt)
    x = rng.uniform(low, high, size=shape)
    if dt in COMPLEX:
        x = x + 1j * rng.uniform(low, high, size=shape)
        return x.astype(dt)
    if dt is BF16:
        return to_bf16(x)
    return x.astype(dt)


def layouts(a):
    """Views of `a`-like data with many stride patterns: (name, view)."""
    yield "contiguous", a
    if a.ndim >= 2:
        yield "transposed", np.ascontiguousarray(np.swapaxes(a, 0, -1)).swapaxes(0, -1)
    yield "flipped", np.ascontiguousarray(a[(slice(None, None, -1),) * a.ndim])[(slice(None, None, -1),) * a.ndim]
    big = np.zeros(tuple(2 * s for s in a.shape), a.dtype)
    view = big[(slice(None, None, 2),) * a.ndim]
    view[...] = a
    yield "strided", view
    if a.ndim >= 1:
        yield "broadcast", np.broadcast_to(a[..., :1], a.shape)


def run_reduce(op, x, axes, dt, out_dtype=None):
    """Reduce x over `axes` the way the core calls the kernel: reduced axes moved to the end."""
    axes = tuple(sorted(a % x.ndim for a in axes)) if x.ndim else ()
    keep = [d for d in range(x.ndim) if d not in axes]
    xp = x.transpose(keep + list(axes))
    out = np.empty(xp.shape[: len(keep)], dtype=out_dtype or x.dtype)
    out_code = None if out_dtype is not None else code(dt)
    check(lib.ember_cpu_reduce(op, desc(out, out_code), desc(xp, code(dt)), len(axes)))
    return out


def reference(op, x, axes, dt):
    v = values(dt)(x)
    if op in (ANY, ALL):
        return NP_OPS[op](v, axis=axes)
    if dt in INTS:
        return NP_OPS[op](x, axis=axes, dtype=dt)  # numpy wraps the same way
    wide = v.astype(np.complex128 if dt in COMPLEX else np.float64)
    return NP_OPS[op](wide, axis=axes)


def assert_close(got, want, dt, scale=None, msg=""):
    """Rounding errors are relative to `scale` (for a sum: the sum of |x|), not to the result."""
    got = values(dt)(got)
    if dt in INTS or dt is np.bool_ or got.dtype == np.bool_:
        np.testing.assert_array_equal(got, want, err_msg=msg)
    else:
        scale = np.abs(want) if scale is None else scale
        err = np.abs(got.astype(want.dtype) - want)
        assert np.all(err <= RTOL[dt] * (scale + 1)), (msg, np.max(err / (scale + 1)))


# ---- reductions -----------------------------------------------------------------------------

AXES = [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)]


@pytest.mark.parametrize("dt", NUMERIC, ids=str)
@pytest.mark.parametrize("op", [SUM, PROD])
def test_sum_prod_layouts(op, dt):
    base = make(dt, (5, 7, 33), -2, 2) if op == SUM else make(dt, (4, 3, 6), 1, 2)
    if op == PROD and dt not in INTS:  # keep products near 1
        base = make(dt, (4, 3, 6), 0.7, 1.3)
    for name, x in layouts(base):
        for axes in AXES:
            want = reference(op, x, axes, dt)
            scale = np.sum(np.abs(values(dt)(x).astype(np.complex128)), axis=axes) if op == SUM else None
            assert_close(run_reduce(op, x, axes, dt), want, dt, scale, f"{name} {axes}")


@pytest.mark.parametrize("dt", REAL, ids=str)
@pytest.mark.parametrize("op", [MAX, MIN])
def test_max_min_layouts(op, dt):
    base = make(dt, (6, 5, 40), -100, 100)
    for name, x in layouts(base):
        for axes in AXES:
            got = run_reduce(op, x, axes, dt)
            want = NP_OPS[op](values(dt)(x), axis=axes)
            np.testing.assert_array_equal(values(dt)(got), want, err_msg=f"{name} {axes}")


@pytest.mark.parametrize("dt", [np.bool_, *NUMERIC], ids=str)
@pytest.mark.parametrize("op", [ANY, ALL])
def test_any_all(op, dt):
    base = make(dt, (4, 6, 9), 0, 2)  # plenty of zeros and non-zeros
    if dt in COMPLEX:
        base = (rng.integers(0, 2, (4, 6, 9)) * 1j + rng.integers(0, 2, (4, 6, 9))).astype(dt)
    for name, x in layouts(base):
        for axes in AXES:
            got = run_reduce(op, x, axes, dt, out_dtype=np.bool_)
            np.testing.assert_array_equal(got, NP_OPS[op](values(dt)(x), axis=axes), err_msg=name)


def test_truthiness_of_special_values():
    x = np.array([np.nan, 0.0, -0.0], np.float32)
    assert run_reduce(ANY, x, (0,), np.float32, np.bool_)
    assert not run_reduce(ANY, x[1:], (0,), np.float32, np.bool_)
    h = np.array([0x8000, 0x0000], np.uint16)  # -0.0 and 0.0
    assert not run_reduce(ANY, h.view(np.float16), (0,), np.float16, np.bool_)
    assert not run_reduce(ANY, h, (0,), BF16, np.bool_)
    c = np.array([0j, 1j], np.complex64)
    assert run_reduce(ANY, c, (0,), np.complex64, np.bool_)
    assert not run_reduce(ALL, c, (0,), np.complex64, np.bool_)


def test_integer_sums_wrap():
    x = np.full(1000, 100, np.int8)
    assert run_reduce(SUM, x, (0,), np.int8) == np.sum(x, dtype=np.int8)
    y = np.full(70000, 2**62, np.int64)
    assert run_reduce(SUM, y, (0,), np.int64) == np.sum(y)
    z = np.full(40, 3, np.int16)
    assert run_reduce(PROD, z, (0,), np.int16) == np.prod(z, dtype=np.int16)


@pytest.mark.parametrize("dt", [np.float16, BF16, np.float32, np.float64])
def test_max_min_propagate_nan(dt):
    v = np.arange(100, dtype=np.float32).reshape(4, 25)
    v[1, 7] = np.nan
    v[3, 0] = np.nan
    x = to_bf16(v) if dt is BF16 else v.astype(dt)
    for op, f in ((MAX, np.max), (MIN, np.min)):
        for axes in [(1,), (0,), (0, 1)]:
            got = values(dt)(run_reduce(op, x, axes, dt))
            np.testing.assert_array_equal(got, f(v, axis=axes))


def test_float16_every_bit_pattern():
    """The strided and column paths convert float16 with integer code: check all 65536 values."""
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    x = np.zeros((65536, 2), np.uint16)
    x[:, 0] = h
    col = x.view(np.float16)[:, :1]  # strided; max over one element converts there and back
    got = run_reduce(MAX, col, (1,), np.float16)
    ref = h.view(np.float16)
    nan = np.isnan(ref)
    np.testing.assert_array_equal(got.view(np.uint16)[~nan], h[~nan])
    assert np.all(np.isnan(got[nan]))
    # the column path: two rows, added in float32 in the same order as numpy, then rounded
    y = np.random.default_rng(5).integers(0, 65536, (2, 300)).astype(np.uint16).view(np.float16)
    with np.errstate(all="ignore"):
        want = (y[0].astype(np.float32) + y[1].astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(run_reduce(SUM, y, (0,), np.float16), want)


def test_empty_reductions_give_identity():
    x = np.zeros((3, 0), np.float32)
    np.testing.assert_array_equal(run_reduce(SUM, x, (1,), np.float32), [0, 0, 0])
    np.testing.assert_array_equal(run_reduce(PROD, x, (1,), np.float32), [1, 1, 1])
    np.testing.assert_array_equal(run_reduce(ANY, x, (1,), np.float32, np.bool_), [False] * 3)
    np.testing.assert_array_equal(run_reduce(ALL, x, (1,), np.float32, np.bool_), [True] * 3)
    assert run_reduce(PROD, np.zeros(0, np.int32), (0,), np.int32) == 1
    # nothing to write at all
    assert run_reduce(SUM, np.zeros((0, 5), np.float64), (1,), np.float64).shape == (0,)


def test_zero_d_and_no_reduced_dims():
    x = np.array(2.5, np.float64)
    assert run_reduce(SUM, x, (), np.float64) == 2.5
    assert run_reduce(ANY, x, (), np.float64, np.bool_)
    y = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(run_reduce(MAX, y, (), np.float32), y)


def pairwise_error(n, dt=np.float32):
    x = rng.random(n, dtype=np.float64).astype(dt)
    exact = x.astype(np.float64).sum()
    ours = float(run_reduce(SUM, x, (0,), dt))
    return abs(ours - exact) / exact, abs(float(x.sum()) - exact) / exact


def test_float32_sum_accuracy_matches_numpy():
    ours, numpy_err = pairwise_error(10_000_000)
    # a running float32 sum is ~1e-3 off here; pairwise summation stays near numpy's error
    assert ours < max(4 * numpy_err, 2e-6), (ours, numpy_err)


def test_float32_sum_of_constant_is_exact():
    x = np.full(1 << 24, 0.1, np.float32)
    got = float(run_reduce(SUM, x, (0,), np.float32))
    assert abs(got - (1 << 24) * float(np.float32(0.1))) / got < 1e-6


@pytest.mark.parametrize("dt", [np.float16, BF16])
def test_half_sums_accumulate_in_float32(dt):
    v = rng.random(100_000).astype(np.float32) * 0.5  # sum stays below float16's 65504
    x = to_bf16(v) if dt is BF16 else v.astype(np.float16)
    exact = values(dt)(x).astype(np.float64).sum()
    got = float(values(dt)(np.array(run_reduce(SUM, x, (0,), dt))))
    assert abs(got - exact) / exact < RTOL[dt]


def test_axis0_of_matrix_accuracy_and_values():
    """Pattern (b): reduced rows strided, output columns unit-stride."""
    x = rng.random((20000, 300), dtype=np.float64).astype(np.float32)
    got = run_reduce(SUM, x, (0,), np.float32)
    exact = x.astype(np.float64).sum(0)
    assert np.max(np.abs(got - exact) / exact) < 1e-5
    # other ops and dtypes take the same path
    for op in (PROD, MAX, MIN):
        y = make(np.float64, (500, 64), 0.99, 1.01)
        np.testing.assert_allclose(run_reduce(op, y, (0,), np.float64), NP_OPS[op](y, axis=0), rtol=1e-12)
    z = make(np.int32, (3000, 40), -1000, 1000)
    np.testing.assert_array_equal(run_reduce(SUM, z, (0,), np.int32), z.sum(0, dtype=np.int32))
    w = make(np.float32, (7, 100, 50))
    # absolute error scale: sum of |x| ~ 100 * 1.5, float32 epsilon 6e-8
    np.testing.assert_allclose(run_reduce(SUM, w, (0, 1), np.float32), w.astype(np.float64).sum((0, 1)), atol=1e-3)
    np.testing.assert_allclose(run_reduce(SUM, w, (1,), np.float32), w.astype(np.float64).sum(1), atol=1e-4)


def test_large_reductions_use_threads_consistently():
    """Above the parallel grain: chunked whole-array sums, few-output sums, column sums."""
    x = rng.random((2, 3_000_000), dtype=np.float32)
    np.testing.assert_allclose(run_reduce(SUM, x, (1,), np.float32), x.astype(np.float64).sum(1), rtol=1e-6)
    np.testing.assert_allclose(run_reduce(SUM, x, (0, 1), np.float32), x.astype(np.float64).sum(), rtol=1e-6)
    np.testing.assert_array_equal(run_reduce(MAX, x, (1,), np.float32), x.max(1))
    y = x.reshape(-1, 40)
    np.testing.assert_allclose(run_reduce(SUM, y, (0,), np.float32), y.astype(np.float64).sum(0), rtol=1e-6)
    t = y.T  # rows strided: transposed contiguous
    np.testing.assert_allclose(run_reduce(SUM, t, (1,), np.float32), t.astype(np.float64).sum(1), rtol=1e-6)
    z = np.broadcast_to(np.float32(0.5), (1 << 20,))
    assert run_reduce(SUM, z, (0,), np.float32) == 0.5 * (1 << 20)


def test_result_does_not_depend_on_thread_count():
    if not hasattr(lib, "ember_cpu_set_num_threads"):
        pytest.skip("runtime not linked")
    x = rng.random(5_000_001, dtype=np.float32)
    y = rng.random((4096, 64), dtype=np.float32)
    old = lib.ember_cpu_get_num_threads()
    try:
        results = []
        for n in (1, 2, 3, 16):
            lib.ember_cpu_set_num_threads(n)
            results.append((run_reduce(SUM, x, (0,), np.float32), run_reduce(SUM, y, (0,), np.float32)))
    finally:
        lib.ember_cpu_set_num_threads(old)
    for r in results[1:]:
        np.testing.assert_array_equal(r[0], results[0][0])
        np.testing.assert_array_equal(r[1], results[0][1])


def test_reduce_rejects_bad_descriptors():
    x = np.zeros((3, 4), np.float32)
    out = np.zeros(3, np.float32)
    assert lib.ember_cpu_reduce(SUM, desc(out), desc(x), 2) == lib.EMBER_ERR_INVALID_ARGUMENT
    assert lib.ember_cpu_reduce(SUM, desc(np.zeros(4, np.float32)), desc(x), 1) == lib.EMBER_ERR_INVALID_ARGUMENT
    assert lib.ember_cpu_reduce(SUM, desc(out.astype(np.float64)), desc(x), 1) == lib.EMBER_ERR_INVALID_ARGUMENT
    assert lib.ember_cpu_reduce(ANY, desc(out), desc(x), 1) == lib.EMBER_ERR_INVALID_ARGUMENT
    assert lib.ember_cpu_reduce(99, desc(out), desc(x), 1) == lib.EMBER_ERR_INVALID_ARGUMENT
    assert lib.ember_cpu_reduce(SUM, desc(out), desc(x), -1) == lib.EMBER_ERR_INVALID_ARGUMENT
    bad = desc(x)
    bad.dtype = 42
    assert lib.ember_cpu_reduce(SUM, desc(out), bad, 1) == lib.EMBER_ERR_INVALID_ARGUMENT
    deep = desc(x)
    deep.ndim = 17
    assert lib.ember_cpu_reduce(SUM, desc(out), deep, 1) == lib.EMBER_ERR_INVALID_ARGUMENT
    c = np.zeros((3, 4), np.complex64)
    assert lib.ember_cpu_reduce(MAX, desc(c[:, 0]), desc(c), 1) == lib.EMBER_ERR_UNSUPPORTED
    b = np.zeros((3, 4), np.bool_)
    assert lib.ember_cpu_reduce(SUM, desc(b[:, 0]), desc(b), 1) == lib.EMBER_ERR_UNSUPPORTED


# ---- arg-reductions -----------------------------------------------------------------------------


def run_arg(op, x, dt, axis=-1):
    xp = np.moveaxis(x, axis, -1)
    out = np.empty(xp.shape[:-1], np.int64)
    check(lib.ember_cpu_arg_reduce(op, desc(out), desc(xp, code(dt))))
    return out


@pytest.mark.parametrize("dt", REAL, ids=str)
def test_argmax_argmin(dt):
    base = make(dt, (7, 5, 30), -5, 5)  # many ties: the first wins
    for name, x in layouts(base):
        for axis in (0, 1, 2):
            v = values(dt)(x)
            np.testing.assert_array_equal(run_arg(lib.EMBER_CPU_ARGMAX, x, dt, axis), v.argmax(axis), err_msg=name)
            np.testing.assert_array_equal(run_arg(lib.EMBER_CPU_ARGMIN, x, dt, axis), v.argmin(axis), err_msg=name)


@pytest.mark.parametrize("dt", [np.float16, BF16, np.float32, np.float64])
def test_arg_first_nan_wins(dt):
    v = rng.standard_normal((3, 50)).astype(np.float32)
    v[0, 10] = v[0, 30] = np.nan
    v[2, 0] = np.nan
    v[1, 5] = 100.0
    x = to_bf16(v) if dt is BF16 else v.astype(dt)
    assert list(run_arg(lib.EMBER_CPU_ARGMAX, x, dt)) == [10, 5, 0]
    assert list(run_arg(lib.EMBER_CPU_ARGMIN, x, dt))[::2] == [10, 0]


def test_argmax_long_rows_parallel():
    x = rng.random((2, 300_000), dtype=np.float32)
    x[0, 123_456] = 2.0
    x[0, 250_000] = 2.0  # a tie in a later chunk: the first still wins
    x[1, 200_000] = np.nan
    x[1, 299_999] = np.nan
    assert list(run_arg(lib.EMBER_CPU_ARGMAX, x, np.float32)) == [123_456, 200_000]
    assert list(run_arg(lib.EMBER_CPU_ARGMIN, x, np.float32)) == [x[0].argmin(), 200_000]
    y = rng.integers(-5, 5, 1_000_000).astype(np.int64)
    assert run_arg(lib.EMBER_CPU_ARGMAX, y, np.int64) == y.argmax()


@pytest.mark.parametrize("dt", REAL, ids=str)
def test_arg_blocks_ties_and_nan(dt):
    """Contiguous rows are scanned in blocks: ties across blocks, NaN in a later block."""
    v = np.zeros((3, 5000), np.float32)
    v[:, 100] = v[:, 3000] = 1  # tie: the first wins
    v[:, 200] = v[:, 4000] = -1
    if dt in FLOATS:
        v[1, 4500] = np.nan
        v[2, 2500] = np.nan
        v[2, 10] = np.nan
    x = to_bf16(v) if dt is BF16 else v.astype(dt)
    if dt in FLOATS:
        assert values(dt)(x).argmax(1).tolist() == [100, 4500, 10]
    assert run_arg(lib.EMBER_CPU_ARGMAX, x, dt).tolist() == values(dt)(x).argmax(1).tolist()
    assert run_arg(lib.EMBER_CPU_ARGMIN, x, dt).tolist() == values(dt)(x).argmin(1).tolist()


def test_arg_signed_zero():
    x = np.array([-0.0, 0.0, -0.0], np.float32)
    assert run_arg(lib.EMBER_CPU_ARGMAX, x, np.float32) == np.argmax(x) == 0
    assert run_arg(lib.EMBER_CPU_ARGMIN, x, np.float32) == np.argmin(x) == 0


def test_arg_reduce_errors():
    x = np.zeros((3, 0), np.float32)
    assert lib.ember_cpu_arg_reduce(0, desc(np.zeros(3, np.int64)), desc(x)) == lib.EMBER_ERR_INVALID_ARGUMENT
    y = np.zeros((3, 4), np.float32)
    assert lib.ember_cpu_arg_reduce(0, desc(np.zeros(3, np.int32)), desc(y)) == lib.EMBER_ERR_INVALID_ARGUMENT
    assert lib.ember_cpu_arg_reduce(2, desc(np.zeros(3, np.int64)), desc(y)) == lib.EMBER_ERR_INVALID_ARGUMENT
    c = np.zeros((3, 4), np.complex128)
    assert lib.ember_cpu_arg_reduce(0, desc(np.zeros(3, np.int64)), desc(c)) == lib.EMBER_ERR_UNSUPPORTED
    # no rows: nothing to do
    check(lib.ember_cpu_arg_reduce(0, desc(np.zeros(0, np.int64)), desc(np.zeros((0, 4), np.float32))))


# ---- scans -------------------------------------------------------------------------------------


def run_scan(op, x, dt, axis=-1, out=None):
    xp = np.moveaxis(x, axis, -1)
    out = np.empty(xp.shape, xp.dtype) if out is None else out
    check(lib.ember_cpu_scan(op, desc(out, code(dt)), desc(xp, code(dt))))
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("dt", NUMERIC, ids=str)
def test_cumsum_cumprod(dt):
    for op, f in ((lib.EMBER_CPU_SCAN_SUM, np.cumsum), (lib.EMBER_CPU_SCAN_PROD, np.cumprod)):
        base = make(dt, (4, 5, 12), -3, 3) if op == lib.EMBER_CPU_SCAN_SUM else make(dt, (4, 5, 12), 1, 2)
        if op == lib.EMBER_CPU_SCAN_PROD and dt not in INTS:
            base = make(dt, (4, 5, 12), 0.8, 1.2)
        for name, x in layouts(base):
            for axis in (0, 1, 2):
                got = run_scan(op, x, dt, axis)
                if dt in INTS:
                    np.testing.assert_array_equal(got, f(x, axis=axis, dtype=dt), err_msg=name)
                else:
                    wide = values(dt)(x).astype(np.complex128 if dt in COMPLEX else np.float64)
                    scale = np.cumsum(np.abs(wide), axis=axis) if f is np.cumsum else None
                    assert_close(got, f(wide, axis=axis), dt, scale, name)


def test_scan_in_place_zero_d_and_empty():
    x = rng.standard_normal((50, 70))
    want = np.cumsum(x, axis=1)
    check(lib.ember_cpu_scan(lib.EMBER_CPU_SCAN_SUM, desc(x), desc(x)))
    np.testing.assert_allclose(x, want, rtol=1e-12)
    s = np.array(3.0)
    out = np.empty((), np.float64)
    check(lib.ember_cpu_scan(lib.EMBER_CPU_SCAN_PROD, desc(out), desc(s)))
    assert out == 3.0
    e = np.zeros((3, 0), np.float32)
    check(lib.ember_cpu_scan(lib.EMBER_CPU_SCAN_SUM, desc(e), desc(e)))
    big = rng.random((64, 4096), dtype=np.float32)
    np.testing.assert_allclose(run_scan(lib.EMBER_CPU_SCAN_SUM, big, np.float32), np.cumsum(big, axis=1), rtol=1e-5)


def test_scan_errors():
    x = np.zeros((3, 4), np.float32)
    assert lib.ember_cpu_scan(0, desc(np.zeros((3, 4), np.float64)), desc(x)) == lib.EMBER_ERR_INVALID_ARGUMENT
    assert lib.ember_cpu_scan(0, desc(np.zeros((4, 3), np.float32)), desc(x)) == lib.EMBER_ERR_INVALID_ARGUMENT
    assert lib.ember_cpu_scan(5, desc(x), desc(x)) == lib.EMBER_ERR_INVALID_ARGUMENT
    b = np.zeros(4, np.bool_)
    assert lib.ember_cpu_scan(0, desc(b), desc(b)) == lib.EMBER_ERR_UNSUPPORTED
