"""A fake of a vendor's BLAS library for CI machines without a GPU, beside ``fake.FakeGpu``.

``FakeBlas(gpu).lib`` has exactly the vendor's BLAS symbols of ``blas.SIGNATURES``, taking and
returning what the real functions do, and computes GEMMs with numpy on the fake driver's device
memory (``FakeGpu.read`` / ``write``) with the library's column-major semantics: transpose flags,
leading dimensions (checked as the library checks them), batch strides (0 included), alpha and
beta.  It records what a test needs to see: every call, each handle's device, thread, stream, math
mode and workspace, and each GEMM's arguments (``gemms``).  ``fail(name, status, skip=0, times=1)``
makes calls fail as ``FakeGpu.fail`` does.  ``open`` is ``blas.Blas``'s library opener.  ``FakeBlas(gpu,
table)`` fakes another of the vendor's tables (ember-rocm's rocBLAS: its GEMM's d must be its c).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import cffi
import numpy as np

from ember_gpu.blas import SIGNATURES, BlasLibrary, cdef_for
from ember_gpu.vendor import BlasVendor, Vendor


@dataclass
class FakeHandle:
    device: int | None  # the current device when it was created
    thread: int  # threading.get_ident() of its creator
    stream: int | None = None  # the bound stream's address
    math_mode: int | None = None
    workspace: tuple[int, int] | None = None  # (address, bytes)
    destroyed: bool = False


@dataclass(frozen=True)
class FakeGemm:
    handle: int
    device: int | None  # the current device at the call
    stream: int | None
    trans_a: int
    trans_b: int
    m: int
    n: int
    k: int
    alpha: complex
    a: int
    a_type: int
    lda: int
    stride_a: int
    b: int
    b_type: int
    ldb: int
    stride_b: int
    beta: complex
    c: int
    c_type: int
    ldc: int
    stride_c: int
    batch: int
    compute_type: int
    algo: int


class FakeBlas:
    """The fake BLAS of the GPUs of ``gpu`` (a ``fake.FakeGpu``), with ``gpu.vendor``'s BLAS table."""

    def __init__(self, gpu: Any, table: BlasVendor | None = None) -> None:
        self.gpu = gpu
        self.vendor: Vendor = gpu.vendor
        table = table or self.vendor.blas
        if table is None:
            raise ValueError(f"vendor {self.vendor.name!r} has no BLAS table")
        self.table = table
        self.ffi = cffi.FFI()
        self.ffi.cdef(cdef_for(table))
        self.calls: list[str] = []
        self.handles: dict[int, FakeHandle] = {}
        self.gemms: list[FakeGemm] = []
        self.opened = 0
        self._failures: dict[str, list[list[int | None]]] = {}  # name -> [status, skip, times]
        self._next_handle = 0x7000
        self._strings = {status: self.ffi.new("char[]", info.name.encode()) for status, info in table.errors.items()}
        self._dtypes = {code: name for name, code in table.data_types.items()}
        self._computes = {code: name for name, code in table.compute_types.items()}
        self._ops = {code: name for name, code in table.operations.items()}
        # the statuses the fake returns, found by the name's ending in the vendor's table (xBLAS_STATUS_...;
        # rocblas_status_..., which has no "not supported" or "execution failed" of its own)
        self._invalid, self._unsupported, self._failed = (
            next(code for code, info in table.errors.items() if info.name.upper().endswith(suffixes))
            for suffixes in (("_INVALID_VALUE",), ("_NOT_SUPPORTED", "_NOT_IMPLEMENTED"),
                             ("_EXECUTION_FAILED", "_INTERNAL_ERROR")))
        self.lib = _FakeLib(self)

    def open(self, vendor: Vendor) -> BlasLibrary:
        """The Blas library opener: this fake as a BlasLibrary."""
        self.opened += 1
        return BlasLibrary(vendor, self.lib, self.ffi, self.table)

    def fail(self, name: str, status: int, *, skip: int = 0, times: int | None = 1) -> None:
        name = {symbol: n for n, symbol in self.table.symbols.items()}.get(name, name)
        if name not in SIGNATURES:
            raise ValueError(f"no BLAS function {name!r}")
        self._failures.setdefault(name, []).append([status, skip, times])

    def count(self, name: str) -> int:
        return self.calls.count(name)

    def live_handles(self) -> list[FakeHandle]:
        return [h for h in self.handles.values() if not h.destroyed]

    # ---- dispatch ---------------------------------------------------------------------------------

    def _invoke(self, name: str, args: tuple[Any, ...]) -> Any:
        self.calls.append(name)
        for failure in self._failures.get(name, ()) if name != "status_string" else ():
            status, skip, times = failure
            if times == 0:
                continue
            if skip:
                failure[1] = skip - 1
                continue
            if times is not None:
                failure[2] = times - 1
            return status
        if name == "gemm_strided_batched" and self.table.api == "rocblas":
            *front, c, c_type, ldc, stride_c, d, d_type, ldd, stride_d, batch, compute, algo, solution, flags = args
            if (d, d_type, ldd, stride_d, solution, flags) != (c, c_type, ldc, stride_c, 0, 0):
                return self._invalid  # (ember writes c in place: d is c, the library picks the solution)
            args = (*front, c, c_type, ldc, stride_c, batch, compute, algo)
        return getattr(self, "_" + name)(*args) or 0

    def _address(self, pointer: Any) -> int:
        return int(self.ffi.cast("uintptr_t", pointer))

    def _handle(self, handle: Any) -> FakeHandle | None:
        found = self.handles.get(self._address(handle))
        return None if found is None or found.destroyed else found

    # ---- functions ------------------------------------------------------------------------------

    def _create(self, out: Any) -> None:
        self._next_handle += 16
        self.handles[self._next_handle] = FakeHandle(self.gpu._current_device(), threading.get_ident())
        out[0] = self.ffi.cast("void *", self._next_handle)

    def _destroy(self, handle: Any) -> int:
        state = self._handle(handle)
        if state is None:
            return self._invalid
        state.destroyed = True
        return 0

    def _set_stream(self, handle: Any, stream: Any) -> int:
        state = self._handle(handle)
        if state is None:
            return self._invalid
        state.stream = self._address(stream)
        return 0

    def _set_math_mode(self, handle: Any, mode: int) -> int:
        state = self._handle(handle)
        if state is None:
            return self._invalid
        state.math_mode = mode
        return 0

    def _set_workspace(self, handle: Any, workspace: int, nbytes: int) -> int:
        state = self._handle(handle)
        if state is None:
            return self._invalid
        state.workspace = (workspace, nbytes)
        return 0

    def _status_string(self, status: int) -> Any:
        return self._strings.get(status, self.ffi.NULL)

    def _gemm_strided_batched(self, handle: Any, trans_a: int, trans_b: int, m: int, n: int, k: int, alpha: Any,
                              a: int, a_type: int, lda: int, stride_a: int, b: int, b_type: int, ldb: int,
                              stride_b: int, beta: Any, c: int, c_type: int, ldc: int, stride_c: int, batch: int,
                              compute_type: int, algo: int) -> int:
        state = self._handle(handle)
        if state is None or state.device != self.gpu._current_device():
            return self._invalid  # a handle is used in the context it was created in
        dtype, compute = self._dtypes.get(c_type), self._computes.get(compute_type)
        ops = self._ops.get(trans_a), self._ops.get(trans_b)
        if dtype is None or a_type != c_type or b_type != c_type or compute not in _COMPUTES.get(dtype, ()):
            return self._unsupported
        rows_a, rows_b = (m if ops[0] == "n" else k), (k if ops[1] == "n" else n)
        if (None in ops or min(m, n, k, batch) < 0 or lda < max(1, rows_a) or ldb < max(1, rows_b)
                or ldc < max(1, m) or algo != self.table.default_algo):
            return self._invalid
        scalar = "double" if compute in ("float64", "complex128") else "float"
        width = 2 if dtype.startswith("complex") else 1
        alpha_value, beta_value = (_scalar(self.ffi.cast(f"{scalar} *", p), width) for p in (alpha, beta))
        self.gemms.append(FakeGemm(self._address(handle), state.device, state.stream, trans_a, trans_b, m, n, k,
                                   alpha_value, a, a_type, lda, stride_a, b, b_type, ldb, stride_b, beta_value, c,
                                   c_type, ldc, stride_c, batch, compute_type, algo))
        if 0 in (m, n, batch):
            return 0
        try:
            op_a = self._matrices(a, dtype, rows_a, m + k - rows_a, lda, stride_a, batch)
            op_b = self._matrices(b, dtype, rows_b, n + k - rows_b, ldb, stride_b, batch)
            product = _op(op_a, ops[0]) @ _op(op_b, ops[1])
            raw = bytearray(self.gpu.read(c, _extent(m, n, ldc, stride_c, batch, dtype)))
            target = _view(raw, dtype, m, n, ldc, stride_c, batch)
            result = alpha_value * product + (beta_value * _decode(target, dtype) if beta_value else 0)
            target[...] = _encode(result if width == 2 else result.real, dtype)
            self.gpu.write(c, bytes(raw))
        except Exception:  # memory the fake driver does not hold: what an illegal address does to a kernel
            return self._failed
        return 0

    def _matrices(self, pointer: int, dtype: str, rows: int, cols: int, ld: int, stride: int, batch: int) -> Any:
        """The ``batch`` column-major ``rows x cols`` matrices at ``pointer``, as wide numpy values."""
        raw = bytearray(self.gpu.read(pointer, _extent(rows, cols, ld, stride, batch, dtype)))
        return _decode(_view(raw, dtype, rows, cols, ld, stride, batch), dtype)


