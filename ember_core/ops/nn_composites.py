"""Composites of the neural-network ops in nn.toml, written in ember ops and views."""

from __future__ import annotations

from typing import Any

from ember_core.errors import DeviceError, DTypeError, ShapeError


def _pair(name: str, value: Any) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) for v in pair):
        raise TypeError(f"conv2d: {name} must be an int or a pair of ints, got {value!r}")
    return pair  # type: ignore[return-value]


def conv2d(x: Any, weight: Any, bias: Any = None, /, *, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1) -> Any:
    from ember_core.creation import copy_into, zeros
    from ember_core.views import as_strided

    (sh, sw), (ph, pw), (dh, dw) = _pair("stride", stride), _pair("padding", padding), _pair("dilation", dilation)
    if x.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"conv2d needs x (N, C, H, W) and weight (O, C/groups, kH, kW), "
                         f"got {x.shape} and {weight.shape}")
    if min(sh, sw, dh, dw) < 1 or min(ph, pw) < 0 or groups < 1:
        raise ValueError(f"conv2d: stride and dilation must be >= 1, padding >= 0, groups >= 1 "
                         f"(got stride={stride}, padding={padding}, dilation={dilation}, groups={groups})")
    n, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    if c % groups or o % groups or cg != c // groups:
        raise ShapeError(f"conv2d: {c} input channels and {o} filters with groups={groups} need weight "
                         f"(O, {c // groups if c % groups == 0 else '?'}, kH, kW), got {weight.shape}")
    if x.device is not weight.device or (bias is not None and bias.device is not x.device):
        raise DeviceError(f"conv2d: x on {x.device}, weight on {weight.device}; move them to one device")
    if x.dtype.kind not in "fc" or weight.dtype is not x.dtype:
        raise DTypeError(f"conv2d needs x and weight of one floating dtype, got {x.dtype.name} and {weight.dtype.name}")
    if bias is not None and bias.shape != (o,):
        raise ShapeError(f"conv2d: bias must have shape ({o},), got {bias.shape}")
    hp, wp = h + 2 * ph, w + 2 * pw
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise ShapeError(f"conv2d: the {kh}x{kw} kernel (dilation {dh}x{dw}) does not fit the padded {hp}x{wp} input")
    if ph or pw:
        padded = zeros((n, c, hp, wp), dtype=x.dtype, device=x.device)
        copy_into(padded[:, :, ph : ph + h, pw : pw + w], x)
    else:
        padded = x.contiguous()
    s_n, s_c, s_h, s_w = padded.strides
    g, cg_in, og = groups, c // groups, o // groups
    windows = as_strided(padded, (n, g, cg_in, oh, ow, kh, kw),
                         (s_n, cg_in * s_c, s_c, s_h * sh, s_w * sw, s_h * dh, s_w * dw), padded.offset)
    cols = windows.permute_dims((1, 0, 3, 4, 2, 5, 6)).reshape((g, n * oh * ow, cg_in * kh * kw))  # im2col
    out = cols @ weight.reshape((g, og, cg_in * kh * kw)).mT  # (g, N*OH*OW, O/g)
    out = out.reshape((g, n, oh, ow, og)).permute_dims((1, 0, 4, 2, 3)).reshape((n, o, oh, ow))
    return out if bias is None else out + bias.reshape((1, o, 1, 1))
