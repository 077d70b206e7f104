"""The parameter spaces of the neural-network ops, as hypothesis strategies any test can draw from.

A drawn case holds the input shapes and the op's keyword arguments, always a call the op must
accept: windows fit the (padded) input, groups divide the channels, pool padding is at most half
the kernel, as PyTorch requires; its ``kwargs`` are torch.nn.functional's too.
Ints and pairs are both drawn where an argument takes either (``3`` or ``(3, 3)``; ``(2, 1)``),
and sizes include 1-size inputs, 1x1 kernels, depthwise convolutions (one input channel per
group) and batches of 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st


def _pair_arg(draw: Any, h: int, w: int) -> int | tuple[int, int]:
    """(h, w) as the op may be given it: an int when both are equal (sometimes), else a pair."""
    return h if h == w and draw(st.booleans()) else (h, w)


def _side(draw: Any, kernel: int, dilation: int, padding: int, max_extra: int) -> int:
    """An input side that the (dilated, padded) window fits, by up to ``max_extra`` more."""
    least = max(1, dilation * (kernel - 1) + 1 - 2 * padding)
    return draw(st.integers(least, least + max_extra))


@dataclass(frozen=True)
class ConvCase:
    """One conv2d call: x (N, C, H, W), weight (O, C / groups, kH, kW), a bias or not."""

    x_shape: tuple[int, int, int, int]
    weight_shape: tuple[int, int, int, int]
    bias: bool
    kwargs: dict[str, Any] = field(hash=False)  # stride, padding, dilation, groups


@st.composite
def conv_cases(draw: Any, *, max_batch: int = 2, max_groups: int = 3, max_per_group: int = 3, max_kernel: int = 3,
               max_extra: int = 4) -> ConvCase:
    """conv2d's parameter space: stride, padding, dilation (per axis), groups (depthwise among them)."""
    groups = draw(st.integers(1, max_groups), label="groups")
    depthwise = draw(st.booleans(), label="depthwise")
    per_group = 1 if depthwise else draw(st.integers(1, max_per_group))
    filters_per_group = draw(st.integers(1, max_per_group))
    kernel = [draw(st.integers(1, max_kernel)) for _ in range(2)]
    stride = [draw(st.integers(1, 3)) for _ in range(2)]
    dilation = [draw(st.integers(1, 2)) for _ in range(2)]
    padding = [draw(st.integers(0, k)) for k in kernel]
    h, w = (_side(draw, k, d, p, max_extra) for k, d, p in zip(kernel, dilation, padding))
    batch = draw(st.integers(0, max_batch), label="batch")
    kwargs = {"stride": _pair_arg(draw, *stride), "padding": _pair_arg(draw, *padding),
              "dilation": _pair_arg(draw, *dilation), "groups": groups}
    return ConvCase((batch, groups * per_group, h, w), (groups * filters_per_group, per_group, *kernel),
                    draw(st.booleans(), label="bias"), kwargs)


def conv_output_shape(case: ConvCase) -> tuple[int, int, int, int]:
    """PyTorch's (N, O, OH, OW) for a conv case."""
    n, _, h, w = case.x_shape
    o, _, kh, kw = case.weight_shape
    pairs = [(v, v) if isinstance(v, int) else v for v in (case.kwargs[k] for k in ("stride", "padding", "dilation"))]
    (sh, sw), (ph, pw), (dh, dw) = pairs
    return n, o, (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1


@dataclass(frozen=True)
class PoolCase:
    """One max_pool2d / avg_pool2d call on x (N, C, H, W)."""

    x_shape: tuple[int, int, int, int]
    # kernel_size, stride, padding, ceil_mode, and dilation (max) or count_include_pad (avg)
    kwargs: dict[str, Any] = field(hash=False)


@st.composite
def pool_cases(draw: Any, kind: str, *, max_batch: int = 2, max_channels: int = 3, max_kernel: int = 3,
               max_extra: int = 4) -> PoolCase:
    """max_pool2d's (``kind`` "max": with dilation) or avg_pool2d's ("avg": with count_include_pad)
    parameter space; stride None (the kernel's) among the strides, ceil_mode either way."""
    kernel = [draw(st.integers(1, max_kernel)) for _ in range(2)]
    padding = [draw(st.integers(0, k // 2)) for k in kernel]
    dilation = [draw(st.integers(1, 2)) for _ in range(2)] if kind == "max" else [1, 1]
    stride = None if draw(st.booleans()) else [draw(st.integers(1, 3)) for _ in range(2)]
    h, w = (_side(draw, k, d, p, max_extra) for k, d, p in zip(kernel, dilation, padding))
    kwargs = {"kernel_size": _pair_arg(draw, *kernel), "stride": None if stride is None else _pair_arg(draw, *stride),
              "padding": _pair_arg(draw, *padding), "ceil_mode": draw(st.booleans(), label="ceil_mode")}
    if kind == "max":
        kwargs["dilation"] = _pair_arg(draw, *dilation)
    else:
        kwargs["count_include_pad"] = draw(st.booleans(), label="count_include_pad")
    shape = (draw(st.integers(0, max_batch)), draw(st.integers(1, max_channels)), h, w)
    return PoolCase(shape, kwargs)


@st.composite
def adaptive_cases(draw: Any, *, max_batch: int = 2, max_channels: int = 3, max_side: int = 7) -> PoolCase:
    """adaptive_avg_pool2d: output sizes below, equal to and above the input's (overlapping windows)."""
    h, w = draw(st.integers(1, max_side)), draw(st.integers(1, max_side))
    out = [draw(st.integers(1, max_side)) for _ in range(2)]
    shape = (draw(st.integers(0, max_batch)), draw(st.integers(1, max_channels)), h, w)
    return PoolCase(shape, {"output_size": _pair_arg(draw, *out)})


@st.composite
def norm_shapes(draw: Any, *, min_dims: int = 2, max_dims: int = 4, max_side: int = 4) -> tuple[int, ...]:
    """(N, C, ...) inputs of the norms, every side >= 1 (a norm of no values has no statistics)."""
    return tuple(draw(st.lists(st.integers(1, max_side), min_size=min_dims, max_size=max_dims)))


@st.composite
def group_counts(draw: Any, channels: int) -> int:
    """A num_groups that divides ``channels``."""
    return draw(st.sampled_from([g for g in range(1, channels + 1) if channels % g == 0]))
