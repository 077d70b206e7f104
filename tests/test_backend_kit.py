"""The core's helpers for backends (ember_core.backend_kit) and how registration treats plugins:
a class or an instance is a plugin as a module is, a hook's exception names the plugin and the
hook, and a misspelled hook is called a misspelling."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ember_core as em
from ember_core import plugins
from ember_core.backend_kit import DeviceMemoryBackend, HostMemoryBackend
from ember_core.plugins import ABI_MAJOR, ABI_MINOR, PluginInfo, hookimpl


class NoKernels:
    """A plugin named by its class's ``name``, with no kernels: every op runs through the fallback."""

    name = "kit"

    @hookimpl
    def ember_plugin_info(self) -> PluginInfo:
        return PluginInfo(name=self.name, version="0", abi=(ABI_MAJOR, ABI_MINOR), device_types=(self.name,))

    @hookimpl
    def ember_kernels(self, device_type: str) -> dict[str, Any]:
        return {}


class Kit(NoKernels, HostMemoryBackend):
    """A backend of host memory with no kernels."""


@pytest.fixture
def registered():
    made = []

    def register(plugin: Any) -> Any:
        backend = plugins.register(plugin)
        made.append(backend.name)
        return backend

    yield register
    for name in made:
        plugins.unregister(name)


@pytest.mark.parametrize("as_class", [True, False])
def test_a_class_or_an_instance_registers_and_host_memory_works(registered, as_class):
    registered(Kit if as_class else Kit())
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = em.asarray(data, device="kit")
    with em.fallback_policy("allow"):
        np.testing.assert_array_equal((x + x).to_device("cpu").numpy(), data * 2)
    stats = em.Device("kit", 0).backend.hooks["ember_memory_stats"](em.Device("kit", 0))
    assert stats["allocated_bytes"] >= data.nbytes and stats["peak_bytes"] >= stats["allocated_bytes"]
    assert x.__dlpack_device__() == (1, 0)  # host-addressable: DLPack's kDLCPU


class FakeDriver(NoKernels, DeviceMemoryBackend):
    """Device memory as a dict of bytearrays at made-up addresses: nothing the host could
    dereference, every byte moved by the five driver calls."""

    name = "cardmem"

    def __init__(self, capacity: int = 1 << 20) -> None:
        super().__init__()
        self.blocks: dict[int, bytearray] = {}
        self.capacity, self.next_address = capacity, 0x1000

    def _find(self, address: int) -> tuple[bytearray, int]:
        base = max(a for a in self.blocks if a <= address)
        return self.blocks[base], address - base

    def device_malloc(self, device: Any, nbytes: int) -> int:
        if sum(map(len, self.blocks.values())) + nbytes > self.capacity:
            return 0
        address, self.next_address = self.next_address, self.next_address + nbytes + 0x1000
        self.blocks[address] = bytearray(nbytes)
        return address

    def device_free(self, device: Any, address: int) -> None:
        del self.blocks[address]

    def device_copy_from_host(self, device: Any, dst: int, src: memoryview) -> None:
        block, at = self._find(dst)
        block[at:at + src.nbytes] = src.cast("B")

    def device_copy_to_host(self, device: Any, dst: memoryview, src: int) -> None:
        block, at = self._find(src)
        dst.cast("B")[:] = block[at:at + dst.nbytes]

    def device_copy_on_device(self, device: Any, dst: int, src: int, nbytes: int) -> None:
        (to, at), (source, frm) = self._find(dst), self._find(src)
        to[at:at + nbytes] = source[frm:frm + nbytes]


def test_device_memory_moves_every_byte_through_the_driver_calls(registered):
    driver = FakeDriver()
    registered(driver)
    data = np.arange(12, dtype=np.float64).reshape(3, 4)
    x = em.asarray(data, device="cardmem")
    with pytest.raises(em.DeviceError, match=r"to_device\('cpu'\)"):  # not host memory: nothing to alias
        x.__dlpack_device__()
    with em.fallback_policy("allow"):
        np.testing.assert_array_equal((x * 2).to_device("cpu").numpy(), data * 2)
    np.testing.assert_array_equal(x[1:, ::2].to_device("cpu").numpy(), data[1:, ::2])
    device = em.Device("cardmem", 0)
    assert device.backend.hooks["ember_device_properties"](device)["memory"] == "device"
    live = len(driver.blocks)
    del x
    em.empty_cache()
    assert len(driver.blocks) < live  # freed through the driver


def test_a_full_device_raises_memory_error_with_what_to_do(registered):
    registered(FakeDriver(capacity=1024))
    with pytest.raises(MemoryError, match=r"out of memory allocating 8000 bytes on cardmem:0.*empty_cache"):
        em.zeros((1000,), dtype=em.float64, device="cardmem")


def test_an_exception_in_a_hook_is_a_plugin_error_naming_plugin_and_hook(registered):
    class Faulty(Kit):
        name = "faulty"

        @hookimpl
        def ember_device_properties(self, device: Any) -> dict[str, Any]:
            raise KeyError("serial")

    registered(Faulty)
    device = em.Device("faulty", 0)
    with pytest.raises(em.PluginError, match=r"ember-faulty: its hook ember_device_properties raised KeyError") as info:
        device.backend.hooks["ember_device_properties"](device)
    assert isinstance(info.value.__cause__, KeyError)


