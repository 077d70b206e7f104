"""2-d pooling with kernels of its own (csrc/eg_pool.h, eg_pool_<op>_<dtype>): max_pool2d, its gradient and
select (double backward), avg_pool2d and its gradient, adaptive_avg_pool2d.  nn.toml hands these kernels
contiguous NCHW tensors, the window already normalized to (h, w) pairs.  A thread per element of the
output; the gradients are gathers (each input element sums the windows that hold it in a fixed order),
so they are deterministic without atomics."""

from __future__ import annotations

from typing import Any

from ember_gpu import abi
from ember_gpu.gen_nn import POOL_OPS
from ember_gpu.ops import BLOCK_SHAPE, Entry, OpLayer

Pair = tuple[int, int]


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
    layer.kernel(ops, f"eg_pool_{op}_{out._dtype.name}")(ops.grid(out._numel), BLOCK_SHAPE, {
        "out": layer.address(ops, out), "x": layer.address(ops, x),
        "ref": 0 if ref is None else layer.address(ops, ref),
        "planes": n * c, "h": h, "w": w, "oh": small._shape[2], "ow": small._shape[3], "kh": kh, "kw": kw,
        "sh": sh, "sw": sw, "ph": ph, "pw": pw, "dh": dh, "dw": dw, "count_include_pad": int(count_include_pad)})
    return None


def max_pool2d(layer: OpLayer) -> Any:
    def kernel(out: Any, x: Any, *, ceil_mode: bool, **window: Any) -> Any:
        return _launch(layer, "max_pool2d", out, x, None, x, out, **window)

    return kernel


def max_pool2d_grad(layer: OpLayer) -> Any:
    def kernel(out: Any, grad_output: Any, x: Any, *, ceil_mode: bool, **window: Any) -> Any:
        return _launch(layer, "max_pool2d_grad", out, grad_output, x, x, grad_output, **window)

    return kernel


def max_pool2d_select(layer: OpLayer) -> Any:
    def kernel(out: Any, values: Any, x: Any, *, ceil_mode: bool, **window: Any) -> Any:
        return _launch(layer, "max_pool2d_select", out, values, x, x, out, **window)

    return kernel


def avg_pool2d(layer: OpLayer) -> Any:
    def kernel(out: Any, x: Any, *, ceil_mode: bool, **window: Any) -> Any:
        return _launch(layer, "avg_pool2d", out, x, None, x, out, **window)

    return kernel


def avg_pool2d_grad(layer: OpLayer) -> Any:
    def kernel(out: Any, grad_output: Any, *, ceil_mode: bool, **window: Any) -> Any:
        return _launch(layer, "avg_pool2d_grad", out, grad_output, None, out, grad_output, **window)

    return kernel


def adaptive_avg_pool2d(layer: OpLayer) -> Any:
    def kernel(out: Any, x: Any, *, output_size: Any) -> Any:
        if out._numel and not x._numel:  # windows of nothing: the composite says what is wrong
            return NotImplemented
        return _launch(layer, "adaptive_avg_pool2d", out, x, None, x, out)

    return kernel


MAKERS = {"max_pool2d": max_pool2d, "max_pool2d_grad": max_pool2d_grad, "max_pool2d_select": max_pool2d_select,
          "avg_pool2d": avg_pool2d, "avg_pool2d_grad": avg_pool2d_grad, "adaptive_avg_pool2d": adaptive_avg_pool2d}
assert tuple(MAKERS) == POOL_OPS  # one maker per kernel family gen_nn builds


def kernels(layer: OpLayer) -> dict[str, Entry]:
    table: dict[str, Entry] = {}
    for op, make in MAKERS.items():
        served = layer.served(f"eg_pool_{op}")
        if served:
            table[op] = make(layer), served
    return table
