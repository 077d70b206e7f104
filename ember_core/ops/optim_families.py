"""Builder of the update family (optim.toml): ops that rewrite tensors in place, such as one
optimizer step of a parameter and its state (adam_step, sgd_step).  Added to ``families.BUILDERS``
when imported.

A call is validated whole before anything is written (types, one device, one dtype, one shape, no
shared memory, hyperparameters in range), then offered to the providers when every tensor is
contiguous; otherwise, or when every provider declines, the composite runs.  Lists of tensors
update a whole parameter group in one call: the binding and the hyperparameters are checked once,
every index before any is written; then a native kernel with a ``grouped`` form gets the whole group
at once (one launch on a GPU), otherwise the kernel sees one parameter at a time.  The
written storages' version counters move either way (an operator cache keyed on them must see the
update).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ember_core import dispatch
from ember_core.autograd.grad_mode import MODE
from ember_core.errors import DTypeError, RegistryError, ShapeError
from ember_core.ops.families import BUILDERS, as_tensor_arg, binder, check_dtype, resolve, run, same_device
from ember_core.ops.registry import OpSchema
from ember_core.tensor import Tensor
from ember_core.views import check_writable

_READ_ONLY = frozenset({"grad"})  # every other tensor argument of an update op is written


def _check_tensors(schema: OpSchema, named: dict[str, Tensor]) -> None:
    names = list(named)
    first = named[names[0]]
    same_device(schema, *named.values())
    for name, t in named.items():
        if t._dtype is not first._dtype:
            raise DTypeError(f"{schema.name}: {name} is {t._dtype.name} but {names[0]} is {first._dtype.name}; "
                             f"optimizer state must have its parameter's dtype")
        if t._shape != first._shape:
            raise ShapeError(f"{schema.name}: {name} has shape {t._shape} but {names[0]} has {first._shape}")
        if name not in _READ_ONLY:
            check_writable(t, f"{schema.name}: {name}")
    check_dtype(schema, first._dtype)
    if MODE.enabled and any(t._requires_grad for name, t in named.items() if name not in _READ_ONLY):
        raise RuntimeError(f"{schema.name} writes in place and is not recorded by autograd; run it inside "
                           f"`with ember_core.no_grad():`")


def _check_separate(schema: OpSchema, groups: list[dict[str, Tensor]], lists: bool) -> None:
    """Every tensor is read or written whole: no written tensor may share memory with any other
    tensor of the call (over all the updates of a call given lists)."""
    written = [id(t._storage) for named in groups for name, t in named.items() if name not in _READ_ONLY]
    distinct = set(written)
    if len(distinct) < len(written) or any(id(t._storage) in distinct for named in groups
                                           for name, t in named.items() if name in _READ_ONLY):
        raise ValueError(f"{schema.name}: {', '.join(groups[0])} must not share memory (each is read or written "
                         f"whole); pass separate tensors" + (", each parameter and state tensor once (a written "
                                                             "tensor appears again in the lists)" if lists else ""))


def _tensor_groups(schema: OpSchema, names: list[str], a: dict[str, Any]) -> list[dict[str, Tensor]]:
    """Lists of tensors (one update per index, as an optimizer's parameter group makes) checked
    whole before anything is written: each index as one call is, and no written tensor shares
    memory with any other tensor of the call."""
    lists = [a[name] for name in names]
    if not all(isinstance(values, (list, tuple)) for values in lists) or len({len(v) for v in lists}) != 1:
        raise TypeError(f"{schema.name}: {', '.join(names)} must all be tensors, or all lists of one length "
                        f"(got lengths {[len(v) if isinstance(v, (list, tuple)) else None for v in lists]})")
    groups = []
    for i in range(len(lists[0])):
        named = {name: values[i] if values[i].__class__ is Tensor else as_tensor_arg(schema, values[i], f"{name}[{i}]")
                 for name, values in zip(names, lists)}
        _check_tensors(schema, named)
        groups.append(named)
    if groups:
        _check_separate(schema, groups, lists=True)
    return groups


def _non_negative(schema: OpSchema, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{schema.name}: {name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _check_adam(schema: OpSchema, a: dict[str, Any]) -> dict[str, Any]:
    step = a["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"{schema.name}: step counts updates from 1, got {step!r}")
    attrs: dict[str, Any] = {"step": step, "decoupled": bool(a["decoupled"]), "maximize": bool(a["maximize"])}
    for name in ("lr", "beta1", "beta2", "eps", "weight_decay"):
        attrs[name] = _non_negative(schema, name, a[name])
    if attrs["beta1"] >= 1 or attrs["beta2"] >= 1:
        raise ValueError(f"{schema.name}: beta1 and beta2 must be below 1, got {attrs['beta1']}, {attrs['beta2']}")
    return attrs


def _check_sgd(schema: OpSchema, a: dict[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {name: bool(a[name]) for name in ("nesterov", "maximize", "first_step")}
    for name in ("lr", "momentum", "dampening", "weight_decay"):
        attrs[name] = _non_negative(schema, name, a[name])
    if attrs["momentum"] == 0:
        raise ValueError(f"{schema.name} is SGD with momentum and needs momentum > 0; without momentum the step "
                         f"is `param -= lr * grad`")
    if attrs["nesterov"] and attrs["dampening"] != 0:
        raise ValueError(f"{schema.name}: Nesterov momentum needs dampening = 0, got {attrs['dampening']}")
    return attrs


def _written(named: dict[str, Tensor]) -> None:
    """Move the versions of the storages a kernel wrote in place (an operator cache keyed on them
    must see the update)."""
    for name, t in named.items():
        if name not in _READ_ONLY:
            t._storage.version += 1


_ATTRIBUTES: dict[str, Callable[[OpSchema, dict[str, Any]], dict[str, Any]]] = {
    "adam_step": _check_adam, "sgd_step": _check_sgd}


def _build(schema: OpSchema, composite: Callable | None) -> Callable[..., Any]:
    check_attrs = _ATTRIBUTES.get(schema.name)
    if check_attrs is None or composite is None:
        raise RegistryError(f"{schema.file}: op {schema.name!r} of family 'update': the update family serves only "
                            f"the ops of ember_core/ops/optim.toml, each with a composite")
    bind = binder(schema)
    tensor_names = [p.name for p in schema.params if p.positional_only]
    hyper_names = [p.name for p in schema.params if not p.positional_only]
    # Hyperparameters validated once per distinct setting: an optimizer passes the same ones for
    # every parameter of a group.  Keyed with their types, so True never stands in for 1.
    validated: dict[tuple[Any, ...], dict[str, Any]] = {}

    def hyperparameters(a: dict[str, Any]) -> dict[str, Any]:
        key: Any = tuple([(a[name].__class__, a[name]) for name in hyper_names])
        try:
            attrs = validated.get(key)
        except TypeError:  # an unhashable value (a list, say): checked on every call
            attrs = key = None
        if attrs is None:
            attrs = check_attrs(schema, a)
            if key is not None:
                if len(validated) >= 64:  # the step count makes a new setting every step
                    validated.clear()
                validated[key] = attrs
        return attrs

    def apply(named: dict[str, Tensor], attrs: dict[str, Any]) -> Tensor:
        tensors = tuple(named.values())
        first = tensors[0]
        choice = resolve(schema, first._device, first._dtype, composite)
        if not (choice.how != "composite" and all(t._contig for t in tensors)
                and run(schema, choice, tensors[:1], tensors[1:], attrs)):
            dispatch.note_composite(schema.name, first._device.type, first._dtype)
            composite(*tensors, **attrs)  # writes through copy_into, which moves the versions itself
            return first
        _written(named)
        return first

    def apply_grouped(groups: list[dict[str, Tensor]], attrs: dict[str, Any]) -> bool:
        """The whole group in one call of the native kernel's ``grouped`` form (lists, one per tensor
        argument), where it has one and every tensor is contiguous, on one device, of one dtype;
        False: nothing ran, update each parameter in turn."""
        first = groups[0][tensor_names[0]]
        device, dtype = first._device, first._dtype
        if not all(t._contig and t._dtype is dtype and t._device == device for named in groups
                   for t in named.values()):
            return False
        choice = resolve(schema, device, dtype, composite)
        grouped = getattr(choice.kernel, "grouped", None) if choice.how == "native" else None
        lists = [[named[name] for named in groups] for name in tensor_names]
        if grouped is None or grouped(*lists, **attrs) is NotImplemented:
            return False
        for named in groups:
            _written(named)
        return True

    def op(*args: Any, **kwargs: Any) -> Any:
        a = bind(*args, **kwargs)
        if isinstance(a[tensor_names[0]], (list, tuple)):
            groups = _tensor_groups(schema, tensor_names, a)
            attrs = hyperparameters(a)
            if len(groups) > 1 and apply_grouped(groups, attrs):
                return [named[tensor_names[0]] for named in groups]
            return [apply(named, attrs) for named in groups]
        named = {name: as_tensor_arg(schema, a[name], name) for name in tensor_names}
        _check_tensors(schema, named)
        _check_separate(schema, [named], lists=False)
        return apply(named, hyperparameters(a))

    op.__signature__ = bind.__signature__  # type: ignore[attr-defined]
    return op


BUILDERS["update"] = _build
