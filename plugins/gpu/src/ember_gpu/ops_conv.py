"""conv2d, conv2d_input_grad, conv2d_weight_grad and linear (csrc/eg_conv.h: eg_conv_<kernel>_<dtype>).

Convolutions are im2col + the runtime's GEMM (``ember_gpu.blas``: the vendor's BLAS or ember's own
kernel) with the bias and relu as the GEMM's epilogue (``blas.Epilogue``: in the own kernel's store;
on the library a bias fill the GEMM accumulates onto, then relu); the GEMMs see views of the
tensors, so the output is written in place (NCHW) and the weight is never copied:

- conv2d: per image and group, out (O/g, OH*OW) = weight[g] (O/g, C/g*kH*kW) @ columns (.., OH*OW);
  a 1x1 kernel at stride 1 without padding reads x itself as its columns.
- conv2d_weight_grad: the columns are written with the batch concatenated along each row, and
  grad_output transposed to (O, N, OH*OW), so one GEMM per group reduces over every image at once
  (deterministic: no per-image partials summed by atomics).
- conv2d_input_grad: columns = weight[g]^T @ grad_output[n, g], then col2im gathers each input
  element's taps in a fixed order.

The batch dims of a GEMM are (image, group) or (group, image), whichever makes fewer library calls
(the BLAS makes one strided-batched call per index of the outer one).  The columns come from the
device's caching allocator (an ordinary tensor, freed when the call returns) and are bounded by
COLUMN_BYTES: a larger batch runs in chunks of images (the weight gradient's chunks are added in
order; an image whose columns alone exceed the bound is a chunk of its own).  Depthwise
convolutions (groups == channels > 1), and the degenerate no-channel and no-image cases, run the
direct kernels instead: a GEMM per group would multiply single rows.

linear is the GEMM of x and weight^T (a view) with the same epilogue, its bias per column.
"""

from __future__ import annotations

from typing import Any

from ember_core.ops.families import empty
from ember_gpu import blas
from ember_gpu.ops import BLOCK_SHAPE, Entry, OpLayer, kernel_names
from ember_gpu.ops_nn import MAX_GRID

COLUMN_BYTES = 256 << 20  # the most bytes of im2col columns (and transposed gradient) one chunk of images uses


def _geometry(x_shape: tuple[int, ...], w_shape: tuple[int, ...], out_hw: tuple[int, int], stride: tuple[int, int],
              padding: tuple[int, int], dilation: tuple[int, int], groups: int) -> dict[str, Any]:
    """eg_conv_args' sizes (abi.h) of one convolution."""
    batch, channels, height, width = x_shape
    out_channels, _, kernel_h, kernel_w = w_shape
    return {"batch": batch, "channels": channels, "height": height, "width": width, "out_channels": out_channels,
            "out_h": out_hw[0], "out_w": out_hw[1], "kernel_h": kernel_h, "kernel_w": kernel_w,
            "stride_h": stride[0], "stride_w": stride[1], "pad_h": padding[0], "pad_w": padding[1],
            "dilation_h": dilation[0], "dilation_w": dilation[1], "groups": groups}


def _sizes(g: dict[str, Any]) -> tuple[int, int, int, int]:
    """(channels, out_channels, output positions, rows of one group's columns) of a geometry."""
    positions = g["out_h"] * g["out_w"]
    return g["channels"], g["out_channels"], positions, g["channels"] // g["groups"] * g["kernel_h"] * g["kernel_w"]


def _direct(g: dict[str, Any]) -> bool:
    """Whether the direct kernels serve this convolution: depthwise, or nothing for a GEMM to reduce."""
    return (g["groups"] > 1 and g["groups"] == g["channels"]) or not g["channels"] or not g["batch"]


def _pointwise(g: dict[str, Any]) -> bool:
    """A 1x1 kernel at stride 1 without padding: x itself is its columns."""
    return (g["kernel_h"], g["kernel_w"], g["stride_h"], g["stride_w"], g["pad_h"], g["pad_w"]) == (1, 1, 1, 1, 0, 0)


