"""Device memory: the driver's stream-ordered pool, used as a caching allocator.

Why the driver's pool rather than one of our own: allocations and frees are ordered on the
device's stream (``mem_alloc_async`` / ``mem_free_async``), so a block freed while kernels queued
before the free still read it is reused only after they ran, with no host synchronization and no
bookkeeping of pending work here; the pool splits and merges blocks in the driver (no size classes
to tune, no fragmentation policy to maintain); and stream-ordered allocation is what works while a
stream is being captured into a graph (it becomes the graph's allocation node).  With its release
threshold set to the maximum, freed memory stays in the pool (``reserved``) instead of going back
to the driver at every synchronization, which is what makes it a cache; ``empty_cache`` trims it.

Out of memory: the cache is returned to the driver and the allocation retried once; then
GpuOutOfMemoryError (a MemoryError) says how much was asked for and how much is in use.

A handle is a ``DeviceMemory`` object owning one allocation: the allocator frees only the very
objects it handed out, so a stale copy of a pointer can neither reach nor free another tensor's
memory, and nothing is freed twice.
"""

from __future__ import annotations

from typing import Any

from ember_gpu.errors import GpuOutOfMemoryError

_MAX_THRESHOLD = 2**64 - 1


class DeviceMemory:
    """One allocation (or one imported foreign buffer, kept alive by ``owner``)."""

    __slots__ = ("__weakref__", "nbytes", "owner", "pointer")

    def __init__(self, pointer: int, nbytes: int, owner: Any = None) -> None:
        self.pointer = pointer
        self.nbytes = nbytes
        self.owner = owner

    def __repr__(self) -> str:
        return f"DeviceMemory({self.pointer:#x}, {self.nbytes} bytes{', imported' if self.owner is not None else ''})"


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} bytes"


class Allocator:
    def __init__(self, device: Any) -> None:
        self.device = device
        ffi = device.ffi
        pool = ffi.new("void **")
        device.call("device_get_default_mem_pool", pool, device.handle)
        self.pool = pool[0]
        threshold = ffi.new("uint64_t *", _MAX_THRESHOLD)
        device.call("mem_pool_set_attribute", self.pool, device.vendor.pool_attributes["release_threshold"], threshold)
        self._out = ffi.new("uint64_t *")
        self.live: set[DeviceMemory] = set()
        self.allocated_bytes = 0
        self.peak_bytes = 0

    def alloc(self, nbytes: int) -> DeviceMemory:
        pointer = self._allocate(nbytes) if nbytes else 0
        handle = DeviceMemory(pointer, nbytes)
        self.live.add(handle)
        self.allocated_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.allocated_bytes)
        return handle

    def _allocate(self, nbytes: int) -> int:
        device = self.device
        with device.lock:
            try:
                device.call("mem_alloc_async", self._out, nbytes, device.stream)
            except GpuOutOfMemoryError:
                self.empty_cache()
                try:
                    device.call("mem_alloc_async", self._out, nbytes, device.stream)
                except GpuOutOfMemoryError as exc:
                    raise GpuOutOfMemoryError(self._out_of_memory(nbytes), exc.status, exc.function) from None
            return int(self._out[0])

    def _out_of_memory(self, nbytes: int) -> str:
        device = self.device
        free, total = device.ffi.new("size_t *"), device.ffi.new("size_t *")
        device.call("mem_get_info", free, total)
        return (f"{device.vendor.package}: out of memory on {device} allocating {_size(nbytes)}: "
                f"{_size(self.allocated_bytes)} in use by {len(self.live)} tensors, {_size(self.reserved_bytes())} "
                f"reserved by ember's allocator, {_size(free[0])} free of {_size(total[0])} (the cache was "
                f"already returned to the driver); free tensors you no longer need, or use smaller batches")

    def wrap(self, pointer: int, nbytes: int, owner: Any) -> DeviceMemory:
        """A handle for foreign memory (DLPack): not counted as allocated, never freed here;
        releasing it drops ``owner``, which lets the producer free it."""
        handle = DeviceMemory(pointer, nbytes, owner)
        self.live.add(handle)
        return handle

    def free(self, handle: Any) -> None:
        """Give back a handle from ``alloc`` or ``wrap``; anything else is ignored (never raises)."""
        if handle not in self.live:
            return  # a stale or foreign object: freeing it would free someone else's memory
        self.live.discard(handle)
        device = self.device
        if handle.owner is not None:
            if device.usable:
                try:  # the producer may reuse the memory once released: let our queued work finish first
                    device.synchronize()
                except Exception:
                    pass
            handle.owner = None
            return
        self.allocated_bytes -= handle.nbytes
        if handle.pointer and device.usable:
            try:
                device.call("mem_free_async", handle.pointer, device.stream)
            except Exception:  # a finalizer must not raise (the driver may be shutting down: status 4)
                pass

    def empty_cache(self) -> None:
        """Return the pool's unused memory to the driver (after the queued frees have happened)."""
        device = self.device
        device.synchronize()
        device.call("mem_pool_trim_to", self.pool, 0)

    def reserved_bytes(self) -> int:
        return self._pool_figure("reserved_mem_current")

    def _pool_figure(self, name: str) -> int:
        value = self.device.ffi.new("uint64_t *")
        self.device.call("mem_pool_get_attribute", self.pool, self.device.vendor.pool_attributes[name], value)
        return int(value[0])

    def stats(self) -> dict[str, int]:
        reserved = self.reserved_bytes()
        return {
            "allocated_bytes": self.allocated_bytes,
            "peak_bytes": self.peak_bytes,
            "reserved_bytes": reserved,
            "cached_bytes": reserved - self._pool_figure("used_mem_current"),
            "live_allocations": sum(1 for h in self.live if h.owner is None),
        }
