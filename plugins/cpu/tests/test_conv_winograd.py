"""ember-cpu's conv2d (conv.c: Winograd F(2x2, 3x3) for 3x3 kernels at stride 1) against a direct
convolution in float64 numpy, over the shapes where tiling can go wrong (images smaller than a
tile, odd sizes that leave half tiles, padding wider than the image, blocks that end mid-row), and
the parameters the kernel declines, which must still come out right through the composite.

XNNPACK (a higher-priority provider) is excluded throughout, so that ember-cpu's kernel is the one
under test; every test asserts which provider served the call."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from ember_cpu._native import lib

import ember_core as em
from ember_core import dispatch

EPS = {"float32": 2.0**-23, "float64": 2.0**-52}


def direct_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride=(1, 1), padding=(0, 0),
                dilation=(1, 1), groups: int = 1, relu: bool = False) -> np.ndarray:
    """The definition, in float64: out[n, o, i, j] = b[o] + sum over c, p, q of
    x_padded[n, g(o) * C/groups + c, i * sh + p * dh, j * sw + q * dw] * w[o, c, p, q]."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for p in range(kh):
            for q in range(kw):
                window = xs[:, :, p * dh:p * dh + sh * (oh - 1) + 1:sh, q * dw:q * dw + sw * (ow - 1) + 1:sw]
                out[:, g * og:(g + 1) * og] += np.einsum("ncij,oc->noij", window, w[g * og:(g + 1) * og, :, p, q])
    if b is not None:
        out += b.astype(np.float64)[None, :, None, None]
    return np.maximum(out, 0) if relu else out


def assert_conv_close(got: np.ndarray, want: np.ndarray, x: np.ndarray, w: np.ndarray, dtype: str) -> None:
    """Winograd's rounding error is absolute, set by the inputs' magnitude, not the output's (an
    output near 0 is the difference of large transformed terms).  Each output sums C * 9 products
    through transforms whose coefficients are small (|B^T d B| <= 4 max|x|, |G g G^T| <= 2.25 max|w|,
    A^T M A adds 9 terms); the rounding errors of the C-long sums add like a random walk, so the
    error scales as eps * sqrt(9 C) * max|x| * max|w|.  Measured: up to ~1x that scale (float32,
    C = 64); 16x leaves room for unlucky draws.  A wrong transform, index or edge is off by about the
    output's own magnitude (~sqrt(9 C) * |x| * |w| / 3 for random data), thousands of times more at
    float32 (see test_the_tolerance_catches_a_wrong_answer)."""
    c = w.shape[1]
    scale = np.sqrt(9 * c) * max(np.abs(x).max(initial=0), 1e-30) * max(np.abs(w).max(initial=0), 1e-30)
    assert got.dtype == np.dtype(dtype) and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=32 * EPS[dtype], atol=16 * EPS[dtype] * scale)


@contextlib.contextmanager
def served_by(provider: str | None):
    """Runs the block without XNNPACK and asserts that every conv2d in it ran on `provider`
    (None: the core's composite, after ember-cpu declined)."""
    with dispatch.providers(exclude=["xnnpack"]), dispatch.trace() as log:
        yield
    served = {p for (op, _, _, p, _), _n in log.counts.items() if op == "conv2d"}
    assert served == {provider}, log.counts


