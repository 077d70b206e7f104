"""ember-cpu's depthwise conv2d and its two gradients (conv_depthwise.c) against the definitions in
float64 numpy, over the geometries where the phased scratch can go wrong: strides that split
columns into phases, dilations, padding wider than the kernel, windows that drop the last rows or
columns, channel multipliers, rows that end mid-vector, kernels that are not square.

XNNPACK (a higher-priority provider) is excluded throughout, so that ember-cpu's kernels are the
ones under test; every test asserts which provider served the call."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from native_util import num_threads
from test_conv_winograd import direct_conv

import ember_core as em
from ember_core import dispatch

EPS = {"float32": 2.0**-23, "float64": 2.0**-52}

GEOMETRIES = [  # (N, C, M, (H, W), kernel, stride, padding, dilation)
    (2, 3, 1, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1)),
    (2, 4, 2, (9, 7), (3, 3), (2, 2), (1, 1), (1, 1)),        # a channel multiplier, two phases
    (1, 5, 1, (10, 11), (5, 5), (1, 1), (2, 2), (1, 1)),
    (2, 3, 1, (12, 12), (3, 3), (1, 1), (2, 2), (2, 2)),      # dilation
    (2, 2, 3, (7, 9), (3, 3), (3, 3), (0, 0), (1, 1)),        # stride 3: the last rows/columns unread
    (3, 4, 1, (6, 6), (1, 1), (1, 1), (0, 0), (1, 1)),
    (2, 3, 2, (11, 10), (3, 5), (2, 1), (1, 2), (1, 2)),      # nothing square
    (1, 2, 1, (5, 5), (3, 3), (1, 1), (3, 3), (1, 1)),        # padding wider than the kernel
    (2, 6, 1, (33, 40), (3, 3), (1, 1), (1, 1), (1, 1)),      # rows of 2-3 vectors, partial last ones
    (1, 3, 1, (1, 1), (3, 3), (2, 2), (1, 1), (1, 1)),        # a 1x1 image
    (2, 16, 1, (20, 37), (7, 7), (2, 2), (3, 3), (1, 1)),
    (1, 2, 1, (9, 70), (3, 3), (2, 2), (1, 1), (1, 1)),       # wide rows at stride 2
    (1, 3, 2, (7, 8), (2, 3), (1, 3), (0, 1), (3, 1)),        # stride 3 across, dilation 3 down
]
IDS = [f"{n}x{c}x{h}x{w}*{m}-k{k[0]}{k[1]}-s{s[0]}{s[1]}-p{p[0]}{p[1]}-d{d[0]}{d[1]}"
       for n, c, m, (h, w), k, s, p, d in GEOMETRIES]


def out_hw(hw, kernel, stride, padding, dilation):
    return tuple((size + 2 * p - d * (k - 1) - 1) // s + 1
                 for size, k, s, p, d in zip(hw, kernel, stride, padding, dilation))


def taps(xp: np.ndarray, p: int, q: int, ohw, stride, dilation) -> np.ndarray:
    """The padded input under tap (p, q) of every window: (..., OH, OW)."""
    (oh, ow), (sh, sw), (dh, dw) = ohw, stride, dilation
    return xp[..., p * dh:p * dh + sh * (oh - 1) + 1:sh, q * dw:q * dw + sw * (ow - 1) + 1:sw]


def direct_input_grad(g, w, x_shape, stride, padding, dilation) -> np.ndarray:
    """dx[n, c, window position of tap (p, q)] += g[n, c*M + i, oy, ox] * w[c*M + i, 0, p, q], in
    float64; products are formed only for the inputs a window reads."""
    (n, c, h, wd), (ph, pw) = x_shape, padding
    m = w.shape[0] // c
    gm = g.astype(np.float64).reshape(n, c, m, *g.shape[2:])
    wm = w.astype(np.float64).reshape(c, m, *w.shape[2:])
    dxp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    for p in range(w.shape[2]):
        for q in range(w.shape[3]):
            taps(dxp, p, q, g.shape[2:], stride, dilation)[...] += np.einsum("ncmij,cm->ncij", gm, wm[:, :, p, q])
    return dxp[:, :, ph:ph + h, pw:pw + wd]


def direct_weight_grad(x, g, kernel, stride, padding, dilation) -> np.ndarray:
    """dw[c*M + i, 0, p, q] = sum over n, oy, ox of g[n, c*M + i, oy, ox] * (tap (p, q)'s input)."""
    n, c = x.shape[:2]
    m = g.shape[1] // c
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    gm = g.astype(np.float64).reshape(n, c, m, *g.shape[2:])
    dw = np.zeros((c, m, *kernel))
    for p in range(kernel[0]):
        for q in range(kernel[1]):
            dw[:, :, p, q] = np.einsum("ncmij,ncij->cm", gm, taps(xp, p, q, g.shape[2:], stride, dilation))
    return dw.reshape(c * m, 1, *kernel)


def assert_close(got, want, terms: int, a: np.ndarray, b: np.ndarray, dtype: str) -> None:
    """Each result is a sum of `terms` products of elements of a and b: rounding errors of such a
    sum grow like eps * sqrt(terms) * max|a| * max|b| (16x that leaves room for unlucky draws); a
    wrong tap, phase or edge is off by about a whole product."""
    scale = np.sqrt(max(terms, 1)) * max(np.abs(a).max(initial=0), 1e-30) * max(np.abs(b).max(initial=0), 1e-30)
    assert got.dtype == np.dtype(dtype) and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=32 * EPS[dtype], atol=16 * EPS[dtype] * scale)


