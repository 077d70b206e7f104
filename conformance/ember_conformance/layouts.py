"""Inputs in every memory layout a kernel must handle, built on any device.

``place(values, dtype, layout, device)`` is also what reproducers call, so a failure report
rebuilds exactly the tensor the case used.
"""

from __future__ import annotations

from typing import Any

import numpy as np

LAYOUTS = ("contiguous", "transposed", "strided", "flipped", "offset")


def _garbage(kind: str) -> Any:
    """A value planted between strided elements: a kernel that reads the gaps gives wrong results."""
    return True if kind == "b" else 77 if kind in "iu" else 1234.5


def place(values: Any, dtype: str, layout: str = "contiguous", device: str = "cpu") -> Any:
    """An ember tensor of ``dtype`` on ``device`` whose logical values are ``values``, laid out as:

    * ``contiguous``: a plain copy;
    * ``transposed``: ``.mT`` of a contiguous tensor holding the swapped data (ndim >= 2);
    * ``strided``: every other element of a tensor twice as large, with garbage in the gaps;
    * ``flipped``: negative strides (``x[::-1]``, and along the last axis too when ndim >= 2);
    * ``offset``: a view starting one element into its storage.

    A layout that does not apply to the shape (0-d, 1-d transposes) falls back to contiguous.
    """
    import ember_core as em

    arr = np.asarray(values)
    ndim = arr.ndim
    if ndim == 0 or (layout == "transposed" and ndim < 2):
        layout = "contiguous"
    if layout == "contiguous":
        return em.asarray(arr, dtype=dtype, device=device)
    if layout == "transposed":
        return em.asarray(np.ascontiguousarray(np.swapaxes(arr, -1, -2)), dtype=dtype, device=device).mT
    if layout == "strided":
        big = np.full(tuple(2 * n for n in arr.shape), _garbage(arr.dtype.kind), dtype=arr.dtype)
        big[(slice(None, None, 2),) * ndim] = arr
        return em.asarray(big, dtype=dtype, device=device)[(slice(None, None, 2),) * ndim]
    if layout == "flipped":
        axes = (0, ndim - 1) if ndim >= 2 else (0,)
        base = em.asarray(np.ascontiguousarray(np.flip(arr, axis=axes)), dtype=dtype, device=device)
        return base[tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(ndim))]
    if layout == "offset":
        flat = np.concatenate([np.full(1, _garbage(arr.dtype.kind), dtype=arr.dtype), arr.reshape(-1)])
        return em.asarray(flat, dtype=dtype, device=device)[1:].reshape(arr.shape)
    raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")


def to_numpy(t: Any) -> np.ndarray:
    """A tensor's values on the host (bfloat16 widened to float32), read through the core's transfers."""
    if t.ndim == 0:
        return np.asarray(t.reshape(1)).reshape(())
    return np.asarray(t)
