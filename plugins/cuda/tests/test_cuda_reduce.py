"""ember-cuda's reductions, arg-reductions and scans on ember-gpu's fake driver running the real
kernels on the host, against ember-cpu on the same inputs: every claimed op x dtype over axes
(one, several, all, none), strided / transposed / broadcast / empty / 0-d inputs, long rows (the
two-pass path through scratch), NaN, argmax ties, the mean / var / std composites natively, and
the same bits twice; none of it through the CPU fallback.  Integer, bool, max / min / any / all and
argmax results are exact; floating sums and products (and scans) of values whose arithmetic is
exact in every order (multiples of 1/8, powers of two) are too, up to float16 / bfloat16 rounding
of ember-cpu's float32 accumulation: compared within a few of the dtype's epsilons."""

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
RTOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 1e-6, "float64": 1e-15, "complex64": 1e-6, "complex128": 1e-15}



def _claimed(op: str) -> list[str]:
    assert op in CLAIMED, f"{op} is not in the kernel table: rebuild the fatbins (ember_gpu.build.build_images)"
    return CLAIMED[op]


def _values(op: str, dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> Any:
    """A cpu tensor whose op is exact in any order: powers of two for products, multiples of 1/8
    for sums (special values where the op is a comparison), many ties."""
    n = int(np.prod(shape))
    if dtype == "bool":
        data = rng.integers(0, 2, n).astype(np.bool_)
    elif dtype in INTEGERS:
        data = rng.integers(0 if dtype == "uint8" else -3, 4, n)
    elif "prod" in op:
        data = rng.choice([0.5, 1.0, 2.0, -1.0, -0.5, -2.0], n)  # no drift toward subnormals
    elif op in ("max", "min", "argmax", "argmin", "any", "all"):
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
        data = np.where(rng.random(n) < 0.1, specials[rng.integers(0, 5, n)], rng.integers(-8, 9, n) * 0.375)
    else:
        data = rng.integers(-8, 9, n) * 0.125
    if dtype.startswith("complex"):
        data = data.astype(np.complex128) if "prod" in op else data + 1j * np.nan_to_num(np.roll(data, 1))
    return em.asarray(np.asarray(data).reshape(shape)).astype(dtype)


def _host(t: Any) -> np.ndarray:
    t = t.to_device("cpu")
    return (t.astype("float32") if t.dtype == dtypes.bfloat16 else t).numpy()


def _close(got: Any, want: Any, what: str) -> None:
    """Equal (NaN where ember-cpu has NaN), within RTOL for floating sums, products and scans."""
    assert (got.dtype, got.shape) == (want.dtype, want.shape), f"{what}: {got.dtype}{got.shape}"
    a, b = _host(got), _host(want)
    if a.dtype.kind in "fc":
        np.testing.assert_allclose(a, b, rtol=RTOL[want.dtype.name], atol=0, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(a, b, err_msg=what)


LAYOUTS = {  # name -> (base shape, how the input is made from the base)
    "contiguous": ((4, 6, 9), lambda t: t),
    "transposed": ((9, 6, 4), lambda t: em.permute_dims(t, (2, 1, 0))),
    "reversed": ((4, 6, 9), lambda t: t[::-1, :, ::-2]),
    "broadcast": ((6, 1), lambda t: em.broadcast_to(t, (4, 6, 9))),
    "empty kept": ((0, 5, 3), lambda t: t),
    "empty reduced": ((3, 0, 2), lambda t: t),
    "0-d": ((), lambda t: t),
}
AXES = (None, 0, -1, (0, 2), (), (1, 2))


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "any", "all"])
def test_reductions_match_ember_cpu(op: str) -> None:
    rng = np.random.default_rng(sum(map(ord, op)))
    for dtype in _claimed(op):
        for name, (shape, lay) in LAYOUTS.items():
            x = lay(_values(op, dtype, shape, rng))
            for axis in AXES if x.ndim == 3 else (None, ()):
                if op in ("max", "min") and 0 in x.shape and axis != ():
                    continue  # no identity: the core raises before any kernel
                got = getattr(em, op)(x.to_device("cuda:0"), axis=axis)
                _close(got, getattr(em, op)(x, axis=axis), f"{op} {dtype} {name} axis={axis}")


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reductions_match_ember_cpu_and_take_the_first_tie(op: str) -> None:
    rng = np.random.default_rng(7)
    for dtype in _claimed(op):
        for name, (shape, lay) in LAYOUTS.items():
            x = lay(_values(op, dtype, shape, rng))
            if 0 in x.shape:
                continue
            for axis in (None, 0, -1) if x.ndim else (None,):
                got = getattr(em, op)(x.to_device("cuda:0"), axis=axis)
                _close(got, getattr(em, op)(x, axis=axis), f"{op} {dtype} {name} axis={axis}")
    ties = em.asarray(np.repeat(np.array([[1.0, 3.0, 3.0, 2.0], [1.0, np.nan, 5.0, np.nan]], np.float32), 100, 1))
    want = {"argmax": [100, 100], "argmin": [0, 100]}[op]
    assert getattr(em, op)(ties.to_device("cuda:0"), axis=1).to_device("cpu").numpy().tolist() == want


