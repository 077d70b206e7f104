"""Data movement and creation on every target: copy, astype (every source and target dtype, with
each dtype's special values), full (every dtype, fill values at its edges), where and clip (tensors
and Python scalars, broadcasting), concat / stack / unstack (mixed dtypes promote; every axis of
either sign), tril / triu, repeat, roll, tile, take and index_put, over strided / reversed /
offset / broadcast inputs and 0-size and 1-size dimensions.  Moving data is exact: values, NaN
positions and the signs of zeros.  Bad calls must raise as numpy does.

ember follows numpy except where it documents otherwise (the Array API's rules): casting complex
to a real dtype is refused; take and repeat along an axis need one (axis=None only for 1-d, or to
flatten in repeat); tril and triu need 2 dims; a 0-d tensor has one axis, 0 (-1), as in PyTorch."""

from __future__ import annotations

import math
from functools import reduce
from typing import Any

import numpy as np
import pytest
from campaign import (
    KIND,
    Drawn,
    Recorded,
    assert_matches,
    assert_unchanged,
    cases,
    elements,
    elsewhere,
    examples,
    host,
    raises_like,
    shapes,
    tensors,
)
from ember_conformance.references import REFERENCES
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_elementwise import promote, scalar_dtype
from test_prop_reductions import ALL_DTYPES, along, axes, one_tensor

import ember_core as em
from ember_core.errors import DTypeError

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's, on the special values

COVERED = ["copy", "astype", "full", "where", "clip", "concat", "stack", "unstack", "tril", "triu", "repeat", "roll",
           "tile", "take", "index_put"]
INDEX_DTYPES = ["int8", "int16", "int32", "int64", "uint8"]


def assert_same(got: Any, expected: Any, *, dtype: str, what: str = "result", zero_signs: bool = True) -> None:
    """Exactly ``expected`` rounded to ``dtype``: values, NaN positions and the signs of zeros."""
    assert_matches(got, expected, dtype=dtype, rtol=0.0, atol=0.0, what=what)
    if zero_signs and KIND[dtype] in "fc":
        g, e = host(got), np.asarray(expected)
        parts = [(g, e)] if KIND[dtype] == "f" else [(g.real, e.real), (g.imag, e.imag)]
        for gp, ep in parts:
            flipped = (ep == 0) & (np.signbit(gp) != np.signbit(ep))
            assert not flipped.any(), f"{what}: the sign of zero differs at {np.argwhere(flipped)[:4].tolist()}"


def python_scalar(value: Any, dtype: str) -> Any:
    """A drawn element of ``dtype`` as the Python scalar of its kind."""
    return {"b": bool, "i": int, "u": int, "f": float, "c": complex}[KIND[dtype]](value)


def scalar_sources(partner: str) -> list[str]:
    """The dtypes a Python scalar beside a ``partner`` tensor is drawn from: the partner's own (the
    scalar then fits it), bool (a lower kind) and the higher kinds (the scalar then gives its
    kind's default dtype); an int beside a floating partner too (it may round to inf)."""
    kind = KIND[partner]
    higher = {"b": ["int64", "float64", "complex128"], "i": ["float64", "complex128"], "u": ["float64", "complex128"],
              "f": ["int64", "complex128"], "c": ["int64", "float64"]}[kind]
    return [partner, "bool", *higher]


# ---- copy, astype, full -------------------------------------------------------------------------

