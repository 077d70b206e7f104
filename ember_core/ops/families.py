"""How each family of ops runs: shape/dtype inference and validation, then one kernel call.

A builder turns a schema into the callable that ``ember_core.<op>`` and the Tensor methods use.
Hot families (unary, binary) cache a plan per (dtypes, shapes, device, preferences) so that a
repeated call does one dict lookup before it allocates and calls the kernel.

Kernel calling convention (what a backend implements, see docs/writing-a-backend.md):
``kernel(out, *inputs, **attrs)``; outputs are fresh contiguous tensors on the device, inputs
already have the op's compute dtype and (for elementwise families) the output's shape.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ember_core import dispatch
from ember_core import dtypes as dt
from ember_core.autograd.grad_mode import MODE
from ember_core.errors import (
    DeviceError,
    DTypeError,
    IndexOutOfRangeError,
    ShapeError,
    UnsupportedOpError,
)
from ember_core.ops.registry import OpSchema
from ember_core.plugins import MAX_NDIM
from ember_core.tensor import MAX_BYTES, Tensor, contiguous_strides, new_storage
from ember_core.views import (
    _broadcast_shapes,
    along_axis,
    broadcast_to,
    check_writable,
    expand_to,
    normalize_axes,
    normalize_axis,
    permute_dims,
)

_make_contiguous = Tensor._make_contiguous
_layouts: dict[tuple[int, ...], tuple[tuple[int, ...], int]] = {}


def empty(shape: tuple[int, ...], dtype: dt.DType, device: Any) -> Tensor:
    """A fresh contiguous tensor: the allocation every op makes, so its layout is cached."""
    layout = _layouts.get(shape)
    if layout is None:
        if len(_layouts) > 4096:
            _layouts.clear()
        layout = _layouts[shape] = (contiguous_strides(shape), math.prod(shape))
    strides, numel = layout
    return _make_contiguous(new_storage(device, numel * dtype.itemsize), shape, strides, numel, dtype)


# ---- choosing and running a kernel ------------------------------------------------------------

def resolve(schema: OpSchema, device: Any, dtype: dt.DType, composite: Callable | None) -> dispatch.Choice:
    choice = dispatch.choose(schema.name, device.type, dtype, composite is not None, schema.fallback)
    if choice is None:
        device.backend  # noqa: B018  (an unavailable device explains itself first)
        raise UnsupportedOpError(
            f"{schema.name} has no kernel for {dtype.name} on {device} (providers: "
            f"{[b.name for b in dispatch.ranked_providers(device.type, dispatch.current())] or 'none'}) and no "
            f"composite or permitted fallback; run `ember backends` to see what each provider implements"
        )
    return choice


def run(schema: OpSchema, choice: dispatch.Choice | None, outs: tuple[Tensor, ...], ins: tuple[Any, ...],
        attrs: dict[str, Any]) -> bool:
    """Run a native kernel, or the host kernel through the fallback (copying both ways).

    A kernel that declines (returns NotImplemented) hands the call to the next choice.  Returns
    False when that leaves only the composite, which the caller then runs."""
    for operands in (ins, outs):  # (outs too: the copy family writes into views)
        for t in operands:
            if t.__class__ is Tensor and t._numel > _FEWER_ALWAYS_FIT:
                _check_walk(schema, t)
    while choice is not None and choice.how == "native":
        if choice.kernel(*outs, *ins, **attrs) is not NotImplemented:
            return True
        choice = choice.next
    if choice is None:
        raise UnsupportedOpError(f"{schema.name}: every provider declined this call on {outs[0]._device} and "
                                 f"there is no composite or fallback; see `ember backends`")
    if choice.how == "composite":
        return False
    _run_fallback(schema, choice, outs, ins, attrs)
    return True


_FEWER_ALWAYS_FIT = MAX_BYTES // 16  # no dtype is wider than 16 bytes


def _check_walk(schema: OpSchema, t: Tensor) -> None:
    """Refuse an operand (a broadcast view) larger than any tensor could be: its shape is valid,
    walking it is not.  The limit is the allocation's, MAX_BYTES as if the operand were dense, so
    a view allows exactly the ops its materialized copy would; beyond it a kernel runs for decades."""
    if t._numel * t._dtype.itemsize > MAX_BYTES:
        raise ShapeError(f"{schema.name}: an operand of shape {t._shape} ({t._dtype.name}) stands for "
                         f"{t._numel * t._dtype.itemsize} bytes, more than any tensor can hold (2**57, the largest "
                         f"address space); no op walks more, even over a broadcast view: reduce before broadcasting")


_UPDATES_OUTPUT = {"put"}  # families whose kernels read-modify-write their output (index_put)


def _run_fallback(schema: OpSchema, choice: dispatch.Choice, outs: tuple[Tensor, ...], ins: tuple[Any, ...],
                  attrs: dict[str, Any]) -> None:
    device = outs[0]._device
    first = next((x for x in ins if isinstance(x, Tensor)), outs[0])
    dispatch.check_fallback_allowed(schema.name, str(device), first._dtype.name)
    start = dispatch.now()
    from ember_core import transfer

    host_ins = tuple(transfer.host_view(x) if isinstance(x, Tensor) else x for x in ins)
    if schema.family in _UPDATES_OUTPUT:  # the kernel writes some of the output's elements only
        host_outs = tuple(transfer.host_view(o).contiguous() for o in outs)
    else:  # an optional output (None) stays absent
        host_outs = tuple(None if o is None else empty(o._shape, o._dtype, transfer.HOST) for o in outs)
    run(schema, dispatch.Choice("native", choice.provider, choice.kernel, choice.next), host_outs, host_ins, attrs)
    moved = sum(x.nbytes for x in (*ins, *outs) if isinstance(x, Tensor))
    for host, out in zip(host_outs, outs):
        if out is not None:
            transfer.write_from_host(out, host)
    dispatch.record_fallback(schema.name, str(device), outs[0]._dtype.name, moved, dispatch.now() - start)


def check_dtype(schema: OpSchema, dtype: dt.DType) -> None:
    if dtype not in schema.dtypes:
        accepted = ", ".join(d.name for d in dt.ALL_DTYPES if d in schema.dtypes)
        raise DTypeError(f"{schema.name} does not accept {dtype.name}; accepted dtypes: {accepted}")


def same_device(schema: OpSchema, *tensors: Tensor) -> Any:
    device = tensors[0]._device
    for t in tensors[1:]:
        if t._device is not device:
            raise DeviceError(f"{schema.name}: tensors on different devices, {device} and {t._device}; "
                              f"move one with .to_device(...) first (ember never copies implicitly)")
    return device


def as_tensor_arg(schema: OpSchema, x: Any, name: str = "x") -> Tensor:
    if isinstance(x, Tensor):
        return x
    raise TypeError(f"{schema.name}: {name} must be an ember tensor, got {type(x).__name__}; "
                    f"wrap data with ember_core.asarray(...)")


def cast(x: Tensor, dtype: dt.DType) -> Tensor:
    return x if x._dtype is dtype else _COPY(x, dtype)


_COPY: Callable[[Tensor, dt.DType], Tensor]  # bound by build_copy for "astype"


def result_dtype(schema: OpSchema, compute: dt.DType) -> dt.DType:
    rule = schema.result
    if rule == "bool":
        return dt.bool_
    if rule == "real":
        return dt.real_dtype(compute)
    if rule == "index":
        return dt.index_dtype
    return compute


def _compute_dtype(schema: OpSchema, dtype: dt.DType) -> dt.DType:
    if schema.int_to_float and dtype.kind in "biu":
        return dt.default_float
    return dtype


# ---- scalars ----------------------------------------------------------------------------------

_constants: dict[tuple[Any, ...], Tensor] = {}


def _scalar_key(value: Any) -> tuple[type, Any]:
    """A cache key for a Python scalar: zeros compare equal across signs (0.0 == -0.0, and so do
    complex numbers with a zero part: 4.5+0j == 4.5-0j), NaN equals nothing, and 1 == 1.0 == True,
    so the type is part of it and those values (every complex one) are keyed by repr."""
    return value.__class__, value if value and value == value and value.__class__ is not complex else repr(value)


def constant(value: Any, dtype: dt.DType, device: Any) -> Tensor:
    """A cached 0-d tensor holding a Python scalar (never handed to users, never written)."""
    key = (*_scalar_key(value), dtype, device)
    t = _constants.get(key)
    if t is None:
        if dtype.kind in "iu":
            dt.check_fits(value, dtype, "a Python scalar operand")
        from ember_core.creation import full

        t = full((), value, dtype=dtype, device=device)
        if len(_constants) > 1024:
            _constants.clear()
        _constants[key] = t
    return t


_scalar_operands: dict[tuple[Any, ...], Tensor] = {}
_PYTHON_SCALARS = (bool, int, float, complex)


def forget_constants(device_types: tuple[str, ...]) -> None:
    """Drop the cached scalar tensors of these device types (their backend was reset or
    unregistered: its memory is gone)."""
    for cache, device_at in ((_constants, -1), (_scalar_operands, -2)):
        for key in [k for k in cache if k[device_at].type in device_types]:
            del cache[key]


def scalar_operand(value: Any, partner: Tensor) -> Tensor:
    """A Python scalar meeting a tensor: the constant of the dtype it takes next to the partner,
    broadcast to the partner's shape.  Cached whole, so a repeated ``x * 1.5`` costs one lookup."""
    if value.__class__ not in _PYTHON_SCALARS:
        dt.scalar_kind_rank(value)  # anything but a scalar (a list, an array) is refused here, by name
    key = (*_scalar_key(value), partner._dtype, partner._device, partner._shape)
    t = _scalar_operands.get(key)
    if t is None:
        t = expand_to(constant(value, dt.dtype_for_scalar(value, partner._dtype), partner._device), partner._shape)
        if len(_scalar_operands) > 1024:
            _scalar_operands.clear()
        _scalar_operands[key] = t
    return t