# which compute types the library accepts per data type (cuBLAS's table for GemmEx, restricted to ember's)
_COMPUTES = {"float16": ("float32",), "bfloat16": ("float32",), "float32": ("float32", "float32_tf32"),
             "complex64": ("float32", "complex64"), "float64": ("float64",), "complex128": ("float64", "complex128")}
_STORAGE = {"float16": np.float16, "bfloat16": np.uint16, "float32": np.float32, "float64": np.float64,
            "complex64": np.complex64, "complex128": np.complex128}


def _scalar(pointer: Any, width: int) -> complex:
    return complex(pointer[0], pointer[1]) if width == 2 else complex(pointer[0])


def _extent(rows: int, cols: int, ld: int, stride: int, batch: int, dtype: str) -> int:
    """Bytes from the first to past the last element the matrices touch."""
    if 0 in (rows, cols, batch):
        return 0
    return ((rows - 1) + (cols - 1) * ld + (batch - 1) * stride + 1) * np.dtype(_STORAGE[dtype]).itemsize


def _view(raw: bytearray, dtype: str, rows: int, cols: int, ld: int, stride: int, batch: int) -> Any:
    storage = np.dtype(_STORAGE[dtype])
    base = np.frombuffer(raw, dtype=storage)
    size = storage.itemsize
    return np.lib.stride_tricks.as_strided(base, (batch, rows, cols), (stride * size, size, ld * size))


def _op(matrices: Any, op: str) -> Any:
    return matrices if op == "n" else np.swapaxes(matrices, 1, 2)


def _decode(values: Any, dtype: str) -> Any:
    if dtype == "bfloat16":
        return (values.astype(np.uint32) << 16).view(np.float32).astype(np.complex128)
    return values.astype(np.complex128)


def _encode(values: Any, dtype: str) -> Any:
    if dtype != "bfloat16":
        return values.astype(_STORAGE[dtype])
    bits = np.ascontiguousarray(values.real, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
    return np.where(np.isnan(values.real), 0x7FC0, rounded).astype(np.uint16)


class _FakeLib:
    """The vendor's BLAS symbols, as attributes, like a cffi library opened with dlopen."""

    def __init__(self, fake: FakeBlas) -> None:
        self._fake = fake
        self._by_symbol = {symbol: name for name, symbol in fake.table.symbols.items()}

    def __getattr__(self, symbol: str) -> Any:
        name = self._by_symbol.get(symbol)
        if name is None:
            raise AttributeError(f"function/symbol {symbol!r} not found in the fake BLAS")
        fake = self._fake

        def call(*args: Any) -> Any:
            return fake._invoke(name, args)

        call.__name__ = symbol
        return call
