"""Compiles ember_gpu's kernel sources: into GPU images for a vendor plugin, or into host libraries
for CI.

``build_images(out_dir)`` is what ember-cuda's setup.py calls: it generates the kernel sources from
the op table (``ember_gpu.codegen``), compiles each with the vendor's compiler into one image
(nvcc: a fatbin holding SASS for sm_80 and sm_90 and compute_90 PTX, which the driver JIT-compiles
on newer GPUs), in parallel over sources, and writes ``kernels.json`` beside the images: for each
image its file, the kernels it holds and the content key it was built from.  An image whose key
(the source text, every header in csrc/, the compiler's command line and version) is unchanged is
not rebuilt.  A missing compiler raises SystemExit saying how to install one: a vendor plugin
cannot be built without it (ember-gpu itself, pure Python plus sources, installs without one).

``build_host_libraries(out_dir)`` compiles the same sources with a host C++ compiler in host mode
(``-DEG_HOST``, csrc/eg_host.h): one shared library per source, whose ``<kernel>_host(args, grid,
block)`` runs the kernel over an emulated grid: how CI runs kernel code without a GPU.

Every kernel is compiled with ``-include csrc/prelude.h`` (the sources include nothing) and
without floating-point contraction (nvcc ``-fmad=false``, g++ ``-ffp-contract=off``): kernels round
each operation as ember-cpu and numpy do, which the random ops' contract requires and agreement
with ember-cpu needs; elementwise kernels are bound by memory bandwidth, not by the fused
multiply-adds given up.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

CSRC = Path(__file__).resolve().parent / "csrc"
PRELUDE = CSRC / "prelude.h"
INDEX = "kernels.json"
INDEX_FORMAT = 1

NVCC_ARCHS = ("sm_80", "sm_90")  # SASS shipped: the A100 and H100 / H200 generations
NVCC_PTX_ARCH = "compute_90"  # PTX shipped: JIT-compiled by the driver on GPUs newer than sm_90
NVCC_FLAGS = ("-std=c++17", "-fmad=false", "-Xptxas=-warn-spills")
HIPCC_ARCHS = ("gfx908", "gfx90a", "gfx940", "gfx1030")  # MI100, MI200, MI300 (early), RDNA2: what hipcc 5.2 builds
HIPCC_FLAGS = ("-std=c++17", "-O3", "-ffp-contract=off", "--genco", "-include", "hip/hip_runtime.h")
HOST_FLAGS = ("-std=c++17", "-O1", "-fPIC", "-shared", "-DEG_HOST", "-ffp-contract=off", "-fno-math-errno",
              "-Wall", "-Wno-unknown-pragmas")

NVCC_MISSING = """\
ember-cuda's build compiles ember-gpu's kernels with nvcc from the CUDA 13 toolkit, and found none
(looked at $EMBER_NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin and the nvidia-cuda-nvcc wheel).
Install one of:
  - the CUDA 13 toolkit (NVIDIA's installer, or your distribution's cuda-nvcc-13-0 package), then
    put its bin/ on PATH or set EMBER_NVCC=/path/to/bin/nvcc;
  - NVIDIA's wheels, found without further setup:
    pip install "nvidia-cuda-nvcc>=13,<14" "nvidia-nvvm>=13,<14" "nvidia-cuda-crt>=13,<14" "nvidia-cuda-runtime>=13,<14"
and build again."""


HIPCC_MISSING = """\
ember-rocm's build compiles ember-gpu's kernels with hipcc into code-object bundles, and found none
(looked at $EMBER_HIPCC, PATH and /opt/rocm/bin).  Install it:
  - Debian 12 / Ubuntu 24.04: apt-get install hipcc libamdhip64-dev rocm-device-libs
  - or AMD's ROCm (https://rocm.docs.amd.com), then put /opt/rocm/bin on PATH or set EMBER_HIPCC
and build again."""


def find_hipcc() -> str:
    """hipcc's path: $EMBER_HIPCC, then PATH, /opt/rocm/bin; SystemExit with install instructions."""
    explicit = os.environ.get("EMBER_HIPCC")
    for path in ([explicit] if explicit else [shutil.which("hipcc"), "/opt/rocm/bin/hipcc"]):
        if path and os.access(path, os.X_OK):
            return path
    raise SystemExit(f"EMBER_HIPCC={explicit} is not an executable file.\n{HIPCC_MISSING}" if explicit
                     else HIPCC_MISSING)