@pytest.mark.parametrize(("target", "op"), cases(["copy"]))
@examples(2)
@given(data=st.data())
def test_copy(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype, _, t, x = one_tensor(data, target, op)
    with target.active():
        got = em.copy(t)
    assert_same(got, x, dtype=dtype)
    assert_unchanged(t, x)


@pytest.mark.parametrize(("target", "op"), cases(["astype"]))
@examples(2)
@given(data=st.data())
def test_astype(target, op, data):
    """Every source dtype to every target dtype in each example (cheap, small tensors)."""
    if elsewhere(data, target, op):
        return
    shape = data.draw(shapes(max_dims=2), label="shape")
    copy = data.draw(st.booleans(), label="copy")
    device = data.draw(st.sampled_from([None, "cpu"]), label="device")
    for source in ALL_DTYPES:
        t, x = data.draw(tensors(shape, source, target.device, **target.limits(op, source)), label=f"x_{source}")
        for dtype in ALL_DTYPES:
            with target.active():
                if KIND[source] == "c" and KIND[dtype] != "c" and dtype != "bool":
                    with pytest.raises(DTypeError):  # the Array API: which part to keep is the caller's to say
                        em.astype(t, dtype, copy=copy, device=device)
                    continue
                got = em.astype(t, dtype, copy=copy, device=device)
            assert_same(got, REFERENCES["astype"](x, dtype), dtype=dtype, what=f"{source} -> {dtype}")
            assert got.device == em.as_device(device or target.device), f"on {got.device}, not {device}"
            if not copy and dtype == source and em.as_device(device or target.device) == t.device:
                assert got is t, "copy=False to the same dtype must return x itself"
        assert_unchanged(t, x)


@pytest.mark.parametrize(("target", "op"), cases(["full"]))
@examples(4)
@given(data=st.data())
def test_full(target, op, data):
    """Fill values at each dtype's edges; without dtype=, the fill value's kind decides (bool,
    int64, float32, complex64: the default dtypes)."""
    if elsewhere(data, target, op):
        return
    kind_of = data.draw(st.sampled_from(ALL_DTYPES), label="values_of")
    value = python_scalar(data.draw(elements(kind_of), label="fill_value"), kind_of)
    dtype = data.draw(st.sampled_from([None, kind_of]), label="dtype")
    shape = data.draw(shapes() | st.integers(0, 4), label="shape")
    with target.active():
        got = em.full(shape, value, dtype=dtype, device=target.device)
    out = dtype or {"b": "bool", "i": "int64", "u": "int64", "f": "float32", "c": "complex64"}[KIND[kind_of]]
    assert_same(got, np.full(shape, value), dtype=out)
    assert got.device == em.as_device(target.device)


# ---- where, clip --------------------------------------------------------------------------------

def where_example(scalar: complex) -> Recorded:
    """A Python complex scalar beside an int8 tensor, chosen everywhere."""
    return Recorded("where", shapes=hnp.BroadcastableShapes(((1,), (1,), ()), (1,)), condition=Drawn([False], "bool"),
                    x1_dtype="int8", x2_dtype="bool", scalar="x2", x1=Drawn([0], "int8"), x2_kind="complex128",
                    x2=scalar)


@pytest.mark.parametrize(("target", "op"), cases(["where"]))
@examples(4)
@given(data=st.data())
@example(data=where_example(complex(4.5, -0.0)))  # then +0j: its zero's sign was the cached -0j's
@example(data=where_example(complex(4.5, 0.0)))
def test_where(target, op, data):
    """x1 and x2 tensors of any two dtypes (they promote), or one of them a Python scalar (it takes
    its partner's dtype, or its kind's default dtype when its kind is higher)."""
    if elsewhere(data, target, op):
        return
    sc, s1, s2 = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3),
                           label="shapes").input_shapes
    tc, cond = data.draw(tensors(sc, "bool", target.device), label="condition")
    dtypes = {name: data.draw(st.sampled_from(ALL_DTYPES), label=f"{name}_dtype") for name in ("x1", "x2")}
    scalar = data.draw(st.sampled_from([None, None, "x1", "x2"]), label="scalar")
    args, out = {}, promote(dtypes["x1"], dtypes["x2"])
    for name, shape, partner in (("x1", s1, "x2"), ("x2", s2, "x1")):
        if name == scalar:
            kind_of = data.draw(st.sampled_from(scalar_sources(dtypes[partner])), label=f"{name}_kind")
            value = python_scalar(data.draw(elements(kind_of), label=name), kind_of)
            args[name], out = (value, value), scalar_dtype(value, dtypes[partner])
        else:
            args[name] = data.draw(tensors(shape, dtypes[name], target.device), label=name)
    (t1, x1), (t2, x2) = args["x1"], args["x2"]
    with target.active():
        got = em.where(tc, t1, t2)
    assert_same(got, np.where(cond, x1, x2), dtype=out)
    assert_unchanged(tc, cond, "condition")


