"""Layers: modules that own parameters (Linear, Conv2d, norms, Embedding) and thin wrappers of the
functional forms (pooling, activations, dropout, flatten).  Default initializations are PyTorch's."""

from __future__ import annotations

import math
from typing import Any

import ember_core as em
from ember_core.autograd import no_grad
from ember_core.errors import ShapeError
from ember_core.nn import functional as F
from ember_core.nn import init
from ember_core.nn.module import FUSABLE_ACTIVATIONS, FUSED_FORWARD, Module
from ember_core.nn.parameter import Parameter
from ember_core.tensor import Tensor


def _param(shape: tuple[int, ...], device: Any, dtype: Any) -> Parameter:
    return Parameter(em.empty(shape, dtype=dtype, device=device))


def _uniform_fan_in(weight: Tensor, bias: Tensor | None) -> None:
    """PyTorch's default for Linear and Conv: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both.  A weight
    without elements (no input channels, a 0x0 kernel) may have fan-in 0: nothing to draw, bias 0."""
    if weight.size:
        init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        bound = 1.0 / math.sqrt(init.fan_in_and_fan_out(weight)[0]) if weight.size else 0.0
        init.uniform_(bias, -bound, bound)


def _check_count(layer: str, name: str, value: Any, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{layer}: {name} must be an int, got {type(value).__name__} {value!r}")
    if value < least:
        raise ShapeError(f"{layer}: {name} must be at least {least}, got {value}")


def _check_groups(layer: str, groups_name: str, groups: Any, **channels: Any) -> None:
    """Channel counts are ints >= 0 that split into ``groups`` (an int >= 1) equal groups."""
    _check_count(layer, groups_name, groups, 1)
    for name, n in channels.items():
        _check_count(layer, name, n, 0)
        if n % groups:
            raise ShapeError(f"{layer}: {name}={n} channels do not split into {groups} groups ({groups_name} must "
                             f"divide it)")


class Linear(Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = _param((out_features, in_features), device, dtype)
        self.bias = _param((out_features,), device, dtype) if bias else None
        _uniform_fan_in(self.weight, self.bias)

    def forward(self, x: Tensor, activation: str | None = None) -> Tensor:
        return em.linear(x, self.weight, self.bias, activation=activation)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Conv2d(Module):
    """2-d convolution; padding may be ints, a pair, 'valid' (0) or 'same' (stride 1, odd effective kernel)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        _check_groups("Conv2d", "groups", groups, in_channels=in_channels, out_channels=out_channels)
        kernel = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel
        self.stride, self.dilation, self.groups = stride, dilation, groups
        self.padding = _conv_padding(padding, kernel, stride, dilation)
        self.weight = _param((out_channels, in_channels // groups, *kernel), device, dtype)
        self.bias = _param((out_channels,), device, dtype) if bias else None
        _uniform_fan_in(self.weight, self.bias)

    def forward(self, x: Tensor, activation: str | None = None) -> Tensor:
        return em.conv2d(x, self.weight, self.bias, stride=self.stride, padding=self.padding,
                         dilation=self.dilation, groups=self.groups, activation=activation)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}" + (f", groups={self.groups}" if self.groups != 1 else "")
                + ("" if self.bias is not None else ", bias=False"))


def _conv_padding(padding: Any, kernel: tuple[int, ...], stride: Any, dilation: Any) -> Any:
    if padding == "valid":
        return 0
    if padding != "same":
        return padding
    dilations = (dilation, dilation) if isinstance(dilation, int) else tuple(dilation)
    spans = [d * (k - 1) for d, k in zip(dilations, kernel)]
    if stride not in (1, (1, 1)) or any(s % 2 for s in spans):
        raise ValueError("Conv2d: padding='same' needs stride 1 and an odd effective kernel size here")
    return tuple(s // 2 for s in spans)


class MaxPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return em.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return em.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return em.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class _BatchNorm(Module):
    _input_dims: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = Parameter(em.ones(num_features, dtype=dtype, device=device)) if affine else None
        self.bias = Parameter(em.zeros(num_features, dtype=dtype, device=device)) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", em.zeros(num_features, dtype=dtype, device=device))
            self.register_buffer("running_var", em.ones(num_features, dtype=dtype, device=device))
            self.register_buffer("num_batches_tracked", em.zeros((), dtype=em.int64, device=device))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self._input_dims:
            dims = " or ".join(f"{d}-d" for d in self._input_dims)
            raise em.ShapeError(f"{type(self).__name__} needs {dims} input (N, C, ...), got shape {x.shape}")
        if x.shape[1] != self.num_features:
            raise em.ShapeError(f"{type(self).__name__}({self.num_features}) got {x.shape[1]} channels")
        use_batch = self.training or not self.track_running_stats
        if self.training and self.track_running_stats:
            self.num_batches_tracked += 1
        return F.batch_norm(x, self.running_mean if self.track_running_stats else None,
                            self.running_var if self.track_running_stats else None, self.weight, self.bias,
                            use_batch, self.momentum, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}"


class BatchNorm1d(_BatchNorm):
    _input_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    _input_dims = (4,)


class LayerNorm(Module):
    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        self.weight = Parameter(em.ones(shape, dtype=dtype, device=device)) if elementwise_affine else None
        self.bias = Parameter(em.zeros(shape, dtype=dtype, device=device)) if elementwise_affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class GroupNorm(Module):
    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        _check_groups("GroupNorm", "num_groups", num_groups, num_channels=num_channels)
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = Parameter(em.ones(num_channels, dtype=dtype, device=device)) if affine else None
        self.bias = Parameter(em.zeros(num_channels, dtype=dtype, device=device)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise em.ShapeError(f"GroupNorm({self.num_groups}, {self.num_channels}) needs (N, {self.num_channels}, "
                                f"...) input, got shape {x.shape}")
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class Dropout(Module):
    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p!r}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Embedding(Module):
    """A lookup table of num_embeddings vectors; weights start N(0, 1), the padding_idx row at 0."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.weight = _param((num_embeddings, embedding_dim), device, dtype)
        init.normal_(self.weight)
        if padding_idx is not None:
            with no_grad():
                self.weight[padding_idx] = 0.0

    def forward(self, indices: Tensor) -> Tensor:
        return F.embedding(indices, self.weight)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)


class Identity(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return em.relu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)


class SiLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return em.silu(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return em.sigmoid(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return em.tanh(x)


class Softmax(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return em.softmax(x, self.dim)


class LogSoftmax(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return em.log_softmax(x, self.dim)


FUSED_FORWARD.update({Linear: Linear.forward, Conv2d: Conv2d.forward})
FUSABLE_ACTIVATIONS[ReLU] = "relu"


# ---- losses --------------------------------------------------------------------------------------

class CrossEntropyLoss(Module):
    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(logits, target, self.weight, self.ignore_index, self.reduction, self.label_smoothing)


class NLLLoss(Module):
    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean") -> None:
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction = ignore_index, reduction

    def forward(self, log_probs: Tensor, target: Tensor) -> Tensor:
        return F.nll_loss(log_probs, target, self.weight, self.ignore_index, self.reduction)


class MSELoss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(x, target, self.reduction)


class BCEWithLogitsLoss(Module):
    def __init__(self, weight: Tensor | None = None, reduction: str = "mean", pos_weight: Tensor | None = None) -> None:
        super().__init__()
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)
        self.reduction = reduction

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(logits, target, self.weight, self.reduction, self.pos_weight)
