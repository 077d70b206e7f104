"""ember-gpu's own tiled GEMM (csrc/eg_gemm.h) on the host, against numpy float64 (complex128) computed
from the very values the kernel reads: hypothesis over m, n, k (1, tile multiples and the sizes around
them), every operand's layout (row-major, transposed, gapped on both dims, flipped, a broadcast batch),
batch counts, alpha and beta, in every dtype the kernel serves.  Then ember_gpu.blas's OwnGemm on the fake
driver running these kernels: every layout test_blas.py gives the vendor's BLAS (transposes, leading
dimensions, broadcast batches, batch dims that do not coalesce), exact on small integers.

Tolerance: the error bound of a fused multiply-add chain of k steps in the accumulation type u (float32
for float16 / bfloat16 / float32 / complex64, float64 otherwise), ``(k + 2) * u * (|alpha| |a| @ |b| +
|beta| |c|)``, plus one rounding to c's dtype: a half type accumulated in itself fails it.  And what
the bound cannot show: the bits do not depend on the grid, beta 0 never reads c, k 0 writes beta c.
The store's epilogue (bias per column or per strided row, relu) against the same reference with |bias|
in the bound, the bias added before the one rounding (a float16 case where rounding twice differs),
relu keeping NaN and -0; and through blas.Blas.matmul it needs no pass of the op layer's."""

from __future__ import annotations

import numpy as np
import pytest
from ember_gpu import gen_gemm
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_blas import DTYPES as BLAS_DTYPES
from test_blas import LAYOUTS as BLAS_LAYOUTS
from test_blas import _matmul, _operand, _out, _read, _values
from test_kernels_host import HOST_DIR, NUMPY, HostKernels, _bf16_bits, _bf16_values

import ember_core.dtypes as dt

BLOCK = 256
DTYPES = list(gen_gemm.TILES)
ACCUMULATION_EPS = {"float16": 2.0**-24, "bfloat16": 2.0**-24, "float32": 2.0**-24, "complex64": 2.0**-24,
                    "float64": 2.0**-53, "complex128": 2.0**-53}
STORAGE_EPS = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "complex64": 2.0**-24,
               "float64": 2.0**-53, "complex128": 2.0**-53}
LAYOUTS = ("row", "column", "gapped", "flipped")


@pytest.fixture(scope="module")
def host() -> HostKernels:
    return HostKernels(HOST_DIR)


