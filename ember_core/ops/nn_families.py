"""Builders of the neural-network op families (conv, linear, pool, softmax; see nn.toml for the
kernel calling conventions), added to ``families.BUILDERS`` when this module is imported (the last
line of families.py does).

Each op validates its arguments (tensor types, one device, one accepted dtype, shapes and sizes:
typed errors before any kernel runs), then offers the call to the providers in rank order; a
kernel may decline (NotImplemented), and when none takes it the op's composite runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from ember_core import dispatch
from ember_core.errors import DTypeError, RegistryError, ShapeError
from ember_core.ops import nn_composites as geometry
from ember_core.ops.families import (
    BUILDERS,
    as_tensor_arg,
    binder,
    check_dtype,
    empty,
    resolve,
    run,
    same_device,
)
from ember_core.ops.registry import OpSchema
from ember_core.tensor import Tensor
from ember_core.views import along_axis, check_writable


class Call(NamedTuple):
    """One validated call: what the kernel gets, and how the composite is called instead."""

    out_shape: tuple[int, ...]
    ins: tuple[Any, ...]  # the kernel's tensors (or None for an absent bias), made contiguous before the call
    attrs: dict[str, Any]  # normalized kernel attributes
    composite_kwargs: dict[str, Any]  # keyword arguments of the composite, after the tensors
    finish: Callable[[Tensor], Tensor] | None = None  # reshapes a kernel's output to the op's result
    writes: tuple[Tensor | None, ...] = ()  # further outputs the kernel writes (after out): a user's tensors
    # (None: an optional one left out, passed to the kernel as None)


def _tensors(schema: OpSchema, **named: Any) -> tuple[Tensor, ...]:
    """The op's tensor arguments (None stays None), checked for type, device and one accepted dtype."""
    tensors = tuple(None if t is None else as_tensor_arg(schema, t, name) for name, t in named.items())
    present = [t for t in tensors if t is not None]
    same_device(schema, *present)
    first = present[0]
    for name, t in zip(named, tensors):
        if t is not None and t._dtype is not first._dtype:
            raise DTypeError(f"{schema.name}: {name} is {t._dtype.name} but {next(iter(named))} is "
                             f"{first._dtype.name}; convert one with .astype(...)")
    check_dtype(schema, first._dtype)
    return tensors  # type: ignore[return-value]


def _activation(schema: OpSchema, activation: Any) -> None:
    if activation not in (None, "relu"):
        raise ValueError(f"{schema.name}: activation must be None or 'relu', got {activation!r}")


def _conv_attrs(g: geometry.ConvGeometry) -> dict[str, Any]:
    return {"stride": g.stride, "padding": g.padding, "dilation": g.dilation, "groups": g.groups}


# ---- conv ---------------------------------------------------------------------------------------

def _conv2d(schema: OpSchema, a: dict[str, Any]) -> Call:
    x, weight, bias = _tensors(schema, x=a["x"], weight=a["weight"], bias=a["bias"])
    g = geometry.conv_geometry(schema.name, x.shape, weight.shape, a["stride"], a["padding"], a["dilation"],
                               a["groups"])
    o = weight.shape[0]
    if bias is not None and bias.shape != (o,):
        raise ShapeError(f"{schema.name}: bias must have shape ({o},) for {o} filters, got {bias.shape}")
    _activation(schema, a["activation"])
    attrs = {**_conv_attrs(g), "activation": a["activation"]}
    return Call((x.shape[0], o, *g.out_hw), (x, weight, bias), attrs, attrs)


def _expect_shape(schema: OpSchema, name: str, t: Tensor, shape: tuple[int, ...]) -> None:
    if t.shape != shape:
        raise ShapeError(f"{schema.name}: {name} must have shape {shape} for these arguments, got {t.shape}")


