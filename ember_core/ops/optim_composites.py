"""Composites of the update ops in optim.toml, written in ember ops: the definition every native
kernel must reproduce bit for bit (see optim.toml).  A function here is named after its op."""

from __future__ import annotations

import math
from typing import Any


def adam_step(param: Any, grad: Any, exp_avg: Any, exp_avg_sq: Any, /, *, lr: float, beta1: float, beta2: float,
              eps: float, step: int, weight_decay: float = 0.0, decoupled: bool = False,
              maximize: bool = False) -> Any:
    from ember_core.creation import copy_into
    from ember_core.ops import namespace as ops

    g = ops.negative(grad) if maximize else grad
    if weight_decay and decoupled:
        copy_into(param, param * (1.0 - lr * weight_decay))
    elif weight_decay:
        g = g + param * weight_decay
    copy_into(exp_avg, exp_avg * beta1 + g * (1.0 - beta1))
    copy_into(exp_avg_sq, exp_avg_sq * beta2 + ops.square(g) * (1.0 - beta2))
    denom = ops.sqrt(exp_avg_sq) * (1.0 / math.sqrt(1.0 - beta2**step)) + eps
    copy_into(param, param - exp_avg / denom * (lr / (1.0 - beta1**step)))
    return param
