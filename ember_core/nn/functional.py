"""Stateless layer and loss functions: registry ops where a backend may provide a kernel (conv2d,
linear, pooling, activations, softmax), compositions of core ops elsewhere.  Argument names follow
``torch.nn.functional`` so models port by changing the import."""

from __future__ import annotations

import math
from typing import Any

import ember_core as em
from ember_core import random
from ember_core.autograd import no_grad
from ember_core.errors import DeviceError, DTypeError, IndexOutOfRangeError, ShapeError
from ember_core.ops.nn_families import REDUCTIONS
from ember_core.tensor import Tensor

# ---- layers --------------------------------------------------------------------------------------

def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    return em.linear(x, weight, bias)


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    return em.conv2d(x, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False) -> Tensor:
    return em.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)


def avg_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    return em.avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad)


def adaptive_avg_pool2d(x: Tensor, output_size: Any) -> Tensor:
    return em.adaptive_avg_pool2d(x, output_size)


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    return x.flatten(start_dim, end_dim)


def dropout(x: Tensor, p: float = 0.5, training: bool = True, generator: Any = None) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p); the mask is drawn from
    the device's generator (``ember_core.random``), so a seed reproduces it on every backend."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p!r}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    generator = generator or random.default_generator(x.device)
    if generator.device is not x.device:
        raise DeviceError(f"dropout: the generator is for {generator.device}, x is on {x.device}")
    seed, offset = generator.advance(random.blocks_for("uniform", 4, x.size))  # float32 uniforms: the mask
    return em.dropout(x, p, seed=seed, offset=offset)


def embedding(indices: Tensor, weight: Tensor) -> Tensor:
    if indices.dtype.kind not in "iu":
        raise DTypeError(f"embedding indices must be integers, got {indices.dtype.name}")
    rows = em.take(weight, indices.reshape(-1), axis=0)
    return rows.reshape((*indices.shape, weight.shape[1]))


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5) -> Tensor:
    """Normalize over every dim but the channel dim (1).  In training the batch statistics are used
    (one batch_norm_train op, whose kernels also give the gradients in two passes) and the running
    ones updated in place (unbiased variance, as PyTorch does)."""
    if x.ndim < 2:
        raise ShapeError(f"batch_norm needs (N, C, ...) input, got shape {x.shape}")
    if training:
        stats = em.empty((2, x.shape[1]), dtype=x.dtype, device=x.device)
        out = em.batch_norm_train(x, stats, weight, bias, eps=eps)
        if running_mean is not None and running_var is not None:
            count = x.size // x.shape[1]
            mean, var = em.unstack(stats)
            with no_grad():  # in place: an assignment through [...] costs more than the arithmetic
                running_mean *= 1 - momentum
                running_mean += mean * momentum
                running_var *= 1 - momentum
                running_var += var * (momentum * count / (count - 1))
        return out
    if running_mean is None or running_var is None:
        raise ValueError("batch_norm in eval mode needs running_mean and running_var")
    # a per-channel affine map, its coefficients computed on (C,) tensors: two passes over x
    scale = em.reciprocal(em.sqrt(running_var + eps))
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale if bias is None else bias - running_mean * scale
    shape = (1, x.shape[1], *(1,) * (x.ndim - 2))
    return x * scale.reshape(shape) + shift.reshape(shape)


