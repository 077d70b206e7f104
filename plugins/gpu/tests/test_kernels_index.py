"""ember-gpu's searchsorted, take, index_put and integer matmul kernels on the host, against
ember-cpu to the bit: NaN-last searches from both sides, gathers and scatters of every element size
along a middle axis of strided views with negative and repeated indices (the last write wins,
accumulation adds in index order, bool ORs, integers wrap, half types round every add), and
wrapping integer products over broadcast batches."""

from __future__ import annotations

import numpy as np
import pytest
from ember_gpu import codegen, gen_index, gen_sort
from test_kernels_host import HOST_DIR, NUMPY, HostKernels, from_ember, to_ember, values

import ember_core as em


@pytest.fixture(scope="module")
def host() -> HostKernels:
    return HostKernels(HOST_DIR)


def _strides(a: np.ndarray) -> list[int]:
    return [s // a.itemsize for s in a.strides]


@pytest.mark.parametrize("dtype", [d.name for d in gen_sort.registry_dtypes()])
@pytest.mark.parametrize("right", [False, True])
def test_searchsorted(host: HostKernels, dtype: str, right: bool) -> None:
    rng = np.random.default_rng(11)
    x1 = from_ember(em.sort(to_ember(values(dtype, 60, rng), dtype)))  # sorted, NaN last
    queries = values(dtype, 7 * 9, rng).reshape(9, 7).T  # strided values, duplicates of x1 among them
    queries[0, :4] = x1[[0, 5, 5, 59]]
    out = np.zeros((7, 9), np.int64)
    args = host.ffi.new("eg_search_args *")
    args.out, args.x1, args.values = host.pointer(out), host.pointer(x1), host.pointer(queries)
    args.n, args.x1_stride, args.count, args.ndim, args.right = 60, _strides(x1)[0], queries.size, 2, int(right)
    for d in range(2):
        args.shape[d], args.value_strides[d], args.out_strides[d] = queries.shape[d], _strides(queries)[d], \
            _strides(out)[d]
    host.launch(f"eg_search_searchsorted_{dtype}", args)
    want = em.searchsorted(to_ember(x1, dtype), to_ember(np.ascontiguousarray(queries), dtype),
                           side="right" if right else "left")
    assert out.tolist() == want.numpy().tolist()


def _index_args(host: HostKernels, dst: np.ndarray, src: np.ndarray, idx: np.ndarray, n: int) -> object:
    args = host.ffi.new("eg_index_args *")
    args.dst, args.src, args.indices = host.pointer(dst), host.pointer(src), host.ffi.cast("long long *",
                                                                                          host.pointer(idx))
    args.outer, args.n, args.m, args.inner = dst.shape[0], n, idx.size, dst.shape[2]
    args.dst_strides, args.src_strides = _strides(dst), _strides(src)
    return args


INDICES = np.array([3, -1, 0, 3, 5, -6, 3], np.int64)  # negative, repeated, both ends of n = 6


@pytest.mark.parametrize("dtype", [d.name for d in codegen.DTYPES])
def test_take_and_put(host: HostKernels, dtype: str) -> None:
    rng = np.random.default_rng(5)
    itemsize = np.dtype(NUMPY[dtype]).itemsize
    x = values(dtype, 4 * 6 * 5, rng).reshape(5, 6, 4).transpose(2, 1, 0)  # (outer 4, n 6, inner 5), strided
    out = np.zeros((4, INDICES.size, 5), NUMPY[dtype])
    host.launch(f"eg_index_take_{itemsize}", _index_args(host, out, x, INDICES, 6))
    want = from_ember(em.take(to_ember(np.ascontiguousarray(x), dtype), em.asarray(INDICES), axis=1))
    assert out.tobytes() == want.tobytes()
    vals = values(dtype, 4 * INDICES.size * 5, rng).reshape(4, INDICES.size, 5)
    for accumulate in (False, True):
        dst = np.ascontiguousarray(x)
        kernel = f"eg_index_put_add_{dtype}" if accumulate else f"eg_index_put_{itemsize}"
        host.launch(kernel, _index_args(host, dst, vals, INDICES, 6))
        ref = to_ember(np.ascontiguousarray(x), dtype)
        with np.errstate(all="ignore"):
            em.index_put(ref, em.asarray(INDICES), to_ember(vals, dtype), axis=1, accumulate=accumulate)
        assert dst.tobytes() == from_ember(ref).tobytes(), f"accumulate={accumulate}"


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8"])
def test_integer_matmul(host: HostKernels, dtype: str) -> None:
    assert f"eg_matmul_matmul_{dtype}" in gen_index.sources()["matmul"].kernels
    rng = np.random.default_rng(9)
    a = values(dtype, 3 * 5 * 7, rng).reshape(3, 7, 5).transpose(0, 2, 1)  # (3, 5, 7), strided
    b = values(dtype, 7 * 4, rng).reshape(1, 7, 4)  # broadcast over the batch
    out = np.zeros((3, 5, 4), NUMPY[dtype])
    args = host.ffi.new("eg_matmul_args *")
    args.out, args.a, args.b = host.pointer(out), host.pointer(a), host.pointer(b)
    args.batch, args.m, args.n, args.k = 3, 5, 4, 7
    args.out_strides, args.a_strides, args.b_strides = _strides(out), _strides(a), [0, *_strides(b)[1:]]
    host.launch(f"eg_matmul_matmul_{dtype}", args)
    want = em.matmul(em.asarray(np.ascontiguousarray(a)), em.asarray(np.broadcast_to(b, (3, 7, 4)).copy()))
    assert out.tolist() == want.numpy().tolist()


@pytest.mark.parametrize("dtype", [d.name for d in codegen.DTYPES])
def test_nonzero(host: HostKernels, dtype: str) -> None:
    """Two launches (counts per block, then the coordinates), blocks of many runs and of none,
    against ember-cpu's nonzero of a transposed view (-0.0 false, NaN true)."""
    rng = np.random.default_rng(13)
    x = values(dtype, 5 * 7 * 9, rng).reshape(9, 7, 5).transpose(2, 1, 0)
    x[:, 2:5] = np.zeros(1, x.dtype)  # a zero stretch: blocks that find nothing
    want = np.stack([t.numpy() for t in em.nonzero(to_ember(np.ascontiguousarray(x), dtype))], axis=1)
    out = np.zeros(want.shape, np.int64)
    chunk, block = 50, 8
    blocks = -(-x.size // chunk)
    counts = np.zeros(blocks, np.int64)
    args = host.ffi.new("eg_nonzero_args *")
    args.out, args.x, args.counts = host.pointer(out), host.pointer(x), host.ffi.cast("long long *",
                                                                                     host.pointer(counts))
    args.total, args.chunk, args.ndim = x.size, chunk, x.ndim
    args.shape, args.strides = list(x.shape), _strides(x)
    for mode in (0, 1):  # EG_NONZERO_COUNT, EG_NONZERO_WRITE
        args.mode = mode
        host.launch(f"eg_nonzero_nonzero_{dtype}", args, blocks, block)
    assert counts.sum() == len(want)
    assert out.tolist() == want.tolist()
