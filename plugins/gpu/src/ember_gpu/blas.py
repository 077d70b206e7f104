"""Float matmul through the vendor's BLAS (cuBLAS; hipBLAS or rocBLAS with the same code and other
tables), or through ember's own tiled GEMM kernel (csrc/eg_gemm.h) where none loads or when asked.

The library is found at run time, never at import: the vendor's tables in order (ember-rocm: hipBLAS,
then rocBLAS), each its versioned sonames on the loader path first (a system toolkit), then in the
vendor wheel's directory of every ``sys.path`` entry (site-packages); the vendor packages do not
depend on the wheels, which are hundreds of MB.  The binding is cffi in ABI mode from one neutral
cdef per calling convention (device pointers as ``uint64_t``, as in ``driver.py``), every call
checked and its status named.

Which GEMM serves: ``EMBER_GPU_GEMM`` (read at import; ``set_gemm`` at run time) is ``auto`` (the
default: the vendor's BLAS, else ember's own kernel), ``own`` (ember's kernel even where the BLAS
loads: how it is measured against cuBLAS) or ``vendor`` (the BLAS or an error).  ``Blas.describe``
says which serves, in words; the GPU plugin reports it as the device property ``"gemm"``, which
``ember doctor`` prints.  The own kernel computes float32 in float32 whatever the TF32 switch says.

A GEMM may carry an epilogue (``Epilogue``: + bias, then relu; linear's and conv2d's).  The own kernel
applies it in its store, no pass of its own.  On the library the bias is folded into the store too:
out is first filled with the broadcast bias (one write-only pass) and the GEMM accumulates onto it
(beta = 1), so bias and product are added in the compute type and rounded once; relu, when asked, is
the one pass left.  Which of the two ran is ``Blas.matmul``'s choice alone.

One library handle per device and thread (a handle must not be used by two threads at once),
created lazily in the device's context and bound to the device's one stream, so a GEMM is ordered
with every other op of the device.  The handles of a device share one workspace that ember
allocates (they all run on that stream, so their kernels never overlap): with a workspace of its
own the library allocates nothing while a stream is captured into a graph.

TF32 is off by default, as in PyTorch: float32 products are computed in float32.  ``set_tf32(True)``
(or ``EMBER_ALLOW_TF32=1`` in the environment, read at import) lets float32 GEMMs round their inputs
to TF32 on tensor cores; ``tf32_enabled()`` says which is in force and the GPU plugin reports it in
its device properties (so conformance reports state it).
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi

from ember_core.errors import ConfigError, KernelError, UnsupportedOpError
from ember_core.tensor import span
from ember_core.views import coalesce
from ember_gpu import abi, gen_gemm
from ember_gpu.errors import DriverError, GpuError, GpuOutOfMemoryError
from ember_gpu.launch import Kernel
from ember_gpu.vendor import BlasVendor, Vendor

# Every BLAS function ember calls, by ember_gpu's name: (result type, parameters in neutral C types).
# Sizes and leading dimensions are int64 (cuBLAS's 64-bit GEMM; GEMM_SIGNATURES for the others),
# device pointers uint64_t, handles and streams void *, enums int; alpha and beta are host pointers to
# the compute type's scalars.
SIGNATURES: dict[str, tuple[str, str]] = {
    "create": ("int", "void **handle"),
    "destroy": ("int", "void *handle"),
    "set_stream": ("int", "void *handle, void *stream"),
    "set_math_mode": ("int", "void *handle, int mode"),
    "set_workspace": ("int", "void *handle, uint64_t workspace, size_t bytes"),
    "gemm_strided_batched": ("int", "void *handle, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, "
                                    "const void *alpha, uint64_t a, int a_type, int64_t lda, long long stride_a, "
                                    "uint64_t b, int b_type, int64_t ldb, long long stride_b, const void *beta, "
                                    "uint64_t c, int c_type, int64_t ldc, long long stride_c, int64_t batch_count, "
                                    "int compute_type, int algo"),
    "status_string": ("const char *", "int status"),
}
OPTIONAL = frozenset({"set_math_mode", "set_workspace"})  # a library without them keeps its own defaults

# The strided-batched GEMM per calling convention (BlasVendor.api).
GEMM_SIGNATURES: dict[str, str] = {
    # cuBLAS's ILP64 cublasGemmStridedBatchedEx_64
    "cublas_64": SIGNATURES["gemm_strided_batched"][1],
    # hipblasGemmStridedBatchedEx with hipblasDatatype_t enums (libhipblas.so.0 to .so.2): int sizes
    "hipblas": "void *handle, int trans_a, int trans_b, int m, int n, int k, const void *alpha, uint64_t a, "
               "int a_type, int lda, long long stride_a, uint64_t b, int b_type, int ldb, long long stride_b, "
               "const void *beta, uint64_t c, int c_type, int ldc, long long stride_c, int batch_count, "
               "int compute_type, int algo",
    # rocblas_gemm_strided_batched_ex: int sizes, c read and d written (both ember's out), then a solution
    # index (0: the library's choice) and flags (0)
    "rocblas": "void *handle, int trans_a, int trans_b, int m, int n, int k, const void *alpha, uint64_t a, "
               "int a_type, int lda, long long stride_a, uint64_t b, int b_type, int ldb, long long stride_b, "
               "const void *beta, uint64_t c, int c_type, int ldc, long long stride_c, uint64_t d, int d_type, "
               "int ldd, long long stride_d, int batch_count, int compute_type, int algo, int solution_index, "
               "unsigned int flags",
}
_INT32_MAX = 2**31 - 1  # the largest size or leading dimension of the int-sized GEMMs

# What each dtype computes in, and its alpha/beta as the compute type's C scalars (a complex one is
# two of them).  Half-precision products accumulate in float32, as PyTorch's do.
_COMPUTE = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "complex64": "float32",
            "float64": "float64", "complex128": "float64"}
_SCALAR = {"float32": "float[{}]", "float64": "double[{}]"}
DTYPES = tuple(_COMPUTE)  # what matmul serves: every real and complex floating dtype


class BlasUnavailableError(UnsupportedOpError):
    """The vendor's BLAS library is not installed: float matmul cannot run on this device."""


