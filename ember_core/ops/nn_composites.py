"""Composites of the neural-network ops in nn.toml, written in ember ops and views, plus the
geometry (argument normalization and output sizes) that their builders validate with.

A function here is named after its op and takes the op's parameters.  Convolutions are im2col (a
strided window view made contiguous) + batched GEMM; their gradients scatter windows back with
one accumulating index_put (col2im).  Pooling reduces over the same window views.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from ember_core.errors import ShapeError


def _ops() -> Any:
    from ember_core.ops import namespace

    return namespace


# ---- geometry ----------------------------------------------------------------------------------

def pair(op: str, name: str, value: Any, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints as an (h, w) pair, each at least ``minimum``."""
    values = (value, value) if isinstance(value, int) else tuple(value) if isinstance(value, (tuple, list)) else None
    if values is None or len(values) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise TypeError(f"{op}: {name} must be an int or a pair of ints, got {value!r}")
    if min(values) < minimum:
        raise ValueError(f"{op}: {name} must be >= {minimum}, got {value!r}")
    return values  # type: ignore[return-value]


def _nchw(op: str, name: str, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    if len(shape) != 4:
        raise ShapeError(f"{op}: {name} must be 4-d (N, C, H, W), got shape {tuple(shape)}")
    return tuple(shape)  # type: ignore[return-value]


class ConvGeometry(NamedTuple):
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    out_hw: tuple[int, int]


def conv_geometry(op: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: Any, padding: Any,
                  dilation: Any, groups: Any) -> ConvGeometry:
    """Normalized conv2d arguments and the output's (OH, OW); a typed error for anything invalid."""
    stride, dilation = pair(op, "stride", stride, 1), pair(op, "dilation", dilation, 1)
    padding = pair(op, "padding", padding, 0)
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"{op}: groups must be an int >= 1, got {groups!r}")
    _, c, h, w = _nchw(op, "the input", x_shape)
    if len(w_shape) != 4:
        raise ShapeError(f"{op}: the weight must be 4-d (O, C/groups, kH, kW), got shape {tuple(w_shape)}")
    o, cg, kh, kw = w_shape
    if c % groups or o % groups or cg != c // groups:
        expected = c // groups if c % groups == 0 else f"C/groups (C={c} is not divisible by groups={groups})"
        raise ShapeError(f"{op}: {c} input channels and {o} filters with groups={groups} need a weight of shape "
                         f"({o}, {expected}, kH, kW) with O divisible by groups, got {tuple(w_shape)}")
    out_hw = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                   for n, p, d, k, s in zip((h, w), padding, dilation, (kh, kw), stride))
    if min(out_hw) < 1 or kh < 1 or kw < 1:
        raise ShapeError(f"{op}: the {kh}x{kw} kernel (dilation {dilation}) does not fit the {h}x{w} input "
                         f"padded by {padding}; pad more or use a smaller kernel")
    return ConvGeometry(stride, padding, dilation, groups, out_hw)  # type: ignore[arg-type]


class PoolGeometry(NamedTuple):
    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    ceil_mode: bool
    out_hw: tuple[int, int]


