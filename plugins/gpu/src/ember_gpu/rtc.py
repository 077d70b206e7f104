"""Run-time compilation of ember_gpu's kernel sources (NVRTC, hipRTC) for a GPU whose architecture no
shipped image serves, or whose driver rejects the shipped code (a driver older than the build's toolkit).

- The compiler library is probed in the order of the vendor table's ``rtc`` (``vendor.RtcVendor``):
  its sonames on the loader path, then its wheel directories in site-packages.  Probing only opens
  the library and reads its version; this process never compiles.
- Compilation runs in a child process (``python -m ember_gpu.rtc``: one JSON request on stdin, one
  JSON answer on stdout), so a compiler that aborts (Debian's hipRTC 5.2 does for gfx940 and
  gfx1100) costs an error message, not the user's process.
- An allow-list: the table's architectures with the oldest compiler version known to build them.
  Any other architecture, or an older compiler, is declined before anything runs, with a message
  saying what is needed ("gfx942 needs ROCm 6 or newer").
- Compiled images are cached on disk for every process and both vendors (``ember_gpu.kernel_cache``);
  the key hashes the source, the headers, the options, the architecture and the compiler's name and
  version.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib
import json
import os
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ember_gpu.errors import DriverError, GpuError
from ember_gpu.kernel_cache import KernelCache, cache_dir
from ember_gpu.vendor import RtcVendor, Vendor

# Every compiler function ember calls, by ember_gpu's name: (result type, parameters).  NVRTC and
# hipRTC declare these identically; "version" is NVRTC's (hipRTC's answers 9.0 in every ROCm).
SIGNATURES: dict[str, tuple[str, str]] = {
    "create": ("int", "void **program, const char *source, const char *name, int header_count, "
                      "const char * const *headers, const char * const *include_names"),
    "compile": ("int", "void *program, int option_count, const char * const *options"),
    "log_size": ("int", "void *program, size_t *bytes"),
    "log": ("int", "void *program, char *log"),
    "code_size": ("int", "void *program, size_t *bytes"),
    "code": ("int", "void *program, char *code"),
    "destroy": ("int", "void **program"),
    "error_string": ("const char *", "int status"),
    "version": ("int", "int *major, int *minor"),
}
CHILD_TIMEOUT_S = 900  # one source, one architecture: seconds on a slow machine, never this long
LIBRARY_FACTORY = "ember_gpu.rtc:LibraryCompiler"
_PROPERTIES_SLACK = 4096  # bytes allocated past a device-properties struct's known size


class RtcError(GpuError, RuntimeError):
    """No kernel image could be compiled for this GPU; the message says why and what to do."""


class CompileError(RtcError):
    """The compiler rejected a source; ``log`` is its output."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message + (f"\n{log.strip()}" if log.strip() else ""))
        self.log = log


class CompilerCrashed(RtcError):
    """The compiler's child process died (abort, segfault) or hung, without an answer."""


def cdef_for(table: RtcVendor) -> str:
    missing = sorted(set(SIGNATURES) - {"version"} - set(table.symbols))
    if missing:
        raise ValueError(f"run-time compiler table {table.product!r} names no symbol for {missing}")
    return _cdef(table.symbols)


def _cdef(symbols: Mapping[str, str]) -> str:
    return "\n".join(f"{result} {symbols[name]}({params});" for name, (result, params) in SIGNATURES.items()
                     if name in symbols)


# ---- the compiler library ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Compiler:
    """A compiler library found on this machine: what the child process opens, and its version."""

    table: RtcVendor
    library: str  # a soname (the loader finds it) or a path in a wheel directory
    version: tuple[int, int]
    factory: str = LIBRARY_FACTORY  # "module:callable" making the child's compiler from the request

    def words(self) -> str:
        return f"{self.table.product} of {self.table.stack} {self.version[0]}.{self.version[1]}"


