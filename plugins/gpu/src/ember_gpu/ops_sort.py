"""The kernels that order values: sort and argsort along the last dim (eg_sort_<op>_<dtype>, one
block per row, stable, NaN last ascending) and searchsorted (eg_search_searchsorted_<dtype>: a
binary search per value in the sorted 1-d x1).  The leading dims are merged first; a layout that
still has more than EG_MAX_DIMS dims is declined (the next provider runs it)."""

from __future__ import annotations

from typing import Any

from ember_core.views import coalesce
from ember_gpu import abi
from ember_gpu.ops import Entry, OpLayer

SHARED_ROW = 1024  # rows up to this many elements sort in shared memory, longer ones in scratch
PAIR_BYTES = 16  # a (key, index) pair of the scratch buffer
MAX_GRID = 65535
SCRATCH_BYTES = 256 << 20  # long rows: fewer blocks (each loops over rows) rather than more scratch than this


def _rows_layout(x: Any, out: Any) -> tuple[list[int], list[int], list[int]] | None:
    """(shape, x strides, out strides) with the leading dims merged and the sorted dim last, or
    None when more than EG_MAX_DIMS dims remain."""
    shape, (x_strides, out_strides) = coalesce(x._shape[:-1], x._strides[:-1], out._strides[:-1])
    if len(shape) + 1 > abi.MAX_DIMS:
        return None
    return [*shape, x._shape[-1]], [*x_strides, x._strides[-1]], [*out_strides, out._strides[-1]]


def _sort(layer: OpLayer, op: str) -> Any:
    def sort(out: Any, x: Any, *, descending: bool = False) -> Any:
        if not out._numel:
            return None
        layout = _rows_layout(x, out)
        if layout is None:
            return NotImplemented
        shape, x_strides, out_strides = layout
        n = shape[-1]
        rows = out._numel // n
        ops = layer.device_ops(out)
        width = 1 << (n - 1).bit_length()
        grid = min(rows, MAX_GRID, max(1, SCRATCH_BYTES // (width * PAIR_BYTES)) if n > SHARED_ROW else MAX_GRID)
        scratch = ops.device.memory.alloc(grid * width * PAIR_BYTES) if n > SHARED_ROW else None
        try:
            layer.kernel(ops, f"eg_sort_{op}_{x._dtype.name}")((grid, 1, 1), (abi.BLOCK, 1, 1), {
                "out": layer.address(ops, out), "x": layer.address(ops, x),
                "scratch": scratch.pointer if scratch is not None else 0, "rows": rows, "shape": shape,
                "x_strides": x_strides, "out_strides": out_strides, "ndim": len(shape),
                "descending": int(descending)})
        finally:
            if scratch is not None:
                ops.device.memory.free(scratch)  # stream-ordered: reused only after the sort ran
        return None

    sort.__name__ = op
    return sort


def _searchsorted(layer: OpLayer) -> Any:
    def searchsorted(out: Any, x1: Any, x2: Any, *, right: bool = False) -> Any:
        count = out._numel
        if not count:
            return None
        shape, (value_strides, out_strides) = coalesce(x2._shape, x2._strides, out._strides)
        if len(shape) > abi.MAX_DIMS:
            return NotImplemented
        if not shape:  # one value: a 1-d layout of one element
            shape, value_strides, out_strides = [1], [0], [0]
        ops = layer.device_ops(out)
        layer.kernel(ops, f"eg_search_searchsorted_{x1._dtype.name}")(ops.grid(count), (abi.BLOCK, 1, 1), {
            "out": layer.address(ops, out), "x1": layer.address(ops, x1) if x1._numel else 0,  # empty: not read
            "values": layer.address(ops, x2),
            "n": x1._numel, "x1_stride": x1._strides[0] if x1._shape else 0, "count": count, "shape": shape,
            "value_strides": value_strides, "out_strides": out_strides, "ndim": len(shape), "right": int(right)})
        return None

    return searchsorted


def built_dtypes(layer: OpLayer, prefix: str) -> frozenset[str]:
    """The dtypes of the kernels ``<prefix>_<dtype>`` in the build."""
    return frozenset(name[len(prefix) + 1:] for name in layer.index if name.startswith(prefix + "_"))


def kernels(layer: OpLayer) -> dict[str, Entry]:
    table: dict[str, Entry] = {}
    for op in ("sort", "argsort"):
        served = built_dtypes(layer, f"eg_sort_{op}")
        if served:
            table[op] = _sort(layer, op), served
    served = built_dtypes(layer, "eg_search_searchsorted")
    if served:
        table["searchsorted"] = _searchsorted(layer), served
    return table
