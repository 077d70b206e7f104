"""ember-gpu's reduction kernels (csrc/eg_reduce.h) on the host, against ember-cpu: every op x
dtype in every mode (a thread per output, a block per output, two passes through a scratch
buffer), over contiguous rows and over several reduced dims with transposed, reversed and
broadcast strides; empty rows; NaN placement of max / min / argmax / argmin; the truth of -0.0
and NaN for any / all; and results that depend on the mode and the shape only, not on the grid."""

from __future__ import annotations

import numpy as np
import pytest
from ember_gpu import gen_reduce
from test_kernels_host import NUMPY, HostKernels, comparable, epsilon, from_ember, to_ember, values

import ember_core as em

BLOCK = 256  # the block modes' tree is EG_BLOCK threads
MODES = {"thread": 0, "block": 1, "parts": 2, "finish": 3}
CASES = [(op, d.name) for op in gen_reduce.OPS for d in gen_reduce.registry_dtypes(op)]


@pytest.fixture(scope="module")
def host() -> HostKernels:
    from test_kernels_host import HOST_DIR

    return HostKernels(HOST_DIR)


def reduce(host: HostKernels, kernel: str, view: np.ndarray, nred: int, mode: str, out_dtype: type,
           grid: int = 3, parts: int = 1) -> np.ndarray:
    """Run kernel over the numpy view (kept dims first, the last nred reduced); the output."""
    n_out = int(np.prod(view.shape[: view.ndim - nred]))
    out = np.zeros(n_out, out_dtype)
    args = host.ffi.new("eg_reduce_args *")
    args.out, args.x = host.pointer(out), host.pointer(view)
    scratch = np.zeros(n_out * parts * 16, np.uint8)
    args.scratch = host.pointer(scratch)
    args.n_out, args.n_red, args.parts = n_out, int(np.prod(view.shape[view.ndim - nred:])), parts
    args.ndim, args.nred = view.ndim, nred
    for d, (size, stride) in enumerate(zip(view.shape, view.strides)):
        args.shape[d], args.strides[d] = size, stride // view.itemsize
    if mode == "parts":
        args.mode = MODES["parts"]
        host.launch(kernel, args, grid, BLOCK)
        args.mode = MODES["finish"]
        host.launch(kernel, args, 2, 32)
    else:
        args.mode = MODES[mode]
        host.launch(kernel, args, grid, BLOCK if mode == "block" else 32)
    return out


