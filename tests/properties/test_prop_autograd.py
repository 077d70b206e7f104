"""Gradients of every differentiable registry op (``differentiable = true`` with derivative formulas,
or a composite differentiated through its parts: the ops conformance level 3 checks), on drawn
shapes, parameters and layouts.

cpu: ``ember_core.autograd.gradcheck`` in float64, the analytical gradient against central finite
differences.  Each tensor input is drawn in a layout (strided, reversed, offset, broadcast); the
leaf that gradcheck perturbs is its whole storage, and the op reads it through the layout's view ops
(campaign.view_in), so the derivatives of the views are checked on the way, and the storage's
unread elements must get a zero gradient.

Other targets (cpu+xnnpack for the ops it claims, vulkan): the float32 gradient of
``sum(op(inputs) * w)`` there against ember-cpu's, under conformance's ``GRAD_TOLERANCES``.

Values: finite differences need a smooth neighbourhood, so every input takes distinct values on the
grid ``c + k / 8`` (|k| small): never an integer or a half-integer (floor, ceil, round, trunc, sign,
abs and relu have their steps and kinks there), never two equal values in one input (max, min, sort,
max pools and their ties), and with a different ``c`` per input never a value of another input
(maximum, minimum, clip, where's branches).  A broadcast view repeats a value, but a perturbation of
its leaf moves every copy alike, so ties among copies stay ties.  ``DOMAINS`` narrows the range
where an op is not smooth or not defined, with the reason; ``KINKS`` rejects the few draws whose
kink depends on several inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from campaign import (
    TARGETS,
    Layout,
    Recorded,
    arrays,
    cases,
    elsewhere,
    examples,
    layouts,
    shapes,
    storage,
    view_in,
)
from ember_conformance.deep import differentiable
from ember_conformance.references import REFERENCES
from ember_conformance.tolerances import GRAD_TOLERANCES, compare
from hypothesis import assume, example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from nn_space import adaptive_cases, conv_cases, conv_output_shape, group_counts, norm_shapes, pool_cases
from test_prop_views import STEPS

import ember_core as em
import ember_core.autograd as ag
from ember_core.ops.registry import REGISTRY

GRADIENT_OPS = sorted(s.name for s in REGISTRY if differentiable(s))
COVERED = GRADIENT_OPS

STEP = 1 / 8
OFFSETS = (5 / 128, 5 / 128 + 1 / 16, 5 / 128 + 1 / 32, 5 / 128 + 3 / 32)  # c per input: 1/32 apart

# (low, high) of every input where an op is not smooth or not defined everywhere, and why
DOMAINS: dict[str, tuple[float, float]] = {
    **dict.fromkeys(["log", "log2", "log10", "sqrt"], (0.25, 4.0)),  # x > 0: a pole or branch point at 0
    "log1p": (-0.75, 3.0),  # x > -1
    "acosh": (1.1, 4.0),  # x > 1; the derivative has a pole at 1
    **dict.fromkeys(["asin", "acos", "atanh"], (-0.9, 0.9)),  # |x| < 1; poles at +-1
    "tan": (-1.2, 1.2),  # poles at +-pi/2
    "pow": (0.25, 2.5),  # a negative base has no real non-integer power; base and exponent alike
}

# draws rejected because the op is not smooth there, where the kink depends on several inputs
KINKS: dict[str, Callable[..., bool]] = {
    # a jump wherever x1 / x2 is an integer
    **dict.fromkeys(["remainder", "floor_divide"],
                    lambda x1, x2: bool(np.all(np.abs(x1 / x2 - np.round(x1 / x2)) > 1e-2))),
}


@dataclass(frozen=True)
class Input:
    """A tensor input the gradient is taken for: its shape, the range of its values, and whether a
    broadcast (stride-0) layout may be drawn for it."""

    shape: tuple[int, ...]
    low: float = -3.0
    high: float = 3.0
    broadcast: bool = True


def smooth(*values: Any) -> bool:
    return True


@dataclass
class Call:
    """One drawn call: the differentiable inputs, ``fn(*tensors)``, the op with its other arguments
    (constant tensors are made on the first tensor's device), and ``valid(*values)``, whether the op
    is smooth around the drawn values (see ``KINKS``)."""

    inputs: list[Input]
    fn: Callable[..., Any]
    valid: Callable[..., bool] = smooth


# ---- shapes and arguments ---------------------------------------------------------------------------

def small_shapes(*, min_dims: int = 0, max_dims: int = 3, max_side: int = 3, max_size: int = 12) -> Any:
    """Shapes of at most ``max_size`` elements: gradcheck runs the op twice per element and
    differentiates once per output element."""
    return shapes(min_dims=min_dims, max_dims=max_dims, max_side=max_side).filter(lambda s: math.prod(s) <= max_size)


def _axis(draw: Any, ndim: int) -> int:
    return draw(st.integers(-max(ndim, 1), max(ndim, 1) - 1))


def _axes(draw: Any, ndim: int) -> Any:
    """None, an axis or a tuple of distinct axes (either sign) of ``ndim`` dims."""
    if not ndim or draw(st.booleans()):
        return draw(st.sampled_from([None, *([0, -1] if not ndim else [])]))
    if draw(st.booleans()):
        return _axis(draw, ndim)
    picked = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
    return tuple(a - ndim * draw(st.booleans()) for a in picked)


def _const(values: Any, like: Any, dtype: Any = None) -> Any:
    return em.asarray(np.asarray(values), dtype=dtype, device=like.device)


def _op(op: str) -> Callable[..., Any]:
    return lambda *args, **kwargs: em.ops.call(op, *args, **kwargs)


# ---- calls per op ---------------------------------------------------------------------------------

def _unary(draw: Any, op: str) -> Call:
    low, high = DOMAINS.get(op, (-3.0, 3.0))
    return Call([Input(draw(small_shapes()), low, high)], _op(op))


def _binary(draw: Any, op: str) -> Call:
    s1, s2 = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3).filter(
        lambda s: math.prod(s.result_shape) <= 12)).input_shapes
    low, high = DOMAINS.get(op, (-3.0, 3.0))
    return Call([Input(s1, low, high), Input(s2, low, high)], _op(op), KINKS.get(op, smooth))


def _reduction(draw: Any, op: str) -> Call:
    shape = draw(small_shapes())
    kwargs: dict[str, Any] = {"axis": _axes(draw, len(shape)), "keepdims": draw(st.booleans())}
    axes = range(len(shape)) if kwargs["axis"] is None else np.atleast_1d(kwargs["axis"]) % max(len(shape), 1)
    reduced = [shape[a] for a in axes] if shape else [1]
    count = math.prod(reduced)
    assume(op not in ("max", "min") or all(reduced))  # (no maximum of nothing: test_prop_reductions)
    assume(op not in ("mean", "var") or count >= 1)  # the mean of nothing is NaN: no derivative
    assume(op != "std" or count >= 2)  # std has a kink where the variance is 0 (one value per reduction)
    if op in ("var", "std"):
        kwargs["correction"] = draw(st.sampled_from([0, 1] if count >= 2 else [0]))  # (a pole at count == correction)
    # (std: a broadcast input repeats one value, whose variance, 0, is std's kink)
    return Call([Input(shape, broadcast=op != "std")], lambda x: em.ops.call(op, x, **kwargs))


def _scan(draw: Any, op: str) -> Call:
    shape = draw(small_shapes())
    axis = None if len(shape) <= 1 and draw(st.booleans()) else _axis(draw, len(shape))
    initial = bool(shape) and draw(st.booleans())  # (a 0-d result cannot hold the initial value as well)
    return Call([Input(shape)], lambda x: em.ops.call(op, x, axis=axis, include_initial=initial))


def _sort(draw: Any, op: str) -> Call:
    shape = draw(small_shapes())
    kwargs = {"axis": _axis(draw, len(shape)), "descending": draw(st.booleans()), "stable": draw(st.booleans())}
    return Call([Input(shape)], lambda x: em.sort(x, **kwargs))


def _matmul(draw: Any, op: str) -> Call:
    m, k, n = (draw(st.integers(1, 3)) for _ in range(3))
    batch1, batch2 = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=2)).input_shapes
    s1 = (k,) if draw(st.booleans()) else (*batch1, m, k)
    s2 = (k,) if draw(st.booleans()) else (*batch2, k, n)
    return Call([Input(s1), Input(s2)], em.matmul)


def _vecdot(draw: Any, op: str) -> Call:
    shape = draw(small_shapes(min_dims=1))
    other = shape[len(shape) - draw(st.integers(1, len(shape))):]  # broadcast against shape
    axis = draw(st.integers(-len(other), -1))  # (the Array API leaves positive axes unspecified)
    return Call([Input(shape), Input(other)], lambda a, b: em.vecdot(a, b, axis=axis))


def _tensordot(draw: Any, op: str) -> Call:
    contracted = draw(small_shapes(max_dims=2, max_size=6))
    s1 = draw(small_shapes(max_dims=1)) + contracted
    s2 = contracted + draw(small_shapes(max_dims=1))
    axes: Any = len(contracted)
    if draw(st.booleans()):
        axes = (list(range(len(s1) - len(contracted), len(s1))), list(range(len(contracted))))
    return Call([Input(s1), Input(s2)], lambda a, b: em.tensordot(a, b, axes=axes))


def _take(draw: Any, op: str) -> Call:
    shape = draw(small_shapes(min_dims=1))
    axis = None if len(shape) == 1 and draw(st.booleans()) else _axis(draw, len(shape))
    n = math.prod(shape) if axis is None else shape[axis]
    assume(n > 0)
    indices = draw(st.lists(st.integers(-n, n - 1), max_size=4))  # repeats and negatives
    return Call([Input(shape)], lambda x: em.take(x, _const(indices, x, "int64"), axis=axis))


def _where(draw: Any, op: str) -> Call:
    sc, s1, s2 = draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=2, max_side=3)).input_shapes
    condition = draw(arrays(sc, "bool"))
    return Call([Input(s1), Input(s2)], lambda a, b: em.where(_const(condition, a), a, b))


def _copy(draw: Any, op: str) -> Call:
    shape = draw(small_shapes())
    if op == "copy":
        return Call([Input(shape)], _op("copy"))
    to = draw(st.sampled_from(["float64", "complex128"]))  # (a narrowing cast defeats finite differences)
    return Call([Input(shape)], lambda x: em.astype(x, to))


def _clip(draw: Any, op: str) -> Call:
    shape = draw(small_shapes())
    inputs, bounds = [Input(shape)], []
    for k in range(2):
        kind = draw(st.sampled_from(["none", "scalar", "tensor"]))
        if kind == "tensor":
            inputs.append(Input(shape[len(shape) - draw(st.integers(0, len(shape))):]))
        bounds.append(kind if kind != "scalar" else OFFSETS[2 + k] + STEP * draw(st.integers(-20, 20)))

    def clip(x: Any, *tensors: Any) -> Any:
        given_ = iter(tensors)
        low, high = (next(given_) if b == "tensor" else None if b == "none" else b for b in bounds)
        return em.clip(x, low, high)

    return Call(inputs, clip)


def _joined(draw: Any, op: str) -> Call:
    shape = draw(small_shapes(min_dims=1 if op == "concat" else 0, max_size=6))
    count = draw(st.integers(1, 3))
    if op == "stack":
        axis = draw(st.integers(-len(shape) - 1, len(shape)))
        return Call([Input(shape) for _ in range(count)], lambda *xs: em.stack(list(xs), axis=axis))
    axis = None if draw(st.booleans()) else _axis(draw, len(shape))
    shapes_ = [shape if axis is None else tuple(draw(st.integers(0, 3)) if i == axis % len(shape) else n
                                                for i, n in enumerate(shape)) for _ in range(count)]
    return Call([Input(s) for s in shapes_], lambda *xs: em.concat(list(xs), axis=axis))


def _manipulation(draw: Any, op: str) -> Call:
    shape = draw(small_shapes(min_dims=2 if op in ("tril", "triu") else 0, max_size=8))
    ndim = len(shape)
    if op in ("tril", "triu"):
        k = draw(st.integers(-3, 3))
        return Call([Input(shape)], lambda x: em.ops.call(op, x, k=k))
    if op == "repeat":
        axis = None if not ndim or draw(st.booleans()) else _axis(draw, ndim)
        n = math.prod(shape) if axis is None else shape[axis]
        per_element = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)) if draw(st.booleans()) else None
        count = draw(st.integers(0, 2))
        return Call([Input(shape)], lambda x: em.repeat(x, count if per_element is None else _const(
            per_element, x, "int64"), axis=axis))
    if op == "roll":
        axis = None if not ndim or draw(st.booleans()) else _axes(draw, ndim) or 0
        shift = tuple(draw(st.integers(-4, 4)) for _ in np.atleast_1d(axis)) if isinstance(axis, tuple) else \
            draw(st.integers(-4, 4))
        return Call([Input(shape)], lambda x: em.roll(x, shift, axis=axis))
    if op == "tile":
        reps = tuple(draw(st.lists(st.integers(0, 2), max_size=3)))
        return Call([Input(shape)], lambda x: em.tile(x, reps))
    assume(ndim > 0)  # unstack
    axis = _axis(draw, ndim)
    return Call([Input(shape)], lambda x: em.unstack(x, axis=axis))


def _views(draw: Any, op: str) -> Call:
    """The view ops, with test_prop_views.py's parameter draws (valid ones)."""
    shape = draw(small_shapes())
    if op == "views.as_strided":
        return _as_strided(draw, shape)
    step = STEPS[op](_Drawer(draw, {" copy": None}), shape, "")  # (copy=False of a layout that needs one:
    # refused, test_prop_views.py's case; the layout is drawn after the call)
    try:
        step.numpy(np.zeros(shape))
    except (IndexError, ValueError, TypeError):
        assume(False)  # an invalid draw: test_prop_views.py holds the refusal
    return Call([Input(shape)], step.ember)


class _Drawer:
    """``data.draw`` over a composite's ``draw`` (the view steps take a data object), with some
    labelled draws ``fixed``."""

    def __init__(self, draw: Any, fixed: dict[str, Any]) -> None:
        self.draw = lambda strategy, label=None: fixed[label] if label in fixed else draw(strategy)


def _as_strided(draw: Any, shape: tuple[int, ...]) -> Call:
    """as_strided over x's own elements (offset from its storage's start, which view_in's leaf is
    not: the call is made on a fresh contiguous copy of x)."""
    n = math.prod(shape)
    assume(n > 0)
    out = draw(small_shapes(max_dims=2))
    strides = tuple(draw(st.integers(-2, 2)) for _ in out)
    low = sum(min(0, s * (m - 1)) for s, m in zip(strides, out))
    high = sum(max(0, s * (m - 1)) for s, m in zip(strides, out))
    assume(high - low < n or not math.prod(out))
    offset = draw(st.integers(-low, n - 1 - high)) if math.prod(out) else 0
    return Call([Input(shape)], lambda x: em.ops.call("views.as_strided", em.ops.call("copy", x), out, strides,
                                                      offset))


# -- nn

def _activation_kink(pre_activation: Callable[..., np.ndarray], activation: Any) -> Callable[..., bool]:
    """The fused relu's kink: every pre-activation value away from 0."""
    def valid(*values: Any) -> bool:
        return activation is None or bool(np.all(np.abs(pre_activation(*values)) > 1e-3))

    return valid


def _conv(draw: Any, op: str) -> Call:
    case = draw(conv_cases(max_batch=1, max_groups=2, max_per_group=2, max_kernel=2, max_extra=2))
    kw = case.kwargs
    if op == "conv2d":
        activation = draw(st.sampled_from([None, "relu"]))
        inputs = [Input(case.x_shape), Input(case.weight_shape)] + [Input(case.weight_shape[:1])] * case.bias
        return Call(inputs, lambda *t: em.conv2d(*t, activation=activation, **kw),
                    _activation_kink(lambda *v: REFERENCES["conv2d"](*v, **kw), activation))
    grad_output = Input(conv_output_shape(case))
    if op == "conv2d_input_grad":
        return Call([grad_output, Input(case.weight_shape)],
                    lambda g, w: em.conv2d_input_grad(g, w, input_shape=case.x_shape, **kw))
    return Call([Input(case.x_shape), grad_output],
                lambda x, g: em.conv2d_weight_grad(x, g, weight_shape=case.weight_shape, **kw))


def _linear(draw: Any, op: str) -> Call:
    batch = draw(small_shapes(max_dims=2, max_size=4))
    n_in, n_out = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    activation = draw(st.sampled_from([None, "relu"]))
    bias = draw(st.booleans())
    inputs = [Input((*batch, n_in)), Input((n_out, n_in))] + [Input((n_out,))] * bias
    return Call(inputs, lambda *t: em.linear(*t, activation=activation),
                _activation_kink(REFERENCES["linear"], activation))


def _pool(draw: Any, op: str) -> Call:
    if op == "adaptive_avg_pool2d":
        case = draw(adaptive_cases(max_batch=1, max_channels=2, max_side=4))
        return Call([Input(case.x_shape)], lambda x: em.adaptive_avg_pool2d(x, **case.kwargs))
    kind = op[:3]
    case = draw(pool_cases(kind, max_batch=1, max_channels=2, max_extra=2))
    kw = case.kwargs
    pooled = tuple(np.asarray(REFERENCES[f"{kind}_pool2d"](np.zeros(case.x_shape), **kw)).shape)
    x_values = np.arange(math.prod(case.x_shape)).reshape(case.x_shape) * STEP + OFFSETS[0]  # distinct
    if op in ("max_pool2d", "avg_pool2d"):
        # a dilated window over padding alone holds no element: -inf, as in PyTorch, and no derivative
        return Call([Input(case.x_shape)], lambda x: em.ops.call(op, x, **kw),
                    lambda v: bool(np.isfinite(REFERENCES[op](v, **kw)).all()))
    if op == "avg_pool2d_grad":
        return Call([Input(pooled)], lambda g: em.avg_pool2d_grad(g, case.x_shape, **kw))
    first = Input(pooled if op == "max_pool2d_grad" else case.x_shape)  # x: not differentiable (declared)
    return Call([first], lambda t: em.ops.call(op, t, _const(x_values, t, t.dtype), **kw))


def _softmax(draw: Any, op: str) -> Call:
    shape = draw(small_shapes())
    axis = _axis(draw, len(shape))
    return Call([Input(shape)], lambda x: em.ops.call(op, x, axis=axis))


def _nll(draw: Any, op: str) -> Call:
    rows, classes = draw(st.integers(0, 4)), draw(st.integers(1, 3))
    ignore = draw(st.sampled_from([-100, 0]))
    targets = draw(st.lists(st.sampled_from([*range(classes), ignore]), min_size=rows, max_size=rows))
    weight = draw(st.none() | st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=classes, max_size=classes))
    kw = {"ignore_index": ignore, "reduction": draw(st.sampled_from(["mean", "sum", "none"])),
          "label_smoothing": draw(st.sampled_from([0.0, 0.2]))}
    assume(kw["reduction"] != "mean" or any(t != ignore for t in targets))  # 0 / 0: no gradient to check

    def constants(like: Any) -> tuple[Any, Any]:
        return _const(targets, like, "int64"), None if weight is None else _const(weight, like, like.dtype)

    if op == "nll_loss":
        return Call([Input((rows, classes))], lambda lp: em.nll_loss(lp, *constants(lp), **kw))
    return Call([Input((rows,) if kw["reduction"] == "none" else ())],
                lambda g: em.nll_loss_grad(g, *constants(g), n_classes=classes, **kw))


