"""Array API 2023.12 manipulation and set functions: tril, triu, repeat, roll, tile, unstack,
meshgrid, unique_all / unique_counts / unique_inverse / unique_values and from_dlpack.

Every result is compared with numpy doing the same on the same values (float64 references; these
ops move data without arithmetic, so equality is exact), for several shapes (0-d and empty where
the op allows them), every axis, and inputs in every memory layout (``tolerances.LAYOUTS``).  The
errors each op raises are ember's typed errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from tolerances import LAYOUTS, make_tensor, to_numpy

import ember_core as em
from ember_core import interop
from ember_core.ops import composites

meshgrid = composites.meshgrid
from_dlpack = interop.from_dlpack

ALL_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64",
             "complex64", "complex128")
SHAPES = [(), (0,), (5,), (3, 4), (2, 0, 3), (2, 3, 4), (1, 3, 1, 2)]


def values(shape, dtype="float64", seed=0) -> np.ndarray:
    """Small integers (exact in every dtype), with repeats, in the numpy dtype that holds ``dtype``."""
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 7, size=shape)
    if dtype == "bool":
        return arr % 2 == 1
    if dtype in ("complex64", "complex128"):
        return (arr + 1j * rng.integers(0, 3, size=shape)).astype(np.complex128)
    return arr.astype(np.float64 if dtype in ("float16", "bfloat16", "float32", "float64") else dtype)


def check(got, ref, dtype) -> None:
    """got (an ember tensor) has dtype ``dtype``, ref's shape and exactly ref's values (NaN == NaN)."""
    assert isinstance(got, em.Tensor), type(got)
    assert got.dtype == dtype, (got.dtype, dtype)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    arr = to_numpy(got)
    if arr.dtype.kind in "fc":
        assert np.array_equal(arr.astype(np.complex128), ref.astype(np.complex128), equal_nan=True), (arr, ref)
    else:
        assert np.array_equal(arr, ref), (arr, ref)


def independent(out, x) -> bool:
    """out owns its memory (a write into it does not reach x)."""
    return out.size == 0 or out._storage is not x._storage


# ---- tril / triu ---------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(3, 4), (4, 3), (1, 1), (2, 0, 3), (2, 3, 0), (2, 3, 4), (2, 1, 3, 3)])
def test_tril_triu_match_numpy_for_every_k(shape, layout):
    ref = values(shape, seed=1)
    x = make_tensor(ref, "float64", layout)
    m, n = shape[-2:]
    for k in sorted({-m - 1, -m, -1, 0, 1, n - 1, n, n + 2}):
        check(em.tril(x, k=k), np.tril(ref, k), "float64")
        check(em.triu(x, k=k), np.triu(ref, k), "float64")
    for k in (-(2**70), 2**70):  # beyond int64 (numpy overflows here)
        check(em.tril(x, k=k), np.tril(ref, np.sign(k) * 10**6), "float64")
        check(em.triu(x, k=k), np.triu(ref, np.sign(k) * 10**6), "float64")
    assert independent(em.tril(x, k=n + 5), x)


@pytest.mark.parametrize("dtype", ALL_NAMES)
def test_tril_triu_keep_every_dtype(dtype):
    ref = values((2, 3, 4), dtype)
    x = make_tensor(ref, dtype, "strided")
    check(em.tril(x), np.tril(ref), dtype)
    check(em.triu(x, k=1), np.triu(ref, 1), dtype)


def test_tril_triu_errors():
    for fn in (em.tril, em.triu):
        with pytest.raises(em.ShapeError, match="at least 2 dimensions"):
            fn(em.ones((3,)))
        with pytest.raises(em.ShapeError):
            fn(em.ones((3,)).reshape((3,))[0])
        with pytest.raises(TypeError, match="k must be an int"):
            fn(em.ones((2, 2)), k=1.5)
        with pytest.raises(TypeError, match="ember tensor"):
            fn([[1.0, 2.0], [3.0, 4.0]])
        with pytest.raises(TypeError):
            fn(em.ones((2, 2)), 1)  # k is keyword-only


# ---- repeat ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_repeat_int_matches_numpy_on_every_axis(shape, layout):
    ref = values(shape, seed=2)
    x = make_tensor(ref, "float64", layout)
    for r in (0, 1, 3):
        out = em.repeat(x, r)
        check(out, np.repeat(ref, r), "float64")
        assert independent(out, x)
        for axis in range(-len(shape), len(shape)):
            out = em.repeat(x, r, axis=axis)
            check(out, np.repeat(ref, r, axis=axis), "float64")
            assert independent(out, x)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 0, 3), (2, 3, 4), (1, 3, 1, 2)])
def test_repeat_tensor_matches_numpy_on_every_axis(shape, layout):
    ref = values(shape, seed=3)
    x = make_tensor(ref, "float64", layout)
    rng = np.random.default_rng(4)
    for axis in [None, *range(len(shape))]:
        n = ref.size if axis is None else shape[axis]
        for counts in (rng.integers(0, 4, size=n), np.zeros(n, dtype=np.int64), np.array([2])):
            for dtype in ("int64", "int32", "uint8"):
                reps = em.asarray(counts.astype(dtype), dtype=dtype)
                check(em.repeat(x, reps, axis=axis), np.repeat(ref, counts, axis=axis), "float64")
        check(em.repeat(x, em.asarray(np.array([2]), dtype="int64").reshape(()), axis=axis),
              np.repeat(ref, 2, axis=axis), "float64")
        check(em.repeat(x, [2] * n, axis=axis), np.repeat(ref, 2, axis=axis), "float64")


def test_repeat_tensor_counts_may_be_strided():
    counts = np.array([3, 9, 0, 9, 1, 9, 2, 9])
    reps = em.asarray(counts)[::2]
    ref = np.arange(4.0)
    check(em.repeat(em.asarray(ref), reps), np.repeat(ref, counts[::2]), "float64")


@pytest.mark.parametrize("dtype", ALL_NAMES)
def test_repeat_keeps_every_dtype(dtype):
    ref = values((2, 3), dtype)
    x = make_tensor(ref, dtype, "transposed")
    check(em.repeat(x, 2, axis=1), np.repeat(ref, 2, axis=1), dtype)
    check(em.repeat(x, em.asarray([1, 0]), axis=0), np.repeat(ref, [1, 0], axis=0), dtype)
    check(em.repeat(x, 2), np.repeat(ref, 2), dtype)


def test_repeat_errors():
    x = em.ones((2, 3))
    with pytest.raises(em.ShapeError, match="non-negative"):
        em.repeat(x, -1)
    with pytest.raises(em.ShapeError, match="non-negative"):
        em.repeat(x, em.asarray([1, -1]), axis=0)
    with pytest.raises(em.ShapeError, match="do not fit"):
        em.repeat(x, em.asarray([1, 2]), axis=1)
    with pytest.raises(em.ShapeError, match="do not fit"):
        em.repeat(x, em.asarray([[1, 2]]), axis=0)
    with pytest.raises(em.ShapeError, match="do not fit"):
        em.repeat(x, em.asarray([1, 2, 3]))  # axis=None: one count per element of the flattened x
    with pytest.raises(em.DTypeError, match="integer tensor"):
        em.repeat(x, em.asarray([1.0, 2.0]), axis=0)
    with pytest.raises(em.DTypeError, match="integer tensor"):
        em.repeat(x, em.asarray([True, False]), axis=0)
    with pytest.raises(em.ShapeError, match="out of range"):
        em.repeat(x, 2, axis=2)
    with pytest.raises(em.ShapeError, match="0-d"):
        em.repeat(em.ones((1,)).reshape(()), 2, axis=0)
    with pytest.raises(TypeError, match="repeats must be an int"):
        em.repeat(x, 2.0)
    with pytest.raises(TypeError, match="repeats must be an int"):
        em.repeat(x, True)


# ---- roll ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_roll_matches_numpy(shape, layout):
    ref = values(shape, seed=5)
    x = make_tensor(ref, "float64", layout)
    for shift in (0, 1, -2, 7, -13):
        out = em.roll(x, shift)
        check(out, np.roll(ref, shift), "float64")
        assert independent(out, x)
        for axis in range(-len(shape), len(shape)):
            out = em.roll(x, shift, axis=axis)
            check(out, np.roll(ref, shift, axis=axis), "float64")
            assert independent(out, x)
    if len(shape) >= 2:
        check(em.roll(x, (1, -3), axis=(0, -1)), np.roll(ref, (1, -3), axis=(0, -1)), "float64")
        check(em.roll(x, 2, axis=(0, 1)), np.roll(ref, 2, axis=(0, 1)), "float64")
        check(em.roll(x, (1, 2), axis=(1, 1)), np.roll(ref, (1, 2), axis=(1, 1)), "float64")  # shifts add up
        axes = tuple(range(len(shape)))
        shifts = tuple(range(1, len(shape) + 1))
        check(em.roll(x, shifts, axis=axes), np.roll(ref, shifts, axis=axes), "float64")


@pytest.mark.parametrize("dtype", ALL_NAMES)
def test_roll_keeps_every_dtype(dtype):
    ref = values((3, 4), dtype)
    x = make_tensor(ref, dtype, "flipped")
    check(em.roll(x, (1, 2), axis=(0, 1)), np.roll(ref, (1, 2), axis=(0, 1)), dtype)
    check(em.roll(x, 5), np.roll(ref, 5), dtype)


def test_roll_errors():
    x = em.ones((2, 3))
    with pytest.raises(em.ShapeError, match="same length"):
        em.roll(x, (1, 2), axis=(0,))
    with pytest.raises(em.ShapeError, match="same length"):
        em.roll(x, (1, 2), axis=0)
    with pytest.raises(em.ShapeError, match="tuple axis"):
        em.roll(x, (1, 2))
    with pytest.raises(em.ShapeError, match="out of range"):
        em.roll(x, 1, axis=2)
    with pytest.raises(em.ShapeError, match="out of range"):
        em.roll(x, 1, axis=(0, -3))
    with pytest.raises(em.ShapeError, match="out of range for a 0-d"):  # 0 or -1 only: test_zero_dim_axis.py
        em.roll(em.ones((1,)).reshape(()), 1, axis=1)
    with pytest.raises(TypeError, match="shift must be an int"):
        em.roll(x, 1.5)
    with pytest.raises(TypeError, match="axis must be an int"):
        em.roll(x, 1, axis=(0.0,))


# ---- tile ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_tile_matches_numpy(shape, layout):
    ref = values(shape, seed=6)
    x = make_tensor(ref, "float64", layout)
    for reps in [(), (2,), (1,) * len(shape), (3, 2), (2, 1, 2), (1, 2, 1, 2, 2), (0, 2), (2, 0, 1)]:
        out = em.tile(x, reps)
        check(out, np.tile(ref, reps), "float64")
        assert independent(out, x)


@pytest.mark.parametrize("dtype", ALL_NAMES)
def test_tile_keeps_every_dtype(dtype):
    ref = values((2, 3), dtype)
    x = make_tensor(ref, dtype, "permuted")
    check(em.tile(x, (2, 1, 3)), np.tile(ref, (2, 1, 3)), dtype)


def test_tile_errors():
    with pytest.raises(em.ShapeError, match="non-negative"):
        em.tile(em.ones((2,)), (2, -1))
    with pytest.raises(TypeError, match="repetitions must be an int"):
        em.tile(em.ones((2,)), (2.0,))
    with pytest.raises(TypeError, match="ember tensor"):
        em.tile(np.ones(2), (2,))


# ---- unstack ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [s for s in SHAPES if s])
def test_unstack_gives_views_along_every_axis(shape, layout):
    ref = values(shape, seed=7)
    x = make_tensor(ref, "float64", layout)
    for axis in range(-len(shape), len(shape)):
        parts = em.unstack(x, axis=axis)
        assert isinstance(parts, tuple) and len(parts) == shape[axis]
        expected = [np.take(ref, i, axis=axis) for i in range(shape[axis])]
        for part, want in zip(parts, expected):
            check(part, want, "float64")
            assert part._storage is x._storage  # a view
    if x.size:
        parts = em.unstack(x, axis=-1)
        parts[0][...] = em.full(parts[0].shape, -1.0, dtype="float64")
        assert (to_numpy(x)[..., 0] == -1).all()


@pytest.mark.parametrize("dtype", ALL_NAMES)
def test_unstack_keeps_every_dtype(dtype):
    ref = values((2, 3), dtype)
    for part, want in zip(em.unstack(make_tensor(ref, dtype), axis=1), ref.T):
        check(part, want, dtype)


def test_unstack_errors():
    with pytest.raises(em.ShapeError, match="out of range for a 0-d"):  # 0 or -1 only: test_zero_dim_axis.py
        em.unstack(em.ones((1,)).reshape(()), axis=1)
    with pytest.raises(em.ShapeError, match="out of range"):
        em.unstack(em.ones((2, 3)), axis=2)
    with pytest.raises(TypeError, match="axis must be an int"):
        em.unstack(em.ones((2, 3)), axis=None)


# ---- meshgrid --------------------------------------------------------------------------------------

@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("lengths", [(), (4,), (0,), (3, 2), (2, 0), (2, 3, 4), (1, 4, 2, 3)])
def test_meshgrid_matches_numpy(lengths, indexing):
    refs = [np.arange(n, dtype=np.float64) * (i + 1) - i for i, n in enumerate(lengths)]
    layouts = ["contiguous", "strided", "flipped"]
    xs = [make_tensor(r, "float64", layouts[i % 3]) for i, r in enumerate(refs)]
    out = meshgrid(*xs, indexing=indexing)
    want = np.meshgrid(*refs, indexing=indexing)
    assert isinstance(out, list) and len(out) == len(want)
    for got, ref, x in zip(out, want, xs):
        check(got, ref, "float64")
        assert got.is_contiguous and independent(got, x)


@pytest.mark.parametrize("dtype", ALL_NAMES)
def test_meshgrid_keeps_every_dtype(dtype):
    a, b = values((3,), dtype, seed=1), values((2,), dtype, seed=2)
    for got, ref in zip(meshgrid(em.asarray(a, dtype=dtype), em.asarray(b, dtype=dtype)), np.meshgrid(a, b)):
        check(got, ref, dtype)


def test_meshgrid_errors():
    with pytest.raises(ValueError, match="indexing"):
        meshgrid(em.ones((2,)), indexing="yx")
    with pytest.raises(em.ShapeError, match="1-d"):
        meshgrid(em.ones((2,)), em.ones((2, 2)))
    with pytest.raises(em.ShapeError, match="1-d"):
        meshgrid(em.ones((1,)).reshape(()))
    with pytest.raises(em.DTypeError, match="one dtype"):
        meshgrid(em.ones((2,)), em.ones((2,), dtype="float64"))
    with pytest.raises(TypeError, match="ember tensor"):
        meshgrid(em.ones((2,)), [1.0, 2.0])


# ---- unique_* ----------------------------------------------------------------------------------------

def unique_reference(ref: np.ndarray):
    """numpy's (values, first indices, inverse, counts) of the flattened data, every NaN distinct."""
    vals, idx, inv, counts = np.unique(ref.reshape(-1), return_index=True, return_inverse=True,
                                       return_counts=True, equal_nan=False)
    return vals, idx, inv.reshape(ref.shape), counts


