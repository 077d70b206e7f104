"""Exchange with other array libraries: ``from_dlpack`` (Array API 2023.12).

Host memory only: the producer's ``__dlpack_device__`` must be the CPU (or host-visible memory
numpy can read).  numpy consumes the capsule (``numpy.from_dlpack``) and ``from_numpy`` wraps the
result, so a C-contiguous, aligned, writeable producer buffer is shared, not copied; the tensor
keeps the producer's memory alive.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_core.device import as_device
from ember_core.errors import DeviceError, DTypeError

# DLPack device types whose memory the host can address: CPU, CUDA host (pinned), ROCm host,
# CUDA managed.  numpy accepts exactly these.
_HOST_DEVICE_TYPES = frozenset({1, 3, 11, 13})


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Any:
    """from_dlpack(x, /, *, device=None, copy=None) -> Tensor

    A tensor holding the data of ``x``, any object with ``__dlpack__`` and ``__dlpack_device__``
    in host memory (numpy arrays, CPU torch tensors, ember tensors...).

    * ``copy=None``: memory is shared when the producer's buffer is C-contiguous, aligned and
      writeable, and copied otherwise (strided or read-only producers).
    * ``copy=True``: always a fresh copy.
    * ``copy=False``: never a copy; raises ``BufferError`` where one would be needed.
    * ``device``: where the result lives; the data is imported on the cpu, then moved (a copy,
      so not with ``copy=False``).  An ember tensor keeps its own device when device is None.

    dtypes numpy cannot import through DLPack (bfloat16 from torch, for one) or ember lacks
    (uint32...) raise DTypeError; convert them in the producer first.
    """
    from ember_core.creation import from_numpy
    from ember_core.tensor import Tensor

    if copy not in (None, True, False):
        raise TypeError(f"from_dlpack: copy must be True, False or None, got {copy!r}")
    target = None if device is None else as_device(device)
    if isinstance(x, Tensor):  # our own tensors: a view of the same storage, on its own device
        out = x._view(x.shape, x.strides, x.offset)
        if target is not None and target is not x.device:
            if copy is False:
                raise BufferError(f"from_dlpack: moving {x.device} memory to {target} needs a copy, copy=False")
            return x.to_device(target)
        return _copy(out) if copy else out
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"from_dlpack needs an object with __dlpack__ (a numpy array, a torch tensor...), "
                        f"got {type(x).__name__}")
    if hasattr(x, "__dlpack_device__"):
        kind, index = x.__dlpack_device__()
        if int(kind) not in _HOST_DEVICE_TYPES:
            raise DeviceError(f"from_dlpack: {type(x).__name__} lives in DLPack device ({int(kind)}, {int(index)}), "
                              f"not in host memory; move it to the CPU in its own library first")
    try:
        arr = np.from_dlpack(x)
    except (BufferError, RuntimeError, TypeError) as exc:
        if "dtype" not in str(exc).lower():
            raise
        raise DTypeError(f"from_dlpack: the {type(x).__name__}'s dtype cannot be imported through numpy ({exc}); "
                         f"convert it in its own library first (bfloat16: to float32)") from exc
    if copy:
        arr = np.array(arr, copy=True, order="C")
    elif copy is False and not (arr.flags.c_contiguous and arr.flags.aligned and arr.flags.writeable):
        why = "not C-contiguous" if not arr.flags.c_contiguous else "read-only" if not arr.flags.writeable else \
            "not aligned"
        raise BufferError(f"from_dlpack: the producer's buffer is {why}, so sharing it needs a copy, and copy=False")
    out = from_numpy(arr)
    if target is not None and target is not out.device:
        if copy is False:
            raise BufferError(f"from_dlpack: moving host memory to {target} needs a copy, and copy=False")
        return out.to_device(target)
    return out


def _copy(x: Any) -> Any:
    from ember_core.ops import call

    return call("copy", x)
