"""The fused optimizer updates (csrc/eg_optim.h): sgd_step and adam_step, in place, bit for bit
the composites of optim_composites.py.  The coefficients go as Python floats (the kernel rounds
them to the dtype, as the composite's weak scalars are).

One parameter runs eg_update_<sgd|adam>_<dtype>.  A whole parameter group (the core passes lists
to a kernel's ``grouped`` form, optim.toml) runs eg_updates_<sgd|adam>_<dtype> in one launch: its
tensors' addresses and sizes are packed into an array of eg_update_item records in device memory.
Parameters and state are the same tensors every step, and the caching allocator often gives new
gradients the addresses of earlier ones, so arrays are kept by content (``GROUP_ARRAYS`` in all) and
uploaded only when new: a record holds addresses and sizes only, so an array stays right for
whatever tensors later live at those addresses."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember_core.ops.optim_composites import adam_coefficients
from ember_gpu import abi
from ember_gpu.ops import BLOCK_SHAPE, Entry, OpLayer

MAXIMIZE, NESTEROV, FIRST_STEP, DECAY, DECOUPLED = 1, 2, 4, 8, 16  # EG_UPDATE_* of abi.h
GROUP_ARRAYS = 64  # item arrays kept per device (one per parameter group and step kind, typically)
COEFFICIENTS = 8  # eg_update_args.c


def _coefficients(values: Sequence[float]) -> list[float]:
    return [*values, *[0.0] * (COEFFICIENTS - len(values))]


def _launch(layer: OpLayer, kernel: str, param: Any, grad: Any, buffers: tuple[Any, ...], coefficients: list[float],
            flags: int) -> None:
    if not param._numel:
        return
    ops = layer.device_ops(param)
    pointers = [layer.address(ops, t) for t in buffers] + [0] * (2 - len(buffers))
    layer.kernel(ops, f"{kernel}_{param._dtype.name}")(ops.grid(param._numel), BLOCK_SHAPE, {
        "param": layer.address(ops, param), "grad": layer.address(ops, grad), "buf0": pointers[0],
        "buf1": pointers[1], "n": param._numel, "c": _coefficients(coefficients), "flags": flags})


class _ItemArrays:
    """The eg_update_item arrays uploaded so far, per device and content."""

    def __init__(self) -> None:
        self._arrays: dict[tuple[Any, tuple[int, ...]], Any] = {}

    def get(self, ops: Any, words: tuple[int, ...]) -> int:
        """The device address of an array holding ``words`` (5 per item: param, grad, buf0, buf1, n)."""
        key = (ops.device, words)
        found = self._arrays.get(key)
        if found is None:
            if len(self._arrays) >= GROUP_ARRAYS:
                self.clear()
            ffi = abi.ffi
            items = ffi.new("eg_update_item[]", len(words) // 5)
            for k in range(len(words) // 5):
                item, (param, grad, buf0, buf1, n) = items[k], words[5 * k:5 * k + 5]
                item.param, item.grad = ffi.cast("void *", param), ffi.cast("void *", grad)
                item.buf0, item.buf1, item.n = ffi.cast("void *", buf0), ffi.cast("void *", buf1), n
            found = ops.device.memory.alloc(abi.ffi.sizeof(items))
            ops.device.staging.upload(found.pointer, memoryview(abi.ffi.buffer(items)))
            self._arrays[key] = found
        return found.pointer

    def clear(self) -> None:
        for (device, _), handle in self._arrays.items():
            device.memory.free(handle)  # stream-ordered: after the launches that read it; never raises
        self._arrays.clear()


def _launch_group(layer: OpLayer, arrays: _ItemArrays, kernel: str, lists: tuple[Sequence[Any], ...],
                  coefficients: list[float], flags: int) -> None:
    """One launch over every parameter of a group (lists: params, grads, then the state buffers)."""
    params = lists[0]
    ops = layer.device_ops(params[0])
    words: list[int] = []
    for k, param in enumerate(params):
        if param._numel:
            pointers = [layer.address(ops, values[k]) for values in lists]
            words += [*pointers, *[0] * (4 - len(pointers)), param._numel]
    if not words:
        return
    largest = max(words[4::5])
    layer.kernel(ops, f"{kernel}_{params[0]._dtype.name}")(ops.grid(largest), BLOCK_SHAPE, {
        "items": arrays.get(ops, tuple(words)), "count": len(words) // 5, "c": _coefficients(coefficients),
        "flags": flags})


def _sgd(attrs: dict[str, Any]) -> tuple[list[float], int]:
    flags = (MAXIMIZE * bool(attrs["maximize"]) | NESTEROV * bool(attrs["nesterov"])
             | FIRST_STEP * bool(attrs["first_step"]) | DECAY * bool(attrs["weight_decay"]))
    return [attrs["lr"], attrs["momentum"], 1.0 - attrs["dampening"], attrs["weight_decay"]], flags


def _adam(attrs: dict[str, Any]) -> tuple[list[float], int]:
    decay, decoupled = attrs["weight_decay"], attrs["decoupled"]
    c = adam_coefficients(lr=attrs["lr"], beta1=attrs["beta1"], beta2=attrs["beta2"], eps=attrs["eps"],
                          step=attrs["step"], weight_decay=decay, decoupled=decoupled)
    flags = MAXIMIZE * bool(attrs["maximize"]) | DECAY * bool(decay) | DECOUPLED * bool(decoupled)
    return list(c), flags


def _update(layer: OpLayer, arrays: _ItemArrays, name: str,
            coefficients: Callable[[dict[str, Any]], tuple[list[float], int]]) -> Any:
    """The op's kernel for one parameter, with its ``grouped`` form for lists (optim.toml)."""

    def update(param: Any, grad: Any, *buffers: Any, **attrs: Any) -> Any:
        c, flags = coefficients(attrs)
        _launch(layer, f"eg_update_{name}", param, grad, buffers, c, flags)
        return None

    def grouped(*lists: Sequence[Any], **attrs: Any) -> Any:
        c, flags = coefficients(attrs)
        _launch_group(layer, arrays, f"eg_updates_{name}", lists, c, flags)
        return None

    update.grouped = grouped  # type: ignore[attr-defined]
    update.__name__ = f"{name}_step"
    return update


def kernels(layer: OpLayer) -> dict[str, Entry]:
    arrays = _ItemArrays()
    table: dict[str, Entry] = {}
    for name, coefficients in (("sgd", _sgd), ("adam", _adam)):
        served = layer.served(f"eg_update_{name}")
        if served:
            kernel = _update(layer, arrays, name, coefficients)
            if not layer.served(f"eg_updates_{name}") >= served:  # a build without the group kernels
                del kernel.grouped
            table[f"{name}_step"] = kernel, served
    return table
