"""hipRTC against the real library (CI installs Debian's libamdhip64-5, whose libamdhip64.so.5 holds
hipRTC 5.2): the probe, compiling ember's own sources in a child process, the child surviving the
compiler's abort for a target it does not know, the allow-list's ROCm-6 message, the architecture's
name read from the properties struct, and the decline path of a GPU nothing can serve."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess

import pytest
from ember_gpu import kernel_cache, rtc
from ember_gpu.fake import FakeGpu
from ember_gpu.runtime import Runtime
from ember_rocm.vendor import HIP, HIPRTC

from ember_core import cli

pytestmark = pytest.mark.no_device

TINY = 'extern "C" __global__ void k(float *x) { x[threadIdx.x] = fabsf(x[threadIdx.x]); }'


@pytest.fixture(scope="module")
def hiprtc() -> rtc.Compiler:
    found = rtc.find_compiler(HIP)
    if found is None:
        pytest.skip("no hipRTC is installed (CI installs it: apt-get install libamdhip64-dev)")
    return found


def test_the_probe_finds_hiprtc_and_the_rocm_version(hiprtc):
    assert hiprtc.library in HIPRTC.libraries
    assert hiprtc.version >= (5, 2)  # the HIP runtime's version: hiprtcVersion says 9.0 in every ROCm
    if hiprtc.library == "libamdhip64.so.5":  # Debian 12's ROCm 5.2: the libhiprtc sonames were tried first
        assert hiprtc.version == (5, 2)


def test_ember_sources_compile_to_a_code_object_for_the_gpu_in_a_child(hiprtc, tmp_path):
    if hiprtc.version >= (6, 0):
        pytest.skip("checked against ROCm 5's hipRTC")
    compilation = rtc.Compilation(HIP, "ember_rocm", cache=kernel_cache.KernelCache(tmp_path))
    code = compilation.compile("binary_add", "gfx90a")
    assert code[:4] == b"\x7fELF" and b"amdgcn-amd-amdhsa--gfx90a" in code
    for name in ("eg_binary_add_float32", "eg_binary_add_complex128"):
        assert name.encode() in code
    assert len(list(tmp_path.iterdir())) == 1  # cached


def test_a_compile_error_carries_hiprtcs_log(hiprtc):
    with pytest.raises(rtc.CompileError) as caught:
        rtc.compile_in_child(hiprtc, "bad.hip", TINY.replace(";", ""), {}, ["--offload-arch=gfx90a"])
    assert "HIPRTC_ERROR_COMPILATION" in str(caught.value) and "error" in caught.value.log


def test_hiprtc_5_aborting_for_a_new_target_costs_an_error_not_this_process(hiprtc):
    if hiprtc.version >= (6, 0):
        pytest.skip("ROCm 5's hipRTC aborts for gfx1100; newer ones compile it")
    with pytest.raises(rtc.CompilerCrashed, match="was killed by SIGABRT"):
        rtc.compile_in_child(hiprtc, "k.hip", TINY, {}, ["--offload-arch=gfx1100"])


def test_the_allow_list_declines_gfx942_before_rocm_6(hiprtc):
    compilation = rtc.Compilation(HIP, "ember_rocm", finder=lambda vendor: hiprtc)
    assert compilation.refusal("gfx90a") is None
    if hiprtc.version < (6, 0):
        assert compilation.refusal("gfx942").startswith(f"gfx942 needs ROCm 6 or newer (the installed hipRTC is ROCm "
                                                        f"{hiprtc.version[0]}.")
        assert "gfx1100 needs ROCm 6 or newer" in compilation.refusal("gfx1100")
    assert "gfx1234 is not among the architectures hipRTC is known to build" in compilation.refusal("gfx1234")


@pytest.mark.skipif(shutil.which("g++") is None or not os.path.exists("/usr/include/hip"),
                    reason="needs g++ and HIP's headers (libamdhip64-dev)")
def test_the_rocm_5_properties_layout_is_the_installed_headers(tmp_path):
    program = tmp_path / "layout.cpp"
    program.write_text("#define __HIP_PLATFORM_AMD__\n#include <hip/hip_runtime_api.h>\n#include <cstdio>\n"
                       "#include <cstddef>\nint main() { std::printf(\"%zu %zu\", sizeof(hipDeviceProp_t), "
                       "offsetof(hipDeviceProp_t, gcnArchName)); }\n")
    subprocess.run(["g++", str(program), "-o", str(tmp_path / "layout")], check=True, capture_output=True)
    size, offset = map(int, subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True,
                                           check=True).stdout.split())
    version = subprocess.run(["g++", "-E", "-dM", "-include", "hip/hip_version.h", "-x", "c++", "/dev/null"],
                             capture_output=True, text=True, check=True).stdout
    if "#define HIP_VERSION_MAJOR 5" not in version:
        pytest.skip("the installed headers are not ROCm 5's")
    assert HIPRTC.properties[-1].symbol == "hipGetDeviceProperties"
    assert (HIPRTC.properties[-1].size, HIPRTC.properties[-1].name_offset) == (size, offset)


class _PropertiesDriver:
    """A driver exporting only ROCm 6's properties function, which fills in gcnArchName."""

    def __init__(self, arch: bytes) -> None:
        import cffi

        self.ffi = cffi.FFI()
        layout = HIPRTC.properties[0]
        self.filled = []

        def properties(buffer, device):
            self.ffi.memmove(buffer + layout.name_offset, arch + b"\0", len(arch) + 1)
            self.filled.append(device)
            return 0

        self.lib = type("Lib", (), {layout.symbol: staticmethod(properties)})()