def _images_per_chunk(g: dict[str, Any], bytes_per_image: int) -> int:
    """Images per chunk: their columns within COLUMN_BYTES, and few enough that a GEMM with more
    groups than blas.MAX_CALLS makes one call per image."""
    fit = max(1, COLUMN_BYTES // max(1, bytes_per_image))
    if g["groups"] > blas.MAX_CALLS:
        fit = min(fit, blas.MAX_CALLS)
    return min(g["batch"], fit)


def _view(t: Any, shape: tuple[int, ...], strides: tuple[int, ...], offset: int, swap: bool) -> Any:
    """A (images, groups, rows, cols) view of t's storage, its first two dims swapped when ``swap``."""
    if swap:
        shape = (shape[1], shape[0], *shape[2:])
        strides = (strides[1], strides[0], *strides[2:])
    return t._view(shape, strides, t._offset + offset)


class Convolutions:
    """The family's kernels on one op layer, with the runtime's GEMM (``blas``)."""

    def __init__(self, layer: OpLayer) -> None:
        self.layer = layer
        self.gemm = blas.kernels(layer)["matmul"][0]

    def matmul(self, out: Any, a: Any, b: Any, bias: Any = None, relu: bool = False) -> None:
        """out = a @ b (+ bias, a view with out's shape; then relu) on the GEMM, whose store applies
        the epilogue; a layout the BLAS cannot walk runs on contiguous copies of a and b."""
        epilogue = None if bias is None and not relu else blas.Epilogue(bias, relu, self.fill, self.rectify)
        if self.gemm(out, a, b, epilogue) is NotImplemented:
            self.gemm(out, self.layer.contiguous(a), self.layer.contiguous(b), epilogue)

    def fill(self, out: Any, bias: Any) -> None:
        """out = the broadcast bias (the library path's epilogue, before the GEMM accumulates onto it)."""
        name = out._dtype.name
        self.layer.elementwise(kernel_names(f"eg_copy_{name}_to_{name}"), out, bias)

    def rectify(self, out: Any) -> None:
        """out = relu(out) in place (the library path's epilogue, after the GEMM)."""
        self.layer.elementwise(kernel_names(f"eg_unary_relu_{out._dtype.name}"), out, out)

    def launch(self, kind: str, out: Any, args: dict[str, Any], items: int) -> None:
        """eg_conv_<kind>_<dtype> over ``items`` work items (a thread each; a block each for the
        direct weight gradient); pointers in ``args`` are already addresses."""
        layer = self.layer
        ops = layer.device_ops(out)
        grid = (min(items, MAX_GRID), 1, 1) if kind == "direct_weight_grad" else ops.grid(items)
        layer.kernel(ops, f"eg_conv_{kind}_{out._dtype.name}")(grid, BLOCK_SHAPE, args)

    def address(self, t: Any, elements: int = 0) -> int:
        """The device address of t's element ``elements`` (0 for None)."""
        if t is None:
            return 0
        return self.layer.address(self.layer.device_ops(t), t) + elements * t._dtype.itemsize

    def direct(self, kind: str, out: Any, g: dict[str, Any], relu: bool = False, **tensors: Any) -> None:
        """The direct kernel eg_conv_<kind> into out (the tensors named as eg_conv_args names them)."""
        self.launch(kind, out, {**g, "out": self.address(out), "relu": int(relu),
                                **{name: self.address(t) for name, t in tensors.items()}}, out._numel)

    # ---- conv2d ---------------------------------------------------------------------------------

    def conv2d(self, out: Any, x: Any, weight: Any, bias: Any, *, stride: tuple[int, int],
               padding: tuple[int, int], dilation: tuple[int, int], groups: int, activation: str | None) -> None:
        if not out._numel:
            return
        g = _geometry(x._shape, weight._shape, out._shape[2:], stride, padding, dilation, groups)
        relu = activation == "relu"
        if _direct(g):
            self.direct("direct", out, g, relu, x=x, weight=weight, bias=bias)
            return
        channels, outs, positions, rows = _sizes(g)
        pointwise = _pointwise(g)
        chunk = _images_per_chunk(g, 0 if pointwise else channels * g["kernel_h"] * g["kernel_w"] * positions
                                  * x._dtype.itemsize)
        for first in range(0, g["batch"], chunk):
            images = min(chunk, g["batch"] - first)
            swap = groups <= images  # (groups, images): one call per group, else one per image
            if pointwise:
                cols = _view(x, (images, groups, rows, positions), (channels * positions, rows * positions,
                                                                    positions, 1), first * channels * positions, swap)
            else:
                cols = self.columns(x, g, first, images, rows * groups * positions, positions)
                cols = _view(cols, (images, groups, rows, positions), (groups * rows * positions, rows * positions,
                                                                       positions, 1), 0, swap)
            shape = (images, groups, outs // groups, positions)
            per_channel = None if bias is None else _view(bias, shape, (0, outs // groups, 1, 0), 0, swap)
            self.matmul(_view(out, shape, (outs * positions, outs // groups * positions, positions, 1),
                              first * outs * positions, swap),
                        _view(weight, (images, groups, outs // groups, rows), (0, outs // groups * rows, rows, 1), 0,
                              swap), cols, per_channel, relu)

    def columns(self, x: Any, g: dict[str, Any], first: int, images: int, col_image: int, col_row: int) -> Any:
        """im2col of images [first, first + images) into a new (images * rows * positions) tensor, row
        (c, k, j) of image n at n * col_image + row * col_row."""
        rows = g["channels"] * g["kernel_h"] * g["kernel_w"]
        positions = g["out_h"] * g["out_w"]
        cols = empty((images * rows * positions,), x._dtype, x._device)
        self.launch("im2col", cols, {**g, "batch": images, "cols": self.address(cols),
                                     "x": self.address(x, first * g["channels"] * g["height"] * g["width"]),
                                     "col_image": col_image, "col_row": col_row}, cols._numel)
        return cols

    # ---- conv2d_weight_grad -----------------------------------------------------------------------

    def conv2d_weight_grad(self, out: Any, x: Any, grad_output: Any, *, stride: tuple[int, int],
                           padding: tuple[int, int], dilation: tuple[int, int], groups: int) -> None:
        if not out._numel:
            return
        g = _geometry(x._shape, out._shape, grad_output._shape[2:], stride, padding, dilation, groups)
        if _direct(g):
            self.direct("direct_weight_grad", out, g, x=x, grad_output=grad_output)
            return
        channels, outs, positions, rows = _sizes(g)
        itemsize = x._dtype.itemsize
        chunk = _images_per_chunk(g, (channels * g["kernel_h"] * g["kernel_w"] + outs) * positions * itemsize)
        for first in range(0, g["batch"], chunk):
            images = min(chunk, g["batch"] - first)
            span = images * positions  # the reduced dim: every image's positions, concatenated
            if images == 1 and _pointwise(g):
                cols = _view(x, (1, groups, span, rows), (0, rows * span, 1, span), first * channels * span, False)
            else:
                cols = self.columns(x, g, first, images, positions, span)
                cols = _view(cols, (1, groups, span, rows), (0, rows * span, 1, span), 0, False)
            grads = grad_output._view((outs, images, positions), (positions, outs * positions, 1),
                                      grad_output._offset + first * outs * positions)
            grads = self.layer.contiguous(grads)  # (O, images, positions): one row per filter
            grads = _view(grads, (1, groups, outs // groups, span), (0, outs // groups * span, span, 1), 0, False)
            target = out if first == 0 else empty(out._shape, out._dtype, out._device)
            self.matmul(_view(target, (1, groups, outs // groups, rows), (0, outs // groups * rows, rows, 1), 0,
                              False), grads, cols)
            if target is not out:  # a later chunk: added to the earlier ones, in order
                name = out._dtype.name
                self.layer.elementwise(kernel_names(f"eg_binary_add_{name}"), out, out, target)

    # ---- conv2d_input_grad ------------------------------------------------------------------------

    def conv2d_input_grad(self, out: Any, grad_output: Any, weight: Any, *, stride: tuple[int, int],
                          padding: tuple[int, int], dilation: tuple[int, int], groups: int) -> None:
        if not out._numel:
            return
        g = _geometry(out._shape, weight._shape, grad_output._shape[2:], stride, padding, dilation, groups)
        if _direct(g):
            self.direct("direct_input_grad", out, g, weight=weight, grad_output=grad_output)
            return
        channels, outs, positions, rows = _sizes(g)
        pointwise = _pointwise(g)
        chunk = _images_per_chunk(g, 0 if pointwise else rows * groups * positions * out._dtype.itemsize)
        image = channels * g["height"] * g["width"]
        for first in range(0, g["batch"], chunk):
            images = min(chunk, g["batch"] - first)
            swap = groups <= images
            cols = out if pointwise else empty((images * rows * groups * positions,), out._dtype, out._device)
            at = first * image if pointwise else 0
            self.matmul(_view(cols, (images, groups, rows, positions), (groups * rows * positions, rows * positions,
                                                                        positions, 1), at, swap),
                        _view(weight, (images, groups, rows, outs // groups), (0, outs // groups * rows, 1, rows), 0,
                              swap),
                        _view(grad_output, (images, groups, outs // groups, positions),
                              (outs * positions, outs // groups * positions, positions, 1), first * outs * positions,
                              swap))
            if not pointwise:
                self.launch("col2im", out, {**g, "batch": images, "out": self.address(out, first * image),
                                            "cols": self.address(cols), "col_image": groups * rows * positions,
                                            "col_row": positions}, images * image)

    # ---- linear -----------------------------------------------------------------------------------

    def linear(self, out: Any, x: Any, weight: Any, bias: Any, *, activation: str | None) -> None:
        if not out._numel:
            return
        features, inputs = weight._shape
        per_feature = None if bias is None else bias._view(out._shape, (0, bias._strides[0]), bias._offset)
        self.matmul(out, x, weight._view((inputs, features), (weight._strides[1], weight._strides[0]),
                                         weight._offset), per_feature, activation == "relu")


def kernels(layer: OpLayer) -> dict[str, Entry]:
    """Each op needs its kernels (those named in gen_nn.CONV_KERNELS) in the build, and a GEMM for
    the floating dtypes of the matmul family (the BLAS; the elementwise copy and relu kernels its
    library path's epilogue launches are built for every dtype, as the copies and sums here assume)."""
    from ember_gpu.gen_nn import CONV_KERNELS

    served = frozenset.intersection(*(layer.served(f"eg_conv_{kernel}") for kernel in CONV_KERNELS),
                                    frozenset(blas.DTYPES))
    if not served:
        return {}
    family = Convolutions(layer)
    return {op: (getattr(family, op), served) for op in ("conv2d", "conv2d_input_grad", "conv2d_weight_grad",
                                                         "linear")}
