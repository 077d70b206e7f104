"""group_norm and its gradient ops (nn.toml) against float64 numpy references, native kernels against
the core's composites, gradients against finite differences (second order included).  Which
gradient kernels backward runs, and the checks of the affine output, are in test_layer_norm.py."""

from __future__ import annotations

import numpy as np
import pytest

import ember_core as em
import ember_core.autograd as ag
from ember_core.errors import ShapeError
from ember_core.nn import functional as F
from ember_core.ops import nn_composites

TOL = {"float32": {"rtol": 1e-4, "atol": 1e-5}, "float64": {"rtol": 1e-10, "atol": 1e-12}}
LOOSE = {"float32": {"rtol": 1e-3, "atol": 1e-4}, "float64": {"rtol": 1e-9, "atol": 1e-11}}
# (x shape, num_groups): images, one group, a group per channel, no positions after C, long rows
CASES = [((3, 6, 4, 5), 3), ((2, 4, 7), 1), ((2, 4, 3, 2), 4), ((5, 6), 2), ((2, 8, 40, 30), 2)]


def rand(*shape, seed=0, low=-3.0, high=3.0):
    return np.random.default_rng(seed + sum(shape)).uniform(low, high, shape)


def per_channel(t, ndim):
    return t.reshape((1, -1, *(1,) * (ndim - 2)))


def normalized(x, num_groups, eps):
    """xhat and 1 / sqrt(var + eps), shaped like x, from the textbook formulas in float64."""
    rows = x.reshape(x.shape[0], num_groups, -1)
    invstd = 1 / np.sqrt(rows.var(axis=-1, keepdims=True) + eps)
    xhat = (rows - rows.mean(axis=-1, keepdims=True)) * invstd
    return xhat.reshape(x.shape), np.broadcast_to(invstd, rows.shape).reshape(x.shape)


