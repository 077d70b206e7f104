"""ember-vulkan's hook implementations: devices, memory, copies and the kernel table.

Nothing here touches the driver at import: the loader is opened by the first device query, and a
machine without one gets ``ember_device_count() == 0`` with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ember_vulkan
from ember_core.plugins import PluginInfo, hookimpl
from ember_vulkan import denormals, runtime

_HERE = Path(__file__).resolve().parent
DEVICE_TYPE = "vulkan"


@hookimpl
def ember_plugin_info() -> PluginInfo:
    from ember_vulkan._native import lib

    return PluginInfo(name="vulkan", version=ember_vulkan.__version__, abi=(lib.EMBER_ABI_MAJOR, lib.EMBER_ABI_MINOR),
                      device_types=(DEVICE_TYPE,), manifest=_HERE / "manifest.toml", package="ember-vulkan")


@hookimpl
def ember_kernels(device_type: str) -> Mapping[str, Any]:
    if device_type != DEVICE_TYPE:
        return {}
    from ember_vulkan.kernels import KERNELS

    return KERNELS


@hookimpl
def ember_device_count(device_type: str) -> int:
    return len(runtime.discover().usable) if device_type == DEVICE_TYPE else 0


@hookimpl
def ember_device_unavailable_reason(device_type: str) -> str | None:
    if device_type != DEVICE_TYPE:
        return f"ember-vulkan serves only {DEVICE_TYPE!r}, not {device_type!r}"
    return runtime.discover().reason


@hookimpl
def ember_device_properties(device: Any) -> Mapping[str, Any]:
    info = runtime.device(device.index).info
    api = info.api_version
    heaps = [{"bytes": int(info.heap_size[i]), "device_local": bool(info.heap_device_local[i])}
             for i in range(info.heap_count)]
    return {
        "name": runtime.device(device.index).name,
        "type": runtime.DEVICE_TYPES.get(info.device_type, "other"),
        "vulkan": f"{api >> 22}.{(api >> 12) & 0x3FF}.{api & 0xFFF}",
        "vendor_id": hex(info.vendor_id),
        "memory_heaps": heaps,
        "memory": sum(h["bytes"] for h in heaps if h["device_local"]) or sum(h["bytes"] for h in heaps),
        "subgroup_size": info.subgroup_size,
        "max_workgroup_count": tuple(info.max_group_count),
        "shader_float64": bool(info.shader_float64),
        "float_controls": denormals.float_controls(info),
        "float32_subnormals": "preserved" if 32 in runtime.device(device.index).keep_subnormals else "flushed",
        "float16_subnormals": "preserved" if 16 in runtime.device(device.index).keep_subnormals else "flushed",
        "host_copies": "mapped" if runtime.device(device.index).map_host else "staged",
    }


@hookimpl
def ember_alloc(device: Any, nbytes: int) -> Any:
    return runtime.device(device.index).alloc(nbytes)


@hookimpl
def ember_free(device: Any, handle: Any) -> None:
    try:
        runtime.device(device.index).free(handle)
    except Exception:  # a finalizer must not raise
        pass


@hookimpl
def ember_memory_stats(device: Any) -> Mapping[str, int]:
    dev = runtime.device(device.index)
    with dev.lock:
        return dev.pool.stats()


@hookimpl
def ember_copy_from_host(device: Any, dst: Any, dst_offset: int, src: memoryview) -> None:
    runtime.device(device.index).upload(dst, dst_offset, src)


@hookimpl
def ember_copy_to_host(device: Any, src: Any, src_offset: int, dst: memoryview) -> None:
    runtime.device(device.index).download(src, src_offset, dst)


@hookimpl
def ember_copy_on_device(device: Any, dst: Any, dst_offset: int, src_device: Any, src: Any, src_offset: int,
                         nbytes: int) -> None:
    target = runtime.device(device.index)
    if src_device.index == device.index:
        target.copy(dst, dst_offset, src, src_offset, nbytes)
        return
    bounce = memoryview(bytearray(nbytes))  # two logical devices share no memory: go through the host
    runtime.device(src_device.index).download(src, src_offset, bounce)
    target.upload(dst, dst_offset, bounce)


@hookimpl
def ember_synchronize(device: Any) -> None:
    runtime.device(device.index).flush()
