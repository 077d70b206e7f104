"""ember-cuda's cuBLAS table against NVIDIA's headers (library_types.h ships with every CUDA toolkit;
cublas_api.h with the toolkit's cuBLAS or the nvidia-cublas wheel: skipped where absent), and the
matmul kernel on ember tensors of the installed plugin on the fake driver and the fake cuBLAS."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from ember_cuda.vendor import CUBLAS, CUDA
from ember_gpu import blas
from ember_gpu.fake_blas import FakeBlas

import ember_core as em

pytestmark = pytest.mark.no_device


def _header(name: str) -> str:
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    places = [Path(home, "include") for home in homes if home]
    places += [Path(entry or ".", "nvidia", "cu13", "include") for entry in sys.path]  # the nvidia-cublas wheel
    for place in places:
        if (place / name).is_file():
            return (place / name).read_text()
    pytest.skip(f"no {name} on this machine (a CUDA toolkit with cuBLAS, or pip install nvidia-cublas)")


def _enums(text: str) -> dict[str, dict[str, int]]:
    """Every ``typedef enum [tag] {...} name;`` of a header: name -> {member: value}."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
    enums = {}
    for body, name in re.findall(r"typedef enum\s*\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        values, next_value = {}, 0
        for item in filter(None, (part.strip() for part in body.split(","))):
            member, _, value = (p.strip() for p in item.partition("="))
            next_value = values[value] if value in values else int(value, 0) if value else next_value
            values[member] = next_value
            next_value += 1
        enums[name] = values
    return enums


def test_the_data_types_are_library_types_hs():
    data_types = _enums(_header("library_types.h"))["cudaDataType"]
    names = {"float16": "CUDA_R_16F", "bfloat16": "CUDA_R_16BF", "float32": "CUDA_R_32F", "float64": "CUDA_R_64F",
             "complex64": "CUDA_C_32F", "complex128": "CUDA_C_64F"}
    assert {dtype: data_types[name] for dtype, name in names.items()} == dict(CUBLAS.data_types)


def test_the_enums_and_statuses_are_cublas_api_hs():
    header = _header("cublas_api.h")
    enums = _enums(header)
    compute = enums["cublasComputeType_t"]
    assert dict(CUBLAS.compute_types) == {"float32": compute["CUBLAS_COMPUTE_32F"],
                                          "float32_tf32": compute["CUBLAS_COMPUTE_32F_FAST_TF32"],
                                          "float64": compute["CUBLAS_COMPUTE_64F"]}
    operations = enums["cublasOperation_t"]
    assert dict(CUBLAS.operations) == {"n": operations["CUBLAS_OP_N"], "t": operations["CUBLAS_OP_T"]}
    assert CUBLAS.default_math == enums["cublasMath_t"]["CUBLAS_DEFAULT_MATH"]
    assert CUBLAS.default_algo == enums["cublasGemmAlgo_t"]["CUBLAS_GEMM_DEFAULT"]
    statuses = enums["cublasStatus_t"]
    assert {info.name: code for code, info in CUBLAS.errors.items()} == \
        {name: code for name, code in statuses.items() if name != "CUBLAS_STATUS_SUCCESS"}  # every failure named
    assert CUBLAS.out_of_memory == statuses["CUBLAS_STATUS_ALLOC_FAILED"]
    major = re.search(r"#define CUBLAS_VER_MAJOR (\d+)", header).group(1)
    assert CUBLAS.libraries == (f"libcublas.so.{major}",) and CUBLAS.companions == (f"libcublasLt.so.{major}",)


def test_every_symbol_is_declared_with_the_neutral_cdefs_parameters():
    header = re.sub(r"/\*.*?\*/|//[^\n]*", "", _header("cublas_api.h"), flags=re.S)
    assert set(CUBLAS.symbols) == set(blas.SIGNATURES)
    for name, symbol in CUBLAS.symbols.items():
        result, params = blas.SIGNATURES[name]
        found = re.search(rf"CUBLASAPI\s+([\w\s*]+?)\s*CUBLASWINAPI\s+{symbol}\s*\((.*?)\);", header, flags=re.S)
        assert found is not None, f"{symbol} is not declared in cublas_api.h"
        assert (found.group(1).replace(" ", "") == "cublasStatus_t") == (result == "int"), symbol
        assert found.group(2).count(",") == params.count(","), symbol
        if name == "gemm_strided_batched":  # the 64-bit GEMM: sizes and leading dimensions are int64_t
            assert len(re.findall(r"\bint64_t", found.group(2))) == len(re.findall(r"\bint64_t", params)) == 7


def test_the_cuda_vendor_names_cublas():
    assert CUDA.blas is CUBLAS
    assert 'pip install "ember-cuda[cu13]"' in CUBLAS.install_hint and CUBLAS.wheel_dirs == ("nvidia/cu13/lib",)


# ---- the kernel on ember tensors (fake driver, fake cuBLAS) ----------------------------------------

@pytest.fixture
def cuda_blas(fake_cuda):
    from ember_cuda.plugin import PLUGIN

    fake = FakeBlas(fake_cuda)
    yield blas.Blas(PLUGIN.runtime, opener=fake.open), fake
    blas.set_tf32(False)


def _on_cuda(values: np.ndarray, dtype) -> em.Tensor:
    return em.asarray(values, dtype=dtype).to_device("cuda:0")


@pytest.mark.parametrize("dtype", [em.float16, em.bfloat16, em.float32, em.float64, em.complex64, em.complex128],
                         ids=str)
def test_matmul_of_ember_tensors_equals_numpy(cuda_blas, dtype):
    kernel, fake = cuda_blas
    rng = np.random.default_rng(5)
    complex_ = dtype in (em.complex64, em.complex128)
    a_values = rng.integers(-2, 3, (3, 4, 5)) + (1j * rng.integers(-2, 3, (3, 4, 5)) if complex_ else 0)
    b_values = rng.integers(-2, 3, (6, 5)) + (1j * rng.integers(-2, 3, (6, 5)) if complex_ else 0)
    a = _on_cuda(a_values, dtype)
    b = em.broadcast_to(_on_cuda(b_values, dtype).mT, (3, 5, 6))  # transposed, broadcast over the batch
    out = em.empty((3, 4, 6), dtype=dtype, device="cuda:0")
    assert kernel.matmul(out, a, b) is not NotImplemented
    np.testing.assert_array_equal(np.asarray(out.to_device("cpu")), a_values @ b_values.T)
    [call] = fake.gemms
    assert (call.stride_a, call.batch) == (0, 3) and call.trans_a == CUBLAS.operations["t"]


def test_tf32_is_off_by_default_and_the_switch_reaches_cublas_and_the_device_properties(cuda_blas):
    kernel, fake = cuda_blas
    a = _on_cuda(np.ones((2, 2)), em.float32)
    properties = em.Device("cuda").backend.hooks["ember_device_properties"]
    for enabled in (False, True):
        blas.set_tf32(enabled)
        kernel.matmul(em.empty((2, 2), dtype=em.float32, device="cuda:0"), a, a)
        assert properties(em.Device("cuda", 0))["tf32"] is enabled  # what conformance reports record
    assert [call.compute_type for call in fake.gemms] == [CUBLAS.compute_types["float32"],
                                                          CUBLAS.compute_types["float32_tf32"]]


def test_without_cublas_a_matmul_says_how_to_install_it():
    try:
        blas.open_blas(CUDA)
    except blas.BlasUnavailableError as exc:
        assert str(exc).startswith("ember-cuda: float matmul needs cuBLAS (libcublas.so.13), which is neither on the "
                                   "loader path nor in site-packages/nvidia/cu13/lib")
        assert str(exc).endswith('pip install "ember-cuda[cu13]" (it adds the nvidia-cublas wheel), or install the '
                                 "CUDA 13 toolkit and put its lib64 directory on LD_LIBRARY_PATH")
        assert isinstance(exc, em.UnsupportedOpError)
    else:
        pytest.skip("cuBLAS is installed here")
