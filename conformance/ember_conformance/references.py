"""numpy references, one per registry op, computed in float64 / complex128 (exactly, for integer
and bool inputs).  Each is called with the sample's inputs as numpy arrays and its keywords."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember_core.dtypes import float_to_integer

_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _log1p(x: np.ndarray) -> np.ndarray:
    """numpy's complex log1p is log(1 + x), whose real part loses its digits near 0 (log1p(1e-4j)'s
    is 5e-9): |1 + x|^2 - 1 = a (2 + a) + b^2 keeps them (0.5 log1p of it); far from 0, log|1 + x|."""
    if x.dtype.kind != "c":
        return np.log1p(x)
    a, b = x.real, x.imag
    with np.errstate(all="ignore"):
        near = (np.abs(a) < 0.5) & (np.abs(b) < 0.5)
        modulus = np.where(near, 0.5 * np.log1p(a * (2 + a) + b * b), np.log(np.hypot(1 + a, b)))
    return modulus + 1j * np.arctan2(b, 1 + a)


def _sort(x: np.ndarray, *, axis: int = -1, descending: bool = False, stable: bool = True) -> np.ndarray:
    return np.take_along_axis(x, _argsort(x, axis=axis, descending=descending), axis=axis)


def _argsort(x: np.ndarray, *, axis: int = -1, descending: bool = False, stable: bool = True) -> np.ndarray:
    """Stable order; NaN sorts as the largest value (last ascending, first descending)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    if x.dtype.kind in "biu":  # ~k = -k - 1 reverses the order without overflowing at int64's minimum
        return np.argsort(~x.astype(np.int64), axis=axis, kind="stable")
    nan = np.isnan(x)
    return np.lexsort((-np.where(nan, 0, x), ~nan), axis=axis)  # by (NaN first, then -x), stably


def _index_put(x: np.ndarray, indices: np.ndarray, values: Any, *, axis: int = 0,
               accumulate: bool = False) -> np.ndarray:
    out = np.moveaxis(x.copy(), axis, 0)
    vals = np.broadcast_to(np.moveaxis(np.asarray(values), axis, 0) if np.ndim(values) == x.ndim else values,
                           (len(indices), *out.shape[1:]))
    if accumulate:
        np.add.at(out, indices, vals)
    else:
        out[indices] = vals
    return np.moveaxis(out, 0, axis)


def _clip(x: np.ndarray, min: Any = None, max: Any = None) -> np.ndarray:
    out = x if min is None else np.maximum(x, min)
    return out if max is None else np.minimum(out, max)


