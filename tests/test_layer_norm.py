"""layer_norm and its gradient ops (nn.toml) against float64 numpy references, native kernels against
the core's composites, gradients against finite differences (second order included); for layer_norm
and group_norm both, which gradient kernels backward runs and the checks of their affine output."""

from __future__ import annotations

import numpy as np
import pytest

import ember_core as em
import ember_core.autograd as ag
from ember_core import nn
from ember_core.errors import ShapeError
from ember_core.nn import functional as F
from ember_core.ops import nn_composites

TOL = {"float32": {"rtol": 1e-4, "atol": 1e-5}, "float64": {"rtol": 1e-10, "atol": 1e-12}}
# (x shape, normalized_shape): one dim, two dims, a row past one column block, x with no leading dims,
# rows enough for backward's tasks of several rows
CASES = [((4, 3, 10), (10,)), ((5, 3, 4), (3, 4)), ((3, 300), 300), ((7,), (7,)), ((2, 150, 40), (40,))]


def rand(*shape, seed=0, low=-3.0, high=3.0):
    return np.random.default_rng(seed + sum(shape)).uniform(low, high, shape)


def normalized_shape_of(spec):
    return (spec,) if isinstance(spec, int) else spec


def reference(x, spec, weight, bias, eps):
    axes = tuple(range(x.ndim - len(normalized_shape_of(spec)), x.ndim))
    xhat = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    return xhat * (1 if weight is None else weight) + (0 if bias is None else bias), xhat, axes


