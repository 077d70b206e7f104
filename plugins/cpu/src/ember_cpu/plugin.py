"""ember-cpu's hook implementations: the whole device in one module.

Memory is the host's: handles are ``void *`` from the plugin's aligned, caching allocator (or,
for ``from_numpy``, a cffi buffer aliasing a numpy array, which is never freed here).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ember_cpu
from ember_core.plugins import PluginInfo, hookimpl

_HERE = Path(__file__).resolve().parent


_native: Any = None  # the cffi module, bound by ember_plugin_info (always the first hook called)
_POINTER: type | None = None  # the type of handles from ember_cpu_alloc (not of from_numpy's buffers)


def _load() -> Any:
    global _native, _POINTER
    if _native is None:
        from ember_cpu import _native as native

        _POINTER = type(native.ffi.cast("void *", 0))
        _native = native
    return _native


@hookimpl
def ember_plugin_info() -> PluginInfo:
    lib = _load().lib
    return PluginInfo(
        name="cpu", version=ember_cpu.__version__, abi=(lib.EMBER_ABI_MAJOR, lib.EMBER_ABI_MINOR),
        device_types=("cpu",), manifest=_HERE / "manifest.toml", package="ember-cpu",
    )


@hookimpl
def ember_kernels(device_type: str) -> Mapping[str, Any]:
    if device_type != "cpu":
        return {}
    from ember_cpu.kernels import KERNELS

    return KERNELS


@hookimpl
def ember_device_count(device_type: str) -> int:
    return 1 if device_type == "cpu" else 0


@hookimpl
def ember_device_unavailable_reason(device_type: str) -> str | None:
    return None if device_type == "cpu" else f"ember-cpu serves only 'cpu', not {device_type!r}"


@hookimpl
def ember_device_properties(device: Any) -> Mapping[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    lib = _native.lib
    return {"name": model, "cores": os.cpu_count(), "threads": lib.ember_cpu_get_num_threads(),
            "memory": "host"}


@hookimpl
def ember_alloc(device: Any, nbytes: int) -> Any:
    ptr = _native.lib.ember_cpu_alloc(nbytes)
    if not ptr:
        raise MemoryError(f"ember-cpu could not allocate {nbytes} bytes")
    return ptr


@hookimpl
def ember_free(device: Any, handle: Any) -> None:
    if type(handle) is _POINTER:  # from_numpy's buffers belong to numpy
        _native.lib.ember_cpu_free(handle)


@hookimpl
def ember_memory_stats(device: Any) -> Mapping[str, int]:
    stats = _native.ffi.new("int64_t[4]")
    _native.lib.ember_cpu_memory_stats(stats)
    return {"allocated_bytes": stats[0], "peak_bytes": stats[1], "cached_bytes": stats[2],
            "allocations": stats[3]}


@hookimpl
def ember_copy_from_host(device: Any, dst: Any, dst_offset: int, src: memoryview) -> None:
    ffi = _native.ffi
    ffi.memmove(ffi.cast("char *", dst) + dst_offset, src, src.nbytes)


@hookimpl
def ember_copy_to_host(device: Any, src: Any, src_offset: int, dst: memoryview) -> None:
    ffi = _native.ffi
    ffi.memmove(dst, ffi.cast("char *", src) + src_offset, dst.nbytes)


@hookimpl
def ember_copy_on_device(device: Any, dst: Any, dst_offset: int, src_device: Any, src: Any, src_offset: int,
                         nbytes: int) -> None:
    ffi = _native.ffi
    ffi.memmove(ffi.cast("char *", dst) + dst_offset, ffi.cast("char *", src) + src_offset, nbytes)


@hookimpl
def ember_synchronize(device: Any) -> None:
    """Kernels run synchronously on the calling thread's team: nothing is ever queued."""


@hookimpl
def ember_host_address(device: Any, handle: Any) -> int:
    ffi = _native.ffi
    return int(ffi.cast("uintptr_t", handle))


@hookimpl
def ember_wrap_host_memory(device: Any, obj: Any) -> Any:
    return _native.ffi.from_buffer(obj, require_writable=True)


@hookimpl
def ember_set_num_threads(n: int) -> None:
    _native.lib.ember_cpu_set_num_threads(n)
