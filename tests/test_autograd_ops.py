"""Every differentiable registry op, gradchecked against central finite differences in float64
(and complex128 where the op takes complex input), with sample inputs chosen per op so that
finite differences are meaningful (log on positives, acos inside (-1, 1), no ties or kinks for
max/min/abs/sort: ties have their own tests).  A differentiable op added to a TOML without a
sample here fails ``test_every_differentiable_op_has_a_sample``: nothing is skipped silently.

Second derivatives (gradgradcheck) for a representative subset, and gradients against PyTorch
for a few ops and a small MLP."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import ember_core as em
from ember_core import autograd
from ember_core.dtypes import GROUPS
from ember_core.ops import call
from ember_core.ops.registry import REGISTRY

NN_FILE = "nn.toml"  # nn ops: tests/test_nn_grad.py


def _differentiable_ops() -> list[str]:
    return sorted(s.name for s in REGISTRY if s.differentiable and s.dtypes & GROUPS["floating"]
                  and not s.file.endswith(NN_FILE))


def _accepts_complex(name: str) -> bool:
    return bool(REGISTRY[name].dtypes & GROUPS["complex_floating"])


# ---- input domains ------------------------------------------------------------------------------
# Each draws real values (float64) or complex ones (complex128) where the op is smooth and away
# from branch cuts, kinks, ties and discontinuities.

def _uniform(rng: np.random.Generator, shape: tuple[int, ...], lo: float, hi: float) -> np.ndarray:
    return rng.uniform(lo, hi, shape)


def _signed(rng: np.random.Generator, shape: tuple[int, ...], lo: float, hi: float) -> np.ndarray:
    return rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)


DOMAINS: dict[str, tuple[Callable[..., np.ndarray], Callable[..., np.ndarray]]] = {
    # name: (real sampler, complex sampler); complex = real part + i * imaginary part
    "any": (lambda r, s: _uniform(r, s, -1.5, 1.5),
            lambda r, s: _uniform(r, s, -1.5, 1.5) + 1j * _uniform(r, s, -1.0, 1.0)),
    "nonzero": (lambda r, s: _signed(r, s, 0.3, 1.5),
                lambda r, s: _signed(r, s, 0.3, 1.5) + 1j * _uniform(r, s, -1.0, 1.0)),
    "positive": (lambda r, s: _uniform(r, s, 0.3, 2.0),
                 lambda r, s: _uniform(r, s, 0.3, 2.0) + 1j * _uniform(r, s, -1.0, 1.0)),
    "unit": (lambda r, s: _uniform(r, s, -0.8, 0.8),
             lambda r, s: _uniform(r, s, -0.6, 0.6) + 1j * _uniform(r, s, -0.6, 0.6)),
    "above_one": (lambda r, s: _uniform(r, s, 1.3, 3.0),
                  lambda r, s: _uniform(r, s, 1.3, 3.0) + 1j * _uniform(r, s, 0.2, 0.8)),
    # piecewise-constant ops: a quarter away from every integer and half-integer
    "fractional": (lambda r, s: r.integers(-3, 3, s) + _uniform(r, s, 0.15, 0.35),
                   lambda r, s: r.integers(-3, 3, s) + _uniform(r, s, 0.15, 0.35)
                   + 1j * (r.integers(-3, 3, s) + _uniform(r, s, 0.15, 0.35))),
    # fractional / near_one stays >= 0.06 away from an integer: remainder and floor_divide are smooth
    "near_one": (lambda r, s: _uniform(r, s, 0.97, 1.03), None),
    # no ties and no two values closer than 0.1: for max/min/sort/clip
    "distinct": (lambda r, s: (r.permutation(int(np.prod(s))).reshape(s) - np.prod(s) / 2) * 0.3
                 + _uniform(r, s, 0.0, 0.1), None),
}


@dataclass(frozen=True)
class Case:
    """fn(*tensors) and the (shape, domain) of each tensor argument; all of them require grad."""

    fn: Callable[..., Any]
    specs: tuple[tuple[tuple[int, ...], str], ...]
    real_only: bool = False

    def inputs(self, complex_: bool, seed: int = 0) -> list[em.Tensor]:
        rng = np.random.default_rng(seed)
        arrays = [DOMAINS[domain][1 if complex_ else 0](rng, shape) for shape, domain in self.specs]
        return [em.asarray(np.asarray(a, dtype=np.complex128 if complex_ else np.float64)).requires_grad_()
                for a in arrays]


def case(fn: Callable[..., Any], *specs: tuple[tuple[int, ...], str], real_only: bool = False) -> Case:
    return Case(fn, specs, real_only)


def unary(name: str, domain: str = "any") -> list[Case]:
    op = getattr(em, name)
    return [case(op, ((2, 3), domain)), case(op, ((), domain))]


def binary(name: str, d1: str = "any", d2: str = "any") -> list[Case]:
    op = getattr(em, name)
    return [case(op, ((2, 3), d1), ((2, 3), d2)),
            case(op, ((2, 3), d1), ((3,), d2)),  # broadcasting: the gradient is summed back
            case(op, ((1, 3), d1), ((2, 1), d2)),
            case(lambda x: op(x, 0.75), ((2, 3), d1)),  # a Python scalar operand
            case(lambda x: op(1.25, x), ((2, 3), d2))]


INDICES = em.asarray(np.array([2, 0, 2, 1], dtype=np.int64))
MASK = em.asarray(np.array([[True, False, True], [False, False, True]]))

SAMPLES: dict[str, list[Case]] = {
    # elementwise, unary
    "abs": unary("abs", "nonzero"), "acos": unary("acos", "unit"), "acosh": unary("acosh", "above_one"),
    "asin": unary("asin", "unit"), "asinh": unary("asinh", "unit"), "atan": unary("atan", "unit"),
    "atanh": unary("atanh", "unit"), "ceil": unary("ceil", "fractional"), "conj": unary("conj"),
    "cos": unary("cos"), "cosh": unary("cosh"), "exp": unary("exp"), "expm1": unary("expm1"),
    "floor": unary("floor", "fractional"), "imag": unary("imag"), "log": unary("log", "positive"),
    "log1p": unary("log1p", "positive"), "log2": unary("log2", "positive"), "log10": unary("log10", "positive"),
    "negative": unary("negative"), "positive": unary("positive"), "real": unary("real"),
    "round": unary("round", "fractional"), "sign": unary("sign", "nonzero"), "sin": unary("sin"),
    "sinh": unary("sinh"), "sqrt": unary("sqrt", "positive"), "square": unary("square"), "tan": unary("tan", "unit"),
    "tanh": unary("tanh"), "trunc": unary("trunc", "fractional"), "sigmoid": unary("sigmoid"), "erf": unary("erf"),
    "erfc": unary("erfc"),
    "reciprocal": unary("reciprocal", "nonzero"),
    # elementwise, binary
    "add": binary("add"), "subtract": binary("subtract"), "multiply": binary("multiply"),
    "divide": binary("divide", "any", "nonzero"), "atan2": binary("atan2", "nonzero", "nonzero"),
    "copysign": binary("copysign", "nonzero", "nonzero"), "hypot": binary("hypot", "nonzero", "nonzero"),
    "logaddexp": binary("logaddexp"), "pow": binary("pow", "positive", "any"),
    "maximum": [case(em.maximum, ((2, 3), "distinct"), ((2, 3), "distinct")),
                case(lambda x: em.maximum(x, 0.05), ((2, 3), "distinct"))],
    "minimum": [case(em.minimum, ((2, 3), "distinct"), ((2, 3), "distinct")),
                case(lambda x: em.minimum(0.05, x), ((2, 3), "distinct"))],
    "remainder": [case(em.remainder, ((2, 3), "fractional"), ((2, 3), "near_one")),
                  case(lambda x: em.remainder(x, 1.0), ((2, 3), "fractional"))],
    "floor_divide": [case(em.floor_divide, ((2, 3), "fractional"), ((2, 3), "near_one"))],
    # core
    "copy": [case(em.copy, ((2, 3), "any"))],
    "astype": [case(lambda x: em.astype(x, x.dtype), ((2, 3), "any")),
               case(lambda x: em.real(em.astype(x, em.complex128)), ((2, 3), "any"), real_only=True)],
    "where": [case(lambda a, b: em.where(MASK, a, b), ((2, 3), "any"), ((2, 3), "any")),
              case(lambda a: em.where(MASK, a, 0.5), ((2, 3), "any")),
              case(lambda b: em.where(MASK, 2.0, b), ((3,), "any"))],
    "sum": [case(lambda x: em.sum(x), ((2, 3), "any")), case(lambda x: em.sum(x, axis=1), ((2, 3), "any")),
            case(lambda x: em.sum(x, axis=(0, 2), keepdims=True), ((2, 3, 2), "any"))],
    "prod": [case(lambda x: em.prod(x), ((2, 3), "nonzero")), case(lambda x: em.prod(x, axis=0), ((3, 2), "any")),
             case(lambda x: em.prod(x, axis=(0, 2), keepdims=True), ((2, 3, 2), "any"))],
    "max": [case(lambda x: em.max(x), ((2, 3), "distinct")), case(lambda x: em.max(x, axis=1), ((2, 3), "distinct")),
            case(lambda x: em.max(x, axis=0, keepdims=True), ((3, 2), "distinct"))],
    "min": [case(lambda x: em.min(x), ((2, 3), "distinct")), case(lambda x: em.min(x, axis=1), ((2, 3), "distinct"))],
    "cumulative_sum": [case(lambda x: em.cumulative_sum(x, axis=1), ((2, 3), "any")),
                       case(lambda x: em.cumulative_sum(x, axis=0, include_initial=True), ((3, 2), "any")),
                       case(lambda x: em.cumulative_sum(x), ((4,), "any"))],
    "cumulative_prod": [case(lambda x: em.cumulative_prod(x, axis=1), ((2, 3), "nonzero")),
                        case(lambda x: em.cumulative_prod(x, axis=0, include_initial=True), ((3, 2), "nonzero"))],
    "sort": [case(lambda x: em.sort(x), ((2, 4), "distinct")),
             case(lambda x: em.sort(x, axis=0, descending=True), ((3, 2), "distinct"))],
    "matmul": [case(em.matmul, ((2, 3), "any"), ((3, 4), "any")), case(em.matmul, ((3,), "any"), ((3, 2), "any")),
               case(em.matmul, ((2, 3), "any"), ((3,), "any")), case(em.matmul, ((3,), "any"), ((3,), "any")),
               case(em.matmul, ((2, 1, 2, 3), "any"), ((3, 3, 2), "any"))],
    "take": [case(lambda x: em.take(x, INDICES, axis=1), ((2, 3), "any")),
             case(lambda x: em.take(x, INDICES), ((3,), "any"))],
    # composites (differentiated through their decompositions)
    "mean": [case(lambda x: em.mean(x), ((2, 3), "any")), case(lambda x: em.mean(x, axis=0), ((2, 3), "any"))],
    "var": [case(lambda x: em.var(x), ((2, 3), "any")),
            case(lambda x: em.var(x, axis=1, correction=1, keepdims=True), ((2, 3), "any"))],
    "std": [case(lambda x: em.std(x), ((2, 3), "any")),
            case(lambda x: em.std(x, axis=0, correction=1), ((3, 2), "any"))],
    "clip": [case(lambda x: em.clip(x, -0.5, 0.5), ((3, 3), "distinct")),
             case(lambda x, lo: em.clip(x, lo, 0.8), ((3, 3), "distinct"), ((3,), "distinct"))],
    "vecdot": [case(em.vecdot, ((2, 3), "any"), ((2, 3), "any")),
               case(lambda a, b: em.vecdot(a, b, axis=0), ((2, 3), "any"), ((2, 1), "any"))],
    "tensordot": [case(lambda a, b: em.tensordot(a, b, axes=1), ((2, 3), "any"), ((3, 2), "any")),
                  case(lambda a, b: em.tensordot(a, b, axes=([0], [1])), ((3, 2), "any"), ((2, 3), "any"))],
    "concat": [case(lambda a, b: em.concat([a, b], axis=1), ((2, 3), "any"), ((2, 1), "any")),
               case(lambda a, b: em.concat([a, b], axis=None), ((2, 2), "any"), ((3,), "any"))],
    "stack": [case(lambda a, b: em.stack([a, b], axis=1), ((2, 3), "any"), ((2, 3), "any"))],
    "tril": [case(lambda x: em.tril(x), ((3, 3), "any")), case(lambda x: em.tril(x, k=-1), ((2, 3, 4), "any"))],
    "triu": [case(lambda x: em.triu(x, k=1), ((3, 4), "any"))],
    "repeat": [case(lambda x: em.repeat(x, 2, axis=1), ((2, 3), "any")),
               case(lambda x: em.repeat(x, em.asarray(np.array([1, 0, 3])), axis=0), ((3, 2), "any")),
               case(lambda x: em.repeat(x, 2), ((2, 2), "any"))],
    "roll": [case(lambda x: em.roll(x, 1, axis=1), ((2, 3), "any")), case(lambda x: em.roll(x, -2), ((2, 3), "any"))],
    "tile": [case(lambda x: em.tile(x, (2, 1, 2)), ((2, 3), "any"))],
    "unstack": [case(lambda x: em.unstack(x, axis=1), ((2, 3), "any"))],
    # views (views.toml): recorded whenever a view is taken of a tensor that requires grad
    "views.reshape": [case(lambda x: call("views.reshape", x, (3, 2)), ((2, 3), "any")),
                      case(lambda x: call("views.reshape", x.mT, (6,)), ((2, 3), "any"))],  # a copy, not a view
    "views.permute_dims": [case(lambda x: call("views.permute_dims", x, (2, 0, 1)), ((2, 3, 2), "any"))],
    "views.broadcast_to": [case(lambda x: call("views.broadcast_to", x, (2, 2, 3)), ((2, 1, 3), "any"))],
    "views.squeeze": [case(lambda x: call("views.squeeze", x, 1), ((2, 1, 3), "any"))],
    "views.expand_dims": [case(lambda x: call("views.expand_dims", x, axis=1), ((2, 3), "any"))],
    "views.flip_view": [case(lambda x: call("views.flip_view", x, (0, 1)), ((2, 3), "any"))],
    "views.as_strided": [case(lambda x: call("views.as_strided", x, (3, 2), (1, 2), 1), ((8,), "any")),  # overlap
                         case(lambda x: call("views.as_strided", x, (2, 2), (0, 3), 0), ((2, 3), "any"))],
    "views.basic_view": [case(lambda x: call("views.basic_view", x, (slice(None, None, -2), 1)), ((3, 2), "any")),
                         case(lambda x: call("views.basic_view", x, (None, Ellipsis, 0)), ((2, 3), "any")),
                         case(lambda x: call("views.basic_view", em.broadcast_to(x, (3, 2)), (slice(1, None), 0)),
                              ((2,), "any"))],  # of a broadcast: a view whose elements repeat
}


def test_every_differentiable_op_has_a_sample():
    missing = [name for name in _differentiable_ops() if name not in SAMPLES]
    assert not missing, f"differentiable ops without a gradcheck sample in {__file__}: {missing}"
    stale = sorted(set(SAMPLES) - set(_differentiable_ops()))
    assert not stale, f"samples for ops that are not differentiable (or not registered): {stale}"


def _params() -> list[Any]:
    params = []
    for name in _differentiable_ops():
        for i, c in enumerate(SAMPLES.get(name, [])):
            params.append(pytest.param(name, i, False, id=f"{name}-{i}-float64"))
            if _accepts_complex(name) and not c.real_only and all(DOMAINS[d][1] for _, d in c.specs):
                params.append(pytest.param(name, i, True, id=f"{name}-{i}-complex128"))
    return params


@pytest.mark.parametrize(("name", "index", "complex_"), _params())
def test_gradcheck(name, index, complex_):
    c = SAMPLES[name][index]
    assert autograd.gradcheck(c.fn, c.inputs(complex_))


def test_max_ties_share_the_gradient():
    x = em.asarray(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])).requires_grad_()
    em.max(x, axis=1).sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])


def test_maximum_ties_split_evenly():
    a = em.asarray(np.array([1.0, 2.0, 3.0])).requires_grad_()
    b = em.asarray(np.array([1.0, 1.0, 4.0])).requires_grad_()
    em.maximum(a, b).sum().backward()
    np.testing.assert_allclose(np.asarray(a.grad), [0.5, 1, 0])
    np.testing.assert_allclose(np.asarray(b.grad), [0.5, 0, 1])


def test_abs_at_zero_and_sort_ties():
    x = em.asarray(np.array([0.0, -2.0, 2.0])).requires_grad_()
    em.abs(x).sum().backward()
    np.testing.assert_array_equal(np.asarray(x.grad), [0, -1, 1])
    y = em.asarray(np.array([1.0, 1.0, 0.0])).requires_grad_()
    weights = em.asarray(np.array([10.0, 20.0, 30.0]))
    (em.sort(y) * weights).sum().backward()  # stable: the first 1.0 goes to position 1, the second to 2
    np.testing.assert_array_equal(np.asarray(y.grad), [20, 30, 10])


def test_pow_at_zero_base_is_finite():
    x = em.asarray(np.array([0.0, 1.0, 2.0])).requires_grad_()
    e = em.asarray(np.array([2.0, 0.0, 3.0])).requires_grad_()
    em.pow(x, e).sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad), [0, 0, 12])
    np.testing.assert_allclose(np.asarray(e.grad), [0, 0, 8 * np.log(2)])


def test_prod_with_zeros_is_exact():
    x = em.asarray(np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 5.0]])).requires_grad_()
    em.prod(x, axis=1).sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad), [[6, 0, 0], [0, 0, 0]])


def test_logaddexp_gradient_is_stable_and_matches_torch_at_extremes():
    torch = pytest.importorskip("torch")
    inf = np.inf
    x1 = np.array([1e20, -1e20, 1e308, 800.0, inf, inf, -inf, inf, 1.0, 3.0, -800.0])
    x2 = np.array([1e20, -1e20, 1e308, 800.0, inf, 1.0, -inf, -inf, inf, -1.0, -800.0])
    ours = [em.asarray(v).requires_grad_() for v in (x1, x2)]
    theirs = [torch.from_numpy(v.copy()).requires_grad_() for v in (x1, x2)]
    em.logaddexp(*ours).sum().backward()
    torch.logaddexp(*theirs).sum().backward()
    for e, t in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(e.grad), t.grad.numpy(), rtol=1e-15, atol=0, equal_nan=True)
    np.testing.assert_array_equal(np.asarray(ours[0].grad)[:4], 0.5)  # equal inputs share the gradient


# ---- gradients through views whose elements repeat (stride 0) or skip (strides) ---------------------
# A view of a broadcast tensor holds one storage element at many places; its gradient must be found
# among the view's own elements, not in the storage (that summed the repeats once more: 10x).

REPEATING_VIEWS = {
    "broadcast-rows-by-index": ((3,), lambda x: em.broadcast_to(x, (4, 3))[em.asarray([0, 1]), :]),
    "broadcast-sliced": ((3,), lambda x: em.broadcast_to(x, (4, 3))[1:, ::2]),
    "broadcast-int": ((3,), lambda x: em.broadcast_to(x, (4, 3))[2]),
    "broadcast-column-by-index": ((3,), lambda x: em.broadcast_to(x[:, None], (3, 4))[em.asarray([2, 0, 2]), 1:]),
    "broadcast-mask": ((2, 1), lambda x: em.broadcast_to(x, (2, 3))[em.asarray([[True, False, True],
                                                                               [False, True, True]])]),
    "broadcast-ellipsis-index": ((1, 3), lambda x: em.broadcast_to(x, (2, 2, 3))[..., em.asarray([0, 2, 2])]),
    "transposed-broadcast": ((3, 2), lambda x: em.broadcast_to(x.mT[None], (2, 2, 3))[:, em.asarray([1, 0]), ::-1]),
    "strided-by-index": ((4, 6), lambda x: x[::2, 1::2][em.asarray([1, 0, 1])]),
    "flipped-0d-mask": ((2, 3), lambda x: x[::-1, None][em.asarray(True), :, 1:]),
}


@pytest.mark.parametrize("name", sorted(REPEATING_VIEWS))
def test_gradients_through_repeating_and_strided_views(name):
    shape, fn = REPEATING_VIEWS[name]
    x = em.asarray(np.random.default_rng(3).standard_normal(shape)).requires_grad_()
    assert autograd.gradcheck(lambda t: fn(t) * fn(t), [x])  # squared: the gradient depends on x too


def test_indexing_a_broadcast_view_counts_each_selected_element_once():
    x = em.asarray(np.ones(10)).requires_grad_()
    em.sum(em.broadcast_to(x, (10, 10))[em.asarray([0, 1]), :]).backward()
    np.testing.assert_array_equal(np.asarray(x.grad), np.full(10, 2.0))
    x.grad = None
    em.sum(em.broadcast_to(x, (10, 10))[:, 0:2]).backward()
    np.testing.assert_array_equal(np.asarray(x.grad), [10, 10] + [0] * 8)


# ---- second derivatives ------------------------------------------------------------------------

GRADGRAD = {
    "multiply": ("multiply", 1), "divide": ("divide", 0), "sin": ("sin", 0), "exp": ("exp", 0),
    "tanh": ("tanh", 0), "log": ("log", 0), "pow": ("pow", 0), "sigmoid": ("sigmoid", 0), "sqrt": ("sqrt", 0),
    "matmul": ("matmul", 0), "matmul-1d": ("matmul", 1), "sum": ("sum", 1), "prod": ("prod", 1),
    "mean": ("mean", 1), "var": ("var", 1), "max": ("max", 1), "cumulative_sum": ("cumulative_sum", 0),
    "take": ("take", 0), "where": ("where", 0), "reshape": ("views.reshape", 1),
    "permute": ("views.permute_dims", 0), "broadcast": ("views.broadcast_to", 0),
    "as_strided": ("views.as_strided", 0), "basic_view": ("views.basic_view", 0), "concat": ("concat", 0),
    "basic_view-of-broadcast": ("views.basic_view", 2),
}


@pytest.mark.parametrize("key", sorted(GRADGRAD))
def test_gradgradcheck(key):
    name, index = GRADGRAD[key]
    c = SAMPLES[name][index]
    assert autograd.gradgradcheck(c.fn, c.inputs(False, seed=1))


@pytest.mark.parametrize("name", ["multiply", "exp", "log", "matmul", "abs"])
def test_gradgradcheck_complex(name):
    c = SAMPLES[name][0]
    assert autograd.gradgradcheck(c.fn, c.inputs(True, seed=2))


def test_gradcheck_reports_a_wrong_gradient():
    from ember_core.autograd.graph import FunctionNode, attach

    def doubled_gradient(x):
        y = x * 1.0
        attach([y], FunctionNode("Wrong", [x], lambda grads: [grads[0] * 2]))
        return y

    x = em.asarray(np.array([1.0, 2.0])).requires_grad_()
    with pytest.raises(autograd.GradcheckError, match="analytical"):
        autograd.gradcheck(doubled_gradient, [x])
    assert autograd.gradcheck(doubled_gradient, [x], raise_exception=False) is False


@pytest.mark.parametrize(("op", "kwargs", "shape"), [
    ("prod", {"axis": ()}, (0,)), ("prod", {"axis": 1}, (0, 3)), ("prod", {"axis": 0}, (2, 0)),
    ("sort", {}, (0,)), ("sort", {"axis": 0}, (0, 3)), ("sort", {"axis": -1}, (2, 0)),
])
def test_gradients_of_empty_inputs_are_empty(op, kwargs, shape):
    """Reductions over no axis and sorts of empty axes: no reshape to a -1 that a zero-size dim
    leaves open, no row count taken from an empty axis."""
    x = em.zeros(shape, dtype=em.float64).requires_grad_()
    out = getattr(em, op)(x, **kwargs)
    (grad,) = autograd.grad(out, [x], em.ones(out.shape, dtype=em.float64))
    assert grad.shape == shape


def test_gradcheck_of_empty_inputs():
    """An input with no elements has no column to perturb; its gradient is empty, the others' checked."""
    empty = em.zeros((0, 3), dtype=em.float64).requires_grad_()
    y = em.asarray(np.array([1.0, 2.0])).requires_grad_()
    assert autograd.gradcheck(lambda a: em.sum(a, axis=0), [empty])
    assert autograd.gradcheck(lambda a, b: em.sum(a) + b * b, [empty, y])


