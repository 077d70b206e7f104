"""Thin float32 products, ``x @ w.T`` with few output columns (gemm_f32.c's dot-product kernel).

matmul.c sends float32 outputs of 9 to 31 columns (or of up to 4 rows at any width), K >= 32,
whose a rows and b columns are contiguous along K there (on AVX-512 machines; elsewhere these
calls test OpenBLAS).  The kernel computes blocks of 2 rows x up to 12 columns, 16 k-steps per
iteration with a masked tail, and reduces four outputs' lanes at once: the extents below
straddle each of those boundaries, and the layouts cover every stride the kernel reads in place
(row gaps, negative and zero strides, strided or column-major outputs, batches, threads).
Checks as in test_native_gemm.py: small integers must match float64 bit for bit, uniform inputs
stay within float32's summation bound.
"""

from __future__ import annotations

import numpy as np
import pytest
from native_util import check, desc, lib, num_threads
from test_native_gemm import assert_exact, assert_rounded, integers, uniform


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    if out is None:
        out = np.full((*a.shape[:-1], b.shape[-1]), np.nan, np.float32)
    check(lib.ember_cpu_matmul(desc(out), desc(a), desc(b)))
    return out


def w_t(k: int, n: int, make=integers) -> np.ndarray:
    """A (k, n) b read as a transposed weight: its columns are contiguous along k."""
    return make((n, k)).T


@pytest.mark.parametrize("n", [8, 9, 10, 12, 13, 16, 17, 24, 25, 31, 32])
@pytest.mark.parametrize("k", [31, 32, 33, 47, 256, 1000])
@pytest.mark.parametrize("m", [1, 2, 3, 128])
def test_extents_exact(m, k, n):
    a, b = integers((m, k)), w_t(k, n)
    assert_exact(matmul(a, b), a, b)


@pytest.mark.parametrize("n", [32, 33, 100, 2048])
@pytest.mark.parametrize("k", [32, 257, 1024])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5])
def test_few_rows_any_width(m, k, n):
    """Up to 4 rows (batch-1 inference) take the dot kernel at any width; 5 rows go back to GEMM."""
    a, b = integers((m, k)), w_t(k, n)
    assert_exact(matmul(a, b), a, b)
    a, b = uniform((m, k)), w_t(k, n, uniform)
    assert_rounded(matmul(a, b), a, b)


@pytest.mark.parametrize("m,k,n", [(128, 256, 10), (129, 4097, 10), (5, 20000, 31)])
def test_rounding(m, k, n):
    a, b = uniform((m, k)), w_t(k, n, uniform)
    assert_rounded(matmul(a, b), a, b)


def test_strided_flipped_and_broadcast_operands():
    m, k, n = 37, 100, 10
    a_gap = integers((m, 3 * k))[:, 5:5 + k]            # rows further apart than k
    a_flip = integers((m, k))[::-1]                     # negative row stride
    a_one = np.broadcast_to(integers((1, k)), (m, k))   # row stride 0
    b_gap = integers((2 * n, k + 7))[::2, 3:3 + k].T    # columns 2 (k + 7) apart
    b_flip = integers((n, k))[::-1].T                   # negative column stride
    for a in (a_gap, a_flip, a_one):
        for b in (b_gap, b_flip, w_t(k, n)):
            assert_exact(matmul(a, b), a, b)


def test_outputs_column_major_strided_and_flipped():
    m, k, n = 41, 70, 11
    a, b = integers((m, k)), w_t(k, n)
    col = np.full((n, m), np.nan, np.float32).T
    assert_exact(matmul(a, b, out=col), a, b)
    big = np.zeros((2 * m, 3 * n), np.float32)
    strided = big[::2, 1::3]
    assert_exact(matmul(a, b, out=strided), a, b)
    assert not big[1::2].any() and not big[:, 0::3].any()   # nothing else written
    flipped = np.full((m, n), np.nan, np.float32)[::-1, ::-1]
    assert_exact(matmul(a, b, out=flipped), a, b)


def test_other_layouts_of_thin_products():
    """Thin outputs whose operands are not contiguous along K go elsewhere and are still right."""
    m, k, n = 60, 90, 10
    for a, b in [(integers((k, m)).T, w_t(k, n)), (integers((m, k)), integers((k, n))),
                 (integers((m, 2 * k))[:, ::2], w_t(k, n))]:
        assert_exact(matmul(a, b), a, b)


@pytest.mark.parametrize("threads", [1, 2, 3, 16])
def test_batches_and_threads(threads):
    with num_threads(threads):
        x, w = integers((3, 700, 256)), w_t(256, 10)          # w broadcast: folded into rows, threaded
        assert_exact(matmul(x, np.broadcast_to(w, (3, 256, 10))), x, np.broadcast_to(w, (3, 256, 10)))
        a, b = integers((5, 9, 64)), integers((5, 20, 64)).transpose(0, 2, 1)   # a batch of products
        assert_exact(matmul(a, b), a, b)
        a, b = uniform((2100, 300)), w_t(300, 17, uniform)   # past 2^19 multiply-adds: split
        assert_rounded(matmul(a, b), a, b)
