"""ember-cpu's direct float32 kernel for conv2d's weight gradient (conv_gemm.c, `wgrad3`: 3x3,
stride 1, any padding) against the definition in float64 numpy, over the shapes where its tiles
and blocks can go wrong: tap groups that end mid-tile (C * 3 not a multiple of 4), output-channel
counts that leave half or partial vectors, padding wider than the kernel's reach, rows of one
column, batches split into blocks of images.  Every test asserts that ember-cpu served the call
(XNNPACK, a higher-priority provider, is excluded)."""

from __future__ import annotations

import numpy as np
import pytest
from ember_cpu._native import lib

import ember_core as em
from ember_core import dispatch

EPS32 = 2.0**-23

SHAPES = [  # (N, C, O, H, W, (ph, pw))
    (1, 1, 1, 1, 1, (1, 1)),     # a 1x1 image: every tap but the centre reads padding
    (2, 3, 5, 3, 2, (0, 1)),     # rows of 2, no padding rows: 1 output row
    (32, 16, 32, 8, 8, (1, 1)),  # the demo's second convolution: whole tiles and vectors
    (3, 4, 7, 7, 7, (1, 1)),     # 12 tap groups: 3 tiles; 7 output channels: half a vector
    (2, 2, 40, 5, 13, (2, 0)),   # 6 groups: a tile of 2; 40 channels: 32 + 8; no padding columns
    (1, 3, 2, 4, 17, (3, 3)),    # padding wider than the kernel: outputs that read only padding
    (2, 5, 17, 9, 3, (1, 0)),    # 15 groups; one output column
    (1, 1, 16, 8, 8, (1, 1)),    # the demo's first convolution: one input channel, 3 groups
    (3, 2, 64, 64, 64, (1, 1)),  # 64 x 4096 gradient values per image: one image per block, 3 blocks
]


def direct_weight_grad(x: np.ndarray, g: np.ndarray, padding: tuple[int, int]) -> np.ndarray:
    """The definition, in float64: dw[o, c, p, q] = sum over n, i, j of g[n, o, i, j] *
    x_padded[n, c, i + p, j + q]."""
    (ph, pw) = padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh, ow = g.shape[2:]
    dw = np.zeros((g.shape[1], x.shape[1], 3, 3))
    for p in range(3):
        for q in range(3):
            dw[:, :, p, q] = np.einsum("noij,ncij->oc", g.astype(np.float64), xp[:, :, p:p + oh, q:q + ow])
    return dw


def run_weight_grad(x: np.ndarray, g: np.ndarray, padding: tuple[int, int], threads: int = 2) -> np.ndarray:
    previous = lib.ember_cpu_get_num_threads()
    em.set_num_threads(threads)
    try:
        with dispatch.providers(exclude=["xnnpack"]), dispatch.trace() as log:
            got = np.asarray(em.conv2d_weight_grad(em.asarray(x), em.asarray(g),
                                                   weight_shape=(g.shape[1], x.shape[1], 3, 3), padding=padding))
    finally:
        em.set_num_threads(previous)
    assert {p for (op, _, _, p, _), _n in log.counts.items() if op == "conv2d_weight_grad"} == {"cpu"}, log.counts
    return got


def case(n, c, o, h, w, padding, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    g = rng.standard_normal((n, o, h + 2 * padding[0] - 2, w + 2 * padding[1] - 2)).astype(np.float32)
    return x, g


def assert_weight_grad_close(got: np.ndarray, want: np.ndarray, x: np.ndarray, g: np.ndarray) -> None:
    """Each value sums N * OH * OW products, one running sum per block of images; the rounding
    errors add like a random walk: eps * sqrt(terms) * max|x| * max|g| bounds them with a
    margin of 16.  A dropped, doubled or misplaced tap is off by about sqrt(terms) * |x| * |g|, 10^5
    times more."""
    terms = g.shape[0] * g.shape[2] * g.shape[3]
    scale = np.sqrt(terms) * np.abs(x).max(initial=1e-30) * np.abs(g).max(initial=1e-30)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=32 * EPS32, atol=16 * EPS32 * scale)


