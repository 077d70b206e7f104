"""The installed ember-rocm plugin on ember-gpu's fake driver with the HIP table, reporting wave 64
and wave 32: the same runtime as ember-cuda's (tensors on two devices, peer copies by ordinal,
kernels from the shared sources launched with HIP's END marker), errors named by the HIP library's
text-returning functions, and DLPack exports as kDLROCM."""

from __future__ import annotations

import numpy as np
import pytest

import ember_core as em

pytestmark = pytest.mark.no_device


def test_tensors_ops_and_peer_copies(fake_rocm):
    values = np.arange(12.0).reshape(3, 4)
    x = em.asarray(values, device="rocm:0")
    assert (x * 2 + 1).tolist() == (values * 2 + 1).tolist()
    assert x.sum().item() == values.sum()
    y = x.to_device("rocm:1")
    assert y.device == em.Device("rocm", 1) and y.tolist() == values.tolist()
    assert fake_rocm.count("memcpy_peer_async") == 1
    props = em.Device("rocm").backend.hooks["ember_device_properties"](em.Device("rocm", 0))
    assert props["warp_size"] == fake_rocm.vendor.warp_size and props["driver"] == "HIP 5.2"


def test_launches_pass_their_arguments_through_hips_extra_array(fake_rocm):
    """The fake reads ``extra`` with the table's markers: it finds the argument buffer only when
    the runtime ends the array with HIP's END (3), so a right answer from a launch shows it did."""
    fake_rocm.launches.clear()
    assert (em.ones(8, device="rocm") + 1).tolist() == [2.0] * 8
    assert fake_rocm.launches and all(launch.args for launch in fake_rocm.launches)


def test_an_unknown_status_is_described_by_the_library(fake_rocm):
    from ember_rocm.plugin import PLUGIN

    em.zeros(1, device="rocm")
    driver = PLUGIN.runtime.driver
    assert driver.describe(2) == "hipErrorOutOfMemory (2): out of device memory"
    assert driver.describe(12345) == "an unknown error (12345)"


def test_dlpack_exports_are_rocm_devices(fake_rocm):
    x = em.arange(6, dtype=em.float32, device="rocm:1")
    assert x.__dlpack_device__() == (10, 1)  # kDLROCM, GPU 1
    capsule = x.__dlpack__(stream=None)
    assert capsule is not None
    with pytest.raises(Exception, match="stream"):
        x.__dlpack__(stream=1)  # DLPack reserves 1 and 2 for CUDA
