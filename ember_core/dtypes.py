"""Data types, type promotion and dtype introspection (Python Array API standard, 2023.12).

Promotion inside a kind (bool, integer, real floating, complex floating) follows the standard's
lattice.  The standard leaves mixed-kind promotion to the implementation; ember follows the
category rule PyTorch users expect: the higher kind wins and keeps its own width
(int64 + float32 -> float32), and a Python scalar never widens an array of its kind or higher.
float16 and bfloat16 extend the lattice: they meet at float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember_core.errors import DTypeError, DTypeOverflowError

# kind order used by the category rule
_KIND_RANK = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


@dataclass(frozen=True, eq=False, repr=False)
class DType:
    """A tensor element type.  Compare with ``==`` against another DType or a dtype's name."""

    name: str
    code: int  # ember.h ember_dtype: crosses the ABI
    itemsize: int
    kind: str  # 'b' bool, 'i' signed, 'u' unsigned, 'f' real floating, 'c' complex floating
    numpy: np.dtype | None = field(default=None)  # None: numpy has no such type (bfloat16)

    def __repr__(self) -> str:
        return f"ember.{self.name}"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DType):
            return self is other
        if isinstance(other, str):
            return self.name == other
        return NotImplemented

    __hash__ = object.__hash__  # one object per dtype; identity hashing keeps plan-cache keys cheap

    def __reduce__(self) -> str:
        return self.name  # pickles as the module-level constant

    @property
    def is_floating_point(self) -> bool:
        return self.kind in "fc"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"


bool_ = DType("bool", 0, 1, "b", np.dtype(np.bool_))
int8 = DType("int8", 1, 1, "i", np.dtype(np.int8))
int16 = DType("int16", 2, 2, "i", np.dtype(np.int16))
int32 = DType("int32", 3, 4, "i", np.dtype(np.int32))
int64 = DType("int64", 4, 8, "i", np.dtype(np.int64))
uint8 = DType("uint8", 5, 1, "u", np.dtype(np.uint8))
float16 = DType("float16", 6, 2, "f", np.dtype(np.float16))
bfloat16 = DType("bfloat16", 7, 2, "f", None)
float32 = DType("float32", 8, 4, "f", np.dtype(np.float32))
float64 = DType("float64", 9, 8, "f", np.dtype(np.float64))
complex64 = DType("complex64", 10, 8, "c", np.dtype(np.complex64))
complex128 = DType("complex128", 11, 16, "c", np.dtype(np.complex128))

ALL_DTYPES: tuple[DType, ...] = (
    bool_, int8, int16, int32, int64, uint8, float16, bfloat16, float32, float64, complex64, complex128,
)
BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES}
_FROM_NUMPY: dict[np.dtype, DType] = {d.numpy: d for d in ALL_DTYPES if d.numpy is not None}

default_int = int64
default_float = float32
default_complex = complex64
index_dtype = int64

_REAL_OF = {complex64: float32, complex128: float64}
_COMPLEX_OF = {float16: complex64, bfloat16: complex64, float32: complex64, float64: complex128}

# dtype groups: the names the op registry uses for an op's accepted dtypes
GROUPS: dict[str, frozenset[DType]] = {
    "bool": frozenset({bool_}),
    "signed_integer": frozenset({int8, int16, int32, int64}),
    "unsigned_integer": frozenset({uint8}),
    "integer": frozenset({int8, int16, int32, int64, uint8}),
    "real_floating": frozenset({float16, bfloat16, float32, float64}),
    "complex_floating": frozenset({complex64, complex128}),
}
GROUPS["floating"] = GROUPS["real_floating"] | GROUPS["complex_floating"]
GROUPS["real"] = GROUPS["integer"] | GROUPS["real_floating"]
GROUPS["numeric"] = GROUPS["real"] | GROUPS["complex_floating"]
GROUPS["integer_or_bool"] = GROUPS["integer"] | GROUPS["bool"]
GROUPS["real_or_bool"] = GROUPS["real"] | GROUPS["bool"]
GROUPS["all"] = frozenset(ALL_DTYPES)


def real_dtype(dtype: DType) -> DType:
    """float32 for complex64, float64 for complex128, the dtype itself otherwise."""
    return _REAL_OF.get(dtype, dtype)


def complex_dtype(dtype: DType) -> DType:
    return dtype if dtype.kind == "c" else _COMPLEX_OF.get(dtype, default_complex)


