"""The decline path against the real libamdhip64 (CI installs Debian's; no AMD GPU anywhere here):
no device, a reason a user can act on in ``ember backends`` and ``ember doctor``, other backends
unaffected; and, on the fake driver, a GPU the shipped code objects do not cover."""

from __future__ import annotations

import ctypes

import pytest
from ember_rocm.plugin import PLUGIN

import ember_core as em
from ember_core import cli

pytestmark = pytest.mark.no_device


@pytest.fixture
def real_library_without_gpu():
    for soname in ("libamdhip64.so.6", "libamdhip64.so.5"):
        try:
            ctypes.CDLL(soname)
            break
        except OSError:
            continue
    else:
        pytest.skip("libamdhip64 is not installed (CI installs it: apt-get install libamdhip64-dev)")
    if PLUGIN.runtime.discover().count:
        pytest.skip("an AMD GPU is present")
    return PLUGIN.runtime.discover().reason


def test_the_real_library_without_a_gpu_declines_with_what_to_check(real_library_without_gpu, capsys):
    reason = real_library_without_gpu
    assert PLUGIN.ember_device_count("rocm") == 0
    assert "the HIP driver did not initialise" in reason and "/dev/kfd" in reason and "rocminfo" in reason
    with pytest.raises(em.BackendUnavailableError, match=r"rocm:0 is not available: .*/dev/kfd"):
        em.zeros(3, device="rocm")
    cli.main(["backends"])
    assert "rocm x0 (the HIP driver did not initialise" in capsys.readouterr().out
    cli.main(["doctor"])
    doctor = capsys.readouterr().out
    assert "SKIP  rocm" in doctor and "/dev/kfd" in doctor
    assert em.zeros(3, device="cpu").tolist() == [0.0, 0.0, 0.0]  # other backends unaffected


def test_without_the_library_the_reason_names_the_packages(monkeypatch):
    from ember_gpu.driver import open_driver
    from ember_gpu.runtime import Runtime
    from ember_rocm.vendor import HIP

    missing = HIP.__class__(**{**HIP.__dict__, "driver_libraries": ("libamdhip64.so.99",)})
    reason = Runtime(missing, "ember_rocm", opener=open_driver).discover().reason
    assert "no HIP driver: libamdhip64.so.99 could not be loaded" in reason
    assert "apt-get install libamdhip64-5" in reason


def test_an_architecture_without_a_code_object_declines_naming_rocm_6(fake_rocm):
    fake_rocm.fail("hipModuleLoadData", 209, times=None)
    with pytest.raises(Exception, match=r"hipErrorNoBinaryForGpu.*ROCm 6"):
        (em.ones(4, device="rocm") + 1).tolist()