@contextlib.contextmanager
def served_by_cpu(op: str):
    with dispatch.providers(exclude=["xnnpack"]), dispatch.trace() as log:
        yield
    assert {p for (name, _, _, p, _), _n in log.counts.items() if name == op} == {"cpu"}, log.counts


def random_case(geometry, dtype, seed=0):
    n, c, m, hw, kernel, stride, padding, dilation = geometry
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, *hw)).astype(dtype)
    w = rng.standard_normal((c * m, 1, *kernel)).astype(dtype)
    b = rng.standard_normal(c * m).astype(dtype)
    g = rng.standard_normal((n, c * m, *out_hw(hw, kernel, stride, padding, dilation))).astype(dtype)
    return x, w, b, g, {"stride": stride, "padding": padding, "dilation": dilation, "groups": c}


def forward(x, w, b, params, activation=None) -> np.ndarray:
    with served_by_cpu("conv2d"):
        return np.asarray(em.conv2d(em.asarray(x), em.asarray(w), None if b is None else em.asarray(b),
                                    activation=activation, **params))


def input_grad(g, w, x_shape, params) -> np.ndarray:
    with served_by_cpu("conv2d_input_grad"):
        return np.asarray(em.conv2d_input_grad(em.asarray(g), em.asarray(w), input_shape=x_shape, **params))