def scalar_operands(schema: OpSchema, x1: Any, x2: Any) -> tuple[Tensor, Tensor]:
    if isinstance(x1, Tensor):
        if isinstance(x2, Tensor):
            return x1, x2
        return x1, scalar_operand(x2, x1)
    if isinstance(x2, Tensor):
        return scalar_operand(x1, x2), x2
    raise TypeError(f"{schema.name}: at least one operand must be an ember tensor, got "
                    f"{type(x1).__name__} and {type(x2).__name__}")


# ---- builders ---------------------------------------------------------------------------------

_state = dispatch._state


def build_unary(schema: OpSchema, composite: Callable | None) -> Callable[..., Tensor]:
    plans: dict[tuple[Any, ...], tuple[Any, ...]] = dispatch.plan_cache()

    def plan(x: Tensor) -> tuple[Any, ...]:
        compute = _compute_dtype(schema, x._dtype)
        check_dtype(schema, compute)
        choice = resolve(schema, x._device, compute, composite)
        return compute, result_dtype(schema, compute), choice, choice.kernel if choice.how == "native" else None

    def planned(x: Tensor) -> tuple[Any, ...]:
        key = (x._dtype, x._device, _state.prefs or dispatch.current())
        p = plans.get(key)
        if p is None:
            p = plans[key] = plan(x)
        return p

    def op(x: Tensor, /) -> Tensor:
        if x.__class__ is not Tensor:
            x = as_tensor_arg(schema, x)
        key = (x._dtype, x._device, _state.prefs or dispatch.current())
        p = plans.get(key)  # (planned(), inlined: the hot path)
        if p is None:
            p = plans[key] = plan(x)
        compute, out_dtype, choice, kernel = p
        if x._dtype is not compute:
            x = cast(x, compute)
        if kernel is not None:
            out = empty(x._shape, out_dtype, x._device)
            if kernel(out, x) is not NotImplemented or run(schema, choice.next, (out,), (x,), {}):
                return out
        elif choice.how != "composite":
            out = empty(x._shape, out_dtype, x._device)
            if run(schema, choice, (out,), (x,), {}):
                return out
        dispatch.note_composite(schema.name, x._device.type, compute)
        return composite(x)

    op.planned = planned  # type: ignore[attr-defined]  (what ember_core.hotpath compiles)
    return op


