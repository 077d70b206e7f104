"""take / index_put (negative and repeated indices, every axis, strided operands) and the Philox
random kernels, whose streams must equal ember-cpu's bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from ember_vulkan import catalog
from tolerances import assert_close, make_tensor, to_numpy

import ember_core as em
from ember_core.random import Generator

RNG = np.random.default_rng(7)


def _values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype in catalog.INTS:
        return RNG.integers(-50, 50, shape).astype(dtype)
    return RNG.uniform(-4, 4, shape)


@pytest.mark.parametrize("dtype", catalog.DTYPES)
def test_take_every_axis_with_negative_indices(vk, dtype):
    x = make_tensor(_values(dtype, (4, 6, 5)), dtype, "permuted")
    ref = to_numpy(x)
    for axis in range(3):
        n = x.shape[axis]
        idx = [0, -1, n - 1, -n, 2, 2]
        got = em.take(x, em.asarray(idx), axis=axis)
        assert_close(got, np.take(ref, idx, axis=axis), dtype)
    assert em.take(x, em.asarray(np.zeros(0, np.int64)), axis=1).shape == (4, 0, 5)
    flat = em.take(x.reshape(-1), em.asarray([-1, 3], dtype="int32"))
    assert_close(flat, ref.reshape(-1)[[-1, 3]], dtype)


@pytest.mark.parametrize("dtype", catalog.DTYPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(vk, dtype, accumulate):
    base = _values(dtype, (5, 7, 3))
    for axis in range(3):
        n = base.shape[axis]
        idx = [1, -1, 1, 0, -n] if accumulate else [1, -1, 0]  # repeats only where they are defined
        shape = list(base.shape)
        shape[axis] = len(idx)
        values = _values(dtype, tuple(shape))
        x = make_tensor(base, dtype)
        v = make_tensor(values, dtype, "flipped")
        em.index_put(x, em.asarray(idx), v, axis=axis, accumulate=accumulate)
        expected = to_numpy(make_tensor(base, dtype)).copy()
        moved = np.moveaxis(expected, axis, 0)
        vals = np.moveaxis(to_numpy(v), axis, 0)
        for j, i in enumerate(idx):
            if accumulate:
                moved[i] = (moved[i] | vals[j]) if dtype == "bool" else moved[i] + vals[j]
            else:
                moved[i] = vals[j]
        assert_close(x, expected.astype(np.float64) if dtype in catalog.FLOATS else expected, dtype)


def test_index_put_into_strided_view_and_scalar_values(vk):
    base = em.zeros((6, 8), dtype="float32")
    view = base[::2, 1::2]  # (3, 4) non-contiguous: written in place
    em.index_put(view, em.asarray([-1, 0]), 5.0, axis=1)
    expected = np.zeros((6, 8), np.float32)
    expected[::2, 1::2][:, [-1, 0]] = 5.0
    assert_close(base, expected, "float32")


# ---- random: the same seed gives the same bits as ember-cpu ---------------------------------------

def _bits(t: em.Tensor) -> np.ndarray:
    arr = to_numpy(t)
    return arr.view(f"u{arr.itemsize}") if arr.dtype.kind == "f" else arr


def _draw(kind: str, device: str, seed: int, shape, dtype, a, b, skip: int = 0) -> em.Tensor:
    gen = Generator(device, seed)
    if skip:
        gen.advance(skip)  # start mid-stream
    return getattr(em, f"random_{kind}")(shape, a, b, dtype=dtype, device=device, generator=gen)


@pytest.mark.parametrize(("kind", "dtype", "a", "b"), [
    ("uniform", "float32", -2.0, 3.0), ("uniform", "float16", 0.0, 1.0), ("uniform", "float32", 0.1, 0.1),
    ("normal", "float32", 0.5, 2.0), ("normal", "float16", -1.0, 0.25),
    ("integers", "int64", -(2**40), 2**40 + 7), ("integers", "int32", -5, 1000), ("integers", "bool", 0, 2),
    ("integers", "int64", -(2**63), 2**63 - 1),
])
@pytest.mark.parametrize("n", [1, 7, 4099, 100003])
def test_random_streams_equal_the_cpu_backend(vk, kind, dtype, a, b, n):
    for seed, skip in ((0, 0), (2**64 - 1, 3), (123456789, 2**32 - 2)):  # the skip crosses a 32-bit carry
        on_vulkan = _draw(kind, "vulkan:0", seed, (n,), dtype, a, b, skip)
        on_cpu = _draw(kind, "cpu", seed, (n,), dtype, a, b, skip)
        assert on_vulkan.device == vk
        np.testing.assert_array_equal(_bits(on_vulkan), _bits(on_cpu))


def test_random_default_generator_advances(vk):
    em.manual_seed(42)
    first, second = em.random_uniform((5, 3)), em.random_uniform((5, 3))
    assert first.device == vk and not np.array_equal(to_numpy(first), to_numpy(second))
    em.manual_seed(42)
    np.testing.assert_array_equal(to_numpy(em.random_uniform((5, 3))), to_numpy(first))
    assert em.random_normal((0, 4)).shape == (0, 4)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_with_more_indices_than_a_loop_may_run_on_llvmpipe(vk, accumulate):
    """llvmpipe ends an invocation's loops after 65535 iterations: the indices go in ordered slices (the
    last of 70000 writes wins; every one is accumulated)."""
    count = 70000
    idx = np.arange(count) % 3
    values = np.arange(count, dtype=np.int64) % 1000 - 500
    x = em.zeros((3,), dtype="int64")
    em.index_put(x, em.asarray(idx), em.asarray(values), axis=0, accumulate=accumulate)
    if accumulate:
        expected = [values[idx == k].sum() for k in range(3)]
    else:
        expected = [values[np.nonzero(idx == k)[0][-1]] for k in range(3)]
    np.testing.assert_array_equal(to_numpy(x), expected)
