"""Calls ember-cpu's C entry points on numpy arrays: the kernels' own tests use this to compare
each kernel with numpy without going through the core."""

from __future__ import annotations

import contextlib

import numpy as np
from ember_cpu._native import ffi, lib

DTYPE_CODES = {
    np.dtype(np.bool_): lib.EMBER_BOOL,
    np.dtype(np.int8): lib.EMBER_INT8,
    np.dtype(np.int16): lib.EMBER_INT16,
    np.dtype(np.int32): lib.EMBER_INT32,
    np.dtype(np.int64): lib.EMBER_INT64,
    np.dtype(np.uint8): lib.EMBER_UINT8,
    np.dtype(np.float16): lib.EMBER_FLOAT16,
    np.dtype(np.float32): lib.EMBER_FLOAT32,
    np.dtype(np.float64): lib.EMBER_FLOAT64,
    np.dtype(np.complex64): lib.EMBER_COMPLEX64,
    np.dtype(np.complex128): lib.EMBER_COMPLEX128,
}


def desc(arr: np.ndarray, dtype_code: int | None = None):
    """An ember_tensor describing `arr` in place (any strides, including negative and zero).

    bfloat16 has no numpy dtype: pass a uint16 array of bf16 bits with dtype_code=EMBER_BFLOAT16.
    The descriptor's `data` points at the lowest address `arr` touches; keep `arr` alive while the
    descriptor is used.
    """
    itemsize = arr.dtype.itemsize
    strides = [s // itemsize for s in arr.strides]
    # element offset of arr[0,...,0] from the lowest address the view reaches
    low = sum((n - 1) * s for n, s in zip(arr.shape, strides) if s < 0 and n > 0)
    t = ffi.new("ember_tensor *")
    t.struct_size = ffi.sizeof("ember_tensor")
    t.dtype = DTYPE_CODES[arr.dtype] if dtype_code is None else dtype_code
    t.ndim = arr.ndim
    base = arr.__array_interface__["data"][0] + low * itemsize
    t.data = ffi.cast("void *", base)
    t.offset = -low
    for d, (n, s) in enumerate(zip(arr.shape, strides)):
        t.shape[d] = n
        t.strides[d] = s
    return t


def check(status: int) -> None:
    assert status == lib.EMBER_OK, f"kernel returned status {status}"


@contextlib.contextmanager
def num_threads(n: int):
    """Run a block with the kernels' thread count set to n."""
    old = lib.ember_cpu_get_num_threads()
    lib.ember_cpu_set_num_threads(n)
    try:
        yield
    finally:
        lib.ember_cpu_set_num_threads(old)
