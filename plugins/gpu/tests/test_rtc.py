"""Run-time compilation (ember_gpu.rtc) without a GPU or a vendor compiler: the child-process protocol
with a fake compiler (``FakeCompiler`` below, which the child imports from this module), the disk
cache, the probe order, the allow-list, and the runtime's two hooks (discovery declining a GPU no
image serves, and a module load falling back to a compiled image) on the fake driver."""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import struct
import sys
import warnings
from pathlib import Path

import pytest
from ember_gpu import kernel_cache, rtc
from ember_gpu.errors import DriverError
from ember_gpu.vendor import RtcVendor
from testgpu_vendor import TEST_VENDOR

TEST_RTC = RtcVendor(
    product="tgRTC",
    stack="TestGPU",
    libraries=("libember-tgrtc.so.3", "libember-tgrtc.so.2"),
    wheel_dirs=("ember_testgpu_wheel/rtc",),
    symbols={name: "tgrtc_" + name for name in rtc.SIGNATURES},
    options=("-std=c++17", "--no-contract"),
    arch_option="--target={arch}",
    archs={"sm_80": (2, 0), "sm_90": (3, 1)},
    install_hint="pip install ember-testgpu-rtc",
    image_format="fatbin",
    fallback_statuses=frozenset({209, 222}),
)
RTC_VENDOR = dataclasses.replace(TEST_VENDOR, rtc=TEST_RTC)
COMPILE_LOG = "EMBER_TEST_RTC_LOG"  # the fake compiler appends one line per compilation to this file


class FakeCompiler:
    """The child's compiler in these tests: the image's "code" names what it was compiled from;
    options starting --fake- make it fail the ways a real compiler can."""

    def __init__(self, request: dict) -> None:
        self.library = request["library"]

    def compile(self, name: str, source: str, headers: dict[str, str], options: list[str]) -> bytes:
        if os.environ.get(COMPILE_LOG):
            with open(os.environ[COMPILE_LOG], "a") as log:
                log.write(f"{name} {' '.join(options)}\n")
        if "--fake-abort" in options:
            os.abort()
        if "--fake-segfault" in options:
            ctypes.string_at(0)
        if "--fake-chatter" in options:
            print("tgRTC 3.1 (c) nobody: compiling...")  # a library printing to stdout
        if "--fake-error" in options:
            raise rtc.CompileError("TGRTC_ERROR_COMPILATION (6)", f"{name}(3): error: expected a ';'")
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        return f"TGRTC|{self.library}|{' '.join(options)}|{','.join(sorted(headers))}|{digest}".encode()


COMPILER = rtc.Compiler(TEST_RTC, "libember-tgrtc.so.3", (3, 1), factory=f"{__name__}:FakeCompiler")


@pytest.fixture
def compile_log(tmp_path, monkeypatch):
    """The fake compiler's record of what it compiled (one line per child that compiled)."""
    path = tmp_path / "compiled.log"
    monkeypatch.setenv(COMPILE_LOG, str(path))
    return lambda: path.read_text().splitlines() if path.exists() else []


# ---- the child process -------------------------------------------------------------------------------

def test_the_child_compiles_with_the_source_headers_and_options():
    code = rtc.compile_in_child(COMPILER, "k.cu", "KERNEL", {"prelude.h": "P", "abi.h": "A"}, ["--target=sm_80"])
    assert code == (f"TGRTC|libember-tgrtc.so.3|--target=sm_80|abi.h,prelude.h|"
                    f"{hashlib.sha256(b'KERNEL').hexdigest()[:16]}").encode()


def test_a_compile_error_is_typed_and_carries_the_log():
    with pytest.raises(rtc.CompileError) as caught:
        rtc.compile_in_child(COMPILER, "k.cu", "KERNEL", {}, ["--fake-error"])
    assert caught.value.log == "k.cu(3): error: expected a ';'"
    message = str(caught.value)
    assert "tgRTC of TestGPU 3.1 (libember-tgrtc.so.3) compiling k.cu with --fake-error failed" in message
    assert "TGRTC_ERROR_COMPILATION (6)" in message and "expected a ';'" in message


