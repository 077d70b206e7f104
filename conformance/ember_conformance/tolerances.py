"""How close a backend's result must be to the numpy reference: one table, per result dtype.

References are computed in float64 / complex128 from the exact values stored in the inputs (for
integer and bool results: exactly, in the dtype itself), then rounded once to the result dtype, so
overflow to inf and underflow to zero happen on both sides.  A result then passes when

* its dtype and shape are the expected ones (checked by the caller);
* NaNs sit exactly where the reference has them; infinities match in position and sign (complex:
  a value with an infinite part is "an infinity", and only positions are compared, C99 Annex G);
* every other element satisfies ``|got - ref| <= atol + rtol * max(|ref|, magnitude)``, where
  ``magnitude`` is, for ops that accumulate (sums, products of matrices, scans, means, variances),
  the same op applied to the absolute values of the terms: the error of a sum is bounded relative
  to the sum of magnitudes, not to the (possibly cancelled) result;
* integer and bool results are exactly equal.

========== ======== ========= ==================================================================
dtype       eps      rtol      why
========== ======== ========= ==================================================================
float16     2**-10   4 eps     computed in float32 and rounded once more: double rounding + libm
bfloat16    2**-7    4 eps     the same, with bfloat16's 8-bit significand
float32     2**-23   32 eps    libm float functions (a few ulp) and formulas chaining rounded steps
float64     2**-52   32 eps    the same in double
complex64   2**-23   64 eps    complex functions, judged on the modulus of the difference
complex128  2**-52   64 eps    the same in double
integers    --       exact     integer arithmetic is exact
bool        --       exact
========== ======== ========= ==================================================================

``atol`` is twice the dtype's smallest subnormal, so that a result in the subnormal range (where
one float32 rounding plus one float16 rounding may differ by a step) is not judged relatively.
Autograd (level 3) compares gradients with ``GRAD_TOLERANCES``: derivatives chain several rounded
ops, and finite differences carry their own truncation error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
_TINY = {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 2.0**-149, "float64": 5e-324}
REAL_OF = {"complex64": "float32", "complex128": "float64"}
FLOATS = ("float16", "bfloat16", "float32", "float64")
COMPLEXES = ("complex64", "complex128")
EXACT = ("bool", "int8", "int16", "int32", "int64", "uint8")


@dataclass(frozen=True)
class Tol:
    rtol: float
    atol: float


TOLERANCES: dict[str, Tol] = {
    **{name: Tol(4 * _EPS[name], 2 * _TINY[name]) for name in ("float16", "bfloat16")},
    **{name: Tol(32 * _EPS[name], 2 * _TINY[name]) for name in ("float32", "float64")},
    **{name: Tol(64 * _EPS[REAL_OF[name]], 2 * _TINY[REAL_OF[name]]) for name in COMPLEXES},
    **{name: Tol(0.0, 0.0) for name in EXACT},
}

# gradients (level 3): device vs cpu backend in the same dtype, and cpu float64 vs finite differences
GRAD_TOLERANCES: dict[str, Tol] = {
    "float16": Tol(1e-2, 1e-3), "bfloat16": Tol(5e-2, 1e-2), "float32": Tol(1e-4, 1e-5),
    "float64": Tol(1e-7, 1e-9), "complex64": Tol(1e-4, 1e-5), "complex128": Tol(1e-7, 1e-9),
}


def eps(dtype: str) -> float:
    return _EPS[REAL_OF.get(dtype, dtype)]


@dataclass
class Comparison:
    ok: bool
    message: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    max_ulp: float | None = None
    rtol: float = 0.0
    atol: float = 0.0


# ---- rounding the reference ---------------------------------------------------------------------

def round_to_bfloat16(values: Any) -> np.ndarray:
    """float64 values rounded once to the nearest bfloat16 (ties to even), as float32.  The step to
    float32 rounds to odd, which keeps the second rounding exact."""
    f64 = np.asarray(values, dtype=np.float64)
    with np.errstate(all="ignore"):
        f32 = f64.astype(np.float32)
        inexact = np.isfinite(f64) & (f32.astype(np.float64) != f64)
        too_far = inexact & (np.abs(f32.astype(np.float64)) > np.abs(f64))
        f32 = np.where(too_far, np.nextafter(f32, np.float32(0)), f32)
    bits = f32.view(np.uint32) | inexact.astype(np.uint32)  # round to odd: set the sticky bit
    wide = bits.astype(np.uint64)
    rounded = (((wide + 0x7FFF + ((wide >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(f64), np.float32(np.nan), rounded)


def round_to(values: Any, dtype: str) -> np.ndarray:
    """The reference rounded to ``dtype`` (overflowing to inf), widened again for the comparison."""
    arr = np.asarray(values)
    with np.errstate(all="ignore"):
        if dtype == "bfloat16":
            return round_to_bfloat16(np.real(arr)).astype(np.float64)
        if dtype in FLOATS:
            return np.real(arr).astype(np.float64).astype(dtype).astype(np.float64)
        return arr.astype(np.complex128).astype(dtype).astype(np.complex128)


def _ordered(values: np.ndarray, dtype: str) -> np.ndarray:
    """Floats mapped onto the ULP number line (consecutive representable values are 1 apart)."""
    if dtype == "bfloat16":
        raw = (values.astype(np.float32).view(np.int32) >> 16).astype(np.int64)
        width = 16
    else:
        width = np.dtype(dtype).itemsize * 8
        raw = values.astype(dtype).view(f"int{width}").astype(np.int64)
    body = (raw & ((1 << (width - 1)) - 1)).astype(np.float64)
    return np.where(raw < 0, -body, body)


def ulp_distance(got: np.ndarray, ref: np.ndarray, dtype: str) -> np.ndarray:
    if dtype in COMPLEXES:
        return np.maximum(ulp_distance(got.real, ref.real, REAL_OF[dtype]),
                          ulp_distance(got.imag, ref.imag, REAL_OF[dtype]))
    with np.errstate(all="ignore"):
        return np.abs(_ordered(got, dtype) - _ordered(ref, dtype))


# ---- the comparison -----------------------------------------------------------------------------

def _first_bad(got: np.ndarray, ref: np.ndarray, bad: np.ndarray, what: str) -> str:
    where = [tuple(int(i) for i in ix) for ix in np.argwhere(bad)[:4]]
    shown = "; ".join(f"at {w}: got {got[w].item()!r}, expected {ref[w].item()!r}" for w in where)
    return f"{what}: {int(bad.sum())} of {bad.size} elements ({shown})"


def compare(got: np.ndarray, ref: Any, dtype: str, *, magnitude: Any = None,
            rtol: float | None = None, atol: Any = None) -> Comparison:
    """``got`` (the backend's values, bfloat16 widened to float32) against the reference ``ref``;
    ``rtol`` and ``atol`` (a number, or one per element) replace the table's."""
    tol = TOLERANCES[dtype]
    rtol = tol.rtol if rtol is None else rtol
    atol = tol.atol if atol is None else atol
    ref = np.asarray(ref)
    if dtype in EXACT:
        expected = ref.astype(np.bool_ if dtype == "bool" else dtype) if ref.dtype.kind in "biuf" else ref
        bad = got != expected
        if bad.any():
            return Comparison(False, _first_bad(got, expected, bad, f"{dtype} values are not exactly equal"),
                              rtol=0.0, atol=0.0)
        return Comparison(True, max_abs=0.0, max_rel=0.0, rtol=0.0, atol=0.0)
    complex_ = dtype in COMPLEXES
    ref = round_to(ref, dtype)
    got = got.astype(np.complex128 if complex_ else np.float64)
    if complex_:
        got_inf, ref_inf = (np.isinf(a.real) | np.isinf(a.imag) for a in (got, ref))
        got_nan, ref_nan = (~inf & (np.isnan(a.real) | np.isnan(a.imag)) for a, inf in ((got, got_inf), (ref, ref_inf)))
        inf_bad = got_inf != ref_inf
    else:
        got_nan, ref_nan = np.isnan(got), np.isnan(ref)
        ref_inf = np.isinf(ref)
        inf_bad = (ref_inf | np.isinf(got)) & (got != ref) & ~ref_nan & ~got_nan
    if (got_nan != ref_nan).any():
        return Comparison(False, _first_bad(got, ref, got_nan != ref_nan, "NaN positions differ"), rtol=rtol, atol=atol)
    if inf_bad.any():
        return Comparison(False, _first_bad(got, ref, inf_bad, "infinities differ"), rtol=rtol, atol=atol)
    finite = ~ref_nan & ~ref_inf
    with np.errstate(all="ignore"):
        err = np.where(finite, np.abs(got - ref), 0.0)
        scale = np.abs(ref) if magnitude is None else np.maximum(np.abs(ref), np.abs(round_to(magnitude, dtype)))
        rel = np.where(finite & (scale > 0), err / np.where(scale > 0, scale, 1.0), 0.0)
        ulps = np.where(finite, ulp_distance(got, ref, dtype), 0.0)
        bad = finite & ~(err <= atol + rtol * scale)
    stats = {"max_abs": float(err.max(initial=0.0)), "max_rel": float(rel.max(initial=0.0)),
             "max_ulp": float(ulps.max(initial=0.0))}
    if bad.any():
        shown = f"{atol:g}" if np.ndim(atol) == 0 else f"per element, at most {np.max(atol):g}"
        msg = _first_bad(got, ref, bad, f"values differ beyond rtol={rtol:g}, atol={shown}")
        return Comparison(False, msg, rtol=rtol, atol=atol, **stats)
    return Comparison(True, rtol=rtol, atol=atol, **stats)
