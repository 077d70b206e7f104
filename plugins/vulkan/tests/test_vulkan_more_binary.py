"""Binary primitives added for issue 29 (atan2, float floor_divide / remainder, the bit shifts) on
vulkan:0 against numpy: every pair of a grid of edge values (signed zeros, subnormals, huge, inf,
NaN), plus random values, in float32 and float16 / int32 and int64."""

from __future__ import annotations

import numpy as np
import pytest
from tolerances import assert_close

import ember_core as em

RNG = np.random.default_rng(2929)
FLOAT_EDGES = [0.0, -0.0, 4.2e-45, -1e-40, 1e-30, 0.5, -0.75, 1.0, -1.0, 2.5, -3.0, 7.0, 1e10, -3e38, np.inf, -np.inf,
               np.nan]


def _pairs(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    a, b = (g.ravel() for g in np.meshgrid(FLOAT_EDGES, FLOAT_EDGES, indexing="ij"))
    a = np.concatenate([a, RNG.uniform(-100, 100, 500), RNG.uniform(-1e6, 1e6, 500)])
    b = np.concatenate([b, RNG.uniform(-10, 10, 500), RNG.uniform(-3, 3, 500)])
    with np.errstate(all="ignore"):
        return a.astype(dtype), b.astype(dtype)


def _run(op: str, a: np.ndarray, b: np.ndarray) -> em.Tensor:
    return getattr(em, op)(em.asarray(a, device="vulkan"), em.asarray(b, device="vulkan"))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("op", ["atan2", "floor_divide", "remainder"])
def test_float_binary_against_numpy(op: str, dtype: str) -> None:
    a, b = _pairs(dtype)
    with np.errstate(all="ignore"):
        expected = getattr(np, op if op != "atan2" else "arctan2")(a.astype(np.float64), b.astype(np.float64))
    got = _run(op, a, b)
    if op != "atan2":  # exact: numpy's float64 answer rounds to the same float32 / float16 value
        out = np.asarray(got.to_device("cpu"))
        with np.errstate(all="ignore"):
            want = expected.astype(dtype)
        same = (out == want) & (np.signbit(out) == np.signbit(want)) | np.isnan(out) & np.isnan(want)
        assert same.all(), list(zip(a[~same], b[~same], out[~same], want[~same]))[:5]
    else:
        assert_close(got, expected, dtype)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op", ["bitwise_left_shift", "bitwise_right_shift"])
def test_shifts_match_ember_cpu_including_out_of_range_counts(op: str, dtype: str) -> None:
    width = np.iinfo(dtype).bits
    a = np.concatenate([RNG.integers(-1000, 1000, 200), [np.iinfo(dtype).min, np.iinfo(dtype).max, -1, 0, 1] * 8])
    b = np.concatenate([RNG.integers(0, width, 200), [0, 1, width - 1, width, width + 5, -1, -width, 2**20] * 5])
    a, b = a.astype(dtype), b.astype(dtype)
    on_cpu = getattr(em, op)(em.asarray(a, device="cpu"), em.asarray(b, device="cpu"))
    on_vulkan = _run(op, a, b)
    np.testing.assert_array_equal(np.asarray(on_vulkan.to_device("cpu")), np.asarray(on_cpu))
    in_range = (b >= 0) & (b < width)
    reference = np.left_shift(a, b) if op == "bitwise_left_shift" else np.right_shift(a, b)
    np.testing.assert_array_equal(np.asarray(on_vulkan.to_device("cpu"))[in_range], reference[in_range])
