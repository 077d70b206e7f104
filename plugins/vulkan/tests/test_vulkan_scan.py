"""cumulative_sum / cumulative_prod natively on vulkan:0 (scan.comp) against numpy's cumsum /
cumprod in float64: every dtype, every axis, strided and flipped inputs, include_initial, empty
and 0-d inputs, and int64 wrap-around as numpy."""

from __future__ import annotations

import numpy as np
import pytest
from ember_vulkan import catalog
from tolerances import assert_close, eps, make_tensor

import ember_core as em

RNG = np.random.default_rng(31)


def _values(dtype: str, shape: tuple[int, ...], op: str) -> np.ndarray:
    if dtype == "bool":
        return RNG.integers(0, 2, shape).astype(bool)
    if op == "cumulative_prod":  # near 1 so that products stay finite and exact enough
        values = RNG.choice([-1.0, 0.5, 1.0, 1.5, 2.0], shape)
    else:
        values = RNG.uniform(-10, 10, shape)
    return values.astype(dtype) if dtype in catalog.FLOATS else np.round(values).astype(dtype)


def _atol(dtype: str) -> float | None:
    """Running sums cancel: up to 37 float32 additions of |x| <= 10, then float16's rounding."""
    if dtype not in catalog.FLOATS:
        return None
    return 2 * 37 * 10 * eps("float32") + (10 * eps("float16") if dtype == "float16" else 0)


def _reference(op: str, x: np.ndarray, axis: int) -> np.ndarray:
    wide = x.astype(np.float64) if x.dtype.kind == "f" else x.astype(np.int64)
    return np.cumsum(wide, axis=axis) if op == "cumulative_sum" else np.cumprod(wide, axis=axis)


@pytest.mark.parametrize("dtype", catalog.DTYPES)
@pytest.mark.parametrize("op", catalog.SCAN)
def test_scan_every_axis_and_layout(vk, op: str, dtype: str) -> None:
    data = _values(dtype, (4, 5, 37), op)
    for layout in ("contiguous", "transposed", "strided", "flipped"):
        x = make_tensor(data, dtype, layout)
        for axis in (0, 1, 2, -1):
            got = getattr(em, op)(x, axis=axis)
            expected = _reference(op, np.asarray(x.to_device("cpu")), axis)
            assert_close(got, expected, catalog.scan_dtype(dtype), atol=_atol(dtype))


@pytest.mark.parametrize("op", catalog.SCAN)
def test_scan_include_initial_empty_and_0d(vk, op: str) -> None:
    x = em.asarray(np.float32([1.5, 2.0, -3.0]), device="vulkan")
    got = np.asarray(getattr(em, op)(x, include_initial=True).to_device("cpu"))
    first = 0.0 if op == "cumulative_sum" else 1.0
    np.testing.assert_array_equal(got, np.concatenate([[first], _reference(op, np.float32([1.5, 2.0, -3.0]), 0)]))
    empty = getattr(em, op)(em.asarray(np.zeros((3, 0), np.float32), device="vulkan"), axis=1)
    assert empty.shape == (3, 0)
    scalar = getattr(em, op)(em.asarray(np.float32(2.5), device="vulkan"))
    assert np.asarray(scalar.to_device("cpu")).reshape(-1).tolist() == [2.5]


def test_int64_sum_wraps_like_numpy(vk) -> None:
    data = np.array([2**62, 2**62, 2**62, -5], dtype=np.int64)
    got = em.cumulative_sum(em.asarray(data, device="vulkan"))
    np.testing.assert_array_equal(np.asarray(got.to_device("cpu")), np.cumsum(data))


@pytest.mark.parametrize("op", catalog.SCAN)
def test_a_requested_dtype_without_a_shader_is_declined_not_failed(vk, op: str) -> None:
    """scan shaders exist for numpy's result dtypes only: bool or int32 asking for int32 results go
    to the next provider (a hypothesis draw found the missing scan.Aint32.Oint32)."""
    data = np.array([True, False, True, True])
    with em.fallback_policy("allow"):  # this suite's policy is 'error': the host serves what vulkan declines
        got = getattr(em, op)(em.asarray(data, device="vulkan"), dtype=em.int32)
    assert got.dtype == em.int32
    np.testing.assert_array_equal(np.asarray(got.to_device("cpu")), _reference(op, data, 0).astype(np.int32))


@pytest.mark.parametrize("op", catalog.SCAN)
def test_rows_longer_than_a_loop_may_run_on_llvmpipe(vk, op: str) -> None:
    """llvmpipe ends any shader loop after 65535 iterations (one invocation per row gave zeros past
    element 65533): longer rows run in chunks, chunk totals first."""
    length = 2 * 32768 + 4465  # three chunks, the last one short
    ints = np.where(np.arange(length) % 7 == 0, -1, 1).astype(np.int32).reshape(1, -1).repeat(2, axis=0)
    got = getattr(em, op)(em.asarray(ints, device="vulkan"), axis=1)
    np.testing.assert_array_equal(np.asarray(got.to_device("cpu")), _reference(op, ints, 1))
    floats = RNG.uniform(0.5, 1.5, (2, length)).astype(np.float32)
    if op == "cumulative_sum":
        got = em.cumulative_sum(em.asarray(floats, device="vulkan"), axis=1)
        assert_close(got, _reference(op, floats, 1), "float32", atol=1e-5 * length)