def pool_geometry(op: str, x_shape: tuple[int, ...], kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                  ceil_mode: Any) -> PoolGeometry:
    """PyTorch's pooling output sizes: floor (or ceil) of (H + 2p - d(k-1) - 1) / s + 1, where a
    ceil_mode window must start inside the input or its left padding; padding <= kernel // 2."""
    kernel = pair(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None else pair(op, "stride", stride, 1)
    padding, dilation = pair(op, "padding", padding, 0), pair(op, "dilation", dilation, 1)
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise ValueError(f"{op}: padding {padding} must be at most half the kernel size {kernel}")
    _, _, h, w = _nchw(op, "the input", x_shape)
    out_hw = []
    for n, k, s, p, d in zip((h, w), kernel, stride, padding, dilation):
        span = n + 2 * p - d * (k - 1) - 1
        size = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (size - 1) * s >= n + p:
            size -= 1
        out_hw.append(size)
    if min(out_hw) < 1:
        raise ShapeError(f"{op}: the {kernel} window (dilation {dilation}) does not fit the {h}x{w} input padded "
                         f"by {padding} (output size {tuple(out_hw)})")
    return PoolGeometry(kernel, stride, padding, dilation, bool(ceil_mode), tuple(out_hw))  # type: ignore[arg-type]


def _padded_hw(hw: tuple[int, int], g: PoolGeometry | ConvGeometry, kernel: tuple[int, int]) -> tuple[int, int]:
    """The padded extent every window lies in (ceil_mode windows may reach past the right padding)."""
    return tuple(max(n + 2 * p, (o - 1) * s + d * (k - 1) + 1)  # type: ignore[return-value]
                 for n, p, o, s, d, k in zip(hw, g.padding, g.out_hw, g.stride, g.dilation, kernel))


# ---- windows, padding and col2im ------------------------------------------------------------------

def _padded(x: Any, padding: tuple[int, int], padded_hw: tuple[int, int], fill: float) -> Any:
    """x placed at (padding) inside a (N, C, *padded_hw) tensor of ``fill`` (x itself when no pad)."""
    from ember_core.creation import copy_into, full

    n, c, h, w = x.shape
    if padded_hw == (h, w):
        return x.contiguous()
    out = full((n, c, *padded_hw), fill, dtype=x.dtype, device=x.device)
    (ph, pw) = padding
    copy_into(out[:, :, ph:ph + h, pw:pw + w], x)
    return out


def _windows(padded: Any, kernel: tuple[int, int], g: PoolGeometry | ConvGeometry) -> Any:
    """The (N, C, OH, OW, kH, kW) view of every window of a contiguous padded input."""
    from ember_core.views import as_strided

    n, c = padded.shape[:2]
    s_n, s_c, s_h, s_w = padded.strides
    (sh, sw), (dh, dw) = g.stride, g.dilation
    return as_strided(padded, (n, c, *g.out_hw, *kernel),
                      (s_n, s_c, s_h * sh, s_w * sw, s_h * dh, s_w * dw), padded.offset)


@lru_cache(maxsize=256)
def _window_offsets(out_hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
                    dilation: tuple[int, int], padded_w: int) -> tuple[np.ndarray, np.ndarray]:
    """Flat positions in a padded plane: of each window's origin (OH*OW,) and of each kernel tap (kH*kW,)."""
    rows = np.arange(out_hw[0])[:, None] * stride[0] * padded_w
    origins = (rows + np.arange(out_hw[1])[None, :] * stride[1]).reshape(-1)
    taps = (np.arange(kernel[0])[:, None] * dilation[0] * padded_w + np.arange(kernel[1])[None, :] * dilation[1])
    return origins.astype(np.int64), taps.reshape(-1).astype(np.int64)


_index_tensors: dict[tuple[Any, ...], Any] = {}


def _device_index(key: tuple[Any, ...], values: np.ndarray, device: Any) -> Any:
    """A cached int64 ember tensor of constant indices on a device."""
    from ember_core.creation import asarray

    t = _index_tensors.get((key, device))
    if t is None:
        if len(_index_tensors) > 256:
            _index_tensors.clear()
        t = _index_tensors[(key, device)] = asarray(values, device=device)
    return t


def _fold(cols: Any, kernel: tuple[int, int], g: PoolGeometry | ConvGeometry, padded_hw: tuple[int, int]) -> Any:
    """col2im: the sum of (N, C, OH, OW, kH, kW) window values at their positions in the padded plane."""
    from ember_core.creation import zeros

    ops = _ops()
    n, c = cols.shape[:2]
    origins, taps = _window_offsets(g.out_hw, kernel, g.stride, g.dilation, padded_hw[1])
    key = ("fold", g.out_hw, kernel, g.stride, g.dilation, padded_hw[1])
    positions = _device_index(key, (origins[:, None] + taps[None, :]).reshape(-1), cols.device)
    out = zeros((n * c, padded_hw[0] * padded_hw[1]), dtype=cols.dtype, device=cols.device)
    ops.index_put(out, positions, cols.reshape((n * c, -1)), axis=1, accumulate=True)
    return out.reshape((n, c, *padded_hw))


def _crop(x: Any, padding: tuple[int, int], hw: tuple[int, int]) -> Any:
    (ph, pw), (h, w) = padding, hw
    if x.shape[2:] == (h, w):
        return x
    return x[:, :, ph:ph + h, pw:pw + w].contiguous()


# ---- convolution --------------------------------------------------------------------------------

def _im2col(x: Any, kernel: tuple[int, int], g: ConvGeometry) -> Any:
    """(groups, N*OH*OW, C/groups*kH*kW): every window of x, one row per output position."""
    n, c, h, w = x.shape
    windows = _windows(_padded(x, g.padding, _padded_hw((h, w), g, kernel), 0.0), kernel, g)
    oh, ow = g.out_hw
    grouped = windows.reshape((n, g.groups, c // g.groups, oh, ow, *kernel))
    return grouped.permute_dims((1, 0, 3, 4, 2, 5, 6)).reshape((g.groups, n * oh * ow, -1))


def _grouped_output(grad_output: Any, groups: int) -> Any:
    """(N, O, OH, OW) -> (groups, N*OH*OW, O/groups), the GEMM layout of conv outputs."""
    n, o, oh, ow = grad_output.shape
    grouped = grad_output.reshape((n, groups, o // groups, oh, ow))
    return grouped.permute_dims((1, 0, 3, 4, 2)).reshape((groups, n * oh * ow, o // groups))


def conv2d(x: Any, weight: Any, bias: Any = None, /, *, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1, activation: str | None = None) -> Any:
    g = conv_geometry("conv2d", x.shape, weight.shape, stride, padding, dilation, groups)
    n, o = x.shape[0], weight.shape[0]
    oh, ow = g.out_hw
    flat_weight = weight.reshape((groups, o // groups, -1))
    out = _im2col(x, weight.shape[2:], g) @ flat_weight.mT  # (groups, N*OH*OW, O/groups)
    out = out.reshape((groups, n, oh, ow, o // groups)).permute_dims((1, 0, 4, 2, 3)).reshape((n, o, oh, ow))
    if bias is not None:
        out = out + bias.reshape((1, o, 1, 1))
    return _ops().relu(out) if activation == "relu" else out


def conv2d_weight_grad(x: Any, grad_output: Any, /, *, weight_shape: Any, stride: Any = 1, padding: Any = 0,
                       dilation: Any = 1, groups: int = 1) -> Any:
    g = conv_geometry("conv2d_weight_grad", x.shape, tuple(weight_shape), stride, padding, dilation, groups)
    cols = _im2col(x, tuple(weight_shape[2:]), g)
    return (_grouped_output(grad_output, groups).mT @ cols).reshape(tuple(weight_shape))


def conv2d_input_grad(grad_output: Any, weight: Any, /, *, input_shape: Any, stride: Any = 1, padding: Any = 0,
                      dilation: Any = 1, groups: int = 1) -> Any:
    input_shape = tuple(input_shape)
    g = conv_geometry("conv2d_input_grad", input_shape, weight.shape, stride, padding, dilation, groups)
    n, c, h, w = input_shape
    _, cg, kh, kw = weight.shape
    oh, ow = g.out_hw
    cols = _grouped_output(grad_output, groups) @ weight.reshape((groups, -1, cg * kh * kw))
    cols = cols.reshape((groups, n, oh, ow, cg, kh, kw)).permute_dims((1, 0, 4, 2, 3, 5, 6))
    padded_hw = _padded_hw((h, w), g, (kh, kw))
    return _crop(_fold(cols.reshape((n, c, oh, ow, kh, kw)), (kh, kw), g, padded_hw), g.padding, (h, w))


# ---- linear -------------------------------------------------------------------------------------

def linear(x: Any, weight: Any, bias: Any = None, /, *, activation: str | None = None) -> Any:
    out = x @ weight.mT
    if bias is not None:
        out = out + bias
    return _ops().relu(out) if activation == "relu" else out


# ---- pooling ------------------------------------------------------------------------------------

def max_pool2d(x: Any, /, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False) -> Any:
    g = pool_geometry("max_pool2d", x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    padded = _padded(x, g.padding, _padded_hw(x.shape[2:], g, g.kernel_size), -math.inf)
    return _ops().max(_windows(padded, g.kernel_size, g), axis=(4, 5))


def _argmax_positions(x: Any, g: PoolGeometry) -> tuple[Any, tuple[int, int]]:
    """Flat positions, in the (N*C*Hp*Wp) padded layout, of each window's first maximum."""
    ops = _ops()
    n, c = x.shape[:2]
    padded_hw = _padded_hw(x.shape[2:], g, g.kernel_size)
    windows = _windows(_padded(x, g.padding, padded_hw, -math.inf), g.kernel_size, g)
    tap = ops.argmax(windows.reshape((n, c, *g.out_hw, -1)), axis=-1)  # first maximum, as PyTorch picks
    origins, taps = _window_offsets(g.out_hw, g.kernel_size, g.stride, g.dilation, padded_hw[1])
    key = (g.out_hw, g.kernel_size, g.stride, g.dilation, padded_hw[1])
    plane = _device_index(("planes", n * c, padded_hw, key), np.arange(n * c, dtype=np.int64) * math.prod(padded_hw),
                          x.device)
    in_plane = ops.take(_device_index(("taps", key), taps, x.device), tap.reshape(-1)).reshape((n * c, -1))
    positions = in_plane + _device_index(("origins", key), origins, x.device) + plane.reshape((n * c, 1))
    return positions.reshape(-1), padded_hw


def max_pool2d_grad(grad_output: Any, x: Any, /, kernel_size: Any, stride: Any = None, padding: Any = 0,
                    dilation: Any = 1, ceil_mode: bool = False) -> Any:
    from ember_core.creation import zeros

    g = pool_geometry("max_pool2d_grad", x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    positions, padded_hw = _argmax_positions(x, g)
    n, c = x.shape[:2]
    out = zeros((n * c * padded_hw[0] * padded_hw[1],), dtype=grad_output.dtype, device=x.device)
    _ops().index_put(out, positions, grad_output.reshape(-1), accumulate=True)
    return _crop(out.reshape((n, c, *padded_hw)), g.padding, x.shape[2:])


def max_pool2d_select(values: Any, x: Any, /, kernel_size: Any, stride: Any = None, padding: Any = 0,
                      dilation: Any = 1, ceil_mode: bool = False) -> Any:
    g = pool_geometry("max_pool2d_select", x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    positions, padded_hw = _argmax_positions(x, g)
    padded = _padded(values, g.padding, padded_hw, 0.0)
    return _ops().take(padded.reshape(-1), positions).reshape((*x.shape[:2], *g.out_hw))


@lru_cache(maxsize=256)
def _avg_divisors(hw: tuple[int, int], g: PoolGeometry, count_include_pad: bool) -> np.ndarray | float:
    """PyTorch's avg_pool2d divisors per output position: the window clipped to the padded input
    (count_include_pad) or to the input itself; a single number when they are all equal."""
    per_axis = []
    for n, o, k, s, p in zip(hw, g.out_hw, g.kernel_size, g.stride, g.padding):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        size = end - start
        if not count_include_pad:
            size = np.minimum(end, n) - np.maximum(start, 0)
        per_axis.append(size)
    divisors = np.outer(per_axis[0], per_axis[1]).astype(np.float64)
    return float(divisors.flat[0]) if (divisors == divisors.flat[0]).all() else divisors


def _divisors(x: Any, hw: tuple[int, int], g: PoolGeometry, count_include_pad: bool) -> Any:
    from ember_core.creation import asarray

    divisors = _avg_divisors(tuple(hw), g, bool(count_include_pad))
    return divisors if isinstance(divisors, float) else asarray(divisors, dtype=x.dtype, device=x.device)


def avg_pool2d(x: Any, /, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Any:
    g = pool_geometry("avg_pool2d", x.shape, kernel_size, stride, padding, 1, ceil_mode)
    padded = _padded(x, g.padding, _padded_hw(x.shape[2:], g, g.kernel_size), 0.0)
    sums = _ops().sum(_windows(padded, g.kernel_size, g), axis=(4, 5))
    return sums / _divisors(x, x.shape[2:], g, count_include_pad)


def avg_pool2d_grad(grad_output: Any, /, input_shape: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                    ceil_mode: bool = False, count_include_pad: bool = True) -> Any:
    from ember_core.views import broadcast_to

    input_shape = tuple(input_shape)
    g = pool_geometry("avg_pool2d_grad", input_shape, kernel_size, stride, padding, 1, ceil_mode)
    share = grad_output / _divisors(grad_output, input_shape[2:], g, count_include_pad)
    cols = broadcast_to(share.reshape((*share.shape, 1, 1)), (*share.shape, *g.kernel_size))
    padded_hw = _padded_hw(input_shape[2:], g, g.kernel_size)
    return _crop(_fold(cols, g.kernel_size, g, padded_hw), g.padding, input_shape[2:])


@lru_cache(maxsize=256)
def _adaptive_matrix(n: int, out: int) -> np.ndarray:
    """(out, n) averaging matrix over PyTorch's adaptive windows [floor(i*n/out), ceil((i+1)*n/out))."""
    matrix = np.zeros((out, n))
    for i in range(out):
        start, end = (i * n) // out, -(-((i + 1) * n) // out)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix


def adaptive_output_size(op: str, x_shape: tuple[int, ...], output_size: Any) -> tuple[int, int]:
    _nchw(op, "the input", x_shape)
    return pair(op, "output_size", output_size, 1)


def adaptive_avg_pool2d(x: Any, /, output_size: Any) -> Any:
    from ember_core.creation import asarray

    oh, ow = adaptive_output_size("adaptive_avg_pool2d", x.shape, output_size)
    h, w = x.shape[2:]
    if (oh, ow) == (1, 1):
        return _ops().mean(x, axis=(2, 3), keepdims=True)
    rows = asarray(_adaptive_matrix(h, oh), dtype=x.dtype, device=x.device)
    cols = asarray(_adaptive_matrix(w, ow).T, dtype=x.dtype, device=x.device)
    return rows @ x @ cols


# ---- softmax ------------------------------------------------------------------------------------

def softmax(x: Any, /, axis: int = -1) -> Any:
    ops = _ops()
    exps = ops.exp(x - ops.max(x, axis=axis, keepdims=True))
    return exps / ops.sum(exps, axis=axis, keepdims=True)


def log_softmax(x: Any, /, axis: int = -1) -> Any:
    ops = _ops()
    shifted = x - ops.max(x, axis=axis, keepdims=True)
    return shifted - ops.log(ops.sum(ops.exp(shifted), axis=axis, keepdims=True))
