"""Moving tensor data between devices with nothing but the backends' transfer hooks.

The CPU fallback, ``.to_device()``, printing and ``.numpy()`` go through here, so they work on a
device that implements no kernel at all (not even ``copy``): a strided view on such a device is
read or written by moving the bytes of the storage span it covers and doing the strided part
on the host.
"""

from __future__ import annotations

import numpy as np

from ember_core import dtypes as dt
from ember_core.device import Device
from ember_core.tensor import Storage, Tensor, span

HOST = Device("cpu")


def extent(t: Tensor) -> tuple[int, int]:
    """First and last element offsets a view touches in its storage."""
    return span(t._shape, t._strides, t._offset)


def _raw_dtype(dtype: dt.DType) -> np.dtype:
    return np.dtype(np.uint16) if dtype is dt.bfloat16 else dtype.numpy


def _download(t: Tensor, lo: int, count: int) -> np.ndarray:
    """`count` elements of t's storage starting at element `lo`, as raw numpy data."""
    arr = np.empty(count, dtype=_raw_dtype(t._dtype))
    if count:
        t._device.backend.hooks["ember_copy_to_host"](
            t._device, t._storage.handle, lo * t.itemsize, memoryview(arr).cast("B"))
    return arr


def _host_tensor(arr: np.ndarray, dtype: dt.DType, shape: tuple[int, ...], strides: tuple[int, ...],
                 offset: int) -> Tensor:
    """A host view over a numpy buffer (the buffer is aliased when the host backend allows it)."""
    wrap = HOST.backend.hooks.get("ember_wrap_host_memory")
    handle = wrap(HOST, arr) if wrap is not None else None
    storage = Storage(HOST, arr.nbytes, handle=handle)
    if handle is None:
        HOST.backend.hooks["ember_copy_from_host"](HOST, storage.handle, 0, memoryview(arr).cast("B"))
    return Tensor._make(storage, shape, strides, offset, dtype)


def host_view(t: Tensor) -> Tensor:
    """t's values as a tensor in host memory: t itself on the host, else a view over its span."""
    if t._device is HOST:
        return t
    lo, hi = extent(t)
    count = hi - lo + 1 if t._numel else 0
    return _host_tensor(_download(t, lo, count), t._dtype, t._shape, t._strides, t._offset - lo)


def to_numpy_raw(t: Tensor) -> np.ndarray:
    """A C-ordered numpy copy of t's values (bfloat16 as its uint16 bit patterns)."""
    if t._device is not HOST and t._contig:
        return _download(t, t._offset, t._numel).reshape(t._shape)
    src = host_view(t)
    if not src._contig:
        src = src.contiguous()  # on the host: ember-cpu's copy kernel
    return _download(src, src._offset, src._numel).reshape(src._shape)


def upload(arr: np.ndarray, dtype: dt.DType, device: Device) -> Tensor:
    """A new contiguous tensor on `device` holding the raw C-ordered numpy data `arr`."""
    from ember_core.ops.families import empty

    out = empty(arr.shape, dtype, device)
    if arr.size:
        device.backend.hooks["ember_copy_from_host"](device, out.handle, 0,
                                                     memoryview(np.ascontiguousarray(arr).reshape(-1)).cast("B"))
    return out


def write_from_host(dst: Tensor, host: Tensor) -> None:
    """Write the host tensor `host` (dst's shape and dtype) into the device view `dst`."""
    device = dst._device
    put = device.backend.hooks["ember_copy_from_host"]
    if dst._contig:
        data = to_numpy_raw(host)
        if data.size:
            put(device, dst._storage.handle, dst._offset * dst.itemsize, memoryview(data.reshape(-1)).cast("B"))
        return
    lo, hi = extent(dst)  # read-modify-write the span the view covers
    span = _download(dst, lo, hi - lo + 1)
    staging = _host_tensor(span, dst._dtype, dst._shape, dst._strides, dst._offset - lo)
    from ember_core.creation import copy_into

    copy_into(staging, host)
    if not HOST.backend.hooks.get("ember_wrap_host_memory"):
        span = _download(staging, 0, span.size)
    put(device, dst._storage.handle, lo * dst.itemsize, memoryview(span).cast("B"))
