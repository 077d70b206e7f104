"""The float64 ops ember-vulkan runs (add, subtract, multiply, sum, prod, full, copy / astype: what
dtype=float64, astype to float64 and their gradients need), in shaders that need shaderFloat64:
exact against numpy and ember-cpu, including conversions from float64 to every dtype (NaN and
out-of-range values saturate as ember-cpu, float16 rounds once); a device without shaderFloat64
declines them or converts on the host."""

from __future__ import annotations

import numpy as np
import pytest
from ember_vulkan import catalog, runtime

import ember_core as em

EDGES = np.array([0.0, -0.0, 5e-324, -2.5e-310, 1e-300, 0.5, -1.5, 2.5, 65504.0, 65520.0, 1 + 2**-11 + 2**-40,
                  2.0**31 + 0.5, -(2.0**31) - 1.0, 2.0**63, -(2.0**64), 1e300, np.inf, -np.inf, np.nan])


def _host(t: em.Tensor) -> np.ndarray:
    return np.asarray(t.to_device("cpu"))


@pytest.mark.parametrize("dtype", catalog.DTYPES)
def test_astype_from_and_to_float64_matches_ember_cpu(vk, dtype: str) -> None:
    on_vulkan = em.asarray(EDGES, device="vulkan").astype(dtype)
    on_cpu = em.asarray(EDGES, device="cpu").astype(dtype)
    got, want = _host(on_vulkan), np.asarray(on_cpu)
    np.testing.assert_array_equal(got, want)
    if want.dtype.kind == "f":
        assert (np.signbit(got) == np.signbit(want)).all()
    back = _host(on_vulkan.astype("float64"))
    np.testing.assert_array_equal(back, np.asarray(on_cpu.astype("float64")))


@pytest.mark.parametrize("op", ["add", "subtract", "multiply"])
def test_float64_arithmetic_is_ieee_double(vk, op: str) -> None:
    a, b = (g.ravel() for g in np.meshgrid(EDGES, EDGES, indexing="ij"))
    got = _host(getattr(em, op)(em.asarray(a, device="vulkan"), em.asarray(b, device="vulkan")))
    with np.errstate(all="ignore"):
        want = getattr(np, op)(a, b)
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | np.isnan(got) & np.isnan(want)
    assert same.all(), list(zip(a[~same], b[~same], got[~same]))[:5]


def test_full_of_float64(vk) -> None:
    assert _host(em.full((3,), -0.1, dtype="float64", device="vulkan")).tolist() == [-0.1] * 3


def test_a_device_without_float64_declines_or_converts_on_the_host(vk) -> None:
    dev = runtime.device(vk.index)
    saved, dev.has_float64 = dev.has_float64, False
    try:
        em.reset_fallback_report()
        with em.fallback_policy("allow"):
            x = em.asarray(np.array([1.5, -2.0]), device="vulkan")
            total = x * x + x
            half = x.astype("float16")
        assert _host(total).tolist() == [3.75, 2.0] and _host(half).tolist() == [1.5, -2.0]
        assert {e["op"] for e in em.fallback_report()} >= {"multiply", "add"}
    finally:
        dev.has_float64 = saved
