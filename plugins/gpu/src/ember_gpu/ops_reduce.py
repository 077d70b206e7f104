"""The reductions (sum, prod, max, min, any, all over trailing dims: eg_reduce_<op>_<dtype>), the
arg-reductions (argmax, argmin along the last dim, same kernels) and the scans (cumulative_sum,
cumulative_prod along the last dim: eg_scan_<op>_<dtype>).  The kernel's mode is chosen from the
shape alone (abi.h), so a result's bits never depend on the device; the two-pass mode's partials go
through a scratch buffer, combined in order (deterministic, no atomics).  Kept and reduced dims are
merged separately; a layout that still has more than EG_MAX_DIMS dims runs on a contiguous copy."""

from __future__ import annotations

from typing import Any

from ember_core.views import coalesce
from ember_gpu import abi, gen_reduce
from ember_gpu.ops import Entry, OpLayer
from ember_gpu.ops_sort import _rows_layout, built_dtypes

REDUCTIONS = ("sum", "prod", "max", "min", "any", "all")
ARG_REDUCTIONS = ("argmax", "argmin")
SCANS = ("cumulative_sum", "cumulative_prod")
THREAD, BLOCK, PARTS, FINISH = 0, 1, 2, 3  # EG_REDUCE_* of abi.h
SCAN_THREAD, SCAN_BLOCK = 0, 1  # EG_SCAN_*
SHORT_ROW = 64  # rows up to this long: a thread per output (or per scanned row)
COLUMNS = 1024  # this many outputs at x's unit stride: a thread per output (neighbours read neighbours)
LONG_ROW = 65536  # fewer than FEW_OUTPUTS rows longer than this: two passes, PART_ROW elements a block
FEW_OUTPUTS = 64
MAX_PARTS = 1024
MAX_GRID = 65535
MANY_ROWS = 4096  # scans: this many rows run a thread per row


def _reduce_layout(x: Any, nred: int) -> tuple[list[int], list[int], list[int], int] | None:
    """(the kept strides, shape, strides, reduced dims) with the kept and the reduced dims merged
    separately, or None when more than EG_MAX_DIMS dims remain."""
    split = x.ndim - nred
    kept, (kept_strides,) = coalesce(x._shape[:split], x._strides[:split])
    reduced, (reduced_strides,) = coalesce(x._shape[split:], x._strides[split:])
    if not reduced:  # nothing to reduce (axes=(), or only size-1 dims): each output is one element
        reduced, reduced_strides = [1], [0]
    if len(kept) + len(reduced) > abi.MAX_DIMS:
        return None
    return kept_strides, kept + reduced, kept_strides + reduced_strides, len(reduced)


def _launch_reduce(layer: OpLayer, name: str, out: Any, x: Any, nred: int) -> Any:
    """Reduce the trailing ``nred`` dims of x into the contiguous out (kept dims in out's order)."""
    n_out = out._numel
    if not n_out:
        return None
    layout = _reduce_layout(x, nred)
    if layout is None:  # walked in the same order contiguous: the same bits, in two or three dims
        x = layer.contiguous(x)
        layout = _reduce_layout(x, nred)
    kept_strides, shape, strides, nred = layout  # type: ignore[misc]
    n_red = x._numel // n_out if x._numel else 0
    op = name.split("_")[2]
    ops = layer.device_ops(out)
    args = {"out": layer.address(ops, out), "x": layer.address(ops, x) if n_red else 0, "scratch": 0,
            "n_out": n_out, "n_red": n_red, "parts": 1, "shape": shape, "strides": strides,
            "ndim": len(shape), "nred": nred}
    kernel = layer.kernel(ops, name)
    if n_out < FEW_OUTPUTS and n_red > LONG_ROW:
        parts = min(MAX_PARTS, -(-n_red // LONG_ROW))
        scratch = ops.device.memory.alloc(n_out * parts * gen_reduce.accumulator_size(op, x._dtype.name))
        try:
            args.update(scratch=scratch.pointer, parts=parts, mode=PARTS)
            kernel((min(n_out * parts, MAX_GRID), 1, 1), (abi.BLOCK, 1, 1), args)
            args["mode"] = FINISH
            kernel(ops.grid(n_out), (abi.BLOCK, 1, 1), args)
        finally:
            ops.device.memory.free(scratch)  # stream-ordered: reused only after both passes ran
    elif n_red <= SHORT_ROW or (n_out >= COLUMNS and abs(kept_strides[-1]) == 1):
        kernel(ops.grid(n_out), (abi.BLOCK, 1, 1), {**args, "mode": THREAD})
    else:
        kernel((min(n_out, MAX_GRID), 1, 1), (abi.BLOCK, 1, 1), {**args, "mode": BLOCK})
    return None


def _reduction(layer: OpLayer, op: str) -> Any:
    def reduce(out: Any, x: Any, *, axes: tuple[int, ...]) -> Any:
        return _launch_reduce(layer, f"eg_reduce_{op}_{x._dtype.name}", out, x, len(axes))

    reduce.__name__ = op
    return reduce


def _arg_reduction(layer: OpLayer, op: str) -> Any:
    def arg_reduce(out: Any, x: Any) -> Any:
        return _launch_reduce(layer, f"eg_reduce_{op}_{x._dtype.name}", out, x, 1)

    arg_reduce.__name__ = op
    return arg_reduce


def _scan(layer: OpLayer, op: str) -> Any:
    def scan(out: Any, x: Any) -> Any:
        if not out._numel:
            return None
        layout = _rows_layout(x, out)
        if layout is None:  # out is contiguous (the core allocates it): x contiguous merges with it
            x = layer.contiguous(x)
            layout = _rows_layout(x, out)
        shape, x_strides, out_strides = layout  # type: ignore[misc]
        n = shape[-1]
        rows = out._numel // n
        ops = layer.device_ops(out)
        thread = rows >= MANY_ROWS or n <= SHORT_ROW
        grid = ops.grid(rows) if thread else (min(rows, MAX_GRID), 1, 1)
        layer.kernel(ops, f"eg_scan_{op}_{x._dtype.name}")(grid, (abi.BLOCK, 1, 1), {
            "out": layer.address(ops, out), "x": layer.address(ops, x), "rows": rows, "shape": shape,
            "x_strides": x_strides, "out_strides": out_strides, "ndim": len(shape),
            "mode": SCAN_THREAD if thread else SCAN_BLOCK})
        return None

    scan.__name__ = op
    return scan


def kernels(layer: OpLayer) -> dict[str, Entry]:
    table: dict[str, Entry] = {}
    for ops, make, prefix in ((REDUCTIONS, _reduction, "eg_reduce"), (ARG_REDUCTIONS, _arg_reduction, "eg_reduce"),
                              (SCANS, _scan, "eg_scan")):
        for op in ops:
            served = built_dtypes(layer, f"{prefix}_{op}")
            if served:
                table[op] = make(layer, op), served
    return table
