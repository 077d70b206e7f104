"""ember_cpu_sort, ember_cpu_argsort and ember_cpu_searchsorted against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from native_util import check, desc, lib

BF16 = "bfloat16"  # a uint16 array of bfloat16 bits
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8]
FLOATS = [np.float16, BF16, np.float32, np.float64]
REAL = [np.bool_, *INTS, *FLOATS]

rng = np.random.default_rng(99)


def from_bf16(b):
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_bf16(a):
    """float32 values exactly representable in bfloat16 -> their bits."""
    return (np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def code(dt):
    return lib.EMBER_BFLOAT16 if dt is BF16 else None


def decoded(x, dt):
    return from_bf16(x) if dt is BF16 else x


def make(dt, shape, specials=True):
    """Random values with many ties; floats also get NaN, +-inf and +-0."""
    if dt is np.bool_:
        return rng.random(shape) < 0.5
    if dt in INTS:
        info = np.iinfo(dt)
        pool = np.array([info.min, info.max, 0, 1, -1 if info.min < 0 else 2, 7], dt)
        x = rng.integers(-20 if info.min < 0 else 0, 20, size=shape).astype(dt)
        mask = rng.random(shape) < 0.2
        x[mask] = rng.choice(pool, size=int(mask.sum()))
        return x
    v = np.round(rng.standard_normal(shape) * 4) / 2  # exact in every float format, ties
    if specials:
        pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -np.nan])
        mask = rng.random(shape) < 0.15
        v[mask] = rng.choice(pool, size=int(mask.sum()))
    return to_bf16(v.astype(np.float32)) if dt is BF16 else v.astype(dt)


def layouts(a):
    yield "contiguous", a
    if a.ndim >= 2:
        yield "transposed", np.ascontiguousarray(a.T).T
    yield "flipped", np.ascontiguousarray(a[..., ::-1])[..., ::-1]
    big = np.zeros((*a.shape[:-1], 2 * a.shape[-1]), a.dtype)
    big[..., ::2] = a
    yield "strided", big[..., ::2]


def run_sort(x, dt, descending=False, out=None):
    out = np.empty(x.shape, x.dtype) if out is None else out
    check(lib.ember_cpu_sort(desc(out, code(dt)), desc(x, code(dt)), descending))
    return out


def run_argsort(x, dt, descending=False):
    out = np.empty(x.shape, np.int64)
    check(lib.ember_cpu_argsort(desc(out), desc(x, code(dt)), descending))
    return out


def stable_descending(v):
    """Reference: NaN first, then values descending, equal values in input order."""
    out = np.empty(v.shape, np.int64)
    for row in np.ndindex(v.shape[:-1]):
        r = v[row].tolist()  # exact Python ints / floats
        out[row] = sorted(range(len(r)), key=lambda i, r=r: (0, 0) if r[i] != r[i] else (1, -r[i]))
    return out


@pytest.mark.parametrize("dt", REAL, ids=str)
def test_sort_and_argsort_ascending(dt):
    base = make(dt, (6, 37))
    for name, x in layouts(base):
        v = decoded(x, dt)
        want_idx = np.argsort(v, axis=-1, kind="stable")
        np.testing.assert_array_equal(run_argsort(x, dt), want_idx, err_msg=name)
        got = run_sort(x, dt)
        # raw bits: sort keeps NaN payloads and the sign of zero of the elements it moves
        np.testing.assert_array_equal(got, np.take_along_axis(x, want_idx, -1), err_msg=name)


@pytest.mark.parametrize("dt", REAL, ids=str)
def test_sort_and_argsort_descending(dt):
    base = make(dt, (5, 41))
    for name, x in layouts(base):
        v = decoded(x, dt)
        idx = run_argsort(x, dt, descending=True)
        np.testing.assert_array_equal(idx, stable_descending(v), err_msg=name)
        got = run_sort(x, dt, descending=True)
        np.testing.assert_array_equal(got, np.take_along_axis(x, idx, -1))  # sort == x[argsort]
        np.testing.assert_array_equal(decoded(got, dt), np.flip(np.sort(v, axis=-1), axis=-1))


@pytest.mark.parametrize("dt", [np.float32, np.int64, np.float16, np.uint8, np.int32])
def test_long_rows_use_radix(dt):
    for shape in [(100_000,), (64, 3000)]:
        x = make(dt, shape)
        np.testing.assert_array_equal(run_argsort(x, dt), np.argsort(x, axis=-1, kind="stable"))
        # numpy 2.4's default float16 sort leaves some NaNs amid the values; its stable one does not
        np.testing.assert_array_equal(run_sort(x, dt), np.sort(x, axis=-1, kind="stable"))
    x = make(dt, (200_000,), specials=False)
    idx = run_argsort(x, dt, descending=True)
    v = x[idx]
    assert np.all(v[:-1] >= v[1:])
    ties = v[:-1] == v[1:]
    assert np.all(idx[:-1][ties] < idx[1:][ties])  # stable


def test_full_range_keys():
    x = np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min, -1, 0, 1, 2**40, -(2**40)] * 20, np.int64)
    np.testing.assert_array_equal(run_sort(x, np.int64), np.sort(x))
    f = np.array([5e-324, -5e-324, 1e308, -1e308, np.inf, -np.inf, np.nan, 0.0, -0.0] * 10)
    np.testing.assert_array_equal(run_argsort(f, np.float64), np.argsort(f, kind="stable"))
    h = np.arange(0, 65536, 7, dtype=np.uint16)  # every class of float16 bit pattern
    np.testing.assert_array_equal(
        run_argsort(h.view(np.float16), np.float16), np.argsort(h.view(np.float16), kind="stable")
    )
    np.testing.assert_array_equal(run_argsort(h, BF16), np.argsort(from_bf16(h), kind="stable"))


def test_sort_zero_d_empty_and_in_place():
    s = np.array(3.5, np.float32)
    assert run_sort(s, np.float32) == 3.5
    assert run_argsort(s, np.float32) == 0
    e = np.zeros((3, 0), np.float32)
    assert run_sort(e, np.float32).shape == (3, 0)
    e2 = np.zeros((0, 5), np.int32)
    assert run_argsort(e2, np.int32).shape == (0, 5)
    x = rng.standard_normal((4, 500))
    want = np.sort(x, axis=-1)
    run_sort(x, np.float64, out=x)
    np.testing.assert_array_equal(x, want)
    b = rng.standard_normal((4, 10)).astype(np.float32)
    np.testing.assert_array_equal(
        run_sort(np.broadcast_to(b[:, :1], (4, 10)), np.float32), np.broadcast_to(b[:, :1], (4, 10))
    )


def test_sort_errors():
    x = np.zeros((3, 4), np.float32)
    c = np.zeros(4, np.complex64)
    assert lib.ember_cpu_sort(desc(c), desc(c), 0) == lib.EMBER_ERR_UNSUPPORTED
    assert lib.ember_cpu_argsort(desc(np.zeros(4, np.int64)), desc(c), 0) == lib.EMBER_ERR_UNSUPPORTED
    assert lib.ember_cpu_sort(desc(np.zeros((3, 4), np.float64)), desc(x), 0) == lib.EMBER_ERR_INVALID_ARGUMENT
    assert lib.ember_cpu_argsort(desc(np.zeros((3, 4), np.int32)), desc(x), 0) == lib.EMBER_ERR_INVALID_ARGUMENT
    assert lib.ember_cpu_argsort(desc(np.zeros((4, 3), np.int64)), desc(x), 0) == lib.EMBER_ERR_INVALID_ARGUMENT
    bad = desc(x)
    bad.dtype = -1
    assert lib.ember_cpu_sort(desc(x), bad, 0) == lib.EMBER_ERR_INVALID_ARGUMENT


# ---- searchsorted -------------------------------------------------------------------------------


def run_search(x1, v, dt, right):
    out = np.empty(v.shape, np.int64)
    check(lib.ember_cpu_searchsorted(desc(out), desc(x1, code(dt)), desc(v, code(dt)), right))
    return out


@pytest.mark.parametrize("dt", REAL, ids=str)
def test_searchsorted(dt):
    x1 = np.sort(make(dt, 60)) if dt is not BF16 else make(dt, 60)
    if dt is BF16:
        x1 = x1[np.argsort(from_bf16(x1), kind="stable")]
    v = make(dt, (4, 25))
    for right in (0, 1):
        side = "right" if right else "left"
        want = np.searchsorted(decoded(x1, dt), decoded(v, dt), side=side)
        for name, vv in layouts(v):
            np.testing.assert_array_equal(run_search(x1, vv, dt, right), want, err_msg=f"{name} {side}")
        flipped = np.ascontiguousarray(x1[::-1])[::-1]  # negative stride
        np.testing.assert_array_equal(run_search(flipped, v, dt, right), want)
        strided = np.repeat(x1, 2)[::2]
        np.testing.assert_array_equal(run_search(strided, v, dt, right), want)


def test_searchsorted_large_zero_d_and_empty():
    x1 = np.sort(rng.standard_normal(1000)).astype(np.float32)
    v = rng.standard_normal(200_000).astype(np.float32)  # parallel path
    np.testing.assert_array_equal(run_search(x1, v, np.float32, 0), np.searchsorted(x1, v))
    v2 = v.reshape(400, 500)[:, ::3]
    np.testing.assert_array_equal(run_search(x1, v2, np.float32, 1), np.searchsorted(x1, v2, side="right"))
    s = np.array(0.0, np.float32)
    assert run_search(x1, s, np.float32, 0) == np.searchsorted(x1, 0.0)
    assert run_search(np.zeros(0, np.float32), v[:5], np.float32, 0).tolist() == [0] * 5
    assert run_search(x1, np.zeros((0, 3), np.float32), np.float32, 0).shape == (0, 3)


def test_searchsorted_errors():
    x1 = np.zeros(5, np.float32)
    v = np.zeros(3, np.float32)
    out = np.zeros(3, np.int64)
    assert (
        lib.ember_cpu_searchsorted(desc(out), desc(x1.astype(np.float64)), desc(v), 0) == lib.EMBER_ERR_INVALID_ARGUMENT
    )
    assert (
        lib.ember_cpu_searchsorted(desc(out), desc(np.zeros((5, 1), np.float32)), desc(v), 0)
        == lib.EMBER_ERR_INVALID_ARGUMENT
    )
    assert (
        lib.ember_cpu_searchsorted(desc(np.zeros(4, np.int64)), desc(x1), desc(v), 0) == lib.EMBER_ERR_INVALID_ARGUMENT
    )
    c = np.zeros(3, np.complex64)
    assert lib.ember_cpu_searchsorted(desc(out), desc(c), desc(c), 0) == lib.EMBER_ERR_UNSUPPORTED