def inputs(shape, dtype, affine=True):
    x = rand(*shape) + 2.0  # groups with a mean away from 0, so that a centring slip shows
    weight = rand(shape[1], seed=1, low=0.5, high=1.5) if affine else None
    bias = rand(shape[1], seed=2) if affine else None
    return (x, weight, bias), [None if a is None else em.asarray(a, dtype=dtype) for a in (x, weight, bias)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("shape", "groups"), CASES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("path", ["op", "composite"])
def test_forward_matches_numpy(dtype, shape, groups, affine, path):
    (x, weight, bias), (ex, ew, eb) = inputs(shape, dtype, affine)
    run = em.group_norm if path == "op" else nn_composites.group_norm
    out = run(ex, groups, ew, eb, eps=1e-3)
    assert out.shape == x.shape and out.dtype == ex.dtype
    expected = normalized(x, groups, 1e-3)[0]
    if affine:
        expected = expected * per_channel(weight, x.ndim) + per_channel(bias, x.ndim)
    np.testing.assert_allclose(np.asarray(out).astype(np.float64), expected, **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("shape", "groups"), CASES)
@pytest.mark.parametrize("affine", [True, False])
def test_gradient_ops_match_their_composites_and_numpy(dtype, shape, groups, affine):
    (x, weight, _), (ex, ew, _) = inputs(shape, dtype, affine)
    g = rand(*shape, seed=5)
    eg = em.asarray(g, dtype=dtype)
    dx = em.group_norm_input_grad(eg, ex, groups, ew, eps=1e-3)
    composite_dx = nn_composites.group_norm_input_grad(eg, ex, groups, ew, eps=1e-3)
    np.testing.assert_allclose(np.asarray(dx), np.asarray(composite_dx), **TOL[dtype])
    affine_grads = em.group_norm_affine_grad(eg, ex, groups, eps=1e-3)
    composite = nn_composites.group_norm_affine_grad(eg, ex, groups, eps=1e-3)
    np.testing.assert_allclose(np.asarray(affine_grads), np.asarray(composite), **TOL[dtype])
    # from the textbook formulas in float64, per sample and group
    xhat, invstd = normalized(x, groups, 1e-3)
    gw = g if weight is None else g * per_channel(weight, x.ndim)

    def group_mean(t):
        rows = t.reshape(shape[0], groups, -1)
        return np.broadcast_to(rows.mean(axis=-1, keepdims=True), rows.shape).reshape(shape)

    expected = invstd * (gw - group_mean(gw) - xhat * group_mean(gw * xhat))
    np.testing.assert_allclose(np.asarray(dx).astype(np.float64), expected, **LOOSE[dtype])
    others = (0, *range(2, x.ndim))
    np.testing.assert_allclose(np.asarray(affine_grads).astype(np.float64),
                               np.stack([(g * xhat).sum(axis=others), g.sum(axis=others)]), **LOOSE[dtype])
    # both from one pass: the same values as from the two ops, bit for bit, native and composite
    for run, separate in ((em.group_norm_input_grad, (dx, affine_grads)),
                          (nn_composites.group_norm_input_grad, (composite_dx, composite))):
        buffer = em.empty((2, shape[1]), dtype=dtype)
        fused_dx = run(eg, ex, groups, ew, buffer, eps=1e-3)
        np.testing.assert_array_equal(np.asarray(fused_dx), np.asarray(separate[0]))
        np.testing.assert_array_equal(np.asarray(buffer), np.asarray(separate[1]))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_results_do_not_depend_on_the_thread_count(dtype):
    _, (ex, ew, eb) = inputs((40, 6, 9, 7), dtype)
    eg = em.asarray(rand(40, 6, 9, 7, seed=5), dtype=dtype)
    results = []
    try:
        for threads in (1, 2, 3):
            em.set_num_threads(threads)
            buffer = em.empty((2, 6), dtype=dtype)
            results.append((np.asarray(em.group_norm(ex, 3, ew, eb)), np.asarray(em.group_norm_input_grad(
                eg, ex, 3, ew, buffer)), np.asarray(buffer), np.asarray(em.group_norm_affine_grad(eg, ex, 3))))
    finally:
        em.set_num_threads(2)
    for got in results[1:]:
        for a, b in zip(got, results[0]):
            np.testing.assert_array_equal(a, b)
    with em.trace_dispatch() as trace:  # ember-cpu's kernels, not the composites
        em.group_norm_input_grad(eg, ex, 3, ew, em.empty((2, 6), dtype=dtype))
        em.group_norm(ex, 3, ew, eb)
    assert trace.providers() == {"group_norm_input_grad": {"cpu": 1}, "group_norm": {"cpu": 1}}


def test_float16_runs_the_composite_in_float32_and_rounds_once():
    (x, weight, bias), _ = inputs((2, 4, 3, 3), "float64")
    args = [em.asarray(a, dtype=em.float16) for a in (x, weight, bias)]
    out = em.group_norm(args[0], 2, args[1], args[2])
    assert out.dtype == em.float16
    exact = [np.asarray(a).astype(np.float64) for a in args]
    expected = normalized(exact[0], 2, 1e-5)[0] * per_channel(exact[1], 4) + per_channel(exact[2], 4)
    np.testing.assert_allclose(np.asarray(out).astype(np.float64), expected, rtol=2e-3, atol=4e-3)


@pytest.mark.parametrize(("shape", "groups"), [((2, 4, 3), 2), ((3, 2, 2, 2), 1)])
@pytest.mark.parametrize("affine", [True, False])
def test_gradients_match_finite_differences(shape, groups, affine):
    _, (ex, ew, eb) = inputs(shape, "float64", affine)
    leaves = [t for t in (ex, ew, eb) if t is not None]
    for t in leaves:
        t.requires_grad = True
    assert ag.gradcheck(lambda x, *affine_params: em.group_norm(x, groups, *affine_params, eps=1e-3), tuple(leaves))


def test_second_order_gradients_match_finite_differences():
    _, (ex, ew, eb) = inputs((2, 4, 3), "float64")
    for t in (ex, ew, eb):
        t.requires_grad = True
    assert ag.gradgradcheck(lambda x, w, b: F.group_norm(x, 2, w, b, eps=1e-3), (ex, ew, eb))


@pytest.mark.parametrize(("shape", "groups", "weight_shape", "error", "match"), [
    ((6,), 2, None, ShapeError, r"x must be \(N, C, \.\.\.\)"),
    ((2, 6, 3), 4, None, ValueError, "num_groups must be a positive int dividing the 6 channels"),
    ((2, 6, 3), 0, None, ValueError, "num_groups must be a positive int"),
    ((2, 6, 3), True, None, ValueError, "num_groups must be a positive int"),
    ((2, 6, 3), 3, (3,), ShapeError, r"weight must have shape \(6,\)"),
])
def test_bad_arguments_raise_typed_errors(shape, groups, weight_shape, error, match):
    x = em.asarray(rand(*shape), dtype=em.float32)
    weight = None if weight_shape is None else em.ones(weight_shape, dtype=em.float32)
    with pytest.raises(error, match=match):
        em.group_norm(x, groups, weight)