# ---- the TF32 switch ---------------------------------------------------------------------------------

_TF32_ENV = "EMBER_ALLOW_TF32"


def _tf32_from_environment() -> bool:
    value = os.environ.get(_TF32_ENV, "0").strip()
    if value not in ("", "0", "1"):
        raise ConfigError(f"{_TF32_ENV}={value!r}: use 1 to let float32 matmul use TF32 tensor cores, 0 (the "
                          f"default) for float32 arithmetic")
    return value == "1"


_tf32 = _tf32_from_environment()


def set_tf32(enabled: bool) -> None:
    """Let float32 matmul on GPUs round its inputs to TF32 (10-bit mantissa) for tensor-core speed,
    or not (the default, as in PyTorch).  Process-wide; float16/bfloat16/float64/complex unaffected."""
    global _tf32
    _tf32 = bool(enabled)


def tf32_enabled() -> bool:
    return _tf32


# ---- which GEMM serves ---------------------------------------------------------------------------------

_GEMM_ENV = "EMBER_GPU_GEMM"
GEMM_CHOICES = {"auto": "the vendor's BLAS, else ember's own GEMM (the default)",
                "own": "ember's own tiled GEMM, even where the vendor's BLAS loads",
                "vendor": "the vendor's BLAS only (an error where it is missing)"}


def _checked_choice(value: str, where: str) -> str:
    if value not in GEMM_CHOICES:
        raise ConfigError(f"{where}={value!r}: use " + "; ".join(f"{k} for {v}" for k, v in GEMM_CHOICES.items()))
    return value


_gemm = _checked_choice(os.environ.get(_GEMM_ENV, "").strip() or "auto", _GEMM_ENV)


def set_gemm(choice: str) -> None:
    """Which GEMM float matmul runs on, process-wide: "auto", "own" or "vendor" (``GEMM_CHOICES``)."""
    global _gemm
    _gemm = _checked_choice(choice, "set_gemm")


def gemm_choice() -> str:
    return _gemm


# ---- the library -------------------------------------------------------------------------------------

