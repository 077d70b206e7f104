"""ember-rocm's float matmul: hipBLAS, then rocBLAS, then ember's own tiled GEMM kernel.  The probe order
(every soname of hipBLAS before rocBLAS's, the first that loads wins, the message naming both when none
does); the tables' calling conventions on the fake BLAS (hipBLAS's int-sized GEMM with hipblasDatatype_t
enums, rocBLAS's with d = c); and the own kernel on the fake driver (wave 64 and 32) when neither loads or
when EMBER_GPU_GEMM=own asks, which the device property "gemm" (printed by ember doctor) names."""

from __future__ import annotations

import cffi
import numpy as np
import pytest
from ember_gpu import blas
from ember_gpu.fake_blas import FakeBlas
from ember_rocm.blas import HIPBLAS, ROCBLAS
from ember_rocm.vendor import HIP

import ember_core as em

pytestmark = pytest.mark.no_device

SONAMES = ["libhipblas.so.2", "libhipblas.so.1", "libhipblas.so.0", "librocblas.so.4", "librocblas.so.3",
           "librocblas.so.0"]


def test_hipblas_is_tried_before_rocblas_and_the_enums_are_rocms() -> None:
    assert blas.tables(HIP) == (HIPBLAS, ROCBLAS)
    assert [soname for table in blas.tables(HIP) for soname, _ in blas.candidates(table, [])] == SONAMES
    for table in (HIPBLAS, ROCBLAS):  # hipblasDatatype_t / rocblas_datatype, HIPBLAS_OP_* / rocblas_operation_*
        assert table.data_types == {"float16": 150, "bfloat16": 168, "float32": 151, "float64": 152,
                                    "complex64": 154, "complex128": 155}
        assert table.operations == {"n": 111, "t": 112}
        cffi.FFI().cdef(blas.cdef_for(table))  # the binding parses
    assert (HIPBLAS.default_algo, ROCBLAS.default_algo) == (160, 0)  # HIPBLAS_GEMM_DEFAULT, rocblas_gemm_algo_standard
    assert (HIPBLAS.api, ROCBLAS.api) == ("hipblas", "rocblas")


@pytest.fixture
def dlopen_log(monkeypatch):
    """cffi's dlopen, recording what it is asked for: each soname fails but the one a test lets load."""
    tried: list[str] = []
    loads: dict[str, object] = {}

    def dlopen(ffi, name, *args):
        tried.append(name)
        if name in loads:
            return loads[name]
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(cffi.FFI, "dlopen", dlopen)
    return tried, loads


def test_without_either_library_every_soname_is_tried_and_the_message_names_both(dlopen_log) -> None:
    tried, _ = dlopen_log
    with pytest.raises(blas.BlasUnavailableError) as caught:
        blas.open_blas(HIP)
    assert tried == SONAMES
    message = str(caught.value)
    assert "hipBLAS (libhipblas.so.2 or libhipblas.so.1 or libhipblas.so.0) or rocBLAS" in message
    assert "not on the loader path" in message and "own GEMM kernel" in message


def test_the_first_library_that_loads_serves(dlopen_log, fake_rocm) -> None:
    tried, loads = dlopen_log
    loads["librocblas.so.3"] = FakeBlas(fake_rocm, ROCBLAS).lib
    library = blas.open_blas(HIP)
    assert library.table is ROCBLAS and library.source == "librocblas.so.3"
    assert tried == SONAMES[:5]


# ---- float matmul on the fake driver --------------------------------------------------------------


def _matmul_checks(dtype) -> None:
    """a @ b on rocm:0 for a transposed, a batched and a broadcast case, against numpy in float64."""
    rng = np.random.default_rng(5)
    wide = em.complex128 if dtype.kind == "c" else em.float64
    cases = [((70, 33), (33, 9), False), ((2, 5, 131), (131, 3), True), ((3, 1, 4), (3, 4, 129), False)]
    for shape_a, shape_b, transpose_a in cases:
        a, b = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
        x = em.asarray(a.swapaxes(-1, -2).copy() if transpose_a else a, device="rocm:0").astype(dtype)
        x = x.mT if transpose_a else x
        y = em.asarray(b, device="rocm:0").astype(dtype)
        got, xs, ys = ((t.to_device("cpu").astype(wide).numpy()) for t in (x @ y, x, y))
        want = xs @ ys
        scale = np.abs(a) @ np.abs(b)
        assert np.allclose(got, want, rtol=0, atol=float(4e-3 if dtype.itemsize == 2 else 1e-5) * scale.max())


