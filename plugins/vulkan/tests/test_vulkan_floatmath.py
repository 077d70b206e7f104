"""The shader math that must hold on every driver (floatmath.glsl, trig.glsl, ieee.glsl), checked on
vulkan:0 against numpy float64.

Lavapipe does not flush subnormals, so a flushing GPU's failure cannot be reproduced here; instead
the inputs drive the branches that make the result independent of flushing: subnormal operands go
through split_f's integer path (divide, multiply, sqrt, the log family), divisors beyond 2^126 through
the exponent split, and signs are read from the bits."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember_core as em

TRIG_ULP = 4  # sin, cos: 2.2 ulp measured; tan: 3.6 (the bound stated in plugins/vulkan/README.md)
RNG = np.random.default_rng(29)
F32_MAX = float(np.finfo(np.float32).max)
EDGES = np.array([0.0, -0.0, 4.2e-45, -4.2e-45, 1e-40, -3e-39, 1.1e-38, 1.2e-38, 1.0, -2.5, 3e37, -1e38, 8.6e37,
                  F32_MAX, -F32_MAX, np.inf, -np.inf, np.nan], dtype=np.float32)


def _run(op: str, *args: np.ndarray) -> np.ndarray:
    out = getattr(em, op)(*(em.asarray(a, device="vulkan") for a in args))
    return np.asarray(out.to_device("cpu"))


def _ulps(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in units of float32's spacing at the reference (ulp of the correctly rounded result)."""
    spacing = np.spacing(np.abs(ref.astype(np.float32))).astype(np.float64)
    return np.abs(got.astype(np.float64) - ref) / spacing


def _trig_inputs() -> np.ndarray:
    near_zeros = (np.arange(1, 40000) * (np.pi / 2)).astype(np.float32)  # the float32 next to k pi/2
    xs = np.concatenate([
        RNG.uniform(-8, 8, 20000),
        10.0 ** RNG.uniform(-44, 38.5, 40000) * RNG.choice([-1.0, 1.0], 40000),  # every binade, huge included
        near_zeros, np.nextafter(near_zeros, np.float32(0)), -near_zeros[::7],
        [0.785398, 0.7853982, 0.7853981, 1e5, 1e6, 2.0 ** 24, 2.0 ** 60, 1e38, F32_MAX],
    ]).astype(np.float32)
    return xs[np.isfinite(xs)]


@pytest.mark.parametrize("op", ["sin", "cos", "tan"])
def test_trig_within_stated_ulp_bound_over_the_whole_range(op: str) -> None:
    xs = _trig_inputs()
    got = _run(op, xs)
    ref = getattr(np, op)(xs.astype(np.float64))  # glibc reduces huge float64 arguments exactly
    errors = _ulps(got, ref)
    worst = int(np.argmax(errors))
    assert errors[worst] <= TRIG_ULP, f"{op}({xs[worst]!r}) = {got[worst]!r}, expected {ref[worst]!r}"


@pytest.mark.parametrize("op", ["sin", "cos", "tan"])
def test_trig_special_values(op: str) -> None:
    got = _run(op, np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 4.2e-45, -4.2e-45], dtype=np.float32))
    assert np.isnan(got[:3]).all()
    if op == "cos":
        assert (got[3:] == 1.0).all()
    else:  # odd functions keep zero's sign and are the identity on subnormals
        assert [v.tobytes() for v in got[3:]] == [np.float32(v).tobytes() for v in (0.0, -0.0, 4.2e-45, -4.2e-45)]


def _same(got: np.ndarray, ref: np.ndarray, subnormal_ulps: int = 0) -> np.ndarray:
    """Equal values with equal signs (zeros included), NaN where the reference is NaN; a result in
    the subnormal range may be off by subnormal_ulps (it is rounded twice)."""
    with np.errstate(all="ignore"):
        ref32 = ref.astype(np.float32)
        close = np.abs(got.astype(np.float64) - ref32.astype(np.float64)) <= subnormal_ulps * 1.4013e-45
    both_nan = np.isnan(got) & np.isnan(ref32)
    return both_nan | ((got == ref32) | close) & (np.signbit(got) == np.signbit(ref32))


@pytest.mark.parametrize("op", ["divide", "multiply"])
def test_divide_and_multiply_are_ieee_over_the_whole_range(op: str) -> None:
    a, b = (g.ravel() for g in np.meshgrid(EDGES, EDGES, indexing="ij"))
    with np.errstate(all="ignore"):
        ref = a.astype(np.float64) / b if op == "divide" else a.astype(np.float64) * b
    got = _run(op, a, b)
    ok = _same(got, ref, subnormal_ulps=1)
    assert ok.all(), list(zip(a[~ok], b[~ok], got[~ok], ref[~ok]))[:5]


