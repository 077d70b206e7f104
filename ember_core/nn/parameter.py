"""``Parameter``: marks a tensor as learnable, so that a Module registers it when it is assigned as
an attribute.

A parameter stays a plain ``Tensor``: the core's hot paths (dispatch plans, autograd recording)
test ``x.__class__ is Tensor``, and a subclass would send every op on a weight down the slow path.
``Parameter(t)`` therefore returns a leaf tensor sharing t's storage, remembered (weakly) as a
parameter, and ``isinstance(x, Parameter)`` asks that registry.
"""

from __future__ import annotations

import weakref
from typing import Any

from ember_core.tensor import Tensor

_PARAMETERS: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()


class _ParameterType(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return _PARAMETERS.get(id(obj)) is obj


class Parameter(metaclass=_ParameterType):
    """``Parameter(data, requires_grad=True)``: a leaf tensor sharing data's storage, listed by
    ``Module.parameters()``."""

    def __new__(cls, data: Tensor, requires_grad: bool = True) -> Tensor:  # type: ignore[misc]
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter needs an ember tensor, got {type(data).__name__}; "
                            f"wrap data with ember_core.asarray(...)")
        param = data.detach()
        param.requires_grad_(requires_grad)
        return remember(param)


def remember(t: Tensor) -> Tensor:
    """List ``t`` as a parameter (``Parameter(...)`` does; so do copy.copy and copy.deepcopy of one)."""
    _PARAMETERS[id(t)] = t
    return t
