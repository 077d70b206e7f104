"""The norm family (csrc/eg_norm.h): layer_norm and group_norm forward (eg_norm_rows_<dtype>),
batch_norm_train (eg_batchnorm_train_<dtype>) and the gradients of all three
(eg_normgrad_<rows|channels|bninput>_<dtype>).  nn.toml hands these kernels contiguous tensors
only: x and grad_output as (N, C, S), layer norm's as (M, D) rows.

Each launch's mode comes from the shape alone (a thread per short row or channel run, a block per
long one), so a result's bits never depend on the device; every sum is a fixed-order tree in double
(deterministic, no atomics).  Layer / group norm's backward recomputes each row's statistics; when
the weight and bias gradients are wanted, that pass saves them (16 bytes per row) and a channel pass
reads them: a block per channel when a channel's values come in runs of at least ``LONG_RUN``, else a
thread per (channel, part of the samples) with neighbouring threads on neighbouring channels (layer
norm's columns, batch norm over (N, C)), its parts then added in order by a thread per channel."""

from __future__ import annotations

from typing import Any

from ember_gpu.ops import BLOCK_SHAPE, Entry, OpLayer
from ember_gpu.ops_nn import MAX_GRID, SHORT_LINE

THREAD, BLOCK, PARTS, FINISH = 0, 1, 2, 3  # EG_NORM_THREAD / BLOCK, EG_NORMGRAD_PARTS / FINISH of abi.h
LONG_RUN = 32  # a channel whose values come in runs this long (s) is summed by one block
PART_SAMPLES = 64  # at least this many samples per part of a thread-per-channel sum
MAX_PARTS = 256


def _row_launch(ops: Any, rows: int, d: int) -> tuple[tuple[int, int, int], int]:
    """The grid and mode of a row kernel: a thread per short row, a block per long one."""
    if d <= SHORT_LINE:
        return ops.grid(rows), THREAD
    return (min(rows, MAX_GRID), 1, 1), BLOCK


def _norm_rows(layer: OpLayer, out: Any, x: Any, weight: Any, bias: Any, rows: int, d: int, span: int,
               groups: int, eps: float) -> None:
    """Normalize ``rows`` rows of d values (eg_norm.h)."""
    if not rows or not d:
        return
    ops = layer.device_ops(out)
    grid, mode = _row_launch(ops, rows, d)
    layer.kernel(ops, f"eg_norm_rows_{x._dtype.name}")(grid, BLOCK_SHAPE, {
        "out": layer.address(ops, out), "x": layer.address(ops, x), "weight": layer.optional_address(ops, weight),
        "bias": layer.optional_address(ops, bias), "rows": rows, "d": d, "span": span, "groups": groups, "eps": eps,
        "mode": mode})


def _layer_norm(layer: OpLayer) -> Any:
    def layer_norm(out: Any, x: Any, weight: Any, bias: Any, *, eps: float) -> Any:
        rows, d = x._shape
        _norm_rows(layer, out, x, weight, bias, rows, d, 1, 1, eps)
        return None

    return layer_norm


