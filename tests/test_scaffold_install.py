"""A backend from ``ember new-backend``, untouched, installs and passes conformance: level 0, and
every op:dtype its manifest claims runs natively and passes (levels 1-2 on those ops); its own
tests pass too.  It is installed into a virtual environment that sees this one's packages, so the
process running the suite never gains a plugin."""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest
import tomllib

from ember_core.scaffold import new_backend


def run(*cmd: str | Path, **kwargs) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


# Five more native kernels, as the docs tell a newcomer to add them: a function in kernels.c and a
# claim in the manifest, nothing else.
FIVE_MORE = {
    "maximum": "(l != l || l >= r) ? l : r",
    "minimum": "(l != l || l <= r) ? l : r",
    "square": "l * l",
    "positive": "l",
    "abs": "l < 0 ? -l : (l == 0 ? 0 : l)",
}


def _add_five_kernels(root: Path) -> None:
    csrc = root / "src/ember_acme/csrc/kernels.c"
    manifest = root / "src/ember_acme/manifest.toml"
    for op, expr in FIVE_MORE.items():
        binary = "r" in expr
        params = "const ember_tensor *a, const ember_tensor *b" if binary else "const ember_tensor *x"
        operands = "out, a, b" if binary else "out, x"
        body = f"const ember_tensor *ops[] = {{{operands}}}; ELEMENTWISE({3 if binary else 2}, {expr})"
        csrc.write_text(csrc.read_text() + f"\nint acme_{op}(const ember_tensor *out, {params})\n{{ {body} }}\n")
        manifest.write_text(manifest.read_text() + f'{op} = ["int32", "int64", "float32", "float64"]\n')


@pytest.mark.slow
@pytest.mark.parametrize(("memory", "extend"), [("host", False), ("device", False), ("host", True)],
                         ids=["host", "device", "host-five-more-kernels"])
def test_generated_backend_installs_and_passes_conformance_on_what_it_claims(tmp_path, memory, extend):
    root = new_backend("acme", tmp_path, device_type="acmedev", memory=memory)
    if extend:
        _add_five_kernels(root)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    python = env_dir / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", root, env=env, cwd=tmp_path)
    assert "acmedev x1" in run(python, "-m", "ember_core.cli", "backends", env=env, cwd=tmp_path).stdout

    claims = tomllib.loads((root / "src/ember_acme/manifest.toml").read_text())["kernels"]["acmedev"]
    assert set(FIVE_MORE) <= set(claims) or not extend
    report = tmp_path / "report"
    run(python, "-m", "ember_conformance", "run", "--device", "acmedev", "--level", "2", "--ops", ",".join(claims),
        "--out", report, "--no-progress", env=env, cwd=tmp_path)
    matrix = json.loads((report / "report.json").read_text())["matrix"]
    claimed = {f"{op}:{dtype}" for op, dtypes in claims.items() for dtype in dtypes}
    results = {key: (cell["verdict"], cell["how"], cell["provider"]) for key, cell in matrix.items() if key in claimed}
    assert results == dict.fromkeys(claimed, ("pass", "native", "acme"))  # every claim ran natively and passed
    report = json.loads((report / "report.json").read_text())
    assert [report["levels"][level]["status"] for level in "012"] == ["passed"] * 3, report["levels"]

    run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", root / "tests", env=env, cwd=tmp_path)