def _norm(draw: Any, op: str) -> Call:
    family = op.split("_norm")[0]
    shape = draw(norm_shapes(min_dims=1 if family == "layer" else 2, max_dims=3, max_side=3))
    eps = draw(st.sampled_from([1e-5, 0.1]))
    # (every normalized set holds two values or more: one value has variance 0, and its gradient,
    # terms 1/sqrt(eps) times larger that cancel to 0, is float32 noise above GRAD_TOLERANCES' atol)
    if family == "batch":
        assume(shape[0] * math.prod(shape[2:]) >= 2)
        channels = (shape[1],)
        parameter: Any = None
    elif family == "layer":
        channels = shape[len(shape) - draw(st.integers(1, len(shape))):]
        parameter = channels
        assume(math.prod(channels) >= 2)
    else:
        channels = (shape[1],)
        parameter = draw(group_counts(shape[1]))
        assume(shape[1] // parameter * math.prod(shape[2:]) >= 2)
    affine = [Input(channels, 0.25, 2.0) if draw(st.booleans()) else None for _ in range(2)]
    present = [a for a in affine if a is not None]
    # a broadcast x repeats one value: its variance is 0, and the gradient, (terms / sqrt(eps)) that
    # cancel to 0, is float32 noise 1/sqrt(eps) times larger than GRAD_TOLERANCES' atol
    x = Input(shape, broadcast=False)

    def with_affine(call: Callable[..., Any]) -> Callable[..., Any]:
        """call(x_like tensors..., weight, bias), the absent ones None."""
        def fn(*tensors: Any) -> Any:
            given_ = iter(tensors[len(tensors) - len(present):])
            return call(*tensors[:len(tensors) - len(present)], *(None if a is None else next(given_) for a in affine))
        return fn

    if op == "batch_norm_train":
        return Call([x, *present], with_affine(lambda a, w, b: em.batch_norm_train(
            a, em.empty((2, shape[1]), dtype=a.dtype, device=a.device), w, b, eps=eps)))
    if op in ("layer_norm", "group_norm"):
        return Call([x, *present], with_affine(lambda a, w, b: em.ops.call(op, a, parameter, w, b, eps=eps)))
    grad_output = Input(shape)
    stats = Input((2, shape[1]), 0.5, 2.0) if family == "batch" else None  # (a variance is positive)
    if op == "batch_norm_backward_reduce":
        return Call([grad_output, x, stats], lambda g, a, s: em.batch_norm_backward_reduce(g, a, s, eps=eps))
    if op == "batch_norm_input_grad":
        weight = affine[0] is not None
        return Call([grad_output, x, stats, Input((2, shape[1])), *([Input(channels)] * weight)],
                    lambda g, a, s, sums, *w: em.batch_norm_input_grad(g, a, s, sums, *w, eps=eps))
    if op.endswith("affine_grad"):
        return Call([grad_output, x], lambda g, a: em.ops.call(op, g, a, parameter, eps=eps))
    weight = affine[0] is not None
    return Call([grad_output, x, *([Input(channels, 0.25, 2.0)] * weight)],
                lambda g, a, *w: em.ops.call(op, g, a, parameter, *w, eps=eps))


def _dropout(draw: Any, op: str) -> Call:
    """A fixed mask (the same Philox position each evaluation) keeps dropout linear in x."""
    p = draw(st.sampled_from([0.0, 0.25, 0.5, 0.9]))
    seed, offset = draw(st.integers(0, 2**64 - 1)), draw(st.integers(0, 2**40))
    return Call([Input(draw(small_shapes()))], lambda x: em.dropout(x, p, seed=seed, offset=offset))


FAMILY_CALLS: dict[str, Callable[[Any, str], Call]] = {
    "unary": _unary, "binary": _binary, "reduction": _reduction, "scan": _scan, "sort": _sort, "matmul": _matmul,
    "take": _take, "where": _where, "copy": _copy, "view": _views, "conv": _conv, "linear": _linear, "pool": _pool,
    "softmax": _softmax, "loss": _nll, "norm": _norm, "dropout": _dropout,
}
OP_CALLS: dict[str, Callable[[Any, str], Call]] = {
    **dict.fromkeys(["mean", "var", "std"], _reduction), "clip": _clip, "vecdot": _vecdot, "tensordot": _tensordot,
    **dict.fromkeys(["concat", "stack"], _joined),
    **dict.fromkeys(["tril", "triu", "repeat", "roll", "tile", "unstack"], _manipulation),
}


@st.composite
def calls(draw: Any, op: str) -> Call:
    family = REGISTRY.get(op).family
    return (OP_CALLS.get(op) or FAMILY_CALLS[family])(draw, op)


# ---- values and leaves ---------------------------------------------------------------------------

@st.composite
def grid_values(draw: Any, shape: tuple[int, ...], low: float, high: float, offset: float) -> np.ndarray:
    """Distinct values offset + k * STEP in [low, high] (see the module's docstring); high grows
    for an input with more elements than the range has values (the larger nn inputs, whose
    ranges, DOMAINS' and positive ones, are all open upwards)."""
    n = math.prod(shape)
    high = max(high, low + (n + 1) * STEP)
    ks = range(math.ceil((low - offset) / STEP), math.floor((high - offset) / STEP) + 1)
    picked = draw(st.lists(st.sampled_from(ks), unique=True, min_size=n, max_size=n))
    return (np.array(picked, dtype=np.float64) * STEP + offset).reshape(shape)


@dataclass
class Drawn:
    """An input's leaf (its storage, as numpy) and how the op's view of it is made."""

    storage: np.ndarray
    layout: Any
    shape: tuple[int, ...]

    def leaf(self, dtype: str, device: str) -> Any:
        return em.asarray(self.storage, dtype=dtype, device=device).requires_grad_()

    def view(self, leaf: Any) -> Any:
        return view_in(leaf, self.layout, self.shape)


def draw_inputs(data: Any, call: Call) -> list[Drawn]:
    drawn = []
    for i, spec in enumerate(call.inputs):
        layout = data.draw(layouts(len(spec.shape), allow_broadcast=spec.broadcast), label=f"layout {i}")
        source = tuple(1 if d in layout.broadcast else n for d, n in enumerate(spec.shape))
        values = data.draw(grid_values(source, spec.low, spec.high, OFFSETS[i % len(OFFSETS)]), label=f"values {i}")
        full = np.broadcast_to(values, spec.shape)
        drawn.append(Drawn(storage(full, "float64", layout), layout, spec.shape))
    assume(call.valid(*(_logical(d) for d in drawn)))
    return drawn


def _logical(d: Drawn) -> np.ndarray:
    """The values the op reads (the view of the storage)."""
    return np.asarray(d.view(em.asarray(d.storage)))


def _outputs(result: Any) -> list[Any]:
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    return [o for o in outs if o.dtype.kind in "fc"]


# ---- properties ------------------------------------------------------------------------------------

CPU, OTHERS = TARGETS[0], TARGETS[1:]


def weighted_gradients(data: Any, call: Call, drawn: list[Drawn], dtype: str, device: str,
                       weights: list[np.ndarray]) -> list[np.ndarray]:
    """The gradients of sum(output * w) over the op's floating outputs, for every leaf (the
    ``weights`` are drawn on first use and kept, so that a second device gets the same)."""
    leaves = [d.leaf(dtype, device) for d in drawn]
    outs = _outputs(call.fn(*(d.view(leaf) for d, leaf in zip(drawn, leaves))))
    while len(weights) < len(outs):
        weights.append(data.draw(arrays(outs[len(weights)].shape, dtype, finite=True, extremes=False, low=-2.0,
                                        high=2.0), label=f"w {len(weights)}"))
    loss = sum(em.sum(o * em.asarray(w, dtype=dtype, device=device)) for o, w in zip(outs, weights))
    grads = ag.grad(loss, leaves, allow_unused=True) if outs else [None] * len(leaves)
    return [np.zeros(leaf.shape) if g is None else np.asarray(g) for leaf, g in zip(leaves, grads)]


def _empty(op: str, **kwargs: Any) -> Recorded:
    """A recorded call of ``op`` on a (0,) input."""
    return Recorded(op, call=Call([Input((0,))], lambda x: em.ops.call(op, x, **kwargs)),
                    **{"layout 0": Layout((0,), (1,)), "values 0": np.zeros(0), "w 0": np.zeros(0)})


@pytest.mark.parametrize(("target", "op"), cases(GRADIENT_OPS, targets=(CPU,)))
@examples(1)
@given(data=st.data())
# the backwards of empty inputs reshaped to a -1 a zero-size dim leaves open (prod over no axis), or
# took a row count from an empty axis (sort)
@example(data=_empty("prod", axis=()))
@example(data=_empty("sort"))
def test_gradcheck(target, op, data):
    """The float64 gradient against finite differences, through the drawn layouts; and a backward
    that runs where gradcheck has no output element to differentiate (empty outputs)."""
    if elsewhere(data, target, op):
        return
    call = data.draw(calls(op), label="call")
    drawn = draw_inputs(data, call)
    leaves = [d.leaf("float64", "cpu") for d in drawn]
    ag.gradcheck(lambda *ls: call.fn(*(d.view(leaf) for d, leaf in zip(drawn, ls))), leaves)
    weighted_gradients(data, call, drawn, "float64", "cpu", [])


@pytest.mark.parametrize(("target", "op"), cases(GRADIENT_OPS, targets=OTHERS))
@examples(1)
@given(data=st.data())
def test_gradient_matches_cpu(target, op, data):
    """The float32 gradient of sum(op(inputs) * w) on this target against ember-cpu's."""
    if elsewhere(data, target, op):
        return
    call = data.draw(calls(op), label="call")
    drawn = draw_inputs(data, call)
    weights: list[np.ndarray] = []
    with target.active():
        got = weighted_gradients(data, call, drawn, "float32", target.device, weights)
    with CPU.active():
        expected = weighted_gradients(data, call, drawn, "float32", "cpu", weights)
    tol = GRAD_TOLERANCES["float32"]
    for i, (g, ref) in enumerate(zip(got, expected)):
        result = compare(g, ref.astype(np.float64), "float32", rtol=tol.rtol, atol=tol.atol)
        assert result.ok, f"the gradient of input {i}: {result.message}"