def _group_norm(layer: OpLayer) -> Any:
    def group_norm(out: Any, x: Any, weight: Any, bias: Any, *, num_groups: int, eps: float) -> Any:
        n, channels, s = x._shape
        _norm_rows(layer, out, x, weight, bias, n * num_groups, channels // num_groups * s, s, num_groups, eps)
        return None

    return group_norm


def _batch_norm_train(layer: OpLayer) -> Any:
    def batch_norm_train(out: Any, stats: Any, x: Any, weight: Any, bias: Any, *, eps: float) -> Any:
        n, c, s = x._shape
        if not out._numel:
            return None
        ops = layer.device_ops(out)
        layer.kernel(ops, f"eg_batchnorm_train_{x._dtype.name}")((min(c, MAX_GRID), 1, 1), BLOCK_SHAPE, {
            "out": layer.address(ops, out), "stats": layer.address(ops, stats), "x": layer.address(ops, x),
            "weight": layer.optional_address(ops, weight), "bias": layer.optional_address(ops, bias),
            "n": n, "c": c, "s": s, "eps": eps})
        return None

    return batch_norm_train


# ---- the gradients ---------------------------------------------------------------------------------


class _Backward:
    """One gradient call on x viewed as (n, c, s) in ``groups`` groups: the eg_normgrad_args every
    launch shares, and the launches."""

    def __init__(self, layer: OpLayer, x: Any, grad: Any, shape: tuple[int, int, int], groups: int, eps: float,
                 weight: Any = None, stats: Any = None, sums: Any = None) -> None:
        self.layer, self.ops, self.dtype = layer, layer.device_ops(x), x._dtype.name
        address = layer.optional_address
        self.n, self.c, self.s = shape
        self.args = {"out": 0, "affine": 0, "grad": address(self.ops, grad), "x": address(self.ops, x),
                     "weight": address(self.ops, weight), "stats": address(self.ops, stats),
                     "sums": address(self.ops, sums), "row_stats": 0, "partials": 0, "n": self.n, "c": self.c,
                     "s": self.s, "groups": groups, "parts": 1, "eps": eps}

    def launch(self, kernel: str, grid: tuple[int, int, int], mode: int, **fields: Any) -> None:
        self.layer.kernel(self.ops, f"eg_normgrad_{kernel}_{self.dtype}")(grid, BLOCK_SHAPE,
                                                                          {**self.args, **fields, "mode": mode})

    def rows(self, out: Any, row_stats: int) -> None:
        """Each row's statistics into row_stats (0: not kept) and, when out is given, the x-gradient."""
        groups = self.args["groups"]
        rows, d = self.n * groups, self.c // groups * self.s
        if not rows or not d:
            return
        grid, mode = _row_launch(self.ops, rows, d)
        self.launch("rows", grid, mode, out=self.layer.optional_address(self.ops, out), row_stats=row_stats)

    def channels(self, affine: Any, row_stats: int = 0) -> None:
        """The per-channel sums into affine (2, c): a block per channel, or per (channel, part)."""
        if not self.c:
            return
        fields = {"affine": self.layer.address(self.ops, affine), "row_stats": row_stats}
        if self.s >= LONG_RUN:
            self.launch("channels", (min(self.c, MAX_GRID), 1, 1), BLOCK, **fields)
            return
        parts = min(MAX_PARTS, max(1, self.n // PART_SAMPLES))
        grid = self.ops.grid(self.c * parts)
        if parts == 1:
            self.launch("channels", grid, PARTS, **fields, parts=1)
            return
        memory = self.ops.device.memory
        partials = memory.alloc(parts * 2 * self.c * 8)
        try:
            self.launch("channels", grid, PARTS, **fields, parts=parts, partials=partials.pointer)
            self.launch("channels", self.ops.grid(self.c), FINISH, **fields, parts=parts, partials=partials.pointer)
        finally:
            memory.free(partials)  # stream-ordered: reused only after both launches ran

    def rows_and_channels(self, out: Any, affine: Any) -> None:
        """Layer / group norm backward: the x-gradient (out, or None) and, when affine is given, the
        weight and bias gradients from the statistics the row pass saved."""
        if affine is None:
            self.rows(out, 0)
            return
        memory = self.ops.device.memory
        row_stats = memory.alloc(max(1, self.n * self.args["groups"]) * 16)  # (rows, 2) doubles
        try:
            self.rows(out, row_stats.pointer)
            self.channels(affine, row_stats.pointer)
        finally:
            memory.free(row_stats)


def _layer_norm_input_grad(layer: OpLayer) -> Any:
    def layer_norm_input_grad(out: Any, affine: Any, grad_output: Any, x: Any, weight: Any, *, eps: float) -> Any:
        m, d = x._shape
        _Backward(layer, x, grad_output, (m, d, 1), 1, eps, weight).rows_and_channels(out, affine)
        return None

    return layer_norm_input_grad


def _layer_norm_affine_grad(layer: OpLayer) -> Any:
    def layer_norm_affine_grad(out: Any, grad_output: Any, x: Any, *, eps: float) -> Any:
        m, d = x._shape
        _Backward(layer, x, grad_output, (m, d, 1), 1, eps).rows_and_channels(None, out)
        return None

    return layer_norm_affine_grad


def _group_norm_input_grad(layer: OpLayer) -> Any:
    def group_norm_input_grad(out: Any, affine: Any, grad_output: Any, x: Any, weight: Any, *, num_groups: int,
                              eps: float) -> Any:
        _Backward(layer, x, grad_output, x._shape, num_groups, eps, weight).rows_and_channels(out, affine)
        return None

    return group_norm_input_grad


def _group_norm_affine_grad(layer: OpLayer) -> Any:
    def group_norm_affine_grad(out: Any, grad_output: Any, x: Any, *, num_groups: int, eps: float) -> Any:
        _Backward(layer, x, grad_output, x._shape, num_groups, eps).rows_and_channels(None, out)
        return None

    return group_norm_affine_grad


def _batch_norm_backward_reduce(layer: OpLayer) -> Any:
    def batch_norm_backward_reduce(out: Any, grad_output: Any, x: Any, stats: Any, *, eps: float) -> Any:
        _Backward(layer, x, grad_output, x._shape, 1, eps, stats=stats).channels(out)
        return None

    return batch_norm_backward_reduce


def _batch_norm_input_grad(layer: OpLayer) -> Any:
    def batch_norm_input_grad(out: Any, grad_output: Any, x: Any, stats: Any, sums: Any, weight: Any, *,
                              eps: float) -> Any:
        n, c, s = x._shape
        if not out._numel:
            return None
        work = _Backward(layer, x, grad_output, x._shape, 1, eps, weight, stats, sums)
        grid, mode = _row_launch(work.ops, n * c, s)
        work.launch("bninput", grid, mode, out=layer.address(work.ops, out))
        return None

    return batch_norm_input_grad


_MAKERS = {  # op -> (the kernels it launches, its maker)
    "layer_norm": (("eg_norm_rows",), _layer_norm),
    "group_norm": (("eg_norm_rows",), _group_norm),
    "batch_norm_train": (("eg_batchnorm_train",), _batch_norm_train),
    "layer_norm_input_grad": (("eg_normgrad_rows", "eg_normgrad_channels"), _layer_norm_input_grad),
    "layer_norm_affine_grad": (("eg_normgrad_rows", "eg_normgrad_channels"), _layer_norm_affine_grad),
    "group_norm_input_grad": (("eg_normgrad_rows", "eg_normgrad_channels"), _group_norm_input_grad),
    "group_norm_affine_grad": (("eg_normgrad_rows", "eg_normgrad_channels"), _group_norm_affine_grad),
    "batch_norm_backward_reduce": (("eg_normgrad_channels",), _batch_norm_backward_reduce),
    "batch_norm_input_grad": (("eg_normgrad_bninput",), _batch_norm_input_grad),
}


def kernels(layer: OpLayer) -> dict[str, Entry]:
    table: dict[str, Entry] = {}
    for op, (prefixes, make) in _MAKERS.items():
        served = frozenset.intersection(*(layer.served(prefix) for prefix in prefixes))
        if served:
            table[op] = make(layer), served
    return table
