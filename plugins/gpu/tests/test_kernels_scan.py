"""ember-gpu's scan kernels (csrc/eg_scan.h) on the host, against ember-cpu: a thread per row gives
ember-cpu's bits (the same order), a block per row (chunks with a carry) the same integers and
floating values within the bound of any summation order; strided and reversed operands, rows that
are not a multiple of the block, and in-place scans."""

from __future__ import annotations

import numpy as np
import pytest
from ember_gpu import gen_reduce, gen_scan
from test_kernels_host import HOST_DIR, NUMPY, HostKernels, comparable, epsilon, from_ember, to_ember
from test_kernels_reduce import _data

import ember_core as em

BLOCK = 256
MODES = {"thread": 0, "block": 1}
CASES = [(op, d.name) for op in gen_scan.OPS for d in gen_reduce.registry_dtypes(op)]


@pytest.fixture(scope="module")
def host() -> HostKernels:
    return HostKernels(HOST_DIR)


def scan(host: HostKernels, kernel: str, x: np.ndarray, out: np.ndarray, mode: str, grid: int = 3) -> None:
    args = host.ffi.new("eg_scan_args *")
    args.out, args.x = host.pointer(out), host.pointer(x)
    args.rows, args.ndim, args.mode = int(np.prod(x.shape[:-1])), x.ndim, MODES[mode]
    for d in range(x.ndim):
        args.shape[d] = x.shape[d]
        args.x_strides[d], args.out_strides[d] = x.strides[d] // x.itemsize, out.strides[d] // out.itemsize
    host.launch(kernel, args, grid, BLOCK if mode == "block" else 32)


def _reference(op: str, x: np.ndarray, dtype: str) -> np.ndarray:
    t = to_ember(np.ascontiguousarray(x), dtype)
    with np.errstate(all="ignore"):
        return from_ember(getattr(em, op)(t, axis=-1, dtype=t.dtype))


def _check(op: str, dtype: str, got: np.ndarray, want: np.ndarray, x: np.ndarray, exact: bool, what: str) -> None:
    """Bitwise when exact; else within the bound of any order: (i + 1) eps sum |x_0..i| for sums,
    (i + 1) eps |prod| for products, doubled (either side may err), plus the half types' rounding."""
    g, w = comparable(got, dtype).astype(np.complex128), comparable(want, dtype).astype(np.complex128)
    if exact or got.dtype.kind in "iu":
        assert got.tobytes() == want.tobytes(), f"{what}: {got[got != want][:5]} != ember-cpu {want[got != want][:5]}"
        return
    n = x.shape[-1]
    magnitude = np.cumsum(np.abs(comparable(np.ascontiguousarray(x), dtype).astype(np.complex128)), axis=-1) \
        if op == "cumulative_sum" else np.abs(w)
    accumulate = np.float32 if dtype in ("float16", "bfloat16") else got.real.dtype
    bound = 2 * np.arange(1, n + 1) * np.finfo(accumulate).eps * magnitude + epsilon(dtype) * np.abs(w)
    with np.errstate(invalid="ignore"):
        ok = (g == w) | (np.abs(g - w) <= bound)
    assert ok.all(), f"{what}: {got[~ok][:5]} != ember-cpu {want[~ok][:5]}"


@pytest.mark.parametrize(("op", "dtype"), CASES, ids=[f"{op}-{d}" for op, d in CASES])
def test_scan_modes_match_ember_cpu(host: HostKernels, op: str, dtype: str) -> None:
    rng = np.random.default_rng(sum(map(ord, op + dtype)))
    kernel = f"eg_scan_{op}_{dtype}"
    reduction = gen_scan.OPS[op]
    for mode, shape in (("thread", (37, 9)), ("thread", (3, 700)), ("block", (5, 700)), ("block", (2, 3, 40))):
        x = _data(reduction, dtype, int(np.prod(shape)), rng).reshape(shape)
        want = _reference(op, x, dtype)
        out = np.zeros(shape, NUMPY[dtype])
        scan(host, kernel, x, out, mode)
        _check(op, dtype, out, want, x, mode == "thread", f"{kernel} {mode} {shape}")
    # strided: x transposed, out reversed along the scanned dim; then in place
    base = _data(reduction, dtype, 300, rng).reshape(300 // 12, 12)
    x = base.T  # rows of 25 elements, 12 apart
    want = _reference(op, x, dtype)
    for mode in MODES:
        out = np.zeros((12, 25), NUMPY[dtype])[:, ::-1]
        scan(host, kernel, x, out, mode)
        _check(op, dtype, out, want, x, mode == "thread", f"{kernel} {mode} strided")
        inplace = x.copy()
        scan(host, kernel, inplace, inplace, mode)
        _check(op, dtype, inplace, want, x, mode == "thread", f"{kernel} {mode} in place")
