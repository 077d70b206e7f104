"""A catalogue of mistakes and the typed error each one must raise.

Every entry is ``(id, bad call, expected error type, substring of the message)``.  The expected
types are ember's typed errors (ember_core/errors.py), each a subclass of the built-in error a
Python user would catch for the same mistake, or a plain built-in where ember documents one.
Besides raising the right error, no entry may take the process down: the whole catalogue also runs
in a child process, which must exit normally.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember_core as em
from ember_core import nn, views


def _x():
    return em.ones((2, 3))


def _i():
    return em.ones((3,), dtype="int32")


def _b():
    return em.asarray([True, False])


def _u():
    return em.ones((3,), dtype="uint8")


def _c():
    return em.ones((2,), dtype="complex64")


def _iadd(t, v):
    t += v


def _imul(t, v):
    t *= v


def _ior(t, v):
    t |= v


def _setitem(t, key, value):
    t[key] = value


XFAIL = "xfail"

CATALOGUE = [
    # ---- shapes ----------------------------------------------------------------------------------
    ("broadcast mismatch", lambda: _x() + em.ones((4,)), em.ShapeError, "do not broadcast"),
    ("broadcast mismatch, 3 operands", lambda: em.where(_b(), em.ones((3,)), 0.0), em.ShapeError, "do not broadcast"),
    ("broadcast_to fewer dims", lambda: em.broadcast_to(_x(), (3,)), em.ShapeError, "fewer dimensions"),
    ("broadcast_to mismatch", lambda: em.broadcast_to(_x(), (3, 3)), em.ShapeError, "cannot broadcast"),
    ("matmul inner dims", lambda: _x() @ _x(), em.ShapeError, "do not fit"),
    ("matmul 1-d inner dims", lambda: em.ones((3,)) @ em.ones((4,)), em.ShapeError, "do not fit"),
    ("matmul batch mismatch", lambda: em.ones((2, 2, 3)) @ em.ones((3, 3, 4)), em.ShapeError, "do not broadcast"),
    ("matmul 0-d", lambda: em.matmul(em.sum(em.ones((2,))), em.ones((2,))), em.ShapeError, "at least 1-d"),
    ("reshape size", lambda: _x().reshape((4, 2)), em.ShapeError, "cannot reshape"),
    ("reshape two -1", lambda: _x().reshape((-1, -1)), em.ShapeError, "at most one -1"),
    ("reshape -1 with 0", lambda: _x().reshape((0, -1)), em.ShapeError, "cannot reshape"),
    ("reshape copy=False", lambda: _x().mT.reshape((6,), copy=False), em.ShapeError, "copy=False"),
    ("negative dimension", lambda: em.zeros((2, -1)), em.ShapeError, "negative dimension"),
    ("axis out of range", lambda: em.sum(_x(), axis=2), em.ShapeError, "out of range"),
    ("negative axis out of range", lambda: em.max(_x(), axis=-3), em.ShapeError, "out of range"),
    ("argmax axis out of range", lambda: em.argmax(_x(), axis=2), em.ShapeError, "out of range"),
    ("sort axis out of range", lambda: em.sort(_x(), axis=2), em.ShapeError, "out of range"),
    ("cumulative_sum axis out of range", lambda: em.cumulative_sum(_x(), axis=-3), em.ShapeError, "out of range"),
    ("repeated axis", lambda: em.sum(_x(), axis=(0, 0)), em.ShapeError, "repeated axis"),
    ("repeated axis via negative", lambda: em.prod(_x(), axis=(1, -1)), em.ShapeError, "repeated axis"),
    ("repeated axis in mean", lambda: em.mean(_x(), axis=(0, -2)), em.ShapeError, "repeated axis"),
    ("tuple axis for argmax", lambda: em.argmax(_x(), axis=(0, 1)), TypeError, "axis must be an int"),
    ("permute_dims not a permutation", lambda: em.permute_dims(_x(), (0, 0)), em.ShapeError, "permutation"),
    ("permute_dims too short", lambda: em.permute_dims(_x(), (0,)), em.ShapeError, "permutation"),
    ("squeeze a non-1 axis", lambda: em.squeeze(_x(), axis=0), em.ShapeError, "cannot squeeze"),
    ("expand_dims out of range", lambda: em.expand_dims(_x(), axis=4), em.IndexOutOfRangeError, "out of range"),
    ("moveaxis out of range", lambda: em.moveaxis(_x(), 0, 5), em.ShapeError, "out of range"),
    ("moveaxis repeated", lambda: em.moveaxis(_x(), (0, 0), (0, 1)), em.ShapeError, "unique"),
    ("flip axis out of range", lambda: em.flip(_x(), axis=3), em.ShapeError, "out of range"),
    ("flatten start after end", lambda: em.ones((2, 3, 4)).flatten(2, 0), em.ShapeError, "comes after"),
    (".T of 3-d", lambda: em.ones((2, 2, 2)).T, em.ShapeError, ".T needs a 2-d"),
    (".mT of 1-d", lambda: em.ones((3,)).mT, em.ShapeError, "at least 2"),
    ("scan without axis", lambda: em.cumulative_sum(_x()), em.ShapeError, "axis is required"),
    ("concat mismatch", lambda: em.concat([_x(), em.ones((3, 3))], axis=1), em.ShapeError, "differ"),
    ("concat ndim mismatch", lambda: em.concat([_x(), em.ones((3,))]), em.ShapeError, "differ"),
    ("concat nothing", lambda: em.concat([]), em.ShapeError, "at least one"),
    ("stack mismatch", lambda: em.stack([_x(), em.ones((3, 3))]), em.ShapeError, "equal shapes"),
    ("tensordot contracted dims", lambda: em.tensordot(_x(), _x(), axes=1), em.ShapeError, "differ"),
    ("tensordot too many axes", lambda: em.tensordot(_x(), _x(), axes=3), em.ShapeError, "must be in"),
    ("vecdot axis", lambda: em.vecdot(_x(), _x(), axis=5), em.ShapeError, "out of range"),
    ("setitem shape", lambda: _setitem(_x(), slice(None), em.ones((4,))), em.ShapeError, "cannot broadcast"),
    ("in-place result shape", lambda: _iadd(em.ones((3, 1)), em.ones((1, 4))), em.ShapeError, "in-place"),
    ("item of many", lambda: _x().item(), em.ShapeError, "one element"),
    ("bool of many", lambda: bool(_x()), em.ShapeError, "one element"),
    ("ragged data", lambda: em.asarray([[1, 2], [3]]), em.ShapeError, "cannot build a tensor"),
    ("empty max", lambda: em.max(em.zeros((0,))), em.ShapeError, "empty"),
    ("empty min along axis", lambda: em.min(em.zeros((2, 0)), axis=1), em.ShapeError, "empty"),
    ("empty argmax", lambda: em.argmax(em.zeros((0, 3)), axis=0), em.ShapeError, "empty"),
    ("empty argmin", lambda: em.argmin(em.zeros((0,))), em.ShapeError, "empty"),
    # ---- dtypes ----------------------------------------------------------------------------------
    ("abs of bool", lambda: em.abs(_b()), em.DTypeError, "abs does not accept bool"),
    ("negative of bool", lambda: -_b(), em.DTypeError, "negative does not accept bool"),
    ("add bools", lambda: _b() + _b(), em.DTypeError, "add does not accept bool"),
    ("matmul of bools", lambda: em.matmul(_b(), _b()), em.DTypeError, "matmul does not accept bool"),
    ("logical_and of floats", lambda: em.logical_and(_x(), _x()), em.DTypeError, "logical_and does not accept float32"),
    ("logical_not of ints", lambda: em.logical_not(_i()), em.DTypeError, "logical_not does not accept int32"),
    ("bitwise_and of floats", lambda: em.bitwise_and(_x(), _x()), em.DTypeError, "bitwise_and does not accept"),
    ("& of floats", lambda: _x() & _x(), em.DTypeError, "bitwise_and does not accept float32"),
    ("| of float and int", lambda: em.ones((3,)) | _i(), em.DTypeError, "bitwise_or does not accept float32"),
    ("~ of floats", lambda: ~_x(), em.DTypeError, "bitwise_invert does not accept float32"),
    ("<< of floats", lambda: _x() << 1, em.DTypeError, "bitwise_left_shift does not accept float32"),
    (">> of bools", lambda: _b() >> _b(), em.DTypeError, "bitwise_right_shift does not accept bool"),
    ("floor_divide of complex", lambda: _c() // _c(), em.DTypeError, "floor_divide does not accept complex64"),
    ("comparison of complex", lambda: _c() > 0, em.DTypeError, "greater does not accept complex64"),
    ("maximum of complex", lambda: em.maximum(_c(), _c()), em.DTypeError, "maximum does not accept complex64"),
    ("atan2 of complex", lambda: em.atan2(_c(), _c()), em.DTypeError, "atan2 does not accept complex64"),
    ("signbit of ints", lambda: em.signbit(_i()), em.DTypeError, "signbit does not accept int32"),
    ("erf of complex", lambda: em.erf(_c()), em.DTypeError, "erf does not accept complex64"),
    ("max of complex", lambda: em.max(_c()), em.DTypeError, "max does not accept complex64"),
    ("argmax of complex", lambda: em.argmax(_c()), em.DTypeError, "argmax does not accept complex64"),
    ("sort of complex", lambda: em.sort(_c()), em.DTypeError, "sort does not accept complex64"),
    ("mean of ints", lambda: em.mean(_i()), em.DTypeError, "floating dtype"),
    ("var of bools", lambda: em.var(_b()), em.DTypeError, "floating dtype"),
    ("clip of complex", lambda: em.clip(_c(), 0, 1), em.DTypeError, "real dtype"),
    ("where with a float condition", lambda: em.where(_x(), _x(), _x()), em.DTypeError, "condition must be bool"),
    ("in-place int += float scalar", lambda: _iadd(_i(), 1.5), em.DTypeError, "in-place add"),
    ("in-place int *= float tensor", lambda: _imul(_i(), em.ones((3,))), em.DTypeError, "in-place multiply"),
    ("in-place float += complex", lambda: _iadd(em.ones((3,)), 1j), em.DTypeError, "in-place add"),
    ("in-place bool |= int", lambda: _ior(_b(), 2), em.DTypeError, "in-place"),
    ("uint8 + 300", lambda: _u() + 300, em.DTypeError, "300 does not fit in uint8"),
    ("uint8 - (-1) scalar", lambda: _u() - (-1), em.DTypeError, "-1 does not fit in uint8"),
    ("int8 * 1000", lambda: em.ones((2,), dtype="int8") * 1000, em.DTypeError, "1000 does not fit in int8"),
    ("300 + uint8 (left scalar)", lambda: 300 + _u(), em.DTypeError, "does not fit in uint8"),
    ("int64 + 2**63", lambda: em.ones((2,), dtype="int64") + 2**63, em.DTypeError, "does not fit in int64"),
    ("full uint8 300", lambda: em.full((2,), 300, dtype="uint8"), em.DTypeError, "does not fit in uint8"),
    ("full int with a float", lambda: em.full((2,), 1.5, dtype="int32"), em.DTypeError, "cannot fill int32"),
    ("unknown dtype name", lambda: em.ones((2,), dtype="float8"), em.DTypeError, "not an ember dtype"),
    ("astype to an unknown dtype", lambda: _x().astype("nope"), em.DTypeError, "not an ember dtype"),
    ("sum with an unknown dtype", lambda: em.sum(_x(), dtype="nope"), em.DTypeError, "not an ember dtype"),
    ("numpy uint32", lambda: em.asarray(np.zeros(2, np.uint32)), em.DTypeError, "no ember equivalent"),
    ("from_numpy of uint64", lambda: em.from_numpy(np.zeros(2, np.uint64)), em.DTypeError, "no ember equivalent"),
    ("strings", lambda: em.asarray(["a", "b"]), em.DTypeError, "no ember equivalent"),
    ("numpy() of bfloat16", lambda: em.ones((2,), dtype="bfloat16").numpy(), em.DTypeError, "numpy has no bfloat16"),
    ("float tensor as an index", lambda: [1, 2][em.ones((1,)).reshape(())], em.DTypeError, "integer tensors"),
    ("finfo of an integer dtype", lambda: em.finfo(em.int32), em.DTypeError, "finfo needs a floating"),
    ("iinfo of a float dtype", lambda: em.iinfo(em.float32), em.DTypeError, "iinfo needs an integer"),
    ("isdtype unknown kind", lambda: em.isdtype(em.float32, "floatish"), em.DTypeError, "unknown kind"),
    ("result_type of nothing", lambda: em.result_type(), em.DTypeError, "at least one"),
    # Python numbers that would wrap, casts that would drop a part, flags read by truthiness (issue 24)
    ("asarray of 2**63", lambda: em.asarray(2**63), em.DTypeOverflowError, f"{2**63} does not fit in int64"),
    ("asarray of -2**63 - 1", lambda: em.asarray(-2**63 - 1), em.DTypeOverflowError, "does not fit in int64"),
    ("asarray of a list with 2**64", lambda: em.asarray([[1], [2**64]]), em.DTypeOverflowError,
     "does not fit in int64"),
    ("asarray of ints beyond int64 of both signs", lambda: em.asarray([-1, 2**63]), em.DTypeOverflowError,
     "does not fit in int64"),
    ("asarray 300 as uint8", lambda: em.asarray(300, dtype="uint8"), em.DTypeOverflowError,
     "300 does not fit in uint8"),
    ("asarray [-1] as uint8", lambda: em.asarray([-1, 0], dtype="uint8"), em.DTypeOverflowError, "-1 does not fit"),
    ("asarray [200] as int8", lambda: em.asarray([200], dtype="int8"), em.DTypeOverflowError, "200 does not fit"),
    ("setitem 300 into uint8", lambda: _setitem(_u(), 0, 300), em.DTypeOverflowError, "300 does not fit in uint8"),
    ("full_like uint8 256", lambda: em.full_like(_u(), 256), em.DTypeOverflowError, "256 does not fit in uint8"),
    ("int64 + 2**70", lambda: em.ones((2,), dtype="int64") + 2**70, em.DTypeOverflowError, "does not fit in int64"),
    ("astype complex to float", lambda: _c().astype("float32"), em.DTypeError, "imaginary part"),
    ("astype complex to int", lambda: em.astype(_c(), em.int32), em.DTypeError, "imaginary part"),
    ("to() complex to float64", lambda: _c().to(em.float64), em.DTypeError, "imaginary part"),
    ("asarray of complex data as float", lambda: em.asarray([1 + 2j], dtype="float32"), em.DTypeError,
     "imaginary part"),
    ("asarray of a complex tensor as float", lambda: em.asarray(_c(), dtype="float32"), em.DTypeError,
     "imaginary part"),
    ("setitem complex into float", lambda: _setitem(em.ones((2,)), slice(None), _c()), em.DTypeError,
     "imaginary part"),
    ("setitem complex into float by index", lambda: _setitem(em.ones((2,)), em.asarray([1]), _c()[:1]),
     em.DTypeError, "imaginary part"),
    ("sum of complex into float", lambda: em.sum(_c(), dtype="float32"), em.DTypeError, "imaginary part"),
    ("prod with dtype=bool", lambda: em.prod(_b().reshape((1, 2)), axis=1, keepdims=True, dtype=em.bool_),
     em.DTypeError, "prod accumulates in a numeric dtype"),
    ("sum with dtype=bool", lambda: em.sum(_x(), dtype="bool"), em.DTypeError, "sum accumulates in a numeric dtype"),
    ("cumulative_sum with dtype=bool", lambda: em.cumulative_sum(_b(), dtype="bool"), em.DTypeError,
     "cumulative_sum accumulates"),
    ("sort descending='no'", lambda: em.sort(_x(), descending="no"), TypeError, "descending must be True or False"),
    ("argsort stable=0", lambda: em.argsort(_x(), stable=0), TypeError, "stable must be True or False"),
    ("sum keepdims=1", lambda: em.sum(_x(), axis=0, keepdims=1), TypeError, "keepdims must be True or False"),
    ("argmax keepdims='yes'", lambda: em.argmax(_x(), keepdims="yes"), TypeError, "keepdims must be True or False"),
    ("mean keepdims a tensor", lambda: em.mean(_x(), keepdims=em.asarray(True)), TypeError, "keepdims must be"),
    ("var keepdims=1 of a tensor that requires grad", lambda: em.var(_x().requires_grad_(), keepdims=1), TypeError,
     "var(x: Tensor"),
    ("cumulative_sum include_initial='no'", lambda: em.cumulative_sum(_x(), axis=1, include_initial="no"), TypeError,
     "include_initial must be True or False"),
    ("max_pool2d ceil_mode='no'", lambda: em.max_pool2d(em.ones((1, 1, 5, 5)), 2, ceil_mode="no"), TypeError,
     "ceil_mode must be True or False"),
    ("avg_pool2d count_include_pad=None", lambda: em.avg_pool2d(em.ones((1, 1, 4, 4)), 2, count_include_pad=None),
     TypeError, "count_include_pad must be True or False"),
    ("index_put accumulate=1", lambda: em.index_put(_x(), em.asarray([0]), 1.0, axis=0, accumulate=1), TypeError,
     "accumulate must be True or False"),
    # ---- sizes, layouts, modules (issue 24) ----------------------------------------------------------
    ("a dim of 2**63", lambda: em.zeros((2**63, 0)), em.ShapeError, "too large"),
    ("dims multiplying past int64", lambda: em.ones((2**32, 2**32, 0), dtype="bool"), em.ShapeError, "too large"),
    ("random of a dim of 2**63", lambda: em.random_normal((2**63, 0)), em.ShapeError, "too large"),
    ("reshape to a dim of 2**63", lambda: em.zeros((0,)).reshape((2**63, 0)), em.ShapeError, "too large"),
    ("broadcast_to 2**63 elements", lambda: em.broadcast_to(em.ones(()), (2**32, 2**31)), em.ShapeError, "too large"),
    ("arange past int64", lambda: em.arange(2**63), em.ShapeError, "too large"),
    ("sum over a broadcast of 2**62 elements", lambda: em.broadcast_to(em.ones(()), (2**31, 2**31)).sum(),
     em.ShapeError, "more than any tensor can hold"),
    ("any over a broadcast of 2**62 bools", lambda: em.any(em.broadcast_to(_b()[:1], (2**31, 2**31))), em.ShapeError,
     "more than any tensor can hold"),
    ("argmax over a broadcast of 2**60 float64", lambda: em.argmax(em.broadcast_to(em.ones((), dtype="float64"),
                                                                               (2**60,))),
     em.ShapeError, "more than any tensor can hold"),
    ("allocation beyond the address space", lambda: em.zeros((2**56,)), MemoryError, "beyond any address space"),
    ("broadcast_shapes of a str", lambda: em.broadcast_shapes((2,), "ab"), TypeError, "sequence of ints"),
    ("broadcast_shapes of a negative size", lambda: em.broadcast_shapes((2,), (-1,)), em.ShapeError, "negative"),
    ("concat with an int", lambda: em.concat([_x(), 1]), TypeError, "concat: x must be an ember tensor"),
    ("concat of a tensor", lambda: em.concat(_x()), TypeError, "list or tuple of ember tensors"),
    ("stack of a str", lambda: em.stack("ab"), TypeError, "list or tuple of ember tensors"),
    ("stack with None", lambda: em.stack([_x(), None]), TypeError, "stack: x must be an ember tensor"),
    ("write into a broadcast view", lambda: _setitem(em.broadcast_to(em.zeros(3), (2, 3)), ..., 1.0), em.ShapeError,
     "broadcast view whose elements share memory"),
    ("in-place op on a broadcast view", lambda: _iadd(em.broadcast_to(em.zeros(3), (2, 3)), 1.0), em.ShapeError,
     "broadcast view whose elements share memory"),
    ("index_put into a broadcast view", lambda: em.index_put(em.broadcast_to(em.zeros(3), (2, 3)), em.asarray([0]),
                                                             em.ones((1, 3)), axis=0),
     em.ShapeError, "index_put: x (shape (2, 3), strides (0, 1)) is a broadcast view"),
    ("sgd_step on a broadcast parameter", lambda: em.sgd_step(em.broadcast_to(em.zeros(3), (2, 3)), em.ones((2, 3)),
                                                              em.zeros((2, 3)), lr=0.1, momentum=0.9),
     em.ShapeError, "sgd_step: param"),
    ("as_strided negative size", lambda: views.as_strided(em.zeros((4,)), (-1,), (1,), 0), em.ShapeError,
     "negative dimension"),
    ("as_strided str size", lambda: views.as_strided(em.zeros((4,)), ("a",), (1,), 0), TypeError, "sequence of ints"),
    ("as_strided float stride", lambda: views.as_strided(em.zeros((4,)), (2,), (1.5,), 0), TypeError,
     "strides is a sequence of ints"),
    ("as_strided past the storage", lambda: views.as_strided(em.zeros((4,)), (2, 2), (1, 3), 0), em.ShapeError,
     "outside the storage"),
    ("as_strided before the storage", lambda: views.as_strided(em.zeros((4,)), (2,), (-1,), 0), em.ShapeError,
     "outside the storage"),
    ("as_strided stride beyond int64", lambda: views.as_strided(em.zeros((4,)), (1,), (2**63,), 0), em.ShapeError,
     "outside the storage"),
    ("as_strided offset of an empty view", lambda: views.as_strided(em.zeros((4,)), (0,), (1,), 2**63),
     em.ShapeError, "outside the storage"),
    ("as_strided strides for other dims", lambda: views.as_strided(em.zeros((4,)), (2,), (1, 1), 0), em.ShapeError,
     "2 strides for the 1 dims"),
    ("one_hot class beyond num_classes", lambda: nn.functional.one_hot(em.asarray([0, 5]), 3),
     em.IndexOutOfRangeError, "class 5 is outside"),
    ("one_hot negative class", lambda: nn.functional.one_hot(em.asarray([[-1], [0]]), 3), em.IndexOutOfRangeError,
     "class -1 is outside"),
    ("one_hot of num_classes -1", lambda: nn.functional.one_hot(em.asarray([0]), -1), ValueError, "num_classes"),
    ("Conv2d groups=0", lambda: nn.Conv2d(4, 4, 3, groups=0), em.ShapeError, "groups must be at least 1"),
    ("Conv2d channels not in groups", lambda: nn.Conv2d(4, 6, 3, groups=4), em.ShapeError, "out_channels=6"),
    ("Conv2d float channels", lambda: nn.Conv2d(2.5, 3, 3), TypeError, "in_channels must be an int"),
    ("GroupNorm of 0 groups", lambda: nn.GroupNorm(0, 4), em.ShapeError, "num_groups must be at least 1"),
    ("GroupNorm of -2 groups", lambda: nn.GroupNorm(-2, 4), em.ShapeError, "num_groups must be at least 1"),
    # ---- devices ---------------------------------------------------------------------------------
    ("unknown device type", lambda: em.ones((2,), device="nosuch"), em.BackendUnavailableError,
     "ember has no backend of that name"),
    ("device index beyond count", lambda: em.ones((2,), device="cpu:3"), em.BackendUnavailableError,
     "not available"),
    ("malformed device name", lambda: em.ones((2,), device="cpu:x"), em.DeviceError, "not a device name"),
    ("device of a wrong type", lambda: em.ones((2,), device=3.5), em.DeviceError, "expected a device name"),
    ("asarray(copy=False) of host data", lambda: em.asarray([1.0], copy=False), em.DeviceError, "from_numpy"),
    # ---- indices ---------------------------------------------------------------------------------
    ("index beyond the end", lambda: em.ones((3,))[10], em.IndexOutOfRangeError, "out of range"),
    ("negative index beyond the start", lambda: em.ones((3,))[-4], em.IndexOutOfRangeError, "out of range"),
    ("index in a later dim", lambda: _x()[1, 3], em.IndexOutOfRangeError, "dimension 1 of size 3"),
    ("index into an empty dim", lambda: em.zeros((0, 2))[0], em.IndexOutOfRangeError, "out of range"),
    ("too many indices", lambda: em.ones((3,))[0, 0], em.IndexOutOfRangeError, "too many indices"),
    ("too many indices with None", lambda: _x()[None, 0, 0, 0], em.IndexOutOfRangeError, "too many indices"),
    ("index into 0-d", lambda: em.ones((1,)).reshape(())[0], em.IndexOutOfRangeError, "too many indices"),
    ("two ellipses", lambda: em.ones((3,))[..., ...], IndexError, "single ellipsis"),
    ("setitem out of range", lambda: _setitem(em.ones((3,)), 5, em.ones((1,))), em.IndexOutOfRangeError,
     "out of range"),
    ("zero slice step", lambda: em.ones((3,))[::0], ValueError, "step cannot be zero"),
    ("float index", lambda: em.ones((3,))[1.5], IndexError, "is not a valid index"),
    # ---- operands that are not tensors -----------------------------------------------------------
    ("unary op of a list", lambda: em.exp([1.0, 2.0]), TypeError, "must be an ember tensor"),
    ("binary op of two lists", lambda: em.add([1.0], [2.0]), TypeError, "at least one operand"),
    ("binary op of two Python scalars", lambda: em.multiply(2, 3), TypeError, "at least one operand"),
    ("tensor + str", lambda: _x() + "a", TypeError, "Python scalar"),
    ("tensor + numpy array", lambda: _x() + np.ones(3), TypeError, "Python scalar"),
    ("tensor + None", lambda: _x() + None, TypeError, "Python scalar"),
    ("matmul with a list", lambda: em.matmul(_x(), [[1.0]]), TypeError, "must be an ember tensor"),
    ("sum of a list", lambda: em.sum([1, 2]), TypeError, "must be an ember tensor"),
    ("sort of a numpy array", lambda: em.sort(np.ones(3)), TypeError, "must be an ember tensor"),
    ("where with a list condition", lambda: em.where([True], _x(), _x()), TypeError, "must be an ember tensor"),
    ("unknown keyword", lambda: em.sum(_x(), axes=0), TypeError, "axes"),
    ("Tensor() constructor", lambda: em.Tensor(), TypeError, "asarray"),
    ("from_numpy of a list", lambda: em.from_numpy([1, 2]), TypeError, "numpy.ndarray"),
    ("shape of strings", lambda: em.full("ab", 1.0), TypeError, "sequence of ints"),
    ("float in a shape", lambda: em.zeros((2.5,)), TypeError, "sequence of ints"),
    ("len of 0-d", lambda: len(em.ones((1,)).reshape(())), TypeError, "0-d"),
    # ---- other documented ValueErrors ------------------------------------------------------------
    ("set_num_threads(0)", lambda: em.set_num_threads(0), ValueError, "positive int"),
    ("arange step 0", lambda: em.arange(0, 10, 0), ValueError, "step must not be zero"),
    ("linspace negative num", lambda: em.linspace(0, 1, -1), ValueError, "num must be >= 0"),
    ("unsupported Array API version", lambda: _x().__array_namespace__(api_version="2019.01"), ValueError,
     "unsupported Array API version"),
    ("unknown fallback policy", lambda: em.fallback_policy("sometimes").__enter__(), ValueError,
     "fallback policy"),
    ("allocation beyond 2**63 bytes", lambda: em.zeros((2**61,)), MemoryError, "beyond any address space"),
    ("allocation the host cannot serve", lambda: em.zeros((2**46,)), MemoryError, "could not allocate"),
]


def _params():
    out = []
    for entry in CATALOGUE:
        ident, call, error, text, *rest = entry
        marks = [pytest.mark.xfail(strict=True, reason=rest[1])] if rest and rest[0] == XFAIL else []
        out.append(pytest.param(call, error, text, id=ident, marks=marks))
    return out


@pytest.mark.parametrize(("call", "error", "text"), _params())
def test_bad_call_raises_the_documented_error(call, error, text):
    with pytest.raises(error) as info:
        call()
    assert text in str(info.value), f"message {str(info.value)!r} lacks {text!r}"
    errors = error if isinstance(error, tuple) else (error,)
    if all(issubclass(e, em.EmberError) for e in errors):
        assert isinstance(info.value, em.EmberError)


def test_catalogue_ids_are_unique_and_cover_every_category():
    ids = [entry[0] for entry in CATALOGUE]
    assert len(ids) == len(set(ids))
    kinds = {entry[2] for entry in CATALOGUE}
    for needed in (em.ShapeError, em.DTypeError, em.DeviceError, em.BackendUnavailableError,
                   em.IndexOutOfRangeError, TypeError):
        assert needed in kinds


def test_the_catalogue_never_crashes_the_process():
    """Every bad call in a child process: each must end in a Python exception, and the child must exit
    normally (no segfault, no abort, no SIGFPE)."""
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_bad_inputs import CATALOGUE\n"
        "raised = 0\n"
        "for entry in CATALOGUE:\n"
        "    try:\n"
        "        entry[1]()\n"
        "    except BaseException:\n"
        "        raised += 1\n"
        "print('raised', raised, 'of', len(CATALOGUE))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"the child died with {out.returncode}: {out.stderr[-2000:]}"
    assert out.stdout.split() == ["raised", str(len(CATALOGUE)), "of", str(len(CATALOGUE))], out.stdout


# ---- mixing devices (the toy backend of tests/toy_backend.py) -------------------------------------

TOY_CATALOGUE = [
    ("add", lambda a, c: a + c, em.DeviceError, "different devices"),
    ("reflected add", lambda a, c: c + a, em.DeviceError, "different devices"),
    ("matmul", lambda a, c: em.matmul(a.reshape((1, 2)), c.reshape((2, 1))), em.DeviceError, "different devices"),
    ("where", lambda a, c: em.where(em.asarray([True, False]), a, c), em.DeviceError, "different devices"),
    ("in-place", lambda a, c: _iadd(a, c), em.DeviceError, "different devices"),
    ("concat", lambda a, c: em.concat([a, c]), em.DeviceError, ""),
    ("stack", lambda a, c: em.stack([a, c]), em.DeviceError, ""),
    ("setitem of a slice", lambda a, c: _setitem(c, slice(0, 2), a), em.DeviceError, "never copies"),
    ("setitem into a toy tensor", lambda a, c: _setitem(a, Ellipsis, c), em.DeviceError, "never copies"),
    ("setitem by index", lambda a, c: _setitem(c, em.asarray([0, 1]), a), em.DeviceError,
     "writing a tensor on toy:0 into one on cpu"),
    ("device index beyond count", lambda a, c: em.ones((2,), device="toy:1"), em.BackendUnavailableError,
     "not available"),
]


def _toy_params():
    out = []
    for ident, call, error, text, *rest in TOY_CATALOGUE:
        marks = [pytest.mark.xfail(strict=True, reason=rest[1])] if rest and rest[0] == XFAIL else []
        out.append(pytest.param(call, error, text, id=ident, marks=marks))
    return out


@pytest.mark.parametrize(("call", "error", "text"), _toy_params())
def test_mixing_devices_raises(toy, call, error, text):
    a = em.ones((2,), device="toy")
    c = em.ones((2,))
    with pytest.raises(error) as info:
        call(a, c)
    assert text in str(info.value)
    assert isinstance(info.value, em.EmberError)


# ---- the hierarchy ------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("error", "builtin"),
    [(em.ShapeError, ValueError), (em.DTypeError, TypeError), (em.DTypeOverflowError, OverflowError),
     (em.DTypeOverflowError, em.DTypeError), (em.DeviceError, RuntimeError),
     (em.IndexOutOfRangeError, IndexError), (em.BackendUnavailableError, RuntimeError),
     (em.UnsupportedOpError, NotImplementedError), (em.PluginError, RuntimeError), (em.RegistryError, ValueError),
     (em.KernelError, RuntimeError)],
)
def test_typed_errors_subclass_the_builtin_a_user_would_catch(error, builtin):
    assert issubclass(error, builtin)
    assert issubclass(error, em.EmberError)
    assert issubclass(em.EmberError, Exception) and not issubclass(em.EmberError, (ValueError, TypeError))
    assert error.__module__ == "ember_core.errors"


def test_typed_errors_are_caught_by_builtin_handlers():
    try:
        em.ones((3,))[7]
    except IndexError as e:
        assert isinstance(e, em.IndexOutOfRangeError)
    else:
        pytest.fail("no IndexError")
    try:
        em.ones((2,)) + em.ones((3,))
    except ValueError as e:
        assert isinstance(e, em.ShapeError)
    else:
        pytest.fail("no ValueError")
    try:
        em.logical_not(em.ones((2,)))
    except TypeError as e:
        assert isinstance(e, em.DTypeError)
    else:
        pytest.fail("no TypeError")


def test_a_failed_op_leaves_its_operands_intact():
    x = em.asarray([1, 2, 3], dtype="int32")
    alias = x.numpy()
    for bad in (lambda: _iadd(x, 1.5), lambda: x + em.ones((4,)), lambda: _setitem(x, slice(None), em.ones((2,)))):
        with pytest.raises(em.EmberError):
            bad()
    assert alias.tolist() == [1, 2, 3] and x.tolist() == [1, 2, 3]
