"""A deliberately broken backend (device type ``broken``), to prove the suite's verdicts.

numpy-backed memory, correct ``full``/``copy``/``astype``/``negative``, and one fault per op:

* ``add``: a wrong result (off by 1e-3 relative)       -> fail
* ``multiply``: segfaults on the 1031-element sample   -> crash, and the run goes on
* ``subtract``: hangs on the 1031-element sample       -> timeout, and the run goes on
* ``maximum``: wrong, but declared xfail               -> xfail
* ``abs``: the manifest claims float64, the kernel only does float32 -> fail (a lying manifest)
* everything else runs through the CPU fallback        -> fallback

``NoSync`` (device type ``nosync``) lacks the required ``ember_synchronize`` hook: registering it fails.
``ZeroKernel`` (device type ``zero``) has the transfer hooks and no kernel at all: everything falls
back to the host, so it must pass level 0 and nothing else.  ``Absent`` (device type ``absent``)
has no device: a run is "unavailable", not a report of failures.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from typing import Any

import numpy as np

from ember_core.plugins import ABI_MAJOR, ABI_MINOR, PluginInfo, hookimpl

MANIFEST = Path(__file__).with_name("broken_manifest.toml")
_NP = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "bool": np.bool_, "int32": np.int32}
LONG = 1031  # the size of the suite's "long" elementwise sample


def _view(t: Any) -> np.ndarray:
    dtype = np.dtype(_NP[t.dtype.name])
    flat = t.handle.view(dtype)
    return np.lib.stride_tricks.as_strided(flat[t.offset:], shape=t.shape,
                                           strides=tuple(s * dtype.itemsize for s in t.strides))


def _full(out: Any, *, value: Any) -> None:
    _view(out)[...] = value


def _copy(out: Any, x: Any) -> None:
    _view(out)[...] = _view(x)


def _add(out: Any, a: Any, b: Any) -> None:
    r = _view(a) + _view(b)
    _view(out)[...] = r + 1e-3 * np.abs(r) + 1e-3


def _multiply(out: Any, a: Any, b: Any) -> None:
    if out.shape == (LONG,):
        ctypes.string_at(0)  # a null-pointer read: the worker dies with SIGSEGV
    np.multiply(_view(a), _view(b), out=_view(out))


def _subtract(out: Any, a: Any, b: Any) -> None:
    if out.shape == (LONG,):
        time.sleep(3600)
    np.subtract(_view(a), _view(b), out=_view(out))


def _maximum(out: Any, a: Any, b: Any) -> None:
    _view(out)[...] = np.maximum(_view(a), _view(b)) + 1


def _negative(out: Any, x: Any) -> None:
    np.negative(_view(x), out=_view(out))


def _abs(out: Any, x: Any) -> None:
    if x.dtype.name != "float32":
        raise TypeError(f"abs: this kernel only handles float32, got {x.dtype.name}")
    np.abs(_view(x), out=_view(out))


class Broken:
    name = "broken"
    device_types = ("broken",)

    @hookimpl
    def ember_plugin_info(self) -> PluginInfo:
        return PluginInfo(name=self.name, version="0.0.1", abi=(ABI_MAJOR, ABI_MINOR), device_types=self.device_types,
                          manifest=MANIFEST, package=f"ember-{self.name}")

    @hookimpl
    def ember_kernels(self, device_type: str) -> dict[str, Any]:
        if device_type != "broken":
            return {}
        return {"full": _full, "copy": _copy, "astype": _copy, "add": _add, "multiply": _multiply,
                "subtract": _subtract, "maximum": _maximum, "negative": _negative, "abs": _abs}

    @hookimpl
    def ember_device_count(self, device_type: str) -> int:
        return 1

    @hookimpl
    def ember_device_unavailable_reason(self, device_type: str) -> str | None:
        return None

    @hookimpl
    def ember_device_properties(self, device: Any) -> dict[str, Any]:
        return {"name": "deliberately broken device", "driver": "none"}

    @hookimpl
    def ember_alloc(self, device: Any, nbytes: int) -> Any:
        Broken.live += nbytes
        Broken.peak = max(Broken.peak, Broken.live)
        return np.zeros(nbytes, np.uint8)

    live = peak = 0

    @hookimpl
    def ember_free(self, device: Any, handle: Any) -> None:
        Broken.live -= handle.nbytes

    @hookimpl
    def ember_memory_stats(self, device: Any) -> dict[str, int]:
        return {"allocated_bytes": Broken.live, "peak_bytes": Broken.peak}

    @hookimpl
    def ember_copy_from_host(self, device: Any, dst: Any, dst_offset: int, src: memoryview) -> None:
        dst[dst_offset:dst_offset + src.nbytes] = np.frombuffer(src, np.uint8)

    @hookimpl
    def ember_copy_to_host(self, device: Any, src: Any, src_offset: int, dst: memoryview) -> None:
        np.frombuffer(dst, np.uint8)[...] = src[src_offset:src_offset + dst.nbytes]

    @hookimpl
    def ember_copy_on_device(self, device: Any, dst: Any, dst_offset: int, src_device: Any, src: Any,
                             src_offset: int, nbytes: int) -> None:
        dst[dst_offset:dst_offset + nbytes] = src[src_offset:src_offset + nbytes]

    @hookimpl
    def ember_synchronize(self, device: Any) -> None:
        pass


class NoSync(Broken):
    """The same device without ``ember_synchronize``: the core must refuse to register it."""

    name = "nosync"
    device_types = ("nosync",)
    ember_synchronize = None  # type: ignore[assignment]


class ZeroKernel(Broken):
    """Transfer hooks only, no manifest and no kernel: the suite's proof that fallback is no pass."""

    name = "zero"
    device_types = ("zero",)

    @hookimpl
    def ember_plugin_info(self) -> PluginInfo:
        return PluginInfo(name=self.name, version="0.0.1", abi=(ABI_MAJOR, ABI_MINOR), device_types=self.device_types,
                          package=f"ember-{self.name}")

    @hookimpl
    def ember_kernels(self, device_type: str) -> dict[str, Any]:
        return {}


