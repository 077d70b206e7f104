"""ember-gpu's sort kernels (csrc/eg_sort.h) on the host, against ember-cpu to the bit: sort and
argsort of every sortable dtype, ascending and descending, rows of 1, of a power of two, in shared
memory and in the scratch buffer; duplicates (stable either way), NaN placement, -0.0 beside 0.0,
strided and reversed operands."""

from __future__ import annotations

import numpy as np
import pytest
from ember_gpu import gen_sort
from test_kernels_host import HOST_DIR, NUMPY, HostKernels, from_ember, to_ember, values

import ember_core as em

DTYPES = [d.name for d in gen_sort.registry_dtypes()]
SHAPES = [(3, 1), (4, 37), (2, 64), (2, 1024), (2, 1500)]  # the last sorts in the scratch


@pytest.fixture(scope="module")
def host() -> HostKernels:
    return HostKernels(HOST_DIR)


def sort(host: HostKernels, kernel: str, x: np.ndarray, out: np.ndarray, descending: bool, grid: int = 2) -> None:
    args = host.ffi.new("eg_sort_args *")
    n = x.shape[-1]
    width = 1 << max(n - 1, 0).bit_length()
    scratch = np.zeros(grid * width * 16, np.uint8)
    args.out, args.x, args.scratch = host.pointer(out), host.pointer(x), host.pointer(scratch)
    args.rows, args.ndim, args.descending = int(np.prod(x.shape[:-1])), x.ndim, int(descending)
    for d in range(x.ndim):
        args.shape[d] = x.shape[d]
        args.x_strides[d], args.out_strides[d] = x.strides[d] // x.itemsize, out.strides[d] // out.itemsize
    host.launch(kernel, args, grid, 256)


def _reference(op: str, x: np.ndarray, dtype: str, descending: bool) -> np.ndarray:
    return from_ember(getattr(em, op)(to_ember(np.ascontiguousarray(x), dtype), axis=-1, descending=descending))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_argsort_match_ember_cpu(host: HostKernels, dtype: str, descending: bool) -> None:
    rng = np.random.default_rng(len(dtype) + 7 * descending)
    for shape in SHAPES:
        x = values(dtype, int(np.prod(shape)), rng).reshape(shape)
        x[:, ::5] = x[:, :1]  # duplicates (and -0.0 beside 0.0 among the specials)
        for op, out_dtype in (("sort", NUMPY[dtype]), ("argsort", np.int64)):
            out = np.zeros(shape, out_dtype)
            sort(host, f"eg_sort_{op}_{dtype}", x, out, descending)
            want = _reference(op, x, dtype, descending)
            assert out.tobytes() == want.astype(out_dtype).tobytes(), f"{op} {dtype} {shape} descending={descending}"


@pytest.mark.parametrize("dtype", ["float32", "int16", "bfloat16"])
def test_sort_strided(host: HostKernels, dtype: str) -> None:
    rng = np.random.default_rng(3)
    x = values(dtype, 40 * 6, rng).reshape(40, 6).T  # rows of 40, 6 apart
    for op, out_dtype in (("sort", NUMPY[dtype]), ("argsort", np.int64)):
        out = np.zeros((6, 40), out_dtype)[::-1]
        sort(host, f"eg_sort_{op}_{dtype}", x, out, False)
        assert out.tobytes() == _reference(op, x, dtype, False).astype(out_dtype).tobytes(), op
