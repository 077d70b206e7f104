"""Storage bytes to and from the host, and where loaded tensors go: the one policy em.load and unpickling share.

Without ``device=``, a tensor returns to the device type it was saved from when that backend is installed
and has the device, else to cpu with a warning (a checkpoint trained on a GPU still opens on a laptop).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ember_core.device import Device, as_device
from ember_core.errors import EmberError
from ember_core.tensor import Storage, _Holder

HOST = Device("cpu")


def target_device(saved: str, requested: Device | None) -> Device:
    """``requested`` when given, else the saved device when usable, else cpu (with a warning)."""
    if requested is not None:
        return requested
    try:
        device = as_device(saved)
        device.backend  # noqa: B018  (raises when the plugin is missing or has no such device)
        return device
    except EmberError as exc:
        warnings.warn(f"tensors saved from {saved} are loaded onto cpu: {exc}", stacklevel=3)
        return HOST


def storage_bytes(storage: Storage) -> np.ndarray:
    """A storage's bytes as a uint8 array: an alias of host memory, else a download (or the backend's
    ``ember_serialize_handle`` when it has one)."""
    device = storage.device
    hooks = device.backend.hooks
    address = hooks["ember_host_address"](device, storage.handle) if "ember_host_address" in hooks else None
    if address is not None:
        return np.asarray(_Holder(storage, address, storage.nbytes)) if storage.nbytes else np.empty(0, np.uint8)
    serialize = hooks.get("ember_serialize_handle")
    if serialize is not None:
        return np.frombuffer(serialize(device, storage.handle, storage.nbytes), np.uint8)
    out = np.empty(storage.nbytes, np.uint8)
    if storage.nbytes:
        hooks["ember_copy_to_host"](device, storage.handle, 0, memoryview(out))
    return out


def storage_from_bytes(data: Any, device: Device, alias: bool) -> Storage:
    """A storage on ``device`` holding ``data`` (a uint8 buffer).  With ``alias``, a host storage wraps
    the buffer itself when the host backend can (the buffer must then be writable and stay private)."""
    view = memoryview(data).cast("B")
    if alias and device is HOST and view.nbytes and not view.readonly:
        wrap = device.backend.hooks.get("ember_wrap_host_memory")
        handle = wrap(device, data) if wrap is not None else None
        if handle is not None:
            return Storage(device, view.nbytes, handle=handle)
    storage = Storage(device, view.nbytes)
    if view.nbytes:
        device.backend.hooks["ember_copy_from_host"](device, storage.handle, 0, view)
    return storage