def _shape_arg(schema: OpSchema, name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(isinstance(n, int) and n >= 0 for n in value):
        raise TypeError(f"{schema.name}: {name} must be a tuple of non-negative ints, got {value!r}")
    return tuple(value)


def _conv2d_input_grad(schema: OpSchema, a: dict[str, Any]) -> Call:
    grad_output, weight = _tensors(schema, grad_output=a["grad_output"], weight=a["weight"])
    input_shape = _shape_arg(schema, "input_shape", a["input_shape"])
    g = geometry.conv_geometry(schema.name, input_shape, weight.shape, a["stride"], a["padding"], a["dilation"],
                               a["groups"])
    _expect_shape(schema, "grad_output", grad_output, (input_shape[0], weight.shape[0], *g.out_hw))
    attrs = _conv_attrs(g)
    return Call(input_shape, (grad_output, weight), attrs,
                {"input_shape": input_shape, **attrs})


def _conv2d_weight_grad(schema: OpSchema, a: dict[str, Any]) -> Call:
    x, grad_output = _tensors(schema, x=a["x"], grad_output=a["grad_output"])
    weight_shape = _shape_arg(schema, "weight_shape", a["weight_shape"])
    g = geometry.conv_geometry(schema.name, x.shape, weight_shape, a["stride"], a["padding"], a["dilation"],
                               a["groups"])
    _expect_shape(schema, "grad_output", grad_output, (x.shape[0], weight_shape[0], *g.out_hw))
    attrs = _conv_attrs(g)
    return Call(weight_shape, (x, grad_output), attrs,
                {"weight_shape": weight_shape, **attrs})


# ---- linear -------------------------------------------------------------------------------------

def _linear(schema: OpSchema, a: dict[str, Any]) -> Call:
    x, weight, bias = _tensors(schema, x=a["x"], weight=a["weight"], bias=a["bias"])
    if weight.ndim != 2 or x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"{schema.name}: x (..., in) and weight (out, in) do not fit: {x.shape} and {weight.shape}")
    out_features = weight.shape[0]
    if bias is not None and bias.shape != (out_features,):
        raise ShapeError(f"{schema.name}: bias must have shape ({out_features},), got {bias.shape}")
    _activation(schema, a["activation"])
    attrs = {"activation": a["activation"]}
    if x.ndim == 2:
        return Call((x.shape[0], out_features), (x, weight, bias), attrs, attrs)
    batch = x.shape[:-1]
    x2d = x.reshape((math.prod(batch), x.shape[-1]))
    return Call((x2d.shape[0], out_features), (x2d, weight, bias), attrs, attrs,
                lambda out: out.reshape((*batch, out_features)))


# ---- pool ---------------------------------------------------------------------------------------

def _pool_attrs(schema: OpSchema, x_shape: tuple[int, ...], a: dict[str, Any]) -> tuple[geometry.PoolGeometry,
                                                                                       dict[str, Any]]:
    dilation = a.get("dilation", 1)
    g = geometry.pool_geometry(schema.name, x_shape, a["kernel_size"], a["stride"], a["padding"], dilation,
                               a["ceil_mode"])
    attrs = {"kernel_size": g.kernel_size, "stride": g.stride, "padding": g.padding, "ceil_mode": g.ceil_mode}
    if "dilation" in a:
        attrs["dilation"] = g.dilation
    if "count_include_pad" in a:
        attrs["count_include_pad"] = bool(a["count_include_pad"])
    return g, attrs


def _max_pool2d(schema: OpSchema, a: dict[str, Any]) -> Call:
    (x,) = _tensors(schema, x=a["x"])
    g, attrs = _pool_attrs(schema, x.shape, a)
    return Call((*x.shape[:2], *g.out_hw), (x,), attrs, attrs)


def _max_pool2d_backward(schema: OpSchema, a: dict[str, Any]) -> Call:
    """max_pool2d_grad (grad_output shaped like the pooled output) and max_pool2d_select (values like x)."""
    first = "grad_output" if "grad_output" in a else "values"
    t, x = _tensors(schema, **{first: a[first]}, x=a["x"])
    g, attrs = _pool_attrs(schema, x.shape, a)
    pooled = (*x.shape[:2], *g.out_hw)
    _expect_shape(schema, first, t, pooled if first == "grad_output" else x.shape)
    return Call(x.shape if first == "grad_output" else pooled, (t, x), attrs, attrs)


