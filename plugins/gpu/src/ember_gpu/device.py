"""One GPU: its primary context, its one stream, its properties, and checked driver calls.

All work of a device goes to ONE stream the runtime creates non-blocking (it never synchronizes
with the legacy default stream, so other libraries' work on that stream cannot stall ember's), so
everything ember queues on a device runs in the order it was queued.  A driver call that reports
a poisoned context (an illegal address, a failed launch) marks the device lost: every later call
on it raises DeviceLostError at once, without reaching the driver, so nothing hangs.
"""

from __future__ import annotations

import os
import threading
from typing import Any, NoReturn

from ember_core.errors import BackendUnavailableError, KernelError
from ember_gpu.errors import DeviceLostError, GpuError

# Device attributes read once when the device opens (the vendor table maps them to its enum).
ATTRIBUTES = (
    "compute_capability_major", "compute_capability_minor", "multiprocessor_count", "warp_size",
    "max_threads_per_block", "max_block_dim_x", "max_block_dim_y", "max_block_dim_z",
    "max_grid_dim_x", "max_grid_dim_y", "max_grid_dim_z", "max_shared_memory_per_block", "memory_pools_supported",
)


class GpuDevice:
    def __init__(self, runtime: Any, index: int) -> None:
        from ember_gpu.memory import Allocator
        from ember_gpu.module import Modules
        from ember_gpu.transfer import Staging

        self.runtime = runtime
        self.vendor = runtime.vendor
        self.driver = runtime.driver
        self.ffi = self.driver.ffi
        self.index = index
        self.lost: str | None = None
        self.lock = threading.RLock()  # staging buffers and launch argument buffers are shared state
        self._fn = self.driver.fn
        self._launch_kernel = self._fn["launch_kernel"]  # (launch is the per-op hot path: one native call)
        ffi = self.ffi
        out = ffi.new("int *")
        self.call_raw("device_get", out, index)
        self.handle = out[0]
        context = ffi.new("void **")
        self.call_raw("primary_ctx_retain", context, self.handle)
        self.context = context[0]
        self.peer = self.handle if self.vendor.peer_copy_by_ordinal else self.context  # how peer copies name it
        runtime.make_current(self)
        self.attributes = {}
        for name in ATTRIBUTES:
            self.call("device_get_attribute", out, self.vendor.attributes[name], self.handle)
            self.attributes[name] = out[0]
        name = ffi.new("char[256]")
        self.call("device_get_name", name, 256, self.handle)
        self.name = ffi.string(name).decode(errors="replace")
        total = ffi.new("size_t *")
        self.call("device_total_mem", total, self.handle)
        self.total_memory = total[0]
        self.call("driver_get_version", out)
        self.driver_version = out[0]
        if not self.attributes["memory_pools_supported"]:
            raise BackendUnavailableError(
                f"{self}: {self.name} does not support stream-ordered memory pools, which {self.vendor.package}'s "
                f"allocator needs (virtualized GPUs may lack them); install {self.vendor.min_driver}")
        stream = ffi.new("void **")
        self.call("stream_create", stream, self.vendor.stream_non_blocking)
        self.stream = stream[0]
        self.max_grid = tuple(self.attributes[f"max_grid_dim_{axis}"] for axis in "xyz")
        self.max_block = tuple(self.attributes[f"max_block_dim_{axis}"] for axis in "xyz")
        self.max_threads_per_block = self.attributes["max_threads_per_block"]
        self.launch_blocking = os.environ.get("EMBER_LAUNCH_BLOCKING", "0") not in ("", "0")
        self.memory = Allocator(self)
        self.staging = Staging(self)
        self.modules = Modules(self)
        self._order_event = Event(self, timing=False)  # orders work between this stream and others

    def __str__(self) -> str:
        return f"{self.vendor.name}:{self.index}"

    # ---- checked calls ----------------------------------------------------------------------------

    def call_raw(self, name: str, *args: Any) -> None:
        """A checked driver call that needs no current context of this device."""
        if self.lost is not None:
            self._refuse_lost()
        status = self._fn[name](*args)
        if status:
            raise self._failed(status, name)

    def _refuse_lost(self) -> NoReturn:
        raise DeviceLostError(f"{self} was lost earlier ({self.lost}); nothing more can run on it in this "
                              f"process: restart it (EMBER_LAUNCH_BLOCKING=1 pins the error to its op)")

    def call(self, name: str, *args: Any) -> None:
        """A checked driver call in this device's context."""
        self.runtime.make_current(self)
        self.call_raw(name, *args)

    def _failed(self, status: int, name: str) -> GpuError:
        error = self.driver.error(status, name)
        if isinstance(error, DeviceLostError):
            self.lost = str(error)
        return error

    @property
    def usable(self) -> bool:
        """Whether driver calls may still be made (finalizers check this: they must never raise)."""
        return self.lost is None

    # ---- ordering ---------------------------------------------------------------------------------

    def synchronize(self) -> None:
        self.call("stream_synchronize", self.stream)

    def make_wait(self, stream: Any) -> None:
        """Make ``stream`` (another device's or library's) wait for the work queued here so far."""
        self._order_event.record()
        self.call("stream_wait_event", stream, self._order_event.handle, 0)

    # ---- launches ---------------------------------------------------------------------------------

    def launch(self, function: Any, kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int],
               shared_bytes: int, extra: Any) -> None:
        """Queue one kernel; with EMBER_LAUNCH_BLOCKING=1, wait for it so an error names this kernel."""
        (gx, gy, gz), (bx, by, bz), (mgx, mgy, mgz), (mbx, mby, mbz) = grid, block, self.max_grid, self.max_block
        if not (0 < gx <= mgx and 0 < gy <= mgy and 0 < gz <= mgz and 0 < bx <= mbx and 0 < by <= mby
                and 0 < bz <= mbz and bx * by * bz <= self.max_threads_per_block):
            raise KernelError(f"{self.vendor.package}: {kernel} launched with grid {grid} and block {block}, beyond "
                              f"{self}'s limits (grid {self.max_grid}, block {self.max_block}, "
                              f"{self.attributes['max_threads_per_block']} threads); a bug in the op layer")
        if self.lost is not None:
            self._refuse_lost()
        self.runtime.make_current(self)
        status = self._launch_kernel(function, gx, gy, gz, bx, by, bz, shared_bytes, self.stream, self.ffi.NULL, extra)
        if status:
            raise self._failed(status, "launch_kernel")
        if self.launch_blocking:
            try:
                self.synchronize()
            except GpuError as exc:
                raise type(exc)(f"{exc} (in {kernel}, EMBER_LAUNCH_BLOCKING=1)", exc.status, exc.function) from None

    def blocks_for(self, items: int, threads: int, items_per_thread: int = 1) -> int:
        """Blocks of a 1-d grid-stride kernel over ``items``, capped by the device's grid limit."""
        return max(1, min(-(-items // (threads * items_per_thread)), self.max_grid[0]))

    def properties(self) -> dict[str, Any]:
        major, minor = self.attributes["compute_capability_major"], self.attributes["compute_capability_minor"]
        return {
            "name": self.name,
            "compute_capability": f"{major}.{minor}",
            "memory": self.total_memory,
            "multiprocessors": self.attributes["multiprocessor_count"],
            "warp_size": self.attributes["warp_size"],
            "max_threads_per_block": self.attributes["max_threads_per_block"],
            "max_grid": self.max_grid,
            "driver": f"{self.vendor.product} {self.vendor.version_words(self.driver_version)}",
            "launch_blocking": self.launch_blocking,
        }


class Event:
    """A device event: ``record()`` marks the stream's current point; timing events measure between two."""

    __slots__ = ("device", "handle")

    def __init__(self, device: GpuDevice, timing: bool = True) -> None:
        self.device = device
        handle = device.ffi.new("void **")
        device.call("event_create", handle, 0 if timing else device.vendor.event_disable_timing)
        self.handle = handle[0]

    def record(self) -> Event:
        self.device.call("event_record", self.handle, self.device.stream)
        return self

    def synchronize(self) -> None:
        self.device.call("event_synchronize", self.handle)

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to ``end`` (both recorded; waits for ``end``)."""
        end.synchronize()
        out = self.device.ffi.new("float *")
        self.device.call("event_elapsed_time", out, self.handle, end.handle)
        return float(out[0])

    def __del__(self) -> None:
        device = getattr(self, "device", None)
        if device is not None and device.usable and hasattr(self, "handle"):
            try:
                device.call("event_destroy", self.handle)
            except Exception:  # a finalizer must not raise (the driver may be shutting down)
                pass
