"""ember-cuda's sort, searchsorted, take, index_put, nonzero and integer matmul on ember-gpu's fake
driver running the real kernels on the host, against ember-cpu on the same inputs: every claimed
dtype, ties (stable), NaN placement, descending, empty, 0-d, strided and long rows (the scratch
buffer); negative indices, accumulation over repeated indices; batched and broadcast matmul; the
unique_* composites natively; none of it through the CPU fallback."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember_core as em
from ember_core import dtypes

ember_cuda = pytest.importorskip("ember_cuda")
from ember_gpu import ops  # noqa: E402

pytestmark = [pytest.mark.no_device, pytest.mark.usefixtures("no_claimed_op_falls_back")]

CLAIMED = ops.claimed(ops.OpLayer(ops.kernel_index(ops.package_kernels("ember_cuda"))).table())
INTEGERS = ("int8", "int16", "int32", "int64", "uint8")



def _claimed(op: str) -> list[str]:
    """The dtypes the build claims for op; a build without them fails here (kernels.json is stale)."""
    assert op in CLAIMED, f"{op} is not in the kernel table: rebuild the fatbins (ember_gpu.build.build_images)"
    return CLAIMED[op]


def _values(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> Any:
    """A cpu tensor of dtype with many ties; floats also hold NaN, infinities and both zeros."""
    n = int(np.prod(shape))
    if dtype == "bool":
        data = rng.integers(0, 2, n).astype(np.bool_)
    elif dtype in INTEGERS:
        data = rng.integers(0 if dtype == "uint8" else -6, 7, n)
    else:
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
        data = np.where(rng.random(n) < 0.15, specials[rng.integers(0, 5, n)], rng.integers(-8, 9, n) * 0.375)
    return em.asarray(np.asarray(data).reshape(shape)).astype(dtype)


def _host(t: Any) -> np.ndarray:
    t = t.to_device("cpu")
    return (t.astype("float32") if t.dtype == dtypes.bfloat16 else t).numpy()


def _same(got: Any, want: Any, what: str) -> None:
    """Equal to the bit but for NaN payloads (-0.0 and 0.0 told apart)."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    a, b = _host(got), _host(want)
    if a.dtype.kind == "f":
        nan = np.isnan(b)
        assert (np.isnan(a) == nan).all(), what
        a, b = np.where(nan, 0, a).view(f"u{a.itemsize}"), np.where(nan, 0, b).view(f"u{b.itemsize}")
    np.testing.assert_array_equal(a, b, err_msg=what)


SORT_CASES = {  # name -> (base shape, how the op's input is made from the base)
    "rows": ((4, 37), lambda t: t),
    "transposed": ((37, 4), lambda t: t.mT),
    "reversed": ((3, 20), lambda t: t[:, ::-1]),
    "batched 3-d": ((2, 3, 9), lambda t: t),
    "long rows (scratch)": ((2, 1500), lambda t: t),
    "one row": ((64,), lambda t: t),
    "empty": ((0, 5), lambda t: t),
    "empty rows": ((3, 0), lambda t: t),
    "0-d": ((), lambda t: t),
}


@pytest.mark.parametrize("op", ["sort", "argsort"])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_argsort_match_ember_cpu(op: str, descending: bool) -> None:
    fn = getattr(em, op)
    rng = np.random.default_rng(2 + descending)
    for dtype in _claimed(op):
        for case, (shape, lay) in SORT_CASES.items():
            x = _values(dtype, shape, rng)
            got = fn(lay(x.to_device("cuda:0")), descending=descending)
            _same(got, fn(lay(x), descending=descending), f"{op} {dtype} {case} descending={descending}")
    x = _values("float32", (5, 6), rng)
    _same(em.sort(x.to_device("cuda:0"), axis=0), em.sort(x, axis=0), "sort along axis 0")


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_matches_ember_cpu(side: str) -> None:
    rng = np.random.default_rng(4)
    for dtype in _claimed("searchsorted"):
        x1 = em.sort(_values(dtype, (40,), rng))
        for shape, lay in (((3, 7), lambda t: t), ((7, 3), lambda t: t.mT), ((), lambda t: t), ((0,), lambda t: t)):
            x2 = _values(dtype, shape, rng)
            got = em.searchsorted(x1.to_device("cuda:0"), lay(x2.to_device("cuda:0")), side=side)
            _same(got, em.searchsorted(x1, lay(x2), side=side), f"searchsorted {dtype} {shape} {side}")
        empty = _values(dtype, (0,), rng)
        got = em.searchsorted(empty.to_device("cuda:0"), x2.to_device("cuda:0"), side=side)
        _same(got, em.searchsorted(empty, x2, side=side), f"searchsorted {dtype} empty x1 {side}")
        stepped = em.sort(_values(dtype, (30,), rng))[::3]
        got = em.searchsorted(stepped.to_device("cuda:0"), x2.to_device("cuda:0"), side=side)
        _same(got, em.searchsorted(stepped, x2, side=side), f"searchsorted {dtype} strided x1 {side}")


