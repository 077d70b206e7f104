"""The hook implementations every GPU vendor plugin shares, made for one vendor table.

``make_plugin(vendor, "ember_cuda")`` returns a ``GpuPlugin`` whose methods are the hooks; the
vendor's plugin module exports them (``globals().update(PLUGIN.hooks())``), which is all of
ember_cuda/plugin.py.  Identity and the kernel table (``ember_plugin_info``, ``ember_kernels``)
read package files only: they never open the driver, so discovery costs nothing on machines
without the vendor's GPU.  The kernel table (``ember_gpu.ops``) and the manifest the build wrote
beside the kernel images both come from the build's kernel index, so they claim the same ops.

A testing aid: with ``EMBER_GPU_FAKE_DRIVER=<directory of host kernel libraries>`` (built by
``ember_gpu.build.build_host_libraries``) in the environment when the driver is first opened, the
runtime opens ``ember_gpu.fake.FakeGpu`` with two devices running those kernels on the host
instead of the vendor's driver (how CI runs conformance on a "GPU"; off by default).
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

from ember_core.errors import KernelError, PluginError
from ember_core.plugins import PluginInfo, hookimpl
from ember_gpu import abi, ops
from ember_gpu.driver import Driver, open_driver
from ember_gpu.errors import DLPackStreamError
from ember_gpu.runtime import Runtime
from ember_gpu.vendor import Vendor

BUILD_INFO = "build.json"  # written into the vendor package's kernels/ by its build
FAKE_DRIVER_ENV = "EMBER_GPU_FAKE_DRIVER"


def open_driver_or_fake(vendor: Vendor) -> Driver:
    """The vendor's driver, or the fake that runs host kernels when $EMBER_GPU_FAKE_DRIVER names
    their directory (a testing aid, read when the runtime first opens the driver)."""
    host_kernels = os.environ.get(FAKE_DRIVER_ENV)
    if not host_kernels:
        return open_driver(vendor)
    from ember_gpu.fake import FakeGpu

    return FakeGpu(vendor, devices=2, host_kernels=os.path.abspath(host_kernels)).open(vendor)


class GpuPlugin:
    def __init__(self, vendor: Vendor, package: str, runtime: Runtime | None = None) -> None:
        self.vendor = vendor
        self.package = package
        self.runtime = runtime or Runtime(vendor, package, opener=open_driver_or_fake)
        self._kernels: dict[str, Callable[..., Any]] | None = None

    def hooks(self) -> dict[str, Callable[..., Any]]:
        """Every hook implementation, by name (for the vendor's plugin module to export)."""
        return {name: getattr(self, name) for name in dir(type(self)) if hasattr(getattr(self, name), "ember_impl")}

    def _device(self, device: Any) -> Any:
        return self.runtime.device(device.index)

    # ---- identity and kernels ------------------------------------------------------------------

    @hookimpl
    def ember_plugin_info(self) -> PluginInfo:
        files = resources.files(self.package)
        try:
            build = json.loads(files.joinpath("kernels", BUILD_INFO).read_text())
        except (OSError, ValueError) as exc:
            raise PluginError(f"{self.vendor.package}: its kernels were not built ({exc}); reinstall it on a machine "
                              f"with the compiler its README names: pip install --force-reinstall "
                              f"{self.vendor.package}") from None
        if build.get("kernel_abi") != abi.ABI_VERSION:
            raise PluginError(f"{self.vendor.package}'s kernels were built for ember-gpu's kernel ABI "
                              f"{build.get('kernel_abi')}, but the installed ember-gpu speaks {abi.ABI_VERSION}; "
                              f"reinstall {self.vendor.package} against it: pip install --force-reinstall "
                              f"{self.vendor.package}")
        manifest = files.joinpath("kernels", ops.MANIFEST)
        if not manifest.is_file():
            raise PluginError(f"{self.vendor.package}: its build wrote no kernels/{ops.MANIFEST} (built by an older "
                              f"build step?); reinstall it: pip install --force-reinstall {self.vendor.package}")
        version = importlib.import_module(self.package).__version__
        return PluginInfo(name=self.vendor.name, version=version, abi=tuple(build["ember_abi"]),
                          device_types=(self.vendor.name,), manifest=str(manifest), package=self.vendor.package)

    @hookimpl
    def ember_kernels(self, device_type: str) -> Mapping[str, Any]:
        if device_type != self.vendor.name:
            return {}
        if self._kernels is None:
            layer = ops.OpLayer(ops.kernel_index(ops.package_kernels(self.package)), self.runtime)
            self._kernels = {op: kernel for op, (kernel, _) in layer.table().items()}
        return self._kernels

    # ---- devices --------------------------------------------------------------------------------

    @hookimpl
    def ember_device_count(self, device_type: str) -> int:
        return self.runtime.discover().count if device_type == self.vendor.name else 0

    @hookimpl
    def ember_device_unavailable_reason(self, device_type: str) -> str | None:
        if device_type != self.vendor.name:
            return f"{self.vendor.package} serves only {self.vendor.name!r}, not {device_type!r}"
        return self.runtime.discover().reason

    @hookimpl
    def ember_device_properties(self, device: Any) -> Mapping[str, Any]:
        from ember_gpu.blas import blas_for, tf32_enabled

        self.ember_kernels(self.vendor.name)  # (the op layer tells the BLAS which GEMM kernels the build holds)
        return {**self._device(device).properties(), "tf32": tf32_enabled(),  # (float32 matmul's setting)
                "gemm": blas_for(self.runtime).describe()}  # which GEMM float matmul runs on

    @hookimpl
    def ember_synchronize(self, device: Any) -> None:
        self._device(device).synchronize()

    # ---- memory ---------------------------------------------------------------------------------

    @hookimpl
    def ember_alloc(self, device: Any, nbytes: int) -> Any:
        return self._device(device).memory.alloc(nbytes)

    @hookimpl
    def ember_free(self, device: Any, handle: Any) -> None:
        opened = self.runtime.devices.get(device.index)
        if opened is not None:  # (a device forgotten by a reset or a fork frees nothing)
            opened.memory.free(handle)

    @hookimpl
    def ember_memory_stats(self, device: Any) -> Mapping[str, int]:
        return self._device(device).memory.stats()

    @hookimpl
    def ember_empty_cache(self, device: Any) -> None:
        opened = self.runtime.devices.get(device.index)
        if opened is not None and opened.usable:  # never open a device only to empty it
            opened.memory.empty_cache()

    # ---- copies ---------------------------------------------------------------------------------

    def _span(self, handle: Any, offset: int, nbytes: int) -> int:
        """The device address of ``nbytes`` at ``offset`` in ``handle``, checked to lie inside it."""
        if not (0 <= offset and offset + nbytes <= handle.nbytes):
            raise KernelError(f"{self.vendor.package}: a copy of {nbytes} bytes at offset {offset} overruns an "
                              f"allocation of {handle.nbytes} bytes (a bug in the caller)")
        return handle.pointer + offset

    @hookimpl
    def ember_copy_from_host(self, device: Any, dst: Any, dst_offset: int, src: memoryview) -> None:
        if src.nbytes:
            self._device(device).staging.upload(self._span(dst, dst_offset, src.nbytes), src)

    @hookimpl
    def ember_copy_to_host(self, device: Any, src: Any, src_offset: int, dst: memoryview) -> None:
        if dst.nbytes:
            self._device(device).staging.download(dst, self._span(src, src_offset, dst.nbytes))

    @hookimpl
    def ember_copy_on_device(self, device: Any, dst: Any, dst_offset: int, src_device: Any, src: Any,
                             src_offset: int, nbytes: int) -> None:
        from ember_gpu.transfer import copy_on_device

        copy_on_device(self._device(device), self._span(dst, dst_offset, nbytes), self._device(src_device),
                       self._span(src, src_offset, nbytes), nbytes)

    # ---- DLPack -----------------------------------------------------------------------------------

    @hookimpl
    def ember_dlpack_export(self, device: Any, handle: Any, byte_offset: int,
                            stream: Any) -> tuple[int, tuple[int, int]]:
        opened = self._device(device)
        vendor = self.vendor
        if stream is None:
            stream = vendor.dlpack_default_stream
        if not isinstance(stream, int) or stream in vendor.dlpack_invalid_streams:
            raise DLPackStreamError(f"__dlpack__: stream={stream!r} is not a {vendor.product} stream for DLPack; "
                                    f"pass the consumer's stream handle as an int, None for the default stream, or "
                                    f"-1 for none")
        if stream != -1:  # the consumer's stream waits for what ember queued so far
            opened.make_wait(opened.ffi.cast("void *", stream))
        return handle.pointer + byte_offset, (vendor.dlpack_device_type, opened.index)

    @hookimpl
    def ember_dlpack_import(self, device: Any, pointer: int, nbytes: int, owner: Any) -> Any:
        return self._device(device).memory.wrap(pointer, nbytes, owner)

    @hookimpl
    def ember_dlpack_stream(self, device: Any) -> int:
        opened = self._device(device)
        return int(opened.ffi.cast("uintptr_t", opened.stream))


def make_plugin(vendor: Vendor, package: str) -> GpuPlugin:
    """The hooks of the vendor plugin whose import name is ``package`` (kernels in its ``kernels/``)."""
    return GpuPlugin(vendor, package)