def test_the_architecture_is_gcnarchname_without_its_features():
    driver = _PropertiesDriver(b"gfx942:sramecc+:xnack-")
    assert rtc.device_arch(driver, HIP, 3) == "gfx942" and driver.filled == [3]


def test_the_real_library_without_a_gpu_names_no_architecture():
    from ember_gpu.driver import open_driver

    try:
        driver = open_driver(HIP)
    except Exception:
        pytest.skip("libamdhip64 is not installed")
    assert rtc.device_arch(driver, HIP, 0) is None  # hipGetDeviceProperties fails without a GPU


@pytest.fixture
def gfx(monkeypatch):
    """A runtime of ember-rocm on the fake driver whose GPUs report the architecture ``gfx(arch)`` sets."""
    arch = []
    monkeypatch.setattr(rtc, "device_arch", lambda driver, vendor, handle: arch[0])

    def runtime(name: str, compiler: rtc.Compiler | None) -> Runtime:
        arch[:] = [name]
        fake = FakeGpu(HIP, devices=2, memory_bytes=1 << 20, driver_version=50221153)
        made = Runtime(HIP, "ember_rocm", opener=fake.open)
        made.rtc = rtc.Compilation(HIP, "ember_rocm", finder=lambda vendor: compiler)
        return made

    return runtime


def test_gfx942_on_rocm_5_declines_naming_both_fixes(gfx, hiprtc):
    if hiprtc.version >= (6, 0):
        pytest.skip("ROCm 6's hipRTC builds for gfx942")
    found = gfx("gfx942", hiprtc).discover()
    assert found.count == 0
    assert "ember-rocm's shipped kernels cover" in found.reason and "not gfx942" in found.reason
    assert "gfx942 needs ROCm 6 or newer" in found.reason
    assert found.reason.endswith("whose libhiprtc is hipRTC; or install ember-rocm built for gfx942")


def test_without_hiprtc_an_uncovered_gpu_declines_naming_the_library(gfx):
    reason = gfx("gfx1031", None).discover().reason
    assert "not gfx1031, and none can be compiled for it: no hipRTC is installed (libhiprtc.so.7" \
        in reason
    assert "libamdhip64.so.5: not on the loader path)" in reason and "rocm.docs.amd.com" in reason


def test_a_gpu_hiprtc_serves_is_usable(gfx, hiprtc):
    assert gfx("gfx1031", hiprtc).discover().count == 2
    assert gfx("gfx1030", None).discover().count == 2  # a shipped target needs no compiler


def test_ember_doctor_with_the_real_library_says_what_to_check_and_compiles_nothing(monkeypatch, tmp_path):
    from ember_rocm.plugin import PLUGIN

    if PLUGIN.runtime.discover().count:
        pytest.skip("an AMD GPU is present")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["doctor"])
    line, = [line for line in out.getvalue().splitlines() if line.startswith("SKIP  rocm")]
    assert "the HIP driver did not initialise" in line and "/dev/kfd" in line and "rocminfo" in line
    assert list(tmp_path.iterdir()) == []
