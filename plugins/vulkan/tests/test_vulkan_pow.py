"""pow natively on vulkan:0: floats (pow.comp, double precision inside) against numpy's float64 pow
rounded once, C's special cases bit for bit (signed zeros, infinities, NaN, negative bases, subnormal
bases); integers against ember-cpu (wrap-around, negative exponents). Grids plus hypothesis draws."""

from __future__ import annotations

import numpy as np
import pytest
from ember_vulkan import runtime
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember_core as em
from ember_core.errors import UnsupportedOpError

EDGES = [0.0, -0.0, 1.4e-45, -3e-42, 1e-30, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 3.0, -7.5, 1e10, -3e38, np.inf, -np.inf,
         np.nan]
EXPONENTS = [0.0, -0.0, 1e-40, 0.5, -0.5, 1.0, -1.0, 2.0, 3.0, -3.0, 1 / 3, 24.5, 127.0, -150.0, 1e9, 16777217.0,
             np.inf, -np.inf, np.nan]


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    got = em.asarray(a, device="vulkan") ** em.asarray(b, device="vulkan")
    return np.asarray(got.to_device("cpu"))


def _assert_pow_rounds_numpys_float64(a: np.ndarray, b: np.ndarray, ulps: int) -> None:
    """Within ``ulps`` of numpy's float64 pow rounded to a's dtype; the same NaNs, infinities and signs."""
    got = _pow(a, b)
    with np.errstate(all="ignore"):
        want = np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)
    special = ~np.isfinite(want) | (want == 0)
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | np.isnan(got) & np.isnan(want)
    assert same[special].all(), list(zip(a[special & ~same], b[special & ~same], got[special & ~same]))[:5]
    wide = np.where(special, 0, got.astype(np.float64))
    gap = np.abs(wide - np.where(special, 0, want)) / np.spacing(np.abs(np.where(special, 1, want)))
    assert (gap <= ulps).all(), list(zip(a[gap > ulps], b[gap > ulps], got[gap > ulps]))[:5]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_float_pow_edge_grid(vk, dtype: str) -> None:
    a, b = (g.ravel() for g in np.meshgrid(EDGES, EXPONENTS, indexing="ij"))
    with np.errstate(all="ignore"):
        _assert_pow_rounds_numpys_float64(a.astype(dtype), b.astype(dtype), ulps=1)


@settings(max_examples=30, deadline=None)
@given(a=hnp.arrays(np.float32, st.integers(1, 64), elements=st.floats(-1e4, 1e4, width=32)),
       b=st.floats(-40, 40, width=32) | st.integers(-40, 40).map(float))
def test_float32_pow_property(a: np.ndarray, b: float) -> None:
    """Any base, any exponent in [-40, 40] (integers drawn apart, so negative bases get real results)."""
    with em.fallback_policy("error"):
        _assert_pow_rounds_numpys_float64(a, np.full_like(a, b), ulps=1)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_pow_matches_ember_cpu(vk, dtype: str) -> None:
    info = np.iinfo(dtype)
    a = np.array([0, 1, -1, 2, -2, 3, -3, 7, 10, -10, info.max, info.min] * 12, dtype=dtype)
    b = np.repeat(np.array([0, 1, 2, 3, 5, 31, 62, 63, 64, -1, -2, -3], dtype=dtype), 12)
    on_cpu = np.asarray(em.asarray(a, device="cpu") ** em.asarray(b, device="cpu"))
    np.testing.assert_array_equal(_pow(a, b), on_cpu)
    small = (b >= 0) & (b <= 5) & (np.abs(a) <= 10)
    np.testing.assert_array_equal(_pow(a, b)[small], np.power(a[small], b[small]))


@settings(max_examples=30, deadline=None)
@given(a=hnp.arrays(np.int64, st.integers(1, 64), elements=st.integers(-(2**63), 2**63 - 1)),
       b=st.integers(-5, 70))
def test_int64_pow_property(a: np.ndarray, b: int) -> None:
    exponent = np.full_like(a, b)
    on_cpu = np.asarray(em.asarray(a, device="cpu") ** em.asarray(exponent, device="cpu"))
    with em.fallback_policy("error"):
        np.testing.assert_array_equal(_pow(a, exponent), on_cpu)


def test_a_device_without_float64_declines_float_pow(vk) -> None:
    """pow.comp needs shaderFloat64: elsewhere the call goes to the next provider, not to a wrong shader."""
    dev = runtime.device(vk.index)
    saved, dev.has_float64 = dev.has_float64, False
    try:
        with em.fallback_policy("allow"):
            em.reset_fallback_report()
            got = em.asarray([2.0, 3.0]) ** em.asarray([10.0, 2.0])
        assert np.asarray(got.to_device("cpu")).tolist() == [1024.0, 9.0]
        assert any(e["op"] == "pow" for e in em.fallback_report())
        with em.fallback_policy("error"), pytest.raises(UnsupportedOpError, match="pow"):
            em.asarray([2.0]) ** em.asarray([3.0])
    finally:
        dev.has_float64 = saved
