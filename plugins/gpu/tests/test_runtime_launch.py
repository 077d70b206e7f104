"""Kernel images and launches on the fake driver: images loaded once per device, the argument
buffer holding exactly the abi.h struct's bytes behind the vendor's ``extra`` markers, launch
limits checked before the driver, EMBER_LAUNCH_BLOCKING, and the driver's load errors worded."""

from __future__ import annotations

import struct

import pytest
from ember_gpu import abi
from ember_gpu.errors import DeviceLostError, DriverError, KernelImageError
from ember_gpu.launch import Kernel
from testgpu_vendor import TEST_VENDOR

from ember_core.errors import KernelError

IMAGE = "elementwise"


@pytest.fixture
def image(runtime, tmp_path):
    path = tmp_path / "ember_testgpu_images" / "kernels" / f"{IMAGE}{TEST_VENDOR.image_suffix}"
    path.write_bytes(b"\x50\xed\x55\xba fake image")
    return path


def _binary(device) -> Kernel:
    return Kernel(device, IMAGE, "eg_binary_add_float32_flat32", abi.ffi, "eg_flat_args")


def test_an_image_is_loaded_once_per_device_and_its_functions_cached(fake, runtime, image):
    first = runtime.device(0)
    _binary(first)
    _binary(first)
    Kernel(first, IMAGE, "eg_unary_exp_float32_flat32", abi.ffi, "eg_flat_args")
    assert fake.modules_loaded == 1 and fake.count("module_get_function") == 2
    _binary(runtime.device(1))
    assert fake.modules_loaded == 2  # a module belongs to one context


def test_a_missing_image_names_the_fix(device):
    with pytest.raises(KernelImageError, match=r"elementwise.tgbin is missing; reinstall ember-testgpu"):
        _binary(device)


@pytest.mark.parametrize("status", [209, 222])
def test_the_driver_refusing_an_image_says_why(fake, device, image, status):
    fake.fail("module_load_data", status)
    with pytest.raises(DriverError, match=TEST_VENDOR.errors[status].meaning):
        _binary(device)


def test_a_missing_kernel_is_the_drivers_not_found(fake, device, image):
    fake.kernel_names = {"eg_unary_exp_float32_flat32"}
    with pytest.raises(DriverError, match=r"tg_module_get_function failed: .*\(500\)"):
        _binary(device)


def test_the_argument_buffer_is_the_abi_struct_behind_the_vendors_markers(fake, device, image):
    kernel = _binary(device)
    out, a, b = (device.memory.alloc(4096) for _ in range(3))
    kernel((4, 1, 1), (256, 1, 1), {"out": out.pointer, "n": 1000, "scalar_inputs": 0b10})
    kernel((8, 1, 1), (256, 1, 1), {"in": [a.pointer, b.pointer, 0], "n": 1024, "scalar_inputs": 0})
    first, second = fake.launches
    assert (first.kernel, first.grid, first.block, first.shared_bytes) == ("eg_binary_add_float32_flat32",
                                                                           (4, 1, 1), (256, 1, 1), 0)
    assert len(first.args) == abi.ffi.sizeof("eg_flat_args") == 48
    assert struct.unpack("<QQQQqII", first.args) == (out.pointer, 0, 0, 0, 1000, 0b10, 0)
    assert struct.unpack("<QQQQqII", second.args) == (out.pointer, a.pointer, b.pointer, 0, 1024, 0, 0)
    assert fake.count("stream_synchronize") == 0  # launches do not wait


def test_launches_beyond_the_devices_limits_are_refused_before_the_driver(fake, device, image):
    kernel = _binary(device)
    for grid, block in (((0, 1, 1), (256, 1, 1)), ((1, 1 << 17, 1), (256, 1, 1)), ((1, 1, 1), (2048, 1, 1)),
                        ((1, 1, 1), (32, 32, 2))):
        with pytest.raises(KernelError, match="beyond testgpu:0's limits"):
            kernel(grid, block)
    assert fake.launches == []
    assert device.blocks_for(10**12, 256) == 2**31 - 1 and device.blocks_for(1000, 256) == 4
    assert device.blocks_for(0, 256) == 1


def test_launch_blocking_waits_after_each_launch_and_names_the_kernel(fake, runtime, image, monkeypatch):
    monkeypatch.setenv("EMBER_LAUNCH_BLOCKING", "1")
    device = runtime.device(0)
    kernel = _binary(device)
    kernel((1, 1, 1), (256, 1, 1))
    assert fake.count("stream_synchronize") == 1
    fake.kernels["eg_binary_add_float32_flat32"] = lambda fake, launch: fake.fault(719)
    with pytest.raises(DeviceLostError, match=r"TG_LAUNCH_FAILED.*in eg_binary_add_float32_flat32, "
                                              r"EMBER_LAUNCH_BLOCKING=1"):
        kernel((1, 1, 1), (256, 1, 1))
    assert device.lost is not None


def test_an_emulated_kernel_runs_between_uploads_and_downloads_in_stream_order(fake, device, image):
    """The whole path an op takes: upload, launch with packed arguments, download."""
    fill = Kernel(device, IMAGE, "eg_fill_int32_flat32", abi.ffi, "eg_fill_args")

    def run_fill(fake, launch):
        pointer, n, low, _ = struct.unpack("<QqQQ", launch.args)
        fake.write(pointer, struct.pack("<I", low & 0xFFFFFFFF) * n)

    fake.kernels["eg_fill_int32_flat32"] = run_fill
    handle = device.memory.alloc(40)
    device.staging.upload(handle.pointer, memoryview(bytes(40)))
    fill((1, 1, 1), (256, 1, 1), {"out": handle.pointer, "n": 10, "value": [(-7) & 0xFFFFFFFF, 0]})
    out = bytearray(40)
    device.staging.download(memoryview(out), handle.pointer)
    assert struct.unpack("<10i", out) == (-7,) * 10