class Absent(Broken):
    """A known device type with no device here (like cuda on a machine without a GPU)."""

    name = "absent"
    device_types = ("absent",)

    @hookimpl
    def ember_device_count(self, device_type: str) -> int:
        return 0

    @hookimpl
    def ember_device_unavailable_reason(self, device_type: str) -> str | None:
        return "no absent device is plugged in"


def _flush(a: np.ndarray) -> np.ndarray:
    """float32 denormals to (signed) zero, as a GPU in flush-to-zero mode does."""
    return np.where(np.abs(a) < np.finfo(np.float32).tiny, np.float32(0) * np.sign(a), a).astype(a.dtype)


def _ftz_multiply(out: Any, a: Any, b: Any) -> None:
    _view(out)[...] = _flush(_flush(_view(a)) * _flush(_view(b)))


def _ftz_equal(out: Any, a: Any, b: Any) -> None:
    """Compares flushed inputs: a subnormal equals zero, as on a GPU that flushes denormal operands."""
    np.equal(_flush(_view(a)), _flush(_view(b)), out=_view(out))


def _rough_sin(out: Any, x: Any) -> None:
    """sin with an absolute error of 1e-6 on [-pi, pi] except at 0 (a GPU's fast trig), exact elsewhere."""
    x = _view(x)
    _view(out)[...] = np.sin(x) + np.float32(1e-6) * ((x != 0) & (np.abs(x) <= 3.14159))


class Flusher(ZeroKernel):
    """Flushes float32 denormals and computes sin 1e-6 off, and declares neither: both are failures."""

    name = "flusher"
    device_types = ("flusher",)
    manifest = "flusher_manifest.toml"

    @hookimpl
    def ember_plugin_info(self) -> PluginInfo:
        return PluginInfo(name=self.name, version="0.0.1", abi=(ABI_MAJOR, ABI_MINOR), device_types=self.device_types,
                          manifest=MANIFEST.with_name(self.manifest), package=f"ember-{self.name}")

    @hookimpl
    def ember_kernels(self, device_type: str) -> dict[str, Any]:
        if device_type != self.name:
            return {}
        return {"full": _full, "copy": _copy, "multiply": _ftz_multiply, "sin": _rough_sin}


class Declared(Flusher):
    """The same kernels, with the deviations declared in the manifest: ftz for float32, sin's
    absolute error bounded on [-pi, pi] (how the Vulkan spec bounds GPU trig)."""

    name = "declared"
    device_types = ("declared",)
    manifest = "declared_manifest.toml"


class PropertyFlusher(Flusher):
    """The flushing kernels on a device whose properties say so (``float32_subnormals = "flushed"``); its
    manifest declares ftz only for a device reporting that, as ember-vulkan declares it."""

    name = "propflush"
    device_types = ("propflush",)
    manifest = "conditional_manifest.toml"
    subnormals = "flushed"

    @hookimpl
    def ember_kernels(self, device_type: str) -> dict[str, Any]:
        return {**Flusher.ember_kernels(self, device_type), "equal": _ftz_equal} if device_type == self.name else {}

    @hookimpl
    def ember_device_properties(self, device: Any) -> dict[str, Any]:
        return {"name": "flushing device", "driver": "none", "float_controls": {"denorm_preserve_float32": False},
                "float32_subnormals": self.subnormals}


class PropertyKeeper(PropertyFlusher):
    """The same kernels and manifest on a device claiming to keep subnormals: the declaration's condition
    does not hold there, so the flush is an undeclared deviation."""

    subnormals = "preserved"


_RUNS = [0]


def _wobbly_add(out: Any, a: Any, b: Any) -> None:
    """a + b, one ulp off in its first element on every other call (a sum whose order depends on timing)."""
    _RUNS[0] += 1
    result = _view(a) + _view(b)
    if _RUNS[0] % 2 and result.size:
        result.reshape(-1)[0] = np.nextafter(result.reshape(-1)[0], np.inf)
    _view(out)[...] = result


class Wobbly(ZeroKernel):
    """Declares add deterministic, yet its bits vary between runs: a failure although each run is
    within tolerance.  Its multiply is declared too, and is."""

    name = "wobbly"
    device_types = ("wobbly",)

    @hookimpl
    def ember_plugin_info(self) -> PluginInfo:
        return PluginInfo(name=self.name, version="0.0.1", abi=(ABI_MAJOR, ABI_MINOR), device_types=self.device_types,
                          manifest=MANIFEST.with_name("wobbly_manifest.toml"), package=f"ember-{self.name}")

    @hookimpl
    def ember_kernels(self, device_type: str) -> dict[str, Any]:
        if device_type != self.name:
            return {}
        return {"full": _full, "copy": _copy, "add": _wobbly_add, "multiply": _multiply}
