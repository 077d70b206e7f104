"""Composites of the neural-network ops in nn.toml, written in ember ops and views, plus the
geometry (argument normalization and output sizes) that their builders validate with.

A function here is named after its op and takes the op's parameters.  Convolutions are im2col (a
strided window view made contiguous) + batched GEMM; their gradients scatter windows back with
one accumulating index_put (col2im).  Pooling reduces over the same window views.
"""

from __future__ import annotations

import math
from functools import lru_cache, wraps
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


_SCALARS = (int, bool, float, str, type(None))


def _memoized(compute: Any) -> Any:
    """Geometry depends on its arguments alone, and a model calls each layer with the same few:
    a repeat is one lookup.  Only arguments whose equality means the same validation are cached
    (scalars told apart by type, tuples of exact ints: True and 1.0 equal 1 but are refused);
    errors are never cached."""
    cached = lru_cache(maxsize=4096, typed=True)(compute)

    @wraps(compute)
    def geometry(*args: Any) -> Any:
        if all(type(a) in _SCALARS or (type(a) is tuple and all(type(v) is int for v in a)) for a in args):
            return cached(*args)
        return compute(*args)

    return geometry


class ConvGeometry(NamedTuple):
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    out_hw: tuple[int, int]


@_memoized
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


@_memoized
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


# ---- padding and kernel taps ----------------------------------------------------------------------
# A "tap" is one kernel position (i, j): the (N, C, OH, OW) strided view of the padded input that
# this position of every window reads.  Pooling combines taps elementwise; gradients add each
# tap's share back into its view (col2im).  Small kernels make this a few strided elementwise ops.

def _padded(x: Any, padding: tuple[int, int], padded_hw: tuple[int, int], fill: float) -> Any:
    """x placed at (padding) inside a (N, C, *padded_hw) tensor of ``fill`` (x itself when no pad)."""
    from ember_core.creation import copy_into, full

    n, c, h, w = x.shape
    if padded_hw == (h, w):
        return x
    out = full((n, c, *padded_hw), fill, dtype=x.dtype, device=x.device)
    (ph, pw) = padding
    copy_into(out[:, :, ph:ph + h, pw:pw + w], x)
    return out


