"""One vendor's runtime: finding the driver and the devices (and, when there are none, why), the open
devices, and which context is current on each thread.

Nothing happens at import or construction: ``discover()`` opens the driver the first time a device
count is asked for.  A process forked after the driver was initialised cannot use it (no GPU
driver survives ``fork()``): the child sees no device, with that reason, and is told to use the
'spawn' start method.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ember_core.errors import BackendUnavailableError
from ember_gpu.driver import Driver, DriverUnavailable, open_driver
from ember_gpu.rtc import Compilation
from ember_gpu.vendor import Vendor


@dataclass(frozen=True)
class Discovery:
    count: int  # devices ember can address (0: none, see reason)
    reason: str | None  # why no device is usable, in words a user can act on
    unusable: dict[int, str] = field(default_factory=dict)  # ordinal -> why ember's kernels cannot run there


_RUNTIMES: weakref.WeakSet[Runtime] = weakref.WeakSet()


class Runtime:
    """The driver and devices of one vendor, for the plugin built on it (``ember_gpu.plugin``)."""

    def __init__(self, vendor: Vendor, package: str, opener: Callable[[Vendor], Driver] = open_driver) -> None:
        self.vendor = vendor
        self.package = package  # the import name whose ``kernels/`` holds the kernel images
        self._opener = opener
        self._lock = threading.RLock()
        self._thread = threading.local()  # .device: the GpuDevice whose context is current here
        self._discovery: Discovery | None = None
        self._forked = False
        self.driver: Driver | None = None
        self.devices: dict[int, Any] = {}
        self.rtc = Compilation(vendor, package)  # images compiled at run time for GPUs no shipped image serves
        _RUNTIMES.add(self)

    def reset(self, opener: Callable[[Vendor], Driver] | None = None) -> None:
        """Forget the driver and every device, and open the next one with ``opener`` (tests: a fake)."""
        with self._lock:
            if opener is not None:
                self._opener = opener
            self._discovery, self.driver, self._forked = None, None, False
            self.devices = {}
            self._thread = threading.local()

    # ---- discovery --------------------------------------------------------------------------------

    def discover(self) -> Discovery:
        """The devices, probed once; never raises."""
        found = self._discovery
        if found is None:
            with self._lock:
                if self._discovery is None:
                    self._discovery = self._probe()
                found = self._discovery
        return found

    def _probe(self) -> Discovery:
        vendor = self.vendor
        if self._forked:
            return Discovery(0, f"this process was forked after the {vendor.product} driver was initialised in "
                                f"its parent, and no GPU driver survives fork(): start worker processes with "
                                f"multiprocessing's 'spawn' (or 'forkserver') start method")
        try:
            driver = self._opener(vendor)
            status = driver.fn["init"](0)
            if status:
                return Discovery(0, f"the {vendor.product} driver did not initialise: {driver.describe(status)}")
            version = driver.ffi.new("int *")
            driver.call("driver_get_version", version)
            if version[0] < vendor.min_driver_version:
                return Discovery(0, f"the {vendor.product} driver supports {vendor.product} "
                                    f"{vendor.version_words(version[0])}, but {vendor.package}'s kernels need "
                                    f"{vendor.min_driver}: {vendor.driver_hint}")
            driver.bind_all()
            count = driver.ffi.new("int *")
            driver.call("device_get_count", count)
        except DriverUnavailable as exc:
            return Discovery(0, str(exc))
        except Exception as exc:  # a driver failing in an unforeseen way is a reason, not a crash of discovery
            return Discovery(0, f"the {vendor.product} driver failed: {exc}")
        if count[0] == 0:
            return Discovery(0, f"the {vendor.product} driver sees no GPU: {driver.describe(vendor.no_device)}")
        unusable = {ordinal: why for ordinal in range(count[0]) if (why := self._unusable(driver, ordinal))}
        if len(unusable) == count[0]:
            return Discovery(0, "; ".join(unusable.values()), unusable)
        self.driver = driver
        return Discovery(count[0], None, unusable)

    def _unusable(self, driver: Driver, ordinal: int) -> str | None:
        """Why ember's kernels cannot run on this device (its architecture is too old, or no shipped
        image covers it and none can be compiled for it), else None."""
        ffi = driver.ffi
        handle, value = ffi.new("int *"), ffi.new("int *")
        driver.call("device_get", handle, ordinal)
        capability = []
        for part in ("compute_capability_major", "compute_capability_minor"):
            driver.call("device_get_attribute", value, self.vendor.attributes[part], handle[0])
            capability.append(value[0])
        too_old = tuple(capability) < self.vendor.min_compute_capability
        uncompiled = None if too_old else self.rtc.decline_reason(driver, handle[0])
        if not too_old and uncompiled is None:
            return None
        name = ffi.new("char[256]")
        driver.call("device_get_name", name, 256, handle[0])
        device = f"{self.vendor.name}:{ordinal} ({ffi.string(name).decode(errors='replace')})"
        if uncompiled is not None:
            return f"{device}: {uncompiled}"
        need = ".".join(map(str, self.vendor.min_compute_capability))
        return (f"{device} has compute capability {capability[0]}.{capability[1]}, older than the {need} "
                f"{self.vendor.package}'s kernels are built for; hide it with {self.vendor.visible_devices_env}")

    # ---- devices ----------------------------------------------------------------------------------

    def device(self, index: int) -> Any:
        """The open device ``<vendor>:<index>``; BackendUnavailableError says why it cannot be used."""
        found = self.devices.get(index)
        if found is not None:
            return found
        discovery = self.discover()
        with self._lock:
            found = self.devices.get(index)
            if found is None:
                if discovery.count == 0:
                    raise BackendUnavailableError(f"{self.vendor.name}:{index} is not available: {discovery.reason}")
                if not 0 <= index < discovery.count:
                    raise BackendUnavailableError(f"{self.vendor.name}:{index} does not exist: the driver sees "
                                                  f"{discovery.count} device(s)")
                if index in discovery.unusable:
                    raise BackendUnavailableError(discovery.unusable[index])
                from ember_gpu.device import GpuDevice

                found = self.devices[index] = GpuDevice(self, index)
        return found

    def make_current(self, device: Any) -> None:
        """Bind ``device``'s context to the calling thread (the driver tracks contexts per thread)."""
        if getattr(self._thread, "device", None) is not device:
            device.call_raw("ctx_set_current", device.context)
            self._thread.device = device

    def kernel_image(self, name: str) -> bytes:
        """A kernel image shipped in the vendor package's ``kernels/`` directory."""
        from ember_gpu.errors import KernelImageError

        filename = name + self.vendor.image_suffix
        try:
            return resources.files(self.package).joinpath("kernels", filename).read_bytes()
        except (FileNotFoundError, ModuleNotFoundError):
            raise KernelImageError(f"{self.vendor.package}: the kernel image {filename} is missing; reinstall "
                                   f"{self.vendor.package} (pip install --force-reinstall {self.vendor.package})") \
                from None

    def _after_fork(self) -> None:
        if self.driver is not None or self.devices:
            self.reset()
            self._forked = True


def _after_fork_in_child() -> None:
    for runtime in list(_RUNTIMES):
        runtime._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