@pytest.mark.parametrize(("option", "signal_name"), [("--fake-abort", "SIGABRT"), ("--fake-segfault", "SIGSEGV")])
def test_a_compiler_that_kills_its_process_is_a_typed_error_not_a_crash_here(option, signal_name):
    with pytest.raises(rtc.CompilerCrashed, match=rf"was killed by {signal_name} without an answer.*unaffected"):
        rtc.compile_in_child(COMPILER, "k.cu", "KERNEL", {}, [option])
    assert isinstance(rtc.CompilerCrashed("x"), RuntimeError)


def test_a_compiler_that_hangs_is_stopped():
    with pytest.raises(rtc.CompilerCrashed, match="did not finish within 0 s"):
        rtc.compile_in_child(COMPILER, "k.cu", "KERNEL", {}, ["--target=sm_80"], timeout=0.01)


def test_what_the_compiler_prints_cannot_corrupt_the_answer():
    code = rtc.compile_in_child(COMPILER, "k.cu", "KERNEL", {}, ["--fake-chatter"])
    assert code.startswith(b"TGRTC|")


# ---- the disk cache ------------------------------------------------------------------------------------

def test_the_cache_location_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "e"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert kernel_cache.cache_dir() == tmp_path / "e" / "kernels"
    monkeypatch.delenv("EMBER_CACHE_DIR")
    assert kernel_cache.cache_dir() == tmp_path / "x" / "ember" / "kernels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert kernel_cache.cache_dir() == tmp_path / "h" / ".cache" / "ember" / "kernels"


KEY_PARTS = {"compiler": COMPILER, "arch": "sm_80", "options": ["-O3"], "source": "S", "headers": {"a.h": "A"}}


@pytest.mark.parametrize(("part", "other"), [
    ("compiler", dataclasses.replace(COMPILER, version=(3, 2))),
    ("compiler", dataclasses.replace(COMPILER, table=dataclasses.replace(TEST_RTC, product="otherRTC"))),
    ("arch", "sm_90"), ("options", ["-O2"]), ("source", "S "), ("headers", {"a.h": "A "}), ("headers", {"b.h": "A"}),
])
def test_the_key_changes_with_every_input(part, other):
    assert rtc.cache_key(**KEY_PARTS) != rtc.cache_key(**{**KEY_PARTS, part: other})
    assert rtc.cache_key(**KEY_PARTS) == rtc.cache_key(**dict(KEY_PARTS))


def test_an_entry_is_found_by_another_cache_on_the_same_directory(tmp_path):
    kernel_cache.KernelCache(tmp_path).put("k1", b"\x7fELF code")
    assert kernel_cache.KernelCache(tmp_path).get("k1") == b"\x7fELF code"
    assert kernel_cache.KernelCache(tmp_path).get("k2") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k1"]  # no temporary file left behind


def test_an_entry_is_renamed_into_place_whole(tmp_path, monkeypatch):
    seen = []

    def replace(source, target):
        seen.append((Path(source).name, Path(source).read_bytes()))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(kernel_cache.os, "replace", replace)
    cache = kernel_cache.KernelCache(tmp_path)
    with pytest.warns(RuntimeWarning, match="No space left on device"):
        cache.put("k1", b"code")
    (name, written), = seen
    assert name.startswith(".k1.") and written.endswith(b"code")  # the whole entry, before the rename
    assert list(tmp_path.iterdir()) == []  # neither a partial entry nor the temporary file
    assert cache.get("k1") == b"code"  # this process keeps it in memory


def test_a_corrupt_entry_is_dropped(tmp_path):
    kernel_cache.KernelCache(tmp_path).put("k1", b"code")
    entry = tmp_path / "k1"
    entry.write_bytes(entry.read_bytes()[:-1] + b"X")
    assert kernel_cache.KernelCache(tmp_path).get("k1") is None
    assert not entry.exists()
    entry.write_bytes(b"short")
    assert kernel_cache.KernelCache(tmp_path).get("k1") is None


def test_an_unwritable_cache_warns_once_and_keeps_images_in_memory(tmp_path):
    (tmp_path / "home").write_text("a file where the cache directory's parent should be")
    cache = kernel_cache.KernelCache(tmp_path / "home" / "kernels")
    with pytest.warns(RuntimeWarning, match=r"kept in memory only.*cannot be written.*EMBER_CACHE_DIR") as caught:
        cache.put("k1", b"one")
        cache.put("k2", b"two")
    assert len(caught) == 1
    assert (cache.get("k1"), cache.get("k2")) == (b"one", b"two")
    with pytest.warns(RuntimeWarning, match="no home directory"):
        kernel_cache.KernelCache(None).put("k1", b"one")