def _data(op: str, dtype: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Values that exercise op: normal draws for floating sums, magnitudes near 1 for floating
    products (no overflow, no subnormals), the special values for the others (NaN, infinities,
    zeros, integer extremes)."""
    if op in ("sum", "prod") and dtype in ("float16", "bfloat16", "float32", "float64"):
        drawn = rng.uniform(0.8, 1.25, n) if op == "prod" else rng.standard_normal(n) * 4
        return _stored(drawn, dtype)
    if op == "prod" and dtype.startswith("complex"):  # magnitudes near 1: no underflow into subnormals
        return (rng.uniform(0.8, 1.25, n) * np.exp(2j * np.pi * rng.random(n))).astype(NUMPY[dtype])
    if op == "sum" and dtype.startswith("complex"):
        return (rng.standard_normal(n) * 4 + 4j * rng.standard_normal(n)).astype(NUMPY[dtype])
    x = values(dtype, n, rng)
    return rng.permutation(x)


def _stored(x: np.ndarray, dtype: str) -> np.ndarray:
    from test_kernels_host import _stored as stored

    return stored(x, dtype)


def _reference(op: str, dense: np.ndarray, dtype: str, nred: int) -> np.ndarray:
    t = to_ember(dense, dtype)
    axes = tuple(range(dense.ndim - nred, dense.ndim))
    with np.errstate(all="ignore"):
        if op in ("sum", "prod"):
            r = getattr(em, op)(t, axis=axes, dtype=t.dtype)
        elif op in ("argmax", "argmin"):
            r = getattr(em, op)(t.reshape((-1, dense.shape[-1])), axis=1)
        else:
            r = getattr(em, op)(t, axis=axes)
    return from_ember(r).reshape(-1)


def _check(op: str, dtype: str, got: np.ndarray, want: np.ndarray, dense: np.ndarray, nred: int, what: str) -> None:
    """Exact, but for floating sum / prod: any order of additions or multiplications is within
    (n - 1) eps of sum |x| (of |prod|) of the exact value, so two orders within twice that."""
    if op in ("sum", "prod") and dtype not in ("int8", "int16", "int32", "int64", "uint8"):
        rows = comparable(dense, dtype).reshape(-1, int(np.prod(dense.shape[dense.ndim - nred:])))
        n = rows.shape[1]
        magnitude = np.abs(rows.astype(np.complex128)).sum(axis=1) if op == "sum" else np.abs(
            comparable(want, dtype).astype(np.complex128))
        bound = 2 * max(n - 1, 1) * epsilon(dtype) * magnitude
        if dtype in ("float16", "bfloat16"):  # float32 accumulation, then one rounding to the dtype
            bound = bound * np.finfo(np.float32).eps / epsilon(dtype) + epsilon(dtype) * np.abs(comparable(want, dtype))
        g, w = comparable(got, dtype).astype(np.complex128), comparable(want, dtype).astype(np.complex128)
        with np.errstate(invalid="ignore"):
            ok = (g == w) | (np.abs(g - w) <= bound)  # equal infinities (an overflowing product) too
        assert ok.all(), f"{what}: {got[~ok][:5]} != ember-cpu {want[~ok][:5]}"
        return
    g, w = comparable(got, dtype) if op in ("max", "min") else got, comparable(want, dtype) if op in (
        "max", "min") else want
    same = (g == w) | (np.isnan(g) & np.isnan(w)) if g.dtype.kind == "f" else g == w
    assert same.all(), f"{what}: at {np.flatnonzero(~same)[:5]}: {g[~same][:5]} != ember-cpu {w[~same][:5]}"


def _out_dtype(op: str, dtype: str) -> type:
    return {"any": np.bool_, "all": np.bool_, "argmax": np.int64, "argmin": np.int64}.get(op, NUMPY[dtype])


@pytest.mark.parametrize(("op", "dtype"), CASES, ids=[f"{op}-{d}" for op, d in CASES])
def test_reduction_modes_match_ember_cpu(host: HostKernels, op: str, dtype: str) -> None:
    rng = np.random.default_rng(sum(map(ord, op + dtype)))
    kernel = f"eg_reduce_{op}_{dtype}"
    out_dtype = _out_dtype(op, dtype)
    for mode, shape in (("thread", (37, 9)), ("block", (5, 700)), ("parts", (2, 3000))):
        x = _data(op, dtype, int(np.prod(shape)), rng).reshape(shape)
        if op in ("max", "min", "argmax", "argmin") and dtype in ("float16", "bfloat16", "float32", "float64"):
            x[0, [2, 5]] = _stored(np.array([np.nan, np.nan]), dtype)  # a row with NaN
        parts = 4 if mode == "parts" else 1
        got = reduce(host, kernel, x, 1, mode, out_dtype, parts=parts)
        _check(op, dtype, got, _reference(op, x, dtype, 1), x, 1, f"{kernel} {mode}")
        if mode != "thread":  # the grid changes nothing
            again = reduce(host, kernel, x, 1, mode, out_dtype, grid=1, parts=parts)
            assert again.tobytes() == got.tobytes(), f"{kernel} {mode}: the grid changed the result"
    if op in ("argmax", "argmin"):  # the last dim only
        return
    # several reduced dims of a strided view: transposed, reversed, broadcast
    base = _data(op, dtype, 4 * 6 * 9, rng).reshape(4, 6, 9)
    view = base.transpose(2, 0, 1)[::-1, :, ::-1]  # kept 9, reduced (4, 6) with odd strides
    view = np.broadcast_to(view[:, :, None, :], (9, 4, 3, 6))  # a broadcast reduced dim
    for mode in ("thread", "block"):
        got = reduce(host, kernel, view, 3, mode, out_dtype)
        _check(op, dtype, got, _reference(op, np.ascontiguousarray(view), dtype, 3), view, 3,
               f"{kernel} {mode} strided")


@pytest.mark.parametrize("op", ["sum", "prod", "any", "all"])
def test_empty_rows_give_the_identity(host: HostKernels, op: str) -> None:
    dtype = "float32"
    x = np.zeros((4, 0), np.float32)
    got = reduce(host, f"eg_reduce_{op}_{dtype}", x, 1, "thread", _out_dtype(op, dtype))
    assert got.tolist() == [{"sum": 0, "prod": 1, "any": False, "all": True}[op]] * 4


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "complex64"])
def test_any_all_truth(host: HostKernels, dtype: str) -> None:
    """-0.0 is false, NaN is true (float16 -0.0 is the bits 0x8000)."""
    x = _stored(np.array([[0.0, -0.0, 0.0], [-0.0, np.nan, 0.0], [1e-3, 1.0, 2.0]]), dtype) \
        if not dtype.startswith("complex") else np.array([[0, -0.0, 0], [0, complex(0, np.nan), 0], [1j, 1, 2]],
                                                         NUMPY[dtype])
    for op, want in (("any", [False, True, True]), ("all", [False, False, True])):
        got = reduce(host, f"eg_reduce_{op}_{dtype}", x, 1, "thread", np.bool_)
        assert got.tolist() == want == _reference(op, x, dtype, 1).tolist(), f"{op} {dtype}"


def test_argmax_takes_the_first_of_ties_and_nan(host: HostKernels) -> None:
    x = np.array([[1.0, 3.0, 3.0, 2.0], [1.0, np.nan, 5.0, np.nan], [-1.0, -1.0, -1.0, -1.0]], np.float32)
    x = np.repeat(x, 200, axis=1)  # long rows: the block's threads hold ties of each other
    for mode in ("thread", "block", "parts"):
        got = reduce(host, "eg_reduce_argmax_float32", x, 1, mode, np.int64, parts=3 if mode == "parts" else 1)
        assert got.tolist() == [200, 200, 0], mode
        got = reduce(host, "eg_reduce_argmin_float32", x, 1, mode, np.int64, parts=3 if mode == "parts" else 1)
        assert got.tolist() == [0, 200, 0], mode


def test_accumulator_sizes_cover_the_scratch() -> None:
    assert gen_reduce.accumulator_size("sum", "float16") == 4
    assert gen_reduce.accumulator_size("prod", "int8") == 4
    assert gen_reduce.accumulator_size("sum", "complex128") == 16
    assert gen_reduce.accumulator_size("max", "float16") == 4
    assert max(gen_reduce.accumulator_size(op, d) for op, d in CASES) == 16
