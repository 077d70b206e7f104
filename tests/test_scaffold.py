"""``ember new-backend``: the generated package is complete and clean, and wrong requests get a
clear error.  (tests/test_scaffold_install.py builds one and runs conformance on it.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from ember_core.cli import main
from ember_core.scaffold import ScaffoldError, new_backend


@pytest.mark.parametrize("memory", ["host", "device"])
def test_generates_a_complete_package_with_no_placeholder_left(tmp_path, memory):
    root = new_backend("acme", tmp_path, device_type="acmegpu", memory=memory)
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert files == {
        "pyproject.toml", "setup.py", "build_ffi.py", "README.md", "tests/test_ember_acme.py",
        "src/ember_acme/__init__.py", "src/ember_acme/plugin.py", "src/ember_acme/kernels.py",
        "src/ember_acme/manifest.toml", "src/ember_acme/csrc/kernels.c",
        "src/ember_acme/csrc/ember.h", "src/ember_acme/csrc/ember_kit.h", "src/ember_acme/csrc/ember_cdef.h",
    } | ({"src/ember_acme/csrc/memory.c"} if memory == "device" else set())
    for path in root.rglob("*"):
        if path.is_file() and path.suffix != ".h":
            assert "$" not in path.read_text().replace("$dist", ""), path
    assert '[kernels.acmegpu]' in (root / "src/ember_acme/manifest.toml").read_text()
    base = {"host": "HostMemoryBackend", "device": "DeviceMemoryBackend"}[memory]
    assert f"class Plugin({base}):" in (root / "src/ember_acme/plugin.py").read_text()


def test_generated_python_is_ruff_clean(tmp_path):
    root = new_backend("acme", tmp_path)
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(root)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_cdef_text_keeps_declarations_and_integer_defines_only(tmp_path):
    from ember_core.backend_kit import cdef_text

    text = cdef_text()
    assert "#define EMBER_ABI_MAJOR 1" in text and "} ember_tensor;" in text
    assert "#include" not in text and "#ifndef" not in text and "/*" not in text


@pytest.mark.parametrize(("name", "kwargs", "says"), [
    ("Acme", {}, "lowercase identifier"),
    ("my-backend", {}, "lowercase identifier"),
    ("class", {}, "lowercase identifier"),
    ("cuda", {}, "ember's own ember-cuda"),
    ("acme", {"device_type": "cpu"}, "ember's own ember-cpu"),
    ("acme", {"memory": "shared"}, "memory must be one of ['device', 'host']"),
])
def test_refuses_what_it_cannot_generate(tmp_path, name, kwargs, says):
    with pytest.raises(ScaffoldError, match=rf"{says}".replace("[", r"\[").replace("]", r"\]")):
        new_backend(name, tmp_path, **kwargs)


def test_cli_generates_and_refuses_an_existing_directory(tmp_path, capsys):
    assert main(["new-backend", "acme", "--dest", str(tmp_path)]) == 0
    assert "ember-acme" in capsys.readouterr().out
    assert main(["new-backend", "acme", "--dest", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err

