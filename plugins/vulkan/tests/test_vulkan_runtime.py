"""The device contract of ember-vulkan: discovery and the unavailable path, the sub-allocating
pool, host <-> device <-> device copies (mapped and staged), batching with no hazards, the CPU
fallback for ops without shaders, and an end-to-end computation equal to the cpu backend's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from ember_vulkan import plugin, runtime
from tolerances import assert_close, to_numpy

import ember_core as em

DEV = em.as_device("vulkan:0")


def _device() -> runtime.VulkanDevice:
    return runtime.device(0)


@pytest.mark.no_device
def test_no_driver_reports_unavailable_without_crashing():
    """A child process whose loader finds no driver: the plugin registers, counts 0 devices, says
    why, and using the device raises a typed error while cpu keeps working."""
    script = textwrap.dedent("""
        import ember_core as em
        from ember_core.errors import BackendUnavailableError
        from ember_vulkan import plugin
        assert plugin.ember_device_count("vulkan") == 0
        reason = plugin.ember_device_unavailable_reason("vulkan")
        assert "driver" in reason, reason
        try:
            em.ones(3, device="vulkan:0")
        except BackendUnavailableError as exc:
            assert "not available" in str(exc) and "driver" in str(exc), exc
        else:
            raise AssertionError("no error")
        assert (em.ones(2) + 1).tolist() == [2.0, 2.0]
        print("OK", reason)
    """)
    env = {**os.environ, "VK_DRIVER_FILES": "/nonexistent/icd.json", "VK_ICD_FILENAMES": "/nonexistent/icd.json"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("OK")
    listing = subprocess.run([sys.executable, "-m", "ember_core.cli", "backends"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert listing.returncode == 0 and "vulkan" in listing.stdout, listing.stderr


def test_device_properties():
    props = plugin.ember_device_properties(DEV)
    assert props["name"] and props["subgroup_size"] >= 1 and props["memory"] > 0
    assert props["memory_heaps"] and len(props["max_workgroup_count"]) == 3
    assert plugin.ember_device_unavailable_reason("vulkan") is None
    assert plugin.ember_device_count("cuda") == 0 and plugin.ember_kernels("cuda") == {}


# ---- the pool ------------------------------------------------------------------------------------

def test_pool_reuses_slots_and_counts_honestly():
    dev = _device()
    dev.flush()
    before = plugin.ember_memory_stats(DEV)
    a = plugin.ember_alloc(DEV, 1000)
    b = plugin.ember_alloc(DEV, 1000)
    assert a != b
    stats = plugin.ember_memory_stats(DEV)
    assert stats["allocated_bytes"] == before["allocated_bytes"] + 2000
    assert stats["peak_bytes"] >= stats["allocated_bytes"]
    plugin.ember_free(DEV, a)
    again = plugin.ember_alloc(DEV, 1000)
    assert again == a  # the freed slot comes back (a new handle object: the old one frees nothing now)
    many = [plugin.ember_alloc(DEV, 512) for _ in range(200)]
    after = plugin.ember_memory_stats(DEV)
    assert after["device_allocations"] - stats["device_allocations"] <= 1  # 200 small tensors, <= one slab
    for h in (*many, again, b):
        plugin.ember_free(DEV, h)
    assert plugin.ember_memory_stats(DEV)["allocated_bytes"] == before["allocated_bytes"]


def test_zero_size_and_large_blocks():
    zero1, zero2 = plugin.ember_alloc(DEV, 0), plugin.ember_alloc(DEV, 0)
    assert zero1 != zero2
    plugin.ember_free(DEV, zero1)
    plugin.ember_free(DEV, zero2)
    big = plugin.ember_alloc(DEV, 3 << 20)
    plugin.ember_free(DEV, big)
    cached = plugin.ember_memory_stats(DEV)
    assert cached["cached_bytes"] >= 3 << 20
    assert plugin.ember_alloc(DEV, 3 << 20) == big  # the cached block is reused
    plugin.ember_free(DEV, big)
    assert _device().pool.release_cached()
    assert plugin.ember_memory_stats(DEV)["reserved_bytes"] < cached["reserved_bytes"]
    plugin.ember_free(DEV, 12345)  # unknown handles are ignored by free (it runs from finalizers)


def test_a_block_goes_back_to_the_pool_once():
    """Only the handle object the pool handed out frees or reaches its block: freeing a handle a
    second time, after its slot went to a new allocation (what two owners of one handle did), or
    freeing a copy of its number, leaves the new allocation alone."""
    from ember_core.errors import KernelError

    _device().flush()
    first = plugin.ember_alloc(DEV, 256)
    plugin.ember_free(DEV, first)
    second = plugin.ember_alloc(DEV, 256)
    assert second == first  # the slot is reused: same address, a new handle
    plugin.ember_free(DEV, first)
    plugin.ember_free(DEV, int(second))
    third = plugin.ember_alloc(DEV, 256)
    assert third != second
    with pytest.raises(KernelError, match="a copy of a handle"):
        plugin.ember_copy_to_host(DEV, int(second), 0, memoryview(bytearray(4)))
    plugin.ember_copy_to_host(DEV, second, 0, memoryview(bytearray(4)))
    for handle in (second, third):
        plugin.ember_free(DEV, handle)


def test_bad_handles_and_ranges_are_typed_errors():
    from ember_core.errors import KernelError

    handle = plugin.ember_alloc(DEV, 64)
    with pytest.raises(KernelError, match="outside an allocation"):
        plugin.ember_copy_from_host(DEV, handle, 32, memoryview(bytearray(64)))
    with pytest.raises(KernelError, match="not a live allocation"):
        plugin.ember_copy_to_host(DEV, 999, 0, memoryview(bytearray(4)))
    with pytest.raises(MemoryError):
        plugin.ember_alloc(DEV, 1 << 50)
    plugin.ember_free(DEV, handle)


# ---- copies ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "staged"])
def test_copies_between_host_and_device(mapped):
    dev = _device()
    dev.map_host = mapped
    try:
        data = np.random.default_rng(0).integers(0, 255, 20 << 20, dtype=np.uint8)  # > the staging ring
        handle = plugin.ember_alloc(DEV, data.nbytes)
        plugin.ember_copy_from_host(DEV, handle, 0, memoryview(data))
        other = plugin.ember_alloc(DEV, data.nbytes)
        plugin.ember_copy_on_device(DEV, other, 0, DEV, handle, 0, data.nbytes)
        back = np.zeros_like(data)
        plugin.ember_copy_to_host(DEV, other, 0, memoryview(back))
        assert (back == data).all()
        piece = np.zeros(100, np.uint8)
        plugin.ember_copy_to_host(DEV, handle, 12345, memoryview(piece))
        assert (piece == data[12345:12445]).all()
        x = em.asarray(np.arange(10.0), device=DEV, dtype="float32")
        y = x * 2  # recorded; the upload below must land after it reads x
        x[:] = em.asarray(np.full(10, -1.0), device=DEV, dtype="float32")
        assert_close(y, np.arange(10.0) * 2, "float32")
        assert_close(x, np.full(10, -1.0), "float32")
        plugin.ember_free(DEV, handle)
        plugin.ember_free(DEV, other)
    finally:
        dev.map_host = True


def test_to_device_and_back():
    src = np.random.default_rng(3).standard_normal((33, 17)).astype(np.float32)
    x = em.asarray(src).to_device("vulkan:0")
    assert x.device == DEV and np.array_equal(np.asarray(x.to_device("cpu")), src)
    assert np.array_equal(np.asarray(x.mT), src.T)


# ---- batching ------------------------------------------------------------------------------------

def test_many_ops_before_one_readback(vk):
    dev = _device()
    x = em.asarray(np.linspace(-1, 1, 1000), dtype="float32")
    ref = to_numpy(x).astype(np.float64)
    dev.flush()
    before = dev.submissions
    for i in range(100):  # each op reads the previous one's output: a chain of RAW dependencies
        x = x * 0.5 + float(i % 3)
        ref = ref * 0.5 + float(i % 3)
    y = em.sum(x[::3])
    assert dev.submissions == before  # nothing submitted yet
    assert_close(y, ref[::3].sum(), "float32", atol=1e-3)
    assert dev.submissions == before + 1  # one batch for all of it


def test_full_batches_are_submitted_and_stay_ordered(vk):
    dev = _device()
    dev.flush()
    before = dev.submissions
    x = em.zeros(4096, dtype="int64")
    for _ in range(runtime.MAX_BATCH + 50):
        x = x + 1
    assert dev.submissions >= before + 1
    assert (np.asarray(x) == runtime.MAX_BATCH + 50).all()


def test_in_place_writes_within_a_batch(vk):
    x = em.zeros((8, 8), dtype="float32")
    for i in range(8):
        x[i, :] = x[i - 1, :] + 1.0 if i else x[0, :] + 1.0  # each row reads the row written before it
    assert_close(x, np.repeat(np.arange(1, 9, dtype=np.float64)[:, None], 8, axis=1), "float32")


def test_ops_without_shaders_fall_back_to_the_host():
    em.reset_fallback_report()
    x = em.asarray(np.array([3.0, 1.0, 2.0]), device=DEV)
    with em.fallback_policy("allow"):
        assert np.asarray(em.sort(x)).tolist() == [1.0, 2.0, 3.0]
        y = em.asarray(np.array([1.0, 2.0]), device=DEV, dtype="float64")
        assert (y / y).tolist() == [1.0, 1.0]  # float64 has shaders for add, subtract, multiply only
    ops = {entry["op"] for entry in em.fallback_report()}
    assert "sort" in ops and "divide" in ops  # sort of float64, divide of float64


# ---- end to end ------------------------------------------------------------------------------------

def _mlp(device: str, inputs: dict[str, np.ndarray]) -> dict[str, em.Tensor]:
    t = {k: em.asarray(v, device=device) for k, v in inputs.items()}
    hidden = em.tanh(t["x"] @ t["w1"] + t["b1"])
    logits = em.maximum(hidden @ t["w2"], 0.0) - em.mean(hidden, axis=1, keepdims=True)
    picked = em.take(logits, em.asarray([0, -1, 2], device=device), axis=0)
    return {"logits": logits, "argmax": em.argmax(logits, axis=1), "total": em.sum(picked * picked),
            "mask": em.where(logits > 0, logits, em.zeros_like(logits))}


def test_end_to_end_equals_cpu():
    rng = np.random.default_rng(11)
    inputs = {"x": rng.standard_normal((16, 20)), "w1": rng.standard_normal((20, 32)) * 0.3,
              "b1": rng.standard_normal(32) * 0.1, "w2": rng.standard_normal((32, 10)) * 0.3}
    inputs = {k: v.astype(np.float32) for k, v in inputs.items()}
    with em.fallback_policy("error"):
        on_vulkan = _mlp("vulkan:0", inputs)
    on_cpu = _mlp("cpu", inputs)
    for key in on_cpu:
        assert on_vulkan[key].device == DEV
        ref = to_numpy(on_cpu[key])
        assert_close(on_vulkan[key], ref.astype(np.float64) if ref.dtype.kind == "f" else ref, on_cpu[key].dtype,
                     atol=1e-5)
