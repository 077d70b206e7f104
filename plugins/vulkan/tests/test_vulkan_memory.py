"""Where tensors live and how bytes reach them: device-local memory, copied through the staging ring
where device-local memory is a heap of its own (a discrete GPU), mapped where memory is unified.
lavapipe has one unified heap, so the staging path is forced with EMBER_VULKAN_STAGING=1 in a fresh
process (the device reads it when it opens) and checked end to end there."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from ember_vulkan import runtime

STAGED_RUN = r"""
import numpy as np
import ember_core as em
from ember_vulkan import runtime
from ember_vulkan._native import lib

device = em.as_device("vulkan:0")
props = device.backend.hooks["ember_device_properties"](device)
assert props["host_copies"] == "staged", props["host_copies"]
dev = runtime.device(0)
assert not dev.map_host
data = np.random.default_rng(5).standard_normal((300, 200)).astype(np.float32)
x = em.asarray(data, device="vulkan")
assert lib.evk_recorded(dev.native) >= 1  # the upload is a recorded copy out of the staging ring
y = (x * 2 + 1).sum(axis=0)
assert np.allclose(np.asarray(y.to_device("cpu")), (data * 2 + 1).sum(axis=0), rtol=1e-5, atol=1e-4)
big = np.arange(5 << 20, dtype=np.int32)  # 20 MiB: more than the 16 MiB staging ring, both ways
assert np.array_equal(np.asarray(em.asarray(big, device="vulkan").to_device("cpu")), big)
print("staged ok")
"""


def _heaps(*device_local: bool) -> SimpleNamespace:
    return SimpleNamespace(heap_count=len(device_local), heap_device_local=list(device_local))


def test_copies_are_staged_only_where_device_memory_is_a_heap_of_its_own() -> None:
    assert runtime.separate_device_heap(_heaps(True, False))  # discrete GPU: VRAM and the host's memory
    assert runtime.separate_device_heap(_heaps(True, False, True))  # with a BAR window
    assert not runtime.separate_device_heap(_heaps(True))  # lavapipe, integrated GPUs
    assert not runtime.separate_device_heap(_heaps(True, True))


def test_the_forced_staging_path_end_to_end() -> None:
    env = {**os.environ, runtime.STAGING_ENV: "1"}
    proc = subprocess.run([sys.executable, "-c", STAGED_RUN], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "staged ok" in proc.stdout


def test_unified_memory_is_mapped_by_default(vk) -> None:
    props = vk.backend.hooks["ember_device_properties"](vk)
    expected = "staged" if runtime.separate_device_heap(runtime.device(0).info) else "mapped"
    assert props["host_copies"] == expected


def test_a_bad_staging_setting_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runtime.STAGING_ENV, "yes")
    with pytest.raises(ValueError, match="EMBER_VULKAN_STAGING must be 0 or 1"):
        runtime.staging_forced()