def test_an_exception_in_plugin_info_names_the_hook():
    class NoInfo(Kit):
        @hookimpl
        def ember_plugin_info(self) -> PluginInfo:
            raise RuntimeError("driver table missing")

    with pytest.raises(em.PluginError, match="its hook ember_plugin_info raised RuntimeError: driver table missing"):
        plugins.register(NoInfo)


def test_a_misspelled_device_hook_is_reported_as_a_misspelling():
    class Typo(Kit):
        name = "typo"

        @hookimpl
        def ember_copy_to_hots(self, device: Any, src: Any, src_offset: int, dst: memoryview) -> None:
            pass

    Typo.ember_copy_to_host = None  # only the misspelled one is left
    with pytest.raises(em.PluginError, match="'ember_copy_to_hots' looks like a misspelling of 'ember_copy_to_host'"):
        plugins.register(Typo)


def test_a_misspelled_optional_hook_names_the_hook_it_resembles():
    class Typo(Kit):
        name = "typo2"

        @hookimpl
        def ember_empty_cahce(self, device: Any) -> None:
            pass

    with pytest.raises(em.PluginError, match="a misspelling of 'ember_empty_cache'"):
        plugins.register(Typo)


def test_kit_header_compiles_and_its_conversions_follow_ember(tmp_path: Path):
    """ember_kit.h on its own: the iterator walks a flipped, strided view; conversions saturate."""
    import cffi

    from ember_core.backend_kit import cdef_text, kit_header

    ffi = cffi.FFI()
    ffi.cdef(cdef_text() + "int walk(const ember_tensor *out, const ember_tensor *x);"
             "int64_t to_int8(double v); uint16_t to_half(float v); uint16_t to_bf16(float v);")
    ffi.set_source(
        "_kit_probe", '#include "ember_kit.h"\n'
        "int walk(const ember_tensor *out, const ember_tensor *x) { const ember_tensor *ops[] = {out, x};"
        " for (ember_iter it = ember_iter_begin(2, ops); it.remaining > 0; ember_iter_next(&it))"
        " *EMBER_AT(it, 0, double) = *EMBER_AT(it, 1, double); return 0; }\n"
        "int64_t to_int8(double v) { int8_t r; int s = 0; EMBER_KIT_CONVERT(1, v, EMBER_INT8, &r, s); return r; }\n"
        "uint16_t to_half(float v) { return ember_float_to_half(v); }\n"
        "uint16_t to_bf16(float v) { return ember_float_to_bfloat16(v); }\n",
        include_dirs=[str(kit_header().parent)])
    spec = importlib.util.spec_from_file_location("_kit_probe", ffi.compile(tmpdir=str(tmp_path)))
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    lib, ffi = probe.lib, probe.ffi
    src = np.arange(12, dtype=np.float64)
    out = np.zeros((3, 2))
    size = ffi.sizeof("ember_tensor")
    # x viewed as (3, 2) with strides (-4, 2) from offset 8: rows 8, 4, 0, columns +0, +2
    x = ffi.new("ember_tensor *", (size, 9, 2, 0, ffi.cast("void *", src.ctypes.data), 8, [3, 2], [-4, 2]))
    o = ffi.new("ember_tensor *", (size, 9, 2, 0, ffi.cast("void *", out.ctypes.data), 0, [3, 2], [2, 1]))
    assert lib.walk(o, x) == 0
    np.testing.assert_array_equal(out, [[8, 10], [4, 6], [0, 2]])
    assert [lib.to_int8(v) for v in (1.9, -1.9, float("nan"), 1e9, -1e9, float("inf"))] == [1, -1, 0, 127, -128, 127]
    values = np.array([0.1, 65504, 65520, 6e-8, 3e-8, -2.5e-5, float("inf"), 1 / 3], np.float32)
    with np.errstate(over="ignore"):  # 65520 rounds to inf, which is the point
        half = values.astype(np.float16).view(np.uint16)
    assert [lib.to_half(v) for v in values] == half.tolist()
    torch = pytest.importorskip("torch")
    bf16 = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert [lib.to_bf16(v) for v in values] == bf16.tolist()


def test_a_manifest_declares_determinism_per_claimed_op(tmp_path):
    from ember_core.plugins import load_manifest

    manifest = tmp_path / "manifest.toml"
    manifest.write_text('[kernels.acme]\nadd = ["float32"]\nsum = ["float32"]\n\n[deterministic.acme]\nadd = true\n'
                        'sum = false\n')
    assert load_manifest(manifest, "ember-acme").deterministic == {"acme": {"add": True, "sum": False}}
    for wrong in ("multiply = true", 'add = "yes"'):
        manifest.write_text(f'[kernels.acme]\nadd = ["float32"]\n\n[deterministic.acme]\n{wrong}\n')
        with pytest.raises(em.PluginError, match=r"\[deterministic.acme\] .* true or false for an op claimed"):
            load_manifest(manifest, "ember-acme")


def test_an_isolated_build_finds_ember_h_without_importing_ember():
    """What docs/writing-a-backend.md tells a plugin's build script: importlib's find_spec locates the
    installed headers, and neither ember nor numpy is imported for it."""
    import subprocess
    import sys

    code = ("import importlib.util, pathlib, sys; "
            "include = pathlib.Path(importlib.util.find_spec('ember_core').submodule_search_locations[0], 'include'); "
            "print((include / 'ember.h').is_file(), (include / 'ember_kit.h').is_file(), "
            "'numpy' in sys.modules, 'ember_core' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True", "False", "False"]
