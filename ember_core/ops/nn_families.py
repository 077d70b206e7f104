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
from ember_core.views import normalize_axis


class Call(NamedTuple):
    """One validated call: what the kernel gets, and how the composite is called instead."""

    out_shape: tuple[int, ...]
    ins: tuple[Any, ...]  # the kernel's tensors (or None for an absent bias), made contiguous before the call
    attrs: dict[str, Any]  # normalized kernel attributes
    composite_kwargs: dict[str, Any]  # keyword arguments of the composite, after the tensors
    finish: Callable[[Tensor], Tensor] | None = None  # reshapes a kernel's output to the op's result


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
    attrs = {"axis": normalize_axis(a["axis"], x.ndim)}
    return Call(x.shape, (x,), attrs, attrs)


# ---- the builder ----------------------------------------------------------------------------------

_PREPARE: dict[str, Callable[[OpSchema, dict[str, Any]], Call]] = {
    "conv2d": _conv2d, "conv2d_input_grad": _conv2d_input_grad, "conv2d_weight_grad": _conv2d_weight_grad,
    "linear": _linear, "max_pool2d": _max_pool2d, "max_pool2d_grad": _max_pool2d_backward,
    "max_pool2d_select": _max_pool2d_backward, "avg_pool2d": _avg_pool2d, "avg_pool2d_grad": _avg_pool2d_grad,
    "adaptive_avg_pool2d": _adaptive_avg_pool2d, "softmax": _softmax, "log_softmax": _softmax,
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
            if run(schema, choice, (out,), ins, call.attrs):
                return out if call.finish is None else call.finish(out)
        dispatch.note_composite(schema.name, device.type, dtype)
        return composite(*(a[name] for name in positional_only), **call.composite_kwargs)

    op.__signature__ = bind.__signature__  # type: ignore[attr-defined]
    return op


BUILDERS.update({family: _build for family in ("conv", "linear", "pool", "softmax")})
