"""float64 numpy references for the ops ember-xnnpack serves (PyTorch's semantics), and the
float32 tolerance they are judged with."""

from __future__ import annotations

import numpy as np

EPS32 = 2.0**-23


def assert_close_dot(actual: np.ndarray, expected: np.ndarray, magnitude: np.ndarray) -> None:
    """A float32 result of sums of products: the rounding error of a K-term dot product is at most
    about K * eps * sum|terms| and in practice (blocked FMA sums) far less, so each element may
    differ by 16 eps * sum|terms| (``magnitude``, the same op applied to |inputs|) plus a subnormal."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert np.array_equal(np.isnan(actual), np.isnan(expected))
    bound = 16 * EPS32 * magnitude + 2e-45
    worst = np.max(np.abs(actual - expected) - bound, initial=-1.0)
    assert worst <= 0, f"max excess error {worst}, max error {np.max(np.abs(actual - expected))}"


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float = 32 * EPS32, atol: float = 2e-45) -> None:
    """Elementwise float32 results: NaNs in the same places, then |a - e| <= atol + rtol |e|."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == np.float32
    assert np.array_equal(np.isnan(actual), np.isnan(expected))
    finite = ~np.isnan(expected)
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=rtol, atol=atol)


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
           groups: int = 1, activation: str | None = None) -> np.ndarray:
    """Cross-correlation of NCHW x with OIHW w, one kernel tap at a time, in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    og = o // groups
    out = np.zeros((n, o, oh, ow))
    for g in range(groups):
        xs, ws = xp[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    if b is not None:
        out += b.astype(np.float64).reshape(1, o, 1, 1)
    return np.maximum(out, 0) if activation == "relu" else out


def conv2d_input_grad(dy: np.ndarray, w: np.ndarray, input_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                      groups: int = 1) -> np.ndarray:
    """The gradient of sum(conv2d(x, w) * dy) with respect to x: every output's gradient spread
    back over the input pixels its window read, in float64."""
    dy, w = dy.astype(np.float64), w.astype(np.float64)
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    n, c, h, wd = input_shape
    o, cg, kh, kw = w.shape
    oh, ow = dy.shape[2:]
    dx = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    og = o // groups
    for g in range(groups):
        dys, ws = dy[:, g * og:(g + 1) * og], w[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
                cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
                dx[:, g * cg:(g + 1) * cg, rows, cols] += np.einsum("nohw,oc->nchw", dys, ws[:, :, i, j])
    return dx[:, :, ph:ph + h, pw:pw + wd]


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, activation: str | None = None) -> np.ndarray:
    out = x.astype(np.float64) @ w.astype(np.float64).T
    if b is not None:
        out += b.astype(np.float64)
    return np.maximum(out, 0) if activation == "relu" else out


def pool_out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's rule: ceil mode adds a partial window only if it starts inside the input or left padding."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def max_pool2d(x: np.ndarray, kernel_size, stride, padding=(0, 0), dilation=(1, 1), ceil_mode=False) -> np.ndarray:
    return _pool(x, kernel_size, stride, padding, dilation, ceil_mode, "max", True)


def avg_pool2d(x: np.ndarray, kernel_size, stride, padding=(0, 0), ceil_mode=False,
               count_include_pad=True) -> np.ndarray:
    return _pool(x, kernel_size, stride, padding, (1, 1), ceil_mode, "avg", count_include_pad)


def _pool(x, kernel_size, stride, padding, dilation, ceil_mode, kind, count_include_pad) -> np.ndarray:
    """Window by window, as PyTorch defines it: max ignores padding (NaN propagates); the average
    divides by the window clipped to the padded input (count_include_pad) or to the input."""
    x = x.astype(np.float64)
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    oh = pool_out_size(h, kh, sh, ph, dh, ceil_mode)
    ow = pool_out_size(w, kw, sw, pw, dw, ceil_mode)
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * sh - ph, j * sw - pw
            ys = [y for y in range(y0, y0 + dh * (kh - 1) + 1, dh) if 0 <= y < h]
            xs = [v for v in range(x0, x0 + dw * (kw - 1) + 1, dw) if 0 <= v < w]
            window = x[:, :, ys][:, :, :, xs].reshape(n, c, -1)
            if kind == "max":
                out[:, :, i, j] = np.where(np.isnan(window).any(-1), np.nan, window.max(-1))
            else:
                if count_include_pad:
                    rows = min(y0 + kh, h + ph) - y0
                    cols = min(x0 + kw, w + pw) - x0
                    divisor = rows * cols
                else:
                    divisor = len(ys) * len(xs)
                out[:, :, i, j] = window.sum(-1) / divisor
    return out


def sigmoid(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def magnitude_conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, **params) -> np.ndarray:
    """The conv of |x| with |w| (+|b|): the scale each output's rounding error is judged against."""
    params = {k: v for k, v in params.items() if k != "activation"}
    return conv2d(np.abs(x), np.abs(w), None if b is None else np.abs(b), **params)