def random_case(shape, o, dtype, seed=0, kernel=3, groups=1, bias=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((o, shape[1] // groups, kernel, kernel)).astype(dtype)
    b = rng.standard_normal(o).astype(dtype) if bias else None
    return x, w, b


def run_conv(x, w, b, **kwargs) -> np.ndarray:
    return np.asarray(em.conv2d(em.asarray(x), em.asarray(w), None if b is None else em.asarray(b), **kwargs))


SHAPES = [  # (N, C, O, H, W, (ph, pw))
    (1, 1, 1, 3, 3, (0, 0)),       # one tile, half of it outside out (1x1 output)
    (1, 1, 1, 1, 1, (1, 1)),       # a 1x1 image: all but one input of the tile is padding
    (2, 3, 5, 1, 1, (1, 2)),
    (1, 2, 3, 2, 2, (1, 1)),       # H, W < 3 with padding
    (3, 5, 7, 2, 5, (2, 0)),
    (1, 4, 9, 1, 7, (2, 1)),
    (2, 3, 5, 7, 9, (1, 2)),       # odd output sizes: half tiles on the right and bottom
    (2, 6, 4, 8, 8, (0, 1)),
    (1, 3, 17, 5, 4, (3, 3)),      # padding wider than the kernel: whole tiles of bias only
    (2, 16, 32, 8, 8, (1, 1)),
    (3, 20, 19, 30, 29, (1, 0)),   # many blocks, the last one partial, runs split across blocks
    (1, 5, 8, 3, 200, (1, 1)),     # a tile row longer than a block
    (1, 257, 9, 6, 7, (1, 1)),     # C large: one micro-kernel panel per block
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n, c, o, h, w, padding", SHAPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_matches_a_direct_convolution(dtype, n, c, o, h, w, padding, threads):
    x, wt, b = random_case((n, c, h, w), o, dtype, seed=n * 1000 + c * 10 + o)
    previous = lib.ember_cpu_get_num_threads()
    em.set_num_threads(threads)
    try:
        with served_by("cpu"):
            got = run_conv(x, wt, b, padding=padding)
    finally:
        em.set_num_threads(previous)
    assert_conv_close(got, direct_conv(x, wt, b, padding=padding), x, wt, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("relu", [False, True])
def test_bias_and_fused_relu(dtype, bias, relu):
    x, w, b = random_case((2, 6, 11, 9), 10, dtype, seed=7, bias=bias)
    with served_by("cpu"):
        got = run_conv(x, w, b, padding=1, activation="relu" if relu else None)
    want = direct_conv(x, w, b, padding=(1, 1), relu=relu)
    assert_conv_close(got, want, x, w, dtype)
    if relu:
        assert (got >= 0).all() and (got == 0).any()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_non_contiguous_operands(dtype):
    """The core makes operands contiguous before any kernel: transposed, sliced and flipped views
    give the answer of their values."""
    rng = np.random.default_rng(3)
    xb = em.asarray(rng.standard_normal((4, 2, 13, 12)).astype(dtype))
    x = xb.permute(1, 0, 3, 2)[:, ::2]                  # (2, 2, 12, 13), strided
    wb = em.asarray(rng.standard_normal((3, 3, 2, 5)).astype(dtype))
    w = wb.permute(3, 2, 0, 1)                          # (5, 2, 3, 3), transposed
    b = em.asarray(rng.standard_normal(10).astype(dtype))[::2]
    assert not (x.is_contiguous or w.is_contiguous or b.is_contiguous)
    with served_by("cpu"):
        got = np.asarray(em.conv2d(x, w, b, padding=(1, 2)))
    xn, wn = np.asarray(x), np.asarray(w)
    assert_conv_close(got, direct_conv(xn, wn, np.asarray(b), padding=(1, 2)), xn, wn, dtype)


@pytest.mark.parametrize("params, kernel, groups", [
    ({"stride": 2, "padding": 1}, 3, 1),
    ({"stride": (1, 2)}, 3, 1),
    ({"dilation": 2, "padding": 2}, 3, 1),
    ({"padding": 1}, 3, 2),
    ({"padding": 2}, 5, 1),
    ({}, 1, 1),
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_other_geometries_run_as_im2col_and_gemm(params, kernel, groups, dtype):
    """What Winograd does not take, conv_gemm.c does (one product per image and group)."""
    x, w, b = random_case((2, 4, 9, 10), 6, dtype, seed=5, kernel=kernel, groups=groups)
    with served_by("cpu"):
        got = run_conv(x, w, b, groups=groups, **params)
    pair = {k: (v, v) if isinstance(v, int) else v for k, v in params.items()}
    assert_conv_close(got, direct_conv(x, w, b, groups=groups, **pair), x, w, dtype)


def test_empty_batches_and_declined_dtypes():
    x, w, b = random_case((0, 3, 6, 6), 4, "float32")
    with served_by("cpu"):
        assert run_conv(x, w, b, padding=1).shape == (0, 4, 6, 6)
    x, w, b = random_case((1, 3, 6, 6), 4, "float16")
    with served_by(None):
        got = run_conv(x, w, b, padding=1)
    np.testing.assert_allclose(got, direct_conv(x, w, b, padding=(1, 1)), rtol=1e-2, atol=0.05)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("relu", [False, True])
def test_nan_and_inf_reach_exactly_the_outputs_whose_window_holds_them(dtype, relu):
    """Winograd's transforms would spread a NaN or Inf input over its whole 2x2 output tile (and
    turn Inf into Inf - Inf = NaN): those outputs are recomputed directly, so the result is the
    definition's, value for value, wherever it is not finite."""
    x, w, b = random_case((2, 3, 9, 10), 4, dtype, seed=9)
    x[0, 1, 4, 4] = np.nan
    x[1, 0, 2, 7] = np.inf
    x[1, 2, 6, 1] = -np.inf
    w[2, 0, 1, 1] = 0.0   # Inf * 0: NaN in channel 2 only
    with served_by("cpu"):
        got = run_conv(x, w, b, padding=1, activation="relu" if relu else None)
    want = direct_conv(x, w, b, padding=(1, 1), relu=relu)
    finite = np.isfinite(want)
    assert not finite.all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    assert_conv_close(np.where(finite, got, 0), np.where(finite, want, 0), np.nan_to_num(x, posinf=0, neginf=0), w,
                      dtype)


def test_the_tolerance_catches_a_wrong_answer():
    """assert_conv_close is tight enough to fail on a small mistake: one weight off by 1% of the
    largest, or the kernel flipped (convolution instead of cross-correlation)."""
    x, w, b = random_case((2, 64, 12, 12), 8, "float32", seed=11)
    with served_by("cpu"):
        got = run_conv(x, w, b, padding=1)
    assert_conv_close(got, direct_conv(x, w, b, padding=(1, 1)), x, w, "float32")
    nudged = w.copy()
    nudged[3, 17, 1, 2] += 0.01 * np.abs(w).max()
    with pytest.raises(AssertionError):
        assert_conv_close(got, direct_conv(x, nudged, b, padding=(1, 1)), x, w, "float32")
    with pytest.raises(AssertionError):
        assert_conv_close(got, direct_conv(x, w[:, :, ::-1, ::-1], b, padding=(1, 1)), x, w, "float32")


def test_gradients_flow_through_the_native_kernel():
    """conv2d's derivatives (conv2d_input_grad, conv2d_weight_grad, the bias sum) are the core's;
    the forward value feeding them comes from ember-cpu."""
    x, w, b = random_case((2, 3, 7, 6), 4, "float64", seed=2)
    ex, ew, eb = (em.asarray(a).requires_grad_() for a in (x, w, b))
    with served_by("cpu"):
        y = em.conv2d(ex, ew, eb, padding=1)
    (y * y).sum().backward()
    want = direct_conv(x, w, b, padding=(1, 1))
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(eb.grad), 2 * want.sum(axis=(0, 2, 3)), rtol=1e-10)


# ---- conv2d_input_grad: the same kernel on the transposed, flipped weight -----------------------

def direct_input_grad(g: np.ndarray, w: np.ndarray, x_shape: tuple[int, ...], padding: tuple[int, int]) -> np.ndarray:
    """The definition, in float64: each output element's gradient goes back to the inputs its
    window read, dx[n, c, i*1 - ph + p, j - pw + q] += g[n, o, i, j] * w[o, c, p, q]."""
    (n, c, h, wd), (ph, pw) = x_shape, padding
    oh, ow = g.shape[2:]
    dx = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    for p in range(3):
        for q in range(3):
            dx[:, :, p:p + oh, q:q + ow] += np.einsum("noij,oc->ncij", g.astype(np.float64),
                                                      w[:, :, p, q].astype(np.float64))
    return dx[:, :, ph:ph + h, pw:pw + wd]


def run_input_grad(g: np.ndarray, w: np.ndarray, x_shape, padding, provider: str | None) -> np.ndarray:
    with dispatch.providers(exclude=["xnnpack"]), dispatch.trace() as log:
        got = np.asarray(em.conv2d_input_grad(em.asarray(g), em.asarray(w), input_shape=x_shape, padding=padding))
    assert {p for (op, _, _, p, _), _n in log.counts.items() if op == "conv2d_input_grad"} == {provider}, log.counts
    return got


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n, c, o, h, w, padding", [s for s in SHAPES if max(s[5]) <= 2 and
                                                    min(s[3] + 2 * s[5][0], s[4] + 2 * s[5][1]) >= 3])
def test_input_grad_matches_the_definition(dtype, n, c, o, h, w, padding):
    x, wt, _ = random_case((n, c, h, w), o, dtype, seed=n * 100 + o)
    g = np.random.default_rng(c).standard_normal((n, o, h + 2 * padding[0] - 2, w + 2 * padding[1] - 2)).astype(dtype)
    got = run_input_grad(g, wt, x.shape, padding, "cpu")
    assert_conv_close(got, direct_input_grad(g, wt, x.shape, padding), g, wt.transpose(1, 0, 2, 3), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_input_grad_special_values_reach_exactly_the_inputs_they_touch(dtype):
    """The directly recomputed outputs read the weight transposed and flipped too."""
    _, wt, _ = random_case((2, 4, 9, 10), 3, dtype, seed=5)
    g = np.random.default_rng(6).standard_normal((2, 3, 9, 10)).astype(dtype)
    g[0, 1, 4, 4] = np.nan
    g[1, 0, 2, 7] = np.inf
    wt[0, 2, 0, 2] = 0.0   # Inf * 0: NaN in input channel 2 only, at one corner of the window
    got = run_input_grad(g, wt, (2, 4, 9, 10), (1, 1), "cpu")
    want = direct_input_grad(g, wt, (2, 4, 9, 10), (1, 1))
    finite = np.isfinite(want)
    assert not finite.all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    assert_conv_close(np.where(finite, got, 0), np.where(finite, want, 0), np.nan_to_num(g, posinf=0, neginf=0),
                      wt.transpose(1, 0, 2, 3), dtype)


@pytest.mark.parametrize(("padding", "stride"), [((3, 3), (1, 1)), ((1, 1), (2, 2))])
def test_input_grad_declines_other_geometries(padding, stride):
    torch = pytest.importorskip("torch")
    _, wt, _ = random_case((2, 3, 9, 9), 4, "float64", seed=8)
    oh = (9 + 2 * padding[0] - 3) // stride[0] + 1
    g = np.random.default_rng(9).standard_normal((2, 4, oh, oh))
    with dispatch.providers(exclude=["xnnpack"]), dispatch.trace() as log:
        got = em.conv2d_input_grad(em.asarray(g), em.asarray(wt), input_shape=(2, 3, 9, 9), padding=padding,
                                   stride=stride)
    assert "cpu" not in {p for (op, _, _, p, _), _n in log.counts.items() if op == "conv2d_input_grad"}
    want = torch.nn.grad.conv2d_input((2, 3, 9, 9), torch.from_numpy(wt), torch.from_numpy(g), stride=stride,
                                      padding=padding)
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-10, atol=1e-10)


# ---- float32 over at most 4 input channels: conv_direct.c ---------------------------------------

DIRECT_SHAPES = [  # (N, C, O, H, W, (ph, pw)): tiles of 12 flattened positions span row ends
    (32, 1, 16, 8, 8, (1, 1)),     # the demo's first layer
    (3, 1, 17, 5, 7, (0, 0)),      # one lane past a vector of output channels
    (2, 2, 33, 9, 4, (1, 2)),      # 3 vectors of channels: two in one tile, one alone
    (1, 3, 40, 11, 13, (3, 1)),    # padding wider than the kernel
    (2, 4, 5, 1, 1, (1, 1)),       # a 1x1 image
    (1, 3, 8, 12, 200, (1, 1)),    # rows wider than a band's 1024 positions / 5: several bands per image
    (1, 1, 3, 40, 40, (1, 0)),
]


@pytest.mark.parametrize("n, c, o, h, w, padding", DIRECT_SHAPES)
@pytest.mark.parametrize("relu", [False, True])
def test_direct_kernel_matches_the_definition_and_ignores_the_thread_count(n, c, o, h, w, padding, relu):
    """Each output is one thread's sum in one order: the bits match across thread counts."""
    x, wt, b = random_case((n, c, h, w), o, "float32", seed=n * 100 + c * 10 + o)
    activation = "relu" if relu else None
    previous = lib.ember_cpu_get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            em.set_num_threads(threads)
            with served_by("cpu"):
                results.append(run_conv(x, wt, b, padding=padding, activation=activation))
    finally:
        em.set_num_threads(previous)
    np.testing.assert_array_equal(results[0], results[1])
    assert_conv_close(results[0], direct_conv(x, wt, b, padding=padding, relu=relu), x, wt, "float32")


def test_direct_kernel_without_bias_and_with_special_values():
    x, w, _ = random_case((2, 2, 6, 7), 20, "float32", seed=5, bias=False)
    x[1, 1, 3, 6] = np.nan
    x[0, 0, 0, 0] = np.inf
    with served_by("cpu"):
        got = run_conv(x, w, None, padding=1)
    want = direct_conv(x, w, None, padding=(1, 1))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    assert_conv_close(np.where(finite, got, 0), np.where(finite, want, 0), np.nan_to_num(x, posinf=0, neginf=0), w,
                      "float32")
