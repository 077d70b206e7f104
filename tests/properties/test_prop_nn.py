"""The neural-network and optimizer ops (nn.toml, optim.toml) on every target, against PyTorch in
float64: the parameter spaces of nn_space.py, inputs in drawn layouts (strided, reversed, offset,
broadcast), every declared dtype (float32 alone on cpu+xnnpack, the only one it claims).

Forward ops are called through ember's public API (``nn.functional`` where it has the function,
the registry op otherwise: fused activations, label smoothing, the norms' statistics) and their
gradients taken by ember's autograd for a drawn output gradient, against ``torch.autograd``.  The
gradient helper ops (conv2d_input_grad, max_pool2d_grad, batch_norm_input_grad, ...) are called
directly and judged by the gradient PyTorch computes for the same inputs; their own derivatives
are test_prop_autograd.py's (finite differences).

Tolerances: values under the conformance table, with the op on |inputs| as the magnitude for the
multilinear ops (convolutions, linear, average pools: the error bound of a sum of products) and
the conformance ``magnitude`` where it has one (log_softmax, the norms); gradients under
``GRAD_TOLERANCES``, against the same |inputs| magnitude for multilinear ops and the largest
gradient element otherwise (normwise: a gradient chains several rounded reductions).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as tF
from campaign import (
    KIND,
    Drawn,
    Layout,
    Recorded,
    arrays,
    assert_matches,
    cases,
    dtypes_of,
    elsewhere,
    examples,
    host,
    layouts,
    ops_of,
    place,
    raises_like,
    shapes,
    tensors,
)
from ember_conformance.references import REFERENCES
from ember_conformance.references import magnitude as conformance_magnitude
from ember_conformance.tolerances import GRAD_TOLERANCES, TOLERANCES, compare
from hypothesis import assume, example, given
from hypothesis import strategies as st
from nn_space import (
    ConvCase,
    PoolCase,
    adaptive_cases,
    conv_cases,
    conv_output_shape,
    group_counts,
    norm_shapes,
    pool_cases,
)

import ember_core as em
import ember_core.autograd as ag
from ember_core.nn import functional as F

CONV = ops_of("conv")
POOL = ops_of("pool")
NORM = ops_of("norm")
ACTIVATIONS = ops_of("unary", file="nn.toml")
UPDATES = ops_of("update")
COVERED = CONV + POOL + NORM + ACTIVATIONS + UPDATES + ["linear", "softmax", "log_softmax", "nll_loss", "nll_loss_grad"]


# ---- drawing ---------------------------------------------------------------------------------------

def _dtype(data: Any, target: Any, op: str) -> str:
    """A declared dtype of ``op``; on a target that prefers a plugin, one that plugin claims."""
    declared = dtypes_of(op)
    if target.prefer:
        from ember_core.plugins import MANAGER

        claimed = {d.name for p in target.prefer for d in MANAGER.backends[p].manifest.kernels["cpu"].get(op, ())}
        declared = [d for d in declared if d in claimed]
    return data.draw(st.sampled_from(declared), label="dtype")


def _tensor(data: Any, shape: tuple[int, ...], dtype: str, target: Any, label: str, **options: Any) -> tuple[Any, Any]:
    """An input in a drawn layout: ordinary finite values unless ``options`` say otherwise."""
    options = {"finite": True, "extremes": False, "low": -4.0, "high": 4.0, **options}
    return data.draw(tensors(shape, dtype, target.device, **options), label=label)


_ABSENT = (None, None)


def _optional(data: Any, shape: tuple[int, ...], dtype: str, target: Any, label: str,
              **options: Any) -> tuple[Any, Any]:
    return _tensor(data, shape, dtype, target, label, **options) if data.draw(st.booleans(), label=label) else _ABSENT


def _torch(values: Any, *, grad: bool = False) -> Any:
    return None if values is None else torch.tensor(np.asarray(values, dtype=np.float64), requires_grad=grad)


def _numpy(t: Any) -> np.ndarray:
    return t.detach().numpy()


# ---- judging ---------------------------------------------------------------------------------------

def check(data: Any, target: Any, dtype: str, ember_fn: Callable[..., Any], torch_fn: Callable[..., Any],
          inputs: list[tuple[Any, Any]], *, multilinear: bool = False, magnitude: Any = None,
          grads: bool = True, relu: bool = False, reference: Callable[..., Any] | None = None,
          atol: float | None = None, grad_scales: list[float] | None = None) -> None:
    """``ember_fn(*tensors)`` against ``torch_fn(*float64 torch tensors)`` for the (tensor, values)
    ``inputs`` (absent ones: (None, None)), then, with ``grads``, the gradients of every floating
    input for a drawn output gradient.  ``relu``: the op ends in a fused relu, whose gradient mask
    is ill-defined where the exact result is within the dtype's tolerance of 0 (a rounded result
    may fall either side): the output gradient is 0 there.  ``reference``: a numpy function that
    replaces PyTorch's values (where PyTorch's float64 algorithm is less accurate than the table).
    ``atol``: replaces the table's for the values; ``grad_scales``: per input, the scale its
    gradient is judged against (else the multilinear magnitude, or normwise)."""
    values = [v for _, v in inputs]
    grads = grads and dtype in GRAD_TOLERANCES
    leaves = [_torch(v, grad=grads) for v in values]
    expected = torch_fn(*leaves)
    if multilinear:
        magnitude = _numpy(torch_fn(*(_torch(None if v is None else np.abs(v)) for v in values)))
    present = [i for i, (t, _) in enumerate(inputs) if t is not None]
    with target.active():
        for i in present if grads else ():
            inputs[i][0].requires_grad = True
        with em.trace_dispatch() as served:
            got = ember_fn(*(t for t, _ in inputs))
    assert_matches(got, _numpy(expected) if reference is None else reference(*values), dtype=dtype,
                   magnitude=magnitude, atol=_flushed(served, dtype) if atol is None else atol)
    if not grads or not present:
        return
    seed = data.draw(arrays(tuple(expected.shape), dtype, finite=True, extremes=False, low=-2.0, high=2.0),
                     label="output gradient")
    if relu:
        tol = TOLERANCES[dtype]
        seed = np.where(_numpy(expected) <= tol.atol + tol.rtol * np.abs(magnitude), 0.0, seed)
    with target.active():
        got_grads = ag.grad(got, [inputs[i][0] for i in present], em.asarray(seed, dtype=dtype, device=got.device),
                            allow_unused=True)
    ref_grads = torch.autograd.grad(expected, [leaves[i] for i in present], _torch(seed), allow_unused=True)
    if multilinear:
        abs_leaves = [_torch(None if v is None else np.abs(v), grad=True) for v in values]
        scales = torch.autograd.grad(torch_fn(*abs_leaves), [abs_leaves[i] for i in present], _torch(np.abs(seed)),
                                     allow_unused=True)
    for k, (i, g, ref) in enumerate(zip(present, got_grads, ref_grads)):
        assert g is not None, f"input {i} got no gradient"
        ref = np.zeros(values[i].shape) if ref is None else _numpy(ref)
        scale = _numpy(scales[k]) if multilinear and scales[k] is not None else (
            grad_scales[i] if grad_scales else None)
        _assert_gradient(g, ref, dtype, f"the gradient of input {i}", scale)


def _flushed(served: Any, dtype: str) -> float | None:
    """ember-xnnpack runs with subnormals flushed to zero, and documents that a result underflowing
    into the subnormal range becomes 0 (plugins/xnnpack/README.md): where it served the call, an
    absolute difference below float32's smallest normal passes."""
    by_xnnpack = any("xnnpack" in by for by in served.providers().values())
    return float(np.finfo(np.float32).tiny) if by_xnnpack and dtype == "float32" else None


