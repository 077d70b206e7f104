"""Stochastic gradient descent with momentum, Nesterov momentum and L2 weight decay (PyTorch's
update rule, so the same hyperparameters give the same trajectory)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ember_core.autograd import no_grad
from ember_core.optim.optimizer import Optimizer


class SGD(Optimizer):
    """g = grad + weight_decay * p;  b = momentum * b + (1 - dampening) * g  (b = g at the first step);
    p -= lr * (g + momentum * b if nesterov else b), or lr * g without momentum."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False) -> None:
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD needs lr, momentum and weight_decay >= 0, got {lr}, {momentum}, {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening = 0")
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize})

    def step(self) -> None:
        with no_grad():
            for group in self.param_groups:
                lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    if group["maximize"]:
                        g = -g
                    if group["weight_decay"]:
                        g = g + p * group["weight_decay"]
                    if momentum:
                        state = self.state.setdefault(p, {})
                        buf = state.get("momentum_buffer")
                        if buf is None:
                            buf = g.clone()
                        else:
                            buf = buf * momentum + (g if dampening == 0 else g * (1 - dampening))
                        state["momentum_buffer"] = buf
                        g = g + buf * momentum if group["nesterov"] else buf
                    p -= g * lr
