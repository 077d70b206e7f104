"""ember-cpu's nn kernels (softmax.c, loss.c, linear.c) against the core's composites of the same
ops, on the layouts and special values where a fused loop could diverge from the op-by-op form."""

from __future__ import annotations

import numpy as np
import pytest
from ember_cpu.kernels import KERNELS

import ember_core as em
from ember_core.ops import nn_composites as composite


def same_values(got: np.ndarray, want: np.ndarray, rtol: float) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(got)], want[~np.isnan(want)], rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_special_values_match_the_composite(dtype, axis, name):
    x = np.random.default_rng(0).standard_normal((3, 40, 5)).astype(dtype) * 20
    x[1, 2, 3] = np.nan
    x[0, :, 1] = -np.inf
    x[2, 1, 0] = np.inf
    got = np.asarray(getattr(em, name)(em.asarray(x), axis=axis))
    want = np.asarray(getattr(composite, name)(em.asarray(x), axis=axis))
    same_values(got, want, 1e-5 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("rows", [1, 7, 300])
@pytest.mark.parametrize("classes", [1, 10, 1500])
def test_softmax_rows_short_and_long(rows, classes):
    x = np.random.default_rng(1).standard_normal((rows, classes)) * 5
    want = np.exp(x - x.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(np.asarray(em.softmax(em.asarray(x), axis=1)), want, rtol=1e-12, atol=1e-300)


def test_nll_kernel_refuses_an_unchecked_target():
    """The core checks targets first; the kernel checks again before reading a row."""
    log_probs, out = em.zeros((2, 3)), em.zeros(())
    with pytest.raises(em.IndexOutOfRangeError):
        KERNELS["nll_loss"](out, log_probs, em.asarray([0, 3]), None, ignore_index=-100, reduction="mean",
                            label_smoothing=0.0)


def test_linear_epilogue_keeps_nan_and_matches_the_composite():
    rng = np.random.default_rng(2)
    x, w, b = rng.standard_normal((5, 7)), rng.standard_normal((4, 7)), rng.standard_normal(4)
    x[1, 2] = np.nan
    with em.providers(exclude=["xnnpack"]):
        got = np.asarray(em.linear(em.asarray(x), em.asarray(w), em.asarray(b), activation="relu"))
    want = np.asarray(composite.linear(em.asarray(x), em.asarray(w), em.asarray(b), activation="relu"))
    same_values(got, want, 1e-12)
