"""Extras are how users install backends: build the wheels of the core, ember-cpu, ember-gpu and
ember-cuda, install ``ember[cpu]`` and ``ember[cuda]`` from them into clean virtual environments,
and ask ``ember doctor`` / ``ember backends`` there."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*cmd: str | Path, **kwargs) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    # The build tools are already in this environment; build isolation would only fetch them again.
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", dist, ROOT,
        *(ROOT / "plugins" / name for name in ("cpu", "gpu", "cuda")))
    wheels = sorted(p.name.split("-")[0] for p in dist.glob("*.whl"))
    assert wheels == ["ember", "ember_cpu", "ember_cuda", "ember_gpu"]
    return dist


def _install(extra: str, dist: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A fresh virtual environment with ``ember[<extra>]`` installed from the wheels in dist."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run(env_dir / "bin" / "python", "-m", "pip", "install", "--quiet", f"ember[{extra}]", "--find-links", dist,
        env=env, cwd=tmp_path)
    return env_dir, env


@pytest.mark.slow
def test_extra_cpu_installs_from_wheels_and_passes_doctor(dist, tmp_path):
    env_dir, env = _install("cpu", dist, tmp_path)
    doctor = run(env_dir / "bin" / "ember", "doctor", env=env, cwd=tmp_path)
    assert "PASS  cpu" in doctor.stdout
    where = run(env_dir / "bin" / "python", "-c",
                "import ember_core, ember_cpu; print(ember_core.__file__, ember_cpu.__file__)", env=env, cwd=tmp_path)
    assert str(env_dir) in where.stdout.split()[0] and str(env_dir) in where.stdout.split()[1]


@pytest.mark.slow
def test_extra_cuda_installs_from_wheels_with_its_kernels_and_says_why_there_is_no_gpu(dist, tmp_path):
    env_dir, env = _install("cuda", dist, tmp_path)
    python = env_dir / "bin" / "python"
    shipped = run(python, "-c", "import json, importlib.resources as r, ember_gpu.build as b; "
                                "k = r.files('ember_cuda') / 'kernels'; "
                                "print(len(b.read_index(k)), sorted(json.loads((k / 'build.json').read_text())))",
                  env=env, cwd=tmp_path)
    count, keys = shipped.stdout.split(maxsplit=1)
    assert int(count) > 1000 and keys.strip() == "['ember_abi', 'kernel_abi']"  # the fatbins are in the wheel
    backends = run(env_dir / "bin" / "ember", "backends", env=env, cwd=tmp_path).stdout
    assert "ember-cuda" in backends and "ok (priority 0)" in backends
    doctor = subprocess.run([env_dir / "bin" / "ember", "doctor"], capture_output=True, text=True, env=env,
                            cwd=tmp_path)
    assert "PASS  cpu" in doctor.stdout
    has_gpu = "PASS  cuda:0" in doctor.stdout
    assert has_gpu or ("SKIP  cuda" in doctor.stdout and "R580" in doctor.stdout), doctor.stdout