def as_dtype(value: Any) -> DType:
    """A DType from a DType, its name, a numpy dtype, or a Python type (bool/int/float/complex)."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in BY_NAME:
        return BY_NAME[value]
    if value is bool:
        return bool_
    if value is int:
        return default_int
    if value is float:
        return default_float
    if value is complex:
        return default_complex
    try:
        return _FROM_NUMPY[np.dtype(value)]
    except (TypeError, KeyError):
        pass
    names = ", ".join(BY_NAME)
    raise DTypeError(f"{value!r} is not an ember dtype; use one of: {names}")


def from_numpy_dtype(dtype: np.dtype) -> DType:
    try:
        return _FROM_NUMPY[dtype]
    except KeyError:
        raise DTypeError(
            f"numpy dtype {dtype} has no ember equivalent; convert the array with .astype() to one of "
            f"{', '.join(d.name for d in _FROM_NUMPY.values())}"
        ) from None


# ---- promotion ---------------------------------------------------------------------------------

def _float_width_rank(d: DType) -> int:
    return {float16: 1, bfloat16: 1, float32: 2, float64: 3, complex64: 2, complex128: 3}[d]


def _promote_same_kind(a: DType, b: DType) -> DType:
    kind = a.kind
    if kind == "b":
        return bool_
    if kind in "iu":
        if a.kind == b.kind:
            return a if a.itemsize >= b.itemsize else b
        signed, unsigned = (a, b) if a.kind == "i" else (b, a)
        # uint8 fits in any signed type wider than a byte
        return signed if signed.itemsize > unsigned.itemsize else int16
    if kind == "f":
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if _float_width_rank(a) >= _float_width_rank(b) else b
    return a if a.itemsize >= b.itemsize else b  # complex


def _promote_pair(a: DType, b: DType) -> DType:
    if a is b:
        return a
    ra, rb = _KIND_RANK[a.kind], _KIND_RANK[b.kind]
    if ra == rb:
        return _promote_same_kind(a, b)
    hi, lo = (a, b) if ra > rb else (b, a)
    if hi.kind == "c" and lo.kind == "f":
        return complex128 if lo is float64 else hi  # complex keeps the wider float's precision
    return hi


_PROMOTION: dict[tuple[DType, DType], DType] = {
    (a, b): _promote_pair(a, b) for a in ALL_DTYPES for b in ALL_DTYPES
}


def promote_types(a: DType, b: DType) -> DType:
    return _PROMOTION[a, b]


def scalar_kind_rank(value: object) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return 1
    if isinstance(value, float):
        return 2
    if isinstance(value, complex):
        return 3
    raise DTypeError(f"expected a tensor or a Python scalar, got {type(value).__name__}")


def dtype_for_scalar(value: object, partner: DType | None) -> DType:
    """The dtype a Python scalar takes when it meets a tensor of dtype `partner` (or none)."""
    rank = scalar_kind_rank(value)
    if partner is None:
        return (bool_, default_int, default_float, default_complex)[rank]
    partner_rank = _KIND_RANK[partner.kind]
    if rank <= partner_rank:
        return partner
    if rank == 1:
        return default_int
    if rank == 2:
        return default_float
    return complex_dtype(partner) if partner.kind == "f" else default_complex


def result_type(*arrays_and_dtypes: Any) -> DType:
    """Array API ``result_type``: tensors, dtypes and Python scalars, the scalars applied last."""
    dtypes: list[DType] = []
    scalars: list[object] = []
    for item in arrays_and_dtypes:
        dt = getattr(item, "dtype", None)
        if isinstance(dt, DType):
            dtypes.append(dt)
        elif isinstance(item, (bool, int, float, complex)):
            scalars.append(item)
        else:
            dtypes.append(as_dtype(item))
    if not dtypes and not scalars:
        raise DTypeError("result_type needs at least one tensor, dtype or scalar")
    result = dtypes[0] if dtypes else dtype_for_scalar(scalars.pop(0), None)
    for d in dtypes[1:]:
        result = _PROMOTION[result, d]
    for s in scalars:
        result = dtype_for_scalar(s, result)
    return result


def can_cast(from_: Any, to: Any, /) -> bool:
    """True when promotion of ``from_`` with ``to`` yields ``to`` (no information is lost by kind)."""
    src = from_.dtype if isinstance(getattr(from_, "dtype", None), DType) else as_dtype(from_)
    dst = as_dtype(to)
    return _PROMOTION[src, dst] is dst


def isdtype(dtype: DType, kind: Any) -> bool:
    """Array API ``isdtype``: kind is a DType, a kind name, or a tuple of either."""
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, DType):
        return dtype is kind
    names = {
        "bool": "bool", "signed integer": "signed_integer", "unsigned integer": "unsigned_integer",
        "integral": "integer", "real floating": "real_floating", "complex floating": "complex_floating",
        "numeric": "numeric",
    }
    if kind not in names:
        raise DTypeError(f"isdtype: unknown kind {kind!r}; expected one of {sorted(names)} or a dtype")
    return dtype in GROUPS[names[kind]]


# ---- finfo / iinfo -----------------------------------------------------------------------------

@dataclass(frozen=True)
class finfo_object:
    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: DType


@dataclass(frozen=True)
class iinfo_object:
    bits: int
    max: int
    min: int
    dtype: DType


_BF16 = finfo_object(16, 2.0**-7, float.fromhex("0x1.fep127"), -float.fromhex("0x1.fep127"), 2.0**-126, bfloat16)


def finfo(type: Any, /) -> finfo_object:
    """Limits of a floating dtype.  A complex dtype is described by the real dtype of its parts
    (complex64: float32), as the Array API asks."""
    d = type.dtype if isinstance(getattr(type, "dtype", None), DType) else as_dtype(type)
    if d.kind not in "fc":
        raise DTypeError(f"finfo needs a floating dtype, got {d.name}; use iinfo for integers")
    real = real_dtype(d)
    if real is bfloat16:
        return _BF16
    f = np.finfo(real.numpy)
    return finfo_object(
        int(f.bits), float(f.eps), float(f.max), float(f.min), float(f.smallest_normal), real
    )


def iinfo(type: Any, /) -> iinfo_object:
    d = type.dtype if isinstance(getattr(type, "dtype", None), DType) else as_dtype(type)
    if d.kind not in "iu":
        raise DTypeError(f"iinfo needs an integer dtype, got {d.name}; use finfo for floating dtypes")
    i = np.iinfo(d.numpy)
    return iinfo_object(int(i.bits), int(i.max), int(i.min), d)


def fits(value: int | float, dtype: DType) -> bool:
    """Whether a Python number is representable (in range) in an integer dtype."""
    if dtype.kind in "iu":
        if isinstance(value, float) and not math.isfinite(value):
            return False
        info = np.iinfo(dtype.numpy)
        return int(info.min) <= value <= int(info.max)
    return True


def check_cast(source: DType, target: DType, where: str) -> None:
    """The Array API forbids casting complex to a real dtype: which part to keep (the real part, the
    imaginary part, the magnitude) is the caller's to say.  Complex to bool stays (nonzero is True)."""
    if source.kind == "c" and target.kind in "iuf":
        raise DTypeError(f"{where}: cannot cast {source.name} to {target.name}, which would drop the imaginary "
                         f"part; convert real(x), imag(x) or abs(x) instead")