def cdef_for(table: BlasVendor) -> str:
    missing = sorted(set(SIGNATURES) - OPTIONAL - set(table.symbols))
    if missing:
        raise ValueError(f"BLAS table {table.product!r} names no symbol for {missing}")
    signatures = {**SIGNATURES, "gemm_strided_batched": ("int", GEMM_SIGNATURES[table.api])}
    return "\n".join(f"{result} {table.symbols[name]}({params});" for name, (result, params) in signatures.items()
                     if name in table.symbols)


def tables(vendor: Vendor) -> tuple[BlasVendor, ...]:
    """The vendor's BLAS tables in the order they are tried."""
    return ((vendor.blas,) if vendor.blas is not None else ()) + vendor.blas_alternatives


class BlasLibrary:
    """The opened BLAS library (or a fake with the same symbols): checked calls by ember_gpu name."""

    def __init__(self, vendor: Vendor, lib: Any, ffi: cffi.FFI, table: BlasVendor | None = None,
                 source: str = "") -> None:
        self.vendor = vendor
        self.table = table or vendor.blas
        assert self.table is not None
        self.source = source  # what was opened: a soname or a path
        self.ffi = ffi
        self.fn: dict[str, Callable[..., Any]] = {}
        for name, symbol in self.table.symbols.items():
            try:
                self.fn[name] = getattr(lib, symbol)
            except AttributeError:
                raise BlasUnavailableError(f"{vendor.package}: the {self.table.product} library found lacks {symbol}: "
                                           f"it is older than {vendor.package} needs; {self.table.install_hint}") \
                    from None
        self.lib = lib  # (keeps the library loaded while its functions are in use)
        # alpha = 1 and beta = 0 in each compute type, real and complex (the first element is the real part)
        self.one = {(compute, width): ffi.new(_SCALAR[compute].format(width), [1.0] + [0.0] * (width - 1))
                    for compute in _SCALAR for width in (1, 2)}
        self.zero = {key: ffi.new(_SCALAR[key[0]].format(key[1])) for key in self.one}

    def call(self, name: str, *args: Any) -> None:
        status = self.fn[name](*args)
        if status:
            raise self.error(status, name)

    def describe(self, status: int) -> str:
        """``NAME (code): what to do`` from the vendor table, else the library's own words."""
        known = self.table.errors.get(status)
        if known is not None:
            return f"{known.name} ({status}): {known.meaning}"
        text = self.fn["status_string"](status)
        return f"status {status}" + (f": {self.ffi.string(text).decode(errors='replace')}" if text else "")

    def error(self, status: int, name: str) -> GpuError:
        symbol = self.table.symbols[name]
        message = f"{self.vendor.package}: {symbol} failed: {self.describe(status)}"
        kind = GpuOutOfMemoryError if status == self.table.out_of_memory else DriverError
        return kind(message, status, symbol)


def candidates(table: BlasVendor, search_path: list[str] | None = None) -> Iterator[tuple[str, Path | None]]:
    """(what to dlopen, its wheel directory or None) in order: each soname through the loader, then
    each wheel directory under every ``sys.path`` entry that holds the library."""
    for soname in table.libraries:
        yield soname, None
    seen: set[Path] = set()
    for entry in sys.path if search_path is None else search_path:
        for sub in table.wheel_dirs:
            directory = Path(entry or ".", sub)
            if directory in seen:
                continue
            seen.add(directory)
            for soname in table.libraries:
                if (directory / soname).is_file():
                    yield str(directory / soname), directory


def open_blas(vendor: Vendor) -> BlasLibrary:
    """dlopen the vendor's first BLAS that loads (``tables``); BlasUnavailableError says what was tried
    and how to install one."""
    wanted = tables(vendor)
    if not wanted:
        raise BlasUnavailableError(f"{vendor.package} has no BLAS library for float matmul")
    failures = []
    for table in wanted:
        ffi = cffi.FFI()
        ffi.cdef(cdef_for(table))
        for target, directory in candidates(table):
            try:
                if directory is not None:  # the wheel's library finds its companions by soname: load them first
                    for path in [directory / name for name in table.companions if (directory / name).is_file()]:
                        ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)  # (its errors are the loader's, one line)
                    ctypes.CDLL(target, mode=ctypes.RTLD_GLOBAL)
                return BlasLibrary(vendor, ffi.dlopen(target), ffi, table, target)
            except OSError as exc:
                if directory is not None:  # (a soname the loader does not know is the normal case, not news)
                    failures.append(f"{target}: {exc}")
            except BlasUnavailableError as exc:  # too old: the next library may do
                failures.append(str(exc))
    found = f" ({'; '.join(failures)})" if failures else ""
    dirs = [d for table in wanted for d in table.wheel_dirs]
    where = f"neither on the loader path nor in site-packages/{' or '.join(dirs)}" if dirs else "not on the loader path"
    names = " or ".join(f"{table.product} ({' or '.join(table.libraries)})" for table in wanted)
    hints = "; or ".join(table.install_hint for table in wanted)
    raise BlasUnavailableError(f"{vendor.package}: float matmul needs {names}, which is {where}{found}: {hints}")