def candidates(table: RtcVendor, search_path: Iterable[str] | None = None) -> list[str]:
    """What to dlopen, in order: each soname through the loader, then each wheel directory's copy."""
    from ember_gpu.blas import candidates as library_candidates  # (the same search as the BLAS library's)

    return [target for target, _ in library_candidates(table, None if search_path is None else list(search_path))]


def open_library(vendor: Vendor, target: str) -> tuple[int, int]:
    """The version of the compiler library ``target``; OSError when it does not load, AttributeError
    when it lacks the compiler's functions (libamdhip64 of ROCm 6 and newer no longer holds hipRTC)."""
    import cffi

    table = vendor.rtc
    assert table is not None
    ffi = cffi.FFI()
    ffi.cdef(cdef_for(table))
    lib = ffi.dlopen(target)
    for name in ("create", "compile", "code"):
        getattr(lib, table.symbols[name])
    if table.driver_version_symbol:
        return _driver_version(vendor, table.driver_version_symbol)
    major, minor = ffi.new("int *"), ffi.new("int *")
    if getattr(lib, table.symbols["version"])(major, minor):
        raise AttributeError(f"{target}: {table.symbols['version']} failed")
    return major[0], minor[0]


def _driver_version(vendor: Vendor, symbol: str) -> tuple[int, int]:
    """The version the vendor's driver library reports through ``symbol(int *)``, as (major, minor)."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(f"int {symbol}(int *version);")
    for soname in vendor.driver_libraries:
        try:
            lib = ffi.dlopen(soname)
        except OSError:
            continue
        value = ffi.new("int *")
        if getattr(lib, symbol)(value) == 0:
            scale_major, scale_minor = vendor.version_scale
            return value[0] // scale_major, value[0] % scale_major // scale_minor
    raise OSError(f"no {vendor.product} driver library reports its version through {symbol}")


def find_compiler(vendor: Vendor, opener: Callable[[Vendor, str], tuple[int, int]] = open_library,
                  search_path: Iterable[str] | None = None) -> Compiler | None:
    """The first library of the probe order that loads and holds the compiler, else None."""
    table = vendor.rtc
    if table is None:
        return None
    for target in candidates(table, search_path):
        try:
            return Compiler(table, target, opener(vendor, target))
        except (OSError, AttributeError):
            continue
    return None


# ---- the device's architecture and what the shipped images hold --------------------------------------

def device_arch(driver: Any, vendor: Vendor, handle: int) -> str | None:
    """The device's architecture as its compiler names it ("sm_90", "gfx942"); None when the driver
    cannot say (a fake, or a properties function this table does not know)."""
    table = vendor.rtc
    assert table is not None
    ffi = driver.ffi
    if not table.properties:
        value, digits = ffi.new("int *"), []
        for part in ("compute_capability_major", "compute_capability_minor"):
            if driver.fn["device_get_attribute"](value, vendor.attributes[part], handle):
                return None
            digits.append(str(value[0]))
        return "sm_" + "".join(digits)
    for layout in table.properties:
        ffi.cdef(f"int {layout.symbol}(void *properties, int device);", override=True)
        try:
            function = getattr(driver.lib, layout.symbol)
        except AttributeError:
            continue
        # room past the struct: a runtime whose struct grew (or another layout under this name) cannot overrun it
        properties = ffi.new(f"char[{layout.size + _PROPERTIES_SLACK}]")
        if function(properties, handle):
            return None
        name = ffi.string(properties + layout.name_offset).decode(errors="replace")
        return name.split(":")[0] or None  # "gfx90a:sramecc+:xnack-": the features do not change the target
    return None


def image_targets(table: RtcVendor, data: bytes) -> tuple[frozenset[int | str], frozenset[int]]:
    """(binary targets, PTX targets) of a shipped image: a fatbin's SASS and PTX architectures
    (80, 90), an offload bundle's gfx targets (no PTX).  ValueError when the bytes are neither."""
    if table.image_format == "fatbin":
        from ember_gpu.build import fatbin_contents

        contents = fatbin_contents(data)
        return (frozenset(arch for kind, arch in contents if kind == "sass"),
                frozenset(arch for kind, arch in contents if kind == "ptx"))
    if table.image_format == "offload-bundle":
        return frozenset(_bundle_targets(data)), frozenset()
    raise ValueError(f"unknown image format {table.image_format!r}")


