"""On a real GPU (skipped elsewhere with the reason): ember's own tiled GEMM kernel (``EMBER_GPU_GEMM=own``,
what ember-rocm runs without hipBLAS / rocBLAS) through ``a @ b``, against numpy float64 in every floating
dtype: shapes off the tiles' multiples, transposed operands, broadcast batches, and a 2048^2 product; the
bound is the one of plugins/gpu/tests/test_kernels_gemm.py (a k-step fma chain in the accumulation type,
one rounding to the dtype).  The host tests run the same source; this is where the GPU build is checked."""

from __future__ import annotations

import numpy as np
import pytest
from ember_gpu import blas

import ember_core as em

ACCUMULATION_EPS = {"float64": 2.0**-53, "complex128": 2.0**-53}  # the rest accumulate in float32
STORAGE_EPS = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float64": 2.0**-53, "complex128": 2.0**-53}
DTYPES = [em.float16, em.bfloat16, em.float32, em.float64, em.complex64, em.complex128]


@pytest.fixture(autouse=True)
def own_gemm():
    blas.set_gemm("own")
    yield
    blas.set_gemm("auto")


def _check(dtype, a: em.Tensor, b: em.Tensor) -> None:
    wide = em.complex128 if dtype.kind == "c" else em.float64
    got, xa, xb = (np.asarray(t.to_device("cpu").astype(wide)) for t in (a @ b, a, b))
    want = xa @ xb
    k = xa.shape[-1]
    bound = ((k + 2) * ACCUMULATION_EPS.get(dtype.name, 2.0**-24) * 2 * (np.abs(xa) @ np.abs(xb))
             + STORAGE_EPS.get(dtype.name, 2.0**-24) * np.abs(want) + 1e-300)
    assert (np.abs(got - want) <= bound).all(), f"{dtype}: {np.abs(got - want).max()} over the bound"


def _random(rng, shape, dtype) -> em.Tensor:
    values = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if dtype.kind == "c" else 0)
    return em.asarray(values).to_device("cuda:0").astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "a transposed", "b transposed", "b broadcast"])
def test_the_own_gemm_is_within_its_bound(dtype, layout):
    rng = np.random.default_rng(13)
    a, b = _random(rng, (3, 130, 70), dtype), _random(rng, (3, 70, 129), dtype)
    if layout == "a transposed":
        a = _random(rng, (3, 70, 130), dtype).mT
    elif layout == "b transposed":
        b = _random(rng, (3, 129, 70), dtype).mT
    elif layout == "b broadcast":
        b = em.broadcast_to(_random(rng, (70, 129), dtype), (3, 70, 129))
    _check(dtype, a, b)
    device = em.Device("cuda", 0)
    assert device.backend.hooks["ember_device_properties"](device)["gemm"].startswith("ember's tiled GEMM")


@pytest.mark.parametrize("dtype", [em.float32, em.float16], ids=str)
def test_a_2048_square_product(dtype):
    rng = np.random.default_rng(14)
    _check(dtype, _random(rng, (2048, 2048), dtype), _random(rng, (2048, 2048), dtype))