def test_std_gradient_at_zero_variance_is_zero():
    """sqrt's infinite slope at 0 times the variance's zero slope: NaN unless masked; PyTorch gives 0."""
    for shape, axis in (((3,), None), ((2, 4), 1), ((), 0)):
        x = em.full(shape, 2.5, dtype=em.float64).requires_grad_()
        em.std(x, axis=axis).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.zeros(shape))
    x = em.asarray([[1.0, 1.0], [1.0, 3.0]]).requires_grad_()  # one flat row, one not
    em.std(x, axis=1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.0, 0.0], [-0.5, 0.5]])
    assert np.isnan(em.std(em.ones(1), correction=1).item())  # no degrees of freedom stays NaN


# ---- against PyTorch ---------------------------------------------------------------------------

TORCH_OPS = {
    "sin+mul": (lambda m, a, b: m.sin(a) * b, [(3, 4), (4,)]),
    "matmul+tanh": (lambda m, a, b: m.tanh(a @ b), [(3, 4), (4, 2)]),
    "logaddexp/div": (lambda m, a, b: m.logaddexp(a, b) / (b * b + 1), [(2, 3), (2, 3)]),
    "var-std": (lambda m, a, b: a.var(axis=1) + b.std(axis=0) if m is em
                else a.var(dim=1, correction=0) + b.std(dim=0, correction=0), [(3, 3), (3, 3)]),
    "max+prod": (lambda m, a, b: em.max(a, axis=1) + em.prod(b, axis=1) if m is em
                 else a.amax(dim=1) + b.prod(dim=1), [(3, 4), (3, 4)]),
}


