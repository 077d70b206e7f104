"""Reverse-mode automatic differentiation.

Every registry op records a node when one of its inputs requires grad; the node evaluates the
op's derivative formulas (declared in the op's TOML entry, written in ember ops) during
``backward``.  So every backend that runs the forward ops gets gradients with no code of its own.

- ``tensor.backward(gradient=None, retain_graph=None, create_graph=False)``, ``.grad`` on leaves;
- ``grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused)``;
- ``no_grad``, ``enable_grad``, ``inference_mode``, ``set_grad_enabled``; ``is_recording`` (for
  providers: whether the running op call is being recorded);
- ``gradcheck`` / ``gradgradcheck`` (finite differences in float64);
- ``functional``: ``vjp``, ``jvp``, ``jacobian``, ``hessian``.
"""

from __future__ import annotations

from typing import Any

from ember_core.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    is_recording,
    no_grad,
    set_grad_enabled,
)

_LAZY = {  # loaded on first use: these modules import the op registry, which imports this package
    "backward": "engine", "grad": "engine", "gradcheck": "checks", "gradgradcheck": "checks",
    "GradcheckError": "checks", "functional": None, "Node": "graph",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'ember_core.autograd' has no attribute {name!r}")
    import importlib

    module = _LAZY[name]
    if module is None:
        return importlib.import_module(f"ember_core.autograd.{name}")
    return getattr(importlib.import_module(f"ember_core.autograd.{module}"), name)


__all__ = ["GradcheckError", "Node", "backward", "enable_grad", "functional", "grad", "gradcheck", "gradgradcheck",
           "inference_mode", "is_grad_enabled", "is_inference_mode_enabled", "is_recording",
           "no_grad", "set_grad_enabled"]
