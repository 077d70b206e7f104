"""The driver binding: cffi in ABI mode (``ffi.dlopen``, no compiler), one cdef in neutral C types
whose function names come from the vendor table, every call checked.

Nothing here runs at import: ``open_driver`` is called by the runtime when a device is first asked
for, never by ``ember_plugin_info`` or ``ember_kernels``.  Symbols are bound after the driver
version is known, so an old driver is reported as too old rather than as a missing symbol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cffi

from ember_gpu.errors import DeviceLostError, DriverError, GpuError, GpuOutOfMemoryError
from ember_gpu.vendor import Vendor

# Every function the runtime calls, by ember_gpu's name, with its parameters in neutral C types: a
# status is an int, a device an int (an ordinal's handle), a device pointer a uint64_t, and every
# other handle (context, stream, event, module, function, memory pool) an opaque void *.
SIGNATURES: dict[str, str] = {
    "init": "unsigned int flags",
    "driver_get_version": "int *version",
    "device_get_count": "int *count",
    "device_get": "int *device, int ordinal",
    "device_get_name": "char *name, int length, int device",
    "device_get_attribute": "int *value, int attribute, int device",
    "device_total_mem": "size_t *bytes, int device",
    "primary_ctx_retain": "void **context, int device",
    "primary_ctx_release": "int device",
    "ctx_set_current": "void *context",
    "mem_get_info": "size_t *free_bytes, size_t *total_bytes",
    "stream_create": "void **stream, unsigned int flags",
    "stream_destroy": "void *stream",
    "stream_synchronize": "void *stream",
    "stream_wait_event": "void *stream, void *event, unsigned int flags",
    "event_create": "void **event, unsigned int flags",
    "event_record": "void *event, void *stream",
    "event_synchronize": "void *event",
    "event_elapsed_time": "float *milliseconds, void *start, void *end",
    "event_destroy": "void *event",
    "device_get_default_mem_pool": "void **pool, int device",
    "mem_pool_set_attribute": "void *pool, int attribute, void *value",
    "mem_pool_get_attribute": "void *pool, int attribute, void *value",
    "mem_pool_trim_to": "void *pool, size_t keep_bytes",
    "mem_alloc_async": "uint64_t *pointer, size_t bytes, void *stream",
    "mem_free_async": "uint64_t pointer, void *stream",
    "mem_host_alloc": "void **pointer, size_t bytes, unsigned int flags",
    "mem_free_host": "void *pointer",
    "memcpy_htod_async": "uint64_t dst, const void *src, size_t bytes, void *stream",
    "memcpy_dtoh_async": "void *dst, uint64_t src, size_t bytes, void *stream",
    "memcpy_dtod_async": "uint64_t dst, uint64_t src, size_t bytes, void *stream",
    "memcpy_peer_async": "uint64_t dst, void *dst_context, uint64_t src, void *src_context, size_t bytes, "
                         "void *stream",
    "memset_d8_async": "uint64_t dst, unsigned char value, size_t count, void *stream",
    "module_load_data": "void **module, const void *image",
    "module_unload": "void *module",
    "module_get_function": "void **function, void *module, const char *name",
    "launch_kernel": "void *function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z, "
                     "unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared_bytes, "
                     "void *stream, void **params, void **extra",
    "get_error_name": "int status, const char **name",
    "get_error_string": "int status, const char **text",
}

# Where a vendor's function differs from the signature above (the table's flags say which applies):
# HIP's peer copy names devices by ordinal, and its error functions return the text.
PEER_BY_ORDINAL = "uint64_t dst, int dst_device, uint64_t src, int src_device, size_t bytes, void *stream"
TEXT_RETURNED = ("get_error_name", "get_error_string")

# What is resolved before the version check: the three functions every driver of any age exports.
BOOTSTRAP = ("init", "driver_get_version", "get_error_name")


class DriverUnavailable(Exception):
    """The driver cannot be used at all; ``str()`` is the reason shown to users."""


def cdef_for(vendor: Vendor) -> str:
    missing = sorted(set(SIGNATURES) - set(vendor.symbols))
    if missing:
        raise ValueError(f"vendor table {vendor.name!r} names no symbol for {missing}")
    declarations = []
    for name, params in SIGNATURES.items():
        if vendor.error_text_returned and name in TEXT_RETURNED:
            declarations.append(f"const char *{vendor.symbols[name]}(int status);")
            continue
        if vendor.peer_copy_by_ordinal and name == "memcpy_peer_async":
            params = PEER_BY_ORDINAL
        declarations.append(f"int {vendor.symbols[name]}({params});")
    return "\n".join(declarations)


class Driver:
    """The opened driver library (or a fake with the same symbols): checked calls by ember_gpu name."""

    def __init__(self, vendor: Vendor, lib: Any, ffi: cffi.FFI,
                 blas_opener: Callable[[Vendor], Any] | None = None) -> None:
        self.vendor = vendor
        self.lib = lib
        self.ffi = ffi
        self.blas_opener = blas_opener  # the BLAS that comes with this driver (a fake's fake), else None
        self.fn: dict[str, Callable[..., int]] = {}
        self._bind(BOOTSTRAP)

    def bind_all(self) -> None:
        """Resolve every symbol; a missing one means the driver predates what ember needs."""
        self._bind(SIGNATURES)

    def _bind(self, names: Any) -> None:
        for name in names:
            if name in self.fn:
                continue
            symbol = self.vendor.symbols[name]
            try:
                self.fn[name] = getattr(self.lib, symbol)
            except AttributeError:
                raise DriverUnavailable(
                    f"the {self.vendor.product} driver lacks {symbol}: it is older than {self.vendor.package} "
                    f"needs ({self.vendor.min_driver}); {self.vendor.driver_hint}") from None

    def call(self, name: str, *args: Any) -> None:
        status = self.fn[name](*args)
        if status:
            raise self.error(status, name)

    def error_name(self, status: int) -> str:
        known = self.vendor.error(status)
        if known is not None:
            return known.name
        return self._text("get_error_name", status) or "an unknown error"

    def describe(self, status: int) -> str:
        """``NAME (code): what it means`` for a status, from the vendor table, else the driver."""
        known = self.vendor.error(status)
        meaning = known.meaning if known is not None else self._text("get_error_string", status)
        return f"{self.error_name(status)} ({status})" + (f": {meaning}" if meaning else "")

    def _text(self, name: str, status: int) -> str:
        """The driver's name or description of a status ("" when it has none)."""
        fn = self.fn.get(name)
        if fn is None:
            return ""
        if self.vendor.error_text_returned:
            text = fn(status)
        else:
            out = self.ffi.new("const char **")
            text = out[0] if fn(status, out) == 0 else None
        return self.ffi.string(text).decode(errors="replace") if text else ""

    def error(self, status: int, name: str) -> GpuError:
        """The typed error for a failed call of ``name``."""
        symbol = self.vendor.symbols[name]
        message = f"{self.vendor.package}: {symbol} failed: {self.describe(status)}"
        if status in self.vendor.lost_device_errors:
            return DeviceLostError(message, status, symbol)
        if status == self.vendor.out_of_memory:
            return GpuOutOfMemoryError(message, status, symbol)
        return DriverError(message, status, symbol)


def open_driver(vendor: Vendor) -> Driver:
    """dlopen the vendor's driver library; DriverUnavailable says which one is missing and how to get it."""
    ffi = cffi.FFI()
    ffi.cdef(cdef_for(vendor))
    for soname in vendor.driver_libraries:
        try:
            return Driver(vendor, ffi.dlopen(soname), ffi)
        except OSError:
            continue
    raise DriverUnavailable(
        f"no {vendor.product} driver: {' and '.join(vendor.driver_libraries)} could not be loaded; "
        f"{vendor.package} needs {vendor.min_driver}: {vendor.driver_hint}")