def check_unique(x, ref, dtype) -> None:
    vals, idx, inv, counts = unique_reference(ref)
    everything = em.unique_all(x)
    assert type(everything).__name__ == "UniqueAllResult"
    assert everything._fields == ("values", "indices", "inverse_indices", "counts")
    check(everything.values, vals, dtype)
    check(everything.indices, idx, "int64")
    check(everything.inverse_indices, inv, "int64")
    check(everything.counts, counts, "int64")
    pair = em.unique_counts(x)
    assert pair._fields == ("values", "counts")
    check(pair.values, vals, dtype)
    check(pair.counts, counts, "int64")
    pair = em.unique_inverse(x)
    assert pair._fields == ("values", "inverse_indices")
    check(pair.values, vals, dtype)
    check(pair.inverse_indices, inv, "int64")
    check(em.unique_values(x), vals, dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_unique_matches_numpy(shape, layout):
    ref = values(shape, seed=8)
    check_unique(make_tensor(ref, "float64", layout), ref, "float64")


@pytest.mark.parametrize("dtype", ALL_NAMES)
def test_unique_every_dtype(dtype):
    ref = values((4, 5), dtype, seed=9)
    check_unique(make_tensor(ref, dtype, "transposed"), ref, dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_unique_nans_are_distinct_and_infinities_are_not(dtype):
    ref = np.array([[np.nan, 2.0, -np.inf, np.nan], [2.0, np.inf, np.nan, -np.inf]])
    x = make_tensor(ref, dtype, "strided")
    check_unique(x, ref, dtype)
    out = em.unique_all(x)
    assert to_numpy(out.counts).tolist() == [2, 2, 1, 1, 1, 1]  # -inf, 2, inf, then each NaN alone
    assert to_numpy(out.indices).tolist() == [2, 1, 5, 0, 3, 6]


def test_unique_signed_zeros_are_one_value():
    out = em.unique_counts(em.asarray([0.0, -0.0, 1.0, -0.0]))
    assert to_numpy(out.values).tolist() == [0.0, 1.0] and to_numpy(out.counts).tolist() == [3, 1]


def test_unique_inverse_rebuilds_x():
    ref = values((3, 1, 4), seed=10)
    x = make_tensor(ref, "float64", "permuted")
    vals, inv = em.unique_inverse(x)
    assert inv.shape == x.shape
    check(em.take(vals, inv.reshape(-1)).reshape(x.shape), ref, "float64")


def test_unique_errors():
    for fn in (em.unique_all, em.unique_counts, em.unique_inverse, em.unique_values):
        with pytest.raises(TypeError, match="ember tensor"):
            fn([1, 2, 2])


# ---- from_dlpack -------------------------------------------------------------------------------------

@pytest.mark.parametrize("np_dtype", ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32",
                                      "float64", "complex64", "complex128"])
@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 0, 3), (2, 3, 4)])
def test_from_dlpack_numpy_shares_contiguous_memory(shape, np_dtype):
    arr = np.ascontiguousarray(values(shape, np_dtype).astype(np_dtype))
    t = from_dlpack(arr)
    check(t, arr, np_dtype)
    assert t.device == em.Device("cpu")
    if arr.size:
        arr.reshape(-1)[0] = not arr.reshape(-1)[0] if np_dtype == "bool" else 5
        assert to_numpy(t).reshape(-1)[0] == arr.reshape(-1)[0]  # zero-copy
    copied = from_dlpack(arr, copy=True)
    check(copied, arr, np_dtype)
    if arr.size:
        arr.reshape(-1)[0] = 3
        assert to_numpy(copied).reshape(-1)[0] != 3