# ---- the GEMM of a matmul --------------------------------------------------------------------------

@dataclass(frozen=True)
class Gemm:
    """Strided-batched GEMMs in the library's column-major terms, for row-major ``out = a @ b``:
    column-major, that is ``out^T = b^T a^T``, so the library's A is ember's b (m = N columns of out)
    and its B is ember's a (n = M rows); one call per entry of ``offsets`` (the element offsets of
    out, a and b where it starts: batch dims that do not coalesce into one); strides in elements."""

    trans_a: str
    trans_b: str
    m: int
    n: int
    k: int
    lda: int
    stride_a: int
    ldb: int
    stride_b: int
    ldc: int
    stride_c: int
    batch: int
    offsets: tuple[tuple[int, int, int, int], ...] = ((0, 0, 0, 0),)  # and the bias's (0: none)
    bias_strides: tuple[int, int, int] = (0, 0, 0)  # the bias's batch, row and column strides in out's terms


@dataclass(frozen=True)
class Epilogue:
    """What the store of ``out = a @ b`` adds: ``bias`` (a view with out's shape, stride 0 where it
    broadcasts; None: no bias), then relu (maximum(v, 0), NaN and -0 kept; real dtypes).  ``fill``
    (out, bias: write the broadcast bias into out) and ``rectify`` (out: relu in place) are the op
    layer's passes that the library path needs; the own kernel needs neither."""

    bias: Any
    relu: bool
    fill: Callable[[Any, Any], None]
    rectify: Callable[[Any], None]


def _column_major(rows: int, cols: int, row_stride: int, col_stride: int) -> tuple[str, int] | None:
    """How the library reads a row-major ``rows x cols`` operand so that it sees its transpose:
    ("n", ld) when its rows are contiguous (stored column-major it *is* the transpose), ("t", ld)
    when its columns are; None when neither (the library needs a unit stride and ld >= the extent).
    A dim of size 1 has any stride."""
    if col_stride == 1 or cols == 1:
        ld = row_stride if rows > 1 else max(1, cols)
        if ld >= max(1, cols):
            return "n", ld
    if row_stride == 1 or rows == 1:
        ld = col_stride if cols > 1 else max(1, rows)
        if ld >= max(1, rows):
            return "t", ld
    return None


MAX_CALLS = 16  # beyond this many calls for one matmul, copying an operand is the cheaper way
_PLANS_KEPT = 4096  # layouts whose plans a Blas keeps (forgotten all at once when full)
_UNPLANNED = object()


