"""The fused optimizer updates (csrc/eg_optim.h): sgd_step and adam_step on one parameter
(eg_update_<sgd|adam>_<dtype>), in place, bit for bit the composites of optim_composites.py; the
core calls the kernel once per parameter of a group.  The coefficients go as Python floats (the
kernel rounds them to the dtype, as the composite's weak scalars are)."""

from __future__ import annotations

from typing import Any

from ember_core.ops.optim_composites import adam_coefficients
from ember_gpu.ops import BLOCK_SHAPE, Entry, OpLayer

MAXIMIZE, NESTEROV, FIRST_STEP, DECAY, DECOUPLED = 1, 2, 4, 8, 16  # EG_UPDATE_* of abi.h


def _launch(layer: OpLayer, kernel: str, param: Any, grad: Any, buffers: tuple[Any, ...], coefficients: list[float],
            flags: int) -> None:
    if not param._numel:
        return
    ops = layer.device_ops(param)
    pointers = [layer.address(ops, t) for t in buffers] + [0] * (2 - len(buffers))
    layer.kernel(ops, f"{kernel}_{param._dtype.name}")(ops.grid(param._numel), BLOCK_SHAPE, {
        "param": layer.address(ops, param), "grad": layer.address(ops, grad), "buf0": pointers[0],
        "buf1": pointers[1], "n": param._numel, "c": coefficients + [0.0] * (8 - len(coefficients)), "flags": flags})


def _sgd_step(layer: OpLayer) -> Any:
    def sgd_step(param: Any, grad: Any, momentum_buffer: Any, *, lr: float, momentum: float, dampening: float,
                 weight_decay: float, nesterov: bool, maximize: bool, first_step: bool) -> Any:
        flags = (MAXIMIZE * bool(maximize) | NESTEROV * bool(nesterov) | FIRST_STEP * bool(first_step)
                 | DECAY * bool(weight_decay))
        _launch(layer, "eg_update_sgd", param, grad, (momentum_buffer,), [lr, momentum, 1.0 - dampening, weight_decay],
                flags)
        return None

    return sgd_step


def _adam_step(layer: OpLayer) -> Any:
    def adam_step(param: Any, grad: Any, exp_avg: Any, exp_avg_sq: Any, *, lr: float, beta1: float, beta2: float,
                  eps: float, step: int, weight_decay: float, decoupled: bool, maximize: bool) -> Any:
        c = adam_coefficients(lr=lr, beta1=beta1, beta2=beta2, eps=eps, step=step, weight_decay=weight_decay,
                              decoupled=decoupled)
        flags = MAXIMIZE * bool(maximize) | DECAY * bool(weight_decay) | DECOUPLED * bool(decoupled)
        _launch(layer, "eg_update_adam", param, grad, (exp_avg, exp_avg_sq), list(c), flags)
        return None

    return adam_step


def kernels(layer: OpLayer) -> dict[str, Entry]:
    table: dict[str, Entry] = {}
    for op, prefix, make in (("sgd_step", "eg_update_sgd", _sgd_step), ("adam_step", "eg_update_adam", _adam_step)):
        served = layer.served(prefix)
        if served:
            table[op] = make(layer), served
    return table
