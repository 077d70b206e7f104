"""A base for backends whose devices have a memory of their own that the host cannot address (a
discrete accelerator): the device hooks over five driver calls, so a backend writes only those,
its identity and its kernels.  Tensors live in device memory; every read from the host is a copy
(no ``ember_host_address``: ``numpy()`` and printing copy, nothing aliases device memory)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ember_core.backend_kit.host_memory import HostMemoryBackend
from ember_core.plugins import hookimpl


class DeviceBlock:
    """One device allocation: its device address (what descriptors' ``data`` carry) and size."""

    __slots__ = ("address", "nbytes")

    def __init__(self, address: int, nbytes: int) -> None:
        self.address = address
        self.nbytes = nbytes


class DeviceMemoryBackend(HostMemoryBackend):
    """Device hooks for one device per owned type whose memory is reached through a driver.

    Subclass it and implement the driver calls below (addresses are the driver's, as ints), plus
    ``ember_plugin_info`` and ``ember_kernels``.  Kernels read ``tensor.handle.address``."""

    device_name = "device memory"
    ember_host_address = None  # the host cannot address this memory: the core copies instead

    # ---- the driver: what the subclass implements ---------------------------------------------

    def device_malloc(self, device: Any, nbytes: int) -> int:
        """A device address of ``nbytes`` (at least 1) fresh bytes, or 0 when the device is full."""
        raise NotImplementedError

    def device_free(self, device: Any, address: int) -> None:
        raise NotImplementedError

    def device_copy_from_host(self, device: Any, dst: int, src: memoryview) -> None:
        raise NotImplementedError

    def device_copy_to_host(self, device: Any, dst: memoryview, src: int) -> None:
        """Returns once the bytes are in ``dst``."""
        raise NotImplementedError

    def device_copy_on_device(self, device: Any, dst: int, src: int, nbytes: int) -> None:
        raise NotImplementedError

    # ---- the hooks the core calls ----------------------------------------------------------------

    @hookimpl
    def ember_device_properties(self, device: Any) -> Mapping[str, Any]:
        return {"name": self.device_name, "memory": "device"}

    @hookimpl
    def ember_alloc(self, device: Any, nbytes: int) -> DeviceBlock:  # type: ignore[override]
        address = self.device_malloc(device, max(nbytes, 1))  # 1 byte for 0: every block has an address
        if not address:
            raise MemoryError(f"{self.device_name}: out of memory allocating {nbytes} bytes on {device}; free "
                              "tensors or call ember_core.empty_cache()")
        self._account(device, nbytes)
        return DeviceBlock(address, nbytes)

    @hookimpl
    def ember_free(self, device: Any, handle: DeviceBlock) -> None:  # type: ignore[override]
        self.device_free(device, handle.address)
        self._account(device, -handle.nbytes)

    @hookimpl
    def ember_copy_from_host(self, device: Any, dst: DeviceBlock, dst_offset: int,  # type: ignore[override]
                             src: memoryview) -> None:
        self.device_copy_from_host(device, dst.address + dst_offset, src)

    @hookimpl
    def ember_copy_to_host(self, device: Any, src: DeviceBlock, src_offset: int,  # type: ignore[override]
                           dst: memoryview) -> None:
        self.device_copy_to_host(device, dst, src.address + src_offset)

    @hookimpl
    def ember_copy_on_device(self, device: Any, dst: DeviceBlock, dst_offset: int,  # type: ignore[override]
                             src_device: Any, src: DeviceBlock, src_offset: int, nbytes: int) -> None:
        self.device_copy_on_device(device, dst.address + dst_offset, src.address + src_offset, nbytes)