def test_divide_by_huge_divisors_is_accurate() -> None:
    a = 10.0 ** RNG.uniform(-30, 38, 5000).astype(np.float32) * RNG.choice([-1, 1], 5000)
    b = (10.0 ** RNG.uniform(37.93, 38.5, 5000)).astype(np.float32)  # |b| beyond 2^126
    a, b = a[np.isfinite(b)].astype(np.float32), b[np.isfinite(b)]
    ref = a.astype(np.float64) / b
    got = _run("divide", a, b)
    normal = np.abs(ref) >= np.finfo(np.float32).tiny
    assert (_ulps(got[normal], ref[normal]) <= 1).all()
    assert _same(got[~normal], ref[~normal], subnormal_ulps=1).all()


@pytest.mark.parametrize("op", ["sqrt", "log", "log2", "log10", "log1p", "atanh", "reciprocal"])
def test_unary_edges_negatives_subnormals_and_huge(op: str) -> None:
    xs = np.concatenate([EDGES, np.float32([1e30, 3e38, -0.5, 0.5, 1e-3, 2.0 ** 24, -2.0 ** 24])]).astype(np.float32)
    reference = {"atanh": np.arctanh, "reciprocal": lambda v: 1 / v}.get(op) or getattr(np, op)
    with np.errstate(all="ignore"):
        ref = reference(xs.astype(np.float64))
    got = _run(op, xs)
    normal = (np.abs(ref) >= np.finfo(np.float32).tiny) & (np.abs(ref) <= F32_MAX)
    assert (np.isnan(got) == np.isnan(ref)).all(), list(zip(xs, got, ref))
    assert (_ulps(got[normal], ref[normal]) <= 4).all(), list(zip(xs[normal], got[normal], ref[normal]))
    assert _same(got[~normal], ref[~normal], 1).all(), list(zip(xs[~normal], got[~normal], ref[~normal]))


def test_log1p_near_the_top_of_the_range() -> None:
    xs = np.float32([F32_MAX, 3e38, 1.7e38, 1e20, 16777216.0, 16777215.0])
    got = _run("log1p", xs)
    ref = np.log1p(xs.astype(np.float64))
    assert (_ulps(got, ref) <= 4).all(), list(zip(xs, got, ref))


@pytest.mark.parametrize("op", ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "maximum",
                                "minimum"])
def test_comparisons_and_extrema_order_subnormals_and_zeros(op: str) -> None:
    """Computed from the bits (what keeps them right on a flushing device): exact against numpy."""
    a, b = (g.ravel() for g in np.meshgrid(EDGES, EDGES, indexing="ij"))
    got = _run(op, a, b)
    expected = getattr(np, op)(a, b)
    if op in ("maximum", "minimum"):  # equal zeros of either sign may come back
        ok = (got == expected) | np.isnan(got) & np.isnan(expected)
        ok &= (np.signbit(got) == np.signbit(expected)) | (expected == 0)
    else:
        ok = got == expected
    assert ok.all(), list(zip(a[~ok], b[~ok], got[~ok], expected[~ok]))[:5]


@pytest.mark.parametrize("op", ["abs", "negative", "sign"])
def test_sign_abs_negative_of_subnormals_are_exact(op: str) -> None:
    got = _run(op, EDGES)
    expected = getattr(np, op)(EDGES)
    if op == "sign":
        expected = np.where(expected == 0, np.float32(0.0), expected)  # ember's sign(-0.0) is +0.0
    same = (got == expected) & (np.signbit(got) == np.signbit(expected)) | np.isnan(got) & np.isnan(expected)
    assert same.all(), list(zip(EDGES[~same], got[~same], expected[~same]))


def test_erfc_relative_accuracy_into_the_tail() -> None:
    xs = np.concatenate([np.linspace(-4, 10.05, 20000), [0.0, -0.0, 0.5999, 0.6, 9.2, 10.1, 12.0, 1e30, -1e30,
                                                         np.inf, -np.inf]]).astype(np.float32)
    got = _run("erfc", xs)
    ref = np.array([math.erfc(float(v)) for v in xs])
    errors = _ulps(got, ref)  # subnormal results: in units of the subnormal spacing
    worst = int(np.argmax(errors))
    assert errors[worst] <= 8, f"erfc({xs[worst]!r}) = {got[worst]!r}, expected {ref[worst]!r}"
