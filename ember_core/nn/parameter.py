"""``Parameter``: a tensor that a Module registers as learnable when it is assigned as an attribute."""

from __future__ import annotations

from ember_core.tensor import Tensor


class Parameter(Tensor):
    """A leaf tensor that requires grad and is listed by ``Module.parameters()``.

    It shares storage with the tensor it was made from (as ``torch.nn.Parameter`` does); ops on it
    return plain tensors.
    """

    __slots__ = ()

    def __new__(cls, data: Tensor, requires_grad: bool = True) -> Parameter:
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter needs an ember tensor, got {type(data).__name__}; "
                            f"wrap data with ember_core.asarray(...)")
        param = data.detach()
        param.__class__ = cls
        param.requires_grad_(requires_grad)
        return param  # type: ignore[return-value]

    def __init__(self, data: Tensor, requires_grad: bool = True) -> None:
        pass  # everything happened in __new__ (Tensor.__init__ forbids direct construction)

    def __repr__(self) -> str:
        return f"Parameter containing:\n{super().__repr__()}"