def layer_norm(x: Tensor, normalized_shape: Any, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    return em.layer_norm(x, normalized_shape, weight, bias, eps=eps)


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    return em.group_norm(x, num_groups, weight, bias, eps=eps)


# ---- activations ---------------------------------------------------------------------------------

def relu(x: Tensor) -> Tensor:
    return em.relu(x)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    if approximate == "none":
        return em.gelu(x)
    if approximate != "tanh":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
    return x * (em.tanh(inner) + 1.0) * 0.5


def silu(x: Tensor) -> Tensor:
    return em.silu(x)


def sigmoid(x: Tensor) -> Tensor:
    return em.sigmoid(x)


def tanh(x: Tensor) -> Tensor:
    return em.tanh(x)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    return em.softmax(x, dim)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    return em.log_softmax(x, dim)


def one_hot(indices: Tensor, num_classes: int) -> Tensor:
    """int64 (..., num_classes) with a 1 at each index.  Every index must be a class in
    [0, num_classes), as in PyTorch: one outside would give a row of zeros, silently."""
    if indices.dtype.kind not in "iu":
        raise DTypeError(f"one_hot needs integer indices, got {indices.dtype.name}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(f"one_hot: num_classes must be an int >= 0 (ember does not infer it), got {num_classes!r}")
    if indices.size:
        for extreme in (em.min(indices).item(), em.max(indices).item()):
            if not 0 <= extreme < num_classes:
                raise IndexOutOfRangeError(f"one_hot: class {extreme} is outside [0, num_classes) = [0, {num_classes})")
    classes = em.arange(num_classes, device=indices.device)
    return em.astype(em.expand_dims(indices, axis=-1) == classes, em.int64)


# ---- losses --------------------------------------------------------------------------------------

def _reduce(loss: Tensor, reduction: str, divisor: Tensor | float | None = None) -> Tensor:
    if reduction == "none":
        return loss
    total = em.sum(loss)
    if reduction == "sum":
        return total
    return total / (loss.size if divisor is None else divisor)


def _check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def _classes_last(x: Tensor) -> Tensor:
    """(N, C, d1, ...) -> (N*d1*..., C); (N, C) unchanged."""
    if x.ndim == 2:
        return x
    order = (0, *range(2, x.ndim), 1)
    return em.permute_dims(x, order).reshape((-1, x.shape[1]))


def nll_loss(log_probs: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """-log_probs[i, target[i]] (weighted), averaged over the targets that are not ignore_index."""
    return _indexed_loss(log_probs, target, weight, ignore_index, reduction, 0.0)


def cross_entropy(logits: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """log_softmax + nll_loss, with PyTorch's label smoothing: the target distribution puts
    1 - s on the target class and s / C on every class.  Targets are class indices, or class
    probabilities with the logits' shape."""
    _check_reduction(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing!r}")
    if logits.ndim < 1:
        raise ShapeError("cross_entropy needs (C,), (N, C) or (N, C, d1, ...) logits")
    log_probs = em.log_softmax(logits, axis=0 if logits.ndim == 1 else 1)
    if target.dtype.kind == "f":
        return _soft_target_loss(log_probs, target, weight, reduction, label_smoothing)
    return _indexed_loss(log_probs, target, weight, ignore_index, reduction, label_smoothing)


def _indexed_loss(log_probs: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int, reduction: str,
                  smoothing: float) -> Tensor:
    """The registry's nll_loss on (N, C) rows: unbatched (C,) inputs and spatial (N, C, d1, ...)
    inputs are reshaped to it, classes last, and a per-element result back."""
    _check_reduction(reduction)
    if not isinstance(target, Tensor) or target.dtype.kind not in "iu":
        raise DTypeError(f"class-index targets must be integer tensors, got {getattr(target, 'dtype', type(target))}")
    result_shape = target.shape
    if log_probs.ndim == 1:
        log_probs, target = log_probs.reshape((1, -1)), target.reshape(1)
    expected = (log_probs.shape[0], *log_probs.shape[2:])
    if target.shape != expected:
        raise ShapeError(f"target shape {target.shape} does not fit input of shape {log_probs.shape} "
                         f"(expected {expected})")
    loss = em.nll_loss(_classes_last(log_probs), target.reshape(-1), weight, ignore_index=ignore_index,
                       reduction=reduction, label_smoothing=smoothing)
    return loss.reshape(result_shape) if reduction == "none" else loss


def _soft_target_loss(log_probs: Tensor, target: Tensor, weight: Tensor | None, reduction: str,
                      smoothing: float) -> Tensor:
    if target.shape != log_probs.shape:
        raise ShapeError(f"probability targets must have the input's shape {log_probs.shape}, got {target.shape}")
    unbatched = log_probs.ndim == 1
    if unbatched:
        log_probs, target = log_probs.reshape((1, -1)), target.reshape((1, -1))
    if smoothing:
        target = target * (1.0 - smoothing) + smoothing / log_probs.shape[1]
    terms = _classes_last(log_probs) * _classes_last(target)
    if weight is not None:
        terms = terms * weight
    loss = -em.sum(terms, axis=-1)
    if reduction == "none":
        return loss.reshape(() if unbatched else (log_probs.shape[0], *log_probs.shape[2:]))
    return _reduce(loss, reduction)


def mse_loss(x: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    _check_reduction(reduction)
    if x.shape != target.shape:
        raise ShapeError(f"mse_loss: input {x.shape} and target {target.shape} must have one shape")
    return _reduce(em.square(x - target), reduction)


def binary_cross_entropy_with_logits(logits: Tensor, target: Tensor, weight: Tensor | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """-[p * t * log sigmoid(x) + (1 - t) * log(1 - sigmoid(x))], computed without overflow as
    (1 - t) * x + (1 + (p - 1) * t) * softplus(-x)."""
    _check_reduction(reduction)
    if logits.shape != target.shape:
        raise ShapeError(f"binary_cross_entropy_with_logits: input {logits.shape} and target {target.shape} "
                         f"must have one shape")
    softplus_neg = em.log1p(em.exp(-em.abs(logits))) + em.maximum(-logits, 0.0)  # log(1 + exp(-x))
    if pos_weight is None:
        loss = (1.0 - target) * logits + softplus_neg
    else:
        loss = (1.0 - target) * logits + (target * (pos_weight - 1.0) + 1.0) * softplus_neg
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)
