"""ember_cpu_matmul against numpy (computed in float64/complex128, or exactly for integers) for
every dtype, over the layouts the core can hand it: batched and broadcast batches (stride 0),
transposed, sliced and flipped operands, column-major and strided outputs, empty dims."""

from __future__ import annotations

import numpy as np
import pytest
from native_util import check, desc, lib, num_threads

BF16 = "bfloat16"   # uint16 arrays of bfloat16 bits
FLOATS = [np.float16, BF16, np.float32, np.float64, np.complex64, np.complex128]
INTS = [np.int8, np.uint8, np.int16, np.int32, np.int64]
ALL = [np.bool_, *INTS, *FLOATS]
RNG = np.random.default_rng(1234)


# ---- helpers ---------------------------------------------------------------------------------


def bf16_bits(x: np.ndarray) -> np.ndarray:
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)).astype(np.uint16)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def storage(dtype):
    return np.uint16 if dtype == BF16 else dtype


def code(dtype) -> int | None:
    return lib.EMBER_BFLOAT16 if dtype == BF16 else None


def random(shape, dtype) -> np.ndarray:
    if dtype == np.bool_:
        return RNG.random(shape) < 0.3
    if dtype in INTS:
        info = np.iinfo(dtype)
        return RNG.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True).astype(dtype)
    x = RNG.uniform(-1, 1, shape)
    if dtype in (np.complex64, np.complex128):
        x = x + 1j * RNG.uniform(-1, 1, shape)
    return bf16_bits(x) if dtype == BF16 else x.astype(dtype)


def as_exact(x: np.ndarray, dtype) -> np.ndarray:
    """The values an operand holds, widened losslessly (float64, complex128 or Python ints)."""
    if dtype == BF16:
        return bf16_values(x).astype(np.float64)
    if dtype == np.bool_ or dtype in INTS:
        return x.astype(object)
    return x.astype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def reference(a, b, dtype) -> np.ndarray:
    ref = np.matmul(as_exact(a, dtype), as_exact(b, dtype))
    if dtype == np.bool_:
        return (ref != 0).astype(np.bool_)
    if dtype in INTS:
        bits = np.dtype(dtype).itemsize * 8
        wrapped = np.vectorize(lambda v: v % 2**bits, otypes=[object])(ref) if ref.size else ref
        return wrapped.astype(np.uint64).astype(np.dtype(dtype).str.replace("i", "u")).view(dtype)
    return ref


def assert_matmul(out, a, b, dtype):
    ref = reference(a, b, dtype)
    got = bf16_values(out) if dtype == BF16 else out
    if dtype == np.bool_ or dtype in INTS:
        np.testing.assert_array_equal(got, ref)
        return
    # float16/bfloat16 accumulate in float32 and round once at the end; inputs lie in [-1, 1]
    # (|re|, |im| for complex), so the accumulated error is at most ~k * eps_acc * k-term sums.
    out_eps = {np.float16: 2.0**-11, BF16: 2.0**-8, np.float32: 2.0**-24, np.complex64: 2.0**-24}.get(dtype, 2.0**-53)
    acc_eps = 2.0**-24 if dtype in (np.float16, BF16) else out_eps
    k = a.shape[-1]
    atol = 2 * out_eps * max(np.abs(ref).max(initial=0.0), 1.0) + 4 * acc_eps * k * 2
    np.testing.assert_allclose(got.astype(ref.dtype), ref, rtol=2 * out_eps, atol=atol)


def run(out, a, b, dtype) -> int:
    c = code(dtype)
    return lib.ember_cpu_matmul(desc(out, c), desc(a, c), desc(b, c))


