"""Conversions that must not be silent, and what stays allowed around the refusals (issue 24).

The refusals themselves are entries of tests/test_bad_inputs.py; here are the values that still
convert, checked against numpy (float64) or PyTorch, and the limits' edges."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import ember_core as em
from ember_core import nn, views

# ---- Python integers ----------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "dtype"), [
    ([-1, 2**63], "float64"), ([1.5, 2**70], "float64"), ([[2**64], [3]], "float32"), (2**63, "float32"),
    ([0, 255], "uint8"), ([-128, 127], "int8"), ([-2**63, 2**63 - 1], "int64"),
])
def test_python_integers_convert_where_the_dtype_holds_them(data, dtype):
    np.testing.assert_array_equal(em.asarray(data, dtype=dtype).numpy(), np.asarray(data, dtype=dtype))


def test_python_integers_beside_floats_take_the_default_float():
    t = em.asarray([1.5, 2**70])
    assert t.dtype == em.float32 and t.tolist() == [1.5, float(np.float32(2.0**70))]


def test_an_integer_that_would_wrap_is_an_overflow_error_as_in_numpy():
    for call in (lambda: em.asarray(300, dtype="uint8"), lambda: em.asarray([2**63]),
                 lambda: em.full((2,), -1, dtype="uint8"), lambda: em.ones((2,), dtype="int8") + 128):
        with pytest.raises(OverflowError):  # what numpy raises: "Python integer 300 out of bounds for uint8"
            call()
    with pytest.raises(OverflowError):
        np.asarray(300, dtype=np.uint8)


def test_numpy_arrays_keep_numpys_cast():
    """An ndarray given a dtype is a cast, as astype is (integers wrap, as in numpy and C):
    only Python numbers, whose dtype ember chooses, are checked against it."""
    data = np.array([300, -1])
    np.testing.assert_array_equal(em.asarray(data, dtype="uint8").numpy(), data.astype(np.uint8))


# ---- complex to real ----------------------------------------------------------------------------

def test_complex_converts_to_bool_and_to_complex_but_real_parts_are_asked_for_by_name():
    z = np.array([0j, 1 + 2j, -3j, 4 + 0j], dtype=np.complex64)
    t = em.asarray(z)
    np.testing.assert_array_equal(t.astype(em.bool_).numpy(), z.astype(bool))
    np.testing.assert_array_equal(t.astype(em.complex128).numpy(), z.astype(np.complex128))
    np.testing.assert_array_equal(em.real(t).astype(em.float64).numpy(), z.real.astype(np.float64))
    np.testing.assert_array_equal(em.imag(t).numpy(), z.imag)
    np.testing.assert_allclose(em.abs(t).numpy(), np.abs(z), rtol=1e-6)


def test_gradients_through_complex_values_reach_real_leaves():
    """Autograd's own complex -> real step (the real part of a real input's gradient) stays."""
    x = em.asarray([1.0, -2.0], dtype="float64").requires_grad_()
    y = em.abs(x.astype(em.complex128) * (1 + 1j)).sum()
    y.backward()
    xt = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
    torch.abs(xt.to(torch.complex128) * (1 + 1j)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-12)
    assert x.grad.dtype == em.float64


# ---- flags ----------------------------------------------------------------------------------------

def test_flags_take_numpy_bools():
    x = np.array([[3.0, 1.0, 2.0]], dtype=np.float32)
    t = em.asarray(x)
    np.testing.assert_array_equal(em.sort(t, descending=np.True_).numpy(), -np.sort(-x, axis=-1))
    assert em.sum(t, axis=1, keepdims=np.True_).shape == (1, 1)
    assert em.mean(t, keepdims=np.False_).shape == ()


def test_reductions_accumulate_numbers_and_any_all_give_the_logical_ones():
    b = np.array([[True, False], [True, True]])
    t = em.asarray(b)
    np.testing.assert_array_equal(em.prod(t, axis=1, keepdims=True, dtype=em.int64).numpy(),
                                  np.prod(b, axis=1, keepdims=True, dtype=np.int64))
    np.testing.assert_array_equal(em.all(t, axis=1).numpy(), np.prod(b, axis=1, dtype=bool))


# ---- one_hot ----------------------------------------------------------------------------------------

def test_one_hot_matches_torch_for_every_class():
    classes = np.array([[0, 3], [2, 1]])
    expected = torch.nn.functional.one_hot(torch.from_numpy(classes), 4).numpy()
    np.testing.assert_array_equal(nn.functional.one_hot(em.asarray(classes), 4).numpy(), expected)
    assert nn.functional.one_hot(em.zeros((0,), dtype="int64"), 0).shape == (0, 0)


# ---- shapes, sizes and layouts --------------------------------------------------------------------

def test_broadcast_shapes_takes_ints_as_numpy_does():
    assert em.broadcast_shapes((5, 1), 5) == np.broadcast_shapes((5, 1), 5)
    assert em.broadcast_shapes() == np.broadcast_shapes()


def test_sizes_up_to_int64_are_shapes_and_views_of_them_are_free():
    """A size-0 tensor may have any dims whose non-zero ones multiply within int64, and a broadcast
    view allocates nothing: both are fine; walking more than any tensor could hold is not."""
    assert em.zeros((2**62, 0)).sum(axis=0).shape == (0,)
    view = em.broadcast_to(em.ones(()), (2**31, 2**31))
    assert view.shape == (2**31, 2**31) and view.strides == (0, 0)
    np.testing.assert_array_equal(em.broadcast_to(em.ones(()), (2**10, 2**10)).sum().numpy(), np.float32(2**20))
    start = time.perf_counter()
    with pytest.raises(em.ShapeError, match="more than any tensor can hold"):
        view.sum()
    assert time.perf_counter() - start < 1.0  # refused before a kernel walks 2**62 elements


def test_as_strided_still_makes_any_layout_inside_the_storage():
    data = np.arange(10, dtype=np.float32)
    t = em.asarray(data)
    windows = views.as_strided(t, (8, 3), (1, 1), 0)
    np.testing.assert_array_equal(windows.numpy(), np.lib.stride_tricks.sliding_window_view(data, 3))
    backwards = views.as_strided(t, (5,), (-2,), 9)
    np.testing.assert_array_equal(backwards.numpy(), data[9::-2])
    assert views.as_strided(t, (0, 4), (2**40, 1), 10).shape == (0, 4)
    empty = em.zeros((0, 1, 3, 4), dtype="bfloat16")[..., ::-1]  # reversed: its offset (3) lies past its empty storage
    assert views.as_strided(empty, (0, 2), (1, 1), empty.offset).shape == (0, 2)
    # bfloat16 convolutions run the composite, whose windows are such a view
    out = em.nn.functional.conv2d(empty, em.ones((2, 1, 1, 3), dtype="bfloat16"))
    assert out.shape == (0, 2, 3, 2)


# ---- modules ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("make", "make_torch"), [
    (lambda: nn.Conv2d(0, 3, 3), lambda: torch.nn.Conv2d(0, 3, 3)),
    (lambda: nn.Linear(0, 4), lambda: torch.nn.Linear(0, 4)),
])
def test_layers_without_inputs_build_as_in_torch(make, make_torch):
    layer = make()
    with pytest.warns(UserWarning):  # PyTorch's "Initializing zero-element tensors is a no-op"
        reference = make_torch()
    assert layer.weight.shape == tuple(reference.weight.shape)
    np.testing.assert_array_equal(layer.bias.numpy(), np.zeros(reference.bias.shape, np.float32))


# ---- writes across devices ----------------------------------------------------------------------

def test_host_data_written_into_a_device_tensor_is_converted(toy):
    t = em.zeros((3,), device="toy")
    t[0:2] = [1.0, 2.0]
    t[2] = np.float32(3.0)
    assert t.device == "toy:0" and t.tolist() == [1.0, 2.0, 3.0]
