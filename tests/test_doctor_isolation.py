"""`ember doctor` checks each device in its own process (a segfaulting kernel fails its device, the
others are still checked), and `ember backends` exits non-zero when a plugin is broken, including a
plugin whose manifest and kernel table disagree, which is found when it registers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SELF_TEST = Path(__file__).resolve().parents[1] / "conformance" / "tests"

PLUGINS = f'''
import ctypes, sys
sys.path.insert(0, {str(SELF_TEST)!r})
from broken_backend import PropertyFlusher, ZeroKernel
from ember_core.plugins import ABI_MAJOR, ABI_MINOR, PluginInfo, hookimpl


class Crashy(ZeroKernel):
    name, device_types = "crashy", ("crashy",)

    @hookimpl
    def ember_synchronize(self, device):
        ctypes.string_at(0)  # SIGSEGV in the doctor's child process


class Liar(ZeroKernel):
    """Its manifest claims add; its kernel table is empty."""

    name, device_types = "liar", ("liar",)

    @hookimpl
    def ember_plugin_info(self):
        return PluginInfo(name=self.name, version="0.0.1", abi=(ABI_MAJOR, ABI_MINOR), device_types=self.device_types,
                          manifest={str(Path("MANIFEST"))!r}, package="ember-liar")


crashy, liar, propflush = Crashy(), Liar(), PropertyFlusher()
'''


def _install(tmp: Path, *names: str) -> dict[str, str]:
    """The test plugins as an installed distribution on PYTHONPATH (entry points, not --plugin)."""
    manifest = tmp / "liar.toml"
    manifest.write_text('[kernels.liar]\nadd = ["float32"]\n')
    (tmp / "doctor_test_plugins.py").write_text(PLUGINS.replace("MANIFEST", str(manifest)))
    info = tmp / "ember_doctor_test-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ember-doctor-test\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(
        "[ember.backends]\n" + "".join(f"{n} = doctor_test_plugins:{n}\n" for n in names))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")])}


def _ember(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ember_core.cli", *args], capture_output=True, text=True,
                          env=env, timeout=600)


def test_a_segfaulting_device_fails_alone(tmp_path: Path) -> None:
    proc = _ember(_install(tmp_path, "crashy"), "doctor")
    assert proc.returncode == 1
    assert "FAIL  crashy:0" in proc.stdout and "crashed (signal 11)" in proc.stdout
    assert "PASS  cpu" in proc.stdout  # checked after the crash


def test_backends_exits_non_zero_on_a_lying_manifest(tmp_path: Path) -> None:
    proc = _ember(_install(tmp_path, "liar"), "backends")
    assert proc.returncode == 1
    assert "BROKEN" in proc.stdout and "claimed without a kernel ['add']" in proc.stdout


def test_backends_exits_zero_when_a_device_is_only_unavailable(tmp_path: Path) -> None:
    proc = _ember(_install(tmp_path), "backends")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_doctor_prints_each_devices_numerics_settings(tmp_path: Path) -> None:
    """Whatever a plugin reports under the numerics keys (float controls, subnormal modes) is printed under
    its device, nested mappings as dotted keys; the cpu reports none, so nothing follows its line."""
    proc = _ember(_install(tmp_path, "propflush"), "doctor")
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "propflush:0" in line)
    assert lines[at + 1:at + 3] == ["      float_controls.denorm_preserve_float32 = False",
                                    "      float32_subnormals = flushed"]
    cpu = next(i for i, line in enumerate(lines) if line.startswith("PASS  cpu"))
    assert not lines[cpu + 1].startswith(" ")
