"""Devices: ``cpu``, ``vulkan:0``...  A Device is interned (one object per name), so identity is
equality and the hot path compares with ``is``.  It caches its backend's allocator hooks."""

from __future__ import annotations

import threading
from typing import Any

from ember_core.errors import DeviceError


class Device:
    __slots__ = ("_alloc", "_backend", "_free", "_pool", "index", "type")

    _interned: dict[tuple[str, int], Device] = {}
    _lock = threading.Lock()

    def __new__(cls, type: str, index: int = 0) -> Device:
        key = (type, index)
        device = cls._interned.get(key)
        if device is None:
            with cls._lock:
                device = cls._interned.get(key)
                if device is None:
                    device = object.__new__(cls)
                    device.type = type
                    device.index = index
                    device._backend = device._alloc = device._free = None
                    device._pool = {}  # nbytes -> freed small blocks kept for reuse (tensor.Storage)
                    cls._interned[key] = device
        return device

    def __repr__(self) -> str:
        return f"device({str(self)!r})"

    def __str__(self) -> str:
        return self.type if self.type == "cpu" and self.index == 0 else f"{self.type}:{self.index}"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                return as_device(other) is self
            except DeviceError:
                return False
        return self is other

    __hash__ = object.__hash__  # interned: identity is equality, and plan caches hash devices per op

    def __reduce__(self) -> tuple[Any, ...]:
        return (Device, (self.type, self.index))

    @property
    def backend(self) -> Any:
        """The plugin owning this device type; raises BackendUnavailableError with the fix."""
        backend = self._backend
        if backend is None:
            from ember_core.plugins import MANAGER

            backend = MANAGER.owner(self.type)
            count = backend.hooks["ember_device_count"](device_type=self.type)
            if self.index >= count:
                from ember_core.errors import BackendUnavailableError

                reason = backend.hooks["ember_device_unavailable_reason"](device_type=self.type)
                detail = reason or f"{count} device(s) of type {self.type!r} exist"
                raise BackendUnavailableError(f"device {self} is not available: {detail}")
            self._alloc = backend.hooks["ember_alloc"]  # cached for Storage, the per-op hot path
            self._free = backend.hooks["ember_free"]
            self._backend = backend
        return backend


def as_device(value: Any) -> Device:
    """A Device from a Device or a name like ``"cpu"``, ``"vulkan"`` (index 0) or ``"vulkan:1"``."""
    if isinstance(value, Device):
        return value
    if not isinstance(value, str):
        dev = getattr(value, "device", None)
        if isinstance(dev, Device):
            return dev
        raise DeviceError(f"expected a device name like 'cpu' or 'vulkan:0', got {value!r}")
    type_, _, index = value.partition(":")
    if not type_.isidentifier() or (index and not index.isdigit()):
        raise DeviceError(f"{value!r} is not a device name; expected 'TYPE' or 'TYPE:INDEX', e.g. 'vulkan:0'")
    return Device(type_, int(index) if index else 0)


def empty_cache() -> None:
    """Return every recycled small block to its backend's free hook, then let each backend in use
    return what its own allocator caches to its driver (``ember_empty_cache``)."""
    devices = list(Device._interned.values())
    for device in devices:
        _release_pool(device)
    for device in devices:
        hook = device._backend.hooks.get("ember_empty_cache") if device._backend is not None else None
        if hook is not None:
            hook(device)


def _release_pool(device: Device) -> None:
    """Free the recycled blocks, emptying each list in place: live storages keep a reference to
    their size's list and put their block there when they die."""
    for blocks in list(device._pool.values()):
        while blocks:
            try:
                handle = blocks.pop()
            except IndexError:  # another thread took the last one
                break
            device._free(device, handle)


def forget_device_types(device_types: tuple[str, ...]) -> None:
    """Drop what devices of these types cached about their backend (it was unregistered), and the
    core's cached scalar tensors on them."""
    from ember_core.ops.families import forget_constants

    forget_constants(device_types)
    for device in list(Device._interned.values()):
        if device.type in device_types:
            _release_pool(device)
            device._backend = device._alloc = device._free = None


_default = threading.local()


def default_device() -> Device:
    return getattr(_default, "device", None) or Device("cpu")


def set_default_device(device: Any) -> None:
    """Where creation functions put tensors when no ``device=`` is given (per thread).  The device
    must be usable now: BackendUnavailableError says why not here, not at some later creation."""
    device = as_device(device)
    device.backend  # noqa: B018  (resolves the plugin and checks the index, or raises with the fix)
    _default.device = device
