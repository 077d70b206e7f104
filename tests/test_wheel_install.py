"""Extras are how users install backends: build the wheels of the core and ember-cpu, install
``ember[cpu]`` from them into a clean virtual environment, and run ``ember doctor`` there."""

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


@pytest.mark.slow
def test_extra_cpu_installs_from_wheels_and_passes_doctor(tmp_path):
    dist = tmp_path / "dist"
    # The build tools are already in this environment; build isolation would only fetch them again.
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", dist, ROOT,
        ROOT / "plugins" / "cpu")
    wheels = sorted(p.name.split("-")[0] for p in dist.glob("*.whl"))
    assert wheels == ["ember", "ember_cpu"]

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run(python, "-m", "pip", "install", "--quiet", "ember[cpu]", "--find-links", dist, env=env, cwd=tmp_path)
    doctor = run(env_dir / "bin" / "ember", "doctor", env=env, cwd=tmp_path)
    assert "PASS  cpu" in doctor.stdout
    where = run(python, "-c", "import ember_core, ember_cpu; print(ember_core.__file__, ember_cpu.__file__)",
                env=env, cwd=tmp_path)
    assert str(env_dir) in where.stdout.split()[0] and str(env_dir) in where.stdout.split()[1]
