"""Discovery and the decline paths: on a machine without the driver (CI), and on the fake driver
for each way the driver can refuse (stub library, no device, version mismatches, kernels it cannot
load): no device, the reason in words a user can act on, and ``device="cuda"`` raising it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ember_cuda.plugin import PLUGIN
from ember_gpu.build import read_index
from ember_gpu.errors import DriverError

import ember_core as em
from ember_core import cli

pytestmark = pytest.mark.no_device


@pytest.fixture
def no_driver():
    if PLUGIN.runtime.discover().count:
        pytest.skip("a CUDA driver and GPU are present")
    reason = PLUGIN.runtime.discover().reason
    if "libcuda.so.1" not in reason:
        pytest.skip(f"a CUDA driver is present but unusable: {reason}")
    return reason


def test_without_a_driver_there_is_no_device_and_the_reason_names_the_driver_needed(no_driver, capsys):
    assert PLUGIN.ember_device_count("cuda") == 0
    assert PLUGIN.ember_device_unavailable_reason("cuda") == no_driver
    assert "no CUDA driver" in no_driver and "R580 or newer (CUDA 13)" in no_driver
    with pytest.raises(em.BackendUnavailableError, match=r"cuda:0 is not available: no CUDA driver.*R580"):
        em.zeros(3, device="cuda")
    cli.main(["backends"])
    assert "cuda x0 (no CUDA driver" in capsys.readouterr().out
    cli.main(["doctor"])
    doctor = capsys.readouterr().out
    assert "SKIP  cuda" in doctor and "R580" in doctor


def test_identity_and_kernels_never_open_the_driver():
    code = ("from ember_core.plugins import MANAGER; MANAGER.ensure_discovered(); "
            "from ember_cuda.plugin import PLUGIN, ember_plugin_info, ember_kernels; "
            "info = ember_plugin_info(); ember_kernels('cuda'); "
            "print(info.name, 'cuda' in MANAGER.backends, PLUGIN.runtime.driver, PLUGIN.runtime._discovery)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["cuda", "True", "None", "None"]


@pytest.mark.parametrize(("status", "name", "words"), [
    (34, "CUDA_ERROR_STUB_LIBRARY", "the CUDA toolkit's stub"),
    (100, "CUDA_ERROR_NO_DEVICE", "nvidia-smi"),
    (803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "reboot after a driver update"),
    (804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "cuda-compat"),
])
def test_a_driver_refusing_to_initialise_declines_with_its_meaning(fake_cuda, status, name, words, capsys):
    fake_cuda.fail("cuInit", status)
    reason = PLUGIN.ember_device_unavailable_reason("cuda")
    assert PLUGIN.ember_device_count("cuda") == 0 and name in reason and words in reason
    with pytest.raises(em.BackendUnavailableError, match=name):
        em.zeros(3, device="cuda")
    cli.main(["doctor"])
    doctor = capsys.readouterr().out
    assert f"SKIP  cuda       (ember-cuda): no device: the CUDA driver did not initialise: {name}" in doctor


def test_a_driver_older_than_cuda_13_declines_naming_r580():
    from ember_cuda.vendor import CUDA
    from ember_gpu.fake import FakeGpu
    from ember_gpu.runtime import Runtime

    old = FakeGpu(CUDA, driver_version=12080)
    reason = Runtime(CUDA, "ember_cuda", opener=old.open).discover().reason
    assert "supports CUDA 12.8" in reason and "R580 or newer (CUDA 13)" in reason


@pytest.mark.parametrize(("status", "words"), [(222, "install the NVIDIA driver R580"),
                                               (209, "compute capability 8.0")])
def test_kernel_images_the_driver_cannot_load_say_why(fake_cuda, status, words, monkeypatch):
    from importlib import resources

    monkeypatch.setattr(PLUGIN.runtime.rtc, "_compiler", [None])  # no NVRTC (ember-cuda[nvrtc] would build one)
    images = read_index(resources.files("ember_cuda").joinpath("kernels"))
    image = next(iter(images.values())).removesuffix(".fatbin")
    fake_cuda.fail("cuModuleLoadData", status)
    with pytest.raises(DriverError, match=words):
        PLUGIN.runtime.device(0).modules.function(image, next(iter(images)))
