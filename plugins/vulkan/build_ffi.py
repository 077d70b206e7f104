"""Build step of ember-vulkan: compiles the GLSL compute shaders to SPIR-V (glslangValidator,
checked with spirv-val) and the cffi module around the C layer (src/ember_vulkan/csrc).

The SPIR-V lands in ``src/ember_vulkan/spirv/`` (package data, not in git); the variants come from
``src/ember_vulkan/catalog.py``.  The Vulkan loader is not linked: the C layer opens it at run time,
so only its headers are needed here.  ``ember.h`` (for the ABI version) comes from
``$EMBER_INCLUDE``, the installed core, or this repository's ``ember_core/include``.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import cffi

HERE = Path(__file__).resolve().parent
PACKAGE = HERE / "src" / "ember_vulkan"
SHADERS = PACKAGE / "shaders"
SPIRV = PACKAGE / "spirv"
CSRC = PACKAGE / "csrc"
APT_PACKAGES = "mesa-vulkan-drivers libvulkan-dev glslang-tools vulkan-tools spirv-tools"
TARGET_ENV = "vulkan1.2"


def _fail(what: str) -> SystemExit:
    return SystemExit(f"ember-vulkan build: {what}.\nInstall the Vulkan toolchain first, e.g. on Debian/Ubuntu:\n"
                      f"    sudo apt-get install -y {APT_PACKAGES}")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise _fail(f"`{name}` was not found on PATH")
    return path


def _vulkan_include() -> list[str]:
    dirs = ["/usr/include", "/usr/local/include"]
    if os.environ.get("VULKAN_SDK"):
        dirs.insert(0, str(Path(os.environ["VULKAN_SDK"]) / "include"))
    for d in dirs:
        if (Path(d) / "vulkan" / "vulkan.h").is_file():
            return [d]
    raise _fail("the Vulkan headers (vulkan/vulkan.h, package libvulkan-dev) were not found")


def _ember_include() -> Path:
    if os.environ.get("EMBER_INCLUDE"):
        return Path(os.environ["EMBER_INCLUDE"])
    try:
        import ember_core

        return Path(ember_core.get_include())
    except ImportError:
        in_tree = HERE.parent.parent / "ember_core" / "include"
        if (in_tree / "ember.h").is_file():
            return in_tree
    raise SystemExit("ember-vulkan build: cannot find ember.h; install ember first or set EMBER_INCLUDE to "
                     "its directory")


def _catalog():
    spec = importlib.util.spec_from_file_location("_ember_vulkan_catalog", PACKAGE / "catalog.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def compile_shaders() -> None:
    """Every variant to spirv/<name>.spv; skipped when sources and catalog are unchanged."""
    catalog = _catalog()
    sources = sorted([*SHADERS.iterdir(), PACKAGE / "catalog.py"])
    stamp = hashlib.sha256(b"".join(p.read_bytes() for p in sources if p.is_file())).hexdigest()
    stamp_file = SPIRV / "SOURCES.sha256"
    variants = catalog.variants()
    if stamp_file.is_file() and stamp_file.read_text() == stamp and all(
            (SPIRV / f"{v.name}.spv").is_file() for v in variants):
        return
    glslang, spirv_val = _tool("glslangValidator"), _tool("spirv-val")
    with tempfile.TemporaryDirectory() as tmp:
        def build(variant) -> str | None:
            source = Path(tmp) / f"{variant.name}.comp"
            source.write_text(catalog.prelude(variant))
            out = Path(tmp) / f"{variant.name}.spv"
            for cmd in ([glslang, "-V", "--target-env", TARGET_ENV, f"-I{SHADERS}", str(source), "-o", str(out)],
                        [spirv_val, "--target-env", TARGET_ENV, str(out)]):
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode:
                    return f"{variant.name}: {' '.join(cmd[:1])} failed:\n{done.stdout}{done.stderr}"
            return None

        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            errors = [e for e in pool.map(build, variants) if e]
        if errors:
            raise SystemExit("ember-vulkan build: shader compilation failed\n" + "\n".join(errors[:3]))
        SPIRV.mkdir(exist_ok=True)  # replaced only once every variant compiled
        for old in SPIRV.glob("*.spv"):
            old.unlink()
        for variant in variants:
            shutil.move(Path(tmp) / f"{variant.name}.spv", SPIRV / f"{variant.name}.spv")
    stamp_file.write_text(stamp)


def _cdef() -> str:
    """evk.h as cffi's cdef wants it (integer #defines kept, other preprocessor lines dropped),
    plus the ABI defines of ember.h."""
    defines = re.findall(r"^#define\s+(EMBER_ABI_\w+)\s+(\d+)\s*$", (_ember_include() / "ember.h").read_text(), re.M)
    text = re.sub(r"/\*.*?\*/", "", (CSRC / "evk.h").read_text(), flags=re.S)
    lines = [f"#define {name} {value}" for name, value in defines]
    for line in text.splitlines():
        if line.startswith("#") and not re.match(r"#define\s+\w+\s+-?\d+\s*$", line):
            continue
        lines.append(line)
    return "\n".join(lines)


compile_shaders()
ffibuilder = cffi.FFI()
ffibuilder.cdef(_cdef())
ffibuilder.set_source(
    "ember_vulkan._native",
    '#include "ember.h"\n#include "evk.h"\n',
    sources=[str((CSRC / "evk.c").relative_to(HERE))],
    include_dirs=[str(CSRC), str(_ember_include()), *_vulkan_include()],
    libraries=["dl"],
    extra_compile_args=["-O2", "-std=gnu11"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
