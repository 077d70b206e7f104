"""How close an ember result must be to its numpy reference, per dtype, in one table.

The tests compute references in float64 / complex128 (or, for integers and bool, exactly, in the
dtype itself) from the *exact values stored in the ember inputs*, so the only error left is the
op's own: its formula, its compute precision (float16 and bfloat16 compute in float32), and the
final rounding to the result dtype.  ``assert_close`` first rounds the reference to the result
dtype (so overflow to inf and underflow to 0 happen on both sides), then compares:

* NaN positions must match exactly;
* real infinities must match in position and sign; a complex result is "an infinity" when either
  part is infinite (C99 Annex G), and complex infinities must match in position only;
* everything else must satisfy ``|actual - expected| <= atol + rtol * |expected|`` (complex: the
  modulus of the difference, so a tiny part of a large number is judged against the magnitude);
* integer and bool results must be exactly equal (rtol = atol = 0);
* the result's dtype and shape must be exactly the expected ones.

The table
---------
``rtol`` is a small number of units in the last place (``eps`` = 2**-(mantissa bits)):

=========== ========== ============ ================================================================
dtype        eps        rtol         why
=========== ========== ============ ================================================================
float16      2**-10     4 eps        computed in float32, rounded once more: double rounding + libm
bfloat16     2**-7      4 eps        same, with bfloat16's 8-bit significand
float32      2**-23     32 eps       libm float functions (<= a few ulp) and composite formulas
                                     (sigmoid, logaddexp, ...) that chain several rounded steps
float64      2**-52     32 eps       same reasoning in double
complex64    2**-23     64 eps       C99 complex functions are judged on the modulus and are a few
                                     ulp worse than their real counterparts
complex128   2**-52     64 eps       same in double
ints, bool   --         exact        integer arithmetic is exact (wrapping where documented)
=========== ========== ============ ================================================================

``atol`` is two of the dtype's smallest subnormal: a result that underflows into the subnormal
range may be rounded once in float32 and once more to float16 (one subnormal step), and must not be
judged relatively.  Comparisons are therefore essentially relative; a test whose op has an
inherently *absolute* error (cancellation: ``logaddexp`` near 0, ``x - mean`` in ``var``, long
sums) passes an explicit, commented ``atol=`` scaled by the size of its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import ember_core as em


@dataclass(frozen=True)
class Tol:
    rtol: float
    atol: float


_EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
_TINY = {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 2.0**-149, "float64": 5e-324}

TOLERANCES: dict[str, Tol] = {
    "float16": Tol(4 * _EPS["float16"], 2 * _TINY["float16"]),
    "bfloat16": Tol(4 * _EPS["bfloat16"], 2 * _TINY["bfloat16"]),
    "float32": Tol(32 * _EPS["float32"], 2 * _TINY["float32"]),
    "float64": Tol(32 * _EPS["float64"], 2 * _TINY["float64"]),
    "complex64": Tol(64 * _EPS["float32"], 2 * _TINY["float32"]),
    "complex128": Tol(64 * _EPS["float64"], 2 * _TINY["float64"]),
    **{name: Tol(0.0, 0.0) for name in ("bool", "int8", "int16", "int32", "int64", "uint8")},
}

FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")
COMPLEX_NAMES = ("complex64", "complex128")
INT_NAMES = ("int8", "int16", "int32", "int64", "uint8")


def tol(dtype: Any) -> Tol:
    return TOLERANCES[_name(dtype)]


def _name(dtype: Any) -> str:
    return dtype.name if hasattr(dtype, "name") else str(dtype)


def eps(dtype: Any) -> float:
    """Machine epsilon of a floating dtype (of its real part for complex)."""
    name = _name(dtype)
    return _EPS[{"complex64": "float32", "complex128": "float64"}.get(name, name)]


# ---- rounding a float64 reference to the result dtype ------------------------------------------

def round_to_bfloat16(values: Any) -> np.ndarray:
    """float64/float32 values rounded once to the nearest bfloat16 (ties to even), returned as
    float32.  float64 goes through float32 by round-to-odd, which makes the second rounding exact
    (the same path ember's conversion kernels document)."""
    f64 = np.asarray(values, dtype=np.float64)
    with np.errstate(all="ignore"):
        f32 = f64.astype(np.float32)
        inexact = np.isfinite(f64) & (f32.astype(np.float64) != f64)
        toward_zero = np.where(inexact & (np.abs(f32.astype(np.float64)) > np.abs(f64)),
                               np.nextafter(f32, np.float32(0)), f32)
    odd = toward_zero.view(np.uint32) | inexact.astype(np.uint32)
    f32 = np.where(inexact, odd.view(np.float32), f32)
    bits = np.asarray(f32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(f32), f32, out)


def round_to(values: Any, dtype: Any) -> np.ndarray:
    """The reference rounded (with overflow to inf) to ember dtype ``dtype``, widened to float64 /
    complex128 for the comparison."""
    name = _name(dtype)
    arr = np.asarray(values)
    with np.errstate(all="ignore"):
        if name == "bfloat16":
            return round_to_bfloat16(np.real(arr)).astype(np.float64)
        if name in FLOAT_NAMES:
            return np.real(arr).astype(np.float64).astype(name).astype(np.float64)
        if name in COMPLEX_NAMES:
            return arr.astype(np.complex128).astype(name).astype(np.complex128)
    raise ValueError(f"round_to: {name} is not a floating dtype")


# ---- the comparison ------------------------------------------------------------------------------

def to_numpy(t: Any) -> np.ndarray:
    """An ember tensor's values as a numpy copy (bfloat16 widened to float32).  0-d tensors are read
    through a 1-element view: np.asarray of a 0-d bfloat16 tensor fails (a bug with its own test)."""
    if t.ndim == 0:
        return np.asarray(t.reshape(1)).reshape(())
    return np.asarray(t)


def _fail(msg: str, got: np.ndarray, ref: np.ndarray, bad: np.ndarray) -> None:
    idx = np.argwhere(bad)[:6]
    lines = [f"  at {tuple(int(i) for i in ix)}: got {got[tuple(ix)]!r}, expected {ref[tuple(ix)]!r}" for ix in idx]
    raise AssertionError(f"{msg}: {int(bad.sum())} of {bad.size} elements differ\n" + "\n".join(lines))


def assert_close(actual: Any, expected: Any, dtype: Any, *, rtol: float | None = None, atol: float | None = None,
                 check_zero_sign: bool = False) -> None:
    """``actual`` (an ember tensor) has dtype ``dtype``, ``expected``'s shape, and values close to the
    float64 / complex128 / exact-integer reference ``expected`` under the tolerance table above.
    ``rtol`` / ``atol`` override the table (tests comment why); ``check_zero_sign`` also demands
    that zeros carry the reference's sign."""
    name = _name(dtype)
    assert isinstance(actual, em.Tensor), f"expected an ember tensor, got {type(actual).__name__}"
    assert actual.dtype == name, f"dtype: got {actual.dtype.name}, expected {name}"
    ref = np.asarray(expected)
    assert actual.shape == ref.shape, f"shape: got {actual.shape}, expected {ref.shape}"
    got = to_numpy(actual)
    t = TOLERANCES[name]
    rtol = t.rtol if rtol is None else rtol
    atol = t.atol if atol is None else atol

    if name == "bool" or name in INT_NAMES:
        np_dtype = np.dtype(np.bool_) if name == "bool" else np.dtype(name)
        if ref.dtype != np_dtype:
            with np.errstate(all="ignore"):
                cast = ref.astype(np_dtype)
            unrepresentable = cast.astype(ref.dtype) != ref
            assert not unrepresentable.any(), f"reference has values outside {name}: {ref[unrepresentable][:5]}"
            ref = cast
        bad = got != ref
        if bad.any():
            _fail(f"{name} values are not exactly equal", got, ref, bad)
        return

    ref = round_to(ref, name)
    got = got.astype(np.complex128 if name in COMPLEX_NAMES else np.float64)
    if name in COMPLEX_NAMES:
        # C99 Annex G: a complex value with an infinite part is "an infinity" whatever its other
        # part and signs (1 / (-0 + 0j) may be inf+infj or -inf-infj); otherwise a NaN part makes
        # it NaN.  Finite values are judged on the modulus of the difference.
        got_inf = np.isinf(got.real) | np.isinf(got.imag)
        ref_inf = np.isinf(ref.real) | np.isinf(ref.imag)
        bad = got_inf != ref_inf
        if bad.any():
            _fail(f"{name}: complex infinities differ", got, ref, bad)
        got_nan = ~got_inf & (np.isnan(got.real) | np.isnan(got.imag))
        ref_nan = ~ref_inf & (np.isnan(ref.real) | np.isnan(ref.imag))
        bad = got_nan != ref_nan
        if bad.any():
            _fail(f"{name}: NaN positions differ", got, ref, bad)
        finite = ~ref_inf & ~ref_nan
        parts = [(got.real, ref.real, "real part"), (got.imag, ref.imag, "imaginary part")]
    else:
        bad = np.isnan(got) != np.isnan(ref)
        if bad.any():
            _fail(f"{name}: NaN positions differ", got, ref, bad)
        bad = (np.isinf(ref) | np.isinf(got)) & (got != ref) & ~np.isnan(ref)
        if bad.any():
            _fail(f"{name}: infinities differ (position or sign)", got, ref, bad)
        finite = np.isfinite(ref)
        parts = [(got, ref, "value")]
    with np.errstate(all="ignore"):
        err = np.abs(got - ref)
        bad = finite & ~(err <= atol + rtol * np.abs(ref))
    if bad.any():
        shown = f"{atol:g}" if np.ndim(atol) == 0 else f"(per element, max {np.max(atol):g})"
        _fail(f"{name}: values differ beyond rtol={rtol:g}, atol={shown}", got, ref, bad)
    if check_zero_sign:
        for g, r, what in parts:
            zero = finite & (r == 0)
            bad = zero & (np.signbit(g) != np.signbit(r))
            if bad.any():
                _fail(f"{name}: the sign of zero differs ({what})", got, ref, bad)


# ---- inputs in every memory layout (shared by the test modules) ----------------------------------

LAYOUTS = ("contiguous", "transposed", "permuted", "strided", "flipped")


def make_tensor(values: Any, dtype: Any, layout: str = "contiguous", seed: int = 0) -> Any:
    """An ember tensor of ``dtype`` whose logical values are ``values`` (rounded to the dtype), laid
    out in memory as ``layout``:

    * ``contiguous``: a plain copy;
    * ``transposed``: ``.mT`` of a contiguous tensor holding the swapped data (ndim >= 2);
    * ``permuted``: ``permute_dims`` of a contiguous tensor holding permuted data (ndim >= 2);
    * ``strided``: every other element of a twice-as-large tensor (``x[::2, ::2, ...]``), with
      garbage in the gaps so that a kernel reading them is caught;
    * ``flipped``: ``x[::-1]`` (negative strides on the first axis, and on the last with ndim >= 2).

    Layouts that do not apply to the shape (0-d, 1-d transposes) fall back to ``contiguous``.
    """
    arr = np.asarray(values)
    name = _name(dtype)
    ndim = arr.ndim
    if layout in ("transposed", "permuted") and ndim < 2:
        layout = "contiguous"
    if layout in ("strided", "flipped") and ndim == 0:
        layout = "contiguous"
    if layout == "contiguous":
        return em.asarray(arr, dtype=name)
    if layout == "transposed":
        return em.asarray(np.ascontiguousarray(np.swapaxes(arr, -1, -2)), dtype=name).mT
    if layout == "permuted":
        perm = np.random.default_rng(seed).permutation(ndim)
        if (perm == np.arange(ndim)).all():
            perm = np.roll(perm, 1)
        inverse = np.argsort(perm)
        base = em.asarray(np.ascontiguousarray(np.transpose(arr, inverse)), dtype=name)
        out = em.permute_dims(base, tuple(int(p) for p in perm))
        assert out.shape == arr.shape
        return out
    if layout == "strided":
        big = np.empty(tuple(2 * n for n in arr.shape), dtype=arr.dtype)
        big[...] = _garbage(arr.dtype)
        big[(slice(None, None, 2),) * ndim] = arr
        return em.asarray(big, dtype=name)[(slice(None, None, 2),) * ndim]
    if layout == "flipped":
        axes = (0, ndim - 1) if ndim >= 2 else (0,)
        flipped = np.ascontiguousarray(np.flip(arr, axis=axes))
        t = em.asarray(flipped, dtype=name)
        key = tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(ndim))
        return t[key]
    raise ValueError(f"unknown layout {layout!r}")


def _garbage(np_dtype: np.dtype) -> Any:
    if np_dtype.kind == "b":
        return True
    if np_dtype.kind in "iu":
        return np.iinfo(np_dtype).max // 3
    return 1234.5
