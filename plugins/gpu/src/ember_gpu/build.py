"""Compiles ember_gpu's kernel sources into one GPU image per source, for a vendor plugin's build.

``build_images(out_dir)`` is what ember-cuda's setup.py calls: it generates the kernel sources from
the op table (``ember_gpu.codegen``), compiles each with the vendor's compiler into one image
(nvcc: a fatbin holding SASS for sm_80 and sm_90 and compute_90 PTX, so a newer GPU JIT-compiles the
PTX), in parallel over sources, and writes ``kernels.json`` beside the images: for each image its
file, the kernels it holds and the content key it was built from.  An image whose key (the source
text, every header in csrc/, the compiler's command line and version) is unchanged is not rebuilt.

A missing compiler raises SystemExit saying how to install one: a vendor plugin cannot be built
without it (ember-gpu itself, pure Python plus sources, installs without one).

Every kernel is compiled with ``-include csrc/prelude.h`` (the sources include nothing) and without
floating-point contraction (``-fmad=false``): kernels round each operation as ember-cpu and numpy
do, which the random ops' contract requires and the elementwise ops' agreement with ember-cpu
needs; elementwise kernels are bound by memory bandwidth, not by the fused multiply-adds lost.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CSRC = Path(__file__).resolve().parent / "csrc"
PRELUDE = CSRC / "prelude.h"
INDEX = "kernels.json"
INDEX_FORMAT = 1

NVCC_ARCHS = ("sm_80", "sm_90")  # SASS shipped: A100 and H100 / H200 generations
NVCC_PTX_ARCH = "compute_90"  # PTX shipped: JIT-compiled by the driver on GPUs newer than sm_90
NVCC_FLAGS = ("-O3", "-std=c++17", "-fmad=false", "-Xptxas=-warn-spills")

NVCC_MISSING = """\
ember-cuda's build compiles ember-gpu's kernels with nvcc from the CUDA 13 toolkit, and found none
(looked at $EMBER_NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin).  Install one of:
  - the CUDA 13 toolkit from NVIDIA (or your distribution's cuda-nvcc-13-0 package);
  - the pip wheel:  pip install "nvidia-cuda-nvcc>=13,<14"
then put nvcc on PATH or set EMBER_NVCC=/path/to/bin/nvcc, and build again."""


def find_nvcc() -> str:
    """nvcc's path: $EMBER_NVCC, then PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, then the
    nvidia-cuda-nvcc wheel's; SystemExit with install instructions when there is none."""
    explicit = os.environ.get("EMBER_NVCC")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise SystemExit(f"EMBER_NVCC={explicit} is not an executable file.\n{NVCC_MISSING}")
        return explicit
    candidates = [shutil.which("nvcc")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(str(Path(home) / "bin" / "nvcc"))
    candidates.append(_wheel_nvcc())
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    raise SystemExit(NVCC_MISSING)


def _wheel_nvcc() -> str | None:
    """nvcc inside the nvidia-cuda-nvcc wheel (site-packages/nvidia/cu13/bin), if installed."""
    try:
        import nvidia  # the namespace package of NVIDIA's wheels
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        path = Path(root) / "cu13" / "bin" / "nvcc"
        if path.exists():
            return str(path)
    return None


def nvcc_command(nvcc: str, source: Path, image: Path, archs: Sequence[str] = NVCC_ARCHS,
                 ptx_arch: str | None = NVCC_PTX_ARCH) -> list[str]:
    """The command compiling one source into one fatbin."""
    gencode = [f"-gencode=arch=compute_{a.removeprefix('sm_')},code={a}" for a in archs]
    if ptx_arch:
        gencode.append(f"-gencode=arch={ptx_arch},code={ptx_arch}")
    return [nvcc, "-fatbin", *NVCC_FLAGS, *gencode, "-include", str(PRELUDE), "-I", str(CSRC),
            "-x", "cu", str(source), "-o", str(image)]


def _compiler_version(nvcc: str) -> str:
    done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def _headers_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(CSRC.glob("*.h")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def build_images(out_dir: str | os.PathLike[str], vendor_compiler: str = "nvcc",
                 archs: Sequence[str] = NVCC_ARCHS, ptx_arch: str | None = NVCC_PTX_ARCH,
                 jobs: int | None = None) -> list[Path]:
    """Generate the kernel sources and compile each into ``out_dir/<image>.fatbin``; returns the
    image paths (built now or already up to date) and writes ``out_dir/kernels.json``.

    ``archs``: the SASS targets; ``ptx_arch``: the PTX target (None: no PTX); ``jobs``: parallel
    compiler processes (default: the CPU count).  Raises SystemExit when the compiler is missing
    (with how to install it) or a source fails to compile (with the compiler's output)."""
    if vendor_compiler != "nvcc":
        raise SystemExit(f"ember_gpu.build: no recipe for {vendor_compiler!r} yet (only nvcc); "
                         f"see ember_gpu/csrc/README.md for what the ROCm build adds")
    from ember_gpu import codegen

    nvcc = find_nvcc()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sources = codegen.generate()
    previous = _read_index(out)
    common = [_compiler_version(nvcc), _headers_digest(), *NVCC_FLAGS, *archs, str(ptx_arch)]
    entries: dict[str, dict] = {}
    stale: list[tuple[str, str]] = []
    for stem, source in sources.items():
        key = hashlib.sha256("\0".join([*common, source.text]).encode()).hexdigest()
        entries[stem] = {"file": stem + ".fatbin", "key": key, "kernels": source.kernels}
        old = previous.get(stem)
        if not (old and old.get("key") == key and (out / entries[stem]["file"]).exists()):
            stale.append((stem, source.text))
    for stem, old in previous.items():  # images of sources that no longer exist
        if stem not in entries:
            (out / old["file"]).unlink(missing_ok=True)
    if stale:
        with tempfile.TemporaryDirectory(prefix="ember-gpu-build-") as tmp:
            def compile_one(item: tuple[str, str]) -> None:
                stem, text = item
                source = Path(tmp) / f"{stem}.cu"
                source.write_text(text)
                partial = out / f".{stem}.fatbin.partial"
                done = subprocess.run(nvcc_command(nvcc, source, partial, archs, ptx_arch),
                                      capture_output=True, text=True, check=False)
                if done.returncode:
                    partial.unlink(missing_ok=True)
                    raise SystemExit(f"ember_gpu.build: nvcc failed on {stem}.cu:\n{done.stderr[-8000:]}")
                os.replace(partial, out / entries[stem]["file"])

            with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
                list(pool.map(compile_one, stale))
    index = {"format": INDEX_FORMAT, "images": entries}
    (out / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return [out / entry["file"] for entry in entries.values()]


def _read_index(out: Path) -> dict[str, dict]:
    try:
        index = json.loads((out / INDEX).read_text())
    except (OSError, ValueError):
        return {}
    return index.get("images", {}) if index.get("format") == INDEX_FORMAT else {}


def read_index(image_dir: str | os.PathLike[str]) -> dict[str, str]:
    """kernel name -> image file name, from the ``kernels.json`` a build wrote into image_dir:
    what a runtime needs to find the image holding a kernel."""
    return {kernel: entry["file"] for entry in _read_index(Path(image_dir)).values() for kernel in entry["kernels"]}