def _torch_pair(shapes, seed=0):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1.5, 1.5, s) for s in shapes]
    return ([em.asarray(a).requires_grad_() for a in arrays],
            [torch.from_numpy(a.copy()).requires_grad_() for a in arrays])


@pytest.mark.parametrize("key", sorted(TORCH_OPS))
def test_gradients_match_torch(key):
    torch = pytest.importorskip("torch")
    fn, shapes = TORCH_OPS[key]
    ours, theirs = _torch_pair(shapes)
    out_e, out_t = fn(em, *ours), fn(torch, *theirs)
    upstream = np.random.default_rng(5).standard_normal(tuple(out_t.shape))
    out_e.backward(em.asarray(upstream))
    out_t.backward(torch.from_numpy(upstream))
    np.testing.assert_allclose(np.asarray(out_e.detach()), out_t.detach().numpy(), rtol=1e-12, atol=1e-12)
    for e, t in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(e.grad), t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_mlp_gradients_match_torch():
    torch = pytest.importorskip("torch")
    ours, theirs = _torch_pair([(5, 4), (4, 8), (8,), (8, 3), (3,)], seed=7)
    labels = np.random.default_rng(8).integers(0, 3, 5)

    def loss(m, x, w1, b1, w2, b2):
        h = (x @ w1 + b1)
        h = m.maximum(h, h * 0.01) if m is em else torch.maximum(h, h * 0.01)  # leaky relu
        logits = h @ w2 + b2
        shifted = logits - (logits.max(axis=1, keepdims=True) if m is em else logits.amax(dim=1, keepdim=True))
        log_probs = shifted - (m.log(m.sum(m.exp(shifted), axis=1, keepdims=True)) if m is em
                               else torch.log(torch.exp(shifted).sum(dim=1, keepdim=True)))
        picked = (log_probs * em.asarray(np.eye(3)[labels]) if m is em
                  else log_probs * torch.from_numpy(np.eye(3)[labels]))
        return -picked.sum() / 5

    loss(em, *ours).backward()
    loss(torch, *theirs).backward()
    for e, t in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(e.grad), t.grad.numpy(), rtol=1e-10, atol=1e-12)
