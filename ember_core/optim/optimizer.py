"""The ``Optimizer`` base: parameter groups with their hyperparameters, per-parameter state,
``zero_grad`` and ``state_dict``/``load_state_dict`` (PyTorch's layout, tensors by parameter index)."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from ember_core.autograd import no_grad
from ember_core.tensor import Tensor


class Optimizer:
    """Subclasses implement ``_update(param, group)``, one parameter's step with its group's
    hyperparameters and its ``self.state[param]``; ``step()`` runs it, under ``no_grad``, for every
    parameter that has a gradient (through ``_update_group``, which a subclass may batch)."""

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.state: dict[Tensor, dict[str, Any]] = {}
        self.param_groups: list[dict[str, Any]] = []
        groups = list(params)
        if not groups:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"{type(self).__name__} optimizes ember tensors, got {type(p).__name__}")
            if not p.requires_grad:
                raise ValueError(f"{type(self).__name__}: a parameter of shape {p.shape} does not require grad")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError(f"{type(self).__name__}: a parameter appears in more than one group")
        unknown = set(group) - set(self.defaults) - {"params"}
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown hyperparameters {sorted(unknown)} "
                            f"(known: {sorted(self.defaults)})")
        self.param_groups.append({**self.defaults, **group, "params": params})

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients (``None``: the next backward writes fresh ones, no zero-filling)."""
        from ember_core.nn.module import _clear_grad

        for group in self.param_groups:
            for p in group["params"]:
                _clear_grad(p, set_to_none)

    def step(self) -> None:
        with no_grad():
            for group in self.param_groups:
                self._update_group([p for p in group["params"] if p.grad is not None], group)

    def _update_group(self, params: list[Tensor], group: dict[str, Any]) -> None:
        """The step of a group's parameters that have gradients: one ``_update`` each, unless a
        subclass batches them (one update op over lists saves the per-call binding and checks)."""
        for p in params:
            self._update(p, group)

    def _update(self, p: Tensor, group: dict[str, Any]) -> None:
        raise NotImplementedError

    # ---- saving and loading ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """{"state": {param index: {name: value}}, "param_groups": [hyperparameters + param indices]}."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            groups.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": [index[id(p)] for p in group["params"]]})
        state = {index[id(p)]: {k: (v.detach() if isinstance(v, Tensor) else v) for k, v in s.items()}
                 for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(g["params"]) != len(own["params"]) for g, own in zip(groups, self.param_groups)):
            raise ValueError("load_state_dict: the saved parameter groups do not match this optimizer's")
        params = {i: p for g, own in zip(groups, self.param_groups) for i, p in zip(g["params"], own["params"])}
        self.state = {}
        for i, saved in state_dict["state"].items():
            p = params[int(i)]
            self.state[p] = {k: (v.to_device(p.device).astype(p.dtype, copy=True) if isinstance(v, Tensor)
                                 and v.dtype.kind in "fc" else copy.deepcopy(v)) for k, v in saved.items()}
        for g, own in zip(groups, self.param_groups):
            own.update({k: v for k, v in g.items() if k != "params"})