# ---- the probe order, the allow-list -------------------------------------------------------------------

def test_the_probe_takes_the_first_library_that_loads_and_holds_the_compiler(tmp_path):
    wheel = tmp_path / "ember_testgpu_wheel" / "rtc"
    wheel.mkdir(parents=True)
    (wheel / "libember-tgrtc.so.2").write_bytes(b"")
    tried = []

    def opener(vendor, target):
        tried.append(target)
        if target == "libember-tgrtc.so.3":
            raise OSError("cannot open shared object file")
        if target == "libember-tgrtc.so.2":
            raise AttributeError("tgrtc_create not found")  # a library of the name without the compiler in it
        return (3, 4)

    found = rtc.find_compiler(RTC_VENDOR, opener, search_path=[str(tmp_path)])
    assert tried == ["libember-tgrtc.so.3", "libember-tgrtc.so.2", str(wheel / "libember-tgrtc.so.2")]
    assert (found.library, found.version) == (str(wheel / "libember-tgrtc.so.2"), (3, 4))
    assert rtc.find_compiler(RTC_VENDOR, lambda vendor, target: (_ for _ in ()).throw(OSError()), []) is None
    assert rtc.find_compiler(TEST_VENDOR) is None  # no compiler in the table


def _compilation(compiler, cache_dir=None, vendor=RTC_VENDOR):
    return rtc.Compilation(vendor, "ember_testgpu_images", finder=lambda vendor: compiler,
                           cache=kernel_cache.KernelCache(cache_dir))


def test_the_allow_list_and_the_compiler_version_decide_before_anything_runs():
    compilation = _compilation(COMPILER)
    assert compilation.refusal("sm_80") is None and compilation.refusal("sm_90") is None
    assert "sm_75 is not among the architectures tgRTC is known to build ember's kernels for (sm_80, sm_90)" \
        in compilation.refusal("sm_75")
    old = _compilation(dataclasses.replace(COMPILER, version=(3, 0)))
    assert old.refusal("sm_90") == ("sm_90 needs TestGPU 3.1 or newer (the installed tgRTC is TestGPU 3.0's): "
                                    "pip install ember-testgpu-rtc")
    none = _compilation(None).refusal("sm_80")
    assert "no tgRTC is installed" in none and "libember-tgrtc.so.3, libember-tgrtc.so.2" in none
    assert "site-packages/ember_testgpu_wheel/rtc" in none and "pip install ember-testgpu-rtc" in none


def test_the_compiler_options_are_the_tables_and_the_target(compile_log, tmp_path):
    code = _compilation(COMPILER, tmp_path).compile("binary_add", "sm_90")
    assert b"|-std=c++17 --no-contract --target=sm_90|" in code
    assert b"prelude.h" in code and b"abi.h" in code  # every header of csrc/, by name
    source, headers = rtc.kernel_source("binary_add")
    assert source.startswith('#include "prelude.h"\n') and "eg_binary_add_float32" in source
    assert "prelude.h" in headers and "abi.h" in headers


def test_a_second_compilation_is_a_cache_hit_in_this_and_later_processes(compile_log, tmp_path):
    tmp_path = tmp_path / "cache"
    first = _compilation(COMPILER, tmp_path)
    code = first.compile("binary_add", "sm_80")
    assert first.compile("binary_add", "sm_80") == code
    assert _compilation(COMPILER, tmp_path).compile("binary_add", "sm_80") == code  # a later process
    assert len(compile_log()) == 1
    _compilation(COMPILER, tmp_path).compile("binary_add", "sm_90")  # another key
    _compilation(dataclasses.replace(COMPILER, version=(3, 2)), tmp_path).compile("binary_add", "sm_80")
    assert len(compile_log()) == 3
    for entry in tmp_path.iterdir():
        entry.write_bytes(b"garbage")
    assert _compilation(COMPILER, tmp_path).compile("binary_add", "sm_80") == code  # corrupt: compiled again
    assert len(compile_log()) == 4


# ---- the real NVRTC -------------------------------------------------------------------------------------

