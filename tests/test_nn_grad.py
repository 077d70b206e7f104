"""Gradients of the nn registry ops (their derivative formulas in nn.toml): backward against
PyTorch's in float64, and finite differences (gradcheck), including second derivatives where the
formulas are themselves differentiable ops."""

from __future__ import annotations

import numpy as np
import pytest

import ember_core as em
from ember_core import autograd

torch = pytest.importorskip("torch")


def inputs(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    ours = [em.asarray(a).requires_grad_() for a in arrays]
    theirs = [torch.from_numpy(a).requires_grad_() for a in arrays]
    return ours, theirs


CASES = {
    "conv2d": ([(2, 3, 7, 6), (4, 3, 3, 2), (4,)], lambda m, x, w, b: m.conv2d(x, w, b, stride=(2, 1), padding=1)),
    "conv2d_relu": ([(2, 3, 6, 6), (4, 3, 3, 3), (4,)], None),
    "conv2d_grouped_dilated": ([(2, 4, 9, 9), (6, 2, 3, 3)],
                               lambda m, x, w: m.conv2d(x, w, groups=2, dilation=2, padding=2, stride=2)),
    "linear": ([(2, 3, 5), (4, 5), (4,)], lambda m, x, w, b: m.linear(x, w, b)),
    "max_pool2d": ([(2, 3, 9, 8)], lambda m, x: m.max_pool2d(x, 3, 2, 1, ceil_mode=True)),
    "avg_pool2d": ([(2, 3, 9, 8)], lambda m, x: m.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
    "adaptive_avg_pool2d": ([(2, 3, 9, 8)], lambda m, x: m.adaptive_avg_pool2d(x, (4, 3))),
    "softmax": ([(3, 5, 4)], lambda m, x: m.softmax(x, 1)),
    "log_softmax": ([(3, 5, 4)], lambda m, x: m.log_softmax(x, -1)),
    "activations": ([(4, 7)], lambda m, x: m.relu(x) * 0.5 + m.gelu(x) + m.silu(x)),
    "cross_entropy": ([(6, 4)], None),
    "cross_entropy_per_row": ([(6, 4)], None),
}
TARGETS, CLASS_WEIGHTS = np.array([0, 3, 1, -100, 2, 2]), np.array([0.5, 1.0, 2.0, 1.5])


def cross_entropy(m, x, reduction="mean"):
    """log_softmax + nll_loss with an ignored row, class weights and label smoothing."""
    if m is em:
        return em.nll_loss(em.log_softmax(x, axis=1), em.asarray(TARGETS), em.asarray(CLASS_WEIGHTS),
                           reduction=reduction, label_smoothing=0.1)
    return torch.nn.functional.cross_entropy(x, torch.from_numpy(TARGETS), torch.from_numpy(CLASS_WEIGHTS),
                                             reduction=reduction, label_smoothing=0.1)



def _torch_ops():
    f = torch.nn.functional

    class T:
        conv2d = staticmethod(f.conv2d)
        max_pool2d = staticmethod(f.max_pool2d)
        avg_pool2d = staticmethod(f.avg_pool2d)
        adaptive_avg_pool2d = staticmethod(f.adaptive_avg_pool2d)
        relu = staticmethod(torch.relu)
        gelu = staticmethod(f.gelu)
        silu = staticmethod(f.silu)

        @staticmethod
        def linear(x, w, b=None):
            return f.linear(x, w, b)

        @staticmethod
        def softmax(x, axis):
            return torch.softmax(x, axis)

        @staticmethod
        def log_softmax(x, axis):
            return torch.log_softmax(x, axis)

    return T


def conv_relu(m, x, w, b):
    if m is em:
        return em.conv2d(x, w, b, padding=1, activation="relu")
    return torch.relu(torch.nn.functional.conv2d(x, w, b, padding=1))


SPECIAL = {"conv2d_relu": conv_relu, "cross_entropy": cross_entropy,
           "cross_entropy_per_row": lambda m, x: cross_entropy(m, x, "none")}


@pytest.mark.parametrize("name", sorted(CASES))
def test_backward_matches_torch(name):
    shapes, fn = CASES[name]
    ours, theirs = inputs(*shapes)
    if fn is None:
        out, expected = SPECIAL[name](em, *ours), SPECIAL[name](torch, *theirs)
    else:
        out, expected = fn(em, *ours), fn(_torch_ops(), *theirs)
    upstream = np.random.default_rng(9).standard_normal(expected.shape)
    out.backward(em.asarray(upstream))
    expected.backward(torch.from_numpy(upstream))
    for mine, ref in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(mine.grad), ref.grad.numpy(), rtol=1e-9, atol=1e-10)


def _autograd_tool(name):
    try:
        return getattr(autograd, name)
    except (AttributeError, ImportError):
        pytest.skip(f"ember_core.autograd.{name} is not available")


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradcheck(name):
    shapes, fn = CASES[name]
    fn = fn or SPECIAL[name]
    ours, _ = inputs(*shapes, seed=1)
    assert _autograd_tool("gradcheck")(lambda *xs: fn(em, *xs), tuple(ours))


@pytest.mark.parametrize("name", ["conv2d", "linear", "avg_pool2d", "softmax", "log_softmax", "activations",
                                  "cross_entropy", "cross_entropy_per_row"])
def test_second_derivatives(name):
    check = _autograd_tool("gradgradcheck")
    shapes, fn = CASES[name]
    fn = fn or SPECIAL[name]
    ours, _ = inputs(*shapes, seed=2)
    assert check(lambda *xs: fn(em, *xs), tuple(ours))


def test_max_pool2d_second_derivative_through_select():
    """d/dg <max_pool2d_grad(g, x), v> = max_pool2d_select(v, x): the formula chain closes."""
    (x,), _ = inputs((1, 2, 6, 6))
    g = em.asarray(np.random.default_rng(3).standard_normal((1, 2, 3, 3))).requires_grad_()
    v = em.asarray(np.random.default_rng(4).standard_normal((1, 2, 6, 6)))
    (em.max_pool2d_grad(g, x.detach(), 2) * v).sum().backward()
    np.testing.assert_allclose(np.asarray(g.grad), np.asarray(em.max_pool2d_select(v, x.detach(), 2)))


@pytest.mark.parametrize(("shapes", "fn"), [
    ([(3, 0), (2, 0), (2,)], lambda m, x, w, b: m.linear(x, w, b)),  # no input features
    ([(0,), (2, 0)], lambda m, x, w: m.linear(x, w)),
    ([(0, 2, 5, 5), (3, 2, 2, 2)], lambda m, x, w: m.conv2d(x, w, stride=2)),  # an empty batch
])
def test_backward_of_zero_size_inputs(shapes, fn):
    """Gradients of empty inputs are empty, and the others' are what the empty sums give (not a
    reshape error from a -1 that a zero-size dim leaves undetermined)."""
    ours, theirs = inputs(*shapes)
    out, expected = fn(em, *ours), fn(_torch_ops(), *theirs)
    upstream = np.random.default_rng(9).standard_normal(expected.shape)
    out.backward(em.asarray(upstream))
    expected.backward(torch.from_numpy(upstream))
    for mine, ref in zip(ours, theirs):
        assert mine.grad.shape == tuple(ref.grad.shape)
        np.testing.assert_allclose(np.asarray(mine.grad), ref.grad.numpy(), rtol=1e-9, atol=1e-10)