def test_from_dlpack_strided_and_read_only_producers_are_copied():
    base = np.arange(24.0).reshape(4, 6)
    for arr in (base[::2, 1::2], base.T, base[::-1]):
        t = from_dlpack(arr)
        check(t, arr, "float64")
        with pytest.raises(BufferError, match="copy=False"):
            from_dlpack(arr, copy=False)
    ro = np.arange(3.0)
    ro.flags.writeable = False
    check(from_dlpack(ro), ro, "float64")
    with pytest.raises(BufferError, match="read-only"):
        from_dlpack(ro, copy=False)
    arr = np.arange(6.0)
    t = from_dlpack(arr, copy=False, device="cpu")
    arr[0] = 9.0
    assert t[0].item() == 9.0


def test_from_dlpack_of_ember_tensors_shares_storage():
    x = em.asarray(np.arange(12.0).reshape(3, 4)).mT
    t = from_dlpack(x)
    assert t._storage is x._storage and t.shape == x.shape
    check(t, np.arange(12.0).reshape(3, 4).T, "float64")
    c = from_dlpack(x, copy=True)
    assert c._storage is not x._storage
    check(c, np.arange(12.0).reshape(3, 4).T, "float64")
    b = em.asarray([1.5, 2.5], dtype="bfloat16")
    check(from_dlpack(b), [1.5, 2.5], "bfloat16")


