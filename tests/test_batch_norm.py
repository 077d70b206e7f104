"""batch_norm_train and its gradient ops (nn.toml) against float64 numpy references, native kernels
against the core's composites, gradients against finite differences (second order included), and
the statistics output's guards."""

from __future__ import annotations

import numpy as np
import pytest

import ember_core as em
import ember_core.autograd as ag
from ember_core import nn
from ember_core.errors import DTypeError, ShapeError
from ember_core.nn import functional as F
from ember_core.ops import nn_composites

TOL = {"float32": {"rtol": 1e-4, "atol": 1e-5}, "float64": {"rtol": 1e-10, "atol": 1e-12}}
SHAPES = [(4, 3, 2, 5), (8, 3), (2, 5, 7), (3, 2, 33, 40)]  # S = 10, 1, 7 and one past the kernels' block


def rand(*shape, seed=0, low=-3.0, high=3.0):
    return np.random.default_rng(seed + sum(shape)).uniform(low, high, shape)


def reference(x, weight, bias, eps):
    """y, mean and biased variance, in float64."""
    axes = (0, *range(2, x.ndim))
    mean = x.mean(axis=axes)
    var = x.var(axis=axes)
    shape = (1, -1, *(1,) * (x.ndim - 2))
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y, mean, var


def inputs(shape, dtype, affine=True):
    c = shape[1]
    x = rand(*shape) + 2.0  # a mean away from 0, so that a centring slip shows
    weight = rand(c, seed=1, low=0.5, high=1.5) if affine else None
    bias = rand(c, seed=2) if affine else None
    as_em = [None if a is None else em.asarray(a, dtype=dtype) for a in (x, weight, bias)]
    return (x, weight, bias), as_em


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("path", ["op", "composite"])
def test_forward_and_statistics_match_numpy(dtype, shape, affine, path):
    (x, weight, bias), (ex, ew, eb) = inputs(shape, dtype, affine)
    stats = em.empty((2, shape[1]), dtype=dtype)
    run = em.batch_norm_train if path == "op" else nn_composites.batch_norm_train
    out = run(ex, stats, ew, eb, eps=1e-3)
    y, mean, var = reference(x, weight, bias, 1e-3)
    assert out.shape == x.shape and out.dtype == ex.dtype
    np.testing.assert_allclose(np.asarray(out).astype(np.float64), y, **TOL[dtype])
    np.testing.assert_allclose(np.asarray(stats).astype(np.float64), np.stack([mean, var]), **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", SHAPES)
def test_gradient_ops_match_their_composites_and_numpy(dtype, shape):
    (x, weight, _), (ex, ew, _) = inputs(shape, dtype)
    g = rand(*shape, seed=5)
    eg = em.asarray(g, dtype=dtype)
    stats = em.empty((2, shape[1]), dtype=dtype)
    em.batch_norm_train(ex, stats, ew, eps=1e-3)
    sums = em.batch_norm_backward_reduce(eg, ex, stats, eps=1e-3)
    composite_sums = nn_composites.batch_norm_backward_reduce(eg, ex, stats, eps=1e-3)
    np.testing.assert_allclose(np.asarray(sums), np.asarray(composite_sums), **TOL[dtype])
    dx = em.batch_norm_input_grad(eg, ex, stats, sums, ew, eps=1e-3)
    composite = nn_composites.batch_norm_input_grad(eg, ex, stats, sums, ew, eps=1e-3)
    np.testing.assert_allclose(np.asarray(dx), np.asarray(composite), **TOL[dtype])
    # the x-gradient through the statistics, from the textbook formula in float64
    axes = (0, *range(2, x.ndim))
    shape_c = (1, -1, *(1,) * (x.ndim - 2))
    _, mean, var = reference(x, None, None, 1e-3)
    xhat = (x - mean.reshape(shape_c)) / np.sqrt(var.reshape(shape_c) + 1e-3)
    m = x.size // x.shape[1]
    expected = weight.reshape(shape_c) / np.sqrt(var.reshape(shape_c) + 1e-3) * (
        g - g.sum(axis=axes).reshape(shape_c) / m - xhat * (g * xhat).sum(axis=axes).reshape(shape_c) / m)
    np.testing.assert_allclose(np.asarray(dx).astype(np.float64), expected, rtol=1e-3 if dtype == "float32" else 1e-9,
                               atol=1e-4 if dtype == "float32" else 1e-11)
    expected_sums = np.stack([g.sum(axis=axes), (g * xhat).sum(axis=axes)])
    np.testing.assert_allclose(np.asarray(sums).astype(np.float64), expected_sums,
                               rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-3 if dtype == "float32" else 1e-10)


@pytest.mark.parametrize("shape", [(4, 3, 2, 3), (5, 2)])
@pytest.mark.parametrize("affine", [True, False])
def test_gradients_match_finite_differences(shape, affine):
    _, (ex, ew, eb) = inputs(shape, "float64", affine)
    leaves = [t for t in (ex, ew, eb) if t is not None]
    for t in leaves:
        t.requires_grad = True

    def f(x, *affine_params):
        stats = em.empty((2, shape[1]), dtype=em.float64)
        return em.batch_norm_train(x, stats, *affine_params, eps=1e-3)

    assert ag.gradcheck(f, tuple(leaves))


def test_second_order_gradients_match_finite_differences():
    """create_graph differentiates the gradient again: its dependence on x through the batch
    statistics must be in that graph (batch_norm_saved_stats recomputes them there)."""
    _, (ex, ew, eb) = inputs((3, 2, 2, 2), "float64")
    for t in (ex, ew, eb):
        t.requires_grad = True

    def f(x, weight, bias):
        return F.batch_norm(x, None, None, weight, bias, training=True, eps=1e-3)

    assert ag.gradgradcheck(f, (ex, ew, eb))


def test_layer_trains_like_the_composite_it_replaced():
    """nn.BatchNorm2d's forward, running statistics and gradients against a float64 numpy model."""
    x = rand(6, 3, 4, 4, seed=9)
    layer = nn.BatchNorm2d(3, momentum=0.2, dtype=em.float64)
    ex = em.asarray(x)
    ex.requires_grad = True
    out = layer(ex)
    (out * out).sum().backward()
    y, mean, var = reference(x, np.ones(3), np.zeros(3), layer.eps)
    np.testing.assert_allclose(np.asarray(out.detach()), y, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(layer.running_mean), 0.2 * mean, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(layer.running_var), 0.8 + 0.2 * var * 96 / 95, rtol=1e-12)
    # d sum(y^2) / d bias = 2 sum(y); / d weight = 2 sum(y * xhat) = 2 sum(y^2) with weight 1, bias 0
    np.testing.assert_allclose(np.asarray(layer.bias.grad), 2 * y.sum(axis=(0, 2, 3)), atol=1e-10)
    np.testing.assert_allclose(np.asarray(layer.weight.grad), 2 * (y * y).sum(axis=(0, 2, 3)), rtol=1e-10)


def test_writing_the_statistics_before_backward_is_refused():
    _, (ex, ew, eb) = inputs((4, 3, 2, 2), "float32")
    ex.requires_grad = True
    stats = em.empty((2, 3), dtype=em.float32)
    out = em.batch_norm_train(ex, stats, ew, eb)
    stats[0] = 0.0
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        out.sum().backward()


def test_a_strided_statistics_view_is_written():
    _, (ex, _, _) = inputs((4, 3, 5), "float64")
    buffer = em.zeros((3, 2), dtype=em.float64)
    em.batch_norm_train(ex, buffer.mT)
    _, mean, var = reference(np.asarray(ex), None, None, 1e-5)
    np.testing.assert_allclose(np.asarray(buffer), np.stack([mean, var], axis=1), rtol=1e-12)


@pytest.mark.parametrize(("make", "error", "match"), [
    (lambda x, s: (x, em.empty((3, 2), dtype=em.float32)), ShapeError, r"stats must have shape \(2, 3\)"),
    (lambda x, s: (x, s.astype(em.float64)), DTypeError, "stats is float64"),
    (lambda x, s: (x[:1, :, :1], s), ShapeError, "more than one value per channel"),
    (lambda x, s: (x[0, 0], s), ShapeError, r"\(N, C, \.\.\.\)"),
    (lambda x, s: (x, s.reshape((6,))), ShapeError, r"stats must have shape \(2, 3\)"),
])
def test_bad_arguments_raise_typed_errors(make, error, match):
    x = em.asarray(rand(4, 3, 2), dtype=em.float32)
    stats = em.empty((2, 3), dtype=em.float32)
    x, stats = make(x, stats)
    with pytest.raises(error, match=match):
        em.batch_norm_train(x, stats)


def test_statistics_must_be_a_separate_tensor_that_does_not_require_grad():
    x = em.asarray(rand(4, 3, 2), dtype=em.float32)
    with pytest.raises(ValueError, match="must not share memory"):
        em.batch_norm_train(x, x[:2, :, 0])
    stats = em.empty((2, 3), dtype=em.float32)
    stats.requires_grad = True
    with pytest.raises(RuntimeError, match="does not require grad"):
        em.batch_norm_train(x, stats)
    with pytest.raises(ValueError, match="eps must be a finite number"):
        em.batch_norm_train(x, em.empty((2, 3), dtype=em.float32), eps=-1.0)


def test_the_shared_reduction_runs_once_per_backward():
    """derivative_terms: one batch_norm_backward_reduce feeds the x, weight and bias gradients."""
    _, (ex, ew, eb) = inputs((4, 3, 2, 2), "float32")
    for t in (ex, ew, eb):
        t.requires_grad = True
    out = em.batch_norm_train(ex, em.empty((2, 3), dtype=em.float32), ew, eb)
    with em.trace_dispatch() as trace:
        out.sum().backward()
    calls = {op: n for (op, *_), n in trace.counts.items()}
    assert calls["batch_norm_backward_reduce"] == 1 and calls["batch_norm_input_grad"] == 1
