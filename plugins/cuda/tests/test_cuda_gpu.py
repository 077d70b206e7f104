"""On a real GPU (skipped elsewhere with the reason): the runtime against the driver, ember-gpu's
generated kernels launched through the abi.h structs, faults pinned to their kernel, and DLPack
with PyTorch and CuPy on the same GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources

import numpy as np
import pytest
from ember_cuda.plugin import PLUGIN
from ember_gpu import abi
from ember_gpu.build import read_index
from ember_gpu.errors import GpuOutOfMemoryError
from ember_gpu.launch import Kernel

import ember_core as em


@pytest.fixture(scope="module")
def gpu():
    return PLUGIN.runtime.device(0)


def _kernel(device, name: str) -> Kernel:
    images = read_index(resources.files("ember_cuda").joinpath("kernels"))
    arg_type = "eg_fill_args" if name.startswith("eg_fill_") else "eg_flat_args"
    return Kernel(device, images[name].removesuffix(".fatbin"), name, abi.ffi, arg_type)


def _upload(device, data: np.ndarray):
    handle = device.memory.alloc(data.nbytes)
    device.staging.upload(handle.pointer, memoryview(np.ascontiguousarray(data)).cast("B"))
    return handle


def _download(device, handle, dtype, count: int) -> np.ndarray:
    out = np.empty(count, dtype)
    device.staging.download(memoryview(out).cast("B"), handle.pointer)
    return out


def test_the_device_is_described(gpu):
    props = gpu.properties()
    major, minor = map(int, props["compute_capability"].split("."))
    assert (major, minor) >= (8, 0) and props["memory"] > 1 << 30 and props["multiprocessors"] > 0
    assert props["warp_size"] == 32 and props["driver"].startswith("CUDA 13")


@pytest.mark.parametrize("nbytes", [1, 4097, (20 << 20) + 3])  # beyond the 8 MiB staging chunks
def test_bytes_survive_a_round_trip(gpu, nbytes):
    data = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    handle = _upload(gpu, data)
    assert np.array_equal(_download(gpu, handle, np.uint8, nbytes), data)
    gpu.memory.free(handle)


def test_generated_kernels_run_with_arguments_packed_from_abi_h(gpu):
    n = 1_000_003
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    ha, hb, out = _upload(gpu, a), _upload(gpu, b), gpu.memory.alloc(4 * n)
    add = _kernel(gpu, "eg_binary_add_float32_flat32")
    add((gpu.blocks_for(n, abi.BLOCK), 1, 1), (abi.BLOCK, 1, 1),
        {"out": out.pointer, "in": [ha.pointer, hb.pointer, 0], "n": n, "scalar_inputs": 0})
    assert np.array_equal(_download(gpu, out, np.float32, n), a + b)
    fill = _kernel(gpu, "eg_fill_float32_flat32")
    value = int(np.frombuffer(np.float32(2.5).tobytes() + bytes(4), np.uint64)[0])
    fill((gpu.blocks_for(n, abi.BLOCK), 1, 1), (abi.BLOCK, 1, 1), {"out": out.pointer, "n": n, "value": [value, 0]})
    assert (_download(gpu, out, np.float32, n) == 2.5).all()
    for handle in (ha, hb, out):
        gpu.memory.free(handle)


def test_an_illegal_address_loses_the_device_and_names_the_kernel_with_launch_blocking():
    code = """
import json, ember_core as em
from ember_cuda.plugin import PLUGIN
from ember_gpu import abi
from ember_gpu.errors import DeviceLostError
from test_cuda_gpu import _kernel
gpu = PLUGIN.runtime.device(0)
fill = _kernel(gpu, "eg_fill_float32_flat32")
result = {}
try:
    fill((64, 1, 1), (abi.BLOCK, 1, 1), {"out": 16, "n": 1 << 20, "value": [0, 0]})
except DeviceLostError as exc:
    result["first"] = str(exc)
try:
    gpu.memory.alloc(16)
except DeviceLostError as exc:
    result["then"] = str(exc)
print(json.dumps(result))
"""
    env = {**os.environ, "EMBER_LAUNCH_BLOCKING": "1", "PYTHONPATH": os.path.dirname(__file__)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in result["first"] and "eg_fill_float32_flat32" in result["first"]
    assert "was lost earlier" in result["then"]


def test_out_of_memory_and_the_cache(gpu):
    with pytest.raises(GpuOutOfMemoryError, match="out of memory on cuda:0 allocating"):
        gpu.memory.alloc(2 * gpu.total_memory)
    handle = gpu.memory.alloc(256 << 20)
    gpu.memory.free(handle)
    assert gpu.memory.stats()["cached_bytes"] >= 256 << 20
    em.empty_cache()
    assert gpu.memory.stats()["cached_bytes"] < 256 << 20


def test_two_gpus_copy_between_them():
    if PLUGIN.ember_device_count("cuda") < 2:
        pytest.skip("one GPU")
    with em.fallback_policy("allow"):
        x = em.asarray(np.arange(1 << 20, dtype=np.float32), device="cuda:0")
        assert np.array_equal(np.asarray(x.to_device("cuda:1")), np.arange(1 << 20, dtype=np.float32))


def test_dlpack_with_torch_on_the_same_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA")
    with em.fallback_policy("allow"):
        x = em.asarray(np.arange(12.0, dtype=np.float32).reshape(3, 4), device="cuda:0")
        t = torch.from_dlpack(x.mT)
        assert t.is_cuda and t.stride() == (1, 4) and t.cpu().tolist() == np.arange(12.0).reshape(3, 4).T.tolist()
        source = torch.arange(10, dtype=torch.float64, device="cuda:0") * 3
        y = em.from_dlpack(source)
        assert y.device == em.Device("cuda", 0) and y._storage.handle.pointer == source.data_ptr()
        assert y.tolist() == source.cpu().tolist()
        b = em.from_dlpack(torch.ones(4, dtype=torch.bfloat16, device="cuda:0"))
        assert b.dtype == em.bfloat16 and b.tolist() == [1.0] * 4


def test_dlpack_with_cupy_on_the_same_gpu():
    cupy = pytest.importorskip("cupy")
    with em.fallback_policy("allow"):
        source = cupy.arange(6, dtype=cupy.int32).reshape(2, 3)
        y = em.from_dlpack(source)
        assert y._storage.handle.pointer == source.data.ptr and y.tolist() == source.get().tolist()
        back = cupy.from_dlpack(em.asarray([1.5, 2.5], device="cuda:0"))
        assert back.get().tolist() == [1.5, 2.5]
