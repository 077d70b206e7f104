"""Launching a kernel with the ``extra`` argument-buffer convention.

Each ``Kernel`` holds, built once, its function handle, an argument struct (a cffi struct laid
out as the kernel's parameter list, which is how the driver reads the buffer: each parameter at
its C alignment) and the ``extra`` array ``{POINTER, &args, SIZE, &size, END}`` with the vendor's
markers.  A launch overwrites the struct's fields and makes one driver call: no per-launch
allocation, and the argument bytes the kernel sees are exactly the struct's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import cffi


class Kernel:
    """``image``/``name`` on one device, with arguments of the cffi struct type ``arg_type`` of ``ffi``."""

    def __init__(self, device: Any, image: str, name: str, ffi: cffi.FFI, arg_type: str) -> None:
        self.device = device
        self.name = name
        self.function = device.modules.function(image, name)
        self.args = ffi.new(f"{arg_type} *")
        self._convert = _converters(ffi, ffi.typeof(arg_type))
        dffi, markers = device.ffi, device.vendor.launch_markers
        self._size = dffi.new("size_t *", ffi.sizeof(arg_type))
        self._extra = dffi.new("void *[5]", [
            dffi.cast("void *", markers.pointer), dffi.cast("void *", ffi.cast("uintptr_t", self.args)),
            dffi.cast("void *", markers.size), dffi.cast("void *", self._size),
            dffi.cast("void *", markers.end),
        ])

    def __call__(self, grid: tuple[int, int, int], block: tuple[int, int, int],
                 args: Mapping[str, Any] | None = None, shared_bytes: int = 0) -> None:
        """Set the given argument fields (device addresses as ints) and queue the kernel on the
        device's stream; fields not given keep their last values."""
        device = self.device
        with device.lock:  # the argument struct is shared by every thread launching this kernel
            target = self.args
            for field, value in (args or {}).items():
                convert = self._convert.get(field)
                setattr(target, field, value if convert is None else convert(value))
            device.launch(self.function, self.name, grid, block, shared_bytes, self._extra)


def _converters(ffi: cffi.FFI, struct: Any) -> dict[str, Callable[[Any], Any]]:
    """For the struct's pointer fields (and arrays of pointers): int addresses -> cffi pointers."""
    converters: dict[str, Callable[[Any], Any]] = {}
    for name, field in struct.fields:
        kind = field.type
        if kind.kind == "pointer":
            converters[name] = lambda value, t=kind: ffi.cast(t, value)
        elif kind.kind == "array" and kind.item.kind == "pointer":
            converters[name] = lambda values, t=kind.item: [ffi.cast(t, v) for v in values]
    return converters
