"""The kernels that move elements by index: take and index_put on the core's (outer, n, inner)
views (eg_index_take_<bytes>, eg_index_put_<bytes>: a copy by element size; eg_index_put_add_<dtype>
for accumulate=True, adding in index order, so repeated indices give ember-cpu's bits) and nonzero
(eg_nonzero_nonzero_<dtype>: a count per chunk of x, then the coordinates in C order)."""

from __future__ import annotations

from typing import Any

from ember_core import dtypes
from ember_gpu import abi
from ember_gpu.ops import Entry, OpLayer
from ember_gpu.ops_sort import built_dtypes

CHUNK = 4096  # nonzero: elements per block at least
MAX_BLOCKS = 1024  # nonzero: WRITE's blocks add at most this many counts
NONZERO_MODES = (0, 1)  # abi.h's EG_NONZERO_COUNT, then EG_NONZERO_WRITE


def _launch_index(layer: OpLayer, kernel: str, dst: Any, src: Any, idx: Any, x: Any, threads: int) -> Any:
    """One take or put launch: dst and src (outer, *, inner), x the one of them indexed along its
    middle dim; NotImplemented for an index list the kernels cannot read (not contiguous)."""
    m = idx._numel
    if m > 1 and idx._strides[0] != 1:
        return NotImplemented
    if not threads or not m:
        return None
    ops = layer.device_ops(dst)
    outer, n, inner = x._shape
    layer.kernel(ops, kernel)(ops.grid(threads), (abi.BLOCK, 1, 1), {
        "dst": layer.address(ops, dst), "src": layer.address(ops, src), "indices": layer.address(ops, idx),
        "outer": outer, "n": n, "m": m, "inner": inner,
        "dst_strides": list(dst._strides), "src_strides": list(src._strides)})
    return None


def _take(layer: OpLayer) -> Any:
    def take(out: Any, x: Any, idx: Any) -> Any:
        return _launch_index(layer, f"eg_index_take_{x._dtype.itemsize}", out, x, idx, x, out._numel)

    return take


def _put(layer: OpLayer) -> Any:
    def index_put(x: Any, idx: Any, values: Any, *, accumulate: bool = False) -> Any:
        kernel = f"eg_index_put_add_{x._dtype.name}" if accumulate else f"eg_index_put_{x._dtype.itemsize}"
        return _launch_index(layer, kernel, x, values, idx, x, x._shape[0] * x._shape[2])

    return index_put


def _nonzero(layer: OpLayer) -> Any:
    def nonzero(out: Any, x: Any) -> Any:
        total = x._numel
        if not out._numel or not total:
            return None
        if len(x._shape) > abi.MAX_DIMS:
            return NotImplemented
        ops = layer.device_ops(out)
        chunk = max(CHUNK, -(-total // MAX_BLOCKS))
        blocks = -(-total // chunk)
        counts = ops.device.memory.alloc(blocks * 8)
        try:
            kernel = layer.kernel(ops, f"eg_nonzero_nonzero_{x._dtype.name}")
            args = {"out": layer.flat_output(ops, out), "x": layer.address(ops, x), "counts": counts.pointer,
                    "total": total, "chunk": chunk, "shape": list(x._shape), "strides": list(x._strides),
                    "ndim": len(x._shape)}
            for mode in NONZERO_MODES:
                kernel((blocks, 1, 1), (abi.BLOCK, 1, 1), {**args, "mode": mode})
        finally:
            ops.device.memory.free(counts)  # stream-ordered: reused only after both launches ran
        return None

    return nonzero


def _by_size(layer: OpLayer, prefix: str) -> frozenset[str]:
    """The dtypes whose element size has a kernel ``<prefix>_<bytes>`` in the build."""
    return frozenset(d.name for d in dtypes.ALL_DTYPES if f"{prefix}_{d.itemsize}" in layer.index)


def kernels(layer: OpLayer) -> dict[str, Entry]:
    table: dict[str, Entry] = {}
    take = _by_size(layer, "eg_index_take")
    put = _by_size(layer, "eg_index_put") & built_dtypes(layer, "eg_index_put_add")
    if take:
        table["take"] = _take(layer), take
    if put:
        table["index_put"] = _put(layer), frozenset(put)
    served = built_dtypes(layer, "eg_nonzero_nonzero")
    if served:
        table["nonzero"] = _nonzero(layer), served
    return table