NVRTC_SITE = Path(__file__).resolve().parents[1] / "build" / "nvrtc"  # where .ci/run puts the NVRTC wheel


@pytest.fixture(scope="module")
def nvrtc():
    from ember_cuda.vendor import CUDA

    found = rtc.find_compiler(CUDA, search_path=[str(NVRTC_SITE), *sys.path])
    if found is None:
        pytest.skip(f'no NVRTC (.ci/run installs it: pip install --target {NVRTC_SITE} "nvidia-cuda-nvrtc>=13,<14")')
    return CUDA, found


@pytest.mark.parametrize(("image", "arch"), [("binary_add", "sm_90"), ("fill", "sm_120")])
def test_nvrtc_compiles_the_shared_sources_into_sass_for_the_gpu(nvrtc, tmp_path, image, arch):
    from ember_gpu.build import _elf_functions

    vendor, compiler = nvrtc
    compilation = rtc.Compilation(vendor, "ember_cuda", finder=lambda vendor: compiler,
                                  cache=kernel_cache.KernelCache(tmp_path))
    assert compilation.refusal(arch) is None
    code = compilation.compile(image, arch)
    assert _elf_functions(code) == set(rtc._generated()[image].kernels)  # a cubin holding every kernel of the image


# ---- what the shipped images hold ----------------------------------------------------------------------

def _fatbin_with_ptx(arch: int) -> bytes:
    """A fatbin holding one PTX entry (what build.fatbin_contents reads of it; the PTX itself is not)."""
    payload = b"\0" * 16
    entry = struct.pack("<HHIQ", 1, 0, 64, len(payload)) + b"\0" * 12 + struct.pack("<I", arch) + b"\0" * 32
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entry) + len(payload)) + entry + payload


def _bundle(*ids: str) -> bytes:
    body = b"".join(struct.pack("<QQQ", 0, 0, len(ident)) + ident.encode() for ident in ids)
    return b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(ids)) + body


def test_the_targets_of_shipped_images():
    bundle = _bundle("host-x86_64-unknown-linux", "hipv4-amdgcn-amd-amdhsa--gfx90a",
                     "hipv4-amdgcn-amd-amdhsa--gfx1030:xnack-")
    offload = dataclasses.replace(TEST_RTC, image_format="offload-bundle")
    assert rtc.image_targets(offload, bundle) == (frozenset({"gfx90a", "gfx1030"}), frozenset())
    assert rtc.image_targets(TEST_RTC, _fatbin_with_ptx(90)) == (frozenset(), frozenset({90}))
    with pytest.raises(ValueError):
        rtc.image_targets(offload, b"\x7fELF")


@pytest.mark.parametrize(("binaries", "ptx", "arch", "served"), [
    ({80, 90}, {90}, "sm_80", True), ({80, 90}, {90}, "sm_86", True),  # sm_80 code runs on 8.x
    ({80}, set(), "sm_90", False), ({90}, set(), "sm_89", False),
    ({80, 90}, {90}, "sm_120", True),  # the PTX is JIT-compiled for newer GPUs
    ({86}, set(), "sm_80", False), ({"gfx90a"}, set(), "gfx90a", True), ({"gfx90a"}, set(), "gfx942", False),
])
def test_which_architectures_an_image_serves(binaries, ptx, arch, served):
    assert rtc.serves(frozenset(binaries), frozenset(ptx), arch) is served


# ---- the runtime's hooks -------------------------------------------------------------------------------

@pytest.fixture
def rtc_runtime(tmp_path, monkeypatch):
    """A runtime of RTC_VENDOR on the fake driver (GPUs of compute capability 8.0) whose package ships
    one image, binary_add, holding compute_90 PTX only: nothing shipped runs on the GPU."""
    from ember_gpu.fake import FakeGpu
    from ember_gpu.runtime import Runtime

    package = tmp_path / "ember_testgpu_images"
    (package / "kernels").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "kernels" / f"binary_add{RTC_VENDOR.image_suffix}").write_bytes(_fatbin_with_ptx(90))
    index = {"format": 1, "images": {"binary_add": {"file": f"binary_add{RTC_VENDOR.image_suffix}", "key": "",
                                                    "kernels": ["eg_binary_add_float32"]}}}
    (package / "kernels" / "kernels.json").write_text(json.dumps(index))
    monkeypatch.syspath_prepend(str(tmp_path))
    fake = FakeGpu(RTC_VENDOR, devices=2, memory_bytes=1 << 20, compute_capability=(8, 0))
    runtime = Runtime(RTC_VENDOR, "ember_testgpu_images", opener=fake.open)
    yield runtime, fake
    sys.modules.pop("ember_testgpu_images", None)


