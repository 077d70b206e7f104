"""Array API 2023.12 details (issue 24, item 11): the standard's signatures, vecdot's contracted
axis, finfo of complex dtypes, expand_dims' IndexError and the dtypes the inspection namespace
lists."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import ember_core as em

# the standard's signatures, as Python writes them (annotations aside)
STANDARD = {
    "broadcast_to": "(x, /, shape)",
    "expand_dims": "(x, /, *, axis=0)",
    "permute_dims": "(x, /, axes)",
    "squeeze": "(x, /, axis)",
    "vecdot": "(x1, x2, /, *, axis=-1)",
    "astype": "(x, dtype, /, *, copy=True, device=None)",
    "count_nonzero": "(x, /, *, axis=None, keepdims=False)",
}


def _unannotated(fn) -> str:
    sig = inspect.signature(fn)
    return str(sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                           return_annotation=sig.empty))


@pytest.mark.parametrize("name", sorted(STANDARD))
def test_signature_is_the_standards(name):
    assert _unannotated(getattr(em, name)) == STANDARD[name]


def test_the_standards_keywords_are_accepted():
    x = em.ones((1, 3))
    assert em.broadcast_to(x, shape=(2, 3)).shape == (2, 3)
    assert em.permute_dims(x, axes=(1, 0)).shape == (3, 1)
    assert em.squeeze(x, axis=0).shape == (3,)
    with pytest.raises(TypeError):
        em.squeeze(x)  # the standard requires axis (x.squeeze() still drops every size-1 axis)
    assert x.squeeze().shape == (3,)


def test_vecdot_refuses_contracted_axes_of_different_sizes():
    """Broadcasting them would sum x1 against a repeated x2 (a silent wrong answer)."""
    with pytest.raises(em.ShapeError, match="size 3 in x1 and 1 in x2"):
        em.vecdot(em.ones((3,)), em.ones((1,)))
    with pytest.raises(em.ShapeError, match="size 1 in x1 and 3 in x2"):
        em.vecdot(em.ones((2, 1)), em.ones((2, 3)), axis=-1)
    with pytest.raises(em.ShapeError, match="axis of both"):
        em.vecdot(em.ones((2, 3)), em.ones((3,)), axis=-2)


@pytest.mark.parametrize(("s1", "s2", "axis"), [((3,), (3,), -1), ((2, 3), (3,), -1), ((4, 1, 3), (2, 3), -1),
                                               ((2, 3), (2, 1), -2), ((2, 3), (4, 2, 3), 1)])
def test_vecdot_broadcasts_the_other_axes(s1, s2, axis):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(s1) + 1j * rng.standard_normal(s1)
    b = rng.standard_normal(s2) + 1j * rng.standard_normal(s2)
    out = em.vecdot(em.asarray(a), em.asarray(b), axis=axis)
    from_end = axis - max(len(s1), len(s2)) if axis >= 0 else axis
    np.testing.assert_allclose(np.asarray(out.tolist()), np.vecdot(a, b, axis=from_end), rtol=1e-12)


@pytest.mark.parametrize(("complex_dtype", "real_dtype"), [(em.complex64, em.float32), (em.complex128, em.float64)])
def test_finfo_of_a_complex_dtype_describes_its_real_parts(complex_dtype, real_dtype):
    assert em.finfo(complex_dtype) == em.finfo(real_dtype)
    assert em.finfo(complex_dtype).dtype is real_dtype


def test_expand_dims_out_of_range_raises_index_error():
    x = em.ones((2, 3))
    assert em.expand_dims(x, axis=2).shape == (2, 3, 1)
    assert em.expand_dims(x, axis=-3).shape == (1, 2, 3)
    for axis in (3, -4):
        with pytest.raises(IndexError, match="out of range"):
            em.expand_dims(x, axis=axis)


STANDARD_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "float32", "float64", "complex64", "complex128"}


def test_info_lists_the_standard_dtypes_unless_asked():
    info = em.__array_namespace_info__()
    assert set(info.dtypes()) == STANDARD_DTYPES
    assert set(info.dtypes(kind="real floating")) == {"float32", "float64"}
    assert info.dtypes(kind=em.bfloat16) == {"bfloat16": em.bfloat16}
    assert set(info.dtypes(kind=("real floating", em.float16, em.bfloat16))) == {"float16", "bfloat16", "float32",
                                                                                   "float64"}


def test_astype_copy():
    x = em.asarray([1.0, 2.0])
    assert em.astype(x, em.float32, copy=False) is x
    copied = em.astype(x, em.float32)
    assert copied is not x and copied.tolist() == x.tolist()


def test_astype_onto_a_device(device):
    """From cpu onto ``device``; a tensor that requires grad gets its gradient back on cpu."""
    x = em.asarray([1.0, 2.0], device="cpu")
    moved = em.astype(x, em.float64, device=device)
    assert moved.device == device and moved.dtype is em.float64 and moved.tolist() == [1.0, 2.0]
    x.requires_grad = True
    (em.astype(x, em.float64, device=device) * 3.0).sum().backward()
    assert x.grad.device == x.device and x.grad.tolist() == [3.0, 3.0]