@pytest.mark.parametrize("n, c, o, h, w, padding", SHAPES)
def test_matches_the_definition_on_any_thread_count(n, c, o, h, w, padding):
    """Threads own whole sums, so one and two threads give the same bits."""
    x, g = case(n, c, o, h, w, padding, seed=n * 100 + c * 10 + o)
    got = run_weight_grad(x, g, padding, threads=2)
    assert_weight_grad_close(got, direct_weight_grad(x, g, padding), x, g)
    np.testing.assert_array_equal(run_weight_grad(x, g, padding, threads=1), got)


def test_the_tolerance_catches_a_misplaced_tap():
    x, g = case(4, 3, 5, 8, 8, (1, 1))
    want = direct_weight_grad(x, g, (1, 1))
    wrong = want.copy()
    wrong[:, :, 0, 0], wrong[:, :, 0, 1] = want[:, :, 0, 1], want[:, :, 0, 0]
    with pytest.raises(AssertionError):
        assert_weight_grad_close(wrong.astype(np.float32), want, x, g)


def test_special_values_reach_exactly_the_weights_they_touch():
    """NaN and infinities in x and in the gradient spread to the taps whose products hold them, as
    in the definition: an infinite gradient at an output whose window reads padding meets the
    padding's zero (NaN there), and the output channels that only fill a vector add nothing."""
    x, g = case(2, 3, 4, 7, 9, (1, 1), seed=3)
    x[0, 1, 3, 4] = np.nan
    x[1, 2, 0, 8] = np.inf           # a corner: reached by 4 taps only
    g[1, 3, 6, 0] = -np.inf          # the bottom-left output: 5 of its taps read padding
    g[0, 0, 2, 2] = np.inf
    x[0, 0, 1, 1] = 0.0              # inf * 0 at tap (1, 1) of output channel 0, input channel 0
    got = run_weight_grad(x, g, (1, 1))
    want = direct_weight_grad(x, g, (1, 1))
    finite = np.isfinite(want)
    assert not finite.all() and finite.any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    clean_x, clean_g = (np.nan_to_num(a, nan=0, posinf=0, neginf=0) for a in (x, g))
    assert_weight_grad_close(np.where(finite, got, 0), np.where(finite, want, 0), clean_x, clean_g)


@pytest.mark.parametrize("padding, stride, dtype", [((1, 1), (2, 2), "float32"), ((1, 1), (1, 1), "float64")])
def test_other_geometries_and_dtypes_take_the_general_kernel(padding, stride, dtype):
    """Strides and float64 go through im2col + GEMM."""
    rng = np.random.default_rng(4)
    x = rng.integers(-3, 4, (2, 3, 9, 9)).astype(dtype)
    oh, ow = ((9 + 2 * p - 3) // s + 1 for p, s in zip(padding, stride))
    g = rng.integers(-3, 4, (2, 4, oh, ow)).astype(dtype)
    with dispatch.providers(exclude=["xnnpack"]), dispatch.trace() as log:
        got = em.conv2d_weight_grad(em.asarray(x), em.asarray(g), weight_shape=(4, 3, 3, 3), padding=padding,
                                    stride=stride)
    assert {p for (op, _, _, p, _), _n in log.counts.items() if op == "conv2d_weight_grad"} == {"cpu"}
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    want = np.zeros((4, 3, 3, 3))
    for p in range(3):
        for q in range(3):
            window = xp[:, :, p:p + stride[0] * (oh - 1) + 1:stride[0], q:q + stride[1] * (ow - 1) + 1:stride[1]]
            want[:, :, p, q] = np.einsum("noij,ncij->oc", g.astype(np.float64), window)
    np.testing.assert_array_equal(np.asarray(got), want)