def _reset_blas(opener) -> None:
    from ember_rocm.plugin import PLUGIN

    blas.blas_for(PLUGIN.runtime).reset(opener)


def _no_library(vendor):
    raise blas.BlasUnavailableError("no hipBLAS or rocBLAS in this test")


def _gemm_property() -> str:
    device = em.Device("rocm", 0)
    return device.backend.hooks["ember_device_properties"](device)["gemm"]


def test_hipblas_serves_with_its_own_enums(fake_rocm) -> None:
    fake_blas = FakeBlas(fake_rocm, HIPBLAS)
    _reset_blas(fake_blas.open)
    _matmul_checks(em.float32)
    _matmul_checks(em.complex64)
    assert fake_blas.gemms and {g.compute_type for g in fake_blas.gemms} == {151, 154}
    assert {g.algo for g in fake_blas.gemms} == {160}
    assert not any(launch.kernel.startswith("eg_gemm_") for launch in fake_rocm.launches)
    assert _gemm_property() == "hipBLAS"


def test_rocblas_serves_writing_d_over_c(fake_rocm) -> None:
    fake_blas = FakeBlas(fake_rocm, ROCBLAS)
    _reset_blas(fake_blas.open)
    _matmul_checks(em.bfloat16)
    assert fake_blas.gemms and {g.algo for g in fake_blas.gemms} == {0}
    assert _gemm_property() == "rocBLAS"


@pytest.mark.parametrize("dtype", [em.float16, em.bfloat16, em.float32, em.float64, em.complex64, em.complex128],
                         ids=str)
def test_without_a_library_the_own_gemm_kernel_serves(fake_rocm, dtype) -> None:
    _reset_blas(_no_library)
    fake_rocm.launches.clear()
    _matmul_checks(dtype)
    assert {launch.kernel for launch in fake_rocm.launches} >= {f"eg_gemm_{dtype.name}"}
    assert _gemm_property() == "ember's tiled GEMM (eg_gemm): hipBLAS / rocBLAS not found"


def test_ember_gpu_gemm_own_runs_the_kernel_even_with_hipblas(fake_rocm) -> None:
    fake_blas = FakeBlas(fake_rocm, HIPBLAS)
    _reset_blas(fake_blas.open)
    blas.set_gemm("own")
    try:
        _matmul_checks(em.float32)
        assert not fake_blas.gemms
        assert _gemm_property() == "ember's tiled GEMM (eg_gemm), as EMBER_GPU_GEMM=own asks"
        blas.set_gemm("vendor")
        _reset_blas(_no_library)
        with pytest.raises(blas.BlasUnavailableError, match="no hipBLAS or rocBLAS"):
            _matmul_checks(em.float32)
    finally:
        blas.set_gemm("auto")


def test_gemms_past_the_32_bit_sizes_go_to_the_own_kernel(fake_rocm) -> None:
    from ember_rocm.plugin import PLUGIN

    _reset_blas(FakeBlas(fake_rocm, HIPBLAS).open)
    em.zeros(1, device="rocm")  # (the op layer tells the BLAS which GEMM kernels the build holds)
    gemm = blas.blas_for(PLUGIN.runtime)  # only the choice is asked: no GEMM runs
    huge = blas.Gemm("n", "n", 2**31, 1, 1, 2**31, 0, 1, 0, 2**31, 0, 1)
    assert gemm.serving("float32", blas.Gemm("n", "n", 4, 4, 4, 4, 0, 4, 0, 4, 0, 1)) is not None
    assert gemm.serving("float32", huge) is None


def test_a_bad_gemm_choice_names_the_variable_and_the_choices() -> None:
    from ember_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"set_gemm='cublas': use auto for .*; own for .*; vendor for"):
        blas.set_gemm("cublas")
    assert blas.gemm_choice() == "auto"
