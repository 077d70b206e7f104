"""Composites of the update ops in optim.toml, written in ember ops: the definition every native
kernel must reproduce bit for bit (see optim.toml).  A function here is named after its op."""

from __future__ import annotations

import math
from typing import Any, NamedTuple


class AdamCoefficients(NamedTuple):
    """The Python floats one Adam step multiplies and adds by (before rounding to the dtype): the
    composite's weak scalars, and what a native kernel must use to match it bit for bit."""

    beta1: float
    one_minus_beta1: float
    beta2: float
    one_minus_beta2: float
    bias2_scale: float  # 1 / sqrt(1 - beta2^step)
    eps: float
    step_size: float  # lr / (1 - beta1^step)
    decay: float  # weight_decay (L2), or 1 - lr * weight_decay (decoupled)


def adam_coefficients(*, lr: float, beta1: float, beta2: float, eps: float, step: int, weight_decay: float,
                      decoupled: bool) -> AdamCoefficients:
    return AdamCoefficients(beta1, 1.0 - beta1, beta2, 1.0 - beta2, 1.0 / math.sqrt(1.0 - beta2**step), eps,
                            lr / (1.0 - beta1**step), 1.0 - lr * weight_decay if decoupled else weight_decay)


def adam_step(param: Any, grad: Any, exp_avg: Any, exp_avg_sq: Any, /, *, lr: float, beta1: float, beta2: float,
              eps: float, step: int, weight_decay: float = 0.0, decoupled: bool = False,
              maximize: bool = False) -> Any:
    from ember_core.creation import copy_into
    from ember_core.ops import namespace as ops

    c = adam_coefficients(lr=lr, beta1=beta1, beta2=beta2, eps=eps, step=step, weight_decay=weight_decay,
                          decoupled=decoupled)
    g = ops.negative(grad) if maximize else grad
    if weight_decay and decoupled:
        copy_into(param, param * c.decay)
    elif weight_decay:
        g = g + param * c.decay
    copy_into(exp_avg, exp_avg * c.beta1 + g * c.one_minus_beta1)
    copy_into(exp_avg_sq, exp_avg_sq * c.beta2 + ops.square(g) * c.one_minus_beta2)
    denom = ops.sqrt(exp_avg_sq) * c.bias2_scale + c.eps
    copy_into(param, param - exp_avg / denom * c.step_size)
    return param


def sgd_step(param: Any, grad: Any, momentum_buffer: Any, /, *, lr: float, momentum: float, dampening: float = 0.0,
             weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False,
             first_step: bool = False) -> Any:
    from ember_core.creation import copy_into
    from ember_core.ops import namespace as ops

    g = ops.negative(grad) if maximize else grad
    if weight_decay:
        g = g + param * weight_decay
    if first_step:
        copy_into(momentum_buffer, g)
    else:
        copy_into(momentum_buffer, momentum_buffer * momentum + g * (1.0 - dampening))
    direction = g + momentum_buffer * momentum if nesterov else momentum_buffer
    copy_into(param, param - direction * lr)
    return param
