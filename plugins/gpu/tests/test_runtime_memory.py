"""The device, its stream and the caching allocator on the fake driver: statistics, handles that
own their allocation, out of memory (cache returned, retried, then a MemoryError with the sizes),
contexts per thread, and a poisoned device failing at once."""

from __future__ import annotations

import threading

import pytest
from ember_gpu.errors import DeviceLostError, GpuOutOfMemoryError
from ember_gpu.memory import DeviceMemory
from testgpu_vendor import TEST_VENDOR


def test_the_device_opens_its_primary_context_and_one_non_blocking_stream(fake, device):
    assert fake.count("primary_ctx_retain") == 1 and fake.count("stream_create") == 1
    props = device.properties()
    assert props["name"] == "ember fake GPU" and props["compute_capability"] == "3.5"
    assert props["memory"] == 1 << 20 and props["warp_size"] == 64 and props["driver"] == "TestGPU 7.2"
    stream = int(fake.ffi.cast("uintptr_t", device.stream))
    assert fake.stream_flags == {stream: TEST_VENDOR.stream_non_blocking}  # created: never the NULL stream
    assert fake.devices[0].release_threshold == 2**64 - 1  # freed memory stays cached in the pool


def test_allocations_are_stream_ordered_and_counted(fake, device):
    memory = device.memory
    a, b = memory.alloc(1000), memory.alloc(3000)
    assert fake.count("mem_alloc_async") == 2 and a.pointer % 256 == 0
    stats = memory.stats()
    assert stats["allocated_bytes"] == 4000 and stats["peak_bytes"] == 4000 and stats["live_allocations"] == 2
    assert stats["reserved_bytes"] == 1024 + 3072 and stats["cached_bytes"] == 0
    memory.free(a)
    stats = memory.stats()
    assert stats["allocated_bytes"] == 3000 and stats["peak_bytes"] == 4000
    assert stats["reserved_bytes"] == 4096 and stats["cached_bytes"] == 1024  # kept by the pool
    memory.empty_cache()
    assert memory.stats()["reserved_bytes"] == 3072 and memory.stats()["cached_bytes"] == 0
    assert fake.count("stream_synchronize") >= 1  # queued frees happen before the trim
    memory.free(b)


def test_zero_bytes_allocate_nothing(fake, device):
    handle = device.memory.alloc(0)
    assert handle.pointer == 0 and fake.count("mem_alloc_async") == 0
    device.memory.free(handle)
    assert fake.count("mem_free_async") == 0


def test_only_the_handle_handed_out_frees_its_memory(fake, device):
    memory = device.memory
    a = memory.alloc(512)
    memory.free(DeviceMemory(a.pointer, a.nbytes))  # a copy of the pointer: not the allocation
    assert fake.count("mem_free_async") == 0 and memory.stats()["allocated_bytes"] == 512
    memory.free(a)
    memory.free(a)  # twice: the second is ignored
    memory.free("junk")
    assert fake.count("mem_free_async") == 1 and memory.stats()["allocated_bytes"] == 0


def test_out_of_memory_returns_the_cache_and_retries(fake, device):
    memory = device.memory
    big = memory.alloc(600 << 10)
    memory.free(big)  # cached by the pool: reserved, unused
    assert fake.reserved_bytes() == 600 << 10
    again = memory.alloc(700 << 10)  # does not fit beside the cached block: trimmed, then retried
    assert fake.count("mem_pool_trim_to") == 1 and fake.count("mem_alloc_async") == 3
    assert fake.reserved_bytes() == 700 << 10
    memory.free(again)


def test_out_of_memory_after_the_retry_says_how_much_was_asked_and_is_in_use(fake, device):
    memory = device.memory
    live = memory.alloc(300 << 10)
    with pytest.raises(GpuOutOfMemoryError) as caught:
        memory.alloc(900 << 10)
    message = str(caught.value)
    assert isinstance(caught.value, MemoryError)
    assert "out of memory on testgpu:0 allocating 900.00 KiB" in message
    assert "300.00 KiB in use by 1 tensors" in message and "of 1.00 MiB" in message
    assert fake.count("mem_pool_trim_to") == 1 and memory.stats()["allocated_bytes"] == 300 << 10
    memory.free(live)


def test_an_injected_out_of_memory_once_is_absorbed_by_the_retry(fake, device):
    fake.fail("tg_mem_alloc_async", TEST_VENDOR.out_of_memory, skip=2)  # the 3rd allocation fails once
    handles = [device.memory.alloc(256) for _ in range(4)]
    assert fake.count("mem_alloc_async") == 5 and fake.count("mem_pool_trim_to") == 1
    for handle in handles:
        device.memory.free(handle)


def test_each_thread_gets_the_devices_context_before_its_calls(fake, runtime):
    first, second = runtime.device(0), runtime.device(1)
    errors = []

    def work(device):
        try:
            device.memory.free(device.memory.alloc(256))
            device.synchronize()
        except Exception as exc:  # the fake answers a call without a current context with an error
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(d,)) for d in (first, second, first)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert fake.count("ctx_set_current") >= 4  # the opening thread twice, each new thread once


def test_a_poisoned_context_fails_every_later_call_at_once(fake, device):
    handle = device.memory.alloc(256)
    fake.fault(700)  # a kernel's illegal access: reported by the next call
    with pytest.raises(DeviceLostError, match="TG_ILLEGAL_ADDRESS"):
        device.synchronize()
    calls = len(fake.calls)
    for attempt in (device.synchronize, lambda: device.memory.alloc(16), device.memory.stats):
        with pytest.raises(DeviceLostError, match=r"was lost earlier .*restart"):
            attempt()
    device.memory.free(handle)  # a finalizer: no error, no driver call
    assert len(fake.calls) == calls  # none of these reached the driver, so none can hang


def test_events_time_work_on_the_stream(device):
    from ember_gpu.device import Event

    start, end = Event(device).record(), Event(device).record()
    assert start.elapsed_ms(end) >= 0.0