def find_nvcc() -> str:
    """nvcc's path: $EMBER_NVCC, then PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, the
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


@dataclass(frozen=True)
class Toolchain:
    """How one compiler turns a kernel source into one output file."""

    suffix: str  # of the outputs: ".fatbin", ".so"
    command: Callable[[Path, Path], list[str]]  # (source, output) -> argv
    identity: str  # the compiler's version and options: part of every content key
    environment: Mapping[str, str] | None = None  # the compiler's environment (None: this process's)


def nvcc_toolchain(archs: Sequence[str] = NVCC_ARCHS, ptx_arch: str | None = NVCC_PTX_ARCH) -> Toolchain:
    nvcc = find_nvcc()
    gencode = [f"-gencode=arch=compute_{a.removeprefix('sm_')},code={a}" for a in archs]
    if ptx_arch:
        gencode.append(f"-gencode=arch={ptx_arch},code={ptx_arch}")

    def command(source: Path, output: Path) -> list[str]:
        return [nvcc, "-fatbin", *NVCC_FLAGS, *gencode, "-include", str(PRELUDE), "-x", "cu", str(source),
                "-o", str(output)]

    return Toolchain(".fatbin", command, "\0".join([_version(nvcc), *NVCC_FLAGS, *gencode]))


def hipcc_toolchain(archs: Sequence[str] = HIPCC_ARCHS) -> Toolchain:
    """hipcc for AMD GPUs (HIP_PLATFORM=amd: hipcc picks NVIDIA when nvcc is on PATH): one
    clang-offload bundle per source holding a code object per architecture."""
    hipcc = find_hipcc()
    offload = [f"--offload-arch={arch}" for arch in archs]
    environment = {**os.environ, "HIP_PLATFORM": "amd"}

    def command(source: Path, output: Path) -> list[str]:
        return [hipcc, *HIPCC_FLAGS, *offload, "-include", str(PRELUDE), "-x", "hip", str(source), "-o", str(output)]

    return Toolchain(".co", command, "\0".join([_version(hipcc, environment), *HIPCC_FLAGS, *offload]),
                     environment)


def host_toolchain(compiler: str = "g++") -> Toolchain:
    path = shutil.which(compiler)
    if path is None:
        raise SystemExit(f"ember_gpu.build: no host C++ compiler {compiler!r} on PATH (install g++)")

    def command(source: Path, output: Path) -> list[str]:
        return [path, *HOST_FLAGS, "-include", str(PRELUDE), "-x", "c++", str(source), "-o", str(output)]

    return Toolchain(".so", command, "\0".join([_version(path), *HOST_FLAGS]))


def _version(compiler: str, environment: Mapping[str, str] | None = None) -> str:
    done = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False, env=environment)
    return done.stdout.strip()


def _headers_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(CSRC.glob("*.h")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _plan(toolchain: Toolchain, out: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """The index entries of every source, and the sources (image -> text) that need compiling."""
    from ember_gpu import codegen

    common = toolchain.identity + "\0" + _headers_digest()
    previous = _read_index(out)
    entries: dict[str, dict] = {}
    stale: dict[str, str] = {}
    for stem, source in codegen.generate().items():
        key = hashlib.sha256((common + "\0" + source.text).encode()).hexdigest()
        entries[stem] = {"file": stem + toolchain.suffix, "key": key, "kernels": source.kernels}
        old = previous.get(stem)
        if not (old and old.get("key") == key and (out / entries[stem]["file"]).exists()):
            stale[stem] = source.text
    return entries, stale


def _build(toolchain: Toolchain, out_dir: str | os.PathLike[str], jobs: int | None) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    entries, stale = _plan(toolchain, out)
    for stem, old in _read_index(out).items():  # outputs of sources that no longer exist
        if stem not in entries:
            (out / old["file"]).unlink(missing_ok=True)
    if stale:
        with tempfile.TemporaryDirectory(prefix="ember-gpu-build-") as tmp:

            def compile_one(stem: str) -> None:
                source = Path(tmp) / f"{stem}.cu"
                source.write_text(stale[stem])
                partial = out / f".{stem}{toolchain.suffix}.partial"
                done = subprocess.run(toolchain.command(source, partial), capture_output=True, text=True, check=False,
                                      env=toolchain.environment)
                if done.returncode:
                    partial.unlink(missing_ok=True)
                    raise SystemExit(f"ember_gpu.build: compiling {stem}.cu failed:\n{done.stderr[-8000:]}")
                os.replace(partial, out / entries[stem]["file"])

            # the longest sources first, so that the last compiler to finish is a short one
            order = sorted(stale, key=lambda stem: -len(stale[stem]))
            with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
                list(pool.map(compile_one, order))
    index = {"format": INDEX_FORMAT, "images": entries}
    (out / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return {stem: out / entry["file"] for stem, entry in entries.items()}


def build_images(out_dir: str | os.PathLike[str], vendor_compiler: str = "nvcc",
                 archs: Sequence[str] | None = None, ptx_arch: str | None = NVCC_PTX_ARCH,
                 jobs: int | None = None) -> list[Path]:
    """Generate the kernel sources and compile each into ``out_dir/<image>.fatbin`` (hipcc:
    ``.co``); returns the image paths (built now or already up to date) and writes
    ``out_dir/kernels.json``.

    ``archs``: the SASS (nvcc) or gfx (hipcc) targets; ``ptx_arch``: nvcc's PTX target (None: no
    PTX); ``jobs``: parallel compiler processes (default: the CPU count).  Raises SystemExit when
    the compiler is missing (with how to install it) or a source fails to compile (with the
    compiler's output)."""
    return list(_build(vendor_toolchain(vendor_compiler, archs, ptx_arch), out_dir, jobs).values())


def build_vendor_package(kernels_dir: str | os.PathLike[str], device_type: str, vendor_compiler: str,
                         archs: Sequence[str] | None = None) -> None:
    """A vendor package's whole build step: its images, the manifest of the ops they serve
    (``ember_gpu.ops.write_manifest``) and ``build.json`` (the ember ABI of the core's ember.h and
    ember-gpu's kernel ABI, which ``ember_plugin_info`` checks)."""
    import ember_core
    from ember_gpu import abi
    from ember_gpu.ops import write_manifest

    build_images(kernels_dir, vendor_compiler=vendor_compiler, archs=archs)
    write_manifest(kernels_dir, device_type)
    header = (Path(ember_core.get_include()) / "ember.h").read_text()
    ember_abi = [int(re.search(rf"#define EMBER_ABI_{part}\s+(\d+)", header).group(1)) for part in ("MAJOR", "MINOR")]
    info = {"ember_abi": ember_abi, "kernel_abi": abi.ABI_VERSION}
    (Path(kernels_dir) / "build.json").write_text(json.dumps(info, indent=1) + "\n")


def vendor_toolchain(vendor_compiler: str, archs: Sequence[str] | None = None,
                     ptx_arch: str | None = NVCC_PTX_ARCH) -> Toolchain:
    """nvcc (archs: SASS targets, default NVCC_ARCHS) or hipcc (archs: gfx targets, default HIPCC_ARCHS)."""
    if vendor_compiler == "nvcc":
        return nvcc_toolchain(archs or NVCC_ARCHS, ptx_arch)
    if vendor_compiler == "hipcc":
        return hipcc_toolchain(archs or HIPCC_ARCHS)
    raise SystemExit(f"ember_gpu.build: no recipe for {vendor_compiler!r} (nvcc or hipcc)")


def images_up_to_date(image_dir: str | os.PathLike[str], archs: Sequence[str] = NVCC_ARCHS,
                      ptx_arch: str | None = NVCC_PTX_ARCH) -> bool:
    """Whether ``build_images`` would rebuild nothing in image_dir (needs nvcc, for its version)."""
    entries, stale = _plan(nvcc_toolchain(archs, ptx_arch), Path(image_dir))
    return not stale and set(_read_index(Path(image_dir))) == set(entries)


def build_host_libraries(out_dir: str | os.PathLike[str], compiler: str = "g++",
                         jobs: int | None = None) -> dict[str, Path]:
    """Compile every kernel source in host mode into ``out_dir/<image>.so``; image -> library.
    Each kernel K of a library exports ``void K_host(const Args *, unsigned grid, unsigned block)``."""
    return _build(host_toolchain(compiler), out_dir, jobs)


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


# ---- what a fatbin holds ------------------------------------------------------------------------------

FATBIN_MAGIC = 0xBA55ED50
FATBIN_PTX, FATBIN_ELF = 1, 2


def fatbin_contents(data: bytes) -> dict[tuple[str, int], set[str] | None]:
    """The entries of a fatbin: ("sass", 80) -> the kernels (global functions) of its sm_80 cubin,
    ("ptx", 90) -> None (PTX is stored compressed).  Raises ValueError on anything else."""
    magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, 0)
    if magic != FATBIN_MAGIC or header_size + fat_size > len(data):
        raise ValueError("not a fatbin")
    contents: dict[tuple[str, int], set[str] | None] = {}
    offset = header_size
    while offset < header_size + fat_size:
        kind, _, entry_header, size = struct.unpack_from("<HHIQ", data, offset)
        arch = struct.unpack_from("<I", data, offset + 28)[0]
        payload = data[offset + entry_header: offset + entry_header + size]
        if kind == FATBIN_ELF:
            contents["sass", arch] = _elf_functions(payload)
        elif kind == FATBIN_PTX:
            contents["ptx", arch] = None
        else:
            raise ValueError(f"fatbin entry of unknown kind {kind}")
        offset += entry_header + size
    return contents


def _elf_functions(elf: bytes) -> set[str]:
    """Names of the global function symbols of a 64-bit little-endian ELF (a cubin: its kernels)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("a fatbin's cubin is not a 64-bit little-endian ELF")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strings = sections[link]
        for at in range(offset, offset + size, entsize):
            st_name, st_info = struct.unpack_from("<IB", elf, at)
            if st_info == 0x12:  # STB_GLOBAL, STT_FUNC
                start = strings[4] + st_name
                names.add(elf[start: elf.index(b"\0", start)].decode())
    return names
