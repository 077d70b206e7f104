"""2-d pooling with kernels of its own (csrc/eg_pool.h, eg_pool_<op>_<dtype>): max_pool2d, its gradient and
select (double backward), avg_pool2d and its gradient, adaptive_avg_pool2d.  nn.toml hands these kernels
contiguous NCHW tensors, the window already normalized to (h, w) pairs.  A thread per element of the
output; the gradients are gathers (each input element sums the windows that hold it in a fixed order),
so they are deterministic without atomics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember_gpu import abi
from ember_gpu.gen_nn import POOL_OPS
from ember_gpu.ops import BLOCK_SHAPE, Entry, OpLayer

Pair = tuple[int, int]
THREAD, BLOCK = 0, 1  # EG_POOL_* of abi.h: adaptive_avg_pool2d's modes
SHORT_WINDOW = 64  # adaptive windows of more values than this on average: a block per output
MAX_GRID = 65535

# op -> its tensors (out, then the core's inputs) as eg_pool_args sees them: (x, ref, x-sized, pooled)
ROLES: dict[str, Callable[..., tuple[Any, Any, Any, Any]]] = {
    "max_pool2d": lambda out, x: (x, None, x, out),
    "max_pool2d_grad": lambda out, grad_output, x: (grad_output, x, x, grad_output),
    "max_pool2d_select": lambda out, values, x: (values, x, x, out),
    "avg_pool2d": lambda out, x: (x, None, x, out),
    "avg_pool2d_grad": lambda out, grad_output: (grad_output, None, out, grad_output),
    "adaptive_avg_pool2d": lambda out, x: (x, None, x, out),
}
assert tuple(ROLES) == POOL_OPS  # one entry per kernel gen_nn builds


def _launch(layer: OpLayer, op: str, out: Any, x: Any, ref: Any, big: Any, small: Any, *, kernel_size: Pair = (1, 1),
            stride: Pair = (1, 1), padding: Pair = (0, 0), dilation: Pair = (1, 1),
            count_include_pad: bool = False) -> Any:
    """One launch of eg_pool_<op> over out's elements: big is the x-sized tensor, small the pooled one.
    Declines (NotImplemented: the composite runs) a window of more taps than eg_pool.h's 32-bit tap index."""
    if kernel_size[0] * kernel_size[1] > abi.INDEX32_MAX:
        return NotImplemented
    if not out._numel:
        return None
    ops = layer.device_ops(out)
    n, c, h, w = big._shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    block = op == "adaptive_avg_pool2d" and h * w > SHORT_WINDOW * small._shape[2] * small._shape[3]
    grid = (min(out._numel, MAX_GRID), 1, 1) if block else ops.grid(out._numel)
    layer.kernel(ops, f"eg_pool_{op}_{out._dtype.name}")(grid, BLOCK_SHAPE, {
        "out": layer.address(ops, out), "x": layer.address(ops, x),
        "ref": 0 if ref is None else layer.address(ops, ref),
        "planes": n * c, "h": h, "w": w, "oh": small._shape[2], "ow": small._shape[3], "kh": kh, "kw": kw,
        "sh": sh, "sw": sw, "ph": ph, "pw": pw, "dh": dh, "dw": dw, "count_include_pad": int(count_include_pad),
        "mode": BLOCK if block else THREAD})
    return None


def _kernel(layer: OpLayer, op: str) -> Callable[..., Any]:
    """op's kernel in the core's calling convention (nn.toml's pool family); ceil_mode and output_size
    only shaped out, which the core computed."""
    roles = ROLES[op]

    def kernel(out: Any, *inputs: Any, ceil_mode: bool = False, output_size: Any = None, **window: Any) -> Any:
        x, ref, big, small = roles(out, *inputs)
        if out._numel and not big._numel:  # adaptive windows of nothing: the composite says what is wrong
            return NotImplemented
        return _launch(layer, op, out, x, ref, big, small, **window)

    kernel.__name__ = op
    return kernel


def kernels(layer: OpLayer) -> dict[str, Entry]:
    table: dict[str, Entry] = {}
    for op in POOL_OPS:
        served = layer.served(f"eg_pool_{op}")
        if served:
            table[op] = _kernel(layer, op), served
    return table