@st.composite
def broadcasting_to(draw: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``shape``: a suffix of it, some sizes made 1."""
    start = draw(st.integers(0, len(shape)))
    return tuple(1 if draw(st.booleans()) else n for n in shape[start:])


def bound(data: Any, x_shape: tuple[int, ...], dtype: str, device: str, label: str) -> tuple[Any, Any]:
    """clip's min or max: None, a Python scalar of x's kind, or a tensor that broadcasts to x."""
    form = data.draw(st.sampled_from(["none", "scalar", "tensor"]), label=f"{label}_form")
    if form == "none":
        return None, None
    if form == "scalar":
        value = python_scalar(data.draw(elements(dtype), label=label), dtype)
        return value, value
    return data.draw(tensors(data.draw(broadcasting_to(x_shape), label=f"{label}_shape"), dtype, device), label=label)


@pytest.mark.parametrize(("target", "op"), cases(["clip"]))
@examples(4)
@given(data=st.data())
@example(data=Recorded("clip", dtype="float16", shape=(), x=Drawn(0.0, "float16"), min_form="none", max_form="scalar",
                       max=-0.0))
def test_clip(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype, shape, t, x = one_tensor(data, target, op)
    (tmin, vmin), (tmax, vmax) = (bound(data, shape, dtype, target.device, name) for name in ("min", "max"))
    with target.active():
        got = em.clip(t, tmin, tmax)
    # (which of 0.0 and -0.0 is the larger is unspecified: numpy's maximum returns its first argument)
    assert_same(got, REFERENCES["clip"](x, vmin, vmax), dtype=dtype, zero_signs=False)
    assert_unchanged(t, x)


# ---- concat, stack, unstack ---------------------------------------------------------------------

def joined(data: Any, device: str, shapes_of: list[tuple[int, ...]]) -> tuple[list[Any], list[Any], str]:
    """Tensors of these shapes and drawn dtypes; the dtype they promote to."""
    dtypes = [data.draw(st.sampled_from(ALL_DTYPES), label=f"array{i}_dtype") for i in range(len(shapes_of))]
    drawn = [data.draw(tensors(s, d, device), label=f"array{i}") for i, (s, d) in enumerate(zip(shapes_of, dtypes))]
    return [t for t, _ in drawn], [x for _, x in drawn], reduce(promote, dtypes)


@pytest.mark.parametrize(("target", "op"), cases(["concat"]))
@examples(4)
@given(data=st.data())
def test_concat(target, op, data):
    """Sizes differ along the axis only (now and then elsewhere too, or the tensors are 0-d)."""
    if elsewhere(data, target, op):
        return
    base = data.draw(shapes(max_dims=3), label="shape")
    axis = data.draw(axes(len(base), tuples=False), label="axis")
    count = data.draw(st.integers(1, 3), label="count")
    along_axis = None if axis is None or not -len(base) <= axis < len(base) else axis % len(base)
    wrong = data.draw(st.integers(0, 5), label="wrong") == 0 and len(base) > 0
    shapes_of = [tuple(data.draw(st.integers(0, 3), label="size") if i == along_axis or (wrong and j and i == 0) else n
                       for i, n in enumerate(base)) for j in range(count)]
    ts, xs, out = joined(data, target.device, shapes_of)
    with target.active():
        outcome = raises_like(lambda: em.concat(ts, axis=axis), lambda: REFERENCES["concat"](xs, axis=axis))
    if outcome is not None:
        assert_same(*outcome, dtype=out)
    for t, x in zip(ts, xs):
        assert_unchanged(t, x)


@pytest.mark.parametrize(("target", "op"), cases(["stack"]))
@examples(4)
@given(data=st.data())
def test_stack(target, op, data):
    if elsewhere(data, target, op):
        return
    shape = data.draw(shapes(max_dims=3), label="shape")
    axis = data.draw(st.integers(-len(shape) - 2, len(shape) + 1), label="axis")  # one past either end: bad
    count = data.draw(st.integers(1, 3), label="count")
    wrong = data.draw(st.integers(0, 5), label="wrong") == 0 and count > 1
    ts, xs, out = joined(data, target.device, [(*shape, 2) if wrong and i else shape for i in range(count)])
    with target.active():
        outcome = raises_like(lambda: em.stack(ts, axis=axis), lambda: REFERENCES["stack"](xs, axis=axis))
    if outcome is not None:
        assert_same(*outcome, dtype=out)


@pytest.mark.parametrize(("target", "op"), cases(["unstack"]))
@examples(4)
@given(data=st.data())
def test_unstack(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype, shape, t, x = one_tensor(data, target, op)
    axis = data.draw(axes(len(shape), tuples=False, none=False), label="axis")
    reference = (lambda: (x,)) if x.ndim == 0 and axis in (0, -1) else (lambda: REFERENCES["unstack"](x, axis=axis))
    with target.active():
        outcome = raises_like(lambda: em.unstack(t, axis=axis), reference)
    if outcome is not None:
        got, expected = outcome
        assert isinstance(got, tuple) and len(got) == len(expected), f"{len(got)} slices, expected {len(expected)}"
        for i, (part, want) in enumerate(zip(got, expected)):
            assert_same(part, want, dtype=dtype, what=f"slice {i}")


# ---- tril, triu, repeat, roll, tile ---------------------------------------------------------------

def triangle_reference(op: str, x: np.ndarray, k: int) -> np.ndarray:
    if x.ndim < 2:
        raise ValueError(f"{op} needs 2 dims (numpy broadcasts a 1-d x to 2-d)")
    return REFERENCES[op](x, k=k)


@pytest.mark.parametrize(("target", "op"), cases(["tril", "triu"]))
@examples(4)
@given(data=st.data())
def test_triangle(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype, _, t, x = one_tensor(data, target, op, shapes(min_dims=1, max_dims=4))
    k = data.draw(st.integers(-5, 5), label="k")
    with target.active():
        outcome = raises_like(lambda: getattr(em, op)(t, k=k), lambda: triangle_reference(op, x, k))
    if outcome is not None:
        assert_same(*outcome, dtype=dtype)
    assert_unchanged(t, x)


def repeat_reference(x: np.ndarray, repeats: Any, axis: int | None) -> np.ndarray:
    if np.any(np.asarray(repeats) < 0):  # (numpy lets them pass where x is empty; PyTorch does not)
        raise ValueError("repeats must be non-negative")
    if x.ndim == 0 and axis is not None:
        raise ValueError("repeat along the axis of a 0-d x would make it 1-d: ember asks for axis=None")
    return REFERENCES["repeat"](x, repeats, axis=axis)


@pytest.mark.parametrize(("target", "op"), cases(["repeat"]))
@examples(4)
@given(data=st.data())
@example(data=Recorded("repeat", dtype="bool", shape=(0,), x=Drawn([], "bool"), axis=None, negative=0,
                       repeats_form="int", repeats=-1))
def test_repeat(target, op, data):
    """repeats: an int, or counts as a tensor of shape (n,), (1,) or () (now and then negative)."""
    if elsewhere(data, target, op):
        return
    dtype, shape, t, x = one_tensor(data, target, op, shapes(max_dims=3))
    axis = data.draw(axes(len(shape), tuples=False), label="axis")
    counts = st.integers(-1, 3) if data.draw(st.integers(0, 5), label="negative") == 0 else st.integers(0, 3)
    n = x.size if axis is None else shape[axis] if -len(shape) <= axis < len(shape) else 1
    form = data.draw(st.sampled_from(["int", "per element", "(1,)", "()"]), label="repeats_form")
    if form == "int":
        repeats = reps = data.draw(counts, label="repeats")
    else:
        count_shape = {"per element": (n,), "(1,)": (1,), "()": ()}[form]
        reps = np.array(data.draw(st.lists(counts, min_size=math.prod(count_shape), max_size=math.prod(count_shape)),
                                  label="repeats"), dtype=np.int64).reshape(count_shape)
        repeats = em.asarray(reps, device=target.device)
    with target.active():
        outcome = raises_like(lambda: em.repeat(t, repeats, axis=axis), lambda: repeat_reference(x, reps, axis))
    if outcome is not None:
        assert_same(*outcome, dtype=dtype)
    assert_unchanged(t, x)


def roll_reference(x: np.ndarray, shift: Any, axis: Any) -> np.ndarray:
    """numpy's roll; ember's 0-d tensor has one axis, 0 (-1), along which it rolls its one element."""
    given_axes = axis if isinstance(axis, tuple) else (axis,)
    if x.ndim == 0 and axis is not None and all(a in (0, -1) for a in given_axes):
        if isinstance(shift, tuple) and len(shift) != len(given_axes):
            raise ValueError("shift and axis differ in length")
        return x.copy()
    return REFERENCES["roll"](x, shift, axis=axis)


@pytest.mark.parametrize(("target", "op"), cases(["roll"]))
@examples(4)
@given(data=st.data())
def test_roll(target, op, data):
    """shift an int or a tuple; axis None, an int, or a tuple (repeated axes add their shifts)."""
    if elsewhere(data, target, op):
        return
    dtype, shape, t, x = one_tensor(data, target, op)
    span = max(len(shape), 1)
    axis = data.draw(st.none() | st.integers(-span, span - 1)
                     | st.lists(st.integers(-span, span - 1), min_size=1, max_size=3).map(tuple), label="axis")
    shifts = st.integers(-7, 7)
    tuple_shift = isinstance(axis, tuple) and data.draw(st.booleans(), label="tuple_shift")
    shift = tuple(data.draw(shifts, label="shift") for _ in axis) if tuple_shift else data.draw(shifts, label="shift")
    with target.active():
        outcome = raises_like(lambda: em.roll(t, shift, axis=axis), lambda: roll_reference(x, shift, axis))
    if outcome is not None:
        assert_same(*outcome, dtype=dtype)
    assert_unchanged(t, x)


@pytest.mark.parametrize(("target", "op"), cases(["tile"]))
@examples(4)
@given(data=st.data())
def test_tile(target, op, data):
    if elsewhere(data, target, op):
        return
    dtype, _, t, x = one_tensor(data, target, op, shapes(max_dims=3, max_side=3))
    repetitions = tuple(data.draw(st.lists(st.integers(0, 3), max_size=4), label="repetitions"))
    with target.active():
        got = em.tile(t, repetitions)
    assert_same(got, REFERENCES["tile"](x, repetitions), dtype=dtype)
    assert_unchanged(t, x)


# ---- take, index_put ----------------------------------------------------------------------------

def take_reference(x: np.ndarray, indices: np.ndarray, axis: int | None) -> np.ndarray:
    """numpy's take; the Array API's axis rule (None only for 1-d x); ember's 0-d x has axis 0 (-1)
    and takes exactly one index into a 0-d result."""
    if x.ndim == 0 and axis is not None:
        if len(indices) != 1 and np.all((indices == 0) | (indices == -1)):  # (else: out of range, IndexError)
            raise ValueError("a 0-d x takes one index along its axis 0 (-1)")
        return along(lambda v, axis: REFERENCES["take"](v, indices, axis=axis), x, axis)
    if x.ndim == 0:
        raise ValueError("take: axis is required for a 0-d x")
    if axis is None and x.ndim > 1:
        raise ValueError("take: axis is required beyond 1-d (the Array API); numpy flattens")
    valid_axis = axis is None or -x.ndim <= axis < x.ndim  # (numpy raises for the others)
    n = x.size if axis is None else x.shape[axis] if valid_axis else 0
    if valid_axis and np.any((indices < -n) | (indices >= n)):
        raise IndexError("index out of range (numpy lets it pass where the result is empty; PyTorch does not)")
    return REFERENCES["take"](x, indices, axis=axis)


@pytest.mark.parametrize(("target", "op"), cases(["take"]))
@examples(4)
@given(data=st.data())
@example(data=Recorded("take", dtype="bool", shape=(), x=Drawn(False, "bool"), axis=0, out_of_range=0,
                       index_dtype="int8", indices=[0, 1]))
@example(data=Recorded("take", dtype="bool", shape=(0, 0), x=Drawn(np.zeros((0, 0)), "bool"), axis=1, out_of_range=0,
                       index_dtype="int8", indices=[0]))
def test_take(target, op, data):
    """Indices of any integer dtype, negative ones counting from the end, now and then out of range."""
    if elsewhere(data, target, op):
        return
    dtype, shape, t, x = one_tensor(data, target, op, shapes(max_dims=3))
    axis = data.draw(axes(len(shape), tuples=False), label="axis")
    n = shape[axis] if shape and axis is not None and -len(shape) <= axis < len(shape) else max(x.size, 1)
    reach = n + 1 if data.draw(st.integers(0, 5), label="out_of_range") == 0 else n
    index_dtype = data.draw(st.sampled_from(INDEX_DTYPES), label="index_dtype")
    info = np.iinfo(index_dtype)
    bounds = st.integers(max(-reach, int(info.min)), min(reach - 1, int(info.max)))
    indices = np.array(data.draw(st.lists(bounds, max_size=5) if reach else st.just([]), label="indices"),
                       dtype=index_dtype)
    ti = em.asarray(indices, device=target.device)
    with target.active():
        outcome = raises_like(lambda: em.take(t, ti, axis=axis), lambda: take_reference(x, indices, axis))
    if outcome is not None:
        assert_same(*outcome, dtype=dtype)
    assert_unchanged(t, x)


@pytest.mark.parametrize(("target", "op"), cases(["index_put"]))
@examples(4)
@given(data=st.data())
def test_index_put(target, op, data):
    """Into x in place (x is returned).  accumulate=True adds, repeated indices summing; without
    it, where an index repeats, one of the values written there lands (which one, the doc leaves open).
    x is never a broadcast view here: writing through aliased elements is reported separately."""
    if elsewhere(data, target, op):
        return
    dtype, shape, t, x = one_tensor(data, target, op, shapes(min_dims=1, max_dims=3), allow_broadcast=False)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    n = shape[axis]
    indices = np.array(data.draw(st.lists(st.integers(-n, n - 1), max_size=5) if n else st.just([]),
                                 label="indices"), dtype=np.int64)
    region = tuple(len(indices) if i == axis % len(shape) else s for i, s in enumerate(shape))
    ones = data.draw(st.lists(st.booleans(), min_size=len(region), max_size=len(region)), label="values_of_size_1")
    values_shape = () if data.draw(st.booleans(), label="values_0d") else tuple(
        1 if one else n for n, one in zip(region, ones))
    tv, v = data.draw(tensors(values_shape, dtype, target.device), label="values")
    accumulate = data.draw(st.booleans(), label="accumulate")
    with target.active():
        got = em.index_put(t, em.asarray(indices, device=target.device), tv, axis=axis, accumulate=accumulate)
    assert got is t, "index_put returns x itself"
    expected = REFERENCES["index_put"](x, indices, v, axis=axis, accumulate=accumulate)  # (numpy's last write wins)
    if accumulate:
        magnitude = REFERENCES["index_put"](np.abs(x), indices, np.abs(v), axis=axis, accumulate=True)
        assert_matches(got, expected, dtype=dtype, magnitude=magnitude)
    else:
        landed, wanted = np.moveaxis(host(got), axis, 0), np.moveaxis(expected, axis, 0)  # (views of both)
        written = np.moveaxis(np.broadcast_to(v, region), axis, 0)
        for i in set((indices % n).tolist()) if n else ():
            if any(np.array_equal(landed[i], w, equal_nan=KIND[dtype] in "fc") for w in written[indices % n == i]):
                wanted[i] = landed[i]  # one of the values written at index i landed there
        assert_same(got, expected, dtype=dtype)
    assert_unchanged(tv, v, "values")
