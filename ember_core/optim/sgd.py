"""Stochastic gradient descent with momentum, Nesterov momentum and L2 weight decay (PyTorch's
update rule, so the same hyperparameters give the same trajectory)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ember_core as em
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

    def _update(self, p: Any, group: dict[str, Any]) -> None:
        lr, momentum = group["lr"], group["momentum"]
        if momentum:  # one fused op per parameter (ember_core/ops/optim.toml)
            state = self.state.setdefault(p, {})
            first = state.get("momentum_buffer") is None
            if first:
                state["momentum_buffer"] = em.empty_like(p)
            em.sgd_step(p, p.grad, state["momentum_buffer"], lr=lr, momentum=momentum,
                        dampening=group["dampening"], weight_decay=group["weight_decay"],
                        nesterov=group["nesterov"], maximize=group["maximize"], first_step=first)
            return
        g = -p.grad if group["maximize"] else p.grad
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        p -= g * lr
