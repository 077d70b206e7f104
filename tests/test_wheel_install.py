"""Extras are how users install backends: build the wheel of every distribution once, install each
extra (``ember[cpu]``, ``[xnnpack]``, ``[vulkan]``, ``[cuda]``, ``[rocm]``, ``[all]``, ``[conformance]``) from them
into a clean virtual environment, and ask ``ember backends`` / ``ember doctor`` there."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent


def run(*cmd: str | Path, **kwargs) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def _distributions() -> list[Path]:
    """Every distribution of the repository: the core, each plugin, the conformance suite."""
    return [ROOT, *sorted(p.parent for p in ROOT.glob("plugins/*/pyproject.toml")), ROOT / "conformance"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """The wheels of every distribution, built once for all the extras' installs (ember-cuda's
    compiles its kernels with nvcc: most of the time this takes)."""
    dist = tmp_path_factory.mktemp("dist")
    # The build tools are already in this environment; build isolation would only fetch them again.
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", dist, *_distributions())
    wheels = {p.name.split("-")[0] for p in dist.glob("*.whl")}
    names = {"ember" if d == ROOT else tomllib.loads((d / "pyproject.toml").read_text())["project"]["name"]
             for d in _distributions()}
    assert wheels == {name.replace("-", "_") for name in names}
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


@pytest.mark.slow
def test_extra_rocm_installs_from_wheels_with_its_code_objects_and_says_why_there_is_no_gpu(dist, tmp_path):
    env_dir, env = _install("rocm", dist, tmp_path)
    shipped = run(env_dir / "bin" / "python", "-c", "import importlib.resources as r, ember_gpu.build as b; "
                                                    "k = r.files('ember_rocm') / 'kernels'; "
                                                    "print(len(b.read_index(k)), len(list(k.glob('*.co'))))",
                  env=env, cwd=tmp_path)
    kernels, bundles = map(int, shipped.stdout.split())
    assert kernels > 1000 and bundles > 50  # the code-object bundles are in the wheel
    backends = run(env_dir / "bin" / "ember", "backends", env=env, cwd=tmp_path).stdout
    assert "ember-rocm" in backends
    doctor = subprocess.run([env_dir / "bin" / "ember", "doctor"], capture_output=True, text=True, env=env,
                            cwd=tmp_path)
    assert "PASS  cpu" in doctor.stdout
    assert "PASS  rocm:0" in doctor.stdout or "SKIP  rocm" in doctor.stdout, doctor.stdout


# What each extra brings, as `ember backends` lists it (cuda has a test of its own above).
EXTRAS = {
    "cpu": ["ember-cpu"],
    "xnnpack": ["ember-cpu", "ember-xnnpack"],
    "vulkan": ["ember-cpu", "ember-vulkan"],
    "all": ["ember-cpu", "ember-xnnpack", "ember-vulkan", "ember-cuda", "ember-rocm"],
}


@pytest.mark.slow
@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_every_extra_installs_from_wheels_and_its_backends_work(dist, tmp_path, extra):
    env_dir, env = _install(extra, dist, tmp_path)
    backends = run(env_dir / "bin" / "ember", "backends", env=env, cwd=tmp_path).stdout
    for package in EXTRAS[extra]:
        assert f" {package} " in backends, backends
    assert "BROKEN" not in backends, backends
    doctor = subprocess.run([env_dir / "bin" / "ember", "doctor"], capture_output=True, text=True, env=env,
                            cwd=tmp_path)
    assert "PASS  cpu" in doctor.stdout and "FAIL" not in doctor.stdout, doctor.stdout
    no_pytest = subprocess.run([env_dir / "bin" / "python", "-c", "import pytest"], capture_output=True, env=env)
    assert no_pytest.returncode != 0  # pytest belongs to ember[conformance], not to every user


@pytest.mark.slow
def test_extra_conformance_installs_the_suite_and_runs_level_0(dist, tmp_path):
    env_dir, env = _install("cpu,conformance", dist, tmp_path)
    run(env_dir / "bin" / "ember-conformance", "run", "--device", "cpu", "--level", "0", "--out", tmp_path / "report",
        "--no-progress", env=env, cwd=tmp_path)