def weight_grad(x, g, kernel, params) -> np.ndarray:
    with served_by_cpu("conv2d_weight_grad"):
        return np.asarray(em.conv2d_weight_grad(em.asarray(x), em.asarray(g), weight_shape=(g.shape[1], 1, *kernel),
                                                **params))


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request):
    with num_threads(request.param):
        yield request.param


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
def test_forward_matches_the_definition(geometry, dtype, threads):
    x, w, b, _, params = random_case(geometry, dtype)
    pairs = {k: v for k, v in params.items() if k != "groups"}
    want = direct_conv(x, w, b, groups=params["groups"], **pairs)
    assert_close(forward(x, w, b, params), want, w[0].size, x, w, dtype)
    assert_close(forward(x, w, b, params, "relu"), np.maximum(want, 0), w[0].size, x, w, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
def test_input_grad_matches_the_definition(geometry, dtype, threads):
    x, w, _, g, params = random_case(geometry, dtype, seed=1)
    want = direct_input_grad(g, w, x.shape, params["stride"], params["padding"], params["dilation"])
    assert_close(input_grad(g, w, x.shape, params), want, w.size, g, w, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
def test_weight_grad_matches_the_definition(geometry, dtype, threads):
    x, w, _, g, params = random_case(geometry, dtype, seed=2)
    want = direct_weight_grad(x, g, w.shape[2:], params["stride"], params["padding"], params["dilation"])
    terms = g.shape[0] * g.shape[2] * g.shape[3]
    assert_close(weight_grad(x, g, w.shape[2:], params), want, terms, x, g, dtype)


def test_results_do_not_depend_on_the_thread_count():
    """Every plane, and every channel's weight gradient, is one thread's whole sum."""
    x, w, b, g, params = random_case(GEOMETRIES[10], "float32", seed=3)
    results = []
    for n in (1, 2):
        with num_threads(n):
            results.append((forward(x, w, b, params), input_grad(g, w, x.shape, params),
                            weight_grad(x, g, w.shape[2:], params)))
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_inf_and_nan_reach_exactly_the_results_they_touch(dtype):
    """Whole vectors carry lanes past a row's end, and the input gradient sums shifted rows with
    zeros around them: a 0 * inf there would be a NaN that the definition never forms."""
    geometry = (2, 3, 2, (9, 21), (3, 3), (2, 1), (1, 1), (1, 1))
    x, w, b, g, params = random_case(geometry, dtype, seed=4)
    x[0, 1, 4, 20] = np.inf      # the last column: read by the last window only
    x[1, 2, 0, 0] = np.nan
    w[3, 0, 1, 2] = -np.inf      # a filter with an inf takes the input gradient's plain loop
    g[1, 0, 2, 19] = np.inf
    stride, padding, dilation = params["stride"], params["padding"], params["dilation"]
    checks = [
        (forward(x, w, b, params), direct_conv(x, w, b, groups=3, stride=stride, padding=padding, dilation=dilation)),
        (input_grad(g, w, x.shape, params), direct_input_grad(g, w, x.shape, stride, padding, dilation)),
        (weight_grad(x, g, w.shape[2:], params), direct_weight_grad(x, g, w.shape[2:], stride, padding, dilation)),
    ]
    for got, want in checks:
        assert np.isnan(want).any() or np.isinf(want).any()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_empty_batches():
    x, w, b, g, params = random_case((0, 3, 1, (6, 6), (3, 3), (2, 2), (1, 1), (1, 1)), "float32")
    assert forward(x, w, b, params).shape == (0, 3, 3, 3)
    assert input_grad(g, w, x.shape, params).shape == (0, 3, 6, 6)
    np.testing.assert_array_equal(weight_grad(x, g, (3, 3), params), np.zeros((3, 1, 3, 3), np.float32))


def test_training_runs_every_pass_natively():
    """conv2d's derivatives reach the native gradients through autograd."""
    x, w, b, _, params = random_case(GEOMETRIES[1], "float64", seed=5)
    ex, ew, eb = (em.asarray(a).requires_grad_() for a in (x, w, b))
    with dispatch.providers(exclude=["xnnpack"]), dispatch.trace() as log:
        y = em.conv2d(ex, ew, eb, **params)
        (y * y).sum().backward()
    served = log.providers()
    for op in ("conv2d", "conv2d_input_grad", "conv2d_weight_grad"):
        assert served[op] == {"cpu": 1}, served
    y64 = direct_conv(x, w, b, groups=4, stride=(2, 2), padding=(1, 1))
    np.testing.assert_allclose(np.asarray(ew.grad), direct_weight_grad(x, 2 * y64, (3, 3), (2, 2), (1, 1), (1, 1)),
                               rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(ex.grad), direct_input_grad(2 * y64, w, x.shape, (2, 2), (1, 1), (1, 1)),
                               rtol=1e-10, atol=1e-10)
