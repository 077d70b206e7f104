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

    def _update_group(self, params: list[Any], group: dict[str, Any]) -> None:
        if not group["momentum"]:
            super()._update_group(params, group)
            return
        # one fused sgd_step (ember_core/ops/optim.toml) for the parameters with a momentum buffer,
        # one for those taking their first step
        by_first: dict[bool, list[tuple[Any, Any]]] = {}
        for p in params:
            state = self.state.setdefault(p, {})
            first = state.get("momentum_buffer") is None
            if first:
                state["momentum_buffer"] = em.empty_like(p)
            by_first.setdefault(first, []).append((p, state["momentum_buffer"]))
        for first, members in by_first.items():
            em.sgd_step([p for p, _ in members], [p.grad for p, _ in members], [b for _, b in members],
                        lr=group["lr"], momentum=group["momentum"], dampening=group["dampening"],
                        weight_decay=group["weight_decay"], nesterov=group["nesterov"], maximize=group["maximize"],
                        first_step=first)

    def _update(self, p: Any, group: dict[str, Any]) -> None:  # without momentum: p -= lr * g
        lr = group["lr"]
        g = -p.grad if group["maximize"] else p.grad
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        p -= g * lr
