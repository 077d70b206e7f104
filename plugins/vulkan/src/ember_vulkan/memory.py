"""Device memory: a sub-allocating pool over Vulkan memory blocks.

Small requests (up to 1 MiB) take a slot of their power-of-two size class from 4 MiB slabs, so a
small tensor costs a free-list pop instead of a vkAllocateMemory.  Larger requests get a block of
their own, kept in a bounded cache after they are freed (the next tensor of that size reuses it).
A handle is the allocation's device address (an int, what shaders are given), one ``Handle``
object per allocation: the pool serves and frees only the very object it handed out, so a copy of
the number (the address of a block since freed and handed to another tensor) can neither reach nor
free that tensor's memory, and no block goes back to the pool twice.  Frees requested while
recorded work is pending wait for the next flush, so no block is released (or slot rewritten from
the host) while the device may still use it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ember_core.errors import KernelError
from ember_vulkan._native import ffi, lib

SLAB_BYTES = 4 << 20
SMALLEST_SLOT = 256
LARGEST_SLOT = 1 << 20
LARGE_ROUNDING = 64 << 10
CACHE_LIMIT = 512 << 20  # freed large blocks kept for reuse, at most this many bytes
_OUT_OF_MEMORY = (-1, -2)  # VK_ERROR_OUT_OF_HOST_MEMORY, VK_ERROR_OUT_OF_DEVICE_MEMORY


class Handle(int):
    """A device address handed out by ``Pool.alloc``; its identity, not its value, names the allocation."""

    __slots__ = ()


@dataclass
class Allocation:
    handle: Handle
    block: Any  # evk_block * (a slab or a block of its own)
    offset: int  # bytes from the block's start
    nbytes: int  # as requested
    slot: int  # the slot size, or 0 for a block of its own


def _slot_size(nbytes: int) -> int:
    return max(SMALLEST_SLOT, 1 << (max(nbytes, 1) - 1).bit_length())


class Pool:
    def __init__(self, native_device: Any, max_allocation: int) -> None:
        self._dev = native_device
        self._max_allocation = max_allocation
        self.live: dict[int, Allocation] = {}
        self._free_slots: dict[int, list[tuple[Any, int]]] = {}
        self._slabs: list[Any] = []
        self._large_cache: OrderedDict[int, list[Any]] = OrderedDict()
        self._deferred: list[int] = []
        self.allocated_bytes = 0
        self.peak_bytes = 0
        self.reserved_bytes = 0
        self.device_allocations = 0

    # ---- blocks ---------------------------------------------------------------------------------

    def new_block(self, nbytes: int, host: bool) -> Any:
        """A Vulkan buffer with memory of its own; on exhaustion the caches are released once."""
        if nbytes > self._max_allocation:
            raise MemoryError(f"ember-vulkan: {nbytes} bytes exceed this device's largest allocation "
                              f"({self._max_allocation} bytes)")
        block = ffi.new("evk_block *")
        status = lib.evk_block_alloc(self._dev, nbytes, int(host), block)
        if status in _OUT_OF_MEMORY and self.release_cached():
            status = lib.evk_block_alloc(self._dev, nbytes, int(host), block)
        if status in _OUT_OF_MEMORY:
            raise MemoryError(f"ember-vulkan: out of device memory allocating {nbytes} bytes")
        if status:
            raise KernelError(f"ember-vulkan: vkAllocateMemory of {nbytes} bytes failed (VkResult {status})")
        self.reserved_bytes += nbytes
        self.device_allocations += 1
        return block

    def _release_block(self, block: Any) -> None:
        self.reserved_bytes -= block.size
        lib.evk_block_free(self._dev, block)

    # ---- allocation -----------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> int:
        if nbytes <= LARGEST_SLOT:
            slot = _slot_size(nbytes)
            free = self._free_slots.setdefault(slot, [])
            if not free:
                slab = self.new_block(SLAB_BYTES, host=False)
                self._slabs.append(slab)
                free.extend((slab, off) for off in range(SLAB_BYTES - slot, -1, -slot))
            block, offset = free.pop()
        else:
            slot, offset = 0, 0
            size = -(-nbytes // LARGE_ROUNDING) * LARGE_ROUNDING
            cached = self._large_cache.get(size)
            block = cached.pop() if cached else self.new_block(size, host=False)
            if cached is not None and not cached:
                del self._large_cache[size]
        handle = Handle(int(block.address) + offset)
        self.live[handle] = Allocation(handle, block, offset, nbytes, slot)
        self.allocated_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.allocated_bytes)
        return handle

    def _live(self, handle: Any) -> Allocation | None:
        alloc = self.live.get(handle) if isinstance(handle, int) else None
        return alloc if alloc is not None and alloc.handle is handle else None

    def lookup(self, handle: Any) -> Allocation:
        alloc = self._live(handle)
        if alloc is None:
            raise KernelError(f"ember-vulkan: {handle!r} is not a live allocation of this device "
                              f"(freed already, a copy of a handle, or from another device)")
        return alloc

    def free(self, handle: Any, *, pending_work: bool) -> None:
        if pending_work:
            self._deferred.append(handle)
            return
        alloc = self._live(handle)
        if alloc is None:
            return  # never raise from a finalizer; a double free is the core's bug, not a crash
        del self.live[handle]
        self.allocated_bytes -= alloc.nbytes
        if alloc.slot:
            self._free_slots[alloc.slot].append((alloc.block, alloc.offset))
            return
        size = alloc.block.size
        self._large_cache.setdefault(size, []).append(alloc.block)
        self._large_cache.move_to_end(size)
        while self.cached_large_bytes() > CACHE_LIMIT:
            oldest, blocks = next(iter(self._large_cache.items()))
            self._release_block(blocks.pop(0))
            if not blocks:
                del self._large_cache[oldest]

    def after_flush(self) -> None:
        """The device is idle: carry out the frees that waited for it."""
        deferred, self._deferred = self._deferred, []
        for handle in deferred:
            self.free(handle, pending_work=False)

    # ---- caches and statistics -------------------------------------------------------------------

    def cached_large_bytes(self) -> int:
        return sum(b.size for blocks in self._large_cache.values() for b in blocks)

    def release_cached(self) -> bool:
        """Give back cached large blocks and slabs with no live slot; True if anything went."""
        released = False
        for blocks in self._large_cache.values():
            for block in blocks:
                self._release_block(block)
                released = True
        self._large_cache.clear()
        busy = {id(a.block) for a in self.live.values() if a.slot}
        for slab in [s for s in self._slabs if id(s) not in busy]:
            for slot, free in self._free_slots.items():
                self._free_slots[slot] = [(b, off) for b, off in free if b is not slab]
            self._slabs.remove(slab)
            self._release_block(slab)
            released = True
        return released

    def stats(self) -> dict[str, int]:
        return {
            "allocated_bytes": self.allocated_bytes,
            "peak_bytes": self.peak_bytes,
            "reserved_bytes": self.reserved_bytes,
            "cached_bytes": self.reserved_bytes - sum(a.slot or a.block.size for a in self.live.values()),
            "live_allocations": len(self.live),
            "device_allocations": self.device_allocations,
        }

    def close(self) -> None:
        for block in self._slabs:
            lib.evk_block_free(self._dev, block)
        for blocks in self._large_cache.values():
            for block in blocks:
                lib.evk_block_free(self._dev, block)
        for alloc in self.live.values():
            if not alloc.slot:
                lib.evk_block_free(self._dev, alloc.block)
        self._slabs.clear()
        self._large_cache.clear()
        self.live.clear()
