"""Ember: a slim deep-learning core whose hardware backends are plugins.

The namespace follows the Python Array API standard (2023.12).  Op functions come from the op
registry (``ember_core/ops/*.toml``); backends are discovered lazily, on first use of a device.
"""

from __future__ import annotations

import math as _math
from typing import Any

from ember_core import autograd, ops, plugins, random
from ember_core._include import get_include
from ember_core.autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from ember_core.creation import (
    arange,
    asarray,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from ember_core.device import Device, as_device, default_device, empty_cache, set_default_device
from ember_core.dispatch import fallback_policy, fallback_report, providers, reset_fallback_report
from ember_core.dispatch import trace as trace_dispatch
from ember_core.dtypes import (
    DType,
    bfloat16,
    bool_,
    can_cast,
    complex64,
    complex128,
    finfo,
    float16,
    float32,
    float64,
    iinfo,
    int8,
    int16,
    int32,
    int64,
    isdtype,
    result_type,
    uint8,
)
from ember_core.errors import (
    BackendUnavailableError,
    ConfigError,
    DeviceError,
    DTypeError,
    DTypeOverflowError,
    EmberError,
    IndexOutOfRangeError,
    KernelError,
    NotSerializableError,
    PluginError,
    RegistryError,
    SerializationError,
    ShapeError,
    UnsupportedOpError,
)
from ember_core.interop import from_dlpack
from ember_core.ops import ENTRIES as _ENTRIES
from ember_core.ops.composites import meshgrid
from ember_core.tensor import Tensor
from ember_core.views import broadcast_shapes, broadcast_to, expand_dims, moveaxis, permute_dims, squeeze

bool = bool_
e, inf, nan, pi = _math.e, _math.inf, _math.nan, _math.pi
newaxis = None

globals().update({name: fn for name, fn in _ENTRIES.items() if "." not in name})


def reshape(x: Tensor, /, shape: Any, *, copy: bool | None = None) -> Tensor:
    return x.reshape(shape, copy=copy)


def matrix_transpose(x: Tensor, /) -> Tensor:
    return x.mT


def broadcast_arrays(*arrays: Tensor) -> list[Tensor]:
    shape = broadcast_shapes(*(a.shape for a in arrays))
    return [broadcast_to(a, shape) for a in arrays]


def flip(x: Tensor, /, *, axis: Any = None) -> Tensor:
    """A new tensor, whatever x's layout (numpy's flip is a view: ember_core.views.flip_view)."""
    from ember_core.ops import call
    from ember_core.views import flip_view, normalize_axes

    return call("copy", flip_view(x, normalize_axes(axis, x.ndim)))


manual_seed = random.manual_seed
get_rng_state = random.get_rng_state
set_rng_state = random.set_rng_state


def set_num_threads(n: int) -> None:
    """Host threads for every plugin's kernels (one threading layer per plugin)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads needs a positive int, got {n!r}")
    plugins.MANAGER.broadcast("ember_set_num_threads", n=n)


def __array_namespace_info__() -> Any:
    from ember_core.info import Info

    return Info()


__array_api_version__ = "2023.12"
__version__ = "0.1.0"

_SUBPACKAGES = ("nn", "optim", "data")  # imported on first use: `import ember_core` stays lean


_LAZY_FUNCTIONS = {"save": "ember_core.serialization", "load": "ember_core.serialization"}  # ~20 ms of imports


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        import importlib

        return importlib.import_module(f"ember_core.{name}")
    if name in _LAZY_FUNCTIONS:
        import importlib

        return getattr(importlib.import_module(_LAZY_FUNCTIONS[name]), name)
    raise AttributeError(f"module 'ember_core' has no attribute {name!r}")
