"""Copies on the fake driver: host <-> device through the two pinned staging buffers (chunked, in
turn), on one device, and between two devices with the streams ordered both ways."""

from __future__ import annotations

import numpy as np
import pytest
from ember_gpu import transfer


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(transfer, "CHUNK_BYTES", 64)
    return 64


def _bytes(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("nbytes", [1, 63, 64, 65, 64 * 5 + 7])
def test_upload_and_download_in_chunks_through_two_pinned_buffers(fake, device, small_chunks, nbytes):
    data = _bytes(nbytes)
    handle = device.memory.alloc(nbytes)
    device.staging.upload(handle.pointer, memoryview(data))
    assert fake.read(handle.pointer, nbytes) == data
    chunks = -(-nbytes // small_chunks)
    assert fake.count("memcpy_htod_async") == chunks
    assert fake.count("mem_host_alloc") == 2  # allocated on the first transfer, kept
    out = bytearray(nbytes)
    device.staging.download(memoryview(out), handle.pointer)
    assert bytes(out) == data and fake.count("memcpy_dtoh_async") == chunks
    assert fake.count("event_synchronize") >= 2 * chunks  # each buffer waits for its last copy
    assert fake.count("mem_host_alloc") == 2
    device.memory.free(handle)


def test_a_download_waits_for_its_copy_before_reading_the_staging_buffer(fake, device, small_chunks):
    handle = device.memory.alloc(200)
    fake.write(handle.pointer, _bytes(200, 1))
    order = []
    for name in ("memcpy_dtoh_async", "event_synchronize"):
        original = getattr(fake, "_" + name)

        def record(*args, name=name, original=original):
            order.append(name)
            return original(*args)

        setattr(fake, "_" + name, record)
    out = bytearray(200)
    device.staging.download(memoryview(out), handle.pointer)
    assert bytes(out) == _bytes(200, 1)
    # chunk i+1 is queued before chunk i is waited for: the engine fills one buffer while the other drains
    assert order[:3] == ["memcpy_dtoh_async", "memcpy_dtoh_async", "event_synchronize"]


def test_copies_on_one_device_and_between_two(fake, runtime):
    first, second = runtime.device(0), runtime.device(1)
    data = _bytes(300, 2)
    a, b, c = first.memory.alloc(300), first.memory.alloc(300), second.memory.alloc(300)
    fake.write(a.pointer, data)
    transfer.copy_on_device(first, b.pointer, first, a.pointer, 300)
    assert fake.read(b.pointer, 300) == data and fake.count("memcpy_peer_async") == 0
    waits = fake.count("stream_wait_event")
    transfer.copy_on_device(second, c.pointer, first, a.pointer + 100, 200)
    assert fake.read(c.pointer, 200) == data[100:]
    assert fake.count("memcpy_peer_async") == 1
    assert fake.count("stream_wait_event") == waits + 2  # the copy after the source's work, its reuse after the copy
    transfer.copy_on_device(second, c.pointer, first, a.pointer, 0)
    assert fake.count("memcpy_peer_async") == 1  # nothing to copy, nothing queued
