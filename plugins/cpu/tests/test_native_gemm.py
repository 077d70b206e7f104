"""ember-cpu's own float32 GEMM (csrc/gemm_f32.c), through ember_cpu_matmul.

matmul.c sends float32 products of at least 128^3 multiply-adds and 32 columns per matrix there
(on AVX-512 machines; elsewhere the same calls test OpenBLAS), so every shape below is at least
that large while its M, K or N takes the awkward values: 1, below and above the 14 x 32
micro-tile and the 512-deep K slices and 512-wide panels of b, odd (N below 32 checks the hand-over to OpenBLAS).
Two kinds of check:

* exact: small-integer inputs make every product and partial sum exact in float32, so any order of
  summation must give numpy's float64 result bit for bit: a dropped, doubled or misplaced term
  cannot hide inside a tolerance;
* rounded: uniform [-1, 1) inputs against float64, within the worst-case float32 summation bound
  |err| <= K u / (1 - K u) * (|a| @ |b|), u = 2^-24, whatever the blocking.

Outputs start as NaN: the kernel must never read `out` before writing it (beta = 0).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from native_util import check, desc, ffi, lib, num_threads

RNG = np.random.default_rng(2024)
AWKWARD = [1, 7, 15, 16, 17, 31, 33, 127, 129, 511, 513, 1025]
NATIVE_MIN_MACS = 128**3   # matmul.c's threshold for the native kernel


def other_extent(v: int) -> int:
    """An odd extent for the two other dims so that the product reaches the native kernel."""
    return math.isqrt(int(1.1 * NATIVE_MIN_MACS) // v) + 1 | 1


def integers(shape) -> np.ndarray:
    return RNG.integers(-4, 5, size=shape).astype(np.float32)


def uniform(shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Broadcasts the batch dims of a and b (stride 0, as the core does) and calls the kernel."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    if out is None:
        out = np.full((*batch, a.shape[-2], b.shape[-1]), np.nan, np.float32)
    check(lib.ember_cpu_matmul(desc(out), desc(a), desc(b)))
    return out


def assert_exact(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    np.testing.assert_array_equal(got, np.matmul(a.astype(np.float64), b.astype(np.float64)))


def assert_rounded(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    k, u = a.shape[-1], 2.0**-24
    bound = k * u / (1 - k * u) * np.matmul(np.abs(a64), np.abs(b64)) + 1e-30
    err = np.abs(got - np.matmul(a64, b64))
    assert not np.isnan(got).any(), "out was read before it was written"
    assert (err <= bound).all(), f"max error {err.max():.3g} beyond the float32 bound"


# ---- shapes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("v", AWKWARD)
@pytest.mark.parametrize("role", ["M", "K", "N"])
def test_awkward_extents_exact(role, v):
    w = other_extent(v)
    m, k, n = {"M": (v, w, w), "K": (w, v, w), "N": (w, w, v)}[role]
    a, b = integers((m, k)), integers((k, n))
    assert_exact(matmul(a, b), a, b)


@pytest.mark.parametrize("m,k,n", [(129, 513, 127), (33, 3000, 31), (1, 5000, 513), (513, 4100, 1),
                                   (300, 700, 600)])
def test_rounding_and_long_k(m, k, n):
    a, b = uniform((m, k)), uniform((k, n))
    assert_rounded(matmul(a, b), a, b)


@pytest.mark.parametrize("threads", [1, 2])
def test_mlp_training_shapes(threads):
    """A 784-256-256 MLP step at batch 128: forward products, and the backward ones whose left or right
    operand is a transposed view (x.T @ grad, grad @ w.T), each read in place."""
    x, w1, w2 = integers((128, 784)), integers((784, 256)), integers((256, 256))
    g1 = integers((128, 256))
    with num_threads(threads):
        for a, b in [(x, w1), (g1, w2), (g1.T, x), (g1, w1.T), (x.T, g1)]:
            assert_exact(matmul(a, b), a, b)


def test_k_zero_writes_zeros():
    out = matmul(uniform((200, 0)), uniform((0, 300)))
    assert out.shape == (200, 300) and not out.any()


# ---- layouts: every operand read and written in place, whatever its strides -----------------


def test_transposed_strided_flipped_operands():
    m, k, n = 131, 257, 140
    a_t = integers((k, m)).T                             # column-major a
    b_t = integers((n, k)).T                             # column-major b
    a_sl = integers((2 * m, 3 * k))[::2, ::3]            # no unit stride
    b_fl = integers((k, n))[::-1, ::-1]                  # negative strides
    b_row = np.broadcast_to(integers((1, n)), (k, n))    # stride 0: one row repeated
    for a, b in [(a_t, b_t), (a_sl, b_fl), (a_t, b_fl), (a_sl, b_row)]:
        assert_exact(matmul(a, b), a, b)


def test_awkward_outputs():
    m, k, n = 140, 200, 131
    a, b = integers((m, k)), integers((k, n))
    col = np.full((n, m), np.nan, np.float32).T          # column-major out
    assert_exact(matmul(a, b, out=col), a, b)
    big = np.zeros((2 * m, 3 * n), np.float32)
    strided = big[::2, 1::3]                             # no unit stride at all
    assert_exact(matmul(a, b, out=strided), a, b)
    assert not big[1::2].any() and not big[:, 0::3].any()   # nothing else touched
    flipped = np.full((m, n), np.nan, np.float32)[::-1, ::-1]
    assert_exact(matmul(a, b, out=flipped), a, b)


# ---- batches and threads ---------------------------------------------------------------------


@pytest.mark.parametrize("threads", [1, 2, 3, 16])
def test_batched_and_broadcast(threads):
    with num_threads(threads):
        for batch in [1, 2, 3, 4, 17]:                   # sequential, split evenly, many
            a, b = integers((batch, 130, 129)), integers((batch, 129, 131))
            assert_exact(matmul(a, b), a, b)
        x, w = integers((3, 50, 260)), integers((260, 170))   # w broadcast: folded into rows
        assert_exact(matmul(x, w), x, np.broadcast_to(w, (3, 260, 170)))
        a1, b2 = integers((140, 150)), integers((2, 3, 150, 141))   # a broadcast over both dims
        assert_exact(matmul(a1, b2), np.broadcast_to(a1, (2, 3, 140, 150)), b2)


@pytest.mark.parametrize("m,k,n", [(1000, 700, 900), (20, 1500, 2000), (2000, 300, 20)])
def test_one_and_two_threads_agree(m, k, n):
    """Rows split across threads, or columns when M is short: every split stays within float32's bound."""
    a, b = uniform((m, k)), uniform((k, n))
    with num_threads(1):
        one = matmul(a, b)
    with num_threads(2):
        two = matmul(a, b)
    assert_rounded(one, a, b)
    assert_rounded(two, a, b)


