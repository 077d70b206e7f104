"""The errors a GPU runtime raises: every failed driver call becomes one of these, naming the vendor
function, the vendor's error name and code, and what the user can do about it."""

from __future__ import annotations

from ember_core.errors import EmberError


class GpuError(EmberError):
    """A driver call failed.  ``status`` is the vendor's code, ``function`` the vendor symbol."""

    def __init__(self, message: str, status: int | None = None, function: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.function = function


class DriverError(GpuError, RuntimeError):
    """A driver call failed and the device is still usable (a bad argument, a missing kernel image...)."""


class DeviceLostError(GpuError, RuntimeError):
    """The device's context is poisoned (an illegal address, a failed launch): every later call on
    that device raises this at once; only a new process can use the device again."""


class GpuOutOfMemoryError(GpuError, MemoryError):
    """Device memory is exhausted even after the allocator returned its cache to the driver."""


class KernelImageError(GpuError, RuntimeError):
    """A kernel image is missing from the vendor package (a broken install)."""


class DLPackStreamError(EmberError, ValueError):
    """``__dlpack__(stream=...)`` named no stream of this vendor (a caller's mistake, not the plugin's)."""