def matmul(a, b, dtype, out=None) -> np.ndarray:
    """Broadcasts the batch dims of a and b (stride 0, as the core does) and calls the kernel."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    if out is None:
        out = np.full((*batch, a.shape[-2], b.shape[-1]), 7, storage(dtype))   # garbage to overwrite
    check(run(out, a, b, dtype))
    return out


# ---- every dtype, plain and awkward layouts ----------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d if isinstance(d, str) else np.dtype(d).name)
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 4, 5), (17, 33, 9), (64, 70, 65)])
def test_plain(dtype, m, k, n):
    a, b = random((m, k), dtype), random((k, n), dtype)
    assert_matmul(matmul(a, b, dtype), a, b, dtype)


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d if isinstance(d, str) else np.dtype(d).name)
def test_batched_and_broadcast(dtype):
    a, b = random((2, 3, 6, 5), dtype), random((2, 3, 5, 4), dtype)
    assert_matmul(matmul(a, b, dtype), a, b, dtype)
    a1 = random((6, 5), dtype)                        # a broadcast over both batch dims
    out = matmul(a1, b, dtype)
    assert_matmul(out, np.broadcast_to(a1, (2, 3, 6, 5)), b, dtype)
    b1 = random((3, 5, 4), dtype)                     # b broadcast over the first batch dim
    out = matmul(a, b1, dtype)
    assert_matmul(out, a, np.broadcast_to(b1, (2, 3, 5, 4)), dtype)


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d if isinstance(d, str) else np.dtype(d).name)
def test_transposed_strided_flipped_operands(dtype):
    m, k, n = 7, 9, 6
    at = random((k, m), dtype).T                      # column-major a
    bt = random((n, k), dtype).T                      # column-major b
    assert_matmul(matmul(at, bt, dtype), at, bt, dtype)
    a_sl = random((2 * m, 3 * k), dtype)[::2, ::3]    # neither layout: packed
    b_fl = random((k, n), dtype)[::-1, ::-1]          # negative strides
    assert_matmul(matmul(a_sl, b_fl, dtype), a_sl, b_fl, dtype)
    a_pad = random((m, k + 5), dtype)[:, :k]          # row-major with a padded leading dim
    assert_matmul(matmul(a_pad, bt, dtype), a_pad, bt, dtype)
    bt_batched = np.swapaxes(random((3, n, k), dtype), -1, -2)
    a_batched = random((3, m, k), dtype)
    assert_matmul(matmul(a_batched, bt_batched, dtype), a_batched, bt_batched, dtype)


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d if isinstance(d, str) else np.dtype(d).name)
def test_awkward_outputs(dtype):
    m, k, n = 5, 8, 6
    a, b = random((2, m, k), dtype), random((2, k, n), dtype)
    col = np.swapaxes(np.zeros((2, n, m), storage(dtype)), -1, -2)     # column-major out
    matmul(a, b, dtype, out=col)
    assert_matmul(col, a, b, dtype)
    big = np.zeros((2, 2 * m, 3 * n), storage(dtype))
    strided = big[:, ::2, 1::3]                                       # no unit stride at all
    matmul(a, b, dtype, out=strided)
    assert_matmul(strided, a, b, dtype)
    assert not big[:, 1::2].any() and not big[:, :, 0::3].any()        # nothing else touched
    flipped = np.zeros((2, m, n), storage(dtype))[:, ::-1]
    matmul(a, b, dtype, out=flipped)
    assert_matmul(flipped, a, b, dtype)


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d if isinstance(d, str) else np.dtype(d).name)
def test_empty_dims(dtype):
    a, b = random((3, 4, 0), dtype), random((3, 0, 5), dtype)
    out = matmul(a, b, dtype)                         # K == 0: zeros over the garbage
    assert out.shape == (3, 4, 5) and not out.any()
    assert matmul(random((0, 4), dtype), random((4, 5), dtype), dtype).shape == (0, 5)
    assert matmul(random((3, 4), dtype), random((4, 0), dtype), dtype).shape == (3, 0)
    assert matmul(random((0, 3, 4), dtype), random((0, 4, 5), dtype), dtype).shape == (0, 3, 5)


# ---- paths that only larger problems take ----------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.float16, np.int32])
@pytest.mark.parametrize("threads", [1, 2, 3, 16])
def test_threaded_splits(dtype, threads):
    """One large product (split by rows or columns), odd batch counts (split batches and
    slices), many batches; any thread count gives the reference."""
    with num_threads(threads):
        for shape_a, shape_b in [((150, 120), (120, 130)), ((40, 150), (150, 260)),
                                 ((3, 70, 80), (3, 80, 90)), ((5, 60, 64), (5, 64, 48)),
                                 ((33, 20, 24), (33, 24, 16))]:
            a, b = random(shape_a, dtype), random(shape_b, dtype)
            assert_matmul(matmul(a, b, dtype), a, b, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.float16])
def test_batch_folded_into_rows(dtype):
    """x(B, T, K) @ W(K, N) with W broadcast: computed as one (B*T, K) product."""
    x, w = random((4, 25, 30), dtype), random((30, 20), dtype)
    assert_matmul(matmul(x, w, dtype), x, np.broadcast_to(w, (4, 30, 20)), dtype)
    v = random((6, 1, 30), dtype)                     # one row per batch
    assert_matmul(matmul(v, w, dtype), v, np.broadcast_to(w, (6, 30, 20)), dtype)
    xs = random((4, 25, 40), dtype)[:, :, :30]        # padded rows stack with stride 40
    assert_matmul(matmul(xs, w, dtype), xs, np.broadcast_to(w, (4, 30, 20)), dtype)
    gapped = np.zeros((8, 25, 20), storage(dtype))[::2]   # out's batches do not stack: no fold
    matmul(x, w, dtype, out=gapped)
    assert_matmul(gapped, x, np.broadcast_to(w, (4, 30, 20)), dtype)


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint8, np.bool_])
def test_integer_blocking_and_wrapping(dtype):
    """K and N beyond the C loop's blocks; products that overflow the dtype wrap like numpy."""
    m, k, n = 9, 600, 700
    if dtype == np.bool_:
        a, b = RNG.random((m, k)) < 0.002, RNG.random((k, n)) < 0.3
    else:
        info = np.iinfo(dtype)
        a = RNG.integers(info.min, info.max, size=(m, k), endpoint=True).astype(dtype)
        b = RNG.integers(info.min, info.max, size=(k, n), endpoint=True).astype(dtype)
    assert_matmul(matmul(a, b, dtype), a, b, dtype)