def inputs(shape, spec, dtype, affine=True):
    ns = normalized_shape_of(spec)
    x = rand(*shape) + 2.0  # rows with a mean away from 0, so that a centring slip shows
    weight = rand(*ns, seed=1, low=0.5, high=1.5) if affine else None
    bias = rand(*ns, seed=2) if affine else None
    return (x, weight, bias), [None if a is None else em.asarray(a, dtype=dtype) for a in (x, weight, bias)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("shape", "spec"), CASES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("path", ["op", "composite"])
def test_forward_matches_numpy(dtype, shape, spec, affine, path):
    (x, weight, bias), (ex, ew, eb) = inputs(shape, spec, dtype, affine)
    run = em.layer_norm if path == "op" else nn_composites.layer_norm
    out = run(ex, spec, ew, eb, eps=1e-3)
    assert out.shape == x.shape and out.dtype == ex.dtype
    np.testing.assert_allclose(np.asarray(out).astype(np.float64), reference(x, spec, weight, bias, 1e-3)[0],
                               **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("shape", "spec"), CASES)
@pytest.mark.parametrize("affine", [True, False])
def test_gradient_ops_match_their_composites_and_numpy(dtype, shape, spec, affine):
    (x, weight, _), (ex, ew, _) = inputs(shape, spec, dtype, affine)
    g = rand(*shape, seed=5)
    eg = em.asarray(g, dtype=dtype)
    dx = em.layer_norm_input_grad(eg, ex, spec, ew, eps=1e-3)
    composite_dx = nn_composites.layer_norm_input_grad(eg, ex, spec, ew, eps=1e-3)
    np.testing.assert_allclose(np.asarray(dx), np.asarray(composite_dx), **TOL[dtype])
    affine_grads = em.layer_norm_affine_grad(eg, ex, spec, eps=1e-3)
    composite = nn_composites.layer_norm_affine_grad(eg, ex, spec, eps=1e-3)
    np.testing.assert_allclose(np.asarray(affine_grads), np.asarray(composite), **TOL[dtype])
    # from the textbook formulas in float64
    _, xhat, axes = reference(x, spec, None, None, 1e-3)
    invstd = 1 / np.sqrt(x.var(axis=axes, keepdims=True) + 1e-3)
    gw = g if weight is None else g * weight
    expected = invstd * (gw - gw.mean(axis=axes, keepdims=True) - xhat * (gw * xhat).mean(axis=axes, keepdims=True))
    loose = {"rtol": 1e-3, "atol": 1e-4} if dtype == "float32" else {"rtol": 1e-9, "atol": 1e-11}
    np.testing.assert_allclose(np.asarray(dx).astype(np.float64), expected, **loose)
    rows = tuple(range(x.ndim - len(axes)))
    np.testing.assert_allclose(np.asarray(affine_grads).astype(np.float64),
                               np.stack([(g * xhat).sum(axis=rows), g.sum(axis=rows)]), **loose)
    # both from one pass: the same values as from the two ops, bit for bit, native and composite
    for run, separate in ((em.layer_norm_input_grad, (dx, affine_grads)),
                          (nn_composites.layer_norm_input_grad, (composite_dx, composite))):
        buffer = em.empty((2, *normalized_shape_of(spec)), dtype=dtype)
        fused_dx = run(eg, ex, spec, ew, buffer, eps=1e-3)
        np.testing.assert_array_equal(np.asarray(fused_dx), np.asarray(separate[0]))
        np.testing.assert_array_equal(np.asarray(buffer), np.asarray(separate[1]))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_weight_and_bias_gradients_do_not_depend_on_the_thread_count(dtype):
    _, (ex, ew, _) = inputs((1000, 24), (24,), dtype)
    eg = em.asarray(rand(1000, 24, seed=5), dtype=dtype)
    results = []
    try:
        for threads in (1, 2, 3):
            em.set_num_threads(threads)
            buffer = em.empty((2, 24), dtype=dtype)
            results.append((np.asarray(em.layer_norm_input_grad(eg, ex, 24, ew, buffer)), np.asarray(buffer),
                            np.asarray(em.layer_norm_affine_grad(eg, ex, 24))))
    finally:
        em.set_num_threads(2)
    for got in results[1:]:
        for a, b in zip(got, results[0]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("shape", "spec"), [((3, 2, 4), (4,)), ((2, 3, 2), (3, 2))])
@pytest.mark.parametrize("affine", [True, False])
def test_gradients_match_finite_differences(shape, spec, affine):
    _, (ex, ew, eb) = inputs(shape, spec, "float64", affine)
    leaves = [t for t in (ex, ew, eb) if t is not None]
    for t in leaves:
        t.requires_grad = True

    def f(x, *affine_params):
        return em.layer_norm(x, spec, *affine_params, eps=1e-3)

    assert ag.gradcheck(f, tuple(leaves))


def test_second_order_gradients_match_finite_differences():
    _, (ex, ew, eb) = inputs((3, 4), (4,), "float64")
    for t in (ex, ew, eb):
        t.requires_grad = True
    assert ag.gradgradcheck(lambda x, w, b: F.layer_norm(x, (4,), w, b, eps=1e-3), (ex, ew, eb))


def test_the_layer_matches_numpy_and_skips_affine_gradients_it_does_not_need():
    x = rand(4, 6, 8, seed=3)
    layer = nn.LayerNorm(8, dtype=em.float64)
    layer.weight.requires_grad = False
    layer.bias.requires_grad = False
    ex = em.asarray(x)
    ex.requires_grad = True
    out = layer(ex)
    np.testing.assert_allclose(np.asarray(out.detach()), reference(x, 8, None, None, layer.eps)[0], rtol=1e-10,
                               atol=1e-12)
    with em.trace_dispatch() as trace:
        out.sum().backward()
    ops = {op for (op, *_) in trace.counts}
    assert "layer_norm_input_grad" in ops and "layer_norm_affine_grad" not in ops  # a derivative term left out
    assert ex.grad.shape == x.shape


@pytest.mark.parametrize(("spec", "weight_shape", "error", "match"), [
    ((5,), None, ShapeError, "must be the trailing dims"),
    ((2, 3, 4, 5), None, ShapeError, "must be the trailing dims"),
    ((), None, TypeError, "normalized_shape must be"),
    ((4,), (5,), ShapeError, r"weight must have shape \(4,\)"),
])
def test_bad_arguments_raise_typed_errors(spec, weight_shape, error, match):
    x = em.asarray(rand(2, 3, 4), dtype=em.float32)
    weight = None if weight_shape is None else em.ones(weight_shape, dtype=em.float32)
    with pytest.raises(error, match=match):
        em.layer_norm(x, spec, weight)
    with pytest.raises(ValueError, match="eps must be a finite number"):
        em.layer_norm(x, 4, eps=float("nan"))


# The two normalizations whose x-gradient op can also write the weight and bias gradients, on x
# (4, 6, 5): op -> (the op, its x-gradient op, its weight/bias-gradient op, the argument after x
# that says what is normalized, the length of weight and bias)
NORMS = {
    "layer_norm": (em.layer_norm, em.layer_norm_input_grad, em.layer_norm_affine_grad, 5, 5),
    "group_norm": (em.group_norm, em.group_norm_input_grad, em.group_norm_affine_grad, 3, 6),
}


@pytest.mark.parametrize("op", sorted(NORMS))
@pytest.mark.parametrize("wanted", [("x", "weight", "bias"), ("x", "bias"), ("x",), ("weight", "bias"), ("weight",)])
def test_backward_runs_one_gradient_kernel_for_what_is_wanted(op, wanted):
    """x and weight/bias gradients both wanted: one x-gradient call writes them all; otherwise only
    the op for what is wanted runs.  The values are the separate ops' either way."""
    forward, input_grad, affine_grad, layout, size = NORMS[op]
    ex = em.asarray(rand(4, 6, 5) + 2.0)
    ew, eb = em.asarray(rand(size, seed=1, low=0.5, high=1.5)), em.asarray(rand(size, seed=2))
    leaves = {"x": ex, "weight": ew, "bias": eb}
    for name in wanted:
        leaves[name].requires_grad = True
    g = em.asarray(rand(4, 6, 5, seed=9))
    out = forward(ex, layout, ew, eb)
    with em.trace_dispatch() as trace:
        out.backward(g)
    ops = {name for (name, *_) in trace.counts}
    affine_wanted = "weight" in wanted or "bias" in wanted
    assert (f"{op}_input_grad" in ops) == ("x" in wanted)
    assert (f"{op}_affine_grad" in ops) == (affine_wanted and "x" not in wanted)
    with em.no_grad():
        if "x" in wanted:
            np.testing.assert_array_equal(np.asarray(ex.grad), np.asarray(input_grad(g, ex, layout, ew)))
        affine = np.asarray(affine_grad(g, ex, layout))
    for i, name in enumerate(("weight", "bias")):
        grad = leaves[name].grad
        assert (grad is None) == (name not in wanted)
        if grad is not None:
            np.testing.assert_array_equal(np.asarray(grad), affine[i])


@pytest.mark.parametrize("op", sorted(NORMS))
def test_a_bad_affine_output_is_refused_before_any_write(op):
    _, input_grad, _, layout, size = NORMS[op]
    x = em.asarray(rand(4, 6, 5), dtype=em.float32)
    g = em.ones((4, 6, 5), dtype=em.float32)
    with pytest.raises(ShapeError, match=rf"affine must have shape \(2, {size}\)"):
        input_grad(g, x, layout, None, em.empty((size, 2), dtype=em.float32))
    with pytest.raises(ValueError, match="must not share memory"):
        input_grad(g, x, layout, None, x.reshape((-1, size))[:2])
    with pytest.raises(RuntimeError, match="requires grad"):
        input_grad(g, x, layout, None, em.zeros((2, size), dtype=em.float32).requires_grad_())
    strided = em.zeros((2, 2 * size), dtype=em.float32)[:, ::2]
    with pytest.raises(ValueError, match="must be contiguous"):
        input_grad(g, x, layout, None, strided)
    assert not np.asarray(strided).any()