def _refuse_shipped_images(device) -> list[bytes]:
    """Make the driver refuse fatbins on ``device`` as CUDA_ERROR_NO_BINARY_FOR_GPU (209) does; returns
    the start of every image it is asked to load."""
    original, loaded = device._fn["module_load_data"], []

    def load(module, image):
        loaded.append(bytes(device.ffi.buffer(image, 4)))
        return 209 if loaded[-1] == b"\x50\xed\x55\xba" else original(module, image)

    device._fn = {**device._fn, "module_load_data": load}
    return loaded


def test_no_shipped_image_and_no_compiler_declines_naming_both_fixes(rtc_runtime):
    runtime, _ = rtc_runtime
    runtime.rtc = _compilation(None)
    found = runtime.discover()
    assert found.count == 0 and set(found.unusable) == {0, 1}
    assert found.reason.startswith("testgpu:0 (ember fake GPU): ember-testgpu's shipped kernels cover compute_90 PTX, "
                                   "not sm_80, and none can be compiled for it: no tgRTC is installed")
    assert found.reason.endswith(": pip install ember-testgpu-rtc; or install ember-testgpu built for sm_80")


def test_an_architecture_off_the_allow_list_declines_too(rtc_runtime):
    runtime, _ = rtc_runtime
    runtime.rtc = _compilation(COMPILER, vendor=dataclasses.replace(RTC_VENDOR, rtc=dataclasses.replace(TEST_RTC,
                                                                                                       archs={})))
    assert "sm_80 is not among the architectures tgRTC is known" in runtime.discover().reason


def test_a_gpu_the_compiler_serves_is_usable_and_loads_a_compiled_image(rtc_runtime, compile_log, tmp_path):
    runtime, _ = rtc_runtime
    runtime.rtc = _compilation(COMPILER, tmp_path / "cache")
    assert runtime.discover().count == 2
    device = runtime.device(0)
    loaded = _refuse_shipped_images(device)
    assert device.modules.function("binary_add", "eg_binary_add_float32")
    assert loaded == [b"\x50\xed\x55\xba", b"TGRT"]  # the shipped fatbin, then the compiled image
    assert compile_log() == ["binary_add.cu -std=c++17 --no-contract --target=sm_80"]


def test_other_load_failures_are_the_drivers_error_unchanged(rtc_runtime, compile_log):
    runtime, fake = rtc_runtime
    runtime.rtc = _compilation(COMPILER)
    fake.fail("module_load_data", 200)  # a damaged image: not a reason to compile
    with pytest.raises(DriverError) as caught:
        runtime.device(0).modules.function("binary_add", "eg_binary_add_float32")
    assert caught.value.status == 200 and "compile" not in str(caught.value)
    assert compile_log() == []


def test_a_load_failure_the_compiler_cannot_mend_says_why(rtc_runtime):
    runtime, fake = rtc_runtime
    runtime.rtc = _compilation(COMPILER)
    fake.attribute_values["compute_capability_minor"] = 7  # sm_87: shipped nothing, and not on the allow-list
    runtime.rtc.shipped = lambda: None  # (the discovery cannot tell: the load path must)
    fake.fail("module_load_data", 222, times=None)
    with pytest.raises(DriverError, match=r"\(222\).*; sm_87 is not among the architectures tgRTC") as caught:
        runtime.device(0).modules.function("binary_add", "eg_binary_add_float32")
    assert caught.value.status == 222


def test_an_unwritable_cache_warns_once_and_the_gpu_still_runs(rtc_runtime, tmp_path):
    runtime, _ = rtc_runtime
    (tmp_path / "not-a-dir").write_text("")
    runtime.rtc = _compilation(COMPILER, tmp_path / "not-a-dir" / "kernels")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for index in (0, 1):
            device = runtime.device(index)
            _refuse_shipped_images(device)
            assert device.modules.function("binary_add", "eg_binary_add_float32")
    assert [str(w.message).count("kept in memory only") for w in caught] == [1]