def _taps(padded: Any, kernel: tuple[int, int], g: PoolGeometry | ConvGeometry) -> list[Any]:
    """The (N, C, OH, OW) view of every kernel tap, in row-major tap order."""
    (sh, sw), (dh, dw), (oh, ow) = g.stride, g.dilation, g.out_hw
    return [padded[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            for i in range(kernel[0]) for j in range(kernel[1])]


def _scatter_taps(shares: list[Any], kernel: tuple[int, int], g: PoolGeometry | ConvGeometry,
                  input_shape: tuple[int, ...]) -> Any:
    """col2im: the sum of each tap's (N, C, OH, OW) share at its positions, cropped to the input."""
    from ember_core.creation import copy_into, zeros

    n, c, h, w = input_shape
    padded_hw = _padded_hw((h, w), g, kernel)
    out = zeros((n, c, *padded_hw), dtype=shares[0].dtype, device=shares[0].device)
    overlapping = any(s < d * (k - 1) + 1 for s, d, k in zip(g.stride, g.dilation, kernel))
    for view, share in zip(_taps(out, kernel, g), shares):
        if overlapping:
            view += share  # taps of overlapping windows meet: accumulate
        else:
            copy_into(view, share)  # every position belongs to one tap of one window at most
    (ph, pw) = g.padding
    return out if padded_hw == (h, w) else out[:, :, ph:ph + h, pw:pw + w].contiguous()


# ---- convolution: GEMMs over im2col columns laid out (N, groups, C/groups*kH*kW, OH*OW) ---------------

def _columns(x: Any, kernel: tuple[int, int], g: ConvGeometry) -> Any:
    """im2col in the layout whose GEMM output is already NCHW: (N, groups, C/groups*kH*kW, OH*OW)."""
    from ember_core.views import as_strided

    n, c, h, w = x.shape
    padded = _padded(x, g.padding, _padded_hw((h, w), g, kernel), 0.0)
    s_n, s_c, s_h, s_w = padded.strides
    (sh, sw), (dh, dw) = g.stride, g.dilation
    windows = as_strided(padded, (n, c, *kernel, *g.out_hw),
                         (s_n, s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw), padded.offset)
    # sizes spelled out: a -1 cannot be inferred for an empty batch
    return windows.reshape((n, g.groups, c // g.groups * kernel[0] * kernel[1], g.out_hw[0] * g.out_hw[1]))


def conv2d(x: Any, weight: Any, bias: Any = None, /, *, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1, activation: str | None = None) -> Any:
    g = conv_geometry("conv2d", x.shape, weight.shape, stride, padding, dilation, groups)
    o = weight.shape[0]
    out = weight.reshape((groups, o // groups, -1)) @ _columns(x, weight.shape[2:], g)  # (N, groups, O/g, OH*OW)
    out = out.reshape((x.shape[0], o, *g.out_hw))
    if bias is not None:
        out = out + bias.reshape((1, o, 1, 1))
    return _ops().relu(out) if activation == "relu" else out


def conv2d_weight_grad(x: Any, grad_output: Any, /, *, weight_shape: Any, stride: Any = 1, padding: Any = 0,
                       dilation: Any = 1, groups: int = 1) -> Any:
    weight_shape = tuple(weight_shape)
    g = conv_geometry("conv2d_weight_grad", x.shape, weight_shape, stride, padding, dilation, groups)
    n, o = x.shape[0], weight_shape[0]
    per_image = grad_output.reshape((n, groups, o // groups, g.out_hw[0] * g.out_hw[1])) @ _columns(
        x, weight_shape[2:], g).mT
    return _ops().sum(per_image, axis=0).reshape(weight_shape)


def conv2d_input_grad(grad_output: Any, weight: Any, /, *, input_shape: Any, stride: Any = 1, padding: Any = 0,
                      dilation: Any = 1, groups: int = 1) -> Any:
    input_shape = tuple(input_shape)
    g = conv_geometry("conv2d_input_grad", input_shape, weight.shape, stride, padding, dilation, groups)
    n, c = input_shape[:2]
    o, cg, kh, kw = weight.shape
    spans = (g.dilation[0] * (kh - 1), g.dilation[1] * (kw - 1))
    if g.stride == (1, 1) and all(p <= s for p, s in zip(g.padding, spans)):
        # a stride-1 transposed convolution is a convolution with the flipped, transposed kernel
        flipped = weight.reshape((groups, o // groups, cg, kh, kw)).permute_dims((0, 2, 1, 3, 4))
        flipped = flipped.reshape((c, o // groups, kh, kw))[:, :, ::-1, ::-1]
        return _ops().conv2d(grad_output, flipped, padding=tuple(s - p for s, p in zip(spans, g.padding)),
                             dilation=g.dilation, groups=groups)
    go = grad_output.reshape((n, groups, o // groups, g.out_hw[0] * g.out_hw[1]))  # (no -1: n may be 0)
    cols = (weight.reshape((groups, o // groups, -1)).mT @ go).reshape((n, c, kh, kw, *g.out_hw))
    return _scatter_taps([cols[:, :, i, j] for i in range(kh) for j in range(kw)], (kh, kw), g, input_shape)


# ---- linear -------------------------------------------------------------------------------------

def linear(x: Any, weight: Any, bias: Any = None, /, *, activation: str | None = None) -> Any:
    out = x @ weight.mT
    if bias is not None:
        out = out + bias
    return _ops().relu(out) if activation == "relu" else out


# ---- pooling ------------------------------------------------------------------------------------

def _pool_taps(x: Any, g: PoolGeometry, fill: float) -> list[Any]:
    return _taps(_padded(x, g.padding, _padded_hw(x.shape[2:], g, g.kernel_size), fill), g.kernel_size, g)


def max_pool2d(x: Any, /, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False) -> Any:
    g = pool_geometry("max_pool2d", x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    ops = _ops()
    taps = _pool_taps(x, g, -math.inf)
    out = taps[0]
    for tap in taps[1:]:
        out = ops.maximum(out, tap)
    return out if len(taps) > 1 else out.contiguous()


def _argmax_tap(x: Any, g: PoolGeometry) -> Any:
    """Per output, the index of the first tap holding the window's maximum (as PyTorch picks)."""
    from ember_core.creation import zeros

    ops = _ops()
    taps = _pool_taps(x, g, -math.inf)
    best, index = taps[0], zeros(taps[0].shape, dtype="int64", device=x.device)
    for k, tap in enumerate(taps[1:], 1):
        better = ops.greater(tap, best)
        best = ops.where(better, tap, best)
        index = ops.where(better, k, index)
    return index


def max_pool2d_grad(grad_output: Any, x: Any, /, kernel_size: Any, stride: Any = None, padding: Any = 0,
                    dilation: Any = 1, ceil_mode: bool = False) -> Any:
    g = pool_geometry("max_pool2d_grad", x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    ops = _ops()
    index = _argmax_tap(x, g)
    shares = [ops.where(ops.equal(index, k), grad_output, 0.0) for k in range(math.prod(g.kernel_size))]
    return _scatter_taps(shares, g.kernel_size, g, x.shape)


def max_pool2d_select(values: Any, x: Any, /, kernel_size: Any, stride: Any = None, padding: Any = 0,
                      dilation: Any = 1, ceil_mode: bool = False) -> Any:
    g = pool_geometry("max_pool2d_select", x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    ops = _ops()
    index = _argmax_tap(x, g)
    taps = _pool_taps(values, g, 0.0)
    out = ops.where(ops.equal(index, 0), taps[0], 0.0)
    for k, tap in enumerate(taps[1:], 1):
        out = ops.where(ops.equal(index, k), tap, out)
    return out


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
    taps = _pool_taps(x, g, 0.0)
    total = taps[0]
    for tap in taps[1:]:
        total = total + tap
    return total / _divisors(x, x.shape[2:], g, count_include_pad)


def avg_pool2d_grad(grad_output: Any, /, input_shape: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                    ceil_mode: bool = False, count_include_pad: bool = True) -> Any:
    input_shape = tuple(input_shape)
    g = pool_geometry("avg_pool2d_grad", input_shape, kernel_size, stride, padding, 1, ceil_mode)
    share = grad_output / _divisors(grad_output, input_shape[2:], g, count_include_pad)
    return _scatter_taps([share] * math.prod(g.kernel_size), g.kernel_size, g, input_shape)


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
    if not x_shape[2] or not x_shape[3]:  # an empty window has no mean (PyTorch refuses it too)
        raise ShapeError(f"{op}: the input's height and width must be non-zero, got shape {tuple(x_shape)}")
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

def _shifted(x: Any, axis: int) -> Any:
    """x less its maximum along axis; an empty x as it is (a zero-length axis has no maximum)."""
    return x - _ops().max(x, axis=axis, keepdims=True) if x.size else x


def softmax(x: Any, /, axis: int = -1) -> Any:
    ops = _ops()
    exps = ops.exp(_shifted(x, axis))
    return exps / ops.sum(exps, axis=axis, keepdims=True)


def log_softmax(x: Any, /, axis: int = -1) -> Any:
    ops = _ops()
    shifted = _shifted(x, axis)
    return shifted - ops.log(ops.sum(ops.exp(shifted), axis=axis, keepdims=True))


# ---- batch norm ----------------------------------------------------------------------------------

def _computed(x: Any) -> Any:
    """x in the dtype its statistics are computed in: float32 for float16/bfloat16."""
    from ember_core import dtypes as dt

    return x if x.dtype in (dt.float32, dt.float64) else _ops().astype(x, dt.float32)


def _channel(t: Any, ndim: int) -> Any:
    """A per-channel (C,) tensor shaped to broadcast against (N, C, ...)."""
    return t.reshape((1, t.shape[0], *(1,) * (ndim - 2)))


def _other_axes(x: Any) -> tuple[int, ...]:
    return (0, *range(2, x.ndim))


def batch_norm_statistics(x: Any) -> Any:
    """(2, C): the mean and the biased variance of each channel of x (N, C, ...)."""
    ops = _ops()
    work = _computed(x)
    mean = ops.mean(work, axis=_other_axes(x), keepdims=True)
    var = ops.mean(ops.square(work - mean), axis=_other_axes(x))
    return ops.stack([mean.reshape((-1,)), var])


def batch_norm_train(x: Any, stats: Any, weight: Any = None, bias: Any = None, /, *, eps: float = 1e-5) -> Any:
    from ember_core.creation import copy_into

    ops = _ops()
    computed = batch_norm_statistics(x)
    copy_into(stats, computed)
    scale = ops.reciprocal(ops.sqrt(computed[1] + eps))
    if weight is not None:
        scale = scale * weight
    out = (_computed(x) - _channel(computed[0], x.ndim)) * _channel(scale, x.ndim)
    if bias is not None:
        out = out + _channel(bias, x.ndim)
    return ops.astype(out, x.dtype)


def batch_norm_backward_reduce(grad_output: Any, x: Any, stats: Any, /, *, eps: float = 1e-5) -> Any:
    ops = _ops()
    g = _computed(grad_output)
    invstd = ops.reciprocal(ops.sqrt(_computed(stats[1]) + eps))
    normalized = (_computed(x) - _channel(stats[0], x.ndim)) * _channel(invstd, x.ndim)
    return ops.astype(ops.stack([ops.sum(g, axis=_other_axes(x)), ops.sum(g * normalized, axis=_other_axes(x))]),
                      x.dtype)


def batch_norm_input_grad(grad_output: Any, x: Any, stats: Any, sums: Any, weight: Any = None, /, *,
                          eps: float = 1e-5) -> Any:
    ops = _ops()
    count = x.size // x.shape[1]
    invstd = ops.reciprocal(ops.sqrt(_computed(stats[1]) + eps))
    scale = invstd if weight is None else invstd * weight
    sums = _computed(sums)
    centered = _computed(x) - _channel(stats[0], x.ndim)
    out = _channel(scale, x.ndim) * (_computed(grad_output) - _channel(sums[0] / count, x.ndim)
                                     - centered * _channel(sums[1] * invstd / count, x.ndim))
    return ops.astype(out, x.dtype)


def _trailing_axes(x: Any, normalized_shape: Any) -> tuple[int, ...]:
    count = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    return tuple(range(x.ndim - count, x.ndim))


def _normalized_rows(x: Any, axes: tuple[int, ...], eps: float) -> tuple[Any, Any]:
    """xhat and 1 / sqrt(var + eps) of each row of x over ``axes``."""
    ops = _ops()
    work = _computed(x)
    centered = work - ops.mean(work, axis=axes, keepdims=True)
    invstd = ops.reciprocal(ops.sqrt(ops.mean(ops.square(centered), axis=axes, keepdims=True) + eps))
    return centered * invstd, invstd


def layer_norm(x: Any, normalized_shape: Any, weight: Any = None, bias: Any = None, /, *, eps: float = 1e-5) -> Any:
    out, _ = _normalized_rows(x, _trailing_axes(x, normalized_shape), eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return _ops().astype(out, x.dtype)


def layer_norm_input_grad(grad_output: Any, x: Any, normalized_shape: Any, weight: Any = None, affine: Any = None,
                          /, *, eps: float = 1e-5) -> Any:
    ops = _ops()
    axes = _trailing_axes(x, normalized_shape)
    xhat, invstd = _normalized_rows(x, axes, eps)
    g = _computed(grad_output) if weight is None else _computed(grad_output) * weight
    out = invstd * (g - ops.mean(g, axis=axes, keepdims=True) - xhat * ops.mean(g * xhat, axis=axes, keepdims=True))
    if affine is not None:
        from ember_core.creation import copy_into

        copy_into(affine, _affine_sums(grad_output, xhat, len(axes), x.dtype))
    return ops.astype(out, x.dtype)


def _affine_sums(grad_output: Any, xhat: Any, normalized_dims: int, dtype: Any) -> Any:
    """layer_norm's weight and bias gradients, stacked: the sums over rows of grad * xhat and grad."""
    ops = _ops()
    rows = tuple(range(xhat.ndim - normalized_dims))
    g = _computed(grad_output)
    return ops.astype(ops.stack([ops.sum(g * xhat, axis=rows), ops.sum(g, axis=rows)]), dtype)


def layer_norm_affine_grad(grad_output: Any, x: Any, normalized_shape: Any, /, *, eps: float = 1e-5) -> Any:
    axes = _trailing_axes(x, normalized_shape)
    xhat, _ = _normalized_rows(x, axes, eps)
    return _affine_sums(grad_output, xhat, len(axes), x.dtype)


def _group_rows(x: Any, num_groups: int) -> Any:
    """x (N, C, ...) as (N, num_groups, D): each sample's group of channels one row."""
    return x.reshape((x.shape[0], num_groups, -1))


def _group_normalized(x: Any, num_groups: int, eps: float) -> Any:
    """group_norm's xhat, shaped like x, computed in _computed's dtype (layer_norm's rows)."""
    rows = _group_rows(_computed(x), num_groups)
    return _ops().layer_norm(rows, rows.shape[-1], eps=eps).reshape(x.shape)


def group_norm(x: Any, num_groups: int, weight: Any = None, bias: Any = None, /, *, eps: float = 1e-5) -> Any:
    out = _group_normalized(x, num_groups, eps)
    if weight is not None:
        out = out * _channel(weight, x.ndim)
    if bias is not None:
        out = out + _channel(bias, x.ndim)
    return _ops().astype(out, x.dtype)


def group_norm_input_grad(grad_output: Any, x: Any, num_groups: int, weight: Any = None, affine: Any = None, /, *,
                          eps: float = 1e-5) -> Any:
    """layer_norm's x-gradient over the groups' rows, of grad_output scaled per channel."""
    ops = _ops()
    g = _computed(grad_output) if weight is None else _computed(grad_output) * _channel(weight, x.ndim)
    rows = _group_rows(_computed(x), num_groups)
    out = ops.layer_norm_input_grad(_group_rows(g, num_groups), rows, rows.shape[-1], eps=eps).reshape(x.shape)
    if affine is not None:
        from ember_core.creation import copy_into

        copy_into(affine, group_norm_affine_grad(grad_output, x, num_groups, eps=eps))
    return ops.astype(out, x.dtype)


def group_norm_affine_grad(grad_output: Any, x: Any, num_groups: int, /, *, eps: float = 1e-5) -> Any:
    ops = _ops()
    xhat, g, axes = _group_normalized(x, num_groups, eps), _computed(grad_output), _other_axes(x)
    return ops.astype(ops.stack([ops.sum(g * xhat, axis=axes), ops.sum(g, axis=axes)]), x.dtype)


# ---- losses -------------------------------------------------------------------------------------

def _loss_coefficients(target: Any, weight: Any, n_classes: int, like: Any, ignore_index: int,
                       label_smoothing: float, reduction: str) -> tuple[Any, Any]:
    """coef (N, C): the weight of log_probs[i, c] in row i's loss, and for 'mean' the divisor (the
    summed weights of the targets that count; None for the other reductions)."""
    from ember_core.creation import arange
    from ember_core.views import expand_dims

    ops = _ops()
    is_target = expand_dims(target, axis=-1) == arange(n_classes, device=like.device)
    counts = expand_dims(target != ignore_index, axis=-1)
    coef = ops.astype(is_target, like.dtype)
    if label_smoothing:
        coef = coef * (1.0 - label_smoothing) + label_smoothing / n_classes
    if weight is not None:
        coef = coef * weight
    coef = ops.where(counts, coef, 0.0)
    if reduction != "mean":
        return coef, None
    chosen = is_target & counts
    return coef, ops.sum(ops.astype(chosen, like.dtype) if weight is None else ops.where(chosen, weight, 0.0))


def nll_loss(log_probs: Any, target: Any, weight: Any = None, /, *, ignore_index: int = -100,
             reduction: str = "mean", label_smoothing: float = 0.0) -> Any:
    ops = _ops()
    coef, divisor = _loss_coefficients(target, weight, log_probs.shape[1], log_probs, ignore_index, label_smoothing,
                                       reduction)
    if reduction == "none":
        return -ops.sum(log_probs * coef, axis=-1)
    total = -ops.sum(log_probs * coef)
    return total if reduction == "sum" else total / divisor


def nll_loss_grad(grad_output: Any, target: Any, weight: Any = None, /, *, n_classes: int, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Any:
    from ember_core.views import expand_dims

    ops = _ops()
    coef, divisor = _loss_coefficients(target, weight, n_classes, grad_output, ignore_index, label_smoothing, reduction)
    if reduction == "none":
        return -coef * expand_dims(grad_output, axis=-1)
    if reduction == "sum":
        return -coef * grad_output
    # ignored rows get zeros, also when no row counts (0 * (g / 0) would be NaN), as in PyTorch
    return ops.where(expand_dims(target != ignore_index, axis=-1), -coef * (grad_output / divisor), 0.0)


# ---- dropout -------------------------------------------------------------------------------------

def dropout(x: Any, /, p: float, *, seed: int, offset: int) -> Any:
    """bernoulli's mask drawn at the Philox position (seed, offset) from a generator placed there,
    so a native kernel that reads the same stream agrees to the bit."""
    from ember_core import dtypes as dt
    from ember_core.random import Generator

    ops = _ops()
    at = Generator(x.device, seed)
    at.set_state((seed, offset))
    keep = ops.bernoulli(ops.full((), 1.0 - p, dtype=dt.float32, device=x.device), x.shape, generator=at)
    return ops.where(keep, x * (1.0 / (1.0 - p)), 0.0)
