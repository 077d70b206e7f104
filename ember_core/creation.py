"""Creation functions and data movement: host <-> device, device <-> device, writes into views."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember_core import dtypes as dt
from ember_core import transfer
from ember_core.device import Device, as_device, default_device
from ember_core.errors import DeviceError, DTypeError, ShapeError
from ember_core.ops import call
from ember_core.ops.families import empty as _empty
from ember_core.tensor import Storage, Tensor, contiguous_strides
from ember_core.views import as_shape, broadcast_to, check_writable


def _device(device: Any) -> Device:
    return default_device() if device is None else as_device(device)


def empty(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return _empty(as_shape(shape), dt.default_float if dtype is None else dt.as_dtype(dtype), _device(device))


def full(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return call("full", shape, fill_value, dtype=dtype, device=device)


def zeros(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    dtype = dt.default_float if dtype is None else dt.as_dtype(dtype)
    return full(shape, False if dtype is dt.bool_ else 0, dtype=dtype, device=device)


def ones(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    dtype = dt.default_float if dtype is None else dt.as_dtype(dtype)
    return full(shape, True if dtype is dt.bool_ else 1, dtype=dtype, device=device)


def _like(x: Tensor, dtype: Any, device: Any) -> tuple[dt.DType, Device]:
    return (x.dtype if dtype is None else dt.as_dtype(dtype)), (x.device if device is None else as_device(device))


def empty_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    dtype, device = _like(x, dtype, device)
    return empty(x.shape, dtype=dtype, device=device)


def zeros_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    dtype, device = _like(x, dtype, device)
    return zeros(x.shape, dtype=dtype, device=device)


def ones_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    dtype, device = _like(x, dtype, device)
    return ones(x.shape, dtype=dtype, device=device)


def full_like(x: Tensor, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    dtype, device = _like(x, dtype, device)
    return full(x.shape, fill_value, dtype=dtype, device=device)


# ---- host data -> tensors -------------------------------------------------------------------------

def _host_array(obj: Any, dtype: dt.DType | None) -> tuple[np.ndarray, dt.DType]:
    """A C-contiguous numpy array of obj's data in the target dtype (bfloat16: in float64, for the
    device's conversion kernel to round once)."""
    is_array = isinstance(obj, np.ndarray) or hasattr(obj, "__array_interface__")
    try:
        arr = np.asarray(obj)
    except (ValueError, TypeError) as exc:
        raise ShapeError(f"asarray: cannot build a tensor from {type(obj).__name__}: {exc}") from None
    if is_array:
        dtype = dt.from_numpy_dtype(arr.dtype) if dtype is None else dtype
    else:
        arr, dtype = _python_numbers(obj, arr, dtype)
    if arr.dtype.kind == "c":
        dt.check_cast(dt.from_numpy_dtype(arr.dtype), dtype, "asarray")
    if dtype is dt.bfloat16:
        return np.asarray(arr, dtype=np.float64, order="C"), dtype
    if arr.dtype.kind == "f" and dtype.kind in "iu":  # numpy's cast of NaN / out-of-range is undefined
        arr = dt.float_to_integer(arr, dtype)
    return np.asarray(arr, dtype=dtype.numpy, order="C"), dtype  # (ascontiguousarray makes 0-d 1-d)


def _python_numbers(obj: Any, arr: np.ndarray, dtype: dt.DType | None) -> tuple[np.ndarray, dt.DType]:
    """Python scalars and nested lists (numpy's reading of them in ``arr``) and their dtype: ember's
    defaults (int64, float32, complex64), not numpy's, and integers that fit the integer dtype they
    are stored in.  numpy wraps 300 into uint8 as 44, and holds ints beyond int64 as uint64, as
    objects, or, mixed with negative ints, as float64 ([-1, 2**63]): those are read again here."""
    if arr.dtype == object or arr.dtype.kind == "u" or (arr.dtype.kind == "f" and np.any(np.abs(arr) >= 2.0**63)):
        arr = np.asarray(obj, dtype=object)  # the Python numbers themselves
        try:
            rank = max((dt.scalar_kind_rank(v.item() if isinstance(v, np.generic) else v) for v in arr.flat),
                       default=0)
        except DTypeError:
            raise DTypeError(f"asarray: {type(obj).__name__} holds non-numeric data") from None
        if rank >= 2:  # floats (or complex numbers) beside big ints: the floating kind holds them all
            arr = arr.astype(np.complex128 if rank == 3 else np.float64)
    if dtype is None:
        dtype = _python_default(arr.dtype)
    if arr.dtype.kind in "iuO" and dtype.kind in "iu" and arr.size:
        for value in (arr.min(), arr.max()):
            dt.check_fits(int(value), dtype, "asarray")
    return arr, dtype


def _python_default(np_dtype: np.dtype) -> dt.DType:
    """Python scalars and lists take ember's defaults (float32, complex64), not numpy's."""
    if np_dtype.kind == "f":
        return dt.default_float
    if np_dtype.kind == "c":
        return dt.default_complex
    if np_dtype.kind in "iuO":  # (objects: Python ints beyond int64, refused as they are checked)
        return dt.default_int
    return dt.from_numpy_dtype(np_dtype)