def check_fits(value: int | float, dtype: DType, where: str) -> None:
    """Refuse a Python number that an integer dtype cannot hold: stored, it would wrap (300 in
    uint8 reads back 44), as numpy's and C's conversions do."""
    if not fits(value, dtype):
        info = np.iinfo(dtype.numpy)
        wider = "a float dtype (int64 is ember's widest integer)" if dtype is int64 else "a wider dtype"
        raise DTypeOverflowError(f"{where}: {value!r} does not fit in {dtype.name} (range {info.min}..{info.max}); "
                                 f"use {wider}")


def float_to_integer(values: Any, dtype: Any) -> np.ndarray:
    """Real floating values converted to an integer dtype by ember's rule: truncation toward zero,
    NaN -> 0, +-inf and values beyond the range -> the dtype's min / max.

    C, GLSL and numpy leave NaN and out-of-range conversions undefined (numpy gives INT_MIN on
    x86, or wraps), so this is the definition: every backend's astype follows it, the host paths
    (asarray of float data with an integer dtype) apply it, and the conformance suite and the
    tests use it as their reference."""
    d = as_dtype(dtype)
    info = np.iinfo(d.numpy)
    v = np.asarray(values).astype(np.float64)  # exact for float16 / float32 / float64
    over = v >= float(info.max) + 1.0  # 2**(bits - 1), or 2**8: a power of two, exact in every float
    under = v <= float(info.min) - 1.0  # int64: -2**63 - 1 rounds to -2**63, which converts to min anyway
    inside = np.trunc(np.where(over | under | np.isnan(v), 0.0, v)).astype(d.numpy)
    return np.where(over, info.max, np.where(under, info.min, inside)).astype(d.numpy)