def _avg_pool2d(schema: OpSchema, a: dict[str, Any]) -> Call:
    (x,) = _tensors(schema, x=a["x"])
    g, attrs = _pool_attrs(schema, x.shape, a)
    return Call((*x.shape[:2], *g.out_hw), (x,), attrs, attrs)


def _avg_pool2d_grad(schema: OpSchema, a: dict[str, Any]) -> Call:
    (grad_output,) = _tensors(schema, grad_output=a["grad_output"])
    input_shape = _shape_arg(schema, "input_shape", a["input_shape"])
    g, attrs = _pool_attrs(schema, input_shape, a)
    _expect_shape(schema, "grad_output", grad_output, (*input_shape[:2], *g.out_hw))
    return Call(input_shape, (grad_output,), attrs, {"input_shape": input_shape, **attrs})


def _adaptive_avg_pool2d(schema: OpSchema, a: dict[str, Any]) -> Call:
    (x,) = _tensors(schema, x=a["x"])
    size = geometry.adaptive_output_size(schema.name, x.shape, a["output_size"])
    attrs = {"output_size": size}
    return Call((*x.shape[:2], *size), (x,), attrs, attrs)


# ---- softmax ------------------------------------------------------------------------------------

def _softmax(schema: OpSchema, a: dict[str, Any]) -> Call:
    (x,) = _tensors(schema, x=a["x"])
    xa, axis = along_axis(x, a["axis"])
    attrs = {"axis": axis}
    return Call(xa.shape, (xa,), attrs, attrs, None if xa is x else lambda out: out.reshape(x.shape))


# ---- losses -------------------------------------------------------------------------------------

REDUCTIONS = ("mean", "sum", "none")  # nn.functional checks its losses against these too
_INT64_RANGE = range(-(2**63), 2**63)


def _loss_attrs(schema: OpSchema, a: dict[str, Any]) -> dict[str, Any]:
    reduction, smoothing, ignore_index = a["reduction"], a["label_smoothing"], a["ignore_index"]
    if reduction not in REDUCTIONS:
        raise ValueError(f"{schema.name}: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) or not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"{schema.name}: label_smoothing must be a number in [0, 1], got {smoothing!r}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int) or ignore_index not in _INT64_RANGE:
        raise TypeError(f"{schema.name}: ignore_index must be an int64 value, got {ignore_index!r}")
    return {"ignore_index": ignore_index, "reduction": reduction, "label_smoothing": float(smoothing)}


def _class_targets(schema: OpSchema, target: Any, like: Tensor, rows: int, n_classes: int,
                   ignore_index: int) -> Tensor:
    """The targets as int64, each checked to be a class index or ignore_index (before any kernel
    reads log_probs at them)."""
    from ember_core.errors import IndexOutOfRangeError
    from ember_core.ops import namespace as ops

    target = as_tensor_arg(schema, target, "target")
    same_device(schema, like, target)
    if target._dtype.kind not in "iu":
        raise DTypeError(f"{schema.name}: class-index targets must be integers, got {target._dtype.name}")
    if target.shape != (rows,):
        raise ShapeError(f"{schema.name}: target must have shape ({rows},) for these inputs, got {target.shape}")
    if rows:
        low, high = ops.min(target).item(), ops.max(target).item()
        if (low < 0 or high >= n_classes) and ops.any(
                (target != ignore_index) & ((target < 0) | (target >= n_classes))).item():
            raise IndexOutOfRangeError(f"{schema.name}: targets must be class indices in [0, {n_classes}) or "
                                       f"ignore_index ({ignore_index}), got values in [{low}, {high}]")
    return target if target._dtype.name == "int64" else ops.astype(target, "int64")


