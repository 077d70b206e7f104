"""ember-gpu's op layer without a vendor package: the table and manifest a kernel index gives
(only op x dtype pairs built in every variant are claimed), the fill value's bytes against
ember-cpu's full, and the fake driver running the host kernels on real host memory (a launch
through launch.Kernel, the pool's reuse, an overrun caught by the guards)."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pytest
from ember_gpu import abi, blas, ops
from ember_gpu.errors import DeviceLostError
from ember_gpu.launch import Kernel
from ember_gpu.ops_creation import bfloat16_bits, fill_words
from testgpu_vendor import TEST_VENDOR

import ember_core as em
from ember_core import dtypes
from ember_core.plugins import load_manifest

HOST_DIR = Path(__file__).resolve().parents[1] / "build" / "host-kernels"  # shared with test_kernels_host.py


def _index(*prefixes: str, variants: tuple[str, ...] = ops.ELEMENTWISE_VARIANTS) -> dict[str, str]:
    return {f"{prefix}_{v}": prefix.split("_")[1] for prefix in prefixes for v in variants}


def test_the_table_claims_only_what_was_built_in_every_variant(tmp_path) -> None:
    index = _index("eg_unary_exp_float32", "eg_unary_exp_float64", "eg_binary_bitwise_left_shift_int8",
                   *(f"eg_copy_bool_to_{d.name}" for d in dtypes.ALL_DTYPES), "eg_copy_int8_to_bool")
    index |= _index("eg_fill_int16", "eg_random_integers_uint8", variants=ops.FLAT_VARIANTS)
    index |= {"eg_unary_sqrt_float32_flat32": "unary_sqrt"}  # one variant only: not claimed
    claimed = ops.claimed(ops.OpLayer(index).table())
    assert claimed == {"exp": ["float32", "float64"], "bitwise_left_shift": ["int8"], "copy": ["bool"],
                       "astype": ["bool"], "full": ["int16"], "random_integers": ["uint8"],
                       "matmul": sorted(blas.DTYPES, key=lambda name: dtypes.as_dtype(name).code)}  # a library
    path = tmp_path / "manifest.toml"
    path.write_text(ops.manifest_text("testgpu", ops.OpLayer(index).table()))
    manifest = load_manifest(path, "test")  # what the core reads
    assert {op: sorted(d.name for d in found) for op, found in manifest.kernels["testgpu"].items()} == \
        {op: sorted(names) for op, names in claimed.items()}


def test_bfloat16_rounds_once_from_double() -> None:
    assert bfloat16_bits(1 + 2.0**-8 + 2.0**-30) == 0x3F81  # through float: 1 + 2**-8, a tie, rounded down to 1
    assert bfloat16_bits(1 + 2.0**-8) == 0x3F80 and bfloat16_bits(-0.0) == 0x8000
    assert bfloat16_bits(1e300) == 0x7F80 and bfloat16_bits(-math.inf) == 0xFF80
    assert bfloat16_bits(math.nan) & 0x7FC0 == 0x7FC0


@pytest.mark.parametrize("dtype", [d.name for d in dtypes.ALL_DTYPES])
def test_fill_values_are_the_bytes_ember_cpu_stores(dtype: str) -> None:
    d = dtypes.BY_NAME[dtype]
    values = {"b": [True, False, 1, 0], "i": [0, -1, 7, "min", "max"], "u": [0, 200, "max"],
              "f": [1.5, -0.0, 1 / 3, math.inf, 1e300, 1e-300, 2.0**-24, 65520.0, 1 + 2.0**-8 + 2.0**-30, 5],
              "c": [1 + 2j, 1 / 3j, 1e300 + 1j, 2.5, 3]}[d.kind]
    for value in values:
        if isinstance(value, str):
            value = int(getattr(np.iinfo(d.numpy), value))
        stored = _cpu_bytes(em.full((), value, dtype=dtype, device="cpu"))
        assert struct.pack("<2Q", *fill_words(d, value))[:d.itemsize] == stored, (dtype, value)


def _cpu_bytes(t: em.Tensor) -> bytes:
    """The stored bytes of a 0-d cpu tensor (bfloat16 through its bits, which numpy cannot hold)."""
    if t.dtype == dtypes.bfloat16:
        bits = int(np.float32(t.astype("float32").item()).view(np.uint32)) >> 16
        return bits.to_bytes(2, "little")
    return np.asarray(t.numpy()).tobytes()


# ---- the fake driver running host kernels ------------------------------------------------------------


@pytest.fixture(scope="module")
def host_kernels() -> Path:
    from ember_gpu.build import build_host_libraries

    build_host_libraries(HOST_DIR)
    return HOST_DIR


@pytest.fixture
def host_device(host_kernels, tmp_path):
    """Device 0 of TEST_VENDOR on a fake that runs the host kernels (images: placeholders)."""
    import sys

    from ember_gpu.fake import FakeGpu
    from ember_gpu.runtime import Runtime

    fake = FakeGpu(TEST_VENDOR, devices=1, memory_bytes=1 << 20, host_kernels=host_kernels)
    package = tmp_path / "ember_testgpu_host"
    (package / "kernels").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "kernels" / f"binary_add{TEST_VENDOR.image_suffix}").write_bytes(b"image")
    (package / "kernels" / f"fill{TEST_VENDOR.image_suffix}").write_bytes(b"image")
    sys.path.insert(0, str(tmp_path))
    try:
        yield fake, Runtime(TEST_VENDOR, "ember_testgpu_host", opener=fake.open).device(0)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("ember_testgpu_host", None)


def test_device_memory_is_host_memory_the_kernels_read_and_write(host_device) -> None:
    fake, device = host_device
    a, b, out = (device.memory.alloc(4 * 1000) for _ in range(3))
    fake.write(a.pointer, np.arange(1000, dtype=np.float32).tobytes())
    fake.write(b.pointer, np.full(1000, 0.5, np.float32).tobytes())
    assert a.pointer % 256 == 0 and fake.read(out.pointer, 4) == b"\xcd" * 4  # aligned, never zeroed
    add = Kernel(device, "binary_add", "eg_binary_add_float32_flat32", abi.ffi, "eg_flat_args")
    add((2, 1, 1), (64, 1, 1), {"out": out.pointer, "in": [a.pointer, b.pointer], "n": 1000, "scalar_inputs": 0})
    result = np.frombuffer(fake.read(out.pointer, 4000), np.float32)
    np.testing.assert_array_equal(result, np.arange(1000, dtype=np.float32) + 0.5)
    pointer = out.pointer
    device.memory.free(out)
    again = device.memory.alloc(4 * 1000)  # the pool's cached block: the same host memory
    assert again.pointer == pointer and device.memory.stats()["reserved_bytes"] == 3 * 4096


def test_an_overrun_into_the_guard_loses_the_device(host_device) -> None:
    fake, device = host_device
    x = device.memory.alloc(16)
    fill = Kernel(device, "fill", "eg_fill_int32_flat32", abi.ffi, "eg_fill_args")
    fill((1, 1, 1), (32, 1, 1), {"out": x.pointer, "n": 4, "value": (7, 0)})
    assert fake.read(x.pointer, 16) == struct.pack("<4i", 7, 7, 7, 7)
    with pytest.raises(DeviceLostError):
        fill((1, 1, 1), (32, 1, 1), {"out": x.pointer, "n": 5, "value": (7, 0)})  # one element past the end
    assert not device.usable


def test_the_fake_driver_switch_opens_the_fake_with_host_kernels(host_kernels, monkeypatch) -> None:
    from ember_gpu.fake import FakeGpu
    from ember_gpu.plugin import FAKE_DRIVER_ENV, open_driver_or_fake

    monkeypatch.setenv(FAKE_DRIVER_ENV, str(host_kernels))
    driver = open_driver_or_fake(TEST_VENDOR)
    fake = driver.lib._fake
    assert isinstance(fake, FakeGpu) and len(fake.devices) == 2 and fake.host_kernels is not None
    monkeypatch.delenv(FAKE_DRIVER_ENV)
    with pytest.raises(Exception, match="could not be loaded"):  # the real (absent) driver again
        open_driver_or_fake(TEST_VENDOR)
