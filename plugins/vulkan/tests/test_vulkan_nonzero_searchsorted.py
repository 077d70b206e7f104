"""nonzero (nonzero.comp around a scan of per-chunk counts) and searchsorted (searchsorted.comp, a
binary search by sort keys) natively on vulkan:0, against numpy and ember-cpu: every dtype, signed
zeros, subnormals, NaN (nonzero; last in searchsorted's order), strided views, both sides, a sorter;
hypothesis draws shapes and values."""

from __future__ import annotations

import numpy as np
import pytest
from ember_vulkan import catalog
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember_core as em

VALUES = [0.0, -0.0, 1e-45, -1e-45, np.nan, np.inf, -np.inf, 1.0, -2.5]


def _values(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype in catalog.INTS:
        return rng.integers(-2, 3, shape).astype(dtype)
    with np.errstate(under="ignore"):
        return rng.choice(VALUES, shape).astype(dtype)


def _host(t: em.Tensor) -> np.ndarray:
    return np.asarray(t.to_device("cpu"))


def _check_nonzero(x: np.ndarray, on_vulkan: em.Tensor | None = None) -> None:
    on_vulkan = em.asarray(x, device="vulkan") if on_vulkan is None else on_vulkan
    with em.fallback_policy("error"):
        got = em.nonzero(on_vulkan)
    want = np.nonzero(x)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_host(g), w)


@pytest.mark.parametrize("dtype", catalog.DTYPES)
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (300, 7), (4, 0), (20, 30, 11)])
def test_nonzero_every_dtype_and_shape(vk, dtype: str, shape: tuple[int, ...]) -> None:
    _check_nonzero(_values(dtype, shape, sum(shape)))


def test_nonzero_of_a_strided_view_and_of_zeros(vk) -> None:
    base = em.asarray(_values("float32", (40, 60), 3), device="vulkan")
    view = base[::3, ::-2].T
    _check_nonzero(_host(view), view)
    _check_nonzero(np.zeros((5, 6), np.int32))


def _check_searchsorted(x1: np.ndarray, x2: np.ndarray, sorter: np.ndarray | None = None) -> None:
    a, b = em.asarray(x1, device="vulkan"), em.asarray(x2, device="vulkan")
    s = None if sorter is None else em.asarray(sorter, device="vulkan")
    ordered = x1 if sorter is None else x1[sorter]
    for side in ("left", "right"):
        with em.fallback_policy("error"):
            got = em.searchsorted(a, b, side=side, sorter=s)
        assert got.dtype == em.int64
        np.testing.assert_array_equal(_host(got), np.searchsorted(ordered, x2, side=side))
        on_cpu = em.searchsorted(em.asarray(ordered, device="cpu"), em.asarray(x2, device="cpu"), side=side)
        np.testing.assert_array_equal(_host(got), np.asarray(on_cpu))


@pytest.mark.parametrize("dtype", catalog.DTYPES)
def test_searchsorted_every_dtype(vk, dtype: str) -> None:
    x1 = np.sort(_values(dtype, (57,), 5))
    _check_searchsorted(x1, _values(dtype, (6, 9), 6))
    _check_searchsorted(x1[:0], _values(dtype, (4,), 7))  # empty x1: every point is 0


def test_searchsorted_with_a_sorter_and_strided_points(vk) -> None:
    x1 = _values("float32", (33,), 8)
    _check_searchsorted(x1, _values("float32", (5, 4), 9).T, sorter=np.argsort(x1, kind="stable"))


@settings(max_examples=25, deadline=None)
@given(x=hnp.arrays(st.sampled_from([np.float32, np.float16, np.int32, np.int64, np.bool_]),
                    hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=30)),
       data=st.data())
def test_nonzero_and_searchsorted_property(x: np.ndarray, data: st.DataObject) -> None:
    """Any values of any shape: nonzero as numpy's; searchsorted of drawn points into sorted x."""
    _check_nonzero(x)
    points = data.draw(hnp.arrays(x.dtype, hnp.array_shapes(min_dims=0, max_dims=2, max_side=8)))
    _check_searchsorted(np.sort(x.reshape(-1)), points)