def test_the_kernels_are_every_floating_dtype_of_matmul() -> None:
    from ember_core.ops.registry import REGISTRY

    floating = {d.name for d in REGISTRY["matmul"].dtypes if d.name.startswith(("float", "bfloat", "complex"))}
    assert set(DTYPES) == floating
    assert gen_gemm.sources()["gemm"].kernels == [name for d in DTYPES for name in (f"eg_gemm_{d}",
                                                                                    f"eg_gemm_epilogue_{d}")]
    for tile in gen_gemm.TILES.values():  # one micro-tile per thread of an EG_BLOCK block
        assert (tile.bm // tile.tm) * (tile.bn // tile.tn) == BLOCK


# ---- operands ----------------------------------------------------------------------------------------


def _store(values: np.ndarray, dtype: str) -> np.ndarray:
    """values (float64 / complex128) rounded to dtype, in its storage form (bfloat16 as bits)."""
    if dtype == "bfloat16":
        return _bf16_bits(values.astype(np.float32))
    return values.astype(NUMPY[dtype])


def _wide(stored: np.ndarray, dtype: str) -> np.ndarray:
    """What the stored elements are, as float64 / complex128."""
    if dtype == "bfloat16":
        return _bf16_values(stored).astype(np.float64)
    return stored.astype(np.complex128 if dtype.startswith("complex") else np.float64)


def operand(rng: np.random.Generator, dtype: str, shape: tuple[int, int, int], layout: str,
            broadcast: bool = False, fill: float | None = None) -> np.ndarray:
    """A (batch, rows, cols) view in ``layout`` over a fresh buffer, in storage form; ``broadcast``:
    one matrix read for every batch entry (stride 0)."""
    batch, rows, cols = shape
    stored_batch = 1 if broadcast else batch
    if layout == "column":
        base_shape = (stored_batch, cols, rows)
    elif layout == "gapped":
        base_shape = (stored_batch, 2 * rows, 3 * cols)
    else:
        base_shape = (stored_batch, rows, cols)
    values = rng.standard_normal(base_shape)
    if dtype.startswith("complex"):
        values = values + 1j * rng.standard_normal(base_shape)
    if fill is not None:
        values[...] = fill
    base = _store(values, dtype)
    view = {"row": base, "column": base.swapaxes(1, 2), "gapped": base[:, ::2, ::3],
            "flipped": base[:, ::-1, :]}[layout]
    return np.broadcast_to(view, shape) if broadcast else view


def gemm(host: HostKernels, dtype: str, c: np.ndarray, a: np.ndarray, b: np.ndarray, alpha: complex = 1.0,
         beta: complex = 0.0, grid: int = 3, bias: np.ndarray | None = None, relu: bool = False,
         kernel: str | None = None) -> None:
    """c = alpha * a @ b + beta * c (+ bias, a view with c's shape; then relu) on the host kernel (by
    default the one with the epilogue when it is asked for), every operand where its view lies."""
    if not dtype.startswith("complex"):  # (a real dtype's scalars are real)
        alpha, beta = complex(alpha).real, complex(beta).real
    args = host.ffi.new("eg_gemm_args *")
    args.c, args.a, args.b = host.pointer(c), host.pointer(a), host.pointer(b)
    args.batch, args.m, args.n, args.k = c.shape[0], c.shape[1], c.shape[2], a.shape[2]
    for name, x in (("a", a), ("b", b), ("c", c)):
        getattr(args, f"{name}_strides")[0:3] = [s // x.itemsize for s in x.strides]
    args.alpha[0:2] = [complex(alpha).real, complex(alpha).imag]
    args.beta[0:2] = [complex(beta).real, complex(beta).imag]
    if bias is not None:
        args.bias = host.pointer(bias)
        args.bias_strides[0:3] = [s // bias.itemsize for s in bias.strides]
    args.relu = int(relu)
    if kernel is None:
        kernel = f"eg_gemm_epilogue_{dtype}" if bias is not None or relu else f"eg_gemm_{dtype}"
    host.launch(kernel, args, grid, BLOCK)


def check(dtype: str, got: np.ndarray, a: np.ndarray, b: np.ndarray, c_before: np.ndarray, alpha: complex,
          beta: complex, bias: np.ndarray | None = None, relu: bool = False) -> None:
    wa, wb, wc = _wide(a, dtype), _wide(b, dtype), _wide(c_before, dtype)
    if not dtype.startswith("complex"):
        alpha, beta = complex(alpha).real, complex(beta).real
    wbias = 0 if bias is None else _wide(bias, dtype)
    want = alpha * (wa @ wb) + (beta * wc if beta else 0) + wbias
    if relu:  # (1-Lipschitz: the bound below still holds)
        want = np.maximum(want, 0)
    size = abs(alpha) * (np.abs(wa) @ np.abs(wb)) + abs(beta) * np.abs(wc) + np.abs(wbias)
    k = a.shape[2]
    bound = (k + 2) * ACCUMULATION_EPS[dtype] * size * (2 if dtype.startswith("complex") else 1) \
        + STORAGE_EPS[dtype] * np.abs(want) + 1e-300
    error = np.abs(_wide(got, dtype) - want)
    bad = ~(error <= bound)
    assert not bad.any(), f"{dtype}: {error[bad][:4]} over the bound {bound[bad][:4]} (of {bad.sum()} elements)"


# ---- the property ------------------------------------------------------------------------------------

SIZES = st.one_of(st.sampled_from([1, 2, 63, 64, 65, 127, 128, 129]), st.integers(1, 140))


@settings(max_examples=24, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(dtype=st.sampled_from(DTYPES), m=SIZES, n=SIZES, k=st.one_of(st.sampled_from([1, 8, 9]), st.integers(1, 40)),
       batch=st.integers(1, 3), layouts=st.tuples(*[st.sampled_from(LAYOUTS)] * 3),
       broadcast=st.tuples(st.booleans(), st.booleans()), alpha=st.sampled_from([1.0, -0.5, 3.0 - 2.0j]),
       beta=st.sampled_from([0.0, 1.0, -0.75 + 0.5j]), seed=st.integers(0, 2**16))
@example(dtype="float32", m=1, n=1, k=1, batch=1, layouts=("row",) * 3, broadcast=(False, False), alpha=1.0,
         beta=0.0, seed=0)
@example(dtype="float64", m=129, n=65, k=17, batch=2, layouts=("column", "gapped", "column"),
         broadcast=(True, False), alpha=-0.5, beta=1.0, seed=1)
def test_gemm_equals_numpy_for_any_shape_layout_and_scalars(host, dtype, m, n, k, batch, layouts, broadcast, alpha,
                                                            beta, seed) -> None:
    rng = np.random.default_rng(seed)
    a = operand(rng, dtype, (batch, m, k), layouts[0], broadcast[0])
    b = operand(rng, dtype, (batch, k, n), layouts[1], broadcast[1])
    c = operand(rng, dtype, (batch, m, n), "flipped" if layouts[2] == "flipped" else layouts[2])
    before = c.copy()
    gemm(host, dtype, c, a, b, alpha, beta)
    check(dtype, c, a, b, before, alpha, beta)


# ---- what the bound cannot show ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_accumulates_in_float32(host, dtype) -> None:
    """4096 ones summed: a float16 accumulator stops at 2048 and a bfloat16 one at 256; float32's is exact."""
    rng = np.random.default_rng(0)
    a = operand(rng, dtype, (1, 3, 4096), "row", fill=1.0)
    b = operand(rng, dtype, (1, 4096, 5), "column", fill=1.0)
    c = operand(rng, dtype, (1, 3, 5), "row")
    gemm(host, dtype, c, a, b)
    assert (_wide(c, dtype) == 4096.0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_bits_do_not_depend_on_the_grid(host, dtype) -> None:
    rng = np.random.default_rng(1)
    a = operand(rng, dtype, (2, 150, 37), "row")
    b = operand(rng, dtype, (2, 37, 140), "column")
    results = []
    for grid in (1, 4, 64):
        c = np.zeros((2, 150, 140), a.dtype)
        gemm(host, dtype, c, a, b, grid=grid)
        results.append(c)
    assert all(np.array_equal(r.view(np.uint8), results[0].view(np.uint8)) for r in results)


@pytest.mark.parametrize("dtype", DTYPES)
def test_beta_zero_never_reads_c_and_k_zero_writes_beta_c(host, dtype) -> None:
    rng = np.random.default_rng(2)
    a = operand(rng, dtype, (1, 70, 5), "row")
    b = operand(rng, dtype, (1, 5, 130), "row")
    c = operand(rng, dtype, (1, 70, 130), "row", fill=np.nan)
    gemm(host, dtype, c, a, b, beta=0.0)
    assert not np.isnan(_wide(c, dtype)).any()
    before = operand(rng, dtype, (1, 70, 130), "column")
    c = before.copy()
    gemm(host, dtype, c, a[:, :, :0], b[:, :0, :], alpha=2.0, beta=-0.5)
    assert np.array_equal(_wide(c, dtype), _wide(_store(-0.5 * _wide(before, dtype), dtype), dtype))


def test_rows_and_columns_past_the_matrix_are_left_alone(host) -> None:
    """c is a window of a bigger array: the tiles' overhang (65 of 128 rows, 3 of 128 columns) writes nothing."""
    rng = np.random.default_rng(3)
    whole = np.full((1, 80, 20), 7.0, np.float32)
    window = whole[:, 5:70, 4:7]
    a = operand(rng, "float32", (1, 65, 9), "row")
    b = operand(rng, "float32", (1, 9, 3), "row")
    gemm(host, "float32", window, a, b)
    outside = np.ones(whole.shape, bool)
    outside[:, 5:70, 4:7] = False
    assert (whole[outside] == 7.0).all()
    check("float32", window, a, b, window, 1.0, 0.0)


# ---- the planned GEMMs of ember_gpu.blas on the kernel --------------------------------------------------


@pytest.fixture
def own(host, tmp_path, monkeypatch):
    """(Blas with no library but the own kernels, fake, device): the test vendor's runtime on a fake
    driver running the host kernels; its package ships a stand-in image file the fake ignores."""
    from ember_gpu import blas, ops
    from ember_gpu.fake import FakeGpu
    from ember_gpu.runtime import Runtime
    from testgpu_vendor import TEST_VENDOR

    kernels = tmp_path / "ember_own_gemm_images" / "kernels"
    kernels.mkdir(parents=True)
    (kernels.parent / "__init__.py").write_text("")
    index = {name: image for name, image in ops.kernel_index(HOST_DIR).items() if name.startswith("eg_gemm_")}
    for image in set(index.values()):
        (kernels / (image + TEST_VENDOR.image_suffix)).write_bytes(b"(the fake runs the host library)")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake = FakeGpu(TEST_VENDOR, memory_bytes=1 << 22, host_kernels=HOST_DIR)
    runtime = Runtime(TEST_VENDOR, "ember_own_gemm_images", opener=fake.open)

    def no_library(vendor):
        raise blas.BlasUnavailableError("no tgBLAS in this test")

    gemm = blas.Blas(runtime, opener=no_library)
    gemm.own = blas.OwnGemm(index)
    return gemm, fake, runtime.device(0)


@pytest.mark.parametrize("dtype", BLAS_DTYPES, ids=str)
@pytest.mark.parametrize("how_a,how_b", BLAS_LAYOUTS)
def test_every_layout_blas_plans_runs_on_the_kernel(own, dtype, how_a, how_b) -> None:
    gemm, fake, device = own
    result, out, expected = _matmul(gemm, fake, device, np.random.default_rng(7), dtype, (3, 5, 4), (3, 4, 6), how_a,
                                    how_b)
    assert result is not NotImplemented
    np.testing.assert_array_equal(_read(fake, out), expected if dtype.kind == "c" else expected.real)
    assert {launch.kernel for launch in fake.launches} == {f"eg_gemm_{dtype.name}"}


@pytest.mark.parametrize("shape_a,shape_b,how_a,how_b", [
    ((4, 2, 3), (4, 3, 5), "broadcast", "contiguous"), ((4, 2, 3), (4, 3, 5), "contiguous", "broadcast"),
    ((2, 3, 2, 3), (2, 3, 3, 5), "contiguous", "transposed"), ((1, 4), (4, 1), "contiguous", "contiguous"),
    ((5, 1), (1, 3), "transposed", "padded"), ((3, 4), (4, 2), "padded", "padded"),
])
def test_broadcast_batches_and_vectors_run_on_the_kernel(own, shape_a, shape_b, how_a, how_b) -> None:
    gemm, fake, device = own
    result, out, expected = _matmul(gemm, fake, device, np.random.default_rng(3), dt.float32, shape_a, shape_b,
                                    how_a, how_b)
    assert result is not NotImplemented
    np.testing.assert_array_equal(_read(fake, out), expected)


def test_batch_dims_that_do_not_coalesce_run_once_per_outer_entry(own) -> None:
    gemm, fake, device = own
    rng = np.random.default_rng(4)
    grid, other = _values(rng, 2 * 4 * 6, dt.float32), _values(rng, 2 * 3 * 12, dt.float32)
    view_a = grid.reshape(2, 4, 2, 3)[:, :3]  # (2, 3) entries of a (2, 4) grid of matrices
    view_b = other.reshape(2, 3, 3, 4)
    out = _out(device, (2, 3, 2, 4), dt.float32)
    fake.launches.clear()
    assert gemm.matmul(out, _operand(fake, device, view_a, grid, dt.float32),
                       _operand(fake, device, view_b, other, dt.float32)) is not NotImplemented
    np.testing.assert_array_equal(_read(fake, out), view_a @ view_b)
    assert len(fake.launches) == 2


# ---- the epilogue in the store ------------------------------------------------------------------------

REAL = [d for d in DTYPES if not d.startswith("complex")]


def bias_view(rng: np.random.Generator, dtype: str, shape: tuple[int, int, int], axis: str) -> np.ndarray:
    """A bias with c's shape: one value per column (linear's features), or per row read at stride 2
    (conv2d's output channels), broadcast over the rest by stride 0."""
    _, rows, cols = shape
    if axis == "column":
        return np.broadcast_to(_store(rng.standard_normal(cols), dtype), shape)
    per_row = _store(rng.standard_normal(2 * rows), dtype)[::2]
    return np.broadcast_to(per_row[:, None], shape)


@settings(max_examples=16, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(dtype=st.sampled_from(REAL), m=SIZES, n=SIZES, k=st.integers(1, 24), batch=st.integers(1, 2),
       axis=st.sampled_from(["column", "row"]), relu=st.booleans(), beta=st.sampled_from([0.0, 1.0]),
       seed=st.integers(0, 2**16))
@example(dtype="float32", m=129, n=65, k=9, batch=2, axis="row", relu=True, beta=0.0, seed=2)
def test_the_store_adds_the_bias_and_applies_relu(host, dtype, m, n, k, batch, axis, relu, beta, seed) -> None:
    rng = np.random.default_rng(seed)
    a = operand(rng, dtype, (batch, m, k), "row")
    b = operand(rng, dtype, (batch, k, n), "column")
    c = operand(rng, dtype, (batch, m, n), "row")
    bias = bias_view(rng, dtype, (batch, m, n), axis)
    before = c.copy()
    gemm(host, dtype, c, a, b, beta=beta, bias=bias, relu=relu)
    check(dtype, c, a, b, before, 1.0, beta, bias, relu)
    if relu:
        assert (_wide(c, dtype) >= 0).all()


def test_the_bias_is_added_before_the_one_rounding(host) -> None:
    """float16: a @ b = 1 + 2**-13 exactly in float32; with the bias -14 * 2**-13 the sum rounds to
    float16 once, not twice (rounding the product first gives a different float16)."""
    a = np.array([[[1.0, 1.0]]], np.float16)
    b = np.array([[[1.0], [2.0**-13]]], np.float16)
    bias = np.array([[[-14 * 2.0**-13]]], np.float16)
    c = np.zeros((1, 1, 1), np.float16)
    gemm(host, "float16", c, a, b, bias=bias, grid=1)
    once = np.float16(np.float32(1 + 2.0**-13) + np.float32(bias[0, 0, 0]))
    twice = np.float16(np.float32(np.float16(np.float32(1 + 2.0**-13))) + np.float32(bias[0, 0, 0]))
    assert once != twice
    assert c[0, 0, 0] == once


@pytest.mark.parametrize("dtype", REAL)
def test_relu_keeps_nan_and_negative_zero(host, dtype) -> None:
    """alpha -1 over zeros stores -0, which relu keeps (maximum(v, 0) as the composite); NaN stays NaN."""
    a = _store(np.array([[[0.0], [np.nan], [-1.0]]]), dtype)
    b = _store(np.array([[[1.0, 2.0]]]), dtype)
    c = _store(np.full((1, 3, 2), 7.0), dtype)
    gemm(host, dtype, c, a, b, alpha=-1.0, relu=True, grid=1)
    got = _wide(c, dtype)
    assert (got[0, 0] == 0).all() and np.signbit(got[0, 0]).all()
    assert np.isnan(got[0, 1]).all()
    assert (got[0, 2] == [1.0, 2.0]).all()


@pytest.mark.parametrize("relu", [False, True])
def test_blas_runs_the_epilogue_in_the_own_kernels_store(own, relu) -> None:
    """Blas.matmul with an epilogue on the own kernel: the bias (per column, broadcast over a batch
    dim that does not coalesce) and relu come out of eg_gemm alone; the op layer's passes never run."""
    from ember_gpu import blas

    gemm, fake, device = own
    rng = np.random.default_rng(8)
    grid, other = _values(rng, 2 * 4 * 6, dt.float32), _values(rng, 2 * 3 * 12, dt.float32)
    view_a = grid.reshape(2, 4, 2, 3)[:, :3]
    view_b = other.reshape(2, 3, 3, 4)
    base_bias = _values(rng, 4, dt.float32)
    view_bias = np.broadcast_to(base_bias, (2, 3, 2, 4))
    out = _out(device, (2, 3, 2, 4), dt.float32)

    def no_pass(*_: object) -> None:
        raise AssertionError("the own kernel's epilogue needs no pass")

    epilogue = blas.Epilogue(_operand(fake, device, view_bias, base_bias, dt.float32), relu, no_pass, no_pass)
    fake.launches.clear()
    assert gemm.matmul(out, _operand(fake, device, view_a, grid, dt.float32),
                       _operand(fake, device, view_b, other, dt.float32), epilogue) is not NotImplemented
    want = view_a @ view_b + view_bias
    np.testing.assert_array_equal(_read(fake, out), np.maximum(want, 0) if relu else want)
    assert {launch.kernel for launch in fake.launches} == {"eg_gemm_epilogue_float32"}


def test_the_plain_kernel_ignores_the_epilogue_fields(host) -> None:
    """eg_gemm_<dtype> stores a @ b whatever bias and relu say: only eg_gemm_epilogue_<dtype> reads them
    (a kernel of its own, so that a plain GEMM keeps its registers)."""
    rng = np.random.default_rng(9)
    a, b = operand(rng, "float32", (1, 5, 3), "row"), operand(rng, "float32", (1, 3, 4), "row")
    c = np.zeros((1, 5, 4), np.float32)
    bias = np.broadcast_to(np.float32(100.0), c.shape)
    gemm(host, "float32", c, a, b, bias=bias, relu=True, kernel="eg_gemm_float32")
    check("float32", c, a, b, c, 1.0, 0.0)
    assert (c < 0).any()  # (relu not applied either)


def test_a_build_without_the_epilogue_kernels_says_to_reinstall(own) -> None:
    from ember_gpu import blas

    from ember_core.errors import KernelError

    gemm, fake, device = own
    gemm.own = blas.OwnGemm({name: image for name, image in gemm.own.index.items() if "epilogue" not in name})
    rng = np.random.default_rng(10)
    base = _values(rng, 4, dt.float32)
    a = _operand(fake, device, base.reshape(2, 2), base, dt.float32)
    out = _out(device, (2, 2), dt.float32)
    epilogue = blas.Epilogue(None, True, None, None)
    fake.launches.clear()
    with pytest.raises(KernelError, match="eg_gemm_epilogue_float32: reinstall"):
        gemm.matmul(out, a, a, epilogue)
    assert not fake.launches