def _unique(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    values, index, inverse, counts = np.unique(x.reshape(-1), return_index=True, return_inverse=True,
                                               return_counts=True, equal_nan=False)
    return values, index, inverse.reshape(x.shape), counts


def _conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, *, stride: Any = 1,
            padding: Any = 0, dilation: Any = 1, groups: int = 1) -> np.ndarray:
    """Direct cross-correlation, one kernel tap at a time (float64)."""
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    n, _, h, w = x.shape
    o, cg, kh, kw = weight.shape
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow), dtype=np.result_type(x, weight))
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = weight[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out if bias is None else out + bias.reshape(1, -1, 1, 1)


def _astype(x: np.ndarray, dtype: str) -> np.ndarray:
    """ember's conversions: -> bool is != 0 (NaN is true); real floating -> integer by the core's
    rule (float_to_integer: truncation, NaN -> 0, saturation); integer -> narrower integer wraps."""
    if dtype == "bool":
        return x != 0
    if dtype[0] in "iu":
        return float_to_integer(x, dtype) if x.dtype.kind == "f" else x.astype(dtype)
    return x.astype(np.complex128 if dtype.startswith("complex") else np.float64)


def _with_initial(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def ref(x: np.ndarray, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False) -> np.ndarray:
        return fn(x, axis=axis, include_initial=include_initial)

    return ref


def _reduce(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def ref(x: np.ndarray, *, axis: Any = None, keepdims: bool = False, dtype: Any = None, **kw: Any) -> np.ndarray:
        return fn(x, axis=axis, keepdims=keepdims, **kw)

    return ref


REFERENCES: dict[str, Callable[..., Any]] = {
    # elementwise, unary
    "abs": np.abs, "acos": np.arccos, "acosh": np.arccosh, "asin": np.arcsin, "asinh": np.arcsinh,
    "atan": np.arctan, "atanh": np.arctanh, "bitwise_invert": np.invert, "ceil": np.ceil, "conj": np.conj,
    "cos": np.cos, "cosh": np.cosh, "exp": np.exp, "expm1": np.expm1, "floor": np.floor, "imag": np.imag,
    "isfinite": np.isfinite, "isinf": np.isinf, "isnan": np.isnan, "log": np.log, "log1p": _log1p,
    "log2": np.log2, "log10": np.log10, "logical_not": np.logical_not, "negative": np.negative,
    "positive": np.positive, "real": np.real, "round": np.round, "sign": np.sign, "signbit": np.signbit,
    "sin": np.sin, "sinh": np.sinh, "sqrt": np.sqrt, "square": np.square, "tan": np.tan, "tanh": np.tanh,
    "trunc": np.trunc, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "erf": _erf, "erfc": _erfc,
    "reciprocal": lambda x: 1.0 / x,
    # elementwise, binary
    "add": np.add, "atan2": np.arctan2, "bitwise_and": np.bitwise_and, "bitwise_left_shift": np.left_shift,
    "bitwise_or": np.bitwise_or, "bitwise_right_shift": np.right_shift, "bitwise_xor": np.bitwise_xor,
    "copysign": np.copysign, "divide": np.divide, "equal": np.equal, "floor_divide": np.floor_divide,
    "greater": np.greater, "greater_equal": np.greater_equal, "hypot": np.hypot, "less": np.less,
    "less_equal": np.less_equal, "logaddexp": np.logaddexp, "logical_and": np.logical_and,
    "logical_or": np.logical_or, "logical_xor": np.logical_xor, "maximum": np.maximum, "minimum": np.minimum,
    "multiply": np.multiply, "not_equal": np.not_equal, "pow": np.power, "remainder": np.remainder,
    "subtract": np.subtract,
    # data movement and creation
    "copy": lambda x: x.copy(), "astype": _astype, "where": np.where,
    "full": lambda shape, fill_value, *, dtype=None, device=None: np.full(shape, fill_value),
    # reductions and scans
    "sum": _reduce(np.sum), "prod": _reduce(np.prod), "max": _reduce(np.max), "min": _reduce(np.min),
    "any": _reduce(np.any), "all": _reduce(np.all),
    "argmax": lambda x, *, axis=None, keepdims=False: np.argmax(x, axis=axis, keepdims=keepdims),
    "argmin": lambda x, *, axis=None, keepdims=False: np.argmin(x, axis=axis, keepdims=keepdims),
    "cumulative_sum": _with_initial(np.cumulative_sum), "cumulative_prod": _with_initial(np.cumulative_prod),
    "mean": _reduce(np.mean), "count_nonzero": lambda x, *, axis=None, keepdims=False: np.count_nonzero(
        x, axis=axis, keepdims=keepdims),
    "var": lambda x, *, axis=None, correction=0.0, keepdims=False: np.var(x, axis=axis, ddof=correction,
                                                                           keepdims=keepdims),
    "std": lambda x, *, axis=None, correction=0.0, keepdims=False: np.std(x, axis=axis, ddof=correction,
                                                                           keepdims=keepdims),
    # sorting, searching, indexing
    "sort": _sort, "argsort": _argsort, "take": np.take, "index_put": _index_put, "nonzero": np.nonzero,
    "searchsorted": lambda x1, x2, *, side="left", sorter=None: np.searchsorted(x1, x2, side=side, sorter=sorter),
    # linear algebra
    "matmul": np.matmul, "vecdot": lambda x1, x2, *, axis=-1: np.vecdot(x1, x2, axis=axis),
    "tensordot": lambda x1, x2, *, axes=2: np.tensordot(x1, x2, axes=axes), "conv2d": _conv2d,
    # composites
    "clip": _clip, "relu": lambda x: np.maximum(x, 0), "concat": lambda arrays, *, axis=0: np.concat(arrays, axis=axis),
    "stack": lambda arrays, *, axis=0: np.stack(arrays, axis=axis),
    "tril": lambda x, *, k=0: np.tril(x, k), "triu": lambda x, *, k=0: np.triu(x, k),
    "repeat": lambda x, repeats, *, axis=None: np.repeat(x, repeats, axis=axis),
    "roll": lambda x, shift, *, axis=None: np.roll(x, shift, axis=axis),
    "tile": np.tile, "unstack": lambda x, *, axis=0: np.unstack(x, axis=axis),
    "unique_all": _unique, "unique_counts": lambda x: (_unique(x)[0], _unique(x)[3]),
    "unique_inverse": lambda x: (_unique(x)[0], _unique(x)[2]), "unique_values": lambda x: _unique(x)[0],
}

# ops whose error is bounded relative to the same op applied to |inputs| (sums of products)
ACCUMULATING = frozenset({"sum", "cumulative_sum", "matmul", "vecdot", "tensordot", "mean", "conv2d"})


def magnitude(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The scale an accumulating op's error is judged against (None: the result's own magnitude)."""
    if op in ACCUMULATING and args:
        return REFERENCES[op](*(np.abs(a) if isinstance(a, np.ndarray) else a for a in args), **kwargs)
    if op in ("var", "std"):  # cancellation in x - mean: judge against the mean square
        x = args[0]
        square = np.mean(np.abs(x) ** 2, axis=kwargs.get("axis"), keepdims=kwargs.get("keepdims", False))
        return square if op == "var" else np.sqrt(square)
    if op == "sgd_step":  # param - lr * direction cancels: judge against |param| + lr * |direction|
        magnitudes = (np.abs(a) for a in args[:3])  # with lr negated, the step adds what it subtracted
        return sgd_reference(*magnitudes, **{**kwargs, "lr": -kwargs["lr"], "maximize": False})[0]
    if op == "log_softmax":  # x - max - log(sum(exp)): the error scales with |x - max| + 1, not the result
        x, axis = args[0], kwargs.get("axis", args[1] if len(args) > 1 else -1)
        return np.abs(x - x.max(axis=axis, keepdims=True)) + 1
    if op == "batch_norm_train":  # x - mean cancels: the error scales with (|x| + mean |x|) * |scale| + |bias|
        # (mean |x|, not |mean|: the mean is a sum, whose rounding scales with the sum of |x|)
        x, _, *affine = (*args, None, None)
        _, var = batch_norm_statistics(x)
        shape = (1, -1, *(1,) * (x.ndim - 2))
        spread = np.sqrt(var.reshape(shape) + kwargs.get("eps", 1e-5))
        mean_abs = batch_norm_statistics(np.abs(x))[0].reshape(shape)
        return _channel_affine((np.abs(x) + mean_abs) / spread, *_magnitudes(affine[:2]))
    if op == "layer_norm":  # the same cancellation, per row
        x, normalized_shape, *affine = (*args, None, None)
        scale = 1.0 if affine[0] is None else np.abs(affine[0])
        return _normalized_rows(x, normalized_shape, kwargs.get("eps", 1e-5))[1] * scale + (
            0.0 if affine[1] is None else np.abs(affine[1]))
    if op == "group_norm":  # the same, per sample and group of channels
        x, num_groups, *affine = (*args, None, None)
        spread = _normalized_rows(_group_rows(x, num_groups), 1, kwargs.get("eps", 1e-5))[1].reshape(x.shape)
        return _channel_affine(spread, *_magnitudes(affine[:2]))
    return None


# ---- neural-network ops ---------------------------------------------------------------------------

def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _pool_windows(x: np.ndarray, kernel: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool,
                  fill: float) -> np.ndarray:
    """Every pooling window as (N, C, OH, OW, kh*kw), padded with ``fill`` (PyTorch's output size rule)."""
    (kh, kw), (ph, pw), (dh, dw) = _pair(kernel), _pair(padding), _pair(dilation)
    sh, sw = _pair(kernel if stride is None else stride)
    h, w = x.shape[-2:]

    def size(length: int, k: int, s: int, p: int, d: int) -> int:
        span = length + 2 * p - d * (k - 1) - 1
        out = (-(-span // s) if ceil_mode else span // s) + 1
        return out - 1 if ceil_mode and (out - 1) * s >= length + p else out

    oh, ow = size(h, kh, sh, ph, dh), size(w, kw, sw, pw, dw)
    extra_h = max(0, (oh - 1) * sh + dh * (kh - 1) + 1 - (h + 2 * ph))
    extra_w = max(0, (ow - 1) * sw + dw * (kw - 1) + 1 - (w + 2 * pw))
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph + extra_h), (pw, pw + extra_w)), constant_values=fill)
    taps = [xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
            for i in range(kh) for j in range(kw)]
    return np.stack(taps, axis=-1)


def _max_pool2d(x: np.ndarray, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                ceil_mode: bool = False) -> np.ndarray:
    return _pool_windows(x, kernel_size, stride, padding, dilation, ceil_mode, -np.inf).max(axis=-1)


def _avg_pool2d(x: np.ndarray, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                count_include_pad: bool = True) -> np.ndarray:
    """Without ceil_mode overhang: the divisor is the window size, or the count of real elements."""
    sums = _pool_windows(x, kernel_size, stride, padding, 1, ceil_mode, 0.0).sum(axis=-1)
    if count_include_pad:
        kh, kw = _pair(kernel_size)
        return sums / (kh * kw)
    ones = _pool_windows(np.ones_like(x), kernel_size, stride, padding, 1, ceil_mode, 0.0).sum(axis=-1)
    return sums / ones


def _adaptive_avg_pool2d(x: np.ndarray, output_size: Any) -> np.ndarray:
    oh, ow = _pair(output_size)
    h, w = x.shape[-2:]
    out = np.empty((*x.shape[:-2], oh, ow))
    for i in range(oh):
        for j in range(ow):
            rows = slice(i * h // oh, -(-(i + 1) * h // oh))
            cols = slice(j * w // ow, -(-(j + 1) * w // ow))
            out[..., i, j] = x[..., rows, cols].mean(axis=(-2, -1))
    return out


def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _nll_loss(log_probs: np.ndarray, target: np.ndarray, weight: np.ndarray | None = None, *, ignore_index: int = -100,
              reduction: str = "mean", label_smoothing: float = 0.0) -> np.ndarray:
    """PyTorch's nll_loss with class weights and label smoothing, row by row."""
    rows, classes = log_probs.shape
    w = np.ones(classes) if weight is None else weight
    counted = target != ignore_index
    t = np.where(counted, target, 0)
    s = label_smoothing
    loss = -((1 - s) * w[t] * log_probs[np.arange(rows), t] + s / classes * (log_probs * w).sum(axis=1))
    loss = np.where(counted, loss, 0.0)
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.sum() / (w[t] * counted).sum()


def batch_norm_statistics(x: np.ndarray) -> np.ndarray:
    """(2, C): each channel's mean and biased variance over every dim but 1."""
    axes = (0, *range(2, x.ndim))
    return np.stack([x.mean(axis=axes), x.var(axis=axes)])


def _channel_affine(out: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None) -> np.ndarray:
    """out (N, C, ...) scaled by weight and shifted by bias per channel, each (C,) or None."""
    shape = (1, -1, *(1,) * (out.ndim - 2))
    return out * (1 if weight is None else weight.reshape(shape)) + (0 if bias is None else bias.reshape(shape))


def _magnitudes(affine: list[np.ndarray | None]) -> list[np.ndarray | None]:
    return [None if a is None else np.abs(a) for a in affine]


def _batch_norm_train(x: np.ndarray, stats: np.ndarray, weight: np.ndarray | None = None,
                      bias: np.ndarray | None = None, *, eps: float = 1e-5) -> np.ndarray:
    mean, var = batch_norm_statistics(x)
    shape = (1, -1, *(1,) * (x.ndim - 2))
    return _channel_affine((x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps), weight, bias)


def _normalized_rows(x: np.ndarray, normalized_shape: Any, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(xhat, |x| + mean |x| over sqrt(var + eps)): layer_norm's rows and the scale of its error
    (mean |x|, not |mean|: the mean is a sum, whose rounding scales with the sum of |x|)."""
    count = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    axes = tuple(range(x.ndim - count, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    spread = np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    return (x - mean) / spread, (np.abs(x) + np.abs(x).mean(axis=axes, keepdims=True)) / spread


def _layer_norm(x: np.ndarray, normalized_shape: Any, weight: np.ndarray | None = None,
                bias: np.ndarray | None = None, *, eps: float = 1e-5) -> np.ndarray:
    out = _normalized_rows(x, normalized_shape, eps)[0]
    return out * (1 if weight is None else weight) + (0 if bias is None else bias)


def _group_rows(x: np.ndarray, num_groups: int) -> np.ndarray:
    return x.reshape(x.shape[0], num_groups, -1)


def _group_norm(x: np.ndarray, num_groups: int, weight: np.ndarray | None = None, bias: np.ndarray | None = None,
                *, eps: float = 1e-5) -> np.ndarray:
    return _channel_affine(_normalized_rows(_group_rows(x, num_groups), 1, eps)[0].reshape(x.shape), weight, bias)


def _activation(out: np.ndarray, activation: str | None) -> np.ndarray:
    return np.maximum(out, 0) if activation == "relu" else out


REFERENCES.update({
    "gelu": lambda x: x * 0.5 * _erfc(-x / math.sqrt(2)), "silu": lambda x: x / (1 + np.exp(-x)),
    "softmax": _softmax,
    "log_softmax": lambda x, axis=-1: x - x.max(axis=axis, keepdims=True) - np.log(
        np.exp(x - x.max(axis=axis, keepdims=True)).sum(axis=axis, keepdims=True)),
    "linear": lambda x, weight, bias=None, *, activation=None: _activation(
        x @ weight.T + (0 if bias is None else bias), activation),
    "conv2d": lambda x, weight, bias=None, *, activation=None, **kw: _activation(_conv2d(x, weight, bias, **kw),
                                                                                activation),
    "max_pool2d": _max_pool2d, "avg_pool2d": _avg_pool2d, "adaptive_avg_pool2d": _adaptive_avg_pool2d,
    "nll_loss": _nll_loss, "batch_norm_train": _batch_norm_train, "layer_norm": _layer_norm,
    "group_norm": _group_norm,
})
REFERENCES.update({
    "views.reshape": np.reshape, "views.permute_dims": np.permute_dims, "views.broadcast_to": np.broadcast_to,
    "views.squeeze": np.squeeze, "views.expand_dims": lambda x, *, axis=0: np.expand_dims(x, axis),
    "views.flip_view": lambda x, axes: np.flip(x, axis=axes),
})
ACCUMULATING = ACCUMULATING | {"linear", "avg_pool2d", "adaptive_avg_pool2d"}


def conv2d_weight_grad_reference(x: np.ndarray, grad: np.ndarray, weight_shape: tuple[int, ...],
                                 stride: tuple[int, int] = (1, 1), padding: tuple[int, int] = (0, 0),
                                 dilation: tuple[int, int] = (1, 1), groups: int = 1) -> np.ndarray:
    """dW[o, c, i, j] = sum over n, oy, ox of grad[n, o, oy, ox] * padded x[n, group's c, oy*s + i*d, ox*s + j*d],
    in float64."""
    o, cg, kh, kw = weight_shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh, ow = grad.shape[2:]
    out = np.zeros(weight_shape)
    og = o // groups
    for i in range(kh):
        for j in range(kw):
            taps = xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            for grp in range(groups):
                out[grp * og:(grp + 1) * og, :, i, j] = np.einsum(
                    "nopq,ncpq->oc", grad[:, grp * og:(grp + 1) * og].astype(np.float64),
                    taps[:, grp * cg:(grp + 1) * cg])
    return out


def adam_reference(param: np.ndarray, grad: np.ndarray, exp_avg: np.ndarray, exp_avg_sq: np.ndarray, *,
                   lr: float, beta1: float, beta2: float, eps: float, step: int, weight_decay: float = 0.0,
                   decoupled: bool = False, maximize: bool = False) -> tuple[np.ndarray, ...]:
    """PyTorch's Adam / AdamW step, bias-corrected: the new (param, exp_avg, exp_avg_sq)."""
    g = -grad if maximize else grad
    if decoupled:
        param = param * (1 - lr * weight_decay)
    else:
        g = g + weight_decay * param
    m = beta1 * exp_avg + (1 - beta1) * g
    v = beta2 * exp_avg_sq + (1 - beta2) * g * g
    return param - lr / (1 - beta1**step) * m / (np.sqrt(v / (1 - beta2**step)) + eps), m, v


REFERENCES["adam_step"] = lambda *tensors, **hyper: adam_reference(*tensors, **hyper)[0]  # the param


def sgd_reference(param: np.ndarray, grad: np.ndarray, momentum_buffer: np.ndarray, *, lr: float, momentum: float,
                  dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False,
                  first_step: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's SGD step with momentum: the new (param, momentum_buffer)."""
    g = (-grad if maximize else grad) + weight_decay * param
    buf = g if first_step else momentum * momentum_buffer + (1 - dampening) * g
    return param - lr * (g + momentum * buf if nesterov else buf), buf


REFERENCES["sgd_step"] = lambda *tensors, **hyper: sgd_reference(*tensors, **hyper)[0]  # the param
