"""ember-gpu's convolution kernels (csrc/eg_conv.h) on the host, in every dtype they are built for,
against a numpy float64 reference written from the definition (taps over a zero-padded input, per
group): im2col in both column layouts to the bit, col2im and the direct
kernels (forward, input and weight gradients) within a stated bound.  Hypothesis draws the shapes,
stride, padding, dilation and groups (depthwise with channel multipliers included).

The bound for a sum of K products: |got - want| <= (2 eps(dtype) + K eps(accumulator)) * S + the
smallest subnormal, S the same sum over absolute values (plus |bias|): float32 accumulation for
float16 / bfloat16 rounded once or twice (the bias), float32 / float64 accumulating in themselves."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import pytest
from ember_gpu import gen_nn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_kernels_host import HOST_DIR, HostKernels, _bf16_bits, comparable, epsilon

DTYPES = [d.name for d in gen_nn.registry_dtypes(gen_nn.IMAGES["conv"][1])]
GRID, BLOCK = 3, 64  # small: the grid-stride loops go round several times
EG_BLOCK = 256  # the direct weight gradient's block (a tree over exactly EG_BLOCK threads)
ACCUMULATOR = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64"}
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


class Conv(NamedTuple):
    """One drawn convolution."""

    dtype: str
    x_shape: tuple[int, int, int, int]
    w_shape: tuple[int, int, int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    seed: int

    @property
    def out_hw(self) -> tuple[int, int]:
        return tuple((n + 2 * p - d * (k - 1) - 1) // s + 1  # type: ignore[return-value]
                     for n, p, d, k, s in zip(self.x_shape[2:], self.padding, self.dilation, self.w_shape[2:],
                                              self.stride))

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.x_shape[0], self.w_shape[0], *self.out_hw)


@st.composite
def convs(draw: st.DrawFn, depthwise: bool = False) -> Conv:
    groups = draw(st.integers(1, 4))
    per_group = 1 if depthwise else draw(st.integers(1, 3))
    outs = draw(st.integers(1, 3)) * groups
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    size = [max(draw(st.integers(1, 7)), d * (k - 1) + 1 - 2 * p) for k, d, p in zip(kernel, dilation, padding)]
    return Conv(draw(st.sampled_from(DTYPES)), (draw(st.integers(1, 3)), groups * per_group, *size),
                (outs, per_group, *kernel), stride, padding, dilation, groups, draw(st.integers(0, 2**31)))


@pytest.fixture(scope="module")
def host() -> HostKernels:
    return HostKernels(HOST_DIR)


def test_the_conv_kernels_are_built_for_the_float_dtypes() -> None:
    assert DTYPES == ["float16", "bfloat16", "float32", "float64"]
    assert gen_nn.sources()["conv"].kernels == [f"eg_conv_{k}_{d}" for d in DTYPES for k in gen_nn.CONV_KERNELS]


# ---- values and launches -----------------------------------------------------------------------------


def stored(values: np.ndarray, dtype: str) -> np.ndarray:
    """values in the dtype's storage form (bfloat16 as bits)."""
    return _bf16_bits(values) if dtype == "bfloat16" else np.ascontiguousarray(values, dtype)


def exact(stored_values: np.ndarray, dtype: str) -> np.ndarray:
    """The stored values, exactly, in float64."""
    return comparable(stored_values, dtype).astype(np.float64)


