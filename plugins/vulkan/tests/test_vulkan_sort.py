"""sort / argsort natively on vulkan:0 (sort_keys, then sort_network on GPUs or sort_merge on CPU devices, both
run here through the shader_family fixture, then sort_gather): stable, NaN last ascending
and first descending, -0 and 0 in input order, every dtype; equal to ember-cpu bit for bit (values and
indices) and to numpy's stable sort. Rows shorter than, equal to and longer than the shared-memory
block, strided and transposed inputs, other axes; hypothesis draws shapes and values."""

from __future__ import annotations

import numpy as np
import pytest
from ember_vulkan import catalog
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember_core as em

SPECIAL = [np.nan, -np.inf, np.inf, 0.0, -0.0, 1e-45, -1e-45, 1.0, -1.0]


def _values(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype in catalog.INTS:
        info = np.iinfo(dtype)
        return rng.choice([info.min, info.max, -3, 0, 3, 7], shape).astype(dtype) if seed % 2 else \
            rng.integers(-20, 20, shape).astype(dtype)  # few distinct values: many ties
    with np.errstate(over="ignore"):
        return np.round(rng.choice([*SPECIAL, *rng.uniform(-9, 9, 8)], shape)).astype(dtype)


def _same(got: em.Tensor, want: em.Tensor) -> None:
    a, b = np.asarray(got.to_device("cpu")), np.asarray(want.to_device("cpu"))
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype.kind == "f":
        assert (np.signbit(a) == np.signbit(b)).all()
    np.testing.assert_array_equal(a, b)


def _check(x: np.ndarray, axis: int, layout_on_vulkan: em.Tensor | None = None) -> None:
    on_vulkan = em.asarray(x, device="vulkan") if layout_on_vulkan is None else layout_on_vulkan
    on_cpu = em.asarray(x, device="cpu")
    for descending in (False, True):
        with em.fallback_policy("error"):
            values = em.sort(on_vulkan, axis=axis, descending=descending)
            indices = em.argsort(on_vulkan, axis=axis, descending=descending)
        _same(values, em.sort(on_cpu, axis=axis, descending=descending))
        _same(indices, em.argsort(on_cpu, axis=axis, descending=descending))
    ascending = np.asarray(em.argsort(on_vulkan, axis=axis).to_device("cpu"))
    np.testing.assert_array_equal(ascending, np.argsort(x, axis=axis, kind="stable"))


@pytest.mark.parametrize("dtype", catalog.DTYPES)
@pytest.mark.parametrize("length", [1, 2, 7, 300, 512, 513, 2100])
def test_rows_of_every_length(shader_family, dtype: str, length: int) -> None:
    _check(_values(dtype, (3, length), length), axis=-1)


def test_rows_longer_than_a_loop_may_run_on_llvmpipe(vk) -> None:
    """llvmpipe ends any shader loop after 65535 iterations: the merge passes (what lavapipe runs) split
    every merge into chunks (found by a single-invocation merge that lost the largest of 65536 elements)."""
    _check(_values("float32", (1, 70001), 4), axis=-1)


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_strided_transposed_and_other_axes(shader_family, dtype: str) -> None:
    x = _values(dtype, (6, 40, 5), 11)
    _check(x, axis=1)
    _check(x, axis=0)
    base = em.asarray(_values(dtype, (12, 80), 12), device="vulkan")
    view = base[::2, ::-3].T  # strided, flipped, transposed
    _check(np.asarray(view.to_device("cpu")), axis=-1, layout_on_vulkan=view)


def test_empty_and_0d(vk) -> None:
    _check(np.zeros((3, 0), np.float32), axis=-1)
    assert em.sort(em.asarray(2.5, device="vulkan")).item() == 2.5


@settings(max_examples=25, deadline=None)
@given(x=hnp.arrays(st.sampled_from([np.float32, np.float16, np.int32, np.int64, np.bool_]),
                    hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=40)))
def test_sort_property(x: np.ndarray) -> None:
    """Any values (NaNs, infinities, subnormals, ties) of any shape, each axis."""
    for axis in range(x.ndim):
        _check(x, axis=axis)
