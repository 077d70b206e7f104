"""pickle support of Tensor and Storage: bytes through the host, rebuilt under em.load's device policy.

A Storage pickles as (device name, bytes); a tensor as its storage plus its layout.  pickle memoizes the
storage object, so tensors sharing memory (views, tied weights) come back sharing one storage.
"""

from __future__ import annotations

import sys
from typing import Any

from ember_core import dtypes as _dt
from ember_core.errors import NotSerializableError
from ember_core.serialization.placement import storage_bytes, storage_from_bytes, target_device
from ember_core.tensor import Storage, Tensor


def reduce_storage(storage: Storage) -> tuple[Any, ...]:
    return rebuild_storage, (str(storage.device), storage_bytes(storage).tobytes())


def rebuild_storage(device: str, data: bytes) -> Storage:
    return storage_from_bytes(bytearray(data), target_device(device, None), alias=True)


def reduce_tensor(t: Tensor) -> tuple[Any, ...]:
    if t.grad_fn is not None:
        raise NotSerializableError(
            f"cannot pickle a tensor computed by a recorded op (grad_fn={t.grad_fn!r}): its graph cannot be "
            f"stored; pickle t.detach() instead")
    parameters = sys.modules.get("ember_core.nn.parameter")
    is_parameter = parameters is not None and isinstance(t, parameters.Parameter)
    return rebuild_tensor, (t._storage, t._shape, t._strides, t._offset, t._dtype.name, t._requires_grad,
                            is_parameter, t.grad)


def rebuild_tensor(storage: Storage, shape: tuple[int, ...], strides: tuple[int, ...], offset: int, dtype: str,
                   requires_grad: bool, is_parameter: bool, grad: Tensor | None) -> Tensor:
    t = Tensor._make(storage, shape, strides, offset, _dt.BY_NAME[dtype])
    t._requires_grad = requires_grad
    if grad is not None:
        t.grad = grad.to_device(t.device)
    if is_parameter:
        from ember_core.nn import parameter

        parameter.remember(t)
    return t