def plan_gemm(out: Any, a: Any, b: Any, bias: Any = None) -> Gemm | None:
    """The library calls for ``out (..., M, N) = a (..., M, K) @ b (..., K, N)`` (+ bias, a view with
    out's shape): one strided-batched call over the batch dims that coalesce, one per entry of the
    outer ones; None when an operand has no unit stride in its last two dims, or more than MAX_CALLS
    calls would be needed."""
    m, n, k = out.shape[-2], out.shape[-1], a.shape[-1]
    c_layout = _column_major(m, n, *out.strides[-2:])
    a_layout = _column_major(m, k, *a.strides[-2:])
    b_layout = _column_major(k, n, *b.strides[-2:])
    if c_layout is None or c_layout[0] != "n" or a_layout is None or b_layout is None:
        return None
    bias_strides = (0,) * len(out.shape) if bias is None else bias.strides
    batch_shape, batch_strides = coalesce(out.shape[:-2], out.strides[:-2], a.strides[:-2], b.strides[:-2],
                                          bias_strides[:-2])
    if not batch_shape:
        batch_shape, batch_strides = [1], [[0], [0], [0], [0]]
    outer = batch_shape[:-1]
    if math.prod(outer) > MAX_CALLS:
        return None
    stride_c, stride_a, stride_b, stride_bias = (st[-1] for st in batch_strides)
    if stride_c < 0 or stride_a < 0 or stride_b < 0:
        return None
    offsets = tuple(tuple(sum(i * step for i, step in zip(at, st)) for st in batch_strides)
                    for at in itertools.product(*map(range, outer)))
    return Gemm(trans_a=b_layout[0], trans_b=a_layout[0], m=n, n=m, k=k, lda=b_layout[1], stride_a=stride_b,
                ldb=a_layout[1], stride_b=stride_a, ldc=c_layout[1], stride_c=stride_c, batch=batch_shape[-1],
                offsets=offsets, bias_strides=(stride_bias, *bias_strides[-2:]))


# ---- handles and the kernel ------------------------------------------------------------------------

class Handle:
    """A library handle of one device for one thread: bound to the device's stream, default math mode,
    and the device's workspace.  Destroyed when its thread ends or the Blas is reset (never raises)."""

    def __init__(self, library: BlasLibrary, device: Any, workspace: Any) -> None:
        self.library = library
        self.device = device
        device.runtime.make_current(device)
        out = library.ffi.new("void **")
        library.call("create", out)
        self.pointer = out[0]
        try:
            library.call("set_stream", self.pointer, device.stream)
            if "set_math_mode" in library.fn:
                library.call("set_math_mode", self.pointer, library.table.default_math)
            if "set_workspace" in library.fn:
                library.call("set_workspace", self.pointer, workspace.pointer, workspace.nbytes)
        except GpuError:
            self.close()
            raise

    def close(self) -> None:
        device, pointer = self.device, self.__dict__.pop("pointer", None)
        try:  # (a finalizer must not raise: the driver or the interpreter may be shutting down)
            if pointer is not None and _still_open(device):
                device.runtime.make_current(device)
                self.library.fn["destroy"](pointer)
        except Exception:
            pass

    __del__ = close