_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def _bundle_targets(data: bytes) -> list[str]:
    """The gfx targets of a clang offload bundle (hipcc's code objects): ids "hipv4-amdgcn-amd-amdhsa--gfx90a"."""
    if not data.startswith(_BUNDLE_MAGIC):
        raise ValueError("not a clang offload bundle")
    count, = struct.unpack_from("<Q", data, len(_BUNDLE_MAGIC))
    offset, targets = len(_BUNDLE_MAGIC) + 8, []
    for _ in range(count):
        _, _, length = struct.unpack_from("<QQQ", data, offset)
        ident = data[offset + 24: offset + 24 + length].decode(errors="replace")
        offset += 24 + length
        if "amdgcn" in ident:
            targets.append(ident.rsplit("--", 1)[-1].split(":")[0])
    return targets


def serves(binaries: frozenset[int | str], ptx: frozenset[int], arch: str) -> bool:
    """Whether an image with these targets runs on ``arch``: the same gfx target; SASS of the same
    major and a minor not above the GPU's (sm_80 code runs on sm_86); or PTX not above it (JIT)."""
    if not arch.startswith("sm_"):
        return arch in binaries
    capability = int(arch[3:])
    return any(isinstance(target, int) and target // 10 == capability // 10 and target <= capability
               for target in binaries) or any(target <= capability for target in ptx)


# ---- the kernel sources ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _generated() -> Mapping[str, Any]:
    from ember_gpu import codegen

    return codegen.generate()


def kernel_source(image: str) -> tuple[str, dict[str, str]]:
    """The source of one image as the compiler gets it (prelude included first, as the build's
    ``-include`` does) and every header of csrc/ by name (run-time compilers have no include path)."""
    from ember_gpu.build import CSRC

    headers = {path.name: path.read_text() for path in sorted(CSRC.glob("*.h"))}
    return '#include "prelude.h"\n' + _generated()[image].text, headers


# ---- the cache key ---------------------------------------------------------------------------------

def cache_key(compiler: Compiler, arch: str, options: Iterable[str], source: str, headers: Mapping[str, str]) -> str:
    parts = [compiler.table.product, list(compiler.version), arch, list(options), source, sorted(headers.items())]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


# ---- the child process -------------------------------------------------------------------------------

