"""Type promotion (Array API 2023.12 lattice plus ember's documented mixed-kind rule)."""

from __future__ import annotations

import pytest

import ember_core as em
from ember_core import dtypes as dt


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (dt.int8, dt.uint8, dt.int16), (dt.int16, dt.uint8, dt.int16), (dt.int32, dt.int64, dt.int64),
        (dt.uint8, dt.uint8, dt.uint8), (dt.float16, dt.float32, dt.float32), (dt.float16, dt.bfloat16, dt.float32),
        (dt.float32, dt.complex64, dt.complex64), (dt.float64, dt.complex64, dt.complex128),
        (dt.bool_, dt.int8, dt.int8), (dt.int64, dt.float32, dt.float32), (dt.bool_, dt.bool_, dt.bool_),
    ],
)
def test_promotion_is_symmetric_and_matches_the_table(a, b, expected):
    assert dt.promote_types(a, b) is expected and dt.promote_types(b, a) is expected


@pytest.mark.parametrize(
    ("dtype", "scalar", "expected"),
    [(dt.int8, 1, dt.int8), (dt.int8, 1.5, dt.float32), (dt.float16, 1.5, dt.float16),
     (dt.float64, 1j, dt.complex128), (dt.float32, 1j, dt.complex64), (dt.bool_, True, dt.bool_),
     (dt.bool_, 2, dt.int64)],
)
def test_python_scalars_never_widen_their_partner(dtype, scalar, expected):
    assert em.result_type(dtype, scalar) is expected


def test_can_cast_finfo_iinfo_isdtype():
    assert em.can_cast(em.int8, em.int32) and not em.can_cast(em.int64, em.int8)
    assert em.finfo(em.float32).eps == pytest.approx(2**-23) and em.finfo(em.bfloat16).bits == 16
    assert em.iinfo(em.uint8).max == 255
    assert em.isdtype(em.float16, "real floating") and em.isdtype(em.int8, ("bool", "integral"))
    with pytest.raises(em.DTypeError):
        em.iinfo(em.float32)
    with pytest.raises(em.DTypeError):
        em.isdtype(em.float32, "floatish")


def test_dtype_names_compare():
    assert em.float32 == "float32" and em.float32 != em.float64 and repr(em.int8) == "ember.int8"