class OwnGemm:
    """ember's tiled GEMM kernels (csrc/eg_gemm.h) of a build, by its kernel index (kernel -> image):
    eg_gemm_<dtype>, and eg_gemm_epilogue_<dtype> for a GEMM with a bias or relu.  A planned GEMM (the
    library's column-major ``C = op(A) op(B)``, A being ember's b) runs as ember's row-major
    ``out = a @ b``, so the kernel's stores run along out's rows."""

    def __init__(self, index: Mapping[str, str]) -> None:
        self.index = index
        self.dtypes = frozenset(dtype for dtype in DTYPES if f"eg_gemm_{dtype}" in index)
        self._kernels: dict[tuple[int, str], Kernel] = {}

    def run(self, device: Any, gemm: Gemm, dtype: Any, c: int, a: int, b: int, bias: int = 0,
            relu: bool = False) -> None:
        """Queue ``gemm`` for operands of ``dtype`` at device addresses c (out), a and b (ember's), with
        the epilogue in the store: + the bias at device address ``bias`` (0: none), then relu."""
        name = f"eg_gemm_epilogue_{dtype.name}" if bias or relu else f"eg_gemm_{dtype.name}"
        kernel = self._kernels.get((device.index, name))
        if kernel is None or kernel.device is not device:
            image = self.index.get(name)
            if image is None:  # (a build from before the epilogue kernels)
                raise KernelError(f"{device.vendor.package}: its kernels hold no {name}: reinstall it")
            kernel = self._kernels[device.index, name] = Kernel(device, image, name, abi.ffi, "eg_gemm_args")
        tile = gen_gemm.TILES[dtype.name]
        tiles = -(-gemm.n // tile.bm) * -(-gemm.m // tile.bn) * gemm.batch
        size = dtype.itemsize
        for at_c, at_a, at_b, at_bias in gemm.offsets:
            kernel((device.blocks_for(tiles, 1), 1, 1), (abi.BLOCK, 1, 1), {
                "c": c + at_c * size, "a": a + at_a * size, "b": b + at_b * size, "batch": gemm.batch,
                "m": gemm.n, "n": gemm.m, "k": gemm.k, "alpha": [1.0, 0.0], "beta": [0.0, 0.0],
                "a_strides": [gemm.stride_b, *_rows_columns(gemm.trans_b, gemm.ldb)],
                "b_strides": [gemm.stride_a, *_rows_columns(gemm.trans_a, gemm.lda)],
                "c_strides": [gemm.stride_c, gemm.ldc, 1], "bias": bias and bias + at_bias * size,
                "bias_strides": list(gemm.bias_strides), "relu": int(relu)})


def _rows_columns(op: str, ld: int) -> tuple[int, int]:
    """The row and column strides of the transpose of a library operand read with ``op`` and ``ld``."""
    return (ld, 1) if op == "n" else (1, ld)


def _fits(table: BlasVendor, gemm: Gemm) -> bool:
    """Whether the library's GEMM takes this one's sizes (the int-sized ones stop at 2**31 - 1)."""
    return table.api == "cublas_64" or max(gemm.m, gemm.n, gemm.k, gemm.lda, gemm.ldb, gemm.ldc,
                                           gemm.batch) <= _INT32_MAX


class Blas:
    """The BLAS of one runtime: the library (opened on the first matmul), the handles per device and
    thread, the workspace per device, ember's own GEMM kernels (``own``, set by the op layer's family
    entry), and the matmul kernel."""

    def __init__(self, runtime: Any, opener: Callable[[Vendor], BlasLibrary] | None = None) -> None:
        self.runtime = runtime
        self._opener = opener
        self._lock = threading.Lock()
        self._library: BlasLibrary | None = None
        self._unavailable: BlasUnavailableError | None = None
        self._driver: Any = None  # the runtime's driver the library was opened for
        self._thread = threading.local()  # .handles: {device index: Handle}
        self._workspaces: dict[int, tuple[Any, Any]] = {}  # device index -> (device, DeviceMemory)
        self._plans: dict[tuple[Any, ...], Gemm | None] = {}  # by layout: planning costs more than the call
        self.own: OwnGemm | None = None  # ember's GEMM kernels, when the build holds them

    def reset(self, opener: Callable[[Vendor], BlasLibrary] | None = None) -> None:
        """Forget the library, handles and workspaces; open the next library with ``opener`` when given
        (tests: a fake).  Without one ever given: the BLAS that comes with the runtime's driver (a fake
        driver's fake), else the vendor's library."""
        with self._lock:
            if opener is not None:
                self._opener = opener
            self._forget()

    def _forget(self) -> None:
        self._library, self._unavailable, self._driver = None, None, None
        self._thread = threading.local()
        for device, workspace in self._workspaces.values():
            if _still_open(device):
                device.memory.free(workspace)
        self._workspaces = {}

    def library(self) -> BlasLibrary:
        """The opened library; BlasUnavailableError (the same one every time) when it is missing.  A
        runtime that opened another driver since (a reset) gets the BLAS of that one."""
        driver = self.runtime.driver
        if self._library is None or self._driver is not driver:
            with self._lock:
                if self._driver is not driver:
                    self._forget()
                    self._driver = driver
                if self._library is None and self._unavailable is None:
                    opener = self._opener or driver.blas_opener or open_blas
                    try:
                        self._library = opener(self.runtime.vendor)
                    except BlasUnavailableError as exc:
                        self._unavailable = exc
        if self._library is None:
            raise BlasUnavailableError(str(self._unavailable))
        return self._library

    def handle(self, device: Any) -> Handle:
        """This thread's handle on ``device``, made on first use."""
        handles = self._thread.__dict__.setdefault("handles", {})
        found = handles.get(device.index)
        if found is None or found.device is not device:
            library = self.library()
            workspace = self._workspace(device) if "set_workspace" in library.fn else None
            found = handles[device.index] = Handle(library, device, workspace)
        return found

    def _workspace(self, device: Any) -> Any:
        with self._lock:
            found = self._workspaces.get(device.index)
            if found is None or found[0] is not device:
                found = self._workspaces[device.index] = (device, device.memory.alloc(self.library().table
                                                                                      .workspace_bytes))
            return found[1]

    def matmul(self, out: Any, a: Any, b: Any, epilogue: Epilogue | None = None) -> Any:
        """``out (..., M, N) = a (..., M, K) @ b (..., K, N)`` (batch dims equal, stride 0 where the
        core broadcast them), then the epilogue, as strided-batched GEMMs: one, or one per entry of the
        batch dims that do not coalesce (up to MAX_CALLS); NotImplemented for other layouts."""
        device = self.runtime.device(out.device.index)
        if 0 in out.shape:
            return None
        if epilogue is not None and epilogue.relu and out.dtype.kind == "c":
            raise KernelError(f"{self._package()}: a GEMM's relu epilogue is for real dtypes, not {out.dtype.name}")
        bias = None if epilogue is None else epilogue.bias
        if a.shape[-1] == 0:  # an empty sum: zeros or the bias (not left to the library's k = 0 corner)
            if bias is not None:
                epilogue.fill(out, bias)
            elif out.is_contiguous:
                device.call("memset_d8_async", _address(device, out), 0, _nbytes(out), device.stream)
            else:
                return NotImplemented
            if epilogue is not None and epilogue.relu:
                epilogue.rectify(out)
            return None
        key = (out.shape, a.shape[-1], out.strides, a.strides, b.strides, None if bias is None else bias.strides)
        gemm = self._plans.get(key, _UNPLANNED)
        if gemm is _UNPLANNED:
            if len(self._plans) >= _PLANS_KEPT:
                self._plans.clear()
            gemm = self._plans[key] = plan_gemm(out, a, b, bias)
        if gemm is None:
            return NotImplemented  # the one place a contiguous copy of a or b would make this layout fit
        self.gemm(device, gemm, out, a, b, epilogue)
        return None

    def gemm(self, device: Any, gemm: Gemm, out: Any, a: Any, b: Any, epilogue: Epilogue | None = None) -> None:
        """Queue the planned GEMMs and the epilogue on ``device``'s stream (operands validated first),
        on ember's own kernel (``serving`` says None; the epilogue in its store) or on the library (the
        bias filled into out first and accumulated onto, beta = 1; relu a pass after)."""
        library = self.serving(out.dtype.name, gemm)
        c, pa, pb = _address(device, out), _address(device, a), _address(device, b)
        bias = None if epilogue is None else epilogue.bias
        relu = epilogue is not None and epilogue.relu
        if library is None:
            assert self.own is not None
            self.own.run(device, gemm, out.dtype, c, pa, pb, 0 if bias is None else _address(device, bias), relu)
            return
        if bias is not None:
            epilogue.fill(out, bias)
        dtype = out.dtype.name
        table = library.table
        compute = _COMPUTE[dtype]
        scalars = (compute, 2 if out.dtype.kind == "c" else 1)
        if out.dtype.kind == "c" and dtype in table.compute_types:  # (hipBLAS's complex compute types)
            compute = dtype
        elif dtype == "float32" and _tf32 and "float32_tf32" in table.compute_types:
            compute = "float32_tf32"
        compute_type = table.compute_types[compute]
        data_type = table.data_types[dtype]
        handle = self.handle(device)
        device.runtime.make_current(device)
        op = table.operations
        size = out.dtype.itemsize
        beta = (library.zero if bias is None else library.one)[scalars]
        for at_c, at_a, at_b, _ in gemm.offsets:
            result = [c + at_c * size, data_type, gemm.ldc, gemm.stride_c]
            call = [handle.pointer, op[gemm.trans_a], op[gemm.trans_b], gemm.m, gemm.n, gemm.k, library.one[scalars],
                    pb + at_b * size, data_type, gemm.lda, gemm.stride_a, pa + at_a * size, data_type, gemm.ldb,
                    gemm.stride_b, beta, *result]
            if table.api == "rocblas":  # d, the result, is c: then the solution index and flags
                call += [*result, gemm.batch, compute_type, table.default_algo, 0, 0]
            else:
                call += [gemm.batch, compute_type, table.default_algo]
            library.call("gemm_strided_batched", *call)
        if device.launch_blocking:
            device.synchronize()
        if relu:
            epilogue.rectify(out)

    def serving(self, dtype: str, gemm: Gemm | None = None) -> BlasLibrary | None:
        """The library a GEMM of ``dtype`` runs on, or None for ember's own kernel: by ``gemm_choice``,
        the own kernel where the library is missing or takes no sizes as large as ``gemm``'s."""
        own = self.own is not None and dtype in self.own.dtypes
        if _gemm == "own":
            if not own:
                raise BlasUnavailableError(f"{_GEMM_ENV}=own, but {self._package()}'s kernels hold no eg_gemm_{dtype}: "
                                           f"reinstall it, or use {_GEMM_ENV}=auto")
            return None
        try:
            library = self.library()
        except BlasUnavailableError:
            if _gemm == "auto" and own:
                return None
            raise
        if gemm is not None and not _fits(library.table, gemm):
            if not own:
                raise BlasUnavailableError(f"{self._package()}: this matmul's sizes pass {library.table.product}'s "
                                           f"32-bit limit and no own GEMM kernel serves {dtype}")
            return None
        return library

    def describe(self) -> str:
        """Which GEMM float matmul runs on, in words (the GPU plugin's device property "gemm")."""
        own = "ember's tiled GEMM (eg_gemm)"
        if _gemm == "own":
            return f"{own}, as {_GEMM_ENV}=own asks" if self.own is not None else f"none ({_GEMM_ENV}=own, no kernels)"
        try:
            library = self.library()
        except BlasUnavailableError as exc:
            missing = " / ".join(table.product for table in tables(self.runtime.vendor)) or "a vendor BLAS"
            if _gemm == "auto" and self.own is not None:
                return f"{own}: {missing} not found"
            return f"none: {exc}"
        return f"{library.table.product} ({library.source})" if library.source else library.table.product

    def _package(self) -> str:
        return self.runtime.vendor.package if self.runtime is not None else "ember-gpu"


_BLAS: weakref.WeakKeyDictionary[Any, Blas] = weakref.WeakKeyDictionary()


def blas_for(runtime: Any) -> Blas:
    """The one Blas of ``runtime``: what the op layer's matmul runs on (on a fake driver, the fake's
    BLAS; a test may pass another opener to ``reset``)."""
    found = _BLAS.get(runtime)
    if found is None:
        found = _BLAS[runtime] = Blas(runtime)
    return found


def kernels(layer: Any) -> dict[str, tuple[Callable[..., Any], frozenset[str]]]:
    """The op layer's family entry (``ember_gpu.ops.FAMILIES``): matmul for every floating dtype,
    on the Blas of the layer's runtime (a layer without one only reads the table)."""
    gemm = Blas(None) if layer.runtime is None else blas_for(layer.runtime)
    index = getattr(layer, "index", {})
    if any(name.startswith("eg_gemm_") for name in index):
        gemm.own = OwnGemm(index)
    return {"matmul": (gemm.matmul, frozenset(DTYPES))}


def _still_open(device: Any) -> bool:
    """Whether ``device`` may still be called: not lost, and not forgotten by a runtime reset or a fork."""
    return device.usable and device.runtime.devices.get(device.index) is device


def _address(device: Any, t: Any) -> int:
    """The device address of ``t``'s first element, after checking that its handle is a live
    allocation of ``device`` and that its view lies inside it (a bad one would corrupt memory).  The
    view is checked once per tensor (its layout never changes): the address is kept in ``t._native``,
    as ember_gpu.ops keeps it."""
    handle = t.handle
    found = t._native
    if handle in device.memory.live and found is not None:
        return found
    lo, hi = span(t.shape, t.strides, t.offset)
    itemsize = t.dtype.itemsize
    if handle not in device.memory.live or lo < 0 or (hi + 1) * itemsize > handle.nbytes:
        raise KernelError(f"{device.vendor.package}: matmul got a {t.dtype.name} operand of shape {t.shape} "
                          f"(strides {t.strides}, offset {t.offset}) that is not inside a live allocation of "
                          f"{device} (a bug in the op layer)")
    found = t._native = handle.pointer + t.offset * itemsize
    return found


def _nbytes(t: Any) -> int:
    count = 1
    for n in t.shape:
        count *= n
    return count * t.dtype.itemsize