_broadcasts: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, ...]] = {}


def _broadcast_pair(s1: tuple[int, ...], s2: tuple[int, ...]) -> tuple[int, ...]:
    shape = _broadcasts.get((s1, s2))
    if shape is None:
        if len(_broadcasts) > 4096:
            _broadcasts.clear()
        shape = _broadcasts[s1, s2] = _broadcast_shapes(s1, s2)
    return shape


def build_binary(schema: OpSchema, composite: Callable | None) -> Callable[..., Tensor]:
    plans: dict[tuple[Any, ...], tuple[Any, ...]] = dispatch.plan_cache()

    def plan(x1: Tensor, x2: Tensor) -> tuple[Any, ...]:
        compute = _compute_dtype(schema, dt.promote_types(x1._dtype, x2._dtype))
        check_dtype(schema, compute)
        choice = resolve(schema, x1._device, compute, composite)
        return compute, result_dtype(schema, compute), choice, choice.kernel if choice.how == "native" else None

    def planned(x1: Tensor, x2: Tensor, device: Any) -> tuple[Any, ...]:
        key = (x1._dtype, x2._dtype, device, _state.prefs or dispatch.current())
        p = plans.get(key)
        if p is None:
            p = plans[key] = plan(x1, x2)
        return p

    def op(x1: Any, x2: Any, /) -> Tensor:
        if x1.__class__ is not Tensor or x2.__class__ is not Tensor:
            x1, x2 = scalar_operands(schema, x1, x2)
        device = x1._device
        if x2._device is not device:
            same_device(schema, x1, x2)
        p = plans.get((x1._dtype, x2._dtype, device, _state.prefs))  # (planned(), inlined: the hot path)
        compute, out_dtype, choice, kernel = p or planned(x1, x2, device)
        if x1._dtype is not compute:
            x1 = cast(x1, compute)
        if x2._dtype is not compute:
            x2 = cast(x2, compute)
        if kernel is None and choice.how == "composite":
            dispatch.note_composite(schema.name, device.type, compute)
            return composite(x1, x2)
        shape = x1._shape
        if x2._shape != shape:
            shape = _broadcast_pair(shape, x2._shape)
            x1, x2 = expand_to(x1, shape), expand_to(x2, shape)
        out = empty(shape, out_dtype, device)
        if kernel is not None:
            if kernel(out, x1, x2) is NotImplemented and not run(schema, choice.next, (out,), (x1, x2), {}):
                return composite(x1, x2)
        elif not run(schema, choice, (out,), (x1, x2), {}):
            return composite(x1, x2)
        return out

    def into(out: Tensor, x2: Any) -> bool:
        """``out = op(out, x2)`` computed in out's own memory (the in-place operators, outside
        autograd): the kernel's output is its first input.  False, with nothing written, when
        that cannot be done exactly: a conversion of out, a broadcast past out's shape, an
        operand partly overlapping out, a non-contiguous out, or no native kernel."""
        x1 = out
        if x2.__class__ is not Tensor:
            x1, x2 = scalar_operands(schema, x1, x2)
        device = out._device
        if x2._device is not device or not out._contig:
            return False
        compute, out_dtype, _, kernel = planned(x1, x2, device)
        if kernel is None or out_dtype is not out._dtype or x1._dtype is not compute:
            return False
        if x2._dtype is not compute:
            x2 = cast(x2, compute)
        if x2._shape != out._shape:
            if _broadcast_pair(out._shape, x2._shape) != out._shape:
                return False
            x2 = expand_to(x2, out._shape)
        if x2._storage is out._storage and (x2._offset != out._offset or x2._strides != out._strides):
            return False  # x[1:] += x[:-1] must read the values before the write
        return kernel(out, out, x2) is not NotImplemented

    op.into = into  # type: ignore[attr-defined]
    op.planned = planned  # type: ignore[attr-defined]  (what ember_core.hotpath compiles)
    return op


