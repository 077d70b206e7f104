"""Adam (L2 weight decay folded into the gradient) and AdamW (decoupled weight decay), with
PyTorch's bias corrections and optional AMSGrad."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import ember_core as em
from ember_core.optim.optimizer import Optimizer


class Adam(Optimizer):
    """m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)."""

    _decoupled = False

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, maximize: bool = False) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0:
            raise ValueError(f"{type(self).__name__} needs lr, eps and weight_decay >= 0, got {lr}, {eps}, "
                             f"{weight_decay}")
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise ValueError(f"{type(self).__name__}: betas must be two numbers in [0, 1), got {betas!r}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad, "maximize": maximize})

    def _state(self, p: Any, group: dict[str, Any]) -> dict[str, Any]:
        """p's state with its step count advanced (created zero on the first step)."""
        state = self.state.setdefault(p, {})
        if not state:
            state.update(step=0, exp_avg=em.zeros_like(p), exp_avg_sq=em.zeros_like(p))
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = em.zeros_like(p)
        state["step"] += 1
        return state

    def _update_group(self, params: list[Any], group: dict[str, Any]) -> None:
        if group["amsgrad"]:
            super()._update_group(params, group)
            return
        # one fused adam_step (ember_core/ops/optim.toml) per step count: every parameter of the
        # group unless some missed steps (no gradient then)
        by_step: dict[int, list[tuple[Any, dict[str, Any]]]] = {}
        for p in params:
            state = self._state(p, group)
            by_step.setdefault(state["step"], []).append((p, state))
        (beta1, beta2) = group["betas"]
        for t, members in by_step.items():
            em.adam_step([p for p, _ in members], [p.grad for p, _ in members], [s["exp_avg"] for _, s in members],
                         [s["exp_avg_sq"] for _, s in members], lr=group["lr"], beta1=beta1, beta2=beta2,
                         eps=group["eps"], step=t, weight_decay=group["weight_decay"], decoupled=self._decoupled,
                         maximize=group["maximize"])

    def _update(self, p: Any, group: dict[str, Any]) -> None:  # AMSGrad, composed of elementwise ops
        lr, (beta1, beta2), decay = group["lr"], group["betas"], group["weight_decay"]
        state = self._state(p, group)
        t = state["step"]
        g = -p.grad if group["maximize"] else p.grad
        if decay and self._decoupled:
            p *= 1.0 - lr * decay
        elif decay:
            g = g + p * decay
        state["exp_avg"] = m = state["exp_avg"] * beta1 + g * (1.0 - beta1)
        state["exp_avg_sq"] = v = state["exp_avg_sq"] * beta2 + em.square(g) * (1.0 - beta2)
        state["max_exp_avg_sq"] = v = em.maximum(state["max_exp_avg_sq"], v)
        denom = em.sqrt(v) * (1.0 / math.sqrt(1.0 - beta2**t)) + group["eps"]
        p -= m / denom * (lr / (1.0 - beta1**t))


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * weight_decay before the Adam step."""

    _decoupled = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, maximize: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)
