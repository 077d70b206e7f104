"""The code objects: the shared kernel sources compile with hipcc for every architecture
ember-rocm ships (gfx908, gfx90a, gfx940: wave 64; gfx1030: wave 32), as clang-offload bundles the
HIP runtime picks its GPU's object from; and the installed package holds one bundle per source."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import pytest
from ember_gpu import codegen
from ember_gpu.build import HIPCC_ARCHS, INDEX, hipcc_toolchain

pytestmark = pytest.mark.no_device

BUNDLER = shutil.which("clang-offload-bundler") or shutil.which("clang-offload-bundler-15")
needs_hipcc = pytest.mark.skipif(not (shutil.which("hipcc") and BUNDLER),
                                 reason="needs hipcc (apt-get install hipcc libamdhip64-dev rocm-device-libs)")


def _targets(bundle: Path) -> set[str]:
    done = subprocess.run([BUNDLER, "--list", "--type=o", f"--input={bundle}"], capture_output=True, text=True,
                          check=True)
    return set(done.stdout.split())


@needs_hipcc
def test_a_shared_source_compiles_for_every_shipped_architecture(tmp_path):
    """reduce_sum: warp shuffles and EG_WARP_SIZE from __AMDGCN_WAVEFRONT_SIZE, wave 64 and 32."""
    source = tmp_path / "reduce_sum.cu"
    source.write_text(codegen.generate()["reduce_sum"].text)
    toolchain = hipcc_toolchain()
    done = subprocess.run(toolchain.command(source, tmp_path / "reduce_sum.co"), capture_output=True, text=True,
                          env=toolchain.environment, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    assert _targets(tmp_path / "reduce_sum.co") >= {f"hipv4-amdgcn-amd-amdhsa--{arch}" for arch in HIPCC_ARCHS}


@needs_hipcc
def test_the_installed_package_holds_its_bundles():
    kernels = Path(str(resources.files("ember_rocm").joinpath("kernels")))
    index = json.loads((kernels / INDEX).read_text())["images"]
    assert len(index) > 50 and all((kernels / entry["file"]).is_file() for entry in index.values())
    shipped = {f"hipv4-amdgcn-amd-amdhsa--{arch}" for arch in HIPCC_ARCHS}
    assert _targets(kernels / index["binary_add"]["file"]) & shipped  # all four, or CI's $EMBER_ROCM_ARCHS


def test_a_build_without_hipcc_names_the_packages(monkeypatch):
    from ember_gpu import build

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("EMBER_HIPCC", raising=False)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(SystemExit, match="apt-get install hipcc libamdhip64-dev rocm-device-libs"):
        build.find_hipcc()