def test_take_with_negative_indices_matches_ember_cpu() -> None:
    rng = np.random.default_rng(6)
    idx = em.asarray(np.array([0, -1, 2, -5, 2, 4]))
    for dtype in _claimed("take"):
        x = _values(dtype, (3, 5, 6), rng)
        for axis, lay in ((1, lambda t: t), (0, lambda t: em.permute_dims(t, (1, 0, 2))), (2, lambda t: t[:, ::-1])):
            got = em.take(lay(x.to_device("cuda:0")), idx.to_device("cuda:0"), axis=axis)
            _same(got, em.take(lay(x), idx, axis=axis), f"take {dtype} axis {axis}")
        got = em.take(x.to_device("cuda:0"), idx[:0].to_device("cuda:0"), axis=1)
        _same(got, em.take(x, idx[:0], axis=1), f"take {dtype} no indices")


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_matches_ember_cpu(accumulate: bool) -> None:
    """Repeated indices: accumulated in index order (ember-cpu's bits); without accumulate only
    unrepeated ones are compared (which of a repeated index's values lands is unspecified)."""
    rng = np.random.default_rng(7)
    idx = em.asarray(np.array([1, -1, 3, -4, 1, 1] if accumulate else [1, -1, 3, 0]))
    for dtype in _claimed("index_put"):
        for axis in (0, 1):
            x = _values(dtype, (5, 5), rng)
            shape = (idx.shape[0], 5) if axis == 0 else (5, idx.shape[0])
            values = _values(dtype, shape, rng)
            got = x.to_device("cuda:0")
            em.index_put(got, idx.to_device("cuda:0"), values.to_device("cuda:0"), axis=axis, accumulate=accumulate)
            want = em.index_put(x, idx, values, axis=axis, accumulate=accumulate)
            _same(got, want, f"index_put {dtype} axis {axis} accumulate={accumulate}")
        row, x = _values(dtype, (1, 5), rng), _values(dtype, (5, 5), rng)
        got = em.index_put(x.to_device("cuda:0"), idx.to_device("cuda:0"),
                           em.broadcast_to(row.to_device("cuda:0"), (idx.shape[0], 5)), accumulate=accumulate)
        want = em.index_put(x, idx, em.broadcast_to(row, (idx.shape[0], 5)), accumulate=accumulate)
        _same(got, want, f"index_put {dtype} broadcast values")


def test_nonzero_matches_ember_cpu() -> None:
    rng = np.random.default_rng(8)
    for dtype in _claimed("nonzero"):
        for shape, lay in (((3, 7), lambda t: t), ((7, 3), lambda t: t.mT), ((2, 3, 4), lambda t: t[:, ::-1]),
                           ((9000,), lambda t: t), ((0, 4), lambda t: t)):
            x = _values(dtype, shape, rng)
            got, want = em.nonzero(lay(x.to_device("cuda:0"))), em.nonzero(lay(x))
            assert len(got) == len(want), f"nonzero {dtype} {shape}"
            for g, w in zip(got, want):
                _same(g, w, f"nonzero {dtype} {shape}")


def test_integer_matmul_batched_and_broadcast_matches_ember_cpu() -> None:
    rng = np.random.default_rng(9)
    integers = [d for d in _claimed("matmul") if d in INTEGERS]
    assert integers, "no integer matmul kernels claimed"
    for dtype in integers:
        for a_shape, b_shape in (((4, 5), (5, 3)), ((2, 4, 5), (5, 3)), ((2, 1, 4, 5), (3, 5, 6)), ((4,), (4, 3)),
                                 ((3, 0), (0, 2)), ((0, 3), (3, 2))):
            a, b = _values(dtype, a_shape, rng), _values(dtype, b_shape, rng)
            got = em.matmul(a.to_device("cuda:0"), b.to_device("cuda:0"))
            _same(got, em.matmul(a, b), f"matmul {dtype} {a_shape} @ {b_shape}")
        a, b = _values(dtype, (6, 4), rng), _values(dtype, (3, 6), rng)
        _same(em.matmul(a.to_device("cuda:0").mT, b.to_device("cuda:0").mT), em.matmul(a.mT, b.mT),
              f"matmul {dtype} transposed")
        big = em.asarray(np.full((2, 2), 100)).astype(dtype)
        _same(em.matmul(big.to_device("cuda:0"), big.to_device("cuda:0")), em.matmul(big, big), f"matmul {dtype} wraps")


@pytest.mark.parametrize("op", ["unique_values", "unique_counts", "unique_inverse", "unique_all"])
def test_unique_runs_natively(op: str) -> None:
    rng = np.random.default_rng(10)
    for dtype in ("float32", "int32", "bool"):
        x = _values(dtype, (4, 6), rng)
        got, want = getattr(em, op)(x.to_device("cuda:0")), getattr(em, op)(x)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            _same(g, w, f"{op} {dtype}")