def compile_in_child(compiler: Compiler, name: str, source: str, headers: Mapping[str, str],
                     options: list[str], timeout: float = CHILD_TIMEOUT_S) -> bytes:
    """Compile one source in a fresh interpreter; CompileError with the log, CompilerCrashed when
    the child dies or hangs without answering."""
    request = {"factory": compiler.factory, "library": compiler.library, "product": compiler.table.product,
               "symbols": dict(compiler.table.symbols), "name": name, "source": source, "headers": dict(headers),
               "options": options}
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(entry for entry in sys.path if entry)}
    what = f"{compiler.words()} ({compiler.library}) compiling {name} with {' '.join(options)}"
    try:
        done = subprocess.run([sys.executable, "-m", "ember_gpu.rtc"], input=json.dumps(request), capture_output=True,
                              text=True, timeout=timeout, env=environment, check=False)
    except subprocess.TimeoutExpired:
        raise CompilerCrashed(f"{what} did not finish within {timeout:.0f} s") from None
    try:
        answer = json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        died = (f"was killed by {_signal_name(-done.returncode)}" if done.returncode < 0
                else f"exited with status {done.returncode}")
        tail = done.stderr.strip()[-2000:]
        raise CompilerCrashed(f"{what}: the compiler's process {died} without an answer (the compiler crashed; "
                              f"this process is unaffected){': ' + tail if tail else ''}")
    if "error" in answer:
        raise CompileError(f"{what} failed: {answer['error']}", answer.get("log", ""))
    return base64.b64decode(answer["code"])


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class LibraryCompiler:
    """The child's compiler: the vendor's library through cffi in ABI mode, from the request's symbols."""

    def __init__(self, request: Mapping[str, Any]) -> None:
        import cffi

        self.product = request["product"]
        self.symbols = request["symbols"]
        self.ffi = cffi.FFI()
        self.ffi.cdef(_cdef(self.symbols))
        self.lib = self.ffi.dlopen(request["library"])

    def _fn(self, name: str) -> Any:
        return getattr(self.lib, self.symbols[name])

    def _check(self, name: str, *args: Any) -> None:
        status = self._fn(name)(*args)
        if status:
            raise CompileError(f"{self.symbols[name]} failed: {self._describe(status)}")

    def _describe(self, status: int) -> str:
        text = self._fn("error_string")(status)
        return (self.ffi.string(text).decode(errors="replace") if text else "an unknown error") + f" ({status})"

    def compile(self, name: str, source: str, headers: Mapping[str, str], options: list[str]) -> bytes:
        ffi = self.ffi
        texts = [ffi.new("char[]", text.encode()) for text in headers.values()]
        names = [ffi.new("char[]", header.encode()) for header in headers]
        flags = [ffi.new("char[]", option.encode()) for option in options]
        program = ffi.new("void **")
        self._check("create", program, source.encode(), name.encode(), len(texts), ffi.new("char *[]", texts),
                    ffi.new("char *[]", names))
        try:
            status = self._fn("compile")(program[0], len(flags), ffi.new("char *[]", flags))
            if status:
                raise CompileError(self._describe(status), self._log(program[0]))
            size = ffi.new("size_t *")
            self._check("code_size", program[0], size)
            code = ffi.new("char[]", size[0])
            self._check("code", program[0], code)
            return bytes(ffi.buffer(code, size[0]))
        finally:
            self._fn("destroy")(program)

    def _log(self, program: Any) -> str:
        size = self.ffi.new("size_t *")
        if self._fn("log_size")(program, size) or size[0] == 0:
            return ""
        text = self.ffi.new("char[]", size[0])
        return "" if self._fn("log")(program, text) else self.ffi.string(text).decode(errors="replace")


def main() -> int:
    """The child: a request on stdin, an answer on stdout ({"code": base64} or {"error", "log"}).  The
    compiler's own prints go to stderr, so they cannot corrupt the answer."""
    answer_stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    request = json.load(sys.stdin)
    module, _, attribute = request["factory"].partition(":")
    compiler = getattr(importlib.import_module(module), attribute)(request)
    try:
        code = compiler.compile(request["name"], request["source"], request["headers"], request["options"])
    except CompileError as exc:
        answer = {"error": str(exc).split("\n", 1)[0], "log": exc.log}
    else:
        answer = {"code": base64.b64encode(code).decode()}
    json.dump(answer, answer_stream)
    answer_stream.flush()
    return 0


# ---- what the runtime uses ---------------------------------------------------------------------------