def _check_class_weight(schema: OpSchema, weight: Tensor | None, n_classes: int) -> None:
    if weight is not None and weight.shape != (n_classes,):
        raise ShapeError(f"{schema.name}: weight must have one entry per class, shape ({n_classes},), "
                         f"got {weight.shape}")


def _nll_loss(schema: OpSchema, a: dict[str, Any]) -> Call:
    log_probs, weight = _tensors(schema, log_probs=a["log_probs"], weight=a["weight"])
    if log_probs.ndim != 2:
        raise ShapeError(f"{schema.name}: log_probs must be (N, C), got shape {log_probs.shape}; "
                         f"nn.functional.nll_loss accepts (C,) and (N, C, d1, ...) too")
    rows, n_classes = log_probs.shape
    _check_class_weight(schema, weight, n_classes)
    attrs = _loss_attrs(schema, a)
    target = _class_targets(schema, a["target"], log_probs, rows, n_classes, attrs["ignore_index"])
    return Call((rows,) if attrs["reduction"] == "none" else (), (log_probs, target, weight), attrs, attrs)


def _nll_loss_grad(schema: OpSchema, a: dict[str, Any]) -> Call:
    grad_output, weight = _tensors(schema, grad_output=a["grad_output"], weight=a["weight"])
    n_classes = a["n_classes"]
    if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes < 1:
        raise ValueError(f"{schema.name}: n_classes must be a positive int, got {n_classes!r}")
    _check_class_weight(schema, weight, n_classes)
    attrs = _loss_attrs(schema, a)
    target = as_tensor_arg(schema, a["target"], "target")
    if target.ndim != 1:
        raise ShapeError(f"{schema.name}: target must be 1-d (N,), got shape {target.shape}")
    rows = target.shape[0]
    target = _class_targets(schema, target, grad_output, rows, n_classes, attrs["ignore_index"])
    _expect_shape(schema, "grad_output", grad_output, (rows,) if attrs["reduction"] == "none" else ())
    return Call((rows, n_classes), (grad_output, target, weight), attrs, {"n_classes": n_classes, **attrs})


# ---- norm ---------------------------------------------------------------------------------------

def _channels(schema: OpSchema, x: Tensor) -> tuple[int, int, int]:
    """x (N, C, ...) as the (N, C, S) the kernels see."""
    if x.ndim < 2:
        raise ShapeError(f"{schema.name}: x must be (N, C, ...) with channels in dim 1, got shape {x.shape}")
    return x.shape[0], x.shape[1], math.prod(x.shape[2:])


def _per_channel(schema: OpSchema, c: int, **named: Tensor | None) -> None:
    for name, t in named.items():
        shape = (2, c) if name in ("stats", "sums") else (c,)
        if t is not None and t.shape != shape:
            raise ShapeError(f"{schema.name}: {name} must have shape {shape} for {c} channels, got {t.shape}")


