"""The kernels: ember's calling convention ``kernel(out, *inputs, **attrs)`` on top of the C layer.

Each kernel checks, in Python and before any native call, that it can take the call exactly:
float32, C-contiguous operands, parameters XNNPACK implements with ember's semantics.  Anything
else returns ``NotImplemented`` and the core runs the next provider (ember-cpu, or the op's
composite), so a call is never answered wrongly.  The C layer declines the same way when an input
or weight holds NaN or an infinity (XNNPACK's output clamps turn NaN into -inf) or a subnormal
(XNNPACK runs with denormals flushed to zero).  Shapes that
contradict the op (a core bug) raise ``ShapeError``.

Elementwise ops (relu, sigmoid, add, multiply, clamp) are not served: XNNPACK's versions lose NaN
and were slower than ember-cpu's at every size above a few thousand elements (see the README of
this plugin's benchmark, bench/bench_xnnpack.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ember_core import float32
from ember_core.autograd import is_recording
from ember_core.errors import ShapeError
from ember_xnnpack import runtime
from ember_xnnpack._native import ffi, lib
from ember_xnnpack.cache import CACHE

_PARAM_LIMIT = 1 << 31  # XNNPACK takes uint32 sizes and parameters
_CLAMPS = {None: (-math.inf, math.inf), "relu": (0.0, math.inf)}  # activation -> (output_min, output_max)


class _Refused(Exception):
    """XNNPACK rejected an operator's parameters, or its weights hold special values (NaN,
    infinities, subnormals): the call goes to the next provider."""


def _nothing_to_do(out: Any) -> bool:
    return out._numel == 0


def _takes(*tensors: Any) -> bool:
    """float32 and C-contiguous (None: an absent optional input)."""
    return all(t is None or (t._dtype is float32 and t._contig) for t in tensors)


def _in_range(*values: int) -> bool:
    return all(0 <= v < _PARAM_LIMIT for v in values)


def _expect_shape(op: str, t: Any, shape: tuple[int, ...]) -> None:
    if t._shape != shape:
        raise ShapeError(f"ember-xnnpack {op}: expected shape {shape}, got {t._shape} (a core bug: please report)")


def _create(what: str, call: Callable[[Any], int]) -> Any:
    """Run a create function that writes an operator into its last argument."""
    slot = ffi.new("void **")
    status = call(slot)
    if status in runtime.DECLINED:
        raise _Refused(what)
    runtime.check(status, f"{what} (create)")
    return slot[0]


def _bias_args(bias: Any) -> tuple[Any, int]:
    return (runtime.NULL, 0) if bias is None else (bias._storage.handle, bias._offset)


def _run(params: Any, weights: tuple[Any, ...], create: Callable[[Any], int], run: Callable[[Any, Any], int],
         what: str) -> Any:
    """Look up (or create) the cached operator, then run it; NotImplemented if XNNPACK refused the
    parameters or an input holds special values."""
    with runtime.LOCK:
        pool = runtime.pool()
        try:
            op = CACHE.operator(params, weights, lambda: _create(what, create))
        except _Refused:
            return NotImplemented
        status = run(op, pool)
    if status == lib.EXN_STATUS_SPECIAL_VALUES:
        return NotImplemented
    runtime.check(status, what)
    return None


# ---- convolution, fully connected -------------------------------------------------------------

def _winograd_wins(kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, groups: int) -> bool:
    """Dense 3x3 stride-1 convolutions run faster on ember-cpu's Winograd kernel, next in line:
    ember-cpu / XNNPACK time at 2 threads 0.49 (8x64x56x56 -> 64), 0.57 (1x64x56x56), 0.66
    (1x3x224x224 -> 32), 0.75 (32x16x8x8 -> 32).  One input channel too: XNNPACK won only some
    inference shapes alone (32x1x8x8 -> 16 0.84, 64x1x28x28 -> 32 0.88, 1x1x224x224 -> 16 1.45),
    lost with trained weights (its operator re-created per call: 0.93-3.5), and serving the demo's
    first layer made the whole training step 3-4% slower than declining it."""
    return (kh, kw, sh, sw, dh, dw, groups) == (3, 3, 1, 1, 1, 1, 1)


def _gemm_wins(kh: int, kw: int, sh: int, sw: int, ph: int, pw: int, groups: int, plane: int) -> bool:
    """Dense and grouped convolutions that are not depthwise run on ember-cpu as one GEMM per image
    and group (over patches; 1x1 stride-1 kernels read x in place).  xnnpack / ember-cpu time, 2
    threads, medians of 15-21 alternating rounds: 1x1 stride 1 1.14-1.18 (32x64x16x16 -> 64,
    1x64x56x56 -> 256); with 64 output positions or more, grouped 3x3 1.90 (8x64x28x28 g8), 3x3
    stride 2 1.13-1.89 (32x16x16x16 -> 32 to 32x32x32x32 -> 64, 8x64x56x56 -> 128), 1x1 stride 2
    3.73 (32x64x32x32 -> 128), 7x7 stride 2 1.24 (8x3x224x224 -> 64).  XNNPACK keeps small maps
    (3x3 stride 2 onto 5x5 0.75, 4x4 0.92; 1x1 stride 2 onto 7x7 0.85) and larger kernels at
    stride 1 (5x5: 0.49-0.61), where the patches outgrow the product."""
    if (kh, kw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0):
        return True
    return plane >= 64 and (groups > 1 or kh * kw <= 9 or (sh, sw) != (1, 1))


def _depthwise(groups: int, c: int, group_in: int) -> bool:
    return groups > 1 and groups == c and group_in == 1


def _depthwise_rows_win(sh: int, sw: int, ow: int, c: int) -> bool:
    """ember-cpu's depthwise kernel computes whole rows of 16 outputs per vector (at stride 2 over
    the input's column phases, one unit-stride load per tap).  ember-cpu / XNNPACK time, 2 threads,
    medians of 15 alternating rounds: at stride 1 with rows of 14 or more 0.49-0.90 (8x128x56x56,
    8x256x14x14, 1x32x112x112, 8x64x28x28 5x5); at stride 2 with rows of 10 or more 0.33-0.82
    (8x64x56x56 -> 28 wide 0.55, 8x128x56x56 0.33, 8x256x28x28 0.52, 32x96x20x20 -> 10 wide 0.82).
    Shorter rows leave lanes idle, and XNNPACK keeps them: 32x32x8x8 1.73, 8x512x7x7 1.74 at
    stride 1; at stride 2 onto 8 and 7 wide rows 1.30 (32x32x16x16) and 1.10-2.5 (8x512x14x14,
    8x256x14x14, 8x512x7x7).  XNNPACK vectorizes over channels instead (NHWC), and at stride 1
    measured again (session 18, XNNPACK / ember-cpu, 3x3, medians of 11 rounds, +-10% noise):
    rows of 10-12 1.12-2.00 whatever the channels (8-512); with 8 channels any row 1.31-2.00; rows of
    8 over 16-24 channels 1.02-1.06 (bench_xnnpack.py's 32x16x8x8, five runs).  Rows of 8 over 32
    channels or more (0.69-0.88) and rows of 6 over 16 or more (0.69-0.96) stay with XNNPACK."""
    if (sh, sw) == (1, 1):
        return ow >= 10 or c <= 8 or (ow >= 8 and c < 32)
    return ow >= 10


def conv2d(out: Any, x: Any, weight: Any, bias: Any, *, stride: tuple[int, int], padding: tuple[int, int],
           dilation: tuple[int, int], groups: int, activation: str | None) -> Any:
    if _nothing_to_do(out):
        return None
    n, c, h, w = x._shape
    o, group_in, kh, kw = weight._shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    if _winograd_wins(kh, kw, sh, sw, dh, dw, groups):   # first: the demo's step declines twice
        return NotImplemented
    if _depthwise(groups, c, group_in) and _depthwise_rows_win(sh, sw, out._shape[3], c):
        return NotImplemented
    if not _depthwise(groups, c, group_in) and _gemm_wins(kh, kw, sh, sw, ph, pw, groups,
                                                          out._shape[2] * out._shape[3]):
        return NotImplemented
    if activation not in _CLAMPS or not _takes(out, x, weight, bias) or not x._numel:
        return NotImplemented
    if not _in_range(n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups) or not group_in:
        return NotImplemented
    if groups < 1 or group_in * groups != c or o % groups or (bias is not None and bias._shape != (o,)):
        raise ShapeError(f"ember-xnnpack conv2d: x {x._shape}, weight {weight._shape}, bias "
                         f"{None if bias is None else bias._shape} and groups={groups} do not fit (a core bug)")
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    _expect_shape("conv2d", out, (n, o, oh, ow))
    if is_recording() and (weight._requires_grad or (bias is not None and bias._requires_grad)):
        # Packing a layer's weights costs about as much as one product at training batch sizes, and
        # ember-cpu's GEMM matches XNNPACK's there: weights being trained (the call is recorded and
        # they require grad) are left to the next provider.  Decided by the call alone, so a result
        # never depends on what ran before it.
        return NotImplemented
    out_min, out_max = _CLAMPS[activation]
    b, b_offset = _bias_args(bias)

    def create(slot: Any) -> int:
        return lib.exn_conv2d_create(weight._storage.handle, weight._offset, b, b_offset, groups, group_in,
                                     o // groups, kh, kw, sh, sw, dh, dw, ph, pw, out_min, out_max, slot)

    def run(op: Any, pool: Any) -> int:
        return lib.exn_conv2d_run(op, pool, n, c, h, w, o, oh, ow, kh * kw, groups, x._storage.handle, x._offset,
                                  out._storage.handle, out._offset)

    return _run(("conv2d", stride, padding, dilation, groups, activation), (weight, bias), create, run, "conv2d")


def conv2d_input_grad(out: Any, grad_output: Any, weight: Any, *, stride: tuple[int, int],
                      padding: tuple[int, int], dilation: tuple[int, int], groups: int) -> Any:
    """The transposed convolution of grad_output with conv2d's weights (XNNPACK's deconvolution)."""
    if _nothing_to_do(out):
        return None
    n, c, h, w = out._shape
    o, group_in, kh, kw = weight._shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    # the two declines first: the demo's step meets the first on every call
    if _winograd_wins(kh, kw, sh, sw, dh, dw, groups) and o > 1 and ph <= 2 and pw <= 2:
        # ember-cpu runs this as the 3x3 convolution of grad_output with the flipped, transposed
        # kernel on its Winograd kernel: 8x64x56x56 4.5 ms against XNNPACK's 11.0
        return NotImplemented
    if _depthwise(groups, c, group_in):
        # ember-cpu's depthwise gradient: 8x128x56x56 3x3 2.7 ms against XNNPACK's 51 (stride 2:
        # 2.7 vs 29), 8x256x14x14 1.3 vs 4.2, 32x32x8x8 0.41 vs 0.84
        return NotImplemented
    if (kh, kw) == (1, 1) and (sh, sw) != (1, 1):
        # the core's composite (a GEMM, then the strided positions written): xnnpack / composite
        # time 1.65 (32x64x32x32 -> 128, stride 2), 2.05 (8x256x14x14 -> 512)
        return NotImplemented
    if h < sh or w < sw:
        # XNNPACK (2022) runs a strided deconvolution as stride_h x stride_w sub-convolutions, one
        # per output row/column phase (< stride) after the padding; a phase that starts past the
        # output's end underflows its size_t extent and writes out of bounds (input 1x1, stride
        # (2, 3), padding (2, 5), a 5x5 kernel: a segfault)
        return NotImplemented
    if not _takes(out, grad_output, weight) or not grad_output._numel:
        return NotImplemented
    if not _in_range(n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups) or not group_in:
        return NotImplemented
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    # the rows/columns the conv's floor division dropped, which the deconvolution must add back
    adjust_h = h - ((oh - 1) * sh + dh * (kh - 1) + 1 - 2 * ph)
    adjust_w = w - ((ow - 1) * sw + dw * (kw - 1) + 1 - 2 * pw)
    if groups < 1 or group_in * groups != c or o % groups or not (0 <= adjust_h < sh and 0 <= adjust_w < sw):
        raise ShapeError(f"ember-xnnpack conv2d_input_grad: input {out._shape}, weight {weight._shape}, "
                         f"groups={groups} do not fit (a core bug)")
    _expect_shape("conv2d_input_grad", grad_output, (n, o, oh, ow))

    def create(slot: Any) -> int:
        return lib.exn_conv2d_input_grad_create(weight._storage.handle, weight._offset, groups, group_in,
                                                o // groups, kh, kw, sh, sw, dh, dw, ph, pw, slot)

    def run(op: Any, pool: Any) -> int:
        return lib.exn_conv2d_input_grad_run(op, pool, n, o, oh, ow, c, h, w, kh * kw, groups, adjust_h, adjust_w,
                                             grad_output._storage.handle, grad_output._offset,
                                             out._storage.handle, out._offset)

    return _run(("conv2d_input_grad", stride, padding, dilation, groups), (weight,), create, run,
                "conv2d_input_grad")


def weight_grad_pays(n: int, c: int, o: int, oh: int, ow: int, kernel: tuple[int, int], stride: tuple[int, int],
                     dilation: tuple[int, int]) -> bool:
    """Where XNNPACK's weight gradient beats ember-cpu's, 2 threads.  ember-cpu, next in line, runs
    1x1 kernels as one GEMM and 3x3 kernels (any stride) on a direct kernel, both as fast or faster
    (xnnpack / ember-cpu time: 32x16x8x8 -> 32 with padding 1, the demo's second layer, 1.67;
    without padding 1.68; 32x32x6x6 -> 64 1.44; 32x32x8x8 -> 64 1.38; 1x1 2.2-2.45; at stride 2,
    32x16x10x10 -> 32 1.01, 16x64x14x14 -> 32 1.26).  Elsewhere ember-cpu gathers patches for a
    GEMM, and XNNPACK wins with a batch (every GEMM step's depth) of 16 or more, at least 16 input
    channels (the images of one operator run), and at most 2048 filter values per image (O x OH x
    OW of grad_output, which XNNPACK packs on every call): 32x16x8x8 -> 32 5x5 with padding 2 0.57."""
    if kernel == (1, 1) or (kernel == (3, 3) and dilation == (1, 1)):
        return False
    return n >= 16 and c >= 16 and o * oh * ow <= 2048


def conv2d_weight_grad(out: Any, x: Any, grad_output: Any, *, stride: tuple[int, int], padding: tuple[int, int],
                       dilation: tuple[int, int], groups: int) -> Any:
    """One XNNPACK convolution over the batch (see exn_conv2d_weight_grad); groups 1 only."""
    if _nothing_to_do(out):
        return None
    n, c, h, w = x._shape
    o, _, kh, kw = out._shape
    oh, ow = grad_output._shape[2:]
    if not weight_grad_pays(n, c, o, oh, ow, (kh, kw), tuple(stride), tuple(dilation)):
        return NotImplemented
    if groups != 1 or not _takes(out, x, grad_output):
        return NotImplemented
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    if not _in_range(n, c, h, w, o, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):
        return NotImplemented
    # the input rows/columns past the last window, which the conv's floor division dropped: the
    # weight gradient's convolution must stop before them (negative padding: declined)
    dropped_h = h + 2 * ph - dh * (kh - 1) - 1 - sh * (oh - 1)
    dropped_w = w + 2 * pw - dw * (kw - 1) - 1 - sw * (ow - 1)
    if out._shape != (o, c, kh, kw) or grad_output._shape[:2] != (n, o) or not (0 <= dropped_h < sh
                                                                               and 0 <= dropped_w < sw):
        raise ShapeError(f"ember-xnnpack conv2d_weight_grad: x {x._shape}, grad_output {grad_output._shape} and "
                         f"weight {out._shape} do not fit (a core bug)")
    if dropped_h > ph or dropped_w > pw:
        return NotImplemented
    with runtime.LOCK:
        runtime.ready()
        status = lib.exn_conv2d_weight_grad(runtime.num_threads(), n, c, h, w, o, oh, ow, kh, kw, sh, sw, dh, dw,
                                            ph, pw, ph - dropped_h, pw - dropped_w, x._storage.handle, x._offset,
                                            grad_output._storage.handle, grad_output._offset, out._storage.handle,
                                            out._offset)
    if status in runtime.DECLINED:
        return NotImplemented
    runtime.check(status, "conv2d_weight_grad")
    return None


# From this many rows on ember-cpu's GEMM is faster than XNNPACK's fully-connected operator
# (2 threads: 32 x 512 -> 64 39 vs 88 us, 128 x 784 -> 256 340 vs 446, 256 x 2048 -> 2048 8.8 vs
# 11 ms); below it, at inference batch sizes, XNNPACK's prepacked weights win (8 x 1024 -> 1024
# 298 vs 307 us; 4 x 1024 -> 1024 on one thread 258 vs 382).
_LINEAR_MAX_ROWS = 32


def linear(out: Any, x: Any, weight: Any, bias: Any, *, activation: str | None) -> Any:
    if _nothing_to_do(out):
        return None
    rows, features = x._shape
    if rows >= _LINEAR_MAX_ROWS:
        return NotImplemented
    if activation not in _CLAMPS or not _takes(out, x, weight, bias) or not x._numel:
        return NotImplemented
    out_features = weight._shape[0]
    if weight._shape != (out_features, features) or (bias is not None and bias._shape != (out_features,)):
        raise ShapeError(f"ember-xnnpack linear: x {x._shape}, weight {weight._shape} and bias "
                         f"{None if bias is None else bias._shape} do not fit (a core bug)")
    _expect_shape("linear", out, (rows, out_features))
    if is_recording() and (weight._requires_grad or (bias is not None and bias._requires_grad)):
        # Packing a layer's weights costs about as much as one product at training batch sizes, and
        # ember-cpu's GEMM matches XNNPACK's there: weights being trained (the call is recorded and
        # they require grad) are left to the next provider.  Decided by the call alone, so a result
        # never depends on what ran before it.
        return NotImplemented
    out_min, out_max = _CLAMPS[activation]
    b, b_offset = _bias_args(bias)

    def create(slot: Any) -> int:
        return lib.exn_linear_create(features, out_features, weight._storage.handle, weight._offset, b, b_offset,
                                     out_min, out_max, slot)

    def run(op: Any, pool: Any) -> int:
        return lib.exn_linear_run(op, pool, rows, features, out_features, x._storage.handle, x._offset,
                                  out._storage.handle, out._offset)

    return _run(("linear", activation), (weight, bias), create, run, "linear")


# ---- pooling ----------------------------------------------------------------------------------

def _pool2d(kind: int, name: str, out: Any, x: Any, kernel_size: tuple[int, int], stride: Any,
            padding: tuple[int, int], dilation: tuple[int, int]) -> Any:
    """Pooling with XNNPACK's floor-mode output size, extended by bottom/right padding when the
    core asked for a larger (ceil-mode) output."""
    if _nothing_to_do(out):
        return None
    if not _takes(out, x):
        return NotImplemented
    n, c, h, w = x._shape
    (kh, kw), (ph, pw), (dh, dw) = kernel_size, padding, dilation
    sh, sw = kernel_size if stride is None else stride
    if not _in_range(n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw):
        return NotImplemented
    oh, ow = out._shape[2:]
    _expect_shape(name, out, (n, c, oh, ow))
    pad_bottom = max(ph, (oh - 1) * sh + dh * (kh - 1) + 1 - h - ph)
    pad_right = max(pw, (ow - 1) * sw + dw * (kw - 1) + 1 - w - pw)
    floor_oh = (h + ph + pad_bottom - dh * (kh - 1) - 1) // sh + 1
    floor_ow = (w + pw + pad_right - dw * (kw - 1) - 1) // sw + 1
    if (floor_oh, floor_ow) != (oh, ow):
        raise ShapeError(f"ember-xnnpack {name}: output {out._shape} does not follow from input {x._shape}, "
                         f"kernel {kernel_size}, stride {stride}, padding {padding} (a core bug)")

    def create(slot: Any) -> int:
        return lib.exn_pool2d_create(kind, ph, pw, pad_bottom, pad_right, kh, kw, sh, sw, dh, dw, c, slot)

    def run(op: Any, pool: Any) -> int:
        return lib.exn_pool2d_run(kind, op, pool, n, c, h, w, oh, ow, kh * kw, x._storage.handle, x._offset,
                                  out._storage.handle, out._offset)

    return _run((name, c, kh, kw, sh, sw, ph, pw, pad_bottom, pad_right, dh, dw), (), create, run, name)


def _tiling_2x2(out: Any, x: Any, kernel_size: tuple[int, int], stride: Any, padding: tuple[int, int],
                dilation: tuple[int, int]) -> bool:
    """float32 2x2 windows that tile the input exactly: ember-cpu, next in line, runs them 16
    windows per AVX-512 step without XNNPACK's two layout transposes (ember-cpu / XNNPACK time at
    2 threads, max: 32x32x8x8 0.6, 32x16x28x28 0.16, 8x64x56x56 0.27; avg: 32x32x8x8 0.46,
    8x256x14x14 0.26, 8x64x56x56 0.06; 3x3 stride 2 windows stay here, max 0.34-0.82 below 56x56
    planes)."""
    h, w = x._shape[2:]
    return (out._dtype is float32 and tuple(kernel_size) == (2, 2) and stride in (None, (2, 2)) and not any(padding)
            and tuple(dilation) == (1, 1) and h % 2 == 0 and w % 2 == 0)


def _dilated_window_past_edge(out: Any, x: Any, kernel_size: tuple[int, int], stride: Any,
                              padding: tuple[int, int], dilation: tuple[int, int]) -> bool:
    """A dilated max pool with a window reaching past the input's bottom or right edge, which
    XNNPACK (2022) reads wrongly.  Without dilation it clamps each tap outside the input to the
    nearest edge pixel, which lies in the same window.  With dilation on either axis it instead
    replaces such a tap, on both axes, by the window's tap at ``output * stride - padding %
    dilation``, assumed inside the input.  That holds in the top/left padding; past the
    bottom/right edge the substitute can lie past the edge too, and XNNPACK reads the next row's
    pixels or memory past the input (issue 24: 1x3x4 arange, kernel (1, 2), padding (0, 1),
    dilation (2, 1) gave 5 for max(4, padding)).  Every such call goes to the next provider."""
    if tuple(dilation) == (1, 1):
        return False
    strides = kernel_size if stride is None else stride
    return any((o - 1) * s - p + d * (k - 1) >= n
               for n, o, k, s, p, d in zip(x._shape[2:], out._shape[2:], kernel_size, strides, padding, dilation))


def max_pool2d(out: Any, x: Any, *, kernel_size: tuple[int, int], stride: Any, padding: tuple[int, int],
               dilation: tuple[int, int], ceil_mode: bool) -> Any:
    if (_tiling_2x2(out, x, kernel_size, stride, padding, dilation)
            or _dilated_window_past_edge(out, x, kernel_size, stride, padding, dilation)):
        return NotImplemented
    return _pool2d(lib.EXN_MAX_POOL, "max_pool2d", out, x, kernel_size, stride, padding, dilation)


def avg_pool2d(out: Any, x: Any, *, kernel_size: tuple[int, int], stride: Any, padding: tuple[int, int],
               ceil_mode: bool, count_include_pad: bool) -> Any:
    # XNNPACK divides by the taps inside the input when there is padding (count_include_pad=False)
    # and by the window size otherwise; ceil mode's partial windows are not expressible.
    if ceil_mode or (count_include_pad and any(padding)) or _tiling_2x2(out, x, kernel_size, stride, padding, (1, 1)):
        return NotImplemented
    return _pool2d(lib.EXN_AVG_POOL, "avg_pool2d", out, x, kernel_size, stride, padding, (1, 1))


KERNELS: dict[str, Callable[..., Any]] = {
    "conv2d": conv2d, "conv2d_input_grad": conv2d_input_grad, "conv2d_weight_grad": conv2d_weight_grad,
    "linear": linear, "max_pool2d": max_pool2d,
    "avg_pool2d": avg_pool2d,
}
