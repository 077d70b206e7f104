"""The nn ops with kernels of their own in csrc/eg_nn.h: softmax and log_softmax along one dim
(eg_softmax_<op>_<dtype>), nll_loss and nll_loss_grad (eg_loss_<op>_<dtype>) and dropout on the
Philox stream (eg_dropout_dropout_<dtype>); the norms are ops_norm.py's.  nn.toml hands these
kernels contiguous tensors only.  The launch mode is chosen from the shape alone, so a result's bits
never depend on the device; every sum is a fixed tree (deterministic, no atomics).  Softmax's and
log_softmax's gradients are composites of native ops, nll_loss's is nll_loss_grad."""

from __future__ import annotations

import math
from typing import Any

from ember_gpu.ops import BLOCK_SHAPE, Entry, OpLayer

SOFTMAX_THREAD, SOFTMAX_BLOCK = 0, 1  # EG_SOFTMAX_* of abi.h
LOSS_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}  # EG_LOSS_NONE / MEAN / SUM
LOSS_ROWS, LOSS_TOTAL, LOSS_DIVISOR = 0, 1, 2  # EG_LOSS_* modes
SHORT_LINE = 64  # softmax lines up to this long (or not along the last dim): a thread per line
MAX_GRID = 65535
_ONE_BLOCK = (1, 1, 1)


def _softmax(layer: OpLayer, op: str) -> Any:
    def softmax(out: Any, x: Any, *, axis: int) -> Any:
        if not out._numel:
            return None
        shape = x._shape
        outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
        ops = layer.device_ops(out)
        thread = inner > 1 or n <= SHORT_LINE
        lines = outer * inner
        layer.kernel(ops, f"eg_softmax_{op}_{x._dtype.name}")(
            ops.grid(lines) if thread else (min(lines, MAX_GRID), 1, 1), BLOCK_SHAPE,
            {"out": layer.address(ops, out), "x": layer.address(ops, x), "outer": outer, "n": n, "inner": inner,
             "mode": SOFTMAX_THREAD if thread else SOFTMAX_BLOCK})
        return None

    softmax.__name__ = op
    return softmax


def _loss_args(layer: OpLayer, ops: Any, out: Any, first: Any, target: Any, weight: Any, classes: int,
               ignore_index: int, reduction: str, label_smoothing: float) -> dict[str, Any]:
    return {"out": layer.optional_address(ops, out), "x": layer.optional_address(ops, first),
            "target": layer.optional_address(ops, target), "weight": layer.optional_address(ops, weight),
            "scratch": 0, "n": target._numel, "c": classes, "ignore_index": ignore_index,
            "smoothing": label_smoothing, "reduction": LOSS_REDUCTIONS[reduction]}


def _nll_loss(layer: OpLayer) -> Any:
    def nll_loss(out: Any, log_probs: Any, target: Any, weight: Any, *, ignore_index: int, reduction: str,
                 label_smoothing: float) -> Any:
        ops = layer.device_ops(out)
        args = _loss_args(layer, ops, out, log_probs, target, weight, log_probs._shape[1], ignore_index, reduction,
                          label_smoothing)
        kernel = layer.kernel(ops, f"eg_loss_nll_loss_{log_probs._dtype.name}")
        if reduction != "none":  # one block sums every row (and the divisor) in a fixed tree
            kernel(_ONE_BLOCK, BLOCK_SHAPE, {**args, "mode": LOSS_TOTAL})
        elif out._numel:
            kernel(ops.grid(out._numel), BLOCK_SHAPE, {**args, "mode": LOSS_ROWS})
        return None

    return nll_loss


def _nll_loss_grad(layer: OpLayer) -> Any:
    def nll_loss_grad(out: Any, grad_output: Any, target: Any, weight: Any, *, ignore_index: int, reduction: str,
                      label_smoothing: float) -> Any:
        if not out._numel:
            return None
        ops = layer.device_ops(out)
        args = _loss_args(layer, ops, out, grad_output, target, weight, out._shape[1], ignore_index, reduction,
                          label_smoothing)
        kernel = layer.kernel(ops, f"eg_loss_nll_loss_grad_{out._dtype.name}")
        if reduction != "mean":
            kernel(ops.grid(out._numel), BLOCK_SHAPE, {**args, "mode": LOSS_ROWS})
            return None
        scratch = ops.device.memory.alloc(8)  # the divisor, one double
        try:
            args["scratch"] = scratch.pointer
            kernel(_ONE_BLOCK, BLOCK_SHAPE, {**args, "mode": LOSS_DIVISOR})
            kernel(ops.grid(out._numel), BLOCK_SHAPE, {**args, "mode": LOSS_ROWS})
        finally:
            ops.device.memory.free(scratch)  # stream-ordered: reused only after both launches ran
        return None

    return nll_loss_grad


def _dropout(layer: OpLayer) -> Any:
    def dropout(out: Any, x: Any, *, p: float, seed: int, offset: int) -> Any:
        if not out._numel:
            return None
        ops = layer.device_ops(out)
        layer.kernel(ops, f"eg_dropout_dropout_{x._dtype.name}")(ops.grid(-(-out._numel // 4)), BLOCK_SHAPE, {
            "out": layer.address(ops, out), "x": layer.address(ops, x), "n": out._numel, "seed": seed,
            "offset": offset, "scale": 1.0 / (1.0 - p), "threshold": 1.0 - p})  # cffi rounds it to float32
        return None

    return dropout


def kernels(layer: OpLayer) -> dict[str, Entry]:
    makers = {"softmax": ("eg_softmax_softmax", _softmax(layer, "softmax")),
              "log_softmax": ("eg_softmax_log_softmax", _softmax(layer, "log_softmax")),
              "nll_loss": ("eg_loss_nll_loss", _nll_loss(layer)),
              "nll_loss_grad": ("eg_loss_nll_loss_grad", _nll_loss_grad(layer)),
              "dropout": ("eg_dropout_dropout", _dropout(layer))}
    table: dict[str, Entry] = {}
    for op, (prefix, kernel) in makers.items():
        served = layer.served(prefix)
        if served:
            table[op] = kernel, served
    return table