def _eps(schema: OpSchema, eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{schema.name}: eps must be a finite number >= 0, got {eps!r}")
    return float(eps)


def _written_in_place(schema: OpSchema, name: str, t: Tensor, inputs: tuple[Tensor | None, ...], example: str) -> None:
    """An output argument: it may share memory with no input, and must not be part of a graph."""
    if any(i is not None and i._storage is t._storage for i in inputs):
        raise ValueError(f"{schema.name}: {name} is written and must not share memory with the op's inputs")
    check_writable(t, f"{schema.name}: {name}")
    if t._requires_grad:
        raise RuntimeError(f"{schema.name}: {name} is an output written in place; pass a tensor that does not "
                           f"require grad, e.g. {example}")


def _output_buffer(schema: OpSchema, name: str, t: Tensor, shape: tuple[int, ...],
                   inputs: tuple[Tensor | None, ...]) -> None:
    """An optional output the kernel fills directly: of its shape, contiguous, written in place."""
    _expect_shape(schema, name, t, shape)
    example = f"ember_core.empty({shape}, dtype=x.dtype)"
    _written_in_place(schema, name, t, inputs, example)
    if not t._contig:
        raise ValueError(f"{schema.name}: {name} is written in place and must be contiguous, e.g. {example}")


def _batch_norm_train(schema: OpSchema, a: dict[str, Any]) -> Call:
    x, stats, weight, bias = _tensors(schema, x=a["x"], stats=a["stats"], weight=a["weight"], bias=a["bias"])
    n, c, s = _channels(schema, x)
    if n * s < 2:
        raise ShapeError(f"{schema.name}: training needs more than one value per channel, got shape {x.shape}")
    _per_channel(schema, c, stats=stats, weight=weight, bias=bias)
    _written_in_place(schema, "stats", stats, (x, weight, bias), f"ember_core.empty((2, {c}), dtype=x.dtype)")
    attrs = {"eps": _eps(schema, a["eps"])}
    return Call((n, c, s), (x.reshape((n, c, s)), weight, bias), attrs, attrs, lambda out: out.reshape(x.shape),
                writes=(stats,))


def _batch_norm_backward_reduce(schema: OpSchema, a: dict[str, Any]) -> Call:
    grad_output, x, stats = _tensors(schema, grad_output=a["grad_output"], x=a["x"], stats=a["stats"])
    n, c, s = _channels(schema, x)
    _expect_shape(schema, "grad_output", grad_output, x.shape)
    _per_channel(schema, c, stats=stats)
    attrs = {"eps": _eps(schema, a["eps"])}
    return Call((2, c), (grad_output.reshape((n, c, s)), x.reshape((n, c, s)), stats), attrs, attrs)


def _batch_norm_input_grad(schema: OpSchema, a: dict[str, Any]) -> Call:
    grad_output, x, stats, sums, weight = _tensors(schema, grad_output=a["grad_output"], x=a["x"], stats=a["stats"],
                                                   sums=a["sums"], weight=a["weight"])
    n, c, s = _channels(schema, x)
    _expect_shape(schema, "grad_output", grad_output, x.shape)
    _per_channel(schema, c, stats=stats, sums=sums, weight=weight)
    attrs = {"eps": _eps(schema, a["eps"])}
    return Call((n, c, s), (grad_output.reshape((n, c, s)), x.reshape((n, c, s)), stats, sums, weight), attrs, attrs,
                lambda out: out.reshape(x.shape))


def _rows(schema: OpSchema, x: Tensor, normalized_shape: Any) -> tuple[tuple[int, ...], int, int]:
    """layer_norm's normalized_shape checked against x: (the shape, rows M, row length D)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    if not isinstance(shape, (tuple, list)) or not shape or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise TypeError(f"{schema.name}: normalized_shape must be an int or a non-empty tuple of ints, "
                        f"got {normalized_shape!r}")
    shape = tuple(shape)
    if len(shape) > x.ndim or x.shape[x.ndim - len(shape):] != shape:
        raise ShapeError(f"{schema.name}: normalized_shape {shape} must be the trailing dims of x, "
                         f"whose shape is {x.shape}")
    d = math.prod(shape)
    return shape, x.size // d if d else 0, d


def _layer_norm(schema: OpSchema, a: dict[str, Any]) -> Call:
    x, weight, bias = _tensors(schema, x=a["x"], weight=a["weight"], bias=a["bias"])
    shape, m, d = _rows(schema, x, a["normalized_shape"])
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            _expect_shape(schema, name, t, shape)
    attrs = {"eps": _eps(schema, a["eps"])}
    flat = tuple(None if t is None else t.reshape((d,)) for t in (weight, bias))
    return Call((m, d), (x.reshape((m, d)), *flat), attrs, attrs, lambda out: out.reshape(x.shape))


def _layer_norm_input_grad(schema: OpSchema, a: dict[str, Any]) -> Call:
    grad_output, x, weight, affine = _tensors(schema, grad_output=a["grad_output"], x=a["x"], weight=a["weight"],
                                              affine=a["affine"])
    shape, m, d = _rows(schema, x, a["normalized_shape"])
    _expect_shape(schema, "grad_output", grad_output, x.shape)
    if weight is not None:
        _expect_shape(schema, "weight", weight, shape)
    if affine is not None:
        _output_buffer(schema, "affine", affine, (2, *shape), (grad_output, x, weight))
    attrs = {"eps": _eps(schema, a["eps"])}
    return Call((m, d), (grad_output.reshape((m, d)), x.reshape((m, d)), None if weight is None else
                         weight.reshape((d,))), attrs, attrs,
                lambda out: out.reshape(x.shape), writes=(None if affine is None else affine.reshape((2, d)),))


def _layer_norm_affine_grad(schema: OpSchema, a: dict[str, Any]) -> Call:
    grad_output, x = _tensors(schema, grad_output=a["grad_output"], x=a["x"])
    shape, m, d = _rows(schema, x, a["normalized_shape"])
    _expect_shape(schema, "grad_output", grad_output, x.shape)
    attrs = {"eps": _eps(schema, a["eps"])}
    return Call((2, d), (grad_output.reshape((m, d)), x.reshape((m, d))), attrs, attrs,
                lambda out: out.reshape((2, *shape)))


def _groups(schema: OpSchema, x: Tensor, num_groups: Any) -> tuple[int, int, int]:
    """group_norm's x as (N, C, S), num_groups checked against its C channels."""
    n, c, s = _channels(schema, x)
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1 or c % num_groups:
        raise ValueError(f"{schema.name}: num_groups must be a positive int dividing the {c} channels of x, "
                         f"got {num_groups!r}")
    return n, c, s


def _group_norm(schema: OpSchema, a: dict[str, Any]) -> Call:
    x, weight, bias = _tensors(schema, x=a["x"], weight=a["weight"], bias=a["bias"])
    n, c, s = _groups(schema, x, a["num_groups"])
    _per_channel(schema, c, weight=weight, bias=bias)
    eps = _eps(schema, a["eps"])
    return Call((n, c, s), (x.reshape((n, c, s)), weight, bias), {"num_groups": a["num_groups"], "eps": eps},
                {"eps": eps}, lambda out: out.reshape(x.shape))


def _group_norm_input_grad(schema: OpSchema, a: dict[str, Any]) -> Call:
    grad_output, x, weight, affine = _tensors(schema, grad_output=a["grad_output"], x=a["x"], weight=a["weight"],
                                              affine=a["affine"])
    n, c, s = _groups(schema, x, a["num_groups"])
    _expect_shape(schema, "grad_output", grad_output, x.shape)
    _per_channel(schema, c, weight=weight)
    if affine is not None:
        _output_buffer(schema, "affine", affine, (2, c), (grad_output, x, weight))
    eps = _eps(schema, a["eps"])
    return Call((n, c, s), (grad_output.reshape((n, c, s)), x.reshape((n, c, s)), weight),
                {"num_groups": a["num_groups"], "eps": eps}, {"eps": eps}, lambda out: out.reshape(x.shape),
                writes=(affine,))


def _group_norm_affine_grad(schema: OpSchema, a: dict[str, Any]) -> Call:
    grad_output, x = _tensors(schema, grad_output=a["grad_output"], x=a["x"])
    n, c, s = _groups(schema, x, a["num_groups"])
    _expect_shape(schema, "grad_output", grad_output, x.shape)
    eps = _eps(schema, a["eps"])
    return Call((2, c), (grad_output.reshape((n, c, s)), x.reshape((n, c, s))),
                {"num_groups": a["num_groups"], "eps": eps}, {"eps": eps})


# ---- dropout ------------------------------------------------------------------------------------

_PHILOX_RANGE = range(2**64)


def _dropout(schema: OpSchema, a: dict[str, Any]) -> Call:
    (x,) = _tensors(schema, x=a["x"])
    p = a["p"]
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{schema.name}: p must be a float in [0, 1), got {p!r} (nn.functional.dropout handles p=1)")
    for name in ("seed", "offset"):
        value = a[name]
        if isinstance(value, bool) or not isinstance(value, int) or value not in _PHILOX_RANGE:
            raise ValueError(f"{schema.name}: {name} must be an int in [0, 2**64), got {value!r}; "
                             f"nn.functional.dropout reserves them from a generator")
    attrs = {"p": float(p), "seed": a["seed"], "offset": a["offset"]}
    return Call(x.shape, (x,), attrs, attrs)


# ---- the builder ----------------------------------------------------------------------------------

_PREPARE: dict[str, Callable[[OpSchema, dict[str, Any]], Call]] = {
    "conv2d": _conv2d, "conv2d_input_grad": _conv2d_input_grad, "conv2d_weight_grad": _conv2d_weight_grad,
    "linear": _linear, "max_pool2d": _max_pool2d, "max_pool2d_grad": _max_pool2d_backward,
    "max_pool2d_select": _max_pool2d_backward, "avg_pool2d": _avg_pool2d, "avg_pool2d_grad": _avg_pool2d_grad,
    "adaptive_avg_pool2d": _adaptive_avg_pool2d, "softmax": _softmax, "log_softmax": _softmax,
    "nll_loss": _nll_loss, "nll_loss_grad": _nll_loss_grad, "batch_norm_train": _batch_norm_train,
    "batch_norm_backward_reduce": _batch_norm_backward_reduce, "batch_norm_input_grad": _batch_norm_input_grad,
    "layer_norm": _layer_norm, "layer_norm_input_grad": _layer_norm_input_grad,
    "layer_norm_affine_grad": _layer_norm_affine_grad, "group_norm": _group_norm,
    "group_norm_input_grad": _group_norm_input_grad, "group_norm_affine_grad": _group_norm_affine_grad,
    "dropout": _dropout,
}


def _build(schema: OpSchema, composite: Callable | None) -> Callable[..., Any]:
    prepare = _PREPARE.get(schema.name)
    if prepare is None or composite is None:
        raise RegistryError(f"{schema.file}: op {schema.name!r} of family {schema.family!r}: the nn families serve "
                            f"only the ops of ember_core/ops/nn.toml, each with a composite")
    bind = binder(schema)
    positional_only = [p.name for p in schema.params if p.positional_only]

    def op(*args: Any, **kwargs: Any) -> Any:
        a = bind(*args, **kwargs)
        call = prepare(schema, a)
        first = call.ins[0]
        device, dtype = first._device, first._dtype
        choice = resolve(schema, device, dtype, composite)
        if choice.how != "composite":
            out = empty(call.out_shape, dtype, device)
            ins = tuple(None if t is None else t.contiguous() for t in call.ins)
            writes = tuple(t if t is None or t._contig else empty(t._shape, dtype, device) for t in call.writes)
            if run(schema, choice, (out, *writes), ins, call.attrs):
                _written(call.writes, writes)
                return out if call.finish is None else call.finish(out)
        dispatch.note_composite(schema.name, device.type, dtype)
        return composite(*(a[name] for name in positional_only), **call.composite_kwargs)

    op.__signature__ = bind.__signature__  # type: ignore[attr-defined]
    return op


def _written(targets: tuple[Tensor, ...], written: tuple[Tensor, ...]) -> None:
    """Outputs a kernel wrote in place: copied into a strided target, and its version moved (a
    node that saved it must see the write)."""
    for target, t in zip(targets, written):
        if t is None:  # an optional output left out
            continue
        if t is target:
            target._storage.version += 1
        else:
            from ember_core.creation import copy_into

            copy_into(target, t)  # moves the version itself


BUILDERS.update({family: _build for family in ("conv", "linear", "pool", "softmax", "loss", "norm", "dropout")})
