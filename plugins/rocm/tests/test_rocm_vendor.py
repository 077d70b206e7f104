"""The HIP vendor table against ember_gpu's binding: every function named, a cdef cffi accepts (the
error functions returning their text, the peer copy taking ordinals), HIP's launch END marker."""

from __future__ import annotations

import cffi
import pytest
from ember_gpu.driver import SIGNATURES, cdef_for
from ember_rocm.vendor import HIP, hip_vendor

pytestmark = pytest.mark.no_device


def test_the_table_names_every_function_and_its_cdef_parses():
    assert set(HIP.symbols) == set(SIGNATURES)
    declarations = cdef_for(HIP)
    cffi.FFI().cdef(declarations)
    assert "const char *hipGetErrorName(int status);" in declarations
    assert "int hipMemcpyPeerAsync(uint64_t dst, int dst_device, uint64_t src, int src_device," in declarations


def test_launch_markers_dlpack_and_versions_are_hips():
    assert (HIP.launch_markers.pointer, HIP.launch_markers.size, HIP.launch_markers.end) == (1, 2, 3)
    assert HIP.dlpack_device_type == 10 and HIP.dlpack_default_stream == 0  # kDLROCM; stream None: the default
    assert HIP.version_words(50221153) == "5.2" and HIP.version_words(60342134) == "6.3"
    assert HIP.driver_libraries == ("libamdhip64.so.6", "libamdhip64.so.5")


@pytest.mark.parametrize("wave", [32, 64])
def test_the_wave_size_is_the_devices(wave):
    assert hip_vendor(wave).warp_size == wave and hip_vendor(wave).attributes == HIP.attributes


def test_a_gpu_without_a_shipped_code_object_is_told_about_rocm_6():
    meaning = HIP.error(209).meaning
    assert "gfx908, gfx90a, gfx940, gfx1030" in meaning and "ROCm 6" in meaning and "gfx942" in meaning