def test_float32_accuracy_large_k():
    a, b = random((8, 4096), np.float32), random((4096, 8), np.float32)
    assert_matmul(matmul(a, b, np.float32), a, b, np.float32)


def test_bool_inputs_that_are_not_zero_or_one():
    a = np.array([[2, 0], [0, 4]], np.uint8).view(np.bool_)
    b = np.array([[1, 0], [0, 255]], np.uint8).view(np.bool_)
    out = matmul(a, b, np.bool_)
    assert out.view(np.uint8).tolist() == [[1, 0], [0, 1]]


# ---- rejected descriptors --------------------------------------------------------------------


def test_rejects_bad_descriptors():
    a, b, out = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32), np.zeros((3, 5), np.float32)
    bad = lib.EMBER_ERR_INVALID_ARGUMENT
    assert lib.ember_cpu_matmul(desc(out), desc(a), desc(np.ones((3, 5), np.float32))) == bad  # K mismatch
    assert lib.ember_cpu_matmul(desc(np.zeros((3, 6), np.float32)), desc(a), desc(b)) == bad   # N mismatch
    assert lib.ember_cpu_matmul(desc(np.zeros((2, 5), np.float32)), desc(a), desc(b)) == bad   # M mismatch
    assert lib.ember_cpu_matmul(desc(out), desc(a.astype(np.float64)), desc(b)) == bad        # dtypes
    assert lib.ember_cpu_matmul(desc(np.zeros(5, np.float32)), desc(np.ones(4, np.float32)), desc(b)) == bad
    a3 = np.ones((2, 3, 4), np.float32)
    assert lib.ember_cpu_matmul(desc(np.zeros((2, 3, 5), np.float32)), desc(a3), desc(b)) == bad  # ndim
    b3 = np.ones((3, 4, 5), np.float32)
    assert lib.ember_cpu_matmul(desc(np.zeros((2, 3, 5), np.float32)), desc(a3), desc(b3)) == bad  # batch
    assert lib.ember_cpu_matmul(desc(out), desc(a), desc(b)) == lib.EMBER_OK
