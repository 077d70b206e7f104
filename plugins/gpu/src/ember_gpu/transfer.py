"""Copies between host and device through pinned staging buffers, and between devices.

The host memory the core hands over is pageable, which the DMA engines cannot read directly; the
driver would stage it itself, slowly.  Each device has two pinned buffers of ``CHUNK_BYTES``,
allocated on its first transfer, used in turn: while the engine copies one chunk, the host fills
or drains the other.  An upload returns as soon as the last chunk is queued (its bytes are in
pinned memory, so the caller's buffer is free again); a download returns when the bytes are in
the caller's buffer, which waits for the work queued before it on the device's stream.
"""

from __future__ import annotations

from typing import Any

CHUNK_BYTES = 8 << 20


class _Buffer:
    """One pinned buffer and the event marking the end of the copy that last used it."""

    def __init__(self, device: Any) -> None:
        from ember_gpu.device import Event

        ffi = device.ffi
        pointer = ffi.new("void **")
        device.call("mem_host_alloc", pointer, CHUNK_BYTES, device.vendor.host_alloc_portable)
        self.pointer = pointer[0]
        self.done = Event(device, timing=False)


class Staging:
    def __init__(self, device: Any) -> None:
        self.device = device
        self._buffers: list[_Buffer] = []

    def _pair(self) -> list[_Buffer]:
        if not self._buffers:
            self._buffers = [_Buffer(self.device), _Buffer(self.device)]
        return self._buffers

    def upload(self, dst: int, src: memoryview) -> None:
        """Copy the bytes of ``src`` to device address ``dst``."""
        device, ffi = self.device, self.device.ffi
        with device.lock:
            buffers = self._pair()
            for turn, start in enumerate(range(0, src.nbytes, CHUNK_BYTES)):
                size = min(CHUNK_BYTES, src.nbytes - start)
                buffer = buffers[turn % 2]
                buffer.done.synchronize()  # the engine has finished reading this buffer's last chunk
                ffi.memmove(buffer.pointer, src[start:start + size], size)
                device.call("memcpy_htod_async", dst + start, buffer.pointer, size, device.stream)
                buffer.done.record()

    def download(self, dst: memoryview, src: int) -> None:
        """Fill ``dst`` from device address ``src``; returns once the bytes are there."""
        device, ffi = self.device, self.device.ffi
        chunks = [(start, min(CHUNK_BYTES, dst.nbytes - start)) for start in range(0, dst.nbytes, CHUNK_BYTES)]
        with device.lock:
            buffers = self._pair()

            def queue(turn: int) -> None:
                start, size = chunks[turn]
                device.call("memcpy_dtoh_async", buffers[turn % 2].pointer, src + start, size, device.stream)
                buffers[turn % 2].done.record()

            if chunks:
                queue(0)
            for turn, (start, size) in enumerate(chunks):
                if turn + 1 < len(chunks):
                    queue(turn + 1)  # the engine fills the other buffer while this one is drained
                buffer = buffers[turn % 2]
                buffer.done.synchronize()
                ffi.memmove(dst[start:start + size], buffer.pointer, size)


def copy_on_device(dst_device: Any, dst: int, src_device: Any, src: int, nbytes: int) -> None:
    """Copy between device addresses, on one device or between two, queued on the destination's
    stream after the work queued on the source's.  Across devices, the source's stream then waits
    for the copy, so the source memory is not reused (a stream-ordered free) before it was read."""
    if not nbytes:
        return
    if dst_device is src_device:
        dst_device.call("memcpy_dtod_async", dst, src, nbytes, dst_device.stream)
        return
    src_device.make_wait(dst_device.stream)
    dst_device.call("memcpy_peer_async", dst, dst_device.peer, src, src_device.peer, nbytes, dst_device.stream)
    dst_device.make_wait(src_device.stream)