def _placed(data: Any, values: Any, dtype: str, target: Any, label: str) -> tuple[Any, np.ndarray]:
    """Exactly representable ``values`` in a drawn layout (not a broadcast: they need not repeat)."""
    values = np.asarray(values, dtype=np.float64)
    layout = data.draw(layouts(values.ndim, allow_broadcast=False), label=f"{label} layout")
    return place(values, dtype, layout, target.device), values


def _finite(*values: Any) -> bool:
    return all(v is None or np.isfinite(v).all() for v in values)


# ---- convolution and linear ------------------------------------------------------------------------

_EMPTY_BATCH = ConvCase((0, 1, 4, 5), (3, 1, 3, 2), True, {"stride": (2, 3), "padding": (2, 1), "dilation": (1, 2),
                                                            "groups": 1})


@pytest.mark.parametrize(("target", "op"), cases(CONV))
@examples(1)
@given(data=st.data())
# an empty batch: the input gradient's composite reshaped with a -1 that a zero-size dim leaves open
@example(data=Recorded("conv2d_input_grad", dtype="bfloat16", case=_EMPTY_BATCH,
                       x=Drawn(np.zeros((0, 1, 4, 5)), "bfloat16"), weight=Drawn(np.ones((3, 1, 3, 2)), "bfloat16"),
                       grad_output=Drawn(np.zeros((0, 3, 3, 2)), "bfloat16")))
@example(data=Recorded("conv2d", dtype="float32", case=_EMPTY_BATCH, x=Drawn(np.zeros((0, 1, 4, 5)), "float32"),
                       weight=Drawn(np.ones((3, 1, 3, 2)), "float32"), bias=Drawn([1.0, 2.0, 3.0], "float32"),
                       activation=None, **{"output gradient": np.zeros((0, 3, 3, 2))}))
# an empty x whose reversed view sits past its (empty) storage: the composite's window view of it
# (as_strided) was refused
@example(data=Recorded("conv2d", dtype="bfloat16", case=ConvCase((0, 2, 4, 5), (1, 2, 1, 3), True, {}),
                       x=Drawn(np.zeros((0, 2, 4, 5)), "bfloat16", Layout((0, 1, 2, 3), (1, 1, 1, -1))),
                       weight=Drawn(np.ones((1, 2, 1, 3)), "bfloat16"), bias=Drawn([-4.0], "bfloat16"),
                       activation=None, **{"output gradient": np.zeros((0, 1, 4, 3))}))
