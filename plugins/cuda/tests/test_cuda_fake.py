"""The installed ember-cuda plugin through ember's public API, on ember-gpu's fake driver with two
GPUs: tensors on cuda:0 and cuda:1 and copies between them, memory statistics and empty_cache,
out of memory, a poisoned device, fork, and DLPack both ways (the native ops: test_cuda_ops.py)."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from ember_gpu.errors import DeviceLostError, GpuOutOfMemoryError

import ember_core as em
from ember_core import interop

pytestmark = pytest.mark.no_device


def _stats(device: str) -> dict:
    return em.as_device(device).backend.hooks["ember_memory_stats"](em.as_device(device))


def test_tensors_on_two_devices_and_copies_between_them(fake_cuda):
    values = np.arange(24.0).reshape(4, 6)
    x = em.asarray(values, device="cuda:0")
    assert x.device == em.Device("cuda", 0) and x.tolist() == values.tolist()
    y = x.to_device("cuda:1")
    assert y.device == em.Device("cuda", 1) and y.tolist() == values.tolist()
    assert fake_cuda.count("memcpy_peer_async") == 1  # device to device, not through the host
    view = x[1:, ::2].mT  # a strided view read back through the transfer hooks
    assert view.tolist() == values[1:, ::2].T.tolist()
    x[0, :3] = em.asarray([-1.0, -2.0, -3.0], device="cuda:0")  # a write into a view on the device
    assert x[0].tolist() == [-1.0, -2.0, -3.0, 3.0, 4.0, 5.0]
    props = em.Device("cuda").backend.hooks["ember_device_properties"](em.Device("cuda", 1))
    assert props["name"] == "NVIDIA Fake H200" and props["compute_capability"] == "9.0"
    assert props["driver"] == "CUDA 13.0"


def test_statistics_and_empty_cache(fake_cuda):
    em.empty_cache()
    before = _stats("cuda:0")
    x = em.zeros((1 << 20,), dtype=em.float32, device="cuda:0")  # 4 MiB: beyond the core's small-block pool
    during = _stats("cuda:0")
    assert during["allocated_bytes"] - before["allocated_bytes"] == 4 << 20
    assert during["peak_bytes"] >= during["allocated_bytes"] and during["reserved_bytes"] >= 4 << 20
    del x
    gc.collect()
    after = _stats("cuda:0")
    assert after["allocated_bytes"] == before["allocated_bytes"] and after["cached_bytes"] >= 4 << 20
    em.empty_cache()
    assert fake_cuda.count("mem_pool_trim_to") >= 1 and _stats("cuda:0")["cached_bytes"] == 0


def test_out_of_memory_is_a_memory_error_with_the_sizes(fake_cuda):
    keep = em.zeros((4 << 20,), dtype=em.float32, device="cuda:0")  # 16 of the fake's 64 MiB
    with pytest.raises(GpuOutOfMemoryError) as caught:
        em.empty((64 << 20,), dtype=em.float32, device="cuda:0")
    assert isinstance(caught.value, MemoryError)
    assert "out of memory on cuda:0 allocating 256.00 MiB: 16.00 MiB in use" in str(caught.value)
    assert keep.shape == (4 << 20,)


def test_a_poisoned_device_raises_at_once_and_other_devices_keep_working(fake_cuda):
    x = em.ones(8, device="cuda:0")
    y = em.ones(8, device="cuda:1")
    fake_cuda.fault(719)  # a kernel failed on cuda:0
    with pytest.raises(DeviceLostError, match="CUDA_ERROR_LAUNCH_FAILED"):
        x.tolist()
    calls = len(fake_cuda.calls)
    with pytest.raises(DeviceLostError, match="cuda:0 was lost earlier"):
        em.zeros(4, device="cuda:0")
    assert len(fake_cuda.calls) == calls  # refused without a driver call: it cannot hang
    fake_cuda._poisoned = 0  # the fake's context is one; a real poisoned context is cuda:0's alone
    assert y.tolist() == [1.0] * 8


def test_a_forked_child_sees_no_device_and_is_told_to_spawn(fake_cuda):
    em.ones(2, device="cuda:0")
    pid = os.fork()
    if pid == 0:
        try:
            em.ones(2, device="cuda:0")
            os._exit(1)
        except em.BackendUnavailableError as exc:
            os._exit(0 if "spawn" in str(exc) else 2)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


class _Producer:
    """Another library's tensor: hands out ember's own capsule (as torch would hand out its own)."""

    def __init__(self, tensor: em.Tensor) -> None:
        self.tensor = tensor
        self.streams: list = []

    def __dlpack__(self, *, stream=None, max_version=None):
        self.streams.append(stream)
        return self.tensor.__dlpack__(stream=stream, max_version=max_version)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


def test_dlpack_round_trip_shares_device_memory_and_orders_the_streams(fake_cuda):
    from ember_cuda.plugin import PLUGIN

    values = np.arange(12, dtype=np.int32).reshape(3, 4)
    source = em.asarray(values, device="cuda:1")
    assert source.__dlpack_device__() == (2, 1)  # kDLCUDA, GPU 1
    producer = _Producer(source.mT)
    waits = fake_cuda.count("stream_wait_event")
    imported = em.from_dlpack(producer)
    ours = PLUGIN.runtime.device(1)
    assert producer.streams == [int(fake_cuda.ffi.cast("uintptr_t", ours.stream))]  # our stream, given to it
    assert fake_cuda.count("stream_wait_event") == waits + 1  # ...which waits for the producer's work
    assert imported.device == em.Device("cuda", 1) and imported.tolist() == values.T.tolist()
    assert imported._storage.handle.pointer == source._storage.handle.pointer  # zero-copy
    gc.collect()
    exported = len(interop._exported)
    del imported
    gc.collect()
    assert len(interop._exported) == exported - 1  # the producer's deleter ran
    copied = em.from_dlpack(_Producer(source), copy=True)
    assert copied._storage.handle.pointer != source._storage.handle.pointer
    assert copied.tolist() == values.tolist()


def test_the_consumers_stream_argument(fake_cuda):
    x = em.ones(4, device="cuda:0")
    waits = fake_cuda.count("stream_wait_event")
    x.__dlpack__()  # stream None: the legacy default stream (1) waits for ours
    x.__dlpack__(stream=-1)  # no ordering asked for
    assert fake_cuda.count("stream_wait_event") == waits + 1
    with pytest.raises(ValueError, match="stream=0"):
        x.__dlpack__(stream=0)  # ambiguous for CUDA: DLPack forbids it