def test_float16_goes_through_float32():
    a, b = integers((150, 260)).astype(np.float16), integers((260, 170)).astype(np.float16)
    out = np.zeros((150, 170), np.float16)
    check(lib.ember_cpu_matmul(desc(out), desc(a), desc(b)))
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float16)
    np.testing.assert_array_equal(out, ref)


def linear(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, relu: bool) -> np.ndarray:
    out = np.full((x.shape[0], w.shape[0]), np.nan, x.dtype)
    check(lib.ember_cpu_linear(desc(out), desc(x), desc(w), desc(bias) if bias is not None else ffi.NULL,
                               int(relu)))
    return out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("m,k,n", [
    (3, 256, 40),       # few rows: the dot kernel, which adds bias and clamps per 4 columns
    (100, 70, 20),      # thin output: the dot kernel
    (20, 30, 40),       # small: OpenBLAS, then linear.c's separate epilogue pass
    (300, 1100, 1100),  # wider than tall: columns split between threads; three K slices, edge panels
    (1025, 600, 45),    # rows split; the last micro-panel has 13 columns
    (150, 260, 170),
])
def test_linear_epilogue_in_every_path(m, k, n, with_bias, relu, threads):
    """Bias and relu are applied once, after the whole sum (the last K slice of the GEMM, the dot
    kernel's store, or the epilogue pass): exact against float64, NaN rows stay NaN, clamped
    zeros are +0.  The weight is (N, K) row-major, so the kernel reads w.T as a column-major view."""
    x, w = integers((m, k)), integers((n, k))
    x[min(1, m - 1), 2] = np.nan
    bias = integers((n,)) + 0.5 if with_bias else None
    with num_threads(threads):
        got = linear(x, w, bias, relu)
    want = x.astype(np.float64) @ w.astype(np.float64).T + (0 if bias is None else bias)
    if relu:
        want = np.where((want > 0) | np.isnan(want), want, 0.0)
    np.testing.assert_array_equal(got, want)
    assert not np.signbit(got[want == 0]).any()