def test_from_dlpack_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    src = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = from_dlpack(src)
    src[1, 2] = -7.0
    check(t, src.numpy(), "float32")  # zero-copy
    check(from_dlpack(src.T), src.T.numpy(), "float32")
    check(from_dlpack(torch.tensor([True, False])), [True, False], "bool")
    check(from_dlpack(torch.tensor(3, dtype=torch.int64)), np.array(3), "int64")
    with pytest.raises(em.DTypeError, match="bfloat16"):
        from_dlpack(torch.ones(2, dtype=torch.bfloat16))
    src = torch.full((1000,), 2.5, dtype=torch.float64)
    t = from_dlpack(src)
    del src  # the tensor keeps the producer's memory alive
    _ = [torch.zeros(1000, dtype=torch.float64) for _ in range(10)]
    assert (to_numpy(t) == 2.5).all()


def test_from_dlpack_errors():
    class OnGpu:
        def __dlpack__(self, **kwargs):
            raise AssertionError("must not be asked for its capsule")

        def __dlpack_device__(self):
            return (8, 0)  # kDLMetal: no ember backend imports it (kDLCUDA: tests/test_dlpack_device.py)

    with pytest.raises(em.DeviceError, match="not in host memory"):
        from_dlpack(OnGpu())
    with pytest.raises(TypeError, match="__dlpack__"):
        from_dlpack([1.0, 2.0])
    with pytest.raises(em.DTypeError, match="uint32"):
        from_dlpack(np.arange(3, dtype=np.uint32))
    with pytest.raises(TypeError, match="copy must be"):
        from_dlpack(np.arange(3.0), copy="yes")