def draw(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return stored(rng.normal(0, 1, shape), dtype)


def launch(host: HostKernels, kernel: str, dtype: str, c: Conv, block: int = BLOCK, **tensors: Any) -> None:
    """eg_conv_<kernel>_<dtype> with c's geometry; tensors: numpy arrays or None (pointers), ints (fields)."""
    args = host.ffi.new("eg_conv_args *")
    (args.batch, args.channels, args.height, args.width), (args.out_channels, _, args.kernel_h, args.kernel_w) = \
        c.x_shape, c.w_shape
    args.out_h, args.out_w = c.out_hw
    args.stride_h, args.stride_w = c.stride
    args.pad_h, args.pad_w = c.padding
    args.dilation_h, args.dilation_w = c.dilation
    args.groups = c.groups
    for name, value in tensors.items():
        setattr(args, name, host.pointer(value) if isinstance(value, np.ndarray) else
                host.ffi.NULL if value is None else value)
    host.launch(f"eg_conv_{kernel}_{dtype}", args, GRID, block)


# ---- the reference -------------------------------------------------------------------------------------


def taps(x: np.ndarray, c: Conv) -> list[np.ndarray]:
    """Per kernel tap (row-major), the (N, groups, C/groups, OH, OW) values it reads from the zero-padded x."""
    (ph, pw), (sh, sw), (dh, dw), (oh, ow) = c.padding, c.stride, c.dilation, c.out_hw
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, channels = x.shape[:2]
    return [padded[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            .reshape(n, c.groups, channels // c.groups, oh, ow)
            for i in range(c.w_shape[2]) for j in range(c.w_shape[3])]


def conv_reference(x: np.ndarray, w: np.ndarray, c: Conv) -> np.ndarray:
    out = np.zeros((c.x_shape[0], c.groups, c.w_shape[0] // c.groups, *c.out_hw))
    for t, tap in enumerate(taps(x, c)):
        weights = w[:, :, t // c.w_shape[3], t % c.w_shape[3]].reshape(c.groups, -1, c.w_shape[1])
        out += np.einsum("ngchw,goc->ngohw", tap, weights)
    return out.reshape(c.out_shape)


def weight_grad_reference(x: np.ndarray, grad: np.ndarray, c: Conv) -> np.ndarray:
    out = np.zeros(c.w_shape)
    g = grad.reshape(c.x_shape[0], c.groups, -1, *c.out_hw)
    for t, tap in enumerate(taps(x, c)):
        out[:, :, t // c.w_shape[3], t % c.w_shape[3]] = np.einsum("ngohw,ngchw->goc", g, tap).reshape(c.w_shape[:2])
    return out


def scatter(shares: list[np.ndarray], c: Conv) -> np.ndarray:
    """col2im's definition: each tap's (N, C, OH, OW) share added where the tap read, the padding cropped."""
    (ph, pw), (sh, sw), (dh, dw), (oh, ow) = c.padding, c.stride, c.dilation, c.out_hw
    n, channels, h, width = c.x_shape
    padded = np.zeros((n, channels, h + 2 * ph, width + 2 * pw))
    for t, share in enumerate(shares):
        i, j = divmod(t, c.w_shape[3])
        padded[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw] += share
    return padded[:, :, ph:ph + h, pw:pw + width]


def input_grad_reference(grad: np.ndarray, w: np.ndarray, c: Conv) -> np.ndarray:
    """The adjoint of conv_reference."""
    n, channels = c.x_shape[:2]
    g = grad.reshape(n, c.groups, -1, *c.out_hw)
    shares = [np.einsum("ngohw,goc->ngchw", g, w[:, :, i, j].reshape(c.groups, -1, c.w_shape[1]))
              .reshape(n, channels, *c.out_hw) for i in range(c.w_shape[2]) for j in range(c.w_shape[3])]
    return scatter(shares, c)


def assert_within(got: np.ndarray, want: np.ndarray, scale: np.ndarray, terms: int, dtype: str, what: str) -> None:
    """got (stored form) within the module's bound of want, for sums of ``terms`` products of magnitude scale."""
    g = exact(got, dtype)
    tiny = float(np.finfo(np.float32 if dtype == "bfloat16" else dtype).smallest_subnormal)
    bound = (2 * epsilon(dtype) + terms * epsilon(ACCUMULATOR[dtype])) * scale + tiny
    bad = ~(np.abs(g - want) <= bound)
    assert not bad.any(), f"{what}: {g[bad][:5]} != reference {want[bad][:5]} (bound {bound[bad][:5]})"


# ---- im2col, col2im ---------------------------------------------------------------------------


@SETTINGS
@given(convs())
def test_im2col_writes_both_column_layouts(host: HostKernels, c: Conv) -> None:
    """Per image (col_image = rows * positions, col_row = positions) and with the batch concatenated
    along each row (col_image = positions, col_row = batch * positions): the taps' values, bit for bit."""
    rng = np.random.default_rng(c.seed)
    x = draw(rng, c.x_shape, c.dtype)
    n, channels = c.x_shape[:2]
    rows, positions = channels * c.w_shape[2] * c.w_shape[3], math.prod(c.out_hw)
    # (N, groups, C/groups, OH, OW) per tap -> (N, C, taps, positions)
    want = np.stack([tap.reshape(n, channels, positions) for tap in taps(x, c)], axis=2).reshape(n, rows, positions)
    for col_image, col_row, layout in ((rows * positions, positions, want),
                                       (positions, n * positions, want.transpose(1, 0, 2))):
        cols = np.full(layout.shape, 7, x.dtype)
        launch(host, "im2col", c.dtype, c, x=x, cols=cols, col_image=col_image, col_row=col_row)
        np.testing.assert_array_equal(cols, layout, err_msg=f"{c} col_row={col_row}")


@SETTINGS
@given(convs())
def test_col2im_sums_every_tap_into_its_input_element(host: HostKernels, c: Conv) -> None:
    rng = np.random.default_rng(c.seed)
    n, channels = c.x_shape[:2]
    taps_count, positions = c.w_shape[2] * c.w_shape[3], math.prod(c.out_hw)
    cols = draw(rng, (n, channels * taps_count, positions), c.dtype)
    out = np.full(c.x_shape, 7, cols.dtype)
    launch(host, "col2im", c.dtype, c, cols=cols, out=out, col_image=channels * taps_count * positions,
           col_row=positions)
    values = exact(cols, c.dtype).reshape(n, channels, taps_count, *c.out_hw)
    want = scatter([values[:, :, t] for t in range(taps_count)], c)
    scale = scatter([np.abs(values[:, :, t]) for t in range(taps_count)], c)
    assert_within(out, want, scale, taps_count, c.dtype, f"col2im {c}")


# ---- the direct kernels ------------------------------------------------------------------------------------


def check_direct_conv2d(host: HostKernels, c: Conv, with_bias: bool, relu: bool) -> None:
    rng = np.random.default_rng(c.seed)
    x, w, bias = draw(rng, c.x_shape, c.dtype), draw(rng, c.w_shape, c.dtype), draw(rng, (c.w_shape[0],), c.dtype)
    out = np.full(c.out_shape, 7, x.dtype)
    launch(host, "direct", c.dtype, c, out=out, x=x, weight=w, bias=bias if with_bias else None, relu=int(relu))
    b = exact(bias, c.dtype)[:, None, None] if with_bias else 0.0
    want = conv_reference(exact(x, c.dtype), exact(w, c.dtype), c) + b
    if relu:
        want = np.maximum(want, 0)
    scale = conv_reference(np.abs(exact(x, c.dtype)), np.abs(exact(w, c.dtype)), c) + np.abs(b)
    assert_within(out, want, scale, math.prod(c.w_shape[1:]), c.dtype, f"conv2d {c} bias={with_bias} relu={relu}")


def check_direct_input_grad(host: HostKernels, c: Conv) -> None:
    rng = np.random.default_rng(c.seed)
    grad, w = draw(rng, c.out_shape, c.dtype), draw(rng, c.w_shape, c.dtype)
    out = np.full(c.x_shape, 7, grad.dtype)
    launch(host, "direct_input_grad", c.dtype, c, out=out, grad_output=grad, weight=w)
    want = input_grad_reference(exact(grad, c.dtype), exact(w, c.dtype), c)
    scale = input_grad_reference(np.abs(exact(grad, c.dtype)), np.abs(exact(w, c.dtype)), c)
    terms = c.w_shape[0] // c.groups * c.w_shape[2] * c.w_shape[3]
    assert_within(out, want, scale, terms, c.dtype, f"conv2d_input_grad {c}")


def check_direct_weight_grad(host: HostKernels, c: Conv) -> None:
    rng = np.random.default_rng(c.seed)
    x, grad = draw(rng, c.x_shape, c.dtype), draw(rng, c.out_shape, c.dtype)
    out = np.full(c.w_shape, 7, x.dtype)
    launch(host, "direct_weight_grad", c.dtype, c, EG_BLOCK, out=out, x=x, grad_output=grad)
    want = weight_grad_reference(exact(x, c.dtype), exact(grad, c.dtype), c)
    scale = weight_grad_reference(np.abs(exact(x, c.dtype)), np.abs(exact(grad, c.dtype)), c)
    assert_within(out, want, scale, c.x_shape[0] * math.prod(c.out_hw), c.dtype, f"conv2d_weight_grad {c}")


@SETTINGS
@given(convs(depthwise=True), st.booleans(), st.booleans())
def test_direct_conv2d_matches_the_reference(host: HostKernels, c: Conv, with_bias: bool, relu: bool) -> None:
    check_direct_conv2d(host, c, with_bias, relu)


@SETTINGS
@given(convs(depthwise=True))
def test_direct_input_grad_matches_the_reference(host: HostKernels, c: Conv) -> None:
    check_direct_input_grad(host, c)


@SETTINGS
@given(convs(depthwise=True))
def test_direct_weight_grad_matches_the_reference(host: HostKernels, c: Conv) -> None:
    check_direct_weight_grad(host, c)


@pytest.mark.parametrize("dtype", DTYPES)
def test_direct_kernels_serve_grouped_convolutions_too(host: HostKernels, dtype: str) -> None:
    """The direct kernels take any groups (the op layer sends them depthwise ones): 2 groups of 3
    channels, a 3x2 kernel, stride (2, 1), padding 1, dilation 2; and a long weight-gradient sum
    (many rounds of the block's threads)."""
    c = Conv(dtype, (2, 6, 9, 8), (4, 3, 3, 2), (2, 1), (1, 1), (2, 2), 2, 11)
    check_direct_conv2d(host, c, True, True)
    check_direct_input_grad(host, c)
    check_direct_weight_grad(host, c)
    check_direct_weight_grad(host, Conv(dtype, (3, 2, 30, 31), (2, 1, 3, 3), (1, 1), (1, 1), (1, 1), 2, 12))


@pytest.mark.parametrize("dtype", DTYPES)
def test_padding_reads_zeros_so_an_infinite_weight_over_it_gives_nan(host: HostKernels, dtype: str) -> None:
    """As the composite's zero-padded columns: 0 * inf is NaN where the infinite tap reads padding."""
    c = Conv(dtype, (1, 1, 2, 2), (1, 1, 3, 3), (1, 1), (1, 1), (1, 1), 1, 0)
    x = stored(np.ones(c.x_shape), dtype)
    w = stored(np.where(np.arange(9).reshape(c.w_shape) == 0, math.inf, 1.0), dtype)  # the top-left tap
    out = np.zeros(c.out_shape, x.dtype)
    launch(host, "direct", dtype, c, out=out, x=x, weight=w, bias=None, relu=0)
    got = exact(out, dtype)[0, 0]
    assert np.isnan(got[0]).all() and np.isnan(got[1, 0]), got  # the tap reads padding there
    assert got[1, 1] == math.inf, got  # and x[0, 0] here
