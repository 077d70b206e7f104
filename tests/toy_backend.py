"""A minimal out-of-tree backend written in Python (numpy-backed memory), used by the tests to
exercise registration, dispatch, composites and the CPU fallback without any native code.

It owns the device type ``toy``, implements only ``full``, ``copy``/``astype`` and ``add``, and
so runs every other op through composites or the fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ember_core.plugins import ABI_MAJOR, ABI_MINOR, PluginInfo, hookimpl

MANIFEST = Path(__file__).with_name("toy_manifest.toml")
_NP = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "bool": np.bool_, "int32": np.int32}


def _view(t: Any) -> np.ndarray:
    """The numpy view of a toy tensor (handles are flat uint8 arrays)."""
    dtype = np.dtype(_NP[t.dtype.name])
    flat = t.handle.view(dtype)
    return np.lib.stride_tricks.as_strided(
        flat[t.offset :], shape=t.shape, strides=tuple(s * dtype.itemsize for s in t.strides)
    )


class Toy:
    """The hook implementations, as an object so tests can make broken variants."""

    name = "toy"
    abi = (ABI_MAJOR, ABI_MINOR)
    device_types = ("toy",)

    @hookimpl
    def ember_plugin_info(self) -> PluginInfo:
        return PluginInfo(name=self.name, version="0.0.1", abi=self.abi, device_types=self.device_types,
                          manifest=MANIFEST, package=f"ember-{self.name}")

    @hookimpl
    def ember_kernels(self, device_type: str) -> dict[str, Any]:
        if device_type != "toy":
            return {}

        def full(out: Any, *, value: Any) -> None:
            _view(out)[...] = value

        def copy(out: Any, x: Any) -> None:
            _view(out)[...] = _view(x)

        def add(out: Any, a: Any, b: Any) -> None:
            np.add(_view(a), _view(b), out=_view(out))

        return {"full": full, "copy": copy, "astype": copy, "add": add}

    @hookimpl
    def ember_device_count(self, device_type: str) -> int:
        return 1

    @hookimpl
    def ember_device_unavailable_reason(self, device_type: str) -> str | None:
        return None

    @hookimpl
    def ember_device_properties(self, device: Any) -> dict[str, Any]:
        return {"name": "toy device"}

    @hookimpl
    def ember_alloc(self, device: Any, nbytes: int) -> Any:
        return np.zeros(nbytes, np.uint8)

    @hookimpl
    def ember_free(self, device: Any, handle: Any) -> None:
        pass

    @hookimpl
    def ember_memory_stats(self, device: Any) -> dict[str, int]:
        return {"allocated_bytes": 0, "peak_bytes": 0}

    @hookimpl
    def ember_copy_from_host(self, device: Any, dst: Any, dst_offset: int, src: memoryview) -> None:
        dst[dst_offset : dst_offset + src.nbytes] = np.frombuffer(src, np.uint8)

    @hookimpl
    def ember_copy_to_host(self, device: Any, src: Any, src_offset: int, dst: memoryview) -> None:
        np.frombuffer(dst, np.uint8)[...] = src[src_offset : src_offset + dst.nbytes]

    @hookimpl
    def ember_copy_on_device(self, device: Any, dst: Any, dst_offset: int, src_device: Any, src: Any,
                             src_offset: int, nbytes: int) -> None:
        dst[dst_offset : dst_offset + nbytes] = src[src_offset : src_offset + nbytes]

    @hookimpl
    def ember_synchronize(self, device: Any) -> None:
        pass