# ---- the namespace -----------------------------------------------------------------------------------

def test_declared_in_the_registry_with_array_api_signatures():
    from ember_core.ops.registry import REGISTRY

    expected = {
        "tril": "(x: Tensor, /, *, k: int = 0) -> Tensor",
        "triu": "(x: Tensor, /, *, k: int = 0) -> Tensor",
        "repeat": "(x: Tensor, repeats: int | Tensor, /, *, axis: int | None = None) -> Tensor",
        "roll": "(x: Tensor, /, shift: int | tuple[int, ...], *, axis: int | tuple[int, ...] | None = None) -> Tensor",
        "tile": "(x: Tensor, repetitions: tuple[int, ...], /) -> Tensor",
        "unstack": "(x: Tensor, /, *, axis: int = 0) -> tuple[Tensor, ...]",
        "unique_values": "(x: Tensor, /) -> Tensor",
    }
    for name, signature in expected.items():
        assert REGISTRY[name].signature_text == signature
        assert getattr(em, name) is em.ops.ENTRIES[name] and callable(getattr(composites, name))
    for name in ("unique_all", "unique_counts", "unique_inverse", "unique_values"):
        assert not REGISTRY[name].differentiable and "NaN" in REGISTRY[name].doc


@pytest.mark.skipif(not hasattr(em, "from_dlpack"), reason="ember_core/__init__.py does not export it yet")
def test_exported_from_ember_core():
    assert em.from_dlpack is from_dlpack and em.meshgrid is meshgrid
    assert math.prod(em.meshgrid(em.ones((2,)), em.ones((3,)))[0].shape) == 6
