"""On a real GPU with cuBLAS (skipped elsewhere with the reason): ember_gpu.blas's matmul against
numpy for every dtype and the layouts the core passes, from two threads, and TF32 off by default
(float32 accurate to float32) but on when switched on."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from ember_cuda.plugin import PLUGIN
from ember_gpu import blas

import ember_core as em


@pytest.fixture(scope="module")
def kernel():
    found = blas.Blas(PLUGIN.runtime)
    try:
        found.library()
    except blas.BlasUnavailableError as exc:
        pytest.skip(str(exc))
    yield found
    blas.set_tf32(False)


def _on_cuda(values: np.ndarray, dtype) -> em.Tensor:
    return em.asarray(values, dtype=dtype).to_device("cuda:0")


def _host(t: em.Tensor) -> np.ndarray:
    return np.asarray(t.to_device("cpu"))


def _integers(rng, shape, complex_: bool) -> np.ndarray:
    """Small integers: every product and sum is exact in every dtype, so results compare exactly."""
    values = rng.integers(-2, 3, shape).astype(np.float64)
    return values + 1j * rng.integers(-2, 3, shape) if complex_ else values


@pytest.mark.parametrize("dtype", [em.float16, em.bfloat16, em.float32, em.float64, em.complex64, em.complex128],
                         ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "a transposed", "b transposed", "b broadcast"])
def test_every_dtype_and_layout_is_exact_on_small_integers(kernel, dtype, layout):
    rng = np.random.default_rng(11)
    complex_ = dtype in (em.complex64, em.complex128)
    a_values, b_values = _integers(rng, (4, 33, 64), complex_), _integers(rng, (4, 64, 17), complex_)
    a = _on_cuda(a_values.swapaxes(-1, -2).copy(), dtype).mT if layout == "a transposed" else _on_cuda(a_values, dtype)
    if layout == "b transposed":
        b = _on_cuda(b_values.swapaxes(-1, -2).copy(), dtype).mT
    elif layout == "b broadcast":
        b_values = np.broadcast_to(b_values[0], b_values.shape)
        b = em.broadcast_to(_on_cuda(b_values[0], dtype), (4, 64, 17))
    else:
        b = _on_cuda(b_values, dtype)
    out = em.empty((4, 33, 17), dtype=dtype, device="cuda:0")
    assert kernel.matmul(out, a, b) is not NotImplemented
    np.testing.assert_array_equal(_host(out), a_values @ b_values)


def test_each_thread_gets_its_own_handle_on_the_same_stream(kernel):
    a = _on_cuda(np.arange(12.0).reshape(3, 4), em.float64)
    results = {}

    def work(name: str) -> None:
        out = em.empty((3, 3), dtype=em.float64, device="cuda:0")
        kernel.matmul(out, a, a.mT)
        results[name] = _host(out)

    threads = [threading.Thread(target=work, args=(str(i),)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = np.arange(12.0).reshape(3, 4) @ np.arange(12.0).reshape(3, 4).T
    assert len(results) == 4 and all((r == expected).all() for r in results.values())


def test_float32_is_float32_unless_tf32_is_switched_on(kernel):
    rng = np.random.default_rng(0)
    a_values, b_values = rng.standard_normal((1024, 1024)), rng.standard_normal((1024, 1024))
    a, b = _on_cuda(a_values, em.float32), _on_cuda(b_values, em.float32)
    reference = a_values.astype(np.float32).astype(np.float64) @ b_values.astype(np.float32).astype(np.float64)
    errors = []
    for enabled in (False, True):
        blas.set_tf32(enabled)
        out = em.empty((1024, 1024), dtype=em.float32, device="cuda:0")
        kernel.matmul(out, a, b)
        errors.append(np.abs(_host(out) - reference).max() / np.abs(reference).max())
    blas.set_tf32(False)
    off, on = errors
    assert off < 1e-5, f"TF32 off: relative error {off:.2e}, more than float32 arithmetic gives"
    assert on > 10 * off, f"TF32 on: relative error {on:.2e}, no larger than with it off ({off:.2e})"