# a result in the subnormal range, which ember-xnnpack flushes to 0 (documented: _flushed)
@example(data=Recorded("conv2d", target="cpu+xnnpack", dtype="float32",
                       case=ConvCase((1, 1, 2, 6), (3, 1, 2, 2), False, {"stride": 1, "padding": 0, "dilation": 1,
                                                                         "groups": 1}),
                       x=Drawn([[[[0, 0, 0, 0, 0, 0.5], [0] * 6]]], "float32"),
                       weight=Drawn([[[[0, 0], [0, 0]]], [[[0, 0], [0, 0]]], [[[0, 1.2e-38], [0, 0]]]], "float32"),
                       activation=None, **{"output gradient": np.zeros((1, 3, 1, 5))}))
def test_conv(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype = _dtype(data, target, op)
    case = data.draw(conv_cases(), label="case")
    kw = case.kwargs
    x = _tensor(data, case.x_shape, dtype, target, "x")
    weight = _tensor(data, case.weight_shape, dtype, target, "weight")
    if op == "conv2d":
        bias = _tensor(data, case.weight_shape[:1], dtype, target, "bias") if case.bias else _ABSENT
        activation = data.draw(st.sampled_from([None, "relu"]), label="activation")
        # nn.functional has no fused activation: the registry op takes it
        ember = (lambda a, w, b: F.conv2d(a, w, b, **kw)) if activation is None else (
            lambda a, w, b: em.conv2d(a, w, b, activation=activation, **kw))
        check(data, target, dtype, ember, lambda a, w, b: _relu(tF.conv2d(a, w, b, **kw), activation),
              [x, weight, bias], multilinear=True, relu=activation is not None)
        return
    grad_output = _tensor(data, conv_output_shape(case), dtype, target, "grad_output")
    if op == "conv2d_input_grad":
        check(data, target, dtype, lambda g, w: em.conv2d_input_grad(g, w, input_shape=case.x_shape, **kw),
              lambda g, w: torch.nn.grad.conv2d_input(case.x_shape, w, g, **kw), [grad_output, weight],
              multilinear=True, grads=False)
    else:
        check(data, target, dtype, lambda a, g: em.conv2d_weight_grad(a, g, weight_shape=case.weight_shape, **kw),
              lambda a, g: torch.nn.grad.conv2d_weight(a, case.weight_shape, g, **kw), [x, grad_output],
              multilinear=True, grads=False)


def _relu(t: Any, activation: str | None) -> Any:
    return t if activation is None else torch.relu(t)


@pytest.mark.parametrize(("target", "op"), cases(["linear"]))
@examples(1)
@given(data=st.data())
# no input features: the weight's gradient reshaped x with a -1 that a zero-size dim leaves open
@example(data=Recorded("linear", dtype="float16", batch=(), x=Drawn(np.zeros(0), "float16"),
                       weight=Drawn(np.zeros((1, 0)), "float16"),
                       bias=None, activation=None, **{"in": 0, "out": 1, "output gradient": np.array([1.0])}))
# a subnormal result, flushed to 0 by ember-xnnpack (_flushed)
@example(data=Recorded("linear", target="cpu+xnnpack", dtype="float32", batch=(4,),
                       x=Drawn([[0, 0, 0]] * 3 + [[0, 0.5, 0]], "float32"),
                       weight=Drawn([[0, 1.1754944e-38, 0]], "float32"), bias=None, activation=None,
                       **{"in": 3, "out": 1, "output gradient": np.zeros((4, 1))}))
def test_linear(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype = _dtype(data, target, op)
    batch = data.draw(shapes(max_dims=2), label="batch")
    n_in, n_out = data.draw(st.integers(0, 4), label="in"), data.draw(st.integers(1, 4), label="out")
    x = _tensor(data, (*batch, n_in), dtype, target, "x")
    weight = _tensor(data, (n_out, n_in), dtype, target, "weight")
    bias = _optional(data, (n_out,), dtype, target, "bias")
    activation = data.draw(st.sampled_from([None, "relu"]), label="activation")
    ember = F.linear if activation is None else (lambda a, w, b: em.linear(a, w, b, activation=activation))
    check(data, target, dtype, ember, lambda a, w, b: _relu(tF.linear(a, w, b), activation), [x, weight, bias],
          multilinear=True, relu=activation is not None)


# ---- pooling ---------------------------------------------------------------------------------------

def _max_pool_select(values: Any, x: Any, kw: dict[str, Any]) -> Any:
    """values read where PyTorch's max_pool2d found each window's maximum."""
    pooled, where = tF.max_pool2d(x, return_indices=True, **kw)
    return values.flatten(2).gather(2, where.flatten(2)).reshape(pooled.shape)


def _vjp(fn: Callable[..., Any], x: Any, grad_output: Any) -> Any:
    """PyTorch's gradient of ``fn`` at x for ``grad_output``."""
    return torch.autograd.grad(fn(x), x, grad_output)[0]


@pytest.mark.parametrize(("target", "op"), cases(POOL))
@examples(1)
@given(data=st.data())
# dilated windows over padding alone: -inf, and PyTorch's backward aborts (no gradient reference)
@example(data=Recorded("max_pool2d", dtype="float32", x=Drawn(np.arange(6.0).reshape(2, 1, 1, 3), "float32"),
                       case=PoolCase((2, 1, 1, 3), {"kernel_size": (2, 1), "stride": None, "padding": (1, 0),
                                                    "ceil_mode": False, "dilation": 2})))
def test_pool(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype = _dtype(data, target, op)
    if op == "adaptive_avg_pool2d":
        case = data.draw(adaptive_cases(), label="case")
        x = _tensor(data, case.x_shape, dtype, target, "x")
        check(data, target, dtype, lambda a: F.adaptive_avg_pool2d(a, **case.kwargs),
              lambda a: tF.adaptive_avg_pool2d(a, **case.kwargs), [x], multilinear=True)
        return
    kind = op[:3]
    case = data.draw(pool_cases(kind), label="case")
    kw = case.kwargs
    x = _tensor(data, case.x_shape, dtype, target, "x")
    torch_pool = (lambda a: tF.max_pool2d(a, **kw)) if kind == "max" else (lambda a: tF.avg_pool2d(a, **kw))
    # PyTorch 2.13's max_pool2d backward corrupts memory (aborts the process) where a dilated
    # window holds padding alone (its forward, -inf there, is fine): no gradient reference then
    padding_alone = kind == "max" and bool(np.isneginf(REFERENCES["max_pool2d"](np.zeros(case.x_shape), **kw)).any())
    if op in ("max_pool2d", "avg_pool2d"):
        ember_pool = getattr(F, op)
        check(data, target, dtype, lambda a: ember_pool(a, **kw), torch_pool, [x], multilinear=kind == "avg",
              grads=not padding_alone)
        return
    assume(not padding_alone)
    pooled_shape = tuple(torch_pool(_torch(np.zeros(case.x_shape))).shape)
    if op == "max_pool2d_select":
        values = _tensor(data, case.x_shape, dtype, target, "values")
        check(data, target, dtype, lambda v: em.max_pool2d_select(v, x[0], **kw),
              lambda v: _max_pool_select(v, _torch(x[1]), kw), [values], grads=False)
        return
    grad_output = _tensor(data, pooled_shape, dtype, target, "grad_output")
    if op == "max_pool2d_grad":
        check(data, target, dtype, lambda g: em.max_pool2d_grad(g, x[0], **kw),
              lambda g: _vjp(torch_pool, _torch(x[1], grad=True), g), [grad_output], multilinear=True,
              grads=False)
    else:
        check(data, target, dtype, lambda g: em.avg_pool2d_grad(g, case.x_shape, **kw),
              lambda g: _vjp(torch_pool, _torch(np.zeros(case.x_shape), grad=True), g), [grad_output],
              multilinear=True, grads=False)


# ---- activations and softmax ------------------------------------------------------------------------

@pytest.mark.parametrize(("target", "op"), cases(ACTIVATIONS))
@examples(1)
@given(data=st.data())
# where PyTorch's float64 gelu cancels (1 + erf(x / sqrt 2)): 6e-14 and 2e-13 off; int64's extremes
@example(data=Recorded("relu", dtype="int64", shape=(2,), x=Drawn([2**63 - 2, -(2**63)], "int64")))
@example(data=Recorded("gelu", dtype="float64", shape=(2,), x=Drawn([-3.5, -3.7], "float64"),
                       **{"output gradient": np.array([1.0, -1.0])}))
def test_activation(target, op, data):
    """Special values (NaN, infinities, the dtype's extremes) in the values; gradients where finite."""
    if elsewhere(data, target, op):
        return
    dtype = _dtype(data, target, op)
    x = _tensor(data, data.draw(shapes(), label="shape"), dtype, target, "x", finite=False, extremes=True,
                **target.limits(op, dtype))
    # the conformance references where PyTorch's would lose digits: its float64 gelu is
    # 0.5 x (1 + erf(x / sqrt 2)), which cancels below x = -2 (the reference takes erfc), and its
    # relu of an integer dtype goes through float64 here (int64's extremes do not survive it)
    exact = (op == "gelu" and dtype in GRAD_TOLERANCES) or KIND[dtype] in "iu"
    reference = REFERENCES[op] if exact else None
    check(data, target, dtype, getattr(F, op), getattr(tF, op), [x], grads=_finite(x[1]), reference=reference)


@pytest.mark.parametrize(("target", "op"), cases(["softmax", "log_softmax"]))
@examples(1)
@given(data=st.data())
# along a zero-length axis: the composite took the max of nothing
@example(data=Recorded("softmax", dtype="float16", shape=(0, 4), axis=-2, x=Drawn(np.zeros((0, 4)), "float16"),
                       **{"output gradient": np.zeros((0, 4))}))
@example(data=Recorded("log_softmax", dtype="float32", shape=(3, 0, 0), axis=2, x=Drawn(np.zeros((3, 0, 0)), "float32"),
                       **{"output gradient": np.zeros((3, 0, 0))}))
def test_softmax(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype = _dtype(data, target, op)
    shape = data.draw(shapes(max_dims=3), label="shape")
    axis = data.draw(st.integers(-max(len(shape), 1), max(len(shape), 1) - 1), label="axis")
    x = _tensor(data, shape, dtype, target, "x", finite=False, extremes=True, **target.limits(op, dtype))
    scale = conformance_magnitude(op, (x[1], axis), {}) if x[1].size else None
    check(data, target, dtype, lambda a: getattr(F, op)(a, axis), lambda a: getattr(tF, op)(a, axis), [x],
          magnitude=scale, grads=_finite(x[1]))


# ---- nll_loss ---------------------------------------------------------------------------------------

def torch_nll_loss(log_probs: Any, target: Any, weight: Any = None, *, ignore_index: int = -100,
                   reduction: str = "mean", label_smoothing: float = 0.0) -> Any:
    """PyTorch's nll_loss, with cross_entropy's label smoothing (1 - s of the target's loss, s of the
    mean over classes; 'mean' divides both by the weights of the counted targets)."""
    loss = tF.nll_loss(log_probs, target, weight, ignore_index=ignore_index, reduction=reduction)
    if not label_smoothing:
        return loss
    counted = target != ignore_index
    classes = log_probs.shape[1]
    # masked, not multiplied: an ignored row's share of the gradient is 0, even under a 0 / 0 mean
    smooth = (-(log_probs if weight is None else log_probs * weight).sum(axis=1) / classes).masked_fill(~counted, 0)
    if reduction == "sum":
        smooth = smooth.sum()
    elif reduction == "mean":
        picked = torch.where(counted, target, 0)
        divisor = counted.sum() if weight is None else (weight[picked] * counted).sum()
        smooth = smooth.sum() / divisor
    return (1 - label_smoothing) * loss + label_smoothing * smooth


@pytest.mark.parametrize(("target", "op"), cases(["nll_loss", "nll_loss_grad"]))
@examples(1)
@given(data=st.data())
# a 'mean' with nothing to count (every row ignored, or zero class weights): the composite gave
# ignored rows 0 * (g / 0) = NaN where ember-cpu's kernel and PyTorch give 0
@example(data=Recorded("nll_loss_grad", dtype="float16", rows=3, classes=4, ignore_index=-100, targets=[-100] * 3,
                       weighted=False, reduction="mean", label_smoothing=0.1,
                       log_probs=Drawn(np.zeros((3, 4)), "float16"),
                       grad_output=Drawn(-3.6, "float16"), **{"target dtype": "int32"}))
@example(data=Recorded("nll_loss", dtype="float32", rows=3, classes=2, ignore_index=0, targets=[1, 0, 0],
                       weighted=True, weights=[0.0, 0.0], reduction="mean", label_smoothing=0.5,
                       log_probs=Drawn(-np.ones((3, 2)), "float32"),
                       **{"weight layout": Layout((0,), (1,)), "target dtype": "int32",
                          "output gradient": np.array(-1.0)}))
def test_nll_loss(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype = _dtype(data, target, op)
    rows, classes = data.draw(st.integers(0, 5), label="rows"), data.draw(st.integers(1, 4), label="classes")
    ignore_index = data.draw(st.sampled_from([-100, 0, classes - 1, 7]), label="ignore_index")
    labels = data.draw(st.lists(st.sampled_from([*range(classes), ignore_index]), min_size=rows, max_size=rows),
                       label="targets")
    index_dtype = data.draw(st.sampled_from(["int64", "int32"]), label="target dtype")
    labels_t = em.asarray(np.array(labels, dtype=np.int64), dtype=index_dtype, device=target.device)
    # positive class weights: a 'mean' over a zero total is 0 / 0, whose gradient is NaN or 0 as
    # a formula happens to order it, in PyTorch as in ember
    weight = (_placed(data, data.draw(st.lists(st.sampled_from([0.25, 0.5, 1.0, 2.0]), min_size=classes,
                                               max_size=classes), label="weights"), dtype, target, "weight")
              if data.draw(st.booleans(), label="weighted") else _ABSENT)
    kw = {"ignore_index": ignore_index,
          "reduction": data.draw(st.sampled_from(["mean", "sum", "none"]), label="reduction"),
          "label_smoothing": data.draw(st.sampled_from([0.0, 0.0, 0.1, 0.5]), label="label_smoothing")}
    labels_torch = torch.tensor(labels, dtype=torch.int64)
    w_t, w_torch = weight[0], _torch(weight[1])
    log_probs = _tensor(data, (rows, classes), dtype, target, "log_probs", low=-6.0, high=0.0)
    if op == "nll_loss":
        # nn.functional.nll_loss has no smoothing (cross_entropy has): the registry op takes it
        ember = (lambda lp: F.nll_loss(lp, labels_t, w_t, kw["ignore_index"], kw["reduction"])) if not kw[
            "label_smoothing"] else (lambda lp: em.nll_loss(lp, labels_t, w_t, **kw))
        check(data, target, dtype, ember, lambda lp: torch_nll_loss(lp, labels_torch, w_torch, **kw), [log_probs],
              multilinear=True)
        return
    grad_output = _tensor(data, (rows,) if kw["reduction"] == "none" else (), dtype, target, "grad_output")
    check(data, target, dtype, lambda g: em.nll_loss_grad(g, labels_t, w_t, n_classes=classes, **kw),
          lambda g: _vjp(lambda lp: torch_nll_loss(lp, labels_torch, w_torch, **kw),
                               _torch(log_probs[1], grad=True), g), [grad_output], multilinear=True, grads=False)


# ---- normalization ---------------------------------------------------------------------------------

def _norm_grads(forward: Callable[..., Any], affine: tuple[int, ...], x: np.ndarray, weight: Any,
                grad_output: np.ndarray) -> list[np.ndarray]:
    """PyTorch's gradients of ``forward(x, weight, bias)`` for grad_output (weight ones if absent)."""
    x_t = _torch(x, grad=True)
    w_t = _torch(np.ones(affine) if weight is None else weight, grad=True)
    b_t = _torch(np.zeros(affine), grad=True)
    return [_numpy(g) for g in torch.autograd.grad(forward(x_t, w_t, b_t), (x_t, w_t, b_t), _torch(grad_output))]


@pytest.mark.parametrize(("target", "op"), cases(NORM))
@examples(1)
@given(data=st.data())
# a channel of equal values: the x-gradient's terms cancel to 0 (float32 noise of their size)
@example(data=Recorded("batch_norm_input_grad", dtype="float32", shape=(2, 1, 3), eps=1e-5,
                       x=Drawn(np.full((2, 1, 3), 0.7252147), "float32"), weight=None,
                       grad_output=Drawn([[[1.0, -2.0, 0.5]], [[1.5, 0.25, -1.0]]], "float32")))
# a group of zeros and values of both signs: the mean's rounding scales with mean |x|, not |mean|
@example(data=Recorded("group_norm", dtype="float32", shape=(2, 2, 2, 3), eps=1e-5, num_groups=1, weight=None,
                       bias=None, x=Drawn(np.concatenate([np.zeros((1, 2, 2, 3)), [[np.zeros((2, 3)), [
                           [1.84375, 0.5625, -1.90625], [-1.7305423, -0.78125, 2.0]]]]]), "float32"),
                       **{"output gradient": np.ones((2, 2, 2, 3))}))
# one value per sample and group, which F.group_norm refuses (a check made for batch_norm)
@example(data=Recorded("group_norm", dtype="float16", shape=(1, 1), eps=1e-5, x=Drawn([[0.5]], "float16"), num_groups=1,
                       weight=None, bias=None, **{"output gradient": np.array([[1.0]])}))
def test_norm(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype = _dtype(data, target, op)
    family = op.split("_norm")[0]
    shape = data.draw(norm_shapes(min_dims=1 if family == "layer" else 2), label="shape")
    eps = data.draw(st.sampled_from([1e-5, 1e-3, 0.5]), label="eps")
    x = _tensor(data, shape, dtype, target, "x", low=-3.0, high=3.0)
    if family == "batch":
        affine, parameter = shape[1:2], None
        torch_forward = lambda a, w, b: tF.batch_norm(a, None, None, w, b, training=True, eps=eps)  # noqa: E731
        scale_args = (x[1], None)
        if shape[0] * int(np.prod(shape[2:])) < 2:  # no variance to normalize by: both refuse
            raises_like(lambda: em.batch_norm_train(x[0], em.empty((2, shape[1]), dtype=dtype, device=target.device)),
                        lambda: torch_forward(_torch(x[1]), None, None))
            return
    elif family == "layer":
        count = data.draw(st.integers(1, len(shape)), label="normalized dims")
        affine = shape[len(shape) - count:]
        parameter = affine[0] if count == 1 and data.draw(st.booleans(), label="as an int") else affine
        torch_forward = lambda a, w, b: tF.layer_norm(a, affine, w, b, eps=eps)  # noqa: E731
        scale_args = (x[1], parameter)
    else:
        affine = shape[1:2]
        parameter = data.draw(group_counts(shape[1]), label="num_groups")
        # torch.group_norm, not F.group_norm, whose check (from batch_norm's) refuses one value per
        # sample and group: ember normalizes it to 0, as layer_norm and torch.group_norm do
        torch_forward = lambda a, w, b: torch.group_norm(  # noqa: E731  (it needs a weight beside a bias)
            a, parameter, torch.ones(affine, dtype=a.dtype) if w is None and b is not None else w, b, eps)
        scale_args = (x[1], parameter)
    weight = _optional(data, affine, dtype, target, "weight", low=0.25, high=2.0)
    x_scale, affine_scale = _norm_gradient_scales(family, x[1], parameter, affine, weight[1], eps)
    if op.endswith("_norm") or op == "batch_norm_train":
        bias = _optional(data, affine, dtype, target, "bias")
        scale = conformance_magnitude(op, (*scale_args, weight[1], bias[1]), {"eps": eps})
        # an intermediate in the subnormal range is rounded to an absolute step, which the division
        # by sqrt(var + eps) multiplies
        atol = TOLERANCES["float64" if dtype == "float64" else "float32"].atol / math.sqrt(eps)
        check(data, target, dtype, _ember_norm(family, parameter, eps), torch_forward, [x, weight, bias],
              magnitude=scale, atol=atol, grad_scales=[x_scale, affine_scale, affine_scale])
        if family == "batch":
            _check_batch_statistics(x, eps, dtype, target)
        return
    grad_output = _tensor(data, shape, dtype, target, "grad_output", low=-2.0, high=2.0)
    x_grad, w_grad, b_grad = _norm_grads(torch_forward, affine, x[1], weight[1], grad_output[1])
    affine_grad = np.stack([w_grad, b_grad]) if family != "batch" else np.stack([b_grad, w_grad])
    with target.active():
        if op.endswith("affine_grad") or op == "batch_norm_backward_reduce":
            got = getattr(em, op)(grad_output[0], x[0], _norm_parameter(family, x, parameter), eps=eps)
            expected, scale = affine_grad, affine_scale
        elif family == "batch":
            stats, sums = (em.asarray(v, dtype=dtype, device=target.device) for v in (_statistics(x[1]), affine_grad))
            got = em.batch_norm_input_grad(grad_output[0], x[0], stats, sums, weight[0], eps=eps)
            expected, scale = x_grad, x_scale
        else:
            buffer = em.empty((2, *affine), dtype=dtype, device=target.device) if data.draw(
                st.booleans(), label="affine output") else None
            got = getattr(em, op)(grad_output[0], x[0], parameter, weight[0], buffer, eps=eps)
            expected, scale = x_grad, x_scale
            if buffer is not None:
                _assert_gradient(buffer, affine_grad, dtype, "the affine gradients written", affine_scale)
    _assert_gradient(got, expected, dtype, op, scale)


def _norm_gradient_scales(family: str, x: np.ndarray, parameter: Any, affine: tuple[int, ...], weight: Any,
                          eps: float) -> tuple[float, float]:
    """The scales of a normalization's gradients, for an output gradient of at most 2 in size: the
    x-gradient's terms are |g w| / sqrt(var + eps), which cancel (to 0 where the values of a set are
    all equal: a broadcast x, or hypothesis's repeated values), so it is judged against their size,
    at the smallest spread of any normalized set; the affine gradients sum g * xhat and g over the
    x.size / prod(affine) values of each."""
    sets = {"batch": lambda: np.moveaxis(x, 1, 0).reshape(x.shape[1], -1),
            "layer": lambda: x.reshape(-1, math.prod(affine)),
            "group": lambda: x.reshape(x.shape[0] * parameter, -1)}[family]()
    spread = math.sqrt(sets.var(axis=1).min() + eps)
    w_max = 1.0 if weight is None else max(1.0, float(np.abs(weight).max()))
    count = x.size // math.prod(affine)
    return 2 * w_max / spread, 2 * count * (1 + float(np.abs(x).max()) / spread)


def _norm_parameter(family: str, x: tuple[Any, Any], parameter: Any) -> Any:
    """The argument after x of the norm's gradient ops: the statistics (batch), normalized_shape or num_groups."""
    if family != "batch":
        return parameter
    return em.asarray(_statistics(x[1]), dtype=x[0].dtype, device=x[0].device)


def _statistics(x: np.ndarray) -> np.ndarray:
    axes = (0, *range(2, x.ndim))
    return np.stack([x.mean(axis=axes), x.var(axis=axes)])


def _ember_norm(family: str, parameter: Any, eps: float) -> Callable[..., Any]:
    if family == "batch":
        return lambda a, w, b: F.batch_norm(a, None, None, w, b, training=True, eps=eps)
    if family == "layer":
        return lambda a, w, b: F.layer_norm(a, parameter, w, b, eps=eps)
    return lambda a, w, b: F.group_norm(a, parameter, w, b, eps=eps)


def _check_batch_statistics(x: tuple[Any, Any], eps: float, dtype: str, target: Any) -> None:
    """batch_norm_train writes each channel's mean and biased variance into stats."""
    with target.active():
        stats = em.empty((2, x[1].shape[1]), dtype=dtype, device=target.device)
        em.batch_norm_train(x[0], stats, eps=eps)
    scale = np.abs(x[1]).max(initial=0.0) ** np.array([[1.0], [2.0]])
    assert_matches(stats, _statistics(x[1]), dtype=dtype, magnitude=scale, what="the statistics written")


def _assert_gradient(got: Any, expected: np.ndarray, dtype: str, what: str, magnitude: Any = None) -> None:
    """Under GRAD_TOLERANCES, relative to ``magnitude`` or else normwise (to the largest element):
    a gradient chains several rounded reductions."""
    tol = GRAD_TOLERANCES[dtype]
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, expected {expected.shape}"
    scale = np.abs(expected).max(initial=0.0) if magnitude is None else magnitude
    result = compare(host(got), expected, dtype, magnitude=scale, rtol=tol.rtol, atol=tol.atol)
    assert result.ok, f"{what} ({dtype}): {result.message}"


# ---- optimizer updates -----------------------------------------------------------------------------

# Update ops round every step to the dtype, by contract (optim.toml: the composite's operations bit
# for bit, coefficients rounded as weak scalars); a float64 reference of ~10 chained roundings is
# not within float16's or bfloat16's 4 eps, so those dtypes are held to the composite bit for bit by
# tests/test_update_ops.py instead.
UPDATE_DTYPES = ("float32", "float64")


@pytest.mark.parametrize(("target", "op"), cases(UPDATES))
@examples(1)
@given(data=st.data())
# a first moment that underflows in float32 (0.1 * 2**-126, rounded to the subnormal grid), divided by eps = 1e-8
@example(data=Recorded("adam_step", dtype="float32", shapes=[(1,)], lr=0.01, weight_decay=0.1, maximize=True,
                       decoupled=True, beta1=0.9, beta2=0.9, eps=1e-8, step=1,
                       **{"lone tensor": True, "tensor 0": Drawn([-0.0], "float32"),
                          "tensor 1": Drawn([-(2.0**-126) * 1.375], "float32"), "tensor 2": Drawn([-0.0], "float32"),
                          "tensor 3": Drawn([-0.0], "float32")}))
def test_update(target, op, data):
    """One step of a parameter group (or a lone tensor) against torch.optim's, param and state in place."""
    if elsewhere(data, target, op):
        return
    dtype = data.draw(st.sampled_from([d for d in dtypes_of(op) if d in UPDATE_DTYPES]), label="dtype")
    group = data.draw(st.lists(shapes(max_dims=3), min_size=1, max_size=3), label="shapes")
    lone = len(group) == 1 and data.draw(st.booleans(), label="lone tensor")
    n_tensors = 4 if op == "adam_step" else 3
    drawn = [[_tensor(data, shape, dtype, target, f"tensor {k}", allow_broadcast=False,
                      low=0.0 if k == 3 else -4.0) for k in range(n_tensors)] for shape in group]
    # no subnormal inputs: their absolute steps, which eps divides 1e8-fold, round differently from
    # one formula to another (PyTorch's lerp or ember's products); results that underflow are _underflow's
    tiny = np.finfo(dtype).tiny
    assume(not any(np.any((v != 0) & (np.abs(v) < tiny)) for tensors_ in drawn for _, v in tensors_))
    hyper, torch_optimizer = _update_hyper(data, op)
    params = [_torch(tensors_[0][1]) for tensors_ in drawn]
    optimizer = torch_optimizer(params)
    for p, tensors_ in zip(params, drawn):
        p.grad = _torch(tensors_[1][1])
        state = _torch_state(op, hyper, [t[1] for t in tensors_[2:]])
        if state:
            optimizer.state[p] = state
    optimizer.step()
    columns = [list(c) for c in zip(*(tuple(t[0] for t in tensors_) for tensors_ in drawn))]
    with target.active():
        got = getattr(em, op)(*(c[0] if lone else c for c in columns), **hyper)
    returned = [got] if lone else got
    assert len(returned) == len(group) and all(g is p for g, p in zip(returned, columns[0])), "returns its params"
    for p, tensors_ in zip(params, drawn):
        state = optimizer.state[p]
        names = ["momentum_buffer"] if op == "sgd_step" else ["exp_avg", "exp_avg_sq"]
        for k, (name, expected) in enumerate([("param", p), *((n, state[n]) for n in names)]):
            t, before = tensors_[0 if k == 0 else k + 1]
            expected = _numpy(expected)
            scale = np.abs(before) + np.abs(expected - before) + (np.abs(tensors_[1][1]) if k else 0)
            assert_matches(t, expected, dtype=dtype, magnitude=scale, atol=_underflow(op, hyper, dtype),
                           what=f"{name} written in place")


def _underflow(op: str, hyper: dict[str, Any], dtype: str) -> float | None:
    """Adam divides its step by sqrt(v) + eps: a moment that underflowed to the subnormal grid (an
    absolute step) moves the parameter by that step times lr / ((1 - beta1^step) eps)."""
    if op != "adam_step":
        return None
    factor = hyper["lr"] / ((1 - hyper["beta1"] ** hyper["step"]) * hyper["eps"])
    return 2 * TOLERANCES[dtype].atol * factor


def _update_hyper(data: Any, op: str) -> tuple[dict[str, Any], Callable[[list[Any]], Any]]:
    """The op's keywords, and torch.optim's optimizer with the same."""
    lr = data.draw(st.sampled_from([0.1, 0.01, 1.5]), label="lr")
    decay = data.draw(st.sampled_from([0.0, 0.0, 0.1]), label="weight_decay")
    maximize = data.draw(st.booleans(), label="maximize")
    if op == "sgd_step":
        nesterov = data.draw(st.booleans(), label="nesterov")
        hyper = {"lr": lr, "momentum": data.draw(st.sampled_from([0.9, 0.5]), label="momentum"),
                 "dampening": 0.0 if nesterov else data.draw(st.sampled_from([0.0, 0.3]), label="dampening"),
                 "weight_decay": decay,
                 "nesterov": nesterov, "maximize": maximize, "first_step": data.draw(st.booleans(), label="first")}
        torch_hyper = {k: v for k, v in hyper.items() if k != "first_step"}
        return hyper, lambda params: torch.optim.SGD(params, foreach=False, **torch_hyper)
    decoupled = data.draw(st.booleans(), label="decoupled")
    hyper = {"lr": lr, "beta1": data.draw(st.sampled_from([0.9, 0.5]), label="beta1"),
             "beta2": data.draw(st.sampled_from([0.999, 0.9]), label="beta2"),
             "eps": data.draw(st.sampled_from([1e-8, 1e-3]), label="eps"),
             "step": data.draw(st.integers(1, 5), label="step"),
             "weight_decay": decay, "decoupled": decoupled, "maximize": maximize}
    optimizer = torch.optim.AdamW if decoupled else torch.optim.Adam
    return hyper, lambda params: optimizer(params, lr=lr, betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"],
                                           weight_decay=decay, maximize=maximize, foreach=False)


def _torch_state(op: str, hyper: dict[str, Any], state: list[np.ndarray]) -> dict[str, Any]:
    """torch.optim's state before this step (none before SGD's first: it starts the buffer itself)."""
    if op == "sgd_step":
        return {} if hyper["first_step"] else {"momentum_buffer": _torch(state[0])}
    return {"step": torch.tensor(float(hyper["step"] - 1)), "exp_avg": _torch(state[0]), "exp_avg_sq": _torch(state[1])}