def build_where(schema: OpSchema, composite: Callable | None) -> Callable[..., Tensor]:
    def op(condition: Tensor, x1: Any, x2: Any, /) -> Tensor:
        condition = as_tensor_arg(schema, condition, "condition")
        if condition._dtype is not dt.bool_:
            raise DTypeError(f"where: condition must be bool, got {condition._dtype.name}")
        if not isinstance(x1, Tensor) and not isinstance(x2, Tensor):
            x1 = constant(x1, dt.dtype_for_scalar(x1, None), condition._device)
        x1, x2 = scalar_operands(schema, x1, x2)
        device = same_device(schema, condition, x1, x2)
        shape = _broadcast_shapes(condition._shape, x1._shape, x2._shape)
        compute = dt.promote_types(x1._dtype, x2._dtype)
        choice = resolve(schema, device, compute, composite)
        ins = tuple(expand_to(t, shape) for t in (condition, cast(x1, compute), cast(x2, compute)))
        out = empty(shape, compute, device)
        if choice.how == "composite" or not run(schema, choice, (out,), ins, {}):
            dispatch.note_composite(schema.name, device.type, compute)
            return composite(*ins)
        return out

    return op


def build_copy(schema: OpSchema, composite: Callable | None) -> Callable[..., Tensor]:
    """``copy(x)``: a contiguous copy; ``astype(x, dtype, /, *, copy=True, device=None)``: a
    contiguous converted copy."""

    def op(x: Tensor, dtype: Any = None, /) -> Tensor:
        x = as_tensor_arg(schema, x)
        dtype = x._dtype if dtype is None else dt.as_dtype(dtype)
        dt.check_cast(x._dtype, dtype, schema.name)
        # a conversion is served by the kernel of the source dtype (it writes any destination)
        choice = resolve(schema, x._device, x._dtype, composite)
        out = empty(x._shape, dtype, x._device)
        run(schema, choice, (out,), (x,), {})
        return out

    if schema.name != "astype":
        return op
    global _COPY
    _COPY = op

    def astype(x: Tensor, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Tensor:
        """The Array API's astype: copy=False returns x itself when it already has the dtype (and
        device); device= gives the result on that device (through to_device, so a gradient goes
        back to x's device)."""
        x = as_tensor_arg(schema, x)
        if device is not None:
            x = x.to_device(device)
        return x if not copy and dt.as_dtype(dtype) is x._dtype else op(x, dtype)

    return astype


def _bound_builder(impl: Callable[[OpSchema, Callable | None, dict[str, Any]], Any]) -> Callable[..., Any]:
    """A builder for ops with keyword parameters: calls are bound to the schema's signature
    (defaults applied, unknown names rejected) and ``impl(schema, composite, args)`` runs them."""

    def builder(schema: OpSchema, composite: Callable | None) -> Callable[..., Any]:
        bind = binder(schema)

        def op(*args: Any, **kwargs: Any) -> Any:
            return impl(schema, composite, bind(*args, **kwargs))

        op.__signature__ = bind.__signature__  # type: ignore[attr-defined]
        return op

    return builder


_FLAG_TYPES = ("bool", "bool | None")


def binder(schema: OpSchema) -> Callable[..., dict[str, Any]]:
    """A function with the op's signature that returns its arguments by name, defaults applied.

    Generated from the schema so that CPython itself binds the call (inspect.Signature.bind
    costs tens of microseconds per call); a bad call raises TypeError naming the op's signature.
    Parameters declared ``bool`` (or ``bool | None``) are checked here, for every op at once: a
    flag is True or False (numpy's bools read as Python's), never an int or a string, which would
    be read by truthiness (descending="no" sorting descending), as PyTorch refuses them too."""
    parts: list[str] = []
    checks: list[str] = []
    defaults: dict[str, Any] = {"_flag": _flag}
    for i, p in enumerate(schema.params):
        if p.annotation in _FLAG_TYPES:
            optional = p.annotation != "bool"
            checks.append(f"    if {p.name}.__class__ is not bool{f' and {p.name} is not None' if optional else ''}:\n"
                          f"        {p.name} = _flag({p.name!r}, {p.name}, {optional})\n")
        if p.keyword_only and "*" not in parts:
            parts.append("*")
        if p.required:
            parts.append(p.name)
        else:
            defaults[f"_default{i}"] = p.default
            parts.append(f"{p.name}=_default{i}")
        if p.positional_only and not (i + 1 < len(schema.params) and schema.params[i + 1].positional_only):
            parts.append("/")
    names = ", ".join(f"{p.name!r}: {p.name}" for p in schema.params)
    fn_name = schema.name.rsplit(".", 1)[-1]  # a vendor op's "acme.double" is no identifier
    source = f"def {fn_name}({', '.join(parts)}):\n{''.join(checks)}    return {{{names}}}\n"
    exec(compile(source, f"<{schema.file}: {schema.name}>", "exec"), defaults)
    bind = defaults[fn_name]

    def checked(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{schema.name}{schema.signature_text}: {exc}") from None

    checked.__signature__ = inspect.signature(bind)  # type: ignore[attr-defined]
    return checked


def _flag(name: str, value: Any, optional: bool) -> bool:
    """A flag that is not a Python bool: numpy's bool reads as one, anything else is refused."""
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"{name} must be True or False{' (or None)' if optional else ''}, got "
                    f"{type(value).__name__} {value!r}")


class _ReductionPlan(NamedTuple):
    composite: bool  # the op runs as its composite (a provider excluded, say)
    compute: dt.DType  # the input's dtype for the kernel
    out_dtype: dt.DType
    order: tuple[int, ...] | None  # kept axes then reduced ones; None when already in that order
    flat: tuple[int, ...] | None  # one flat kept dim when there are more than a descriptor holds
    out_shape: tuple[int, ...]
    attrs: dict[str, Any]
    result_shape: tuple[int, ...]  # with keepdims' ones
    choice: dispatch.Choice | None


def build_reduction(schema: OpSchema, composite: Callable | None) -> Callable[..., Any]:
    """Reductions over axes.  The plan for a (dtype, shape, device, axis, keepdims, dtype
    argument) is cached, so a repeated call allocates and calls the kernel."""
    bind = binder(schema)
    plans: dict[tuple[Any, ...], _ReductionPlan] = dispatch.plan_cache()

    def plan(x: Tensor, axis: Any, keepdims: bool, requested: Any) -> _ReductionPlan:
        axes = normalize_axes(axis, x.ndim)
        out_dtype = _reduction_dtype(schema, x._dtype, requested)
        if composite is not None and dispatch.choose(schema.name, x._device.type, out_dtype, True,
                                                     schema.fallback).how == "composite":
            return _ReductionPlan(True, x._dtype, out_dtype, None, None, (), {}, (), None)
        accumulate = schema.result == "accumulate"  # sum/prod: bool and integers accumulate in int64
        check_dtype(schema, out_dtype if accumulate else x._dtype)
        compute = x._dtype if schema.result == "bool" else out_dtype
        if schema.name in ("max", "min") and any(x._shape[i] == 0 for i in axes):
            raise ShapeError(f"{schema.name} of an empty slice has no identity: shape {x._shape}, axes {axes}")
        kept = tuple(i for i in range(x.ndim) if i not in axes)
        kept_shape = tuple(x._shape[i] for i in kept)
        order = kept + axes
        flat = None
        if x.ndim > MAX_NDIM:  # more dims than a kernel descriptor holds: reduce one flat dim instead
            flat = (math.prod(kept_shape), -1)
        out_shape = (math.prod(kept_shape),) if flat is not None else kept_shape
        result_shape = tuple(1 if i in axes else n for i, n in enumerate(x._shape)) if keepdims else kept_shape
        return _ReductionPlan(False, compute, out_dtype, None if order == tuple(range(x.ndim)) else order, flat,
                              out_shape, {"axes": tuple(range(len(out_shape), x.ndim if flat is None else 2))},
                              result_shape, resolve(schema, x._device, compute, None))

    def op(*args: Any, **kwargs: Any) -> Tensor:
        a = bind(*args, **kwargs)
        x = a["x"]
        if x.__class__ is not Tensor:
            x = as_tensor_arg(schema, x)
        axis, keepdims, requested = a["axis"], a["keepdims"], a.get("dtype")
        if axis.__class__ is list:
            axis = tuple(axis)
        if _exact_axis(axis):
            key = (x._dtype, x._shape, x._device, axis, keepdims, requested, _state.prefs or dispatch.current())
            p = plans.get(key)
            if p is None:
                if len(plans) > 4096:
                    plans.clear()
                p = plans[key] = plan(x, axis, keepdims, requested)
        else:  # planned and checked afresh: True == 1.0 == 1 as keys, and would find axis 1's plan
            p = plan(x, axis, keepdims, requested)
        if p.composite:
            dispatch.note_composite(schema.name, x._device.type, p.out_dtype)
            return composite(**a)
        if x._dtype is not p.compute:
            x = cast(x, p.compute)
        if p.order is not None:
            x = permute_dims(x, p.order)
        if p.flat is not None:
            x = x.reshape(p.flat)
        out = empty(p.out_shape, p.out_dtype, x._device)
        run(schema, p.choice, (out,), (x,), p.attrs)
        return out if p.result_shape == p.out_shape else out.reshape(p.result_shape)

    op.__signature__ = bind.__signature__  # type: ignore[attr-defined]
    return op


def _exact_axis(axis: Any) -> bool:
    """None, an int or a tuple of ints, exactly: the axes a plan may be cached under."""
    return axis is None or axis.__class__ is int or (axis.__class__ is tuple and all(a.__class__ is int for a in axis))


def _reduction_dtype(schema: OpSchema, dtype: dt.DType, requested: Any) -> dt.DType:
    if schema.result == "bool":
        return dt.bool_
    if requested is not None:
        requested = dt.as_dtype(requested)
        if requested is dt.bool_ and schema.result == "accumulate":  # the kernels add and multiply numbers
            raise DTypeError(f"{schema.name} accumulates in a numeric dtype, not bool; for a logical reduction "
                             f"use any() or all(), or convert the result with .astype(bool)")
        dt.check_cast(dtype, requested, schema.name)
        return requested
    if schema.result == "accumulate" and dtype.kind in "biu":
        return dt.default_int
    return dtype


@_bound_builder
def build_arg_reduction(schema: OpSchema, composite: Callable | None, a: dict[str, Any]) -> Tensor:
    x = as_tensor_arg(schema, a["x"])
    check_dtype(schema, x._dtype)
    axis, keepdims = a["axis"], a["keepdims"]
    if axis is None:
        xp, kept_shape = x.reshape(-1), ()
    else:
        xa, axis = along_axis(x, axis)
        xp = permute_dims(xa, (*tuple(i for i in range(xa.ndim) if i != axis), axis))
        kept_shape = xp._shape[:-1]
    if xp._shape[-1] == 0:
        raise ShapeError(f"{schema.name} of an empty sequence (shape {x._shape}) is undefined")
    out = empty(kept_shape, dt.index_dtype, x._device)
    run(schema, resolve(schema, x._device, x._dtype, None), (out,), (xp,), {})
    if keepdims:
        out = out.reshape(tuple(1 if axis is None or i == axis else n for i, n in enumerate(x._shape)))
    return out


def _last_axis_op(schema: OpSchema, x: Tensor, axis: int, out_dtype: dt.DType, attrs: dict[str, Any]) -> Tensor:
    """Run a last-axis kernel (scan, sort) along ``axis`` and return the result in x's axis order
    (and shape: a 0-d x gives a 0-d result)."""
    xa, axis = along_axis(x, axis)
    order = (*tuple(i for i in range(xa.ndim) if i != axis), axis)
    xp = permute_dims(xa, order)
    out = empty(xp._shape, out_dtype, x._device)
    run(schema, resolve(schema, x._device, x._dtype, None), (out,), (xp,), attrs)
    inverse = tuple(order.index(i) for i in range(xa.ndim))
    return permute_dims(out, inverse) if x.ndim else out.reshape(())


@_bound_builder
def build_sort(schema: OpSchema, composite: Callable | None, a: dict[str, Any]) -> Tensor:
    x = as_tensor_arg(schema, a["x"])
    check_dtype(schema, x._dtype)
    out_dtype = dt.index_dtype if schema.result == "index" else x._dtype
    return _last_axis_op(schema, x, a["axis"], out_dtype, {"descending": a["descending"]})


@_bound_builder
def build_scan(schema: OpSchema, composite: Callable | None, a: dict[str, Any]) -> Tensor:
    x = as_tensor_arg(schema, a["x"])
    axis = a["axis"]
    if axis is None:
        if x.ndim > 1:
            raise ShapeError(f"{schema.name}: axis is required for a {x.ndim}-d tensor")
        axis = 0
    x = cast(x, _reduction_dtype(schema, x._dtype, a.get("dtype")))  # bool/ints accumulate in int64
    check_dtype(schema, x._dtype)
    if a.get("include_initial") and x.ndim == 0:
        raise ShapeError(f"{schema.name} of a 0-d tensor is 0-d, which cannot hold the initial value as well; "
                         f"reshape x to (1,) to get both, or pass include_initial=False")
    out = _last_axis_op(schema, x, axis, x._dtype, {})
    if a.get("include_initial"):
        from ember_core.creation import zeros
        from ember_core.ops import call

        axis = normalize_axis(axis, x.ndim)
        initial = zeros(tuple(1 if i == axis else n for i, n in enumerate(out._shape)), dtype=out._dtype,
                        device=out._device)
        if schema.name == "cumulative_prod":
            initial = initial + 1
        out = call("concat", [initial, out], axis=axis)
    return out


def build_matmul(schema: OpSchema, composite: Callable | None) -> Callable[..., Tensor]:
    def op(x1: Tensor, x2: Tensor, /) -> Tensor:
        x1, x2 = as_tensor_arg(schema, x1, "x1"), as_tensor_arg(schema, x2, "x2")
        device = same_device(schema, x1, x2)
        if x1.ndim == 0 or x2.ndim == 0:
            raise ShapeError(f"matmul needs at least 1-d operands, got shapes {x1._shape} and {x2._shape}")
        compute = dt.promote_types(x1._dtype, x2._dtype)
        check_dtype(schema, compute)
        a = x1.reshape((1, x1._shape[0])) if x1.ndim == 1 else x1
        b = x2.reshape((x2._shape[0], 1)) if x2.ndim == 1 else x2
        if a._shape[-1] != b._shape[-2]:
            raise ShapeError(f"matmul: shapes {x1._shape} and {x2._shape} do not fit "
                             f"({a._shape[-1]} != {b._shape[-2]} in the contracted dimension)")
        a_batch, b_batch = a._shape[:-2], b._shape[:-2]
        batch = a_batch if a_batch == b_batch else _broadcast_shapes(a_batch, b_batch)
        m, n = a._shape[-2], b._shape[-1]
        a, b = cast(a, compute), cast(b, compute)
        if a_batch != batch:
            a = expand_to(a, (*batch, *a._shape[-2:]))
        if b_batch != batch:
            b = expand_to(b, (*batch, *b._shape[-2:]))
        out = empty((*batch, m, n), compute, device)
        run(schema, resolve(schema, device, compute, None), (out,), (a, b), {})
        if x1.ndim == 1:
            out = out.reshape((*out._shape[:-2], n))
        if x2.ndim == 1:
            out = out.reshape(out._shape[:-1])
        return out

    return op


def build_fill(schema: OpSchema, composite: Callable | None) -> Callable[..., Tensor]:
    """``full(shape, fill_value, *, dtype, device)``."""

    def op(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
        from ember_core.device import as_device, default_device
        from ember_core.views import as_shape

        shape = as_shape(shape)
        if isinstance(fill_value, Tensor):
            fill_value = fill_value.item()
        dtype = dt.dtype_for_scalar(fill_value, None) if dtype is None else dt.as_dtype(dtype)
        device = default_device() if device is None else as_device(device)
        if dtype.kind in "biu" and isinstance(fill_value, (float, complex)):
            raise DTypeError(f"full: cannot fill {dtype.name} with {fill_value!r}; pass an int or a float dtype")
        if dtype.kind in "iu":
            dt.check_fits(fill_value, dtype, "full")
        out = empty(shape, dtype, device)
        run(schema, resolve(schema, device, dtype, None), (out,), (), {"value": fill_value})
        return out

    return op


def _axis_view(x: Tensor, axis: int) -> Tensor:
    """x as (outer, n, inner) around ``axis``: the layout take/put kernels see."""
    return x.reshape((math.prod(x._shape[:axis]), x._shape[axis], math.prod(x._shape[axis + 1:])))


def checked_indices(schema: OpSchema, indices: Any, n: int, device: Any) -> Tensor:
    """int64 contiguous 1-d indices, every one in [-n, n): validated before any kernel sees them."""
    from ember_core.creation import asarray

    if not isinstance(indices, Tensor):
        indices = asarray(indices, device=device)
    if indices._dtype.kind not in "iu":
        raise DTypeError(f"{schema.name}: indices must be integers, got {indices._dtype.name}")
    if indices.ndim != 1:
        raise ShapeError(f"{schema.name}: indices must be 1-d, got shape {indices._shape}")
    same_device(schema, indices, constant(0, dt.int64, device))
    if indices._numel:
        from ember_core.ops import call

        low, high = call("min", indices).item(), call("max", indices).item()
        if low < -n or high >= n:
            bad = low if low < -n else high
            raise IndexOutOfRangeError(f"{schema.name}: index {bad} is out of range for a dimension of size {n}")
    return cast(indices, dt.int64).contiguous()


@_bound_builder
def build_take(schema: OpSchema, composite: Callable | None, a: dict[str, Any]) -> Tensor:
    x = as_tensor_arg(schema, a["x"])
    axis = a["axis"]
    if axis is None:
        if x.ndim != 1:
            raise ShapeError(f"take: axis is required for a {x.ndim}-d tensor")
        axis = 0
    xa, axis = along_axis(x, axis)
    idx = checked_indices(schema, a["indices"], xa._shape[axis], x._device)
    if x.ndim == 0 and idx._numel != 1:
        raise ShapeError(f"take from a 0-d tensor gives a 0-d result, so it takes exactly one index (0 or -1), "
                         f"got {idx._numel}")
    x3 = _axis_view(xa, axis)
    out = empty((x3._shape[0], idx._numel, x3._shape[2]), x._dtype, x._device)
    run(schema, resolve(schema, x._device, x._dtype, None), (out,), (x3, idx), {})
    return out.reshape((*x._shape[:axis], idx._numel, *x._shape[axis + 1:]) if x.ndim else ())


@_bound_builder
def build_put(schema: OpSchema, composite: Callable | None, a: dict[str, Any]) -> Tensor:
    x = as_tensor_arg(schema, a["x"])
    values = a["values"]
    if MODE.enabled and (x._requires_grad or (isinstance(values, Tensor) and values._requires_grad)):
        raise RuntimeError("index_put writes in place and is not recorded by autograd; write with "
                           "x[indices] = values (recorded) or run it under ember_core.no_grad()")
    check_writable(x, f"{schema.name}: x")
    xa, axis = along_axis(x, a["axis"])  # a 0-d x: its one-element view, written in place
    idx = checked_indices(schema, a["indices"], xa._shape[axis], x._device)
    if not isinstance(values, Tensor):
        values = constant(values, x._dtype, x._device)
    same_device(schema, x, values)
    shape = (*xa._shape[:axis], idx._numel, *xa._shape[axis + 1:])
    values = broadcast_to(cast(values, x._dtype), shape)
    dst = _axis_view(xa, axis)  # a view when x's layout allows one, else a copy written back below
    run(schema, resolve(schema, x._device, x._dtype, None), (dst,), (idx, _axis_view(values, axis)),
        {"accumulate": a["accumulate"]})
    if dst._storage is not x._storage:
        from ember_core.creation import copy_into

        copy_into(x, dst.reshape(x._shape))
    x._storage.version += 1
    return x


def build_nonzero(schema: OpSchema, composite: Callable | None) -> Callable[..., tuple[Tensor, ...]]:
    def op(x: Tensor, /) -> tuple[Tensor, ...]:
        from ember_core.ops import call

        x = as_tensor_arg(schema, x)
        if x.ndim == 0:
            raise ShapeError("nonzero of a 0-d tensor is undefined; use x.reshape(1) or bool(x)")
        count = int(call("count_nonzero", x).item())
        out = empty((count, x.ndim), dt.index_dtype, x._device)
        run(schema, resolve(schema, x._device, x._dtype, None), (out,), (x,), {})
        return tuple(out[:, d] for d in range(x.ndim))

    return op


@_bound_builder
def build_searchsorted(schema: OpSchema, composite: Callable | None, a: dict[str, Any]) -> Tensor:
    from ember_core.ops import call

    x1, x2 = as_tensor_arg(schema, a["x1"], "x1"), as_tensor_arg(schema, a["x2"], "x2")
    device = same_device(schema, x1, x2)
    if x1.ndim != 1:
        raise ShapeError(f"searchsorted: x1 must be 1-d, got shape {x1._shape}")
    if a["side"] not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {a['side']!r}")
    if a["sorter"] is not None:
        x1 = call("take", x1, a["sorter"])
    compute = dt.promote_types(x1._dtype, x2._dtype)
    check_dtype(schema, compute)
    out = empty(x2._shape, dt.index_dtype, device)
    run(schema, resolve(schema, device, compute, None), (out,), (cast(x1, compute), cast(x2, compute)),
        {"right": a["side"] == "right"})
    return out


@_bound_builder
def build_random(schema: OpSchema, composite: Callable | None, a: dict[str, Any]) -> Tensor:
    from ember_core import random
    from ember_core.device import as_device, default_device
    from ember_core.views import as_shape

    kind = schema.name.removeprefix("random_")
    first, second = (p.name for p in schema.params[1:3])
    shape = as_shape(a["shape"])
    device = default_device() if a["device"] is None else as_device(a["device"])
    default = dt.default_int if kind == "integers" else dt.default_float
    dtype = default if a["dtype"] is None else dt.as_dtype(a["dtype"])
    check_dtype(schema, dtype)
    lo, hi = a[first], a[second]
    _check_random_params(kind, dtype, lo, hi)
    gen = a["generator"] or random.default_generator(device)
    if gen.device is not device:
        raise DeviceError(f"{schema.name}: the generator is for {gen.device}, the tensor for {device}")
    out = empty(shape, dtype, device)
    seed, offset = gen.advance(random.blocks_for(kind, dtype.itemsize, out._numel))
    run(schema, resolve(schema, device, dtype, None), (out,), (),
        {"seed": seed, "offset": offset, first: lo, second: hi})
    return out


def _check_random_params(kind: str, dtype: dt.DType, a: Any, b: Any) -> None:
    if kind == "integers":
        if not (isinstance(a, int) and isinstance(b, int)) or b <= a:
            raise ValueError(f"random integers need int bounds with low < high, got [{a!r}, {b!r})")
        fits = (0 <= a and b <= 2) if dtype is dt.bool_ else (dt.fits(a, dtype) and dt.fits(b - 1, dtype))
        if not fits:
            raise DTypeError(f"random integers in [{a}, {b}) do not fit {dtype.name}")
    elif not (math.isfinite(a) and math.isfinite(b)):
        raise ValueError(f"random {kind} parameters must be finite, got {a!r}, {b!r}")
    elif kind == "uniform" and a > b:
        raise ValueError(f"random uniform needs low <= high, got [{a!r}, {b!r})")
    elif kind == "normal" and b < 0:
        raise ValueError(f"random normal needs std >= 0, got {b!r}")


def build_view(schema: OpSchema, composite: Callable | None) -> Callable[..., Tensor]:
    """Views run no kernel: the op is the layout computation of ember_core.views/indexing."""
    from ember_core import indexing, views  # noqa: F401  (indexing registers basic_view)

    return views.RAW[schema.name.rsplit(".", 1)[-1]]


def build_composite(schema: OpSchema, composite: Callable | None) -> Callable[..., Any]:
    """Ops whose whole implementation is their composite (views, creation helpers...)."""
    if composite is None:
        raise UnsupportedOpError(f"{schema.file}: op {schema.name!r} of family 'composite' has no implementation")
    impl = composite  # bound now: the installer renames the function it is handed
    check_flags = binder(schema) if any(p.annotation in _FLAG_TYPES for p in schema.params) else None

    def op(*args: Any, **kwargs: Any) -> Any:
        if check_flags is not None:
            check_flags(*args, **kwargs)
        if _state.prefs is not None and _state.prefs.trace is not None:
            dispatch.note_composite(schema.name, "", "")
        return impl(*args, **kwargs)

    # an expression composite takes (*args, **kwargs): the op shows the declared signature
    shown = inspect.signature(composite) if schema.composite == "python" else binder(schema).__signature__
    op.__signature__ = shown  # type: ignore[attr-defined]
    return op


BUILDERS: dict[str, Callable[[OpSchema, Callable | None], Callable[..., Any]]] = {
    "unary": build_unary, "binary": build_binary, "where": build_where, "copy": build_copy,
    "reduction": build_reduction, "arg_reduction": build_arg_reduction, "scan": build_scan,
    "sort": build_sort, "matmul": build_matmul, "fill": build_fill, "composite": build_composite,
    "take": build_take, "put": build_put, "nonzero": build_nonzero, "searchsorted": build_searchsorted,
    "random": build_random, "view": build_view,
}
import ember_core.ops.nn_families  # noqa: E402  (adds the conv, linear, pool and softmax builders)
import ember_core.ops.optim_families  # noqa: E402, F401  (adds the update builder)
