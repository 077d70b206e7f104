"""Weight initialization in place, drawing from the tensor's device generator (``ember_core.random``),
so ``ember_core.manual_seed`` makes a model's initial weights reproducible on every backend.
The formulas and defaults are PyTorch's (``torch.nn.init``)."""

from __future__ import annotations

import math
from typing import Any

import ember_core as em
from ember_core.autograd import no_grad
from ember_core.tensor import Tensor

_GAINS = {"linear": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv3d": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3,
          "relu": math.sqrt(2.0), "selu": 3.0 / 4}


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The factor that keeps activations' variance steady through a nonlinearity."""
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity not in _GAINS:
        raise ValueError(f"unknown nonlinearity {nonlinearity!r}; known: {sorted([*_GAINS, 'leaky_relu'])}")
    return _GAINS[nonlinearity]


def fan_in_and_fan_out(t: Tensor) -> tuple[int, int]:
    """(in, out) connections per unit of a (out, in, *kernel) weight."""
    if t.ndim < 2:
        raise ValueError(f"fan in/out need a tensor with at least 2 dims, got shape {t.shape}")
    receptive = math.prod(t.shape[2:])
    return t.shape[1] * receptive, t.shape[0] * receptive


def _fill(t: Tensor, values: Tensor) -> Tensor:
    with no_grad():
        t[...] = values
    return t


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Tensor:
    return _fill(t, em.random_uniform(t.shape, a, b, dtype=t.dtype, device=t.device, generator=generator))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Tensor:
    return _fill(t, em.random_normal(t.shape, mean, std, dtype=t.dtype, device=t.device, generator=generator))


def constant_(t: Tensor, value: float) -> Tensor:
    return _fill(t, em.full(t.shape, value, dtype=t.dtype, device=t.device))


def zeros_(t: Tensor) -> Tensor:
    return constant_(t, 0.0)


def ones_(t: Tensor) -> Tensor:
    return constant_(t, 1.0)


def xavier_uniform_(t: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    fan_in, fan_out = fan_in_and_fan_out(t)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound, generator)


def xavier_normal_(t: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    fan_in, fan_out = fan_in_and_fan_out(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def _kaiming_std(t: Tensor, a: float, mode: str, nonlinearity: str) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = fan_in_and_fan_out(t)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan_in if mode == "fan_in" else fan_out)


def kaiming_uniform_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator: Any = None) -> Tensor:
    bound = math.sqrt(3.0) * _kaiming_std(t, a, mode, nonlinearity)
    return uniform_(t, -bound, bound, generator)


def kaiming_normal_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator: Any = None) -> Tensor:
    return normal_(t, 0.0, _kaiming_std(t, a, mode, nonlinearity), generator)
