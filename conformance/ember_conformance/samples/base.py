"""What a sample is: inputs (arrays in a layout, Python scalars), keywords, and how to judge it."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember_conformance.tolerances import COMPLEXES, EXACT, FLOATS, round_to_bfloat16


@dataclass
class Arr:
    """An input tensor: its logical values (exactly representable in ``dtype``) and its layout."""

    values: np.ndarray
    dtype: str
    layout: str = "contiguous"


@dataclass
class Sample:
    """One call of an op.

    ``error``: an error input; the call must raise this type.  ``reference``: replaces the op's
    numpy reference (called with the inputs as float64 / complex128 / exact arrays).  ``custom``:
    replaces the whole call-and-compare (random ops, statistics): ``custom(device, dtype)``
    returns None on success or a failure message; ``code`` is then its reproducer body.
    ``expression``: Python code over ``x`` and ``xp`` (ember_core or numpy) run on both; a
    statement (an assignment) is judged by the ``x`` it leaves (views, indexing, in-place writes).
    """

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    error: type[BaseException] | tuple[type[BaseException], ...] | None = None
    reference: Callable[..., Any] | None = None
    custom: Callable[[str, str], str | None] | None = None
    code: str = ""
    expression: str | None = None
    rtol: float | None = None
    atol: float | None = None


def is_statement(code: str) -> bool:
    """True for an assignment (judged by the x it leaves), False for an expression."""
    try:
        compile(code, "<sample>", "eval")
    except SyntaxError:
        return True
    return False


def rng_for(*parts: Any) -> np.random.Generator:
    """A generator seeded from the case's identity (stable across processes, unlike hash())."""
    return np.random.default_rng(zlib.crc32("/".join(map(str, parts)).encode()))


def representable(values: Any, dtype: str) -> np.ndarray:
    """``values`` rounded to ``dtype`` and returned in the reference's working type."""
    arr = np.asarray(values)
    with np.errstate(all="ignore"):
        if dtype == "bfloat16":
            return round_to_bfloat16(arr).astype(np.float64)
        if dtype in FLOATS:
            return arr.astype(dtype).astype(np.float64)
        if dtype in COMPLEXES:
            return arr.astype(dtype).astype(np.complex128)
    if dtype == "bool":
        return arr.astype(np.bool_)
    return arr.astype(dtype)


def specials(dtype: str) -> np.ndarray:
    """Extreme values of a real floating dtype: nan, +-inf, +-0, subnormals, the smallest normal,
    huge and tiny values, and a few ordinary ones."""
    if dtype == "bfloat16":
        huge, tiny, sub = 3.0e38, 1.2e-38, 9.2e-41
    else:
        info = np.finfo(dtype)
        huge, tiny, sub = float(info.max) / 2, float(info.smallest_normal), float(info.smallest_subnormal) * 3
    values = [np.nan, np.inf, -np.inf, 0.0, -0.0, sub, -sub, tiny, -tiny, huge, -huge, 1.0, -1.0, 0.5, -2.5, 3.0,
              1e-3, 100.0]
    return representable(np.array(values), dtype)


def typical(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, low: float = -5.0,
            high: float = 5.0) -> np.ndarray:
    """Ordinary values of ``dtype``: uniform in [low, high) for floats (both parts for complex),
    small integers (non-negative for uint8) and random booleans."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in EXACT:
        lo, hi = (max(0, int(low)), int(high) + 1) if dtype == "uint8" else (int(low), int(high) + 1)
        if hi <= lo:
            lo, hi = 0, 2
        return rng.integers(lo, hi, size=shape).astype(dtype)
    values = rng.uniform(low, high, size=shape)
    if dtype in COMPLEXES:
        values = values + 1j * rng.uniform(low, high, size=shape)
    return representable(values, dtype)


def primary_dtype(accepted: set[str]) -> str | None:
    """The dtype level 1 tests an op in: float32 when it accepts it, else the first integer or bool."""
    for name in ("float32", "int32", "int64", "bool"):
        if name in accepted:
            return name
    return min(accepted) if accepted else None