@pytest.mark.parametrize("op", ["cumulative_sum", "cumulative_prod"])
def test_scans_match_ember_cpu(op: str) -> None:
    rng = np.random.default_rng(3)
    for dtype in _claimed(op):
        for name, (shape, lay) in LAYOUTS.items():
            x = lay(_values(op, dtype, shape, rng))
            for axis in (0, -1) if x.ndim else (0,):
                got = getattr(em, op)(x.to_device("cuda:0"), axis=axis)
                _close(got, getattr(em, op)(x, axis=axis), f"{op} {dtype} {name} axis={axis}")
    rows = _values(op, "float32", (3, 700), rng)  # a block per row, chunks with a carry
    _close(getattr(em, op)(rows.to_device("cuda:0"), axis=1), getattr(em, op)(rows, axis=1), f"{op} block rows")


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_long_rows_take_two_passes_and_give_the_same_bits_twice(dtype: str) -> None:
    rng = np.random.default_rng(11)
    for op in ("sum", "max", "any", "argmax"):
        if dtype not in _claimed(op):
            continue
        x = _values(op, dtype, (2, 150_000), rng)
        device = x.to_device("cuda:0")
        got = getattr(em, op)(device, axis=-1)
        _close(got, getattr(em, op)(x, axis=-1), f"{op} {dtype} long rows")
        again = getattr(em, op)(device, axis=-1)
        assert _host(again).tobytes() == _host(got).tobytes(), f"{op} {dtype}: not deterministic"
    if "sum" in CLAIMED and dtype in CLAIMED["sum"]:  # a column reduction: a thread per output
        x = _values("sum", dtype, (3, 5000), rng)
        _close(em.sum(x.to_device("cuda:0"), axis=0), em.sum(x, axis=0), f"sum {dtype} columns")


def test_nan_propagates_through_max_min_and_sum() -> None:
    x = em.asarray(np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], np.float32))
    for op in ("max", "min", "sum", "prod"):
        _close(getattr(em, op)(x.to_device("cuda:0"), axis=1), getattr(em, op)(x, axis=1), op)


def test_mean_var_std_count_nonzero_run_natively() -> None:
    rng = np.random.default_rng(5)
    x = _values("sum", "float32", (5, 40), rng)
    device = x.to_device("cuda:0")
    em.reset_fallback_report()
    for fn in (em.mean, em.var, em.std, em.count_nonzero):
        _close(fn(device, axis=1), fn(x, axis=1), fn.__name__)
    assert not em.fallback_report(), em.fallback_report()


def test_matmul_layouts_the_blas_declines_run_on_contiguous_copies() -> None:
    """A reversed or unit-stride-less operand: copied contiguous on the device, not the CPU fallback."""
    base = em.asarray(np.arange(64.0, dtype=np.float32).reshape(8, 8) / 8)
    device = base.to_device("cuda:0")
    layouts = ((lambda t: t[:4, :4][::-1], lambda t: t[:4, :4]), (lambda t: t[:4, ::2], lambda t: t[4:, 4:].mT))
    for lay_a, lay_b in layouts:  # a negative stride; no unit stride (blas declines both)
        got = em.matmul(lay_a(device), lay_b(device))
        _close(got, em.matmul(lay_a(base), lay_b(base)), f"matmul strides {lay_a(base).strides} {lay_b(base).strides}")


def test_layouts_of_more_dims_than_a_kernel_walks_run_on_contiguous_copies() -> None:
    """Ten dims that no two merge (every other one reversed): the kernels walk at most eight."""
    rng = np.random.default_rng(13)
    base = _values("sum", "float32", (2, 3) * 5, rng)
    flips = tuple(slice(None, None, -1) if i % 2 else slice(None) for i in range(10))
    x, device = base[flips], base.to_device("cuda:0")[flips]
    for axis in ((1, 3, 5, 7, 9), (0, 9), None):
        _close(em.sum(device, axis=axis), em.sum(x, axis=axis), f"sum axis={axis}")
        _close(em.max(device, axis=axis), em.max(x, axis=axis), f"max axis={axis}")
    _close(em.argmin(device, axis=4), em.argmin(x, axis=4), "argmin")
    _close(em.cumulative_sum(device, axis=3), em.cumulative_sum(x, axis=3), "cumulative_sum")
