"""How close an ember result must be to its numpy reference: the conformance suite's table.

The tolerances, the rounding of float64 references to the result dtype and the comparison itself
(NaN and infinity positions, ``|actual - expected| <= atol + rtol * |expected|``, complex values
judged on the modulus, integers and bool exactly) are ``ember_conformance.tolerances``, with its
table and the reasons for each entry: the unit tests and the suite a vendor runs judge results by
one rule.  This module adds what the unit tests need on top: ``assert_close`` on ember tensors
(dtype, shape, an optional check of the sign of zeros, and a reference outside an integer dtype
reported as a test bug), and ``make_tensor``, inputs in every memory layout.

A test whose op has an inherently *absolute* error (cancellation: ``logaddexp`` near 0, ``x - mean``
in ``var``, long sums) passes an explicit, commented ``atol=`` scaled by the size of its inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ember_conformance import tolerances as conformance

import ember_core as em

FLOAT_NAMES = conformance.FLOATS
COMPLEX_NAMES = conformance.COMPLEXES
INT_NAMES = tuple(name for name in conformance.EXACT if name != "bool")


def _name(dtype: Any) -> str:
    return dtype.name if hasattr(dtype, "name") else str(dtype)


def eps(dtype: Any) -> float:
    """Machine epsilon of a floating dtype (of its real part for complex)."""
    return conformance.eps(_name(dtype))


def round_to(values: Any, dtype: Any) -> np.ndarray:
    """The reference rounded (with overflow to inf) to ember dtype ``dtype``, widened to float64 /
    complex128 for the comparison."""
    name = _name(dtype)
    if name not in FLOAT_NAMES + COMPLEX_NAMES:
        raise ValueError(f"round_to: {name} is not a floating dtype")
    return conformance.round_to(values, name)


# ---- the comparison ------------------------------------------------------------------------------

def to_numpy(t: Any) -> np.ndarray:
    """An ember tensor's values as a numpy copy (bfloat16 widened to float32).  0-d tensors are read
    through a 1-element view: np.asarray of a 0-d bfloat16 tensor fails (a bug with its own test)."""
    if t.ndim == 0:
        return np.asarray(t.reshape(1)).reshape(())
    return np.asarray(t)


def assert_close(actual: Any, expected: Any, dtype: Any, *, rtol: float | None = None, atol: Any = None,
                 check_zero_sign: bool = False) -> None:
    """``actual`` (an ember tensor) has dtype ``dtype``, ``expected``'s shape, and values close to the
    float64 / complex128 / exact-integer reference ``expected`` under the conformance table.
    ``rtol`` / ``atol`` (a number, or one per element) override the table (tests comment why);
    ``check_zero_sign`` also demands that zeros carry the reference's sign."""
    name = _name(dtype)
    assert isinstance(actual, em.Tensor), f"expected an ember tensor, got {type(actual).__name__}"
    assert actual.dtype == name, f"dtype: got {actual.dtype.name}, expected {name}"
    ref = np.asarray(expected)
    assert actual.shape == ref.shape, f"shape: got {actual.shape}, expected {ref.shape}"
    if name in conformance.EXACT:
        np_dtype = np.dtype(np.bool_ if name == "bool" else name)
        with np.errstate(all="ignore"):
            unrepresentable = ref.astype(np_dtype).astype(ref.dtype) != ref
        assert not unrepresentable.any(), f"reference has values outside {name}: {ref[unrepresentable][:5]}"
    got = to_numpy(actual)
    result = conformance.compare(got, ref, name, rtol=rtol, atol=atol)
    if not result.ok:
        raise AssertionError(f"{name}: {result.message}")
    if check_zero_sign and name not in conformance.EXACT:
        _assert_zero_signs(got, conformance.round_to(ref, name), name)


def _assert_zero_signs(got: np.ndarray, ref: np.ndarray, name: str) -> None:
    """Where the (rounded) reference is a zero, ``got`` is a zero of the same sign, part by part."""
    got = got.astype(ref.dtype)
    parts = [(got, ref, "value")]
    if name in COMPLEX_NAMES:
        parts = [(got.real, ref.real, "real part"), (got.imag, ref.imag, "imaginary part")]
    finite = np.isfinite(ref.real) & np.isfinite(ref.imag)
    for g, r, what in parts:
        bad = finite & (r == 0) & (np.signbit(g) != np.signbit(r))
        if bad.any():
            where = [tuple(int(i) for i in ix) for ix in np.argwhere(bad)[:6]]
            shown = "; ".join(f"at {w}: got {got[w].item()!r}, expected {ref[w].item()!r}" for w in where)
            raise AssertionError(f"{name}: the sign of zero differs ({what}), {int(bad.sum())} of {bad.size}: {shown}")


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