def _upload(arr: np.ndarray, dtype: dt.DType, device: Device) -> Tensor:
    if dtype is dt.bfloat16 and arr.dtype != np.uint16:  # numpy has no bfloat16: convert on the device
        return _upload(arr, dt.float64, device).astype(dtype)
    return transfer.upload(arr, dtype, device)


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: bool | None = None) -> Tensor:
    """A tensor from a tensor, numpy array, buffer, Python scalar or nested sequence."""
    dtype = None if dtype is None else dt.as_dtype(dtype)
    if isinstance(obj, Tensor):
        out = obj if device is None else obj.to_device(device)
        if dtype is not None and dtype is not out.dtype:
            if copy is False:
                raise DTypeError(f"asarray: converting {out.dtype.name} to {dtype.name} needs a copy, copy=False")
            return out.astype(dtype)
        return call("copy", out) if copy and out is obj else out
    if copy is False:
        raise DeviceError("asarray(copy=False) of host data: use from_numpy() for a zero-copy host tensor")
    arr, dtype = _host_array(obj, dtype)
    return _upload(arr, dtype, _device(device))


def from_numpy(arr: np.ndarray) -> Tensor:
    """A cpu tensor sharing memory with a C-contiguous, aligned numpy array (copied otherwise)."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"from_numpy needs a numpy.ndarray, got {type(arr).__name__}")
    dtype = dt.from_numpy_dtype(arr.dtype)
    device = Device("cpu")
    wrap = device.backend.hooks.get("ember_wrap_host_memory")
    if wrap is not None and arr.flags.c_contiguous and arr.flags.aligned and arr.flags.writeable:
        handle = wrap(device, arr)
        if handle is not None:
            storage = Storage(device, arr.nbytes, handle=handle)
            return Tensor._make(storage, arr.shape, contiguous_strides(arr.shape), 0, dtype)
    return _upload(np.asarray(arr, order="C"), dtype, device)


def arange(start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None) -> Tensor:
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    if dtype is None:
        dtype = dt.default_float if any(isinstance(v, float) for v in (start, stop, step)) else dt.default_int
    dtype = dt.as_dtype(dtype)
    n = as_shape(max(0, math.ceil((stop - start) / step)))[0]  # (refused beyond int64, where numpy's arange wraps)
    values = start + step * np.arange(n, dtype=np.float64 if dtype.kind in "fc" else np.int64)
    return asarray(values, dtype=dtype, device=device)


def linspace(start: Any, stop: Any, /, num: int, *, dtype: Any = None, device: Any = None,
             endpoint: bool = True) -> Tensor:
    if num < 0:
        raise ValueError(f"linspace: num must be >= 0, got {num}")
    dtype = dt.as_dtype(dtype) if dtype is not None else (
        dt.default_complex if isinstance(start, complex) or isinstance(stop, complex) else dt.default_float)
    return asarray(np.linspace(start, stop, num, endpoint=endpoint), dtype=dtype, device=device)


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: Any = None, device: Any = None) -> Tensor:
    dtype = dt.default_float if dtype is None else dt.as_dtype(dtype)
    return asarray(np.eye(n_rows, n_cols, k=k, dtype=np.float64), dtype=dtype, device=device)


# ---- moving and writing -------------------------------------------------------------------------

def copy_to_device(x: Tensor, device: Device) -> Tensor:
    """A contiguous copy of x on another device: device to device when both share a type, else
    through host memory with the transfer hooks alone (see ember_core.transfer)."""
    if device.type == x.device.type and x._contig:
        out = _empty(x.shape, x.dtype, device)
        if x.nbytes:
            device.backend.hooks["ember_copy_on_device"](device, out.handle, 0, x.device, x.handle,
                                                          x.offset * x.itemsize, x.nbytes)
        return out
    return transfer.upload(transfer.to_numpy_raw(x), x.dtype, device)


def copy_into(dst: Tensor, src: Tensor) -> None:
    """Write src (broadcast to dst's shape, converted to dst's dtype) into the view dst.

    Every in-place write goes through here, so this is where autograd rebases the history of
    the written storage (``autograd.storage_grad``)."""
    from ember_core.autograd import storage_grad

    recorded = storage_grad.needs_rebase(dst, src)
    if recorded:
        storage_grad.check_leaf(dst)
    check_same_device(dst, src)
    check_writable(dst)
    dt.check_cast(src.dtype, dst.dtype, "writing into a tensor")
    if src._storage is dst._storage and _may_overlap(src, dst):
        src = call("copy", src)  # x[1:] = x[:-1] must read the old values, not the ones being written
    src = broadcast_to(src, dst.shape)
    from ember_core.ops.families import resolve, run
    from ember_core.ops.registry import REGISTRY

    schema = REGISTRY["copy"]
    run(schema, resolve(schema, dst.device, src.dtype, None), (dst,), (src,), {})
    dst._storage.version += 1
    if recorded:
        storage_grad.rebase(dst, src)


def check_same_device(dst: Tensor, src: Tensor) -> None:
    """A write into a tensor (x[...] = y, copy_into) takes a tensor of its own device: ember never
    copies between devices implicitly, as no op does."""
    if src.device is not dst.device:
        raise DeviceError(f"writing a tensor on {src.device} into one on {dst.device}: move it with "
                          f".to_device({str(dst.device)!r}) first (ember never copies between devices implicitly)")


def _may_overlap(a: Tensor, b: Tensor) -> bool:
    if not a._numel or not b._numel:
        return False
    (alo, ahi), (blo, bhi) = transfer.extent(a), transfer.extent(b)
    return alo <= bhi and blo <= ahi


def write_inplace(x: Tensor, result: Tensor, op: str) -> None:
    """``x op= y``: the result must keep x's shape and must not need a wider dtype kind."""
    if dt.promote_types(result.dtype, x.dtype) is not x.dtype and result.dtype.kind != x.dtype.kind:
        raise DTypeError(f"in-place {op} would store a {result.dtype.name} result in {x.dtype.name} tensor; "
                         f"use the out-of-place form")
    if result.shape != x.shape:
        raise ShapeError(f"in-place {op}: the result's shape {result.shape} differs from the tensor's {x.shape}")
    copy_into(x, result)
