"""A base for backends whose device memory the host addresses (a CPU, an accelerator sharing the
host's memory): every device hook written once, so a backend adds only its identity and kernels."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from ember_core.plugins import hookimpl


class HostBlock:
    """One allocation: a numpy byte buffer and its address (what descriptors' ``data`` point at)."""

    __slots__ = ("address", "buffer", "nbytes")

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.buffer = np.empty(max(nbytes, 1), np.uint8)  # 1 byte for 0: every block has an address
        self.address = self.buffer.ctypes.data


class HostMemoryBackend:
    """Device hooks for one device of host-addressable memory per owned type.

    Subclass it, set ``device_types`` in your ``PluginInfo``, and implement ``ember_plugin_info``
    and ``ember_kernels``; register an instance (or the class) or point the entry point at one.
    Kernels read ``tensor.handle.address``; ``Descriptors`` builds ``ember_tensor``s from it.
    """

    device_name = "host memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._allocated: dict[Any, int] = {}
        self._peak: dict[Any, int] = {}

    @hookimpl
    def ember_device_count(self, device_type: str) -> int:
        return 1

    @hookimpl
    def ember_device_unavailable_reason(self, device_type: str) -> str | None:
        return None

    @hookimpl
    def ember_device_properties(self, device: Any) -> Mapping[str, Any]:
        return {"name": self.device_name, "memory": "host"}

    def _account(self, device: Any, nbytes: int) -> None:
        """Count ``nbytes`` more (or, negative, fewer) live bytes on ``device`` for ember_memory_stats."""
        with self._lock:
            live = self._allocated[str(device)] = self._allocated.get(str(device), 0) + nbytes
            self._peak[str(device)] = max(self._peak.get(str(device), 0), live)

    @hookimpl
    def ember_alloc(self, device: Any, nbytes: int) -> HostBlock:
        block = HostBlock(nbytes)
        self._account(device, nbytes)
        return block

    @hookimpl
    def ember_free(self, device: Any, handle: HostBlock) -> None:
        self._account(device, -handle.nbytes)

    @hookimpl
    def ember_memory_stats(self, device: Any) -> Mapping[str, int]:
        return {"allocated_bytes": self._allocated.get(str(device), 0), "peak_bytes": self._peak.get(str(device), 0)}

    @hookimpl
    def ember_copy_from_host(self, device: Any, dst: HostBlock, dst_offset: int, src: memoryview) -> None:
        dst.buffer[dst_offset : dst_offset + src.nbytes] = np.frombuffer(src, np.uint8)

    @hookimpl
    def ember_copy_to_host(self, device: Any, src: HostBlock, src_offset: int, dst: memoryview) -> None:
        np.frombuffer(dst, np.uint8)[...] = src.buffer[src_offset : src_offset + dst.nbytes]

    @hookimpl
    def ember_copy_on_device(self, device: Any, dst: HostBlock, dst_offset: int, src_device: Any, src: HostBlock,
                             src_offset: int, nbytes: int) -> None:
        dst.buffer[dst_offset : dst_offset + nbytes] = src.buffer[src_offset : src_offset + nbytes]

    @hookimpl
    def ember_synchronize(self, device: Any) -> None:
        pass

    @hookimpl
    def ember_host_address(self, device: Any, handle: HostBlock) -> int:
        return handle.address
