"""Launching a kernel with the ``extra`` argument-buffer convention.

Each ``Kernel`` holds, built once, its function handle, an argument struct (a cffi struct laid
out as the kernel's parameter list, which is how the driver reads the buffer: each parameter at
its C alignment), the ``extra`` array ``{POINTER, &args, SIZE, &size, END}`` with the vendor's
markers, and one setter per field.  A launch patches the fields it is given and makes one driver
call: no per-launch allocation, and the argument bytes the kernel sees are exactly the struct's.
Device addresses are ints: a pointer field is written as the 64-bit word it is, not through a
cffi pointer object (a cast per pointer was most of a small op's host time).
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
        self._setters = _setters(ffi, self.args, ffi.typeof(arg_type))
        self._in_order = tuple(self._setters.values())  # the struct's fields in declaration order
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
        setters = self._setters
        with device.lock:  # the argument struct is shared by every thread launching this kernel
            if args:
                for field, value in args.items():
                    setters[field](value)
            device.launch(self.function, self.name, grid, block, shared_bytes, self._extra)

    def launch(self, grid: tuple[int, int, int], block: tuple[int, int, int], *fields: Any) -> None:
        """``__call__`` for the hot paths: the leading fields of the struct, in its order."""
        device = self.device
        with device.lock:
            for store, value in zip(self._in_order, fields):
                store(value)
            device.launch(self.function, self.name, grid, block, 0, self._extra)


def _setters(ffi: cffi.FFI, target: Any, struct: Any) -> dict[str, Callable[[Any], None]]:
    """Per field of ``*target``: a function that stores a value there.  Pointers (and arrays of
    them) take int addresses, stored into the 64-bit words they occupy."""
    words = ffi.cast("uint64_t *", target)
    setters: dict[str, Callable[[Any], None]] = {}
    for name, field in struct.fields:
        kind = field.type
        pointers = kind.kind == "pointer" or (kind.kind == "array" and kind.item.kind == "pointer")
        if pointers and (field.offset % 8 or ffi.sizeof("void *") != 8):
            raise TypeError(f"{struct.cname}.{name}: pointers must be 64-bit words at 8-byte offsets")
        if kind.kind == "pointer":
            setters[name] = _word_setter(words, field.offset // 8)
        elif pointers:
            setters[name] = _words_setter(words, field.offset // 8, kind.length)
        else:
            setters[name] = _field_setter(target, name)
    return setters


def _word_setter(words: Any, index: int) -> Callable[[int], None]:
    def store(address: int) -> None:
        words[index] = address

    return store


def _words_setter(words: Any, start: int, length: int) -> Callable[[list[int]], None]:
    def store(addresses: list[int]) -> None:
        if len(addresses) > length:
            raise ValueError(f"{len(addresses)} addresses for an array of {length}")
        words[start:start + len(addresses)] = addresses

    return store


def _field_setter(target: Any, name: str) -> Callable[[Any], None]:
    def store(value: Any) -> None:
        setattr(target, name, value)

    return store