class Compilation:
    """One runtime's run-time compilation: the compiler (probed once), the shipped images' targets,
    the disk cache; nothing happens until a device needs it."""

    def __init__(self, vendor: Vendor, package: str, finder: Callable[[Vendor], Compiler | None] = find_compiler,
                 cache: KernelCache | None = None) -> None:
        self.vendor = vendor
        self.package = package
        self.table = vendor.rtc
        self._finder = finder
        self._cache = cache
        self._lock = threading.Lock()
        self._compiler: list[Compiler | None] = []  # [] until probed
        self._shipped: tuple[frozenset[int | str], frozenset[int]] | None = None

    @property
    def cache(self) -> KernelCache:
        if self._cache is None:
            self._cache = KernelCache(cache_dir())
        return self._cache

    def compiler(self) -> Compiler | None:
        with self._lock:
            if not self._compiler:
                self._compiler.append(self._finder(self.vendor))
            return self._compiler[0]

    def shipped(self) -> tuple[frozenset[int | str], frozenset[int]] | None:
        """The targets of the shipped images (one image tells: the build compiles all alike); None when
        there is none to read or it cannot be parsed (the loader will then say what is wrong)."""
        if self._shipped is None and self.table is not None:
            from ember_gpu.build import read_index
            from ember_gpu.ops import package_kernels

            directory = package_kernels(self.package)
            files = sorted(set(read_index(directory).values()))
            try:
                self._shipped = image_targets(self.table, (directory / files[0]).read_bytes()) if files else None
            except (OSError, ValueError, struct.error):
                self._shipped = None
        return self._shipped

    def shipped_words(self) -> str:
        binaries, ptx = self.shipped() or (frozenset(), frozenset())
        names = [f"sm_{t}" if isinstance(t, int) else t for t in sorted(binaries, key=str)]
        return ", ".join(names + [f"compute_{t} PTX" for t in sorted(ptx)]) or "none"

    def refusal(self, arch: str) -> str | None:
        """Why no image can be compiled for ``arch`` here, in words a user acts on; None when one can."""
        table = self.table
        if table is None:
            return f"{self.vendor.package} has no run-time compiler"
        compiler = self.compiler()
        if compiler is None:
            wheels = f" nor in site-packages/{' or '.join(table.wheel_dirs)}" if table.wheel_dirs else ""
            return (f"no {table.product} is installed ({', '.join(table.libraries)}: not on the "
                    f"loader path{wheels}): {table.install_hint}")
        need = table.archs.get(arch)
        if need is None:
            return (f"{arch} is not among the architectures {table.product} is known to build ember's kernels for "
                    f"({', '.join(table.archs)})")
        if compiler.version < need:
            version = ".".join(map(str, compiler.version))
            return (f"{arch} needs {table.stack} {need[0] if need[1] == 0 else '.'.join(map(str, need))} or newer "
                    f"(the installed {table.product} is {table.stack} {version}'s): {table.install_hint}")
        return None

    def decline_reason(self, driver: Any, handle: int) -> str | None:
        """Why this device cannot run ember's kernels: no shipped image serves its architecture and
        none can be compiled for it (the reason names both fixes); None when one serves or can be built."""
        if self.table is None:
            return None
        arch = device_arch(driver, self.vendor, handle)
        shipped = self.shipped()
        if arch is None or shipped is None or serves(*shipped, arch):
            return None
        why = self.refusal(arch)
        if why is None:
            return None
        return (f"{self.vendor.package}'s shipped kernels cover {self.shipped_words()}, not {arch}, and none can be "
                f"compiled for it: {why}; or install {self.vendor.package} built for {arch}")

    def image_instead(self, failure: DriverError, device: Any, image: str) -> bytes:
        """An image compiled for ``device`` when loading the shipped one failed with a status meaning
        "no code this GPU and driver can run"; else ``failure`` again, with why none can be compiled."""
        table = self.table
        if table is None or failure.status not in table.fallback_statuses:
            raise failure
        arch = device_arch(device.driver, self.vendor, device.handle)
        why = (f"{self.vendor.package} could not read {device}'s architecture to compile for it" if arch is None
               else self.refusal(arch))
        if why is not None:
            raise type(failure)(f"{failure}; {why}", failure.status, failure.function) from None
        return self.compile(image, arch)

    def compile(self, image: str, arch: str) -> bytes:
        """The image compiled for ``arch``: from the cache, else in a child process (then cached)."""
        compiler = self.compiler()
        assert compiler is not None and self.table is not None
        source, headers = kernel_source(image)
        options = [*self.table.options, self.table.arch_option.format(arch=arch)]
        key = cache_key(compiler, arch, options, source, headers)
        found = self.cache.get(key)
        if found is None:
            found = compile_in_child(compiler, f"{image}.cu", source, headers, options)
            self.cache.put(key, found)
        return found


if __name__ == "__main__":
    from ember_gpu import rtc  # the module, not this __main__ copy: CompileError must be the one compilers raise

    sys.exit(rtc.main())
