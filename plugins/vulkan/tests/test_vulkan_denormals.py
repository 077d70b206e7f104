"""Subnormal handling: the float-controls properties, the DenormPreserve variant of every shader,
and both variants giving the same answers (lavapipe keeps subnormals either way, so the variants
must agree bit for bit here)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from importlib import resources

import numpy as np
import pytest
from ember_vulkan import denormals, runtime

import ember_core as em
from ember_core.device import Device

SHADERS = sorted(p for p in resources.files("ember_vulkan").joinpath("spirv").iterdir() if p.name.endswith(".spv"))


@pytest.fixture
def device() -> Device:
    return Device("vulkan", 0)


def test_properties_show_float_controls_and_the_subnormal_mode(device: Device) -> None:
    props = device.backend.hooks["ember_device_properties"](device=device)
    controls = props["float_controls"]
    assert set(controls) == {"denorm_preserve_float16", "denorm_preserve_float32", "denorm_flush_to_zero_float16",
                             "denorm_flush_to_zero_float32", "denorm_behavior_independence"}
    assert controls["denorm_behavior_independence"] in ("32-bit only", "all", "none")
    expected = "preserved" if controls["denorm_preserve_float32"] else "flushed"
    assert props["float32_subnormals"] == expected
    both = controls["denorm_preserve_float32"] and controls["denorm_preserve_float16"]
    assert props["float16_subnormals"] == ("preserved" if both else "flushed")


@pytest.mark.no_device
@pytest.mark.skipif(shutil.which("spirv-val") is None, reason="spirv-val (spirv-tools) is not installed")
def test_every_shader_with_denorm_preserve_is_valid_spirv(tmp_path) -> None:
    assert SHADERS, "no compiled shaders in the package"
    for shader in SHADERS:
        code = denormals.with_denorm_preserve(shader.read_bytes(), (16, 32))
        words = struct.unpack(f"<{len(code) // 4}I", code)
        assert words.count(denormals.MODE_DENORM_PRESERVE) >= 2
        out = tmp_path / shader.name
        out.write_bytes(code)
        done = subprocess.run(["spirv-val", "--target-env", "vulkan1.2", str(out)], capture_output=True, text=True)
        assert done.returncode == 0, f"{shader.name}: {done.stdout}{done.stderr}"


@pytest.mark.no_device
@pytest.mark.parametrize("code", [b"", b"\x00" * 21, b"\x01\x02\x03\x04" * 5])
def test_patching_rejects_what_is_not_spirv(code: bytes) -> None:
    with pytest.raises(ValueError, match="SPIR-V"):
        denormals.with_denorm_preserve(code)


@pytest.fixture
def variants():
    """Runs a callable under each variant (keeping float16 and float32 subnormals, float32's, and as
    compiled); restores the device's choice."""
    dev = runtime.device(0)
    kept = dev.keep_subnormals

    def run(fn):
        results = []
        for keep in ((16, 32), (32,), ()):
            dev.keep_subnormals = keep
            results.append(fn())
        dev.keep_subnormals = kept
        return results

    yield run
    dev.keep_subnormals = kept


@pytest.mark.parametrize("op", ["add", "multiply", "divide", "maximum"])
def test_both_variants_agree_on_subnormals(op: str, variants) -> None:
    edges = np.float32([0.0, -0.0, 4.2e-45, -4.2e-45, 1e-40, 1.1e-38, 1.0, 3e38, np.inf, np.nan])
    a, b = (g.ravel() for g in np.meshgrid(edges, edges, indexing="ij"))

    def compute() -> bytes:
        out = getattr(em, op)(em.asarray(a, device="vulkan"), em.asarray(b, device="vulkan"))
        return np.asarray(out.to_device("cpu")).tobytes()

    preserving, preserving32, compiled = variants(compute)
    assert preserving == preserving32 == compiled
    with np.errstate(all="ignore"):
        reference = getattr(np, op)(a, b)
    got = np.frombuffer(preserving, dtype=np.float32)
    np.testing.assert_array_equal(got[~np.isnan(reference)], reference[~np.isnan(reference)])
